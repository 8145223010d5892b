//! The running jobs' tallies that limits and quotas read: what runs, summed per QOS, per QOS and
//! user, and per account with its ancestors ([`Sums`]), and per guaranteed quota with which
//! running jobs borrow ([`QuotaUse`]). [`Tally`] keeps them current as jobs start and end, so a
//! scheduling pass reads them instead of summing every running job again: the job table files
//! each job that may have changed ([`super::state::Jobs::take_untallied`]) and
//! [`super::state::State::tally`] takes those jobs out and back in. A config change starts the
//! tallies over. [`Tally::build`] sums from scratch, for readers that cannot bring them up to
//! date (`drover why`, metrics) and for the check that both ways agree. The job table files for
//! the tallies only the jobs that held or hold an allocation (`Jobs::refile`), so a pass that
//! changes many pending jobs' priorities costs the tallies nothing.
//!
//! Which running jobs borrow is decided per quota in start order: a job that fits in what is left
//! of its team's guarantee after the jobs that started before it is owned, any other job in a
//! pool with quotas borrows. A job that starts after all others is classified as it comes in; a
//! job that ends before others (or starts out of order) has its quota classified again.

use crate::model::state::{Job, State};
use crate::model::tres::{self, Tres};
use drover_shared::UnixTime;
use drover_shared::config::Config;
use drover_shared::job::{JobId, JobState};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// TRES and job count of a set of running jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) tres: Tres,
    pub(crate) n_jobs: u32,
}

impl Held {
    fn add(&mut self, tres: &Tres) {
        add_nonzero(&mut self.tres, tres);
        self.n_jobs += 1;
    }

    /// Takes a job out; true when nothing is left.
    fn sub(&mut self, tres: &Tres) -> bool {
        subtract(&mut self.tres, tres);
        self.n_jobs = self.n_jobs.saturating_sub(1);
        self.n_jobs == 0
    }
}

/// Takes `other` out of `sum`, dropping the counts that reach zero (so a sum kept up to date
/// equals one summed afresh).
fn subtract(sum: &mut Tres, other: &Tres) {
    for (name, count) in other {
        if let Some(total) = sum.get_mut(name) {
            *total = total.saturating_sub(*count);
            if *total == 0 {
                sum.remove(name);
            }
        }
    }
}

/// Adds to `sum` without keeping zero counts.
fn add_nonzero(sum: &mut Tres, other: &Tres) {
    for (name, count) in other.iter().filter(|(_, c)| **c > 0) {
        *sum.entry(name.clone()).or_default() += count;
    }
}

/// The account and its ancestors, nearest first.
pub(crate) fn ancestors<'a>(config: &'a Config, account: &'a str) -> impl Iterator<Item = &'a str> {
    let mut current = Some(account);
    // A cycle cannot pass the config check; the bound keeps a bad one from looping.
    let mut left = config.accounts.len() + 1;
    std::iter::from_fn(move || {
        let name = current.take().filter(|_| left > 0)?;
        left -= 1;
        current = config.accounts.iter().find(|a| a.name == name).and_then(|a| a.parent.as_deref());
        Some(name)
    })
}

/// The account and its ancestors, nearest first, as names of their own.
pub(crate) fn lineage(config: &Config, account: &str) -> Vec<String> {
    ancestors(config, account).map(str::to_owned).collect()
}

/// The quota that covers `account` in `partition`: its own or its nearest ancestor's.
pub(crate) fn quota_of(config: &Config, account: &str, partition: &str) -> Option<usize> {
    ancestors(config, account)
        .find_map(|name| config.quotas.iter().position(|q| q.account == name && q.partition == partition))
}

/// Whether `used + asked` stays inside `guarantee` for every TRES the guarantee names.
pub(crate) fn within(guarantee: &BTreeMap<String, u64>, used: &Tres, asked: &Tres) -> bool {
    let get = |tres: &Tres, name: &str| tres.get(name).copied().unwrap_or(0);
    !guarantee.is_empty() && guarantee.iter().all(|(name, g)| get(used, name) + get(asked, name) <= *g)
}

