//! What sbatch asks of the operating system about itself: the local time zone (through
//! [`crate::localtime`], for `--begin`/`--deadline`), its umask, its scheduling priority and the
//! host name. Kept apart so the rest of sbatch is pure and testable.

use drover_shared::UnixTime;
use drover_shared::grammar::date::{Calendar, CivilTime};

/// The local time zone as the C library knows it (`TZ`, `/etc/localtime`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LocalCalendar;

impl Calendar for LocalCalendar {
    fn civil(&self, time: UnixTime) -> CivilTime {
        match crate::localtime::localtime(time) {
            Some(reading) => reading.civil,
            None => drover_shared::grammar::date::Utc.civil(time),
        }
    }

    fn instant(&self, civil: CivilTime) -> Option<UnixTime> {
        let (time, normalised) = crate::localtime::mktime(civil)?;
        // mktime normalises impossible readings (a time skipped by a daylight-saving change) to
        // another one; such a reading has no instant.
        let minutes = |c: &CivilTime| (c.year, c.month, c.day, c.hour, c.minute);
        (minutes(&normalised) == minutes(&civil)).then_some(time)
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
