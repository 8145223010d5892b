//! Incidents on nodes: who owns a node's drain or down (a person, a team, or `system` for the
//! drains ctld and noded make themselves), the ticket that tracks it and when it opened; the
//! recent job failures on a node that may open one by themselves, the nodes each user's jobs
//! failed on lately (a user whose jobs fail on several nodes is the cause, not the nodes) and the
//! automatic drains of the window (capped across the cluster).

use drover_shared::UnixTime;
use drover_shared::job::JobId;
use std::collections::{HashMap, VecDeque};

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

/// The most users [`FailingUsers`] remembers before it forgets those outside the window.
const REMEMBERED_USERS: usize = 4096;

/// For each user whose jobs failed on a node lately, the two most recent nodes (by name) with
/// the time of the last failure there: enough to tell whether the user failed on a node other
/// than a given one within the window.
#[derive(Debug, Clone, Default)]
pub(crate) struct FailingUsers {
    users: HashMap<u32, [Option<(String, UnixTime)>; 2]>,
}

impl FailingUsers {
    /// Records a failure of `uid`'s job on `node` at `time`.
    pub(crate) fn push(&mut self, uid: u32, node: &str, time: UnixTime, window: u64) {
        if self.users.len() >= REMEMBERED_USERS && !self.users.contains_key(&uid) {
            let oldest = time.saturating_sub(i64::try_from(window).unwrap_or(i64::MAX));
            self.users.retain(|_, nodes| nodes.iter().flatten().any(|(_, t)| *t >= oldest));
        }
        let nodes = self.users.entry(uid).or_default();
        if nodes[0].as_ref().is_some_and(|(name, _)| name == node) {
            nodes[0] = Some((node.to_owned(), time));
        } else {
            nodes[1] = nodes[0].take();
            nodes[0] = Some((node.to_owned(), time));
        }
    }

    /// Whether `uid`'s jobs failed on a node other than `node` since `since`.
    pub(crate) fn elsewhere(&self, uid: u32, node: &str, since: UnixTime) -> bool {
        self.users.get(&uid).is_some_and(|nodes| nodes.iter().flatten().any(|(n, t)| n != node && *t >= since))
    }
}

/// The automatic drains (for jobs failing on a node) of the window, oldest first, and how many
/// were withheld since ctld started because the window already held its cap.
#[derive(Debug, Clone, Default)]
pub(crate) struct AutoDrains {
    times: VecDeque<UnixTime>,
    pub(crate) withheld: u64,
}

impl AutoDrains {
    /// The drains since `since`.
    pub(crate) fn since(&mut self, since: UnixTime) -> usize {
        while self.times.front().is_some_and(|t| *t < since) {
            self.times.pop_front();
        }
        self.times.len()
    }

    pub(crate) fn push(&mut self, time: UnixTime) {
        self.times.push_back(time);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_known_to_fail_elsewhere_within_the_window() {
        let mut users = FailingUsers::default();
        users.push(1001, "n1", 100, 60);
        users.push(1001, "n1", 110, 60);
        assert!(!users.elsewhere(1001, "n1", 50));
        assert!(users.elsewhere(1001, "n2", 50));
        users.push(1001, "n2", 120, 60);
        users.push(1001, "n2", 130, 60);
        // n1's failure at 110 is still remembered beside n2's.
        assert!(users.elsewhere(1001, "n2", 100));
        assert!(!users.elsewhere(1001, "n2", 111));
        assert!(!users.elsewhere(1002, "n1", 0));
    }
}
