//! noded's thin cgroup layer (plain file I/O, v1 and v2): find the host's hierarchies
//! ([`layout`]), keep one directory per noded below noded's own cgroup in each ([`NodeCgroups`];
//! on v2, below an ancestor when processes other than noded share its cgroup),
//! and give every job `job_<id>/step_batch` there ([`job`]) with its memory, cpuset and pids
//! limits, its device filter, its OOM count and a kill that leaves nothing behind.
//!
//! Where each limit lives: on a pure v2 host everything is in the v2 hierarchy. On a hybrid host
//! (v1 controllers plus cgroup2 at `/sys/fs/cgroup/unified`) memory, cpuset and pids are the v1
//! controllers, and the v2 hierarchy, which needs no controller for it, carries the device
//! program and `cgroup.kill`. On a v1-only host there is no device program.
//!
//! **Boundary:** noded decides the paths ([`NodeCgroups::job`]) and writes them into the job
//! directory; the supervisor creates, enters and removes them. It never writes to a cgroup it
//! did not create, and never moves a process into the root of a hierarchy. The exceptions: on
//! v2, noded enables controllers in the `cgroup.subtree_control` of its own cgroup and, where it
//! must, of its ancestors (`v2_base`), which v2 requires before any child can have them; and a
//! step runner that leaves its step's cgroups to remove them goes back into noded's own cgroups
//! (the ones it was started in), wherever noded runs.

pub mod job;
pub mod layout;

pub use job::{JobCgroup, JobCgroupSpec, JobLimits};
pub use layout::{CONTROLLERS, Controller, Layout, Mode};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Leaf a pure-v2 noded moves itself into so that its own cgroup may enable controllers for its
/// children (cgroup v2's no-internal-processes rule).
pub const DAEMON_LEAF: &str = "drover-noded";

/// How often an empty-looking directory is tried again (50 ms apart) before it is left.
const REMOVE_ATTEMPTS: u32 = 40;

/// Why a cgroup operation failed.
#[derive(Debug, Error)]
pub enum CgroupError {
    /// A cgroup directory could not be created.
    #[error("could not create the cgroup {path}")]
    Create { path: PathBuf, source: std::io::Error },
    /// A cgroup file could not be written.
    #[error("could not write `{value}` to {path}")]
    Write { path: PathBuf, value: String, source: std::io::Error },
    /// A cgroup file could not be read.
    #[error("could not read {path}")]
    Read { path: PathBuf, source: std::io::Error },
    /// A cgroup directory could not be removed.
    #[error("could not remove the cgroup {path}")]
    Remove { path: PathBuf, source: std::io::Error },
    /// The device filter could not be put in place.
    #[error("the device filter of {path} could not be set up")]
    Devices { path: PathBuf, source: crate::bpf::BpfError },
}

pub(crate) fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(|source| CgroupError::Write {
        path: path.to_owned(),
        value: value.to_owned(),
        source,
    })
}

pub(crate) fn read(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(|source| CgroupError::Read { path: path.to_owned(), source })
}

/// This noded's directory in each hierarchy: `<own cgroup>/<scope>`.
#[derive(Debug, Clone)]
pub struct NodeCgroups {
    pub mode: Mode,
    /// In the v2 hierarchy: device program and `cgroup.kill`.
    pub unified: Option<PathBuf>,
    pub memory: Option<Controller>,
    pub cpuset: Option<Controller>,
    pub pids: Option<Controller>,
}

