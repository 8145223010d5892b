//! Usage reports on the wire (`drover report`, `sreport`): ctld reads its hourly rollups and
//! per-job usage records for a window and sends them; the CLI sums and renders. Seconds are
//! integers so the messages stay `Eq`; prices travel in thousandths.

use crate::UnixTime;
use crate::job::JobId;
use serde::{Deserialize, Serialize};

/// What a report asks for: records overlapping `[start, end)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageQuery {
    pub start: UnixTime,
    pub end: UnixTime,
    /// Also send per-job usage records (queue and failure reports need them).
    pub with_jobs: bool,
}

/// One hourly rollup row. `gpu_type` is empty for the row carrying CPU, memory and billing and
/// all GPU time of the association in that hour; typed rows carry only that type's GPU time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HourRow {
    /// Start of the hour (Unix seconds, a multiple of 3600).
    pub hour: UnixTime,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub gpu_type: String,
    pub cpu_secs: u64,
    pub mem_mb_secs: u64,
    pub gpu_secs: u64,
    /// GPU-seconds of jobs that borrowed another team's idle guarantee.
    pub borrowed_gpu_secs: u64,
    /// GPU-seconds the nodes reported busy (0 where no samples came).
    pub active_gpu_secs: u64,
    pub billing_secs: u64,
}

/// One run of one job, as recorded when it ended (or was requeued).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUsage {
    pub job_id: JobId,
    /// Restart count of the run (0 for the first).
    pub run: u32,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub submit_time: UnixTime,
    pub eligible_time: UnixTime,
    pub start_time: UnixTime,
    pub end_time: UnixTime,
    /// Slurm's long state name (`COMPLETED`, `FAILED`, …; `REQUEUED` for a requeued run).
    pub state: String,
    pub reason: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub gpus: u32,
    /// `type:count` pairs, comma-separated (`h100:2`).
    pub gpu_types: String,
    pub borrowed: bool,
    /// GPU-seconds the node's NVML samples showed busy (Σ utilization × time); `None` without samples.
    pub active_gpu_secs: Option<u64>,
    /// The job template it was submitted with; empty for none.
    pub template: String,
}

/// The answer to a usage query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReport {
    pub cluster: String,
    pub now: UnixTime,
    pub start: UnixTime,
    pub end: UnixTime,
    /// Configured CPUs and GPUs of the cluster (for utilization percentages).
    pub cpus: u64,
    pub gpus: u64,
    pub hours: Vec<HourRow>,
    pub jobs: Vec<JobUsage>,
    /// GPU type → price of one GPU-hour × 1000 (`*` for any other type).
    pub gpu_hour_price_milli: Vec<(String, u64)>,
    /// Quota reclaims in the window: `(time, job id, detail)` from the audit table.
    pub reclaims: Vec<(UnixTime, Option<JobId>, String)>,
}

/// One job's GPUs on one node at one heartbeat, from NVML (noded → ctld in
/// [`super::node::NodeMessage::GpuUsage`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGpuSample {
    pub job_id: JobId,
    /// GPUs (or MIG instances) of the job sampled on this node.
    pub gpus: u32,
    /// Sum over those GPUs of NVML's utilization percent (0..=100 each; MIG instances report 0).
    pub utilization_percent_sum: u32,
    pub memory_used_bytes: u64,
}
