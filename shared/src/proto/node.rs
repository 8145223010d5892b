//! noded ↔ ctld messages. Both sides send whenever they have something to say; there is no
//! request/response pairing except [`CtldMessage::JobEndAck`], which lets noded forget an ended job
//! only after ctld has committed its end.
//!
//! Every start of a job is a *run*, numbered by the job's restart count at launch
//! ([`LaunchRequest::restart_count`]). Everything a node says about a job names the run
//! ([`JobRun`]), so a report from an earlier run (a node that was cut off while the job was
//! requeued and started again elsewhere, or a repeated end) can never be taken for the current one.

use crate::UnixTime;
use crate::grammar::time::TimeLimit;
use crate::job::{JobId, JobSpec, WaitStatus};
use crate::node::GpuDevice;
use serde::{Deserialize, Serialize};

/// From noded to ctld.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeMessage {
    /// First message after authentication: inventory and the jobs this node still has.
    Register(NodeRegistration),
    /// Liveness, with the job runs this node holds (a directory, a live supervisor or an
    /// unacknowledged end).
    Heartbeat { running: Vec<JobRun> },
    /// A supervisor started the batch script of run `run` of the job.
    JobStarted { job_id: JobId, run: u32, start_time: UnixTime },
    /// A job ended (or never started); noded repeats it until acknowledged.
    JobEnded(JobEnd),
    /// The node must take no new work: its prolog, epilog or health check failed (`reason`, as
    /// `sinfo -R` shows it).
    Drain { reason: String },
    /// NVML samples of the GPUs of the jobs this node holds, sent with heartbeats when the node
    /// has NVML (usage accounting's active GPU time).
    GpuUsage(Vec<super::usage::JobGpuSample>),
    /// What an ended job's batch script used (sacct `TotalCPU`, `MaxRSS`); sent before each
    /// [`NodeMessage::JobEnded`] of a job whose supervisor measured it.
    JobUsage(JobUsage),
    /// What this node's tasks of an srun step used (CPU time summed, the largest RSS), measured
    /// by the step runner once they are reaped; sent once (sacct's step rows).
    StepUsage { step_id: u32, usage: JobUsage },
    /// Instead of [`NodeMessage::Register`], as the first message: a configless host asks for
    /// the admin's config file (`crate::configless`); `have` is the digest of its copy, if it
    /// has one. ctld answers [`CtldMessage::Config`] and closes the connection.
    FetchConfig { have: Option<String> },
    /// The answer to [`CtldMessage::StatJob`]: one sample per step of the job run this node
    /// holds (at most [`super::stat::MAX_STEPS_PER_NODE`]; none when it holds none).
    JobStats { query: u64, job_id: JobId, samples: Vec<super::stat::StepSample> },
}

/// CPU time and peak memory of a job's batch script and everything it started, measured by its
/// supervisor once they are all reaped (`getrusage(RUSAGE_CHILDREN)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUsage {
    pub job_id: JobId,
    pub user_usec: u64,
    pub system_usec: u64,
    /// The largest resident set of any one process, KiB.
    pub max_rss_kib: u64,
}

/// What a node has and holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRegistration {
    pub name: String,
    pub cpus: u32,
    pub real_memory_mb: u64,
    pub gpus: Vec<GpuDevice>,
    /// Job runs this node holds.
    pub running: Vec<JobRun>,
    pub version: String,
    pub boot_time: UnixTime,
    pub start_time: UnixTime,
}

/// How a job's batch script ended, as its supervisor saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnd {
    pub job_id: JobId,
    /// The run that ended.
    pub run: u32,
    pub outcome: JobOutcome,
    pub exit_status: WaitStatus,
    pub start_time: Option<UnixTime>,
    pub end_time: UnixTime,
}

/// The supervisor's classification of the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobOutcome {
    /// The script exited or was killed by a signal nobody in Drover sent.
    Exited,
    /// Killed because it ran past its time limit.
    TimedOut,
    /// Killed because it was cancelled.
    Cancelled,
    /// Killed by the kernel's OOM killer.
    OutOfMemory,
    /// Could not be started (user unknown, working directory missing, …).
    LaunchFailed { message: String },
}

