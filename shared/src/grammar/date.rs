//! Dates and times as Slurm's commands take them (`--begin`, `--deadline`, `scontrol update
//! StartTime=`, `sacct -S/-E`): `HH:MM[:SS][AM|PM]`, `MMDD[YY]`, `MM/DD[/YY]`, `MM.DD[.YY]`,
//! `YYYY-MM-DD[THH:MM[:SS]]`, the words `midnight`, `noon`, `fika`, `teatime`, `today`, `tomorrow`,
//! and `now[{+|-}count[seconds|minutes|hours|days|weeks]]`. A date and a time of day may be given
//! together, separated by blanks (`16:00 12/24`).
//!
//! Turning a wall-clock reading into an instant needs the local time zone, which this crate does not
//! read: the caller passes a [`Calendar`]. The CLI passes one backed by the C library's zone rules;
//! tests pass [`Utc`], so the grammar and its "next occurrence" rules stay pure functions of the
//! text, the current time and the calendar.

use super::ValueError;
use crate::UnixTime;

/// A wall-clock reading: what a calendar and a clock on the wall show at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CivilTime {
    /// Full year (`2026`).
    pub year: i32,
    /// 1 to 12.
    pub month: u32,
    /// 1 to 31.
    pub day: u32,
    /// 0 to 23.
    pub hour: u32,
    /// 0 to 59.
    pub minute: u32,
    /// 0 to 59.
    pub second: u32,
}

/// Conversions between instants and wall-clock readings in one time zone.
pub trait Calendar {
    /// The wall-clock reading at `time`.
    fn civil(&self, time: UnixTime) -> CivilTime;
    /// The instant at which the wall clock shows `civil`, `None` when it never does (a time skipped
    /// by a daylight-saving change) or when the instant is out of range.
    fn instant(&self, civil: CivilTime) -> Option<UnixTime>;
}

/// Coordinated Universal Time: the calendar of tests and of hosts without a zone.
#[derive(Debug, Clone, Copy, Default)]
pub struct Utc;

impl Calendar for Utc {
    fn civil(&self, time: UnixTime) -> CivilTime {
        let days = time.div_euclid(86_400);
        let secs = time.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        // `secs` is in 0..86400, so each part fits in u32.
        let secs = u32::try_from(secs).unwrap_or(0);
        CivilTime { year, month, day, hour: secs / 3600, minute: secs / 60 % 60, second: secs % 60 }
    }

    fn instant(&self, civil: CivilTime) -> Option<UnixTime> {
        let days = days_from_civil(civil.year, civil.month, civil.day);
        days.checked_mul(86_400)?
            .checked_add(i64::from(civil.hour) * 3600 + i64::from(civil.minute) * 60 + i64::from(civil.second))
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i32, month: u32, day: u32) -> i64 {
    let year = i64::from(year) - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i32, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Month and day are small by construction; years beyond i32 are clamped.
    let year = i32::try_from(year).unwrap_or(if year < 0 { i32::MIN } else { i32::MAX });
    (year, u32::try_from(month).unwrap_or(1), u32::try_from(day).unwrap_or(1))
}

/// Whether `year` has a 29 February.
fn is_leap(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Number of days in `month` of `year`.
fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 0,
    }
}

const EXPECTED: &str = "HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], \
midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]";

/// A calendar day as written: with or without its year, or relative to today.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DatePart {
    /// `MM/DD`, `YYYY-MM-DD` …; `year` is `None` when it was left out.
    Calendar { year: Option<i32>, month: u32, day: u32 },
    /// `today` (0) or `tomorrow` (1).
    FromToday(i64),
}

/// A time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TimePart {
    hour: u32,
    minute: u32,
    second: u32,
}

/// One blank-separated word of a date/time specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Word {
    Date(DatePart),
    Time(TimePart),
    DateTime(DatePart, TimePart),
    /// `now` plus this many seconds.
    Now(i64),
}

/// Parses a date/time specification into an instant, resolving "next occurrence" rules against
/// `now` in `calendar`'s zone:
/// - a time of day alone means today if it is still ahead, otherwise tomorrow;
/// - a date alone means that day at 00:00:00;
/// - a date without a year means this year, or next year when that moment has already passed.
///
/// An instant after [`LATEST`] (9999-12-31 23:59:59 UTC, the last one Slurm's four-digit-year
/// formats can show) is refused: `now+999999999days` is a typo or an attack, not a plan.
pub fn parse_date_time(text: &str, now: UnixTime, calendar: &dyn Calendar) -> Result<UnixTime, ValueError> {
    let instant = parse_unbounded(text, now, calendar)?;
    if instant > LATEST {
        return Err(ValueError::new("date/time", text, "a time no later than 9999-12-31T23:59:59"));
    }
    Ok(instant)
}

