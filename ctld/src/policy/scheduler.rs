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
use crate::model::state::{Allocation, Job, NodeAllocation, State};
use crate::model::tres;
use crate::policy::backfill::{self, NodeView, Reservation, Reservations};
use crate::policy::limits::Running;
use crate::policy::priority;
use crate::policy::quota::{PoolFree, Quotas, quota_of};
use drover_shared::UnixTime;
use drover_shared::config::PartitionConfig;
use drover_shared::job::{JobId, JobState};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

impl PerNodeRequest {
    /// Whether a node of this shape could ever hold the `i`-th share (ignoring what runs there).
    pub(crate) fn fits_config(&self, node: &NodeView, i: usize, partition: &PartitionConfig) -> bool {
        let cpus = self.cpus(i);
        cpus <= node.cpus
            && self.mem_mb(cpus, node.real_memory_mb, partition.default_mem_per_cpu) <= node.real_memory_mb
            && self.pick_gpus(node, &[]).is_some()
    }

    /// Chooses GPU indices on a node, skipping `busy` ones; `None` if not enough are free.
    fn pick_gpus(&self, node: &NodeView, busy: &[u32]) -> Option<Vec<u32>> {
        // Most tries fail on a busy cluster: count before allocating anything.
        for (gpu_type, count) in &self.gpus {
            let free = node
                .gpus
                .iter()
                .filter(|g| {
                    !busy.contains(&g.index) && gpu_type.as_ref().is_none_or(|t| t.eq_ignore_ascii_case(&g.gpu_type))
                })
                .count();
            if free < *count as usize {
                return None;
            }
        }
        let mut picked = Vec::new();
        for (gpu_type, count) in &self.gpus {
            let free = node.gpus.iter().filter(|g| {
                !busy.contains(&g.index)
                    && !picked.contains(&g.index)
                    && gpu_type.as_ref().is_none_or(|t| t.eq_ignore_ascii_case(&g.gpu_type))
            });
            let chosen: Vec<u32> = free.take(*count as usize).map(|g| g.index).collect();
            if chosen.len() < *count as usize {
                return None;
            }
            picked.extend(chosen);
        }
        picked.sort_unstable();
        Some(picked)
    }

    /// The share of the `i`-th node if it has room now.
    pub(crate) fn place_on(&self, node: &NodeView, i: usize, partition: &PartitionConfig) -> Option<NodeAllocation> {
        if !node.usable() {
            return None;
        }
        if self.exclusive && (node.cpus_alloc > 0 || !node.gpus_alloc.is_empty()) {
            return None;
        }
        let cpus = if self.exclusive { node.cpus } else { self.cpus(i) };
        let mem_mb = self.mem_mb(cpus, node.real_memory_mb, partition.default_mem_per_cpu);
        if node.cpus_alloc + cpus > node.cpus || node.mem_alloc_mb + mem_mb > node.real_memory_mb {
            return None;
        }
        let gpus = if self.exclusive && self.gpus.is_empty() {
            node.gpus.iter().map(|g| g.index).filter(|g| !node.gpus_alloc.contains(g)).collect()
        } else {
            self.pick_gpus(node, &node.gpus_alloc)?
        };
        Some(NodeAllocation { node: node.name.clone(), cpus, mem_mb, gpus, tasks: self.tasks[i] })
    }
}

/// The nodes a job may use in a partition (indexes into `views`): the partition's, minus `-x`,
/// restricted by `-w` and to the nodes whose features satisfy `--constraint`.
pub(crate) fn eligible_nodes(state: &State, job: &Job, partition: &PartitionConfig) -> Vec<usize> {
    let listed;
    let all = match state.partition_nodes.get(&partition.name) {
        Some(all) => all.as_slice(),
        // A partition of another config than the state's (none is passed today).
        None => {
            listed = partition.nodes.iter().filter_map(|n| state.node_index.get(n).copied()).collect::<Vec<_>>();
            listed.as_slice()
        }
    };
    // Resolved at submit: nothing here reads the request's text.
    match &job.node_filter {
        None => all.to_vec(),
        Some(filter) => all.iter().copied().filter(|&i| filter.allows(i)).collect(),
    }
}

