//! QOS and association limits on running work (`GrpTRES`, `GrpJobs`, `MaxTRESPerUser`,
//! `MaxJobsPerUser`, a user association's `GrpTRES`/`MaxJobs`, account `GrpTRES`/`GrpJobs`),
//! checked before a job is placed, with Slurm's pending reason for the first limit that holds it
//! back; and the submit-time limits (`MaxTRESPerJob`, `MaxSubmitJobsPerUser`, a user
//! association's `MaxTRES`/`MaxSubmitJobs`, account `GrpSubmitJobs`) that refuse a job outright.

use crate::model::state::{Job, State};
use crate::model::tally::{Held, Sums, Tally, ancestors, lineage};
use crate::model::tres::{self, Tres};
use drover_shared::config::{Config, QosConfig};
use std::collections::{BTreeMap, HashMap};

/// A limit that holds a job back: Slurm's reason and a sentence with the numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Blocked {
    pub(crate) reason: String,
    pub(crate) detail: String,
}

/// What runs now, summed per QOS, per QOS and user, and per account (with its ancestors), plus
/// the jobs the pass starts.
#[derive(Debug, Default)]
pub(crate) struct Running {
    sums: Sums,
}

fn over(limits: &BTreeMap<String, u64>, held: &Tres, asked: &Tres) -> Option<(String, u64, u64, u64)> {
    limits.iter().find_map(|(name, limit)| {
        let used = held.get(name).copied().unwrap_or(0);
        let want = asked.get(name).copied().unwrap_or(0);
        (want > 0 && used + want > *limit).then(|| (name.clone(), used, want, *limit))
    })
}

fn group_reason(prefix: &str, name: &str) -> String {
    match tres::reason_word(name) {
        "GRES" => format!("{prefix}GrpGRES"),
        "Billing" => format!("{prefix}GrpBilling"),
        word => format!("{prefix}Grp{word}Limit"),
    }
}

fn per_user_reason(name: &str) -> String {
    match tres::reason_word(name) {
        "GRES" => "QOSMaxGRESPerUser".into(),
        "Mem" => "QOSMaxMemoryPerUser".into(),
        "Billing" => "QOSMaxBillingPerUser".into(),
        word => format!("QOSMax{word}PerUserLimit"),
    }
}

impl Running {
    /// Summed afresh over `state`'s running jobs.
    pub(crate) fn new(state: &State) -> Running {
        Running { sums: Tally::build(state).sums }
    }

    /// From tallies kept up to date ([`State::tally`]).
    pub(crate) fn of(sums: Sums) -> Running {
        Running { sums }
    }

    /// Counts a job that starts.
    pub(crate) fn add(&mut self, config: &Config, job: &Job, tres: &Tres) {
        self.sums.add(&job.info.qos, &job.info.user, &lineage(config, &job.info.account), tres);
    }

    /// The first limit that keeps `job` (asking `asked`) from starting now.
    pub(crate) fn check(&self, config: &Config, job: &Job, asked: &Tres) -> Result<(), Blocked> {
        self.first_hit(config, job, asked).map_or(Ok(()), |hit| Err(hit.blocked()))
    }

    /// Slurm's reason for the first limit that keeps `job` from starting now (the pass's check:
    /// the sentence with the numbers is left unwritten).
    pub(crate) fn check_reason(&self, config: &Config, job: &Job, asked: &Tres) -> Result<(), String> {
        self.first_hit(config, job, asked).map_or(Ok(()), |hit| Err(hit.reason()))
    }

