//! ctld's in-memory cluster state: every job that has not aged out, every configured node with
//! what is allocated on it, and the next job id. Only the core task touches it; the database is
//! its durable copy.

use drover_shared::UnixTime;
use drover_shared::config::{Config, NodeConfig};
use drover_shared::job::{JobId, JobInfo, JobSpec, JobState};
use drover_shared::node::{GpuDevice, NodeInfo, NodeState};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What a running job holds on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NodeAllocation {
    pub(crate) node: String,
    pub(crate) cpus: u32,
    pub(crate) mem_mb: u64,
    pub(crate) gpus: Vec<u32>,
    pub(crate) tasks: u32,
}

/// Everything a job holds, node-table order; stored with the job so a restarted ctld knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Allocation {
    pub(crate) nodes: Vec<NodeAllocation>,
}

/// One job in memory.
#[derive(Debug)]
pub(crate) struct Job {
    /// Copy-on-write, so query snapshots can share it (see `snapshot.rs`).
    pub(crate) info: crate::model::snapshot::Shared<JobInfo>,
    /// The resident half of the spec (`resident.rs`), usually shared with other jobs; change it
    /// through `State::specs`. The batch script, environment and other launch-only fields are in
    /// the job's database row.
    pub(crate) spec: Arc<JobSpec>,
    /// Partitions the job may run in, in the order to try them.
    /// Shared with the jobs that have the same list (`State::partition_lists`).
    pub(crate) candidates: Arc<[String]>,
    /// The nodes its `-w`/`-x`/`--constraint` allow, resolved at submit (`None`: every node);
    /// shared by an array's tasks.
    pub(crate) node_filter: Option<Arc<crate::model::node_filter::NodeFilter>>,
    /// Set while the job's resources are held on its nodes (from start until the node reports its end).
    pub(crate) alloc: Option<Allocation>,
    /// False until the submission is durable; uncommitted jobs are invisible and never scheduled.
    pub(crate) committed: bool,
    /// When the launch was sent, to tell a lost job from one still starting.
    pub(crate) launched_at: Option<UnixTime>,
    /// The uid that asked for the cancel, while the node is still killing the job.
    pub(crate) cancel_requested_by: Option<u32>,
    /// The node reported the batch script started (`JobStarted`) for this run; until then the
    /// job is starting (Slurm's `CONFIGURING`) and cannot be signalled. Kept in memory only.
    pub(crate) started: bool,
    /// The number [`Jobs::set_reason`] gave the reason it left in `info.reason` (0: unknown,
    /// as after any other change to the job): a reason set again is then known to be the same
    /// without reading the record. Give 0; the job table keeps it.
    pub(crate) reason_id: u32,
}

/// The most distinct pending reasons [`Jobs::set_reason`] numbers; others are compared as text.
const REASON_IDS_MAX: usize = 4096;

/// One configured node and its live state.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) config: NodeConfig,
    /// GPUs the node reported (NVML or config); the config's until it registers. Shared, so a
    /// pass's view of the node (`policy::backfill::NodeView`) copies no GPU records.
    pub(crate) gpus: Arc<[GpuDevice]>,
    pub(crate) cpus: u32,
    pub(crate) real_memory_mb: u64,
    /// The id of the node's live connection, if it has one (the link itself, the way to send
    /// to it, is the core's).
    pub(crate) connection: Option<u64>,
    pub(crate) registered_once: bool,
    pub(crate) responding: bool,
    pub(crate) last_heartbeat: UnixTime,
    pub(crate) cpus_alloc: u32,
    pub(crate) mem_alloc_mb: u64,
    pub(crate) gpus_alloc: Vec<u32>,
    pub(crate) address: String,
    pub(crate) boot_time: Option<UnixTime>,
    pub(crate) start_time: Option<UnixTime>,
    pub(crate) last_busy_time: Option<UnixTime>,
    pub(crate) version: String,
    /// Why the node is drained (`scontrol update State=DRAIN`, or its prolog, epilog or health
    /// check failed); no new work then, running jobs finish.
    pub(crate) drain_reason: Option<String>,
    /// Why an operator set the node `DOWN`; no work at all then.
    pub(crate) down_reason: Option<String>,
    /// Who set the reason (uid) and when.
    pub(crate) reason_set: Option<(u32, UnixTime)>,
    /// The incident the drain or down opened: its owner, ticket and evidence.
    pub(crate) incident: Option<crate::model::incident::Incident>,
    /// Jobs that failed here lately, for automatic drains.
    pub(crate) recent_failures: crate::model::incident::RecentFailures,
    /// The runs the node said it holds in its last registration or heartbeat, and when, until
    /// the next tick compares them with the jobs ctld runs there.
    pub(crate) held_report: Option<(UnixTime, Vec<drover_shared::proto::node::JobRun>)>,
    /// `scontrol reboot`, until the node registers again (`core/reboot.rs`).
    pub(crate) reboot: Option<Reboot>,
}

/// A node's pending `scontrol reboot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reboot {
    /// `ASAP`: the node was drained so that it empties.
    pub(crate) asap: bool,
    /// `nextstate=DOWN`: the node comes back `DOWN`.
    pub(crate) next_down: bool,
    /// The drain was the reboot's own (`ASAP` on a node not drained before): lifted when the
    /// node comes back or the reboot is cancelled.
    pub(crate) drained: bool,
    /// `reason=`, or Slurm's default.
    pub(crate) reason: String,
    /// When ctld told the node to run its reboot program.
    pub(crate) issued: Option<UnixTime>,
}

impl Node {
    pub(crate) fn new(config: &NodeConfig) -> Node {
        Node {
            config: config.clone(),
            gpus: config.gpus.clone().into(),
            cpus: config.cpus,
            real_memory_mb: config.real_memory_mb,
            connection: None,
            registered_once: false,
            responding: false,
            last_heartbeat: 0,
            cpus_alloc: 0,
            mem_alloc_mb: 0,
            gpus_alloc: Vec::new(),
            address: String::new(),
            boot_time: None,
            start_time: None,
            last_busy_time: None,
            version: String::new(),
            drain_reason: None,
            down_reason: None,
            reason_set: None,
            incident: None,
            recent_failures: Default::default(),
            held_report: None,
            reboot: None,
        }
    }

