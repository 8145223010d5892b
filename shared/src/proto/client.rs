//! CLI ↔ ctld messages: one [`Request`] per connection turn, one [`Response`] back.

use crate::UnixTime;
use crate::job::{JobId, JobInfo, JobSpec, JobState};
use crate::node::{NodeInfo, PartitionInfo};
use serde::{Deserialize, Serialize};

/// The most items one list of a request may hold (job ids, array tasks, users, accounts…):
/// each one costs the core a lookup and an audit record, so a longer list (an 11 MiB frame
/// holds two million ids) would hold every other user's request for a minute. Commands split
/// longer lists over several requests.
pub const MAX_LIST_ITEMS: usize = 10_000;

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
    /// `scancel 12_3`: array tasks by `(array job id, task index)`; answered with
    /// [`Response::Cancelled`], one result per task in the order given (keyed by the array job id).
    CancelTasks { request: CancelRequest, tasks: Vec<(JobId, u32)> },
    /// `scontrol hold|uhold|release`: `hold = None` releases; `Some(true)` is a user hold
    /// (`uhold`). Answered with [`Response::Cancelled`], one result per job id in order.
    Hold { job_ids: Vec<JobId>, hold: Option<bool> },
    /// `scontrol requeue`: running jobs are killed and queued again under the same id.
    /// Answered with [`Response::Cancelled`], one result per job id in order.
    Requeue { job_ids: Vec<JobId> },
    /// `scontrol show config`: answered with [`Response::Config`].
    ShowConfig,
    /// `scontrol update job`: answered with [`Response::Cancelled`], one result per job id.
    UpdateJob { job_ids: Vec<JobId>, update: JobUpdate },
    /// `sshare`: the fair-share tree with usage.
    QueryShares,
    /// `sprio`: the priority factors of pending jobs.
    QueryPriority,
    /// `drover why JOBID`: every reason a job waits (or how it runs), with numbers.
    Explain { job_id: JobId },
    /// `drover report`, `sreport`: usage rollups for a window; answered with [`Response::Usage`].
    QueryUsage(super::usage::UsageQuery),
    /// `srun` in job `job_id`: answered with [`Response::StepCreated`] once the step row is
    /// committed; ctld then sends the step's tasks to its nodes.
    CreateStep { job_id: JobId, spec: Box<crate::job::StepSpec> },
    /// `srun` reports the end of a step it created: the highest task status and the state.
    StepDone { job_id: JobId, step_id: u32, state: JobState, exit_status: crate::job::WaitStatus },
    /// `scancel N.S` (with `signal`: `scancel --signal`): one step only.
    CancelStep { job_id: JobId, step_id: u32, signal: Option<i32> },
    /// `scontrol update NodeName=… State=…`: operators and admins. Answered with
    /// [`Response::Done`] or an error that changed nothing.
    UpdateNode(NodeUpdate),
    /// `scontrol reconfigure`: ctld re-reads its config file (admins). Answered with
    /// [`Response::Done`], or an error carrying the loader's message while the old config stays.
    Reconfigure,
    /// `sinfo -R`, `scontrol show node`: who set each node's reason and when; answered with
    /// [`Response::NodeReasons`].
    QueryNodeReasons,
    /// `drover audit`: audit records; users see only their own. Answered with [`Response::Audit`].
    QueryAudit(AuditQuery),
    /// `scontrol requeuehold`: as [`Request::Requeue`], and the job pends held (`JobHeldUser`)
    /// once its run has ended. Answered with [`Response::Cancelled`].
    RequeueHold { job_ids: Vec<JobId> },
    /// `sbatch --test-only`: validates the job as a submission would and answers with
    /// [`Response::WillRun`]; nothing is stored and no job id is used.
    TestOnly(Box<JobSpec>),
    /// `sinfo %f/%b`, `scontrol show node`: each node's features, answered with
    /// [`Response::NodeFeatures`] (node order as in [`Response::Nodes`]).
    QueryNodeFeatures,
    /// `scontrol hold|release|update` of array task `N_T` that has not started: ctld splits the
    /// task out of its array's pending range into a record of its own (as Slurm does) and
    /// answers [`Response::Submitted`] with that record's id.
    SplitArrayTask { array_job_id: JobId, task: u32 },
    /// `sacct` `TotalCPU`, `UserCPU`, `SystemCPU`, `MaxRSS`, `AveRSS`: what these jobs' batch
    /// scripts used, answered with [`Response::JobUsage`] (jobs without a measurement are left
    /// out).
    QueryJobUsage { job_ids: Vec<JobId> },
    /// `sacct` usage fields of srun steps: answered with [`Response::StepUsage`], every node's
    /// share added up (CPU times summed, the largest RSS).
    QueryStepUsage { job_ids: Vec<JobId> },
    /// `squeue`: as [`Request::QueryJobs`], answered with [`Response::Jobs`] whose records carry
    /// only `fields` of their text and lists (the rest empty; numbers, states and times always).
    QueryJobFields { query: JobQuery, fields: crate::job::fields::JobFields },
    /// `squeue` with a format ctld can render whole ([`crate::queue_lines::LineFormat::server_renders`]):
    /// answered with [`Response::JobLines`], each matching job's line and sort key.
    QueryJobLines { query: JobQuery, format: crate::queue_lines::LineFormat },
    /// `drover node history NODE`: the node's recorded events (state changes with their owner,
    /// reason and ticket; job failures attributed to it), newest `limit` of them, answered with
    /// [`Response::NodeHistory`].
    QueryNodeHistory { node: String, limit: u32 },
    /// `drover templates`: the job templates the caller may use (operators and admins: all),
    /// answered with [`Response::Templates`].
    QueryTemplates,
    /// `sacctmgr ARGS…` (read-only): answered with [`Response::Listing`], rendered from the
    /// configuration ctld runs as the caller may see it (`crate::sacctmgr`), or an error whose
    /// detail is sacctmgr's message.
    Sacctmgr { args: Vec<String> },
    /// `scontrol ping` of a replicated controller: every replica and how the leader sees it,
    /// answered with [`Response::Replicas`] (empty from a single controller).
    QueryReplicas,
    /// `drover simulate` (operators and admins): replays recorded jobs against the running
    /// config and a candidate, answered with [`Response::Simulated`]. Nothing of ctld's state
    /// changes.
    Simulate(Box<super::simulate::SimulateRequest>),
    /// `sbatch`, `salloc`: as [`Request::Submit`], under a key the client chose at random
    /// ([`SUBMIT_KEY_LEN`] bytes), so that it may send the same submission again when its
    /// connection broke before the answer (the controller crashed or failed over): a key ctld
    /// already stored for this user is answered with that job's id, and no second job is made.
    SubmitOnce { key: Vec<u8>, spec: Box<JobSpec> },
    /// `sacctmgr add|modify|delete|load` (operators and admins): the parsed change, applied at
    /// once and stored (`commit`), or only checked and described (`commit` false: what sacctmgr
    /// shows before it asks to commit). Answered with [`Response::AcctChanged`] after the
    /// change is committed, or an error whose detail is sacctmgr's message.
    SacctmgrChange { change: Box<crate::sacctmgr::edit::Change>, commit: bool },
    /// `sdiag`: ctld's statistics, answered with [`Response::Diag`].
    Diag,
    /// `sstat`, `scontrol listpids`: what the running steps of a job use now, read on its nodes
    /// (`super::stat`). Answered with [`Response::StepStats`]; a job the caller may not see (or
    /// that is not in ctld's memory) is `InvalidJobId`, another user's job that is visible is
    /// `AccessDenied` (only operators and admins read other users' steps).
    StatJob { job_id: JobId },
    /// `scontrol reboot` (operators and admins): the nodes run their `reboot_program` once
    /// idle; answered with [`Response::Done`].
    RebootNodes(Box<RebootRequest>),
    /// `scontrol cancel_reboot NODELIST` (operators and admins): a reboot not yet issued is
    /// forgotten; answered with [`Response::Done`].
    CancelReboot { nodes: String },
}

