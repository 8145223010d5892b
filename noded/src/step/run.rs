//! The step runner: `drover-noded step --step-dir D`. Connects to srun and proves the step token,
//! moves itself into `job_<id>/step_<n>` (every hierarchy the job has), forks this node's tasks
//! there (each its own process group, turned into the job's user before exec), relays their
//! stdout and stderr, sends each task's wait status once its output is drained, then goes back
//! to the cgroups it was started in, kills what is left in the step cgroup and removes it (and
//! the job cgroup on a node where the step created it, once no step is left).
//!
//! Living in the step cgroup puts the runner's forks under the job's pids limit and its memory
//! under the job's, and has it die with the job: the job's `cgroup.kill` (the supervisor's at the
//! job's end, noded's when a cancelled step outlives its grace time) takes the runner with its
//! tasks. A runner that dies so leaves its cgroups to noded, which removes them once it reaped
//! the runner ([`clean_up_after`]).
//!
//! The node's tasks start together, as Slurm's: the runner forks every one first, each held at a
//! gate pipe before it does anything the job can see, runs the plugins' `task_post_fork` for each,
//! then opens the gate, and they all set themselves up (process group or session, limits, SPANK
//! `task_init_privileged`, the job's user, SPANK `task_init`, environment) and exec at once
//! ([`crate::sys::exec::fork_task`]); a plugin's `task_init` may rely on the node's other tasks
//! existing (pyxis: the first task's starts the container the others join). Each task's report
//! pipe (close-on-exec) tells the runner when it exec'd, or why its setup or exec failed.
//!
//! Under `srun --debugger-test` (the launch's `parallel_debug`, Slurm's parallel debug launch)
//! each task stops itself right before its exec; the runner waits until every task stopped (or
//! failed), sends srun each one's pid ([`stepio::PID`]) and relays as usual: the tasks stay
//! stopped until a debugger continues them or the step ends (noded's SIGTERM, then SIGCONT).
//! With `--slurmd-debug` the runner tells srun what it does ([`super::log`]).
//!
//! All tasks are forked before the first thread starts, so the forked children run in a
//! single-threaded copy of the runner. Their output is relayed by one `poll` loop on the main
//! thread (a thread per pipe would count against the job's pids limit); srun's input has one
//! thread.

use super::log::{LineSink, StepLog, describe_status};
use super::{LAUNCH, OWNS_JOB_CGROUP, StepError, TASKS, task_scripts};
use crate::cgroup::{Controller, JobCgroup};
use crate::isolation::{self, JobIsolation};
use crate::sys::exec::{HeldTask, TaskGate, TaskPlugins, TaskSetup, TaskStdio};
use drover_shared::proto::node::StepLaunch;
use drover_shared::proto::stepio;
use nix::unistd::{Gid, Pid, Uid, User};
use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a step on the batch host waits for the supervisor to create the job's cgroups.
const JOB_CGROUP_WAIT: Duration = Duration::from_secs(10);

/// The runner's entry point; returns the process exit code.
pub fn main(dir: &Path) -> i32 {
    match run(dir) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{} step runner: {error:#}", drover_shared::now());
            1
        }
    }
}

fn read_launch(dir: &Path) -> Result<StepLaunch, StepError> {
    let path = dir.join(LAUNCH);
    let bytes = std::fs::read(&path).map_err(|source| StepError::Read { path: path.clone(), source })?;
    postcard::from_bytes(&bytes).map_err(|_| StepError::Malformed { path })
}

fn connect(address: &str) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, format!("no address for {address}"));
    for addr in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The step's cgroup directories, one per hierarchy, below the job's.
fn step_cgroups(plan: &JobIsolation, step_id: u32) -> (Vec<PathBuf>, Vec<(PathBuf, bool)>) {
    let mut job_dirs: Vec<(PathBuf, bool)> = plan.cgroup.unified.iter().map(|d| (d.clone(), false)).collect();
    for (controller, is_cpuset) in
        [(&plan.cgroup.memory, false), (&plan.cgroup.cpuset, true), (&plan.cgroup.pids, false)]
    {
        let entry = match controller {
            Some(Controller::V2(dir)) => (dir.clone(), false),
            Some(Controller::V1(dir)) => (dir.clone(), is_cpuset),
            None => continue,
        };
        if !job_dirs.iter().any(|(d, _)| *d == entry.0) {
            job_dirs.push(entry);
        }
    }
    let steps = job_dirs.iter().map(|(d, _)| d.join(format!("step_{step_id}"))).collect();
    (steps, job_dirs)
}

