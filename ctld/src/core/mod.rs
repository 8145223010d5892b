//! The core: one task that owns [`State`] and consumes one closed enum of [`Event`]s — client
//! requests, node messages, commit reports and timer ticks. Every state change goes through here,
//! so there are no locks on the cluster state; durable changes are queued to the database writer,
//! and anything that must not happen before they are on disk (answering `sbatch`, launching a job,
//! acknowledging a job's end to its node) waits for the writer's [`CommitReport`].
//!
//! The event loop and the dispatch of events are here; the rest of the core is split along its
//! seams, each file an `impl Core` block: `jobs.rs` (client requests on jobs, job ends),
//! `nodes.rs` (node links, registration, node messages), `scheduling.rs` (passes, launches,
//! preemptions), `usage.rs` (fair-share and GPU usage, run records), `commits.rs` (what goes to
//! the writer and what its reports release), `publishing.rs` (job snapshots, metrics),
//! `step.rs` (job steps), `stat.rs` (`sstat`: questions to the job's nodes, gathered in
//! `stat_gather.rs`), `node_admin.rs` (drain/down/resume), `reconfigure.rs` and
//! `requeue.rs`. The core may use policy, store and model, never serve. `tests.rs` drives a core
//! in process (a captured writer channel, a fake node link) to check its commit invariants.

use crate::model::identity::Caller;
use crate::model::state::{Job, State};
use crate::policy::validate::{self, UnknownNodes};
use crate::store::db::{CommitReport, DbOp};
use drover_shared::job::{JobId, JobState};
use drover_shared::proto::client::{ErrorCode, Request, Response};
use drover_shared::proto::node::{NodeMessage, NodeRegistration};
use drover_shared::{UnixTime, now};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

mod accounts;
mod commits;
mod jobs;
mod nodes;
mod publishing;
mod reboot;
mod scheduling;
mod stat;
mod stat_gather;
mod step;
mod usage;
mod waiting;

pub(crate) mod node_admin;
pub(crate) mod node_link;
mod pass_cycles;

pub(crate) mod metrics;
pub(crate) mod reconfigure;
mod requeue;
pub(crate) mod shared_config;
#[doc(hidden)]
pub mod simbench;
pub(crate) mod simulate;

#[cfg(test)]
mod tests;

use node_link::NodeLink;

