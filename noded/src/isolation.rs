//! What the kernel enforces for one job, decided by noded at launch and carried to the
//! supervisor in the job directory (`isolation`, postcard, 0600): where the job's cgroups go and
//! the limits they get, computed from the launch request and this node's configuration (memory,
//! `job_pids_max`, and the device numbers of the GPU files the job was not given).

use crate::bpf::CharDevice;
use crate::cgroup::{JobCgroupSpec, JobLimits, NodeCgroups};
use drover_shared::node::GpuDevice;
use drover_shared::proto::node::LaunchRequest;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The file in the job directory.
pub const ISOLATION_FILE: &str = "isolation";

/// One job's cgroups and limits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobIsolation {
    pub cgroup: JobCgroupSpec,
    pub limits: JobLimits,
    /// `CUDA_VISIBLE_DEVICES` as the job sees it once its other GPUs are hidden (slurm-compat
    /// §9.5): the allocated GPUs renumbered from 0, or their MIG UUIDs.
    pub cuda_visible_devices: Option<String>,
}

/// What this node enforces, and from which configuration.
#[derive(Debug, Clone)]
pub struct NodeIsolation {
    /// `None` when this host offers no cgroup Drover may use (not root, no hierarchy).
    pub cgroups: Option<NodeCgroups>,
    /// The device files of each GPU, by index (a MIG instance has three; empty: none known).
    pub gpu_files: Vec<Vec<PathBuf>>,
    pub job_pids_max: u32,
}

impl NodeIsolation {
    /// Sets up this noded's cgroups (`drover_<node>_<hash of the state directory>` below its
    /// own cgroup in each hierarchy, so that several nodeds on one host never share one) and
    /// logs exactly what is enforced. Without root or usable cgroups, jobs run unconfined and
    /// the log says so.
    pub fn set_up(
        node: &drover_shared::config::NodeConfig,
        state_dir: &Path,
        gpu_files: Vec<Vec<PathBuf>>,
    ) -> NodeIsolation {
        let scope = format!("drover_{}_{:08x}", node.name, fnv1a(state_dir.as_os_str().as_encoded_bytes()));
        let cgroups = if !nix::unistd::geteuid().is_root() {
            tracing::warn!("not root: jobs run without cgroups (no memory, CPU, pids or GPU device enforcement)");
            None
        } else {
            match NodeCgroups::prepare(&scope) {
                Ok(cgroups) => Some(cgroups),
                Err(error) => {
                    tracing::error!(error = %format!("{:#}", anyhow::Error::new(error)), "cannot use cgroups: jobs run unconfined");
                    None
                }
            }
        };
        let isolation = NodeIsolation { cgroups, gpu_files, job_pids_max: node.job_pids_max };
        if let Some(cgroups) = &isolation.cgroups {
            let devices: Vec<String> = isolation
                .gpu_files
                .iter()
                .flatten()
                .map(|path| match char_device(path) {
                    Ok(Some(device)) => format!("{}={device}", path.display()),
                    Ok(None) => format!("{}=missing", path.display()),
                    Err(error) => error,
                })
                .collect();
            let present =
                isolation.gpu_files.iter().flatten().filter(|path| matches!(char_device(path), Ok(Some(_)))).count();
            tracing::info!(
                scope,
                gpu_files = devices.join(" "),
                "enforced: {}; pids.max {}",
                cgroups.describe((present, isolation.gpu_files.iter().flatten().count())),
                isolation.job_pids_max
            );
        }
        isolation
    }

    /// Removes this noded's cgroup directories if no job is left in them (on shutdown).
    pub fn tear_down(&self) {
        if let Some(cgroups) = &self.cgroups {
            cgroups.remove_empty();
        }
    }

    /// The device files of the GPUs a job was given (by index), which its container binds in.
    pub fn device_files(&self, gpus: &[u32]) -> Vec<PathBuf> {
        gpus.iter().filter_map(|&index| self.gpu_files.get(index as usize)).flatten().cloned().collect()
    }

