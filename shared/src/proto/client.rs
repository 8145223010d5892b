//! CLI ↔ ctld messages: one [`Request`] per connection turn, one [`Response`] back.

use crate::job::{JobId, JobInfo, JobSpec, JobState};
use crate::node::{NodeInfo, PartitionInfo};
use crate::UnixTime;
use serde::{Deserialize, Serialize};

/// What a client asks of ctld.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// `sbatch`: answered with [`Response::Submitted`] only after the job is committed.
    Submit(Box<JobSpec>),
    /// `squeue`, `scontrol show job`: jobs still in ctld's memory.
    QueryJobs(JobQuery),
    /// `sacct`: jobs from the accounting database.
    QueryAccounting(AccountingQuery),
    /// `scancel`.
    Cancel(CancelRequest),
    /// `sinfo`, `scontrol show node`.
    QueryNodes,
    /// `sinfo`, `scontrol show partition`.
    QueryPartitions,
    /// `scontrol ping`.
    Ping,
}

/// Filters for [`Request::QueryJobs`]; empty lists mean "any".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobQuery {
    pub job_ids: Vec<JobId>,
    pub users: Vec<u32>,
    pub partitions: Vec<String>,
    pub states: Vec<JobState>,
    /// Include jobs that ended recently (still in memory); squeue leaves them out by default.
    pub include_finished: bool,
}

/// Filters for [`Request::QueryAccounting`]; empty lists mean "any".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountingQuery {
    pub job_ids: Vec<JobId>,
    /// Only these users' jobs; ctld restricts non-admins to their own unless `all_users`.
    pub users: Vec<u32>,
    pub all_users: bool,
    pub accounts: Vec<String>,
    pub partitions: Vec<String>,
    pub states: Vec<JobState>,
    /// Jobs that were eligible, running or ended within `[start, end]`.
    pub window_start: Option<UnixTime>,
    pub window_end: Option<UnixTime>,
}

/// `scancel`: the ids given plus filters; with no ids, the filters pick the jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequest {
    pub job_ids: Vec<JobId>,
    pub users: Vec<u32>,
    pub accounts: Vec<String>,
    pub partitions: Vec<String>,
    pub names: Vec<String>,
    pub states: Vec<JobState>,
    /// `--signal`: send this signal instead of cancelling.
    pub signal: Option<i32>,
    /// `-b/--batch`: signal only the batch shell.
    pub batch_only: bool,
}

/// ctld's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Submitted { job_id: JobId },
    Jobs { now: UnixTime, jobs: Vec<JobInfo> },
    Accounting { now: UnixTime, jobs: Vec<JobInfo> },
    /// One outcome per job id the request named or matched.
    Cancelled { results: Vec<(JobId, Result<(), ErrorCode>)> },
    Nodes { now: UnixTime, nodes: Vec<NodeInfo> },
    Partitions { partitions: Vec<PartitionInfo> },
    Pong { cluster: String, controller: String },
    /// The request failed as a whole.
    Error { code: ErrorCode, detail: String },
}

/// Failures a client can see, each with Slurm's message for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    InvalidPartition,
    InvalidAccount,
    InvalidQos,
    InvalidJobId,
    AccessDenied,
    NodeConfigUnavailable,
    InvalidTimeLimit,
    InvalidGres,
    InvalidSpec,
    AlreadyDone,
    /// ctld cannot store new work now (disk full, read-only database); nothing was changed.
    StorageUnavailable,
    Internal,
    /// The user has no association (not in the config and no default account).
    InvalidUser,
}

impl ErrorCode {
    /// Slurm's message for this error.
    pub fn message(self) -> &'static str {
        match self {
            ErrorCode::InvalidPartition => "Invalid partition name specified",
            ErrorCode::InvalidAccount => "Invalid account or account/partition combination specified",
            ErrorCode::InvalidQos => "Invalid qos specification",
            ErrorCode::InvalidJobId => "Invalid job id specified",
            ErrorCode::AccessDenied => "Access/permission denied",
            ErrorCode::NodeConfigUnavailable => "Requested node configuration is not available",
            ErrorCode::InvalidTimeLimit => "Requested time limit is invalid (missing or exceeds some limit)",
            ErrorCode::InvalidGres => "Invalid generic resource (gres) specification",
            ErrorCode::InvalidSpec => "Invalid job specification",
            ErrorCode::AlreadyDone => "Job/step already completing or completed",
            ErrorCode::StorageUnavailable => "Unable to store the job: controller storage unavailable",
            ErrorCode::Internal => "Unexpected error",
            ErrorCode::InvalidUser => "Invalid user id",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}
