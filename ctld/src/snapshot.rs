//! Read snapshots for job queries. Each job's `JobInfo` is held copy-on-write ([`Shared`]): the
//! core mutates it in place as before, and a snapshot is a `Vec` of `Arc`s to the records as they
//! were, built only when some record changed since the last one (a global write counter) and
//! published through a `watch` channel. `squeue` and `scontrol show job` filter and encode a
//! snapshot on their connection's task, so they never wait behind a scheduling pass and a pass
//! never waits behind them.

use crate::state::State;
use drover_shared::UnixTime;
use drover_shared::job::JobInfo;
use drover_shared::proto::client::{JobQuery, Response};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Changes to job records since ctld started (any mutable access counts, so it may overcount;
/// it never undercounts).
static WRITES: AtomicU64 = AtomicU64::new(1);

/// Records that some job record, or the set of visible jobs, changed.
pub(crate) fn touch() {
    WRITES.fetch_add(1, Ordering::Relaxed);
}

fn writes() -> u64 {
    WRITES.load(Ordering::Relaxed)
}

/// A value shared copy-on-write with published snapshots: reading is free; the first write
/// after a snapshot took it copies it (and counts as a change).
#[derive(Debug, Default)]
pub(crate) struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    pub(crate) fn new(value: T) -> Shared<T> {
        Shared(Arc::new(value))
    }

    /// Another reference to the current value.
    pub(crate) fn share(&self) -> Arc<T> {
        Arc::clone(&self.0)
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Shared<T> {
        Shared::new(value)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        touch();
        Arc::make_mut(&mut self.0)
    }
}

/// The visible (committed) jobs at one moment, in job id order.
#[derive(Debug, Default)]
pub(crate) struct JobsSnapshot {
    pub(crate) jobs: Vec<Arc<JobInfo>>,
}

/// What the core keeps to publish snapshots.
#[derive(Debug)]
pub(crate) struct Publisher {
    tx: tokio::sync::watch::Sender<Arc<JobsSnapshot>>,
    published: u64,
}

impl Publisher {
    pub(crate) fn new() -> (Publisher, tokio::sync::watch::Receiver<Arc<JobsSnapshot>>) {
        let (tx, rx) = tokio::sync::watch::channel(Arc::new(JobsSnapshot::default()));
        (Publisher { tx, published: 0 }, rx)
    }

    /// Publishes a new snapshot if any job changed since the last one.
    pub(crate) fn publish(&mut self, state: &State) {
        let current = writes();
        if current == self.published {
            return;
        }
        let jobs = state.jobs.values().filter(|j| j.committed).map(|j| j.info.share()).collect();
        self.published = current;
        self.tx.send_replace(Arc::new(JobsSnapshot { jobs }));
    }
}

/// Answers a job query from a snapshot (what the core used to answer from its own state).
pub(crate) fn query_jobs(snapshot: &JobsSnapshot, query: &JobQuery, now: UnixTime) -> Response {
    let jobs = snapshot
        .jobs
        .iter()
        .filter(|j| {
            query.job_ids.is_empty()
                || query.job_ids.contains(&j.job_id)
                || j.array_job_id.is_some_and(|a| query.job_ids.contains(&a))
        })
        .filter(|j| query.include_finished || !query.job_ids.is_empty() || !j.state().is_terminal())
        .filter(|j| query.users.is_empty() || query.users.contains(&j.uid))
        .filter(|j| {
            query.partitions.is_empty() || j.partition.split(',').any(|p| query.partitions.iter().any(|q| q == p))
        })
        .filter(|j| query.states.is_empty() || query.states.contains(&j.state()))
        .map(|j| JobInfo::clone(j))
        .collect();
    Response::Jobs { now, jobs }
}
