//! `scancel`: placeholder until its implementation lands.

use std::ffi::OsString;

/// Runs `scancel`.
pub(crate) fn run(_args: Vec<OsString>) -> anyhow::Result<i32> {
    anyhow::bail!("scancel is not implemented yet")
}
