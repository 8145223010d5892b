//! What sbatch asks of the operating system about itself: the local time zone (through the C
//! library, for `--begin`/`--deadline`), its umask, its scheduling priority and the host name.
//! Kept apart so the rest of sbatch is pure and testable.

use drover_shared::UnixTime;
use drover_shared::grammar::date::{Calendar, CivilTime};

/// The local time zone as the C library knows it (`TZ`, `/etc/localtime`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LocalCalendar;

impl Calendar for LocalCalendar {
    fn civil(&self, time: UnixTime) -> CivilTime {
        let t: libc::time_t = time;
        // SAFETY: `libc::tm` is plain data (integers and a nullable pointer), so all-zero is valid.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers refer to live locals of the right types; localtime_r is reentrant
        // and writes only into `tm`.
        let ok = !unsafe { libc::localtime_r(&t, &mut tm) }.is_null();
        if !ok {
            return drover_shared::grammar::date::Utc.civil(time);
        }
        let field = |v: libc::c_int| u32::try_from(v).unwrap_or(0);
        CivilTime {
            year: tm.tm_year + 1900,
            month: field(tm.tm_mon + 1),
            day: field(tm.tm_mday),
            hour: field(tm.tm_hour),
            minute: field(tm.tm_min),
            second: field(tm.tm_sec),
        }
    }

    fn instant(&self, civil: CivilTime) -> Option<UnixTime> {
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
        let wanted = (tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min);
        // SAFETY: `tm` is a live, initialised local; mktime reads and normalises it in place.
        let t = unsafe { libc::mktime(&mut tm) };
        // mktime normalises impossible readings (a time skipped by a daylight-saving change) to
        // another one; such a reading has no instant.
        let got = (tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min);
        (t != -1 && got == wanted).then_some(t)
    }
}

/// The process umask (read by setting it and putting it back; sbatch is single-threaded here).
pub(crate) fn umask() -> u32 {
    use nix::sys::stat::{Mode, umask};
    let old = umask(Mode::from_bits_truncate(0o022));
    umask(old);
    old.bits()
}

/// The process's scheduling priority (its nice value), 0 when it cannot be read.
pub(crate) fn priority() -> i32 {
    // SAFETY: getpriority takes two integers and touches no memory of ours.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

/// The host name, empty when it cannot be read.
pub(crate) fn hostname() -> String {
    nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default()
}