/// `scontrol reboot [ASAP] [nextstate=RESUME|DOWN] [reason=…] ALL|NODELIST`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootRequest {
    /// A hostlist expression, or `ALL`.
    pub nodes: String,
    /// Drain the nodes now (no new jobs), so that they reboot as soon as their jobs end.
    pub asap: bool,
    /// `nextstate=DOWN`: the nodes come back `DOWN` instead of in service.
    pub next_down: bool,
    pub reason: Option<String>,
}

/// The length of [`Request::SubmitOnce`]'s key.
pub const SUBMIT_KEY_LEN: usize = 16;

impl Request {
    /// The length of the request's longest list, checked against [`MAX_LIST_ITEMS`].
    pub fn longest_list(&self) -> usize {
        let job_query = |q: &JobQuery| q.job_ids.len().max(q.users.len()).max(q.partitions.len()).max(q.states.len());
        let cancel = |r: &CancelRequest| {
            r.job_ids.len().max(r.users.len()).max(r.accounts.len()).max(r.partitions.len()).max(r.names.len())
        };
        match self {
            Request::Cancel(request) => cancel(request),
            Request::CancelTasks { request, tasks } => cancel(request).max(tasks.len()),
            Request::Hold { job_ids, .. }
            | Request::Requeue { job_ids }
            | Request::RequeueHold { job_ids }
            | Request::UpdateJob { job_ids, .. }
            | Request::QueryJobUsage { job_ids }
            | Request::QueryStepUsage { job_ids } => job_ids.len(),
            Request::QueryJobs(query)
            | Request::QueryJobFields { query, .. }
            | Request::QueryJobLines { query, .. } => job_query(query),
            Request::QueryAccounting(q) => {
                q.job_ids.len().max(q.users.len()).max(q.accounts.len()).max(q.partitions.len()).max(q.states.len())
            }
            Request::QueryAudit(q) => q.job_ids.len().max(q.uids.len()).max(q.actions.len()),
            Request::Sacctmgr { args } => args.len(),
            Request::SacctmgrChange { change, .. } => change.longest_list(),
            _ => 0,
        }
    }
}

