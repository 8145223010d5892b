//! Usage accounting: one usage record per job run (allocated TRES, GPU-seconds by type, queue
//! wait, end state, borrowed or guaranteed), and hourly rollups per user, account, partition and
//! GPU type, both in the state database.
//!
//! A record is made when a run ends (or is requeued) and is written by the database writer in the
//! same transaction as the job's end; its run time is spread over the hours it overlapped. The
//! record is keyed by `(job_id, run)` and the rollup only grows when the record is new, so a
//! repeated end (a node repeats ends until acknowledged) is counted once. Old rows are deleted
//! after the `[accounting]` retention periods. The tables are migration 2 of `migrations.rs`.

pub(crate) mod query;
pub(crate) mod replay;

use crate::model::state::{Job, State};
use crate::model::tres;
use drover_shared::UnixTime;
use drover_shared::config::usage::{IdleAction, IdleGpuPolicy};
use drover_shared::proto::usage::JobUsage;
use rusqlite::{Transaction, params};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One hour in seconds.
pub(crate) const HOUR: i64 = 3600;

/// A finished run, ready to store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UsageRecord {
    pub(crate) job: JobUsage,
    /// GPU type (lower-case, `generic` when untyped) → count.
    pub(crate) gpus_by_type: BTreeMap<String, u64>,
    /// Billing units per second of run time (TRES × weights of the partition).
    pub(crate) billing: f64,
}

/// What a run holds, taken when it starts (the allocation is gone by the time it ends).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunSnapshot {
    pub(crate) cpus: u32,
    pub(crate) mem_mb: u64,
    pub(crate) gpus_by_type: BTreeMap<String, u64>,
    pub(crate) billing: f64,
    pub(crate) borrowed: bool,
    /// Busy GPU-seconds from the node's samples so far, and when the last sample came.
    pub(crate) active_gpu_secs: f64,
    pub(crate) last_sample: Option<UnixTime>,
    pub(crate) sampled_since: UnixTime,
    /// Idle-GPU policy: since when the job's GPUs are below the threshold, and what was done.
    pub(crate) idle_since: Option<UnixTime>,
    pub(crate) idle_warned: bool,
    pub(crate) idle_acted: bool,
}

/// What the idle-GPU policy asks for after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdleStep {
    Nothing,
    /// Warn (audit record, log) that the job has been idle this many seconds.
    Warn(i64),
    /// Apply the policy's action (idle this many seconds).
    Act(IdleAction, i64),
}

/// Longest stretch one sample stands for (a node that stops sampling is not extrapolated).
const MAX_SAMPLE_GAP: i64 = 30;

impl RunSnapshot {
    /// Adds one heartbeat's sample taken at `now`: Σ utilization over the job's GPUs × the time
    /// since the previous sample (or since the run's snapshot), at most [`MAX_SAMPLE_GAP`].
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn add_sample(&mut self, utilization_percent_sum: u32, now: UnixTime) {
        let since = self.last_sample.unwrap_or(self.sampled_since);
        let dt = (now - since).clamp(0, MAX_SAMPLE_GAP);
        self.active_gpu_secs += f64::from(utilization_percent_sum) / 100.0 * dt as f64;
        self.last_sample = Some(now);
    }

    /// Applies `policy` to a sample whose GPUs averaged `mean_percent` at `now`: a job below the
    /// threshold for `warn_after` is warned once, for `after` acted on once; a busy sample resets
    /// the idle stretch (and the warning).
    pub(crate) fn idle_check(&mut self, policy: &IdleGpuPolicy, mean_percent: u32, now: UnixTime) -> IdleStep {
        if mean_percent >= policy.threshold_percent {
            self.idle_since = None;
            self.idle_warned = false;
            return IdleStep::Nothing;
        }
        let idle = now - *self.idle_since.get_or_insert(now);
        let reached = |secs: u64| idle >= i64::try_from(secs).unwrap_or(i64::MAX);
        if !self.idle_acted && reached(policy.after_secs) {
            self.idle_acted = true;
            return IdleStep::Act(policy.action, idle);
        }
        if !self.idle_warned && !self.idle_acted && policy.warn_after_secs.is_some_and(reached) {
            self.idle_warned = true;
            return IdleStep::Warn(idle);
        }
        IdleStep::Nothing
    }
}

