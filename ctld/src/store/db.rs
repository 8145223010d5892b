//! The state database: SQLite in WAL mode, owned by one writer thread.
//!
//! Why a dedicated thread: `rusqlite::Connection` is not `Sync`, and a commit is a blocking fsync
//! that must never stall the async core. The core sends [`DbOp`]s over a std channel (unbounded:
//! the core must never block on the writer; back-pressure comes from clients waiting for their
//! commit), the writer drains everything queued into **one transaction**, commits, and only then
//! reports the batch's [`AfterCommit`] actions back to the core. Under load many submissions share
//! one fsync, so durability does not cost throughput.
//!
//! Readers (`sacct`) open their own read-only connections; WAL lets them run beside the writer.

use crate::model::state::Allocation;
use crate::model::{identity, resident, usage};
use drover_shared::UnixTime;
use drover_shared::job::{JobId, JobInfo, JobSpec, JobState};
use drover_shared::proto::client::{AccountingQuery, AuditQuery, AuditRow, NodeEvent};
use drover_shared::sacctmgr::edit::{Edit, Entity, Kind};
use rusqlite::types::Type;
use rusqlite::{Connection, OpenFlags, params};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

impl From<DbError> for crate::error::Error {
    fn from(e: DbError) -> crate::error::Error {
        crate::error::Error::Inner(Box::new(e))
    }
}

/// Database failures.
#[derive(Debug, Error)]
pub(crate) enum DbError {
    /// SQLite refused an operation.
    #[error("database {path}: {source}")]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    /// A stored record could not be decoded.
    #[error("database {path}: corrupt record for job {job_id}: {source}")]
    Corrupt { path: PathBuf, job_id: i64, source: postcard::Error },
    /// The database is not in WAL mode and could not be switched.
    #[error("database {path}: journal mode is {mode}, WAL required")]
    NotWal { path: PathBuf, mode: String },
    /// A newer ctld wrote the database; this one does not know its tables.
    #[error("database {path}: schema version {found} is newer than this ctld knows ({known}); refusing to write it")]
    NewerSchema { path: PathBuf, found: u32, known: u32 },
    /// A migration failed; its transaction was rolled back and the database stays at the version before.
    #[error("database {path}: migration {version} ({name}): {source}")]
    Migration { path: PathBuf, version: u32, name: &'static str, source: rusqlite::Error },
    /// A stored account, user or QOS could not be read back.
    #[error("database {path}: corrupt {what}")]
    CorruptEntity { path: PathBuf, what: String },
}

/// What `jobs.state` holds for `state` (its fixed code, not its place in any list).
fn state_code(state: JobState) -> i64 {
    i64::from(state.code())
}

/// Opens a connection with the settings every connection needs.
pub(crate) fn open(path: &Path, read_only: bool) -> Result<Connection, DbError> {
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let mut conn = Connection::open_with_flags(path, flags).map_err(err)?;
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(err)?;
    if !read_only {
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(DbError::NotWal { path: path.to_owned(), mode });
        }
        // FULL: a commit is on disk when it returns, which is what "answered only after commit" means.
        conn.pragma_update(None, "synchronous", "FULL").map_err(err)?;
        super::migrations::migrate(&mut conn, path)?;
    }
    Ok(conn)
}

/// A node's drain or down flag as stored, so a restarted ctld keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredNodeState {
    pub(crate) name: String,
    pub(crate) drain_reason: Option<String>,
    pub(crate) down_reason: Option<String>,
    pub(crate) uid: u32,
    pub(crate) time: UnixTime,
    pub(crate) owner: String,
    pub(crate) ticket: Option<String>,
    pub(crate) evidence: String,
    /// A pending `scontrol reboot` (`core::reboot::encode`): read from the table, written by
    /// [`DbOp::SaveNodeReboot`] (not part of this record's log encoding, which predates it).
    #[serde(skip)]
    pub(crate) reboot: Option<String>,
}

/// Deletes node `name`'s row when it holds no flag: a node back in service has none.
fn delete_empty_node_state(tx: &rusqlite::Transaction<'_>, name: &str) -> rusqlite::Result<()> {
    tx.execute(
        "DELETE FROM node_state WHERE name = ?1 AND drain_reason IS NULL AND down_reason IS NULL AND reboot IS NULL",
        params![name],
    )?;
    Ok(())
}

/// Loads every stored node flag.
pub(crate) fn load_node_states(conn: &Connection, path: &Path) -> Result<Vec<StoredNodeState>, DbError> {
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn
        .prepare(
            "SELECT name, drain_reason, down_reason, uid, time, owner, ticket, evidence, reboot FROM node_state ORDER BY name",
        )
        .map_err(err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(StoredNodeState {
                name: r.get(0)?,
                drain_reason: r.get(1)?,
                down_reason: r.get(2)?,
                uid: r.get(3)?,
                time: r.get(4)?,
                owner: r.get(5)?,
                ticket: r.get(6)?,
                evidence: r.get(7)?,
                reboot: r.get(8)?,
            })
        })
        .map_err(err)?;
    rows.collect::<Result<_, _>>().map_err(err)
}

