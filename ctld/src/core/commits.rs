//! What the core hands the database writer and what it does when the writer reports back: the
//! operations it queues (those that need a commit of their own and those that can wait for the
//! next), job rows, audit records, answers that wait for their commit, and the commit reports
//! that release launches, answers and node acknowledgements.

use super::Core;
use crate::model::identity::Caller;
use crate::store::db::{AfterCommit, CommitReport, DbOp, Queued};
use drover_shared::job::JobId;
use drover_shared::now;
use drover_shared::proto::client::{ErrorCode, Response};
use drover_shared::proto::node::CtldMessage;
use tokio::sync::oneshot;

impl Core {
    /// Answers once what the request changed is committed (and then published): an answered
    /// cancel, hold, release or update survives a crash of ctld. If the commit fails, the
    /// client is told so.
    pub(super) fn answer_after_commit(&mut self, reply: oneshot::Sender<Response>, response: Response) {
        self.answer_after_commit_token(reply, response);
    }

    /// [`Core::answer_after_commit`], giving the token the answer waits under.
    pub(super) fn answer_after_commit_token(&mut self, reply: oneshot::Sender<Response>, response: Response) -> u64 {
        let token = self.commit_token();
        self.answers_waiting.insert(token, (reply, response));
        self.after_commit(AfterCommit::Answer(token));
        token
    }

    pub(super) fn store(&mut self, op: DbOp) {
        self.flush_unhurried();
        self.outbox.push(Queued::Op(op));
    }

    /// Queues `action` to run once everything stored before it is committed.
    pub(super) fn after_commit(&mut self, action: AfterCommit) {
        self.flush_unhurried();
        self.outbox.push(Queued::After(action));
    }

    /// Queues `op` without waking the writer for it: it is committed with the next op that is
    /// stored (in order, before it), or at the next tick. For records whose loss in a crash of
    /// ctld costs only precision: the node reported start time of a job already stored running
    /// (its allocation time stays the start until then).
    pub(super) fn store_unhurried(&mut self, op: DbOp) {
        self.unhurried.push(op);
    }

    /// Moves what [`Core::store_unhurried`] queued to the outbox (sent at the end of the event).
    pub(super) fn flush_unhurried(&mut self) {
        self.outbox.extend(self.unhurried.drain(..).map(Queued::Op));
    }

    /// Hands the writer what was stored and queued since the last call, as one item: the writer
    /// commits a request's writes together (one transaction and one sync, not one per op), and
    /// starts on them only once the request is handled. Called after each event and each
    /// scheduling pass.
    pub(super) fn send_outbox(&mut self) {
        let item = match self.outbox.len() {
            0 => return,
            1 => self.outbox.pop().expect("one item"),
            _ => Queued::Many(std::mem::take(&mut self.outbox)),
        };
        // The writer thread only stops when ctld shuts down; a send error then is harmless.
        let _ = self.db.send(item);
    }

    pub(super) fn store_job(&mut self, job_id: JobId, with_alloc: bool) {
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        let ended = job.info.state().is_terminal().then(|| (job.info.state(), job.info.end_time.unwrap_or_else(now)));
        if let Some((state, end)) = ended {
            self.record_run(job_id, state.long_name(), end);
        }
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        let alloc = if with_alloc { job.alloc.clone().map(Box::new) } else { None };
        let info = Box::new(job.info.clone());
        self.store(DbOp::UpdateJob { info, alloc });
    }

    /// Records something the controller did on its own (job ends, node failures, preemption).
    pub(super) fn audit(&mut self, uid: u32, action: &'static str, job_id: Option<JobId>, detail: String) {
        let origin = "ctld".to_owned();
        self.store(DbOp::Audit {
            time: now(),
            uid,
            origin,
            action: action.into(),
            job_id,
            outcome: "ok".into(),
            detail,
        });
    }