/// Everything the core reacts to.
#[derive(Debug)]
pub(crate) enum Event {
    /// A client's request that the core answers, as it came off the wire, with who sent it (the
    /// serve layer answers job queries, accounting, audit, usage, config and pings itself and
    /// never sends those here). The reply goes to the client's connection task.
    Client {
        caller: Caller,
        request: Request,
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
    /// A remote client's token was refused (audited as a refused `connect`).
    RemoteRefused {
        uid: u32,
        detail: String,
    },
}

/// Longest wait between an event and the scheduling pass it asks for.
/// Seconds between the passes ticks ask for when nothing else did (Slurm's `sched_interval`
/// plays this part): events (submissions, ends, node changes, updates) and arriving begin times
/// bring a pass at once, so a quiet deep queue (100,000 held jobs) is not walked every second.
const PERIODIC_PASS: UnixTime = 10;

/// The longest pause after a pass before the next (see `Core::run`): twice the pass's cost up to
/// this, so a pass of more than 2 s (a million pending jobs) still leaves the core two thirds of
/// its time for requests, and a job waits at most this long after the pass for the next.
const MAX_PASS_GAP: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a shutting-down ctld waits for the commits its clients' answers wait for.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Seconds a launched job may be missing from its node's reports before it counts as lost.
const LAUNCH_GRACE: i64 = 15;

/// The core's state and its outlets.
pub(crate) struct Core {
    state: State,
    db: std::sync::mpsc::Sender<crate::store::db::Queued>,
    /// The live connection of each registered node, by node name: the core's way to reach
    /// noded. A node has one exactly when its `connection` in the state is this link's id.
    links: HashMap<String, NodeLink>,
    waiting_submits: HashMap<JobId, oneshot::Sender<Response>>,
    /// Submissions' keys (`Request::SubmitOnce`) by uid, with the job each made and when: one
    /// sent again after a broken connection is answered with its job (see `jobs.rs`).
    submit_keys: HashMap<(u32, Vec<u8>), (JobId, UnixTime)>,
    schedule_needed: bool,
    /// The scheduling passes' statistics since ctld started (`sdiag`).
    cycles: pass_cycles::PassCycles,
    /// `sstat` questions waiting for their nodes' answers.
    stat_queries: stat_gather::StatQueries,
    ctld_socket: String,
    started_at: UnixTime,
    /// Running jobs being killed to be requeued: when their run's end comes, they pend again
    /// (held when the value is true: `requeuehold`; see `requeue.rs`).
    /// `scontrol requeue` requests waiting for their intents' commit (see `requeue.rs`).
    requeue_waiting: HashMap<u64, waiting::Waiting>,
    /// The last token given to a request waiting for its commit (`commit_token`).
    last_token: u64,
    /// Answers waiting for the commit of what their request changed (`answer_after_commit`).
    answers_waiting: HashMap<u64, (oneshot::Sender<Response>, Response)>,
    /// Running jobs whose time limit `scontrol update` changed: sent again to the batch host when
    /// it registers, in case the change was sent while it was not connected.
    limits_changed: std::collections::HashSet<JobId>,
    /// Job steps: rows being committed, CPUs held by running steps (see `step.rs`).
    steps: waiting::Steps,
    /// Usage accounting: what each running job holds, taken at its start (see `accounting`).
    runs: HashMap<JobId, crate::store::accounting::RunSnapshot>,
    /// Writes that need no commit of their own (a job's start time as its node reports it):
    /// queued ahead of the next op that does, or at the next tick, whichever comes first.
    unhurried: Vec<DbOp>,
    /// What the current event stored and queued for the writer, sent as one item when it is
    /// handled (see [`Core::send_outbox`]).
    outbox: Vec<crate::store::db::Queued>,
    /// When usage older than the retention periods was last deleted.
    usage_purged_at: UnixTime,
    /// When a tick last asked for a pass (see [`PERIODIC_PASS`]).
    periodic_pass_at: UnixTime,
    /// The names of remote clients' hosts, which the serve layer interns (see `HostNames`).
    hosts: Arc<crate::model::identity::HostNames>,
    /// Counters `/metrics` serves (scheduler pass times are recorded here).
    metrics: Arc<crate::core::metrics::Registry>,
    /// Account → GPU-seconds allocated since ctld started, and when it was last advanced.
    gpu_seconds: std::collections::BTreeMap<String, u64>,
    gpu_seconds_at: UnixTime,
    /// The config the client and HTTP handlers read; swapped by `scontrol reconfigure`.
    shared_config: shared_config::SharedConfig,
    /// Publishes job snapshots for queries.
    publisher: crate::model::snapshot::Publisher,
    /// Answers to changes, sent once a snapshot that shows the change is published, so a client
    /// that queries after its `sbatch`/`scancel`/… returned sees its change.
    deferred: Vec<(oneshot::Sender<Response>, Response)>,
    /// Every account, user and QOS sacctmgr changed, as stored (put over the cluster file's
    /// at each reconfigure; see `accounts.rs`).
    acct_edits: Vec<drover_shared::sacctmgr::edit::Edit>,
    /// What each sacctmgr change waiting for its commit replaced, by answer token.
    acct_undo: HashMap<u64, waiting::Undo>,
}

impl Core {
    pub(crate) fn new(
        state: State,
        db: std::sync::mpsc::Sender<crate::store::db::Queued>,
        ctld_socket: String,
        publisher: crate::model::snapshot::Publisher,
    ) -> Core {
        let shared_config = shared_config::SharedConfig::new(state.config().clone());
        let mut core = Core {
            state,
            db,
            links: HashMap::new(),
            waiting_submits: HashMap::new(),
            submit_keys: HashMap::new(),
            schedule_needed: true,
            cycles: Default::default(),
            stat_queries: Default::default(),
            ctld_socket,
            started_at: now(),
            requeue_waiting: HashMap::new(),
            last_token: 0,
            answers_waiting: HashMap::new(),
            limits_changed: Default::default(),
            steps: Default::default(),
            runs: Default::default(),
            unhurried: Default::default(),
            outbox: Vec::new(),
            usage_purged_at: 0,
            periodic_pass_at: 0,
            hosts: Arc::default(),
            metrics: Arc::default(),
            gpu_seconds: Default::default(),
            gpu_seconds_at: now(),
            shared_config,
            publisher,
            deferred: Vec::new(),
            acct_edits: Vec::new(),
            acct_undo: HashMap::new(),
        };
        let running: Vec<JobId> =
            core.state.jobs.values().filter(|j| j.alloc.is_some()).map(|j| j.info.job_id).collect();
        core.snapshot_runs(&running);
        core
    }

