//! The only home of `unsafe` code in noded: every system call (and the one foreign NVML call)
//! that Rust's standard library or nix does not offer as a safe function goes through here. Each
//! submodule keeps its `unsafe` blocks private, each with a `// SAFETY:` comment, and offers safe
//! functions whose signatures carry what the calls need (owned or borrowed descriptors, a
//! single-threaded process for a fork that goes on running Rust code, data prepared before a
//! fork for what runs between fork and exec). The rest of the crate denies `unsafe_code`, and the
//! tidy test fails on `unsafe` anywhere else in `noded/src`.
//!
//! - [`process`]: forks, `_exit`, waiting for and measuring children, signal dispositions, the
//!   environment while one thread runs.
//! - [`exec`]: what a child does between `fork` and `exec` ([`std::process::Command`] hooks).
//! - [`descriptors`]: marking inherited descriptors close-on-exec.
//! - [`pidfd`]: naming and signalling a process by descriptor.
//! - [`time`]: local time.
//! - [`bpf`]: the device program's `bpf(2)` commands.
//! - [`nvml`]: MIG instance ids that nvml-wrapper does not wrap.

pub(crate) mod bpf;
pub(crate) mod descriptors;
pub(crate) mod exec;
pub(crate) mod nvml;
pub(crate) mod pidfd;
pub mod process;
pub(crate) mod time;
