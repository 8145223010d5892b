//! SPANK plugins on the node, in the three contexts Slurm runs there, each in a process of its
//! own so that noded itself never loads a plugin:
//!
//! - remote (Slurm's slurmstepd): the job's supervisor (a batch job's one task) and the step
//!   runner (an srun step's tasks on this node) call [`start`]/[`start_step`] and the task hooks
//!   below at the points Slurm does, and they drive the process's one
//!   [`drover_spank_compat::Stack`];
//! - slurmd: [`SlurmdPlugins::start`] runs `drover-noded spank-slurmd` ([`slurmd_main`]) when
//!   noded starts: it loads the plugins that define `slurm_spank_init` or
//!   `slurm_spank_slurmd_exit`, calls `init`, and lives as long as noded does; when noded stops
//!   (or dies) its stdin closes and it calls `slurmd_exit`. A failing `init` stops noded from
//!   starting, as it stops slurmd;
//! - job_script (Slurm's prolog/epilog): the supervisor calls [`job_script`], which runs
//!   `drover-noded spank-job-script prolog|epilog` ([`job_script_main`]) as root with the
//!   prolog's environment, just before the node's own prolog and epilog.
//!
//! The stack file comes from `DROVER_PLUGSTACK` in the process's environment (noded sets it
//! from the config's `plugstack` key before it starts any thread, and every process above
//! inherits it); unset or a missing file means no plugins, and every function here is then a
//! no-op.
//!
//! Order in the remote context: [`start`] or [`start_step`] (`init`, the options that travelled
//! in the job's or step's environment, `init_post_opt`, then `user_init` with the user's
//! effective uid) before the tasks are forked; [`task_post_fork`] per task in the supervisor or
//! runner once the tasks are forked (a step's runner forks all of the node's tasks, then lets
//! them go on together); in each forked task [`task_init_privileged`] as root, then, as the
//! user, [`task_init`], which shows plugins the task's own environment (`S_JOB_ENV`,
//! `spank_getenv`) and hands back what their `spank_setenv`/`spank_unsetenv` made of it;
//! [`task_exit`] when a task is reaped, [`exit`] at the end. A plugin that crashes (caught by the crate's guard) or a
//! required plugin that fails fails the job or step with the reason; noded and other jobs are
//! untouched.
//!
//! Messages (Slurm's split): in the supervisor or runner every plugin line goes to the node-side
//! log (`supervisor.log`, or noded's log for a step runner), and for a step [`log_to_user`] also
//! sends `slurm_error` and `slurm_spank_log` lines to srun's stderr. In a forked task
//! [`log_into_task`] sends `slurm_error` (as `slurmstepd: error: …`) and `slurm_spank_log` lines
//! to the task's stderr and to the node-side log, and `slurm_info` and the lower levels only to
//! the node-side log, never into the job's output. The slurmd and job_script helpers write their
//! lines to noded's log and the supervisor's log respectively.

use drover_shared::proto::node::{LaunchRequest, StepLaunch};
use drover_spank_compat::{Context, Hook, JobInfo, LogLevel, PlugStack, STEP_ID_BATCH, SpankError, Stack};
use std::fs::File;
use std::io::{BufRead, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The variable naming the plugin stack file.
pub const PLUGSTACK_ENV: &str = "DROVER_PLUGSTACK";

/// The process's stack; `None` without plugins. A `Mutex` because the supervisor's loop runs
/// beside its helper threads; plugins run only from the thread holding it.
static STACK: Mutex<Option<Stack>> = Mutex::new(None);

fn with_stack<T>(f: impl FnOnce(&Stack) -> T) -> Option<T> {
    STACK.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref().map(f)
}

/// Whether plugins are loaded in this process (the tasks then run their task hooks).
pub fn active() -> bool {
    with_stack(|_| ()).is_some()
}

/// The user's supplementary groups, as the job gets them.
fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .and_then(|user| std::ffi::CString::new(user.name).ok())
        .and_then(|name| nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid)).ok())
        .map_or_else(Vec::new, |groups| groups.into_iter().map(nix::unistd::Gid::as_raw).collect())
}