/// Tries to place a job on `views`: the first nodes of `nodes` (indexes into `views`, in the order
/// given: the pass gives them in best-fit order) that take a share, skipping nodes
/// in `avoid`.
pub(crate) fn place(
    views: &[NodeView],
    nodes: impl IntoIterator<Item = usize>,
    avoid: &HashSet<String>,
    partition: &PartitionConfig,
    request: &PerNodeRequest,
) -> Option<Allocation> {
    let nodes = nodes.into_iter().filter(|&i| !avoid.contains(&views[i].name));
    backfill::place_with(nodes, partition, request, |i| std::borrow::Cow::Borrowed(&views[i]))
}

/// Whether a job could run in the partition at all, on an empty cluster.
pub(crate) fn could_ever_fit(state: &State, job: &Job, partition: &PartitionConfig) -> bool {
    let request = PerNodeRequest::from_spec(&job.spec);
    // Stops at the first nodes that fit: a submission's check costs O(n_nodes) on a
    // homogeneous partition instead of a walk over all of its nodes.
    let wanted = request.n_nodes as usize;
    let fitting = eligible_nodes(state, job, partition)
        .into_iter()
        .enumerate()
        .filter(|(k, i)| {
            request.fits_config(&NodeView::empty(&state.nodes[*i]), (*k).min(request.tasks.len() - 1), partition)
        })
        .take(wanted)
        .count();
    fitting >= wanted
}

/// Everything that decides whether a job fits on a partition's nodes: two jobs of one shape
/// either both fit or both do not, on the same capacity.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    partition: String,
    request: PerNodeRequest,
    /// The job's resolved node filter, by identity (jobs submitted alike share one only when
    /// they are an array's tasks; others are distinct shapes, which costs a skipped skip).
    node_filter: Option<usize>,
}

impl Shape {
    pub(crate) fn of(partition: &str, job: &Job, request: &PerNodeRequest) -> Shape {
        Shape {
            partition: partition.to_owned(),
            request: request.clone(),
            node_filter: job.node_filter.as_ref().map(|filter| Arc::as_ptr(filter).addr()),
        }
    }
}

/// The GPUs of the types `request` asks for that are free on a node, and its free CPUs: best fit
/// tries the nodes with the fewest first. A request for GPUs of one type counts that type only.
pub(crate) fn fit_key(view: &NodeView, request: &PerNodeRequest) -> (u32, u32) {
    let free_cpus = view.cpus.saturating_sub(view.cpus_alloc);
    if request.n_gpus() == 0 {
        return (free_cpus, 0);
    }
    let typed = match request.gpus.as_slice() {
        [(Some(gpu_type), count)] if *count > 0 => Some(gpu_type),
        _ => None,
    };
    let free_gpus = view
        .gpus
        .iter()
        .filter(|g| !view.gpus_alloc.contains(&g.index))
        .filter(|g| typed.is_none_or(|t| t.eq_ignore_ascii_case(&g.gpu_type)))
        .count();
    (u32::try_from(free_gpus).unwrap_or(u32::MAX), free_cpus)
}

/// Orders `nodes` (indexes into `views`) for best fit: a job that asks for GPUs tries the nodes
/// with the fewest of them free first, then the fewest CPUs free; a job without GPUs the nodes
/// with the fewest CPUs free. Ties keep their order. Used where the pass has no index of the
/// job's nodes (`-w`, `-x`, `--constraint`).
pub(crate) fn best_fit_order(views: &[NodeView], mut nodes: Vec<usize>, request: &PerNodeRequest) -> Vec<usize> {
    nodes.sort_by_cached_key(|&i| fit_key(&views[i], request));
    nodes
}