/// The latest instant a date/time may name: 9999-12-31 23:59:59 UTC.
pub const LATEST: UnixTime = 253_402_300_799;

fn parse_unbounded(text: &str, now: UnixTime, calendar: &dyn Calendar) -> Result<UnixTime, ValueError> {
    let err = || ValueError::new("date/time", text, EXPECTED);
    let lower = text.trim().to_ascii_lowercase();
    let mut date: Option<DatePart> = None;
    let mut time: Option<TimePart> = None;
    let mut relative: Option<i64> = None;
    let mut n_words = 0usize;
    for token in lower.split_whitespace() {
        n_words += 1;
        let (d, t) = match parse_word(token).ok_or_else(err)? {
            Word::Date(d) => (Some(d), None),
            Word::Time(t) => (None, Some(t)),
            Word::DateTime(d, t) => (Some(d), Some(t)),
            Word::Now(delta) => {
                relative = Some(delta);
                (None, None)
            }
        };
        if (d.is_some() && date.is_some()) || (t.is_some() && time.is_some()) {
            return Err(err());
        }
        date = date.or(d);
        time = time.or(t);
    }
    if n_words == 0 {
        return Err(err());
    }
    if let Some(delta) = relative {
        // `now…` stands alone.
        return if n_words == 1 { now.checked_add(delta).ok_or_else(err) } else { Err(err()) };
    }
    let today = calendar.civil(now);
    let at = |year: i32, month: u32, day: u32, t: TimePart| -> Result<UnixTime, ValueError> {
        if month == 0 || month > 12 || day == 0 || day > days_in_month(year, month) {
            return Err(err());
        }
        let civil = CivilTime { year, month, day, hour: t.hour, minute: t.minute, second: t.second };
        calendar.instant(civil).ok_or_else(err)
    };
    let midnight = TimePart { hour: 0, minute: 0, second: 0 };
    match (date, time) {
        (None, None) => Err(err()),
        (None, Some(t)) => {
            let candidate = at(today.year, today.month, today.day, t)?;
            if candidate > now {
                Ok(candidate)
            } else {
                let (y, m, d) = civil_from_days(days_from_civil(today.year, today.month, today.day) + 1);
                at(y, m, d, t)
            }
        }
        (Some(DatePart::FromToday(offset)), t) => {
            let (y, m, d) = civil_from_days(days_from_civil(today.year, today.month, today.day) + offset);
            at(y, m, d, t.unwrap_or(midnight))
        }
        (Some(DatePart::Calendar { year: Some(year), month, day }), t) => at(year, month, day, t.unwrap_or(midnight)),
        (Some(DatePart::Calendar { year: None, month, day }), t) => {
            let t = t.unwrap_or(midnight);
            if month == 0 || month > 12 || day == 0 || day > 31 {
                return Err(err());
            }
            // The first year from this one in which that moment exists and is not past; eight years
            // always contain a 29 February.
            (0..=8)
                .filter_map(|ahead| today.year.checked_add(ahead))
                .filter_map(|year| at(year, month, day, t).ok())
                .find(|candidate| *candidate >= now)
                .ok_or_else(err)
        }
    }
}

/// Parses one word, `None` when it fits no form.
fn parse_word(token: &str) -> Option<Word> {
    match token {
        "midnight" => return Some(Word::Time(TimePart { hour: 0, minute: 0, second: 0 })),
        "noon" => return Some(Word::Time(TimePart { hour: 12, minute: 0, second: 0 })),
        "fika" => return Some(Word::Time(TimePart { hour: 15, minute: 0, second: 0 })),
        "teatime" => return Some(Word::Time(TimePart { hour: 16, minute: 0, second: 0 })),
        "today" => return Some(Word::Date(DatePart::FromToday(0))),
        "tomorrow" => return Some(Word::Date(DatePart::FromToday(1))),
        _ => {}
    }
    if let Some(rest) = token.strip_prefix("now") {
        return parse_now(rest).map(Word::Now);
    }
    if let Some((date, time)) = token.split_once('t') {
        return Some(Word::DateTime(parse_iso_date(date)?, parse_time_of_day(time)?));
    }
    if token.contains(':') {
        return parse_time_of_day(token).map(Word::Time);
    }
    if token.contains('-') {
        return parse_iso_date(token).map(Word::Date);
    }
    parse_short_date(token).map(Word::Date)
}

