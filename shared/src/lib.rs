//! Everything the Drover components agree on: domain types (jobs, nodes, partitions), Slurm's value
//! grammars (time limits, memory sizes, GRES, hostlists, output patterns), the wire protocol spoken
//! between the CLI, ctld and noded, the cluster config schema, and the shared-key authentication.
//!
//! This crate does no I/O of its own beyond reading the config and key files and framing bytes on a
//! stream the caller owns; it never decides policy.

#![forbid(unsafe_code)]

pub mod auth;
pub mod config;
pub mod configless;
pub mod grammar;
pub mod hostlist;
pub mod job;
pub mod log_level;
pub mod node;
pub mod proto;
pub mod queue_lines;
pub mod sacctmgr;
pub mod statedir;
pub mod text;
pub mod token;
pub mod token_socket;

/// Seconds since the Unix epoch, the one time representation on the wire and in the database.
pub type UnixTime = i64;

/// The current wall-clock time as [`UnixTime`].
pub fn now() -> UnixTime {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX)
}