/// The snapshot of a job that holds an allocation; `borrowed` from this pass's quota split.
pub(crate) fn snapshot(state: &State, job: &Job, borrowed: bool) -> Option<RunSnapshot> {
    let alloc = job.alloc.as_ref()?;
    let mut gpus_by_type = BTreeMap::new();
    for share in &alloc.nodes {
        let node = state.node_index().get(&share.node).map(|&i| &state.nodes()[i]);
        for index in &share.gpus {
            let t = node
                .and_then(|n| n.gpus.iter().find(|g| g.index == *index))
                .map(|g| g.gpu_type.to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "generic".into());
            *gpus_by_type.entry(t).or_default() += 1;
        }
    }
    Some(RunSnapshot {
        cpus: alloc.nodes.iter().map(|n| n.cpus).sum(),
        mem_mb: alloc.nodes.iter().map(|n| n.mem_mb).sum(),
        gpus_by_type,
        billing: tres::job_billing(state, job),
        borrowed,
        active_gpu_secs: 0.0,
        last_sample: None,
        sampled_since: job.info.start_time.unwrap_or_else(drover_shared::now),
        idle_since: None,
        idle_warned: false,
        idle_acted: false,
    })
}

/// The record of `job`'s run that ended at `end` in `state_name` (a long Slurm state name).
pub(crate) fn record(job: &Job, snap: &RunSnapshot, state_name: &str, end: UnixTime) -> UsageRecord {
    let info = &job.info;
    let start = info.start_time.unwrap_or(end).min(end);
    let gpus: u64 = snap.gpus_by_type.values().sum();
    UsageRecord {
        job: JobUsage {
            job_id: info.job_id,
            run: info.restarts,
            user: info.user.clone(),
            account: info.account.clone(),
            partition: info.partition.clone(),
            submit_time: info.submit_time,
            eligible_time: info.eligible_time.unwrap_or(info.submit_time).min(start),
            start_time: start,
            end_time: end,
            state: state_name.to_owned(),
            reason: info.reason.clone(),
            cpus: snap.cpus,
            mem_mb: snap.mem_mb,
            gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
            gpu_types: snap.gpus_by_type.iter().map(|(t, n)| format!("{t}:{n}")).collect::<Vec<_>>().join(","),
            borrowed: snap.borrowed,
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            active_gpu_secs: snap.last_sample.map(|_| snap.active_gpu_secs.round() as u64),
            template: info.template.clone().unwrap_or_default(),
        },
        gpus_by_type: snap.gpus_by_type.clone(),
        billing: snap.billing,
    }
}

/// `[start, end)` cut at hour boundaries: `(hour start, seconds in that hour)`.
pub(crate) fn split_hours(start: UnixTime, end: UnixTime) -> Vec<(UnixTime, i64)> {
    let mut out = Vec::new();
    let mut t = start;
    while t < end {
        let hour = t.div_euclid(HOUR) * HOUR;
        let next = (hour + HOUR).min(end);
        out.push((hour, next - t));
        t = next;
    }
    out
}

