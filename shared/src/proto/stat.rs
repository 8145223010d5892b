//! `sstat` on the wire: what a running job's steps use now. ctld asks each of the job's nodes
//! ([`super::node::CtldMessage::StatJob`]); each node reads its steps' cgroups and the `/proc`
//! entries of the processes in them and answers with one [`StepSample`] per step it holds
//! ([`super::node::NodeMessage::JobStats`]); ctld gathers the answers (waiting at most
//! [`GATHER_TIMEOUT_SECS`]) and sends them to the CLI as [`StatReport`], which sums and renders.
//!
//! Every list is bounded: a node reports at most [`MAX_STEPS_PER_NODE`] steps and at most
//! [`MAX_PIDS`] process ids per step (the counts and sums still cover every process).

use crate::job::{JobId, StepId};
use serde::{Deserialize, Serialize};

/// The most steps one node reports for one job.
pub const MAX_STEPS_PER_NODE: usize = 256;

/// The most process ids one node lists for one step (`sstat -i`, `scontrol listpids`).
pub const MAX_PIDS: usize = 1024;

/// How long ctld waits for the job's nodes before it answers with what came.
pub const GATHER_TIMEOUT_SECS: u64 = 3;

/// What one step's processes on one node use, read when ctld asked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSample {
    /// `Batch` for the batch script's cgroup (`step_batch`), `Numbered(k)` for `step_<k>`.
    pub step_id: StepId,
    /// The lowest task id (global rank) of the step on this node, and how many tasks run here.
    pub first_task: u32,
    pub tasks: u32,
    /// CPU time of the step's processes here, microseconds: the cgroup's `cpu.stat` where the
    /// host has one, else user and system time of the live processes and of the children they
    /// reaped.
    pub cpu_usec: u64,
    /// Resident memory, KiB: the sum of each live process's peak (`VmHWM`).
    pub rss_kib: u64,
    /// Virtual memory, KiB: the sum of the live processes' sizes (`VmSize`).
    pub vmsize_kib: u64,
    /// Major page faults of the live processes.
    pub pages: u64,
    /// Bytes read and written by the live processes (`/proc/<pid>/io` `rchar`, `wchar`).
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// How many processes are in the step's cgroup here.
    pub processes: u32,
    /// Their ids, at most [`MAX_PIDS`], ascending.
    pub pids: Vec<u32>,
    /// The process each of the step's tasks here started as, in local task order (the batch
    /// step's script; an srun step's tasks as its runner forked them); at most `tasks`.
    pub task_pids: Vec<u32>,
}

/// One node's answer for one step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSample {
    pub node: String,
    pub sample: StepSample,
}

/// One running step as ctld knows it, with what its nodes answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepStat {
    pub step_id: StepId,
    /// Tasks of the whole step.
    pub num_tasks: u32,
    /// The step's nodes.
    pub nodes: Vec<String>,
    /// The nodes' answers (those that answered in time, node order).
    pub samples: Vec<NodeSample>,
}

/// The answer to [`super::client::Request::StatJob`]: the job's running steps, in ctld's order
/// (the batch step first, then srun steps by id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatReport {
    pub job_id: JobId,
    pub steps: Vec<StepStat>,
}