/// From ctld to noded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CtldMessage {
    /// Registration accepted; runs in `running` that ctld no longer runs here (ended, requeued,
    /// or an earlier run of a job) must be killed and their directories removed.
    Registered { kill: Vec<JobRun> },
    /// Start a job's batch script on this node.
    Launch(Box<LaunchRequest>),
    /// Send a signal to a job (`scancel --signal`).
    Signal { job_id: JobId, signal: i32, batch_only: bool },
    /// Cancel one run of a job: SIGTERM to all its processes, SIGKILL after `kill_wait` seconds.
    Cancel { job_id: JobId, run: u32, kill_wait: u32 },
    /// ctld committed the end of this run of the job (or has no use for it: a stale run); noded
    /// may forget it.
    JobEndAck { job_id: JobId, run: u32 },
    /// Start this node's tasks of an srun step.
    LaunchStep(Box<StepLaunch>),
    /// Signal one step's tasks on this node; `None` cancels it (SIGTERM, SIGKILL after
    /// `kill_wait` seconds).
    SignalStep { job_id: JobId, step_id: u32, signal: Option<i32>, kill_wait: u32 },
    /// `scontrol update JobId=N TimeLimit=…` of a running job: its supervisor's time limit
    /// (counted from the job's start) becomes `time_limit`.
    SetTimeLimit { job_id: JobId, time_limit: TimeLimit },
    /// The answer to [`NodeMessage::FetchConfig`]: the digest of the config in force and its
    /// text, `None` when it is the one the host has.
    Config { digest: String, text: Option<String> },
    /// A reconfigure changed the config file; a configless node fetches it again.
    Reconfigured,
    /// `sstat`: read what the steps of this run of the job use on this node now; answered with
    /// [`NodeMessage::JobStats`] carrying the same `query`.
    StatJob { query: u64, job_id: JobId, run: u32 },
    /// `scontrol reboot`: run the node's `reboot_program` (the machine restarts; noded
    /// registers anew when it is back). Sent only when the node runs no job.
    Reboot,
}

/// This node's share of one srun step, resolved by ctld.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepLaunch {
    /// The job's launch request as this node would get it (cgroup limits, GPUs, user).
    pub job: LaunchRequest,
    pub step_id: u32,
    pub layout: crate::job::StepLayout,
    /// This node's index in `layout.nodes`.
    pub node_index: u32,
    /// Where srun listens for task I/O and exit codes (`host:port`).
    pub srun_address: String,
    /// Proves to srun that the connection comes from a node ctld sent (random, per step).
    #[serde(with = "serde_bytes")]
    pub token: Vec<u8>,
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// The tasks' environment as srun sent it (before the per-task variables).
    pub environment: Vec<(String, String)>,
    pub work_dir: String,
    pub label: bool,
    /// `--pty`: task 0 runs on a pseudo-terminal of this size (rows, columns).
    pub pty: Option<(u16, u16)>,
    /// `--task-prolog` and `--task-epilog`: run as the user before and after each task.
    pub task_prolog: Option<String>,
    pub task_epilog: Option<String>,
    /// srun's soft resource limits ([`crate::job::StepSpec::rlimits`]).
    pub rlimits: Vec<(String, u64)>,
    /// srun's `-E` ([`crate::job::StepSpec::preserve_env`]).
    #[serde(default)]
    pub preserve_env: bool,
    /// srun's `--slurmd-debug` ([`crate::job::StepSpec::slurmd_debug`]), capped by ctld.
    #[serde(default)]
    pub slurmd_debug: u8,
    /// srun's `--debugger-test` ([`crate::job::StepSpec::parallel_debug`]).
    #[serde(default)]
    pub parallel_debug: bool,
}

/// Everything a supervisor needs to run a batch script, resolved by ctld.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRequest {
    pub job_id: JobId,
    pub spec: JobSpec,
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub cluster_name: String,
    pub partition: String,
    pub account: String,
    pub qos: String,
    pub time_limit: TimeLimit,
    /// All nodes of the job, node-table order; the batch script runs on the first.
    pub nodes: Vec<String>,
    pub cpus_per_node: Vec<u32>,
    pub tasks_per_node: Vec<u32>,
    /// CPUs on this node.
    pub cpus_on_node: u32,
    /// Memory per node, MB (0 = not limited).
    pub mem_per_node_mb: u64,
    /// GPU indices allocated on this node.
    pub gpus: Vec<u32>,
    /// Seconds between SIGTERM and SIGKILL.
    pub kill_wait: u32,
    /// Path of ctld's client socket, for commands run inside the job.
    pub ctld_socket: String,
    /// The array task this job is; `None` for a job that is not an array task.
    pub array: Option<ArrayTask>,
    /// How often the job was requeued (`SLURM_RESTART_COUNT` when > 0); also this launch's run
    /// number, which names the node's job directory and cgroups and every report about the run.
    pub restart_count: u32,
}

/// One run of a job: the job id and the run number (the job's restart count when it was launched).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobRun {
    pub job_id: JobId,
    pub run: u32,
}

impl std::fmt::Display for JobRun {
    /// `12.0`: the job id, then the run, as the node names the run's directory.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.job_id, self.run)
    }
}

/// An array task's place in its array (`%A`, `%a`, `SLURM_ARRAY_*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTask {
    pub array_job_id: JobId,
    pub task_id: u32,
    /// Number of tasks in the whole array, and its lowest and highest index and step.
    pub count: u32,
    pub min: u32,
    pub max: u32,
    pub step: u32,
}