/// One job as stored: what it is, what it asked for, what it holds.
#[derive(Debug, Clone)]
pub(crate) struct StoredJob {
    pub(crate) info: JobInfo,
    pub(crate) spec: JobSpec,
    pub(crate) alloc: Option<Allocation>,
}

/// Loads every job that has not ended, and the next job id to hand out.
pub(crate) fn load_active(conn: &Connection, path: &Path) -> Result<(Vec<StoredJob>, JobId), DbError> {
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let next: i64 = conn.query_row("SELECT COALESCE(MAX(job_id), 0) + 1 FROM jobs", [], |r| r.get(0)).map_err(err)?;
    let mut stmt =
        conn.prepare("SELECT job_id, info, spec, alloc FROM jobs WHERE state < 3 ORDER BY job_id").map_err(err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?, r.get::<_, Vec<u8>>(2)?, r.get::<_, Option<Vec<u8>>>(3)?))
        })
        .map_err(err)?;
    let mut jobs = Vec::new();
    for row in rows {
        let (job_id, info, spec, alloc) = row.map_err(err)?;
        let corrupt = |source| DbError::Corrupt { path: path.to_owned(), job_id, source };
        jobs.push(StoredJob {
            info: decode_stored(&info).map_err(corrupt)?,
            spec: decode_stored(&spec).map_err(corrupt)?,
            alloc: alloc.map(|a| decode_stored(&a)).transpose().map_err(corrupt)?,
        });
    }
    Ok((jobs, JobId::try_from(next).unwrap_or(JobId::MAX)))
}

/// The stored submission keys younger than [`SUBMIT_KEY_LIFETIME`] at `now` whose job is stored
/// (same id, owner and submit time: a key committed without its job, in a transaction before a
/// crash, names an id a later job may have taken): (uid, key) → job.
pub(crate) fn load_submit_keys(
    conn: &Connection,
    path: &Path,
    now: UnixTime,
) -> Result<HashMap<(u32, Vec<u8>), JobId>, DbError> {
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn
        .prepare(
            "SELECT k.uid, k.key, k.job_id FROM submit_keys k
             JOIN jobs j ON j.job_id = k.job_id AND j.uid = k.uid AND j.submit_time = k.time
             WHERE k.time >= ?1",
        )
        .map_err(err)?;
    let rows = stmt
        .query_map(params![now - SUBMIT_KEY_LIFETIME], |r| {
            Ok(((r.get::<_, u32>(0)?, r.get::<_, Vec<u8>>(1)?), r.get::<_, JobId>(2)?))
        })
        .map_err(err)?;
    rows.collect::<Result<_, _>>().map_err(err)
}

/// Loads the stored usage into `usage` (decayed as of the stored clock).
pub(crate) fn load_usage(conn: &Connection, path: &Path, usage: &mut usage::Usage) -> Result<(), DbError> {
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn.prepare("SELECT account, user, raw_usage FROM usage").map_err(err)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, f64>(2)?)))
        .map_err(err)?;
    for row in rows {
        let (account, user, value) = row.map_err(err)?;
        usage.by_assoc.insert((account, user), value);
    }
    let updated: Option<i64> = conn.query_row("SELECT updated FROM usage_clock WHERE id = 1", [], |r| r.get(0)).ok();
    if let Some(updated) = updated {
        usage.updated = updated;
        usage.saved = updated;
    }
    Ok(())
}

/// The stored usage of `job_ids` (jobs without one are left out), on a read-only connection.
pub(crate) fn query_job_usage(
    path: &Path,
    job_ids: &[JobId],
) -> Result<Vec<drover_shared::proto::node::JobUsage>, DbError> {
    let conn = open(path, true)?;
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn
        .prepare_cached("SELECT user_usec, system_usec, max_rss_kib FROM job_usage WHERE job_id = ?1")
        .map_err(err)?;
    let mut found = Vec::new();
    for &job_id in job_ids {
        let row = stmt.query_row([job_id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)));
        match row {
            Ok((user, system, rss)) => {
                let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
                found.push(drover_shared::proto::node::JobUsage {
                    job_id,
                    user_usec: as_u64(user),
                    system_usec: as_u64(system),
                    max_rss_kib: as_u64(rss),
                });
            }
            Err(rusqlite::Error::QueryReturnedNoRows) => {}
            Err(source) => return Err(err(source)),
        }
    }
    Ok(found)
}

