//! Client requests on jobs in the core: submit, cancel (whole jobs and array tasks), update, hold
//! and release, requeue of one job; and a job's end as its node reports it.

use super::Core;
use super::commits::bounded;
use crate::model::identity::Caller;
use crate::model::refusal::Refusal;
use crate::model::run_ends::OnEnd;
use crate::policy::authz::{Operation, Who};
use crate::policy::validate;
use crate::store::db::{AfterCommit, DbOp, SUBMIT_KEY_LIFETIME};
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobId, JobSpec, JobState, StepId, WaitStatus};
use drover_shared::proto::client::{CancelRequest, ErrorCode, JobUpdate, Response, SUBMIT_KEY_LEN};
use drover_shared::proto::node::{CtldMessage, JobEnd, JobOutcome};
use drover_shared::{UnixTime, now};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::oneshot;

impl Core {
    /// The submission keys stored in the last [`SUBMIT_KEY_LIFETIME`] seconds, as ctld starts.
    pub(crate) fn with_submit_keys(mut self, keys: HashMap<(u32, Vec<u8>), JobId>) -> Core {
        let now = now();
        self.submit_keys = keys.into_iter().map(|(key, job_id)| (key, (job_id, now))).collect();
        self
    }

    /// A submission; with a `key` ([`Request::SubmitOnce`]), one this user already made under
    /// that key is answered with its job once that job is committed, and makes no second job.
    /// A key is stored with its job, so a replica that leads after a failover knows it too.
    ///
    /// [`Request::SubmitOnce`]: drover_shared::proto::client::Request::SubmitOnce
    pub(super) fn submit(
        &mut self,
        caller: Caller,
        spec: JobSpec,
        key: Option<Vec<u8>>,
        reply: oneshot::Sender<Response>,
    ) {
        let now = now();
        if let Some(key) = &key {
            if key.len() != SUBMIT_KEY_LEN {
                let detail = format!("a submission key has {SUBMIT_KEY_LEN} bytes");
                let _ = reply.send(Response::Error { code: ErrorCode::InvalidSpec, detail });
                return;
            }
            if let Some(&(job_id, _)) = self.submit_keys.get(&(caller.uid, key.clone())) {
                tracing::info!(uid = caller.uid, job_id, "a submission sent again is answered with its job");
                // Queued after the job's insert: answered once that is committed.
                return self.answer_after_commit(reply, Response::Submitted { job_id });
            }
        }
        match validate::validate(&self.state, caller, spec, now) {
            Err(Refusal { code, detail }) => {
                tracing::info!(uid = caller.uid, %code, detail, "submission refused");
                self.audit_request(caller, "submit", None, Err(code), detail.clone());
                let _ = reply.send(Response::Error { code, detail });
            }
            Ok(mut job) => {
                let job_id = self.state.take_job_id();
                self.state.counts.submitted += 1;
                job.info.job_id = job_id;
                self.state.usage.touch(&job.info.account, &job.info.user);
                crate::policy::array::init(&mut job);
                // The key goes first: the writer may commit it in an earlier transaction than the
                // job, never in a later one, and a key whose job was not stored is ignored when
                // keys are loaded (`store::db::load_submit_keys` matches each to its job).
                if let Some(key) = key {
                    self.store(DbOp::SubmitKey {
                        uid: caller.uid,
                        key: key.clone(),
                        job_id,
                        time: job.info.submit_time,
                    });
                    self.remember_submit_key(caller.uid, key, job_id, now);
                }
                // The database keeps the whole spec; memory only its resident half.
                let resident = self.state.specs.resident(&job.spec);
                job.candidates = self.state.partition_lists.share(&job.candidates);
                let spec = Box::new(Arc::unwrap_or_clone(std::mem::replace(&mut job.spec, resident)));
                self.store(DbOp::InsertJob { info: Box::new(job.info.clone()), spec, fill_from: None });
                let detail = format!("name={} partition={}", job.info.name, job.info.partition);
                self.audit_request(caller, "submit", Some(job_id), Ok(()), detail);
                self.after_commit(AfterCommit::AnswerSubmit(job_id));
                self.state.jobs.insert(job_id, job);
                self.waiting_submits.insert(job_id, reply);
            }
        }
    }