/// Per partition, the nodes that are up and have a CPU free (by free CPUs), those that also have
/// a GPU free, and those with a GPU of each type free (by free GPUs of the kind, then free CPUs),
/// kept current as the pass places jobs. A fit search starts at the first node with enough free
/// and walks towards emptier ones (best fit), skipping full nodes and nodes with too little free.
pub(crate) struct FreeIndex {
    partitions: HashMap<String, PartitionFree>,
    /// View index → (partition, position in that partition's order).
    positions: Vec<Vec<(String, usize)>>,
    /// View index → the keys it is filed under now.
    filed: Vec<Filed>,
}

/// Where a node is filed in its partitions' sets.
#[derive(Default, Clone)]
struct Filed {
    cpu: Option<u32>,
    gpu: Option<(u32, u32)>,
    /// Lower-case GPU type → (free GPUs of the type, free CPUs), for the types with one free.
    gpu_type: Vec<(String, (u32, u32))>,
}

struct PartitionFree {
    /// View indexes in partition order.
    order: Vec<usize>,
    /// (free CPUs, position) of the nodes with a CPU free.
    cpu: BTreeSet<(u32, usize)>,
    /// (free GPUs, free CPUs, position) of the nodes with a CPU and a GPU free.
    gpu: BTreeSet<(u32, u32, usize)>,
    /// Lower-case GPU type → (free GPUs of that type, free CPUs, position).
    gpu_type: HashMap<String, BTreeSet<(u32, u32, usize)>>,
}

impl FreeIndex {
    pub(crate) fn new(state: &State, views: &[NodeView]) -> FreeIndex {
        let mut index = FreeIndex {
            partitions: HashMap::new(),
            positions: vec![Vec::new(); views.len()],
            filed: vec![Filed::default(); views.len()],
        };
        for partition in &state.config.partitions {
            let order: Vec<usize> = partition.nodes.iter().filter_map(|n| state.node_index.get(n).copied()).collect();
            for (position, &i) in order.iter().enumerate() {
                index.positions[i].push((partition.name.clone(), position));
            }
            let free = PartitionFree { order, cpu: BTreeSet::new(), gpu: BTreeSet::new(), gpu_type: HashMap::new() };
            index.partitions.insert(partition.name.clone(), free);
        }
        for (i, view) in views.iter().enumerate() {
            index.update(i, view);
        }
        index
    }

    /// Records what is free on the node at view index `i` now.
    pub(crate) fn update(&mut self, i: usize, view: &NodeView) {
        let free_cpus = view.cpus.saturating_sub(view.cpus_alloc);
        let cpu_free = view.usable() && free_cpus > 0;
        let mut filed = Filed::default();
        if cpu_free {
            filed.cpu = Some(free_cpus);
            let mut total = 0u32;
            for gpu in view.gpus.iter().filter(|g| !view.gpus_alloc.contains(&g.index)) {
                total += 1;
                let name = gpu.gpu_type.to_ascii_lowercase();
                match filed.gpu_type.iter_mut().find(|(t, _)| *t == name) {
                    Some((_, (count, _))) => *count += 1,
                    None => filed.gpu_type.push((name, (1, free_cpus))),
                }
            }
            filed.gpu = (total > 0).then_some((total, free_cpus));
        }
        let old = std::mem::replace(&mut self.filed[i], filed);
        let new = &self.filed[i];
        for (name, position) in &self.positions[i] {
            let Some(free) = self.partitions.get_mut(name) else { continue };
            let position = *position;
            if old.cpu != new.cpu {
                if let Some(c) = old.cpu {
                    free.cpu.remove(&(c, position));
                }
                if let Some(c) = new.cpu {
                    free.cpu.insert((c, position));
                }
            }
            if old.gpu != new.gpu {
                if let Some((g, c)) = old.gpu {
                    free.gpu.remove(&(g, c, position));
                }
                if let Some((g, c)) = new.gpu {
                    free.gpu.insert((g, c, position));
                }
            }
            for (gpu_type, (g, c)) in &old.gpu_type {
                if let Some(set) = free.gpu_type.get_mut(gpu_type) {
                    set.remove(&(*g, *c, position));
                }
            }
            for (gpu_type, (g, c)) in &new.gpu_type {
                free.gpu_type.entry(gpu_type.clone()).or_default().insert((*g, *c, position));
            }
        }
    }