/// The stored usage of the srun steps of `job_ids`, each step's nodes added up (CPU times
/// summed, the largest RSS): `(step id, usage)`.
pub(crate) fn query_step_usage(
    path: &Path,
    job_ids: &[JobId],
) -> Result<Vec<(u32, drover_shared::proto::node::JobUsage)>, DbError> {
    let conn = open(path, true)?;
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn
        .prepare_cached(
            "SELECT step_id, SUM(user_usec), SUM(system_usec), MAX(max_rss_kib) FROM step_usage
             WHERE job_id = ?1 GROUP BY step_id ORDER BY step_id",
        )
        .map_err(err)?;
    let mut found = Vec::new();
    for &job_id in job_ids {
        let rows = stmt
            .query_map([job_id], |r| {
                Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?))
            })
            .map_err(err)?;
        for row in rows {
            let (step_id, user, system, rss) = row.map_err(err)?;
            let as_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
            let usage = drover_shared::proto::node::JobUsage {
                job_id,
                user_usec: as_u64(user),
                system_usec: as_u64(system),
                max_rss_kib: as_u64(rss),
            };
            found.push((step_id, usage));
        }
    }
    Ok(found)
}

/// Runs an accounting query on a read-only connection.
pub(crate) fn query_accounting(path: &Path, query: &AccountingQuery) -> Result<Vec<JobInfo>, DbError> {
    let conn = open(path, true)?;
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut sql = String::from("SELECT job_id, info FROM jobs WHERE 1=1");
    let mut values: Vec<rusqlite::types::Value> = Vec::new();
    if !query.job_ids.is_empty() {
        // An array's id also selects every task of the array.
        let marks = vec!["?"; query.job_ids.len()].join(",");
        sql.push_str(&format!(" AND (job_id IN ({marks}) OR array_job_id IN ({marks}))"));
        values.extend(query.job_ids.iter().map(|j| i64::from(*j).into()));
        values.extend(query.job_ids.iter().map(|j| i64::from(*j).into()));
    }
    let mut in_list = |sql: &mut String, column: &str, items: Vec<rusqlite::types::Value>| {
        if items.is_empty() {
            return;
        }
        sql.push_str(&format!(" AND {column} IN ({})", vec!["?"; items.len()].join(",")));
        values.extend(items);
    };
    in_list(&mut sql, "uid", query.users.iter().map(|u| i64::from(*u).into()).collect());
    in_list(&mut sql, "account", query.accounts.iter().map(|a| a.clone().into()).collect());
    in_list(&mut sql, "partition", query.partitions.iter().map(|p| p.clone().into()).collect());
    in_list(&mut sql, "state", query.states.iter().map(|s| state_code(*s).into()).collect());
    // A job belongs to the window if it was submitted before the window ended and had not ended
    // before it started.
    if let Some(end) = query.window_end {
        sql.push_str(" AND submit_time <= ?");
        values.push(end.into());
    }
    if let Some(start) = query.window_start {
        sql.push_str(" AND (end_time IS NULL OR end_time >= ?)");
        values.push(start.into());
    }
    sql.push_str(" ORDER BY job_id");
    let mut stmt = conn.prepare(&sql).map_err(err)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(values), |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
        .map_err(err)?;
    let mut jobs = Vec::new();
    for row in rows {
        let (job_id, info) = row.map_err(err)?;
        jobs.push(decode_stored(&info).map_err(|source| DbError::Corrupt { path: path.to_owned(), job_id, source })?);
    }
    Ok(jobs)
}

/// Runs an audit query on a read-only connection; `None` in `uids` means every user.
pub(crate) fn query_audit(path: &Path, query: &AuditQuery) -> Result<Vec<AuditRow>, DbError> {
    let conn = open(path, true)?;
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut sql =
        String::from("SELECT id, time, uid, user, origin, action, job_id, outcome, detail FROM audit WHERE 1=1");
    let mut values: Vec<rusqlite::types::Value> = Vec::new();
    let mut in_list = |sql: &mut String, column: &str, items: Vec<rusqlite::types::Value>| {
        if !items.is_empty() {
            sql.push_str(&format!(" AND {column} IN ({})", vec!["?"; items.len()].join(",")));
            values.extend(items);
        }
    };
    in_list(&mut sql, "uid", query.uids.iter().map(|u| i64::from(*u).into()).collect());
    in_list(&mut sql, "action", query.actions.iter().map(|a| a.clone().into()).collect());
    in_list(&mut sql, "job_id", query.job_ids.iter().map(|j| i64::from(*j).into()).collect());
    if let Some(since) = query.since {
        sql.push_str(" AND time >= ?");
        values.push(since.into());
    }
    if let Some(until) = query.until {
        sql.push_str(" AND time <= ?");
        values.push(until.into());
    }
    sql.push_str(" ORDER BY id");
    let mut stmt = conn.prepare(&sql).map_err(err)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(values), |r| {
            Ok(AuditRow {
                id: r.get::<_, i64>(0)?.try_into().unwrap_or(0),
                time: r.get(1)?,
                uid: r.get(2)?,
                user: r.get(3)?,
                origin: r.get(4)?,
                action: r.get(5)?,
                job_id: r.get(6)?,
                outcome: r.get(7)?,
                detail: r.get(8)?,
            })
        })
        .map_err(err)?;
    rows.collect::<Result<_, _>>().map_err(err)
}

