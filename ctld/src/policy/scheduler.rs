//! The scheduling pass: pending jobs in (partition tier, multifactor priority, submit time, job
//! id) order, checked against QOS and association limits, placed gang-wise on a partition's nodes
//! that have the CPUs, memory and GPUs (by count and type) free, best fit: the nodes with the
//! fewest GPUs free that suffice first (the fewest CPUs for a job without GPUs), so small jobs
//! pack together and whole nodes stay whole for whole-node jobs; a multi-node job goes under the
//! lowest switch that holds it where the config declares a topology (`topology.rs`). A job that cannot start
//! gets a backfill reservation (its earliest start, from the time limits of what runs); a later
//! job may start ahead of it only where it does not touch the reserved nodes, or ends before the
//! reservation begins, so backfill never delays a job that holds a reservation.

use crate::model::request::PerNodeRequest;
use crate::model::state::{Allocation, Job, PassStats, State};
use crate::model::tres;
use crate::policy::backfill::{self, Reservation, Reservations, Timeline};
use crate::policy::limits::{Blocked, Running};
use crate::policy::placement::free::FreeIndex;
use crate::policy::placement::{NodeView, Placement, Shape, best_fit_order, eligible_nodes};
use crate::policy::preempt::{self, Planner, Taken, give_back, take_free};
use crate::policy::quota::{PoolFree, Quotas, quota_of};
use crate::policy::spare::{self, TeamHolds};
use crate::policy::topology::Tree;
use crate::policy::{dependency, priority};
use drover_shared::UnixTime;
use drover_shared::job::{JobId, JobState};
use std::collections::{HashMap, HashSet};

/// A job the pass decided to start.
#[derive(Debug)]
pub(crate) struct Start {
    pub(crate) job_id: JobId,
    pub(crate) partition: String,
    pub(crate) alloc: Allocation,
}

/// A running job to preempt and the job it makes room for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Preemption {
    pub(crate) victim: JobId,
    pub(crate) for_job: JobId,
}

/// What a pass decided, for the core to carry out: the jobs to start (their allocations already
/// held on the nodes in the state) and the running jobs to preempt. Pending reasons, priorities,
/// reservations and reclaim holds, which only the scheduler reads back, stay in the state.
#[derive(Debug, Default)]
pub(crate) struct Decisions {
    pub(crate) starts: Vec<Start>,
    pub(crate) preemptions: Vec<Preemption>,
}

/// What a pending job asks, worked out from its resident spec: per node, and in TRES.
type Asked = std::sync::Arc<(PerNodeRequest, tres::Tres)>;

/// What the ready jobs ask, worked out once per resident spec in a pass: jobs submitted alike
/// share one interned spec (`model::resident`), so a queue of a million jobs from a few
/// submission scripts costs a few workings-out, not a million (each builds its TRES with names).
/// Keyed by the spec's address, which no job frees while the pass holds the state.
#[derive(Default)]
struct AskedMemo(HashMap<usize, Asked, foldhash::fast::RandomState>);

impl AskedMemo {
    fn of(&mut self, job: &Job) -> Asked {
        let key = std::sync::Arc::as_ptr(&job.spec) as usize;
        self.0
            .entry(key)
            .or_insert_with(|| {
                let request = PerNodeRequest::from_spec(&job.spec);
                let asked = tres::of_request(&request);
                std::sync::Arc::new((request, asked))
            })
            .clone()
    }
}

/// One scheduling pass. Returns what it decided (starts, preemptions); priorities and pending
/// reasons are updated in place. Reads as its steps: rank the ready jobs, set up the pass's view
/// of the cluster (what runs, what reclaims hold, the reservations kept from the last pass), give
/// each job in rank order its turn, and leave the reservations and the pass's figures in the
/// state.
pub(crate) fn schedule(state: &mut State, now: UnixTime) -> Decisions {
    let Ranking { order, mut requests, priorities, quotas, running } = rank(state, now);
    let mut pass = Pass::begin(state, quotas, running, order.len(), now);
    for (job_id, k) in order {
        // Each job is ranked once: its request is taken at its turn.
        let Some((asked, class)) = requests[k].take() else { continue };
        pass.priority = priorities[k];
        pass.turn(state, job_id, &asked.0, &asked.1, class);
        // Not written with a reason (the job started): on its own.
        if let Some(priority) = pass.priority.take() {
            state.jobs.set_priority(job_id, priority);
        }
    }
    pass.finish(state)
}

