//! `drover simulate`: the what-if replay of recorded jobs against the running config and a
//! candidate one ([`SimulateRequest`]), and its answer, one [`SimRun`] per config with a row per
//! team (account) ([`SimulateReport`]).

use crate::UnixTime;
use serde::{Deserialize, Serialize};

/// The most jobs one simulation may replay, whatever the request asks.
pub const MAX_JOBS_LIMIT: u32 = 250_000;
/// The default cap on jobs replayed.
pub const DEFAULT_MAX_JOBS: u32 = 150_000;
/// The longest window of submissions one simulation may replay (31 days).
pub const MAX_WINDOW_SECS: i64 = 31 * 86_400;
/// The default window: the last 7 days.
pub const DEFAULT_WINDOW_SECS: i64 = 7 * 86_400;

/// Replays the jobs submitted in `[from, to)` against ctld's config and against `config_text`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulateRequest {
    /// Where the candidate came from, for messages (`file:line:column`).
    pub config_path: String,
    /// The candidate config's text (the admin's file; a cluster home's file is resolved by the
    /// command first).
    pub config_text: String,
    /// Default: `to` less 7 days.
    pub from: Option<UnixTime>,
    /// Default: now.
    pub to: Option<UnixTime>,
    /// Refuse rather than replay more jobs than this (at most [`MAX_JOBS_LIMIT`]).
    pub max_jobs: u32,
    /// Seconds of simulated time one pass stands for (1 to 600); `None`: chosen by the number
    /// of jobs.
    pub resolution_s: Option<i64>,
}

/// One team's (account's) figures in one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TeamFigures {
    pub account: String,
    /// Jobs replayed for the team.
    pub jobs: u32,
    /// Of which never started before the simulation's end.
    pub never_started: u32,
    /// Of which the config refuses at submission (no such account, user, partition or QOS, or it
    /// could never fit).
    pub refused: u32,
    /// Wait (start less eligible time), seconds, of the jobs that started.
    pub wait_p50_s: i64,
    pub wait_p95_s: i64,
    /// GPU-hours delivered (allocated) in the window.
    pub gpu_hours: f64,
    /// Of all GPU-hours delivered in the window, the team's fraction.
    pub delivered_fraction: f64,
    /// The team's configured share among the replayed teams (its `shares` over their sum).
    pub share_fraction: f64,
    /// GPUs guaranteed by the team's quotas (summed over partitions).
    pub guaranteed_gpus: u64,
    /// Runs preempted (reclaimed), and the GPU-hours those runs had done (lost on requeue).
    pub preemptions: u32,
    pub lost_gpu_hours: f64,
    /// Jobs that waited at some pass on a QOS or association limit, or on a quota.
    pub limit_hits: u32,
    pub quota_hits: u32,
}

/// The figures of one config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimRun {
    /// Config order (accounts of replayed jobs the config lacks last).
    pub teams: Vec<TeamFigures>,
    /// Allocated GPU-seconds over the cluster's GPU-seconds, 0–1, from the window's first
    /// submission to the later run's last end (within the window).
    pub gpu_utilization: f64,
    pub total_gpus: u64,
    /// Scheduling passes run, and when the last job ended (simulated time).
    pub passes: u64,
    pub end: UnixTime,
}

/// How closely the run of the current config reproduces what was recorded: absolute
/// differences between simulated and recorded waits, over the jobs that started in both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fidelity {
    pub jobs: u32,
    pub median_abs_error_s: i64,
    pub p95_abs_error_s: i64,
    /// Per team: (account, recorded wait p50, simulated wait p50, median absolute error).
    pub teams: Vec<(String, i64, i64, i64)>,
}

/// The answer to [`SimulateRequest`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimulateReport {
    pub from: UnixTime,
    pub to: UnixTime,
    /// Jobs replayed; recorded jobs of the window left out because they never ran (cancelled
    /// while pending) or have not ended.
    pub jobs: u32,
    pub skipped: u32,
    pub current: SimRun,
    pub candidate: SimRun,
    pub fidelity: Fidelity,
    /// Wall time the two runs took, milliseconds.
    pub elapsed_ms: u64,
    /// Seconds of simulated time one pass stands for: events within it are coalesced (1 for
    /// replays of up to 5,000 jobs, more for larger ones).
    pub resolution_s: i64,
}

// `Response` is `Eq`; the figures are finite numbers (every ratio is computed with a guard
// against an empty denominator), so equality is reflexive.
impl Eq for SimulateReport {}
