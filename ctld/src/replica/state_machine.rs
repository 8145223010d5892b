//! A replica's state machine: the state database `drover.db`, the same file and schema an
//! embedded ctld keeps. Each committed log entry is applied with the writer's own
//! [`crate::store::db::write_ops`] in one transaction that also records the entry's position
//! (`raft_applied`), so an entry is applied exactly once even across a crash. A snapshot is a
//! consistent copy of the database (`VACUUM INTO`); installing one replaces the file.

use super::TypeConfig;
use super::wire::{Applied, Batch};
use crate::store::db;
use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership,
};
use rusqlite::{Connection, OptionalExtension, params};
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

type NodeId = u64;
type Membership = StoredMembership<NodeId, openraft::BasicNode>;

/// The state database as a Raft state machine.
pub(crate) struct StateMachine {
    /// `drover.db`; `None` only while a snapshot replaces the file.
    conn: Arc<Mutex<Option<Connection>>>,
    path: PathBuf,
    /// Where the latest snapshot (`snapshot.db`) and its meta (`snapshot.meta`) are kept.
    dir: PathBuf,
}

fn read_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::read_state_machine(&e).into()
}
fn write_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::write_state_machine(&e).into()
}

/// Whether a refused transaction is refused the same way on every replica (a constraint of the
/// schema), so that the entry counts as applied with nothing stored; anything else (I/O, a full
/// disk) stops this replica instead, so that replicas never differ.
fn deterministic(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation)
}

impl StateMachine {
    /// Opens (creating and migrating) the state database at `path`.
    pub(crate) fn open(path: &Path) -> crate::error::Result<StateMachine> {
        let conn = db::open(path, false)?;
        let dir = path.parent().unwrap_or(Path::new(".")).join("snapshot");
        std::fs::create_dir_all(&dir)?;
        Ok(StateMachine { conn: Arc::new(Mutex::new(Some(conn))), path: path.to_owned(), dir })
    }

    pub(super) fn applied(conn: &Connection) -> rusqlite::Result<(Option<LogId<NodeId>>, Membership)> {
        let row: Option<(Option<Vec<u8>>, Vec<u8>)> = conn
            .query_row("SELECT log_id, membership FROM raft_applied WHERE id = 1", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let decode =
            |e: postcard::Error| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Blob, Box::new(e));
        match row {
            None => Ok((None, Membership::default())),
            Some((log_id, membership)) => Ok((
                log_id.map(|b| postcard::from_bytes(&b)).transpose().map_err(decode)?,
                postcard::from_bytes(&membership).map_err(decode)?,
            )),
        }
    }

    pub(super) fn record_applied(
        tx: &Connection,
        log_id: &LogId<NodeId>,
        membership: &Membership,
    ) -> rusqlite::Result<()> {
        tx.execute(
            "INSERT OR REPLACE INTO raft_applied (id, log_id, membership) VALUES (1, ?1, ?2)",
            params![
                postcard::to_allocvec(log_id).expect("log ids encode"),
                postcard::to_allocvec(membership).expect("memberships encode")
            ],
        )?;
        Ok(())
    }

