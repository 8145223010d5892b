//! Backfill: a view of node capacity the pass can change and roll forward in time, each blocked
//! job's reservation (the earliest time its resources free up, from the time limits of the jobs
//! that run, on the nodes that fit it best then), and the rule that lets a lower-priority job
//! start ahead: it leaves free, on every node, what the reservations that overlap its run (by its
//! time limit) hold there. A reservation holds CPUs, memory and GPUs on named nodes from its
//! start to the end of the job's time limit; reservations outlive the pass (the core keeps them
//! in `State::reservations`) and the next pass keeps each one unless an earlier start is possible
//! or its plan no longer holds (a node went down, a higher-priority job took the room).

use crate::model::request::PerNodeRequest;
pub(crate) use crate::model::state::Reservation;
use crate::model::state::{Allocation, Job, State};
use crate::policy::placement::{NodeView, Placement, Shape, eligible_nodes, fit_key, place_with};
use drover_shared::UnixTime;
use drover_shared::config::PartitionConfig;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobId, JobState};
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};

/// What an unlimited time limit counts as when planning (Slurm uses a year as well).
pub(crate) const UNLIMITED: i64 = 365 * 86400;

/// The reservations of a pass, each filed under the nodes (view indexes) it holds.
#[derive(Debug, Default)]
pub(crate) struct Reservations {
    list: Vec<Reservation>,
    by_node: HashMap<usize, Vec<usize>>,
    /// Job → its reservation's index in `list`.
    by_job: HashMap<JobId, usize>,
    /// The reservations pushed ahead of their job's turn (`push_kept`), by index in `list`.
    kept: HashSet<usize>,
    /// Whether the reservations in `kept` are left out (while a multi-node job is placed and
    /// planned: among multi-node jobs, priority order decides).
    ignore_kept: bool,
}

impl Reservations {
    /// Pushes a reservation kept from the last pass ahead of its job's turn: jobs ranked above
    /// it plan and start around it, multi-node ones aside (see `ignore_kept`).
    pub(crate) fn push_kept(&mut self, reservation: Reservation, node_index: &crate::model::state::NodeIndex) {
        self.kept.insert(self.list.len());
        self.push(reservation, node_index);
    }

    /// Leaves the reservations pushed by `push_kept` (of jobs ranked below the one being placed,
    /// as each leaves them at its own turn) out of every question, or takes them back in.
    pub(crate) fn ignore_kept(&mut self, ignore: bool) {
        self.ignore_kept = ignore;
    }

    pub(crate) fn push(&mut self, reservation: Reservation, node_index: &crate::model::state::NodeIndex) {
        let k = self.list.len();
        for node in reservation.nodes() {
            if let Some(&i) = node_index.get(node) {
                self.by_node.entry(i).or_default().push(k);
            }
        }
        self.by_job.insert(reservation.job_id, k);
        self.list.push(reservation);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }

    /// Takes a job's reservation out (its job is placed and planned afresh).
    pub(crate) fn remove(&mut self, job_id: JobId, node_index: &crate::model::state::NodeIndex) {
        let Some(k) = self.by_job.remove(&job_id) else { return };
        for node in self.list[k].nodes() {
            let Some(&i) = node_index.get(node) else { continue };
            if let Some(list) = self.by_node.get_mut(&i) {
                list.retain(|&x| x != k);
                if list.is_empty() {
                    self.by_node.remove(&i);
                }
            }
        }
        // Left in the list without nodes (indexes stay valid), dropped by `into_map`.
        self.list[k].alloc.nodes.clear();
    }

    /// The reservations by job, for the next pass and `drover why`.
    pub(crate) fn into_map(self) -> HashMap<JobId, Reservation> {
        self.list.into_iter().filter(|r| !r.alloc.nodes.is_empty()).map(|r| (r.job_id, r)).collect()
    }

    fn on(&self, i: usize) -> impl Iterator<Item = &Reservation> {
        let ignored = |k: usize| self.ignore_kept && self.kept.contains(&k);
        self.by_node.get(&i).into_iter().flatten().filter(move |&&k| !ignored(k)).map(|&k| &self.list[k])
    }

    /// Whether a reservation holds resources on the node at view index `i` during `[from, to)`.
    pub(crate) fn busy(&self, i: usize, from: UnixTime, to: UnixTime) -> bool {
        self.on(i).any(|r| r.overlaps(from, to))
    }

    /// The ends of the reservations on the nodes `eligible` marks, in time order.
    fn ends_on(&self, eligible: &[bool]) -> Vec<UnixTime> {
        let mut ends: Vec<UnixTime> = self
            .by_node
            .keys()
            .filter(|i| eligible.get(**i).copied().unwrap_or(false))
            .flat_map(|&i| self.on(i).map(|r| r.end))
            .collect();
        ends.sort_unstable();
        ends.dedup();
        ends
    }