    /// Whether the scheduler may place new work here.
    pub(crate) fn usable(&self) -> bool {
        self.responding
            && self.connection.is_some()
            && self.drain_reason.is_none()
            && self.down_reason.is_none()
            && self.reboot.as_ref().is_none_or(|r| r.issued.is_none())
    }

    /// The node's state as Slurm names it (a node told to reboot is `DOWN` until it is back).
    pub(crate) fn state(&self) -> NodeState {
        if self.down_reason.is_some() || self.reboot.as_ref().is_some_and(|r| r.issued.is_some()) {
            NodeState::Down
        } else if !self.registered_once {
            NodeState::Unknown
        } else if !self.responding {
            NodeState::Down
        } else if self.cpus_alloc == 0 && self.gpus_alloc.is_empty() {
            NodeState::Idle
        } else if self.cpus_alloc >= self.cpus {
            NodeState::Allocated
        } else {
            NodeState::Mixed
        }
    }

    pub(crate) fn info(&self, partitions: Vec<String>) -> NodeInfo {
        NodeInfo {
            name: self.config.name.clone(),
            state: self.state(),
            not_responding: !self.registered_once || !self.responding,
            drain: self.drain_reason.is_some(),
            reason: self
                .down_reason
                .clone()
                .or_else(|| self.drain_reason.clone())
                .or_else(|| self.reboot.as_ref().map(|r| r.reason.clone())),
            cpus: self.cpus,
            cpus_alloc: self.cpus_alloc,
            real_memory_mb: self.real_memory_mb,
            mem_alloc_mb: self.mem_alloc_mb,
            gpus: self.gpus.to_vec(),
            gpus_alloc: self.gpus_alloc.clone(),
            partitions,
            address: self.address.clone(),
            boot_time: self.boot_time,
            noded_start_time: self.start_time,
            last_busy_time: self.last_busy_time,
            version: self.version.clone(),
            reboot: self.reboot.as_ref().map(|r| match r.issued {
                Some(_) => drover_shared::node::RebootState::Issued,
                None => drover_shared::node::RebootState::Requested,
            }),
        }
    }

    /// Takes an allocation's share of this node.
    pub(crate) fn take(&mut self, share: &NodeAllocation) {
        self.cpus_alloc += share.cpus;
        self.mem_alloc_mb += share.mem_mb;
        self.gpus_alloc.extend(&share.gpus);
        self.gpus_alloc.sort_unstable();
    }

    /// Gives an allocation's share back.
    pub(crate) fn release(&mut self, share: &NodeAllocation, now: UnixTime) {
        self.cpus_alloc = self.cpus_alloc.saturating_sub(share.cpus);
        self.mem_alloc_mb = self.mem_alloc_mb.saturating_sub(share.mem_mb);
        self.gpus_alloc.retain(|g| !share.gpus.contains(g));
        self.last_busy_time = Some(now);
    }
}

/// The jobs by id, and which of them changed since the publisher last asked
/// ([`Jobs::take_changed`]): the job snapshots rebuild only the chunks that hold those.
///
/// Reading goes through `Deref` to the map. Every way to change a job goes through a method here
/// (there is no `DerefMut`), so none escapes the record: an insert or a removal files the id as
/// changed; `get_mut` files it as possibly changed, and the publisher keeps it only if its
/// record's copy-on-write flag says it was written ([`crate::model::snapshot::Shared`]) — a pass
/// that looks at every pending job through `get_mut` and changes a few rebuilds only theirs. A
/// change that is not to the record (a job becoming committed, and so visible) is filed with
/// [`Jobs::touch`].
///
/// The same choke point keeps the job table's indexes ([`Filed`]): every job inserted or handed
/// out mutably is filed again at the next [`Jobs::refile`] (every event the core handles and
/// every pass start with one), so a pass walks the pending jobs that may start, not the queue:
/// held jobs (and those at priority 0) are in no index a pass reads, jobs waiting for their
/// begin time are filed by that time and join the pass when it comes, and jobs whose dependency
/// waits on other jobs' states are set aside ([`Jobs::block`]) until one of those jobs changes.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    map: BTreeMap<JobId, Job>,
    /// Inserted, removed or touched since the last publish.
    changed: std::collections::BTreeSet<JobId>,
    /// Handed out mutably since the last publish: changed if their record's flag says so.
    lent: std::collections::BTreeSet<JobId>,
    /// Inserted, removed or handed out mutably since the last [`Jobs::refile`].
    unfiled: std::collections::BTreeSet<JobId>,
    /// Jobs that held an allocation, or hold one now, among those refiled since the last
    /// [`Jobs::take_untallied`] (repeats allowed; past [`UNTALLIED_MAX`] only `untallied_all` is
    /// kept): the only jobs whose changes the tallies can see.
    untallied: Vec<JobId>,
    /// Too many changes were filed for the tallies: they start over.
    untallied_all: bool,
    filed: Filed,
    /// Array job id → the ids of its records (base record and split-off tasks), kept at insert
    /// and removal (ctld sets a record's array id before inserting it; a change made through
    /// `get_mut` counts from the next [`Jobs::refile`]), so a dependency on an array finds its
    /// records without a walk over the jobs.
    arrays: HashMap<JobId, std::collections::BTreeSet<JobId>>,
    /// Record → its array's id, for the records in `arrays`.
    array_of: HashMap<JobId, JobId>,
    /// Pending reason → its number for [`Jobs::set_reason`] (from 1).
    reason_ids: HashMap<String, u32, foldhash::fast::RandomState>,
}

/// A job whose state blocked jobs' dependencies wait on: the state it had when they were set
/// aside (`None`: not in memory, or not committed), and the jobs waiting.
#[derive(Debug)]
struct Watch {
    state: Option<JobState>,
    /// An array's id: any change to any of its records wakes the waiting jobs.
    array: bool,
    waiting: std::collections::HashSet<JobId>,
}

