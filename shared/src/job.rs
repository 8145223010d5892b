//! Jobs as every component sees them: the submitted [`JobSpec`], the state machine ([`JobState`]),
//! the read-only [`JobInfo`] that `squeue`, `scontrol` and `sacct` render, and the batch step.
//!
//! Field names follow Slurm's words (job, step, partition, account, QOS, TRES, GRES).

use crate::UnixTime;
use crate::grammar::gres::GresRequest;
use crate::grammar::time::TimeLimit;
use serde::{Deserialize, Serialize};

pub mod fields;

/// A job id as Slurm numbers them: positive, assigned by ctld, never reused.
pub type JobId = u32;

/// Everything a submission asks for, after `sbatch` merged the command line, `SBATCH_*` variables
/// and `#SBATCH` directives. ctld validates it again; nothing here is trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobSpec {
    /// `-J`; sbatch fills the default (script basename, `sbatch`, `wrap`).
    pub name: String,
    /// `-p`: candidate partitions, empty for the default partition.
    pub partitions: Vec<String>,
    /// `-A`.
    pub account: Option<String>,
    /// `-q`.
    pub qos: Option<String>,
    /// `-t`.
    pub time_limit: Option<TimeLimit>,
    /// `-N min[-max]`.
    pub nodes_min: Option<u32>,
    /// Upper end of `-N min-max`.
    pub nodes_max: Option<u32>,
    /// `-n`.
    pub ntasks: Option<u32>,
    /// `-c`.
    pub cpus_per_task: Option<u32>,
    /// `--ntasks-per-node`.
    pub ntasks_per_node: Option<u32>,
    /// `--mem`, `--mem-per-cpu` or `--mem-per-gpu`.
    pub mem: Option<MemRequest>,
    /// Per-node generic resources (`--gres`, `--gpus-per-node`).
    pub gres_per_node: Vec<GresRequest>,
    /// GPUs for the whole job (`-G/--gpus`).
    pub gpus: Vec<GresRequest>,
    /// `--gpus-per-task`.
    pub gpus_per_task: Vec<GresRequest>,
    /// `-o` pattern as given (absolute or relative to `work_dir`).
    pub stdout: Option<String>,
    /// `-e` pattern.
    pub stderr: Option<String>,
    /// `-i` pattern.
    pub stdin: Option<String>,
    /// `--open-mode=append`.
    pub open_append: Option<bool>,
    /// `-D`, made absolute by sbatch; defaults to `submit_dir`.
    pub work_dir: String,
    /// sbatch's working directory (`SLURM_SUBMIT_DIR`).
    pub submit_dir: String,
    /// sbatch's host name (`SLURM_SUBMIT_HOST`).
    pub submit_host: String,
    /// The environment the job starts with, already filtered by `--export`.
    pub environment: Vec<(String, String)>,
    /// The `--export` value as given, for `SLURM_EXPORT_ENV`.
    pub export: Option<String>,
    /// The batch script, stored with the job at submit time.
    #[serde(with = "serde_bytes")]
    pub script: Vec<u8>,
    /// Arguments after the script name.
    pub script_args: Vec<String>,
    /// Absolute path of the script file (`Command=`), `None` for stdin and `--wrap`.
    pub command: Option<String>,
    /// `-H/--hold`.
    pub hold: bool,
    /// `--begin`.
    pub begin_time: Option<UnixTime>,
    /// `--deadline`.
    pub deadline: Option<UnixTime>,
    /// `--comment`.
    pub comment: Option<String>,
    /// `--nice`.
    pub nice: i32,
    /// `--requeue` / `--no-requeue`.
    pub requeue: Option<bool>,
    /// `--exclusive`.
    pub exclusive: bool,
    /// `-w`.
    pub nodelist: Option<String>,
    /// `-x`.
    pub exclude: Option<String>,
    /// `-C`.
    pub constraint: Option<String>,
    /// `-d`, as given.
    pub dependency: Option<String>,
    /// `-a`, as given.
    pub array: Option<String>,
    /// `--signal`, as given.
    pub signal: Option<String>,
    /// `--mail-type`.
    pub mail_type: Option<String>,
    /// `--mail-user`.
    pub mail_user: Option<String>,
    /// The umask sbatch ran with (`SLURM_UMASK`).
    pub umask: u32,
    /// The whole command line, for `SubmitLine`.
    pub submit_line: String,
    /// `--kill-on-invalid-dep=yes`: cancel the job once its dependency can never be satisfied.
    pub kill_on_invalid_dep: bool,
    /// `--wckey`: recorded only (Slurm with `TrackWCKey=no` does the same).
    pub wckey: Option<String>,
    /// Drover's `--template`: the team job template ctld applies (`docs/admin/templates.md`).
    pub template: Option<String>,
    /// sbatch's `-O/--overcommit`: the allocation holds CPUs as if each node ran one task (its
    /// CPUs per task), however many tasks `-n` asks for; the tasks share them.
    #[serde(default)]
    pub overcommit: bool,
    /// srun's `-Z/--no-allocate`: run on the `-w` nodes for root or the SlurmUser only (ctld
    /// refuses it to anyone else); the allocation is one CPU per node, overcommitted.
    #[serde(default)]
    pub no_allocate: bool,
}