/// The newest `limit` entries of a node's history, oldest first.
pub(crate) fn query_node_history(path: &Path, node: &str, limit: u32) -> Result<Vec<NodeEvent>, DbError> {
    let conn = open(path, true)?;
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn
        .prepare(
            "SELECT time, node, event, uid, user, owner, reason, ticket, evidence, job_id FROM
             (SELECT * FROM node_events WHERE node = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id",
        )
        .map_err(err)?;
    let rows = stmt
        .query_map(params![node, limit], |r| {
            Ok(NodeEvent {
                time: r.get(0)?,
                node: r.get(1)?,
                event: r.get(2)?,
                uid: r.get(3)?,
                user: r.get(4)?,
                owner: r.get(5)?,
                reason: r.get(6)?,
                ticket: r.get(7)?,
                evidence: r.get(8)?,
                job_id: r.get(9)?,
            })
        })
        .map_err(err)?;
    rows.collect::<Result<_, _>>().map_err(err)
}

/// A change to store: what the core queues, what a replicated controller's log entry carries
/// (postcard: the order of the variants and of their fields is the log's encoding, so they are
/// only ever appended; `replica::wire`'s golden bytes hold it), and what every replica applies.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum DbOp {
    /// A new job; its spec is stored once, whole. With `fill_from`, `spec` is a resident spec
    /// (`resident.rs`, an array task split off its base record) and the writer completes it with
    /// the launch-only fields stored with job `fill_from`.
    InsertJob { info: Box<JobInfo>, spec: Box<JobSpec>, fill_from: Option<JobId> },
    /// The job's record changed (start, end, cancel); `alloc` replaces the stored allocation.
    UpdateJob { info: Box<JobInfo>, alloc: Option<Box<Allocation>> },
    /// An audit record: who, from where, did what to which job, with what outcome, and why.
    Audit {
        time: UnixTime,
        uid: u32,
        origin: String,
        action: Cow<'static, str>,
        job_id: Option<JobId>,
        outcome: String,
        detail: String,
    },
    /// A node's drain/down flag and reason (both `None`: the node is back in service).
    SaveNodeState(StoredNodeState),
    /// An entry of a node's history (its `user` is resolved by the writer).
    NodeEvent(Box<NodeEvent>),
    /// The decayed usage of every association as of `updated` (replaces the stored values).
    SaveUsage { updated: UnixTime, rows: Vec<((String, String), f64)> },
    /// An earlier run of a requeued job, as it ended (`sacct -D`).
    RecordRun(Box<JobInfo>),
    /// A requeue under way starts (`Some(hold)`) or is done (`None`).
    RequeueIntent { job_id: JobId, hold: Option<bool> },
    /// A job run's usage record, added to the hourly rollups (once per run).
    RecordUsage(Box<super::accounting::UsageRecord>),
    /// Deletes usage rows older than the retention periods (days).
    PurgeUsage { now: UnixTime, hours_days: u32, jobs_days: u32 },
    /// What a job's batch script used, as its node measured it (replaces an earlier run's).
    JobUsage(drover_shared::proto::node::JobUsage),
    /// What one node's tasks of an srun step used (one row per node, replaced on a resend).
    StepUsage { step_id: u32, node: String, usage: drover_shared::proto::node::JobUsage },
    /// A submission's key ([`drover_shared::proto::client::Request::SubmitOnce`]) and the job it
    /// made, stored with the job; keys older than [`SUBMIT_KEY_LIFETIME`] are deleted with it.
    SubmitKey { uid: u32, key: Vec<u8>, job_id: JobId, time: UnixTime },
    /// An account, user or QOS as a sacctmgr change left it ([`StoredEntity`]); replaces the
    /// stored one.
    AcctEntity(StoredEntity),
    /// A node's pending `scontrol reboot` (`core::reboot::encode`), or none: kept in the
    /// node's row beside its drain and down flags (a row with none of the three is deleted).
    SaveNodeReboot { name: String, reboot: Option<String> },
}

/// What the core hands the writer: a change to store, or something to do once every change
/// queued before it is durable. The markers stay with this process (a replica's log carries
/// only the changes).
#[derive(Debug)]
pub(crate) enum Queued {
    Op(DbOp),
    After(AfterCommit),
    /// What the core queued while handling one event, in order: sent together so that the
    /// writer never commits the first part of a request on its own (a submission's key, its job
    /// and its audit record are one transaction, not two).
    Many(Vec<Queued>),
}

