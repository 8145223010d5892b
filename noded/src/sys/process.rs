//! Processes: forking (only while one thread runs, so the child may go on running ordinary Rust
//! code), ending a forked copy with `_exit`, waiting for children and measuring what they used,
//! signal dispositions, and setting an environment variable while no other thread can read the
//! environment.

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::os::fd::{OwnedFd, RawFd};

/// Which side of a fork this is.
#[derive(Debug)]
pub(crate) enum Forked {
    Child,
    Parent(Pid),
}

/// Why a fork did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// More than one thread runs: the child would be a copy of one thread whose locks other
    /// threads may hold, fit only for async-signal-safe calls.
    #[error("the process runs more than one thread")]
    Threads,
    #[error("fork")]
    Fork(#[source] nix::errno::Errno),
}

/// Whether this process has exactly one thread (`/proc/self/stat`, field 20). Unknown counts as
/// no: an unreadable `/proc` refuses what needs one thread.
pub(crate) fn single_threaded() -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/stat") else { return false };
    // The command name (field 2) is parenthesised and may hold spaces: count from the last `)`.
    let Some(after_comm) = text.rfind(')').map(|end| &text[end + 1..]) else { return false };
    // Field 3 is the first after the name, so field 20 is the 18th.
    after_comm.split_ascii_whitespace().nth(17) == Some("1")
}

/// Forks this process, which must have one thread (else [`ForkError::Threads`] and nothing
/// happens): the child is then an ordinary single-threaded copy that may allocate, lock and run
/// any code. A child that must not return into its caller's code ends with [`exit_now`].
pub(crate) fn fork_single_threaded() -> Result<Forked, ForkError> {
    if !single_threaded() {
        return Err(ForkError::Threads);
    }
    // SAFETY: the process has one thread (checked just above, and only this thread could have
    // started another since), so the child is a complete copy in which every lock is free.
    match unsafe { nix::unistd::fork() }.map_err(ForkError::Fork)? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// Forks (from a single-threaded process, as [`fork_single_threaded`]) a child that starts a
/// session of its own and runs `main` as a program of its own would start: SIGCHLD's default
/// action, stdin on `stdin`, stdout and stderr on `output`, every other descriptor closed except
/// `keep`, `/` as working directory; it ends with `main`'s result as exit code, without the
/// exit handlers its parent registered. Returns the child's pid. `main` must not use a descriptor
/// opened before the fork other than those in `keep`: the child has closed them.
pub(crate) fn fork_detached(
    stdin: &OwnedFd,
    output: &OwnedFd,
    keep: &[RawFd],
    main: impl FnOnce() -> i32,
) -> Result<Pid, ForkError> {
    match fork_single_threaded()? {
        Forked::Parent(pid) => Ok(pid),
        Forked::Child => {
            // A fresh child is no group leader, so this succeeds.
            if nix::unistd::setsid().is_err() {
                exit_now(1);
            }
            set_default_action(Signal::SIGCHLD);
            if nix::unistd::dup2_stdin(stdin).is_err()
                || nix::unistd::dup2_stdout(output).is_err()
                || nix::unistd::dup2_stderr(output).is_err()
            {
                exit_now(1);
            }
            super::descriptors::close_above_stdio_except(keep);
            if nix::unistd::chdir("/").is_err() {
                exit_now(1);
            }
            exit_now(main())
        }
    }
}

/// Ends the process at once with `code`, without running exit handlers or flushing buffers: how
/// a forked copy ends, since both belong to the process it was forked from.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` ends the process; it touches no memory of ours.
    unsafe { libc::_exit(code) }
}

/// Restores `signal`'s default action.
pub(crate) fn set_default_action(signal: Signal) {
    // SAFETY: installing SIG_DFL registers no handler code.
    let _ = unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl) };
}

/// Ignores `signal` (for SIGCHLD: the kernel then reaps children as they end).
pub(crate) fn ignore(signal: Signal) {
    // SAFETY: installing SIG_IGN registers no handler code.
    let _ = unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigIgn) };
}