    /// The nodes (view indexes) worth trying for a job that may use the whole partition, in
    /// best-fit order: those with enough CPUs free, and enough GPUs (of its type) free if it
    /// asks for GPUs, the fullest first (see [`best_fit_order`]). `None` when the job names or
    /// excludes nodes or has a `--constraint` (the caller then filters the partition itself,
    /// with [`eligible_nodes`]).
    pub(crate) fn candidates<'a>(
        &'a self,
        partition: &str,
        job: &Job,
        request: &PerNodeRequest,
    ) -> Option<impl Iterator<Item = usize> + Clone + 'a> {
        if job.node_filter.is_some() {
            return None;
        }
        let free = self.partitions.get(partition)?;
        // The smallest share: a node with fewer CPUs free cannot take any of the job's shares.
        let cpus = if request.exclusive { 1 } else { request.cpus(request.tasks.len().saturating_sub(1)).max(1) };
        // One typed GPU request: only nodes with a GPU of that type free.
        let typed = match request.gpus.as_slice() {
            [(Some(gpu_type), count)] if *count > 0 => Some((gpu_type.to_ascii_lowercase(), *count)),
            _ => None,
        };
        let gpus = request.n_gpus();
        let by_gpu = match &typed {
            Some((gpu_type, count)) => free.gpu_type.get(gpu_type).map(|set| set.range((*count, cpus, 0)..)),
            None if gpus > 0 => Some(free.gpu.range((gpus, cpus, 0)..)),
            None => None,
        };
        let (by_gpu, by_cpu) = match by_gpu {
            Some(range) => (Some(range.map(|&(_, _, position)| position)), None),
            None if typed.is_some() => (None, None),
            None => (None, Some(free.cpu.range((cpus, 0)..).map(|&(_, position)| position))),
        };
        let positions = by_gpu.into_iter().flatten().chain(by_cpu.into_iter().flatten());
        Some(positions.map(|position| free.order[position]))
    }
}

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

/// Recomputes the priority of every pending job that may start (not held, begin time come; see
/// [`crate::model::state::Jobs::ready`]): the best over its partitions.
pub(crate) fn update_priorities(state: &mut State, context: &priority::Context, now: UnixTime) {
    let mut updates = Vec::new();
    for job in state.jobs.ready() {
        let best = job
            .candidates
            .iter()
            .filter_map(|name| state.config.partitions.iter().find(|p| &p.name == name))
            .map(|p| priority::priority(&context.config, &context.factors(state, job, p, now), job.info.nice))
            .max()
            .unwrap_or(1);
        if best != job.info.priority {
            updates.push((job.info.job_id, best));
        }
    }
    for (job_id, value) in updates {
        if let Some(job) = state.jobs.get_mut(&job_id) {
            job.info.priority = value;
        }
    }
}

