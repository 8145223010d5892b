//! `sbatch`: placeholder until its implementation lands.

use std::ffi::OsString;

/// Runs `sbatch`.
pub(crate) fn run(_args: Vec<OsString>) -> anyhow::Result<i32> {
    anyhow::bail!("sbatch is not implemented yet")
}
