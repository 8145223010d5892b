//! QOS and association limits on running work (`GrpTRES`, `GrpJobs`, `MaxTRESPerUser`,
//! `MaxJobsPerUser`, association `GrpTRES`/`GrpJobs`), checked before a job is placed, with
//! Slurm's pending reason for the first limit that holds it back; and the submit-time limits
//! (`MaxTRESPerJob`, `MaxSubmitJobsPerUser`) that refuse a job outright.

use crate::model::state::{Job, State};
use crate::model::tally::{Held, Sums, Tally, lineage};
use crate::model::tres::{self, Tres};
use drover_shared::config::{Config, QosConfig};
use std::collections::BTreeMap;

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
        let empty = Held::default();
        if let Some(qos) = config.qos.iter().find(|q| q.name == job.info.qos) {
            let held = self.sums.qos.get(&qos.name).unwrap_or(&empty);
            if let Some((name, used, want, limit)) = over(&qos.grp_tres, &held.tres, asked) {
                let detail = format!("QOS {} GrpTRES {name}={limit}: {used} in use, job asks {want}", qos.name);
                return Err(Blocked { reason: group_reason("QOS", &name), detail });
            }
            if qos.grp_jobs.is_some_and(|limit| held.n_jobs >= limit) {
                let detail = format!("QOS {} GrpJobs={}: {} running", qos.name, qos.grp_jobs.unwrap_or(0), held.n_jobs);
                return Err(Blocked { reason: "QOSGrpJobsLimit".into(), detail });
            }
            let mine = self.sums.qos_user.get(&(qos.name.clone(), job.info.user.clone())).unwrap_or(&empty);
            if let Some((name, used, want, limit)) = over(&qos.max_tres_per_user, &mine.tres, asked) {
                let detail = format!(
                    "QOS {} MaxTRESPerUser {name}={limit}: {} has {used}, job asks {want}",
                    qos.name, job.info.user
                );
                return Err(Blocked { reason: per_user_reason(&name), detail });
            }
            if qos.max_jobs_per_user.is_some_and(|limit| mine.n_jobs >= limit) {
                let detail = format!(
                    "QOS {} MaxJobsPerUser={}: {} running",
                    qos.name,
                    qos.max_jobs_per_user.unwrap_or(0),
                    mine.n_jobs
                );
                return Err(Blocked { reason: "QOSMaxJobsPerUserLimit".into(), detail });
            }
        }
        let mut account = Some(job.info.account.clone());
        while let Some(name) = account {
            let Some(config_account) = config.accounts.iter().find(|a| a.name == name) else { break };
            let held = self.sums.account.get(&name).unwrap_or(&empty);
            if let Some((tres_name, used, want, limit)) = over(&config_account.grp_tres, &held.tres, asked) {
                let detail = format!("account {name} GrpTRES {tres_name}={limit}: {used} in use, job asks {want}");
                return Err(Blocked { reason: group_reason("Assoc", &tres_name), detail });
            }
            if config_account.grp_jobs.is_some_and(|limit| held.n_jobs >= limit) {
                let detail =
                    format!("account {name} GrpJobs={}: {} running", config_account.grp_jobs.unwrap_or(0), held.n_jobs);
                return Err(Blocked { reason: "AssocGrpJobsLimit".into(), detail });
            }
            account = config_account.parent.clone();
        }
        Ok(())
    }
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
