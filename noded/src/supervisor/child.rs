//! The job's own process: everything resolved as root before the fork ([`prepare`]), then a child
//! that starts its own session, waits for the supervisor's go, becomes the user (supplementary
//! groups, gid, uid), applies the umask, enters the working directory, opens its output files
//! *as the user* and execs the script.
//!
//! The supervisor forks while it still has a single thread ([`fork_job`] checks), so the child
//! may allocate and format like any program until it execs. Two close-on-exec pipes connect them:
//! `go` (the supervisor writes one byte when the child may proceed: the place to move it into a
//! job cgroup first) and `report` (the child writes why its setup failed; end of file with no
//! message means the exec succeeded).

use super::env::batch_environment;
use super::{SupervisorError, jobfiles};
use crate::sys::{self, process::ForkError, process::Forked};
use drover_shared::grammar::pattern::{PatternContext, expand_pattern};
use drover_shared::proto::node::LaunchRequest;
use nix::fcntl::OFlag;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Pid, Uid, User};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Output files are created with this mode, less the job's umask.
const OUTPUT_MODE: u32 = 0o644;

/// The longest setup-failure message a child reports.
const MAX_REPORT: usize = 4000;

/// Everything the child needs, resolved before the fork.
pub(super) struct JobCommand<'a> {
    launch: &'a LaunchRequest,
    script: CString,
    argv: Vec<CString>,
    work_dir: PathBuf,
    stdin: PathBuf,
    stdout: PathBuf,
    /// `None`: stderr goes to the stdout file, through the same open file.
    stderr: Option<PathBuf>,
    append: bool,
    umask: Mode,
    /// `None` when the supervisor already runs as the job's user (a developer's unprivileged run).
    identity: Option<Identity>,
    hostname: String,
    /// Set when the job's device cgroup hides its other GPUs.
    cuda_visible_devices: Option<String>,
    /// `--container`: the helper (`drover-noded container`) and its command line, which runs the
    /// script in the container instead.
    container: Option<(CString, Vec<CString>)>,
}