    fn first_hit<'a>(&self, config: &'a Config, job: &'a Job, asked: &Tres) -> Option<Hit<'a>> {
        let empty = Held::default();
        if let Some(qos) = config.qos.iter().find(|q| q.name == job.info.qos) {
            let q = qos.name.as_str();
            let held = self.sums.qos.get(q).unwrap_or(&empty);
            if let Some((name, used, want, limit)) = over(&qos.grp_tres, &held.tres, asked) {
                return Some(Hit::QosTres { qos: q, name, used, want, limit });
            }
            if let Some(limit) = qos.grp_jobs.filter(|limit| held.n_jobs >= *limit) {
                return Some(Hit::QosJobs { qos: q, limit, running: held.n_jobs });
            }
            let user = job.info.user.as_str();
            let mine = self.sums.qos_user.get(q).and_then(|users| users.get(user)).unwrap_or(&empty);
            if let Some((name, used, want, limit)) = over(&qos.max_tres_per_user, &mine.tres, asked) {
                return Some(Hit::UserTres { qos: q, user, name, used, want, limit });
            }
            if let Some(limit) = qos.max_jobs_per_user.filter(|limit| mine.n_jobs >= *limit) {
                return Some(Hit::UserJobs { qos: q, limit, running: mine.n_jobs });
            }
        }
        let user = job.info.user.as_str();
        let assoc = config.users.iter().find(|u| u.name == user).and_then(|u| u.limits_in(&job.info.account));
        if let Some(limits) = assoc {
            let key = (job.info.account.clone(), job.info.user.clone());
            let held = self.sums.assoc.get(&key).unwrap_or(&empty);
            if let Some((name, used, want, limit)) = over(&limits.grp_tres, &held.tres, asked) {
                return Some(Hit::AssocTres { user, account: &job.info.account, name, used, want, limit });
            }
            if let Some(limit) = limits.max_jobs.filter(|limit| held.n_jobs >= *limit) {
                return Some(Hit::AssocJobs { user, account: &job.info.account, limit, running: held.n_jobs });
            }
        }
        for name in ancestors(config, &job.info.account) {
            let Some(account) = config.accounts.iter().find(|a| a.name == name) else { break };
            let held = self.sums.account.get(name).unwrap_or(&empty);
            if let Some((tres_name, used, want, limit)) = over(&account.grp_tres, &held.tres, asked) {
                return Some(Hit::AccountTres { account: &account.name, name: tres_name, used, want, limit });
            }
            if let Some(limit) = account.grp_jobs.filter(|limit| held.n_jobs >= *limit) {
                return Some(Hit::AccountJobs { account: &account.name, limit, running: held.n_jobs });
            }
        }
        None
    }
}