impl NodeCgroups {
    /// Detects the layout, creates `scope` below noded's own cgroup in each hierarchy (on v2,
    /// below the cgroup `v2_base` picks) and, on v2, enables the controllers for the jobs below it.
    pub fn prepare(scope: &str) -> Result<NodeCgroups, CgroupError> {
        let layout =
            Layout::detect().map_err(|source| CgroupError::Read { path: "/proc/self/cgroup".into(), source })?;
        let mut layout = layout;
        if let Some(unified) = &layout.unified {
            // A restarted noded may find itself in the leaf an earlier one made.
            if unified.file_name().is_some_and(|name| name == DAEMON_LEAF) {
                layout.unified = unified.parent().map(Path::to_owned);
            }
        }
        let controllers = CONTROLLERS.map(|name| layout.controller(name));
        let v2: Vec<&str> = CONTROLLERS
            .into_iter()
            .zip(&controllers)
            .filter(|(_, controller)| matches!(controller, Some(Controller::V2(_))))
            .map(|(name, _)| name)
            .collect();
        // The v2 cgroup the scope goes below: noded's own, or an ancestor (see `v2_base`).
        let base = match (&layout.unified, &layout.unified_root) {
            (Some(own), Some(root)) => Some(v2_base(own, root, &v2)?),
            _ => None,
        };
        let within = |controller: &Option<Controller>| {
            controller.as_ref().map(|controller| match (controller, &base) {
                (Controller::V2(_), Some(base)) => Controller::V2(base.join(scope)),
                (Controller::V2(dir), None) => Controller::V2(dir.join(scope)),
                (Controller::V1(dir), _) => Controller::V1(dir.join(scope)),
            })
        };
        let [memory, cpuset, pids] = &controllers;
        let node = NodeCgroups {
            mode: layout.mode,
            unified: base.as_ref().map(|dir| dir.join(scope)),
            memory: within(memory),
            cpuset: within(cpuset),
            pids: within(pids),
        };
        if let Some(scope_dir) = &node.unified {
            job::create_dir(scope_dir)?;
            if !v2.is_empty() {
                write(&scope_dir.join("cgroup.subtree_control"), &plus(&v2))?;
            }
        }
        for controller in [&node.memory, &node.cpuset, &node.pids].into_iter().flatten() {
            if let Controller::V1(dir) = controller {
                job::create_v1_dir(dir)?;
            }
        }
        Ok(node)
    }

    /// The cgroups of run `run` of job `job_id`: `job_<id>` for the first run (Slurm's name),
    /// `job_<id>_<run>` for a requeued job's later runs, so that a run never shares its cgroups
    /// with an earlier run still being killed on the same node.
    pub fn job(&self, job_id: u32, run: u32) -> JobCgroupSpec {
        let name = if run == 0 { format!("job_{job_id}") } else { format!("job_{job_id}_{run}") };
        let below = |controller: &Option<Controller>| {
            controller.as_ref().map(|controller| match controller {
                Controller::V2(dir) => Controller::V2(dir.join(&name)),
                Controller::V1(dir) => Controller::V1(dir.join(&name)),
            })
        };
        JobCgroupSpec {
            unified: self.unified.as_ref().map(|dir| dir.join(&name)),
            memory: below(&self.memory),
            cpuset: below(&self.cpuset),
            pids: below(&self.pids),
        }
    }

    /// The CPUs jobs may be given: this noded's cpuset, or every online CPU.
    pub fn host_cpus(&self) -> Vec<u32> {
        let from_cpuset = match &self.cpuset {
            Some(Controller::V1(dir)) => std::fs::read_to_string(dir.join("cpuset.cpus")).ok(),
            Some(Controller::V2(dir)) => std::fs::read_to_string(dir.join("cpuset.cpus.effective")).ok(),
            None => None,
        };
        let text = from_cpuset
            .filter(|text| !text.trim().is_empty())
            .or_else(|| std::fs::read_to_string("/sys/devices/system/cpu/online").ok())
            .unwrap_or_default();
        crate::isolation::parse_cpu_list(&text)
    }