/// The ready jobs in the order of the pass, each with its request and TRES worked out once, and
/// the tallies of what runs.
struct Ranking {
    /// (job, index into `requests`), first to last.
    order: Vec<(JobId, usize)>,
    /// Each job's request and its class ([`Class::id`]) where it is classed: no dependency, and
    /// its class key's hash met no other class first.
    requests: Vec<Option<(Asked, Option<u32>)>>,
    /// Each job's new priority where it changed (by index into `requests`), written at its turn
    /// along with its reason.
    priorities: Vec<Option<u32>>,
    /// The quota classification the order was built with (nothing runs or ends meanwhile).
    quotas: Quotas,
    /// What runs, for QOS and association limits.
    running: Running,
}

/// Ranks the ready jobs, their priorities recomputed first (the best over their partitions).
/// The pass walks the ready jobs only: held jobs and jobs waiting for their begin time are filed
/// elsewhere by the job table, so a deep held queue costs a pass nothing. Bringing the tallies of
/// what runs (for limits and quotas) up to date refiles the table first. Preemptors come first
/// (jobs that ask only for what is left of their team's guarantee), as in Slurm's order; then
/// partition tier, priority, submit time, job id. What depends only on a job's class (see
/// [`ClassKey`]) is worked out once per class: its request, its factors but age in each
/// partition, its tier and whether it may reclaim.
fn rank(state: &mut State, now: UnixTime) -> Ranking {
    let tally = state.tally(now);
    let (sums, quota_use) = (tally.sums.clone(), tally.quotas.clone());
    for job_id in state.jobs.take_deferred() {
        state.jobs.set_reason(job_id, "BeginTime");
    }
    let context = priority::Context::new(state);
    let quotas = Quotas::of(quota_use);
    let mut memo = AskedMemo::default();
    let hasher = foldhash::fast::RandomState::default();
    let mut classes: HashMap<u64, Class, foldhash::fast::RandomState> = HashMap::default();
    // Sized once: grown by doubling, a million jobs' lists were copied and their pages faulted
    // in about twice.
    let ready = state.jobs.ready_len();
    let mut requests: Vec<Option<(Asked, Option<u32>)>> = Vec::with_capacity(ready);
    let mut keyed: Vec<(bool, u32, u32, UnixTime, JobId, usize)> = Vec::with_capacity(ready);
    let mut priorities = Vec::with_capacity(ready);
    let config = state.config();
    let work_out = |job: &'_ Job, key, id, memo: &mut AskedMemo| {
        let asked = memo.of(job);
        let partitions: Vec<_> =
            job.candidates.iter().filter_map(|name| config.partitions.iter().find(|p| &p.name == name)).collect();
        let preemptor = !config.quotas.is_empty()
            && job.candidates.iter().any(|name| quotas.may_reclaim(config, job, name, &asked.1));
        Class {
            key,
            id,
            factors: partitions.iter().map(|p| context.factors_of(state, job, p, now, &asked.1)).collect(),
            tier: partitions.iter().map(|p| p.priority_tier).max().unwrap_or(0),
            preemptor,
            asked,
        }
    };
    for job in state.jobs.ready() {
        let key = ClassKey::of(job);
        let hash = std::hash::BuildHasher::hash_one(&hasher, &key);
        let mut other = None;
        let next = u32::try_from(classes.len()).ok();
        let class = match classes.get(&hash) {
            Some(class) if class.key == key => class,
            // Another class with the same hash: worked out on its own, and not classed.
            Some(_) => other.insert(work_out(job, key, None, &mut memo)),
            None => classes.entry(hash).or_insert_with(|| work_out(job, key, next, &mut memo)),
        };
        let age = context.age(job, now);
        let best = class
            .factors
            .iter()
            .map(|f| priority::priority_aged(&context.config, f, age, job.info.nice))
            .max()
            .unwrap_or(1);
        priorities.push((best != job.info.priority).then_some(best));
        // A dependency (a `singleton` reads the job's name) is not part of the class.
        requests.push(Some((class.asked.clone(), class.id.filter(|_| job.spec.dependency.is_none()))));
        keyed.push((class.preemptor, class.tier, best, job.info.submit_time, job.info.job_id, requests.len() - 1));
    }
    drop(classes);
    // Job ids are unique, so the order is total and an unstable sort gives the same one.
    keyed.sort_unstable_by(|a, b| {
        b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)).then(a.3.cmp(&b.3)).then(a.4.cmp(&b.4))
    });
    let order = keyed.into_iter().map(|(_, _, _, _, job_id, k)| (job_id, k)).collect();
    Ranking { order, requests, priorities, quotas, running: Running::of(sums) }
}