/// Stores `record` and adds it to the hourly rollups, unless that run is already stored.
pub(crate) fn write(tx: &Transaction<'_>, record: &UsageRecord) -> rusqlite::Result<()> {
    let j = &record.job;
    let inserted = tx.prepare_cached(
        "INSERT OR IGNORE INTO usage_jobs (job_id, run, user, account, partition, submit_time, eligible_time, start_time,
         end_time, state, reason, cpus, mem_mb, gpus, gpu_types, borrowed, billing, active_gpu_secs, template)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
    )?
    .execute(params![
        j.job_id, j.run, j.user, j.account, j.partition, j.submit_time, j.eligible_time, j.start_time, j.end_time, j.state,
        j.reason, j.cpus, j.mem_mb, j.gpus, j.gpu_types, j.borrowed, record.billing, j.active_gpu_secs, j.template
    ])?;
    if inserted == 0 {
        return Ok(());
    }
    let mut add = tx.prepare_cached(
        "INSERT INTO usage_hourly (hour, user, account, partition, gpu_type, cpu_secs, mem_mb_secs, gpu_secs,
         borrowed_gpu_secs, active_gpu_secs, billing_secs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?11, ?10)
         ON CONFLICT (hour, user, account, partition, gpu_type) DO UPDATE SET
         cpu_secs = cpu_secs + excluded.cpu_secs, mem_mb_secs = mem_mb_secs + excluded.mem_mb_secs,
         gpu_secs = gpu_secs + excluded.gpu_secs, borrowed_gpu_secs = borrowed_gpu_secs + excluded.borrowed_gpu_secs,
         active_gpu_secs = active_gpu_secs + excluded.active_gpu_secs,
         billing_secs = billing_secs + excluded.billing_secs",
    )?;
    let gpus: i64 = i64::from(j.gpus);
    // Active time is spread over the hours in proportion to the run time in each; the last hour
    // takes the rounding rest, so the hours add up to the record.
    let active = i64::try_from(j.active_gpu_secs.unwrap_or(0)).unwrap_or(i64::MAX);
    let run = (j.end_time - j.start_time).max(1);
    let hours = split_hours(j.start_time, j.end_time);
    let mut active_left = active;
    for (n, (hour, secs)) in hours.iter().copied().enumerate() {
        let active_here = if n + 1 == hours.len() { active_left } else { active * secs / run };
        active_left -= active_here;
        let borrowed = if j.borrowed { gpus * secs } else { 0 };
        #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
        let billing = (record.billing * secs as f64).round() as i64;
        let mem = i64::try_from(j.mem_mb).unwrap_or(i64::MAX).saturating_mul(secs);
        add.execute(params![
            hour,
            j.user,
            j.account,
            j.partition,
            "",
            i64::from(j.cpus) * secs,
            mem,
            gpus * secs,
            borrowed,
            billing,
            active_here
        ])?;
        for (gpu_type, count) in &record.gpus_by_type {
            let n = i64::try_from(*count).unwrap_or(0) * secs;
            let b = if j.borrowed { n } else { 0 };
            add.execute(params![hour, j.user, j.account, j.partition, gpu_type, 0, 0, n, b, 0, 0])?;
        }
    }
    Ok(())
}

