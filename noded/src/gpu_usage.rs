//! GPU usage of the jobs this node holds, for usage accounting: at each heartbeat, the GPUs of
//! every held job (from its launch request, mapped to UUIDs through the node's inventory) are
//! sampled through NVML and sent to ctld as [`NodeMessage::GpuUsage`]. Without NVML nothing is
//! sent (ctld then knows allocated GPU time only).
//!
//! [`NodeMessage::GpuUsage`]: drover_shared::proto::node::NodeMessage::GpuUsage

use crate::nvml;
use drover_shared::job::JobId;
use drover_shared::node::GpuDevice;
use drover_shared::proto::node::LaunchRequest;
use drover_shared::proto::usage::JobGpuSample;
use nvml_wrapper::Nvml;
use std::path::Path;
use std::sync::OnceLock;

/// The NVML handle, opened on first use (`None` when the library is not there).
fn handle() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| {
        let lib = std::env::var(nvml::LIB_VAR).unwrap_or_else(|_| nvml::DEFAULT_LIB.to_owned());
        nvml::open(&lib).unwrap_or_else(|error| {
            tracing::warn!(error = %error, "NVML unavailable; no GPU usage samples");
            None
        })
    })
    .as_ref()
}

/// The UUIDs of each held job's GPUs on this node (jobs without GPUs are left out).
pub fn held_job_gpus(state_dir: &Path, gpus: &[GpuDevice]) -> Vec<(JobId, Vec<String>)> {
    crate::jobs::held(state_dir)
        .into_iter()
        .filter_map(|run| {
            let job_id = run.job_id;
            let bytes = std::fs::read(crate::jobs::job_dir(state_dir, run).join("launch")).ok()?;
            let request: LaunchRequest = postcard::from_bytes(&bytes).ok()?;
            let uuids: Vec<String> = request
                .gpus
                .iter()
                .filter_map(|index| gpus.iter().find(|g| g.index == *index))
                .map(|g| g.uuid.clone())
                .filter(|uuid| !uuid.is_empty())
                .collect();
            (!uuids.is_empty()).then_some((job_id, uuids))
        })
        .collect()
}

/// Samples each job's GPUs through `nvml`; a GPU that cannot be sampled is left out.
pub fn sample_jobs(nvml: &Nvml, jobs: &[(JobId, Vec<String>)]) -> Vec<JobGpuSample> {
    jobs.iter()
        .map(|(job_id, uuids)| {
            let mut sample = JobGpuSample { job_id: *job_id, ..JobGpuSample::default() };
            for uuid in uuids {
                match nvml::sample(nvml, uuid) {
                    Ok(s) => {
                        sample.gpus += 1;
                        sample.utilization_percent_sum += s.utilization_percent.min(100);
                        sample.memory_used_bytes += s.memory_used_bytes;
                    }
                    Err(error) => tracing::debug!(job_id, uuid, error = %error, "GPU sample failed"),
                }
            }
            sample
        })
        .filter(|s| s.gpus > 0)
        .collect()
}

/// This heartbeat's samples of the held jobs (empty without NVML or GPU jobs).
pub fn sample_held(state_dir: &Path, gpus: &[GpuDevice]) -> Vec<JobGpuSample> {
    let Some(nvml) = handle() else { return Vec::new() };
    let jobs = held_job_gpus(state_dir, gpus);
    if jobs.is_empty() {
        return Vec::new();
    }
    sample_jobs(nvml, &jobs)
}
