//! The first scheduler: pending jobs in priority order (then submit order), placed on the first
//! nodes of their partition that have the CPUs, memory and GPUs (by count and type) free.
//! Within a partition the order is strict: once a job cannot start, later jobs of that partition
//! wait with reason `Priority` so a large job is never starved by small ones (backfill, which
//! relaxes this safely, is a later issue).

use crate::state::{Allocation, Job, Node, NodeAllocation, State};
use drover_shared::config::PartitionConfig;
use drover_shared::grammar::gres::GresRequest;
use drover_shared::job::{JobId, JobSpec, JobState, MemRequest};
use drover_shared::UnixTime;
use std::collections::HashSet;

/// What one job asks of each node it runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PerNodeRequest {
    pub(crate) n_nodes: u32,
    /// Tasks on each node (block distribution of `-n` over the nodes).
    pub(crate) tasks: Vec<u32>,
    pub(crate) cpus_per_task: u32,
    pub(crate) exclusive: bool,
    pub(crate) mem: Option<MemRequest>,
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
        let ntasks = spec.ntasks.unwrap_or_else(|| spec.ntasks_per_node.map_or(n_nodes, |t| t * n_nodes)).max(n_nodes);
        let base = ntasks / n_nodes;
        let extra = ntasks % n_nodes;
        let tasks = (0..n_nodes).map(|i| base + u32::from(i < extra)).collect();
        let mut gpus = gpu_requests(&spec.gres_per_node, 1);
        gpus.extend(gpu_requests(&spec.gpus, n_nodes));
        if gpus.is_empty() && !spec.gpus_per_task.is_empty() {
            gpus = gpu_requests(&spec.gpus_per_task, 1).into_iter().map(|(t, c)| (t, c * ntasks.div_ceil(n_nodes))).collect();
        }
        PerNodeRequest {
            n_nodes,
            tasks,
            cpus_per_task: spec.cpus_per_task.unwrap_or(1).max(1),
            exclusive: spec.exclusive,
            mem: spec.mem,
            gpus,
        }
    }

    fn n_gpus(&self) -> u32 {
        self.gpus.iter().map(|(_, c)| c).sum()
    }

    /// CPUs wanted on the `i`-th node.
    fn cpus(&self, i: usize) -> u32 {
        self.tasks[i] * self.cpus_per_task
    }

    fn mem_mb(&self, cpus: u32, node_mem: u64, default_mem_per_cpu: Option<u64>) -> u64 {
        match self.mem {
            Some(MemRequest::PerNode(0)) => node_mem,
            Some(MemRequest::PerNode(mb)) => mb,
            Some(MemRequest::PerCpu(mb)) => mb * u64::from(cpus),
            Some(MemRequest::PerGpu(mb)) => mb * u64::from(self.n_gpus()),
            None => default_mem_per_cpu.map_or(0, |mb| mb * u64::from(cpus)),
        }
    }

    /// Whether a node of this shape could ever hold the `i`-th share (ignoring what runs there).
    pub(crate) fn fits_config(&self, node: &Node, i: usize, partition: &PartitionConfig) -> bool {
        let cpus = self.cpus(i);
        cpus <= node.cpus
            && self.mem_mb(cpus, node.real_memory_mb, partition.default_mem_per_cpu) <= node.real_memory_mb
            && self.pick_gpus(node, &[]).is_some()
    }

    /// Chooses GPU indices on a node, skipping `busy` ones; `None` if not enough are free.
    fn pick_gpus(&self, node: &Node, busy: &[u32]) -> Option<Vec<u32>> {
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
    fn place_on(&self, node: &Node, i: usize, partition: &PartitionConfig) -> Option<NodeAllocation> {
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
        Some(NodeAllocation { node: node.config.name.clone(), cpus, mem_mb, gpus, tasks: self.tasks[i] })
    }
}

