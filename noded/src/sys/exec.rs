//! What a child of noded, of the supervisor or of the step runner does between `fork` and `exec`.
//! Children of noded and of the supervisor get hooks on a [`Command`] (`pre_exec`), each a fixed
//! sequence of system calls on data prepared before the fork: they run in a child of a process
//! that may have many threads, so they make only async-signal-safe calls (no allocation, no lock).
//! A step's tasks are forked by the step runner itself ([`fork_task`]) while it has a single
//! thread, so each runs ordinary code, its SPANK hooks ([`TaskPlugins`], C code that allocates, as
//! in Slurm) included. Every task of the node is forked first and waits at a [`TaskGate`]; once
//! all exist, the gate opens and they set themselves up and exec together, each reporting a
//! failed setup or exec on a close-on-exec pipe whose end of file means the exec happened.

use nix::unistd::{Gid, Uid};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Has `command`'s child inherit nothing but its stdio: every descriptor above stderr is marked
/// close-on-exec just before the exec.
pub(crate) fn close_descriptors_at_exec(command: &mut Command) {
    // SAFETY: the hook runs between fork and exec and only makes async-signal-safe system
    // calls (close_range, or fcntl in a loop); it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(|| {
            super::descriptors::close_on_exec_above_stdio();
            Ok(())
        });
    }
}

