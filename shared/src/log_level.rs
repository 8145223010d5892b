//! Slurm's log levels as `srun --slurmd-debug=<level>` names them, and what a step's runner on a
//! node makes of the level: its messages at that level and below reach the step's stderr as
//! srun shows it (`slurmstepd: debug:  …`), as Slurm's slurmstepd sends its own.
//!
//! Slurm reads the value as a level's name (`quiet` … `debug5`, any case) or a number, and any
//! other word as the largest value there is; srun then caps the increment so that the step's
//! level is at most `debug2` (the level above floods srun with the step's own I/O messages) and
//! says so. The step's level is `error` plus the increment: `--slurmd-debug=info` (3) gives
//! `debug` (5). The runner never logs above the level it was given.

/// The levels, by number: `LEVEL_NAMES[n]` is level `n`'s name.
pub const LEVEL_NAMES: [&str; 10] =
    ["quiet", "fatal", "error", "info", "verbose", "debug", "debug2", "debug3", "debug4", "debug5"];

/// Level `error`: the step's level with no increment.
pub const ERROR: u8 = 2;
/// Level `info`.
pub const INFO: u8 = 3;
/// Level `verbose`.
pub const VERBOSE: u8 = 4;
/// Level `debug`.
pub const DEBUG: u8 = 5;
/// Level `debug2`: the highest level a step logs at through srun.
pub const DEBUG2: u8 = 6;

/// The largest increment srun passes on (`debug2` − `error`).
pub const MAX_INCREMENT: u8 = DEBUG2 - ERROR;

/// `--slurmd-debug`'s value as Slurm reads it: a level's name (any case), or the number its
/// leading digits make; `None` for anything else (which Slurm takes as its largest value).
pub fn parse_level(text: &str) -> Option<u64> {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    if !digits.is_empty() {
        return Some(digits.parse::<u64>().unwrap_or(u64::MAX));
    }
    LEVEL_NAMES.iter().position(|name| name.eq_ignore_ascii_case(text)).map(|n| n as u64)
}

/// The increment srun sends for `--slurmd-debug=text`, capped at [`MAX_INCREMENT`], and srun's
/// line when it was capped.
pub fn slurmd_debug_increment(text: &str) -> (u8, Option<String>) {
    match parse_level(text) {
        Some(level) if level <= u64::from(MAX_INCREMENT) => (level as u8, None),
        _ => (MAX_INCREMENT, Some(format!("Using srun's max debug increment of {MAX_INCREMENT}"))),
    }
}

/// The level a step logs at through srun for `increment` (a larger one is capped).
pub fn step_level(increment: u8) -> u8 {
    ERROR + increment.min(MAX_INCREMENT)
}

/// Level `level`'s name (`unknown` past `debug5`).
pub fn level_name(level: u8) -> &'static str {
    LEVEL_NAMES.get(usize::from(level)).copied().unwrap_or("unknown")
}

/// What a message at `level` starts with after the program's name, as Slurm prints it (`info`
/// and `verbose` have none).
pub fn level_prefix(level: u8) -> &'static str {
    match level {
        0 | 1 => "fatal: ",
        ERROR => "error: ",
        INFO | VERBOSE => "",
        DEBUG => "debug:  ",
        DEBUG2 => "debug2: ",
        7 => "debug3: ",
        8 => "debug4: ",
        _ => "debug5: ",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_read_as_slurm_reads_them() {
        assert_eq!(parse_level("quiet"), Some(0));
        assert_eq!(parse_level("ERROR"), Some(2));
        assert_eq!(parse_level("Verbose"), Some(4));
        assert_eq!(parse_level("debug5"), Some(9));
        assert_eq!(parse_level("3"), Some(3));
        assert_eq!(parse_level("2x"), Some(2));
        assert_eq!(parse_level("99999999999999999999999"), Some(u64::MAX));
        assert_eq!(parse_level("loud"), None);
        assert_eq!(parse_level("-1"), None);
        assert_eq!(parse_level(""), None);
    }

    #[test]
    fn the_increment_is_capped_at_debug2_with_srun_s_line() {
        assert_eq!(slurmd_debug_increment("error"), (2, None));
        assert_eq!(slurmd_debug_increment("info"), (3, None));
        assert_eq!(slurmd_debug_increment("4"), (4, None));
        let capped = (4, Some("Using srun's max debug increment of 4".to_owned()));
        assert_eq!(slurmd_debug_increment("debug"), capped);
        assert_eq!(slurmd_debug_increment("1000"), capped);
        // Slurm takes an unknown word as its largest value, which srun caps.
        assert_eq!(slurmd_debug_increment("loud"), capped);
        assert_eq!(step_level(2), VERBOSE);
        assert_eq!(step_level(3), DEBUG);
        assert_eq!(step_level(4), DEBUG2);
        assert_eq!(step_level(200), DEBUG2);
        assert_eq!(step_level(0), ERROR);
    }

    #[test]
    fn names_and_prefixes() {
        assert_eq!(level_name(VERBOSE), "verbose");
        assert_eq!(level_name(DEBUG2), "debug2");
        assert_eq!(level_name(10), "unknown");
        assert_eq!(level_prefix(DEBUG), "debug:  ");
        assert_eq!(level_prefix(DEBUG2), "debug2: ");
        assert_eq!(level_prefix(ERROR), "error: ");
        assert_eq!(level_prefix(VERBOSE), "");
    }
}
