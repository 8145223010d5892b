//! Multifactor priority: each factor normalized to 0–1, weighted by the `[priority]` section and
//! summed, minus `--nice`, clamped to 1..2³²−1 (0 means held). One priority per pending job and
//! candidate partition; the job's `Priority` is the best of them.

use crate::model::state::{Job, State};
use crate::model::tres::{self, Tres};
use crate::policy::fairshare::{self, Tree};
use drover_shared::UnixTime;
use drover_shared::config::{FairShareAlgorithm, PartitionConfig, PriorityConfig, UserConfig};
use std::collections::HashMap;

/// Normalized factors of one job in one partition.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Factors {
    pub(crate) age: f64,
    pub(crate) assoc: f64,
    pub(crate) fairshare: f64,
    pub(crate) job_size: f64,
    pub(crate) partition: f64,
    pub(crate) qos: f64,
    /// TRES name → normalized factor, for the TRES that have a weight.
    pub(crate) tres: Vec<(String, f64)>,
}

/// What the factors need from the whole cluster, computed once per pass.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub(crate) config: PriorityConfig,
    /// Account → user → fair-share factor (nested, so a job's is found without copying its
    /// names).
    pub(crate) fairshare: HashMap<String, HashMap<String, f64>>,
    pub(crate) n_nodes: f64,
    pub(crate) n_cpus: f64,
    pub(crate) max_partition_factor: f64,
    pub(crate) max_qos_priority: f64,
    /// Partition → TRES totals of its nodes.
    pub(crate) partition_tres: HashMap<String, Tres>,
}

/// Builds the association tree over the stored usage and computes the fair-share factors.
pub(crate) fn shares(state: &State) -> (Tree, Vec<fairshare::Shares>) {
    let users: HashMap<&str, &UserConfig> = state.config().users.iter().map(|u| (u.name.as_str(), u)).collect();
    let shares = |account: &str, user: &str| {
        users.get(user).and_then(|u| u.limits_in(account)).and_then(|l| l.shares).unwrap_or(1)
    };
    let tree = Tree::build(&state.config().accounts, &state.usage.by_assoc, shares);
    let shares = match state.config().priority.fairshare {
        FairShareAlgorithm::FairTree => fairshare::fair_tree(&tree),
        FairShareAlgorithm::Classic => fairshare::classic(&tree),
    };
    (tree, shares)
}

/// TRES totals of a partition's nodes.
fn partition_total(state: &State, partition: &PartitionConfig) -> Tres {
    let mut total = Tres::new();
    let mut gpu_types: HashMap<&str, u64> = HashMap::new();
    for i in state.partition_nodes(&partition.name).into_iter().flatten() {
        let node = &state.nodes()[*i];
        *total.entry("cpu".into()).or_default() += u64::from(node.cpus);
        *total.entry("mem".into()).or_default() += node.real_memory_mb;
        *total.entry("node".into()).or_default() += 1;
        for gpu in node.gpus.iter() {
            *gpu_types.entry(gpu.gpu_type.as_str()).or_default() += 1;
        }
    }
    for (gpu_type, count) in gpu_types {
        *total.entry("gres/gpu".into()).or_default() += count;
        *total.entry(format!("gres/gpu:{}", gpu_type.to_ascii_lowercase())).or_default() += count;
    }
    total
}

impl Context {
    pub(crate) fn new(state: &State) -> Context {
        let (tree, shares) = shares(state);
        let mut fairshare: HashMap<String, HashMap<String, f64>> = HashMap::new();
        for (a, s) in tree.assocs.iter().zip(&shares) {
            if let Some(user) = &a.user {
                fairshare.entry(a.account.clone()).or_default().insert(user.clone(), s.fairshare.unwrap_or(0.0));
            }
        }
        let config = &state.config();
        // Only TRES factors read the partitions' totals.
        let mut partition_tres = HashMap::new();
        if !config.priority.weight_tres.0.is_empty() {
            for p in &config.partitions {
                partition_tres.insert(p.name.clone(), partition_total(state, p));
            }
        }
        #[allow(clippy::cast_precision_loss)]
        Context {
            config: config.priority.clone(),
            fairshare,
            n_nodes: state.nodes().len() as f64,
            n_cpus: state.nodes().iter().map(|n| f64::from(n.cpus)).sum(),
            max_partition_factor: f64::from(config.partitions.iter().map(|p| p.priority_job_factor).max().unwrap_or(0)),
            max_qos_priority: f64::from(config.qos.iter().map(|q| q.priority).max().unwrap_or(0)),
            partition_tres,
        }
    }

