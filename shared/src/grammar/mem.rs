//! Memory sizes (`--mem`, `--mem-per-cpu`, `--mem-per-gpu`): a non-negative integer with an
//! optional `K|M|G|T` suffix (optionally followed by `B`), default unit megabytes; kilobytes round up.

use super::ValueError;

const EXPECTED: &str = "a number with an optional K, M, G or T suffix";

/// Parses a memory size into megabytes.
pub fn parse_mem_mb(text: &str) -> Result<u64, ValueError> {
    let err = || ValueError::new("memory size", text, EXPECTED);
    let mut value = text.trim();
    if let Some(stripped) = value.strip_suffix(['B', 'b']) {
        value = stripped;
    }
    let (digits, factor_kb): (&str, u64) = match value.chars().last() {
        Some('K' | 'k') => (&value[..value.len() - 1], 1),
        Some('M' | 'm') => (&value[..value.len() - 1], 1024),
        Some('G' | 'g') => (&value[..value.len() - 1], 1024 * 1024),
        Some('T' | 't') => (&value[..value.len() - 1], 1024 * 1024 * 1024),
        _ => (value, 1024),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    let n: u64 = digits.parse().map_err(|_| err())?;
    let kb = n.checked_mul(factor_kb).ok_or_else(err)?;
    Ok(kb.div_ceil(1024))
}

/// Formats megabytes the way Slurm prints a memory amount: `G` when a whole number of gigabytes,
/// else `M` (`16G`, `4000M`).
pub fn format_mem_mb(mb: u64) -> String {
    if mb != 0 && mb.is_multiple_of(1024 * 1024) {
        format!("{}T", mb / (1024 * 1024))
    } else if mb != 0 && mb.is_multiple_of(1024) {
        format!("{}G", mb / 1024)
    } else {
        format!("{mb}M")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        assert_eq!(parse_mem_mb("100"), Ok(100));
        assert_eq!(parse_mem_mb("1G"), Ok(1024));
        assert_eq!(parse_mem_mb("1GB"), Ok(1024));
        assert_eq!(parse_mem_mb("954M"), Ok(954));
        assert_eq!(parse_mem_mb("1500K"), Ok(2));
        assert_eq!(parse_mem_mb("2t"), Ok(2 * 1024 * 1024));
        assert!(parse_mem_mb("1.5G").is_err());
        assert!(parse_mem_mb("").is_err());
        assert!(parse_mem_mb("G").is_err());
        assert_eq!(format_mem_mb(16 * 1024), "16G");
        assert_eq!(format_mem_mb(4000), "4000M");
        assert_eq!(format_mem_mb(200), "200M");
    }
}