    /// The isolation of the job in `launch`; `None` when this node has no cgroups to give.
    /// `busy_cpus` are the cpusets of the jobs running here: the job gets the least used of the
    /// host's CPUs, as many as it was allocated.
    pub fn plan(
        &self,
        launch: &LaunchRequest,
        gpus: &[GpuDevice],
        busy_cpus: &[Vec<u32>],
    ) -> Result<Option<JobIsolation>, String> {
        let Some(cgroups) = &self.cgroups else { return Ok(None) };
        let denied_devices = denied_devices(&self.gpu_files, &launch.gpus)?;
        let memory_bytes = memory_limit_bytes(launch.mem_per_node_mb);
        let cpus = match (&cgroups.cpuset, launch.cpus_on_node) {
            (Some(_), wanted) if wanted > 0 => {
                let picked = pick_cpus(&cgroups.host_cpus(), busy_cpus, wanted);
                (!picked.is_empty()).then(|| format_cpu_list(&picked))
            }
            _ => None,
        };
        let constrained = self.gpu_files.iter().any(|files| !files.is_empty()) && cgroups.unified.is_some();
        let cuda_visible_devices = constrained.then(|| cuda_visible_devices(&launch.gpus, gpus));
        let limits = JobLimits { memory_bytes, cpus, pids_max: Some(self.job_pids_max), denied_devices };
        Ok(Some(JobIsolation {
            cgroup: cgroups.job(launch.job_id, launch.restart_count),
            limits,
            cuda_visible_devices,
        }))
    }
}

/// `CUDA_VISIBLE_DEVICES` for a job whose other GPUs are hidden: the MIG UUIDs when every
/// allocated GPU is a MIG instance (CUDA addresses those only by UUID), else the allocated GPUs
/// renumbered from 0 in allocation order.
pub fn cuda_visible_devices(allocated: &[u32], inventory: &[GpuDevice]) -> String {
    let uuids: Vec<&str> = allocated
        .iter()
        .filter_map(|&index| inventory.iter().find(|gpu| gpu.index == index))
        .map(|gpu| gpu.uuid.as_str())
        .filter(|uuid| uuid.starts_with("MIG-"))
        .collect();
    if !allocated.is_empty() && uuids.len() == allocated.len() {
        return uuids.join(",");
    }
    (0..allocated.len()).map(|idx| idx.to_string()).collect::<Vec<_>>().join(",")
}

/// `wanted` CPUs of `host`, the least used by `busy` first (ties: lowest number), sorted.
pub fn pick_cpus(host: &[u32], busy: &[Vec<u32>], wanted: u32) -> Vec<u32> {
    let mut by_use: Vec<(usize, u32)> =
        host.iter().map(|&cpu| (busy.iter().filter(|cpus| cpus.contains(&cpu)).count(), cpu)).collect();
    by_use.sort_unstable();
    let mut picked: Vec<u32> =
        by_use.into_iter().take(usize::try_from(wanted).unwrap_or(usize::MAX)).map(|(_, cpu)| cpu).collect();
    picked.sort_unstable();
    picked
}

/// `0-2,5` → `[0, 1, 2, 5]`; anything unreadable is skipped.
pub fn parse_cpu_list(text: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|part| !part.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                if let (Ok(first), Ok(last)) = (first.parse::<u32>(), last.parse::<u32>()) {
                    cpus.extend(first..=last);
                }
            }
            None => cpus.extend(part.parse::<u32>().ok()),
        }
    }
    cpus
}

/// `[0, 1, 2, 5]` → `0-2,5`.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut idx = 0;
    while idx < cpus.len() {
        let first = cpus[idx];
        let mut last = first;
        while idx + 1 < cpus.len() && cpus[idx + 1] == last + 1 {
            idx += 1;
            last = cpus[idx];
        }
        parts.push(if first == last { first.to_string() } else { format!("{first}-{last}") });
        idx += 1;
    }
    parts.join(",")
}

/// Slurm's `MinRAMSpace` default: no job's memory cgroup is set below 30 MB, so that a job
/// asking for less (`--mem=1`) can still start its programs.
const MIN_MEMORY_MB: u64 = 30;

/// The memory limit of a job's cgroup for `mb` megabytes per node (`None`: no limit).
fn memory_limit_bytes(mb: u64) -> Option<u64> {
    (mb > 0).then(|| mb.max(MIN_MEMORY_MB).saturating_mul(1024 * 1024))
}

