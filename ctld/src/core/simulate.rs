//! `drover simulate` put together: the window and caps checked, the recorded jobs read from the
//! accounting database (`store::accounting::replay`), then replayed twice by `policy::sim`,
//! under the running config and under the candidate, within a wall-clock budget. It runs on a
//! blocking thread of its own, never on the core, and the two runs on two threads of their own
//! at a lower CPU priority (nice 10) than ctld's: each replay schedules a fresh state, so ctld's
//! live state is never read or changed.

use crate::model::refusal::Refusal;
use crate::policy::sim::{self, Bounds, Recorded};
use drover_shared::UnixTime;
use drover_shared::config::Config;
use drover_shared::proto::client::ErrorCode;
use drover_shared::proto::simulate::{
    DEFAULT_WINDOW_SECS, MAX_JOBS_LIMIT, MAX_WINDOW_SECS, SimulateReport, SimulateRequest,
};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The window a request asks for, `[from, to)`, checked against the caps.
pub(crate) fn window(request: &SimulateRequest, now: UnixTime) -> Result<(UnixTime, UnixTime), Refusal> {
    let to = request.to.unwrap_or(now);
    let from = request.from.unwrap_or(to - DEFAULT_WINDOW_SECS);
    if from >= to {
        return Err(Refusal::new(ErrorCode::InvalidTimeValue, "--from must be before --to"));
    }
    if to - from > MAX_WINDOW_SECS {
        let days = MAX_WINDOW_SECS / 86_400;
        return Err(Refusal::new(ErrorCode::InvalidTimeValue, format!("the window may cover at most {days} days")));
    }
    if request.resolution_s.is_some_and(|r| !(1..=600).contains(&r)) {
        return Err(Refusal::new(ErrorCode::InvalidSpec, "--resolution must be 1 to 600 seconds"));
    }
    if request.max_jobs == 0 || request.max_jobs > MAX_JOBS_LIMIT {
        return Err(Refusal::new(ErrorCode::InvalidSpec, format!("--max-jobs must be 1 to {MAX_JOBS_LIMIT}")));
    }
    Ok((from, to))
}

/// In replays of more than 5,000 jobs, simulated seconds between the passes that plan backfill
/// reservations, and the jobs each may plan a reservation for (besides those that hold one).
const BACKFILL_INTERVAL: i64 = 60;
const BACKFILL_JOBS: usize = 20;

/// Seconds one pass stands for: every second for up to 5,000 jobs (ctld's own pace), then a
/// second per 1,000 jobs, at most 120 (a week of 100,000 jobs on 1,000 nodes then replays in
/// under a minute on two cores: docs/admin/simulate.md).
fn resolution(jobs: usize) -> i64 {
    if jobs <= 5_000 {
        return 1;
    }
    i64::try_from(jobs / 1_000).unwrap_or(120).clamp(5, 120)
}

/// The nice value of the threads that replay: ctld's own threads (nice 0) come first.
const REPLAY_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority to [`REPLAY_NICE`] (Linux keeps a nice value per
/// thread; `None` names the calling one). A thread that cannot lower it runs as it is.
fn yield_to_ctld() {
    if let Err(e) = rustix::process::setpriority_process(None, REPLAY_NICE) {
        tracing::debug!(error = %e, "could not lower a simulation thread's priority");
    }
}

/// Replays the jobs of the request's window under `current` and `candidate`, both at once.
pub(crate) fn run(
    db_path: &Path,
    current: Arc<Config>,
    candidate: Arc<Config>,
    request: &SimulateRequest,
    now: UnixTime,
    budget: Duration,
) -> Result<SimulateReport, Refusal> {
    let began = Instant::now();
    let (from, to) = window(request, now)?;
    let internal = |e: crate::store::db::DbError| Refusal::new(ErrorCode::Internal, e.to_string());
    let counted = crate::store::accounting::replay::count(db_path, from, to).map_err(internal)?;
    if counted.ended > u64::from(request.max_jobs) {
        let detail = format!(
            "{} jobs ran in the window, more than the cap of {} (--max-jobs, at most {MAX_JOBS_LIMIT}); \
             replay a shorter window (--from/--to)",
            counted.ended, request.max_jobs
        );
        return Err(Refusal::new(ErrorCode::InvalidSpec, detail));
    }
    let jobs: Vec<Recorded> = crate::store::accounting::replay::recorded(db_path, from, to, request.max_jobs)
        .map_err(internal)?
        .into_iter()
        .map(|(info, spec)| Recorded { info, spec })
        .collect();
    let resolution = request.resolution_s.unwrap_or_else(|| resolution(jobs.len()));
    let mut bounds =
        Bounds { deadline: Some(began + budget), resolution, tick: 10.max(resolution), ..Bounds::default() };
    if resolution > 1 {
        bounds.backfill_interval = BACKFILL_INTERVAL;
        bounds.backfill_jobs = BACKFILL_JOBS;
    }
    let over = |e: sim::SimError| Refusal::new(ErrorCode::Internal, e.to_string());
    // The two runs are independent: each on a thread of its own, below ctld's own threads.
    let replay = |config: Arc<Config>| {
        let (jobs, bounds) = (&jobs, &bounds);
        move || {
            yield_to_ctld();
            sim::replay(config, jobs, from, to, bounds)
        }
    };
    let (current, candidate) = std::thread::scope(|scope| {
        let current = scope.spawn(replay(current));
        let candidate = scope.spawn(replay(candidate));
        (current.join(), candidate.join())
    });
    let lost = |_| Refusal::new(ErrorCode::Internal, "a simulation run failed");
    let mut current = current.map_err(lost)?.map_err(over)?;
    let mut candidate = candidate.map_err(lost)?.map_err(over)?;
    // Utilization over the part of the window with work in it, the same span for both runs:
    // from the first submission to the later run's last end.
    let first = jobs.iter().map(|j| j.info.submit_time).min().unwrap_or(from).max(from);
    let last = current.run.end.max(candidate.run.end).min(to);
    for run in [&mut current.run, &mut candidate.run] {
        let delivered: f64 = run.teams.iter().map(|t| t.gpu_hours * 3600.0).sum();
        #[allow(clippy::cast_precision_loss)]
        let capacity = run.total_gpus as f64 * (last - first).max(1) as f64;
        run.gpu_utilization = if capacity > 0.0 { (delivered / capacity).min(1.0) } else { 0.0 };
    }
    Ok(SimulateReport {
        from,
        to,
        jobs: u32::try_from(jobs.len()).unwrap_or(u32::MAX),
        skipped: u32::try_from(counted.skipped).unwrap_or(u32::MAX),
        fidelity: sim::fidelity(&jobs, &current),
        current: current.run,
        candidate: candidate.run,
        elapsed_ms: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
        resolution_s: resolution,
    })
}