/// How much memory a job asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MemRequest {
    /// `--mem`: megabytes per node (0 = all of the node's memory).
    PerNode(u64),
    /// `--mem-per-cpu`: megabytes per allocated CPU.
    PerCpu(u64),
    /// `--mem-per-gpu`: megabytes per allocated GPU.
    PerGpu(u64),
}

/// Slurm's base job states; the numeric order is Slurm's (`JOB_PENDING` = 0 …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum JobState {
    Pending,
    Running,
    Suspended,
    Completed,
    Cancelled,
    Failed,
    Timeout,
    NodeFail,
    Preempted,
    BootFail,
    Deadline,
    OutOfMemory,
    /// How an earlier run of a requeued job ended (`sacct -D`); no current job is in this state.
    /// Slurm shows its `REQUEUED` flag the same way.
    Requeued,
}

impl JobState {
    /// Every state, in Slurm's numeric order.
    pub const ALL: [JobState; 13] = [
        JobState::Pending,
        JobState::Running,
        JobState::Suspended,
        JobState::Completed,
        JobState::Cancelled,
        JobState::Failed,
        JobState::Timeout,
        JobState::NodeFail,
        JobState::Preempted,
        JobState::BootFail,
        JobState::Deadline,
        JobState::OutOfMemory,
        JobState::Requeued,
    ];

    /// The number that stands for the state in ctld's database (`jobs.state`), fixed for good: a
    /// stored row keeps its meaning whatever order [`JobState::ALL`] takes. The codes are Slurm's
    /// numbers (the positions the states had when they were first stored); a new state takes the
    /// next unused code. ctld counts on codes below 3 being the states of jobs that have not
    /// ended. The variants keep this order too: job records (postcard, stored and on the wire)
    /// encode a state by its variant index, which the golden test holds equal to the code.
    pub const fn code(self) -> u8 {
        match self {
            JobState::Pending => 0,
            JobState::Running => 1,
            JobState::Suspended => 2,
            JobState::Completed => 3,
            JobState::Cancelled => 4,
            JobState::Failed => 5,
            JobState::Timeout => 6,
            JobState::NodeFail => 7,
            JobState::Preempted => 8,
            JobState::BootFail => 9,
            JobState::Deadline => 10,
            JobState::OutOfMemory => 11,
            JobState::Requeued => 12,
        }
    }

