//! What a process noded starts for a user (a batch script, a step's task, the step runner) or
//! as the admin's program (prolog, epilog, health check) inherits: stdin, stdout and stderr only. Descriptors noded itself was started with (and did
//! not mark close-on-exec) must not reach a job, so each exec is preceded by marking every
//! descriptor above stderr close-on-exec. The supervisor launcher's children, which never exec,
//! close what they inherited instead ([`close_above_stdio_except`]).

use std::os::fd::RawFd;

/// Where `close_range` cannot mark descriptors (kernels before 5.11), the most descriptors
/// marked one by one.
const FALLBACK_LIMIT: libc::c_int = 1 << 16;

/// Marks every descriptor from 3 up close-on-exec. Async-signal-safe (two system calls, or a
/// loop of `fcntl`s), so it may run in the child of a multi-threaded process between fork and
/// exec.
pub(crate) fn close_on_exec_above_stdio() {
    // SAFETY: close_range takes plain integers and only changes descriptor flags.
    let marked = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if marked == 0 {
        return;
    }
    // SAFETY: an all-zero `rlimit` is a valid value of this plain C struct.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes one `rlimit` into a local that outlives the call.
    let highest = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        libc::c_int::try_from(limit.rlim_cur).unwrap_or(FALLBACK_LIMIT).min(FALLBACK_LIMIT)
    } else {
        FALLBACK_LIMIT
    };
    for fd in 3..highest {
        // SAFETY: F_SETFD on a descriptor number changes only its flags; one that is not open
        // fails with EBADF, which is ignored.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// Closes every descriptor above stderr except those in `keep`: for a freshly forked process
/// that goes on as a program of its own without an exec (the launcher's supervisors), as an exec
/// would close what it inherited. Only [`super::process::fork_detached`] calls it, before it runs
/// the child's code, so nothing in the child owns a descriptor it closes.
pub(super) fn close_above_stdio_except(keep: &[RawFd]) {
    let mut keep: Vec<u32> = keep.iter().filter_map(|&fd| u32::try_from(fd).ok()).filter(|&fd| fd >= 3).collect();
    keep.sort_unstable();
    let mut first = 3u32;
    for fd in keep {
        if fd > first {
            close_range(first, fd - 1);
        }
        first = first.max(fd + 1);
    }
    close_range(first, u32::MAX);
}

/// Closes the descriptors `first..=last`; errors are ignored.
fn close_range(first: u32, last: u32) {
    // SAFETY: close_range takes plain integers. Only `close_above_stdio_except` calls this, in a
    // freshly forked child before its own code runs: what it closes is owned by nothing the
    // child goes on using (the fork's caller never returns into code that owned them).
    unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
}
