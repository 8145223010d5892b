//! Rendering helpers shared by the query commands: Slurm's duration forms (`M:SS`, `H:MM:SS`,
//! `D-HH:MM:SS`), `%FT%T` timestamps and the `ctime` date line in local time, the date grammar
//! of `sacct -S/-E`, and column padding with Slurm's two truncation rules.
//!
//! Time zones are a value ([`Tz`]) rather than process state, so renderers stay pure functions
//! and tests pin them to UTC without touching `TZ`.

use drover_shared::UnixTime;
use drover_shared::grammar::date;

/// How unix seconds map to wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tz {
    /// The process's local time zone (`TZ`, `/etc/localtime`), through the C library.
    Local,
    /// A fixed offset east of UTC, in seconds: tests pin their clock with it.
    #[cfg(test)]
    Fixed(i64),
}

/// A broken-down wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Civil {
    pub(crate) year: i64,
    /// 1–12.
    pub(crate) month: u32,
    /// 1–31.
    pub(crate) day: u32,
    pub(crate) hour: u32,
    pub(crate) minute: u32,
    pub(crate) second: u32,
    /// 0 = Sunday.
    pub(crate) weekday: u32,
}

impl Tz {
    /// Seconds east of UTC in effect at `time`.
    pub(crate) fn offset_at(self, time: UnixTime) -> i64 {
        match self {
            #[cfg(test)]
            Tz::Fixed(offset) => offset,
            Tz::Local => local_offset(time),
        }
    }

    /// The wall-clock reading of `time`.
    pub(crate) fn civil(self, time: UnixTime) -> Civil {
        civil_from_utc(time + self.offset_at(time))
    }

    /// The unix time of a wall-clock reading (`weekday` is ignored). Around a DST change the
    /// C library's choice (`mktime` with `tm_isdst = -1`) is taken.
    pub(crate) fn unix(self, civil: Civil) -> UnixTime {
        let naive = utc_from_civil(civil);
        match self {
            #[cfg(test)]
            Tz::Fixed(offset) => naive - offset,
            Tz::Local => local_mktime(civil).unwrap_or_else(|| naive - local_offset(naive)),
        }
    }

    /// Midnight of the day `time` falls on.
    pub(crate) fn midnight(self, time: UnixTime) -> UnixTime {
        let civil = self.civil(time);
        self.unix(Civil { hour: 0, minute: 0, second: 0, ..civil })
    }
}

/// The local offset at `time`, 0 when the C library cannot read it.
fn local_offset(time: UnixTime) -> i64 {
    crate::localtime::localtime(time).map_or(0, |reading| reading.offset)
}

/// `mktime` for a local wall-clock reading; `None` when the C library cannot represent it.
fn local_mktime(civil: Civil) -> Option<UnixTime> {
    let civil = date::CivilTime {
        year: i32::try_from(civil.year).ok()?,
        month: civil.month,
        day: civil.day,
        hour: civil.hour,
        minute: civil.minute,
        second: civil.second,
    };
    crate::localtime::mktime(civil).map(|(time, _)| time)
}

fn utc_from_civil(civil: Civil) -> i64 {
    let year = i32::try_from(civil.year).unwrap_or(if civil.year < 0 { i32::MIN } else { i32::MAX });
    date::days_from_civil(year, civil.month, civil.day) * 86_400
        + i64::from(civil.hour) * 3600
        + i64::from(civil.minute) * 60
        + i64::from(civil.second)
}

/// Narrows a value known to be in `0..bound` (a calendar component) to `u32`.
fn small(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

fn civil_from_utc(time: i64) -> Civil {
    let days = time.div_euclid(86_400);
    let secs = time.rem_euclid(86_400);
    let (year, month, day) = date::civil_from_days(days);
    Civil {
        year: i64::from(year),
        month,
        day,
        hour: small(secs / 3600),
        minute: small(secs % 3600 / 60),
        second: small(secs % 60),
        weekday: small((days + 4).rem_euclid(7)),
    }
}

/// `%FT%T` (`2026-11-29T23:35:31`), Slurm's default `SLURM_TIME_FORMAT`.
pub(crate) fn timestamp(time: UnixTime, tz: Tz) -> String {
    let c = tz.civil(time);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", c.year, c.month, c.day, c.hour, c.minute, c.second)
}

/// A timestamp, or `unset` (`Unknown`, `N/A`) when there is none.
pub(crate) fn timestamp_or(time: Option<UnixTime>, tz: Tz, unset: &str) -> String {
    time.map_or_else(|| unset.to_owned(), |t| timestamp(t, tz))
}

/// The `ctime` form `squeue -l` and `sinfo -l` print above the header (`Sun Nov 29 23:35:39 2026`).
pub(crate) fn date_line(time: UnixTime, tz: Tz) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let c = tz.civil(time);
    let day_name = DAYS[c.weekday as usize % 7];
    let month_name = MONTHS[(c.month as usize + 11) % 12];
    format!("{day_name} {month_name} {:02} {:02}:{:02}:{:02} {}", c.day, c.hour, c.minute, c.second, c.year)
}

