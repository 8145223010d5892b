//! What a process noded starts for a user (a batch script, a step's task, the step runner) or
//! as the admin's program (prolog, epilog, health check) inherits: stdin, stdout and stderr only. Descriptors noded itself was started with (and did
//! not mark close-on-exec) must not reach a job, so each exec is preceded by marking every
//! descriptor above stderr close-on-exec.

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