struct Identity {
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

/// Resolves the job's user and files, and writes the script where the user can execute it:
/// `job_dir/script` owned by the user, mode 0500, in a `job_dir` made 0711 (traversable, not
/// listable).
pub(super) fn prepare<'a>(
    job_dir: &Path,
    launch: &'a LaunchRequest,
    cuda_visible_devices: Option<String>,
) -> Result<JobCommand<'a>, SupervisorError> {
    let spec = &launch.spec;
    let uid = Uid::from_raw(launch.uid);
    let gid = Gid::from_raw(launch.gid);
    let identity = if Uid::effective() == uid {
        None
    } else if !Uid::effective().is_root() {
        return Err(SupervisorError::Refused(format!(
            "the supervisor runs as uid {} and cannot start a job as uid {uid}",
            Uid::effective()
        )));
    } else {
        let user = User::from_uid(uid)
            .map_err(|source| SupervisorError::Sys { operation: "getpwuid", source })?
            .ok_or(SupervisorError::UnknownUser { uid: launch.uid })?;
        let name = CString::new(user.name).map_err(|_| SupervisorError::UnknownUser { uid: launch.uid })?;
        let groups = nix::unistd::getgrouplist(&name, gid)
            .map_err(|source| SupervisorError::Sys { operation: "getgrouplist", source })?;
        Some(Identity { uid, gid, groups })
    };

    let script_path = job_dir.join(jobfiles::SCRIPT);
    write_script(&script_path, &spec.script, identity.as_ref().map(|identity| (identity.uid, identity.gid)))?;
    std::fs::set_permissions(job_dir, std::fs::Permissions::from_mode(0o711))
        .map_err(|source| SupervisorError::Write { path: job_dir.to_owned(), source })?;

    let hostname = nix::unistd::gethostname()
        .map_err(|source| SupervisorError::Sys { operation: "gethostname", source })?
        .to_string_lossy()
        .into_owned();
    let work_dir = PathBuf::from(&spec.work_dir);
    let context = PatternContext {
        job_id: launch.job_id,
        array: launch.array.as_ref().map(|a| (a.array_job_id, a.task_id)),
        node_name: launch.nodes.first().map_or(hostname.as_str(), String::as_str),
        user: &launch.user,
        job_name: &spec.name,
    };
    let resolve = |pattern: &str| work_dir.join(expand_pattern(pattern, &context));
    let default_stdout = if launch.array.is_some() { "slurm-%A_%a.out" } else { "slurm-%j.out" };
    let stdout = resolve(spec.stdout.as_deref().unwrap_or(default_stdout));
    let stderr = spec.stderr.as_deref().map(resolve).filter(|stderr| *stderr != stdout);
    let stdin = spec.stdin.as_deref().map_or_else(|| PathBuf::from("/dev/null"), resolve);

    let script = c_string(script_path.as_os_str().as_bytes())?;
    let mut argv = vec![script.clone()];
    for arg in &spec.script_args {
        argv.push(c_string(arg.as_bytes())?);
    }
    let container = match crate::container::read(job_dir) {
        Ok(None) => None,
        Ok(Some(Err(reason))) => return Err(SupervisorError::Refused(reason)),
        Ok(Some(Ok(plan))) => {
            let exe = std::env::current_exe()
                .map_err(|source| SupervisorError::Read { path: PathBuf::from("/proc/self/exe"), source })?;
            let mut words = vec![script_path.to_string_lossy().into_owned()];
            words.extend(spec.script_args.iter().cloned());
            let line = crate::container::command_line(&exe, &plan, &words);
            let line = line.iter().map(|word| c_string(word.as_bytes())).collect::<Result<Vec<_>, _>>()?;
            Some((c_string(exe.as_os_str().as_bytes())?, line))
        }
        Err(source) => {
            return Err(SupervisorError::Read { path: job_dir.join(crate::container::PLAN_FILE), source });
        }
    };
    Ok(JobCommand {
        launch,
        script,
        argv,
        work_dir,
        stdin,
        stdout,
        stderr,
        append: spec.open_append == Some(true),
        umask: Mode::from_bits_truncate(spec.umask & 0o777),
        identity,
        hostname,
        cuda_visible_devices,
        container,
    })
}

impl JobCommand<'_> {
    /// The environment of the job's prolog and epilog, which run as root: fixed, never the
    /// job's ([`super::admin_env`]); `context` is `prolog_slurmd` or `epilog_slurmd`.
    pub(super) fn script_environment(&self, context: &str) -> Vec<(String, String)> {
        super::admin_env::admin_script_environment(self.launch, &self.hostname, context)
    }
}

/// Writes the script, mode 0500, owned by `owner` (by the supervisor's own user when `None`).
fn write_script(path: &Path, script: &[u8], owner: Option<(Uid, Gid)>) -> Result<(), SupervisorError> {
    let write_error = |source: std::io::Error| SupervisorError::Write { path: path.to_owned(), source };
    match std::fs::remove_file(path) {
        Err(source) if source.kind() != std::io::ErrorKind::NotFound => return Err(write_error(source)),
        _ => {}
    }
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(write_error)?;
    file.write_all(script).map_err(write_error)?;
    if let Some((uid, gid)) = owner {
        nix::unistd::fchown(&file, Some(uid), Some(gid)).map_err(|errno| write_error(errno.into()))?;
    }
    file.set_permissions(std::fs::Permissions::from_mode(0o500)).map_err(write_error)
}

fn c_string(bytes: &[u8]) -> Result<CString, SupervisorError> {
    CString::new(bytes).map_err(|_| SupervisorError::Refused("a script path or argument contains a NUL byte".into()))
}

/// The forked job, seen from the supervisor.
pub(super) struct ForkedJob {
    /// The batch shell; also the id of the job's session and process group.
    pub(super) pid: Pid,
    /// Names the batch shell for as long as this lives, even after it is reaped (no pid reuse).
    pidfd: Option<OwnedFd>,
    go: Option<File>,
}

impl ForkedJob {
    /// Lets the child go on with its setup.
    pub(super) fn release(&mut self) {
        if let Some(mut go) = self.go.take() {
            // A child that died already shows up as reaped; nothing to do here.
            let _ = go.write_all(&[1]);
        }
    }