/// What plugins see of a batch job.
fn job_info(launch: &LaunchRequest, script: &Path) -> JobInfo {
    let spec = &launch.spec;
    let mut argv = vec![script.display().to_string()];
    argv.extend(spec.script_args.iter().cloned());
    JobInfo {
        uid: launch.uid,
        gid: launch.gid,
        groups: groups_of(launch.uid, launch.gid),
        job_id: launch.job_id,
        step_id: STEP_ID_BATCH,
        n_nodes: u32::try_from(launch.nodes.len()).unwrap_or(u32::MAX),
        node_id: 0,
        local_task_count: 1,
        total_task_count: 1,
        n_cpus: u16::try_from(launch.cpus_on_node).unwrap_or(u16::MAX),
        argv,
        env: spec.environment.clone(),
        task_global_ids: vec![0],
        cpus_per_task: spec.cpus_per_task.unwrap_or(1),
        job_alloc_cores: String::new(),
        job_alloc_mem: launch.mem_per_node_mb,
        step_alloc_cores: String::new(),
        step_alloc_mem: launch.mem_per_node_mb,
        restart_count: launch.restart_count,
        array_job_id: launch.array.as_ref().map_or(0, |array| array.array_job_id),
        array_task_id: launch.array.as_ref().map_or(0, |array| array.task_id),
    }
}

/// What plugins see of an srun step on this node, whose local tasks are `tasks` (global ids).
fn step_info(launch: &StepLaunch, tasks: &[u32]) -> JobInfo {
    let layout = &launch.layout;
    JobInfo {
        step_id: launch.step_id,
        n_nodes: u32::try_from(layout.nodes.len()).unwrap_or(u32::MAX),
        node_id: launch.node_index,
        local_task_count: u32::try_from(tasks.len()).unwrap_or(u32::MAX),
        total_task_count: layout.ntasks,
        argv: launch.argv.clone(),
        env: launch.environment.clone(),
        task_global_ids: tasks.to_vec(),
        cpus_per_task: layout.cpus_per_task.max(1),
        ..job_info(&launch.job, Path::new(""))
    }
}

/// Loads the plugins and runs everything before the fork of a batch job. `script` is the path
/// the job runs. Call it with the supervisor still single-threaded.
pub fn start(launch: &LaunchRequest, script: &Path) -> Result<(), SpankError> {
    if launch.spec.script == drover_shared::job::ALLOCATION_HOLDER.as_bytes() {
        // An interactive allocation's holder: Slurm runs no batch step, so no plugins, there.
        return Ok(());
    }
    start_with(|| job_info(launch, script))
}

/// Loads the plugins and runs everything before the step's tasks here (`tasks`, global ids)
/// are forked. Call it with the runner still single-threaded.
pub fn start_step(launch: &StepLaunch, tasks: &[u32]) -> Result<(), SpankError> {
    start_with(|| step_info(launch, tasks))
}

fn start_with(info: impl FnOnce() -> JobInfo) -> Result<(), SpankError> {
    let Some(plugstack) = std::env::var_os(PLUGSTACK_ENV).map(PathBuf::from) else { return Ok(()) };
    let stack = Stack::open(&plugstack, Context::Remote, &[])?;
    for warning in stack.warnings() {
        eprintln!("{} spank: {warning}", drover_shared::now());
    }
    if stack.plugin_names().is_empty() {
        return Ok(());
    }
    stack.set_job(info());
    let started = stack.remote_init().and_then(|()| stack.user_init());
    *STACK.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stack);
    started
}

/// One plugin line in the node-side log (this process's stderr, or `log`).
fn node_line(log: &mut dyn Write, level: LogLevel, message: &str) {
    let _ = writeln!(log, "{} spank: {}", drover_shared::now(), level.format(message));
}

/// What the user sees of a plugin line: `slurm_error` as slurmstepd words its errors,
/// `slurm_spank_log` as it is; nothing of the other levels.
fn user_line(level: LogLevel, message: &str) -> Option<String> {
    match level {
        LogLevel::SpankLog => Some(format!("{message}\n")),
        LogLevel::Error => Some(format!("slurmstepd: error: {message}\n")),
        _ => None,
    }
}

