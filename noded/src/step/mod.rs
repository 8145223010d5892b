//! srun steps on this node (Slurm's slurmstepd for a numbered step): noded writes the step's
//! launch into `steps/<job>.<step>/` under its state directory with the job's isolation, and
//! starts `drover-noded step --step-dir <dir>` ([`run::main`]), which forks this node's tasks as
//! the job's user inside the job's cgroups (`job_<id>/step_<n>`), streams their output to srun
//! and sends srun their exit statuses.
//!
//! Containment: the runner moves itself into `job_<id>/step_<n>` below the SAME job cgroup as the
//! batch script (its memory limit, cpuset, pids limit and GPU device program) before it forks a
//! task, so every task is created there (each fork counts against the job's pids limit) and the
//! runner dies with the job's `cgroup.kill`. On the batch host that cgroup is the supervisor's; on
//! the job's other nodes the first step creates it with the limits noded computes for the job
//! there (the same [`NodeIsolation::plan`] a launch gets), and the last step to end removes it.
//! noded reaps each runner and removes what a killed one left (`run::clean_up_after`); a
//! cancelled step still there after its grace time has its whole cgroup killed, runner included.
//! The runner and its tasks inherit no descriptor of noded's but stdio; the runner's stdout and
//! stderr are noded's, so what it logs (its failures, the SPANK plugins' lines) is in the node's
//! log.
//!
//! | file | written by | content |
//! |---|---|---|
//! | `launch` | noded | postcard [`StepLaunch`], 0600 |
//! | `isolation` | noded | the job's [`JobIsolation`](crate::isolation::JobIsolation), when cgroups are used |
//! | `owns_job_cgroup` | noded | present on a node that is not the batch host |
//! | `tasks` | runner | task pids, one per line (each task leads its own process group) |
//!
//! When its tasks are reaped, the runner spools their usage (`getrusage(RUSAGE_CHILDREN)`: CPU
//! times, the largest RSS) as a postcard [`JobUsage`] in `<state>/step_usage/<job>.<step>`;
//! noded's rescan sends it to ctld ([`take_spooled_usage`]) and deletes it.

mod log;
mod run;
mod task_scripts;

use crate::isolation::{self, NodeIsolation};
use drover_shared::job::JobId;
use drover_shared::node::GpuDevice;
use drover_shared::proto::node::{JobUsage, StepLaunch};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

pub use run::main;

/// Why a step could not be started here.
#[derive(Debug, Error)]
pub enum StepError {
    #[error("could not write {path}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("could not read {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("malformed {path}")]
    Malformed { path: PathBuf },
    #[error("could not start the step runner")]
    Spawn(#[source] std::io::Error),
    #[error("{0}")]
    Refused(String),
}

const LAUNCH: &str = "launch";
const OWNS_JOB_CGROUP: &str = "owns_job_cgroup";
const TASKS: &str = "tasks";
/// Below the state directory: usage of ended steps, until noded has sent it.
const USAGE_SPOOL: &str = "step_usage";

/// Writes `usage` of step `step_id` into the spool, atomically (a temporary file renamed).
pub(crate) fn spool_usage(state_dir: &Path, step_id: u32, usage: &JobUsage) -> std::io::Result<()> {
    let spool = state_dir.join(USAGE_SPOOL);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&spool)?;
    let bytes = postcard::to_allocvec(usage).map_err(std::io::Error::other)?;
    let name = format!("{}.{step_id}", usage.job_id);
    let temporary = spool.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, spool.join(name))
}

/// Every spooled step usage, removed from the spool: `(step id, usage)`. Unreadable files are
/// dropped (logged).
pub fn take_spooled_usage(state_dir: &Path) -> Vec<(u32, JobUsage)> {
    let spool = state_dir.join(USAGE_SPOOL);
    let Ok(entries) = std::fs::read_dir(&spool) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let step_id = name.split_once('.').and_then(|(_, step)| step.parse::<u32>().ok());
        let usage = std::fs::read(entry.path()).ok().and_then(|bytes| postcard::from_bytes::<JobUsage>(&bytes).ok());
        match (step_id, usage) {
            (Some(step_id), Some(usage)) => found.push((step_id, usage)),
            _ => tracing::warn!(file = %entry.path().display(), "unreadable step usage; dropped"),
        }
        let _ = std::fs::remove_file(entry.path());
    }
    found
}

/// `steps/<job>.<step>` below the state directory.
pub fn step_dir(state_dir: &Path, job_id: JobId, step_id: u32) -> PathBuf {
    state_dir.join("steps").join(format!("{job_id}.{step_id}"))
}

