//! SPANK plugins in the job's supervisor (Slurm's remote context, run where slurmstepd runs
//! them): the supervisor calls these functions at the points Slurm does, and they drive the
//! process's one [`drover_spank_compat::Stack`]. noded itself never loads a plugin.
//!
//! The stack file comes from `DROVER_PLUGSTACK` in the supervisor's environment (noded sets it
//! from the config's `plugstack` key before it starts any thread, and supervisors inherit it);
//! unset or a missing file means no plugins, and every function here is then a no-op.
//!
//! Order: [`start`] (`init`, the options that travelled in the job's environment,
//! `init_post_opt`, then `user_init` with the user's effective uid) before the job's fork;
//! in the forked job [`task_init_privileged`] as root, then, as the user, [`task_init`], which
//! also applies the plugins' `spank_setenv`/`spank_unsetenv` to the script's environment; in the
//! supervisor [`task_post_fork`], [`task_exit`] when the batch shell is reaped, [`exit`] at the end.
//! A plugin that crashes (caught by the crate's guard) or a required plugin that fails fails
//! the job with the reason as its `LaunchFailed` message; noded and other jobs are untouched.

use drover_shared::proto::node::LaunchRequest;
use drover_spank_compat::{Context, JobInfo, STEP_ID_BATCH, SpankError, Stack};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The variable naming the plugin stack file.
pub const PLUGSTACK_ENV: &str = "DROVER_PLUGSTACK";

/// The supervisor's stack; `None` without plugins. A `Mutex` because the supervisor's loop runs
/// beside its helper threads; plugins run only from the thread holding it.
static STACK: Mutex<Option<Stack>> = Mutex::new(None);

fn with_stack<T>(f: impl FnOnce(&Stack) -> T) -> Option<T> {
    STACK.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref().map(f)
}

/// What plugins see of a batch job.
fn job_info(launch: &LaunchRequest, script: &Path) -> JobInfo {
    let spec = &launch.spec;
    let groups = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(launch.uid))
        .ok()
        .flatten()
        .and_then(|user| std::ffi::CString::new(user.name).ok())
        .and_then(|name| nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(launch.gid)).ok())
        .map_or_else(Vec::new, |groups| groups.into_iter().map(nix::unistd::Gid::as_raw).collect());
    let mut argv = vec![script.display().to_string()];
    argv.extend(spec.script_args.iter().cloned());
    JobInfo {
        uid: launch.uid,
        gid: launch.gid,
        groups,
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

/// Loads the plugins and runs everything before the fork. `script` is the path the job runs.
/// Call it with the supervisor still single-threaded.
pub fn start(launch: &LaunchRequest, script: &Path) -> Result<(), SpankError> {
    let Some(plugstack) = std::env::var_os(PLUGSTACK_ENV).map(PathBuf::from) else { return Ok(()) };
    let stack = Stack::open(&plugstack, Context::Remote, &[])?;
    for warning in stack.warnings() {
        eprintln!("{} spank: {warning}", drover_shared::now());
    }
    if stack.plugin_names().is_empty() {
        return Ok(());
    }
    stack.set_job(job_info(launch, script));
    let started = stack.remote_init().and_then(|()| stack.user_init());
    *STACK.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stack);
    started
}

/// In the forked job, as root, before it becomes the user; `Err` is the job's setup failure.
pub fn task_init_privileged() -> Result<(), String> {
    with_stack(|stack| stack.task_init_privileged(0)).unwrap_or(Ok(())).map_err(|error| error.to_string())
}

/// In the forked job, as the user, just before exec: `task_init`, then the plugins' changes
/// to the step environment applied to `env`.
pub fn task_init(env: &mut Vec<(String, String)>) -> Result<(), String> {
    with_stack(|stack| {
        stack.task_init(0)?;
        stack.apply_env_changes(env);
        Ok::<(), SpankError>(())
    })
    .unwrap_or(Ok(()))
    .map_err(|error| error.to_string())
}

/// In the supervisor once the job is forked (failures are logged: Slurm would drain the node).
pub fn task_post_fork(pid: i32) {
    if let Some(Err(error)) = with_stack(|stack| stack.task_post_fork(0, pid)) {
        eprintln!("{} spank: {error}", drover_shared::now());
    }
}

/// In the supervisor once the batch shell is reaped with `wait_status` (failures are logged).
pub fn task_exit(pid: i32, wait_status: i32) {
    if let Some(Err(error)) = with_stack(|stack| stack.task_exit(0, pid, wait_status)) {
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
