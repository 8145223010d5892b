//! The free-room index of a pass: per partition, the nodes with CPUs, GPUs and GPUs of each
//! type free, ordered for best fit and kept current as the pass places jobs, so a fit search
//! starts where the room suffices instead of walking every node.

use super::NodeView;
use crate::model::request::PerNodeRequest;
use crate::model::state::{Job, State};
use std::collections::{BTreeSet, HashMap};

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
        for partition in &state.config().partitions {
            let order: Vec<usize> = partition.nodes.iter().filter_map(|n| state.node_index().get(n).copied()).collect();
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
    /// asks for GPUs, the fullest first (see [`super::best_fit_order`]). `None` when the job names or
    /// excludes nodes or has a `--constraint` (the caller then filters the partition itself,
    /// with [`super::eligible_nodes`]).
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
