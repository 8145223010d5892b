//! The writer of a leading replica: the embedded writer's loop (`store::db::run_writer`) with
//! the commit replaced by a Raft proposal. Each batch's ops become one log entry; the batch's
//! `AfterCommit` actions are reported only once the entry is committed on a majority and applied
//! here, and the stored specs launches need are read back after that apply. A proposal that fails
//! (this replica no longer leads) steps down, which ends the process: the entry may still commit under the next
//! leader, so answering "not stored" would be wrong, and the client sees its connection close.

use super::TypeConfig;
use super::wire::{Batch, WireOp};
use crate::store::db::{self, AfterCommit, CommitReport, DbOp};
use openraft::Raft;
use std::path::Path;

/// Most ops in one log entry (an entry travels whole in one frame).
const MAX_ENTRY_OPS: usize = 512;

/// Runs until the core drops its sender.
pub(crate) fn run(
    raft: Raft<TypeConfig>,
    step_down: super::StepDown,
    runtime: tokio::runtime::Handle,
    db_path: &Path,
    ops: std::sync::mpsc::Receiver<DbOp>,
    max_batch: usize,
    report: impl Fn(CommitReport),
) {
    let reader = match db::open(db_path, true) {
        Ok(reader) => reader,
        Err(e) => {
            tracing::error!(error = %e, "the state database cannot be read; exiting");
            step_down("the state database cannot be read");
        }
    };
    let limit = max_batch.clamp(1, MAX_ENTRY_OPS);
    while let Ok(first) = ops.recv() {
        let mut batch = vec![first];
        while batch.len() < limit {
            match ops.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let n_ops = batch.len();
        let (mut entry, mut after) = (Vec::new(), Vec::new());
        for op in batch {
            match WireOp::from_op(op) {
                Ok(op) => entry.push(op),
                Err(action) => after.push(action),
            }
        }
        let error = if entry.is_empty() {
            None
        } else {
            match runtime.block_on(raft.client_write(Batch(entry))) {
                Ok(written) => written.data.0.err(),
                Err(e) => {
                    tracing::error!(error = %e, n_ops, "a batch could not be replicated; exiting (its outcome is the next leader's)");
                    step_down("a batch could not be replicated");
                }
            }
        };
        let after = after
            .into_iter()
            .map(|action| match action {
                AfterCommit::Launch(job_id, None) => {
                    let spec = db::stored_spec(&reader, job_id)
                        .inspect_err(|e| tracing::error!(job_id, error = %e, "the job's stored spec cannot be read"))
                        .ok()
                        .map(Box::new);
                    AfterCommit::Launch(job_id, spec)
                }
                action => action,
            })
            .collect();
        report(CommitReport { after, error, n_ops });
    }
}