/// What the ranking works out once per job class: from the first job of the class it met.
struct Class<'a> {
    /// That job's class key, which the class's other jobs match.
    key: ClassKey<'a>,
    /// The class's number in this pass, in the order classes were met (none for a job whose
    /// key's hash met another class first: it is not classed).
    id: Option<u32>,
    asked: Asked,
    /// In each of its partitions (in its order) that exists: its factors, age aside.
    factors: Vec<priority::Factors>,
    tier: u32,
    preemptor: bool,
}

/// What makes a job's class: jobs of one class (the same resident spec and node filter, user,
/// account, QOS, partitions to try, array and array throttle, and time limit as the job holds it:
/// a requeued job keeps the default time of the partition it ran in, its spec none) read the
/// same inputs wherever the pass looks at a job, but for its age, nice value, dependency, holds
/// and the victims preempted for it.
#[derive(Hash, PartialEq, Eq)]
struct ClassKey<'a> {
    /// The interned resident spec and node filter, by address.
    spec: usize,
    node_filter: Option<usize>,
    array_job_id: Option<JobId>,
    array_max_tasks: u32,
    time_limit: Option<drover_shared::grammar::time::TimeLimit>,
    user: &'a str,
    account: &'a str,
    qos: &'a str,
    candidates: &'a [String],
}

impl<'a> ClassKey<'a> {
    fn of(job: &'a Job) -> ClassKey<'a> {
        ClassKey {
            spec: std::sync::Arc::as_ptr(&job.spec).addr(),
            node_filter: job.node_filter.as_ref().map(|f| std::sync::Arc::as_ptr(f).addr()),
            array_job_id: job.info.array_job_id,
            array_max_tasks: job.info.array_max_tasks,
            time_limit: job.info.time_limit,
            user: &job.info.user,
            account: &job.info.account,
            qos: &job.info.qos,
            candidates: &job.candidates,
        }
    }
}

/// One pass in progress: the cluster as the pass sees it (node views with the starts it decided
/// taken, and the indexes over them), what it owes to whom (reclaim holds, team holds,
/// reservations), its shortcuts' memory, and what it decided so far.
struct Pass {
    now: UnixTime,
    /// The new priority of the job whose turn it is, where the ranking changed it: written with
    /// its reason ([`Pass::set_reason`]), or after its turn.
    priority: Option<u32>,
    /// Each node's capacity, with the pass's starts and holds taken.
    views: Vec<NodeView>,
    /// The views indexed by free room, for best fit.
    free: FreeIndex,
    /// Each quota pool's free room.
    pool_free: PoolFree,
    /// What runs (started in this pass included), for limits.
    running: Running,
    /// Quota use (started in this pass included).
    quotas: Quotas,
    /// What was freed for each reclaiming job, taken off the views until its turn.
    holds: HashMap<JobId, Taken>,
    /// What reclaims freed beyond their jobs' need, kept for their teams' next jobs.
    team_holds: TeamHolds,
    /// The reclaim planner, built at the pass's first reclaim.
    planner: Option<Planner>,
    /// The reservations of the last pass not yet reached by their job's turn.
    held: HashMap<JobId, Reservation>,
    /// The reservations of this pass.
    reservations: Reservations,
    /// When the running jobs end: built at the pass's first planned reservation (a pass that
    /// plans none pays nothing for it), with the ends of the jobs started before then.
    timeline: Option<Timeline>,
    started_ends: Vec<(UnixTime, Allocation)>,
    /// `bf_max_job_test`, and the jobs planned so far.
    max_tests: usize,
    tested: usize,
    /// The partitions a job ranked higher waits in (a later job there waits for `Priority`).
    blocked: HashSet<String>,
    /// Whether the pass may skip work it can prove is wasted (off only in tests that compare).
    shortcuts: bool,
    /// Shapes that found no room now / at no time: nodes only fill up during a pass.
    no_room: HashSet<Shape>,
    never_fits: HashSet<Shape>,
    /// Counts every change a turn makes that a later turn reads: the views and their indexes,
    /// reservations, holds, starts, the planning budget, the shapes found without room.
    changes: u64,
    /// What the last turn of each job class that changed nothing decided.
    repeats: Repeats,
    /// Jobs change state only after the pass (its starts), so one lookup serves every job.
    dependencies: dependency::Lookup,
    tree: Option<Tree>,
    stats: PassStats,
    decisions: Decisions,
}

/// What trying a job's partitions found.
#[derive(Default)]
struct Tried {
    /// Where it starts now, and whether it borrows another team's idle guarantee to.
    start: Option<(Start, bool)>,
    /// A partition's `MaxNodes` is below what it asks.
    node_limited: bool,
    /// A partition where no job ranked higher waits.
    first_in_line: bool,
    /// The last quota that blocked it, and the partitions no quota blocked.
    quota_block: Option<Blocked>,
    open_partitions: usize,
}

impl Tried {
    /// The reason a job that did not start waits for.
    fn reason(&self) -> &'static str {
        if self.node_limited && !self.first_in_line {
            "PartitionNodeLimit"
        } else if self.first_in_line {
            "Resources"
        } else {
            "Priority"
        }
    }
}

