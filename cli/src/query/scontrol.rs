//! `scontrol`: placeholder until its implementation lands.

use std::ffi::OsString;

/// Runs `scontrol`.
pub(crate) fn run(_args: Vec<OsString>) -> anyhow::Result<i32> {
    anyhow::bail!("scontrol is not implemented yet")
}
