//! The core: one task that owns [`State`] and consumes one closed enum of [`Event`]s — client
//! requests, node messages, commit reports and timer ticks. Every state change goes through here,
//! so there are no locks on the cluster state; durable changes are queued to the database writer,
//! and anything that must not happen before they are on disk (answering `sbatch`, launching a job,
//! acknowledging a job's end to its node) waits for the writer's [`CommitReport`].

use crate::policy::authz::{Operation, Who};
use crate::store::db::{AfterCommit, CommitReport, DbOp};
use crate::policy::scheduler::{self, Start};
use crate::model::state::{Allocation, Job, NodeAllocation, State};
use crate::model::identity::Caller;
use crate::policy::validate;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobId, JobSpec, JobState, StepId, WaitStatus};
use drover_shared::node::PartitionInfo;
use drover_shared::proto::client::{CancelRequest, ErrorCode, JobUpdate, Response};
use drover_shared::proto::node::{
    CtldMessage, JobEnd, JobOutcome, JobRun, LaunchRequest, NodeMessage, NodeRegistration,
};
use drover_shared::{UnixTime, now};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

mod step;

mod node_admin;
pub(crate) use node_admin::restore_node_states;

pub(crate) mod metrics;
pub(crate) mod reconfigure;
mod requeue;

/// A connection to a node's noded.
#[derive(Debug, Clone)]
pub(crate) struct NodeLink {
    pub(crate) connection_id: u64,
    pub(crate) tx: mpsc::UnboundedSender<CtldMessage>,
}

/// Everything the core reacts to.
#[derive(Debug)]
pub(crate) enum Event {
    Submit {
        caller: Caller,
        spec: Box<JobSpec>,
        reply: oneshot::Sender<Response>,
    },
    Cancel {
        caller: Caller,
        request: CancelRequest,
        reply: oneshot::Sender<Response>,
    },
    CancelTasks {
        caller: Caller,
        request: CancelRequest,
        tasks: Vec<(JobId, u32)>,
        reply: oneshot::Sender<Response>,
    },
    Hold {
        caller: Caller,
        job_ids: Vec<JobId>,
        hold: Option<bool>,
        reply: oneshot::Sender<Response>,
    },
    /// `scontrol requeue` (`hold: false`), `requeuehold` (`hold: true`).
    Requeue {
        caller: Caller,
        job_ids: Vec<JobId>,
        hold: bool,
        reply: oneshot::Sender<Response>,
    },
    UpdateJob {
        caller: Caller,
        job_ids: Vec<JobId>,
        update: JobUpdate,
        reply: oneshot::Sender<Response>,
    },
    QueryNodes {
        reply: oneshot::Sender<Response>,
    },
    QueryPartitions {
        reply: oneshot::Sender<Response>,
    },
    QueryShares {
        reply: oneshot::Sender<Response>,
    },
    QueryPriority {
        reply: oneshot::Sender<Response>,
    },
    Explain {
        job_id: JobId,
        reply: oneshot::Sender<Response>,
    },
    CreateStep {
        caller: Caller,
        job_id: JobId,
        spec: Box<drover_shared::job::StepSpec>,
        reply: oneshot::Sender<Response>,
    },
    StepDone {
        caller: Caller,
        job_id: JobId,
        step_id: u32,
        state: JobState,
        exit_status: WaitStatus,
        reply: oneshot::Sender<Response>,
    },
    CancelStep {
        caller: Caller,
        job_id: JobId,
        step_id: u32,
        signal: Option<i32>,
        reply: oneshot::Sender<Response>,
    },
    Committed(CommitReport),
    NodeConnected {
        registration: NodeRegistration,
        link: NodeLink,
        address: String,
    },
    NodeMessage {
        node: String,
        connection_id: u64,
        message: NodeMessage,
    },
    NodeDisconnected {
        node: String,
        connection_id: u64,
    },
    Tick,
    /// `/metrics` and the status page: a snapshot of the cluster.
    Metrics {
        reply: oneshot::Sender<crate::core::metrics::Snapshot>,
    },
    UpdateNode {
        caller: Caller,
        update: drover_shared::proto::client::NodeUpdate,
        reply: oneshot::Sender<Response>,
    },
    QueryNodeReasons {
        reply: oneshot::Sender<Response>,
    },
    Reconfigure {
        caller: Caller,
        reply: oneshot::Sender<Response>,
    },
    /// A remote client's token was refused (audited as a refused `connect`).
    RemoteRefused {
        uid: u32,
        detail: String,
    },
    TestOnly {
        caller: Caller,
        spec: Box<JobSpec>,
        reply: oneshot::Sender<Response>,
    },
    QueryNodeFeatures {
        reply: oneshot::Sender<Response>,
    },
    SplitArrayTask {
        caller: Caller,
        array_job_id: JobId,
        task: u32,
        reply: oneshot::Sender<Response>,
    },
}

/// Longest wait between an event and the scheduling pass it asks for.
/// Seconds between the passes ticks ask for when nothing else did (Slurm's `sched_interval`
/// plays this part): events (submissions, ends, node changes, updates) and arriving begin times
/// bring a pass at once, so a quiet deep queue (100,000 held jobs) is not walked every second.
const PERIODIC_PASS: UnixTime = 10;

/// A new token naming a request that waits for its commit (`AfterCommit::Requeue`, `Answer`).
fn commit_token() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

const MAX_PASS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Seconds a launched job may be missing from its node's reports before it counts as lost.
const LAUNCH_GRACE: i64 = 15;

