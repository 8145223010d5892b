//! `sinfo`: placeholder until its implementation lands.

use std::ffi::OsString;

/// Runs `sinfo`.
pub(crate) fn run(_args: Vec<OsString>) -> anyhow::Result<i32> {
    anyhow::bail!("sinfo is not implemented yet")
}