/// The job table's indexes, as of the last [`Jobs::refile`].
#[derive(Debug, Default)]
struct Filed {
    /// Committed pending jobs that are not held (priority above 0) and whose begin time, if
    /// any, has come: what a scheduling pass considers.
    ready: std::collections::BTreeSet<JobId>,
    /// The same jobs while their begin time is still ahead, by begin time.
    later: std::collections::BTreeSet<(UnixTime, JobId)>,
    /// Where each job in `later` is filed.
    later_at: HashMap<JobId, UnixTime>,
    /// Jobs filed in `later` since the pass last took them ([`Jobs::take_deferred`]).
    deferred: Vec<JobId>,
    /// Whether a job moved from `later` to `ready` since [`Jobs::take_arrived`] last asked.
    arrived: bool,
    /// Committed pending jobs with a dependency, held or not.
    dependent: std::collections::BTreeSet<JobId>,
    /// Of those, the ones not set aside by [`Jobs::block`]: what a dependency refresh works out.
    open: std::collections::BTreeSet<JobId>,
    /// Of those, the ones whose dependency has a `singleton` (a refresh then needs every job's
    /// owner and name).
    singletons: std::collections::BTreeSet<JobId>,
    /// Dependent jobs set aside until a job their dependency names changes, with the dependency
    /// text they were set aside for (a job whose dependency changed since is filed anew).
    blocked: HashMap<JobId, Option<String>>,
    /// Job or array id → the blocked jobs waiting on it.
    watches: HashMap<JobId, Watch>,
    /// Committed pending jobs with a deadline, held or not.
    deadlines: std::collections::BTreeSet<JobId>,
    /// Jobs holding an allocation.
    running: std::collections::BTreeSet<JobId>,
}

/// How a job was filed ([`Filed::file`]).
struct Filing {
    /// It holds an allocation.
    running: bool,
    /// It is a committed pending job with a dependency.
    dependent: bool,
}

impl Filed {
    /// Takes the job out of every index; whether it was filed as holding an allocation.
    fn remove(&mut self, job_id: JobId) -> bool {
        self.ready.remove(&job_id);
        if let Some(at) = self.later_at.remove(&job_id) {
            self.later.remove(&(at, job_id));
        }
        self.dependent.remove(&job_id);
        self.open.remove(&job_id);
        self.singletons.remove(&job_id);
        self.deadlines.remove(&job_id);
        self.running.remove(&job_id)
    }

    /// Files the job in the indexes it belongs to; the ids of those that join the ready ones
    /// go to `ready` instead, for the caller to add together ([`Jobs::refile`]).
    fn file(&mut self, job: &Job, now: UnixTime, ready: &mut Vec<JobId>) -> Filing {
        let job_id = job.info.job_id;
        let running = job.alloc.is_some();
        if running {
            self.running.insert(job_id);
        }
        let mut filing = Filing { running, dependent: false };
        if !job.committed || job.info.state() != JobState::Pending {
            return filing;
        }
        filing.dependent = job.spec.dependency.is_some();
        if let Some(dependency) = &job.spec.dependency {
            self.dependent.insert(job_id);
            if dependency.as_bytes().windows(9).any(|w| w.eq_ignore_ascii_case(b"singleton")) {
                self.singletons.insert(job_id);
            }
        }
        if job.spec.deadline.is_some() {
            self.deadlines.insert(job_id);
        }
        if let Some(blocked_for) = self.blocked.get(&job_id) {
            if *blocked_for == job.spec.dependency {
                return filing;
            }
            // Its dependency changed since it was set aside: worked out anew.
            self.blocked.remove(&job_id);
        }
        if job.spec.dependency.is_some() {
            self.open.insert(job_id);
        }
        if job.spec.hold || job.info.priority == 0 {
            return filing;
        }
        match job.spec.begin_time.filter(|t| *t > now) {
            Some(at) => {
                self.later.insert((at, job_id));
                self.later_at.insert(job_id, at);
                self.deferred.push(job_id);
            }
            None => ready.push(job_id),
        }
        filing
    }

    /// Adds `ids` (ascending, none of them filed) to the ready jobs: one by one for a few, and
    /// for many (a mass submission's first refile) by building one tree from both in order, which
    /// costs a walk of each instead of a search of the tree per job.
    fn add_ready(&mut self, ids: Vec<JobId>) {
        if ids.len() < BULK_READY_MIN {
            self.ready.extend(ids);
        } else {
            let mut added: std::collections::BTreeSet<JobId> = ids.into_iter().collect();
            self.ready.append(&mut added);
        }
    }
}

/// From how many jobs made ready at once [`Filed::add_ready`] builds the tree anew.
const BULK_READY_MIN: usize = 1024;

impl std::ops::Deref for Jobs {
    type Target = BTreeMap<JobId, Job>;
    fn deref(&self) -> &BTreeMap<JobId, Job> {
        &self.map
    }
}

impl<'a> IntoIterator for &'a Jobs {
    type Item = (&'a JobId, &'a Job);
    type IntoIter = std::collections::btree_map::Iter<'a, JobId, Job>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

impl Jobs {
    pub(crate) fn get_mut(&mut self, job_id: &JobId) -> Option<&mut Job> {
        let job = self.map.get_mut(job_id)?;
        // Whatever the holder changes, the reason is no longer known to be the numbered one.
        job.reason_id = 0;
        self.lent.insert(*job_id);
        self.unfiled.insert(*job_id);
        Some(job)
    }