    /// A new token naming a request that waits for its commit (`AfterCommit::Requeue`, `Answer`).
    fn commit_token(&mut self) -> u64 {
        self.last_token += 1;
        self.last_token
    }

    /// Runs until the event channel closes or `shutdown` resolves.
    pub(crate) async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>, shutdown: impl std::future::Future) {
        tokio::pin!(shutdown);
        // After a pass the next waits twice its cost (at most MAX_PASS_GAP), counted from its
        // end, so scheduling takes at most about a third of the core's time: on a small cluster a
        // pass follows every event at once; on a large, full one a stream of submissions shares
        // passes instead of waiting behind one pass per commit (Slurm's `sched_min_interval`).
        // (Counted from the pass's start, as it was, with a cap of 1 s: passes of a second or
        // more followed one another with no pause, and eight synchronous clients got eight
        // submissions in per pass.)
        let mut last_pass = tokio::time::Instant::now();
        let mut interval = std::time::Duration::ZERO;
        // What was stored before the loop (recovery at start).
        self.send_outbox();
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
                _ = &mut shutdown => {
                    self.finish_in_flight(&mut events).await;
                    break;
                }
            }
            if self.schedule_needed && last_pass.elapsed() >= interval {
                self.schedule_needed = false;
                let began = tokio::time::Instant::now();
                self.schedule();
                let cost = began.elapsed();
                last_pass = tokio::time::Instant::now();
                interval = (cost * 2).min(MAX_PASS_GAP);
                self.metrics.scheduler_pass(cost);
                self.cycles.record(now(), cost, &self.state.last_pass);
                self.metrics.scheduler_backfill(self.state.last_pass.backfill);
                self.publish();
            }
        }
        self.flush_unhurried();
        self.send_outbox();
    }

    /// At shutdown: what clients asked before it is answered. Requests already queued are
    /// served, what they stored is committed, and the answers waiting for those commits are
    /// sent, for at most [`SHUTDOWN_GRACE`]; no scheduling pass runs. A request that arrives
    /// now is not served (its client is told the controller is unavailable, and tries again).
    async fn finish_in_flight(&mut self, events: &mut mpsc::UnboundedReceiver<Event>) {
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        while let Ok(event) = events.try_recv() {
            self.handle(event);
        }
        self.flush_unhurried();
        self.send_outbox();
        while self.answers_pending() {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(Event::Committed(report))) => self.committed(report),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        if self.answers_pending() {
            tracing::warn!("shutting down with answers still waiting for their commit");
        }
        self.publish();
    }

    /// Whether a client's answer waits for a commit.
    fn answers_pending(&self) -> bool {
        !self.answers_waiting.is_empty()
            || !self.waiting_submits.is_empty()
            || !self.requeue_waiting.is_empty()
            || self.steps.commits_waiting()
    }

    /// Handles one event, then hands the writer what it stored (one item, see
    /// [`Core::send_outbox`]).
    fn handle(&mut self, event: Event) {
        self.handle_event(event);
        self.send_outbox();
    }

    fn handle_event(&mut self, event: Event) {
        // The job table's indexes as of this event (they cost what changed since the last).
        self.state.jobs.refile(now());
        match event {
            Event::Client { caller, request, reply } => self.client(caller, request, reply),
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
            Event::RemoteRefused { uid, detail } => {
                let (origin, outcome) = ("tcp".to_owned(), "Access/permission denied".to_owned());
                self.store(DbOp::Audit {
                    time: now(),
                    uid,
                    origin,
                    action: "connect".into(),
                    job_id: None,
                    outcome,
                    detail,
                });
            }
        }
    }

    /// Serves one client request: the one place a request meets the core. Changes are answered
    /// after their commit (`answer_after_commit`; a submission and `scontrol requeue` wait in
    /// their own tables); reads and step messages are answered at once.
    fn client(&mut self, caller: Caller, request: Request, reply: oneshot::Sender<Response>) {
        let response = match request {
            Request::Submit(spec) => return self.submit(caller, *spec, None, reply),
            Request::SubmitOnce { key, spec } => return self.submit(caller, *spec, Some(key), reply),
            Request::Requeue { job_ids } => return self.requeue_jobs(caller, &job_ids, false, reply),
            Request::RequeueHold { job_ids } => return self.requeue_jobs(caller, &job_ids, true, reply),
            Request::CreateStep { job_id, spec } => return self.create_step(caller, job_id, spec, reply),
            Request::StatJob { job_id } => return self.stat_job(caller, job_id, reply),
            Request::Cancel(request) => {
                let response = self.cancel(caller, &request);
                return self.answer_after_commit(reply, response);
            }
            Request::CancelTasks { request, tasks } => {
                let response = self.cancel_tasks(caller, &request, &tasks);
                return self.answer_after_commit(reply, response);
            }
            Request::UpdateJob { job_ids, update } => {
                let response = self.update_jobs(caller, &job_ids, &update);
                return self.answer_after_commit(reply, response);
            }
            Request::Hold { job_ids, hold } => {
                let response = self.hold(caller, &job_ids, hold);
                return self.answer_after_commit(reply, response);
            }
            Request::SplitArrayTask { array_job_id, task } => {
                let response = self.split_array_task(caller, array_job_id, task);
                return self.answer_after_commit(reply, response);
            }
            Request::SacctmgrChange { change, commit } => {
                self.sacctmgr_change(caller, &change, commit, reply);
                return;
            }
            Request::QueryNodes => {
                let nodes =
                    self.state.nodes().iter().map(|n| n.info(self.state.partitions_of(&n.config.name))).collect();
                Response::Nodes { now: now(), nodes }
            }
            Request::QueryPartitions => Response::Partitions { partitions: self.partitions() },
            Request::QueryShares => crate::policy::report::shares(&self.state, now()),
            Request::QueryPriority => crate::policy::report::priorities(&self.state, now()),
            Request::Explain { job_id } => crate::policy::explain::explain(&self.state, job_id, now()),
            Request::StepDone { job_id, step_id, state, exit_status } => {
                self.step_done(caller, job_id, step_id, state, exit_status)
            }
            Request::CancelStep { job_id, step_id, signal } => self.cancel_step(caller, job_id, step_id, signal),
            Request::UpdateNode(update) => self.update_node(caller, &update),
            Request::RebootNodes(request) => {
                let response = self.reboot_nodes(caller, &request);
                return self.answer_after_commit(reply, response);
            }
            Request::CancelReboot { nodes } => {
                let response = self.cancel_reboot(caller, &nodes);
                return self.answer_after_commit(reply, response);
            }
            Request::QueryNodeReasons => self.node_reasons(),
            Request::Reconfigure => self.reconfigure(caller),
            Request::TestOnly(spec) => {
                let now = now();
                match validate::validate(&self.state, caller, *spec, now) {
                    Err(refusal) => refusal.into(),
                    Ok(job) => crate::policy::will_run::estimate(&self.state, &job, self.state.next_job_id(), now),
                }
            }
            Request::Diag => Response::Diag(Box::new(self.diag())),
            Request::QueryNodeFeatures => {
                let nodes =
                    self.state.nodes().iter().map(|n| (n.config.name.clone(), n.config.features.clone())).collect();
                Response::NodeFeatures { nodes }
            }
            // Served off the core by the serve layer (snapshots, the database's readers, the
            // config); one that arrives here anyway is a wiring mistake, answered, not a panic.
            Request::QueryJobs(_)
            | Request::QueryJobFields { .. }
            | Request::QueryJobLines { .. }
            | Request::QueryAccounting(_)
            | Request::QueryUsage(_)
            | Request::QueryJobUsage { .. }
            | Request::QueryStepUsage { .. }
            | Request::QueryAudit(_)
            | Request::QueryNodeHistory { .. }
            | Request::QueryTemplates
            | Request::ShowConfig
            | Request::Sacctmgr { .. }
            | Request::QueryReplicas
            | Request::Simulate(_)
            | Request::Ping => {
                let name = crate::core::metrics::request_name(&request);
                tracing::error!(request = name, "a request served off the core reached the core");
                Response::Error { code: ErrorCode::Internal, detail: format!("{name} is not served by the core") }
            }
        };
        let _ = reply.send(response);
    }

    fn tick(&mut self) {
        self.flush_unhurried();
        self.expire_stats();
        let now = now();
        let timeout = i64::from(self.state.config().node_timeout);
        let mut failed_nodes = Vec::new();
        for node in self.state.nodes_mut().iter_mut() {
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
            let jobs: Vec<(JobId, u32, String)> = self
                .state
                .jobs
                .values()
                .filter_map(|j| {
                    let alloc = j.alloc.as_ref()?;
                    let node = alloc.nodes.iter().find(|n| failed.contains(n.node.as_str()))?;
                    Some((j.info.job_id, j.info.uid, node.node.clone()))
                })
                .collect();
            for (job_id, uid, node) in jobs {
                self.fail_on_node(job_id, now);
                self.job_failed_on_node(&node, job_id, uid, "NODE_FAIL (the node stopped responding)".into(), false);
            }
        }
        self.lost_jobs();
        self.advance_reboots(now);
        self.state.purge(now);
        // What the clock brings to pending jobs: deadlines to check, and begin times that arrived
        // (they need a pass even without other events). Both from the job table's indexes.
        let since = self.periodic_pass_at;
        self.state.jobs.refile(now);
        let deadlines = self.state.jobs.with_deadline().next().is_some();
        let begins = self.state.jobs.take_arrived();
        if deadlines {
            self.expire_deadlines(now);
        }
        self.charge_usage(now, false);
        self.advance_gpu_seconds(now);
        if now - self.usage_purged_at >= crate::store::accounting::HOUR {
            self.usage_purged_at = now;
            let a = &self.state.config().accounting;
            self.store(DbOp::PurgeUsage { now, hours_days: a.retention_hours_days, jobs_days: a.retention_jobs_days });
        }
        // Preemption warnings whose lead time is over are due whether or not a pass runs.
        self.cancel_warned();
        // Arrived begin times need a pass; so, now and then, does everything else that moves
        // with the clock (priority age, fair-share decay).
        if begins || now - since >= PERIODIC_PASS {
            self.periodic_pass_at = now;
            self.schedule_needed = true;
        }
    }
}

/// Rebuilds the in-memory jobs from the database after a restart.
pub(crate) fn restore(state: &mut State, stored: Vec<crate::store::db::StoredJob>) {
    let now = now();
    for crate::store::db::StoredJob { info, spec, alloc } in stored {
        let candidates: Arc<[String]> = if info.state() == JobState::Pending {
            info.partition.split(',').map(str::to_owned).collect()
        } else {
            Arc::from([info.partition.clone()])
        };
        let candidates = state.partition_lists.share(&candidates);
        let running = info.state() == JobState::Running;
        let job_id = info.job_id;
        let node_filter = validate::node_filter(state, &spec, UnknownNodes::Skip).unwrap_or_default();
        let job = Job {
            info: info.into(),
            spec: state.specs.resident(&spec),
            candidates,
            node_filter,
            alloc: if running { alloc } else { None },
            committed: true,
            launched_at: running.then_some(now),
            cancel_requested_by: None,
            // Whether its script started was not stored: a running job is taken as started.
            started: running,
            reason_id: 0,
        };
        if let Some(alloc) = &job.alloc {
            let alloc = alloc.clone();
            state.hold(&alloc);
        }
        state.jobs.insert(job_id, job);
    }
}
