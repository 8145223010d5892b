//! The `[incidents]` part of `cluster.toml`: when ctld drains a node by itself because jobs keep
//! failing there. Only failures that point at the node count (a failed launch, a signal that
//! means hardware such as `SIGBUS`), never a job's own exit code. A node is drained (owner
//! `system`, the failed jobs as evidence) once `auto_drain_failures` such jobs of at least
//! `auto_drain_users` different users have failed on it within `auto_drain_window`, not counting
//! users whose jobs failed on other nodes too; at most `auto_drain_max_nodes` nodes are drained
//! so per window across the cluster, and beyond that ctld raises an alert instead. Failures of
//! one user alone never drain a node: a user whose own script fails could otherwise take every
//! node out of service.

use super::usage::RawDuration;
use serde::Deserialize;

/// The raw `[incidents]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIncidents {
    /// Failed jobs that drain a node (default 5; 0 turns automatic drains off).
    pub auto_drain_failures: Option<u32>,
    /// Different users those jobs must belong to (default 2, at least 2).
    pub auto_drain_users: Option<u32>,
    /// The window the failures must fall in (default 10 minutes).
    pub auto_drain_window: Option<RawDuration>,
    /// Nodes drained so per window across the cluster (default 1; 0: alerts only).
    pub auto_drain_max_nodes: Option<u32>,
}

/// Validated `[incidents]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncidentConfig {
    /// 0: no automatic drains.
    pub auto_drain_failures: u32,
    pub auto_drain_users: u32,
    pub auto_drain_window_secs: u64,
    /// Automatic drains per window, cluster-wide; beyond it an alert, not a drain.
    pub auto_drain_max_nodes: u32,
}

/// The most failures a node remembers: a window holding more drains the node anyway.
pub const MAX_AUTO_DRAIN_FAILURES: u32 = 1000;

impl Default for IncidentConfig {
    fn default() -> IncidentConfig {
        IncidentConfig {
            auto_drain_failures: 5,
            auto_drain_users: 2,
            auto_drain_window_secs: 600,
            auto_drain_max_nodes: 1,
        }
    }
}

impl RawIncidents {
    /// Applies the defaults and checks the bounds; an error is `(key, message)`.
    pub fn validate(self) -> Result<IncidentConfig, (String, String)> {
        let default = IncidentConfig::default();
        let auto_drain_failures = self.auto_drain_failures.unwrap_or(default.auto_drain_failures);
        if auto_drain_failures > MAX_AUTO_DRAIN_FAILURES {
            return Err((
                "incidents.auto_drain_failures".into(),
                format!("at most {MAX_AUTO_DRAIN_FAILURES} (0 turns automatic drains off)"),
            ));
        }
        let auto_drain_users = self.auto_drain_users.unwrap_or(default.auto_drain_users);
        if auto_drain_users < 2 {
            return Err((
                "incidents.auto_drain_users".into(),
                "at least 2: one user's own failing jobs must not drain a node".into(),
            ));
        }
        let auto_drain_window_secs = match &self.auto_drain_window {
            None => default.auto_drain_window_secs,
            Some(window) => window.seconds().filter(|s| *s > 0).ok_or_else(|| {
                (
                    "incidents.auto_drain_window".to_owned(),
                    format!("`{}` is not a time like \"10:00\" or seconds", window.text()),
                )
            })?,
        };
        let auto_drain_max_nodes = self.auto_drain_max_nodes.unwrap_or(default.auto_drain_max_nodes);
        if usize::try_from(auto_drain_max_nodes).map_or(true, |n| n > super::MAX_CONFIG_NODES) {
            return Err((
                "incidents.auto_drain_max_nodes".into(),
                format!("at most {} (0: alerts only)", super::MAX_CONFIG_NODES),
            ));
        }
        Ok(IncidentConfig { auto_drain_failures, auto_drain_users, auto_drain_window_secs, auto_drain_max_nodes })
    }
}