    /// Sets a job's pending reason where it differs: one lookup, and, as a reason files nothing
    /// (filing reads state, holds, priority, begin time and dependency), the job is published
    /// as changed but not filed again. A pass over a million waiting jobs sets a million reasons;
    /// through [`Jobs::get_mut`] each would also be refiled at the next pass.
    ///
    /// Reasons are numbered (up to [`REASON_IDS_MAX`] distinct ones) and the job keeps the
    /// number of the one it was given here: setting the same one again compares two numbers in
    /// the job table instead of the record's text, which lies elsewhere in memory (in a pass over
    /// a million waiting jobs, those reads were a fifth of the pass).
    pub(crate) fn set_reason(&mut self, job_id: JobId, reason: &str) {
        self.set_reason_and_priority(job_id, reason, None);
    }

    /// [`Jobs::set_reason`], and [`Jobs::set_priority`] where `priority` is given, in one
    /// lookup.
    pub(crate) fn set_reason_and_priority(&mut self, job_id: JobId, reason: &str, priority: Option<u32>) {
        let id = match self.reason_ids.get(reason) {
            Some(id) => *id,
            None if self.reason_ids.len() < REASON_IDS_MAX => {
                let id = u32::try_from(self.reason_ids.len() + 1).unwrap_or(0);
                self.reason_ids.insert(reason.to_owned(), id);
                id
            }
            None => 0,
        };
        let Some(job) = self.map.get_mut(&job_id) else { return };
        if let Some(priority) = priority
            && priority != job.info.priority
        {
            let old = std::mem::replace(&mut job.info.priority, priority);
            self.lent.insert(job_id);
            if (old == 0) != (priority == 0) {
                self.unfiled.insert(job_id);
            }
        }
        if id != 0 && job.reason_id == id {
            return;
        }
        if job.info.reason != reason {
            // Into the buffer it has (a first reason replaces the one given at submit).
            let text = &mut job.info.reason;
            text.clear();
            text.push_str(reason);
            self.lent.insert(job_id);
        }
        job.reason_id = id;
    }

    /// Sets a job's priority where it differs: one lookup, and the job is filed again only when
    /// the priority becomes or stops being 0 (a held job's), the only thing about it filing
    /// reads. The first pass after many jobs arrive sets a priority for each; through
    /// [`Jobs::get_mut`] each would also be filed again, and counted among the jobs changed
    /// since the last refile that [`Jobs::allocated`] walks.
    pub(crate) fn set_priority(&mut self, job_id: JobId, priority: u32) {
        let Some(job) = self.map.get_mut(&job_id) else { return };
        let old = job.info.priority;
        if old == priority {
            return;
        }
        job.info.priority = priority;
        self.lent.insert(job_id);
        if (old == 0) != (priority == 0) {
            self.unfiled.insert(job_id);
        }
    }

    /// Whether the job waits to be filed again at the next [`Jobs::refile`].
    #[cfg(test)]
    pub(crate) fn unfiled_contains(&self, job_id: JobId) -> bool {
        self.unfiled.contains(&job_id)
    }

    pub(crate) fn insert(&mut self, job_id: JobId, mut job: Job) -> Option<Job> {
        job.info.take_changed(); // filed as changed here, whatever its record says
        job.reason_id = 0;
        self.changed.insert(job_id);
        self.unfiled.insert(job_id);
        let array = job.info.array_job_id;
        let old = self.map.insert(job_id, job);
        self.file_record(job_id, array);
        old
    }

    /// The jobs that may have started or ended since the last call (`None`: too many to list;
    /// every job), and forgets them.
    pub(crate) fn take_untallied(&mut self) -> Option<Vec<JobId>> {
        if std::mem::take(&mut self.untallied_all) {
            return None;
        }
        let mut ids = std::mem::take(&mut self.untallied);
        ids.sort_unstable();
        ids.dedup();
        Some(ids)
    }

    /// Files record `job_id` under array `array` (none: under no array).
    fn file_record(&mut self, job_id: JobId, array: Option<JobId>) {
        if self.array_of.get(&job_id).copied() == array {
            return;
        }
        if let Some(old) = self.array_of.remove(&job_id)
            && let Some(records) = self.arrays.get_mut(&old)
        {
            records.remove(&job_id);
            if records.is_empty() {
                self.arrays.remove(&old);
            }
        }
        if let Some(array) = array {
            self.arrays.entry(array).or_default().insert(job_id);
            self.array_of.insert(job_id, array);
        }
    }

    pub(crate) fn remove(&mut self, job_id: &JobId) -> Option<Job> {
        let removed = self.map.remove(job_id);
        if removed.is_some() {
            self.changed.insert(*job_id);
            self.unfiled.insert(*job_id);
            if let Some(array) = self.array_of.get(job_id).copied() {
                self.file_record(*job_id, None);
                // Its array's dependents learn of it through the array's id.
                self.unfiled.insert(array);
            }
        }
        removed
    }

    /// The ids of every record of array `array` in memory (committed or not), in id order.
    pub(crate) fn array_records(&self, array: JobId) -> impl Iterator<Item = JobId> + '_ {
        self.arrays.get(&array).into_iter().flatten().copied()
    }

    /// Sets a pending dependent job aside: out of the ready jobs and of the dependency refresh
    /// until one of `targets` (job ids; `true` for an array's id, any of whose records counts)
    /// changes (its state, for a job; any record, for an array), its own dependency changes, or
    /// it leaves the queue. The caller found that its dependency waits on those jobs' states
    /// only (or can never be satisfied by them as they stand).
    pub(crate) fn block(&mut self, job_id: JobId, targets: impl IntoIterator<Item = (JobId, bool)>) {
        let Some(job) = self.map.get(&job_id) else { return };
        if !self.filed.open.contains(&job_id) {
            return;
        }
        self.filed.blocked.insert(job_id, job.spec.dependency.clone());
        self.filed.open.remove(&job_id);
        self.filed.ready.remove(&job_id);
        if let Some(at) = self.filed.later_at.remove(&job_id) {
            self.filed.later.remove(&(at, job_id));
        }
        for (target, array) in targets {
            let state = self.map.get(&target).filter(|j| j.committed).map(|j| j.info.state());
            let watch =
                self.filed.watches.entry(target).or_insert_with(|| Watch { state, array, waiting: Default::default() });
            // Watched already at another state (it cannot be: a change would have woken its
            // waiters at the last refile): any change wakes them.
            watch.array |= array || watch.state != state;
            watch.waiting.insert(job_id);
        }
    }