/// squeue/sinfo durations: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`; `INVALID` when negative.
pub(crate) fn clock(secs: i64) -> String {
    let mut out = String::new();
    drover_shared::queue_lines::clock_into(&mut out, secs);
    out
}

/// scontrol/sacct durations: `HH:MM:SS`, or `D-HH:MM:SS` from one day on.
pub(crate) fn hms(secs: i64) -> String {
    let secs = secs.max(0);
    let (days, hours, minutes, seconds) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    if days > 0 {
        format!("{days}-{hours:02}:{minutes:02}:{seconds:02}")
    } else {
        format!("{hours:02}:{minutes:02}:{seconds:02}")
    }
}

pub(crate) use drover_shared::queue_lines::push_cell;

/// One `%[.][width]<letter>` field of a squeue/sinfo `-o` format, with the literal text around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PercentItem {
    /// Literal text before the field (only the first field has one).
    pub(crate) prefix: String,
    pub(crate) letter: char,
    /// `None`: the value's natural width.
    pub(crate) width: Option<usize>,
    /// `.` given: right-justified.
    pub(crate) right: bool,
    /// Literal text after the field, up to the next `%`.
    pub(crate) suffix: String,
}

/// Parses a `-o` format: text before the first `%` is a prefix, text after a field's letter up
/// to the next `%` its suffix. A `%` at the very end is dropped.
pub(crate) fn parse_percent(text: &str) -> Vec<PercentItem> {
    let mut items = Vec::new();
    let mut pieces = text.split('%');
    let prefix = pieces.next().unwrap_or_default().to_owned();
    for piece in pieces {
        let right = piece.starts_with('.');
        let rest = if right { &piece[1..] } else { piece };
        let digits_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let width = rest[..digits_end].parse::<usize>().ok().filter(|w| *w > 0);
        let mut chars = rest[digits_end..].chars();
        let Some(letter) = chars.next() else { continue };
        items.push(PercentItem { prefix: String::new(), letter, width, right, suffix: chars.as_str().to_owned() });
    }
    if let Some(first) = items.first_mut() {
        first.prefix = prefix;
    }
    items
}

/// One `Name[:[.]width[suffix]]` field of a squeue/sinfo `-O` format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NamedItem {
    pub(crate) name: String,
    pub(crate) width: Option<usize>,
    pub(crate) right: bool,
    pub(crate) suffix: String,
}

/// `-O` fields without a colon are this wide.
pub(crate) const NAMED_DEFAULT_WIDTH: usize = 20;

/// Parses a `-O` format: comma-separated `Name`, `Name:[.]width[suffix]`; a colon without a
/// width prints the value unpadded.
pub(crate) fn parse_named(text: &str) -> Vec<NamedItem> {
    text.split(',')
        .filter(|token| !token.is_empty())
        .map(|token| {
            let Some((name, spec)) = token.split_once(':') else {
                return NamedItem {
                    name: token.to_owned(),
                    width: Some(NAMED_DEFAULT_WIDTH),
                    right: false,
                    suffix: String::new(),
                };
            };
            let right = spec.starts_with('.');
            let rest = if right { &spec[1..] } else { spec };
            let digits_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let width = rest[..digits_end].parse::<usize>().ok().filter(|w| *w > 0);
            NamedItem { name: name.to_owned(), width, right, suffix: rest[digits_end..].to_owned() }
        })
        .collect()
}

/// Why a `-S/-E` time was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Invalid time specification: {0}")]
pub(crate) struct TimeSpecError(String);