impl Pass {
    /// Sets the pass up: the node views; victims that ended forgotten; reclaim holds past their
    /// deadline (or whose job no longer waits) dropped and the others taken off the views; team
    /// holds taken; and the reservations of the last pass, multi-node ones kept ahead of their
    /// job's turn.
    fn begin(state: &mut State, quotas: Quotas, running: Running, considered: usize, now: UnixTime) -> Pass {
        let mut views: Vec<NodeView> = state.nodes().iter().map(NodeView::from).collect();
        let still_running: Vec<JobId> =
            state.preempting.keys().copied().filter(|j| state.jobs.get(j).is_some_and(|j| j.alloc.is_some())).collect();
        state.preempting.retain(|victim, _| still_running.contains(victim));
        // What was freed for a reclaiming job stays kept for it until it starts or its hold's
        // deadline passes: nothing else is placed there meanwhile.
        state.reclaim_holds.retain(|job_id, hold| {
            hold.until >= now && state.jobs.get(job_id).is_some_and(|j| j.info.state() == JobState::Pending)
        });
        let holds: HashMap<JobId, Taken> = state
            .reclaim_holds
            .iter()
            .map(|(job_id, hold)| (*job_id, take_free(&mut views, &state.node_index(), &hold.alloc)))
            .collect();
        let team_holds = TeamHolds::take(state, &quotas, &mut views, now);
        let (held, reservations) = kept_reservations(state, &views);
        let stats = PassStats { considered, ..Default::default() };
        Pass {
            now,
            priority: None,
            free: FreeIndex::new(state, &views),
            pool_free: PoolFree::new(state, &views),
            views,
            running,
            quotas,
            holds,
            team_holds,
            planner: None,
            held,
            reservations,
            timeline: None,
            started_ends: Vec::new(),
            max_tests: state.config().priority.backfill_max_job_test as usize,
            tested: 0,
            blocked: HashSet::new(),
            shortcuts: state.pass_shortcuts,
            no_room: HashSet::new(),
            never_fits: HashSet::new(),
            changes: 0,
            repeats: Repeats { reclaiming: state.preempting.values().copied().collect(), ..Repeats::default() },
            dependencies: dependency::Lookup::for_pass(state),
            tree: Tree::of(state),
            stats,
            decisions: Decisions::default(),
        }
    }

    /// Gives the job whose turn it is its pending reason, and its new priority if the ranking
    /// changed it: one lookup in the job table for both (in the first pass after many jobs
    /// arrive, every job has both to write).
    fn set_reason(&mut self, state: &mut State, job_id: JobId, reason: &str) {
        state.jobs.set_reason_and_priority(job_id, reason, self.priority.take());
    }

    /// One job's turn: it waits for its begin time, a dependency or a limit; or it starts; or it
    /// reclaims its team's guarantee; or it waits for resources, planned a reservation.
    fn turn(
        &mut self,
        state: &mut State,
        job_id: JobId,
        request: &PerNodeRequest,
        asked: &tres::Tres,
        class: Option<u32>,
    ) {
        self.retake_team_holds(state);
        let held_before = self.held.remove(&job_id);
        if held_before.is_some() {
            self.reservations.remove(job_id, &state.node_index());
            self.changes += 1;
        }
        let class = (self.shortcuts && held_before.is_none())
            .then(|| self.repeats.class_of(state, job_id, class, &self.holds))
            .flatten();
        if let Some(class) = class
            && let Some(reason) = self.repeats.reason(class, self.changes, self.blocked.len())
        {
            self.stats.class_skips += 1;
            // As `Pass::set_reason` (the reason is borrowed from the repeats).
            state.jobs.set_reason_and_priority(job_id, reason, self.priority.take());
            return;
        }
        let before = (self.changes, self.blocked.len());
        self.take_turn(state, job_id, request, asked, held_before);
        if let Some(class) = class
            && before == (self.changes, self.blocked.len())
        {
            self.repeats.record(state, class, job_id, self.changes, self.blocked.len());
        }
    }

