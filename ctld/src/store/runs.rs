//! Earlier runs of requeued jobs, for `sacct -D/--duplicates`. A job keeps one record in `jobs`
//! (its latest run, as `sacct` shows it without `-D`); each run that ended in a requeue (by
//! `scontrol requeue`, preemption, the idle-GPU policy or a node failure) is copied here, as it
//! stood when it ended, in the same transaction as the requeue.
//!
//! Also the requeues under way (`requeue_intents`): a running job being killed so that it pends
//! again, so that a ctld restart before the run's end arrives still requeues it. The two tables are
//! migration 3 of `migrations.rs`.

use crate::store::db::DbError;
use drover_shared::job::{JobInfo, JobState};
use drover_shared::proto::client::AccountingQuery;
use rusqlite::{Connection, Transaction, params};
use std::path::Path;

/// Stores one ended run (`info.restarts` is its run number); a repeat replaces it.
pub(crate) fn write(tx: &Transaction<'_>, info: &JobInfo) -> rusqlite::Result<()> {
    let blob = postcard::to_allocvec(info).expect("in-memory records always encode");
    tx.prepare_cached("INSERT OR REPLACE INTO job_runs (job_id, run, end_time, info) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![info.job_id, info.restarts, info.end_time, blob])?;
    Ok(())
}

/// Records (`Some(hold)`) or forgets (`None`) that a running job is being killed to be requeued.
pub(crate) fn write_intent(tx: &Transaction<'_>, job_id: u32, hold: Option<bool>) -> rusqlite::Result<()> {
    match hold {
        Some(hold) => tx
            .prepare_cached("INSERT OR REPLACE INTO requeue_intents (job_id, hold) VALUES (?1, ?2)")?
            .execute(params![job_id, hold])?,
        None => tx.prepare_cached("DELETE FROM requeue_intents WHERE job_id = ?1")?.execute(params![job_id])?,
    };
    Ok(())
}

/// The requeues under way, after a restart: job id → hold (`requeuehold`).
pub(crate) fn load_intents(conn: &Connection, path: &Path) -> Result<std::collections::HashMap<u32, bool>, DbError> {
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn.prepare("SELECT job_id, hold FROM requeue_intents").map_err(err)?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, bool>(1)?))).map_err(err)?;
    rows.collect::<Result<_, _>>().map_err(err)
}

/// Runs `select` (the `jobs` query) and, under `-D`, puts each job's earlier runs before its
/// latest record; the state filter then applies to every row, so `sacct -D -s NF` finds a run that
/// ended `NODE_FAIL` although its job runs again.
pub(crate) fn query(
    path: &Path,
    query: &AccountingQuery,
    select: impl FnOnce(&AccountingQuery) -> Result<Vec<JobInfo>, DbError>,
) -> Result<Vec<JobInfo>, DbError> {
    if !query.duplicates {
        return select(query);
    }
    let mut unfiltered = query.clone();
    let states = std::mem::take(&mut unfiltered.states);
    let latest = select(&unfiltered)?;
    let conn = super::db::open(path, true)?;
    let mut rows = Vec::with_capacity(latest.len());
    for job in latest {
        rows.extend(earlier_runs(&conn, path, job.job_id)?);
        rows.push(job);
    }
    rows.retain(|j| states.is_empty() || states.contains(&j.state()));
    Ok(rows)
}

fn earlier_runs(conn: &Connection, path: &Path, job_id: u32) -> Result<Vec<JobInfo>, DbError> {
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn.prepare_cached("SELECT info FROM job_runs WHERE job_id = ?1 ORDER BY run").map_err(err)?;
    let blobs = stmt.query_map([job_id], |r| r.get::<_, Vec<u8>>(0)).map_err(err)?;
    let mut runs = Vec::new();
    for blob in blobs {
        let blob = blob.map_err(err)?;
        let info = crate::store::db::decode_stored(&blob).map_err(|source| DbError::Corrupt {
            path: path.to_owned(),
            job_id: i64::from(job_id),
            source,
        })?;
        runs.push(info);
    }
    Ok(runs)
}

/// The record of a run that just ended in a requeue: the job as it stood, in `state`
/// (`REQUEUED` or `NODE_FAIL`), ended at `end`; steps still open end with it.
pub(crate) fn ended_run(info: &JobInfo, state: JobState, end: drover_shared::UnixTime) -> JobInfo {
    let mut run = info.clone();
    run.state = Some(state);
    run.end_time = Some(end);
    run.reason = if state == JobState::NodeFail { "NodeDown".into() } else { "None".into() };
    for step in run.steps.iter_mut().filter(|s| s.end_time.is_none()) {
        step.state = if state == JobState::NodeFail { JobState::NodeFail } else { JobState::Cancelled };
        step.end_time = Some(end);
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(job_id: u32, restarts: u32, state: JobState) -> JobInfo {
        JobInfo { job_id, restarts, state: Some(state), ..JobInfo::default() }
    }

    #[test]
    fn duplicates_put_earlier_runs_first_and_filter_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut conn = crate::store::db::open(&path, false).unwrap();
        let tx = conn.transaction().unwrap();
        write(&tx, &ended_run(&job(7, 0, JobState::Running), JobState::NodeFail, 100)).unwrap();
        write(&tx, &ended_run(&job(7, 1, JobState::Running), JobState::Requeued, 200)).unwrap();
        tx.commit().unwrap();
        let latest = || Ok(vec![job(7, 2, JobState::Running), job(8, 0, JobState::Completed)]);
        let plain = AccountingQuery::default();
        let states = |rows: Vec<JobInfo>| rows.iter().map(|j| (j.job_id, j.restarts, j.state())).collect::<Vec<_>>();
        assert_eq!(states(query(&path, &plain, |_| latest()).unwrap()).len(), 2, "without -D only the latest");
        let all = AccountingQuery { duplicates: true, ..AccountingQuery::default() };
        assert_eq!(
            states(query(&path, &all, |_| latest()).unwrap()),
            vec![
                (7, 0, JobState::NodeFail),
                (7, 1, JobState::Requeued),
                (7, 2, JobState::Running),
                (8, 0, JobState::Completed)
            ]
        );
        let failed =
            AccountingQuery { duplicates: true, states: vec![JobState::NodeFail], ..AccountingQuery::default() };
        assert_eq!(
            states(
                query(&path, &failed, |q| {
                    assert!(q.states.is_empty(), "the jobs query must not filter states under -D");
                    latest()
                })
                .unwrap()
            ),
            vec![(7, 0, JobState::NodeFail)]
        );
    }
}
