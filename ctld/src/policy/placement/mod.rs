//! Placement: what the scheduling pass, backfill, reclaim and `drover why` share to put a job on
//! nodes. A node's capacity as a pass sees it ([`NodeView`]), whether a job's per-node share fits
//! a node now or ever, the nodes a job may use, the order best fit tries them in, the first nodes
//! that take every share, and the shape two jobs share when they fit alike. It holds no rule of
//! its own about who goes first: that is the pass's (`scheduler.rs`) and backfill's.

pub(crate) mod free;

use crate::model::request::PerNodeRequest;
use crate::model::state::{Allocation, Job, Node, NodeAllocation, State};
use drover_shared::config::PartitionConfig;
use drover_shared::node::GpuDevice;
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

/// A node's capacity as the pass sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeView {
    pub(crate) name: String,
    pub(crate) up: bool,
    pub(crate) cpus: u32,
    pub(crate) real_memory_mb: u64,
    pub(crate) gpus: std::sync::Arc<[GpuDevice]>,
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
            gpus: std::sync::Arc::clone(&node.gpus),
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
        self.release_parts(share.cpus, share.mem_mb, &share.gpus);
    }

    /// Gives back CPUs, memory and the GPUs of `gpus`.
    pub(crate) fn release_parts(&mut self, cpus: u32, mem_mb: u64, gpus: &[u32]) {
        self.cpus_alloc = self.cpus_alloc.saturating_sub(cpus);
        self.mem_alloc_mb = self.mem_alloc_mb.saturating_sub(mem_mb);
        self.gpus_alloc.retain(|g| !gpus.contains(g));
    }
}

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
    let all = match state.partition_nodes(&partition.name) {
        Some(all) => all,
        // A partition of another config than the state's (none is passed today).
        None => {
            listed = partition.nodes.iter().filter_map(|n| state.node_index().get(n).copied()).collect::<Vec<_>>();
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
    place_with(nodes, partition, request, |i| Cow::Borrowed(&views[i]))
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
            request.fits_config(&NodeView::empty(&state.nodes()[*i]), (*k).min(request.tasks.len() - 1), partition)
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

/// Places a job on the first nodes of `nodes` (view indexes, in the order given) that take a
/// share, each node seen through `view`.
pub(crate) fn place_with<'a>(
    nodes: impl IntoIterator<Item = usize>,
    partition: &PartitionConfig,
    request: &PerNodeRequest,
    view: impl Fn(usize) -> Cow<'a, NodeView>,
) -> Option<Allocation> {
    let mut shares = Vec::new();
    let mut chosen = Vec::new();
    for i in nodes {
        if let Some(share) = request.place_on(&view(i), shares.len(), partition) {
            shares.push(share);
            chosen.push(i);
            if shares.len() == request.n_nodes as usize {
                // Chosen in best-fit order, held in node-table order (the batch host first, the
                // node list as Slurm prints it); shares that differ by position keep the order
                // they were chosen in if they fit no other way.
                if !chosen.is_sorted() {
                    chosen.sort_unstable();
                    let sorted: Option<Vec<NodeAllocation>> =
                        chosen.iter().enumerate().map(|(k, &i)| request.place_on(&view(i), k, partition)).collect();
                    if let Some(sorted) = sorted {
                        return Some(Allocation { nodes: sorted });
                    }
                }
                return Some(Allocation { nodes: shares });
            }
        }
    }
    None
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
