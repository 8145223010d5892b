//! Answers to `sshare` and `sprio`, built from the core's state: the association tree with its
//! fair-share numbers, and the weighted priority factors of each pending job per partition.

use crate::model::state::State;
use crate::model::tres;
use crate::policy::priority::{self, Context};
use drover_shared::UnixTime;
use drover_shared::config::FairShareAlgorithm;
use drover_shared::job::JobState;
use drover_shared::proto::client::{PriorityRow, PriorityWeights, Response, ShareRow};
use std::collections::BTreeMap;

/// `TRESRunMins` of each user association: TRES × minutes left of its running jobs.
fn run_mins(state: &State, now: UnixTime) -> BTreeMap<(String, String), tres::Tres> {
    let mut out: BTreeMap<(String, String), tres::Tres> = BTreeMap::new();
    for job in state.jobs.values().filter(|j| j.alloc.is_some() && j.info.state() == JobState::Running) {
        let Some(drover_shared::grammar::time::TimeLimit::Minutes(limit)) = job.info.time_limit else { continue };
        let elapsed_min = u64::try_from(job.info.elapsed(now) / 60).unwrap_or(0);
        let left = u64::from(limit).saturating_sub(elapsed_min);
        let entry = out.entry((job.info.account.clone(), job.info.user.clone())).or_default();
        for (name, count) in tres::of_job(state, job) {
            *entry.entry(name).or_default() += count * left;
        }
    }
    out
}

fn tres_text(tres: &tres::Tres) -> String {
    let get = |name: &str| tres.get(name).copied().unwrap_or(0);
    format!(
        "cpu={},mem={},energy=0,node={},billing={},fs/disk=0,vmem=0,pages=0,gres/gpu={}",
        get("cpu"),
        get("mem"),
        get("node"),
        get("cpu"),
        get("gres/gpu")
    )
}

/// The `sshare` rows, in tree order.
pub(crate) fn shares(state: &State, now: UnixTime) -> Response {
    let (tree, shares) = priority::shares(state);
    let fair_tree = state.config().priority.fairshare == FairShareAlgorithm::FairTree;
    let run = run_mins(state, now);
    let mut rows = Vec::new();
    for i in tree.preorder() {
        let assoc = &tree.assocs[i];
        let s = shares[i];
        let mut total = tres::Tres::new();
        for ((account, user), t) in &run {
            let below = match &assoc.user {
                Some(u) => u == user && &assoc.account == account,
                None => is_within(state, account, &assoc.account),
            };
            if below {
                tres::add(&mut total, t);
            }
        }
        rows.push(ShareRow {
            account: assoc.account.clone(),
            user: assoc.user.clone(),
            depth: assoc.depth,
            raw_shares: assoc.parent.map(|_| assoc.shares),
            norm_shares: s.norm_shares.into(),
            raw_usage: assoc.usage.into(),
            norm_usage: s.norm_usage.into(),
            effective_usage: s.effective_usage.into(),
            fairshare: s.fairshare.map(Into::into),
            level_fs: if fair_tree { s.level_fs.map(Into::into) } else { None },
            tres_run_mins: tres_text(&total),
            grp_tres_mins: String::new(),
        });
    }
    Response::Shares { fair_tree, rows }
}

/// Whether `account` is `ancestor` or below it.
fn is_within(state: &State, account: &str, ancestor: &str) -> bool {
    let mut current = Some(account.to_owned());
    while let Some(name) = current {
        if name == ancestor {
            return true;
        }
        current = state.config().accounts.iter().find(|a| a.name == name).and_then(|a| a.parent.clone());
    }
    false
}

/// The `sprio` rows: every pending, not held job, once per candidate partition.
pub(crate) fn priorities(state: &State, now: UnixTime) -> Response {
    let context = Context::new(state);
    let config = &context.config;
    let weights = PriorityWeights {
        age: config.weight_age,
        assoc: config.weight_assoc,
        fairshare: config.weight_fairshare,
        job_size: config.weight_job_size,
        partition: config.weight_partition,
        qos: config.weight_qos,
        tres: config.weight_tres.0.iter().map(|(n, w)| format!("{n}={w}")).collect::<Vec<_>>().join(","),
    };
    let mut rows = Vec::new();
    for job in state.jobs.values().filter(|j| j.committed && j.info.state() == JobState::Pending) {
        if job.spec.hold || job.info.priority == 0 {
            continue;
        }
        for name in job.candidates.iter() {
            let Some(partition) = state.config().partitions.iter().find(|p| &p.name == name) else { continue };
            let f = context.factors(state, job, partition, now);
            let tres = f
                .tres
                .iter()
                .map(|(n, v)| format!("{n}={:.0}", config.weight_tres.get(n) * v))
                .collect::<Vec<_>>()
                .join(",");
            rows.push(PriorityRow {
                job_id: job.info.job_id,
                partition: name.clone(),
                user: job.info.user.clone(),
                priority: priority::priority(config, &f, job.info.nice),
                site: 0,
                age: f.age.into(),
                assoc: f.assoc.into(),
                fairshare: f.fairshare.into(),
                job_size: f.job_size.into(),
                partition_factor: f.partition.into(),
                qos: f.qos.into(),
                nice: job.info.nice,
                tres,
            });
        }
    }
    Response::Priorities { weights, rows }
}