    /// Keeps a submission's key in memory; keys older than [`SUBMIT_KEY_LIFETIME`] are dropped
    /// each time the map doubles, so it holds about an hour of keyed submissions.
    fn remember_submit_key(&mut self, uid: u32, key: Vec<u8>, job_id: JobId, now: UnixTime) {
        if self.submit_keys.len() >= 1024 && self.submit_keys.len().is_power_of_two() {
            self.submit_keys.retain(|_, (_, at)| *at >= now - SUBMIT_KEY_LIFETIME);
        }
        self.submit_keys.insert((uid, key), (job_id, now));
    }

    /// Stores a task just split off array base record `base` (the task's insert, the base's update).
    pub(super) fn store_split(&mut self, base: JobId, task_job: JobId) {
        if let Some(job) = self.state.jobs.get(&task_job) {
            // The task's row gets the whole spec: the base record's launch-only fields.
            self.store(DbOp::InsertJob {
                info: Box::new(job.info.clone()),
                spec: Box::new((*job.spec).clone()),
                fill_from: Some(base),
            });
        }
        self.store_job(base, false);
    }

    /// Puts a job that never started back in the queue.
    pub(super) fn requeue(&mut self, job_id: JobId) {
        self.runs.remove(&job_id);
        self.state.pend_job(job_id, now());
        self.store_job(job_id, false);
        self.schedule_needed = true;
    }

    pub(super) fn cancel(&mut self, caller: Caller, request: &CancelRequest) -> Response {
        let who = Who::of(&self.state.config(), caller);
        let targets: Vec<JobId> = if request.job_ids.is_empty() {
            self.state
                .jobs
                .values()
                .filter(|j| j.committed && !j.info.state().is_terminal())
                .filter(|j| request.users.is_empty() || request.users.contains(&j.info.uid))
                .filter(|j| request.accounts.is_empty() || request.accounts.contains(&j.info.account))
                .filter(|j| request.partitions.is_empty() || request.partitions.contains(&j.info.partition))
                .filter(|j| request.names.is_empty() || request.names.contains(&j.info.name))
                .filter(|j| request.states.is_empty() || request.states.contains(&j.info.state()))
                .map(|j| j.info.job_id)
                .collect()
        } else {
            request.job_ids.clone()
        };
        let now = now();
        let mut results = Vec::with_capacity(targets.len());
        for job_id in targets {
            let mut result = self.cancel_one(who, job_id, request, now);
            // An array's id stands for all its records: the base record and every task.
            let is_array = self.state.jobs.get(&job_id).is_some_and(|j| j.info.array_job_id == Some(job_id));
            if is_array && !request.job_ids.is_empty() {
                for member in crate::policy::array::members(&self.state, job_id).into_iter().filter(|m| *m != job_id) {
                    let member_result = self.cancel_one(who, member, request, now);
                    if member_result.is_ok() && result == Err(ErrorCode::AlreadyDone) {
                        result = Ok(());
                    }
                }
            }
            results.push((job_id, result));
        }
        Response::Cancelled { results }
    }

