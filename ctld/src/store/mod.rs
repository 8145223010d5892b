//! The store: the SQLite database ctld alone writes ([`db`]: schema, the writer thread, the
//! read-only queries), the earlier runs of requeued jobs ([`runs`]) and the usage records and
//! their rollups ([`accounting`]). It imports the model only, never policy, core or serve.

pub(crate) mod accounting;
pub(crate) mod db;
pub(crate) mod runs;