/// A node state `scontrol update NodeName=…` can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeStateChange {
    /// No new jobs; running ones finish (`drng` → `drain`).
    Drain,
    /// Unusable; jobs on it are ended `NODE_FAIL`.
    Down,
    /// Clears drain and down.
    Resume,
    /// Clears drain only.
    Undrain,
}

/// `scontrol update NodeName=<hostlist> State=… Reason=…`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeUpdate {
    /// A hostlist expression; every name must be a configured node.
    pub nodes: String,
    pub state: NodeStateChange,
    /// Required for `Drain` and `Down`.
    pub reason: Option<String>,
    /// Drover's `Owner=`: who owns the incident a drain or down opens (a person or a team);
    /// the caller when not given.
    pub owner: Option<String>,
    /// Drover's `Ticket=`: a ticket id or runbook link for the incident.
    pub ticket: Option<String>,
}

/// Who set a node's reason, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReason {
    pub node: String,
    pub reason: String,
    pub uid: u32,
    /// The user's name, or the uid as text when it has none.
    pub user: String,
    pub time: UnixTime,
    /// Who owns the node's open incident (`system` for automatic drains).
    pub owner: String,
    pub ticket: Option<String>,
}

/// One entry of a node's history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvent {
    pub time: UnixTime,
    pub node: String,
    /// `drain`, `down`, `resume`, `undrain`, `auto_drain` (the system's own drains) or
    /// `job_failure`.
    pub event: String,
    /// Who did it (for `job_failure`, the job's owner).
    pub uid: u32,
    pub user: String,
    pub owner: String,
    pub reason: String,
    pub ticket: Option<String>,
    /// What the system saw: the failed jobs behind an automatic drain, a job's end.
    pub evidence: String,
    pub job_id: Option<JobId>,
}