    /// `scancel 12_3`: cancels (or signals) array tasks; a task still pending in its base record
    /// is split off first, so that it ends as a record of its own, as in Slurm.
    pub(super) fn cancel_tasks(&mut self, caller: Caller, request: &CancelRequest, tasks: &[(JobId, u32)]) -> Response {
        let who = Who::of(&self.state.config(), caller);
        let now = now();
        let mut results = Vec::with_capacity(tasks.len());
        for &(array_job_id, task) in tasks {
            let own = self
                .state
                .jobs
                .values()
                .find(|j| {
                    j.committed && j.info.array_job_id == Some(array_job_id) && j.info.array_task_id == Some(task)
                })
                .map(|j| j.info.job_id);
            let result = match own {
                Some(job_id) => self.cancel_one(who, job_id, request, now),
                None => match self.state.jobs.get(&array_job_id) {
                    Some(base) if base.committed && base.info.array_tasks_pending.contains(&task) => {
                        if !who.may(Operation::Job { owner: base.info.uid }) {
                            let detail = format!("task {task}, owner uid {}", base.info.uid);
                            self.audit_request(
                                caller,
                                "cancel",
                                Some(array_job_id),
                                Err(ErrorCode::AccessDenied),
                                detail,
                            );
                            Err(ErrorCode::AccessDenied)
                        } else if request.signal.is_some() || base.info.state().is_terminal() {
                            // Nothing runs yet to signal; an ended base record has nothing to cancel.
                            if base.info.state().is_terminal() { Err(ErrorCode::AlreadyDone) } else { Ok(()) }
                        } else if base.info.array_tasks_pending.len() > 1 {
                            // As in Slurm, a pending task that is cancelled is dropped from the
                            // base record: it never existed as a job (`scontrol show job N_T`
                            // fails, accounting has no record of it).
                            if let Some(base) = self.state.jobs.get_mut(&array_job_id) {
                                base.info.array_tasks_pending.retain(|t| *t != task);
                            }
                            self.store_job(array_job_id, false);
                            self.audit_request(
                                caller,
                                "cancel",
                                Some(array_job_id),
                                Ok(()),
                                format!("pending task {task}"),
                            );
                            Ok(())
                        } else {
                            match crate::policy::array::claim(&mut self.state, array_job_id, Some(task)) {
                                Some((job_id, split)) => {
                                    if split {
                                        self.store_split(array_job_id, job_id);
                                    }
                                    self.cancel_one(who, job_id, request, now)
                                }
                                None => Err(ErrorCode::InvalidJobId),
                            }
                        }
                    }
                    _ => Err(ErrorCode::InvalidJobId),
                },
            };
            results.push((array_job_id, result));
        }
        Response::Cancelled { results }
    }

    /// `scontrol hold|release|update N_T` of a task still pending in its base record: the task
    /// becomes a record of its own (the base record's id when it was the last pending task).
    pub(super) fn split_array_task(&mut self, caller: Caller, array_job_id: JobId, task: u32) -> Response {
        let who = Who::of(&self.state.config(), caller);
        let error = |code: ErrorCode| Response::Error { code, detail: format!("array task {array_job_id}_{task}") };
        match self.state.jobs.get(&array_job_id).filter(|j| j.committed) {
            Some(base) if base.info.state() == JobState::Pending && base.info.array_tasks_pending.contains(&task) => {
                if !who.may(Operation::Job { owner: base.info.uid }) {
                    return error(ErrorCode::AccessDenied);
                }
            }
            _ => return error(ErrorCode::InvalidJobId),
        }
        match crate::policy::array::claim(&mut self.state, array_job_id, Some(task)) {
            Some((job_id, split)) => {
                if split {
                    self.store_split(array_job_id, job_id);
                } else {
                    self.store_job(job_id, false);
                }
                self.audit_request(caller, "split", Some(job_id), Ok(()), format!("array task {array_job_id}_{task}"));
                Response::Submitted { job_id }
            }
            None => error(ErrorCode::InvalidJobId),
        }
    }

