//! Seeding a controller's state directory from another controller's state database: the
//! conversions between one controller and replicas (docs/admin/ha.md, "Converting a running
//! cluster"). `drover-ctld --seed FILE` runs them and exits; the files given are only read.
//!
//! - **One controller → replicas.** The first replica (the lowest id, the only one that would
//!   otherwise propose a new cluster's membership) gets a copy of the single controller's
//!   `drover.db` with, in its `raft_applied` row, a position of the log (index 0) and the
//!   configured membership. At its start openraft finds the state machine ahead of an empty log,
//!   purges the log up to that position and builds a snapshot of it; the replica then stands for
//!   election as a voter of that membership, and the other replicas, empty, receive the snapshot
//!   in place of the purged log. Every job, its id (the next is the highest stored plus one),
//!   accounting and usage thus start the replicated history.
//! - **Replicas → one controller.** Of the replicas' databases given, the one that applied the
//!   furthest position holds every committed change the others hold (each applied a prefix of the
//!   same log, and a leader answers a change only after applying it), so it becomes the single
//!   controller's `drover.db`, without its `raft_applied` row; the Raft files of that directory go.

use crate::store::db;
use drover_shared::config::Config;
use openraft::{BasicNode, CommittedLeaderId, LogId, Membership, StoredMembership};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Why a state directory was not seeded.
impl From<SeedError> for crate::error::Error {
    fn from(e: SeedError) -> crate::error::Error {
        crate::error::Error::Inner(Box::new(e))
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SeedError {
    #[error("{path} does not exist")]
    Missing { path: PathBuf },
    #[error("{path} is not a Drover state database ({why})")]
    NotState { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    #[error(transparent)]
    Db(#[from] db::DbError),
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error(
        "replica {id} cannot be seeded: only the first replica ({first}) starts a new cluster from a seed; \
         start the others with empty state directories"
    )]
    NotFirst { id: u64, first: u64 },
    #[error(
        "{path} holds a Raft log: replica {id} already belongs to a cluster, and a seed only starts a new one \
         (move its state directory away first)"
    )]
    HoldsLog { path: PathBuf, id: u64 },
    #[error("{path} exists and is none of the files given: move it away first (it would be replaced)")]
    Exists { path: PathBuf },
    #[error(
        "{path} is not a replica's database (it holds no applied log position); give a single controller's \
         database alone"
    )]
    NotReplica { path: PathBuf },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> SeedError + '_ {
    move |e| {
        let text = e.to_string();
        let message = text.find(" (os error ").map_or(text.clone(), |at| text[..at].to_owned());
        SeedError::Io { path: path.to_owned(), message }
    }
}

/// A source database: where it is, the log position it applied (none for a single controller's)
/// and what it holds.
struct Source {
    path: PathBuf,
    applied: Option<LogId<u64>>,
    /// Whether it holds any job (a replica that never received a snapshot holds none).
    empty: bool,
}

/// Opens `path` read-only and reads its applied position, checking that it is a state database.
fn read_source(path: &Path) -> Result<Source, SeedError> {
    if !path.exists() {
        return Err(SeedError::Missing { path: path.to_owned() });
    }
    let sqlite = |source| SeedError::Sqlite { path: path.to_owned(), source };
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(sqlite)?;
    let not_state = |why: &str| SeedError::NotState { path: path.to_owned(), why: why.to_owned() };
    let has = |table: &str| -> Result<bool, SeedError> {
        conn.query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", [table], |_| Ok(()))
            .optional()
            .map(|found| found.is_some())
            .map_err(|e| match e {
                rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
                    not_state("not an SQLite database")
                }
                e => sqlite(e),
            })
    };
    if !has("jobs")? {
        return Err(not_state("no jobs table"));
    }
    let applied = if has("raft_applied")? {
        let blob: Option<Option<Vec<u8>>> = conn
            .query_row("SELECT log_id FROM raft_applied WHERE id = 1", [], |r| r.get(0))
            .optional()
            .map_err(sqlite)?;
        blob.flatten()
            .map(|b| postcard::from_bytes::<LogId<u64>>(&b))
            .transpose()
            .map_err(|e| not_state(&format!("its applied log position does not decode: {e}")))?
    } else {
        None
    };
    let empty = conn.query_row("SELECT NOT EXISTS (SELECT 1 FROM jobs)", [], |r| r.get(0)).map_err(sqlite)?;
    Ok(Source { path: path.to_owned(), applied, empty })
}