/// Prepares the step directory and starts the runner, detached in its own process group; a
/// thread reaps it.
pub fn launch(
    exe: &Path,
    state_dir: &Path,
    node_isolation: &NodeIsolation,
    gpus: &[GpuDevice],
    oci: Option<&drover_shared::config::oci::OciConfig>,
    request: &StepLaunch,
) -> Result<u32, StepError> {
    let job_id = request.job.job_id;
    let dir = step_dir(state_dir, job_id, request.step_id);
    let write_error = |path: &Path| {
        let path = path.to_owned();
        move |source| StepError::Write { path, source }
    };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(write_error(&dir))?;
    let launch_path = dir.join(LAUNCH);
    let bytes = postcard::to_allocvec(request).map_err(|_| StepError::Malformed { path: launch_path.clone() })?;
    write_private(&launch_path, &bytes)?;
    let run = drover_shared::proto::node::JobRun { job_id, run: request.job.restart_count };
    let job_dir = crate::jobs::job_dir(state_dir, run);
    let plan = match isolation::read(&job_dir) {
        Ok(Some(plan)) => Some(plan),
        Err(source) => return Err(StepError::Read { path: job_dir.join(isolation::ISOLATION_FILE), source }),
        // The batch host of a job noded gave no isolation: none to give its steps either (a step
        // never runs unconfined where the node confines jobs).
        Ok(None) if job_dir.exists() => {
            if node_isolation.cgroups.is_some() {
                return Err(StepError::Refused(format!("job {job_id} has no isolation record on this node")));
            }
            None
        }
        Ok(None) => {
            let plan = node_isolation.plan(&request.job, gpus, &[]).map_err(StepError::Refused)?;
            if plan.is_some() {
                write_private(&dir.join(OWNS_JOB_CGROUP), b"")?;
            }
            plan
        }
    };
    if let Some(plan) = &plan {
        isolation::write(&dir, plan).map_err(write_error(&dir.join(isolation::ISOLATION_FILE)))?;
    }
    // A container step: its plan, or why it cannot run (the runner tells srun).
    if let Some(bundle) = drover_shared::job::container_bundle(&request.environment) {
        let job = &request.job;
        let node = request.layout.nodes.get(request.node_index as usize).map_or("", String::as_str);
        let owner = crate::container::Owner {
            job_id,
            step: request.step_id.to_string(),
            node,
            user: &job.user,
            uid: job.uid,
            gid: job.gid,
        };
        let devices = node_isolation.device_files(&job.gpus);
        // The user reaches the step's spool directory through `steps/` (traversable, not listable).
        if let Some(steps) = dir.parent() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(steps, std::fs::Permissions::from_mode(0o711)).map_err(write_error(steps))?;
        }
        let plan = crate::container::plan(oci, bundle, &dir, devices, owner, None);
        crate::container::write(&dir, &plan).map_err(write_error(&dir.join(crate::container::PLAN_FILE)))?;
    }
    let mut command = std::process::Command::new(exe);
    command
        .arg("step")
        .arg("--step-dir")
        .arg(&dir)
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::inherit())
        .process_group(0);
    crate::sys::exec::close_descriptors_at_exec(&mut command);
    let mut child = command.spawn().map_err(StepError::Spawn)?;
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = child.wait();
        // A runner that was killed (with its job's cgroup, or for memory) left its cgroups.
        run::clean_up_after(&dir);
    });
    Ok(pid)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), StepError> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| StepError::Write { path: path.to_owned(), source })?;
    file.write_all(bytes).map_err(|source| StepError::Write { path: path.to_owned(), source })
}

/// The task pids of a running step (empty when it ended or has not forked yet).
fn task_pids(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join(TASKS)).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Sends `signal` to every task's process group of the step; `None` cancels: SIGTERM and SIGCONT,
/// then SIGKILL after `kill_wait` seconds (from a thread, so the caller does not wait). SIGTERM
/// goes first so that a stopped task (one held for a debugger, `srun --debugger-test`) has it
/// pending when SIGCONT wakes it, and ends before it does anything else.
pub fn signal(
    state_dir: &Path,
    job_id: JobId,
    step_id: u32,
    signal: Option<i32>,
    kill_wait: u32,
) -> Result<(), StepError> {
    let dir = step_dir(state_dir, job_id, step_id);
    if !dir.exists() {
        return Err(StepError::Refused(format!("step {job_id}.{step_id} does not run here")));
    }
    let pids = task_pids(&dir);
    let send = |pids: &[i32], sig: Signal| {
        for &pid in pids {
            let _ = nix::sys::signal::killpg(Pid::from_raw(pid), sig);
        }
    };
    match signal {
        Some(number) => {
            let sig = Signal::try_from(number).map_err(|_| StepError::Refused(format!("invalid signal {number}")))?;
            send(&pids, sig);
        }
        None => {
            send(&pids, Signal::SIGTERM);
            send(&pids, Signal::SIGCONT);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(u64::from(kill_wait)));
                if dir.exists() {
                    send(&pids, Signal::SIGKILL);
                    // Whatever of the step is still there, runner included: the tasks it may
                    // still be forking, those that left their process groups.
                    run::kill_step(&dir);
                }
            });
        }
    }
    Ok(())
}