/// Filters for [`Request::QueryAudit`]; empty lists mean "any".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    pub uids: Vec<u32>,
    pub actions: Vec<String>,
    pub job_ids: Vec<JobId>,
    pub since: Option<UnixTime>,
    pub until: Option<UnixTime>,
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRow {
    pub id: u64,
    pub time: UnixTime,
    pub uid: u32,
    pub user: String,
    /// `local` (ctld's Unix socket), `ctld` (the controller itself) or `node:<name>`.
    pub origin: String,
    pub action: String,
    pub job_id: Option<JobId>,
    /// `ok`, or the refusal's message.
    pub outcome: String,
    pub detail: String,
}

/// The fields `scontrol update job` changes; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUpdate {
    pub time_limit: Option<crate::grammar::time::TimeLimit>,
    pub name: Option<String>,
    pub comment: Option<String>,
    pub nice: Option<i32>,
    /// An empty text removes the dependency.
    pub dependency: Option<String>,
    /// `ArrayTaskThrottle`; 0 removes the limit.
    pub array_max_tasks: Option<u32>,
    pub requeue: Option<bool>,
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
    /// `-D/--duplicates`: also the earlier runs of requeued jobs, each before the job's latest
    /// record (protocol 3).
    pub duplicates: bool,
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
    /// `-f/--full`: signal the batch shell and every step. Without it (and without `-b`) a
    /// signal reaches the job's steps only, as in Slurm.
    #[serde(default)]
    pub full: bool,
}

/// ctld's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Submitted {
        job_id: JobId,
    },
    Jobs {
        now: UnixTime,
        jobs: Vec<JobInfo>,
    },
    Accounting {
        now: UnixTime,
        jobs: Vec<JobInfo>,
    },
    /// One outcome per job id the request named or matched.
    Cancelled {
        results: Vec<(JobId, Result<(), ErrorCode>)>,
    },
    Nodes {
        now: UnixTime,
        nodes: Vec<NodeInfo>,
    },
    Partitions {
        partitions: Vec<PartitionInfo>,
    },
    Pong {
        cluster: String,
        controller: String,
    },
    /// The request failed as a whole.
    Error {
        code: ErrorCode,
        detail: String,
    },
    /// Answer to [`Request::QueryShares`]: every association in tree order.
    Shares {
        fair_tree: bool,
        rows: Vec<ShareRow>,
    },
    /// Answer to [`Request::QueryPriority`]: one row per pending job and partition.
    Priorities {
        weights: PriorityWeights,
        rows: Vec<PriorityRow>,
    },
    /// Answer to [`Request::ShowConfig`]: Slurm's parameter names and values, in display order.
    Config {
        now: UnixTime,
        entries: Vec<(String, String)>,
    },
    /// Answer to [`Request::Explain`]: one finding per line.
    Explanation {
        job_id: JobId,
        lines: Vec<String>,
    },
    /// Answer to [`Request::QueryUsage`].
    Usage(Box<super::usage::UsageReport>),
    /// Answer to [`Request::CreateStep`].
    StepCreated(Box<crate::job::StepLayout>),
    /// Answer to [`Request::StepDone`] and [`Request::CancelStep`].
    StepOk,
    /// Answer to [`Request::UpdateNode`] and [`Request::Reconfigure`]: done.
    Done,
    /// Answer to [`Request::QueryNodeReasons`]: nodes with a reason, node-table order.
    NodeReasons {
        reasons: Vec<NodeReason>,
    },
    /// Answer to [`Request::QueryAudit`]: oldest first.
    Audit {
        rows: Vec<AuditRow>,
    },
    /// Answer to [`Request::TestOnly`]: the id the job would get and where and when it would
    /// start if submitted now.
    WillRun {
        job_id: JobId,
        start: UnixTime,
        cpus: u32,
        nodes: Vec<String>,
        partition: String,
    },
    /// Answer to [`Request::QueryNodeFeatures`]: `(node, features)` per node.
    NodeFeatures {
        nodes: Vec<(String, Vec<String>)>,
    },
    /// Answer to [`Request::QueryJobUsage`].
    JobUsage {
        usage: Vec<crate::proto::node::JobUsage>,
    },
    /// Answer to [`Request::QueryStepUsage`]: `(step id, usage)` with the job id in `usage`.
    StepUsage {
        usage: Vec<(u32, crate::proto::node::JobUsage)>,
    },
    /// Answer to [`Request::QueryJobLines`]: `count` rows in job id order, each a little-endian
    /// `u32` key length, a `u32` line length, the sort key bytes, then the line (newline included).
    JobLines {
        now: UnixTime,
        count: u32,
        #[serde(with = "serde_bytes")]
        rows: Vec<u8>,
    },
    /// Answer to [`Request::QueryNodeHistory`]: oldest first.
    NodeHistory {
        events: Vec<NodeEvent>,
    },
    /// Answer to [`Request::QueryTemplates`]: config order.
    Templates {
        templates: Vec<TemplateInfo>,
    },
    /// Answer to [`Request::Sacctmgr`]: the text sacctmgr prints.
    Listing {
        text: String,
    },
    /// Answer to [`Request::QueryReplicas`]: config order.
    Replicas {
        replicas: Vec<ReplicaState>,
    },
    /// Answer to [`Request::Simulate`].
    Simulated(Box<super::simulate::SimulateReport>),
    /// Answer to [`Request::SacctmgrChange`]: sacctmgr's messages, and whether anything changed
    /// (`false`: `Nothing new added.` and the like, which sacctmgr prints and exits 1 on).
    AcctChanged {
        text: String,
        changed: bool,
    },
    /// Answer to [`Request::Diag`].
    Diag(Box<super::diag::DiagReport>),
    /// Answer to [`Request::StatJob`].
    StepStats(Box<super::stat::StatReport>),
}

