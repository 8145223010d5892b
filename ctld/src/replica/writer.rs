//! The writer of a leading replica: the one writer loop (`store::db::run_writer_loop`) with the
//! commit replaced by a Raft proposal. Each batch's ops become one log entry; the batch's
//! `AfterCommit` actions are reported only once the entry is committed on a majority and applied
//! here, and the stored specs launches need are read back after that apply. A proposal that fails
//! (this replica no longer leads) steps down, which ends the process: the entry may still commit
//! under the next leader, so answering "not stored" would be wrong, and the client sees its
//! connection close.

use super::TypeConfig;
use super::wire::Batch;
use crate::store::db::{self, CommitReport, DbOp, Queued};
use drover_shared::job::{JobId, JobSpec};
use openraft::Raft;
use std::path::Path;

/// Most ops in one log entry (an entry travels whole in one frame).
const MAX_ENTRY_OPS: usize = 512;

/// Proposes each batch to the replicas; reads launches' specs back from the applied database.
struct Proposer {
    raft: Raft<TypeConfig>,
    runtime: tokio::runtime::Handle,
    reader: rusqlite::Connection,
    step_down: super::StepDown,
}

impl db::Commit for Proposer {
    fn commit(&mut self, ops: Vec<DbOp>) -> Result<(), String> {
        let n_ops = ops.len();
        match self.runtime.block_on(self.raft.client_write(Batch(ops))) {
            Ok(written) => written.data.0,
            Err(e) => {
                tracing::error!(error = %e, n_ops, "a batch could not be replicated; exiting (its outcome is the next leader's)");
                (self.step_down)("a batch could not be replicated");
            }
        }
    }

    fn stored_spec(&mut self, job_id: JobId) -> rusqlite::Result<JobSpec> {
        db::stored_spec(&self.reader, job_id)
    }
}

/// Runs until the core drops its sender.
pub(crate) fn run(
    raft: Raft<TypeConfig>,
    step_down: super::StepDown,
    runtime: tokio::runtime::Handle,
    db_path: &Path,
    queue: std::sync::mpsc::Receiver<Queued>,
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
    let mut proposer = Proposer { raft, runtime, reader, step_down };
    db::run_writer_loop(queue, max_batch.clamp(1, MAX_ENTRY_OPS), &mut proposer, report);
}
