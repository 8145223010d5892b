//! Requeueing and run reconciliation, a child module of `core`.
//!
//! Every start of a job is a *run*, numbered by the job's restart count at launch; the node names
//! the run's directory and cgroups after it and every report it sends names it. So:
//!
//! * a job killed to be requeued (`scontrol requeue`, `requeuehold`, preemption, the idle-GPU
//!   policy) pends again as soon as its run's end arrives, and may start at once, even on the same
//!   node: the next run has its own directory there;
//! * a running job whose node fails (silent past `node_timeout`, or it no longer holds the job)
//!   pends again at once when it may be requeued (`--requeue`, or the cluster default, Slurm's
//!   `JobRequeue=1`); `--no-requeue` jobs end `NODE_FAIL`;
//! * each ended run is kept for `sacct -D` (`REQUEUED` or `NODE_FAIL`, see `crate::store::runs`);
//! * a report about a run that is not the job's current one (a node that was cut off while its
//!   job was requeued, or a repeated end) changes nothing: its end is acknowledged at once so the
//!   node forgets it; at registration the node is told to kill every run ctld does not run there
//!   now, and at every heartbeat ctld cancels runs it gave up on that the node still holds;
//! * a requeue under way is stored (`requeue_intents`) before `scontrol` is answered and the run
//!   is killed, so it completes even if ctld restarts before the run's end arrives.

use super::Core;
use super::waiting::Waiting;
use crate::model::identity::Caller;
use crate::model::run_ends::OnEnd;
use crate::policy::authz::{Operation, Who};
use crate::store::db::{AfterCommit, DbOp};
use drover_shared::UnixTime;
use drover_shared::job::{JobId, JobState, StepId};
use drover_shared::proto::client::{ErrorCode, Response};
use drover_shared::proto::node::{CtldMessage, JobEnd, JobRun};
use tokio::sync::oneshot;

impl Core {
    /// Starts a requeue: the job's current run is being killed; when its end comes, the job
    /// pends again (held if `hold`). Stored, so a ctld restart in between still requeues it.
    pub(super) fn mark_requeue(&mut self, job_id: JobId, hold: bool) {
        self.state.run_ends.set(job_id, OnEnd::Requeue { hold });
        self.store(DbOp::RequeueIntent { job_id, hold: Some(hold) });
    }

    /// What the end of the job's current run does, taken (a requeue's stored intent with it).
    pub(super) fn take_on_end(&mut self, job_id: JobId) -> Option<OnEnd> {
        let on_end = self.state.run_ends.take(job_id)?;
        if matches!(on_end, OnEnd::Requeue { .. }) {
            self.store(DbOp::RequeueIntent { job_id, hold: None });
        }
        Some(on_end)
    }

    /// The requeues that were under way when ctld last stopped.
    pub(crate) fn with_requeues(mut self, requeues: std::collections::HashMap<JobId, bool>) -> Core {
        self.state.run_ends.restore_requeues(requeues);
        self
    }

    /// `scontrol requeue` (`hold = false`) and `requeuehold` (`hold = true`): one result per job id,
    /// in order. For each running job that may be requeued, the intent is stored; once it is
    /// committed the job's current run is killed and the caller answered (so an answered requeue
    /// survives a crash). When the run's end comes, the job pends again under the same id with
    /// its restart count raised (held under `requeuehold`).
    pub(super) fn requeue_jobs(
        &mut self,
        caller: Caller,
        job_ids: &[JobId],
        hold: bool,
        reply: oneshot::Sender<Response>,
    ) {
        let who = Who::of(&self.state.config(), caller);
        let action = if hold { "requeuehold" } else { "requeue" };
        let mut results = Vec::with_capacity(job_ids.len());
        let mut accepted = Vec::new();
        for &job_id in job_ids {
            let result = match self.state.jobs.get(&job_id).filter(|j| j.committed) {
                None => Err(ErrorCode::InvalidJobId),
                Some(job) if !who.may(Operation::Job { owner: job.info.uid }) => Err(ErrorCode::AccessDenied),
                Some(job) if job.info.state() == JobState::Pending => Err(ErrorCode::JobPending),
                Some(job) if job.info.state().is_terminal() => Err(ErrorCode::AlreadyDone),
                Some(job) if !job.info.requeue => Err(ErrorCode::Disabled),
                Some(job) => {
                    let run = job.info.restarts;
                    accepted.push(JobRun { job_id, run });
                    self.store(DbOp::RequeueIntent { job_id, hold: Some(hold) });
                    Ok(())
                }
            };
            let detail = self.state.jobs.get(&job_id).map(|j| format!("run {}", j.info.restarts)).unwrap_or_default();
            self.audit_request(caller, action, Some(job_id), result, detail);
            results.push((job_id, result));
        }
        if accepted.is_empty() {
            self.answer_after_publish(reply, Response::Cancelled { results });
            return;
        }
        let token = self.commit_token();
        self.requeue_waiting.insert(token, Waiting { reply, results, accepted, hold });
        self.after_commit(AfterCommit::Requeue(token));
    }