/// The part after `now`: empty, or a sign, a count and an optional unit (default seconds).
fn parse_now(rest: &str) -> Option<i64> {
    if rest.is_empty() {
        return Some(0);
    }
    let (sign, rest) = match rest.as_bytes().first()? {
        b'+' => (1i64, &rest[1..]),
        b'-' => (-1i64, &rest[1..]),
        _ => return None,
    };
    let digits_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let (digits, unit) = rest.split_at(digits_end);
    if digits.is_empty() {
        return None;
    }
    let count: i64 = digits.parse().ok()?;
    let scale = if unit.is_empty() {
        1
    } else {
        const UNITS: [(&str, i64); 5] =
            [("seconds", 1), ("minutes", 60), ("hours", 3600), ("days", 86_400), ("weeks", 604_800)];
        UNITS.iter().find(|(name, _)| name.starts_with(unit)).map(|(_, scale)| *scale)?
    };
    count.checked_mul(scale)?.checked_mul(sign)
}

/// `HH:MM[:SS][am|pm]`.
fn parse_time_of_day(token: &str) -> Option<TimePart> {
    let (clock, meridiem) = if let Some(c) = token.strip_suffix("am") {
        (c, Some(false))
    } else if let Some(c) = token.strip_suffix("pm") {
        (c, Some(true))
    } else {
        (token, None)
    };
    let fields = numbers(clock, ':', 2)?;
    let (hour, minute, second) = match fields.as_slice() {
        [h, m] => (*h, *m, 0),
        [h, m, s] => (*h, *m, *s),
        _ => return None,
    };
    let hour = match meridiem {
        None if hour < 24 => hour,
        Some(pm) if (1..=12).contains(&hour) => hour % 12 + if pm { 12 } else { 0 },
        _ => return None,
    };
    (minute < 60 && second < 60).then_some(TimePart { hour, minute, second })
}

/// `YYYY-MM-DD`.
fn parse_iso_date(token: &str) -> Option<DatePart> {
    let parts: Vec<&str> = token.split('-').collect();
    let [year, month, day] = parts.as_slice() else { return None };
    if year.len() != 4 {
        return None;
    }
    let year = i32::try_from(number(year, 4)?).ok()?;
    Some(DatePart::Calendar { year: Some(year), month: number(month, 2)?, day: number(day, 2)? })
}

/// `MMDD[YY]`, `MM/DD[/YY]`, `MM.DD[.YY]`.
fn parse_short_date(token: &str) -> Option<DatePart> {
    let fields: Vec<u32> = if let Some(sep) = token.chars().find(|c| *c == '/' || *c == '.') {
        numbers(token, sep, 4)?
    } else if token.len() == 4 || token.len() == 6 {
        if !token.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (md, yy) = token.split_at(4);
        let mut fields = vec![number(&md[..2], 2)?, number(&md[2..], 2)?];
        if !yy.is_empty() {
            fields.push(number(yy, 2)?);
        }
        fields
    } else {
        return None;
    };
    let year = |y: u32| -> Option<i32> { i32::try_from(if y < 100 { 2000 + y } else { y }).ok() };
    match fields.as_slice() {
        [month, day] => Some(DatePart::Calendar { year: None, month: *month, day: *day }),
        [month, day, y] => Some(DatePart::Calendar { year: Some(year(*y)?), month: *month, day: *day }),
        _ => None,
    }
}

/// Splits on `sep` into decimal fields of at most `max_digits` digits each.
fn numbers(text: &str, sep: char, max_digits: usize) -> Option<Vec<u32>> {
    text.split(sep).map(|f| number(f, max_digits)).collect()
}

