//! What `drover simulate` replays: the jobs of a window as the `jobs` table recorded them (their
//! info and spec, with the start and end of their last run), on a read-only connection off the
//! core. Only jobs that ran and ended are replayed; the others of the window are counted.
//! `write_recorded` stores made-up jobs the same way, for the benchmark's synthetic database.

use crate::store::db::{self, DbError, decode_stored};
use drover_shared::UnixTime;
use drover_shared::job::{JobInfo, JobSpec};
use rusqlite::params;
use std::path::Path;

/// The jobs submitted in a window that ran and ended (to replay), and the others (skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowCount {
    pub(crate) ended: u64,
    pub(crate) skipped: u64,
}

/// Counts the jobs submitted in `[from, to)`.
pub(crate) fn count(path: &Path, from: UnixTime, to: UnixTime) -> Result<WindowCount, DbError> {
    let conn = db::open(path, true)?;
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let (ended, all): (i64, i64) = conn
        .query_row(
            "SELECT COUNT(start_time IS NOT NULL AND end_time IS NOT NULL OR NULL), COUNT(*) FROM jobs
             WHERE submit_time >= ?1 AND submit_time < ?2",
            params![from, to],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(err)?;
    let ended = u64::try_from(ended).unwrap_or(0);
    Ok(WindowCount { ended, skipped: u64::try_from(all).unwrap_or(0).saturating_sub(ended) })
}

/// The jobs submitted in `[from, to)` that ran and ended, at most `max`, by submit time; their
/// launch-only fields (script, environment) are dropped, the replay never reads them.
pub(crate) fn recorded(
    path: &Path,
    from: UnixTime,
    to: UnixTime,
    max: u32,
) -> Result<Vec<(JobInfo, JobSpec)>, DbError> {
    let conn = db::open(path, true)?;
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn
        .prepare(
            "SELECT job_id, info, spec FROM jobs WHERE submit_time >= ?1 AND submit_time < ?2
             AND start_time IS NOT NULL AND end_time IS NOT NULL ORDER BY submit_time, job_id LIMIT ?3",
        )
        .map_err(err)?;
    let rows = stmt
        .query_map(params![from, to, max], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?, r.get::<_, Vec<u8>>(2)?))
        })
        .map_err(err)?;
    let mut jobs = Vec::new();
    for row in rows {
        let (job_id, info, spec) = row.map_err(err)?;
        let corrupt = |source| DbError::Corrupt { path: path.to_owned(), job_id, source };
        let info: JobInfo = decode_stored(&info).map_err(corrupt)?;
        let mut spec: JobSpec = decode_stored(&spec).map_err(corrupt)?;
        spec.script = Vec::new();
        spec.environment = Vec::new();
        jobs.push((info, spec));
    }
    Ok(jobs)
}

/// Stores ended jobs as ctld records them (a synthetic accounting database for the benchmark
/// and the tests), creating the database if need be.
pub(crate) fn write_recorded(path: &Path, jobs: &[(JobInfo, JobSpec)]) -> Result<(), DbError> {
    let mut conn = db::open(path, false)?;
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let tx = conn.transaction().map_err(err)?;
    // Stored by the writer's own code, as ctld stores a submission.
    let ops = jobs
        .iter()
        .map(|(info, spec)| db::DbOp::InsertJob {
            info: Box::new(info.clone()),
            spec: Box::new(spec.clone()),
            fill_from: None,
        })
        .collect();
    db::write_ops(&tx, ops).map_err(err)?;
    tx.commit().map_err(err)
}