/// The character devices of the GPUs not in `allocated` (their files are read now, as Slurm
/// stats gres.conf's files at each launch). A missing file denies nothing: the device does not
/// exist on this node; a file that is not a character device is a configuration error.
pub fn denied_devices(gpu_files: &[Vec<PathBuf>], allocated: &[u32]) -> Result<Vec<CharDevice>, String> {
    let mut allowed = Vec::new();
    let mut all = Vec::new();
    for (idx, files) in gpu_files.iter().enumerate() {
        for path in files {
            let Some(device) = char_device(path)? else { continue };
            all.push(device);
            if allocated.iter().any(|&gpu| usize::try_from(gpu).is_ok_and(|gpu| gpu == idx)) {
                allowed.push(device);
            }
        }
    }
    // A device file shared by several GPUs (a MIG parent) is allowed if any of them is allocated.
    let mut denied: Vec<CharDevice> = all.into_iter().filter(|device| !allowed.contains(device)).collect();
    denied.sort_unstable();
    denied.dedup();
    Ok(denied)
}

/// The major and minor of a character device file; `None` when it does not exist.
pub fn char_device(path: &Path) -> Result<Option<CharDevice>, String> {
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.file_type().is_char_device() => {
            let rdev = metadata.rdev();
            Ok(Some(CharDevice { major: libc::major(rdev), minor: libc::minor(rdev) }))
        }
        Ok(_) => Err(format!("GPU device file {} is not a character device", path.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(format!("cannot read GPU device file {}: {error}", path.display())),
    }
}

/// Writes the job's isolation into its directory, mode 0600, before the job's `launch` file
/// and its supervisor. Not synced: a supervisor is only ever started for it during the boot it
/// was written in (noded ends jobs launched before the current boot instead of starting them).
pub fn write(job_dir: &Path, isolation: &JobIsolation) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let bytes = postcard::to_stdvec(isolation).map_err(std::io::Error::other)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(job_dir.join(ISOLATION_FILE))?;
    file.write_all(&bytes)
}

/// Reads the job's isolation; `None` when noded gave the job none.
pub fn read(job_dir: &Path) -> std::io::Result<Option<JobIsolation>> {
    match std::fs::read(job_dir.join(ISOLATION_FILE)) {
        Ok(bytes) => postcard::from_bytes(&bytes).map(Some).map_err(std::io::Error::other),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// FNV-1a, 32 bits: a short stable name for a state directory.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &byte| (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_limits_have_slurms_floor() {
        assert_eq!(memory_limit_bytes(0), None);
        assert_eq!(memory_limit_bytes(1), Some(30 << 20));
        assert_eq!(memory_limit_bytes(100), Some(100 << 20));
    }

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(parse_cpu_list("0-2,5\n"), [0, 1, 2, 5]);
        assert_eq!(format_cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(format_cpu_list(&[]), "");
    }

    #[test]
    fn jobs_get_the_least_used_cpus() {
        let host = [0, 1, 2, 3];
        assert_eq!(pick_cpus(&host, &[], 2), [0, 1]);
        assert_eq!(pick_cpus(&host, &[vec![0, 1]], 2), [2, 3]);
        assert_eq!(pick_cpus(&host, &[vec![0, 1], vec![2]], 2), [0, 3]);
        // More wanted than the host has: all of them.
        assert_eq!(pick_cpus(&[0, 1], &[], 8), [0, 1]);
    }

    #[test]
    fn cuda_devices_are_renumbered_or_mig_uuids() {
        let gpu = |index, uuid: &str| GpuDevice { index, gpu_type: "t".into(), uuid: uuid.into() };
        let inventory = [gpu(0, "GPU-a"), gpu(1, "GPU-b"), gpu(2, "MIG-x"), gpu(3, "MIG-y")];
        assert_eq!(cuda_visible_devices(&[1], &inventory), "0");
        assert_eq!(cuda_visible_devices(&[0, 1], &inventory), "0,1");
        assert_eq!(cuda_visible_devices(&[3, 2], &inventory), "MIG-y,MIG-x");
        assert_eq!(cuda_visible_devices(&[], &inventory), "");
    }
}