    /// The long name (`PENDING`, `OUT_OF_MEMORY`).
    pub fn long_name(self) -> &'static str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Suspended => "SUSPENDED",
            JobState::Completed => "COMPLETED",
            JobState::Cancelled => "CANCELLED",
            JobState::Failed => "FAILED",
            JobState::Timeout => "TIMEOUT",
            JobState::NodeFail => "NODE_FAIL",
            JobState::Preempted => "PREEMPTED",
            JobState::BootFail => "BOOT_FAIL",
            JobState::Deadline => "DEADLINE",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
            JobState::Requeued => "REQUEUED",
        }
    }

    /// The compact name (`PD`, `OOM`).
    pub fn compact_name(self) -> &'static str {
        match self {
            JobState::Pending => "PD",
            JobState::Running => "R",
            JobState::Suspended => "S",
            JobState::Completed => "CD",
            JobState::Cancelled => "CA",
            JobState::Failed => "F",
            JobState::Timeout => "TO",
            JobState::NodeFail => "NF",
            JobState::Preempted => "PR",
            JobState::BootFail => "BF",
            JobState::Deadline => "DL",
            JobState::OutOfMemory => "OOM",
            JobState::Requeued => "RQ",
        }
    }

    /// Parses a long or compact name, case-insensitively.
    pub fn parse(text: &str) -> Option<JobState> {
        JobState::ALL
            .into_iter()
            .find(|s| s.long_name().eq_ignore_ascii_case(text) || s.compact_name().eq_ignore_ascii_case(text))
    }

    /// Whether the job (or the run) has ended (states 3–11, and an earlier run's `REQUEUED`).
    pub fn is_terminal(self) -> bool {
        self >= JobState::Completed
    }
}

/// A raw wait(2) status as Slurm stores it; displayed as `exit:signal`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitStatus(pub i32);

impl WaitStatus {
    /// An exit with this status code.
    pub fn exited(code: u8) -> Self {
        WaitStatus(i32::from(code) << 8)
    }

    /// Termination by this signal.
    pub fn signaled(signal: i32) -> Self {
        WaitStatus(signal & 0x7f)
    }

    /// The `(exit code, signal)` pair Slurm prints as `E:S`.
    pub fn parts(self) -> (i32, i32) {
        let signal = self.0 & 0x7f;
        if signal != 0 { (0, signal) } else { ((self.0 >> 8) & 0xff, 0) }
    }
}

impl std::fmt::Display for WaitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (code, signal) = self.parts();
        write!(f, "{code}:{signal}")
    }
}

/// Which step of a job a step row describes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StepId {
    /// The batch script (`N.batch`).
    #[default]
    Batch,
    /// The extern step (`N.extern`).
    Extern,
    /// An srun step (`N.0`, `N.1`, …).
    Numbered(u32),
}

impl std::fmt::Display for StepId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepId::Batch => f.write_str("batch"),
            StepId::Extern => f.write_str("extern"),
            StepId::Numbered(n) => write!(f, "{n}"),
        }
    }
}

/// One step of a job, as accounting shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepInfo {
    pub step_id: StepId,
    /// `batch`, `extern`, or the step's name.
    pub name: String,
    pub state: JobState,
    pub exit_status: WaitStatus,
    pub start_time: Option<UnixTime>,
    pub end_time: Option<UnixTime>,
    pub num_cpus: u32,
    pub num_tasks: u32,
    /// Node names the step ran on, in node-table order.
    pub nodes: Vec<String>,
}