/// One replica of a replicated controller as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaState {
    pub id: u64,
    /// Where nodes and remote clients reach it while it leads.
    pub address: String,
    /// The replica that answered (the leader).
    pub leader: bool,
    /// It answered the leader within the last second (the leader itself always is).
    pub up: bool,
    /// Log entries it has yet to receive (0: in step); `None` when unknown.
    pub behind: Option<u64>,
}

/// A job template as `drover templates` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateInfo {
    pub name: String,
    pub description: String,
    /// Accounts that may use it; empty = every account.
    pub accounts: Vec<String>,
    /// `(field, the template's value or "", what a user may set)` for each field it governs.
    pub fields: Vec<(String, String, String)>,
    pub setup: Vec<String>,
}

/// One row of a [`Response::JobLines`] answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLine<'a> {
    pub key: &'a [u8],
    pub line: &'a [u8],
}

/// Appends a row to a [`Response::JobLines`] row buffer.
pub fn push_job_line(rows: &mut Vec<u8>, key: &[u8], line: &[u8]) {
    let len = |bytes: &[u8]| u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes();
    rows.extend_from_slice(&len(key));
    rows.extend_from_slice(&len(line));
    rows.extend_from_slice(key);
    rows.extend_from_slice(line);
}

/// The rows of a [`Response::JobLines`] answer; `None` when the buffer is cut or malformed.
pub fn job_lines(mut rows: &[u8]) -> Option<Vec<JobLine<'_>>> {
    let mut out = Vec::new();
    while !rows.is_empty() {
        let (head, rest) = rows.split_at_checked(8)?;
        let key_len = u32::from_le_bytes(head[..4].try_into().ok()?) as usize;
        let line_len = u32::from_le_bytes(head[4..].try_into().ok()?) as usize;
        let (key, rest) = rest.split_at_checked(key_len)?;
        let (line, rest) = rest.split_at_checked(line_len)?;
        out.push(JobLine { key, line });
        rows = rest;
    }
    Some(out)
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
    /// `--dependency` names a job ctld does not know, or uses a form Drover does not support.
    Dependency,
    /// `--array` is malformed or larger than `MaxArraySize`.
    BadArraySpec,
    /// `scontrol release` of a job that is not held.
    JobNotHeld,
    /// The operation is turned off for this job (`scontrol requeue` of a `--no-requeue` job).
    Disabled,
    /// The operation needs a job that has started (`scontrol requeue` of a pending job).
    JobPending,
    /// A QOS or association limit refuses the job at submit time.
    AccountingPolicy,
    /// A step's CPUs are all taken by the job's running steps now (srun retries).
    StepsBusy,
    /// `scontrol update NodeName=` names a node that is not configured.
    InvalidNodeName,
    /// `State=DRAIN|DOWN` without `Reason=`.
    NodeReasonRequired,
    /// `scontrol reconfigure`: the config file is invalid (the detail has the loader's error);
    /// the old config stays in force.
    InvalidConfig,
    /// `--constraint` is malformed or names a feature no node has.
    InvalidFeature,
    /// A time that cannot be met (`--deadline` already past).
    InvalidTimeValue,
    /// A step asks for more CPUs than its job has on a node (without `--overcommit`).
    TooManyCpus,
    /// A step's task count is zero or above `max_tasks_per_node` on some node.
    BadTaskCount,
    /// `scancel --signal` of a job that is not running (yet): scancel tries again.
    TransitionState,
    /// `scontrol cancel_reboot` of a node already told to reboot.
    RebootInProgress,
    /// `scontrol reboot` of a node whose config names no `reboot_program`.
    RebootProgramUndefined,
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
            ErrorCode::Dependency => "Job dependency problem",
            ErrorCode::BadArraySpec => "Invalid job array specification",
            ErrorCode::JobNotHeld => "Job is no longer pending execution",
            ErrorCode::Disabled => "Requested operation is presently disabled",
            ErrorCode::JobPending => "Job is pending execution",
            ErrorCode::AccountingPolicy => {
                "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
            }
            ErrorCode::StepsBusy => "Requested nodes are busy",
            ErrorCode::InvalidNodeName => "Invalid node name specified",
            ErrorCode::NodeReasonRequired => {
                "You must specify a reason when DOWNING or DRAINING a node. Request denied"
            }
            ErrorCode::InvalidConfig => "Invalid configuration file",
            ErrorCode::InvalidFeature => "Invalid feature specification",
            ErrorCode::InvalidTimeValue => "Invalid time specification",
            ErrorCode::TooManyCpus => "More processors requested than permitted",
            ErrorCode::BadTaskCount => "Task count specification invalid",
            ErrorCode::TransitionState => "Job can not be altered now, try again later",
            ErrorCode::RebootInProgress => "Reboot already in progress",
            ErrorCode::RebootProgramUndefined => "RebootProgram isn't defined",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// A float on the wire, carried as its bits so messages stay `Eq`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Real(pub u64);

