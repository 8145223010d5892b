//! What one Raft log entry carries: a batch of the writer's [`DbOp`]s, as they are (the
//! after-commit markers travel beside the ops in this process's queue, never in the log). The
//! log stores entries with postcard, so a [`DbOp`]'s variants and fields keep their order; the
//! golden bytes below hold the encoding that logs written by earlier versions use.

use crate::store::db::DbOp;
use serde::{Deserialize, Serialize};

/// One log entry's operations, applied in one transaction on every replica.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Batch(pub(crate) Vec<DbOp>);

/// What applying an entry gave: `Err` when the transaction was refused (a constraint, the same on
/// every replica) and nothing of it is stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Applied(pub(crate) Result<(), String>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::{StoredEntity, StoredNodeState};
    use drover_shared::job::{JobInfo, JobSpec};

    /// One op of every kind, as the log's golden bytes were written from (by the version that
    /// kept a separate wire type): the same bytes must still decode into the same ops, and the
    /// ops must encode to them, or a replica could not read an older log.
    const GOLDEN: &str = "0f00070178000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000a23212f62696e2f73680a000000000000000000000000000000000000000000000000010301080000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000100020ae807056c6f63616c067375626d69740107026f6b016403026e31010172000012016f0101740165040000000000000000000005160101610175000000000000f83f0609000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000070401010800000000000000000000000000000000000001046831303002000000000000044009181e3c0a000000000b01026e32000000000c0103010203050c0d0103616e6e01020909001a0e026e330109312030203020312072";

    fn every_op() -> Vec<DbOp> {
        vec![
            DbOp::InsertJob {
                info: Box::new(JobInfo { job_id: 7, name: "x".into(), ..JobInfo::default() }),
                spec: Box::new(JobSpec { script: b"#!/bin/sh\n".to_vec(), ..JobSpec::default() }),
                fill_from: Some(3),
            },
            DbOp::UpdateJob {
                info: Box::new(JobInfo { job_id: 8, ..JobInfo::default() }),
                alloc: Some(Box::new(crate::model::state::Allocation::default())),
            },
            DbOp::Audit {
                time: 5,
                uid: 1000,
                origin: "local".into(),
                action: "submit".into(),
                job_id: Some(7),
                outcome: "ok".into(),
                detail: "d".into(),
            },
            DbOp::SaveNodeState(StoredNodeState {
                name: "n1".into(),
                drain_reason: Some("r".into()),
                down_reason: None,
                uid: 0,
                time: 9,
                owner: "o".into(),
                ticket: Some("t".into()),
                evidence: "e".into(),
                reboot: None,
            }),
            DbOp::NodeEvent(Box::default()),
            DbOp::SaveUsage { updated: 11, rows: vec![(("a".into(), "u".into()), 1.5)] },
            DbOp::RecordRun(Box::new(JobInfo { job_id: 9, ..JobInfo::default() })),
            DbOp::RequeueIntent { job_id: 4, hold: Some(true) },
            DbOp::RecordUsage(Box::new(crate::store::accounting::UsageRecord {
                job: drover_shared::proto::usage::JobUsage::default(),
                gpus_by_type: [("h100".to_string(), 2u64)].into_iter().collect(),
                billing: 2.5,
            })),
            DbOp::PurgeUsage { now: 12, hours_days: 30, jobs_days: 60 },
            DbOp::JobUsage(drover_shared::proto::node::JobUsage::default()),
            DbOp::StepUsage { step_id: 1, node: "n2".into(), usage: drover_shared::proto::node::JobUsage::default() },
            DbOp::SubmitKey { uid: 1, key: vec![1, 2, 3], job_id: 5, time: 6 },
            DbOp::AcctEntity(StoredEntity { kind: 1, name: "ann".into(), record: Some(vec![9, 9]), uid: 0, time: 13 }),
            DbOp::SaveNodeReboot { name: "n3".into(), reboot: Some("1 0 0 1 r".into()) },
        ]
    }

    #[test]
    fn the_log_encoding_is_unchanged() {
        let bytes = postcard::to_allocvec(&Batch(every_op())).unwrap();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, GOLDEN, "a DbOp's encoding changed: logs written before cannot be read");
        let golden: Vec<u8> =
            (0..GOLDEN.len()).step_by(2).map(|i| u8::from_str_radix(&GOLDEN[i..i + 2], 16).unwrap()).collect();
        let Batch(back) = postcard::from_bytes(&golden).unwrap();
        assert_eq!(format!("{back:?}"), format!("{:?}", every_op()));
    }
}