/// Of several replicas' databases the one that applied the furthest (one that never applied
/// anything and holds no job is passed over); one file is taken as it is.
fn furthest(paths: &[PathBuf]) -> Result<Source, SeedError> {
    let mut sources = paths.iter().map(|p| read_source(p)).collect::<Result<Vec<_>, _>>()?;
    if sources.len() > 1 {
        if let Some(single) = sources.iter().find(|s| s.applied.is_none() && !s.empty) {
            return Err(SeedError::NotReplica { path: single.path.clone() });
        }
        if sources.iter().any(|s| s.applied.is_some()) {
            sources.retain(|s| s.applied.is_some());
        }
    }
    sources.sort_by_key(|s| s.applied);
    Ok(sources.pop().expect("at least one file (clap requires it)"))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Puts a consistent copy of `source` (`VACUUM INTO`, one read transaction) at `target`, in place
/// of whatever database was there (its WAL too); `source` is only read.
fn copy_database(source: &Path, target: &Path) -> Result<(), SeedError> {
    if same_file(source, target) {
        return Ok(());
    }
    let partial = with_suffix(target, ".seeding");
    let _ = std::fs::remove_file(&partial);
    let conn = Connection::open_with_flags(source, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| SeedError::Sqlite { path: source.to_owned(), source: e })?;
    conn.execute("VACUUM INTO ?1", [partial.to_string_lossy()])
        .map_err(|e| SeedError::Sqlite { path: source.to_owned(), source: e })?;
    drop(conn);
    std::fs::File::open(&partial).and_then(|f| f.sync_all()).map_err(io(&partial))?;
    for suffix in ["-wal", "-shm"] {
        let side = with_suffix(target, suffix);
        match std::fs::remove_file(&side) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&side)(e)),
            _ => {}
        }
    }
    std::fs::rename(&partial, target).map_err(io(target))?;
    if let Some(dir) = target.parent() {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))?;
    }
    Ok(())
}

/// What a seeded database holds, for the admin: how many jobs and the next job id.
fn summary(conn: &Connection, path: &Path) -> Result<(i64, i64), SeedError> {
    conn.query_row("SELECT COUNT(*), COALESCE(MAX(job_id), 0) + 1 FROM jobs", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(|e| SeedError::Sqlite { path: path.to_owned(), source: e })
}

/// The log position a seeded first replica holds its state at: index 0, under a leader id no
/// election or `initialize` produces (term 0, this replica), so that it never matches an entry
/// of another cluster's log.
pub(crate) fn seed_log_id(id: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(0, id), 0)
}

