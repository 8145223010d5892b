//! drover-noded, the node daemon: registers the node with ctld, launches each job under a per-job
//! supervisor that outlives the daemon, relays cancels and signals, and reports job ends until
//! ctld acknowledges them. The same binary is the supervisor (`drover-noded supervise`). Jobs are
//! isolated by the kernel: cgroups ([`cgroup`]) with a device program ([`bpf`]), planned per job
//! in [`isolation`]. GPUs are found through NVML ([`nvml`]) where the driver is present; admin programs run in [`prolog`]. All `unsafe` code (system calls and
//! the one foreign NVML call) lives in [`sys`], behind safe functions.

#![deny(unsafe_code)]

pub mod bpf;
pub mod cgroup;
pub mod configless;
pub mod container;
pub mod daemon;
pub mod gpu_usage;
pub mod hardware;
pub mod isolation;
mod jobs;
pub mod nvml;
pub mod prolog;
pub mod spank;
pub mod stat;
pub mod step;
pub mod supervisor;
#[allow(unsafe_code)]
pub mod sys;
