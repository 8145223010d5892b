//! Process descriptors (`pidfd_open`, `pidfd_send_signal`, `pidfd_getfd`): a descriptor names one
//! process for as long as it is open, even after the process was reaped, so a signal sent through
//! it never reaches a process that reused the pid.

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A descriptor for the process `pid` (which must not have been reaped yet to be the one meant).
pub(crate) fn open(pid: Pid) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and no flags and returns a new descriptor or -1.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    owned(rc)
}

/// Sends `signal` to the process `pidfd` names, as kill(2) would.
pub(crate) fn send_signal(pidfd: &OwnedFd, signal: Signal) -> nix::Result<()> {
    // SAFETY: pidfd_send_signal takes a pidfd we own, a signal number, a null siginfo
    // (meaning "as kill(2) would") and no flags; it touches no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 { Err(nix::errno::Errno::last()) } else { Ok(()) }
}

/// A duplicate (close-on-exec) of the descriptor `target_fd` of the process `pidfd` names.
pub(crate) fn get_fd(pidfd: &OwnedFd, target_fd: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes a pidfd we own, a descriptor number in the target and no
    // flags, and returns a new close-on-exec descriptor or -1.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target_fd, 0) };
    owned(rc)
}

/// The descriptor a system call returned, or its error.
fn owned(rc: libc::c_long) -> std::io::Result<OwnedFd> {
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = RawFd::try_from(rc).map_err(|_| std::io::Error::other("descriptor out of range"))?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