/// Deletes rollups and job records older than the retention periods.
pub(crate) fn purge(tx: &Transaction<'_>, now: UnixTime, hours_days: u32, jobs_days: u32) -> rusqlite::Result<()> {
    let day = 86_400;
    tx.execute("DELETE FROM usage_hourly WHERE hour < ?1", params![now - i64::from(hours_days) * day])?;
    tx.execute("DELETE FROM usage_jobs WHERE end_time < ?1", params![now - i64::from(jobs_days) * day])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_cut_at_hour_boundaries() {
        // 00:50 to 02:10: 10 minutes, a full hour, 10 minutes.
        assert_eq!(split_hours(3000, 7800), vec![(0, 600), (3600, 3600), (7200, 600)]);
        assert_eq!(split_hours(100, 100), vec![]);
        assert_eq!(split_hours(3600, 3601), vec![(3600, 1)]);
    }

    fn sample(job_id: u32, borrowed: bool, start: i64, end: i64) -> UsageRecord {
        UsageRecord {
            job: JobUsage {
                job_id,
                user: "alice".into(),
                account: "vision".into(),
                partition: "main".into(),
                start_time: start,
                end_time: end,
                state: "COMPLETED".into(),
                cpus: 4,
                mem_mb: 1000,
                gpus: 2,
                gpu_types: "h100:2".into(),
                borrowed,
                ..JobUsage::default()
            },
            gpus_by_type: [("h100".to_owned(), 2)].into(),
            billing: 20.0,
        }
    }

    #[test]
    fn idle_policy_warns_then_acts_once_and_busy_resets() {
        let policy = IdleGpuPolicy {
            partition: "gpu".into(),
            threshold_percent: 10,
            after_secs: 60,
            action: IdleAction::Cancel,
            warn_after_secs: Some(30),
        };
        let mut snap = snapshot_for_test();
        assert_eq!(snap.idle_check(&policy, 5, 100), IdleStep::Nothing); // idle from 100
        assert_eq!(snap.idle_check(&policy, 50, 120), IdleStep::Nothing); // busy: reset
        assert_eq!(snap.idle_check(&policy, 0, 130), IdleStep::Nothing); // idle from 130
        assert_eq!(snap.idle_check(&policy, 9, 160), IdleStep::Warn(30));
        assert_eq!(snap.idle_check(&policy, 9, 170), IdleStep::Nothing);
        assert_eq!(snap.idle_check(&policy, 0, 190), IdleStep::Act(IdleAction::Cancel, 60));
        assert_eq!(snap.idle_check(&policy, 0, 250), IdleStep::Nothing);
    }

    fn snapshot_for_test() -> RunSnapshot {
        RunSnapshot {
            cpus: 1,
            mem_mb: 0,
            gpus_by_type: BTreeMap::new(),
            billing: 1.0,
            borrowed: false,
            active_gpu_secs: 0.0,
            last_sample: None,
            sampled_since: 0,
            idle_since: None,
            idle_warned: false,
            idle_acted: false,
        }
    }

    #[test]
    fn samples_make_active_time_spread_over_the_hours() {
        let mut snap = RunSnapshot {
            cpus: 1,
            mem_mb: 0,
            gpus_by_type: BTreeMap::new(),
            billing: 1.0,
            borrowed: false,
            active_gpu_secs: 0.0,
            last_sample: None,
            sampled_since: 1000,
            idle_since: None,
            idle_warned: false,
            idle_acted: false,
        };
        // Two GPUs at 50 % and 30 % every 10 s for a minute: 0.8 × 60 = 48 GPU-seconds; a 100 s
        // silence then counts only 30 s.
        for t in (1010..=1060).step_by(10) {
            snap.add_sample(80, t);
        }
        assert!((snap.active_gpu_secs - 48.0).abs() < 1e-9);
        snap.add_sample(100, 1160);
        assert!((snap.active_gpu_secs - 78.0).abs() < 1e-9);

        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::store::migrations::migrate(&mut conn, std::path::Path::new(":memory:")).unwrap();
        let tx = conn.transaction().unwrap();
        let mut r = sample(7, false, 3000, 4800); // 600 s in hour 0, 1200 s in hour 1
        r.job.active_gpu_secs = Some(1000);
        write(&tx, &r).unwrap();
        tx.commit().unwrap();
        let active: Vec<i64> = conn
            .prepare("SELECT active_gpu_secs FROM usage_hourly WHERE gpu_type = '' ORDER BY hour")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(active, vec![333, 667]);
    }

    #[test]
    fn rollups_add_up_and_a_repeated_record_counts_once() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::store::migrations::migrate(&mut conn, std::path::Path::new(":memory:")).unwrap();
        let tx = conn.transaction().unwrap();
        // Job 1: 1.5 h guaranteed from 00:30; job 2: 1 h borrowed from 01:00; job 1 again (a repeat).
        write(&tx, &sample(1, false, 1800, 7200)).unwrap();
        write(&tx, &sample(2, true, 3600, 7200)).unwrap();
        write(&tx, &sample(1, false, 1800, 7200)).unwrap();
        tx.commit().unwrap();
        let row = |hour: i64, t: &str| -> (i64, i64, i64, i64) {
            conn.query_row(
                "SELECT cpu_secs, gpu_secs, borrowed_gpu_secs, billing_secs FROM usage_hourly WHERE hour = ?1 AND gpu_type = ?2",
                params![hour, t],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap()
        };
        // Hour 0: job 1's half hour: 4 CPUs × 1800 s, 2 GPUs × 1800 s, billing 20 × 1800.
        assert_eq!(row(0, ""), (7200, 3600, 0, 36_000));
        // Hour 1: both jobs, a full hour each; job 2's GPU time is borrowed.
        assert_eq!(row(3600, ""), (28_800, 14_400, 7200, 144_000));
        assert_eq!(row(3600, "h100"), (0, 14_400, 7200, 0));
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM usage_jobs", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 2);
    }
}
