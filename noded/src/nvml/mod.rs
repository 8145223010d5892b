//! GPU inventory through NVML (`nvml-wrapper`, Slurm's `AutoDetect=nvml`): every GPU with its
//! name, UUID, minor number and memory, and for a GPU in MIG mode its MIG instances (UUID, GPU
//! and compute instance ids, memory). [`inventory`] turns that into this node's GRES, checked
//! against the configuration; [`sample`] reads utilization for accounting.
//!
//! The library is opened from a path (`DROVER_NVML_LIB`, default `libnvidia-ml.so.1`), so tests
//! load a fake one. A library that cannot be loaded means "no NVIDIA driver here".

pub mod inventory;

use crate::sys::nvml::InstanceKind;
use drover_shared::node::GpuDevice;
use inventory::NodeGpu;
use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::{Device, Nvml};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The library opened when nothing else is said.
pub const DEFAULT_LIB: &str = "libnvidia-ml.so.1";

/// Where the test hooks point noded instead of NVML's library, `/dev` and the MIG minors file.
pub const LIB_VAR: &str = "DROVER_NVML_LIB";
pub const DEV_DIR_VAR: &str = "DROVER_NVIDIA_DEV_DIR";
pub const MIG_MINORS_VAR: &str = "DROVER_NVIDIA_MIG_MINORS";

/// This node's GPUs: from NVML when its library loads (checked against the configuration: a
/// disagreement is an error), else the configuration's GPUs with their configured device files.
/// Also says where the inventory came from, for the startup log.
pub fn node_gpus(configured: &[GpuDevice], configured_files: &[PathBuf]) -> Result<(Vec<NodeGpu>, String), String> {
    let lib = std::env::var(LIB_VAR).unwrap_or_else(|_| DEFAULT_LIB.to_owned());
    let nvml = open(&lib).map_err(|error| crate::supervisor::error_chain(&error))?;
    let Some(nvml) = nvml else {
        let gpus = configured
            .iter()
            .enumerate()
            .map(|(idx, device)| NodeGpu {
                device: device.clone(),
                files: configured_files.get(idx).cloned().into_iter().collect(),
            })
            .collect();
        return Ok((gpus, format!("configuration (no NVML library {lib})")));
    };
    let detected = detect(&nvml).map_err(|error| crate::supervisor::error_chain(&error))?;
    let dev_dir = std::env::var_os(DEV_DIR_VAR).map_or_else(|| PathBuf::from("/dev"), PathBuf::from);
    let minors_path = std::env::var_os(MIG_MINORS_VAR)
        .map_or_else(|| PathBuf::from("/proc/driver/nvidia-caps/mig-minors"), PathBuf::from);
    let minors = read_optional(&minors_path)?;
    let gres = inventory::detected_gres(&detected, &minors, &dev_dir)?;
    let gpus = inventory::match_config(configured, &gres)?;
    Ok((gpus, format!("NVML ({lib})")))
}

/// The GPUs NVML finds on this machine, counted by GRES type (`h200 = 1`), for
/// `drover-noded -C`; empty without NVML.
pub fn detected_types() -> Result<Vec<(String, u32)>, String> {
    let lib = std::env::var(LIB_VAR).unwrap_or_else(|_| DEFAULT_LIB.to_owned());
    let Some(nvml) = open(&lib).map_err(|error| crate::supervisor::error_chain(&error))? else {
        return Ok(Vec::new());
    };
    let mut counts: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    for gpu in detect(&nvml).map_err(|error| crate::supervisor::error_chain(&error))? {
        *counts.entry(inventory::gres_type(&gpu.name)).or_default() += 1;
    }
    Ok(counts.into_iter().collect())
}

fn read_optional(path: &Path) -> Result<String, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// Why NVML could not describe the GPUs.
#[derive(Debug, Error)]
pub enum NvmlError {
    /// A query failed.
    #[error("NVML {operation} failed")]
    Query { operation: &'static str, source: WrapperError },
}

/// One physical GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectedGpu {
    /// NVML's index (PCI bus order).
    pub index: u32,
    pub name: String,
    pub uuid: String,
    /// The `N` of `/dev/nvidiaN`.
    pub minor: u32,
    pub memory_bytes: u64,
    /// The MIG instances when the GPU is in MIG mode.
    pub mig: Option<Vec<MigInstance>>,
}