    /// `view` (the node at view index `i`) with what the reservations that overlap `[from, to)`
    /// hold there taken: what a job running then may use without delaying any of them.
    pub(crate) fn overlay<'a>(&self, i: usize, view: &'a NodeView, from: UnixTime, to: UnixTime) -> Cow<'a, NodeView> {
        let mut overlapping = self.on(i).filter(|r| r.overlaps(from, to)).peekable();
        if overlapping.peek().is_none() {
            return Cow::Borrowed(view);
        }
        let mut taken = view.clone();
        for reservation in overlapping {
            for share in reservation.alloc.nodes.iter().filter(|n| n.node == view.name) {
                taken.take(share);
            }
        }
        Cow::Owned(taken)
    }
}

/// The seconds a job may run in a partition: its own limit, else the partition's default, else
/// the partition's maximum.
pub(crate) fn time_limit_secs(job: &Job, partition: &PartitionConfig) -> i64 {
    let limit = job.info.time_limit.or(partition.default_time).unwrap_or(partition.max_time);
    match limit {
        TimeLimit::Minutes(m) => i64::from(m) * 60,
        TimeLimit::Unlimited => UNLIMITED,
    }
}

/// Places a job on `nodes` as `view` shows them, best fit: when it fits at all (tried in the
/// order given), the nodes with the fewest free of what it asks for that suffice are taken.
fn place_best<'a>(
    nodes: &[usize],
    partition: &PartitionConfig,
    request: &PerNodeRequest,
    view: impl Fn(usize) -> Cow<'a, NodeView>,
) -> Option<Allocation> {
    let first = place_with(nodes.iter().copied(), partition, request, &view)?;
    let mut keyed: Vec<((u32, u32), usize)> = nodes.iter().map(|&i| (fit_key(&view(i), request), i)).collect();
    // Stable: ties keep the partition's order.
    keyed.sort_by_key(|(key, _)| *key);
    Some(place_with(keyed.into_iter().map(|(_, i)| i), partition, request, view).unwrap_or(first))
}

/// What one running job holds on one node, as the timeline keeps it.
#[derive(Debug, Clone)]
struct Share {
    /// The node's view index.
    node: usize,
    cpus: u32,
    mem_mb: u64,
    /// Its GPU indices: a range of [`Timeline::gpus`].
    gpus: std::ops::Range<usize>,
}

/// Gives `share` (its GPUs in `gpus`) back on `view`.
fn release(view: &mut NodeView, share: &Share, gpus: &[u32]) {
    view.release_parts(share.cpus, share.mem_mb, &gpus[share.gpus.clone()]);
}

/// When the running jobs end, by their time limits. Kept flat (shares by view index, GPU
/// indices in one list), so building it for a pass copies no allocation of a running job.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timeline {
    /// Each running job's end and its shares (a range of `shares`).
    ends: Vec<(UnixTime, std::ops::Range<usize>)>,
    shares: Vec<Share>,
    gpus: Vec<u32>,
    /// Whether `ends` is in end order (sorting waits until a reservation is planned).
    sorted: bool,
    /// Whether planning may skip the ends that free no node the job could use.
    pub(crate) gated: bool,
    /// View index → (end, index into `ends`) of the running jobs there, built when first needed.
    by_node: Option<Vec<Vec<(UnixTime, usize)>>>,
}

impl Timeline {
    pub(crate) fn new(state: &State, now: UnixTime) -> Timeline {
        let mut timeline = Timeline::default();
        for job in state.jobs.allocated().filter(|j| j.info.state() == JobState::Running) {
            let Some(alloc) = &job.alloc else { continue };
            let limit = match job.info.time_limit {
                Some(TimeLimit::Minutes(m)) => i64::from(m) * 60,
                _ => UNLIMITED,
            };
            let end = job.info.start_time.unwrap_or(now).saturating_add(limit).max(now);
            timeline.add(end, alloc, &state.node_index());
        }
        timeline
    }

    /// Adds a running job that ends at `end` (its shares on nodes not in `node_index` aside).
    pub(crate) fn add(&mut self, end: UnixTime, alloc: &Allocation, node_index: &crate::model::state::NodeIndex) {
        let first = self.shares.len();
        for share in &alloc.nodes {
            let Some(&node) = node_index.get(&share.node) else { continue };
            let gpus = self.gpus.len()..self.gpus.len() + share.gpus.len();
            self.gpus.extend(&share.gpus);
            self.shares.push(Share { node, cpus: share.cpus, mem_mb: share.mem_mb, gpus });
        }
        self.ends.push((end, first..self.shares.len()));
        self.sorted = false;
        self.by_node = None;
    }

