//! The read-and-act commands: squeue, sacct, sstat, scancel, sinfo, scontrol, sshare, sprio, and a
//! read-only sacctmgr (from the config file).
//!
//! Each command file parses its arguments, makes one or two round trips to ctld and prints
//! through a pure `render` function; [`format`] and [`common`] hold what they share. Test
//! fixtures rebuild the scenario of the Slurm 22.05 samples in `testdata/` ([`scenario`]).

pub(crate) mod audit;
mod columns;
mod common;
pub(crate) mod format;
mod json;
mod listpids;
pub(crate) mod node;
pub(crate) mod sacct;
pub(crate) mod sacctmgr;
pub(crate) mod scancel;
#[cfg(test)]
mod scenario;
pub(crate) mod scontrol;
mod scontrol_admin;
pub(crate) mod sdiag;
pub(crate) mod simulate;
pub(crate) mod sinfo;
pub(crate) mod sprio;
pub(crate) mod squeue;
pub(crate) mod sshare;
pub(crate) mod sstat;
pub(crate) mod templates;
pub(crate) mod unsupported;
pub(crate) mod why;
