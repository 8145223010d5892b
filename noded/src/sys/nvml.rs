//! The MIG instance ids (`nvmlDeviceGetGpuInstanceId`, `nvmlDeviceGetComputeInstanceId`) that
//! nvml-wrapper 0.13 does not wrap: called through the symbol table of the NVML it loaded.

use crate::nvml::NvmlError;
use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::{Device, Nvml};

/// Which id of a MIG device.
pub(crate) enum InstanceKind {
    Gpu,
    Compute,
}

/// A MIG device's GPU or compute instance id: functions nvml-wrapper 0.13 does not wrap, so they
/// are called from its symbol table.
pub(crate) fn instance_id(nvml: &Nvml, mig: &Device<'_>, kind: InstanceKind) -> Result<u32, NvmlError> {
    let (symbol, operation) = match kind {
        InstanceKind::Gpu => (nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref(), "GPU instance id"),
        InstanceKind::Compute => (nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref(), "compute instance id"),
    };
    let function = symbol
        .map_err(|error| NvmlError::Query { operation, source: WrapperError::FailedToLoadSymbol(error.to_string()) })?;
    let mut id: u32 = 0;
    // SAFETY: the function comes from the loaded NVML with the signature of nvml.h
    // (`nvmlReturn_t f(nvmlDevice_t, unsigned int *)`); the handle is live for as long as `mig`
    // borrows `nvml`, and `id` is a local that outlives the call.
    let status = unsafe { function(mig.handle(), &mut id) };
    nvml_wrapper::error::nvml_try(status).map_err(|source| NvmlError::Query { operation, source })?;
    Ok(id)
}
