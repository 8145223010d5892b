//! drover-noded, the node daemon: registers the node with ctld, launches each job under a per-job
//! supervisor that outlives the daemon, relays cancels and signals, and reports job ends until
//! ctld acknowledges them. The same binary is the supervisor (`drover-noded supervise`).

pub mod daemon;
mod jobs;
pub mod supervisor;
