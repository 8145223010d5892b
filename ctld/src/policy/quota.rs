//! Guaranteed team quotas with borrowing: an account owns a guarantee of TRES in a pool (a
//! partition), may hold up to its burst limit there, and lends idle guarantee up to its lending
//! limit. Running jobs are classified each pass per team, in start order: a job that fits in what
//! is left of its team's guarantee is *owned*, any other job in a pool with quotas is *borrowed*
//! and may be preempted when an owner needs its guarantee back, but only as far as its team
//! holds more than its guarantee (see `super::preempt`). Every TRES is judged on its own, so a
//! GPU guarantee holds even for a team that has no CPU guarantee.

use crate::model::state::{Job, State};
use crate::model::tres::{self, Tres};
use crate::policy::backfill::NodeView;
use crate::policy::limits::Blocked;
use drover_shared::config::sched::QuotaConfig;
use drover_shared::config::{Config, PartitionConfig};
use drover_shared::job::{JobId, JobState};
use std::collections::{BTreeMap, HashSet};

/// The quota that covers `account` in `partition`: its own or its nearest ancestor's.
pub(crate) fn quota_of(config: &Config, account: &str, partition: &str) -> Option<usize> {
    let mut current = Some(account.to_owned());
    while let Some(name) = current {
        if let Some(i) = config.quotas.iter().position(|q| q.account == name && q.partition == partition) {
            return Some(i);
        }
        current = config.accounts.iter().find(|a| a.name == name).and_then(|a| a.parent.clone());
    }
    None
}

fn get(tres: &Tres, name: &str) -> u64 {
    tres.get(name).copied().unwrap_or(0)
}

/// Whether `used + asked` stays inside `guarantee` for every TRES the guarantee names.
fn within(guarantee: &BTreeMap<String, u64>, used: &Tres, asked: &Tres) -> bool {
    !guarantee.is_empty() && guarantee.iter().all(|(name, g)| get(used, name) + get(asked, name) <= *g)
}

/// TRES free now on a partition's nodes.
pub(crate) fn pool_free(views: &[NodeView], state: &State, partition: &PartitionConfig) -> Tres {
    let mut free = Tres::new();
    for name in &partition.nodes {
        let Some(view) = state.node_index.get(name).map(|&i| &views[i]) else { continue };
        if !view.usable() {
            continue;
        }
        *free.entry("cpu".into()).or_default() += u64::from(view.cpus.saturating_sub(view.cpus_alloc));
        *free.entry("mem".into()).or_default() += view.real_memory_mb.saturating_sub(view.mem_alloc_mb);
        for gpu in view.gpus.iter().filter(|g| !view.gpus_alloc.contains(&g.index)) {
            *free.entry("gres/gpu".into()).or_default() += 1;
            *free.entry(format!("gres/gpu:{}", gpu.gpu_type.to_ascii_lowercase())).or_default() += 1;
        }
    }
    free
}

/// Quota use of the running jobs, for one pass.
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    /// Per quota (config order): TRES its team's running jobs hold in the pool.
    used: Vec<Tres>,
    /// Running jobs that borrow.
    pub(crate) borrowed: HashSet<JobId>,
}

impl Quotas {
    pub(crate) fn new(state: &State) -> Quotas {
        let config = &state.config;
        let mut quotas = Quotas { used: vec![Tres::new(); config.quotas.len()], borrowed: HashSet::new() };
        let mut running: Vec<&Job> =
            state.jobs.values().filter(|j| j.alloc.is_some() && j.info.state() == JobState::Running).collect();
        running.sort_by_key(|j| (j.info.start_time, j.info.job_id));
        for job in running {
            let asked = tres::of_job(state, job);
            let borrowed = quotas.classify(config, job, &job.info.partition, &asked);
            quotas.add(config, job, &job.info.partition, &asked, borrowed);
        }
        quotas
    }

    /// What the team of quota `q` holds in its pool (jobs being preempted included).
    pub(crate) fn held(&self, q: usize) -> &Tres {
        &self.used[q]
    }

    /// Whether a job asking `asked` in `partition` would borrow.
    fn classify(&self, config: &Config, job: &Job, partition: &str, asked: &Tres) -> bool {
        if !config.quotas.iter().any(|q| q.partition == partition) {
            return false;
        }
        match quota_of(config, &job.info.account, partition) {
            Some(q) => !within(&config.quotas[q].guarantee, &self.used[q], asked),
            None => true,
        }
    }

    /// Counts a job that runs (or starts).
    pub(crate) fn add(&mut self, config: &Config, job: &Job, partition: &str, asked: &Tres, borrowed: bool) {
        if let Some(q) = quota_of(config, &job.info.account, partition) {
            tres::add(&mut self.used[q], asked);
        }
        if borrowed {
            self.borrowed.insert(job.info.job_id);
        }
    }

    /// Checks the burst and lending limits for a job about to start in `partition`; returns
    /// whether it would borrow.
    pub(crate) fn check(
        &self,
        state: &State,
        views: &[NodeView],
        job: &Job,
        partition: &PartitionConfig,
        asked: &Tres,
    ) -> Result<bool, Blocked> {
        let config = &state.config;
        let own = quota_of(config, &job.info.account, &partition.name);
        if let Some(q) = own {
            let quota = &config.quotas[q];
            if let Some((name, limit)) =
                quota.burst.iter().find(|(name, limit)| get(&self.used[q], name) + get(asked, name) > **limit)
            {
                let detail = format!(
                    "account {} burst limit {name}={limit} in {}: {} held, job asks {}",
                    quota.account,
                    partition.name,
                    get(&self.used[q], name),
                    get(asked, name)
                );
                return Err(Blocked { reason: "QuotaBurstLimit".into(), detail });
            }
        }
        let borrowed = self.classify(config, job, &partition.name, asked);
        if borrowed {
            // Idle guarantee that its owner does not lend stays free for the owner.
            let free = pool_free(views, state, partition);
            for (name, want) in asked.iter().filter(|(_, want)| **want > 0) {
                let protected: u64 = config
                    .quotas
                    .iter()
                    .enumerate()
                    .filter(|(i, q)| q.partition == partition.name && Some(*i) != own)
                    .map(|(i, q)| unlendable(q, &self.used[i], name))
                    .sum();
                if protected > 0 && get(&free, name).saturating_sub(*want) < protected {
                    let detail = format!("{protected} {name} of idle guarantees in {} are not lent", partition.name);
                    return Err(Blocked { reason: "QuotaLendLimit".into(), detail });
                }
            }
        }
        Ok(borrowed)
    }

    /// Whether `job` asks only for what is left of its team's guarantee, so it may reclaim.
    pub(crate) fn may_reclaim(&self, config: &Config, job: &Job, partition: &str, asked: &Tres) -> bool {
        quota_of(config, &job.info.account, partition)
            .is_some_and(|q| within(&config.quotas[q].guarantee, &self.used[q], asked))
    }
}

/// The part of a quota's idle guarantee of `name` its owner does not lend.
fn unlendable(quota: &QuotaConfig, used: &Tres, name: &str) -> u64 {
    let Some(lend) = &quota.lend else { return 0 };
    let Some(guarantee) = quota.guarantee.get(name) else { return 0 };
    let idle = guarantee.saturating_sub(get(used, name));
    idle.saturating_sub(lend.get(name).copied().unwrap_or(0))
}