impl Queued {
    /// Appends this item's ops and actions, in order, to `out` ([`Queued::Many`] flattened).
    pub(crate) fn flatten_into(self, out: &mut impl Extend<Queued>) {
        match self {
            Queued::Many(items) => items.into_iter().for_each(|item| item.flatten_into(out)),
            item => out.extend(std::iter::once(item)),
        }
    }
}

/// An account (kind 0), user (1) or QOS (2) sacctmgr changed: its record
/// (`drover_shared::sacctmgr::edit::Entity`, postcard), `None` once deleted (the cluster file's
/// entry of that name no longer counts either), who changed it and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredEntity {
    pub(crate) kind: u8,
    pub(crate) name: String,
    pub(crate) record: Option<Vec<u8>>,
    pub(crate) uid: u32,
    pub(crate) time: UnixTime,
}

impl StoredEntity {
    /// The stored form of `edit`, changed by `uid` at `time`.
    pub(crate) fn of(edit: &Edit, uid: u32, time: UnixTime) -> StoredEntity {
        StoredEntity {
            kind: edit.kind.code(),
            name: edit.name.clone(),
            record: edit.entity.as_ref().map(|e| postcard::to_allocvec(e).expect("in-memory records always encode")),
            uid,
            time,
        }
    }
}

/// Every entity sacctmgr changed, as edits to put over the cluster file's configuration.
pub(crate) fn load_acct_edits(conn: &Connection, path: &Path) -> Result<Vec<Edit>, DbError> {
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let mut stmt = conn.prepare("SELECT kind, name, record FROM acct_entities ORDER BY rowid").map_err(err)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, u8>(0)?, r.get::<_, String>(1)?, r.get::<_, Option<Vec<u8>>>(2)?)))
        .map_err(err)?;
    let mut edits = Vec::new();
    for row in rows {
        let (code, name, record) = row.map_err(err)?;
        let corrupt = |what: String| DbError::CorruptEntity { path: path.to_owned(), what };
        let kind = Kind::from_code(code).ok_or_else(|| corrupt(format!("acct_entities kind {code} of {name}")))?;
        let entity = record
            .map(|blob| decode_stored::<Entity>(&blob))
            .transpose()
            .map_err(|e| corrupt(format!("acct_entities record of {name}: {e}")))?;
        edits.push(Edit { kind, name, entity });
    }
    Ok(edits)
}

/// How long a submission's key is kept (seconds): a client sends a submission again within
/// seconds of a broken connection, never an hour later.
pub(crate) const SUBMIT_KEY_LIFETIME: i64 = 3600;

/// Actions the core performs once the ops queued before them are durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterCommit {
    /// Answer the client that submitted this job.
    AnswerSubmit(JobId),
    /// Tell the node to start the job. The writer adds the job's stored spec (read back in the
    /// transaction that commits the allocation), which holds the batch script and environment
    /// that ctld does not keep in memory; `None` when it could not be read.
    Launch(JobId, Option<Box<JobSpec>>),
    /// Tell the node that ctld has recorded the end of this run of the job.
    AckJobEnd { node: String, job_id: JobId, run: u32 },
    /// Answer `srun` and send the step to its nodes: its row is stored.
    StepCreated { job_id: JobId, step_id: u32 },
    /// Answer `scontrol requeue` and kill the runs: the requeue intents are stored.
    Requeue(u64),
    /// Send an answer the core kept under this token: the change it reports is stored
    /// (cancel, hold, release, update), so it survives a crash of ctld.
    Answer(u64),
}

/// The outcome of one transaction, sent back to the core.
#[derive(Debug)]
pub(crate) struct CommitReport {
    pub(crate) after: Vec<AfterCommit>,
    /// `Some` when the transaction failed and nothing in it was stored.
    pub(crate) error: Option<String>,
    pub(crate) n_ops: usize,
}

/// Where the writer loop commits a batch: the state database itself (a single controller), or
/// the replicated log (a leading replica, `replica::writer`).
pub(crate) trait Commit {
    /// Stores `ops` durably, all or nothing; `Err` (why) when nothing of them is stored.
    fn commit(&mut self, ops: Vec<DbOp>) -> Result<(), String>;
    /// The stored spec of `job_id`, read after a commit (for a launch).
    fn stored_spec(&mut self, job_id: JobId) -> rusqlite::Result<JobSpec>;
}