    /// Wakes the jobs blocked on `target` if it changed in a way their dependency could see.
    fn wake(&mut self, target: JobId, any_change: bool, woken: &mut Vec<JobId>) {
        let Some(watch) = self.filed.watches.get(&target) else { return };
        let state = self.map.get(&target).filter(|j| j.committed).map(|j| j.info.state());
        if !(any_change || watch.array || watch.state != state) {
            return;
        }
        let Some(watch) = self.filed.watches.remove(&target) else { return };
        for job_id in watch.waiting {
            if self.filed.blocked.remove(&job_id).is_some() {
                woken.push(job_id);
            }
        }
    }

    /// Files the jobs changed since the last call again, and moves the jobs whose begin time
    /// came by `now` to the ready ones. Costs what changed, not the queue: a changed job wakes
    /// the jobs set aside waiting on it ([`Jobs::block`]).
    pub(crate) fn refile(&mut self, now: UnixTime) {
        let mut unfiled = std::mem::take(&mut self.unfiled);
        if !self.filed.watches.is_empty() {
            let mut woken = Vec::new();
            for &job_id in &unfiled {
                self.wake(job_id, false, &mut woken);
                if let Some(array) = self.map.get(&job_id).and_then(|j| j.info.array_job_id)
                    && array != job_id
                {
                    self.wake(array, true, &mut woken);
                }
            }
            unfiled.extend(woken);
        }
        let mut ready = Vec::new();
        for job_id in unfiled {
            // A job that held an allocation or holds one now is one the tallies may count.
            let held = self.filed.remove(job_id);
            let mut filing = Filing { running: false, dependent: false };
            if let Some(job) = self.map.get(&job_id) {
                filing = self.filed.file(job, now, &mut ready);
                let array = job.info.array_job_id;
                self.file_record(job_id, array);
            }
            if held || filing.running {
                untally(&mut self.untallied, &mut self.untallied_all, job_id);
            }
            if !filing.dependent && !self.filed.blocked.is_empty() {
                self.filed.blocked.remove(&job_id);
            }
        }
        self.filed.add_ready(ready);
        while let Some(&(at, job_id)) = self.filed.later.first()
            && at <= now
        {
            self.filed.later.pop_first();
            self.filed.later_at.remove(&job_id);
            self.filed.ready.insert(job_id);
            self.filed.arrived = true;
        }
    }

    /// Whether a job's begin time came since the last call (it needs a pass), and forgets it.
    pub(crate) fn take_arrived(&mut self) -> bool {
        std::mem::take(&mut self.filed.arrived)
    }

    /// The committed, pending, unheld jobs whose begin time has come (as of the last
    /// [`Jobs::refile`]), in id order: what a scheduling pass considers.
    pub(crate) fn ready(&self) -> impl Iterator<Item = &Job> {
        self.filed.ready.iter().filter_map(|id| self.map.get(id))
    }

    /// How many jobs [`Jobs::ready`] yields.
    pub(crate) fn ready_len(&self) -> usize {
        self.filed.ready.len()
    }

    /// Whether a job is one of [`Jobs::ready`].
    pub(crate) fn ready_contains(&self, job_id: JobId) -> bool {
        self.filed.ready.contains(&job_id)
    }

    /// The jobs filed as waiting for their begin time since the last call (their pending reason
    /// is the pass's to set), and forgets them.
    pub(crate) fn take_deferred(&mut self) -> Vec<JobId> {
        let deferred = std::mem::take(&mut self.filed.deferred);
        deferred.into_iter().filter(|id| self.filed.later_at.contains_key(id)).collect()
    }

    /// Committed pending jobs with a dependency (held or not) that are not set aside
    /// ([`Jobs::block`]), in id order: what a dependency refresh works out.
    pub(crate) fn dependent_open(&self) -> impl Iterator<Item = &Job> {
        self.filed.open.iter().filter_map(|id| self.map.get(id))
    }

    /// Whether a committed pending job's dependency has a `singleton`.
    pub(crate) fn any_singleton(&self) -> bool {
        !self.filed.singletons.is_empty()
    }

    /// Whether any committed pending job has a dependency.
    pub(crate) fn any_dependent(&self) -> bool {
        !self.filed.dependent.is_empty()
    }

    /// Committed pending jobs with a deadline (held or not), in id order.
    pub(crate) fn with_deadline(&self) -> impl Iterator<Item = &Job> {
        self.filed.deadlines.iter().filter_map(|id| self.map.get(id))
    }

    /// The jobs that hold an allocation, in id order: those filed so, and those changed since
    /// the last [`Jobs::refile`] that hold one now (so a job given an allocation a moment ago is
    /// counted before it is filed). A job filed so may have given it back since: callers check
    /// `alloc`.
    pub(crate) fn allocated(&self) -> impl Iterator<Item = &Job> {
        self.filed.running.union(&self.unfiled).filter_map(|id| self.map.get(id)).filter(|j| j.alloc.is_some())
    }

    #[cfg(test)]
    /// Keeps the jobs `keep` approves of; it sees each job read-only, so it cannot change one
    /// behind the table's back.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&JobId, &Job) -> bool) {
        let (changed, unfiled) = (&mut self.changed, &mut self.unfiled);
        let mut gone = Vec::new();
        self.map.retain(|job_id, job| {
            let kept = keep(job_id, job);
            if !kept {
                changed.insert(*job_id);
                unfiled.insert(*job_id);
                gone.push(*job_id);
            }
            kept
        });
        for job_id in gone {
            if let Some(array) = self.array_of.get(&job_id).copied() {
                self.file_record(job_id, None);
                self.unfiled.insert(array);
            }
        }
    }

    /// Files a change to job `job_id` that its record does not show (whether it is visible).
    pub(crate) fn touch(&mut self, job_id: JobId) {
        self.changed.insert(job_id);
    }

    /// The ids of the jobs changed since the last call (inserted, removed, touched or with a
    /// written record), and forgets them.
    pub(crate) fn take_changed(&mut self) -> std::collections::BTreeSet<JobId> {
        let mut changed = std::mem::take(&mut self.changed);
        for job_id in std::mem::take(&mut self.lent) {
            if let Some(job) = self.map.get_mut(&job_id)
                && job.info.take_changed()
            {
                changed.insert(job_id);
            }
        }
        changed
    }
}

