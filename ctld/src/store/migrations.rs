//! The state database's schema, as one ordered list of migrations. The `n`-th migration (the
//! first is number one) brings a database from schema version `n - 1` to `n`; the version a
//! database is at lives in its header (`PRAGMA user_version`), written in the same transaction as
//! the migration's statements, so a crash leaves a database at one version or the next, never
//! between. [`migrate`] applies what a database lacks each time the writer opens it; a database
//! newer than this list is refused rather than written with an old idea of its tables.
//!
//! A migration is never edited once released: a change to the schema is a new entry at the end.
//! Before versions (version 0), ctld created its tables with `CREATE TABLE IF NOT EXISTS` at every
//! start and added the columns it missed, so a version-0 database may already hold any part of
//! what migrations 1–5 add; those five are written to be idempotent ([`Step::AddColumn`] checks
//! first) and a version-0 database simply runs them all. Later migrations run exactly once.

use crate::store::db::DbError;
use rusqlite::Connection;
use std::path::Path;

/// One statement of a migration.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step {
    /// SQL run as a batch.
    Sql(&'static str),
    /// `ALTER TABLE table ADD COLUMN column definition`, unless the column exists already
    /// (only needed by the migrations a version-0 database may already hold).
    AddColumn { table: &'static str, column: &'static str, definition: &'static str },
}

/// One entry of the schema history.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    /// What it adds, for logs and errors.
    pub(crate) name: &'static str,
    pub(crate) steps: &'static [Step],
}

/// The schema history, oldest first; a database at version `n` has the first `n` applied.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration { name: "jobs, fair-share usage, job and step usage, audit, node flags", steps: &[Step::Sql(CORE)] },
    Migration { name: "usage records and hourly rollups", steps: &[Step::Sql(ACCOUNTING)] },
    Migration { name: "earlier runs of requeued jobs, requeues under way", steps: &[Step::Sql(RUNS)] },
    Migration {
        name: "array tasks know their array (sacct -j of an array)",
        steps: &[
            Step::AddColumn { table: "jobs", column: "array_job_id", definition: "INTEGER" },
            Step::Sql("CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_job_id) WHERE array_job_id IS NOT NULL"),
        ],
    },
    Migration {
        name: "audit records say who, from where, with what outcome",
        steps: &[
            Step::AddColumn { table: "audit", column: "user", definition: "TEXT NOT NULL DEFAULT ''" },
            Step::AddColumn { table: "audit", column: "origin", definition: "TEXT NOT NULL DEFAULT 'local'" },
            Step::AddColumn { table: "audit", column: "outcome", definition: "TEXT NOT NULL DEFAULT 'ok'" },
            Step::Sql(
                "CREATE INDEX IF NOT EXISTS audit_time ON audit(time);
                 CREATE INDEX IF NOT EXISTS audit_uid ON audit(uid, time)",
            ),
        ],
    },
    Migration {
        name: "incidents on nodes: owner, ticket, evidence and each node's history",
        steps: &[Step::Sql(INCIDENTS)],
    },
    Migration {
        name: "usage records name the job template (drover report templates)",
        steps: &[Step::Sql("ALTER TABLE usage_jobs ADD COLUMN template TEXT NOT NULL DEFAULT ''")],
    },
    Migration {
        name: "a replica's applied Raft log position and membership (replicated controllers only)",
        steps: &[Step::Sql(
            "CREATE TABLE raft_applied (id INTEGER PRIMARY KEY CHECK (id = 1), log_id BLOB, membership BLOB NOT NULL)",
        )],
    },
    Migration {
        name: "the keys of submissions sent again after a broken connection (sbatch across a failover)",
        steps: &[Step::Sql(
            "CREATE TABLE submit_keys (uid INTEGER NOT NULL, key BLOB NOT NULL, job_id INTEGER NOT NULL,
                time INTEGER NOT NULL, PRIMARY KEY (uid, key));
             CREATE INDEX submit_keys_time ON submit_keys(time)",
        )],
    },
    Migration {
        name: "accounts, users (their associations) and QOS as sacctmgr left them",
        steps: &[Step::Sql(
            "CREATE TABLE acct_entities (kind INTEGER NOT NULL, name TEXT NOT NULL, record BLOB,
                uid INTEGER NOT NULL, time INTEGER NOT NULL, PRIMARY KEY (kind, name))",
        )],
    },
    Migration {
        name: "a node's pending scontrol reboot is kept with its flags",
        steps: &[Step::Sql("ALTER TABLE node_state ADD COLUMN reboot TEXT")],
    },
];

