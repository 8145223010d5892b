//! One job's cgroups: `job_<id>` in each hierarchy (limits, device program, OOM count) and
//! `job_<id>/step_batch` below it (the batch script and everything it starts). The supervisor
//! creates them before the job's child may run, moves the child in, reads the OOM count after
//! the script ends, kills what is left and removes them, with the `step_<n>` directories of srun
//! steps below the job (whose runners live there with their tasks).
//!
//! The supervisor itself stays outside, in noded's cgroup: a job's OOM kill or `cgroup.kill` must
//! never take the process that records the job's end.

use super::layout::Controller;
use super::{CgroupError, read, write};
use crate::bpf::{self, CharDevice};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The step below the job directory that holds the batch script's processes.
pub const BATCH_STEP: &str = "step_batch";

/// How long removal waits for the kernel to finish tearing down killed processes.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a job's cgroups are, decided by noded ([`super::NodeCgroups::job`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobCgroupSpec {
    /// The job's directory in the v2 hierarchy: device program, `cgroup.kill`.
    pub unified: Option<PathBuf>,
    pub memory: Option<Controller>,
    pub cpuset: Option<Controller>,
    pub pids: Option<Controller>,
}

/// What the job's cgroups enforce.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobLimits {
    /// Memory limit in bytes; `None`: not limited.
    pub memory_bytes: Option<u64>,
    /// CPU list for `cpuset.cpus` (`0-1,3`); `None`: all of the parent's.
    pub cpus: Option<String>,
    /// `pids.max`.
    pub pids_max: Option<u32>,
    /// Character devices the job may not open (the GPUs and MIG capabilities it was not given).
    pub denied_devices: Vec<CharDevice>,
}

/// A job's created cgroups.
#[derive(Debug)]
pub struct JobCgroup {
    spec: JobCgroupSpec,
    job_id: u32,
}

impl JobCgroup {
    /// Creates the job's cgroups and applies `limits`. Anything created is removed again when a
    /// step fails.
    pub fn create(spec: &JobCgroupSpec, job_id: u32, limits: &JobLimits) -> Result<JobCgroup, CgroupError> {
        let cgroup = JobCgroup { spec: spec.clone(), job_id };
        match cgroup.set_up(limits) {
            Ok(()) => Ok(cgroup),
            Err(error) => {
                let _ = cgroup.remove();
                Err(error)
            }
        }
    }

    /// The cgroups of a job whose supervisor is gone, to kill and remove what is left.
    pub fn existing(spec: &JobCgroupSpec, job_id: u32) -> JobCgroup {
        JobCgroup { spec: spec.clone(), job_id }
    }

    fn set_up(&self, limits: &JobLimits) -> Result<(), CgroupError> {
        if let Some(dir) = &self.spec.unified {
            create_dir(dir)?;
            create_dir(&dir.join(BATCH_STEP))?;
        }
        match &self.spec.memory {
            Some(Controller::V2(dir)) => {
                if let Some(bytes) = limits.memory_bytes {
                    write(&dir.join("memory.max"), &bytes.to_string())?;
                    if dir.join("memory.swap.max").exists() {
                        write(&dir.join("memory.swap.max"), "0")?;
                    }
                }
            }
            Some(Controller::V1(dir)) => {
                create_dir(dir)?;
                create_dir(&dir.join(BATCH_STEP))?;
                if let Some(bytes) = limits.memory_bytes {
                    write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                    // Memory plus swap at the same limit: the job cannot swap its way past it.
                    if dir.join("memory.memsw.limit_in_bytes").exists() {
                        write(&dir.join("memory.memsw.limit_in_bytes"), &bytes.to_string())?;
                    }
                }
            }
            None => {}
        }
        match &self.spec.cpuset {
            Some(Controller::V2(dir)) => {
                if let Some(cpus) = &limits.cpus {
                    write(&dir.join("cpuset.cpus"), cpus)?;
                }
            }
            Some(Controller::V1(dir)) => match &limits.cpus {
                // The job's CPUs and its parent's memory nodes, written straight into both
                // directories instead of copied from the parent first.
                Some(cpus) if let Some(parent) = dir.parent().filter(|p| p.join("cpuset.mems").exists()) => {
                    let mems = read(&parent.join("cpuset.mems"))?;
                    for dir in [dir.clone(), dir.join(BATCH_STEP)] {
                        create_dir(&dir)?;
                        write(&dir.join("cpuset.mems"), mems.trim())?;
                        write(&dir.join("cpuset.cpus"), cpus)?;
                    }
                }
                _ => {
                    create_v1_dir(dir)?;
                    if let Some(cpus) = &limits.cpus {
                        write(&dir.join("cpuset.cpus"), cpus)?;
                    }
                    create_v1_dir(&dir.join(BATCH_STEP))?;
                }
            },
            None => {}
        }
        match &self.spec.pids {
            Some(Controller::V2(dir)) => {
                if let Some(max) = limits.pids_max {
                    write(&dir.join("pids.max"), &max.to_string())?;
                }
            }
            Some(Controller::V1(dir)) => {
                create_dir(dir)?;
                create_dir(&dir.join(BATCH_STEP))?;
                if let Some(max) = limits.pids_max {
                    write(&dir.join("pids.max"), &max.to_string())?;
                }
            }
            None => {}
        }
        if let (Some(dir), false) = (&self.spec.unified, limits.denied_devices.is_empty()) {
            bpf::attach_device_filter(dir, &limits.denied_devices, &format!("drover_job{}", self.job_id))
                .map_err(|source| CgroupError::Devices { path: dir.clone(), source })?;
        }
        Ok(())
    }