/// Has `command` start detached (a double fork): its child starts a new session and forks the
/// program's process, writes that process's pid (`i32`, native endian) to `pid_writer` and exits
/// at once; the program's process marks everything inherited beyond stdio close-on-exec and
/// execs. `spawn` then returns the short-lived intermediate child (reap it); the program's
/// process belongs to init. `pid_writer` is closed when `command` is dropped.
pub(crate) fn detach_at_exec(command: &mut Command, pid_writer: OwnedFd) {
    let detach = move || -> std::io::Result<()> {
        // SAFETY: this closure runs in the forked child of a possibly multi-threaded noded, so it
        // makes only async-signal-safe calls (setsid, fork, write, _exit, close_range) on plain
        // integers and a descriptor the closure owns, allocates nothing, and touches no lock.
        unsafe {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            match libc::fork() {
                -1 => Err(std::io::Error::last_os_error()),
                0 => {
                    // The program's process: everything inherited beyond stdio closes at exec.
                    // Errors are ignored; noded's own descriptors are close-on-exec already.
                    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
                    Ok(())
                }
                program_pid => {
                    // The intermediate child: hand the program's pid to the caller and vanish.
                    let bytes = program_pid.to_ne_bytes();
                    libc::write(pid_writer.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                    libc::_exit(0)
                }
            }
        }
    };
    // SAFETY: `detach` is async-signal-safe, as its own SAFETY comment explains.
    unsafe { command.pre_exec(detach) };
}

/// How a step's task process is set up before it execs the task's program.
#[derive(Debug)]
pub(crate) struct TaskSetup {
    /// Whether the task's stdin is a pseudo-terminal's slave, which becomes its controlling
    /// terminal in a session of its own; otherwise the task gets a process group of its own.
    pub(crate) on_terminal: bool,
    /// The job's user (uid, gid, supplementary groups) to become; `None`: stay who we are.
    pub(crate) identity: Option<(Uid, Gid, Vec<Gid>)>,
    /// Entered after the privilege drop, so a user cannot start a task in a directory only
    /// root may reach.
    pub(crate) work_dir: CString,
    /// Applied unless 0.
    pub(crate) umask: u32,
    /// Soft resource limits to set (srun's), each already capped at this process's hard limit.
    pub(crate) rlimits: Vec<(nix::sys::resource::Resource, u64, u64)>,
    /// The task's environment, installed just before the exec with the task's own pid.
    pub(crate) environment: TaskEnvironment,
    /// SPANK plugins are loaded in the runner: the task runs their task hooks.
    pub(crate) plugins: Option<TaskPlugins>,
    /// Parallel debugging (`srun --debugger-test`): once set up, the task stops itself with
    /// SIGSTOP just before its exec, for a debugger to attach; SIGCONT lets it exec.
    pub(crate) stop_before_exec: bool,
}

/// A task's SPANK hooks ([`crate::spank`]): `task_init_privileged` as root before the privilege
/// drop, `task_init` as the user just before the exec, whose environment then carries the
/// plugins' changes. A failing hook ends the task with exit code 1 before its program runs,
/// the reason on its stderr and in the node's log.
#[derive(Debug)]
pub(crate) struct TaskPlugins {
    /// The task's local id on this node.
    pub(crate) local_id: u32,
    /// The environment [`TaskEnvironment`] was built from.
    pub(crate) env: Vec<(String, String)>,
    /// The node's log (the runner's stderr, duplicated), for the plugins' lines.
    pub(crate) log: std::fs::File,
}

/// Ends a task whose plugin hook failed: the reason where plugin errors go, then exit code 1.
fn plugin_failed(message: String) -> ! {
    crate::spank::task_failed(message);
    super::process::exit_now(1)
}

unsafe extern "C" {
    /// The process's environment, which `execvp` passes on.
    static mut environ: *mut *mut libc::c_char;
}

/// `SLURM_TASK_PID=`, followed in the child by its pid.
const TASK_PID: &[u8] = b"SLURM_TASK_PID=";

/// A task's environment, built before the fork: its `NAME=value` strings, a slot for
/// `SLURM_TASK_PID` (the task's pid is known only in the child) and the null-terminated array of
/// their addresses that becomes `environ` in the child.
#[derive(Debug)]
pub(crate) struct TaskEnvironment {
    entries: Vec<CString>,
    pid_entry: Vec<u8>,
    /// Addresses of `entries` and `pid_entry`, then 0 (as integers, so the hook stays `Send`).
    pointers: Vec<usize>,
}

impl TaskEnvironment {
    pub(crate) fn new(env: &[(String, String)]) -> std::io::Result<TaskEnvironment> {
        let entries = env
            .iter()
            .filter(|(name, _)| name != "SLURM_TASK_PID")
            .map(|(name, value)| CString::new(format!("{name}={value}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| std::io::Error::other("environment variable with NUL"))?;
        // Room for the prefix, ten digits and the terminating NUL.
        let mut pid_entry = TASK_PID.to_vec();
        pid_entry.resize(TASK_PID.len() + 11, 0);
        let mut pointers: Vec<usize> = entries.iter().map(|entry| entry.as_ptr() as usize).collect();
        pointers.push(pid_entry.as_ptr() as usize);
        pointers.push(0);
        Ok(TaskEnvironment { entries, pid_entry, pointers })
    }

    /// In the child: writes its pid into the `SLURM_TASK_PID` slot and makes this the
    /// process's environment. No allocation: the buffers were sized before the fork.
    fn install(&mut self) {
        let _ = &self.entries;
        let mut pid = std::process::id();
        let mut digits = [0u8; 10];
        let mut len = 0;
        loop {
            digits[len] = b'0' + (pid % 10) as u8;
            pid /= 10;
            len += 1;
            if pid == 0 || len == digits.len() {
                break;
            }
        }
        for (slot, digit) in self.pid_entry[TASK_PID.len()..].iter_mut().zip(digits[..len].iter().rev()) {
            *slot = *digit;
        }
        self.pid_entry[TASK_PID.len() + len] = 0;
        // SAFETY: in the forked child, single-threaded, before the exec: `pointers` holds the
        // addresses of NUL-terminated strings owned by `self` (heap buffers that do not move)
        // and ends with a null pointer, as `environ` must; `self` lives until the exec.
        unsafe {
            environ = self.pointers.as_ptr() as *mut *mut libc::c_char;
        }
    }
}

/// The soft limits srun sent, as `(resource, soft, hard)` with the soft one capped at the
/// runner's hard limit (a user's limit never raises what the node allows); unknown names and
/// limits that cannot be read are skipped.
pub(crate) fn capped_rlimits(wanted: &[(String, u64)]) -> Vec<(nix::sys::resource::Resource, u64, u64)> {
    use nix::sys::resource::{RLIM_INFINITY, getrlimit};
    wanted
        .iter()
        .filter_map(|(name, value)| {
            let (_, resource) = drover_shared::job::PROPAGATED_RLIMITS.iter().find(|(n, _)| n == name)?;
            let (_, hard) = getrlimit(*resource).ok()?;
            let soft = if *value == u64::MAX { RLIM_INFINITY } else { *value };
            Some((*resource, soft.min(hard), hard))
        })
        .collect()
}

/// The gate a node's tasks wait at between their fork and their setup: a close-on-exec pipe whose
/// reading end each forked task blocks on. [`TaskGate::open`] writes one byte for each task
/// forked so far and closes the writing end, so that they all go on together (as Slurm's
/// slurmstepd forks all of a node's tasks before any runs `task_init`); a task that finds the
/// writing end closed without its byte (the runner went away) ends with exit code 1.
#[derive(Debug)]
pub(crate) struct TaskGate {
    reader: OwnedFd,
    writer: Option<OwnedFd>,
    held: usize,
}

impl TaskGate {
    pub(crate) fn new() -> std::io::Result<TaskGate> {
        let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        Ok(TaskGate { reader, writer: Some(writer), held: 0 })
    }

    /// Lets every task forked at this gate go on with its setup.
    pub(crate) fn open(mut self) {
        if let Some(writer) = self.writer.take() {
            // A task that died already leaves its byte in the pipe, which goes with it.
            let _ = std::fs::File::from(writer).write_all(&vec![1u8; self.held]);
        }
    }

    /// In a forked task: lets go of the writing end (so that the gate's end of file depends on
    /// the runner alone) and waits for the task's byte; `false` when the runner went away.
    fn wait(&mut self) -> bool {
        drop(self.writer.take());
        let mut byte = [0u8; 1];
        loop {
            match nix::unistd::read(&self.reader, &mut byte) {
                Ok(1) => return true,
                Err(nix::errno::Errno::EINTR) => {}
                _ => return false,
            }
        }
    }
}

/// A task's stdin, stdout and stderr as the task gets them: pipes' ends or the pseudo-terminal's
/// slave (three descriptors of it).
#[derive(Debug)]
pub(crate) struct TaskStdio {
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// A task forked and held at its [`TaskGate`].
#[derive(Debug)]
pub(crate) struct HeldTask {
    pid: nix::unistd::Pid,
    /// End of file with nothing before it: the task exec'd its program (or a plugin ended it,
    /// [`plugin_failed`]); four bytes: the `errno` of the step that failed.
    report: std::fs::File,
}

impl HeldTask {
    pub(crate) fn pid(&self) -> nix::unistd::Pid {
        self.pid
    }

    /// Once the gate is open, for a task that stops before its exec
    /// ([`TaskSetup::stop_before_exec`]): waits until it stopped there (`Ok`: its pid, and its
    /// report pipe, to keep open while the task may still exec), or its setup failed (as
    /// [`HeldTask::started`]).
    pub(crate) fn stopped(self) -> Result<(nix::unistd::Pid, Option<std::fs::File>), (std::io::Error, i32)> {
        match super::process::wait_stopped(self.pid) {
            Ok(true) => Ok((self.pid, Some(self.report))),
            // It ended before it stopped: its report says why (and it is reaped there), unless
            // it said nothing (a plugin ended it), when its end is reaped later as any task's.
            _ => self.started().map(|pid| (pid, None)),
        }
    }

    /// Once the gate is open: waits until the task exec'd its program (`Ok`, its pid), or its
    /// setup or exec failed (the error, the task then reaped: its wait status comes with it).
    pub(crate) fn started(self) -> Result<nix::unistd::Pid, (std::io::Error, i32)> {
        let mut bytes = Vec::new();
        let _ = (&self.report).read_to_end(&mut bytes);
        let Some(errno) = bytes.first_chunk::<4>().map(|b| i32::from_ne_bytes(*b)) else { return Ok(self.pid) };
        let status = super::process::wait_pid(self.pid, true).ok().flatten().unwrap_or(1 << 8);
        Err((std::io::Error::from_raw_os_error(errno), status))
    }
}

/// Forks a task of a step, which waits at `gate` before anything the job can see happens, then
/// sets itself up as `setup` says (session or process group, `oom_score_adj` back to 0, rlimits,
/// the plugins' `task_init_privileged`, the job's user, working directory, umask, an empty
/// signal mask with default actions for the signals the runner handles, the plugins'
/// `task_init`, nothing inherited but `stdio`, the task's environment) and execs `program` with
/// `argv`, searched as `execvp` does in the task's `PATH`. The fork needs a single-threaded
/// runner ([`super::process::fork_single_threaded`]): the child then runs ordinary code,
/// plugins that allocate included. An error is the fork's (`EAGAIN` at the job's pids limit).
pub(crate) fn fork_task(
    setup: TaskSetup,
    stdio: TaskStdio,
    program: &CString,
    argv: &[CString],
    gate: &mut TaskGate,
) -> std::io::Result<HeldTask> {
    let (report_reader, report_writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    match super::process::fork_single_threaded() {
        Err(super::process::ForkError::Threads) => {
            Err(std::io::Error::other("the step runner must fork its tasks before starting any thread"))
        }
        Err(super::process::ForkError::Fork(errno)) => Err(errno.into()),
        Ok(super::process::Forked::Parent(pid)) => {
            gate.held += 1;
            Ok(HeldTask { pid, report: std::fs::File::from(report_reader) })
        }
        Ok(super::process::Forked::Child) => {
            drop(report_reader);
            // The child never returns into the runner's code: it execs or ends here.
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                become_task(setup, stdio, program, argv, gate)
            }));
            let error = outcome.unwrap_or_else(|_| std::io::Error::other("the task's setup panicked"));
            let errno = error.raw_os_error().unwrap_or(libc::EINVAL);
            let _ = std::fs::File::from(report_writer).write_all(&errno.to_ne_bytes());
            super::process::exit_now(127)
        }
    }
}

/// In the forked task: stdio, the gate, the setup, the exec; returns only with what failed.
fn become_task(
    setup: TaskSetup,
    stdio: TaskStdio,
    program: &CString,
    argv: &[CString],
    gate: &mut TaskGate,
) -> std::io::Error {
    let placed = nix::unistd::dup2_stdin(&stdio.stdin)
        .and_then(|()| nix::unistd::dup2_stdout(&stdio.stdout))
        .and_then(|()| nix::unistd::dup2_stderr(&stdio.stderr));
    if let Err(errno) = placed {
        return errno.into();
    }
    drop(stdio);
    if !gate.wait() {
        super::process::exit_now(1);
    }
    let stop_before_exec = setup.stop_before_exec;
    // The environment must live until the exec: `environ` points into it.
    let _environment = match set_up(setup) {
        Ok(environment) => environment,
        Err(error) => return error,
    };
    if stop_before_exec {
        // Parallel debugging: stopped here until a debugger (or the step's end) continues it.
        // A signal that ends the task and is sent while it is stopped (the step's SIGTERM)
        // takes it as soon as SIGCONT wakes it, before it execs.
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
    match nix::unistd::execvp(program, argv) {
        Err(errno) => errno.into(),
        Ok(never) => match never {},
    }
}

/// The task's setup (see [`fork_task`]), stdio already in place; returns the environment it
/// installed, which must outlive the exec.
fn set_up(setup: TaskSetup) -> std::io::Result<TaskEnvironment> {
    let TaskSetup { on_terminal, identity, work_dir, umask, rlimits, mut environment, mut plugins, .. } = setup;
    if on_terminal {
        // A session of its own with the pseudo-terminal (its stdin) as controlling terminal.
        nix::unistd::setsid()?;
        // SAFETY: TIOCSCTTY takes an integer argument and touches no memory of ours; fd 0 is
        // the pseudo-terminal's slave, placed there before this call.
        if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    } else {
        nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0))?;
    }
    // The runner shields itself from the OOM killer; the task must not inherit that.
    if let Ok(adjust) =
        nix::fcntl::open(c"/proc/self/oom_score_adj", nix::fcntl::OFlag::O_WRONLY, nix::sys::stat::Mode::empty())
    {
        let _ = nix::unistd::write(&adjust, b"0");
    }
    for (resource, soft, hard) in &rlimits {
        let _ = nix::sys::resource::setrlimit(*resource, *soft, *hard);
    }
    if let Some(plugins) = &plugins {
        if let Ok(log) = plugins.log.try_clone() {
            crate::spank::log_into_task(log);
        }
        if let Err(message) = crate::spank::task_init_privileged(plugins.local_id) {
            plugin_failed(message);
        }
    }
    if let Some((uid, gid, groups)) = &identity {
        nix::unistd::setgroups(groups)?;
        nix::unistd::setgid(*gid)?;
        nix::unistd::setuid(*uid)?;
    }
    nix::unistd::chdir(work_dir.as_c_str())?;
    if umask != 0 {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(umask));
    }
    nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    )?;
    for sig in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGHUP,
        nix::sys::signal::Signal::SIGPIPE,
    ] {
        super::process::set_default_action(sig);
    }
    if let Some(mut plugins) = plugins.take() {
        if let Err(message) = crate::spank::task_init(plugins.local_id, &mut plugins.env) {
            plugin_failed(message);
        }
        environment = TaskEnvironment::new(&plugins.env)?;
    }
    // Only stdin, stdout and stderr reach the task.
    super::descriptors::close_on_exec_above_stdio();
    environment.install();
    Ok(environment)
}
