//! The environment a batch job starts with: which of the submitter's variables `--export` lets
//! through, and the `SLURM_*` variables sbatch itself adds at submit time.
//!
//! `--export` is parsed by [`crate::options::export`] (`ALL`, the default, `NONE`, or a comma list
//! `[ALL,]VAR[=value][,…]`). Without `ALL` only the listed variables travel; `SLURM_*` variables
//! always do. `VAR` alone takes the submitter's value, `VAR=value` sets one.

use crate::options::export::ExportSpec;
use crate::options::lowargs::LowArgs;
use drover_shared::grammar::gres::GresRequest;
use drover_shared::job::MemRequest;
use std::collections::BTreeMap;

/// The job's environment: the submitter's variables as `export` filters them, then the variables
/// sbatch sets (which win), then explicit `VAR=value` items of `export` (which win over both).
/// Sorted by name.
pub(crate) fn job_environment(
    export: Option<&ExportSpec>,
    submit_env: &[(String, String)],
    sbatch_vars: &[(String, String)],
) -> Vec<(String, String)> {
    let all = export.is_none_or(|spec| spec.all);
    let mut env: BTreeMap<String, String> =
        submit_env.iter().filter(|(name, _)| all || name.starts_with("SLURM_")).cloned().collect();
    let listed = export.map(|spec| spec.vars.as_slice()).unwrap_or_default();
    for (name, value) in listed {
        if value.is_none()
            && let Some((_, submitted)) = submit_env.iter().rev().find(|(n, _)| n == name)
        {
            env.insert(name.clone(), submitted.clone());
        }
    }
    env.extend(sbatch_vars.iter().cloned());
    for (name, value) in listed {
        if let Some(value) = value {
            env.insert(name.clone(), value.clone());
        }
    }
    env.into_iter().collect()
}

/// What sbatch knows about the submission besides the options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Submitter<'a> {
    /// The job name, when -J, a script file or --wrap gave one (not for a stdin script).
    pub(crate) job_name: Option<&'a str>,
    pub(crate) submit_dir: &'a str,
    pub(crate) submit_host: &'a str,
    pub(crate) umask: u32,
    /// sbatch's own scheduling priority (nice value).
    pub(crate) prio_process: i32,
    /// The soft resource limits `--propagate` passes to the job.
    pub(crate) rlimits: &'a [(String, u64)],
}

/// `[type:]count[,…]`, the way `--gpus` options are written.
fn gpu_list(requests: &[GresRequest]) -> String {
    let items: Vec<String> = requests
        .iter()
        .map(|r| match &r.gres_type {
            Some(t) => format!("{t}:{}", r.count),
            None => r.count.to_string(),
        })
        .collect();
    items.join(",")
}

/// The variables sbatch sets in the job's environment at submit time (Slurm's "C" origin), each only
/// when the matching option was used. This is the one list of them.
pub(crate) fn sbatch_variables(low: &LowArgs, submitter: &Submitter<'_>) -> Vec<(String, String)> {
    let mut vars: Vec<(&str, String)> = Vec::new();
    if let Some(name) = submitter.job_name {
        vars.push(("SLURM_JOB_NAME", name.to_owned()));
    }
    if let Some(n) = low.ntasks {
        vars.push(("SLURM_NTASKS", n.to_string()));
        vars.push(("SLURM_NPROCS", n.to_string()));
    }
    if let Some(n) = low.cpus_per_task {
        vars.push(("SLURM_CPUS_PER_TASK", n.to_string()));
    }
    if let Some(n) = low.ntasks_per_node {
        vars.push(("SLURM_NTASKS_PER_NODE", n.to_string()));
    }
    if let Some(MemRequest::PerGpu(mb)) = low.mem {
        vars.push(("SLURM_MEM_PER_GPU", mb.to_string()));
    }
    if let Some(gpus) = &low.gpus {
        vars.push(("SLURM_GPUS", gpu_list(gpus)));
    }
    if let Some(gpus) = &low.gpus_per_node {
        vars.push(("SLURM_GPUS_PER_NODE", gpu_list(gpus)));
    }
    if let Some(gpus) = &low.gpus_per_task {
        vars.push(("SLURM_GPUS_PER_TASK", gpu_list(gpus)));
    }
    if let Some(append) = low.open_append {
        vars.push(("SLURM_OPEN_MODE", if append { "a" } else { "t" }.to_owned()));
    }
    if let Some(dependency) = &low.dependency {
        vars.push(("SLURM_JOB_DEPENDENCY", dependency.clone()));
    }
    if let Some(export) = &low.export {
        vars.push(("SLURM_EXPORT_ENV", export.clone()));
    }
    if let Some(bundle) = &low.container {
        vars.push((drover_shared::job::CONTAINER_ENV, bundle.clone()));
    }
    if low.get_user_env.is_some() {
        vars.push(("SLURM_GET_USER_ENV", "1".to_owned()));
    }
    vars.push(("SLURM_PRIO_PROCESS", submitter.prio_process.to_string()));
    vars.push(("SLURM_SUBMIT_DIR", submitter.submit_dir.to_owned()));
    vars.push(("SLURM_SUBMIT_HOST", submitter.submit_host.to_owned()));
    vars.push(("SLURM_UMASK", format!("{:04o}", submitter.umask)));
    let mut vars: Vec<(String, String)> = vars.into_iter().map(|(name, value)| (name.to_owned(), value)).collect();
    for (name, value) in submitter.rlimits {
        vars.push((format!("{}{name}", drover_shared::job::RLIMIT_ENV_PREFIX), value.to_string()));
    }
    vars
}