/// The nodes a job may use in a partition: the partition's, minus `-x`, restricted by `-w`.
fn eligible_nodes<'a>(state: &'a State, job: &Job, partition: &'a PartitionConfig) -> Vec<&'a Node> {
    let parse = |list: &Option<String>| {
        list.as_deref().and_then(|l| drover_shared::hostlist::expand(l).ok()).map(|v| v.into_iter().collect::<HashSet<_>>())
    };
    let exclude = parse(&job.spec.exclude).unwrap_or_default();
    let required = parse(&job.spec.nodelist);
    partition
        .nodes
        .iter()
        .filter(|n| !exclude.contains(*n))
        .filter(|n| required.as_ref().is_none_or(|r| r.contains(*n)))
        .filter_map(|n| state.node_index.get(n).map(|&i| &state.nodes[i]))
        .collect()
}

/// Tries to place a job in one partition now.
fn place(state: &State, job: &Job, partition: &PartitionConfig, request: &PerNodeRequest) -> Option<Allocation> {
    let mut shares = Vec::new();
    for node in eligible_nodes(state, job, partition) {
        let i = shares.len();
        if let Some(share) = request.place_on(node, i, partition) {
            shares.push(share);
            if shares.len() == request.n_nodes as usize {
                return Some(Allocation { nodes: shares });
            }
        }
    }
    None
}

/// Whether a job could run in the partition at all, on an empty cluster.
pub(crate) fn could_ever_fit(state: &State, job: &Job, partition: &PartitionConfig) -> bool {
    let request = PerNodeRequest::from_spec(&job.spec);
    let fitting = eligible_nodes(state, job, partition)
        .into_iter()
        .enumerate()
        .filter(|(i, node)| request.fits_config(node, (*i).min(request.tasks.len() - 1), partition))
        .count();
    fitting >= request.n_nodes as usize
}

/// A job the pass decided to start.
#[derive(Debug)]
pub(crate) struct Start {
    pub(crate) job_id: JobId,
    pub(crate) partition: String,
    pub(crate) alloc: Allocation,
}

/// One scheduling pass. Returns the jobs to start; pending reasons are updated in place.
pub(crate) fn schedule(state: &mut State, now: UnixTime) -> Vec<Start> {
    let mut order: Vec<(u32, JobId)> = state
        .jobs
        .values()
        .filter(|j| j.committed && j.info.state() == JobState::Pending)
        .map(|j| (j.info.priority, j.info.job_id))
        .collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));

    let mut blocked: HashSet<String> = HashSet::new();
    let mut starts = Vec::new();
    for (_, job_id) in order {
        let job = &state.jobs[&job_id];
        if job.spec.hold || job.info.priority == 0 {
            continue;
        }
        if job.spec.begin_time.is_some_and(|t| t > now) {
            set_reason(state, job_id, "BeginTime");
            continue;
        }
        let request = PerNodeRequest::from_spec(&job.spec);
        let mut outcome = None;
        let mut any_open = false;
        for name in &job.candidates {
            if blocked.contains(name) {
                continue;
            }
            any_open = true;
            let Some(partition) = state.config.partitions.iter().find(|p| &p.name == name) else { continue };
            if let Some(alloc) = place(state, job, partition, &request) {
                outcome = Some(Start { job_id, partition: name.clone(), alloc });
                break;
            }
        }
        match outcome {
            Some(start) => {
                state.hold(&start.alloc);
                starts.push(start);
            }
            None => {
                let reason = if any_open { "Resources" } else { "Priority" };
                let candidates = state.jobs[&job_id].candidates.clone();
                blocked.extend(candidates);
                set_reason(state, job_id, reason);
            }
        }
    }
    starts
}

fn set_reason(state: &mut State, job_id: JobId, reason: &str) {
    if let Some(job) = state.jobs.get_mut(&job_id) {
        if job.info.reason != reason {
            job.info.reason = reason.to_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::grammar::gres::parse_gres;

    #[test]
    fn per_node_request_distributes_tasks_and_gpus() {
        let spec = JobSpec { nodes_min: Some(2), ntasks: Some(5), cpus_per_task: Some(2), ..JobSpec::default() };
        let r = PerNodeRequest::from_spec(&spec);
        assert_eq!(r.tasks, vec![3, 2]);
        assert_eq!((r.cpus(0), r.cpus(1)), (6, 4));
        let spec = JobSpec { gres_per_node: parse_gres("gpu:h100:2").unwrap(), ..JobSpec::default() };
        assert_eq!(PerNodeRequest::from_spec(&spec).gpus, vec![(Some("h100".into()), 2)]);
    }
}
