//! What sbatch asks of the operating system about itself: its umask, its scheduling priority and
//! the host name (the local time zone is [`crate::localtime::LocalCalendar`]). Kept apart so the
//! rest of sbatch is pure and testable.

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