    /// Records a client's request with its outcome (`ok` or the refusal's message), refused ones
    /// included.
    pub(super) fn audit_request(
        &mut self,
        caller: Caller,
        action: &'static str,
        job_id: Option<JobId>,
        outcome: Result<(), ErrorCode>,
        detail: String,
    ) {
        let outcome = match outcome {
            Ok(()) => "ok".to_owned(),
            Err(code) => code.message().to_owned(),
        };
        let origin = caller.origin(&self.hosts);
        self.store(DbOp::Audit {
            time: now(),
            uid: caller.uid,
            origin,
            action: action.into(),
            job_id,
            outcome,
            detail,
        });
    }

    pub(super) fn committed(&mut self, report: CommitReport) {
        tracing::trace!(n_ops = report.n_ops, failed = report.error.is_some(), "commit reported");
        if let Some(error) = &report.error {
            // Nothing in the batch is stored: refuse the submissions it carried and forget them,
            // put jobs whose allocation was not stored back in the queue, and leave job ends
            // unacknowledged (the node repeats them, and each repeat stores the end again).
            for action in report.after {
                match action {
                    AfterCommit::AnswerSubmit(job_id) => {
                        self.state.jobs.remove(&job_id);
                        // Its key is not stored either: the same submission sent again is new.
                        self.submit_keys.retain(|_, (id, _)| *id != job_id);
                        if let Some(reply) = self.waiting_submits.remove(&job_id) {
                            let _ = reply
                                .send(Response::Error { code: ErrorCode::StorageUnavailable, detail: error.clone() });
                        }
                    }
                    AfterCommit::Launch(job_id, _) => {
                        tracing::warn!(job_id, "allocation not stored; the job goes back to the queue");
                        self.requeue(job_id);
                    }
                    AfterCommit::AckJobEnd { .. } => {}
                    AfterCommit::StepCreated { job_id, step_id } => self.step_committed(job_id, step_id, Some(error)),
                    AfterCommit::Requeue(token) => self.requeue_committed(token, Some(error)),
                    AfterCommit::Answer(token) => {
                        self.undo_acct_change(token);
                        if let Some((reply, _)) = self.answers_waiting.remove(&token) {
                            let _ = reply
                                .send(Response::Error { code: ErrorCode::StorageUnavailable, detail: error.clone() });
                        }
                    }
                }
            }
            return;
        }
        for action in report.after {
            match action {
                AfterCommit::AnswerSubmit(job_id) => {
                    if let Some(job) = self.state.jobs.get_mut(&job_id) {
                        job.committed = true;
                        self.state.jobs.touch(job_id);
                        self.schedule_needed = true;
                    }
                    if let Some(reply) = self.waiting_submits.remove(&job_id) {
                        self.answer_after_publish(reply, Response::Submitted { job_id });
                    }
                }
                AfterCommit::Launch(job_id, stored) => self.launch(job_id, stored),
                AfterCommit::StepCreated { job_id, step_id } => self.step_committed(job_id, step_id, None),
                AfterCommit::Requeue(token) => self.requeue_committed(token, None),
                AfterCommit::Answer(token) => {
                    self.acct_undo.remove(&token);
                    if let Some((reply, response)) = self.answers_waiting.remove(&token) {
                        self.answer_after_publish(reply, response);
                    }
                }
                AfterCommit::AckJobEnd { node, job_id, run } => {
                    if let Some(link) = self.links.get(&node).cloned() {
                        let _ = link.tx.send(CtldMessage::JobEndAck { job_id, run });
                    }
                }
            }
        }
    }
}

/// The most of a request's text an audit record keeps.
const MAX_AUDIT_DETAIL: usize = 1024;

/// `text` cut to [`MAX_AUDIT_DETAIL`] bytes (at a character boundary), marked `…` when cut.
pub(super) fn bounded(mut text: String) -> String {
    if text.len() > MAX_AUDIT_DETAIL {
        let mut end = MAX_AUDIT_DETAIL;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}