    /// The intents of a requeue request are committed (or failed to be, `error`): kill the runs
    /// that still run and answer.
    pub(super) fn requeue_committed(&mut self, token: u64, error: Option<&str>) {
        let Some(Waiting { reply, results, accepted, hold }) = self.requeue_waiting.remove(&token) else { return };
        if let Some(error) = error {
            let _ = reply.send(Response::Error { code: ErrorCode::StorageUnavailable, detail: error.to_owned() });
            return;
        }
        let kill_wait = self.state.config().kill_wait;
        for JobRun { job_id, run } in accepted {
            let still =
                self.state.jobs.get(&job_id).filter(|j| j.info.state() == JobState::Running && j.info.restarts == run);
            let Some(job) = still else {
                // It ended (or failed over) before the commit: nothing left to requeue.
                self.store(DbOp::RequeueIntent { job_id, hold: None });
                continue;
            };
            let batch_host = job.info.nodes.first().cloned();
            self.state.run_ends.set(job_id, OnEnd::Requeue { hold });
            if let Some(link) = batch_host.and_then(|h| self.links.get(&h).cloned()) {
                let _ = link.tx.send(CtldMessage::Cancel { job_id, run, kill_wait });
            }
        }
        self.answer_after_publish(reply, Response::Cancelled { results });
    }

    /// The end of a run that was killed to be requeued arrived: keep the run as `REQUEUED`, pend
    /// again (held for `requeuehold`: `JobHeldUser`, releasable with `scontrol release`).
    pub(super) fn requeue_after_end(&mut self, job_id: JobId, end: &JobEnd, hold: bool) {
        if let Some(job) = self.state.jobs.get_mut(&job_id) {
            if let Some(start) = end.start_time {
                job.info.start_time = Some(start);
            }
            // The killed run's status, for its `REQUEUED` rows; the next run starts from 0:0.
            job.info.exit_status = end.exit_status;
            for step in job.info.steps.iter_mut().filter(|s| s.step_id == StepId::Batch) {
                step.state = JobState::Cancelled;
                step.exit_status = end.exit_status;
                step.end_time = Some(end.end_time);
                step.start_time = end.start_time.or(step.start_time);
            }
        }
        self.record_run(job_id, "REQUEUED", end.end_time);
        self.pend_again(job_id, JobState::Requeued, end.end_time);
        if hold {
            self.hold_requeued(job_id);
        }
        tracing::info!(job_id, run = end.run, hold, "job requeued");
    }

    /// `requeuehold`: the requeued job pends held (`JobHeldUser`, priority 0) until released.
    fn hold_requeued(&mut self, job_id: JobId) {
        if let Some(job) = self.state.jobs.get_mut(&job_id) {
            job.info.priority = 0;
            job.info.reason = "JobHeldUser".into();
            self.state.specs.modify(&mut job.spec, |spec| spec.hold = true);
            self.store_job(job_id, false);
        }
    }

    /// Keeps the run that just ended as `how` (for `sacct -D`), ends its steps, and puts the job
    /// back in the queue for its next run: same id, restart count + 1, submit time reset.
    fn pend_again(&mut self, job_id: JobId, how: JobState, end: UnixTime) {
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        self.store(DbOp::RecordRun(Box::new(crate::store::runs::ended_run(&job.info, how, end))));
        self.end_steps(job_id, end);
        self.requeue(job_id);
        self.state.next_run(job_id, drover_shared::now());
        self.store_job(job_id, false);
    }