    /// The turn itself (see [`Pass::turn`]).
    fn take_turn(
        &mut self,
        state: &mut State,
        job_id: JobId,
        request: &PerNodeRequest,
        asked: &tres::Tres,
        held_before: Option<Reservation>,
    ) {
        if let Err(reason) = self.eligible(state, job_id) {
            self.set_reason(state, job_id, reason);
            return;
        }
        // A multi-node job ranked above a kept reservation plans and starts as if it were not
        // there: among multi-node jobs priority decides, and the one below is planned afresh.
        self.reservations.ignore_kept(request.n_nodes > 1);
        // Its own hold is room for it, which jobs of its shape did not have earlier in the pass.
        let unheld = self.lift_hold(job_id);
        if let Err(reason) = self.running.check_reason(&state.config(), &state.jobs[&job_id], asked) {
            // A job held back by a limit does not hold back the jobs behind it (as in Slurm).
            self.set_reason(state, job_id, &reason);
            return;
        }
        // What reclaims freed for its team is room for it too.
        let unheld = self.borrow_team_room(state, job_id, asked) || unheld;
        let tried = self.try_partitions(state, job_id, request, asked, unheld);
        if tried.start.is_none()
            && tried.open_partitions == 0
            && let Some(limit) = &tried.quota_block
        {
            self.set_reason(state, job_id, &limit.reason);
            return;
        }
        if tried.start.is_none() {
            if self.reclaim(state, job_id, request, asked) {
                self.hold_reclaimed(state, job_id);
                self.set_reason(state, job_id, "Resources");
                return;
            }
            state.reclaim_holds.remove(&job_id);
        }
        let reason = tried.reason();
        match tried.start {
            Some((start, borrows)) => self.start(state, start, borrows, asked),
            None => self.wait(state, job_id, request, held_before, reason),
        }
    }

    /// Leaves the reservations, reasons and figures of the pass in the state; returns its
    /// decisions.
    fn finish(self, state: &mut State) -> Decisions {
        state.reservations = self.reservations.into_map();
        state.last_pass = self.stats;
        self.decisions
    }

    /// Records the view at index `i` in the indexes over the views.
    fn refile(&mut self, i: usize) {
        self.changes += 1;
        self.free.update(i, &self.views[i]);
        self.pool_free.update(i, &self.views[i]);
    }

    /// Takes back what team holds lent to the job before.
    fn retake_team_holds(&mut self, state: &State) {
        for i in self.team_holds.retake(state, &mut self.views) {
            self.refile(i);
        }
    }

