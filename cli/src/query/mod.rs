//! The read-and-act commands: squeue, sacct, scancel, sinfo, scontrol.

pub(crate) mod sacct;
pub(crate) mod scancel;
pub(crate) mod scontrol;
pub(crate) mod sinfo;
pub(crate) mod squeue;
