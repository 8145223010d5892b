//! What `sdiag` shows: ctld's counters since it started (jobs submitted, started and ended by
//! kind), the jobs it holds now, its scheduling passes and their backfill planning, and the
//! client requests it answered by kind. ctld fills it; the CLI renders Slurm's layout.

use crate::UnixTime;
use serde::{Deserialize, Serialize};

/// One kind of timed cycle: the scheduling pass, or its backfill planning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleStats {
    /// Cycles since ctld started.
    pub cycles: u64,
    /// When the last one ran (`None`: none yet).
    pub last_when: Option<UnixTime>,
    /// The last cycle's and the longest one's cost, and the sum (microseconds).
    pub last_us: u64,
    pub max_us: u64,
    pub total_us: u64,
    /// Pending jobs the last cycle considered, and the sum over all cycles.
    pub last_depth: u64,
    pub total_depth: u64,
}

/// ctld's statistics for `sdiag`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagReport {
    /// When the counters started (ctld's start) and now.
    pub since: UnixTime,
    pub now: UnixTime,
    pub jobs_submitted: u64,
    pub jobs_started: u64,
    pub jobs_completed: u64,
    pub jobs_canceled: u64,
    pub jobs_failed: u64,
    /// Jobs pending and running now.
    pub jobs_pending: u64,
    pub jobs_running: u64,
    /// The scheduling passes (all of a pass: placement, backfill planning and reclaim).
    pub main: CycleStats,
    /// The passes' backfill planning.
    pub backfill: CycleStats,
    /// Jobs started ahead of a higher-priority job that waits in the same partition.
    pub backfilled_jobs: u64,
    /// Client request kind → (answered, total microseconds).
    pub requests: Vec<(String, u64, u64)>,
}