/// Seeds replica `id`'s state directory from `paths` (see the module's doc); returns what was done.
pub(crate) fn into_replica(config: &Config, id: u64, paths: &[PathBuf]) -> Result<String, SeedError> {
    let first = config.replicas.iter().map(|r| r.id).min().unwrap_or(id);
    if id != first {
        return Err(SeedError::NotFirst { id, first });
    }
    let me = config.replicas.iter().find(|r| r.id == id).expect("the replica was selected from the config");
    let log = me.state_dir.join("raft.db");
    if log.exists() {
        let store = super::log_store::LogStore::open(&log)
            .map_err(|e| SeedError::Io { path: log.clone(), message: format!("{e:#}") })?;
        if !store.is_blank() {
            return Err(SeedError::HoldsLog { path: log, id });
        }
    }
    let source = furthest(paths)?;
    let target = me.state_dir.join("drover.db");
    copy_database(&source.path, &target)?;
    // A snapshot left from an earlier try would be offered instead of the seeded state.
    let snapshots = me.state_dir.join("snapshot");
    match std::fs::remove_dir_all(&snapshots) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&snapshots)(e)),
        _ => {}
    }
    let conn = db::open(&target, false)?;
    let log_id = seed_log_id(id);
    let voters: BTreeSet<u64> = config.replicas.iter().map(|r| r.id).collect();
    let nodes: BTreeMap<u64, BasicNode> =
        config.replicas.iter().map(|r| (r.id, BasicNode::new(r.raft_address.clone()))).collect();
    let membership: StoredMembership<u64, BasicNode> =
        StoredMembership::new(Some(log_id), Membership::new(vec![voters], nodes));
    super::state_machine::StateMachine::record_applied(&conn, &log_id, &membership)
        .map_err(|e| SeedError::Sqlite { path: target.clone(), source: e })?;
    let (jobs, next) = summary(&conn, &target)?;
    Ok(format!(
        "replica {id} seeded from {}: {jobs} jobs, next job id {next}; start every replica now \
         (the others receive this state from it)",
        source.path.display()
    ))
}

