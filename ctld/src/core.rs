//! The core: one task that owns [`State`] and consumes one closed enum of [`Event`]s — client
//! requests, node messages, commit reports and timer ticks. Every state change goes through here,
//! so there are no locks on the cluster state; durable changes are queued to the database writer,
//! and anything that must not happen before they are on disk (answering `sbatch`, launching a job,
//! acknowledging a job's end to its node) waits for the writer's [`CommitReport`].

use crate::db::{AfterCommit, CommitReport, DbOp};
use crate::scheduler::{self, Start};
use crate::state::{Job, NodeLink, State};
use crate::validate::{self, is_admin, Caller};
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobId, JobSpec, JobState, StepId, WaitStatus};
use drover_shared::node::PartitionInfo;
use drover_shared::proto::client::{CancelRequest, ErrorCode, JobQuery, Response};
use drover_shared::proto::node::{CtldMessage, JobEnd, JobOutcome, LaunchRequest, NodeMessage, NodeRegistration};
use drover_shared::{now, UnixTime};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Everything the core reacts to.
#[derive(Debug)]
pub(crate) enum Event {
    Submit { caller: Caller, spec: Box<JobSpec>, reply: oneshot::Sender<Response> },
    Cancel { caller: Caller, request: CancelRequest, reply: oneshot::Sender<Response> },
    QueryJobs { query: JobQuery, reply: oneshot::Sender<Response> },
    QueryNodes { reply: oneshot::Sender<Response> },
    QueryPartitions { reply: oneshot::Sender<Response> },
    Committed(CommitReport),
    NodeConnected { registration: NodeRegistration, link: NodeLink, address: String },
    NodeMessage { node: String, connection_id: u64, message: NodeMessage },
    NodeDisconnected { node: String, connection_id: u64 },
    Tick,
}

/// Seconds a launched job may be missing from its node's reports before it counts as lost.
const LAUNCH_GRACE: i64 = 15;

/// The core's state and its outlets.
pub(crate) struct Core {
    state: State,
    db: std::sync::mpsc::Sender<DbOp>,
    waiting_submits: HashMap<JobId, oneshot::Sender<Response>>,
    schedule_needed: bool,
    ctld_socket: String,
    started_at: UnixTime,
}

impl Core {
    pub(crate) fn new(state: State, db: std::sync::mpsc::Sender<DbOp>, ctld_socket: String) -> Core {
        Core { state, db, waiting_submits: HashMap::new(), schedule_needed: true, ctld_socket, started_at: now() }
    }

