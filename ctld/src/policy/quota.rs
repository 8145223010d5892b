//! Guaranteed team quotas with borrowing: an account owns a guarantee of TRES in a pool (a
//! partition), may hold up to its burst limit there, and lends idle guarantee up to its lending
//! limit. Running jobs are classified per team, in start order (`crate::model::tally` keeps the
//! classification current as jobs start and end): a job that fits in what
//! is left of its team's guarantee is *owned*, any other job in a pool with quotas is *borrowed*
//! and may be preempted when an owner needs its guarantee back, but only as far as its team
//! holds more than its guarantee (see `super::preempt`). Every TRES is judged on its own, so a
//! GPU guarantee holds even for a team that has no CPU guarantee.

use crate::model::state::{Job, State};
use crate::model::tres::{self, Tres};
use crate::policy::limits::Blocked;
use crate::policy::placement::NodeView;
use drover_shared::config::sched::QuotaConfig;
use drover_shared::config::{Config, PartitionConfig};
use drover_shared::job::JobId;
use std::collections::HashSet;

pub(crate) use crate::model::tally::quota_of;
use crate::model::tally::{QuotaUse, Tally, within};

fn get(tres: &Tres, name: &str) -> u64 {
    tres.get(name).copied().unwrap_or(0)
}

/// TRES free now on one node (nothing if it is not usable).
fn node_free(view: &NodeView) -> Tres {
    let mut free = Tres::new();
    if !view.usable() {
        return free;
    }
    free.insert("cpu".into(), u64::from(view.cpus.saturating_sub(view.cpus_alloc)));
    free.insert("mem".into(), view.real_memory_mb.saturating_sub(view.mem_alloc_mb));
    for gpu in view.gpus.iter().filter(|g| !view.gpus_alloc.contains(&g.index)) {
        *free.entry("gres/gpu".into()).or_default() += 1;
        *free.entry(format!("gres/gpu:{}", gpu.gpu_type.to_ascii_lowercase())).or_default() += 1;
    }
    free
}

/// TRES free now in each pool (a partition some quota names): counted over the nodes once per
/// pass and kept current as the pass takes and gives back room on them, so a borrower's lending
/// check reads its pool's count instead of walking the pool's nodes.
#[derive(Debug, Default)]
pub(crate) struct PoolFree {
    /// Pool (partition) name and what is free in it.
    pools: Vec<(String, Tres)>,
    /// View index → the pools it is in (indexes into `pools`; once per listing).
    member_of: Vec<Vec<usize>>,
    /// View index → what it counted as free when last counted.
    counted: Vec<Tres>,
}

impl PoolFree {
    pub(crate) fn new(state: &State, views: &[NodeView]) -> PoolFree {
        let mut pools = PoolFree { member_of: vec![Vec::new(); views.len()], ..PoolFree::default() };
        // Only a lending limit reads what is free in a pool.
        if state.config().quotas.iter().all(|q| q.lend.is_none()) {
            return pools;
        }
        for partition in &state.config().partitions {
            if !state.config().quotas.iter().any(|q| q.partition == partition.name) {
                continue;
            }
            let pool = pools.pools.len();
            pools.pools.push((partition.name.clone(), Tres::new()));
            for name in &partition.nodes {
                if let Some(&i) = state.node_index().get(name) {
                    pools.member_of[i].push(pool);
                }
            }
        }
        pools.counted = vec![Tres::new(); views.len()];
        for (i, view) in views.iter().enumerate() {
            pools.update(i, view);
        }
        pools
    }

    /// Recounts the node at view index `i` (after the pass changed what is allocated there).
    pub(crate) fn update(&mut self, i: usize, view: &NodeView) {
        if self.member_of.get(i).is_none_or(Vec::is_empty) {
            return;
        }
        let now = node_free(view);
        for &pool in &self.member_of[i] {
            let total = &mut self.pools[pool].1;
            for (name, count) in &self.counted[i] {
                if let Some(t) = total.get_mut(name) {
                    *t = t.saturating_sub(*count);
                }
            }
            tres::add(total, &now);
        }
        self.counted[i] = now;
    }

    /// What is free in the pool `partition` (`None` if no quota names it, or no quota has a
    /// lending limit: then nothing reads it and nothing is counted).
    pub(crate) fn of(&self, partition: &str) -> Option<&Tres> {
        self.pools.iter().find(|(name, _)| name == partition).map(|(_, free)| free)
    }
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
    /// Classified afresh over `state`'s running jobs.
    pub(crate) fn new(state: &State) -> Quotas {
        Quotas::of(Tally::build(state).quotas)
    }

    /// From tallies kept up to date ([`State::tally`]).
    pub(crate) fn of(quotas: QuotaUse) -> Quotas {
        Quotas { used: quotas.used, borrowed: quotas.borrowed }
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
        pool_free: &PoolFree,
        job: &Job,
        partition: &PartitionConfig,
        asked: &Tres,
    ) -> Result<bool, Blocked> {
        let config = &state.config();
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
            let none = Tres::new();
            let free = pool_free.of(&partition.name).unwrap_or(&none);
            for (name, want) in asked.iter().filter(|(_, want)| **want > 0) {
                let protected: u64 = config
                    .quotas
                    .iter()
                    .enumerate()
                    .filter(|(i, q)| q.partition == partition.name && Some(*i) != own)
                    .map(|(i, q)| unlendable(q, &self.used[i], name))
                    .sum();
                if protected > 0 && get(free, name).saturating_sub(*want) < protected {
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