/// The one writer loop: blocks for the first queued item, drains what else is queued (at most
/// `max_batch` ops and actions, so one commit never holds the writer for long; what is left of a
/// long [`Queued::Many`] waits for the next commit), commits the changes through `sink`, reads
/// back the specs launches need once they are committed, and reports. Returns once the core
/// drops its sender and everything queued is handled.
pub(crate) fn run_writer_loop(
    queue: std::sync::mpsc::Receiver<Queued>,
    max_batch: usize,
    sink: &mut dyn Commit,
    report: impl Fn(CommitReport),
) {
    let max_batch = max_batch.max(1);
    let mut backlog = std::collections::VecDeque::new();
    loop {
        if backlog.is_empty() {
            match queue.recv() {
                Ok(first) => first.flatten_into(&mut backlog),
                Err(_) => return,
            }
        }
        while backlog.len() < max_batch {
            match queue.try_recv() {
                Ok(item) => item.flatten_into(&mut backlog),
                Err(_) => break,
            }
        }
        let batch: Vec<Queued> = backlog.drain(..backlog.len().min(max_batch)).collect();
        let n_ops = batch.len();
        let (mut ops, mut after) = (Vec::new(), Vec::new());
        for item in batch {
            match item {
                Queued::Op(op) => ops.push(op),
                Queued::After(action) => after.push(action),
                Queued::Many(_) => unreachable!("flattened above"),
            }
        }
        let error = if ops.is_empty() { None } else { sink.commit(ops).err() };
        if error.is_none() {
            for action in &mut after {
                if let AfterCommit::Launch(job_id, spec @ None) = action {
                    // A failed read does not fail the batch: the core fails the launch.
                    *spec = sink
                        .stored_spec(*job_id)
                        .inspect_err(|e| tracing::error!(job_id, error = %e, "the job's stored spec cannot be read"))
                        .ok()
                        .map(Box::new);
                }
            }
        }
        report(CommitReport { after, error, n_ops });
    }
}

/// A single controller's writer: commits to the state database at `path`.
pub(crate) struct Embedded {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
}

impl Commit for Embedded {
    fn commit(&mut self, ops: Vec<DbOp>) -> Result<(), String> {
        let n_ops = ops.len();
        let result = (|| {
            let tx = self.conn.transaction()?;
            write_ops(&tx, ops)?;
            tx.commit()
        })();
        result.map_err(|e| {
            tracing::error!(path = %self.path.display(), error = %e, n_ops, "commit failed; the batch is not stored");
            e.to_string()
        })
    }

    fn stored_spec(&mut self, job_id: JobId) -> rusqlite::Result<JobSpec> {
        stored_spec(&self.conn, job_id)
    }
}

