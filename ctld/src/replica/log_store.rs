//! The Raft log of one replica, in its own SQLite file (`raft.db` beside `drover.db`), apart from
//! the state database: the log must be durable before an entry counts towards a majority, while
//! the state database may lag it (a restarted replica re-applies from its applied position, which
//! the state database stores in the same transaction as the entry's changes). Every write commits
//! with `synchronous = FULL`.

use super::TypeConfig;
use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, StorageError, StorageIOError, Vote};
use rusqlite::{Connection, OptionalExtension, params};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

type NodeId = u64;

/// The log, shared by the storage and its readers (one connection, one writer at a time).
#[derive(Clone)]
pub(crate) struct LogStore {
    conn: Arc<Mutex<Connection>>,
}

fn io_err(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::<NodeId>::write_logs(&e).into()
}

impl LogStore {
    /// Opens (creating) the log database at `path`.
    pub(crate) fn open(path: &Path) -> crate::error::Result<LogStore> {
        let conn = Connection::open(path)?;
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            crate::error::refuse!("{}: journal mode {mode}, WAL required", path.display());
        }
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS log (idx INTEGER PRIMARY KEY, entry BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);",
        )?;
        Ok(LogStore { conn: Arc::new(Mutex::new(conn)) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    // openraft's storage error is large; these helpers return it as the trait methods do.
    #[allow(clippy::result_large_err)]
    fn read_meta<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StorageError<NodeId>> {
        let conn = self.lock();
        let blob: Option<Vec<u8>> = conn
            .query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| r.get(0))
            .optional()
            .map_err(|e| StorageError::from(StorageIOError::<NodeId>::read(&e)))?;
        blob.map(|b| postcard::from_bytes(&b)).transpose().map_err(|e| StorageIOError::<NodeId>::read(&e).into())
    }

    #[allow(clippy::result_large_err)]
    fn write_meta<T: serde::Serialize>(&self, name: &str, value: &T) -> Result<(), StorageError<NodeId>> {
        let blob = postcard::to_allocvec(value).map_err(|e| StorageIOError::<NodeId>::write(&e))?;
        self.lock()
            .execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)", params![name, blob])
            .map_err(|e| StorageIOError::<NodeId>::write(&e))?;
        Ok(())
    }

    /// Whether this replica has never held a log or a vote (a new or wiped replica).
    pub(crate) fn is_blank(&self) -> bool {
        let conn = self.lock();
        let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap_or(1);
        count("SELECT COUNT(*) FROM log") == 0 && count("SELECT COUNT(*) FROM meta") == 0
    }
}

fn bound(b: Bound<&u64>) -> (i64, bool) {
    match b {
        Bound::Included(v) => (i64::try_from(*v).unwrap_or(i64::MAX), true),
        Bound::Excluded(v) => (i64::try_from(*v).unwrap_or(i64::MAX), false),
        Bound::Unbounded => (-1, false),
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let (start, start_in) = bound(range.start_bound());
        let start = if start_in || start < 0 { start.max(0) } else { start + 1 };
        let end = match range.end_bound() {
            Bound::Included(v) => i64::try_from(*v).unwrap_or(i64::MAX),
            Bound::Excluded(v) => i64::try_from(*v).unwrap_or(i64::MAX) - 1,
            Bound::Unbounded => i64::MAX,
        };
        let conn = self.lock();
        let read = |e: rusqlite::Error| StorageError::from(StorageIOError::<NodeId>::read_logs(&e));
        let mut stmt =
            conn.prepare_cached("SELECT entry FROM log WHERE idx >= ?1 AND idx <= ?2 ORDER BY idx").map_err(read)?;
        let rows = stmt.query_map(params![start, end], |r| r.get::<_, Vec<u8>>(0)).map_err(read)?;
        let mut entries = Vec::new();
        for row in rows {
            let blob = row.map_err(read)?;
            entries.push(postcard::from_bytes(&blob).map_err(|e| StorageIOError::<NodeId>::read_logs(&e))?);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let last_purged_log_id: Option<LogId<NodeId>> = self.read_meta("purged")?;
        let last: Option<Vec<u8>> = self
            .lock()
            .query_row("SELECT entry FROM log ORDER BY idx DESC LIMIT 1", [], |r| r.get(0))
            .optional()
            .map_err(|e| StorageError::from(StorageIOError::<NodeId>::read_logs(&e)))?;
        let last_log_id = match last {
            Some(blob) => {
                let entry: Entry<TypeConfig> =
                    postcard::from_bytes(&blob).map_err(|e| StorageIOError::<NodeId>::read_logs(&e))?;
                Some(entry.log_id)
            }
            None => last_purged_log_id,
        };
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write_meta("vote", vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        self.read_meta("vote")
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
        self.write_meta("committed", &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.read_meta::<Option<LogId<NodeId>>>("committed")?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        {
            let mut conn = self.lock();
            let tx = conn.transaction().map_err(io_err)?;
            {
                let mut insert =
                    tx.prepare_cached("INSERT OR REPLACE INTO log (idx, entry) VALUES (?1, ?2)").map_err(io_err)?;
                for entry in entries {
                    let blob = postcard::to_allocvec(&entry).map_err(io_err)?;
                    let idx = i64::try_from(entry.log_id.index).unwrap_or(i64::MAX);
                    insert.execute(params![idx, blob]).map_err(io_err)?;
                }
            }
            tx.commit().map_err(io_err)?;
        }
        // Committed with synchronous = FULL: on disk.
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let idx = i64::try_from(log_id.index).unwrap_or(i64::MAX);
        self.lock().execute("DELETE FROM log WHERE idx >= ?1", [idx]).map_err(io_err)?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write_meta("purged", &log_id)?;
        let idx = i64::try_from(log_id.index).unwrap_or(i64::MAX);
        self.lock().execute("DELETE FROM log WHERE idx <= ?1", [idx]).map_err(io_err)?;
        Ok(())
    }
}