/// Node name → index in the node table. Hashed with a fast hasher: a pass looks nodes up by
/// name for every share of every running job, and node names come from the admin's config,
/// not from users.
pub(crate) type NodeIndex = HashMap<String, usize, foldhash::fast::RandomState>;

/// Files `job_id` in `untallied`, or only sets `all` once it holds [`UNTALLIED_MAX`].
fn untally(untallied: &mut Vec<JobId>, all: &mut bool, job_id: JobId) {
    if *all {
        return;
    }
    if untallied.len() >= UNTALLIED_MAX {
        *all = true;
        *untallied = Vec::new();
        return;
    }
    untallied.push(job_id);
}

/// Changes filed for the tallies between two passes, at most: past it they start over (a pass
/// runs at least every tick, so only a burst of changes gets there).
const UNTALLIED_MAX: usize = 100_000;

/// The whole in-memory state. What must hold together is private and changes only through its
/// methods: the config in force with the node table and its indexes by name and partition
/// ([`State::install`]), the next job id ([`State::take_job_id`]), when ended jobs are dropped
/// ([`State::end_job`], [`State::purge`]) and the running jobs' tallies ([`State::tally`]).
#[derive(Debug)]
pub(crate) struct State {
    config: Arc<Config>,
    pub(crate) jobs: Jobs,
    /// The jobs' resident specs, shared between jobs submitted with the same options.
    pub(crate) specs: crate::model::resident::SpecPool,
    /// The jobs' partition lists, shared ([`crate::model::resident::PartitionLists`]).
    pub(crate) partition_lists: crate::model::resident::PartitionLists,
    nodes: Vec<Node>,
    /// Node name → its index in `nodes` ([`State::reindex`] keeps it).
    node_index: NodeIndex,
    /// Partition name → its nodes' indexes in `nodes`, in the partition's order
    /// ([`State::reindex`] keeps it).
    partition_nodes: HashMap<String, Vec<usize>>,
    next_job_id: JobId,
    /// When each ended job may be dropped from memory.
    expiry: BTreeMap<UnixTime, Vec<JobId>>,
    /// Decayed usage per user association, for fair share.
    pub(crate) usage: crate::model::usage::Usage,
    /// Running jobs being preempted → the job they make room for.
    pub(crate) preempting: HashMap<JobId, JobId>,
    /// Reclaiming job → the resources kept for it (freed or being freed) until it starts or the
    /// hold's deadline passes; no other job is placed on them meanwhile.
    pub(crate) reclaim_holds: HashMap<JobId, Hold>,
    /// What reclaims freed beyond their jobs' need, kept for the other jobs of the team they
    /// reclaimed for until each hold's deadline (`policy::spare`).
    pub(crate) team_holds: Vec<TeamHold>,
    /// What the end of each running job's current run does (requeue, end `PREEMPTED`), and the
    /// cancels due later (preempted jobs warned with their `--signal`).
    pub(crate) run_ends: crate::model::run_ends::RunEnds,
    /// The nodes each user's jobs failed on lately, for automatic drains (`model/incident.rs`).
    pub(crate) failing_users: crate::model::incident::FailingUsers,
    /// The automatic drains of the window, and those withheld over its cap.
    pub(crate) auto_drains: crate::model::incident::AutoDrains,
    /// The backfill reservations of the last pass, by job: `drover why` shows them and the next
    /// pass keeps each one that still holds.
    pub(crate) reservations: HashMap<JobId, Reservation>,
    /// What the last scheduling pass cost (for `/metrics` and the pass benchmark).
    pub(crate) last_pass: PassStats,
    /// Jobs submitted, started and ended since ctld started (`sdiag`).
    pub(crate) counts: JobCounts,
    /// Whether a pass may skip work it can prove useless (the shape cache, the free-node index,
    /// gated backfill planning). Off only in the test that proves both ways decide the same.
    pub(crate) pass_shortcuts: bool,
    /// Pending dependent jobs' parsed dependencies and the statuses behind their shown text.
    pub(crate) dependencies: crate::model::dependency::Cache,
    /// How long a pass plans backfill reservations, at most ([`PLANNING_TIME`]; longer only in
    /// the test that compares decisions with and without shortcuts).
    pub(crate) planning_time: std::time::Duration,
    /// How many jobs a pass plans reservations for, at most, held ones included: unbounded in
    /// ctld (its planning time bounds it); a replay (`policy::sim`) bounds it by count, so it
    /// decides the same however fast the machine is.
    pub(crate) planning_jobs: usize,
    /// The running jobs' tallies for limits and quotas, as of the last [`State::tally`].
    tally: crate::model::tally::Tally,
}

/// How long a pass plans backfill reservations, at most (Slurm's `bf_max_time` bounds its
/// backfill cycle the same way): past it, held reservations are carried over unchecked and no
/// new one is planned, so the pass stays short on a deep queue over a large cluster.
pub(crate) const PLANNING_TIME: std::time::Duration = std::time::Duration::from_millis(150);

/// Resources kept for a reclaiming job: the placement planned for it on what its victims free
/// (`policy::preempt` decides them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) alloc: Allocation,
    /// When the hold ends if the job has not started by then (unix time).
    pub(crate) until: UnixTime,
}

/// Resources a reclaim freed beyond its job's need (its victims' shares less its own placement),
/// kept for the jobs of the reclaiming team that may reclaim too, until `until`: no other team's
/// job is placed on them meanwhile, so nothing starts there only to be preempted again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TeamHold {
    /// The reclaiming job's account (its team is the quota that covers it in `partition`).
    pub(crate) account: String,
    pub(crate) partition: String,
    pub(crate) alloc: Allocation,
    pub(crate) until: UnixTime,
}

