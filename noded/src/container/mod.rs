//! OCI containers for `--container=BUNDLE` jobs and steps (Slurm 22.05's `--container`, driven
//! by the `[oci]` runtime patterns of `cluster.toml`).
//!
//! The job's environment carries the request as Slurm's `SLURM_CONTAINER` (sbatch, srun and
//! salloc set it from `--container`). At launch, noded writes a [`ContainerPlan`] into the job's
//! (or step's) directory: the node's runtime patterns, the bundle, the GPU device files the job
//! was given and a spool directory the user owns. The supervisor and the step runner then start
//! each task as `drover-noded container --plan … -- ARGV` instead of `ARGV`, already as the user
//! and inside the job's cgroups; that helper ([`run`]) writes the task's bundle
//! ([`bundle::rewrite`]) and runs the runtime, which stays in those cgroups, so the job's device
//! filter, memory, CPU and pids limits hold for every process of the container.

pub mod bundle;
pub mod run;

use drover_shared::config::oci::OciConfig;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The plan's file in a job or step directory.
pub const PLAN_FILE: &str = "container";

/// The spool directory below a job or step directory, owned by the user.
const SPOOL_DIR: &str = "oci";

/// The longest bundle path accepted.
const MAX_BUNDLE_PATH: usize = 4096;

/// What the helper needs to run one task in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerPlan {
    pub oci: OciConfig,
    /// The user's bundle (`config.json` and its root file system).
    pub bundle: PathBuf,
    /// The user's spool directory; each task gets `task<N>` below it.
    pub spool: PathBuf,
    /// The device files of the GPUs the job was given, bound into the container.
    pub devices: Vec<PathBuf>,
    pub job_id: u32,
    /// `batch` for the batch script, else the step id.
    pub step: String,
    pub node: String,
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// The batch script, copied into the task's spool directory and run from
    /// [`OciConfig::mount_spool_dir`] inside the container.
    pub script: Option<PathBuf>,
}

/// What identifies the task's job and where it runs.
pub struct Owner<'a> {
    pub job_id: u32,
    pub step: String,
    pub node: &'a str,
    pub user: &'a str,
    pub uid: u32,
    pub gid: u32,
}

/// The plan for a job or step asking for `bundle`, its spool directory made below `dir` for the
/// user. Refused with the reason users see when the node has no runtime or the path is bad.
pub fn plan(
    oci: Option<&OciConfig>,
    bundle: &str,
    dir: &Path,
    devices: Vec<PathBuf>,
    owner: Owner<'_>,
    script: Option<PathBuf>,
) -> Result<ContainerPlan, String> {
    let Some(oci) = oci else {
        return Err(format!(
            "--container={bundle}: node {} has no OCI runtime configured (the [oci] section of cluster.toml)",
            owner.node
        ));
    };
    if bundle.len() > MAX_BUNDLE_PATH || !bundle.starts_with('/') || bundle.contains('\0') {
        return Err(format!("--container: the bundle must be an absolute path, at most {MAX_BUNDLE_PATH} bytes"));
    }
    let spool = prepare_spool(dir, owner.uid, owner.gid).map_err(|e| {
        format!("could not prepare the container's spool directory: {}", drover_shared::text::io_reason(&e))
    })?;
    Ok(ContainerPlan {
        oci: oci.clone(),
        bundle: PathBuf::from(bundle),
        spool,
        devices,
        job_id: owner.job_id,
        step: owner.step,
        node: owner.node.to_owned(),
        user: owner.user.to_owned(),
        uid: owner.uid,
        gid: owner.gid,
        script,
    })
}

/// `dir/oci`, new, mode 0700, owned by the user; `dir` itself made traversable (0711) so the
/// user reaches it. Anything left there by an earlier run is removed first.
fn prepare_spool(dir: &Path, uid: u32, gid: u32) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let spool = dir.join(SPOOL_DIR);
    match std::fs::remove_dir_all(&spool) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    std::fs::DirBuilder::new().mode(0o700).create(&spool)?;
    if nix::unistd::geteuid().is_root() {
        nix::unistd::chown(&spool, Some(nix::unistd::Uid::from_raw(uid)), Some(nix::unistd::Gid::from_raw(gid)))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
    }
    Ok(spool)
}

/// Writes the plan, or why there is none, into a job or step directory (root's, mode 0600).
pub fn write(dir: &Path, plan: &Result<ContainerPlan, String>) -> std::io::Result<()> {
    use std::io::Write;
    let json = serde_json::to_vec(plan).map_err(std::io::Error::other)?;
    let mut file =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(dir.join(PLAN_FILE))?;
    file.write_all(&json)
}

/// The plan in a job or step directory, or why the container cannot run; `Ok(None)` when the
/// job runs no container.
pub fn read(dir: &Path) -> std::io::Result<Option<Result<ContainerPlan, String>>> {
    match std::fs::read(dir.join(PLAN_FILE)) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(std::io::Error::other),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// The helper's command line that runs `argv` in the container: `exe container --plan JSON --
/// ARGV…`.
pub fn command_line(exe: &Path, plan: &ContainerPlan, argv: &[String]) -> Vec<String> {
    let mut line = vec![
        exe.to_string_lossy().into_owned(),
        "container".to_owned(),
        "--plan".to_owned(),
        serde_json::to_string(plan).unwrap_or_default(),
        "--".to_owned(),
    ];
    line.extend(argv.iter().cloned());
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_without_a_runtime_or_a_relative_bundle_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let owner = || Owner { job_id: 1, step: "batch".into(), node: "n1", user: "u", uid: 0, gid: 0 };
        let refused = plan(None, "/b", dir.path(), vec![], owner(), None).unwrap_err();
        assert!(refused.contains("node n1 has no OCI runtime configured"), "{refused}");
        let oci = drover_shared::config::oci::RawOci { runtime: Some("crun".into()), ..Default::default() }
            .validate()
            .unwrap();
        assert!(plan(Some(&oci), "rel/b", dir.path(), vec![], owner(), None).unwrap_err().contains("absolute"));
        let made = plan(Some(&oci), "/b", dir.path(), vec![], owner(), None).unwrap();
        assert!(made.spool.is_dir());
        write(dir.path(), &Ok(made.clone())).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(Ok(made)));
        write(dir.path(), &Err("why".into())).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(Err("why".into())));
    }
}
