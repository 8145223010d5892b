//! A fake `libnvidia-ml.so.1`, compiled from `c/fake_nvml.c` by this crate's build script, for
//! tests of Drover's NVML inventory on machines without a GPU. It implements the NVML functions
//! Drover calls (under the exact versioned names `nvml-wrapper` 0.13 looks up) and describes
//! [`MACHINE`]. `FAKE_NVML_GPUS=<n>` in the environment of the process that loads it shows only
//! the first `n` GPUs (to test a config that disagrees with the hardware).

/// Path of the built library, for `Nvml::builder().lib_path(..)`.
pub const LIB_PATH: &str = env!("DROVER_FAKE_NVML_LIB");

/// The machine the library describes, as text for test failure messages.
pub const MACHINE: &str = "4 x NVIDIA H100 80GB HBM3 (minors 0-3); GPU 2 in MIG mode with \
    1g.10gb x3 (GI 7, 8, 9; CI 0) and 3g.40gb x1 (GI 2; CI 0)";