/// What runs, summed per QOS, per QOS and user, per account (with its ancestors), and per user
/// association.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sums {
    pub(crate) qos: HashMap<String, Held>,
    /// QOS → user → what the user runs in it.
    pub(crate) qos_user: HashMap<String, HashMap<String, Held>>,
    pub(crate) account: HashMap<String, Held>,
    /// (account, user) → what the user's association with the job's own account runs.
    pub(crate) assoc: HashMap<(String, String), Held>,
}

impl Sums {
    /// Counts a job of `qos` and `user` charged to `accounts` (the account and its ancestors).
    pub(crate) fn add(&mut self, qos: &str, user: &str, accounts: &[String], tres: &Tres) {
        self.qos.entry(qos.to_owned()).or_default().add(tres);
        self.qos_user.entry(qos.to_owned()).or_default().entry(user.to_owned()).or_default().add(tres);
        for name in accounts {
            self.account.entry(name.clone()).or_default().add(tres);
        }
        if let Some(account) = accounts.first() {
            self.assoc.entry((account.clone(), user.to_owned())).or_default().add(tres);
        }
    }

    fn sub(&mut self, qos: &str, user: &str, accounts: &[String], tres: &Tres) {
        if self.qos.get_mut(qos).is_some_and(|h| h.sub(tres)) {
            self.qos.remove(qos);
        }
        if let Some(users) = self.qos_user.get_mut(qos) {
            if users.get_mut(user).is_some_and(|h| h.sub(tres)) {
                users.remove(user);
            }
            if users.is_empty() {
                self.qos_user.remove(qos);
            }
        }
        for name in accounts {
            if self.account.get_mut(name).is_some_and(|h| h.sub(tres)) {
                self.account.remove(name);
            }
        }
        if let Some(account) = accounts.first() {
            let key = (account.clone(), user.to_owned());
            if self.assoc.get_mut(&key).is_some_and(|h| h.sub(tres)) {
                self.assoc.remove(&key);
            }
        }
    }
}

/// What each quota's team holds in its pool, and the running jobs that borrow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QuotaUse {
    /// Per quota (config order): TRES its team's running jobs hold in the pool.
    pub(crate) used: Vec<Tres>,
    /// Running jobs that borrow.
    pub(crate) borrowed: HashSet<JobId>,
}

/// Where one running job is counted.
#[derive(Debug, Clone)]
struct Entry {
    qos: String,
    user: String,
    accounts: Vec<String>,
    /// Its team's quota in the partition it runs in.
    quota: Option<usize>,
    /// Whether some quota names that partition.
    in_pool: bool,
    tres: Tres,
    /// The order quotas classify in.
    start: (Option<UnixTime>, JobId),
}

/// The tallies, kept current (see the module's doc).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// The config they were summed under; another one starts them over.
    config: Option<Arc<Config>>,
    entries: HashMap<JobId, Entry>,
    pub(crate) sums: Sums,
    pub(crate) quotas: QuotaUse,
    /// Per quota: its jobs in start order.
    order: Vec<BTreeSet<(Option<UnixTime>, JobId)>>,
    /// Quotas whose jobs must be classified again.
    dirty: BTreeSet<usize>,
}

/// Whether a job counts as running work: it holds an allocation and runs.
fn counts(job: &Job) -> bool {
    job.alloc.is_some() && job.info.state() == JobState::Running
}

impl Tally {
    /// The tallies of `state`'s running jobs, summed afresh.
    pub(crate) fn build(state: &State) -> Tally {
        let mut tally = Tally::default();
        tally.start_over(state);
        tally
    }