    /// Sends `signal` to the batch shell only, never to a process that reused its pid.
    pub(super) fn signal_shell(&self, signal: Signal) -> nix::Result<()> {
        let Some(pidfd) = &self.pidfd else { return nix::sys::signal::kill(self.pid, signal) };
        sys::pidfd::send_signal(pidfd, signal)
    }

    /// A duplicate of the batch shell's stderr when it is a regular file, so the supervisor can
    /// write Slurm's `*** JOB … CANCELLED ***` line where the user reads it. The duplicate shares
    /// the job's open file description, so it can write only where the job itself can.
    pub(super) fn shell_stderr(&self) -> Option<File> {
        let pidfd = self.pidfd.as_ref()?;
        let file = File::from(sys::pidfd::get_fd(pidfd, 2).ok()?);
        file.metadata().ok().filter(std::fs::Metadata::is_file).map(|_| file)
    }
}

/// Forks the job's child, which waits for [`ForkedJob::release`] before doing anything the
/// job can see. Also returns the reading end of the child's setup report: its setup-failure
/// message, or nothing and end of file once it has exec'd.
pub(super) fn fork_job(command: &JobCommand<'_>) -> Result<(ForkedJob, File), SupervisorError> {
    let pipe =
        || nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|source| SupervisorError::Sys { operation: "pipe2", source });
    let (go_reader, go_writer) = pipe()?;
    let (report_reader, report_writer) = pipe()?;
    // The child is an ordinary single-threaded copy: it may allocate and lock. It never returns
    // into the supervisor's code: `child_main` ends in exec or `_exit`.
    let forked = sys::process::fork_single_threaded().map_err(|error| match error {
        ForkError::Threads => {
            SupervisorError::Refused("the supervisor must fork the job before starting any thread".into())
        }
        ForkError::Fork(source) => SupervisorError::Sys { operation: "fork", source },
    })?;
    match forked {
        Forked::Child => {
            drop(go_writer);
            drop(report_reader);
            child_main(command, File::from(go_reader), File::from(report_writer))
        }
        Forked::Parent(child) => {
            // The child cannot have been reaped yet: only this thread reaps, later.
            let pidfd = sys::pidfd::open(child).ok();
            Ok((ForkedJob { pid: child, pidfd, go: Some(File::from(go_writer)) }, File::from(report_reader)))
        }
    }
}

fn child_main(command: &JobCommand<'_>, go: File, report: File) -> ! {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| become_job(command, go)));
    let mut message = match outcome {
        Ok(message) => message,
        Err(_) => "the job's setup panicked".to_owned(),
    };
    if message.len() > MAX_REPORT {
        let cut = (0..=MAX_REPORT).rev().find(|&idx| message.is_char_boundary(idx)).unwrap_or(0);
        message.truncate(cut);
    }
    let _ = (&report).write_all(message.as_bytes());
    // Ends this forked copy without running the supervisor's exit handlers or flushing its
    // buffers, which belong to the supervisor.
    sys::process::exit_now(1)
}

