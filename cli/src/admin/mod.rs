//! The `drover` admin verbs: `up`, `down`, `status` (a single-host cluster) and `keygen`.

use std::ffi::OsString;

/// Runs an admin verb.
pub(crate) fn run(verb: &str, _args: Vec<OsString>) -> anyhow::Result<i32> {
    anyhow::bail!("unknown command `{verb}`")
}