    /// `scontrol update job`: one result per job id, in order. Every field but `TimeLimit`,
    /// `Comment` and `Requeue` changes only while the job pends (a running job's new limit is sent
    /// to its batch host's supervisor); a user may lower a time limit, not raise it, and may not
    /// set a negative nice.
    pub(super) fn update_jobs(&mut self, caller: Caller, job_ids: &[JobId], update: &JobUpdate) -> Response {
        let who = Who::of(&self.state.config(), caller);
        let mut results = Vec::with_capacity(job_ids.len());
        // Checked once for all the jobs: the bounds a submission gets, and what the new
        // dependency waits on (for cycles). The audit keeps the start of the request.
        let checked = self.check_update(update);
        let detail = bounded(format!("{update:?}"));
        for &job_id in job_ids {
            // Whose job it is comes first: what is wrong with the request is none of the
            // business of a caller who may not touch the job.
            let result = self
                .may_update(who, job_id)
                .and_then(|()| checked.as_ref().map_err(|code| *code))
                .and_then(|reached| self.update_one(who, job_id, update, reached));
            if result.is_ok() {
                self.store_job(job_id, false);
                self.schedule_needed = true;
            }
            self.audit_request(caller, "update", Some(job_id), result, detail.clone());
            results.push((job_id, result));
        }
        Response::Cancelled { results }
    }

    /// What `scontrol update` asks, checked before any job: a dependency as `--dependency` is
    /// (and the jobs it waits on, for [`crate::policy::dependency::check_cycle`]), names and comments as
    /// long as a submission's may be.
    fn check_update(&self, update: &JobUpdate) -> Result<HashMap<JobId, JobId>, ErrorCode> {
        validate::check_update_text(update).map_err(|refusal| refusal.code)?;
        match update.dependency.as_deref().filter(|t| !t.is_empty()) {
            Some(text) => {
                crate::policy::dependency::validate(&self.state, text).map_err(|refusal| refusal.code)?;
                Ok(crate::policy::dependency::reachable(&self.state, text))
            }
            None => Ok(HashMap::new()),
        }
    }

    /// Whether `who` may update job `job_id` at all (it exists and is theirs, or they are an
    /// operator or admin).
    fn may_update(&self, who: Who, job_id: JobId) -> Result<(), ErrorCode> {
        let job = self.state.jobs.get(&job_id).filter(|j| j.committed).ok_or(ErrorCode::InvalidJobId)?;
        who.check(Operation::Job { owner: job.info.uid })
    }