/// The core's state and its outlets.
pub(crate) struct Core {
    state: State,
    db: std::sync::mpsc::Sender<DbOp>,
    /// The live connection of each registered node, by node name: the core's way to reach
    /// noded. A node has one exactly when its `connection` in the state is this link's id.
    links: HashMap<String, NodeLink>,
    waiting_submits: HashMap<JobId, oneshot::Sender<Response>>,
    schedule_needed: bool,
    ctld_socket: String,
    started_at: UnixTime,
    /// Running jobs being killed to be requeued: when their run's end comes, they pend again
    /// (held when the value is true: `requeuehold`; see `requeue.rs`).
    requeue_on_end: HashMap<JobId, bool>,
    /// `scontrol requeue` requests waiting for their intents' commit (see `requeue.rs`).
    requeue_waiting: HashMap<u64, requeue::Waiting>,
    /// Answers waiting for the commit of what their request changed (`answer_after_commit`).
    answers_waiting: HashMap<u64, (oneshot::Sender<Response>, Response)>,
    /// Running jobs whose time limit `scontrol update` changed: sent again to the batch host when
    /// it registers, in case the change was sent while it was not connected.
    limits_changed: std::collections::HashSet<JobId>,
    /// Job steps: rows being committed, CPUs held by running steps (see `step.rs`).
    steps: step::Steps,
    /// Usage accounting: what each running job holds, taken at its start (see `accounting`).
    runs: std::cell::RefCell<HashMap<JobId, crate::store::accounting::RunSnapshot>>,
    /// Writes that need no commit of their own (a job's start time as its node reports it):
    /// queued ahead of the next op that does, or at the next tick, whichever comes first.
    unhurried: std::cell::RefCell<Vec<DbOp>>,
    /// When usage older than the retention periods was last deleted.
    usage_purged_at: UnixTime,
    /// When a tick last asked for a pass (see [`PERIODIC_PASS`]).
    periodic_pass_at: UnixTime,
    /// Counters `/metrics` serves (scheduler pass times are recorded here).
    metrics: Arc<crate::core::metrics::Registry>,
    /// Account → GPU-seconds allocated since ctld started, and when it was last advanced.
    gpu_seconds: std::collections::BTreeMap<String, u64>,
    gpu_seconds_at: UnixTime,
    /// The config the client and HTTP handlers read; swapped by `scontrol reconfigure`.
    shared_config: reconfigure::SharedConfig,
    /// Publishes job snapshots for queries.
    publisher: crate::model::snapshot::Publisher,
    /// Answers to changes, sent once a snapshot that shows the change is published, so a client
    /// that queries after its `sbatch`/`scancel`/… returned sees its change.
    deferred: Vec<(oneshot::Sender<Response>, Response)>,
}

impl Core {
    pub(crate) fn new(
        state: State,
        db: std::sync::mpsc::Sender<DbOp>,
        ctld_socket: String,
        publisher: crate::model::snapshot::Publisher,
    ) -> Core {
        let shared_config = reconfigure::SharedConfig::new(state.config.clone());
        let mut core = Core {
            state,
            db,
            links: HashMap::new(),
            waiting_submits: HashMap::new(),
            schedule_needed: true,
            ctld_socket,
            started_at: now(),
            requeue_on_end: HashMap::new(),
            requeue_waiting: HashMap::new(),
            answers_waiting: HashMap::new(),
            limits_changed: Default::default(),
            steps: Default::default(),
            runs: Default::default(),
            unhurried: Default::default(),
            usage_purged_at: 0,
            periodic_pass_at: 0,
            metrics: Arc::default(),
            gpu_seconds: Default::default(),
            gpu_seconds_at: now(),
            shared_config,
            publisher,
            deferred: Vec::new(),
        };
        let running: Vec<JobId> =
            core.state.jobs.values().filter(|j| j.alloc.is_some()).map(|j| j.info.job_id).collect();
        core.snapshot_runs(&running);
        core
    }