/// What `squeue`, `scontrol show job` and `sacct` know about a job: its request, where it runs,
/// and how it ended. ctld builds it; the CLI only renders it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    pub job_id: JobId,
    pub name: String,
    pub user: String,
    pub uid: u32,
    pub group: String,
    pub gid: u32,
    pub account: String,
    pub qos: String,
    /// The partition the job runs in, or the comma list it may run in while pending.
    pub partition: String,
    pub state: Option<JobState>,
    /// Why the job waits or how it ended (`None`, `Priority`, `Resources`, `NonZeroExitCode`, …).
    pub reason: String,
    pub priority: u32,
    pub nice: i32,
    pub submit_time: UnixTime,
    pub eligible_time: Option<UnixTime>,
    pub start_time: Option<UnixTime>,
    pub end_time: Option<UnixTime>,
    /// `None` until the job has a limit (it takes the partition's when it starts).
    pub time_limit: Option<TimeLimit>,
    /// Allocated nodes when running or ended; empty while pending.
    pub nodes: Vec<String>,
    /// Requested minimum node count while pending, allocated count afterwards.
    pub num_nodes: u32,
    pub num_cpus: u32,
    pub num_tasks: u32,
    pub cpus_per_task: u32,
    /// CPUs on each allocated node, in the order of `nodes`.
    pub cpus_per_node: Vec<u32>,
    pub mem: Option<MemRequest>,
    /// Memory allocated per node, megabytes.
    pub mem_per_node_mb: u64,
    /// `gres:gpu:2`-style TRES-per-node string, empty when none.
    pub tres_per_node: String,
    /// GPUs allocated, total over the job.
    pub gpus_allocated: u32,
    pub work_dir: String,
    pub command: Option<String>,
    /// Output paths with the job's patterns expanded.
    pub stdout: String,
    pub stderr: String,
    pub stdin: String,
    pub exit_status: WaitStatus,
    pub comment: Option<String>,
    pub requeue: bool,
    pub restarts: u32,
    pub dependency: Option<String>,
    /// The uid that cancelled the job, for `CANCELLED by <uid>`.
    pub cancelled_by: Option<u32>,
    /// The batch step and, later, srun steps.
    pub steps: Vec<StepInfo>,
    pub submit_host: String,
    pub submit_line: String,
    pub exclusive: bool,
    pub nodelist_requested: Option<String>,
    pub exclude: Option<String>,
    pub constraint: Option<String>,
    /// The array this record belongs to (`ArrayJobId`); `None` for a job that is not an array.
    pub array_job_id: Option<JobId>,
    /// The one task this record is (`ArrayTaskId`); `None` for a plain job, and for an array's
    /// base record while it still stands for several pending tasks.
    pub array_task_id: Option<u32>,
    /// Task indexes the array's base record still stands for, ascending; empty otherwise.
    pub array_tasks_pending: Vec<u32>,
    /// `--array=…%N`: most tasks of the array running at once; 0 = no limit.
    pub array_max_tasks: u32,
    /// The job template it was submitted with.
    pub template: Option<String>,
    /// The billing TRES (what fair share charges per second) under the partition's
    /// `TRESBillingWeights`, rounded: of the request while pending, of the allocation once the job
    /// started. `None` in records stored before it was kept (clients then show the CPU count, the
    /// billing without weights; ctld's `decode_stored` reads such records).
    pub billing: Option<u64>,
}

impl JobInfo {
    /// The job's current state, `PENDING` for a record not yet scheduled.
    pub fn state(&self) -> JobState {
        self.state.unwrap_or(JobState::Pending)
    }

    /// The id Slurm shows for this record: `12`, `12_3`, or `12_[4-7%2]` for an array's base
    /// record that still stands for several pending tasks.
    pub fn display_id(&self) -> String {
        match (self.array_job_id, self.array_task_id) {
            (Some(array), Some(task)) => format!("{array}_{task}"),
            (Some(array), None) => {
                let throttle =
                    if self.array_max_tasks > 0 { format!("%{}", self.array_max_tasks) } else { String::new() };
                format!("{array}_[{}{throttle}]", crate::grammar::array::format_ranges(&self.array_tasks_pending))
            }
            (None, _) => self.job_id.to_string(),
        }
    }

    /// `ArrayTaskId` as squeue `%K` and scontrol show it: the index, the pending ranges, `N/A`.
    pub fn array_task_text(&self) -> String {
        match (self.array_job_id, self.array_task_id) {
            (Some(_), Some(task)) => task.to_string(),
            (Some(_), None) => {
                let throttle =
                    if self.array_max_tasks > 0 { format!("%{}", self.array_max_tasks) } else { String::new() };
                format!("{}{throttle}", crate::grammar::array::format_ranges(&self.array_tasks_pending))
            }
            (None, _) => "N/A".into(),
        }
    }