/// Writes `batch` in the open transaction `tx` (the whole of a commit but the commit itself:
/// the embedded writer commits it; a replica's state machine adds its applied log position
/// first).
pub(crate) fn write_ops(tx: &rusqlite::Transaction<'_>, batch: Vec<DbOp>) -> rusqlite::Result<()> {
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO jobs (job_id, uid, state, submit_time, start_time, end_time, account, partition, name, info, spec,
             array_job_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )?;
        let mut update = tx.prepare_cached(
            "UPDATE jobs SET state = ?2, start_time = ?3, end_time = ?4, account = ?5, partition = ?6, info = ?7,
             alloc = COALESCE(?8, alloc) WHERE job_id = ?1",
        )?;
        let mut audit = tx.prepare_cached(
            "INSERT INTO audit (time, uid, user, origin, action, job_id, outcome, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        let blob = |v: &dyn erased::Encode| v.encode();
        for op in batch {
            match op {
                DbOp::InsertJob { info, spec, fill_from } => {
                    let spec = match fill_from {
                        Some(source) => Box::new(resident::complete(&spec, &info, stored_spec(tx, source)?)),
                        None => spec,
                    };
                    insert.execute(params![
                        info.job_id,
                        info.uid,
                        state_code(info.state()),
                        info.submit_time,
                        info.start_time,
                        info.end_time,
                        info.account,
                        info.partition,
                        info.name,
                        blob(&*info),
                        blob(&*spec),
                        info.array_job_id,
                    ])?;
                }
                DbOp::UpdateJob { info, alloc } => {
                    update.execute(params![
                        info.job_id,
                        state_code(info.state()),
                        info.start_time,
                        info.end_time,
                        info.account,
                        info.partition,
                        blob(&*info),
                        alloc.map(|a| blob(&*a)),
                    ])?;
                }
                DbOp::Audit { time, uid, origin, action, job_id, outcome, detail } => {
                    // Names are resolved here, off the core task; a uid without a name keeps its number.
                    let user = identity::user_name(uid).unwrap_or_else(|| uid.to_string());
                    audit.execute(params![time, uid, user, origin, action.as_ref(), job_id, outcome, detail])?;
                }
                DbOp::NodeEvent(event) => {
                    let user = identity::user_name(event.uid).unwrap_or_else(|| event.uid.to_string());
                    tx.execute(
                        "INSERT INTO node_events (time, node, event, uid, user, owner, reason, ticket, evidence, job_id)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                        params![
                            event.time,
                            event.node,
                            event.event,
                            event.uid,
                            user,
                            event.owner,
                            event.reason,
                            event.ticket,
                            event.evidence,
                            event.job_id
                        ],
                    )?;
                }
                DbOp::AcctEntity(e) => {
                    tx.execute(
                        "INSERT INTO acct_entities (kind, name, record, uid, time) VALUES (?1, ?2, ?3, ?4, ?5)
                         ON CONFLICT (kind, name) DO UPDATE SET record = excluded.record, uid = excluded.uid,
                         time = excluded.time",
                        params![e.kind, e.name, e.record, e.uid, e.time],
                    )?;
                }
                DbOp::SaveNodeState(node) => {
                    // The reboot column is SaveNodeReboot's; this keeps it as it is.
                    tx.execute(
                        "INSERT INTO node_state (name, drain_reason, down_reason, uid, time, owner, ticket, evidence)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                         ON CONFLICT (name) DO UPDATE SET drain_reason = excluded.drain_reason,
                         down_reason = excluded.down_reason, uid = excluded.uid, time = excluded.time,
                         owner = excluded.owner, ticket = excluded.ticket, evidence = excluded.evidence",
                        params![
                            node.name,
                            node.drain_reason,
                            node.down_reason,
                            node.uid,
                            node.time,
                            node.owner,
                            node.ticket,
                            node.evidence
                        ],
                    )?;
                    delete_empty_node_state(tx, &node.name)?;
                }
                DbOp::SaveNodeReboot { name, reboot } => {
                    tx.execute(
                        "INSERT INTO node_state (name, uid, time, owner, evidence, reboot) VALUES (?1, 0, 0, '', '', ?2)
                         ON CONFLICT (name) DO UPDATE SET reboot = excluded.reboot",
                        params![name, reboot],
                    )?;
                    delete_empty_node_state(tx, &name)?;
                }
                DbOp::SubmitKey { uid, key, job_id, time } => {
                    tx.prepare_cached("DELETE FROM submit_keys WHERE time < ?1")?
                        .execute(params![time - SUBMIT_KEY_LIFETIME])?;
                    tx.prepare_cached(
                        "INSERT OR REPLACE INTO submit_keys (uid, key, job_id, time) VALUES (?1, ?2, ?3, ?4)",
                    )?
                    .execute(params![uid, key, job_id, time])?;
                }
                DbOp::StepUsage { step_id, node, usage } => {
                    let as_int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                    tx.prepare_cached(
                        "INSERT OR REPLACE INTO step_usage (job_id, step_id, node, user_usec, system_usec, max_rss_kib)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )?
                    .execute(params![
                        usage.job_id,
                        step_id,
                        node,
                        as_int(usage.user_usec),
                        as_int(usage.system_usec),
                        as_int(usage.max_rss_kib)
                    ])?;
                }
                DbOp::JobUsage(usage) => {
                    let as_int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                    tx.prepare_cached(
                        "INSERT OR REPLACE INTO job_usage (job_id, user_usec, system_usec, max_rss_kib) VALUES (?1, ?2, ?3, ?4)",
                    )?
                    .execute(params![
                        usage.job_id,
                        as_int(usage.user_usec),
                        as_int(usage.system_usec),
                        as_int(usage.max_rss_kib)
                    ])?;
                }
                DbOp::SaveUsage { updated, rows } => {
                    let mut save = tx.prepare_cached(
                        "INSERT INTO usage (account, user, raw_usage) VALUES (?1, ?2, ?3)
                         ON CONFLICT (account, user) DO UPDATE SET raw_usage = excluded.raw_usage",
                    )?;
                    for ((account, user), value) in rows {
                        save.execute(params![account, user, value])?;
                    }
                    tx.execute(
                        "INSERT INTO usage_clock (id, updated) VALUES (1, ?1)
                         ON CONFLICT (id) DO UPDATE SET updated = excluded.updated",
                        params![updated],
                    )?;
                }
                DbOp::RecordRun(info) => super::runs::write(tx, &info)?,
                DbOp::RequeueIntent { job_id, hold } => super::runs::write_intent(tx, job_id, hold)?,
                DbOp::RecordUsage(record) => super::accounting::write(tx, &record)?,
                DbOp::PurgeUsage { now, hours_days, jobs_days } => {
                    super::accounting::purge(tx, now, hours_days, jobs_days)?
                }
            }
        }
    }
    Ok(())
}

/// The whole spec stored with a job.
pub(crate) fn stored_spec(tx: &rusqlite::Connection, job_id: JobId) -> rusqlite::Result<JobSpec> {
    let blob: Vec<u8> =
        tx.prepare_cached("SELECT spec FROM jobs WHERE job_id = ?1")?.query_row(params![job_id], |r| r.get(0))?;
    decode_stored(&blob).map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, Type::Blob, Box::new(e)))
}

/// The most fields appended to a stored record type since the oldest blob a database may hold.
const MAX_APPENDED_FIELDS: usize = 8;