    /// A job's node failed (silent past the node timeout, or it no longer holds the job's run).
    /// A running job that may be requeued pends again at once; any other running job ends
    /// `NODE_FAIL`; a job already cancelled stays cancelled.
    pub(super) fn fail_on_node(&mut self, job_id: JobId, now: UnixTime) {
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        let was_running = job.info.state() == JobState::Running;
        if was_running && job.info.requeue {
            let run = job.info.restarts;
            // A `requeuehold` under way still holds the job once it pends again.
            let hold = self.take_on_end(job_id) == Some(OnEnd::Requeue { hold: true });
            self.record_run(job_id, "NODE_FAIL", now);
            self.pend_again(job_id, JobState::NodeFail, now);
            if hold {
                self.hold_requeued(job_id);
            }
            self.audit(0, "node-fail-requeue", Some(job_id), format!("job's node failed; run {run} requeued"));
            tracing::warn!(job_id, run, "job's node failed; requeued");
            self.schedule_needed = true;
            return;
        }
        if was_running {
            self.state.end_job(job_id, JobState::NodeFail, "NodeDown", now);
        }
        if let Some(job) = self.state.jobs.get_mut(&job_id) {
            for step in job.info.steps.iter_mut().filter(|s| s.end_time.is_none()) {
                step.state = if was_running { JobState::NodeFail } else { JobState::Cancelled };
                step.end_time = Some(now);
            }
        }
        self.state.release_job(job_id, now);
        self.store_job(job_id, false);
        self.audit(0, "node-fail", Some(job_id), "job's node failed".into());
        self.schedule_needed = true;
    }

    /// The runs a registering node holds that ctld does not run there now: jobs it forgot, jobs
    /// that ended (or were requeued, or run elsewhere), and earlier runs of a job. The node kills
    /// them and removes their directories.
    pub(super) fn stale_runs(&self, node: &str, held: &[JobRun]) -> Vec<JobRun> {
        held.iter()
            .copied()
            .filter(|run| {
                self.state.jobs.get(&run.job_id).is_none_or(|j| {
                    j.info.restarts != run.run
                        || j.info.nodes.first().map(String::as_str) != Some(node)
                        || j.info.state().is_terminal()
                })
            })
            .collect()
    }

    /// Runs a connected node still holds although ctld gave up on them: earlier runs of a job
    /// that was requeued meanwhile (the batch host of a multi-node job whose other node failed,
    /// or a node that re-registered before the kill list reached it), and runs of jobs that ended
    /// `NODE_FAIL`. Cancelled at every heartbeat until they are gone; a repeated cancel never
    /// delays the supervisor's SIGKILL.
    pub(super) fn cancel_superseded(&mut self, node: &str, held: &[JobRun]) {
        let superseded: Vec<JobRun> = held
            .iter()
            .copied()
            .filter(|run| {
                self.state.jobs.get(&run.job_id).is_some_and(|j| {
                    j.info.restarts > run.run || (j.info.restarts == run.run && j.info.state() == JobState::NodeFail)
                })
            })
            .collect();
        let kill_wait = self.state.config().kill_wait;
        let Some(link) = self.links.get(node).cloned() else { return };
        for run in superseded {
            tracing::info!(job_id = run.job_id, run = run.run, node, "cancelling a run ctld gave up on");
            let _ = link.tx.send(CtldMessage::Cancel { job_id: run.job_id, run: run.run, kill_wait });
        }
    }

    /// Whether `end` belongs to a run that is not its job's current one; such an end changes
    /// nothing and is acknowledged at once, so the node forgets the run.
    pub(super) fn stale_end(&mut self, node: &str, end: &JobEnd) -> bool {
        let stale = self.state.jobs.get(&end.job_id).is_some_and(|j| j.info.restarts != end.run);
        if stale {
            tracing::info!(job_id = end.job_id, run = end.run, node, "end of an earlier run; acknowledged, ignored");
            self.after_commit(AfterCommit::AckJobEnd { node: node.to_owned(), job_id: end.job_id, run: end.run });
        }
        stale
    }
}