    /// One line saying what is enforced on this host, for noded's startup log.
    /// `gpu_files` is (device files present, device files configured or detected).
    pub fn describe(&self, gpu_files: (usize, usize)) -> String {
        let place = |controller: &Option<Controller>| match controller {
            Some(Controller::V2(_)) => "v2",
            Some(Controller::V1(_)) => "v1",
            None => "NOT ENFORCED",
        };
        let devices = match (&self.unified, gpu_files) {
            (Some(_), (0, 0)) => "none (no GPU device files known)".to_owned(),
            (Some(_), (present, total)) => {
                format!("eBPF device filter on v2 ({present} of {total} GPU device files present)")
            }
            (None, _) => "NOT ENFORCED (no cgroup2 hierarchy)".to_owned(),
        };
        format!(
            "{}: memory {}, cpuset {}, pids {}, GPU devices {}, kill {}",
            self.mode,
            place(&self.memory),
            place(&self.cpuset),
            place(&self.pids),
            devices,
            if self.unified.is_some() { "cgroup.kill" } else { "signals to every process of the job" }
        )
    }

    /// Removes this noded's directories where no job is left (on shutdown).
    pub fn remove_empty(&self) {
        let dirs = [&self.memory, &self.cpuset, &self.pids].into_iter().flatten().map(|controller| match controller {
            Controller::V2(dir) | Controller::V1(dir) => dir.clone(),
        });
        for dir in self.unified.iter().cloned().chain(dirs) {
            // A job cgroup removed a moment ago may still be going away in the kernel.
            for _ in 0..REMOVE_ATTEMPTS {
                match std::fs::remove_dir(&dir) {
                    Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(std::time::Duration::from_millis(50))
                    }
                    _ => break,
                }
            }
        }
    }
}

/// `+memory +pids` for `cgroup.subtree_control`.
fn plus(controllers: &[&str]) -> String {
    controllers.iter().map(|name| format!("+{name}")).collect::<Vec<_>>().join(" ")
}

/// The v2 cgroup whose child noded's scope becomes, with `controllers` enabled for its children.
/// cgroup v2 gives controllers to the children of a cgroup only while it holds no process (the
/// root excepted), so: noded's own cgroup `own` when that works; else, when noded is alone there
/// (systemd's service cgroup), `own` after noded moved itself into a leaf `drover-noded` beside
/// its scope; else, when other processes share `own` (a login session's scope, where `drover up`
/// runs), the nearest ancestor that can give them (a slice; at worst the root).
fn v2_base(own: &Path, root: &Path, controllers: &[&str]) -> Result<PathBuf, CgroupError> {
    if controllers.is_empty() {
        return Ok(own.to_owned());
    }
    let first_error = match enable_for_children(own, controllers) {
        Ok(()) => return Ok(own.to_owned()),
        Err(error) => error,
    };
    let me = std::process::id().to_string();
    let procs = read(&own.join("cgroup.procs"))?;
    if procs.lines().all(|pid| pid.trim() == me) {
        let leaf = own.join(DAEMON_LEAF);
        job::create_dir(&leaf)?;
        write(&leaf.join("cgroup.procs"), &me)?;
        if enable_for_children(own, controllers).is_ok() {
            return Ok(own.to_owned());
        }
    }
    for dir in own.ancestors().skip(1).take_while(|dir| dir.starts_with(root)) {
        if enable_for_children(dir, controllers).is_ok() {
            return Ok(dir.to_owned());
        }
    }
    Err(first_error)
}

/// Enables `controllers` in `dir`'s `cgroup.subtree_control`, first in its ancestors where its
/// parent does not offer them yet.
fn enable_for_children(dir: &Path, controllers: &[&str]) -> Result<(), CgroupError> {
    let available = read(&dir.join("cgroup.controllers"))?;
    let missing: Vec<&str> =
        controllers.iter().copied().filter(|name| !available.split_whitespace().any(|have| have == *name)).collect();
    if !missing.is_empty()
        && let Some(parent) = dir.parent().filter(|parent| parent.join("cgroup.controllers").exists())
    {
        enable_for_children(parent, &missing)?;
    }
    write(&dir.join("cgroup.subtree_control"), &plus(controllers))
}