    fn meta_path(&self) -> PathBuf {
        self.dir.join("snapshot.meta")
    }
    fn data_path(&self) -> PathBuf {
        self.dir.join("snapshot.db")
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        let guard = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let conn = guard.as_ref().expect("the state database is open");
        Self::applied(conn).map_err(read_err)
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut guard = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let conn = guard.as_mut().expect("the state database is open");
        let mut results = Vec::new();
        for entry in entries {
            let (_, mut membership) = Self::applied(conn).map_err(read_err)?;
            let ops = match entry.payload {
                EntryPayload::Normal(Batch(ops)) => ops,
                EntryPayload::Membership(m) => {
                    membership = StoredMembership::new(Some(entry.log_id), m);
                    Vec::new()
                }
                EntryPayload::Blank => Vec::new(),
            };
            let tx = conn.transaction().map_err(write_err)?;
            let written = db::write_ops(&tx, ops);
            let outcome = match written {
                Ok(()) => {
                    Self::record_applied(&tx, &entry.log_id, &membership).map_err(write_err)?;
                    tx.commit().map_err(write_err)?;
                    Ok(())
                }
                Err(e) if deterministic(&e) => {
                    drop(tx);
                    let tx = conn.transaction().map_err(write_err)?;
                    Self::record_applied(&tx, &entry.log_id, &membership).map_err(write_err)?;
                    tx.commit().map_err(write_err)?;
                    tracing::error!(log_id = %entry.log_id, error = %e, "a replicated batch was refused; nothing of it is stored");
                    Err(e.to_string())
                }
                Err(e) => return Err(write_err(e)),
            };
            results.push(Applied(outcome));
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder { path: self.path.clone(), dir: self.dir.clone() }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let incoming = self.dir.join("incoming.db");
        std::fs::write(&incoming, &bytes).map_err(write_err)?;
        std::fs::File::open(&incoming).and_then(|f| f.sync_all()).map_err(write_err)?;
        let mut guard = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Close the old database, put the snapshot in its place (without the old WAL, which
        // belongs to the old file), and reopen.
        drop(guard.take());
        for suffix in ["-wal", "-shm"] {
            let mut side = self.path.clone().into_os_string();
            side.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(side));
        }
        std::fs::rename(&incoming, &self.path).map_err(write_err)?;
        if let Some(parent) = self.path.parent() {
            std::fs::File::open(parent).and_then(|d| d.sync_all()).map_err(write_err)?;
        }
        let conn = db::open(&self.path, false).map_err(|e| write_err(std::io::Error::other(e.to_string())))?;
        tracing::info!(snapshot = %meta.snapshot_id, last = ?meta.last_log_id, "installed a snapshot of the state database");
        *guard = Some(conn);
        drop(guard);
        std::fs::write(self.data_path(), &bytes).map_err(write_err)?;
        std::fs::write(self.meta_path(), postcard::to_allocvec(meta).map_err(write_err)?).map_err(write_err)?;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let Ok(meta) = std::fs::read(self.meta_path()) else { return Ok(None) };
        let meta = postcard::from_bytes(&meta).map_err(read_err)?;
        let data = std::fs::read(self.data_path()).map_err(read_err)?;
        Ok(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) }))
    }
}

/// Builds a snapshot on its own read connection, beside the applies.
pub(crate) struct SnapshotBuilder {
    path: PathBuf,
    dir: PathBuf,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let conn = db::open(&self.path, true).map_err(|e| read_err(std::io::Error::other(e.to_string())))?;
        let building = self.dir.join("building.db");
        let _ = std::fs::remove_file(&building);
        // `VACUUM INTO` copies one consistent read of the database; the position the copy holds
        // is read from the copy itself, so the two agree.
        conn.execute("VACUUM INTO ?1", [building.to_string_lossy()]).map_err(read_err)?;
        drop(conn);
        let copy =
            Connection::open_with_flags(&building, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(read_err)?;
        let (last_log_id, membership) = StateMachine::applied(&copy).map_err(read_err)?;
        drop(copy);
        let data = std::fs::read(&building).map_err(read_err)?;
        let snapshot_id = format!("{}-{}", last_log_id.map(|l| l.index).unwrap_or(0), drover_shared::now());
        let meta = SnapshotMeta { last_log_id, last_membership: membership, snapshot_id };
        std::fs::rename(&building, self.dir.join("snapshot.db")).map_err(write_err)?;
        std::fs::write(self.dir.join("snapshot.meta"), postcard::to_allocvec(&meta).map_err(write_err)?)
            .map_err(write_err)?;
        tracing::info!(snapshot = %meta.snapshot_id, bytes = data.len(), "built a snapshot of the state database");
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}