    /// One record per pending task of an array's base record (`squeue -r`); the record itself
    /// otherwise.
    pub fn expand_array(&self) -> Vec<JobInfo> {
        if self.array_job_id.is_none() || self.array_task_id.is_some() || self.array_tasks_pending.is_empty() {
            return vec![self.clone()];
        }
        self.array_tasks_pending
            .iter()
            .map(|&task| JobInfo { array_task_id: Some(task), array_tasks_pending: Vec::new(), ..self.clone() })
            .collect()
    }

    /// Elapsed run time in seconds at `now`.
    pub fn elapsed(&self, now: UnixTime) -> i64 {
        match (self.start_time, self.end_time) {
            (Some(start), Some(end)) => (end - start).max(0),
            (Some(start), None) => (now - start).max(0),
            _ => 0,
        }
    }
}

/// What `srun` asks of a job's allocation for one step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSpec {
    /// `-J`; defaults to the command's name.
    pub name: String,
    /// `-n`; `None`: the job's task count (or one per node with `-N`).
    pub ntasks: Option<u32>,
    /// `-N`.
    pub nodes: Option<u32>,
    /// `--ntasks-per-node`.
    pub ntasks_per_node: Option<u32>,
    /// `-c`.
    pub cpus_per_task: Option<u32>,
    /// `--overlap`: share CPUs with the steps already running.
    pub overlap: bool,
    /// Where srun listens for task I/O (`host:port`).
    pub srun_address: String,
    pub argv: Vec<String>,
    pub environment: Vec<(String, String)>,
    pub work_dir: String,
    pub label: bool,
    /// `--pty`: task 0 runs on a pseudo-terminal of this size (rows, columns).
    pub pty: Option<(u16, u16)>,
    /// `-O/--overcommit`: more tasks than the job's CPUs on a node (up to `max_tasks_per_node`).
    pub overcommit: bool,
    /// `--task-prolog`: an absolute path run as the user before each task; its `export`,
    /// `unset` and `print` lines shape the task.
    pub task_prolog: Option<String>,
    /// `--task-epilog`: an absolute path run as the user after each task.
    pub task_epilog: Option<String>,
    /// srun's soft resource limits, propagated to the tasks (Slurm's PropagateResourceLimits,
    /// all of them by default): `(name, value)` with Slurm's names (`CORE`, `NOFILE`, …) and
    /// `u64::MAX` for unlimited. The node caps each at its own hard limit.
    pub rlimits: Vec<(String, u64)>,
    /// `-E/--preserve-env`: the tasks get srun's own `SLURM_NNODES`/`SLURM_JOB_NUM_NODES` and
    /// `SLURM_NTASKS`/`SLURM_NPROCS` (the job's), not the step's.
    #[serde(default)]
    pub preserve_env: bool,
    /// `--slurmd-debug`: how far above `error` the step's runners log to the tasks' stderr
    /// (capped at [`crate::log_level::MAX_INCREMENT`]; 0: errors only).
    #[serde(default)]
    pub slurmd_debug: u8,
    /// `--debugger-test` (Slurm's parallel debug launch): each task stops itself just before
    /// its exec, for a debugger to attach, and the nodes report the tasks' pids to srun.
    #[serde(default)]
    pub parallel_debug: bool,
}

/// The batch step of an interactive allocation (`salloc`, `srun` outside a job): it only holds
/// the allocation until released (SIGUSR1). It is no batch step of the user's (Slurm runs none
/// for such allocations), so nodes run no SPANK plugins for it. It waits in `wait`, which the
/// trapped signal interrupts at once (a foreground `sleep` would delay the release until it
/// ends); a release that comes before the trap is set ends it all the same, and its node counts
/// that as exit 0 ([`holder_status`]).
pub const ALLOCATION_HOLDER: &str =
    "#!/bin/sh\ntrap 'kill $! 2>/dev/null; exit 0' USR1\nwhile :; do sleep 60 & wait $!; done\n";