/// One scheduling pass. Returns what it decided (starts, preemptions); priorities and pending
/// reasons are updated in place.
pub(crate) fn schedule(state: &mut State, now: UnixTime) -> Decisions {
    // The pass walks the ready jobs only: held jobs and jobs waiting for their begin time are
    // filed elsewhere by the job table, so a deep held queue costs a pass nothing. Bringing the
    // tallies of what runs (for limits and quotas) up to date refiles the table first.
    let tally = state.tally(now);
    let (sums, quota_use) = (tally.sums.clone(), tally.quotas.clone());
    for job_id in state.jobs.take_deferred() {
        set_reason(state, job_id, "BeginTime");
    }
    let context = priority::Context::new(state);
    update_priorities(state, &context, now);
    let tier = |job: &Job| {
        job.candidates
            .iter()
            .filter_map(|n| state.config.partitions.iter().find(|p| &p.name == n))
            .map(|p| p.priority_tier)
            .max()
    };
    // Preemptors first (jobs that ask only for what is left of their team's guarantee), as in
    // Slurm's order; then partition tier, priority, submit time, job id.
    let initial_quotas = Quotas::of(quota_use);
    let preemptor = |job: &Job, asked: &tres::Tres| {
        !state.config.quotas.is_empty()
            && job.candidates.iter().any(|name| initial_quotas.may_reclaim(&state.config, job, name, asked))
    };
    // Each ready job's request and TRES, worked out once for the pass.
    let mut requests: Vec<Option<(PerNodeRequest, tres::Tres)>> = Vec::new();
    let mut order: Vec<(bool, u32, u32, UnixTime, JobId, usize)> = state
        .jobs
        .ready()
        .map(|j| {
            let request = PerNodeRequest::from_spec(&j.spec);
            let asked = tres::of_request(&request);
            let first = preemptor(j, &asked);
            requests.push(Some((request, asked)));
            (first, tier(j).unwrap_or(0), j.info.priority, j.info.submit_time, j.info.job_id, requests.len() - 1)
        })
        .collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)).then(a.3.cmp(&b.3)).then(a.4.cmp(&b.4)));

    let mut views: Vec<NodeView> = state.nodes.iter().map(NodeView::from).collect();
    let mut running = Running::of(sums);
    // Victims that ended no longer need tracking.
    let still_running: Vec<JobId> =
        state.preempting.keys().copied().filter(|j| state.jobs.get(j).is_some_and(|j| j.alloc.is_some())).collect();
    state.preempting.retain(|victim, _| still_running.contains(victim));
    // What was freed for a reclaiming job stays kept for it until it starts or its hold's
    // deadline passes: nothing else is placed there meanwhile.
    state.reclaim_holds.retain(|job_id, hold| {
        hold.until >= now && state.jobs.get(job_id).is_some_and(|j| j.info.state() == JobState::Pending)
    });
    let mut holds: HashMap<JobId, super::preempt::Taken> = state
        .reclaim_holds
        .iter()
        .map(|(job_id, hold)| (*job_id, super::preempt::take_free(&mut views, &state.node_index, &hold.alloc)))
        .collect();
    let mut planner: Option<super::preempt::Planner> = None;
    // The classification the order was built with: nothing ran or ended since.
    let mut quotas = initial_quotas;
    // What reclaims freed beyond their jobs' need, kept for their teams' next jobs.
    let mut team_holds = super::spare::TeamHolds::take(state, &quotas, &mut views, now);
    // When the running jobs end: built at the pass's first planned reservation (a pass that
    // plans none pays nothing for it), with the ends of the jobs started before then.
    let mut timeline: Option<backfill::Timeline> = None;
    let mut started_ends: Vec<(UnixTime, Allocation)> = Vec::new();
    // The reservations of the last pass: each job that still waits keeps its own if it holds.
    // A multi-node job's is kept against single-node jobs ranked above it too: they plan and
    // start around it (one ranked above that holds none cannot take its room as its nodes
    // drain), as it is in the pass's reservations from the start and leaves them only while its
    // own job is placed and planned afresh. Single-node jobs find room wherever a node frees, so
    // theirs stay in priority order, which is what fair share steers by; so do multi-node jobs
    // among themselves (one ranked above does not see it), or a wide job ranked first would
    // wait behind every lower one that planned before it was submitted.
    let mut held = std::mem::take(&mut state.reservations);
    let mut reservations = Reservations::default();
    // (A reclaiming job's room is its hold, already taken off the views.)
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
        if kept.nodes().all(|n| state.node_index.get(n).is_some_and(|&i| views[i].usable())) {
            reservations.push_kept(kept, &state.node_index);
        }
    }
    let max_tests = state.config.priority.backfill_max_job_test as usize;
    let mut tested = 0usize;
    let mut blocked: HashSet<String> = HashSet::new();
    let mut decisions = Decisions::default();
    let mut stats = crate::model::state::PassStats { considered: order.len(), ..Default::default() };
    let shortcuts = state.pass_shortcuts;
    let mut free = FreeIndex::new(state, &views);
    let mut pool_free = PoolFree::new(state, &views);
    let mut no_room: HashSet<Shape> = HashSet::new();
    let mut never_fits: HashSet<Shape> = HashSet::new();
    // Jobs change state only after the pass (its starts), so one lookup serves every job.
    let mut dependencies = super::dependency::Lookup::for_pass(state);
    let tree = super::topology::Tree::of(state);
    for (_, _, _, _, job_id, k) in order {
        for i in team_holds.retake(state, &mut views) {
            free.update(i, &views[i]);
            pool_free.update(i, &views[i]);
        }
        let job = &state.jobs[&job_id];
        let held_before = held.remove(&job_id);
        if held_before.is_some() {
            reservations.remove(job_id, &state.node_index);
        }
        if job.spec.begin_time.is_some_and(|t| t > now) {
            set_reason(state, job_id, "BeginTime");
            continue;
        }
        if let Err(reason) = super::dependency::eligibility(state, &mut dependencies, job, now) {
            set_reason(state, job_id, reason);
            continue;
        }
        let Some((request, asked)) = requests[k].take() else { continue };
        // A multi-node job ranked above a kept reservation plans and starts as if it were not
        // there: among multi-node jobs priority decides, and the one below is planned afresh.
        reservations.ignore_kept(request.n_nodes > 1);
        // Its own hold is room for it, which jobs of its shape did not have earlier in the pass.
        let lifted = holds.remove(&job_id);
        let unheld = lifted.is_some();
        if let Some(taken) = lifted {
            super::preempt::give_back(&mut views, &taken);
            for (i, _) in &taken {
                free.update(*i, &views[*i]);
                pool_free.update(*i, &views[*i]);
            }
        }
        if let Err(reason) = running.check_reason(&state.config, job, &asked) {
            // A job held back by a limit does not hold back the jobs behind it (as in Slurm).
            set_reason(state, job_id, &reason);
            continue;
        }
        // What reclaims freed for its team is room for it too.
        let lent = team_holds.lend(state, &quotas, &mut views, job_id, &asked);
        for &i in &lent {
            free.update(i, &views[i]);
            pool_free.update(i, &views[i]);
        }
        let unheld = unheld || team_holds.lending();
        let mut outcome = None;
        let mut node_limited = false;
        let mut first_in_line = false;
        let mut quota_block = None;
        let mut open_partitions = 0;
        for name in &job.candidates {
            let Some(partition) = state.config.partitions.iter().find(|p| &p.name == name) else { continue };
            if partition.max_nodes.is_some_and(|max| request.n_nodes > max) {
                node_limited = true;
                continue;
            }
            // A borrower starts only where it delays no reservation, those of owners waiting
            // inside their guarantee included: what they need stays theirs, the rest is used.
            let borrows = match quotas.check(state, &pool_free, job, partition, &asked) {
                Ok(borrows) => borrows,
                Err(limit) => {
                    quota_block = Some(limit);
                    continue;
                }
            };
            open_partitions += 1;
            first_in_line |= !blocked.contains(name);
            // A job of the same shape found no room earlier in this pass: nodes only fill up
            // during a pass, so this one finds none either.
            let shape = Shape::of(name, job, &request);
            if shortcuts && !unheld && no_room.contains(&shape) {
                stats.shape_skips += 1;
                continue;
            }
            let limit = backfill::time_limit_secs(job, partition);
            let place = |nodes: Vec<usize>| {
                backfill::place_around(&views, nodes, partition, &request, &reservations, now, limit)
            };
            let placed = match free.candidates(name, job, &request).filter(|_| shortcuts) {
                // A multi-node job goes under the lowest switch that can hold it.
                Some(candidates) => match &tree {
                    Some(tree) if request.n_nodes > 1 => tree.place(request.n_nodes, candidates.collect(), place),
                    _ => backfill::place_around(&views, candidates, partition, &request, &reservations, now, limit),
                },
                None => {
                    let nodes = best_fit_order(&views, eligible_nodes(state, job, partition), &request);
                    match &tree {
                        Some(tree) => tree.place(request.n_nodes, nodes, place),
                        None => place(nodes),
                    }
                }
            };
            match placed {
                backfill::Placement::Placed(alloc) => {
                    outcome = Some((Start { job_id, partition: name.clone(), alloc }, borrows));
                    break;
                }
                backfill::Placement::NoRoom => {
                    no_room.insert(shape);
                }
                backfill::Placement::WouldDelay => {}
            }
        }
        if outcome.is_none()
            && open_partitions == 0
            && let Some(limit) = quota_block
        {
            set_reason(state, job_id, &limit.reason);
            continue;
        }
        if outcome.is_none() {
            let decided = &mut decisions.preemptions;
            if reclaim(
                state,
                &views,
                &holds,
                &mut planner,
                &quotas,
                job_id,
                &request,
                &asked,
                &mut reservations,
                decided,
                now,
            ) {
                if let Some(hold) = state.reclaim_holds.get(&job_id) {
                    let taken = super::preempt::take_free(&mut views, &state.node_index, &hold.alloc);
                    for (i, _) in &taken {
                        free.update(*i, &views[*i]);
                        pool_free.update(*i, &views[*i]);
                    }
                    holds.insert(job_id, taken);
                }
                set_reason(state, job_id, "Resources");
                continue;
            }
            state.reclaim_holds.remove(&job_id);
        }
        match outcome {
            Some((start, borrows)) => {
                let job = &state.jobs[&job_id];
                let partition = state.config.partitions.iter().find(|p| p.name == start.partition);
                let limit = partition.map_or(backfill::UNLIMITED, |p| backfill::time_limit_secs(job, p));
                for share in &start.alloc.nodes {
                    if let Some(&i) = state.node_index.get(&share.node) {
                        views[i].take(share);
                        free.update(i, &views[i]);
                        pool_free.update(i, &views[i]);
                    }
                }
                match timeline.as_mut() {
                    Some(timeline) => timeline.add(now.saturating_add(limit), &start.alloc, &state.node_index),
                    None => started_ends.push((now.saturating_add(limit), start.alloc.clone())),
                }
                if let Some(planner) = planner.as_mut() {
                    planner.started(state, &start.alloc);
                }
                state.reclaim_holds.remove(&job_id);
                running.add(&state.config, job, &asked);
                quotas.add(&state.config, job, &start.partition, &asked, borrows);
                state.hold(&start.alloc);
                decisions.starts.push(start);
            }
            None => {
                let reason = if node_limited && !first_in_line {
                    "PartitionNodeLimit"
                } else if first_in_line {
                    "Resources"
                } else {
                    "Priority"
                };
                // A job that held a reservation is always planned (it keeps it unless an
                // earlier start is possible or its plan broke); others while the pass's budget
                // of jobs tested lasts. Past the pass's planning time, a held reservation whose
                // start is still to come and whose nodes are up is carried over as it was, and
                // no new one is planned: the next pass goes on. A replay bounds the jobs planned
                // (held ones included) by count instead (`planning_jobs`).
                let in_time = stats.backfill < state.planning_time && tested < state.planning_jobs;
                if max_tests > 0 && (held_before.is_some() || tested < max_tests) && in_time {
                    tested += 1;
                    let began = std::time::Instant::now();
                    let job = &state.jobs[&job_id];
                    let timeline = timeline.get_or_insert_with(|| {
                        let mut timeline = backfill::Timeline::new(state, now);
                        timeline.gated = shortcuts;
                        for (end, alloc) in started_ends.drain(..) {
                            timeline.add(end, &alloc, &state.node_index);
                        }
                        timeline
                    });
                    let planned = backfill::plan(
                        state,
                        job,
                        &request,
                        &views,
                        timeline,
                        &reservations,
                        held_before.as_ref(),
                        shortcuts.then_some(&mut never_fits),
                        now,
                    );
                    if let Some(reservation) = planned {
                        reservations.push(reservation, &state.node_index);
                    }
                    stats.backfill += began.elapsed();
                } else if let Some(old) = held_before.filter(|r| {
                    max_tests > 0
                        && r.start > now
                        && r.nodes().all(|n| state.node_index.get(n).is_some_and(|&i| views[i].usable()))
                }) {
                    stats.carried += 1;
                    reservations.push(old, &state.node_index);
                }
                let candidates = state.jobs[&job_id].candidates.clone();
                blocked.extend(candidates);
                set_reason(state, job_id, reason);
            }
        }
    }
    state.reservations = reservations.into_map();
    state.last_pass = stats;
    decisions
}