/// In the step runner: plugin lines go to the node's log (the runner's stderr) and errors and
/// `slurm_spank_log` lines also to `user` (srun's stderr).
pub fn log_to_user(user: impl Fn(&[u8]) + Send + 'static) {
    drover_spank_compat::set_log_sink(move |level, message| {
        if level <= LogLevel::Info {
            node_line(&mut std::io::stderr(), level, message);
        }
        if let Some(line) = user_line(level, message) {
            user(line.as_bytes());
        }
    });
}

/// In a forked task, once its stdio is in place: errors and `slurm_spank_log` lines go to the
/// task's stderr and to `log` (the node-side log), informational lines only to `log`.
pub fn log_into_task(log: File) {
    drover_spank_compat::set_log_sink(move |level, message| {
        if level <= LogLevel::Info {
            node_line(&mut &log, level, message);
        }
        if let Some(line) = user_line(level, message) {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    });
}

/// A task's plugin failure, told where [`log_into_task`] sends errors; returns the message.
pub fn task_failed(message: String) -> String {
    drover_spank_compat::log_line(LogLevel::Error, &message);
    message
}

/// In a forked task, as root, before it becomes the user; `Err` is the task's setup failure.
pub fn task_init_privileged(local_id: u32) -> Result<(), String> {
    with_stack(|stack| stack.task_init_privileged(local_id)).unwrap_or(Ok(())).map_err(|error| error.to_string())
}

/// In a forked task, as the user, just before exec: `env` is the task's environment. The
/// plugins' changes so far (`init_post_opt` … `task_init_privileged`) are applied to it, it
/// becomes what `task_init` sees (`S_JOB_ENV`, `spank_getenv`: the task's own variables, such as
/// `SLURM_PROCID`, included) and changes, and what they leave is the task's environment.
pub fn task_init(local_id: u32, env: &mut Vec<(String, String)>) -> Result<(), String> {
    with_stack(|stack| {
        stack.apply_env_changes(env);
        stack.set_env(env.clone());
        stack.task_init(local_id)?;
        *env = stack.env();
        Ok::<(), SpankError>(())
    })
    .unwrap_or(Ok(()))
    .map_err(|error| error.to_string())
}

/// Once the task `pid` is forked (failures are logged: Slurm would drain the node).
pub fn task_post_fork(local_id: u32, pid: i32) {
    if let Some(Err(error)) = with_stack(|stack| stack.task_post_fork(local_id, pid)) {
        eprintln!("{} spank: {error}", drover_shared::now());
    }
}

/// Once the task is reaped with `wait_status` (failures are logged).
pub fn task_exit(local_id: u32, pid: i32, wait_status: i32) {
    if let Some(Err(error)) = with_stack(|stack| stack.task_exit(local_id, pid, wait_status)) {
        eprintln!("{} spank: {error}", drover_shared::now());
    }
}

/// `exit`, then the plugins are unloaded (failures are logged).
pub fn exit() {
    let stack = STACK.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(stack) = stack
        && let Err(error) = stack.exit()
    {
        eprintln!("{} spank: {error}", drover_shared::now());
    }
}

/// Whether `DROVER_PLUGSTACK` names a stack with at least one plugin line (read, not loaded):
/// without one no helper process is started.
pub fn has_plugins() -> bool {
    plugstack_has_plugins().is_some()
}

/// The stack file, when it has at least one plugin line.
fn plugstack_has_plugins() -> Option<PathBuf> {
    let plugstack = std::env::var_os(PLUGSTACK_ENV).map(PathBuf::from)?;
    PlugStack::read(&plugstack).ok().filter(|conf| !conf.entries.is_empty()).map(|_| plugstack)
}

/// In the slurmd and job_script helpers: every plugin line at `slurm_info` and above to stderr
/// (noded's or the supervisor's log).
fn log_to_stderr() {
    drover_spank_compat::set_log_sink(|level, message| {
        if level <= LogLevel::Info {
            node_line(&mut std::io::stderr(), level, message);
        }
    });
}

/// What the slurmd helper tells noded on its stdout once `init` ran: one line.
const SLURMD_READY: &str = "ready";
const SLURMD_NONE: &str = "none";

/// `drover-noded spank-slurmd` (started by noded, not by hand): the slurmd context. Loads the
/// plugins that define `slurm_spank_init` or `slurm_spank_slurmd_exit`, calls `init`, says
/// `ready` (or `none` without such plugins, or `error: <why>`) on stdout, then waits for its
/// stdin to close (noded stopping or dying) and calls `slurmd_exit`. Returns the exit status.
pub fn slurmd_main() -> i32 {
    log_to_stderr();
    let say = |line: &str| {
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    };
    let Some(plugstack) = plugstack_has_plugins() else {
        say(SLURMD_NONE);
        return 0;
    };
    let stack = match Stack::open(&plugstack, Context::Slurmd, &[]) {
        Ok(stack) => stack,
        Err(error) => {
            say(&format!("error: {error}"));
            return 1;
        }
    };
    for warning in stack.warnings() {
        eprintln!("{} spank: {warning}", drover_shared::now());
    }
    if stack.plugin_names().is_empty() {
        say(SLURMD_NONE);
        return 0;
    }
    if let Err(error) = stack.call(Hook::Init) {
        say(&format!("error: {error}"));
        return 1;
    }
    say(SLURMD_READY);
    // Until noded closes the pipe: it stopped, or died.
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
    match stack.call(Hook::SlurmdExit) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{} spank: {error}", drover_shared::now());
            1
        }
    }
}