    fn sort(&mut self) {
        if !self.sorted {
            // Stable: jobs ending at the same time keep their order.
            self.ends.sort_by_key(|(end, _)| *end);
            self.sorted = true;
            self.by_node = None;
        }
    }

    /// Gives `share` back on `view`.
    fn release(&self, view: &mut NodeView, share: &Share) {
        release(view, share, &self.gpus);
    }

    /// The node at view index `i` as it will be at `at`: the running jobs that end by then gone.
    fn view_at(&mut self, views: &[NodeView], i: usize, at: UnixTime) -> NodeView {
        self.sort();
        let (ends, shares, gpus) = (&self.ends, &self.shares, &self.gpus);
        let by_node = self.by_node.get_or_insert_with(|| {
            let mut by_node = vec![Vec::new(); views.len()];
            for (k, (end, range)) in ends.iter().enumerate() {
                for share in &shares[range.clone()] {
                    if let Some(list) = by_node.get_mut(share.node) {
                        list.push((*end, k));
                    }
                }
            }
            by_node
        });
        let mut view = views[i].clone();
        let on_node = by_node.get(i).map_or(&[][..], Vec::as_slice);
        for &(_, k) in on_node.iter().take_while(|(end, _)| *end <= at) {
            for share in shares[ends[k].1.clone()].iter().filter(|s| s.node == i) {
                release(&mut view, share, gpus);
            }
        }
        view
    }

    /// Whether the job fits, at `at`, on the nodes `on` (view indexes) without delaying the
    /// reservations made so far: the shares it would get there, best fit.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fits_at(
        &mut self,
        views: &[NodeView],
        on: &[usize],
        partition: &PartitionConfig,
        request: &PerNodeRequest,
        reservations: &Reservations,
        at: UnixTime,
        limit: i64,
    ) -> Option<Allocation> {
        let future: HashMap<usize, NodeView> = on.iter().map(|&i| (i, self.view_at(views, i, at))).collect();
        let end = at.saturating_add(limit);
        place_best(on, partition, request, |i| reservations.overlay(i, &future[&i], at, end))
    }

    /// The earliest time, before `before` if given, the job fits on `nodes` of `views` for
    /// `limit` seconds as running jobs end, without delaying any reservation in `reservations`;
    /// with the shares it would get then on the nodes that fit it best. `None` if it never does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn earliest(
        &mut self,
        views: &[NodeView],
        nodes: &[usize],
        partition: &PartitionConfig,
        request: &PerNodeRequest,
        reservations: &Reservations,
        limit: i64,
        before: Option<UnixTime>,
    ) -> Option<(UnixTime, Allocation)> {
        self.sort();
        let mut eligible = vec![false; views.len()];
        let mut position = vec![0; views.len()];
        for (p, &i) in nodes.iter().enumerate() {
            eligible[i] = true;
            position[i] = p;
        }
        // The smallest share a node of the job may get: a node that cannot take it cannot take any.
        let smallest = request.tasks.len().saturating_sub(1);
        // The job's nodes that can take a share (reservations aside), in the order given: those
        // with room now, and those the running jobs' ends free as time goes on. No other node
        // can take a share, so only these are tried; only the nodes freed get a view of their own.
        let mut open: BTreeSet<(usize, usize)> = nodes
            .iter()
            .filter(|&&i| request.place_on(&views[i], smallest, partition).is_some())
            .map(|&i| (position[i], i))
            .collect();
        let mut future: HashMap<usize, NodeView> = HashMap::new();
        // Times a reservation on the job's nodes gives its resources back: the job may fit then.
        let released = reservations.ends_on(&eligible);
        let mut next_release = released.iter().peekable();
        let mut k = 0;
        let mut first = true;
        loop {
            let next_end = self.ends.get(k).map(|(end, _)| *end);
            let at = match (next_end, next_release.peek()) {
                (None, None) => return None,
                (Some(end), None) => end,
                (None, Some(&&release)) => release,
                (Some(end), Some(&&release)) => end.min(release),
            };
            if before.is_some_and(|b| at >= b) {
                return None;
            }
            // The first time is always tried (the job may already fit on these nodes if it was
            // held back elsewhere); after that, only a node that was just freed can make it fit.
            let mut changed = first || !self.gated;
            first = false;
            while next_release.peek().is_some_and(|&&release| release <= at) {
                next_release.next();
                changed = true;
            }
            while let Some((_, range)) = self.ends.get(k).filter(|(end, _)| *end <= at) {
                for share in &self.shares[range.clone()] {
                    let i = share.node;
                    if !eligible.get(i).copied().unwrap_or(false) {
                        continue;
                    }
                    let view = future.entry(i).or_insert_with(|| views[i].clone());
                    self.release(view, share);
                    if request.place_on(view, smallest, partition).is_some() {
                        open.insert((position[i], i));
                        changed = true;
                    }
                }
                k += 1;
            }
            if !changed {
                continue;
            }
            let to = at.saturating_add(limit);
            let on: Vec<usize> = open.iter().map(|&(_, i)| i).collect();
            let view = |i: usize| reservations.overlay(i, future.get(&i).unwrap_or(&views[i]), at, to);
            if let Some(alloc) = place_best(&on, partition, request, view) {
                return Some((at, alloc));
            }
        }
    }
}

