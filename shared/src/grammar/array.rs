//! Job array index expressions (`sbatch --array`): `n`, `a-b`, `a-b:step`, comma lists of them,
//! and an optional `%max` (most tasks running at once). Also the inverse: a sorted set of indexes
//! written back as Slurm shows pending tasks (`0-3`, `1,3,5-7`).

use super::ValueError;

/// A parsed `--array` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    /// Every task index, ascending, without duplicates.
    pub indexes: Vec<u32>,
    /// `%N`: most tasks running at once; 0 = no limit.
    pub max_running: u32,
}

const EXPECTED: &str = "indexes such as 0-15, 0,6,16-32, 0-15:4 or 0-15%4";

/// Parses an `--array` value. `max_index` bounds every index (Slurm's `MaxArraySize - 1`).
pub fn parse_array(text: &str, max_index: u32) -> Result<ArraySpec, ValueError> {
    let err = || ValueError::new("job array specification", text, EXPECTED);
    let number = |s: &str| -> Result<u32, ValueError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        s.parse::<u32>().ok().filter(|n| *n <= max_index).ok_or_else(err)
    };
    let (specs, max_running) = match text.split_once('%') {
        Some((specs, max)) => (specs, number(max)?),
        None => (text, 0),
    };
    let mut indexes = Vec::new();
    for spec in specs.split(',') {
        let (range, step) = match spec.split_once(':') {
            Some((range, step)) => (range, number(step)?),
            None => (spec, 1),
        };
        if step == 0 {
            return Err(err());
        }
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (number(lo)?, number(hi)?),
            None => {
                let n = number(range)?;
                (n, n)
            }
        };
        if hi < lo {
            return Err(err());
        }
        indexes.extend((lo..=hi).step_by(step as usize));
    }
    indexes.sort_unstable();
    indexes.dedup();
    Ok(ArraySpec { indexes, max_running })
}

/// Writes sorted indexes as Slurm does: comma-separated ranges (`[0, 1, 2, 5]` → `0-2,5`), or
/// `first-last:step` for three or more evenly spaced indexes (`[0, 4, 8]` → `0-8:4`).
pub fn format_ranges(indexes: &[u32]) -> String {
    // Slurm prints a set that is one evenly spaced run as `first-last:step` (`0-8:4`).
    if let (Some(first), Some(last)) = (indexes.first(), indexes.last())
        && indexes.len() >= 3
        && uniform_step(indexes) > 1
    {
        return format!("{first}-{last}:{}", uniform_step(indexes));
    }
    let mut out = String::new();
    let mut i = 0;
    while i < indexes.len() {
        let start = indexes[i];
        let mut end = start;
        while i + 1 < indexes.len() && indexes[i + 1] == end + 1 {
            i += 1;
            end = indexes[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// The step of `SLURM_ARRAY_TASK_STEP`: the common distance of evenly spaced indexes, else 1.
pub fn uniform_step(indexes: &[u32]) -> u32 {
    let Some(step) = indexes.windows(2).map(|w| w[1] - w[0]).next() else { return 1 };
    if indexes.windows(2).all(|w| w[1] - w[0] == step) { step } else { 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    fn check(text: &str, expected: Expect) {
        let shown = match parse_array(text, 1000) {
            Ok(spec) => format!(
                "{} max={} step={}",
                format_ranges(&spec.indexes),
                spec.max_running,
                uniform_step(&spec.indexes)
            ),
            Err(e) => e.to_string(),
        };
        expected.assert_eq(&shown);
    }

    #[test]
    fn grammar() {
        check("0-3", expect!["0-3 max=0 step=1"]);
        check("0-15%4", expect!["0-15 max=4 step=1"]);
        check("0-15:4", expect!["0-12:4 max=0 step=4"]);
        check("0-8:4%2", expect!["0-8:4 max=2 step=4"]);
        check("0,4", expect!["0,4 max=0 step=4"]);
        check("0,4,8,9", expect!["0,4,8-9 max=0 step=1"]);
        check("1,3,5-7,3", expect!["1,3,5-7 max=0 step=1"]);
        check("7", expect!["7 max=0 step=1"]);
        check(
            "3-1",
            expect![
                "invalid job array specification `3-1`: expected indexes such as 0-15, 0,6,16-32, 0-15:4 or 0-15%4"
            ],
        );
        check(
            "0-1001",
            expect![
                "invalid job array specification `0-1001`: expected indexes such as 0-15, 0,6,16-32, 0-15:4 or 0-15%4"
            ],
        );
        check(
            "0-3:0",
            expect![
                "invalid job array specification `0-3:0`: expected indexes such as 0-15, 0,6,16-32, 0-15:4 or 0-15%4"
            ],
        );
        check(
            "a",
            expect!["invalid job array specification `a`: expected indexes such as 0-15, 0,6,16-32, 0-15:4 or 0-15%4"],
        );
    }
}