/// Migration 1. `jobs.state` holds [`drover_shared::job::JobState::code`]; codes below 3 are the
/// states of jobs that have not ended (`jobs_active`, `db::load_active`).
const CORE: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    job_id      INTEGER PRIMARY KEY,
    uid         INTEGER NOT NULL,
    state       INTEGER NOT NULL,
    submit_time INTEGER NOT NULL,
    start_time  INTEGER,
    end_time    INTEGER,
    account     TEXT NOT NULL,
    partition   TEXT NOT NULL,
    name        TEXT NOT NULL,
    info        BLOB NOT NULL,
    spec        BLOB NOT NULL,
    alloc       BLOB
);
CREATE INDEX IF NOT EXISTS jobs_active ON jobs(state) WHERE state < 3;
CREATE INDEX IF NOT EXISTS jobs_uid ON jobs(uid, submit_time);
CREATE INDEX IF NOT EXISTS jobs_end ON jobs(end_time);
CREATE TABLE IF NOT EXISTS usage (
    account   TEXT NOT NULL,
    user      TEXT NOT NULL,
    raw_usage REAL NOT NULL,
    PRIMARY KEY (account, user)
);
CREATE TABLE IF NOT EXISTS usage_clock (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    updated INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS job_usage (
    job_id      INTEGER PRIMARY KEY,
    user_usec   INTEGER NOT NULL,
    system_usec INTEGER NOT NULL,
    max_rss_kib INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS step_usage (
    job_id      INTEGER NOT NULL,
    step_id     INTEGER NOT NULL,
    node        TEXT NOT NULL,
    user_usec   INTEGER NOT NULL,
    system_usec INTEGER NOT NULL,
    max_rss_kib INTEGER NOT NULL,
    PRIMARY KEY (job_id, step_id, node)
);
CREATE TABLE IF NOT EXISTS audit (
    id      INTEGER PRIMARY KEY,
    time    INTEGER NOT NULL,
    uid     INTEGER NOT NULL,
    action  TEXT NOT NULL,
    job_id  INTEGER,
    detail  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS node_state (
    name         TEXT PRIMARY KEY,
    drain_reason TEXT,
    down_reason  TEXT,
    uid          INTEGER NOT NULL,
    time         INTEGER NOT NULL
);
";

/// Migration 6: a drained or down node's incident (owner, ticket, evidence) and every node's
/// history of state changes and job failures, read by `drover node history`. Flags stored before
/// it have no owner (`''`: unassigned).
const INCIDENTS: &str = "
ALTER TABLE node_state ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE node_state ADD COLUMN ticket TEXT;
ALTER TABLE node_state ADD COLUMN evidence TEXT NOT NULL DEFAULT '';
CREATE TABLE node_events (
    id       INTEGER PRIMARY KEY,
    time     INTEGER NOT NULL,
    node     TEXT NOT NULL,
    event    TEXT NOT NULL,
    uid      INTEGER NOT NULL,
    user     TEXT NOT NULL,
    owner    TEXT NOT NULL,
    reason   TEXT NOT NULL,
    ticket   TEXT,
    evidence TEXT NOT NULL,
    job_id   INTEGER
);
CREATE INDEX node_events_node ON node_events(node, id);
";

/// Migration 2: one usage record per job run and the hourly rollups (`accounting/`).
const ACCOUNTING: &str = "
CREATE TABLE IF NOT EXISTS usage_jobs (
    job_id        INTEGER NOT NULL,
    run           INTEGER NOT NULL,
    user          TEXT NOT NULL,
    account       TEXT NOT NULL,
    partition     TEXT NOT NULL,
    submit_time   INTEGER NOT NULL,
    eligible_time INTEGER NOT NULL,
    start_time    INTEGER NOT NULL,
    end_time      INTEGER NOT NULL,
    state         TEXT NOT NULL,
    reason        TEXT NOT NULL,
    cpus          INTEGER NOT NULL,
    mem_mb        INTEGER NOT NULL,
    gpus          INTEGER NOT NULL,
    gpu_types     TEXT NOT NULL,
    borrowed      INTEGER NOT NULL,
    billing       REAL NOT NULL,
    active_gpu_secs INTEGER,
    PRIMARY KEY (job_id, run)
);
CREATE INDEX IF NOT EXISTS usage_jobs_end ON usage_jobs(end_time);
CREATE TABLE IF NOT EXISTS usage_hourly (
    hour              INTEGER NOT NULL,
    user              TEXT NOT NULL,
    account           TEXT NOT NULL,
    partition         TEXT NOT NULL,
    gpu_type          TEXT NOT NULL,
    cpu_secs          INTEGER NOT NULL,
    mem_mb_secs       INTEGER NOT NULL,
    gpu_secs          INTEGER NOT NULL,
    borrowed_gpu_secs INTEGER NOT NULL,
    active_gpu_secs   INTEGER NOT NULL,
    billing_secs      INTEGER NOT NULL,
    PRIMARY KEY (hour, user, account, partition, gpu_type)
);
";

/// Migration 3: earlier runs of requeued jobs, keyed by job and run number (`runs.rs`), and the
/// requeues under way.
const RUNS: &str = "
CREATE TABLE IF NOT EXISTS job_runs (
    job_id   INTEGER NOT NULL,
    run      INTEGER NOT NULL,
    end_time INTEGER,
    info     BLOB NOT NULL,
    PRIMARY KEY (job_id, run)
);
CREATE TABLE IF NOT EXISTS requeue_intents (
    job_id INTEGER PRIMARY KEY,
    hold   INTEGER NOT NULL
);
";

/// The schema version this code writes: the length of [`MIGRATIONS`].
pub(crate) fn latest() -> u32 {
    u32::try_from(MIGRATIONS.len()).expect("fewer than 2^32 migrations")
}

/// Brings the database to [`latest`], one transaction per migration, and returns the version it
/// was at. Refuses a database at a version this code does not know.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<u32, DbError> {
    let err = |source| DbError::Sqlite { path: path.to_owned(), source };
    let found: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(err)?;
    if found > latest() {
        return Err(DbError::NewerSchema { path: path.to_owned(), found, known: latest() });
    }
    for (migration, version) in MIGRATIONS.iter().zip(1..).filter(|(_, v)| *v > found) {
        let tx = conn.transaction().map_err(err)?;
        for step in migration.steps {
            apply(&tx, step).map_err(|source| DbError::Migration {
                path: path.to_owned(),
                version,
                name: migration.name,
                source,
            })?;
        }
        tx.pragma_update(None, "user_version", version).map_err(err)?;
        tx.commit().map_err(err)?;
        tracing::info!(path = %path.display(), version, migration = migration.name, "schema migrated");
    }
    Ok(found)
}

fn apply(conn: &Connection, step: &Step) -> rusqlite::Result<()> {
    match *step {
        Step::Sql(sql) => conn.execute_batch(sql),
        Step::AddColumn { table, column, definition } => {
            let has: i64 =
                conn.query_row("SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2", [table, column], |r| {
                    r.get(0)
                })?;
            if has == 0 {
                conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {definition}"))?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db;
    use drover_shared::job::JobState;
    use drover_shared::proto::client::{AccountingQuery, AuditQuery};
    use std::fmt::Write as _;
    use std::path::PathBuf;

    /// The fixture written by ctld before the schema had versions (see `tests/fixtures/README.md`).
    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unversioned.db")
    }

    /// A 64-bit FNV-1a digest, so blobs show in the dump without their bytes.
    fn digest(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
    }

    /// Every row of `table` in primary-key order, one line each, blobs as length and digest.
    fn dump_table(conn: &rusqlite::Connection, table: &str, order: &str, out: &mut String) {
        let mut stmt = conn.prepare(&format!("SELECT * FROM {table} ORDER BY {order}")).unwrap();
        let names: Vec<String> = stmt.column_names().into_iter().map(str::to_owned).collect();
        let mut rows = stmt.query([]).unwrap();
        writeln!(out, "## {table}").unwrap();
        while let Some(row) = rows.next().unwrap() {
            let mut cells = Vec::new();
            for (i, name) in names.iter().enumerate() {
                let cell = match row.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Null => "NULL".to_owned(),
                    rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                    rusqlite::types::ValueRef::Real(v) => format!("{v:?}"),
                    rusqlite::types::ValueRef::Text(t) => format!("{:?}", String::from_utf8_lossy(t)),
                    rusqlite::types::ValueRef::Blob(b) => format!("blob[{}]#{:016x}", b.len(), digest(b)),
                };
                cells.push(format!("{name}={cell}"));
            }
            writeln!(out, "{}", cells.join(" ")).unwrap();
        }
    }

    /// What the database reads back as: every table's rows, and what ctld's loaders and queries
    /// (`sacct`, `sacct -D`, `sacct -s`, `drover audit`, usage) make of them.
    fn read_back(path: &Path) -> String {
        let mut out = String::new();
        let conn = db::open(path, true).unwrap();
        for (table, order) in [
            ("jobs", "job_id"),
            ("usage", "account, user"),
            ("usage_clock", "id"),
            ("job_usage", "job_id"),
            ("step_usage", "job_id, step_id, node"),
            ("audit", "id"),
            ("node_state", "name"),
            ("job_runs", "job_id, run"),
            ("requeue_intents", "job_id"),
            ("usage_jobs", "job_id, run"),
            ("usage_hourly", "hour, user, account, partition, gpu_type"),
        ] {
            dump_table(&conn, table, order, &mut out);
        }
        let (active, next) = db::load_active(&conn, path).unwrap();
        writeln!(out, "## load_active next={next}\n{active:#?}").unwrap();
        let mut usage = crate::model::usage::Usage::default();
        db::load_usage(&conn, path, &mut usage).unwrap();
        writeln!(out, "## load_usage\n{usage:?}").unwrap();
        writeln!(out, "## node states\n{:?}", db::load_node_states(&conn, path).unwrap()).unwrap();
        let intents: std::collections::BTreeMap<_, _> =
            crate::store::runs::load_intents(&conn, path).unwrap().into_iter().collect();
        writeln!(out, "## requeue intents\n{intents:?}").unwrap();
        let all = AccountingQuery { duplicates: true, ..AccountingQuery::default() };
        let sacct = crate::store::runs::query(path, &all, |q| db::query_accounting(path, q)).unwrap();
        writeln!(out, "## sacct -D\n{sacct:#?}").unwrap();
        for state in JobState::ALL {
            let q = AccountingQuery { states: vec![state], ..AccountingQuery::default() };
            let ids: Vec<u32> = db::query_accounting(path, &q).unwrap().iter().map(|j| j.job_id).collect();
            writeln!(out, "## sacct -s {} {ids:?}", state.long_name()).unwrap();
        }
        let q = AccountingQuery { job_ids: vec![4], ..AccountingQuery::default() };
        let ids: Vec<u32> = db::query_accounting(path, &q).unwrap().iter().map(|j| j.job_id).collect();
        writeln!(out, "## sacct -j 4 {ids:?}").unwrap();
        writeln!(out, "## audit\n{:#?}", db::query_audit(path, &AuditQuery::default()).unwrap()).unwrap();
        let ids: Vec<u32> = (1..=10).collect();
        writeln!(out, "## job usage\n{:?}", db::query_job_usage(path, &ids).unwrap()).unwrap();
        writeln!(out, "## step usage\n{:?}", db::query_step_usage(path, &ids).unwrap()).unwrap();
        out
    }

    /// The schema's shape: every table and index with its SQL, each table's columns (name, type,
    /// not null, default, key) and each index's columns.
    fn shape(conn: &rusqlite::Connection) -> Vec<String> {
        let mut out = Vec::new();
        let objects: Vec<(String, String, Option<String>)> = conn
            .prepare("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for (kind, name, sql) in objects {
            out.push(format!("{kind} {name}: {}", sql.unwrap_or_default()));
            let pragma = if kind == "table" { "table_info" } else { "index_info" };
            let mut stmt = conn.prepare(&format!("SELECT * FROM pragma_{pragma}(?1)")).unwrap();
            let n = stmt.column_count();
            let mut rows = stmt.query([&name]).unwrap();
            while let Some(row) = rows.next().unwrap() {
                let cells: Vec<String> =
                    (0..n).map(|i| format!("{:?}", row.get::<_, rusqlite::types::Value>(i).unwrap())).collect();
                out.push(format!("  {}", cells.join(" ")));
            }
        }
        out
    }

    fn pragma(path: &Path, name: &str) -> i64 {
        rusqlite::Connection::open(path).unwrap().pragma_query_value(None, name, |r| r.get(0)).unwrap()
    }

    fn copy_of_fixture(dir: &Path) -> PathBuf {
        let path = dir.join("drover.db");
        std::fs::copy(fixture(), &path).unwrap();
        path
    }

    /// The done-when: a database written before versions opens, migrates to the latest version,
    /// and reads back exactly as it did with the code that wrote it.
    #[test]
    fn the_unversioned_fixture_migrates_and_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = copy_of_fixture(dir.path());
        assert_eq!(pragma(&path, "user_version"), 0);
        drop(db::open(&path, false).unwrap());
        assert_eq!(pragma(&path, "user_version"), i64::from(latest()));
        let expected =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unversioned.expected"))
                .unwrap();
        let actual = read_back(&path);
        for (n, (want, got)) in expected.lines().zip(actual.lines()).enumerate() {
            assert_eq!(got, want, "line {} of unversioned.expected", n + 1);
        }
        assert_eq!(actual.lines().count(), expected.lines().count());
    }

    /// The list applied to an empty database builds the schema the fixture migrates to; so does
    /// the oldest unversioned shape (no array column, audit without who/where/outcome, no
    /// accounting or runs tables).
    #[test]
    fn every_path_reaches_the_same_schema() {
        let dir = tempfile::tempdir().unwrap();
        let fixture = copy_of_fixture(dir.path());
        drop(db::open(&fixture, false).unwrap());
        let migrated = shape(&rusqlite::Connection::open(&fixture).unwrap());
        let fresh = dir.path().join("fresh.db");
        drop(db::open(&fresh, false).unwrap());
        assert_eq!(shape(&rusqlite::Connection::open(&fresh).unwrap()), migrated);
        let oldest = dir.path().join("oldest.db");
        rusqlite::Connection::open(&oldest).unwrap().execute_batch(CORE).unwrap();
        drop(db::open(&oldest, false).unwrap());
        assert_eq!(shape(&rusqlite::Connection::open(&oldest).unwrap()), migrated);
        assert_eq!(pragma(&oldest, "user_version"), i64::from(latest()));
    }

    /// A second open of a migrated database changes nothing (SQLite bumps `schema_version` on
    /// any schema change), nor does reopening the fixture after its migration.
    #[test]
    fn opening_twice_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        for path in [dir.path().join("fresh.db"), copy_of_fixture(dir.path())] {
            drop(db::open(&path, false).unwrap());
            let (version, schema) = (pragma(&path, "user_version"), pragma(&path, "schema_version"));
            let mut conn = db::open(&path, false).unwrap();
            assert_eq!(migrate(&mut conn, &path).unwrap(), latest());
            drop(conn);
            assert_eq!((pragma(&path, "user_version"), pragma(&path, "schema_version")), (version, schema));
        }
    }

    /// A migration that fails leaves the database at the version before it, with nothing of the
    /// failed migration applied.
    #[test]
    fn a_failed_migration_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drover.db");
        {
            // At version 3, with a table in the way of migration 5's last statement (its index
            // name), so that 5 fails after adding its columns.
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(CORE).unwrap();
            conn.execute_batch("CREATE TABLE audit_time (x INTEGER)").unwrap();
            conn.pragma_update(None, "user_version", 3).unwrap();
        }
        let err = db::open(&path, false).unwrap_err();
        assert!(matches!(err, DbError::Migration { version: 5, .. }), "{err}");
        // Migration 4 committed on its own; nothing of 5 is left.
        assert_eq!(pragma(&path, "user_version"), 4);
        let conn = rusqlite::Connection::open(&path).unwrap();
        let column = |table: &str, column: &str| -> i64 {
            conn.query_row("SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2", [table, column], |r| r.get(0))
                .unwrap()
        };
        assert_eq!((column("jobs", "array_job_id"), column("audit", "user"), column("audit", "outcome")), (1, 0, 0));
    }

    /// A database from a newer ctld is refused, not written with an older idea of its tables.
    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drover.db");
        drop(db::open(&path, false).unwrap());
        rusqlite::Connection::open(&path).unwrap().pragma_update(None, "user_version", latest() + 1).unwrap();
        let err = db::open(&path, false).unwrap_err();
        assert!(matches!(err, DbError::NewerSchema { found, known, .. } if found == latest() + 1 && known == latest()));
    }
}