    /// The age factor: the time since the job became eligible over `PriorityMaxAge`, at most 1.
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn age(&self, job: &Job, now: UnixTime) -> f64 {
        let eligible = job.info.eligible_time.unwrap_or(job.info.submit_time);
        if self.config.max_age == 0 {
            0.0
        } else {
            ((now - eligible).max(0) as f64 / self.config.max_age as f64).min(1.0)
        }
    }

    /// The factors of `job` if it ran in `partition`.
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn factors(&self, state: &State, job: &Job, partition: &PartitionConfig, now: UnixTime) -> Factors {
        self.factors_of(state, job, partition, now, &tres::of_job(state, job))
    }

    /// [`Context::factors`] with what the job asks (or holds) already worked out: a pass works
    /// it out once per resident spec, not once per job and partition.
    pub(crate) fn factors_of(
        &self,
        state: &State,
        job: &Job,
        partition: &PartitionConfig,
        now: UnixTime,
        requested: &Tres,
    ) -> Factors {
        let age = self.age(job, now);
        let nodes = requested.get("node").copied().unwrap_or(1) as f64;
        let cpus = requested.get("cpu").copied().unwrap_or(1) as f64;
        let (n, c) = (self.n_nodes.max(1.0), self.n_cpus.max(1.0));
        let job_size = if self.config.favor_small {
            ((n - nodes) / n + (c - cpus) / c) / 2.0
        } else {
            (nodes / n + cpus / c) / 2.0
        }
        .clamp(0.0, 1.0);
        let qos_priority = state.config().qos.iter().find(|q| q.name == job.info.qos).map_or(0, |q| q.priority);
        let ratio = |v: f64, max: f64| if max > 0.0 { v / max } else { 0.0 };
        let totals = self.partition_tres.get(&partition.name);
        let tres = self
            .config
            .weight_tres
            .0
            .keys()
            .map(|name| {
                let total = totals.and_then(|t| t.get(name)).copied().unwrap_or(0) as f64;
                (name.clone(), ratio(requested.get(name).copied().unwrap_or(0) as f64, total))
            })
            .collect();
        Factors {
            age,
            assoc: 0.0,
            fairshare: self
                .fairshare
                .get(job.info.account.as_str())
                .and_then(|users| users.get(job.info.user.as_str()))
                .copied()
                .unwrap_or(0.0),
            job_size,
            partition: ratio(f64::from(partition.priority_job_factor), self.max_partition_factor),
            qos: ratio(f64::from(qos_priority), self.max_qos_priority),
            tres,
        }
    }
}

/// The weighted sum, minus nice, truncated and clamped to 1..=u32::MAX−1.
pub(crate) fn priority(config: &PriorityConfig, f: &Factors, nice: i32) -> u32 {
    priority_aged(config, f, f.age, nice)
}

/// [`priority`] with `age` in place of the factors' own (the pass works the other factors out
/// once for the jobs submitted alike, and the age for each job).
pub(crate) fn priority_aged(config: &PriorityConfig, f: &Factors, age: f64, nice: i32) -> u32 {
    let w = |weight: u32| f64::from(weight);
    let tres: f64 = f.tres.iter().map(|(name, v)| config.weight_tres.get(name) * v).sum();
    let sum = w(config.weight_age) * age
        + w(config.weight_assoc) * f.assoc
        + w(config.weight_fairshare) * f.fairshare
        + w(config.weight_job_size) * f.job_size
        + w(config.weight_partition) * f.partition
        + w(config.weight_qos) * f.qos
        + tres
        - f64::from(nice);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let value = sum.clamp(1.0, f64::from(u32::MAX - 1)) as u32;
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The baseline `sprio` sample (weights age 1000, fairshare 10000, jobsize 1000, partition
    /// 5000, QOS 2000; 4 nodes × 2 CPUs): a 1-node 1-CPU job has JobSize (1/4 + 1/8)/2 = 0.1875,
    /// partition factor 1/10 → 10000 + 187.5 + 500 = 10687.5 → 10687; a 4-node 4-CPU job has
    /// (4/4 + 4/8)/2 = 0.75 → 11250.
    #[test]
    fn priority_matches_the_sprio_sample() {
        let config = PriorityConfig {
            weight_age: 1000,
            weight_fairshare: 10000,
            weight_job_size: 1000,
            ..PriorityConfig::default()
        };
        let cases = [(0.1875, 10687), (0.75, 11250)];
        for (job_size, expected) in cases {
            let f = Factors { fairshare: 1.0, job_size, partition: 0.1, ..Factors::default() };
            assert_eq!(priority(&config, &f, 0), expected);
        }
        // Nice lowers it; the result never reaches 0 (held).
        let f = Factors { fairshare: 1.0, ..Factors::default() };
        assert_eq!(priority(&config, &f, 100), 9900);
        assert_eq!(priority(&config, &Factors::default(), 10_000), 1);
    }
}
