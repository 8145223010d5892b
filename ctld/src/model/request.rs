//! What a job asks of each node it runs on, derived once from its spec: the node count, tasks
//! per node (block distribution), CPUs per task, memory and GPUs by type. The scheduler places
//! these requests (its placement methods are in `policy/scheduler.rs`); TRES and accounting count
//! them.

use drover_shared::grammar::gres::GresRequest;
use drover_shared::job::{JobSpec, MemRequest};

/// A job's memory request, hashable so a request can key the pass's shape cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mem(pub(crate) MemRequest);

impl std::hash::Hash for Mem {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self.0 {
            MemRequest::PerNode(mb) => (0u8, mb).hash(state),
            MemRequest::PerCpu(mb) => (1u8, mb).hash(state),
            MemRequest::PerGpu(mb) => (2u8, mb).hash(state),
        }
    }
}

/// What one job asks of each node it runs on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PerNodeRequest {
    pub(crate) n_nodes: u32,
    /// Tasks on each node (block distribution of `-n` over the nodes).
    pub(crate) tasks: Vec<u32>,
    pub(crate) cpus_per_task: u32,
    /// `-O/--overcommit`: each node holds one task's CPUs, whatever its task count.
    pub(crate) overcommit: bool,
    pub(crate) exclusive: bool,
    pub(crate) mem: Option<Mem>,
    /// GPUs per node, by type (`None` = any type).
    pub(crate) gpus: Vec<(Option<String>, u32)>,
}

fn gpu_requests(requests: &[GresRequest], divide_by: u32) -> Vec<(Option<String>, u32)> {
    requests
        .iter()
        .filter(|g| g.name == "gpu")
        .map(|g| {
            let count = u32::try_from(g.count).unwrap_or(u32::MAX);
            (g.gres_type.clone(), count.div_ceil(divide_by.max(1)))
        })
        .collect()
}

impl PerNodeRequest {
    /// Derives the per-node request from a job spec.
    pub(crate) fn from_spec(spec: &JobSpec) -> PerNodeRequest {
        let n_nodes = spec.nodes_min.unwrap_or(1).max(1);
        let ntasks = spec
            .ntasks
            .unwrap_or_else(|| spec.ntasks_per_node.map_or(n_nodes, |t| t.saturating_mul(n_nodes)))
            .max(n_nodes);
        let base = ntasks / n_nodes;
        let extra = ntasks % n_nodes;
        let tasks = (0..n_nodes).map(|i| base + u32::from(i < extra)).collect();
        let mut gpus = gpu_requests(&spec.gres_per_node, 1);
        gpus.extend(gpu_requests(&spec.gpus, n_nodes));
        if gpus.is_empty() && !spec.gpus_per_task.is_empty() {
            gpus = gpu_requests(&spec.gpus_per_task, 1)
                .into_iter()
                .map(|(t, c)| (t, c.saturating_mul(ntasks.div_ceil(n_nodes))))
                .collect();
        }
        PerNodeRequest {
            n_nodes,
            tasks,
            cpus_per_task: spec.cpus_per_task.unwrap_or(1).max(1),
            overcommit: spec.overcommit,
            exclusive: spec.exclusive,
            mem: spec.mem.map(Mem),
            gpus,
        }
    }

    pub(crate) fn n_gpus(&self) -> u32 {
        self.gpus.iter().map(|(_, c)| c).sum()
    }

    /// CPUs wanted on the `i`-th node.
    pub(crate) fn cpus(&self, i: usize) -> u32 {
        if self.overcommit {
            return self.cpus_per_task;
        }
        // Saturating: a request of 2³¹ tasks × 2 CPUs must not wrap around to one that fits.
        self.tasks[i].saturating_mul(self.cpus_per_task)
    }

    /// CPUs wanted on all the nodes together.
    pub(crate) fn total_cpus(&self) -> u32 {
        (0..self.tasks.len()).fold(0u32, |sum, i| sum.saturating_add(self.cpus(i)))
    }

    pub(crate) fn mem_mb(&self, cpus: u32, node_mem: u64, default_mem_per_cpu: Option<u64>) -> u64 {
        match self.mem.map(|m| m.0) {
            Some(MemRequest::PerNode(0)) => node_mem,
            Some(MemRequest::PerNode(mb)) => mb,
            Some(MemRequest::PerCpu(mb)) => mb.saturating_mul(u64::from(cpus)),
            Some(MemRequest::PerGpu(mb)) => mb.saturating_mul(u64::from(self.n_gpus())),
            None => default_mem_per_cpu.map_or(0, |mb| mb.saturating_mul(u64::from(cpus))),
        }
    }
}
