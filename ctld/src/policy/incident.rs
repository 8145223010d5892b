//! When a node's recent job failures are enough to drain it by itself: `auto_drain_failures`
//! failed jobs inside the window, of at least `auto_drain_users` different users (one user's own
//! failing script never drains a node). The answer is the evidence the drain records.

use crate::model::incident::RecentFailures;
use drover_shared::UnixTime;
use drover_shared::config::incidents::IncidentConfig;
use std::collections::BTreeSet;

/// The drain's evidence (`N jobs of M users failed within S s: jobs …`) when the node's failures
/// call for one, else `None`.
pub(crate) fn auto_drain_evidence(failures: &RecentFailures, config: &IncidentConfig, now: UnixTime) -> Option<String> {
    if config.auto_drain_failures == 0 {
        return None;
    }
    let oldest = now.saturating_sub(i64::try_from(config.auto_drain_window_secs).unwrap_or(i64::MAX));
    let recent: Vec<_> = failures.iter().filter(|f| f.time >= oldest).collect();
    let users: BTreeSet<u32> = recent.iter().map(|f| f.uid).collect();
    if recent.len() < config.auto_drain_failures as usize || users.len() < config.auto_drain_users as usize {
        return None;
    }
    let jobs: Vec<String> = recent.iter().map(|f| f.job_id.to_string()).collect();
    Some(format!(
        "{} jobs of {} users failed within {} s: jobs {}",
        recent.len(),
        users.len(),
        config.auto_drain_window_secs,
        jobs.join(",")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::incident::Failure;

    fn config() -> IncidentConfig {
        IncidentConfig { auto_drain_failures: 3, auto_drain_users: 2, auto_drain_window_secs: 60 }
    }

    fn failures(list: &[(UnixTime, u32, u32)]) -> RecentFailures {
        let mut recent = RecentFailures::default();
        for &(time, job_id, uid) in list {
            recent.push(Failure { time, job_id, uid }, 60, 3);
        }
        recent
    }

    #[test]
    fn failures_of_several_users_within_the_window_drain() {
        let evidence =
            auto_drain_evidence(&failures(&[(100, 1, 1001), (110, 2, 1002), (120, 3, 1001)]), &config(), 120);
        assert_eq!(evidence.as_deref(), Some("3 jobs of 2 users failed within 60 s: jobs 1,2,3"));
    }

    #[test]
    fn one_users_failures_never_drain() {
        let list: Vec<_> = (0..10u32).map(|i| (100 + UnixTime::from(i), i, 1001)).collect();
        assert_eq!(auto_drain_evidence(&failures(&list), &config(), 110), None);
    }

    #[test]
    fn failures_outside_the_window_do_not_count() {
        let recent = failures(&[(10, 1, 1001), (100, 2, 1002), (120, 3, 1001)]);
        assert_eq!(auto_drain_evidence(&recent, &config(), 120), None);
        // Later, the same failures have aged out too.
        let recent = failures(&[(100, 1, 1001), (110, 2, 1002), (120, 3, 1001)]);
        assert_eq!(auto_drain_evidence(&recent, &config(), 200), None);
    }

    #[test]
    fn zero_turns_automatic_drains_off() {
        let recent = failures(&[(100, 1, 1001), (110, 2, 1002), (120, 3, 1001)]);
        let off = IncidentConfig { auto_drain_failures: 0, ..config() };
        assert_eq!(auto_drain_evidence(&recent, &off, 120), None);
    }
}
