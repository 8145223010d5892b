//! The one place the CLI asks the C library about the local time zone (`TZ`, `/etc/localtime`):
//! [`localtime`] reads an instant as a wall-clock time with its offset, [`mktime`] turns a
//! wall-clock reading back into an instant. The query renderers ([`crate::query::format::Tz`]) and
//! the `--begin`/`--deadline` calendar of sbatch, srun and salloc ([`LocalCalendar`]) both go
//! through these two wrappers.

use drover_shared::UnixTime;
use drover_shared::grammar::date::{Calendar, CivilTime};

/// An instant as the local time zone reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LocalReading {
    pub(crate) civil: CivilTime,
    /// Seconds east of UTC in effect at that instant.
    pub(crate) offset: i64,
}

/// The fields of a broken-down C time as a [`CivilTime`].
fn civil_of(tm: &libc::tm) -> CivilTime {
    let field = |v: libc::c_int| u32::try_from(v).unwrap_or(0);
    CivilTime {
        year: tm.tm_year.saturating_add(1900),
        month: field(tm.tm_mon + 1),
        day: field(tm.tm_mday),
        hour: field(tm.tm_hour),
        minute: field(tm.tm_min),
        second: field(tm.tm_sec),
    }
}

/// `localtime_r`: `None` when the C library cannot represent `time`.
pub(crate) fn localtime(time: UnixTime) -> Option<LocalReading> {
    let t = libc::time_t::try_from(time).unwrap_or(libc::time_t::MAX);
    // SAFETY: `libc::tm` is plain data (integers and a nullable pointer), so all-zero is valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers refer to live, properly aligned locals; localtime_r is the re-entrant
    // variant and writes only into `tm`.
    let result = unsafe { libc::localtime_r(&t, &mut tm) };
    if result.is_null() {
        return None;
    }
    Some(LocalReading { civil: civil_of(&tm), offset: tm.tm_gmtoff })
}

/// `mktime` with `tm_isdst = -1` (the C library picks the reading around a daylight-saving
/// change): the instant of a local wall-clock reading, and the reading the C library normalised
/// it to (a time skipped by a daylight-saving change comes back as another one, so a caller can
/// tell). `None` when the C library cannot represent it.
pub(crate) fn mktime(civil: CivilTime) -> Option<(UnixTime, CivilTime)> {
    let field = |v: u32| libc::c_int::try_from(v).ok();
    // SAFETY: as above, all-zero is a valid `libc::tm`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = civil.year.checked_sub(1900)?;
    tm.tm_mon = field(civil.month)?.checked_sub(1)?;
    tm.tm_mday = field(civil.day)?;
    tm.tm_hour = field(civil.hour)?;
    tm.tm_min = field(civil.minute)?;
    tm.tm_sec = field(civil.second)?;
    tm.tm_isdst = -1;
    // SAFETY: `tm` is a live, initialised local; mktime reads and normalises it in place.
    let time = unsafe { libc::mktime(&mut tm) };
    // time_t is 64 bits on every target Drover builds for.
    if time == -1 { None } else { Some((time, civil_of(&tm))) }
}

/// The local time zone as the C library knows it (`TZ`, `/etc/localtime`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LocalCalendar;

impl Calendar for LocalCalendar {
    fn civil(&self, time: UnixTime) -> CivilTime {
        match localtime(time) {
            Some(reading) => reading.civil,
            None => drover_shared::grammar::date::Utc.civil(time),
        }
    }

    fn instant(&self, civil: CivilTime) -> Option<UnixTime> {
        let (time, normalised) = mktime(civil)?;
        // mktime normalises impossible readings (a time skipped by a daylight-saving change) to
        // another one; such a reading has no instant.
        let minutes = |c: &CivilTime| (c.year, c.month, c.day, c.hour, c.minute);
        (minutes(&normalised) == minutes(&civil)).then_some(time)
    }
}