/// How an allocation's holder (`script`, [`ALLOCATION_HOLDER`]) ended, as recorded: killed by
/// the release signal before its trap was set is a release like any other, exit 0. Any other
/// script's status is kept as it is.
pub fn holder_status(script: &[u8], status: WaitStatus) -> WaitStatus {
    let released = status.parts() == (0, nix::libc::SIGUSR1);
    if released && script == ALLOCATION_HOLDER.as_bytes() { WaitStatus::exited(0) } else { status }
}

/// The resource limits srun propagates to its tasks, under Slurm's names (PropagateResourceLimits'
/// `ALL`).
pub const PROPAGATED_RLIMITS: [(&str, nix::sys::resource::Resource); 10] = {
    use nix::sys::resource::Resource;
    [
        ("AS", Resource::RLIMIT_AS),
        ("CORE", Resource::RLIMIT_CORE),
        ("CPU", Resource::RLIMIT_CPU),
        ("DATA", Resource::RLIMIT_DATA),
        ("FSIZE", Resource::RLIMIT_FSIZE),
        ("MEMLOCK", Resource::RLIMIT_MEMLOCK),
        ("NOFILE", Resource::RLIMIT_NOFILE),
        ("NPROC", Resource::RLIMIT_NPROC),
        ("RSS", Resource::RLIMIT_RSS),
        ("STACK", Resource::RLIMIT_STACK),
    ]
};

/// The prefix of the job environment variables that carry sbatch's soft limits to the batch
/// script, as Slurm's do (`SLURM_RLIMIT_NOFILE=1024`; unlimited is `u64::MAX`).
pub const RLIMIT_ENV_PREFIX: &str = "SLURM_RLIMIT_";

/// The limits of `current` that `--propagate[=…]` (`spec`) propagates: all of them without the
/// option, with `ALL` or an empty value; none with `NONE`; else the comma-separated names
/// (Slurm's, with or without `RLIMIT_`, any case). An unknown name is refused.
pub fn propagated_rlimits(spec: Option<&str>, current: &[(String, u64)]) -> Result<Vec<(String, u64)>, String> {
    let spec = spec.map(str::trim).unwrap_or("ALL");
    if spec.is_empty() || spec.eq_ignore_ascii_case("ALL") {
        return Ok(current.to_vec());
    }
    if spec.eq_ignore_ascii_case("NONE") {
        return Ok(Vec::new());
    }
    let mut wanted = Vec::new();
    for item in spec.split(',') {
        let name = item.trim().to_ascii_uppercase();
        let name = name.strip_prefix("RLIMIT_").unwrap_or(&name);
        if !PROPAGATED_RLIMITS.iter().any(|(n, _)| *n == name) {
            return Err(format!("Invalid --propagate specification: {item}"));
        }
        wanted.extend(current.iter().filter(|(n, _)| n == name).cloned());
    }
    Ok(wanted)
}

/// The limits a job environment carries under [`RLIMIT_ENV_PREFIX`] (unknown names and values

/// The variable that carries `--container`'s OCI bundle in a job's or step's environment, as
/// Slurm names it: sbatch, srun and salloc set it; ctld checks it at submit; noded runs the
/// tasks in that bundle.
pub const CONTAINER_ENV: &str = "SLURM_CONTAINER";

