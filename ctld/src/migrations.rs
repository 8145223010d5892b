//! The state database's schema history (placeholder: the fixture test comes first).

#[cfg(test)]
mod tests {
    use crate::db;
    use drover_shared::job::JobState;
    use drover_shared::proto::client::{AccountingQuery, AuditQuery};
    use std::fmt::Write as _;
    use std::path::{Path, PathBuf};

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
        let mut usage = crate::usage::Usage::default();
        db::load_usage(&conn, path, &mut usage).unwrap();
        writeln!(out, "## load_usage\n{usage:?}").unwrap();
        writeln!(out, "## node states\n{:?}", db::load_node_states(&conn, path).unwrap()).unwrap();
        let intents: std::collections::BTreeMap<_, _> = crate::runs::load_intents(&conn, path).unwrap().into_iter().collect();
        writeln!(out, "## requeue intents\n{intents:?}").unwrap();
        let all = AccountingQuery { duplicates: true, ..AccountingQuery::default() };
        let sacct = crate::runs::query(path, &all, |q| db::query_accounting(path, q)).unwrap();
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

    /// Writes what the fixture reads back as with today's code (run once, by hand).
    #[test]
    #[ignore = "writes tests/fixtures/unversioned.expected"]
    fn record_fixture_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drover.db");
        std::fs::copy(fixture(), &path).unwrap();
        drop(db::open(&path, false).unwrap());
        let expected = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unversioned.expected");
        std::fs::write(expected, read_back(&path)).unwrap();
    }
}