    /// Runs until the event channel closes or `shutdown` resolves.
    pub(crate) async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>, shutdown: impl std::future::Future) {
        tokio::pin!(shutdown);
        // Passes are spaced by twice the cost of the last one (at most MAX_PASS_INTERVAL), so
        // scheduling never takes more than about a third of the core's time: on a small cluster a
        // pass follows every event at once; on a large, full one a stream of submissions shares
        // passes instead of waiting behind one pass per commit (Slurm's `sched_min_interval`).
        let mut last_pass = tokio::time::Instant::now();
        let mut interval = std::time::Duration::ZERO;
        loop {
            let deferred_pass = tokio::time::sleep_until(last_pass + interval);
            tokio::select! {
                event = events.recv() => {
                    let Some(event) = event else { break };
                    self.handle(event);
                    // Drain what else is queued so one scheduling pass serves a burst of events.
                    while let Ok(event) = events.try_recv() {
                        self.handle(event);
                    }
                    self.publish();
                }
                () = deferred_pass, if self.schedule_needed => {}
                _ = &mut shutdown => break,
            }
            if self.schedule_needed && last_pass.elapsed() >= interval {
                self.schedule_needed = false;
                last_pass = tokio::time::Instant::now();
                self.schedule();
                let cost = last_pass.elapsed();
                interval = (cost * 2).min(MAX_PASS_INTERVAL);
                self.metrics.scheduler_pass(cost);
                self.metrics.scheduler_backfill(self.state.last_pass.backfill);
                self.publish();
            }
        }
        self.flush_unhurried();
    }

    /// Publishes a snapshot if jobs changed, then sends the answers that waited for it.
    fn publish(&mut self) {
        self.publisher.publish(&self.state);
        for (reply, response) in self.deferred.drain(..) {
            let _ = reply.send(response);
        }
    }

    fn answer_after_publish(&mut self, reply: oneshot::Sender<Response>, response: Response) {
        self.deferred.push((reply, response));
    }

    /// Answers once what the request changed is committed (and then published): an answered
    /// cancel, hold, release or update survives a crash of ctld. If the commit fails, the
    /// client is told so.
    fn answer_after_commit(&mut self, reply: oneshot::Sender<Response>, response: Response) {
        let token = commit_token();
        self.answers_waiting.insert(token, (reply, response));
        self.store(DbOp::After(AfterCommit::Answer(token)));
    }

    fn store(&self, op: DbOp) {
        self.flush_unhurried();
        // The writer thread only stops when ctld shuts down; a send error then is harmless.
        let _ = self.db.send(op);
    }

    /// Queues `op` without waking the writer for it: it is committed with the next op that is
    /// stored (in order, before it), or at the next tick. For records whose loss in a crash of
    /// ctld costs only precision: the node reported start time of a job already stored running
    /// (its allocation time stays the start until then).
    fn store_unhurried(&self, op: DbOp) {
        self.unhurried.borrow_mut().push(op);
    }

    /// Sends what [`Core::store_unhurried`] queued.
    fn flush_unhurried(&self) {
        for op in self.unhurried.borrow_mut().drain(..) {
            let _ = self.db.send(op);
        }
    }

    fn store_job(&self, job_id: JobId, with_alloc: bool) {
        if let Some(job) = self.state.jobs.get(&job_id) {
            if job.info.state().is_terminal() {
                self.record_run(job_id, job.info.state().long_name(), job.info.end_time.unwrap_or_else(now));
            }
            let alloc = if with_alloc { job.alloc.clone().map(Box::new) } else { None };
            self.store(DbOp::UpdateJob { info: Box::new(job.info.clone()), alloc });
        }
    }

    /// Records something the controller did on its own (job ends, node failures, preemption).
    fn audit(&self, uid: u32, action: &'static str, job_id: Option<JobId>, detail: String) {
        let origin = "ctld".to_owned();
        self.store(DbOp::Audit { time: now(), uid, origin, action, job_id, outcome: "ok".into(), detail });
    }

    /// Records a client's request with its outcome (`ok` or the refusal's message), refused ones
    /// included.
    fn audit_request(
        &self,
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
        let origin = caller.origin();
        self.store(DbOp::Audit { time: now(), uid: caller.uid, origin, action, job_id, outcome, detail });
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Submit { caller, spec, reply } => self.submit(caller, *spec, reply),
            Event::Cancel { caller, request, reply } => {
                let response = self.cancel(caller, &request);
                self.answer_after_commit(reply, response);
            }
            Event::CancelTasks { caller, request, tasks, reply } => {
                let response = self.cancel_tasks(caller, &request, &tasks);
                self.answer_after_commit(reply, response);
            }
            Event::UpdateJob { caller, job_ids, update, reply } => {
                let response = self.update_jobs(caller, &job_ids, &update);
                self.answer_after_commit(reply, response);
            }
            Event::Requeue { caller, job_ids, hold, reply } => self.requeue_jobs(caller, &job_ids, hold, reply),
            Event::Hold { caller, job_ids, hold, reply } => {
                let response = self.hold(caller, &job_ids, hold);
                self.answer_after_commit(reply, response);
            }
            Event::QueryNodes { reply } => {
                let nodes = self.state.nodes.iter().map(|n| n.info(self.state.partitions_of(&n.config.name))).collect();
                let _ = reply.send(Response::Nodes { now: now(), nodes });
            }
            Event::QueryPartitions { reply } => {
                let _ = reply.send(Response::Partitions { partitions: self.partitions() });
            }
            Event::QueryShares { reply } => {
                let _ = reply.send(crate::policy::report::shares(&self.state, now()));
            }
            Event::QueryPriority { reply } => {
                let _ = reply.send(crate::policy::report::priorities(&self.state, now()));
            }
            Event::Explain { job_id, reply } => {
                let _ = reply.send(crate::policy::explain::explain(&self.state, job_id, now()));
            }
            Event::CreateStep { caller, job_id, spec, reply } => self.create_step(caller, job_id, spec, reply),
            Event::StepDone { caller, job_id, step_id, state, exit_status, reply } => {
                let _ = reply.send(self.step_done(caller, job_id, step_id, state, exit_status));
            }
            Event::CancelStep { caller, job_id, step_id, signal, reply } => {
                let _ = reply.send(self.cancel_step(caller, job_id, step_id, signal));
            }
            Event::Committed(report) => self.committed(report),
            Event::NodeConnected { registration, link, address } => self.node_registered(registration, link, address),
            Event::NodeMessage { node, connection_id, message } => self.node_message(&node, connection_id, message),
            Event::NodeDisconnected { node, connection_id } => {
                if let Some(n) = self.state.node_mut(&node)
                    && n.connection == Some(connection_id)
                {
                    tracing::info!(node, "node connection closed");
                    n.connection = None;
                    self.links.remove(&node);
                }
            }
            Event::Tick => self.tick(),
            Event::Metrics { reply } => {
                let _ = reply.send(self.metrics_snapshot());
            }
            Event::UpdateNode { caller, update, reply } => {
                let _ = reply.send(self.update_node(caller, &update));
            }
            Event::QueryNodeReasons { reply } => {
                let _ = reply.send(self.node_reasons());
            }
            Event::Reconfigure { caller, reply } => {
                let _ = reply.send(self.reconfigure(caller));
            }
            Event::RemoteRefused { uid, detail } => {
                let (origin, outcome) = ("tcp".to_owned(), "Access/permission denied".to_owned());
                self.store(DbOp::Audit { time: now(), uid, origin, action: "connect", job_id: None, outcome, detail });
            }
            Event::TestOnly { caller, spec, reply } => {
                let now = now();
                let response = match validate::validate(&self.state, caller, *spec, now) {
                    Err((code, detail)) => Response::Error { code, detail },
                    Ok(job) => crate::policy::will_run::estimate(&self.state, &job, self.state.next_job_id, now),
                };
                let _ = reply.send(response);
            }
            Event::SplitArrayTask { caller, array_job_id, task, reply } => {
                let response = self.split_array_task(caller, array_job_id, task);
                self.answer_after_commit(reply, response);
            }
            Event::QueryNodeFeatures { reply } => {
                let nodes =
                    self.state.nodes.iter().map(|n| (n.config.name.clone(), n.config.features.clone())).collect();
                let _ = reply.send(Response::NodeFeatures { nodes });
            }
        }
    }

    fn submit(&mut self, caller: Caller, spec: JobSpec, reply: oneshot::Sender<Response>) {
        let now = now();
        match validate::validate(&self.state, caller, spec, now) {
            Err((code, detail)) => {
                tracing::info!(uid = caller.uid, %code, detail, "submission refused");
                self.audit_request(caller, "submit", None, Err(code), detail.clone());
                let _ = reply.send(Response::Error { code, detail });
            }
            Ok(mut job) => {
                let job_id = self.state.next_job_id;
                self.state.next_job_id += 1;
                job.info.job_id = job_id;
                self.state.usage.touch(&job.info.account, &job.info.user);
                crate::policy::array::init(&mut job);
                // The database keeps the whole spec; memory only its resident half.
                let resident = self.state.specs.resident(&job.spec);
                let spec = Box::new(Arc::unwrap_or_clone(std::mem::replace(&mut job.spec, resident)));
                self.store(DbOp::InsertJob { info: Box::new(job.info.clone()), spec, fill_from: None });
                let detail = format!("name={} partition={}", job.info.name, job.info.partition);
                self.audit_request(caller, "submit", Some(job_id), Ok(()), detail);
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
                        crate::model::snapshot::touch(job_id);
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

    fn schedule(&mut self) {
        let now = now();
        self.expire_deadlines(now);
        self.refresh_dependencies(now);
        // A pass starts at most one task of an array (its base record is one queue entry); more
        // passes follow while tasks are split off, so the tasks that fit start together.
        let mut split = false;
        let mut backfill = std::time::Duration::ZERO;
        for _ in 0..crate::policy::array::MAX_ARRAY_SIZE {
            let more = self.schedule_pass(now);
            backfill += self.state.last_pass.backfill;
            if !more {
                break;
            }
            split = true;
        }
        // A split changes where a base record's dependency stands (`aftercorr` holds per task):
        // show it at once rather than at the next pass.
        if split {
            self.refresh_dependencies(now);
        }
        // What `/metrics` reports: the backfill part of all rounds.
        self.state.last_pass.backfill = backfill;
        self.preempt();
    }

    /// Shows where each pending job's dependency stands and cancels the jobs that asked for it
    /// once theirs can never be satisfied.
    fn refresh_dependencies(&mut self, now: UnixTime) {
        let (kill, changed) = crate::policy::dependency::refresh(&mut self.state, now);
        for job_id in changed {
            self.store_job(job_id, false);
        }
        if !kill.is_empty() {
            self.state.dependencies.jobs_ended();
        }
        for job_id in kill {
            self.state.end_job(job_id, JobState::Cancelled, "DependencyNeverSatisfied", now);
            self.store_job(job_id, false);
            self.audit(0, "cancel", Some(job_id), "dependency can never be satisfied".into());
        }
    }

    /// `--deadline`: a pending job that can no longer end by its deadline (now plus its time
    /// limit, the shortest over its partitions, is past it) ends `DEADLINE`, as in Slurm.
    fn expire_deadlines(&mut self, now: UnixTime) {
        let config = self.state.config.clone();
        let expired: Vec<JobId> = self
            .state
            .jobs
            .values()
            .filter(|j| j.committed && j.info.state() == JobState::Pending)
            .filter(|j| {
                j.spec.deadline.is_some_and(|deadline| {
                    let shortest = j
                        .candidates
                        .iter()
                        .filter_map(|name| config.partitions.iter().find(|p| &p.name == name))
                        .map(|p| crate::policy::backfill::time_limit_secs(j, p))
                        .min()
                        .unwrap_or(0);
                    now.saturating_add(shortest) > deadline
                })
            })
            .map(|j| j.info.job_id)
            .collect();
        for job_id in expired {
            self.state.end_job(job_id, JobState::Deadline, "DeadLine", now);
            self.store_job(job_id, false);
            self.audit(0, "deadline", Some(job_id), "cannot end by its deadline".into());
            self.schedule_needed = true;
        }
    }

    /// Stores a task just split off array base record `base` (the task's insert, the base's update).
    fn store_split(&self, base: JobId, task_job: JobId) {
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

    /// One scheduling pass; true when it split array tasks off their base records.
    fn schedule_pass(&mut self, now: UnixTime) -> bool {
        let mut split_any = false;
        let mut started = Vec::new();
        for Start { job_id, partition, alloc } in scheduler::schedule(&mut self.state, now) {
            let base = job_id;
            let task = crate::policy::dependency::ready_task(&self.state, base, now);
            let Some((job_id, split)) = crate::policy::array::claim(&mut self.state, base, task) else { continue };
            if split {
                split_any = true;
                self.store_split(base, job_id);
            }
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
            info.gpus_allocated =
                u32::try_from(alloc.nodes.iter().map(|n| n.gpus.len()).sum::<usize>()).unwrap_or(u32::MAX);
            if info.time_limit.is_none() {
                info.time_limit = partition_config.map(|p| p.default_time.unwrap_or(p.max_time));
            }
            info.steps = vec![validate::batch_step(info, now)];
            job.alloc = Some(alloc);
            job.launched_at = Some(now);
            started.push(job_id);
            tracing::info!(job_id, partition, nodes = ?job.info.nodes, "job allocated");
            self.store_job(job_id, true);
            self.store(DbOp::After(AfterCommit::Launch(job_id, None)));
        }
        self.snapshot_runs(&started);
        split_any
    }

    /// What a node needs to run `job`'s processes on its `share` of the allocation (the batch
    /// script on the first node, step tasks on any). `spec` is the whole spec for the batch
    /// launch (`resident::complete`); step launches send the resident one (the step runner reads
    /// only its umask).
    fn launch_request(&self, job: &Job, spec: JobSpec, alloc: &Allocation, share: &NodeAllocation) -> LaunchRequest {
        LaunchRequest {
            job_id: job.info.job_id,
            spec,
            user: job.info.user.clone(),
            uid: job.info.uid,
            gid: job.info.gid,
            cluster_name: self.state.config.cluster_name.clone(),
            partition: job.info.partition.clone(),
            account: job.info.account.clone(),
            qos: job.info.qos.clone(),
            time_limit: job.info.time_limit.unwrap_or(TimeLimit::Unlimited),
            nodes: job.info.nodes.clone(),
            cpus_per_node: alloc.nodes.iter().map(|n| n.cpus).collect(),
            tasks_per_node: alloc.nodes.iter().map(|n| n.tasks).collect(),
            cpus_on_node: share.cpus,
            mem_per_node_mb: share.mem_mb,
            gpus: share.gpus.clone(),
            kill_wait: self.state.config.kill_wait,
            ctld_socket: self.ctld_socket.clone(),
            array: crate::policy::array::launch_info(job),
            restart_count: job.info.restarts,
        }
    }

    fn launch(&mut self, job_id: JobId, stored: Option<Box<JobSpec>>) {
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        if job.info.state() != JobState::Running {
            return; // cancelled between allocation and commit
        }
        let Some(alloc) = &job.alloc else { return };
        let Some(batch_share) = alloc.nodes.first() else { return };
        let Some(stored) = stored else {
            // Its row could not be read back (logged by the writer): nothing to start it with.
            tracing::error!(job_id, "no stored spec to launch the job with; the job fails");
            self.fail_launch(job_id);
            return;
        };
        let spec = crate::model::resident::complete(&job.spec, &job.info, *stored);
        let request = self.launch_request(job, spec, alloc, batch_share);
        let batch_host = batch_share.node.clone();
        // Checked at submit; a launch that still would not fit a node frame is never sent (it
        // would drop the node's connection): the job fails instead.
        let size = postcard::experimental::serialized_size(&request).map_or(usize::MAX, |size| size + 8);
        if size > drover_shared::proto::frame::MAX_FRAME {
            tracing::error!(job_id, size, "launch message exceeds the node frame limit; the job fails");
            self.fail_launch(job_id);
            return;
        }
        let link = self.links.get(&batch_host).cloned();
        match link.map(|l| l.tx.send(CtldMessage::Launch(Box::new(request)))) {
            Some(Ok(())) => tracing::info!(job_id, node = batch_host, "launch sent"),
            _ => {
                tracing::warn!(job_id, node = batch_host, "node went away before launch; job requeued");
                self.requeue(job_id);
            }
        }
    }

    /// A job that cannot be started at all ends `FAILED` (`JobLaunchFailure`) and frees its nodes.
    fn fail_launch(&mut self, job_id: JobId) {
        let now = now();
        self.runs.borrow_mut().remove(&job_id);
        self.state.release_job(job_id, now);
        self.state.end_job(job_id, JobState::Failed, "JobLaunchFailure", now);
        self.store_job(job_id, false);
        self.schedule_needed = true;
    }

    /// Puts a job that never started back in the queue.
    fn requeue(&mut self, job_id: JobId) {
        let now = now();
        self.runs.borrow_mut().remove(&job_id);
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
        let who = Who::of(&self.state.config, caller);
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
    fn cancel_tasks(&mut self, caller: Caller, request: &CancelRequest, tasks: &[(JobId, u32)]) -> Response {
        let who = Who::of(&self.state.config, caller);
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
    fn split_array_task(&mut self, caller: Caller, array_job_id: JobId, task: u32) -> Response {
        let who = Who::of(&self.state.config, caller);
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
    fn update_jobs(&mut self, caller: Caller, job_ids: &[JobId], update: &JobUpdate) -> Response {
        let who = Who::of(&self.state.config, caller);
        let mut results = Vec::with_capacity(job_ids.len());
        // Checked once for all the jobs: the bounds a submission gets, and what the new
        // dependency waits on (for cycles). The audit keeps the start of the request.
        let checked = self.check_update(update);
        let detail = bounded(format!("{update:?}"));
        for &job_id in job_ids {
            let result = checked
                .as_ref()
                .map_err(|code| *code)
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
        validate::check_update_text(update).map_err(|(code, _)| code)?;
        if let Some(name) = &update.name {
            validate::check_string("job name", name).map_err(|(code, _)| code)?;
        }
        if let Some(comment) = &update.comment {
            validate::check_string("comment", comment).map_err(|(code, _)| code)?;
        }
        match update.dependency.as_deref().filter(|t| !t.is_empty()) {
            Some(text) => {
                crate::policy::dependency::validate(&self.state, text).map_err(|(code, _)| code)?;
                Ok(crate::policy::dependency::reachable(&self.state, text))
            }
            None => Ok(HashMap::new()),
        }
    }

    fn update_one(
        &mut self,
        who: Who,
        job_id: JobId,
        update: &JobUpdate,
        reached: &HashMap<JobId, JobId>,
    ) -> Result<(), ErrorCode> {
        let config = self.state.config.clone();
        let job = self.state.jobs.get(&job_id).filter(|j| j.committed).ok_or(ErrorCode::InvalidJobId)?;
        who.check(Operation::Job { owner: job.info.uid })?;
        crate::policy::dependency::check_cycle(&self.state, job_id, reached).map_err(|(code, _)| code)?;
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
            validate::check_nice(nice, who.may(Operation::JobPrivileged)).map_err(|(code, _)| code)?;
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
    fn hold(&mut self, caller: Caller, job_ids: &[JobId], hold: Option<bool>) -> Response {
        let who = Who::of(&self.state.config, caller);
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
        let config = self.state.config.clone();
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
        let kill_wait = self.state.config.kill_wait;
        let job = self.state.jobs.get_mut(&job_id).filter(|j| j.committed).ok_or(ErrorCode::InvalidJobId)?;
        who.check(Operation::Job { owner: job.info.uid })?;
        let state = job.info.state();
        if state.is_terminal() {
            return Err(ErrorCode::AlreadyDone);
        }
        let batch_host = job.info.nodes.first().cloned();
        if let Some(signal) = request.signal {
            if state == JobState::Running
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

    fn partitions(&self) -> Vec<PartitionInfo> {
        self.state
            .config
            .partitions
            .iter()
            .map(|p| {
                let nodes: Vec<_> = p
                    .nodes
                    .iter()
                    .filter_map(|n| self.state.node_index.get(n).map(|&i| &self.state.nodes[i]))
                    .collect();
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
        node.connection = Some(link.connection_id);
        self.links.insert(registration.name.clone(), link.clone());
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
        // Runs the node holds that ctld no longer runs there (ended, requeued, earlier runs) must die.
        let kill = self.stale_runs(&name, &registration.running);
        let _ = link.tx.send(CtldMessage::Registered { kill });
        // Changed time limits again: the change may have been sent while the node was away.
        let jobs = &self.state.jobs;
        self.limits_changed.retain(|job_id| jobs.get(job_id).is_some_and(|j| j.info.state() == JobState::Running));
        for job_id in &self.limits_changed {
            let job = &self.state.jobs[job_id];
            if let (Some(time_limit), Some(true)) = (job.info.time_limit, job.info.nodes.first().map(|h| h == &name)) {
                let _ = link.tx.send(CtldMessage::SetTimeLimit { job_id: *job_id, time_limit });
            }
        }
        if let Some(node) = self.state.node_mut(&name) {
            node.held_report = Some((now, registration.running));
        }
        self.schedule_needed = true;
    }

    /// Jobs ctld runs on a node that the node's last report (registration or heartbeat) no
    /// longer holds, launched more than the launch grace before that report: NODE_FAIL. One walk
    /// over the jobs per tick for every node that reported since the last (a walk per heartbeat
    /// cost nodes x jobs: 10,000 nodes x 100,000 jobs delayed ctld past the launch grace itself).
    fn lost_jobs(&mut self) {
        let reports: HashMap<String, (UnixTime, std::collections::HashSet<JobRun>)> = self
            .state
            .nodes
            .iter_mut()
            .filter_map(|n| {
                n.held_report.take().map(|(at, held)| (n.config.name.clone(), (at, held.into_iter().collect())))
            })
            .collect();
        if reports.is_empty() {
            return;
        }
        let lost: Vec<(JobId, UnixTime)> = self
            .state
            .jobs
            .values()
            .filter(|j| j.alloc.is_some())
            .filter_map(|j| {
                let (at, held) = reports.get(j.info.nodes.first()?)?;
                let run = JobRun { job_id: j.info.job_id, run: j.info.restarts };
                (!held.contains(&run) && j.launched_at.is_some_and(|t| at - t > LAUNCH_GRACE))
                    .then_some((run.job_id, *at))
            })
            .collect();
        for (job_id, at) in lost {
            tracing::warn!(job_id, reported_at = at, "node no longer holds the job");
            self.fail_on_node(job_id, now());
        }
    }

    fn node_message(&mut self, node: &str, connection_id: u64, message: NodeMessage) {
        let now = now();
        let Some(n) = self.state.node_mut(node) else { return };
        if n.connection != Some(connection_id) {
            return; // a message from a connection ctld already gave up on
        }
        n.last_heartbeat = now;
        match message {
            NodeMessage::Register(_) => {}
            NodeMessage::Heartbeat { running } => {
                self.cancel_superseded(node, &running);
                if let Some(n) = self.state.node_mut(node) {
                    n.held_report = Some((now, running));
                }
            }
            NodeMessage::JobStarted { job_id, run, start_time } => {
                if let Some(job) = self.state.jobs.get_mut(&job_id)
                    && job.info.state() == JobState::Running
                    && job.info.restarts == run
                {
                    job.info.start_time = Some(start_time);
                    if let Some(step) = job.info.steps.first_mut() {
                        step.start_time = Some(start_time);
                    }
                    // The job is stored running since its allocation; this only makes the
                    // start exact, so it rides with the next commit instead of forcing one.
                    let info = Box::new(job.info.clone());
                    self.store_unhurried(DbOp::UpdateJob { info, alloc: None });
                }
            }
            NodeMessage::JobEnded(end) => self.job_ended(node, end, now),
            NodeMessage::GpuUsage(samples) => self.gpu_samples(&samples, now),
            NodeMessage::StepUsage { step_id, usage } => {
                // Only for a job that runs or ran on this node.
                let ran_here =
                    self.state.jobs.get(&usage.job_id).is_some_and(|j| j.info.nodes.iter().any(|h| h == node));
                if ran_here {
                    self.store(DbOp::StepUsage { step_id, node: node.to_owned(), usage });
                }
            }
            NodeMessage::JobUsage(usage) => {
                // Only for a job this node runs or ran: a node cannot write another's record.
                let ran_here =
                    self.state.jobs.get(&usage.job_id).is_some_and(|j| j.info.nodes.first().is_some_and(|h| h == node));
                if ran_here {
                    self.store(DbOp::JobUsage(usage));
                }
            }
            NodeMessage::Drain { reason } => self.node_drains_itself(node, reason),
        }
    }

    fn job_ended(&mut self, node: &str, end: JobEnd, now: UnixTime) {
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
        if holds && let Some(hold) = self.take_requeue(job_id) {
            self.requeue_after_end(job_id, &end, hold);
        } else if holds {
            let preempted = self.state.preempt_cancel_on_end.remove(&job_id);
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
            tracing::info!(job_id, state = final_state.long_name(), exit = %exit_status, "job ended");
            self.schedule_needed = true;
        } else if self.state.jobs.contains_key(&job_id) {
            // A repeated end: store the record again, in case the first store failed.
            self.store_job(job_id, false);
        }
        // Acknowledge after the end (or an earlier identical one) is durable.
        self.store(DbOp::After(AfterCommit::AckJobEnd { node: node.to_owned(), job_id, run: end.run }));
    }

    fn tick(&mut self) {
        self.flush_unhurried();
        let now = now();
        let timeout = i64::from(self.state.config.node_timeout);
        let mut failed_nodes = Vec::new();
        for node in &mut self.state.nodes {
            let silent = node.responding && now - node.last_heartbeat > timeout;
            let never_back = !node.responding && now - self.started_at > timeout;
            if silent {
                tracing::warn!(node = node.config.name, "node stopped responding; marking it DOWN");
                node.responding = false;
                node.connection = None;
                self.links.remove(&node.config.name); // closes the connection; the node must register again
                failed_nodes.push(node.config.name.clone());
            } else if never_back {
                failed_nodes.push(node.config.name.clone());
            }
        }
        // One walk over the jobs for all failed nodes (nodes that never came back are listed
        // every tick: one walk per node made a tick cost nodes x jobs).
        if !failed_nodes.is_empty() {
            let failed: std::collections::HashSet<&str> = failed_nodes.iter().map(String::as_str).collect();
            let jobs: Vec<JobId> = self
                .state
                .jobs
                .values()
                .filter(|j| j.alloc.as_ref().is_some_and(|a| a.nodes.iter().any(|n| failed.contains(n.node.as_str()))))
                .map(|j| j.info.job_id)
                .collect();
            for job_id in jobs {
                self.fail_on_node(job_id, now);
            }
        }
        self.lost_jobs();
        self.state.purge(now);
        // One walk for what the clock brings to pending jobs: deadlines to check, and begin times
        // that arrived since the last periodic pass (they need a pass even without other events).
        let since = self.periodic_pass_at;
        let (mut deadlines, mut begins) = (false, false);
        for job in self.state.jobs.values().filter(|j| j.info.state() == JobState::Pending) {
            deadlines |= job.spec.deadline.is_some();
            begins |= job.spec.begin_time.is_some_and(|t| t <= now && t > since - 1);
            if deadlines && begins {
                break;
            }
        }
        if deadlines {
            self.expire_deadlines(now);
        }
        self.charge_usage(now, false);
        self.advance_gpu_seconds(now);
        if now - self.usage_purged_at >= crate::store::accounting::HOUR {
            self.usage_purged_at = now;
            let a = &self.state.config.accounting;
            self.store(DbOp::PurgeUsage { now, hours_days: a.retention_hours_days, jobs_days: a.retention_jobs_days });
        }
        // Preemption warnings whose lead time is over are due whether or not a pass runs.
        self.preempt();
        // Arrived begin times need a pass; so, now and then, does everything else that moves
        // with the clock (priority age, fair-share decay).
        if begins || now - since >= PERIODIC_PASS {
            self.periodic_pass_at = now;
            self.schedule_needed = true;
        }
    }
}

impl Core {
    /// Decays usage to `now`, charges the running jobs their billing, and saves it now and then.
    /// Sends the preemptions the last pass decided: the job's `--signal` warning and SIGTERM
    /// after its lead time, else SIGTERM now; SIGKILL after the victim QOS's `grace_time` (else
    /// `kill_wait`); the job is requeued with the same id (restart count + 1)
    /// or, with `preempt_mode = "cancel"` or `--no-requeue`, ends `PREEMPTED`.
    fn preempt(&mut self) {
        let requests = std::mem::take(&mut self.state.preempt_requests);
        for crate::model::state::Preemption { victim, for_job } in requests {
            let Some(job) = self.state.jobs.get(&victim) else { continue };
            let qos = self.state.config.qos.iter().find(|q| q.name == job.info.qos);
            let grace = qos.and_then(|q| q.grace_time).unwrap_or(self.state.config.kill_wait);
            let requeue = qos.is_none_or(|q| q.preempt_requeue) && job.info.requeue;
            let batch_host = job.info.nodes.first().cloned();
            let run = job.info.restarts;
            let warning = job.spec.signal.as_deref().and_then(crate::policy::preempt::warning);
            if requeue {
                self.mark_requeue(victim, false);
            } else {
                self.state.preempt_cancel_on_end.insert(victim);
            }
            let link = batch_host.and_then(|h| self.links.get(&h).cloned());
            match (warning, link) {
                (Some((signal, batch_only, lead)), Some(link)) => {
                    let _ = link.tx.send(CtldMessage::Signal { job_id: victim, signal, batch_only });
                    self.state.delayed_cancels.push((now() + i64::from(lead), victim, grace));
                }
                (None, Some(link)) => {
                    let _ = link.tx.send(CtldMessage::Cancel { job_id: victim, run, kill_wait: grace });
                }
                (_, None) => {}
            }
            let how = if requeue { "requeue" } else { "cancel" };
            self.audit(0, "preempt", Some(victim), format!("reclaimed for job {for_job} ({how}, grace {grace}s)"));
        }
        // Warned victims whose lead time is over.
        let now = now();
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.state.delayed_cancels).into_iter().partition(|(at, _, _)| *at <= now);
        self.state.delayed_cancels = later;
        for (_, job_id, grace) in due {
            let running = self
                .state
                .jobs
                .get(&job_id)
                .filter(|j| j.alloc.is_some())
                .and_then(|j| j.info.nodes.first().cloned().map(|h| (h, j.info.restarts)));
            if let Some((link, run)) =
                running.and_then(|(h, run)| self.links.get(&h).cloned().map(|l| (l, run)))
            {
                let _ = link.tx.send(CtldMessage::Cancel { job_id, run, kill_wait: grace });
            }
        }
    }

    /// `save` forces a save (a job just ended: its last seconds are charged and stored with its
    /// end, so a restart never forgets a finished job's usage).
    fn charge_usage(&mut self, now: UnixTime, save: bool) {
        let config = self.state.config.clone();
        let charges: Vec<(String, String, f64)> = self
            .state
            .jobs
            .values()
            .filter(|j| j.alloc.is_some() && j.info.state() == JobState::Running)
            .map(|j| {
                let weights = config
                    .partitions
                    .iter()
                    .find(|p| p.name == j.info.partition)
                    .map(|p| p.tres_billing_weights.clone());
                let billing = crate::model::tres::billing(&weights.unwrap_or_default(), &crate::model::tres::of_job(&self.state, j));
                (j.info.account.clone(), j.info.user.clone(), billing)
            })
            .collect();
        let usage = &mut self.state.usage;
        usage.advance(
            now,
            config.priority.decay_half_life,
            charges.iter().map(|(a, u, b)| (a.as_str(), u.as_str(), *b)),
        );
        if save || usage.save_due(now) {
            usage.saved = now;
            let rows = usage.by_assoc.iter().map(|(k, v)| (k.clone(), *v)).collect();
            let updated = usage.updated;
            self.store(DbOp::SaveUsage { updated, rows });
        }
    }
}

impl Core {
    /// Adds a node's GPU samples to the running jobs' usage and applies the idle-GPU policy of
    /// their partitions: warn, then cancel (reason `IdleGPU`) or requeue.
    fn gpu_samples(&mut self, samples: &[drover_shared::proto::usage::JobGpuSample], now: UnixTime) {
        use crate::store::accounting::IdleStep;
        use drover_shared::config::usage::IdleAction;
        let mut steps = Vec::new();
        {
            let mut runs = self.runs.borrow_mut();
            for sample in samples.iter().filter(|s| s.gpus > 0) {
                let Some(run) = runs.get_mut(&sample.job_id) else { continue };
                run.add_sample(sample.utilization_percent_sum, now);
                let Some(job) = self.state.jobs.get(&sample.job_id).filter(|j| j.info.state() == JobState::Running)
                else {
                    continue;
                };
                let Some(policy) =
                    self.state.config.accounting.idle_gpu.iter().find(|p| p.partition == job.info.partition)
                else {
                    continue;
                };
                let step = run.idle_check(policy, sample.utilization_percent_sum / sample.gpus, now);
                if step != IdleStep::Nothing {
                    steps.push((sample.job_id, step, policy.threshold_percent));
                }
            }
        }
        let kill_wait = self.state.config.kill_wait;
        for (job_id, step, threshold) in steps {
            let (action, idle) = match step {
                IdleStep::Nothing => continue,
                IdleStep::Warn(idle) => (IdleAction::Warn, idle),
                IdleStep::Act(action, idle) => (action, idle),
            };
            let detail = format!("GPUs below {threshold}% utilization for {idle}s");
            tracing::warn!(job_id, ?action, detail, "idle GPUs");
            let Some(job) = self.state.jobs.get_mut(&job_id) else { continue };
            let link = job.info.nodes.first().and_then(|h| self.links.get(h).cloned());
            let run = job.info.restarts;
            match action {
                IdleAction::Warn => self.audit(0, "idle-gpu-warning", Some(job_id), detail),
                IdleAction::Requeue if job.info.requeue => {
                    job.info.reason = "IdleGPU".into();
                    self.mark_requeue(job_id, false);
                    if let Some(link) = &link {
                        let _ = link.tx.send(CtldMessage::Cancel { job_id, run, kill_wait });
                    }
                    self.audit(0, "idle-gpu-requeue", Some(job_id), detail);
                }
                IdleAction::Requeue | IdleAction::Cancel => {
                    job.cancel_requested_by = Some(0);
                    job.info.cancelled_by = Some(0);
                    if let Some(link) = &link {
                        let _ = link.tx.send(CtldMessage::Cancel { job_id, run, kill_wait });
                    }
                    self.state.end_job(job_id, JobState::Cancelled, "IdleGPU", now);
                    self.store_job(job_id, false);
                    self.audit(0, "idle-gpu-cancel", Some(job_id), detail);
                    self.schedule_needed = true;
                }
            }
        }
    }

    /// Serves `/metrics` from this core's registry.
    pub(crate) fn with_metrics(mut self, registry: Arc<crate::core::metrics::Registry>) -> Core {
        self.metrics = registry;
        self
    }

    /// Adds the GPU-seconds of running jobs since the last call to their accounts' counters.
    fn advance_gpu_seconds(&mut self, now: UnixTime) {
        let dt = u64::try_from(now - self.gpu_seconds_at).unwrap_or(0);
        self.gpu_seconds_at = now;
        for job in self.state.jobs.values().filter(|j| j.alloc.is_some() && j.info.state() == JobState::Running) {
            *self.gpu_seconds.entry(job.info.account.clone()).or_default() += dt * u64::from(job.info.gpus_allocated);
        }
    }

    fn metrics_snapshot(&self) -> crate::core::metrics::Snapshot {
        let mut snap = crate::core::metrics::Snapshot {
            start_time: self.started_at,
            gpu_seconds: self.gpu_seconds.clone(),
            ..Default::default()
        };
        let borrowed = crate::policy::quota::Quotas::new(&self.state).borrowed;
        for job in self.state.jobs.values().filter(|j| j.committed) {
            let state = job.info.state();
            *snap.jobs.entry((state.long_name().to_owned(), job.info.partition.clone())).or_default() += 1;
            if state == JobState::Pending {
                snap.backlog += 1;
                *snap.pending_reasons.entry((job.info.reason.clone(), job.info.partition.clone())).or_default() += 1;
                *snap.pending_by_account.entry(job.info.account.clone()).or_default() += 1;
            }
            if job.alloc.is_some() && state == JobState::Running {
                let key = (job.info.account.clone(), job.info.partition.clone());
                let gpus = u64::from(job.info.gpus_allocated);
                *snap.gpus_allocated.entry(key.clone()).or_default() += gpus;
                if borrowed.contains(&job.info.job_id) {
                    *snap.gpus_borrowed.entry(key).or_default() += gpus;
                }
            }
        }
        for node in &self.state.nodes {
            snap.nodes.push((
                node.config.name.clone(),
                node.state().long_name().to_owned(),
                node.drain_reason.is_some(),
            ));
            snap.gpus_total += node.gpus.len() as u64;
            snap.cpus_total += u64::from(node.cpus);
            snap.cpus_allocated += u64::from(node.cpus_alloc);
        }
        snap
    }

    /// Takes the usage snapshot of jobs that just got (or, after a restart, hold) an allocation;
    /// whether each borrows comes from the quota split with them running.
    fn snapshot_runs(&mut self, job_ids: &[JobId]) {
        if job_ids.is_empty() {
            return;
        }
        let borrowed = crate::policy::quota::Quotas::new(&self.state).borrowed;
        let mut runs = self.runs.borrow_mut();
        for job_id in job_ids {
            let Some(job) = self.state.jobs.get(job_id) else { continue };
            if let Some(snap) = crate::store::accounting::snapshot(&self.state, job, borrowed.contains(job_id)) {
                runs.insert(*job_id, snap);
            }
        }
    }

    /// Queues the usage record of a run that ended (once: the snapshot is taken out).
    fn record_run(&self, job_id: JobId, state_name: &str, end: UnixTime) {
        let Some(snap) = self.runs.borrow_mut().remove(&job_id) else { return };
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        let record = crate::store::accounting::record(job, &snap, state_name, end);
        self.store(DbOp::RecordUsage(Box::new(record)));
    }
}

/// Rebuilds the in-memory jobs from the database after a restart.
pub(crate) fn restore(state: &mut State, stored: Vec<crate::store::db::StoredJob>) {
    let now = now();
    for crate::store::db::StoredJob { info, spec, alloc } in stored {
        let candidates: Vec<String> = if info.state() == JobState::Pending {
            info.partition.split(',').map(str::to_owned).collect()
        } else {
            vec![info.partition.clone()]
        };
        let running = info.state() == JobState::Running;
        let job_id = info.job_id;
        let job = Job {
            info: info.into(),
            spec: state.specs.resident(&spec),
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

/// The most of a request's text an audit record keeps.
const MAX_AUDIT_DETAIL: usize = 1024;

/// `text` cut to [`MAX_AUDIT_DETAIL`] bytes (at a character boundary), marked `…` when cut.
fn bounded(mut text: String) -> String {
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