/// A decimal field of 1 to `max_digits` digits.
fn number(field: &str, max_digits: usize) -> Option<u32> {
    if field.is_empty() || field.len() > max_digits || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    field.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    /// 2026-03-15 10:30:00 UTC, a Sunday.
    const NOW: UnixTime = 1_773_570_600;

    fn check(input: &str, expect: Expect) {
        let shown = match parse_date_time(input, NOW, &Utc) {
            Ok(t) => {
                let c = Utc.civil(t);
                format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", c.year, c.month, c.day, c.hour, c.minute, c.second)
            }
            Err(e) => e.to_string(),
        };
        expect.assert_eq(&shown);
    }

    #[test]
    fn now_is_what_the_tests_assume() {
        check("now", expect!["2026-03-15T10:30:00"]);
    }

    /// A time past year 9999 is refused (once shown as year 2739933).
    #[test]
    fn times_past_year_9999_are_refused() {
        let now = 1_773_570_600;
        assert_eq!(days_from_civil(9999, 12, 31) * 86_400 + 86_399, LATEST);
        let error = parse_date_time("now+999999999days", now, &Utc).unwrap_err().to_string();
        assert!(error.contains("no later than 9999-12-31"), "{error}");
        assert!(parse_date_time("10000-01-01", now, &Utc).is_err());
        assert_eq!(parse_date_time("9999-12-31T23:59:59", now, &Utc), Ok(LATEST));
    }

    #[test]
    fn relative() {
        check("now+60", expect!["2026-03-15T10:31:00"]);
        check("now+1hour", expect!["2026-03-15T11:30:00"]);
        check("NOW+2days", expect!["2026-03-17T10:30:00"]);
        check("now+1w", expect!["2026-03-22T10:30:00"]);
        check("now-30minutes", expect!["2026-03-15T10:00:00"]);
        check(
            "now+",
            expect![
                "invalid date/time `now+`: expected HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]"
            ],
        );
        check(
            "now+3fortnights",
            expect![
                "invalid date/time `now+3fortnights`: expected HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]"
            ],
        );
    }

    #[test]
    fn time_of_day_is_the_next_occurrence() {
        check("16:00", expect!["2026-03-15T16:00:00"]);
        check("09:15:30", expect!["2026-03-16T09:15:30"]);
        check("4:00pm", expect!["2026-03-15T16:00:00"]);
        check("12:00AM", expect!["2026-03-16T00:00:00"]);
        check("midnight", expect!["2026-03-16T00:00:00"]);
        check("noon", expect!["2026-03-15T12:00:00"]);
        check("fika", expect!["2026-03-15T15:00:00"]);
        check("teatime", expect!["2026-03-15T16:00:00"]);
        check(
            "24:00",
            expect![
                "invalid date/time `24:00`: expected HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]"
            ],
        );
    }

    #[test]
    fn dates() {
        check("today", expect!["2026-03-15T00:00:00"]);
        check("tomorrow", expect!["2026-03-16T00:00:00"]);
        check("2026-07-01", expect!["2026-07-01T00:00:00"]);
        check("2026-07-01T08:30", expect!["2026-07-01T08:30:00"]);
        check("2026-07-01T08:30:05", expect!["2026-07-01T08:30:05"]);
        check("12/24", expect!["2026-12-24T00:00:00"]);
        check("12/24/27", expect!["2027-12-24T00:00:00"]);
        check("12.24", expect!["2026-12-24T00:00:00"]);
        check("1224", expect!["2026-12-24T00:00:00"]);
        check("122427", expect!["2027-12-24T00:00:00"]);
        check("01/02", expect!["2027-01-02T00:00:00"]);
        check("02/29", expect!["2028-02-29T00:00:00"]);
        check(
            "02/30",
            expect![
                "invalid date/time `02/30`: expected HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]"
            ],
        );
        check(
            "2026-13-01",
            expect![
                "invalid date/time `2026-13-01`: expected HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]"
            ],
        );
    }

    #[test]
    fn date_and_time_together() {
        check("16:00 12/24", expect!["2026-12-24T16:00:00"]);
        check("tomorrow noon", expect!["2026-03-16T12:00:00"]);
        check("03/15 09:00", expect!["2027-03-15T09:00:00"]);
        check(
            "today today",
            expect![
                "invalid date/time `today today`: expected HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]"
            ],
        );
        check(
            "now 16:00",
            expect![
                "invalid date/time `now 16:00`: expected HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]"
            ],
        );
        check(
            "",
            expect![
                "invalid date/time ``: expected HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]"
            ],
        );
    }

    #[test]
    fn civil_round_trip() {
        for days in [-800_000i64, -1, 0, 1, 59, 365, 11_016, 20_527, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_527), (2026, 3, 15));
    }
}