/// Parses the date/time grammar of `sacct -S/-E` (Slurm's with "past" semantics: a bare time of
/// day means today even if it has passed): `now[{+|-}N[unit]]`, `today`, `midnight`, `noon`,
/// `fika`, `teatime`, `tomorrow`, `HH:MM[:SS][AM|PM]`, `YYYY-MM-DD[THH:MM[:SS]]`, `MMDD[YY]`,
/// `MM/DD[/YY]`, `MM.DD[.YY]`, each date optionally followed by `THH:MM[:SS]`.
pub(crate) fn parse_time_spec(text: &str, now: UnixTime, tz: Tz) -> Result<UnixTime, TimeSpecError> {
    let err = || TimeSpecError(text.to_owned());
    let spec = text.trim();
    let lower = spec.to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("now") {
        return if rest.is_empty() { Ok(now) } else { relative(rest, now).ok_or_else(err) };
    }
    let today = tz.civil(now);
    let at = |civil: Civil, hour: u32, minute: u32, second: u32| tz.unix(Civil { hour, minute, second, ..civil });
    match lower.as_str() {
        "today" | "midnight" => return Ok(at(today, 0, 0, 0)),
        "noon" => return Ok(at(today, 12, 0, 0)),
        "fika" => return Ok(at(today, 15, 0, 0)),
        "teatime" => return Ok(at(today, 16, 0, 0)),
        "tomorrow" => return Ok(at(today, 0, 0, 0) + 86_400),
        _ => {}
    }
    let (date_part, time_part) = match spec.split_once('T') {
        Some((date, time)) => (Some(date), Some(time)),
        None if spec.contains(':') => (None, Some(spec)),
        None => (Some(spec), None),
    };
    let date = match date_part {
        None => today,
        Some(date) => parse_date(date, today).ok_or_else(err)?,
    };
    let (hour, minute, second) = match time_part {
        None => (0, 0, 0),
        Some(time) => parse_clock(time).ok_or_else(err)?,
    };
    Ok(at(date, hour, minute, second))
}

fn relative(rest: &str, now: UnixTime) -> Option<UnixTime> {
    let sign = match rest.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let body = &rest[1..];
    let digits_end = body.find(|c: char| !c.is_ascii_digit()).unwrap_or(body.len());
    let count: i64 = body[..digits_end].parse().ok()?;
    let unit = &body[digits_end..];
    let scale = match unit {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        _ => return None,
    };
    now.checked_add(sign * count.checked_mul(scale)?)
}

fn number(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) { None } else { text.parse().ok() }
}

fn parse_date(text: &str, today: Civil) -> Option<Civil> {
    let valid = |year: i64, month: u32, day: u32| {
        ((1..=12).contains(&month) && (1..=31).contains(&day)).then_some(Civil { year, month, day, ..today })
    };
    let two_digit_year = |yy: u32| 2000 + i64::from(yy);
    let parts: Vec<&str> = text.split('-').collect();
    if let [year, month, day] = parts.as_slice() {
        return valid(i64::from(number(year)?), number(month)?, number(day)?);
    }
    for separator in ['/', '.'] {
        let parts: Vec<&str> = text.split(separator).collect();
        match parts.as_slice() {
            [month, day] if parts.len() == 2 => return valid(today.year, number(month)?, number(day)?),
            [month, day, year] => {
                let year = number(year)?;
                let year = if year < 100 { two_digit_year(year) } else { i64::from(year) };
                return valid(year, number(month)?, number(day)?);
            }
            _ => {}
        }
    }
    match text.len() {
        4 => valid(today.year, number(&text[..2])?, number(&text[2..])?),
        6 => valid(two_digit_year(number(&text[4..])?), number(&text[..2])?, number(&text[2..4])?),
        _ => None,
    }
}