/// The slurmd-context helper of a running noded ([`slurmd_main`]); dropping it closes the
/// helper's stdin, which makes it call `slurmd_exit`, and waits for it (a bounded time).
#[derive(Debug)]
pub struct SlurmdPlugins {
    child: Child,
}

/// How long noded waits for `slurmd_exit` when it stops.
const SLURMD_EXIT_WAIT: Duration = Duration::from_secs(30);

/// Why the slurmd context could not start (noded does not start either, as slurmd does not).
#[derive(Debug, thiserror::Error)]
pub enum SlurmdPluginsError {
    #[error("could not start the SPANK slurmd helper {exe}")]
    Spawn { exe: PathBuf, source: std::io::Error },
    #[error("SPANK plugins in the slurmd context: {0}")]
    Failed(String),
}

impl SlurmdPlugins {
    /// Runs `exe spank-slurmd` when `DROVER_PLUGSTACK` names a stack with plugins, and waits for
    /// its `init`: `Ok(None)` when no plugin has a slurmd hook. Call it after the supervisor
    /// launcher is forked (which must not inherit the helper's pipe, or the helper would outlive
    /// noded). The helper runs in its own process group, so a terminal's Ctrl-C reaches only
    /// noded, which then ends it in order.
    pub fn start(exe: &Path) -> Result<Option<SlurmdPlugins>, SlurmdPluginsError> {
        if plugstack_has_plugins().is_none() {
            return Ok(None);
        }
        let spawn_error = |source| SlurmdPluginsError::Spawn { exe: exe.to_owned(), source };
        let mut child = Command::new(exe)
            .arg("spank-slurmd")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .map_err(spawn_error)?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        }
        match line.trim_end() {
            SLURMD_READY => Ok(Some(SlurmdPlugins { child })),
            SLURMD_NONE => {
                drop(child.stdin.take());
                let _ = child.wait();
                Ok(None)
            }
            other => {
                drop(child.stdin.take());
                let status = child.wait();
                let reason = match other.strip_prefix("error: ") {
                    Some(reason) => reason.to_owned(),
                    None => format!("the helper ended without a word ({})", describe_status(status.ok())),
                };
                Err(SlurmdPluginsError::Failed(reason))
            }
        }
    }

    /// The helper's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SlurmdPlugins {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        match wait_bounded(&mut self.child, SLURMD_EXIT_WAIT) {
            Some(status) if status.success() => {}
            status => eprintln!(
                "{} spank: the slurmd-context plugins did not end cleanly ({})",
                drover_shared::now(),
                describe_status(status)
            ),
        }
    }
}

