//! Time limits (`-t`, partition `max_time`): `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`,
//! and `INFINITE`/`UNLIMITED`/`-1`. Values are whole minutes; seconds round up.

use super::ValueError;

/// A time limit in minutes, or no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TimeLimit {
    /// At most this many minutes.
    Minutes(u32),
    /// No limit.
    Unlimited,
}

impl TimeLimit {
    /// The limit in seconds, `None` when unlimited.
    pub fn seconds(self) -> Option<u64> {
        match self {
            TimeLimit::Minutes(m) => Some(u64::from(m) * 60),
            TimeLimit::Unlimited => None,
        }
    }
}

const EXPECTED: &str = "minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED";

/// Parses a time limit. `0` means no limit, as for `sbatch --time`.
pub fn parse_time_limit(text: &str) -> Result<TimeLimit, ValueError> {
    let value = text.trim();
    let err = || ValueError::new("time limit", text, EXPECTED);
    if value.eq_ignore_ascii_case("infinite") || value.eq_ignore_ascii_case("unlimited") || value == "-1" {
        return Ok(TimeLimit::Unlimited);
    }
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b':') {
        return Err(err());
    }
    let (days, clock) = match value.split_once('-') {
        Some((d, rest)) => {
            if d.is_empty() || rest.contains('-') || d.contains(':') {
                return Err(err());
            }
            (Some(d.parse::<u64>().map_err(|_| err())?), rest)
        }
        None => (None, value),
    };
    let fields: Vec<u64> = clock
        .split(':')
        .map(|f| if f.is_empty() { Err(err()) } else { f.parse::<u64>().map_err(|_| err()) })
        .collect::<Result<_, _>>()?;
    let seconds = match (days, fields.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, s]) => m * 60 + s,
        (None, [h, m, s]) => h * 3600 + m * 60 + s,
        (Some(d), [h]) => d * 86400 + h * 3600,
        (Some(d), [h, m]) => d * 86400 + h * 3600 + m * 60,
        (Some(d), [h, m, s]) => d * 86400 + h * 3600 + m * 60 + s,
        _ => return Err(err()),
    };
    if seconds == 0 {
        return Ok(TimeLimit::Unlimited);
    }
    let minutes = seconds.div_ceil(60);
    u32::try_from(minutes).ok().filter(|m| *m < u32::MAX - 1).map(TimeLimit::Minutes).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        let c = |s: &str| match parse_time_limit(s) {
            Ok(TimeLimit::Minutes(m)) => m.to_string(),
            Ok(TimeLimit::Unlimited) => "unlimited".into(),
            Err(e) => e.to_string(),
        };
        assert_eq!(c("10"), "10");
        assert_eq!(c("0:30"), "1");
        assert_eq!(c("1:00:00"), "60");
        assert_eq!(c("1-0"), "1440");
        assert_eq!(c("2-03:04"), "3064");
        assert_eq!(c("1-00:00:01"), "1441");
        assert_eq!(c("UNLIMITED"), "unlimited");
        assert_eq!(c("0"), "unlimited");
        assert_eq!(
            c("1:2:3:4"),
            "invalid time limit `1:2:3:4`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
        );
        assert_eq!(
            c("1:2-3"),
            "invalid time limit `1:2-3`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
        );
        assert_eq!(
            c("abc"),
            "invalid time limit `abc`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
        );
    }
}
