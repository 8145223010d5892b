//! The model: what ctld knows, with no decisions and no I/O. Jobs and nodes in memory
//! ([`state`]), what of a job's spec stays resident ([`resident`]), trackable resources
//! ([`tres`]), decayed usage ([`usage`]), the published job snapshots ([`snapshot`]), who a
//! client is ([`identity`]), a refused request ([`refusal`]), incidents on nodes
//! ([`incident`]), the nodes a job's own request allows ([`node_filter`]), what a job asks of each node ([`request`]), the parsed dependencies kept
//! between passes ([`dependency`]) and the running jobs' tallies for limits and quotas ([`tally`]). **Invariant:** the model imports nothing of ctld's other
//! layers (`tests/tests/tidy.rs` checks it).

pub(crate) mod dependency;
pub(crate) mod identity;
pub(crate) mod incident;
pub(crate) mod node_filter;
pub(crate) mod refusal;
pub(crate) mod request;
pub(crate) mod resident;
pub(crate) mod run_ends;
pub(crate) mod snapshot;
pub(crate) mod state;
pub(crate) mod tally;
pub(crate) mod tres;
pub(crate) mod usage;
