//! The store: the SQLite database ctld alone writes ([`db`]: the writer thread and the read-only
//! queries; [`migrations`]: the schema as one ordered list of migrations), the earlier runs of
//! requeued jobs ([`runs`]) and the usage records and their rollups ([`accounting`]). It imports
//! the model only, never policy, core or serve.

pub(crate) mod accounting;
pub(crate) mod db;
pub(crate) mod migrations;
pub(crate) mod runs;
