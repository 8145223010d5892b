//! The cgroup v2 device filter: a program generated from the job's allocation ([`program`]),
//! loaded and attached to the job's v2 cgroup through raw `bpf(2)` ([`sys`]). The policy is
//! Slurm's: every device stays open except the GPU and MIG capability nodes of this node that the
//! job was not given. The kernel runs the program at `open(2)` and `mknod(2)` of a device node
//! by any process of the cgroup or below, before the driver is looked up.
//!
//! **Invariant:** the job's device policy lives in the kernel, not in noded's memory: the
//! attachment lasts as long as the job's cgroup, so restarting noded (or the supervisor dying)
//! leaves it in force; removing the cgroup frees it.

mod program;
mod sys;

pub use program::{CharDevice, DEVICE_TYPE_CHAR, device_program};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why the device filter could not be put in place.
#[derive(Debug, Error)]
pub enum BpfError {
    /// The kernel refused the program.
    #[error("loading the device program failed{}", if verifier_log.is_empty() { String::new() } else { format!(" (verifier: {verifier_log})") })]
    Load { source: std::io::Error, verifier_log: String },
    /// The cgroup directory could not be opened.
    #[error("could not open the cgroup {path}")]
    OpenCgroup { path: PathBuf, source: std::io::Error },
    /// The kernel refused to attach the program.
    #[error("attaching the device program to {path} failed")]
    Attach { path: PathBuf, source: std::io::Error },
    /// The attached programs could not be listed.
    #[error("querying the device programs of {path} failed")]
    Query { path: PathBuf, source: std::io::Error },
}

/// Loads a program denying `denied` and attaches it to the v2 cgroup `cgroup_dir`. The program
/// stays attached after this returns and the descriptors close.
pub fn attach_device_filter(cgroup_dir: &Path, denied: &[CharDevice], name: &str) -> Result<(), BpfError> {
    let program = sys::load_device_program(&device_program(denied), name)?;
    let cgroup = open_dir(cgroup_dir)?;
    sys::attach_device_program(&cgroup, &program)
        .map_err(|source| BpfError::Attach { path: cgroup_dir.to_owned(), source })
}

/// The ids of the device programs attached directly to `cgroup_dir`.
pub fn attached_programs(cgroup_dir: &Path) -> Result<Vec<u32>, BpfError> {
    let cgroup = open_dir(cgroup_dir)?;
    sys::query_device_programs(&cgroup).map_err(|source| BpfError::Query { path: cgroup_dir.to_owned(), source })
}

fn open_dir(path: &Path) -> Result<OwnedFd, BpfError> {
    File::open(path).map(OwnedFd::from).map_err(|source| BpfError::OpenCgroup { path: path.to_owned(), source })
}