/// Places a job now for `limit` seconds without delaying any reservation: first on nodes no
/// reservation needs meanwhile; failing that, anywhere it leaves free what the reservations that
/// overlap its run hold on each node.
pub(crate) fn place_around<I: IntoIterator<Item = usize> + Clone>(
    views: &[NodeView],
    nodes: I,
    partition: &PartitionConfig,
    request: &PerNodeRequest,
    reservations: &Reservations,
    now: UnixTime,
    limit: i64,
) -> Placement {
    let end = now.saturating_add(limit);
    let view = |i: usize| Cow::Borrowed(&views[i]);
    if reservations.is_empty() {
        return match place_with(nodes, partition, request, view) {
            Some(alloc) => Placement::Placed(alloc),
            None => Placement::NoRoom,
        };
    }
    let clear = nodes.clone().into_iter().filter(|&i| !reservations.busy(i, now, end));
    if let Some(alloc) = place_with(clear, partition, request, view) {
        return Placement::Placed(alloc);
    }
    if place_with(nodes.clone(), partition, request, view).is_none() {
        return Placement::NoRoom;
    }
    match place_with(nodes, partition, request, |i| reservations.overlay(i, &views[i], now, end)) {
        Some(alloc) => Placement::Placed(alloc),
        None => Placement::WouldDelay,
    }
}

/// Plans the reservation of a job that cannot start now. The reservation it held after the last
/// pass is kept (its nodes, its start or now if that has come) while the job still fits there
/// then without delaying the reservations made so far in this pass; a start earlier than that, on
/// any nodes of its partitions, replaces it. Without one that holds, the earliest start over its
/// partitions, best fit on the nodes free then. `never_fits` (when the pass may take shortcuts)
/// collects the shapes that fit at no time.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan(
    state: &State,
    job: &Job,
    request: &PerNodeRequest,
    views: &[NodeView],
    timeline: &mut Timeline,
    reservations: &Reservations,
    held: Option<&Reservation>,
    mut never_fits: Option<&mut HashSet<Shape>>,
    now: UnixTime,
) -> Option<Reservation> {
    let job_id = job.info.job_id;
    let since = held.map_or(now, |h| h.since);
    let partition_of = |name: &str| state.config().partitions.iter().find(|p| p.name == name);
    let mut best: Option<Reservation> = held.and_then(|old| {
        let partition = partition_of(&old.partition).filter(|p| job.candidates.contains(&p.name))?;
        let eligible = eligible_nodes(state, job, partition);
        let on = old.nodes().map(|n| state.node_index().get(n).copied().filter(|i| eligible.contains(i)));
        let on: Vec<usize> = on.collect::<Option<_>>()?;
        let start = old.start.max(now);
        let limit = time_limit_secs(job, partition);
        let alloc = timeline.fits_at(views, &on, partition, request, reservations, start, limit)?;
        let end = start.saturating_add(limit);
        Some(Reservation { job_id, partition: old.partition.clone(), start, end, alloc, since })
    });
    for name in job.candidates.iter() {
        let Some(partition) = partition_of(name) else { continue };
        if partition.max_nodes.is_some_and(|max| request.n_nodes > max) {
            continue;
        }
        // A shape that fits at no time (as running jobs end and reservations pass) in this pass
        // never will later in it: capacity only shrinks and reservations only grow.
        let shape = Shape::of(name, job, request);
        if never_fits.as_ref().is_some_and(|cache| cache.contains(&shape)) {
            continue;
        }
        let before = best.as_ref().map(|b| b.start);
        let nodes = eligible_nodes(state, job, partition);
        let limit = time_limit_secs(job, partition);
        match timeline.earliest(views, &nodes, partition, request, reservations, limit, before) {
            Some((start, alloc)) => {
                let end = start.saturating_add(limit);
                best = Some(Reservation { job_id, partition: name.clone(), start, end, alloc, since });
            }
            None if before.is_none() => {
                if let Some(cache) = never_fits.as_deref_mut() {
                    cache.insert(shape);
                }
            }
            None => {}
        }
    }
    best
}
