//! `squeue`: placeholder until its implementation lands.

use std::ffi::OsString;

/// Runs `squeue`.
pub(crate) fn run(_args: Vec<OsString>) -> anyhow::Result<i32> {
    anyhow::bail!("squeue is not implemented yet")
}