/// A blocked job's backfill reservation (planned by `policy::backfill`): its planned start, the resources it will use then, and until when they are held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub(crate) job_id: JobId,
    pub(crate) partition: String,
    pub(crate) start: UnixTime,
    /// `start` plus the job's time limit: the reserved resources are busy until then.
    pub(crate) end: UnixTime,
    /// The shares it holds from `start` (GPU indices as planned; the start places afresh).
    pub(crate) alloc: Allocation,
    /// Since when the job has held a reservation without a break (kept or moved earlier).
    pub(crate) since: UnixTime,
}

impl Reservation {
    /// The nodes it holds.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &str> {
        self.alloc.nodes.iter().map(|n| n.node.as_str())
    }

    /// Whether it holds its resources at some time in `[from, to)`.
    pub(crate) fn overlaps(&self, from: UnixTime, to: UnixTime) -> bool {
        self.start < to && from < self.end
    }
}

/// Jobs submitted, started and ended since ctld started, as `sdiag` counts them: an end is
/// `completed` (COMPLETED), `canceled` (CANCELLED, PREEMPTED, DEADLINE) or `failed` (any other
/// end state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct JobCounts {
    pub(crate) submitted: u64,
    pub(crate) started: u64,
    pub(crate) completed: u64,
    pub(crate) canceled: u64,
    pub(crate) failed: u64,
}

/// The cost of one scheduling pass.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PassStats {
    /// Time spent planning backfill reservations (part of the pass).
    pub(crate) backfill: std::time::Duration,
    /// Jobs whose placement was skipped because a job of the same shape found no room earlier in the pass.
    pub(crate) shape_skips: usize,
    /// Jobs given the reason of the job of their class before them, the pass having changed
    /// nothing since (see `policy::scheduler::Repeats`).
    pub(crate) class_skips: usize,
    /// Pending jobs the pass considered ([`Jobs::ready`]: not held, begin time come).
    pub(crate) considered: usize,
    /// Reservations carried over unchecked because the pass's planning time was spent.
    pub(crate) carried: usize,
    /// Jobs started ahead of a higher-priority job that waits in the same partition.
    pub(crate) backfilled: usize,
}

impl State {
    pub(crate) fn new(config: Arc<Config>, next_job_id: JobId) -> State {
        let nodes: Vec<Node> = config.nodes.iter().map(Node::new).collect();
        let usage = crate::model::usage::Usage::seeded(&config);
        let mut state = State {
            config,
            jobs: Jobs::default(),
            specs: Default::default(),
            partition_lists: Default::default(),
            nodes,
            node_index: NodeIndex::default(),
            partition_nodes: HashMap::new(),
            next_job_id: next_job_id.max(1),
            expiry: BTreeMap::new(),
            usage,
            preempting: HashMap::new(),
            reclaim_holds: HashMap::new(),
            team_holds: Vec::new(),
            run_ends: Default::default(),
            reservations: HashMap::new(),
            last_pass: PassStats::default(),
            pass_shortcuts: true,
            counts: JobCounts::default(),
            dependencies: Default::default(),
            planning_time: PLANNING_TIME,
            planning_jobs: usize::MAX,
            tally: Default::default(),
            failing_users: Default::default(),
            auto_drains: Default::default(),
        };
        state.reindex();
        state
    }

    /// The config in force.
    pub(crate) fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// The config in force, to change in a test (settings that move no node or partition;
    /// others go through [`State::install`]).
    #[cfg(test)]
    pub(crate) fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// The node table, in the config's order.
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node table to change in place (its order and names stay).
    pub(crate) fn nodes_mut(&mut self) -> &mut [Node] {
        &mut self.nodes
    }

    /// Node name → its index in [`State::nodes`].
    pub(crate) fn node_index(&self) -> &NodeIndex {
        &self.node_index
    }

    /// A partition's nodes (indexes in [`State::nodes`]), in the partition's order.
    pub(crate) fn partition_nodes(&self, partition: &str) -> Option<&[usize]> {
        self.partition_nodes.get(partition).map(Vec::as_slice)
    }

    /// The id the next job gets.
    pub(crate) fn next_job_id(&self) -> JobId {
        self.next_job_id
    }

    /// Takes the next job id.
    pub(crate) fn take_job_id(&mut self) -> JobId {
        let job_id = self.next_job_id;
        self.next_job_id += 1;
        job_id
    }

    /// The node table, taken out to be carried into a new config: give it back with
    /// [`State::install`] (the indexes are stale until then).
    pub(crate) fn take_nodes(&mut self) -> Vec<Node> {
        std::mem::take(&mut self.nodes)
    }

    /// Makes `config` the config in force, with `nodes` as the node table when given (in the
    /// config's order), and indexes them again.
    pub(crate) fn install(&mut self, config: Arc<Config>, nodes: Option<Vec<Node>>) {
        self.config = config;
        if let Some(nodes) = nodes {
            self.nodes = nodes;
        }
        self.reindex();
    }

    /// Indexes the node table by name and by partition: after the nodes or the config change.
    fn reindex(&mut self) {
        self.node_index = self.nodes.iter().enumerate().map(|(i, n)| (n.config.name.clone(), i)).collect();
        self.partition_nodes = self
            .config
            .partitions
            .iter()
            .map(|p| (p.name.clone(), p.nodes.iter().filter_map(|n| self.node_index.get(n).copied()).collect()))
            .collect();
    }

    /// The running jobs' tallies for limits and quotas, brought up to date with the jobs
    /// changed since the last call (the job table is refiled first, as of `now`).
    pub(crate) fn tally(&mut self, now: UnixTime) -> &crate::model::tally::Tally {
        self.jobs.refile(now);
        let mut tally = std::mem::take(&mut self.tally);
        match self.jobs.take_untallied() {
            Some(changed) => tally.sync(self, changed),
            None => tally = crate::model::tally::Tally::build(self),
        }
        self.tally = tally;
        &self.tally
    }