/// Decodes a stored record (a job's info, spec, allocation or run). Records are postcard,
/// which carries no field names, and their types change append-only (`proto` says so), with
/// every appended field's default encoded as one zero byte (`None`, `false`, `0`, an empty list
/// or string). A blob written before fields were appended ends early; it decodes as the current
/// type with those zero bytes added, that is with the appended fields at their defaults. (A blob
/// cut short in the middle would decode too, with zeros for what is missing; SQLite's
/// transactions never store one.)
pub(crate) fn decode_stored<T: serde::de::DeserializeOwned>(blob: &[u8]) -> Result<T, postcard::Error> {
    let first = postcard::from_bytes(blob);
    if !matches!(first, Err(postcard::Error::DeserializeUnexpectedEnd)) {
        return first;
    }
    let mut padded = blob.to_vec();
    for _ in 0..MAX_APPENDED_FIELDS {
        padded.push(0);
        match postcard::from_bytes(&padded) {
            Err(postcard::Error::DeserializeUnexpectedEnd) => continue,
            other => return other,
        }
    }
    first
}

/// Postcard encoding behind a trait object, so one closure encodes every stored type.
mod erased {
    pub(super) trait Encode {
        fn encode(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Encode for T {
        fn encode(&self) -> Vec<u8> {
            postcard::to_allocvec(self).expect("in-memory records always encode")
        }
    }
}

#[cfg(test)]
mod tests {
    /// A record stored before fields were appended to its type decodes with them at their
    /// defaults.
    #[test]
    fn stored_records_decode_after_fields_are_appended() {
        #[derive(serde::Serialize)]
        struct Old {
            name: String,
            count: u32,
        }
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct New {
            name: String,
            count: u32,
            template: Option<String>,
            flag: bool,
            list: Vec<u32>,
        }
        let blob = postcard::to_allocvec(&Old { name: "x".into(), count: 300 }).unwrap();
        let new: New = decode_stored(&blob).unwrap();
        assert_eq!(new, New { name: "x".into(), count: 300, template: None, flag: false, list: vec![] });
    }

    use super::*;

    fn whole(name: &str) -> JobSpec {
        JobSpec {
            name: name.into(),
            work_dir: "/home/u".into(),
            environment: vec![("A".into(), "1".into()), ("B".into(), "x".repeat(2000))],
            script: b"#!/bin/sh\necho hi\n".to_vec(),
            submit_line: "sbatch -a 1-3 job.sh".into(),
            array: Some("1-3".into()),
            ..JobSpec::default()
        }
    }

    /// What shutdown relies on: with its sender dropped, the writer commits everything queued
    /// (in batches) and returns, so joining it loses nothing.
    #[test]
    fn the_writer_commits_what_is_queued_and_returns_once_its_sender_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let conn = open(&path, false).unwrap();
        let (ops, queue) = std::sync::mpsc::channel();
        for job_id in 1..=5 {
            let info = Box::new(JobInfo { job_id, ..JobInfo::default() });
            ops.send(Queued::Op(DbOp::InsertJob { info, spec: Box::new(JobSpec::default()), fill_from: None }))
                .unwrap();
        }
        drop(ops);
        let reports = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut sink = Embedded { conn, path: path.clone() };
                run_writer_loop(queue, 2, &mut sink, |r| reports.lock().unwrap().push((r.n_ops, r.error)));
            });
        });
        assert_eq!(reports.into_inner().unwrap(), vec![(2, None), (2, None), (1, None)]);
        let stored: i64 = open(&path, true).unwrap().query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0)).unwrap();
        assert_eq!(stored, 5);
    }

    #[test]
    fn the_writer_completes_split_tasks_and_reads_specs_back_for_launch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let conn = open(&path, false).unwrap();
        let base = JobInfo { job_id: 7, name: "arr".into(), ..JobInfo::default() };
        let task = JobInfo { job_id: 8, array_job_id: Some(7), ..base.clone() };
        let mut resident = resident::resident(&whole("arr"));
        resident.hold = true; // changed in memory after the submission
        let (queue, queued) = std::sync::mpsc::channel();
        for item in [
            Queued::Op(DbOp::InsertJob { info: Box::new(base.clone()), spec: Box::new(whole("arr")), fill_from: None }),
            Queued::Op(DbOp::InsertJob { info: Box::new(task), spec: Box::new(resident), fill_from: Some(7) }),
            Queued::After(AfterCommit::Launch(8, None)),
            Queued::After(AfterCommit::Launch(99, None)),
        ] {
            queue.send(item).unwrap();
        }
        drop(queue);
        let reports = std::sync::Mutex::new(Vec::new());
        run_writer_loop(queued, 16, &mut Embedded { conn, path }, |r| reports.lock().unwrap().push(r));
        let mut reports = reports.into_inner().unwrap();
        assert_eq!(reports.len(), 1);
        let after = reports.remove(0).after;
        let expected = JobSpec { hold: true, ..whole("arr") };
        assert_eq!(after, vec![AfterCommit::Launch(8, Some(Box::new(expected))), AfterCommit::Launch(99, None)]);
    }
}