    fn start_over(&mut self, state: &State) {
        let config = &state.config();
        *self = Tally {
            config: Some(Arc::clone(config)),
            quotas: QuotaUse { used: vec![Tres::new(); config.quotas.len()], borrowed: HashSet::new() },
            order: vec![BTreeSet::new(); config.quotas.len()],
            ..Tally::default()
        };
        let mut running: Vec<&Job> = state.jobs.allocated().filter(|j| counts(j)).collect();
        running.sort_by_key(|j| (j.info.start_time, j.info.job_id));
        for job in running {
            self.insert(state, job);
        }
    }

    /// Brings the tallies up to date with the jobs in `changed` (or starts over under a new
    /// config).
    pub(crate) fn sync(&mut self, state: &State, changed: impl IntoIterator<Item = JobId>) {
        if !self.config.as_ref().is_some_and(|c| Arc::ptr_eq(c, &state.config())) {
            self.start_over(state);
            return;
        }
        for job_id in changed {
            self.remove(job_id);
            if let Some(job) = state.jobs.get(&job_id).filter(|j| counts(j)) {
                self.insert(state, job);
            }
        }
        let config = Arc::clone(&state.config());
        for q in std::mem::take(&mut self.dirty) {
            self.classify(&config, q);
        }
    }

    fn insert(&mut self, state: &State, job: &Job) {
        let config = &state.config();
        let partition = job.info.partition.as_str();
        let entry = Entry {
            qos: job.info.qos.clone(),
            user: job.info.user.clone(),
            accounts: lineage(config, &job.info.account),
            quota: quota_of(config, &job.info.account, partition),
            in_pool: config.quotas.iter().any(|q| q.partition == partition),
            tres: tres::of_job(state, job),
            start: (job.info.start_time, job.info.job_id),
        };
        self.sums.add(&entry.qos, &entry.user, &entry.accounts, &entry.tres);
        let job_id = job.info.job_id;
        match entry.quota {
            Some(q) => {
                let last = self.order[q].last().is_none_or(|last| *last < entry.start);
                if last && !self.dirty.contains(&q) {
                    // After every other job of its quota: classified against all of them.
                    if !within(&config.quotas[q].guarantee, &self.quotas.used[q], &entry.tres) {
                        self.quotas.borrowed.insert(job_id);
                    }
                } else {
                    self.dirty.insert(q);
                }
                self.order[q].insert(entry.start);
                add_nonzero(&mut self.quotas.used[q], &entry.tres);
            }
            None if entry.in_pool => {
                self.quotas.borrowed.insert(job_id);
            }
            None => {}
        }
        self.entries.insert(job_id, entry);
    }

    fn remove(&mut self, job_id: JobId) {
        let Some(entry) = self.entries.remove(&job_id) else { return };
        self.sums.sub(&entry.qos, &entry.user, &entry.accounts, &entry.tres);
        self.quotas.borrowed.remove(&job_id);
        if let Some(q) = entry.quota {
            subtract(&mut self.quotas.used[q], &entry.tres);
            self.order[q].remove(&entry.start);
            // The jobs before it are classified as they were; the ones after may now fit.
            if self.order[q].last().is_some_and(|last| *last > entry.start) {
                self.dirty.insert(q);
            }
        }
    }

    /// Classifies quota `q`'s jobs again, in start order.
    fn classify(&mut self, config: &Config, q: usize) {
        let mut used = Tres::new();
        for (_, job_id) in &self.order[q] {
            let Some(entry) = self.entries.get(job_id) else { continue };
            if within(&config.quotas[q].guarantee, &used, &entry.tres) {
                self.quotas.borrowed.remove(job_id);
            } else {
                self.quotas.borrowed.insert(*job_id);
            }
            add_nonzero(&mut used, &entry.tres);
        }
    }

    /// Whether two tallies count the same (the config and the bookkeeping aside).
    #[cfg(test)]
    pub(crate) fn same_counts(&self, other: &Tally) -> bool {
        self.sums == other.sums && self.quotas == other.quotas
    }
}
