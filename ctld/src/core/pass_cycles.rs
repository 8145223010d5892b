//! The scheduling passes' statistics since ctld started, as `sdiag` shows them: each pass's cost
//! and depth, its backfill planning's, and the jobs it backfilled.

use crate::model::state::PassStats;
use drover_shared::UnixTime;
use drover_shared::proto::diag::CycleStats;
use std::time::Duration;

/// The passes so far.
#[derive(Debug, Default)]
pub(crate) struct PassCycles {
    pub(crate) main: CycleStats,
    pub(crate) backfill: CycleStats,
    pub(crate) backfilled: u64,
}

impl PassCycles {
    /// One pass at `now` that cost `cost` in all, with `stats` (its rounds summed).
    pub(crate) fn record(&mut self, now: UnixTime, cost: Duration, stats: &PassStats) {
        let depth = stats.considered as u64;
        add(&mut self.main, now, cost, depth);
        if !stats.backfill.is_zero() {
            add(&mut self.backfill, now, stats.backfill, depth);
        }
        self.backfilled += stats.backfilled as u64;
    }
}

fn add(cycles: &mut CycleStats, now: UnixTime, cost: Duration, depth: u64) {
    let us = u64::try_from(cost.as_micros()).unwrap_or(u64::MAX);
    cycles.cycles += 1;
    cycles.last_when = Some(now);
    cycles.last_us = us;
    cycles.max_us = cycles.max_us.max(us);
    cycles.total_us = cycles.total_us.saturating_add(us);
    cycles.last_depth = depth;
    cycles.total_depth = cycles.total_depth.saturating_add(depth);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_add_up_and_backfill_counts_only_when_it_planned() {
        let mut cycles = PassCycles::default();
        let stats = PassStats { considered: 10, backfilled: 2, ..PassStats::default() };
        cycles.record(100, Duration::from_micros(300), &stats);
        let stats = PassStats { considered: 4, backfill: Duration::from_micros(50), ..PassStats::default() };
        cycles.record(160, Duration::from_micros(100), &stats);
        assert_eq!(
            (cycles.main.cycles, cycles.main.last_us, cycles.main.max_us, cycles.main.total_us),
            (2, 100, 300, 400)
        );
        assert_eq!((cycles.main.last_depth, cycles.main.total_depth, cycles.main.last_when), (4, 14, Some(160)));
        assert_eq!((cycles.backfill.cycles, cycles.backfill.last_us, cycles.backfilled), (1, 50, 2));
    }
}