fn set_up_cgroups(dir: &Path, plan: &JobIsolation, launch: &StepLaunch) -> Result<Vec<PathBuf>, StepError> {
    let job_id = launch.job.job_id;
    let refused = |e: crate::cgroup::CgroupError| StepError::Refused(format!("{:#}", anyhow::Error::new(e)));
    let (steps, job_dirs) = step_cgroups(plan, launch.step_id);
    if dir.join(OWNS_JOB_CGROUP).exists() {
        // Another step of the job here may be removing the job's cgroups as this one creates
        // its own below them: create both again until the step's exist.
        for attempt in 0.. {
            if !job_dirs.iter().all(|(d, _)| d.exists()) {
                JobCgroup::create(&plan.cgroup, job_id, &plan.limits).map_err(refused)?;
            }
            match create_step_dirs(&steps, &job_dirs) {
                Ok(()) => return Ok(steps),
                Err(error) if attempt >= 5 => return Err(refused(error)),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    } else {
        // The batch host: the job's supervisor creates the job's cgroups before its script
        // runs, which may be just after a step of a fresh allocation arrives.
        let deadline = std::time::Instant::now() + JOB_CGROUP_WAIT;
        while !job_dirs.iter().all(|(d, _)| d.exists()) {
            if std::time::Instant::now() >= deadline {
                return Err(StepError::Refused(format!("job {job_id}'s cgroups do not exist on this node")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    create_step_dirs(&steps, &job_dirs).map_err(refused)?;
    Ok(steps)
}

fn create_step_dirs(steps: &[PathBuf], job_dirs: &[(PathBuf, bool)]) -> Result<(), crate::cgroup::CgroupError> {
    for (step, (_, v1_cpuset)) in steps.iter().zip(job_dirs) {
        if *v1_cpuset {
            crate::cgroup::job::create_v1_dir(step)?;
        } else {
            crate::cgroup::job::create_dir(step)?;
        }
    }
    Ok(())
}

/// The runner's own cgroup (noded's) in each hierarchy of `plan`, in [`step_cgroups`]' order;
/// `None` where it cannot be told.
fn own_cgroups(plan: &JobIsolation) -> Vec<Option<PathBuf>> {
    let layout = crate::cgroup::Layout::detect().ok();
    let unified = layout.as_ref().and_then(|layout| layout.unified.clone());
    let mut seen: Vec<&PathBuf> = Vec::new();
    let mut own = Vec::new();
    if let Some(dir) = &plan.cgroup.unified {
        seen.push(dir);
        own.push(unified.clone());
    }
    for (name, controller) in
        [("memory", &plan.cgroup.memory), ("cpuset", &plan.cgroup.cpuset), ("pids", &plan.cgroup.pids)]
    {
        let (dir, home) = match controller {
            Some(Controller::V2(dir)) => (dir, unified.clone()),
            Some(Controller::V1(dir)) => (dir, layout.as_ref().and_then(|layout| layout.v1.get(name).cloned())),
            None => continue,
        };
        if !seen.contains(&dir) {
            seen.push(dir);
            own.push(home);
        }
    }
    own
}

/// Moves this process into each of `dirs` (all its threads: it has one when entering).
fn move_into(dirs: impl IntoIterator<Item = PathBuf>) -> Result<(), crate::cgroup::CgroupError> {
    for dir in dirs {
        crate::cgroup::write(&dir.join("cgroup.procs"), "0")?;
    }
    Ok(())
}

/// Kills every process in the step's cgroups: `cgroup.kill` where the hierarchy has it, and a
/// SIGKILL to each listed process. Never call it from inside them.
fn kill_step_cgroups(steps: &[PathBuf]) {
    for step in steps {
        let _ = std::fs::write(step.join("cgroup.kill"), "1");
        let procs = std::fs::read_to_string(step.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Kills the processes of the step whose directory is `dir` (a cancelled step past its grace
/// time): the runner and every task, wherever their process groups are.
pub(super) fn kill_step(dir: &Path) {
    if let (Ok(launch), Ok(Some(plan))) = (read_launch(dir), isolation::read(dir)) {
        kill_step_cgroups(&step_cgroups(&plan, launch.step_id).0);
    }
}

/// After the runner of step directory `dir` was reaped: if it did not get to clean up (it was
/// killed), kills what is left of the step, removes its cgroups and the directory.
pub(super) fn clean_up_after(dir: &Path) {
    if !dir.exists() {
        return;
    }
    if let (Ok(launch), Ok(Some(plan))) = (read_launch(dir), isolation::read(dir)) {
        tear_down_cgroups(dir, &plan, &step_cgroups(&plan, launch.step_id).0);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Kills what is left in the step's cgroups and removes them; where the step created the job's
/// cgroups, removes those too when no other step uses them. Called from outside those cgroups.
fn tear_down_cgroups(dir: &Path, plan: &JobIsolation, steps: &[PathBuf]) {
    for step in steps {
        for _ in 0..200 {
            kill_step_cgroups(std::slice::from_ref(step));
            match std::fs::remove_dir(step) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => std::thread::sleep(Duration::from_millis(20)),
                _ => break,
            }
        }
    }
    if dir.join(OWNS_JOB_CGROUP).exists() {
        let (_, job_dirs) = step_cgroups(plan, 0);
        for (job_dir, _) in job_dirs {
            let busy = std::fs::read_dir(&job_dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with("step_") && e.file_name() != "step_batch")
                })
                .unwrap_or(false);
            if !busy {
                let _ = std::fs::remove_dir(job_dir.join(crate::cgroup::job::BATCH_STEP));
                let _ = std::fs::remove_dir(&job_dir);
            }
        }
    }
}

/// The job's user: uid, gid and supplementary groups, resolved before any fork.
struct Identity {
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

fn identity(launch: &StepLaunch) -> Result<Option<Identity>, StepError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let uid = Uid::from_raw(launch.job.uid);
    let gid = Gid::from_raw(launch.job.gid);
    let user = User::from_uid(uid)
        .ok()
        .flatten()
        .ok_or_else(|| StepError::Refused(format!("user id {} is not known on this node", launch.job.uid)))?;
    let name = CString::new(user.name.as_bytes()).map_err(|_| StepError::Refused("user name with NUL".into()))?;
    let groups = nix::unistd::getgrouplist(&name, gid).unwrap_or_else(|_| vec![gid]);
    Ok(Some(Identity { uid, gid, groups }))
}

/// The environment of task `task` (global id) that is the `local`-th on this node.
fn task_environment(launch: &StepLaunch, plan: Option<&JobIsolation>, task: u32, local: u32) -> Vec<(String, String)> {
    let layout = &launch.layout;
    let node = launch.node_index as usize;
    let mut env: Vec<(String, String)> = launch.environment.clone();
    // `srun -E`: the counts srun itself had (the job's) stay.
    let kept: &[&str] = if launch.preserve_env {
        &["SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "SLURM_NPROCS"]
    } else {
        &[]
    };
    let mut set = |name: &str, value: String| {
        if kept.contains(&name) && env.iter().any(|(n, _)| n == name) {
            return;
        }
        env.retain(|(n, _)| n != name);
        env.push((name.to_owned(), value));
    };
    let nodelist = drover_shared::hostlist::compress(&layout.nodes);
    let job_nodelist = drover_shared::hostlist::compress(&launch.job.nodes);
    let here = layout.nodes.get(node).cloned().unwrap_or_default();
    let tasks_here: Vec<String> =
        layout.tasks.get(node).map(|t| t.iter().map(u32::to_string).collect()).unwrap_or_default();
    set("SLURM_JOB_ID", layout.job_id.to_string());
    set("SLURM_JOBID", layout.job_id.to_string());
    set("SLURM_STEP_ID", layout.step_id.to_string());
    set("SLURM_STEPID", layout.step_id.to_string());
    set("SLURM_PROCID", task.to_string());
    set("SLURM_LOCALID", local.to_string());
    set("SLURM_NODEID", launch.node_index.to_string());
    set("SLURM_NTASKS", layout.ntasks.to_string());
    set("SLURM_NPROCS", layout.ntasks.to_string());
    set("SLURM_STEP_NUM_TASKS", layout.ntasks.to_string());
    set("SLURM_NNODES", layout.nodes.len().to_string());
    set("SLURM_STEP_NUM_NODES", layout.nodes.len().to_string());
    set("SLURM_STEP_NODELIST", nodelist.clone());
    set("SLURM_NODELIST", nodelist);
    set("SLURM_JOB_NODELIST", job_nodelist);
    set("SLURM_JOB_NUM_NODES", launch.job.nodes.len().to_string());
    set("SLURM_TASKS_PER_NODE", layout.tasks_per_node_text());
    set("SLURM_STEP_TASKS_PER_NODE", layout.tasks_per_node_text());
    set("SLURM_CPUS_PER_TASK", layout.cpus_per_task.to_string());
    set("SLURM_GTIDS", tasks_here.join(","));
    set("SLURMD_NODENAME", here.clone());
    set("SLURM_TOPOLOGY_ADDR", here);
    set("SLURM_TOPOLOGY_ADDR_PATTERN", "node".to_owned());
    set("SLURM_CPUS_ON_NODE", launch.job.cpus_on_node.to_string());
    // Where srun listens (`host:port`, `[v6]:port`): the host is the address srun picked on its
    // node, which Slurm also names the launch node's address.
    if let Some((host, port)) = launch.srun_address.rsplit_once(':') {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        set("SLURM_SRUN_COMM_HOST", host.to_owned());
        set("SLURM_SRUN_COMM_PORT", port.to_owned());
        set("SLURM_LAUNCH_NODE_IPADDR", host.to_owned());
    }
    set("SLURM_CLUSTER_NAME", launch.job.cluster_name.clone());
    set("SLURM_JOB_USER", launch.job.user.clone());
    set("SLURM_JOB_UID", launch.job.uid.to_string());
    set("SLURM_JOB_ACCOUNT", launch.job.account.clone());
    set("SLURM_JOB_PARTITION", launch.job.partition.clone());
    set("DROVER_SOCKET", launch.job.ctld_socket.clone());
    if !launch.job.gpus.is_empty() {
        let indices: Vec<String> = launch.job.gpus.iter().map(u32::to_string).collect();
        let visible = plan.and_then(|p| p.cuda_visible_devices.clone()).unwrap_or_else(|| indices.join(","));
        set("SLURM_STEP_GPUS", indices.join(","));
        set("SLURM_JOB_GPUS", indices.join(","));
        set("GPU_DEVICE_ORDINAL", visible.clone());
        set("CUDA_VISIBLE_DEVICES", visible);
    }
    env
}

/// A task forked and held at the gate, with the runner's ends of its stdin, stdout and stderr
/// pipes (`None` for the task on the pseudo-terminal, whose master the runner holds).
struct ForkedTask {
    held: HeldTask,
    pipes: Option<(File, File, File)>,
}

/// Forks one task, held at `gate` until all of the node's are forked; once the gate opens it
/// takes its own process group (or session, on the pseudo-terminal), becomes the job's user and
/// execs. It is forked in the step cgroups the runner lives in.
fn fork_task(
    launch: &StepLaunch,
    env: Vec<(String, String)>,
    identity: Option<&Identity>,
    terminal: Option<&OwnedFd>,
    plugins: Option<TaskPlugins>,
    container: Option<&Result<crate::container::ContainerPlan, String>>,
    gate: &mut TaskGate,
) -> std::io::Result<ForkedTask> {
    let argv: Vec<String> = match container {
        None => {
            let program = launch.argv.first().cloned().unwrap_or_default();
            std::iter::once(program).chain(launch.argv.iter().skip(1).cloned()).collect()
        }
        Some(Err(reason)) => return Err(std::io::Error::other(reason.clone())),
        // `drover-noded container --plan … -- ARGV`, which runs ARGV in the container.
        Some(Ok(plan)) => crate::container::command_line(&std::env::current_exe()?, plan, &launch.argv),
    };
    let argv = argv
        .into_iter()
        .map(CString::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| std::io::Error::other("command line with NUL"))?;
    // The environment is installed in the child with its pid (`SLURM_TASK_PID`), then `execvp`
    // searches the task's `PATH`.
    let environment = crate::sys::exec::TaskEnvironment::new(&env)?;
    let (stdio, pipes) = match terminal {
        Some(slave) => {
            (TaskStdio { stdin: slave.try_clone()?, stdout: slave.try_clone()?, stderr: slave.try_clone()? }, None)
        }
        None => {
            let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
            let (stdin, input) = pipe()?;
            let (output, stdout) = pipe()?;
            let (errors, stderr) = pipe()?;
            (TaskStdio { stdin, stdout, stderr }, Some((File::from(input), File::from(output), File::from(errors))))
        }
    };
    // The working directory is entered after the privilege drop, so a user cannot start a task
    // in a directory only root may reach.
    let work_dir =
        CString::new(launch.work_dir.as_bytes()).map_err(|_| std::io::Error::other("working directory with NUL"))?;
    let setup = TaskSetup {
        on_terminal: terminal.is_some(),
        identity: identity.map(|i| (i.uid, i.gid, i.groups.clone())),
        work_dir,
        umask: launch.job.spec.umask,
        rlimits: crate::sys::exec::capped_rlimits(&launch.rlimits),
        environment,
        plugins,
        stop_before_exec: launch.parallel_debug,
    };
    let held = crate::sys::exec::fork_task(setup, stdio, &argv[0], &argv, gate)?;
    Ok(ForkedTask { held, pipes })
}

type Sink = Arc<Mutex<TcpStream>>;

/// Where each task's input goes: its stdin pipe, or task 0's pseudo-terminal master.
type Inputs = Arc<Mutex<HashMap<u32, Box<dyn std::io::Write + Send>>>>;

/// Reads srun's [`stepio::STDIN`] frames and writes them to the tasks; an empty frame closes
/// the task's input (end of file).
fn forward_input(mut stream: TcpStream, inputs: &Inputs) {
    while let Ok(Some((kind, task, data))) = stepio::read_frame(&mut stream) {
        if kind != stepio::STDIN {
            continue;
        }
        let Ok(mut map) = inputs.lock() else { return };
        let targets: Vec<u32> = if task == stepio::ALL_TASKS { map.keys().copied().collect() } else { vec![task] };
        for target in targets {
            if data.is_empty() {
                map.remove(&target);
            } else if let Some(input) = map.get_mut(&target)
                && input.write_all(&data).and_then(|()| input.flush()).is_err()
            {
                map.remove(&target);
            }
        }
    }
}

fn send(sink: &Sink, kind: u8, task: u32, data: &[u8]) {
    if let Ok(mut stream) = sink.lock() {
        let _ = stepio::write_frame(&mut *stream, kind, task, data);
    }
}

/// How often the relay looks for tasks that ended while others still write.
const REAP_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// Relays the tasks' output to srun until every source has ended: `(kind, task, pipe or
/// terminal master)`. One `poll` loop; a terminal master whose slave closed reads EIO, which
/// ends it like end of file. A task whose output has ended and that exited while other tasks
/// of this node still run is reaped and its exit sent at once (srun's `-K` and `-W` act on the
/// first exits); the last ones are left to the caller, which spools the usage first.
fn relay_all(
    sink: &Sink,
    mut sources: Vec<(u8, u32, File)>,
    running: &mut Vec<(u32, Pid)>,
    tasks: &[u32],
    log: &StepLog,
) {
    let mut buf = vec![0u8; 64 * 1024];
    while !sources.is_empty() {
        reap_early(sink, &sources, running, tasks, log);
        let fds: Vec<_> = sources.iter().map(|(_, _, file)| file.as_fd()).collect();
        let wait = (running.len() > 1).then_some(REAP_EVERY);
        let Ok(ready) = stepio::poll_readable(&fds, wait) else { return };
        let mut ended = Vec::new();
        for (index, _) in ready.iter().enumerate().filter(|(_, ready)| **ready) {
            let (kind, task, file) = &mut sources[index];
            match file.read(&mut buf) {
                Ok(0) => ended.push(index),
                Ok(n) => send(sink, *kind, *task, &buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => ended.push(index),
            }
        }
        for index in ended.into_iter().rev() {
            sources.swap_remove(index);
        }
    }
}

/// Sends the exit of each task whose output has ended and that has exited, as long as another
/// task of the step is left running here.
fn reap_early(sink: &Sink, sources: &[(u8, u32, File)], running: &mut Vec<(u32, Pid)>, tasks: &[u32], log: &StepLog) {
    let mut index = 0;
    while index < running.len() && running.len() > 1 {
        let (task, pid) = running[index];
        let writing = sources.iter().any(|(_, t, _)| *t == task);
        if !writing && let Ok(Some(status)) = crate::sys::process::wait_pid(pid, false) {
            task_exited(tasks, task, pid, status);
            log.debug(format_args!("task {task} (pid {pid}) {}; sending its status to srun", describe_status(status)));
            send(sink, stepio::EXIT, task, &status.to_le_bytes());
            running.swap_remove(index);
            continue;
        }
        index += 1;
    }
}

/// The plugins' `task_exit` for global task `task` (local id: its place in `tasks`), reaped with
/// `status`.
fn task_exited(tasks: &[u32], task: u32, pid: Pid, status: i32) {
    let local = tasks.iter().position(|t| *t == task).unwrap_or(0);
    crate::spank::task_exit(u32::try_from(local).unwrap_or(u32::MAX), pid.as_raw(), status);
}

/// An error as people read it: the system's description, without Rust's `(os error N)`.
fn describe(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.rfind(" (os error ") {
        Some(end) => text[..end].to_owned(),
        None => text,
    }
}

/// Spools what this node's tasks used into `<state>/step_usage/<job>.<step>`, for noded to send
/// to ctld (the step directory itself is removed when the runner ends).
fn write_usage(dir: &Path, launch: &StepLaunch) {
    let Some(usage) = crate::sys::process::children_usage() else { return };
    let usage = drover_shared::proto::node::JobUsage {
        job_id: launch.job.job_id,
        user_usec: usage.user_usec,
        system_usec: usage.system_usec,
        max_rss_kib: usage.max_rss_kib,
    };
    let Some(state_dir) = dir.parent().and_then(Path::parent) else { return };
    if let Err(error) = super::spool_usage(state_dir, launch.step_id, &usage) {
        eprintln!("step {}.{}: could not spool its usage: {error}", launch.job.job_id, launch.step_id);
    }
}

fn run(dir: &Path) -> Result<(), StepError> {
    let launch = read_launch(dir)?;
    let plan =
        isolation::read(dir).map_err(|source| StepError::Read { path: dir.join(isolation::ISOLATION_FILE), source })?;
    let stream = connect(&launch.srun_address)
        .map_err(|e| StepError::Refused(format!("cannot reach srun at {}: {e}", launch.srun_address)))?;
    let _ = stream.set_nodelay(true);
    let sink: Sink = Arc::new(Mutex::new(stream));
    {
        let mut stream = sink.lock().map_err(|_| StepError::Refused("poisoned".into()))?;
        stepio::write_hello(&mut *stream, &launch.token, launch.node_index)
            .map_err(|e| StepError::Refused(format!("cannot greet srun: {e}")))?;
    }
    let tasks: Vec<u32> = launch.layout.tasks.get(launch.node_index as usize).cloned().unwrap_or_default();
    // `--slurmd-debug`: the runner's messages go to srun as the node's first task's stderr.
    let to_srun = tasks.first().map(|&first| {
        let sink = sink.clone();
        Box::new(move |line: &[u8]| send(&sink, stepio::STDERR, first, line)) as LineSink
    });
    let log = StepLog::new(launch.slurmd_debug, to_srun);
    log.levels();
    log.debug(format_args!(
        "step {}.{}: connected to srun at {}, node {} ({} of {}), tasks {:?}",
        launch.job.job_id,
        launch.step_id,
        launch.srun_address,
        launch.layout.nodes.get(launch.node_index as usize).map_or("", String::as_str),
        launch.node_index + 1,
        launch.layout.nodes.len(),
        tasks
    ));
    let result = run_tasks(dir, &launch, plan.as_ref(), &tasks, &sink, &log);
    crate::spank::exit();
    if let Err(error) = &result {
        let message = format!(
            "srun: error: {}: {error:#}\n",
            launch.layout.nodes.get(launch.node_index as usize).cloned().unwrap_or_default()
        );
        for &task in &tasks {
            send(&sink, stepio::STDERR, task, message.as_bytes());
            send(&sink, stepio::EXIT, task, &(1i32 << 8).to_le_bytes());
        }
    }
    // A step whose cgroups are left (a failure, or a runner that could not leave them) keeps its
    // directory: noded cleans up after it once it reaped the runner ([`clean_up_after`]).
    if matches!(result, Ok(true)) || plan.is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
    result.map(|_| ())
}

/// Runs the tasks; `Ok(true)` once the step's cgroups are gone, `Ok(false)` when they are left
/// for noded to remove.
fn run_tasks(
    dir: &Path,
    launch: &StepLaunch,
    plan: Option<&JobIsolation>,
    tasks: &[u32],
    sink: &Sink,
    log: &StepLog,
) -> Result<bool, StepError> {
    let steps = match plan {
        Some(plan) => set_up_cgroups(dir, plan, launch)?,
        None => Vec::new(),
    };
    match steps.is_empty() {
        true => log.debug2("no cgroups for the step on this node"),
        false => {
            let dirs: Vec<String> = steps.iter().map(|dir| dir.display().to_string()).collect();
            log.debug2(format_args!("moving into the step's cgroups {}", dirs.join(" ")));
        }
    }
    // Where the runner goes back to before it removes the step's cgroups: noded's.
    let own = plan.map(own_cgroups).unwrap_or_default();
    // From here on every fork is the job's: the tasks are created inside the step's cgroups.
    move_into(steps.iter().cloned()).map_err(|e| StepError::Refused(format!("{:#}", anyhow::Error::new(e))))?;
    if !steps.is_empty() {
        // Like the supervisor (and slurmstepd): at the job's memory limit the kernel kills a
        // task, not the runner that reports the tasks' ends. The tasks start from 0 again.
        let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    }
    let identity = identity(launch)?;
    let container = crate::container::read(dir)
        .unwrap_or_else(|error| Some(Err(format!("unreadable container plan: {}", describe(&error)))));
    // SPANK's remote side (the plugins' lines reach srun on the first task's stderr), inside the
    // step's cgroups so that whatever plugins start is the job's.
    if let Some(&first) = tasks.first() {
        let user = sink.clone();
        crate::spank::log_to_user(move |line| send(&user, stepio::STDERR, first, line));
        crate::spank::start_step(launch, tasks).map_err(|error| StepError::Refused(error.to_string()))?;
    }
    // `--pty`: task 0 gets a pseudo-terminal; its master carries the task's input and output.
    let mut terminal: Option<(File, OwnedFd)> = None;
    if let (Some((rows, cols)), true) = (launch.pty, tasks.contains(&0)) {
        let size = nix::pty::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        let pty = nix::pty::openpty(Some(&size), None).map_err(|e| StepError::Refused(format!("openpty: {e}")))?;
        nix::fcntl::fcntl(&pty.master, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))
            .map_err(|e| StepError::Refused(format!("fcntl: {e}")))?;
        if let Some(identity) = &identity {
            let _ = nix::unistd::fchown(&pty.slave, Some(identity.uid), None);
        }
        terminal = Some((File::from(pty.master), pty.slave));
    }
    // Every task is forked first and held at the gate (nothing the job can see happens yet);
    // once all exist the gate opens and they set themselves up and exec together, as Slurm's
    // tasks do: a plugin's `task_init` in one task may rely on the node's other tasks existing
    // (pyxis: the first task's starts the container the others join).
    let mut gate = TaskGate::new().map_err(|e| StepError::Refused(format!("pipe: {}", describe(&e))))?;
    let mut children: Vec<(u32, u32, std::io::Result<ForkedTask>)> = Vec::new();
    let script_user = task_scripts::ScriptUser {
        ids: identity.as_ref().map(|i| (i.uid.as_raw(), i.gid.as_raw())),
        work_dir: &launch.work_dir,
    };
    // Each task's environment, for its epilog.
    let mut envs: Vec<Vec<(String, String)>> = Vec::new();
    for (local, &task) in tasks.iter().enumerate() {
        let mut env = task_environment(launch, plan, task, u32::try_from(local).unwrap_or(u32::MAX));
        if let Some(prolog) = &launch.task_prolog {
            match task_scripts::run_prolog(prolog, &mut env, &script_user) {
                Ok(outcome) if outcome.print.is_empty() => {}
                Ok(outcome) => send(sink, stepio::STDOUT, task, &outcome.print),
                Err(error) => {
                    let message = format!("slurmstepd: error: task prolog {prolog}: {}\n", describe(&error));
                    send(sink, stepio::STDERR, task, message.as_bytes());
                    send(sink, stepio::EXIT, task, &(1i32 << 8).to_le_bytes());
                    continue;
                }
            }
        }
        envs.push(env.clone());
        let slave = terminal.as_ref().filter(|_| task == 0).map(|(_, slave)| slave);
        let local = u32::try_from(local).unwrap_or(u32::MAX);
        let plugins = if crate::spank::active() {
            let log = std::io::stderr().as_fd().try_clone_to_owned().map(File::from).map_err(|e| {
                StepError::Refused(format!("could not keep the node's log for the plugins: {}", describe(&e)))
            })?;
            Some(TaskPlugins { local_id: local, env: env.clone(), log })
        } else {
            None
        };
        let child = fork_task(launch, env, identity.as_ref(), slave, plugins, container.as_ref(), &mut gate);
        match &child {
            Ok(forked) => log.debug2(format_args!(
                "forked task {task} (local id {local}) as pid {}; it waits at the gate",
                forked.held.pid()
            )),
            Err(error) => log.debug2(format_args!("could not fork task {task}: {}", describe(error))),
        }
        children.push((task, local, child));
    }
    let master = terminal.map(|(master, slave)| {
        drop(slave);
        master
    });
    // As in Slurm: the plugins' `task_post_fork` for each task forked, before any goes on.
    for (_, local, child) in &children {
        if let Ok(forked) = child {
            crate::spank::task_post_fork(*local, forked.held.pid().as_raw());
        }
    }
    log.debug(format_args!("opening the gate: {} task(s) set themselves up and exec together", children.len()));
    gate.open();
    let program = launch.argv.first().cloned().unwrap_or_default();
    // Under parallel debugging the tasks stop before their exec; their report pipes stay open
    // until the step ends (a task a debugger continues may still fail to exec).
    let mut held_reports: Vec<File> = Vec::new();
    let mut stopped: Vec<(u32, Pid)> = Vec::new();
    let inputs: Inputs = Arc::new(Mutex::new(HashMap::new()));
    let mut running = Vec::new();
    let mut sources: Vec<(u8, u32, File)> = Vec::new();
    for (task, _, child) in children {
        let started = child.map_err(|error| (error, None)).and_then(|forked| {
            let ForkedTask { held, pipes } = forked;
            let pid = held.pid();
            let started = match launch.parallel_debug {
                true => held.stopped(),
                false => held.started().map(|pid| (pid, None)),
            };
            match started {
                Ok((pid, report)) => Ok((pid, report, pipes)),
                Err((error, status)) => Err((error, Some((pid, status)))),
            }
        });
        match started {
            Ok((pid, report, pipes)) => {
                match report {
                    Some(report) => {
                        log.debug(format_args!(
                            "task {task} (pid {pid}) stopped before exec'ing {program}, for a debugger"
                        ));
                        held_reports.push(report);
                        stopped.push((task, pid));
                    }
                    None => log.debug(format_args!("task {task} (pid {pid}) exec'd {program}")),
                }
                if let Some((stdin, stdout, stderr)) = pipes {
                    sources.push((stepio::STDOUT, task, stdout));
                    sources.push((stepio::STDERR, task, stderr));
                    if let Ok(mut map) = inputs.lock() {
                        map.insert(task, Box::new(stdin));
                    }
                }
                if let (0, Some(master)) = (task, &master)
                    && let (Ok(reader), Ok(writer), Ok(mut map)) =
                        (master.try_clone(), master.try_clone(), inputs.lock())
                {
                    sources.push((stepio::STDOUT, task, reader));
                    map.insert(task, Box::new(writer));
                }
                running.push((task, pid));
            }
            Err((error, reaped)) => {
                if let Some((pid, status)) = reaped {
                    task_exited(tasks, task, pid, status);
                }
                // Among the reasons: the job's pids limit (`Resource temporarily unavailable`).
                log.debug(format_args!("task {task} did not start: {}", describe(&error)));
                let message = format!("slurmstepd: error: execve(): {program}: {}\n", describe(&error));
                send(sink, stepio::STDERR, task, message.as_bytes());
                send(
                    sink,
                    stepio::EXIT,
                    task,
                    &(if error.kind() == std::io::ErrorKind::NotFound { 2i32 << 8 } else { 1i32 << 8 }).to_le_bytes(),
                );
            }
        }
    }
    let pids: Vec<String> = running.iter().map(|(_, pid)| pid.to_string()).collect();
    let _ = std::fs::write(dir.join(TASKS), pids.join("\n") + "\n");
    log.verbose(format_args!("{} task(s) started", running.len()));
    // `srun --debugger-test`: srun's proctable has each stopped task's pid.
    for (task, pid) in stopped {
        send(sink, stepio::PID, task, &pid.as_raw().to_le_bytes());
    }
    drop(master);
    if let Some(stream) = sink.lock().ok().and_then(|s| s.try_clone().ok()) {
        let inputs = inputs.clone();
        // Without this thread (the job's pids limit reached) the tasks get no input from srun.
        let _ = std::thread::Builder::new().name("input".into()).spawn(move || forward_input(stream, &inputs));
    }
    log.debug2(format_args!("relaying the output of {} task(s)", running.len()));
    relay_all(sink, sources, &mut running, tasks, log);
    let mut statuses = Vec::with_capacity(running.len());
    for (task, pid) in running {
        let status = crate::sys::process::wait_pid(pid, true).ok().flatten().unwrap_or(9);
        task_exited(tasks, task, pid, status);
        log.debug(format_args!("task {task} (pid {pid}) {}", describe_status(status)));
        statuses.push((task, status));
    }
    drop(held_reports);
    if let Some(epilog) = &launch.task_epilog {
        task_scripts::run_epilogs(epilog, &envs, &script_user);
    }
    // Every task is reaped: what they used is the runner's children's usage. It is spooled for
    // noded before srun learns of the exits (srun then records the step's end).
    write_usage(dir, launch);
    log.debug2("usage spooled for noded; sending the exit statuses to srun");
    for (task, status) in statuses {
        send(sink, stepio::EXIT, task, &status.to_le_bytes());
    }
    if let Some(plan) = plan {
        // The step's cgroups can be removed only from outside; where the runner cannot leave
        // them, noded removes them once it reaped the runner.
        if !own.iter().all(Option::is_some) || move_into(own.into_iter().flatten()).is_err() {
            return Ok(false);
        }
        tear_down_cgroups(dir, plan, &steps);
    }
    Ok(true)
}
