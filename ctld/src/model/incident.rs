//! Incidents on nodes: who owns a node's drain or down (a person, a team, or `system` for the
//! drains ctld and noded make themselves), the ticket that tracks it and when it opened; and the
//! recent job failures on a node that may open one by themselves.

use drover_shared::UnixTime;
use drover_shared::job::JobId;
use std::collections::VecDeque;

/// The owner of the incidents ctld and noded open by themselves.
pub(crate) const SYSTEM_OWNER: &str = "system";

/// A node's open incident: set by a drain or down, closed by resume (or undrain of a drain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Incident {
    pub(crate) owner: String,
    pub(crate) ticket: Option<String>,
    /// What the system saw (empty for a person's drain).
    pub(crate) evidence: String,
}

/// One job that failed on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) time: UnixTime,
    pub(crate) job_id: JobId,
    pub(crate) uid: u32,
}

/// The failures of one node inside the automatic-drain window, oldest first, never more than
/// the configured count (so a node that fails a million jobs holds a few entries).
#[derive(Debug, Clone, Default)]
pub(crate) struct RecentFailures {
    failures: VecDeque<Failure>,
}

impl RecentFailures {
    /// Records a failure and forgets those older than `window` seconds or beyond `keep`.
    pub(crate) fn push(&mut self, failure: Failure, window: u64, keep: usize) {
        self.failures.push_back(failure);
        let oldest = failure.time.saturating_sub(i64::try_from(window).unwrap_or(i64::MAX));
        while self.failures.front().is_some_and(|f| f.time < oldest) || self.failures.len() > keep.max(1) {
            self.failures.pop_front();
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Failure> {
        self.failures.iter()
    }

    pub(crate) fn clear(&mut self) {
        self.failures.clear();
    }
}