    /// Whether the job may start at all now: its begin time has come and its dependencies allow.
    fn eligible(&mut self, state: &State, job_id: JobId) -> Result<(), &'static str> {
        let job = &state.jobs[&job_id];
        if job.spec.begin_time.is_some_and(|t| t > self.now) {
            return Err("BeginTime");
        }
        dependency::eligibility(state, &mut self.dependencies, job, self.now)
    }

    /// Gives the room held for the job's reclaim back to the views; true if it had a hold.
    fn lift_hold(&mut self, job_id: JobId) -> bool {
        let Some(taken) = self.holds.remove(&job_id) else { return false };
        give_back(&mut self.views, &taken);
        for (i, _) in &taken {
            self.refile(*i);
        }
        true
    }

    /// Lends the job what reclaims freed for its team; true if it was lent anything.
    fn borrow_team_room(&mut self, state: &State, job_id: JobId, asked: &tres::Tres) -> bool {
        for i in self.team_holds.lend(state, &self.quotas, &mut self.views, job_id, asked) {
            self.refile(i);
        }
        let lending = self.team_holds.lending();
        if lending {
            self.changes += 1;
        }
        lending
    }

    /// Tries the job's partitions in its order: the first where quotas allow it and it fits now
    /// (best fit, under the lowest switch that holds a multi-node job, around the reservations)
    /// is where it starts. A borrower starts only where it delays no reservation, those of owners
    /// waiting inside their guarantee included: what they need stays theirs, the rest is used.
    fn try_partitions(
        &mut self,
        state: &State,
        job_id: JobId,
        request: &PerNodeRequest,
        asked: &tres::Tres,
        unheld: bool,
    ) -> Tried {
        let job = &state.jobs[&job_id];
        let now = self.now;
        let mut tried = Tried::default();
        for name in job.candidates.iter() {
            let Some(partition) = state.config().partitions.iter().find(|p| &p.name == name) else { continue };
            if partition.max_nodes.is_some_and(|max| request.n_nodes > max) {
                tried.node_limited = true;
                continue;
            }
            let borrows = match self.quotas.check(state, &self.pool_free, job, partition, asked) {
                Ok(borrows) => borrows,
                Err(limit) => {
                    tried.quota_block = Some(limit);
                    continue;
                }
            };
            tried.open_partitions += 1;
            tried.first_in_line |= !self.blocked.contains(name);
            // A job of the same shape found no room earlier in this pass: nodes only fill up
            // during a pass, so this one finds none either.
            let shape = Shape::of(name, job, request);
            if self.shortcuts && !unheld && self.no_room.contains(&shape) {
                self.stats.shape_skips += 1;
                continue;
            }
            let limit = backfill::time_limit_secs(job, partition);
            let (views, reservations) = (&self.views, &self.reservations);
            let place =
                |nodes: Vec<usize>| backfill::place_around(views, nodes, partition, request, reservations, now, limit);
            let placed = match self.free.candidates(name, job, request).filter(|_| self.shortcuts) {
                // A multi-node job goes under the lowest switch that can hold it.
                Some(candidates) => match &self.tree {
                    Some(tree) if request.n_nodes > 1 => tree.place(request.n_nodes, candidates.collect(), place),
                    _ => backfill::place_around(views, candidates, partition, request, reservations, now, limit),
                },
                None => {
                    let nodes = best_fit_order(views, eligible_nodes(state, job, partition), request);
                    match &self.tree {
                        Some(tree) => tree.place(request.n_nodes, nodes, place),
                        None => place(nodes),
                    }
                }
            };
            match placed {
                Placement::Placed(alloc) => {
                    tried.start = Some((Start { job_id, partition: name.clone(), alloc }, borrows));
                    break;
                }
                Placement::NoRoom => {
                    if self.no_room.insert(shape) {
                        self.changes += 1;
                    }
                }
                Placement::WouldDelay => {}
            }
        }
        tried
    }

    /// Starts the job: its shares taken off the views, its end on the timeline, its TRES added
    /// to what runs and to its quota, its allocation held on the nodes.
    fn start(&mut self, state: &mut State, start: Start, borrows: bool, asked: &tres::Tres) {
        let job_id = start.job_id;
        self.changes += 1;
        let job = &state.jobs[&job_id];
        let partition = state.config().partitions.iter().find(|p| p.name == start.partition);
        let limit = partition.map_or(backfill::UNLIMITED, |p| backfill::time_limit_secs(job, p));
        for share in &start.alloc.nodes {
            if let Some(&i) = state.node_index().get(&share.node) {
                self.views[i].take(share);
                self.refile(i);
            }
        }
        let end = self.now.saturating_add(limit);
        match self.timeline.as_mut() {
            Some(timeline) => timeline.add(end, &start.alloc, &state.node_index()),
            None => self.started_ends.push((end, start.alloc.clone())),
        }
        if let Some(planner) = self.planner.as_mut() {
            planner.started(state, &start.alloc);
        }
        state.reclaim_holds.remove(&job_id);
        self.running.add(&state.config(), job, asked);
        self.quotas.add(&state.config(), job, &start.partition, asked, borrows);
        state.hold(&start.alloc);
        if self.blocked.contains(&start.partition) {
            self.stats.backfilled += 1;
        }
        self.decisions.starts.push(start);
    }

    /// The job waits for `reason`. A job that held a reservation is always planned (it keeps it
    /// unless an earlier start is possible or its plan broke); others while the pass's budget of
    /// jobs tested lasts. Past the pass's planning time, a held reservation whose start is still
    /// to come and whose nodes are up is carried over as it was, and no new one is planned: the
    /// next pass goes on. A replay bounds the jobs planned (held ones included) by count instead
    /// (`planning_jobs`).
    fn wait(
        &mut self,
        state: &mut State,
        job_id: JobId,
        request: &PerNodeRequest,
        held_before: Option<Reservation>,
        reason: &'static str,
    ) {
        let in_time = self.stats.backfill < state.planning_time && self.tested < state.planning_jobs;
        if self.max_tests > 0 && (held_before.is_some() || self.tested < self.max_tests) && in_time {
            self.tested += 1;
            let began = std::time::Instant::now();
            self.plan(state, job_id, request, held_before.as_ref());
            self.stats.backfill += began.elapsed();
        } else if let Some(old) = held_before.filter(|r| {
            self.max_tests > 0
                && r.start > self.now
                && r.nodes().all(|n| state.node_index().get(n).is_some_and(|&i| self.views[i].usable()))
        }) {
            self.stats.carried += 1;
            self.changes += 1;
            self.reservations.push(old, &state.node_index());
        }
        // Most jobs wait in partitions already blocked: only a new one is copied.
        for name in state.jobs[&job_id].candidates.iter() {
            if !self.blocked.contains(name) {
                self.blocked.insert(name.clone());
            }
        }
        self.set_reason(state, job_id, reason);
    }

    /// Plans the job's backfill reservation (see `backfill::plan`).
    fn plan(&mut self, state: &State, job_id: JobId, request: &PerNodeRequest, held_before: Option<&Reservation>) {
        // The budget of jobs tested and the reservations change.
        self.changes += 1;
        let (now, shortcuts) = (self.now, self.shortcuts);
        let started_ends = &mut self.started_ends;
        let timeline = self.timeline.get_or_insert_with(|| {
            let mut timeline = Timeline::new(state, now);
            timeline.gated = shortcuts;
            for (end, alloc) in started_ends.drain(..) {
                timeline.add(end, &alloc, &state.node_index());
            }
            timeline
        });
        let planned = backfill::plan(
            state,
            &state.jobs[&job_id],
            request,
            &self.views,
            timeline,
            &self.reservations,
            held_before,
            shortcuts.then_some(&mut self.never_fits),
            now,
        );
        if let Some(reservation) = planned {
            self.reservations.push(reservation, &state.node_index());
        }
    }

    /// Reclaims a guarantee for a job that cannot start: when the job asks only for what is left
    /// of its team's guarantee in a partition, the pass's reclaim planner finds room for it in
    /// what is free or being freed, or preempts the cheapest set of other teams' borrowed jobs
    /// that makes room (see `super::preempt`), adding the new victims to the decisions. The job
    /// then holds that room across passes and reserves its nodes in this one (start: now), so
    /// nothing else takes them. True when the job now waits for preemptions (new or already
    /// under way).
    fn reclaim(&mut self, state: &mut State, job_id: JobId, request: &PerNodeRequest, asked: &tres::Tres) -> bool {
        let now = self.now;
        let job = &state.jobs[&job_id];
        for name in job.candidates.iter() {
            let Some(partition) = state.config().partitions.iter().find(|p| &p.name == name) else { continue };
            if !self.quotas.may_reclaim(&state.config(), job, name, asked) {
                continue;
            }
            let Some(own) = quota_of(&state.config(), &job.info.account, name) else { continue };
            let limit = backfill::time_limit_secs(job, partition);
            // Built at the pass's first reclaim: a pass without one pays nothing for it.
            let (views, holds, quotas) = (&self.views, &self.holds, &self.quotas);
            let planner = self.planner.get_or_insert_with(|| Planner::new(state, views, holds, quotas));
            let nodes = eligible_nodes(state, job, partition);
            let Some((victims, alloc)) =
                planner.plan(state, quotas, own, partition, &nodes, request, asked, job_id, now)
            else {
                continue;
            };
            // The hold lasts until the slowest victim, its own earlier ones included, is gone.
            let earlier = state.reclaim_holds.get(&job_id).map_or(now, |h| h.until);
            let grace = victims.iter().map(|v| preempt::grace_secs(state, *v)).max();
            let until = grace.map_or(earlier, |g| earlier.max(now + g + preempt::HOLD_MARGIN));
            let until = until.max(now + i64::from(state.config().kill_wait) + preempt::HOLD_MARGIN);
            // What the victims free beyond this job stays its team's while the team is owed it.
            if !victims.is_empty() {
                let account = state.jobs[&job_id].info.account.clone();
                let team = Some(own);
                let holding: u64 = state
                    .team_holds
                    .iter()
                    .filter(|h| h.partition == *name && quota_of(&state.config(), &h.account, name) == team)
                    .flat_map(|h| &h.alloc.nodes)
                    .map(|n| n.gpus.len() as u64)
                    .sum();
                let cap = spare::owed_gpus(state, quotas, &account, name, asked).saturating_sub(holding);
                if let Some(spare) = spare::spare_of(state, &victims, &alloc, cap) {
                    let partition = name.clone();
                    state.team_holds.push(crate::model::state::TeamHold { account, partition, alloc: spare, until });
                }
            }
            for victim in victims {
                tracing::info!(
                    victim,
                    for_job = job_id,
                    partition = name,
                    "preempting a borrowed job to reclaim a guarantee"
                );
                state.preempting.insert(victim, job_id);
                self.decisions.preemptions.push(Preemption { victim, for_job: job_id });
            }
            let end = now.saturating_add(limit);
            self.changes += 1;
            let reservation =
                Reservation { job_id, partition: name.clone(), start: now, end, alloc: alloc.clone(), since: now };
            self.reservations.push(reservation, &state.node_index());
            state.reclaim_holds.insert(job_id, crate::model::state::Hold { alloc, until });
            return true;
        }
        false
    }

    /// Takes the room a reclaim now holds for the job off the views, until its turn in a later
    /// pass.
    fn hold_reclaimed(&mut self, state: &State, job_id: JobId) {
        let Some(hold) = state.reclaim_holds.get(&job_id) else { return };
        let taken = take_free(&mut self.views, &state.node_index(), &hold.alloc);
        for (i, _) in &taken {
            self.refile(*i);
        }
        self.holds.insert(job_id, taken);
    }
}