/// Reclaims a guarantee for a job that cannot start: when the job asks only for what is left of
/// its team's guarantee in a partition, the pass's reclaim planner finds room for it in what is
/// free or being freed, or preempts the cheapest set of other teams' borrowed jobs that makes
/// room (see `super::preempt`), adding the new victims to `decided`. The job then holds that
/// room across passes and reserves its nodes in this one (start: now), so nothing else takes
/// them. True when the job now waits for preemptions (new or already under way).
#[allow(clippy::too_many_arguments)]
fn reclaim(
    state: &mut State,
    views: &[NodeView],
    holds: &HashMap<JobId, super::preempt::Taken>,
    planner: &mut Option<super::preempt::Planner>,
    quotas: &Quotas,
    job_id: JobId,
    request: &PerNodeRequest,
    asked: &tres::Tres,
    reservations: &mut Reservations,
    decided: &mut Vec<Preemption>,
    now: UnixTime,
) -> bool {
    let job = &state.jobs[&job_id];
    for name in &job.candidates {
        let Some(partition) = state.config.partitions.iter().find(|p| &p.name == name) else { continue };
        if !quotas.may_reclaim(&state.config, job, name, asked) {
            continue;
        }
        let Some(own) = super::quota::quota_of(&state.config, &job.info.account, name) else { continue };
        let limit = backfill::time_limit_secs(job, partition);
        // Built at the pass's first reclaim: a pass without one pays nothing for it.
        let planner = planner.get_or_insert_with(|| super::preempt::Planner::new(state, views, holds, quotas));
        let nodes = eligible_nodes(state, job, partition);
        let Some((victims, alloc)) = planner.plan(state, quotas, own, partition, &nodes, request, asked, job_id, now)
        else {
            continue;
        };
        // The hold lasts until the slowest victim, its own earlier ones included, is gone.
        let earlier = state.reclaim_holds.get(&job_id).map_or(now, |h| h.until);
        let grace = victims.iter().map(|v| super::preempt::grace_secs(state, *v)).max();
        let until = grace.map_or(earlier, |g| earlier.max(now + g + super::preempt::HOLD_MARGIN));
        let until = until.max(now + i64::from(state.config.kill_wait) + super::preempt::HOLD_MARGIN);
        // What the victims free beyond this job stays its team's while the team is owed it.
        if !victims.is_empty() {
            let account = state.jobs[&job_id].info.account.clone();
            let team = Some(own);
            let holding: u64 = state
                .team_holds
                .iter()
                .filter(|h| h.partition == *name && quota_of(&state.config, &h.account, name) == team)
                .flat_map(|h| &h.alloc.nodes)
                .map(|n| n.gpus.len() as u64)
                .sum();
            let cap = super::spare::owed_gpus(state, quotas, &account, name, asked).saturating_sub(holding);
            if let Some(spare) = super::spare::spare_of(state, &victims, &alloc, cap) {
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
            decided.push(Preemption { victim, for_job: job_id });
        }
        let end = now.saturating_add(limit);
        let reservation =
            Reservation { job_id, partition: name.clone(), start: now, end, alloc: alloc.clone(), since: now };
        reservations.push(reservation, &state.node_index);
        state.reclaim_holds.insert(job_id, crate::model::state::Hold { alloc, until });
        return true;
    }
    false
}

fn set_reason(state: &mut State, job_id: JobId, reason: &str) {
    // Looked at first: a job handed out mutably is filed again at the next pass.
    if state.jobs.get(&job_id).is_some_and(|j| j.info.reason != reason)
        && let Some(job) = state.jobs.get_mut(&job_id)
    {
        job.info.reason = reason.to_owned();
    }
}

#[cfg(test)]
mod tests;