/// Sets the child up and execs the script; returns only on failure, with the message for the
/// job's `LaunchFailed` outcome.
fn become_job(command: &JobCommand<'_>, mut go: File) -> String {
    let sys = |what: &str, errno: nix::errno::Errno| format!("{what}: {}", errno.desc());
    if let Err(errno) = nix::unistd::setsid() {
        return sys("could not start the job's session", errno);
    }
    reset_signals();
    let mut byte = [0u8; 1];
    if !matches!(go.read(&mut byte), Ok(1)) {
        return "the supervisor went away before the job started".to_owned();
    }
    drop(go);

    if Uid::effective().is_root() {
        // The supervisor shields itself from the OOM killer; the job must not inherit that.
        let _ = std::fs::write("/proc/self/oom_score_adj", "0");
    }
    if let Err(message) = crate::spank::task_init_privileged(0) {
        return message;
    }
    // PropagateResourceLimits: sbatch's soft limits (`SLURM_RLIMIT_*`), each capped at this
    // node's hard limit, so a user's limit never raises what the node allows.
    let wanted = drover_shared::job::rlimits_from_environment(&command.launch.spec.environment);
    for (resource, soft, hard) in crate::sys::exec::capped_rlimits(&wanted) {
        let _ = nix::sys::resource::setrlimit(resource, soft, hard);
    }
    if let Some(identity) = &command.identity {
        if let Err(errno) = nix::unistd::setgroups(&identity.groups) {
            return sys("could not set the supplementary groups", errno);
        }
        if let Err(errno) = nix::unistd::setgid(identity.gid) {
            return sys(&format!("could not set gid {}", identity.gid), errno);
        }
        if let Err(errno) = nix::unistd::setuid(identity.uid) {
            return sys(&format!("could not set uid {}", identity.uid), errno);
        }
    }
    nix::sys::stat::umask(command.umask);
    if let Err(errno) = nix::unistd::chdir(&command.work_dir) {
        return sys(&format!("could not change to the working directory {}", command.work_dir.display()), errno);
    }
    // The supervisor's log (still this process's stderr), where plugin lines go once stdio is
    // the job's.
    let log = std::io::stderr().as_fd().try_clone_to_owned().map(File::from);
    if let Err(message) = open_stdio(command) {
        return message;
    }
    if crate::spank::active()
        && let Ok(log) = log
    {
        crate::spank::log_into_task(log);
    }

    let task_pid = nix::unistd::getpid().as_raw().unsigned_abs();
    let mut env =
        batch_environment(command.launch, &command.hostname, task_pid, command.cuda_visible_devices.as_deref());
    if let Err(message) = crate::spank::task_init(0, &mut env) {
        return crate::spank::task_failed(message);
    }
    let env: Vec<CString> = env
        .into_iter()
        .filter(|(name, _)| !name.is_empty() && !name.contains('='))
        .filter_map(|(name, value)| CString::new(format!("{name}={value}")).ok())
        .collect();
    // Nothing the supervisor holds (or noded left it) reaches the job: only its stdio.
    sys::descriptors::close_on_exec_above_stdio();
    if let Some((helper, line)) = &command.container {
        let Err(errno) = nix::unistd::execve(helper, line, &env);
        return sys("could not start the container", errno);
    }
    let Err(errno) = nix::unistd::execve(&command.script, &command.argv, &env);
    sys("could not execute the batch script", errno)
}

/// Puts every signal back to its default action and unblocks all: dispositions the supervisor
/// inherited or set (Rust ignores SIGPIPE) must not reach the job. Real-time signals included;
/// glibc keeps the two it reserves for itself (32 and 33) out of reach, and sets up their
/// handlers itself in any program that needs them.
fn reset_signals() {
    sys::process::reset_all_signal_actions();
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
}

/// Opens stdin, stdout and stderr as the (already assumed) user and puts them on fds 0, 1, 2.
fn open_stdio(command: &JobCommand<'_>) -> Result<(), String> {
    let open_error = |what: &str, path: &Path, error: std::io::Error| {
        format!("could not open the {what} {}: {error}", path.display())
    };
    let open_output = |path: &Path| {
        OpenOptions::new()
            .write(true)
            .create(true)
            .append(command.append)
            .truncate(!command.append)
            .mode(OUTPUT_MODE)
            .open(path)
    };
    let stdin = File::open(&command.stdin).map_err(|error| open_error("input file", &command.stdin, error))?;
    let stdout = open_output(&command.stdout).map_err(|error| open_error("output file", &command.stdout, error))?;
    let stderr = match &command.stderr {
        Some(path) => Some(open_output(path).map_err(|error| open_error("error file", path, error))?),
        None => None,
    };
    let dup_error = |errno: nix::errno::Errno| format!("could not set up the job's stdio: {}", errno.desc());
    nix::unistd::dup2_stdin(&stdin).map_err(dup_error)?;
    nix::unistd::dup2_stdout(&stdout).map_err(dup_error)?;
    nix::unistd::dup2_stderr(stderr.as_ref().unwrap_or(&stdout)).map_err(dup_error)?;
    Ok(())
}