/// Seeds a single controller's state directory from replicas' databases (see the module's doc).
pub(crate) fn into_single(config: &Config, paths: &[PathBuf]) -> Result<String, SeedError> {
    let target = config.state_dir.join("drover.db");
    if target.exists() && !paths.iter().any(|p| same_file(p, &target)) {
        return Err(SeedError::Exists { path: target });
    }
    let source = furthest(paths)?;
    copy_database(&source.path, &target)?;
    let conn = db::open(&target, false)?;
    conn.execute("DELETE FROM raft_applied", []).map_err(|e| SeedError::Sqlite { path: target.clone(), source: e })?;
    // A replica's log and snapshot in this directory belong to no cluster any more, and would
    // stop a later seed of it as a replica.
    for file in ["raft.db", "raft.db-wal", "raft.db-shm"] {
        let path = config.state_dir.join(file);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&path)(e)),
            _ => {}
        }
    }
    let snapshots = config.state_dir.join("snapshot");
    match std::fs::remove_dir_all(&snapshots) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&snapshots)(e)),
        _ => {}
    }
    let (jobs, next) = summary(&conn, &target)?;
    let position = source.applied.map(|l| format!(" (applied log position {})", l.index)).unwrap_or_default();
    Ok(format!("{} seeded from {}{position}: {jobs} jobs, next job id {next}", target.display(), source.path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::DbOp;
    use drover_shared::job::{JobInfo, JobSpec};

    /// One controller (`single/`) and three replicas (`r1/` to `r3/`) in `dir`.
    fn config(dir: &Path) -> Config {
        let mut text = String::from(
            "cluster_name = \"c\"\ndefault_account = \"shared\"\n[controller]\naddress = \"127.0.0.1:6817\"\n\
             state_dir = \"single\"\n[[nodes]]\nnames = \"n1\"\ncpus = 4\nreal_memory = 8000\n\
             [[partitions]]\nname = \"main\"\nnodes = \"n1\"\ndefault = true\n[[accounts]]\nname = \"shared\"\n",
        );
        for id in 1..=3 {
            text += &format!(
                "[[controller.replicas]]\nid = {id}\naddress = \"127.0.0.1:{}\"\nraft_address = \"127.0.0.1:{}\"\n\
                 state_dir = \"r{id}\"\n",
                6900 + id,
                7000 + id
            );
        }
        let config = Config::parse(&dir.join("cluster.toml"), &text).unwrap();
        for dir in [&config.state_dir].into_iter().chain(config.replicas.iter().map(|r| &r.state_dir)) {
            std::fs::create_dir_all(dir).unwrap();
        }
        config
    }

    /// A state database at `path` holding jobs `ids`, applied up to `applied` (a replica's).
    fn database(path: &Path, ids: &[u32], applied: Option<u64>) {
        let mut conn = db::open(path, false).unwrap();
        let ops = ids
            .iter()
            .map(|&job_id| DbOp::InsertJob {
                info: Box::new(JobInfo { job_id, ..JobInfo::default() }),
                spec: Box::new(JobSpec::default()),
                fill_from: None,
            })
            .collect();
        let tx = conn.transaction().unwrap();
        db::write_ops(&tx, ops).unwrap();
        if let Some(index) = applied {
            let log_id = LogId::new(CommittedLeaderId::new(4, 2), index);
            crate::replica::state_machine::StateMachine::record_applied(&tx, &log_id, &StoredMembership::default())
                .unwrap();
        }
        tx.commit().unwrap();
    }

    fn jobs(path: &Path) -> Vec<u32> {
        let conn = db::open(path, true).unwrap();
        let mut stmt = conn.prepare("SELECT job_id FROM jobs ORDER BY job_id").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    }

    /// The first replica gets the single controller's jobs at the seed position with the
    /// configured membership; the source is left as it was; another replica, or one that holds
    /// a log, is refused.
    #[test]
    fn the_first_replica_is_seeded_from_a_single_controllers_database() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let single = config.state_dir.join("drover.db");
        database(&single, &[1, 2, 7], None);
        let err = into_replica(&config, 2, std::slice::from_ref(&single)).unwrap_err();
        assert!(err.to_string().contains("only the first replica (1)"), "{err}");
        let said = into_replica(&config, 1, std::slice::from_ref(&single)).unwrap();
        assert!(said.contains("3 jobs, next job id 8"), "{said}");
        let seeded = config.replicas[0].state_dir.join("drover.db");
        assert_eq!(jobs(&seeded), [1, 2, 7]);
        let conn = db::open(&seeded, true).unwrap();
        let (applied, membership) = crate::replica::state_machine::StateMachine::applied(&conn).unwrap();
        assert_eq!(applied, Some(seed_log_id(1)));
        assert_eq!(membership.membership().voter_ids().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(read_source(&single).unwrap().applied, None, "the source is not written");

        let log = config.replicas[0].state_dir.join("raft.db");
        drop(crate::replica::log_store::LogStore::open(&log).unwrap());
        Connection::open(&log).unwrap().execute("INSERT INTO meta (name, value) VALUES ('vote', x'01')", []).unwrap();
        let err = into_replica(&config, 1, std::slice::from_ref(&single)).unwrap_err();
        assert!(err.to_string().contains("holds a Raft log"), "{err}");
    }

    /// Back to one controller: the replica database that applied the furthest wins, without its
    /// applied position; an existing database not given, or a single controller's among
    /// replicas', is refused.
    #[test]
    fn a_single_controller_is_seeded_from_the_furthest_replica() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let paths: Vec<PathBuf> = config.replicas.iter().map(|r| r.state_dir.join("drover.db")).collect();
        database(&paths[0], &[1, 2], Some(5));
        database(&paths[1], &[1, 2, 3], Some(9));
        database(&paths[2], &[1], Some(2));
        // A fourth replica that never received anything is passed over.
        let blank = dir.path().join("blank.db");
        database(&blank, &[], None);
        let paths = [paths, vec![blank]].concat();
        let target = config.state_dir.join("drover.db");
        database(&target, &[1], None);
        let err = into_single(&config, &paths).unwrap_err();
        assert!(err.to_string().contains("is none of the files given"), "{err}");
        let mut mixed = paths.clone();
        mixed.push(target.clone());
        let err = into_single(&config, &mixed).unwrap_err();
        assert!(err.to_string().contains("is not a replica's database"), "{err}");
        std::fs::remove_file(&target).unwrap();
        let said = into_single(&config, &paths).unwrap();
        assert!(said.contains("applied log position 9") && said.contains("3 jobs, next job id 4"), "{said}");
        assert_eq!(jobs(&target), [1, 2, 3]);
        assert_eq!(read_source(&target).unwrap().applied, None);
    }
}
