//! `--signal=[{R|B}:]<sig>[@<seconds>]`: the signal Slurm sends a job `seconds` (default 60)
//! before its time limit, to every process of the job or, with `B:`, to the batch shell only.
//! `R:` (reservation end) has no meaning without reservations and is accepted and ignored.

use nix::sys::signal::Signal;
use std::str::FromStr;

/// Slurm's lead time when `@seconds` is not given.
const DEFAULT_LEAD_SECONDS: u64 = 60;

/// A parsed `--signal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TimeLimitWarning {
    pub(super) signal: Signal,
    /// Seconds before the time limit.
    pub(super) lead_seconds: u64,
    pub(super) batch_only: bool,
}

/// Parses a `--signal` value (sbatch validated it already; anything unreadable is `None`).
pub(super) fn parse(value: &str) -> Option<TimeLimitWarning> {
    let (flags, rest) = match value.split_once(':') {
        Some((flags, rest)) => (flags, rest),
        None => ("", value),
    };
    let batch_only = flags.chars().any(|flag| flag.eq_ignore_ascii_case(&'b'));
    let (name, lead) = match rest.split_once('@') {
        Some((name, lead)) => (name, lead.parse().ok()?),
        None => (rest, DEFAULT_LEAD_SECONDS),
    };
    let signal = match name.parse::<i32>() {
        Ok(number) => Signal::try_from(number).ok()?,
        Err(_) => {
            let upper = name.to_ascii_uppercase();
            let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
            Signal::from_str(&full).ok()?
        }
    };
    Some(TimeLimitWarning { signal, lead_seconds: lead, batch_only })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_slurms_forms() {
        let warning = |signal, lead_seconds, batch_only| Some(TimeLimitWarning { signal, lead_seconds, batch_only });
        assert_eq!(parse("USR1@10"), warning(Signal::SIGUSR1, 10, false));
        assert_eq!(parse("B:SIGUSR2@300"), warning(Signal::SIGUSR2, 300, true));
        assert_eq!(parse("10"), warning(Signal::SIGUSR1, 60, false));
        assert_eq!(parse("R:term"), warning(Signal::SIGTERM, 60, false));
        assert_eq!(parse("RB:15@5"), warning(Signal::SIGTERM, 5, true));
        assert_eq!(parse("NOPE@5"), None);
        assert_eq!(parse("USR1@x"), None);
    }
}
