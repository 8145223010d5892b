//! SPANK plugins in the job's supervisor and in the step runner (Slurm's remote context, run
//! where slurmstepd runs them): the supervisor (a batch job's one task) and the step runner (an
//! srun step's tasks on this node) call these functions at the points Slurm does, and they drive
//! the process's one [`drover_spank_compat::Stack`]. noded itself never loads a plugin.
//!
//! The stack file comes from `DROVER_PLUGSTACK` in the process's environment (noded sets it
//! from the config's `plugstack` key before it starts any thread, and supervisors and step
//! runners inherit it); unset or a missing file means no plugins, and every function here is
//! then a no-op.
//!
//! Order: [`start`] or [`start_step`] (`init`, the options that travelled in the job's or step's
//! environment, `init_post_opt`, then `user_init` with the user's effective uid) before the
//! tasks are forked; in each forked task [`task_init_privileged`] as root, then, as the user,
//! [`task_init`], which also applies the plugins' `spank_setenv`/`spank_unsetenv` to the task's
//! environment; in the supervisor or runner [`task_post_fork`] per task, [`task_exit`] when a
//! task is reaped, [`exit`] at the end. A plugin that crashes (caught by the crate's guard) or a
//! required plugin that fails fails the job or step with the reason; noded and other jobs are
//! untouched.
//!
//! Messages (Slurm's split): in the supervisor or runner every plugin line goes to the node-side
//! log (`supervisor.log`, or noded's log for a step runner), and for a step [`log_to_user`] also
//! sends `slurm_error` and `slurm_spank_log` lines to srun's stderr. In a forked task
//! [`log_into_task`] sends `slurm_error` (as `slurmstepd: error: …`) and `slurm_spank_log` lines
//! to the task's stderr and to the node-side log, and `slurm_info` and the lower levels only to
//! the node-side log, never into the job's output.

use drover_shared::proto::node::{LaunchRequest, StepLaunch};
use drover_spank_compat::{Context, JobInfo, LogLevel, STEP_ID_BATCH, SpankError, Stack};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

/// In a forked task, as the user, just before exec: `task_init`, then the plugins' changes
/// to the step environment applied to `env`.
pub fn task_init(local_id: u32, env: &mut Vec<(String, String)>) -> Result<(), String> {
    with_stack(|stack| {
        stack.task_init(local_id)?;
        stack.apply_env_changes(env);
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