/// Turns that changed nothing, by job class, so that a queue of jobs submitted alike costs a full
/// pass one turn per class while nothing changes. Jobs of one class ([`ClassKey`]) read the same
/// inputs in a turn:
/// the views, reservations, holds, what runs, quota use, the planning budget and the partitions
/// blocked so far. A turn that changed none of these (no start, reclaim, hold lent, reservation
/// planned or carried, no new shape found without room, no partition newly blocked) leaves the
/// next job of its class exactly the inputs it had, so that job gets the same reason without
/// taking its turn. Jobs with a dependency (a `singleton` reads the job's name), a backfill
/// reservation from the last pass, a reclaim hold or victims being preempted for them (the
/// reclaim planner tries those victims' nodes first) are not classed: they always take their turn.
#[derive(Default)]
struct Repeats {
    /// Jobs that running victims are being preempted for: the reclaim planner tries their nodes
    /// first for that job alone.
    reclaiming: HashSet<JobId>,
    /// Class ([`Class::id`]) → the pass's `changes` and blocked partitions after the last turn
    /// of the class that changed nothing, and the reason that turn gave.
    last: HashMap<u32, (u64, usize, String), foldhash::fast::RandomState>,
}

impl Repeats {
    /// The job's class as the ranking found it ([`Class::id`]: jobs with a dependency are not
    /// classed there), unless the job holds or is owed room of its own in this pass.
    fn class_of(&self, state: &State, job_id: JobId, class: Option<u32>, holds: &HashMap<JobId, Taken>) -> Option<u32> {
        if holds.contains_key(&job_id) || state.reclaim_holds.contains_key(&job_id) || self.reclaiming.contains(&job_id)
        {
            return None;
        }
        class
    }

