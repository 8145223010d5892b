//! When a node's recent job failures are enough to drain it by itself. Only a job end that
//! points at the node counts ([`points_at_node`]: a failed launch, a signal that means hardware);
//! a job's own exit code never does, whoever's job it is. A node drains once
//! `auto_drain_failures` such jobs inside the window belong to at least `auto_drain_users`
//! different users, not counting users whose jobs also failed on another node in the window
//! (they are the cause, not the nodes). At most `auto_drain_max_nodes` nodes drain so per
//! window across the cluster; beyond that the answer is an alert, not a drain.

use crate::model::incident::RecentFailures;
use drover_shared::UnixTime;
use drover_shared::config::incidents::IncidentConfig;
use drover_shared::job::WaitStatus;
use drover_shared::proto::node::JobOutcome;
use std::collections::BTreeSet;

/// `SIGBUS`: on Linux the kernel sends it for a memory error the machine could not correct
/// (`BUS_MCEERR_AR`) as well as for a mapped file cut short under the job.
const SIGBUS: i32 = 7;

/// Whether a job's end points at the node that ran it rather than at the job: its launch failed
/// on the node, or a signal that means hardware (`SIGBUS`) killed it. An exit code, a signal the
/// job sent itself otherwise, a time limit, a cancel and the job's own out-of-memory end never do.
pub(crate) fn points_at_node(outcome: &JobOutcome, exit_status: WaitStatus) -> bool {
    match outcome {
        JobOutcome::LaunchFailed { .. } => true,
        JobOutcome::Exited => exit_status.parts().1 == SIGBUS,
        JobOutcome::TimedOut | JobOutcome::Cancelled | JobOutcome::OutOfMemory => false,
    }
}

/// What a node's failures call for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Drain it, with this evidence.
    Drain(String),
    /// It would be drained, but the window already holds `auto_drain_max_nodes` automatic
    /// drains: raise an alert with this evidence instead.
    Alert(String),
}

/// The verdict on a node's failures (`N jobs of M users failed within S s: jobs …`), or `None`
/// when they call for nothing. `elsewhere(uid)`: whether that user's jobs failed on another node
/// within the window; `drains` the automatic drains of the window so far.
pub(crate) fn auto_drain_verdict(
    failures: &RecentFailures,
    config: &IncidentConfig,
    now: UnixTime,
    elsewhere: impl Fn(u32) -> bool,
    drains: usize,
) -> Option<Verdict> {
    if config.auto_drain_failures == 0 {
        return None;
    }
    let oldest = window_start(config, now);
    let recent: Vec<_> = failures.iter().filter(|f| f.time >= oldest && !elsewhere(f.uid)).collect();
    let users: BTreeSet<u32> = recent.iter().map(|f| f.uid).collect();
    if recent.len() < config.auto_drain_failures as usize || users.len() < config.auto_drain_users as usize {
        return None;
    }
    let jobs: Vec<String> = recent.iter().map(|f| f.job_id.to_string()).collect();
    let evidence = format!(
        "{} jobs of {} users failed within {} s: jobs {}",
        recent.len(),
        users.len(),
        config.auto_drain_window_secs,
        jobs.join(",")
    );
    if drains >= config.auto_drain_max_nodes as usize {
        Some(Verdict::Alert(evidence))
    } else {
        Some(Verdict::Drain(evidence))
    }
}

/// The oldest time inside the window that ends at `now`.
pub(crate) fn window_start(config: &IncidentConfig, now: UnixTime) -> UnixTime {
    now.saturating_sub(i64::try_from(config.auto_drain_window_secs).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::incident::Failure;

    fn config() -> IncidentConfig {
        IncidentConfig {
            auto_drain_failures: 3,
            auto_drain_users: 2,
            auto_drain_window_secs: 60,
            auto_drain_max_nodes: 1,
        }
    }

    fn failures(list: &[(UnixTime, u32, u32)]) -> RecentFailures {
        let mut recent = RecentFailures::default();
        for &(time, job_id, uid) in list {
            recent.push(Failure { time, job_id, uid }, 60, 3);
        }
        recent
    }

    fn verdict(recent: &RecentFailures, config: &IncidentConfig, now: UnixTime) -> Option<Verdict> {
        auto_drain_verdict(recent, config, now, |_| false, 0)
    }

    #[test]
    fn failures_of_several_users_within_the_window_drain() {
        let recent = failures(&[(100, 1, 1001), (110, 2, 1002), (120, 3, 1001)]);
        let expected = "3 jobs of 2 users failed within 60 s: jobs 1,2,3";
        assert_eq!(verdict(&recent, &config(), 120), Some(Verdict::Drain(expected.into())));
    }

    #[test]
    fn one_users_failures_never_drain() {
        let list: Vec<_> = (0..10u32).map(|i| (100 + UnixTime::from(i), i, 1001)).collect();
        assert_eq!(verdict(&failures(&list), &config(), 110), None);
    }

    #[test]
    fn failures_outside_the_window_do_not_count() {
        let recent = failures(&[(10, 1, 1001), (100, 2, 1002), (120, 3, 1001)]);
        assert_eq!(verdict(&recent, &config(), 120), None);
        // Later, the same failures have aged out too.
        let recent = failures(&[(100, 1, 1001), (110, 2, 1002), (120, 3, 1001)]);
        assert_eq!(verdict(&recent, &config(), 200), None);
    }

    #[test]
    fn zero_turns_automatic_drains_off() {
        let recent = failures(&[(100, 1, 1001), (110, 2, 1002), (120, 3, 1001)]);
        let off = IncidentConfig { auto_drain_failures: 0, ..config() };
        assert_eq!(verdict(&recent, &off, 120), None);
    }

    #[test]
    fn users_failing_on_other_nodes_do_not_count() {
        let recent = failures(&[(100, 1, 1001), (110, 2, 1002), (120, 3, 1001)]);
        assert_eq!(auto_drain_verdict(&recent, &config(), 120, |uid| uid == 1002, 0), None);
    }

    #[test]
    fn drains_beyond_the_cap_are_alerts() {
        let recent = failures(&[(100, 1, 1001), (110, 2, 1002), (120, 3, 1001)]);
        let evidence = "3 jobs of 2 users failed within 60 s: jobs 1,2,3".to_owned();
        assert_eq!(auto_drain_verdict(&recent, &config(), 120, |_| false, 1), Some(Verdict::Alert(evidence.clone())));
        let alerts_only = IncidentConfig { auto_drain_max_nodes: 0, ..config() };
        assert_eq!(auto_drain_verdict(&recent, &alerts_only, 120, |_| false, 0), Some(Verdict::Alert(evidence)));
    }

    #[test]
    fn only_failures_that_point_at_the_node_count() {
        let exited = JobOutcome::Exited;
        assert!(!points_at_node(&exited, WaitStatus::exited(1)));
        assert!(!points_at_node(&exited, WaitStatus::exited(7)));
        assert!(!points_at_node(&exited, WaitStatus::signaled(9)));
        assert!(!points_at_node(&exited, WaitStatus::signaled(11)));
        assert!(points_at_node(&exited, WaitStatus::signaled(SIGBUS)));
        assert!(points_at_node(&JobOutcome::LaunchFailed { message: "fork".into() }, WaitStatus::exited(1)));
        assert!(!points_at_node(&JobOutcome::OutOfMemory, WaitStatus::signaled(9)));
        assert!(!points_at_node(&JobOutcome::TimedOut, WaitStatus::signaled(15)));
    }
}