    fn update_one(
        &mut self,
        who: Who,
        job_id: JobId,
        update: &JobUpdate,
        reached: &HashMap<JobId, JobId>,
    ) -> Result<(), ErrorCode> {
        let config = self.state.config().clone();
        let job = self.state.jobs.get(&job_id).filter(|j| j.committed).ok_or(ErrorCode::InvalidJobId)?;
        who.check(Operation::Job { owner: job.info.uid })?;
        crate::policy::dependency::check_cycle(&self.state, job_id, reached).map_err(|refusal| refusal.code)?;
        let job = self.state.jobs.get_mut(&job_id).ok_or(ErrorCode::InvalidJobId)?;
        let state = job.info.state();
        if state.is_terminal() {
            return Err(ErrorCode::AlreadyDone);
        }
        let pending_only = update.name.is_some()
            || update.nice.is_some()
            || update.dependency.is_some()
            || update.array_max_tasks.is_some();
        if pending_only && state != JobState::Pending {
            return Err(ErrorCode::JobNotHeld);
        }
        if let Some(limit) = update.time_limit {
            let raises = match (limit, job.info.time_limit) {
                (_, None) => false,
                (TimeLimit::Unlimited, Some(current)) => current != TimeLimit::Unlimited,
                (TimeLimit::Minutes(new), Some(TimeLimit::Minutes(current))) => new > current,
                (TimeLimit::Minutes(_), Some(TimeLimit::Unlimited)) => false,
            };
            if raises && !who.may(Operation::JobPrivileged) {
                return Err(ErrorCode::AccessDenied);
            }
            let over = |max: TimeLimit| match (limit, max) {
                (TimeLimit::Minutes(new), TimeLimit::Minutes(max)) => new > max,
                (TimeLimit::Unlimited, TimeLimit::Minutes(_)) => true,
                _ => false,
            };
            let fits = config.partitions.iter().filter(|p| job.candidates.contains(&p.name)).any(|p| !over(p.max_time));
            if !fits {
                return Err(ErrorCode::InvalidTimeLimit);
            }
        }
        if let Some(nice) = update.nice {
            validate::check_nice(nice, who.may(Operation::JobPrivileged)).map_err(|refusal| refusal.code)?;
        }
        if update.array_max_tasks.is_some() && job.info.array_job_id != Some(job_id) {
            return Err(ErrorCode::InvalidSpec);
        }
        let mut notify = None;
        let mut spec = JobSpec::clone(&job.spec);
        if let Some(limit) = update.time_limit {
            spec.time_limit = Some(limit);
            job.info.time_limit = Some(limit);
            // A running job's limit lives in its supervisor: tell the batch host (below).
            if state == JobState::Running {
                notify = job.info.nodes.first().cloned().map(|host| (host, limit));
            }
        }
        // Name and comment live in the record only (`resident::complete` takes them from there).
        if let Some(name) = &update.name {
            job.info.name = name.clone();
        }
        if let Some(comment) = &update.comment {
            job.info.comment = Some(comment.clone());
        }
        if let Some(nice) = update.nice {
            if job.info.priority != 0 {
                let adjusted = i64::from(job.info.priority) + i64::from(job.info.nice) - i64::from(nice);
                job.info.priority = u32::try_from(adjusted.clamp(1, i64::from(u32::MAX - 1))).unwrap_or(1);
            }
            spec.nice = nice;
            job.info.nice = nice;
        }
        if let Some(text) = &update.dependency {
            spec.dependency = (!text.is_empty()).then(|| text.clone());
            job.info.dependency = spec.dependency.clone();
            // The next refresh works the shown text out anew.
            self.state.dependencies.forget(job_id);
            if job.info.reason.starts_with("Dependency") {
                job.info.reason = "None".into();
            }
        }
        if let Some(max) = update.array_max_tasks {
            job.info.array_max_tasks = max;
        }
        if let Some(requeue) = update.requeue {
            spec.requeue = Some(requeue);
            job.info.requeue = requeue;
        }
        if spec != *job.spec {
            job.spec = self.state.specs.intern(spec);
        }
        if let Some((host, time_limit)) = notify {
            self.limits_changed.insert(job_id);
            if let Some(link) = self.links.get(&host).cloned() {
                let _ = link.tx.send(CtldMessage::SetTimeLimit { job_id, time_limit });
            }
        }
        Ok(())
    }

    /// `scontrol hold|uhold|release`: one result per job id, in order.
    pub(super) fn hold(&mut self, caller: Caller, job_ids: &[JobId], hold: Option<bool>) -> Response {
        let who = Who::of(&self.state.config(), caller);
        let mut results = Vec::with_capacity(job_ids.len());
        for &job_id in job_ids {
            let result = self.hold_one(who, job_id, hold);
            if result.is_ok() {
                self.store_job(job_id, false);
                self.schedule_needed = true;
            }
            let action = if hold.is_some() { "hold" } else { "release" };
            self.audit_request(caller, action, Some(job_id), result, String::new());
            results.push((job_id, result));
        }
        Response::Cancelled { results }
    }

    fn hold_one(&mut self, who: Who, job_id: JobId, hold: Option<bool>) -> Result<(), ErrorCode> {
        let config = self.state.config().clone();
        let job = self.state.jobs.get_mut(&job_id).filter(|j| j.committed).ok_or(ErrorCode::InvalidJobId)?;
        who.check(Operation::Job { owner: job.info.uid })?;
        if job.info.state() != JobState::Pending {
            return Err(ErrorCode::JobNotHeld);
        }
        match hold {
            Some(user_hold) => {
                job.info.priority = 0;
                job.info.reason =
                    if who.may(Operation::JobPrivileged) && !user_hold { "JobHeldAdmin" } else { "JobHeldUser" }.into();
                self.state.specs.modify(&mut job.spec, |spec| spec.hold = true);
            }
            None => {
                if job.info.priority != 0 && !job.spec.hold {
                    return Ok(());
                }
                if job.info.reason == "JobHeldAdmin" && !who.may(Operation::JobPrivileged) {
                    return Err(ErrorCode::AccessDenied);
                }
                self.state.specs.modify(&mut job.spec, |spec| spec.hold = false);
                let qos_priority = config.qos.iter().find(|q| q.name == job.info.qos).map_or(0, |q| q.priority);
                let factor = config
                    .partitions
                    .iter()
                    .filter(|p| job.candidates.contains(&p.name))
                    .map(|p| p.priority_job_factor)
                    .max()
                    .unwrap_or(1);
                job.info.priority = validate::initial_priority(qos_priority, factor, job.info.nice);
                job.info.reason = "None".into();
            }
        }
        Ok(())
    }

