//! Trackable resources (TRES) of a job: what it holds (running) or asks for (pending), by Slurm's
//! TRES names (`cpu`, `mem` in MB, `node`, `gres/gpu`, `gres/gpu:<type>`), and its billing value
//! under a partition's `TRESBillingWeights`.

use crate::model::request::PerNodeRequest;
use crate::model::state::{Job, State};
use drover_shared::config::sched::TresWeights;
use std::collections::BTreeMap;

/// TRES name → count.
pub(crate) type Tres = BTreeMap<String, u64>;

/// Adds `other` into `sum`.
pub(crate) fn add(sum: &mut Tres, other: &Tres) {
    for (name, count) in other {
        *sum.entry(name.clone()).or_default() += count;
    }
}

/// What a job holds when it has an allocation, else what it asks for.
pub(crate) fn of_job(state: &State, job: &Job) -> Tres {
    let mut tres = Tres::new();
    if let Some(alloc) = &job.alloc {
        for share in &alloc.nodes {
            *tres.entry("cpu".into()).or_default() += u64::from(share.cpus);
            *tres.entry("mem".into()).or_default() += share.mem_mb;
            *tres.entry("node".into()).or_default() += 1;
            let node = state.node_index().get(&share.node).map(|&i| &state.nodes()[i]);
            for index in &share.gpus {
                *tres.entry("gres/gpu".into()).or_default() += 1;
                let gpu_type = node
                    .and_then(|n| n.gpus.iter().find(|g| g.index == *index))
                    .map(|g| g.gpu_type.to_ascii_lowercase());
                if let Some(t) = gpu_type.filter(|t| !t.is_empty()) {
                    *tres.entry(format!("gres/gpu:{t}")).or_default() += 1;
                }
            }
        }
        return tres;
    }
    of_request(&PerNodeRequest::from_spec(&job.spec))
}

/// What a pending request asks for (memory only when given explicitly).
pub(crate) fn of_request(request: &PerNodeRequest) -> Tres {
    let mut tres = Tres::new();
    let n_nodes = u64::from(request.n_nodes);
    tres.insert("cpu".into(), u64::from(request.total_cpus()));
    tres.insert("node".into(), n_nodes);
    if let Some(drover_shared::job::MemRequest::PerNode(mb)) = request.mem.map(|m| m.0) {
        tres.insert("mem".into(), mb * n_nodes);
    }
    for (gpu_type, count) in &request.gpus {
        let total = u64::from(*count) * n_nodes;
        *tres.entry("gres/gpu".into()).or_default() += total;
        if let Some(t) = gpu_type {
            *tres.entry(format!("gres/gpu:{}", t.to_ascii_lowercase())).or_default() += total;
        }
    }
    tres
}

/// What fair share charges `job` per second: its billing under the `TRESBillingWeights` of the
/// partition it runs in (of the first it may run in while pending), over what it holds or asks for.
/// The job record's billing TRES (`sacct`, `scontrol show job`) is this value, rounded.
pub(crate) fn job_billing(state: &State, job: &Job) -> f64 {
    let partition = job.info.partition.split(',').next().unwrap_or_default();
    let weights = state.config().partitions.iter().find(|p| p.name == partition).map(|p| &p.tres_billing_weights);
    billing(weights.unwrap_or(&TresWeights::default()), &of_job(state, job))
}

/// The billing TRES as a job record shows it: `billing`, rounded to a whole count.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub(crate) fn billing_count(billing: f64) -> u64 {
    billing.round().max(0.0) as u64
}

/// Billing under `weights`: Σ count × weight; without weights, the CPUs.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn billing(weights: &TresWeights, tres: &Tres) -> f64 {
    if weights.is_empty() {
        return tres.get("cpu").copied().unwrap_or(0) as f64;
    }
    tres.iter().map(|(name, count)| *count as f64 * weights.get(name)).sum()
}

/// The word Slurm puts in a limit reason for a TRES: `Cpu`, `Mem`, `Node`, `GRES`, `Billing`.
pub(crate) fn reason_word(name: &str) -> &'static str {
    match name {
        "cpu" => "Cpu",
        "mem" => "Mem",
        "node" => "Node",
        "billing" => "Billing",
        _ => "GRES",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::config::sched::parse_tres_weights;

    #[test]
    fn billing_weights_gpus_by_type() {
        // One H100 job and one T4 job of the same shape: the H100 hour costs 8 times more GPU.
        let weights = parse_tres_weights("CPU=1.0,Mem=0.25G,GRES/gpu:h100=8,GRES/gpu:t4=1").unwrap();
        let h100: Tres =
            [("cpu", 4), ("mem", 4096), ("gres/gpu", 2), ("gres/gpu:h100", 2)].map(|(k, v)| (k.to_owned(), v)).into();
        let t4: Tres =
            [("cpu", 4), ("mem", 4096), ("gres/gpu", 2), ("gres/gpu:t4", 2)].map(|(k, v)| (k.to_owned(), v)).into();
        // 4 CPUs + 4 GB × 0.25 + 2 × 8 = 21; with T4: 4 + 1 + 2 = 7.
        assert_eq!(billing(&weights, &h100), 21.0);
        assert_eq!(billing(&weights, &t4), 7.0);
        assert_eq!(billing(&TresWeights::default(), &h100), 4.0);
    }
}
