//! The cgroup v2 device filter: a program generated from the job's allocation ([`program`]),
//! loaded and attached to the job's v2 cgroup through raw `bpf(2)` ([`crate::sys::bpf`]). The policy is
//! Slurm's: every device stays open except the GPU and MIG capability nodes of this node that the
//! job was not given. The kernel runs the program at `open(2)` and `mknod(2)` of a device node
//! by any process of the cgroup or below, before the driver is looked up.
//!
//! **Invariant:** the job's device policy lives in the kernel, not in noded's memory: the
//! attachment lasts as long as the job's cgroup, so restarting noded (or the supervisor dying)
//! leaves it in force; removing the cgroup frees it.
//!
//! Jobs with the same denied set get the same program, so the supervisor launcher loads each
//! set's program once ([`preload_device_program`]) and the supervisors it forks, which inherit
//! the loaded program's descriptor, attach that one to their job's cgroup instead of loading
//! their own ([`attach_device_filter`]). A kernel program may be attached to any number of
//! cgroups; each attachment is the job's own and lasts as long as its cgroup.

mod program;

pub use program::{CharDevice, DEVICE_TYPE_CHAR, device_program};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use thiserror::Error;

/// The programs this process loaded with [`preload_device_program`], by denied set (sorted).
static LOADED: Mutex<Vec<(Vec<CharDevice>, OwnedFd)>> = Mutex::new(Vec::new());

/// How many denied sets [`LOADED`] keeps; a node has a handful (one per GPU count and mix).
const MAX_LOADED: usize = 64;

/// The name of preloaded programs (they serve many jobs).
const PRELOADED_NAME: &str = "drover_devices";

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

/// Attaches a program denying `denied` to the v2 cgroup `cgroup_dir`: the one this process
/// (or the launcher it was forked from) preloaded for that set, else a program loaded now under
/// `name`. The program stays attached after this returns and the descriptors close.
pub fn attach_device_filter(cgroup_dir: &Path, denied: &[CharDevice], name: &str) -> Result<(), BpfError> {
    let cgroup = open_dir(cgroup_dir)?;
    let attach = |program: &OwnedFd| {
        crate::sys::bpf::attach_device_program(&cgroup, program)
            .map_err(|source| BpfError::Attach { path: cgroup_dir.to_owned(), source })
    };
    {
        let loaded = LOADED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, program)) = loaded.iter().find(|(set, _)| set.as_slice() == denied) {
            return attach(program);
        }
    }
    attach(&crate::sys::bpf::load_device_program(&device_program(denied), name)?)
}

/// Loads the program denying `denied` (sorted, as [`crate::isolation::denied_devices`] returns
/// it) unless this process holds it already, and keeps it for [`attach_device_filter`]. Beyond
/// [`MAX_LOADED`] sets nothing more is kept (each job then loads its own).
pub fn preload_device_program(denied: &[CharDevice]) -> Result<(), BpfError> {
    let mut loaded = LOADED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if loaded.len() >= MAX_LOADED || loaded.iter().any(|(set, _)| set.as_slice() == denied) {
        return Ok(());
    }
    let program = crate::sys::bpf::load_device_program(&device_program(denied), PRELOADED_NAME)?;
    loaded.push((denied.to_vec(), program));
    Ok(())
}

/// The descriptors of the preloaded programs (a forked child that closes what it inherited must
/// keep these open for [`attach_device_filter`]).
pub fn preloaded_descriptors() -> Vec<RawFd> {
    LOADED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().map(|(_, fd)| fd.as_raw_fd()).collect()
}

/// The ids of the device programs attached directly to `cgroup_dir`.
pub fn attached_programs(cgroup_dir: &Path) -> Result<Vec<u32>, BpfError> {
    let cgroup = open_dir(cgroup_dir)?;
    crate::sys::bpf::query_device_programs(&cgroup)
        .map_err(|source| BpfError::Query { path: cgroup_dir.to_owned(), source })
}

fn open_dir(path: &Path) -> Result<OwnedFd, BpfError> {
    File::open(path).map(OwnedFd::from).map_err(|source| BpfError::OpenCgroup { path: path.to_owned(), source })
}