    /// Cancels (or signals) one job and audits the request with its outcome.
    fn cancel_one(&mut self, who: Who, job_id: JobId, request: &CancelRequest, now: UnixTime) -> Result<(), ErrorCode> {
        let before = self.state.jobs.get(&job_id).map(|j| (j.info.uid, j.info.state()));
        let result = self.cancel_one_unaudited(who, job_id, request, now);
        let (action, mut detail) = match request.signal {
            Some(signal) => ("signal", format!("signal {signal}")),
            None => ("cancel", String::new()),
        };
        if let Some((owner, state)) = before {
            detail = format!("{detail} owner uid {owner}, was {}", state.long_name()).trim_start().to_owned();
        }
        self.audit_request(who.caller, action, Some(job_id), result, detail);
        result
    }

    fn cancel_one_unaudited(
        &mut self,
        who: Who,
        job_id: JobId,
        request: &CancelRequest,
        now: UnixTime,
    ) -> Result<(), ErrorCode> {
        let caller = who.caller;
        let kill_wait = self.state.config().kill_wait;
        let job = self.state.jobs.get_mut(&job_id).filter(|j| j.committed).ok_or(ErrorCode::InvalidJobId)?;
        who.check(Operation::Job { owner: job.info.uid })?;
        let state = job.info.state();
        if state.is_terminal() {
            return Err(ErrorCode::AlreadyDone);
        }
        let batch_host = job.info.nodes.first().cloned();
        // Slurm's rule: a signal reaches a running job only, once its script has started (a
        // starting job is Slurm's CONFIGURING); SIGKILL cancels a pending one.
        let signal = request.signal.filter(|s| !(*s == libc::SIGKILL && state == JobState::Pending));
        if signal.is_some() && (state != JobState::Running || !job.started) {
            return Err(ErrorCode::TransitionState);
        }
        if let Some(signal) = signal {
            // Slurm's rule: `-b` signals the batch shell only, `-f` the batch shell and every
            // step, neither only the steps.
            let to_batch = request.batch_only || request.full;
            if to_batch
                && state == JobState::Running
                && let Some(link) = batch_host.and_then(|h| self.links.get(&h).cloned())
            {
                let _ = link.tx.send(CtldMessage::Signal { job_id, signal, batch_only: request.batch_only });
            }
            if !request.batch_only {
                self.signal_steps(job_id, signal);
            }
            return Ok(());
        }
        job.info.cancelled_by = Some(caller.uid);
        if state == JobState::Running {
            job.cancel_requested_by = Some(caller.uid);
            let run = job.info.restarts;
            if let Some(link) = batch_host.and_then(|h| self.links.get(&h).cloned()) {
                let _ = link.tx.send(CtldMessage::Cancel { job_id, run, kill_wait });
            }
        }
        self.state.end_job(job_id, JobState::Cancelled, "None", now);
        if state == JobState::Pending
            && let Some(job) = self.state.jobs.get_mut(&job_id)
        {
            job.info.eligible_time = None;
        }
        self.store_job(job_id, false);
        self.schedule_needed = true;
        Ok(())
    }