/// Puts every signal back to its default action (no flags, an empty mask), real-time signals
/// included; a signal the C library refuses (glibc keeps 32 and 33 for itself) is left alone.
/// Does not change the signal mask.
pub(crate) fn reset_all_signal_actions() {
    // SAFETY: `sigaction` is plain old data; zeroed means SIG_DFL, no flags, an empty mask.
    let default: libc::sigaction = unsafe { std::mem::zeroed() };
    for signal in 1..=libc::SIGRTMAX() {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: installing SIG_DFL registers no handler code; the struct outlives the
            // call; a signal glibc refuses is reported as an error and left alone.
            unsafe { libc::sigaction(signal, &default, std::ptr::null_mut()) };
        }
    }
}

/// Waits for any child to end and reaps it: its pid and raw wait status.
pub(crate) fn wait_any() -> nix::Result<(Pid, i32)> {
    let mut raw_status = 0;
    // SAFETY: waitpid writes one int through a pointer to a local that outlives the call.
    let pid = unsafe { libc::waitpid(-1, &mut raw_status, 0) };
    if pid > 0 { Ok((Pid::from_raw(pid), raw_status)) } else { Err(nix::errno::Errno::last()) }
}

/// Reaps child `pid`: its raw wait status, or `None` when `block` is false and it still runs.
/// Interrupted waits are retried.
pub(crate) fn wait_pid(pid: Pid, block: bool) -> nix::Result<Option<i32>> {
    let flags = if block { 0 } else { libc::WNOHANG };
    loop {
        let mut raw_status = 0;
        // SAFETY: waitpid writes one int through a pointer to a local that outlives the call.
        let rc = unsafe { libc::waitpid(pid.as_raw(), &mut raw_status, flags) };
        match rc {
            0 => return Ok(None),
            rc if rc > 0 => return Ok(Some(raw_status)),
            _ if nix::errno::Errno::last() == nix::errno::Errno::EINTR => {}
            _ => return Err(nix::errno::Errno::last()),
        }
    }
}

/// Waits until child `pid` has stopped (`Ok(true)`) or ended (`Ok(false)`), without reaping it
/// or consuming the stop: a later [`wait_pid`] still finds an ended child.
pub(crate) fn wait_stopped(pid: Pid) -> nix::Result<bool> {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WSTOPPED | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::Stopped(..)) => return Ok(true),
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => return Ok(false),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(errno) => return Err(errno),
        }
    }
}

/// Whether this process still has a child (running, or ended and not reaped yet), asked without
/// reaping or waiting.
pub(crate) fn has_children() -> bool {
    // SAFETY: an all-zero `siginfo_t` is a valid value of this plain C struct.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes one `siginfo_t` through a pointer to a local that outlives the call;
    // WNOWAIT leaves any child it finds to be reaped by `waitpid` later.
    let rc = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
    // Only "no child at all" counts as none; any other answer (EINTR included) as some.
    !(rc < 0 && nix::errno::Errno::last() == nix::errno::Errno::ECHILD)
}

/// What this process's reaped descendants used, as `getrusage(RUSAGE_CHILDREN)` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChildrenUsage {
    pub(crate) user_usec: u64,
    pub(crate) system_usec: u64,
    pub(crate) max_rss_kib: u64,
}

/// CPU time and peak RSS of this process's reaped descendants; `None` when the call fails.
pub(crate) fn children_usage() -> Option<ChildrenUsage> {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one `rusage` through a pointer to a local that outlives the call.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return None;
    }
    let micros =
        |t: libc::timeval| u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec).unwrap_or(0);
    Some(ChildrenUsage {
        user_usec: micros(usage.ru_utime),
        system_usec: micros(usage.ru_stime),
        max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
    })
}

/// Sets an environment variable of this process, which must have one thread (else an error and
/// nothing changes): no other thread can be reading the environment.
pub fn set_env_single_threaded(name: &str, value: impl AsRef<std::ffi::OsStr>) -> std::io::Result<()> {
    if !single_threaded() {
        return Err(std::io::Error::other(format!("cannot set {name}: the process runs more than one thread")));
    }
    // SAFETY: one thread runs (checked just above), so nothing reads or writes the environment
    // while it changes.
    unsafe { std::env::set_var(name, value) };
    Ok(())
}