    pub(crate) fn node_mut(&mut self, name: &str) -> Option<&mut Node> {
        self.node_index.get(name).map(|&i| &mut self.nodes[i])
    }

    /// Partitions a node belongs to, config order.
    pub(crate) fn partitions_of(&self, node: &str) -> Vec<String> {
        self.config.partitions.iter().filter(|p| p.nodes.iter().any(|n| n == node)).map(|p| p.name.clone()).collect()
    }

    /// Reserves an allocation on its nodes.
    pub(crate) fn hold(&mut self, alloc: &Allocation) {
        for share in &alloc.nodes {
            if let Some(node) = self.node_mut(&share.node) {
                node.take(share);
            }
        }
    }

    /// Releases a job's allocation, if it still holds one.
    pub(crate) fn release_job(&mut self, job_id: JobId, now: UnixTime) {
        let Some(alloc) = self.jobs.get_mut(&job_id).and_then(|j| j.alloc.take()) else { return };
        for share in &alloc.nodes {
            if let Some(node) = self.node_mut(&share.node) {
                node.release(share, now);
            }
        }
    }

    /// A job's transitions live here, each in one method: [`State::start_job`] (PENDING →
    /// RUNNING), [`State::pend_job`] and [`State::next_run`] (back to PENDING) and
    /// [`State::end_job`] (to an end state); what a run's end does besides is in `run_ends`.
    ///
    /// Starts a job's run on `alloc` in `partition` at `now`: RUNNING there with the allocation's
    /// nodes, CPUs, memory and GPUs, its batch step, the partition's default time limit if it
    /// had none, and its billing. The pass has already held the allocation on the nodes. False
    /// when the job is gone.
    pub(crate) fn start_job(&mut self, job_id: JobId, partition: &str, alloc: Allocation, now: UnixTime) -> bool {
        let default_limit =
            self.config.partitions.iter().find(|p| p.name == partition).map(|p| p.default_time.unwrap_or(p.max_time));
        let Some(job) = self.jobs.get_mut(&job_id) else { return false };
        let info = &mut job.info;
        info.state = Some(JobState::Running);
        info.reason = "None".into();
        info.partition = partition.to_owned();
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
            info.time_limit = default_limit;
        }
        info.steps = vec![batch_step(info, now)];
        job.alloc = Some(alloc);
        job.launched_at = Some(now);
        job.started = false;
        self.counts.started += 1;
        let billing = crate::model::tres::job_billing(self, &self.jobs[&job_id]);
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.info.billing = Some(crate::model::tres::billing_count(billing));
        }
        true
    }

    /// Puts a job back in the queue: its allocation released, PENDING with no nodes, start or
    /// steps, its partition list as submitted (its run is scheduled afresh).
    pub(crate) fn pend_job(&mut self, job_id: JobId, now: UnixTime) {
        self.release_job(job_id, now);
        if let Some(job) = self.jobs.get_mut(&job_id) {
            let info = &mut job.info;
            info.state = Some(JobState::Pending);
            info.reason = "None".into();
            info.start_time = None;
            info.nodes.clear();
            info.steps.clear();
            info.partition = job.candidates.join(",");
            job.launched_at = None;
            job.started = false;
        }
    }

    /// A requeued job's next run: its restart count raised and, as in Slurm, its submit time
    /// reset (the earlier run's row keeps the original for `sacct -D`) and eligible from `now`,
    /// its exit status, end and cancel cleared. Its earlier end action no longer applies.
    pub(crate) fn next_run(&mut self, job_id: JobId, now: UnixTime) {
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.info.restarts += 1;
            job.info.submit_time = now;
            job.info.eligible_time = Some(now);
            job.info.exit_status = drover_shared::job::WaitStatus::default();
            job.info.end_time = None;
            job.info.cancelled_by = None;
            job.cancel_requested_by = None;
        }
        self.run_ends.forget(job_id);
    }

    /// Marks a job ended at `now` and schedules its removal from memory.
    pub(crate) fn end_job(&mut self, job_id: JobId, state: JobState, reason: &str, now: UnixTime) {
        let min_job_age = i64::from(self.config.min_job_age);
        if let Some(job) = self.jobs.get_mut(&job_id) {
            match state {
                JobState::Completed => self.counts.completed += 1,
                JobState::Cancelled | JobState::Preempted | JobState::Deadline => self.counts.canceled += 1,
                _ => self.counts.failed += 1,
            }
            job.info.state = Some(state);
            job.info.reason = reason.to_owned();
            job.info.end_time = Some(now);
            self.expiry.entry(now + min_job_age).or_default().push(job_id);
        }
    }

    /// Drops ended jobs older than `min_job_age` that no longer hold resources.
    pub(crate) fn purge(&mut self, now: UnixTime) {
        let later = self.expiry.split_off(&(now + 1));
        let due = std::mem::replace(&mut self.expiry, later);
        let mut removed = false;
        for job_id in due.into_values().flatten() {
            match self.jobs.get(&job_id) {
                Some(job) if job.alloc.is_some() => self.expiry.entry(now + 60).or_default().push(job_id),
                Some(_) => {
                    removed = true;
                    self.jobs.remove(&job_id);
                }
                None => {}
            }
        }
        if removed {
            self.specs.prune();
            self.partition_lists.prune();
        }
    }
}

/// The batch step of a job that starts now: one task on its first node, with that node's CPUs.
fn batch_step(info: &JobInfo, now: UnixTime) -> drover_shared::job::StepInfo {
    drover_shared::job::StepInfo {
        step_id: drover_shared::job::StepId::Batch,
        name: "batch".into(),
        state: JobState::Running,
        exit_status: Default::default(),
        start_time: Some(now),
        end_time: None,
        num_cpus: info.cpus_per_node.first().copied().unwrap_or(info.num_cpus),
        num_tasks: 1,
        nodes: info.nodes.first().cloned().into_iter().collect(),
    }
}
