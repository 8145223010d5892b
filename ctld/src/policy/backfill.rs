//! Backfill: a view of node capacity the pass can change and roll forward in time, each blocked
//! job's reservation (the earliest time enough nodes free up, from the time limits of the jobs
//! that run), and the rule that lets a lower-priority job start ahead: it avoids the reserved
//! nodes, or it ends before the reservation starts.

use crate::model::request::PerNodeRequest;
use crate::model::state::{Allocation, Job, Node, NodeAllocation, State};
use crate::policy::scheduler::place;
use drover_shared::UnixTime;
use drover_shared::config::PartitionConfig;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobId, JobState};
use drover_shared::node::GpuDevice;
use std::collections::{HashMap, HashSet};

/// What an unlimited time limit counts as when planning (Slurm uses a year as well).
pub(crate) const UNLIMITED: i64 = 365 * 86400;

/// A node's capacity as the pass sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeView {
    pub(crate) name: String,
    pub(crate) up: bool,
    pub(crate) cpus: u32,
    pub(crate) real_memory_mb: u64,
    pub(crate) gpus: Vec<GpuDevice>,
    pub(crate) cpus_alloc: u32,
    pub(crate) mem_alloc_mb: u64,
    pub(crate) gpus_alloc: Vec<u32>,
}

impl From<&Node> for NodeView {
    fn from(node: &Node) -> NodeView {
        NodeView {
            name: node.config.name.clone(),
            up: node.usable(),
            cpus: node.cpus,
            real_memory_mb: node.real_memory_mb,
            gpus: node.gpus.clone(),
            cpus_alloc: node.cpus_alloc,
            mem_alloc_mb: node.mem_alloc_mb,
            gpus_alloc: node.gpus_alloc.clone(),
        }
    }
}

impl NodeView {
    /// The node's shape with nothing allocated.
    pub(crate) fn empty(node: &Node) -> NodeView {
        NodeView { cpus_alloc: 0, mem_alloc_mb: 0, gpus_alloc: Vec::new(), up: true, ..NodeView::from(node) }
    }

    pub(crate) fn usable(&self) -> bool {
        self.up
    }

    pub(crate) fn take(&mut self, share: &NodeAllocation) {
        self.cpus_alloc += share.cpus;
        self.mem_alloc_mb += share.mem_mb;
        self.gpus_alloc.extend(&share.gpus);
    }

    pub(crate) fn release(&mut self, share: &NodeAllocation) {
        self.cpus_alloc = self.cpus_alloc.saturating_sub(share.cpus);
        self.mem_alloc_mb = self.mem_alloc_mb.saturating_sub(share.mem_mb);
        self.gpus_alloc.retain(|g| !share.gpus.contains(g));
    }
}

/// A blocked job's planned start and the nodes it will use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub(crate) job_id: JobId,
    pub(crate) start: UnixTime,
    pub(crate) nodes: HashSet<String>,
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

/// When the running jobs end, by their time limits.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timeline {
    ends: Vec<(UnixTime, Allocation)>,
    /// Whether `ends` is in end order (sorting waits until a reservation is planned).
    sorted: bool,
    /// Whether planning may skip the ends that free no node the job could use.
    pub(crate) gated: bool,
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
            timeline.add(end, alloc);
        }
        timeline
    }

    pub(crate) fn add(&mut self, end: UnixTime, alloc: &Allocation) {
        self.ends.push((end, alloc.clone()));
        self.sorted = false;
    }

    /// The earliest time the job fits on `nodes` of `views` as running jobs end, avoiding
    /// nodes other reservations hold; `None` if it never does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn earliest(
        &mut self,
        views: &[NodeView],
        node_index: &HashMap<String, usize>,
        nodes: &[usize],
        partition: &PartitionConfig,
        request: &PerNodeRequest,
        reservations: &[Reservation],
        job_id: JobId,
    ) -> Option<Reservation> {
        if !self.sorted {
            // Stable: jobs ending at the same time keep their order.
            self.ends.sort_by_key(|(end, _)| *end);
            self.sorted = true;
        }
        let mut future = views.to_vec();
        let avoid: HashSet<String> = reservations.iter().flat_map(|r| r.nodes.iter().cloned()).collect();
        let mut eligible = vec![false; views.len()];
        for &i in nodes {
            eligible[i] = !avoid.contains(&views[i].name);
        }
        // The smallest share a node of the job may get: a node that cannot take it cannot take any.
        let smallest = request.tasks.len().saturating_sub(1);
        for (k, (end, alloc)) in self.ends.iter().enumerate() {
            // The first end is always tried (the job may already fit on these nodes if it was
            // held back elsewhere); after that, only a node that was just freed can make it fit.
            let mut changed = k == 0 || !self.gated;
            for share in &alloc.nodes {
                if let Some(&i) = node_index.get(&share.node) {
                    future[i].release(share);
                    changed |= eligible[i] && request.place_on(&future[i], smallest, partition).is_some();
                }
            }
            if !changed {
                continue;
            }
            if let Some(found) = place(&future, nodes.iter().copied(), &avoid, partition, request) {
                let nodes = found.nodes.iter().map(|n| n.node.clone()).collect();
                return Some(Reservation { job_id, start: *end, nodes });
            }
        }
        None
    }
}

/// Where a job can go now.
#[derive(Debug)]
pub(crate) enum Placement {
    /// Here, without delaying any reservation.
    Placed(Allocation),
    /// Nowhere, even ignoring reservations (cacheable for the rest of the pass).
    NoRoom,
    /// Only where it would delay a reservation.
    WouldDelay,
}

/// Places a job now without delaying any reservation: first away from reserved nodes; failing
/// that, anywhere, if it ends (by its time limit) before every reservation it touches begins.
pub(crate) fn place_around<I: IntoIterator<Item = usize> + Clone>(
    views: &[NodeView],
    nodes: I,
    partition: &PartitionConfig,
    request: &PerNodeRequest,
    reservations: &[Reservation],
    now: UnixTime,
    limit: i64,
) -> Placement {
    let reserved: HashSet<String> = reservations.iter().flat_map(|r| r.nodes.iter().cloned()).collect();
    if let Some(alloc) = place(views, nodes.clone(), &reserved, partition, request) {
        return Placement::Placed(alloc);
    }
    if reserved.is_empty() {
        return Placement::NoRoom;
    }
    let Some(alloc) = place(views, nodes, &HashSet::new(), partition, request) else { return Placement::NoRoom };
    let end = now.saturating_add(limit);
    let delays = reservations.iter().any(|r| end > r.start && alloc.nodes.iter().any(|n| r.nodes.contains(&n.node)));
    if delays { Placement::WouldDelay } else { Placement::Placed(alloc) }
}
