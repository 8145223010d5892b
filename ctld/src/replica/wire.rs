//! What one Raft log entry carries: a batch of the writer's [`DbOp`]s in an owned, serializable
//! form. `After` markers never travel (they are the leader's own follow-ups), and the audit
//! action, a `&'static str` in memory, travels as text and is interned back on apply.

use crate::model::state::Allocation;
use crate::store::accounting::UsageRecord;
use crate::store::db::{AfterCommit, DbOp, StoredEntity, StoredNodeState};
use drover_shared::UnixTime;
use drover_shared::job::{JobId, JobInfo, JobSpec};
use drover_shared::proto::client::NodeEvent;
use drover_shared::proto::node::JobUsage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One log entry's operations, applied in one transaction on every replica.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Batch(pub(crate) Vec<WireOp>);

/// What applying an entry gave: `Err` when the transaction was refused (a constraint, the same on
/// every replica) and nothing of it is stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Applied(pub(crate) Result<(), String>);

/// [`DbOp`] without its local-only variant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum WireOp {
    InsertJob {
        info: Box<JobInfo>,
        spec: Box<JobSpec>,
        fill_from: Option<JobId>,
    },
    UpdateJob {
        info: Box<JobInfo>,
        alloc: Option<Box<Allocation>>,
    },
    Audit {
        time: UnixTime,
        uid: u32,
        origin: String,
        action: String,
        job_id: Option<JobId>,
        outcome: String,
        detail: String,
    },
    SaveNodeState {
        name: String,
        drain_reason: Option<String>,
        down_reason: Option<String>,
        uid: u32,
        time: UnixTime,
        owner: String,
        ticket: Option<String>,
        evidence: String,
    },
    NodeEvent(Box<NodeEvent>),
    SaveUsage {
        updated: UnixTime,
        rows: Vec<((String, String), f64)>,
    },
    RecordRun(Box<JobInfo>),
    RequeueIntent {
        job_id: JobId,
        hold: Option<bool>,
    },
    RecordUsage {
        job: drover_shared::proto::usage::JobUsage,
        gpus_by_type: BTreeMap<String, u64>,
        billing: f64,
    },
    PurgeUsage {
        now: UnixTime,
        hours_days: u32,
        jobs_days: u32,
    },
    JobUsage(JobUsage),
    StepUsage {
        step_id: u32,
        node: String,
        usage: JobUsage,
    },
    SubmitKey {
        uid: u32,
        key: Vec<u8>,
        job_id: drover_shared::job::JobId,
        time: drover_shared::UnixTime,
    },
    /// An account, user or QOS sacctmgr changed (appended: earlier variants keep their encoding).
    AcctEntity {
        kind: u8,
        name: String,
        record: Option<Vec<u8>>,
        uid: u32,
        time: UnixTime,
    },
}

impl WireOp {
    /// The wire form of `op`; `Err` with an `After` marker's action, which stays with the
    /// leader.
    pub(crate) fn from_op(op: DbOp) -> Result<WireOp, AfterCommit> {
        Ok(match op {
            DbOp::InsertJob { info, spec, fill_from } => WireOp::InsertJob { info, spec, fill_from },
            DbOp::UpdateJob { info, alloc } => WireOp::UpdateJob { info, alloc },
            DbOp::Audit { time, uid, origin, action, job_id, outcome, detail } => {
                WireOp::Audit { time, uid, origin, action: action.to_owned(), job_id, outcome, detail }
            }
            DbOp::SaveNodeState(s) => WireOp::SaveNodeState {
                name: s.name,
                drain_reason: s.drain_reason,
                down_reason: s.down_reason,
                uid: s.uid,
                time: s.time,
                owner: s.owner,
                ticket: s.ticket,
                evidence: s.evidence,
            },
            DbOp::NodeEvent(event) => WireOp::NodeEvent(event),
            DbOp::SaveUsage { updated, rows } => WireOp::SaveUsage { updated, rows },
            DbOp::RecordRun(info) => WireOp::RecordRun(info),
            DbOp::RequeueIntent { job_id, hold } => WireOp::RequeueIntent { job_id, hold },
            DbOp::RecordUsage(r) => {
                let UsageRecord { job, gpus_by_type, billing } = *r;
                WireOp::RecordUsage { job, gpus_by_type, billing }
            }
            DbOp::PurgeUsage { now, hours_days, jobs_days } => WireOp::PurgeUsage { now, hours_days, jobs_days },
            DbOp::JobUsage(usage) => WireOp::JobUsage(usage),
            DbOp::StepUsage { step_id, node, usage } => WireOp::StepUsage { step_id, node, usage },
            DbOp::SubmitKey { uid, key, job_id, time } => WireOp::SubmitKey { uid, key, job_id, time },
            DbOp::AcctEntity(StoredEntity { kind, name, record, uid, time }) => {
                WireOp::AcctEntity { kind, name, record, uid, time }
            }
            DbOp::After(action) => return Err(action),
        })
    }

    /// The op to write on apply.
    pub(crate) fn into_op(self) -> DbOp {
        match self {
            WireOp::InsertJob { info, spec, fill_from } => DbOp::InsertJob { info, spec, fill_from },
            WireOp::UpdateJob { info, alloc } => DbOp::UpdateJob { info, alloc },
            WireOp::Audit { time, uid, origin, action, job_id, outcome, detail } => {
                DbOp::Audit { time, uid, origin, action: intern(action), job_id, outcome, detail }
            }
            WireOp::SaveNodeState { name, drain_reason, down_reason, uid, time, owner, ticket, evidence } => {
                DbOp::SaveNodeState(StoredNodeState {
                    name,
                    drain_reason,
                    down_reason,
                    uid,
                    time,
                    owner,
                    ticket,
                    evidence,
                })
            }
            WireOp::NodeEvent(event) => DbOp::NodeEvent(event),
            WireOp::SaveUsage { updated, rows } => DbOp::SaveUsage { updated, rows },
            WireOp::RecordRun(info) => DbOp::RecordRun(info),
            WireOp::RequeueIntent { job_id, hold } => DbOp::RequeueIntent { job_id, hold },
            WireOp::RecordUsage { job, gpus_by_type, billing } => {
                DbOp::RecordUsage(Box::new(UsageRecord { job, gpus_by_type, billing }))
            }
            WireOp::PurgeUsage { now, hours_days, jobs_days } => DbOp::PurgeUsage { now, hours_days, jobs_days },
            WireOp::JobUsage(usage) => DbOp::JobUsage(usage),
            WireOp::StepUsage { step_id, node, usage } => DbOp::StepUsage { step_id, node, usage },
            WireOp::SubmitKey { uid, key, job_id, time } => DbOp::SubmitKey { uid, key, job_id, time },
            WireOp::AcctEntity { kind, name, record, uid, time } => {
                DbOp::AcctEntity(StoredEntity { kind, name, record, uid, time })
            }
        }
    }
}

/// Most distinct audit actions interned; the code names a few dozen, so more than this means a
/// peer sends nonsense, and the rest are stored as `other`.
const MAX_ACTIONS: usize = 256;

/// The `&'static str` for an audit action received from the leader (each distinct text is
/// leaked once).
fn intern(action: String) -> &'static str {
    static ACTIONS: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut actions = ACTIONS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = actions.iter().find(|known| **known == action) {
        return known;
    }
    if actions.len() >= MAX_ACTIONS {
        return "other";
    }
    let leaked: &'static str = Box::leak(action.into_boxed_str());
    actions.push(leaked);
    leaked
}