    pub(super) fn job_ended(&mut self, node: &str, end: JobEnd, now: UnixTime) {
        let job_id = end.job_id;
        if self.stale_end(node, &end) {
            return;
        }
        // Charge the job up to now while it still counts as running.
        self.charge_usage(now, true);
        let holds = self
            .state
            .jobs
            .get(&job_id)
            .is_some_and(|j| j.alloc.is_some() && j.info.nodes.first().map(String::as_str) == Some(node));
        let on_end = if holds { self.take_on_end(job_id) } else { None };
        if let Some(OnEnd::Requeue { hold }) = on_end {
            self.requeue_after_end(job_id, &end, hold);
        } else if holds {
            let preempted = on_end == Some(OnEnd::Preempted);
            let job = self.state.jobs.get_mut(&job_id).expect("checked above");
            let cancelled = job.cancel_requested_by.is_some() || job.info.state() == JobState::Cancelled;
            let (state, reason) = match &end.outcome {
                _ if preempted => (JobState::Preempted, "None"),
                _ if cancelled => (JobState::Cancelled, "None"),
                JobOutcome::Cancelled => (JobState::Cancelled, "None"),
                JobOutcome::TimedOut => (JobState::Timeout, "TimeLimit"),
                JobOutcome::OutOfMemory => (JobState::OutOfMemory, "OutOfMemory"),
                JobOutcome::LaunchFailed { .. } => (JobState::Failed, "JobLaunchFailure"),
                JobOutcome::Exited => match end.exit_status.parts() {
                    (0, 0) => (JobState::Completed, "None"),
                    (_, 0) => (JobState::Failed, "NonZeroExitCode"),
                    _ => (JobState::Failed, "JobLaunchFailure"),
                },
            };
            let exit_status = match &end.outcome {
                JobOutcome::LaunchFailed { .. } => WaitStatus::exited(1),
                // Slurm shows an OOM-killed job's exit code as `0:125`.
                JobOutcome::OutOfMemory => WaitStatus::signaled(125),
                _ => end.exit_status,
            };
            if let JobOutcome::LaunchFailed { message } = &end.outcome {
                tracing::warn!(job_id, node, message, "job launch failed");
            }
            job.info.exit_status = exit_status;
            if let Some(start) = end.start_time {
                job.info.start_time = Some(start);
            }
            let step_state = match state {
                JobState::Timeout => JobState::Cancelled,
                other => other,
            };
            for step in job.info.steps.iter_mut().filter(|s| s.step_id == StepId::Batch) {
                step.state = step_state;
                step.exit_status = exit_status;
                step.end_time = Some(end.end_time);
                if let Some(start) = end.start_time {
                    step.start_time = Some(start);
                }
            }
            let already_ended = job.info.state().is_terminal();
            if already_ended {
                // Cancelled earlier: keep the cancel time as the job's end.
            } else {
                self.state.end_job(job_id, state, reason, end.end_time.max(now.min(end.end_time)));
            }
            self.end_steps(job_id, end.end_time);
            self.state.release_job(job_id, now);
            self.store_job(job_id, false);
            let final_state = self.state.jobs.get(&job_id).map_or(state, |j| j.info.state());
            self.audit(0, "end", Some(job_id), format!("{} {}", final_state.long_name(), exit_status));
            if final_state == JobState::Failed {
                let uid = self.state.jobs.get(&job_id).map_or(0, |j| j.info.uid);
                let how = format!("{} {} ({reason})", final_state.long_name(), exit_status);
                let points_at_node = crate::policy::incident::points_at_node(&end.outcome, end.exit_status);
                self.job_failed_on_node(node, job_id, uid, how, points_at_node);
            }
            tracing::info!(job_id, state = final_state.long_name(), exit = %exit_status, "job ended");
            self.schedule_needed = true;
        } else if self.state.jobs.contains_key(&job_id) {
            // A repeated end: store the record again, in case the first store failed.
            self.store_job(job_id, false);
        }
        // Acknowledge after the end (or an earlier identical one) is durable.
        self.after_commit(AfterCommit::AckJobEnd { node: node.to_owned(), job_id, run: end.run });
    }
}