/// One MIG instance of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigInstance {
    /// NVML's name, `NVIDIA H100 80GB HBM3 MIG 1g.10gb`.
    pub name: String,
    pub uuid: String,
    pub gpu_instance: u32,
    pub compute_instance: u32,
    pub memory_bytes: u64,
}

/// Opens NVML; `None` when the library cannot be loaded (no driver).
pub fn open(lib_path: &str) -> Result<Option<Nvml>, NvmlError> {
    match Nvml::builder().lib_path(OsStr::new(lib_path)).init() {
        Ok(nvml) => Ok(Some(nvml)),
        Err(WrapperError::LibloadingError(_)) => Ok(None),
        Err(source) => Err(NvmlError::Query { operation: "init", source }),
    }
}

/// Every GPU of the machine, in NVML order.
pub fn detect(nvml: &Nvml) -> Result<Vec<DetectedGpu>, NvmlError> {
    let query = |operation: &'static str| move |source| NvmlError::Query { operation, source };
    let n_gpus = nvml.device_count().map_err(query("device count"))?;
    let mut gpus = Vec::new();
    for index in 0..n_gpus {
        let device = nvml.device_by_index(index).map_err(query("device by index"))?;
        let mig_enabled = match device.mig_mode() {
            Ok(mode) => mode.current == 1,
            Err(WrapperError::NotSupported | WrapperError::FailedToLoadSymbol(_)) => false,
            Err(source) => return Err(NvmlError::Query { operation: "MIG mode", source }),
        };
        let mig = if mig_enabled { Some(mig_instances(nvml, &device)?) } else { None };
        gpus.push(DetectedGpu {
            index,
            name: device.name().map_err(query("name"))?,
            uuid: device.uuid().map_err(query("UUID"))?,
            minor: device.minor_number().map_err(query("minor number"))?,
            memory_bytes: device.memory_info().map_err(query("memory info"))?.total,
            mig,
        });
    }
    Ok(gpus)
}

fn mig_instances(nvml: &Nvml, device: &Device<'_>) -> Result<Vec<MigInstance>, NvmlError> {
    let query = |operation: &'static str| move |source| NvmlError::Query { operation, source };
    let max = device.mig_device_count().map_err(query("MIG device count"))?;
    let mut instances = Vec::new();
    for slot in 0..max {
        let mig = match device.mig_device_by_index(slot) {
            Ok(mig) => mig,
            // An empty slot.
            Err(WrapperError::NotFound) => continue,
            Err(source) => return Err(NvmlError::Query { operation: "MIG device by index", source }),
        };
        instances.push(MigInstance {
            name: mig.name().map_err(query("MIG name"))?,
            uuid: mig.uuid().map_err(query("MIG UUID"))?,
            gpu_instance: crate::sys::nvml::instance_id(nvml, &mig, InstanceKind::Gpu)?,
            compute_instance: crate::sys::nvml::instance_id(nvml, &mig, InstanceKind::Compute)?,
            memory_bytes: mig.memory_info().map_err(query("MIG memory info"))?.total,
        });
    }
    Ok(instances)
}

/// One GPU's utilization and memory use, for accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuSample {
    /// Percent of time a kernel ran, over the driver's last sample period.
    pub utilization_percent: u32,
    pub memory_used_bytes: u64,
}

/// Samples the GPU or MIG instance with this UUID.
pub fn sample(nvml: &Nvml, uuid: &str) -> Result<GpuSample, NvmlError> {
    let query = |operation: &'static str| move |source| NvmlError::Query { operation, source };
    let device = nvml.device_by_uuid(uuid).map_err(query("device by UUID"))?;
    let utilization_percent = match device.utilization_rates() {
        Ok(rates) => rates.gpu,
        // MIG instances report no utilization through this call.
        Err(WrapperError::NotSupported) => 0,
        Err(source) => return Err(NvmlError::Query { operation: "utilization", source }),
    };
    let memory_used_bytes = device.memory_info().map_err(query("memory info"))?.used;
    Ok(GpuSample { utilization_percent, memory_used_bytes })
}
