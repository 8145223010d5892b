//! Reads for usage reports, on a read-only connection off the core (like `sacct`).

use crate::store::db::{self, DbError};
use drover_shared::config::Config;
use drover_shared::proto::usage::{HourRow, JobUsage, UsageQuery, UsageReport};
use rusqlite::params;
use std::path::Path;

/// Hourly rows and (when asked) job records overlapping the query's window.
pub(crate) fn report(path: &Path, config: &Config, query: &UsageQuery) -> Result<UsageReport, DbError> {
    let conn = db::open(path, true)?;
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut stmt = conn
        .prepare(
            "SELECT hour, user, account, partition, gpu_type, cpu_secs, mem_mb_secs, gpu_secs, borrowed_gpu_secs,
             active_gpu_secs, billing_secs FROM usage_hourly WHERE hour >= ?1 AND hour < ?2
             ORDER BY hour, account, user, partition, gpu_type",
        )
        .map_err(err)?;
    let hours = stmt
        .query_map(params![query.start - query.start.rem_euclid(super::HOUR), query.end], |r| {
            Ok(HourRow {
                hour: r.get(0)?,
                user: r.get(1)?,
                account: r.get(2)?,
                partition: r.get(3)?,
                gpu_type: r.get(4)?,
                cpu_secs: as_u64(r.get(5)?),
                mem_mb_secs: as_u64(r.get(6)?),
                gpu_secs: as_u64(r.get(7)?),
                borrowed_gpu_secs: as_u64(r.get(8)?),
                active_gpu_secs: as_u64(r.get(9)?),
                billing_secs: as_u64(r.get(10)?),
            })
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let mut jobs = Vec::new();
    if query.with_jobs {
        let mut stmt = conn
            .prepare(
                "SELECT job_id, run, user, account, partition, submit_time, eligible_time, start_time, end_time, state,
                 reason, cpus, mem_mb, gpus, gpu_types, borrowed, active_gpu_secs, template FROM usage_jobs
                 WHERE end_time >= ?1 AND start_time < ?2 ORDER BY job_id, run",
            )
            .map_err(err)?;
        jobs = stmt
            .query_map(params![query.start, query.end], |r| {
                Ok(JobUsage {
                    job_id: r.get(0)?,
                    run: r.get(1)?,
                    user: r.get(2)?,
                    account: r.get(3)?,
                    partition: r.get(4)?,
                    submit_time: r.get(5)?,
                    eligible_time: r.get(6)?,
                    start_time: r.get(7)?,
                    end_time: r.get(8)?,
                    state: r.get(9)?,
                    reason: r.get(10)?,
                    cpus: r.get(11)?,
                    mem_mb: as_u64(r.get(12)?),
                    gpus: r.get(13)?,
                    gpu_types: r.get(14)?,
                    borrowed: r.get(15)?,
                    active_gpu_secs: r.get::<_, Option<i64>>(16)?.map(as_u64),
                    template: r.get(17)?,
                })
            })
            .map_err(err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
    }
    let mut stmt = conn
        .prepare(
            "SELECT time, job_id, detail FROM audit WHERE action = 'preempt' AND time >= ?1 AND time < ?2 ORDER BY id",
        )
        .map_err(err)?;
    let reclaims = stmt
        .query_map(params![query.start, query.end], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let gpu_hour_price_milli =
        config.accounting.gpu_hour_price.iter().map(|(t, p)| (t.clone(), (p * 1000.0).round() as u64)).collect();
    Ok(UsageReport {
        cluster: config.cluster_name.clone(),
        now: drover_shared::now(),
        start: query.start,
        end: query.end,
        cpus: config.nodes.iter().map(|n| u64::from(n.cpus)).sum(),
        gpus: config.nodes.iter().map(|n| n.gpus.len() as u64).sum(),
        hours,
        jobs,
        gpu_hour_price_milli,
        reclaims,
    })
}