    /// Runs until the event channel closes or `shutdown` resolves.
    pub(crate) async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>, shutdown: impl std::future::Future) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                event = events.recv() => {
                    let Some(event) = event else { break };
                    self.handle(event);
                    // Drain what else is queued so one scheduling pass serves a burst of events.
                    while let Ok(event) = events.try_recv() {
                        self.handle(event);
                    }
                    if self.schedule_needed {
                        self.schedule_needed = false;
                        self.schedule();
                    }
                }
                _ = &mut shutdown => break,
            }
        }
    }

    fn store(&self, op: DbOp) {
        // The writer thread only stops when ctld shuts down; a send error then is harmless.
        let _ = self.db.send(op);
    }

    fn store_job(&self, job_id: JobId, with_alloc: bool) {
        if let Some(job) = self.state.jobs.get(&job_id) {
            let alloc = if with_alloc { job.alloc.clone().map(Box::new) } else { None };
            self.store(DbOp::UpdateJob { info: Box::new(job.info.clone()), alloc });
        }
    }

    fn audit(&self, uid: u32, action: &'static str, job_id: Option<JobId>, detail: String) {
        self.store(DbOp::Audit { time: now(), uid, action, job_id, detail });
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Submit { caller, spec, reply } => self.submit(caller, *spec, reply),
            Event::Cancel { caller, request, reply } => {
                let response = self.cancel(caller, &request);
                let _ = reply.send(response);
            }
            Event::QueryJobs { query, reply } => {
                let _ = reply.send(self.query_jobs(&query));
            }
            Event::QueryNodes { reply } => {
                let nodes = self.state.nodes.iter().map(|n| n.info(self.state.partitions_of(&n.config.name))).collect();
                let _ = reply.send(Response::Nodes { now: now(), nodes });
            }
            Event::QueryPartitions { reply } => {
                let _ = reply.send(Response::Partitions { partitions: self.partitions() });
            }
            Event::Committed(report) => self.committed(report),
            Event::NodeConnected { registration, link, address } => self.node_registered(registration, link, address),
            Event::NodeMessage { node, connection_id, message } => self.node_message(&node, connection_id, message),
            Event::NodeDisconnected { node, connection_id } => {
                if let Some(n) = self.state.node_mut(&node) {
                    if n.link.as_ref().is_some_and(|l| l.connection_id == connection_id) {
                        tracing::info!(node, "node connection closed");
                        n.link = None;
                    }
                }
            }
            Event::Tick => self.tick(),
        }
    }

    fn submit(&mut self, caller: Caller, spec: JobSpec, reply: oneshot::Sender<Response>) {
        let now = now();
        match validate::validate(&self.state, caller, spec, now) {
            Err((code, detail)) => {
                tracing::info!(uid = caller.uid, %code, detail, "submission refused");
                let _ = reply.send(Response::Error { code, detail });
            }
            Ok(mut job) => {
                let job_id = self.state.next_job_id;
                self.state.next_job_id += 1;
                job.info.job_id = job_id;
                self.store(DbOp::InsertJob { info: Box::new(job.info.clone()), spec: Box::new((*job.spec).clone()) });
                self.audit(caller.uid, "submit", Some(job_id), format!("name={} partition={}", job.info.name, job.info.partition));
                self.store(DbOp::After(AfterCommit::AnswerSubmit(job_id)));
                self.state.jobs.insert(job_id, job);
                self.waiting_submits.insert(job_id, reply);
            }
        }
    }

    fn committed(&mut self, report: CommitReport) {
        tracing::trace!(n_ops = report.n_ops, failed = report.error.is_some(), "commit reported");
        if let Some(error) = &report.error {
            // Nothing in the batch is stored: refuse the submissions it carried and forget them,
            // put jobs whose allocation was not stored back in the queue, and leave job ends
            // unacknowledged (the node repeats them, and each repeat stores the end again).
            for action in report.after {
                match action {
                    AfterCommit::AnswerSubmit(job_id) => {
                        self.state.jobs.remove(&job_id);
                        if let Some(reply) = self.waiting_submits.remove(&job_id) {
                            let _ = reply.send(Response::Error { code: ErrorCode::StorageUnavailable, detail: error.clone() });
                        }
                    }
                    AfterCommit::Launch(job_id) => {
                        tracing::warn!(job_id, "allocation not stored; the job goes back to the queue");
                        self.requeue(job_id);
                    }
                    AfterCommit::AckJobEnd { .. } => {}
                }
            }
            return;
        }
        for action in report.after {
            match action {
                AfterCommit::AnswerSubmit(job_id) => {
                    if let Some(job) = self.state.jobs.get_mut(&job_id) {
                        job.committed = true;
                        self.schedule_needed = true;
                    }
                    if let Some(reply) = self.waiting_submits.remove(&job_id) {
                        let _ = reply.send(Response::Submitted { job_id });
                    }
                }
                AfterCommit::Launch(job_id) => self.launch(job_id),
                AfterCommit::AckJobEnd { node, job_id } => {
                    if let Some(link) = self.state.node_mut(&node).and_then(|n| n.link.clone()) {
                        let _ = link.tx.send(CtldMessage::JobEndAck { job_id });
                    }
                }
            }
        }
    }

    fn schedule(&mut self) {
        let now = now();
        for Start { job_id, partition, alloc } in scheduler::schedule(&mut self.state, now) {
            let Some(job) = self.state.jobs.get_mut(&job_id) else { continue };
            let partition_config = self.state.config.partitions.iter().find(|p| p.name == partition);
            let info = &mut job.info;
            info.state = Some(JobState::Running);
            info.reason = "None".into();
            info.partition = partition.clone();
            info.start_time = Some(now);
            info.eligible_time = info.eligible_time.or(Some(now));
            info.nodes = alloc.nodes.iter().map(|n| n.node.clone()).collect();
            info.num_nodes = u32::try_from(alloc.nodes.len()).unwrap_or(u32::MAX);
            info.cpus_per_node = alloc.nodes.iter().map(|n| n.cpus).collect();
            info.num_cpus = info.cpus_per_node.iter().sum();
            info.mem_per_node_mb = alloc.nodes.first().map_or(0, |n| n.mem_mb);
            info.gpus_allocated = u32::try_from(alloc.nodes.iter().map(|n| n.gpus.len()).sum::<usize>()).unwrap_or(u32::MAX);
            if info.time_limit.is_none() {
                info.time_limit = partition_config.map(|p| p.default_time.unwrap_or(p.max_time));
            }
            info.steps = vec![validate::batch_step(info, now)];
            job.alloc = Some(alloc);
            job.launched_at = Some(now);
            tracing::info!(job_id, partition, nodes = ?job.info.nodes, "job allocated");
            self.store_job(job_id, true);
            self.store(DbOp::After(AfterCommit::Launch(job_id)));
        }
    }

    fn launch(&mut self, job_id: JobId) {
        let kill_wait = self.state.config.kill_wait;
        let cluster_name = self.state.config.cluster_name.clone();
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        if job.info.state() != JobState::Running {
            return; // cancelled between allocation and commit
        }
        let Some(alloc) = &job.alloc else { return };
        let Some(batch_share) = alloc.nodes.first() else { return };
        let request = LaunchRequest {
            job_id,
            spec: (*job.spec).clone(),
            user: job.info.user.clone(),
            uid: job.info.uid,
            gid: job.info.gid,
            cluster_name,
            partition: job.info.partition.clone(),
            account: job.info.account.clone(),
            qos: job.info.qos.clone(),
            time_limit: job.info.time_limit.unwrap_or(TimeLimit::Unlimited),
            nodes: job.info.nodes.clone(),
            cpus_per_node: alloc.nodes.iter().map(|n| n.cpus).collect(),
            tasks_per_node: alloc.nodes.iter().map(|n| n.tasks).collect(),
            cpus_on_node: batch_share.cpus,
            mem_per_node_mb: batch_share.mem_mb,
            gpus: batch_share.gpus.clone(),
            kill_wait,
            ctld_socket: self.ctld_socket.clone(),
        };
        let batch_host = batch_share.node.clone();
        let link = self.state.node_mut(&batch_host).and_then(|n| n.link.clone());
        match link.map(|l| l.tx.send(CtldMessage::Launch(Box::new(request)))) {
            Some(Ok(())) => tracing::info!(job_id, node = batch_host, "launch sent"),
            _ => {
                tracing::warn!(job_id, node = batch_host, "node went away before launch; job requeued");
                self.requeue(job_id);
            }
        }
    }

    /// Puts a job that never started back in the queue.
    fn requeue(&mut self, job_id: JobId) {
        let now = now();
        self.state.release_job(job_id, now);
        if let Some(job) = self.state.jobs.get_mut(&job_id) {
            let info = &mut job.info;
            info.state = Some(JobState::Pending);
            info.reason = "None".into();
            info.start_time = None;
            info.nodes.clear();
            info.steps.clear();
            info.partition = job.candidates.join(",");
            job.launched_at = None;
        }
        self.store_job(job_id, false);
        self.schedule_needed = true;
    }

    fn cancel(&mut self, caller: Caller, request: &CancelRequest) -> Response {
        let admin = is_admin(&self.state.config, caller.uid);
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
            let result = self.cancel_one(caller, admin, job_id, request, now);
            results.push((job_id, result));
        }
        Response::Cancelled { results }
    }

    fn cancel_one(&mut self, caller: Caller, admin: bool, job_id: JobId, request: &CancelRequest, now: UnixTime) -> Result<(), ErrorCode> {
        let kill_wait = self.state.config.kill_wait;
        let job = self.state.jobs.get_mut(&job_id).filter(|j| j.committed).ok_or(ErrorCode::InvalidJobId)?;
        if job.info.uid != caller.uid && !admin {
            let owner = job.info.uid;
            self.audit(caller.uid, "cancel-denied", Some(job_id), format!("owner uid {owner}"));
            return Err(ErrorCode::AccessDenied);
        }
        let state = job.info.state();
        if state.is_terminal() {
            return Err(ErrorCode::AlreadyDone);
        }
        let batch_host = job.info.nodes.first().cloned();
        if let Some(signal) = request.signal {
            if state == JobState::Running {
                if let Some(link) = batch_host.and_then(|h| self.state.node_mut(&h)).and_then(|n| n.link.clone()) {
                    let _ = link.tx.send(CtldMessage::Signal { job_id, signal, batch_only: request.batch_only });
                }
            }
            self.audit(caller.uid, "signal", Some(job_id), format!("signal {signal}"));
            return Ok(());
        }
        job.info.cancelled_by = Some(caller.uid);
        if state == JobState::Running {
            job.cancel_requested_by = Some(caller.uid);
            if let Some(link) = batch_host.and_then(|h| self.state.node_mut(&h)).and_then(|n| n.link.clone()) {
                let _ = link.tx.send(CtldMessage::Cancel { job_id, kill_wait });
            }
        }
        self.state.end_job(job_id, JobState::Cancelled, "None", now);
        if state == JobState::Pending {
            if let Some(job) = self.state.jobs.get_mut(&job_id) {
                job.info.eligible_time = None;
            }
        }
        self.store_job(job_id, false);
        self.audit(caller.uid, "cancel", Some(job_id), format!("was {}", state.long_name()));
        self.schedule_needed = true;
        Ok(())
    }

    fn query_jobs(&self, query: &JobQuery) -> Response {
        let jobs = self
            .state
            .jobs
            .values()
            .filter(|j| j.committed)
            .filter(|j| query.job_ids.is_empty() || query.job_ids.contains(&j.info.job_id))
            .filter(|j| query.include_finished || !query.job_ids.is_empty() || !j.info.state().is_terminal())
            .filter(|j| query.users.is_empty() || query.users.contains(&j.info.uid))
            .filter(|j| query.partitions.is_empty() || j.info.partition.split(',').any(|p| query.partitions.iter().any(|q| q == p)))
            .filter(|j| query.states.is_empty() || query.states.contains(&j.info.state()))
            .map(|j| j.info.clone())
            .collect();
        Response::Jobs { now: now(), jobs }
    }

    fn partitions(&self) -> Vec<PartitionInfo> {
        self.state
            .config
            .partitions
            .iter()
            .map(|p| {
                let nodes: Vec<_> = p.nodes.iter().filter_map(|n| self.state.node_index.get(n).map(|&i| &self.state.nodes[i])).collect();
                PartitionInfo {
                    name: p.name.clone(),
                    default: p.default,
                    up: true,
                    hidden: p.hidden,
                    max_time: p.max_time,
                    default_time: p.default_time,
                    max_nodes: p.max_nodes,
                    nodes: p.nodes.clone(),
                    allow_accounts: p.allow_accounts.clone(),
                    allow_qos: p.allow_qos.clone(),
                    priority_job_factor: p.priority_job_factor,
                    priority_tier: p.priority_tier,
                    total_cpus: nodes.iter().map(|n| n.cpus).sum(),
                    total_mem_mb: nodes.iter().map(|n| n.real_memory_mb).sum(),
                    total_gpus: u32::try_from(nodes.iter().map(|n| n.gpus.len()).sum::<usize>()).unwrap_or(u32::MAX),
                }
            })
            .collect()
    }

    fn node_registered(&mut self, registration: NodeRegistration, link: NodeLink, address: String) {
        let now = now();
        let name = registration.name.clone();
        let Some(node) = self.state.node_mut(&name) else {
            tracing::warn!(node = name, "registration from a node that is not in the config");
            return;
        };
        let was_down = node.registered_once && !node.responding;
        node.link = Some(link.clone());
        node.responding = true;
        node.registered_once = true;
        node.last_heartbeat = now;
        node.cpus = registration.cpus.min(node.config.cpus).max(1);
        node.real_memory_mb = registration.real_memory_mb.min(node.config.real_memory_mb);
        if !registration.gpus.is_empty() {
            node.gpus = registration.gpus.clone();
        }
        node.address = address;
        node.boot_time = Some(registration.boot_time);
        node.start_time = Some(registration.start_time);
        node.version = registration.version.clone();
        tracing::info!(node = name, cpus = node.cpus, gpus = node.gpus.len(), held = ?registration.running, was_down, "node registered");
        self.audit(0, "node-register", None, format!("node {name}"));
        // Jobs the node holds that ctld no longer runs there must die.
        let kill: Vec<JobId> = registration
            .running
            .iter()
            .copied()
            .filter(|job_id| {
                self.state.jobs.get(job_id).is_none_or(|j| {
                    j.info.nodes.first() != Some(&name) || j.info.state().is_terminal()
                })
            })
            .collect();
        let _ = link.tx.send(CtldMessage::Registered { kill });
        self.lost_jobs(&name, &registration.running, now);
        self.schedule_needed = true;
    }

    /// Jobs ctld runs on `node` that the node no longer holds, past the launch grace: NODE_FAIL.
    fn lost_jobs(&mut self, node: &str, held: &[JobId], now: UnixTime) {
        let lost: Vec<JobId> = self
            .state
            .jobs
            .values()
            .filter(|j| j.alloc.is_some() && j.info.nodes.first().map(String::as_str) == Some(node))
            .filter(|j| !held.contains(&j.info.job_id))
            .filter(|j| j.launched_at.is_some_and(|t| now - t > LAUNCH_GRACE))
            .map(|j| j.info.job_id)
            .collect();
        for job_id in lost {
            tracing::warn!(job_id, node, "node no longer holds the job");
            self.fail_on_node(job_id, now);
        }
    }

    /// Ends a job whose node failed; a job already cancelled stays cancelled.
    fn fail_on_node(&mut self, job_id: JobId, now: UnixTime) {
        let was_running = self.state.jobs.get(&job_id).is_some_and(|j| j.info.state() == JobState::Running);
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

    fn node_message(&mut self, node: &str, connection_id: u64, message: NodeMessage) {
        let now = now();
        let Some(n) = self.state.node_mut(node) else { return };
        if !n.link.as_ref().is_some_and(|l| l.connection_id == connection_id) {
            return; // a message from a connection ctld already gave up on
        }
        n.last_heartbeat = now;
        match message {
            NodeMessage::Register(_) => {}
            NodeMessage::Heartbeat { running } => self.lost_jobs(node, &running, now),
            NodeMessage::JobStarted { job_id, start_time } => {
                if let Some(job) = self.state.jobs.get_mut(&job_id) {
                    if job.info.state() == JobState::Running {
                        job.info.start_time = Some(start_time);
                        if let Some(step) = job.info.steps.first_mut() {
                            step.start_time = Some(start_time);
                        }
                        self.store_job(job_id, false);
                    }
                }
            }
            NodeMessage::JobEnded(end) => self.job_ended(node, end, now),
        }
    }

    fn job_ended(&mut self, node: &str, end: JobEnd, now: UnixTime) {
        let job_id = end.job_id;
        let holds = self.state.jobs.get(&job_id).is_some_and(|j| j.alloc.is_some() && j.info.nodes.first().map(String::as_str) == Some(node));
        if holds {
            let job = self.state.jobs.get_mut(&job_id).expect("checked above");
            let cancelled = job.cancel_requested_by.is_some() || job.info.state() == JobState::Cancelled;
            let (state, reason) = match &end.outcome {
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
                JobOutcome::OutOfMemory => WaitStatus::exited(253),
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
            self.state.release_job(job_id, now);
            self.store_job(job_id, false);
            let final_state = self.state.jobs.get(&job_id).map_or(state, |j| j.info.state());
            self.audit(0, "end", Some(job_id), format!("{} {}", final_state.long_name(), exit_status));
            tracing::info!(job_id, state = final_state.long_name(), exit = %exit_status, "job ended");
            self.schedule_needed = true;
        } else if self.state.jobs.contains_key(&job_id) {
            // A repeated end: store the record again, in case the first store failed.
            self.store_job(job_id, false);
        }
        // Acknowledge after the end (or an earlier identical one) is durable.
        self.store(DbOp::After(AfterCommit::AckJobEnd { node: node.to_owned(), job_id }));
    }

    fn tick(&mut self) {
        let now = now();
        let timeout = i64::from(self.state.config.node_timeout);
        let mut failed_nodes = Vec::new();
        for node in &mut self.state.nodes {
            let silent = node.responding && now - node.last_heartbeat > timeout;
            let never_back = !node.responding && now - self.started_at > timeout;
            if silent {
                tracing::warn!(node = node.config.name, "node stopped responding; marking it DOWN");
                node.responding = false;
                node.link = None; // closes the connection; the node must register again
                failed_nodes.push(node.config.name.clone());
            } else if never_back {
                failed_nodes.push(node.config.name.clone());
            }
        }
        for name in failed_nodes {
            let jobs: Vec<JobId> = self
                .state
                .jobs
                .values()
                .filter(|j| j.alloc.as_ref().is_some_and(|a| a.nodes.iter().any(|n| n.node == name)))
                .map(|j| j.info.job_id)
                .collect();
            for job_id in jobs {
                self.fail_on_node(job_id, now);
            }
        }
        self.state.purge(now);
        // Begin times and nodes coming back need a pass even without other events.
        self.schedule_needed = true;
    }
}

/// Rebuilds the in-memory jobs from the database after a restart.
pub(crate) fn restore(state: &mut State, stored: Vec<crate::db::StoredJob>) {
    let now = now();
    for crate::db::StoredJob { info, spec, alloc } in stored {
        let candidates: Vec<String> = if info.state() == JobState::Pending {
            info.partition.split(',').map(str::to_owned).collect()
        } else {
            vec![info.partition.clone()]
        };
        let running = info.state() == JobState::Running;
        let job_id = info.job_id;
        let job = Job {
            info,
            spec: Arc::new(spec),
            candidates,
            alloc: if running { alloc } else { None },
            committed: true,
            launched_at: running.then_some(now),
            cancel_requested_by: None,
        };
        if let Some(alloc) = &job.alloc {
            let alloc = alloc.clone();
            state.hold(&alloc);
        }
        state.jobs.insert(job_id, job);
    }
}