/// A limit a job hits, with its numbers: the reason and the sentence are written only when
/// asked for.
enum Hit<'a> {
    QosTres { qos: &'a str, name: String, used: u64, want: u64, limit: u64 },
    QosJobs { qos: &'a str, limit: u32, running: u32 },
    UserTres { qos: &'a str, user: &'a str, name: String, used: u64, want: u64, limit: u64 },
    UserJobs { qos: &'a str, limit: u32, running: u32 },
    AccountTres { account: &'a str, name: String, used: u64, want: u64, limit: u64 },
    AccountJobs { account: &'a str, limit: u32, running: u32 },
    AssocTres { user: &'a str, account: &'a str, name: String, used: u64, want: u64, limit: u64 },
    AssocJobs { user: &'a str, account: &'a str, limit: u32, running: u32 },
}

impl Hit<'_> {
    fn reason(&self) -> String {
        match self {
            Hit::QosTres { name, .. } => group_reason("QOS", name),
            Hit::QosJobs { .. } => "QOSGrpJobsLimit".into(),
            Hit::UserTres { name, .. } => per_user_reason(name),
            Hit::UserJobs { .. } => "QOSMaxJobsPerUserLimit".into(),
            Hit::AccountTres { name, .. } => group_reason("Assoc", name),
            Hit::AccountJobs { .. } => "AssocGrpJobsLimit".into(),
            Hit::AssocTres { name, .. } => group_reason("Assoc", name),
            Hit::AssocJobs { .. } => "AssocMaxJobsLimit".into(),
        }
    }

    fn detail(&self) -> String {
        match self {
            Hit::QosTres { qos, name, used, want, limit } => {
                format!("QOS {qos} GrpTRES {name}={limit}: {used} in use, job asks {want}")
            }
            Hit::QosJobs { qos, limit, running } => format!("QOS {qos} GrpJobs={limit}: {running} running"),
            Hit::UserTres { qos, user, name, used, want, limit } => {
                format!("QOS {qos} MaxTRESPerUser {name}={limit}: {user} has {used}, job asks {want}")
            }
            Hit::UserJobs { qos, limit, running } => format!("QOS {qos} MaxJobsPerUser={limit}: {running} running"),
            Hit::AccountTres { account, name, used, want, limit } => {
                format!("account {account} GrpTRES {name}={limit}: {used} in use, job asks {want}")
            }
            Hit::AccountJobs { account, limit, running } => {
                format!("account {account} GrpJobs={limit}: {running} running")
            }
            Hit::AssocTres { user, account, name, used, want, limit } => {
                format!("association {user}/{account} GrpTRES {name}={limit}: {used} in use, job asks {want}")
            }
            Hit::AssocJobs { user, account, limit, running } => {
                format!("association {user}/{account} MaxJobs={limit}: {running} running")
            }
        }
    }

    fn blocked(&self) -> Blocked {
        Blocked { reason: self.reason(), detail: self.detail() }
    }
}

/// Submit-time limits of the association: the account's and its ancestors' `GrpSubmitJobs`
/// (pending plus running jobs charged to each one's subtree; 0 blocks it, as ColdFront does to an
/// expired project), and the user's association's `MaxTRES` (per job) and `MaxSubmitJobs`.
pub(crate) fn check_association_submit(state: &State, user: &str, account: &str, asked: &Tres) -> Result<(), String> {
    let config = &state.config();
    let assoc = config.users.iter().find(|u| u.name == user).and_then(|u| u.limits_in(account));
    if let Some(limits) = assoc {
        if let Some((name, _, want, limit)) = over(&limits.max_tres_per_job, &Tres::new(), asked) {
            return Err(format!("association {user}/{account} MaxTRES {name}={limit}: job asks {want}"));
        }
        if let Some(limit) = limits.max_submit_jobs {
            let live = |j: &&Job| !j.info.state().is_terminal() && j.info.user == user && j.info.account == account;
            let n = state.jobs.values().filter(live).count();
            if n >= limit as usize {
                return Err(format!("association {user}/{account} MaxSubmitJobs={limit}: {n} jobs pending or running"));
            }
        }
    }
    let limited: Vec<(&str, u32)> = ancestors(config, account)
        .filter_map(|name| config.accounts.iter().find(|a| a.name == name)?.grp_submit_jobs.map(|l| (name, l)))
        .collect();
    if let Some((name, _)) = limited.iter().find(|(_, limit)| *limit == 0) {
        return Err(format!("account {name} GrpSubmitJobs=0: it takes no jobs"));
    }
    if limited.is_empty() {
        return Ok(());
    }
    // One walk over the jobs: each job's account chain, through a parent index, counted for every
    // limited account on it.
    let parents: HashMap<&str, &str> =
        config.accounts.iter().filter_map(|a| Some((a.name.as_str(), a.parent.as_deref()?))).collect();
    let mut counts = vec![0usize; limited.len()];
    for job in state.jobs.values().filter(|j| !j.info.state().is_terminal()) {
        let mut current = Some(job.info.account.as_str());
        let mut left = config.accounts.len() + 1;
        while let Some(name) = current.filter(|_| left > 0) {
            left -= 1;
            if let Some(i) = limited.iter().position(|(l, _)| *l == name) {
                counts[i] += 1;
            }
            current = parents.get(name).copied();
        }
    }
    for ((name, limit), n) in limited.iter().zip(counts) {
        if n >= *limit as usize {
            return Err(format!("account {name} GrpSubmitJobs={limit}: {n} jobs pending or running"));
        }
    }
    Ok(())
}

/// Submit-time limits of the QOS: `MaxTRESPerJob` and `MaxSubmitJobsPerUser`.
pub(crate) fn check_submit(state: &State, qos: &QosConfig, user: &str, asked: &Tres) -> Result<(), String> {
    if let Some((name, _, want, limit)) = over(&qos.max_tres_per_job, &Tres::new(), asked) {
        return Err(format!("QOS {} MaxTRESPerJob {name}={limit}: job asks {want}", qos.name));
    }
    if let Some(limit) = qos.max_submit_jobs_per_user {
        let n = state
            .jobs
            .values()
            .filter(|j| j.info.qos == qos.name && j.info.user == user && !j.info.state().is_terminal())
            .count();
        if n >= limit as usize {
            return Err(format!("QOS {} MaxSubmitJobsPerUser={limit}: {user} has {n} jobs", qos.name));
        }
    }
    Ok(())
}
