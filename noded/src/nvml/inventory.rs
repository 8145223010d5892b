//! From what NVML detected to this node's GPUs, Slurm's `AutoDetect=nvml` way (slurm-compat
//! §9.2): a GPU not in MIG mode is one GRES with the type `nvidia_h100_80gb_hbm3` (the NVML name
//! lower-cased, spaces to `_`) and the file `/dev/nvidia<minor>`; a GPU in MIG mode is one GRES per
//! MIG instance, typed `<gpu type>_<profile>` (`…_1g.10gb`), with its parent's file and its GPU
//! and compute instances' capability files (`/dev/nvidia-caps/nvidia-cap<N>`, minors from
//! `/proc/driver/nvidia-caps/mig-minors`). A configured type matches a detected one it is a
//! substring of (`h100`, `1g.10gb`); the most specific (longest) configured type chooses first.
//! The result keeps the configuration's GPU indices, so ctld and noded agree on them; any
//! disagreement in count or type is an error naming both sides.

use super::DetectedGpu;
use drover_shared::node::GpuDevice;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One schedulable GPU (a whole GPU or a MIG instance) of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGpu {
    pub device: GpuDevice,
    /// The device files a job given this GPU must be able to open.
    pub files: Vec<PathBuf>,
}

/// One detected GRES before it is matched with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectedGres {
    /// Slurm's autodetected type name.
    pub gres_type: String,
    pub uuid: String,
    pub files: Vec<PathBuf>,
}

/// `NVIDIA H100 80GB HBM3` → `nvidia_h100_80gb_hbm3`.
pub fn gres_type(nvml_name: &str) -> String {
    nvml_name.trim().to_lowercase().replace(' ', "_")
}

/// The MIG profile at the end of a MIG device name (`… MIG 1g.10gb` → `1g.10gb`).
fn mig_profile(mig_name: &str) -> String {
    let lower = mig_name.to_lowercase();
    let tail = lower.rsplit_once("mig").map_or(lower.as_str(), |(_, tail)| tail);
    tail.trim().trim_start_matches('_').replace(' ', "_")
}

/// `/proc/driver/nvidia-caps/mig-minors`: `gpu<G>/gi<I>/access <minor>` and
/// `gpu<G>/gi<I>/ci<C>/access <minor>`, keyed by `(G, I, Some(C) or None)`.
pub fn parse_mig_minors(text: &str) -> HashMap<(u32, u32, Option<u32>), u32> {
    let mut minors = HashMap::new();
    for line in text.lines() {
        let Some((path, minor)) = line.split_once(' ') else { continue };
        let Ok(minor) = minor.trim().parse::<u32>() else { continue };
        let parts: Vec<&str> = path.split('/').collect();
        let number = |part: &str, prefix: &str| part.strip_prefix(prefix).and_then(|n| n.parse::<u32>().ok());
        match parts.as_slice() {
            [gpu, gi, "access"] => {
                if let (Some(gpu), Some(gi)) = (number(gpu, "gpu"), number(gi, "gi")) {
                    minors.insert((gpu, gi, None), minor);
                }
            }
            [gpu, gi, ci, "access"] => {
                if let (Some(gpu), Some(gi), Some(ci)) = (number(gpu, "gpu"), number(gi, "gi"), number(ci, "ci")) {
                    minors.insert((gpu, gi, Some(ci)), minor);
                }
            }
            _ => {}
        }
    }
    minors
}

/// The detected GRES in NVML order; `dev_dir` is where the device nodes are (`/dev`).
pub fn detected_gres(gpus: &[DetectedGpu], mig_minors: &str, dev_dir: &Path) -> Result<Vec<DetectedGres>, String> {
    let minors = parse_mig_minors(mig_minors);
    let caps = dev_dir.join("nvidia-caps");
    let mut gres = Vec::new();
    for gpu in gpus {
        let parent = dev_dir.join(format!("nvidia{}", gpu.minor));
        match &gpu.mig {
            None => {
                gres.push(DetectedGres { gres_type: gres_type(&gpu.name), uuid: gpu.uuid.clone(), files: vec![parent] })
            }
            Some(instances) => {
                let base = gres_type(gpu.name.split('-').next().unwrap_or(&gpu.name));
                for instance in instances {
                    let cap = |ci: Option<u32>| {
                        minors
                            .get(&(gpu.minor, instance.gpu_instance, ci))
                            .map(|minor| caps.join(format!("nvidia-cap{minor}")))
                            .ok_or_else(|| {
                                let ci = ci.map_or(String::new(), |ci| format!("/ci{ci}"));
                                format!(
                                    "mig-minors has no gpu{}/gi{}{ci}/access (MIG instance {})",
                                    gpu.minor, instance.gpu_instance, instance.uuid
                                )
                            })
                    };
                    let files = vec![parent.clone(), cap(None)?, cap(Some(instance.compute_instance))?];
                    gres.push(DetectedGres {
                        gres_type: format!("{base}_{}", mig_profile(&instance.name)),
                        uuid: instance.uuid.clone(),
                        files,
                    });
                }
            }
        }
    }
    Ok(gres)
}

