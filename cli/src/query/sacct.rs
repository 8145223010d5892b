//! `sacct`: placeholder until its implementation lands.

use std::ffi::OsString;

/// Runs `sacct`.
pub(crate) fn run(_args: Vec<OsString>) -> anyhow::Result<i32> {
    anyhow::bail!("sacct is not implemented yet")
}