/// The bundle `environment` asks the tasks to run in: its last `SLURM_CONTAINER`, if not empty.
pub fn container_bundle(environment: &[(String, String)]) -> Option<&str> {
    environment.iter().rev().find(|(name, _)| name == CONTAINER_ENV).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
}
/// that are not numbers are skipped).
pub fn rlimits_from_environment(environment: &[(String, String)]) -> Vec<(String, u64)> {
    environment
        .iter()
        .filter_map(|(name, value)| {
            let name = name.strip_prefix(RLIMIT_ENV_PREFIX)?;
            PROPAGATED_RLIMITS.iter().find(|(n, _)| *n == name)?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// This process's soft limits of [`PROPAGATED_RLIMITS`] (`u64::MAX`: unlimited).
pub fn current_rlimits() -> Vec<(String, u64)> {
    PROPAGATED_RLIMITS
        .iter()
        .filter_map(|(name, resource)| {
            let (soft, _) = nix::sys::resource::getrlimit(*resource).ok()?;
            let value = if soft == nix::sys::resource::RLIM_INFINITY { u64::MAX } else { soft };
            Some(((*name).to_owned(), value))
        })
        .collect()
}

/// Where a step's tasks run, as ctld decided it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepLayout {
    pub job_id: JobId,
    pub step_id: u32,
    /// The step's nodes, in the job's node order.
    pub nodes: Vec<String>,
    /// Task ids on each node, in the order of `nodes` (block distribution).
    pub tasks: Vec<Vec<u32>>,
    pub ntasks: u32,
    pub cpus_per_task: u32,
    /// Proves a node's I/O connection to srun (random, per step).
    #[serde(with = "serde_bytes")]
    pub token: Vec<u8>,
}

impl StepLayout {
    /// `SLURM_TASKS_PER_NODE`/`SLURM_STEP_TASKS_PER_NODE`: `2(x2),1`.
    pub fn tasks_per_node_text(&self) -> String {
        let counts: Vec<usize> = self.tasks.iter().map(Vec::len).collect();
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < counts.len() {
            let mut j = i;
            while j + 1 < counts.len() && counts[j + 1] == counts[i] {
                j += 1;
            }
            let run = j - i + 1;
            parts.push(if run > 1 { format!("{}(x{run})", counts[i]) } else { counts[i].to_string() });
            i = j + 1;
        }
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::{ALLOCATION_HOLDER, CONTAINER_ENV, JobState, WaitStatus, container_bundle, holder_status};

    /// The holder released before its trap was set ended by SIGUSR1: recorded as exit 0. Other
    /// signals, and any other script killed by SIGUSR1, keep their status.
    #[test]
    fn a_released_holder_ends_zero_however_the_release_found_it() {
        let usr1 = WaitStatus::signaled(nix::libc::SIGUSR1);
        assert_eq!(holder_status(ALLOCATION_HOLDER.as_bytes(), usr1), WaitStatus::exited(0));
        let kill = WaitStatus::signaled(nix::libc::SIGKILL);
        assert_eq!(holder_status(ALLOCATION_HOLDER.as_bytes(), kill), kill);
        assert_eq!(holder_status(b"#!/bin/sh\nsleep 9\n", usr1), usr1);
        assert_eq!(holder_status(ALLOCATION_HOLDER.as_bytes(), WaitStatus::exited(3)), WaitStatus::exited(3));
    }

    #[test]
    fn only_a_non_empty_slurm_container_asks_for_one() {
        let env = |v: &str| vec![("A".to_owned(), "1".to_owned()), (CONTAINER_ENV.to_owned(), v.to_owned())];
        assert_eq!(container_bundle(&env("/b")), Some("/b"));
        assert_eq!(container_bundle(&env("")), None);
        assert_eq!(container_bundle(&[]), None);
    }

    /// Golden: the stored code of every state. A change here changes what every stored job row
    /// means; add new states with new codes instead.
    #[test]
    fn job_state_codes_are_fixed() {
        let golden = [
            (JobState::Pending, 0),
            (JobState::Running, 1),
            (JobState::Suspended, 2),
            (JobState::Completed, 3),
            (JobState::Cancelled, 4),
            (JobState::Failed, 5),
            (JobState::Timeout, 6),
            (JobState::NodeFail, 7),
            (JobState::Preempted, 8),
            (JobState::BootFail, 9),
            (JobState::Deadline, 10),
            (JobState::OutOfMemory, 11),
            (JobState::Requeued, 12),
        ];
        assert_eq!(golden.len(), JobState::ALL.len(), "every state has a golden code");
        for (state, code) in golden {
            assert_eq!(state.code(), code, "{state:?}");
            // Job records (stored and on the wire) encode the state by variant index: the same number.
            assert_eq!(postcard::to_allocvec(&state).unwrap(), [code], "{state:?}");
            // ctld's active-jobs index and load select codes below 3.
            assert_eq!(code < 3, !state.is_terminal(), "{state:?}");
        }
    }
}