    /// Every step directory, once per hierarchy: the batch step's and those of srun steps
    /// (`step_<n>`, which their runners create and normally remove).
    fn step_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for job_dir in self.job_dirs() {
            dirs.push(job_dir.join(BATCH_STEP));
            for entry in std::fs::read_dir(&job_dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if entry.file_name().to_string_lossy().starts_with("step_") && path.is_dir() && !dirs.contains(&path) {
                    dirs.push(path);
                }
            }
        }
        dirs
    }

    /// Every job directory, once per hierarchy.
    fn job_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self.spec.unified.iter().cloned().collect();
        for controller in [&self.spec.memory, &self.spec.cpuset, &self.spec.pids].into_iter().flatten() {
            let dir = match controller {
                Controller::V2(dir) | Controller::V1(dir) => dir,
            };
            if !dirs.contains(dir) {
                dirs.push(dir.clone());
            }
        }
        dirs
    }

    /// Moves process `pid` into the batch step of every hierarchy.
    pub fn enter(&self, pid: i32) -> Result<(), CgroupError> {
        let mut dirs: Vec<PathBuf> = self.job_dirs().into_iter().map(|dir| dir.join(BATCH_STEP)).collect();
        dirs.dedup();
        for dir in dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// How many processes the kernel's OOM killer killed in the job; 0 when memory is not
    /// limited here. v2's `memory.events` counts the whole subtree; v1 counts each cgroup on its
    /// own (`memory.oom_control`), so there the job's and the step's counts are added.
    pub fn oom_kills(&self) -> u64 {
        let count = |path: PathBuf| read(&path).map_or(0, |text| key_value(&text, "oom_kill"));
        match &self.spec.memory {
            Some(Controller::V2(dir)) => count(dir.join("memory.events")),
            Some(Controller::V1(dir)) => {
                count(dir.join("memory.oom_control")) + count(dir.join(BATCH_STEP).join("memory.oom_control"))
            }
            None => 0,
        }
    }

    /// The processes still in the job, its steps' included, in any hierarchy.
    pub fn processes(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = Vec::new();
        for dir in self.job_dirs().into_iter().chain(self.step_dirs()) {
            let text = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            pids.extend(text.lines().filter_map(|line| line.trim().parse::<i32>().ok()));
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// SIGKILL to every process of the job: `cgroup.kill` where the v2 hierarchy has it, and a
    /// SIGKILL to each listed process in any case.
    pub fn kill(&self) {
        if let Some(dir) = &self.spec.unified {
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        }
        for pid in self.processes() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Kills what is left and removes the job's directories (steps first), waiting for the
    /// kernel to let go of exiting processes.
    pub fn remove(&self) -> Result<(), CgroupError> {
        let deadline = Instant::now() + REMOVE_TIMEOUT;
        let mut dirs = self.step_dirs();
        dirs.extend(self.job_dirs());
        for dir in dirs {
            loop {
                match std::fs::remove_dir(&dir) {
                    Ok(()) => break,
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
                    Err(source) if Instant::now() >= deadline => return Err(CgroupError::Remove { path: dir, source }),
                    Err(_) => {
                        self.kill();
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The value of `key` in a flat-keyed cgroup file (`oom_kill 3`); 0 when absent.
fn key_value(text: &str, key: &str) -> u64 {
    text.lines()
        .filter_map(|line| line.split_once(' '))
        .find(|(name, _)| *name == key)
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(0)
}

/// Creates a cgroup directory; one that exists already is fine (a restarted supervisor). A new
/// one is mode 0755 whatever the creator's umask (the supervisor's is 077), as Slurm's are: the
/// job's user may read the cgroups its processes are in (enroot's cgroups hook bind-mounts the
/// step's parent, the job's directory, into a container; a 0700 directory makes that mount fail).
pub(crate) fn create_dir(path: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(path) {
        Err(source) if source.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(CgroupError::Create { path: path.to_owned(), source })
        }
        Err(_) => Ok(()),
        Ok(()) => std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|source| CgroupError::Create { path: path.to_owned(), source }),
    }
}

/// Creates a v1 cgroup directory; in the cpuset hierarchy a new cgroup starts with no CPUs and no
/// memory nodes, so it gets its parent's.
pub(crate) fn create_v1_dir(path: &Path) -> Result<(), CgroupError> {
    create_dir(path)?;
    let Some(parent) = path.parent() else { return Ok(()) };
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let own = path.join(file);
        if own.exists() && read(&own)?.trim().is_empty() {
            write(&own, read(&parent.join(file))?.trim())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_counts_come_from_flat_keyed_files() {
        let v2_events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(key_value(v2_events, "oom_kill"), 1);
        let v1_oom_control = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(key_value(v1_oom_control, "oom_kill"), 3);
        assert_eq!(key_value("oom_kill_disable 0\n", "oom_kill"), 0);
    }

    /// The directory the child run of the test below creates its directories in.
    const UMASK_CHILD: &str = "DROVER_TEST_UMASK_CHILD";

    #[test]
    fn cgroup_dirs_are_0755_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        if let Some(dir) = std::env::var_os(UMASK_CHILD).map(PathBuf::from) {
            // The child: alone in its process, so the umask touches no other test.
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
            std::fs::create_dir(dir.join("plain")).unwrap();
            create_dir(&dir.join("cgroup")).unwrap();
            create_dir(&dir.join("cgroup")).unwrap(); // an existing one is fine
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "cgroup::job::tests::cgroup_dirs_are_0755_whatever_the_umask", "--test-threads=1"])
            .env(UMASK_CHILD, dir.path())
            .output()
            .unwrap();
        assert!(child.status.success(), "{}", String::from_utf8_lossy(&child.stdout));
        let mode = |name: &str| std::fs::metadata(dir.path().join(name)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("plain"), 0o700, "the umask applied to a plain mkdir");
        assert_eq!(mode("cgroup"), 0o755);
    }
}