    /// The reason the last turn of the class gave, if nothing changed since. The ranking put
    /// only jobs whose whole class key matched into one class, so the two jobs are of one class.
    fn reason(&self, class: u32, changes: u64, blocked: usize) -> Option<&str> {
        let (at, blocked_then, reason) = self.last.get(&class)?;
        ((*at, *blocked_then) == (changes, blocked)).then_some(reason.as_str())
    }

    /// Records a turn that changed nothing.
    fn record(&mut self, state: &State, class: u32, job_id: JobId, changes: u64, blocked: usize) {
        let reason = state.jobs[&job_id].info.reason.clone();
        self.last.insert(class, (changes, blocked, reason));
    }
}

/// The reservations of the last pass, and this pass's starting ones. Each job that still waits
/// keeps its own if it holds. A multi-node job's is kept against single-node jobs ranked above
/// it too: they plan and start around it (one ranked above that holds none cannot take its room
/// as its nodes drain), as it is in the pass's reservations from the start and leaves them only
/// while its own job is placed and planned afresh. Single-node jobs find room wherever a node
/// frees, so theirs stay in priority order, which is what fair share steers by; so do multi-node
/// jobs among themselves (one ranked above does not see it), or a wide job ranked first would
/// wait behind every lower one that planned before it was submitted. (A reclaiming job's room is
/// its hold, already taken off the views.)
fn kept_reservations(state: &mut State, views: &[NodeView]) -> (HashMap<JobId, Reservation>, Reservations) {
    let held = std::mem::take(&mut state.reservations);
    let mut reservations = Reservations::default();
    let mut held_ids: Vec<JobId> = held
        .iter()
        .filter(|(j, r)| {
            r.alloc.nodes.len() > 1 && state.jobs.ready_contains(**j) && !state.reclaim_holds.contains_key(*j)
        })
        .map(|(j, _)| *j)
        .collect();
    held_ids.sort_unstable();
    for job_id in held_ids {
        let kept = held[&job_id].clone();
        if kept.nodes().all(|n| state.node_index().get(n).is_some_and(|&i| views[i].usable())) {
            reservations.push_kept(kept, &state.node_index());
        }
    }
    (held, reservations)
}

#[cfg(test)]
mod tests;