fn parse_clock(text: &str) -> Option<(u32, u32, u32)> {
    let upper = text.to_ascii_uppercase();
    let (clock, meridiem) = match (upper.strip_suffix("AM"), upper.strip_suffix("PM")) {
        (Some(c), _) => (c.to_owned(), Some(0)),
        (_, Some(c)) => (c.to_owned(), Some(12)),
        _ => (upper, None),
    };
    let fields: Vec<&str> = clock.split(':').collect();
    let (hour, minute, second) = match fields.as_slice() {
        [h] => (number(h)?, 0, 0),
        [h, m] => (number(h)?, number(m)?, 0),
        [h, m, s] => (number(h)?, number(m)?, number(s)?),
        _ => return None,
    };
    let hour = match meridiem {
        Some(add) if (1..=12).contains(&hour) => hour % 12 + add,
        Some(_) => return None,
        None => hour,
    };
    (hour < 24 && minute < 60 && second < 60).then_some((hour, minute, second))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UTC: Tz = Tz::Fixed(0);

    #[test]
    fn civil_round_trip() {
        for time in [0, 951_782_400, 1_795_995_331, -86_400, 4_102_444_800] {
            let civil = UTC.civil(time);
            assert_eq!(UTC.unix(civil), time);
        }
        assert_eq!(timestamp(1_795_995_331, UTC), "2026-11-29T23:35:31");
        assert_eq!(date_line(1_795_995_339, UTC), "Sun Nov 29 23:35:39 2026");
        assert_eq!(timestamp(0, Tz::Fixed(3600)), "1970-01-01T01:00:00");
    }

    #[test]
    fn durations() {
        let shown: Vec<String> = [0, 8, 60, 3599, 3600, 86_399, 86_400, 90_061, -1].into_iter().map(clock).collect();
        assert_eq!(
            shown,
            ["0:00", "0:08", "1:00", "59:59", "1:00:00", "23:59:59", "1-00:00:00", "1-01:01:01", "INVALID"]
        );
        let shown: Vec<String> = [0, 76, 3600, 90_061].into_iter().map(hms).collect();
        assert_eq!(shown, ["00:00:00", "00:01:16", "01:00:00", "1-01:01:01"]);
    }

    #[test]
    fn cells() {
        let render = |value: &str, width, right, cut| {
            let mut out = String::new();
            push_cell(&mut out, value, width, right, cut);
            out
        };
        assert_eq!(render("abc", Some(5), true, true), "  abc");
        assert_eq!(render("abc", Some(5), false, true), "abc  ");
        assert_eq!(render("timeoutjob", Some(8), true, true), "timeoutj");
        assert_eq!(render("timeoutjob", Some(8), true, false), "timeoutjob");
        assert_eq!(render("abc", None, true, true), "abc");
    }

    #[test]
    fn format_grammars() {
        let items = parse_percent("x%.18i|%P %5j%");
        let shown: Vec<String> = items
            .iter()
            .map(|i| format!("{:?}{}{:?}{:?}{:?}", i.prefix, i.letter, i.width, i.right, i.suffix))
            .collect();
        assert_eq!(shown, [r#""x"iSome(18)true"|""#, r#"""PNonefalse" ""#, r#"""jSome(5)false"""#]);
        let items = parse_named("JobID,Name:.8|,State:,x");
        let shown: Vec<String> =
            items.iter().map(|i| format!("{}{:?}{}{:?}", i.name, i.width, i.right, i.suffix)).collect();
        assert_eq!(
            shown,
            [r#"JobIDSome(20)false"""#, r#"NameSome(8)true"|""#, r#"StateNonefalse"""#, r#"xSome(20)false"""#]
        );
    }

    #[test]
    fn time_specs() {
        let now = 1_795_995_339; // 2026-11-29T23:35:39
        let parse = |text: &str| match parse_time_spec(text, now, UTC) {
            Ok(time) => timestamp(time, UTC),
            Err(error) => error.to_string(),
        };
        assert_eq!(parse("now"), "2026-11-29T23:35:39");
        assert_eq!(parse("now-1day"), "2026-11-28T23:35:39");
        assert_eq!(parse("now+30minutes"), "2026-11-30T00:05:39");
        assert_eq!(parse("now-90"), "2026-11-29T23:34:09");
        assert_eq!(parse("today"), "2026-11-29T00:00:00");
        assert_eq!(parse("tomorrow"), "2026-11-30T00:00:00");
        assert_eq!(parse("noon"), "2026-11-29T12:00:00");
        assert_eq!(parse("2026-11-27"), "2026-11-27T00:00:00");
        assert_eq!(parse("2026-11-27T13:00"), "2026-11-27T13:00:00");
        assert_eq!(parse("2026-11-27T13:00:05"), "2026-11-27T13:00:05");
        assert_eq!(parse("08:15"), "2026-11-29T08:15:00");
        assert_eq!(parse("8:15PM"), "2026-11-29T20:15:00");
        assert_eq!(parse("1127"), "2026-11-27T00:00:00");
        assert_eq!(parse("112725"), "2025-11-27T00:00:00");
        assert_eq!(parse("11/27"), "2026-11-27T00:00:00");
        assert_eq!(parse("11/27/25"), "2025-11-27T00:00:00");
        assert_eq!(parse("11.27.2024T01:02"), "2024-11-27T01:02:00");
        assert_eq!(parse("yesterday"), "Invalid time specification: yesterday");
        assert_eq!(parse("2026-13-01"), "Invalid time specification: 2026-13-01");
        assert_eq!(parse("25:00"), "Invalid time specification: 25:00");
    }
}