/// Matches the detected GRES with the configured GPUs (`configured[i].index == i`): the result
/// has the configuration's indices and types, NVML's UUIDs and files.
pub fn match_config(configured: &[GpuDevice], detected: &[DetectedGres]) -> Result<Vec<NodeGpu>, String> {
    let describe = || {
        let config: Vec<&str> = configured.iter().map(|gpu| gpu.gpu_type.as_str()).collect();
        let found: Vec<&str> = detected.iter().map(|gres| gres.gres_type.as_str()).collect();
        format!("configured [{}], detected by NVML [{}]", config.join(", "), found.join(", "))
    };
    let mut types: Vec<&str> = configured.iter().map(|gpu| gpu.gpu_type.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    // Longest first, so `1g.10gb` claims its MIG instances before `h100` could.
    types.sort_by_key(|gpu_type| std::cmp::Reverse(gpu_type.len()));
    let mut claimed: Vec<bool> = vec![false; detected.len()];
    let mut by_type: HashMap<&str, Vec<usize>> = HashMap::new();
    for gpu_type in types {
        let wanted = configured.iter().filter(|gpu| gpu.gpu_type == gpu_type).count();
        let needle = gpu_type.to_lowercase();
        let mut found = Vec::new();
        for (idx, gres) in detected.iter().enumerate() {
            if found.len() < wanted && !claimed[idx] && gres.gres_type.contains(&needle) {
                claimed[idx] = true;
                found.push(idx);
            }
        }
        if found.len() != wanted {
            return Err(format!(
                "GPU type `{gpu_type}`: {wanted} configured, {} detected; {}",
                found.len(),
                describe()
            ));
        }
        by_type.insert(gpu_type, found);
    }
    if claimed.iter().any(|claimed| !claimed) {
        return Err(format!("NVML detected GPUs the configuration does not declare; {}", describe()));
    }
    let mut taken: HashMap<&str, usize> = HashMap::new();
    let mut node_gpus = Vec::new();
    for gpu in configured {
        let next = taken.entry(gpu.gpu_type.as_str()).or_default();
        let gres = &detected[by_type[gpu.gpu_type.as_str()][*next]];
        *next += 1;
        node_gpus
            .push(NodeGpu { device: GpuDevice { uuid: gres.uuid.clone(), ..gpu.clone() }, files: gres.files.clone() });
    }
    Ok(node_gpus)
}

#[cfg(test)]
mod tests {
    use super::super::MigInstance;
    use super::*;

    fn machine() -> Vec<DetectedGpu> {
        let gpu = |index: u32, mig| DetectedGpu {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: format!("GPU-{index}"),
            minor: index,
            memory_bytes: 80 << 30,
            mig,
        };
        let instance = |gi: u32, profile: &str| MigInstance {
            name: format!("NVIDIA H100 80GB HBM3 MIG {profile}"),
            uuid: format!("MIG-{gi}"),
            gpu_instance: gi,
            compute_instance: 0,
            memory_bytes: 10 << 30,
        };
        vec![gpu(0, None), gpu(1, Some(vec![instance(7, "1g.10gb"), instance(2, "3g.40gb")])), gpu(2, None)]
    }

    const MIG_MINORS: &str =
        "config 1\nmonitor 2\ngpu1/gi2/access 21\ngpu1/gi2/ci0/access 22\ngpu1/gi7/access 66\ngpu1/gi7/ci0/access 67\n";

    #[test]
    fn names_and_files_follow_slurm() {
        assert_eq!(gres_type("NVIDIA A100-SXM4-40GB"), "nvidia_a100-sxm4-40gb");
        let gres = detected_gres(&machine(), MIG_MINORS, Path::new("/dev")).unwrap();
        let types: Vec<&str> = gres.iter().map(|gres| gres.gres_type.as_str()).collect();
        assert_eq!(
            types,
            [
                "nvidia_h100_80gb_hbm3",
                "nvidia_h100_80gb_hbm3_1g.10gb",
                "nvidia_h100_80gb_hbm3_3g.40gb",
                "nvidia_h100_80gb_hbm3"
            ]
        );
        assert_eq!(
            gres[1].files,
            ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap66", "/dev/nvidia-caps/nvidia-cap67"].map(PathBuf::from)
        );
        assert_eq!(gres[3].files, [PathBuf::from("/dev/nvidia2")]);
        let error = detected_gres(&machine(), "gpu1/gi2/access 21\n", Path::new("/dev")).unwrap_err();
        assert!(error.starts_with("mig-minors has no gpu1/gi7/access"), "{error}");
    }

    #[test]
    fn configured_indices_get_detected_uuids_and_files() {
        let gres = detected_gres(&machine(), MIG_MINORS, Path::new("/dev")).unwrap();
        // Config order: types sorted, `1g.10gb` < `3g.40gb` < `h100`.
        let configured: Vec<GpuDevice> = ["1g.10gb", "3g.40gb", "h100", "h100"]
            .iter()
            .enumerate()
            .map(|(index, gpu_type)| GpuDevice {
                index: u32::try_from(index).unwrap(),
                gpu_type: (*gpu_type).into(),
                uuid: String::new(),
            })
            .collect();
        let node = match_config(&configured, &gres).unwrap();
        let summary: Vec<(u32, &str, &str)> =
            node.iter().map(|gpu| (gpu.device.index, gpu.device.gpu_type.as_str(), gpu.device.uuid.as_str())).collect();
        assert_eq!(
            summary,
            [(0, "1g.10gb", "MIG-7"), (1, "3g.40gb", "MIG-2"), (2, "h100", "GPU-0"), (3, "h100", "GPU-2")]
        );

        let too_many = &configured[..3];
        let error = match_config(too_many, &gres).unwrap_err();
        assert!(error.contains("GPU type `h100`: 1 configured") || error.contains("does not declare"), "{error}");
        let wrong_type: Vec<GpuDevice> =
            configured.iter().map(|gpu| GpuDevice { gpu_type: "a100".into(), ..gpu.clone() }).collect();
        let error = match_config(&wrong_type, &gres).unwrap_err();
        assert!(
            error.starts_with(
                "GPU type `a100`: 4 configured, 0 detected; configured [a100, a100, a100, a100], detected by NVML ["
            ),
            "{error}"
        );
    }
}