/// Waits for `child` at most `timeout`; kills it after that.
fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return None,
        }
    }
}

fn describe_status(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "no status".to_owned(),
        },
        None => "killed after the timeout, or lost".to_owned(),
    }
}

/// Which job_script hook to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobScript {
    Prolog,
    Epilog,
}

impl JobScript {
    fn word(self) -> &'static str {
        match self {
            JobScript::Prolog => "prolog",
            JobScript::Epilog => "epilog",
        }
    }
}

/// The job_script context, in the supervisor: runs `drover-noded spank-job-script <which>` as
/// root with exactly `env` (the prolog's or epilog's environment: it names the job, its uid and
/// gid, and carries the job-control variables and given options as `SPANK_*`) and
/// `DROVER_PLUGSTACK`, killing it after `timeout`. Its plugin lines go to this process's stderr
/// (the supervisor's log). Nothing runs when the stack has no plugin line; `Err` is why the
/// hook failed (Slurm drains the node then).
pub fn job_script(which: JobScript, env: &[(String, String)], timeout: Duration) -> Result<(), String> {
    let Some(plugstack) = plugstack_has_plugins() else { return Ok(()) };
    let exe = std::env::current_exe().map_err(|error| format!("SPANK job {}: no executable: {error}", which.word()))?;
    let mut command = Command::new(&exe);
    crate::sys::exec::close_descriptors_at_exec(&mut command);
    let mut child = command
        .args(["spank-job-script", which.word()])
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .env(PLUGSTACK_ENV, plugstack)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|error| format!("SPANK job {}: could not start {}: {error}", which.word(), exe.display()))?;
    let status = wait_bounded(&mut child, timeout);
    let mut said = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(4096).read_to_string(&mut said);
    }
    match status {
        Some(status) if status.success() => Ok(()),
        Some(_) if !said.trim().is_empty() => Err(said.lines().next().unwrap_or_default().to_owned()),
        status => Err(format!("SPANK job {}: {}", which.word(), describe_status(status))),
    }
}

/// `drover-noded spank-job-script prolog|epilog` (run by the supervisor, not by hand): loads the
/// plugins that define `slurm_spank_job_prolog` or `slurm_spank_job_epilog` in the job_script
/// context, with the job's id, uid and gid from `SLURM_JOB_ID`, `SLURM_JOB_UID` and
/// `SLURM_JOB_GID`, and calls the hook. On failure the reason is stdout's one line and the exit
/// status 1.
pub fn job_script_main(which: &str) -> i32 {
    log_to_stderr();
    let hook = match which {
        "prolog" => Hook::JobProlog,
        "epilog" => Hook::JobEpilog,
        _ => {
            println!("SPANK job script: unknown hook {which}");
            return 2;
        }
    };
    let Some(plugstack) = plugstack_has_plugins() else { return 0 };
    let number = |name: &str| std::env::var(name).ok().and_then(|value| value.parse::<u32>().ok());
    let (Some(job_id), Some(uid), Some(gid)) =
        (number("SLURM_JOB_ID"), number("SLURM_JOB_UID"), number("SLURM_JOB_GID"))
    else {
        println!("SPANK job {which}: SLURM_JOB_ID, SLURM_JOB_UID or SLURM_JOB_GID is missing");
        return 1;
    };
    let stack = match Stack::open(&plugstack, Context::JobScript, &[]) {
        Ok(stack) => stack,
        Err(error) => {
            println!("{error}");
            return 1;
        }
    };
    for warning in stack.warnings() {
        eprintln!("{} spank: {warning}", drover_shared::now());
    }
    stack.set_job(JobInfo { uid, gid, job_id, ..JobInfo::default() });
    match stack.call(hook) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{} spank: {error}", drover_shared::now());
            println!("{error}");
            1
        }
    }
}