impl Real {
    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

impl From<f64> for Real {
    fn from(value: f64) -> Real {
        Real(value.to_bits())
    }
}

/// One association as `sshare` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareRow {
    /// The account, or for a user association the account it belongs to.
    pub account: String,
    /// `Some` for a user association.
    pub user: Option<String>,
    /// Depth in the tree: root 0, its children 1; a user row is one deeper than its account.
    pub depth: u32,
    /// `None` for root.
    pub raw_shares: Option<u32>,
    pub norm_shares: Real,
    pub raw_usage: Real,
    pub norm_usage: Real,
    pub effective_usage: Real,
    /// Fair Tree: user rows only; classic: every row.
    pub fairshare: Option<Real>,
    /// Fair Tree only; `None` on the root row.
    pub level_fs: Option<Real>,
    /// `cpu=…,mem=…,…`: TRES-minutes the running jobs still hold.
    pub tres_run_mins: String,
    pub grp_tres_mins: String,
}

/// The configured weights, for `sprio -w`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityWeights {
    pub age: u32,
    pub assoc: u32,
    pub fairshare: u32,
    pub job_size: u32,
    pub partition: u32,
    pub qos: u32,
    /// `cpu=1000,mem=2000` as configured, empty when none.
    pub tres: String,
}

/// One pending job in one partition, with its normalized factors (0–1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityRow {
    pub job_id: JobId,
    pub partition: String,
    pub user: String,
    pub priority: u32,
    pub site: u32,
    pub age: Real,
    pub assoc: Real,
    pub fairshare: Real,
    pub job_size: Real,
    pub partition_factor: Real,
    pub qos: Real,
    pub nice: i32,
    /// Weighted TRES factors, `cpu=12,gres/gpu=300`; empty when no TRES weight is set.
    pub tres: String,
}
