//! The NVML inventory against a fake `libnvidia-ml.so` (crate `drover-fake-nvml`: 4 × H100, GPU 2
//! in MIG mode with three 1g.10gb and one 3g.40gb instance): the GPUs, their UUIDs and minors, the
//! MIG instances with their GI/CI ids, the GRES types and device files Drover derives, the match
//! with a configuration (and the error when they disagree), the resulting
//! `CUDA_VISIBLE_DEVICES`, and utilization sampling. Set `DROVER_NVML_REAL=1` to run the same
//! inventory against the machine's real driver instead and print it.

use drover_fake_nvml::{LIB_PATH, MACHINE};
use drover_noded::isolation::cuda_visible_devices;
use drover_noded::nvml::{self, inventory};
use drover_shared::node::GpuDevice;
use std::path::{Path, PathBuf};

/// What the fake driver's `/proc/driver/nvidia-caps/mig-minors` would say for GPU 2.
const MIG_MINORS: &str = "config 1\nmonitor 2\n\
    gpu2/gi2/access 30\ngpu2/gi2/ci0/access 31\n\
    gpu2/gi7/access 80\ngpu2/gi7/ci0/access 81\n\
    gpu2/gi8/access 89\ngpu2/gi8/ci0/access 90\n\
    gpu2/gi9/access 98\ngpu2/gi9/ci0/access 99\n";

fn configured(types: &[(&str, usize)]) -> Vec<GpuDevice> {
    let mut gpus = Vec::new();
    for (gpu_type, count) in types {
        for _ in 0..*count {
            gpus.push(GpuDevice {
                index: u32::try_from(gpus.len()).unwrap(),
                gpu_type: (*gpu_type).into(),
                uuid: String::new(),
            });
        }
    }
    gpus
}

#[test]
fn the_fake_machine_is_inventoried_with_its_mig_instances() {
    let nvml = nvml::open(LIB_PATH).unwrap().expect("the fake library loads");
    let gpus = nvml::detect(&nvml).unwrap();
    let summary: Vec<(u32, &str, &str, u32, u64)> = gpus
        .iter()
        .map(|gpu| (gpu.index, gpu.name.as_str(), gpu.uuid.as_str(), gpu.minor, gpu.memory_bytes >> 30))
        .collect();
    assert_eq!(
        summary,
        [
            (0, "NVIDIA H100 80GB HBM3", "GPU-6f3c2a10-0000-4000-8000-000000000000", 0, 80),
            (1, "NVIDIA H100 80GB HBM3", "GPU-6f3c2a10-0000-4000-8000-000000000001", 1, 80),
            (2, "NVIDIA H100 80GB HBM3", "GPU-6f3c2a10-0000-4000-8000-000000000002", 2, 80),
            (3, "NVIDIA H100 80GB HBM3", "GPU-6f3c2a10-0000-4000-8000-000000000003", 3, 80),
        ],
        "{MACHINE}"
    );
    assert!(gpus.iter().filter(|gpu| gpu.index != 2).all(|gpu| gpu.mig.is_none()));
    let instances = gpus[2].mig.as_ref().expect("GPU 2 is in MIG mode");
    let mig: Vec<(&str, u32, u32, u64)> = instances
        .iter()
        .map(|mig| (mig.uuid.as_str(), mig.gpu_instance, mig.compute_instance, mig.memory_bytes >> 30))
        .collect();
    assert_eq!(
        mig,
        [
            ("MIG-0a1b2c3d-0000-4000-8000-000000000007", 7, 0, 10),
            ("MIG-0a1b2c3d-0000-4000-8000-000000000008", 8, 0, 10),
            ("MIG-0a1b2c3d-0000-4000-8000-000000000009", 9, 0, 10),
            ("MIG-0a1b2c3d-0000-4000-8000-000000000002", 2, 0, 40),
        ]
    );

    let gres = inventory::detected_gres(&gpus, MIG_MINORS, Path::new("/dev")).unwrap();
    let types: Vec<&str> = gres.iter().map(|gres| gres.gres_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "nvidia_h100_80gb_hbm3",
            "nvidia_h100_80gb_hbm3",
            "nvidia_h100_80gb_hbm3_1g.10gb",
            "nvidia_h100_80gb_hbm3_1g.10gb",
            "nvidia_h100_80gb_hbm3_1g.10gb",
            "nvidia_h100_80gb_hbm3_3g.40gb",
            "nvidia_h100_80gb_hbm3",
        ]
    );
    assert_eq!(
        gres[3].files,
        ["/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap89", "/dev/nvidia-caps/nvidia-cap90"].map(PathBuf::from)
    );

    // The configuration names MIG instances as GPU types; indices follow its type order.
    let node = inventory::match_config(&configured(&[("1g.10gb", 3), ("3g.40gb", 1), ("h100", 3)]), &gres).unwrap();
    let by_index: Vec<(u32, &str, &str)> =
        node.iter().map(|gpu| (gpu.device.index, gpu.device.gpu_type.as_str(), gpu.device.uuid.as_str())).collect();
    assert_eq!(
        by_index,
        [
            (0, "1g.10gb", "MIG-0a1b2c3d-0000-4000-8000-000000000007"),
            (1, "1g.10gb", "MIG-0a1b2c3d-0000-4000-8000-000000000008"),
            (2, "1g.10gb", "MIG-0a1b2c3d-0000-4000-8000-000000000009"),
            (3, "3g.40gb", "MIG-0a1b2c3d-0000-4000-8000-000000000002"),
            (4, "h100", "GPU-6f3c2a10-0000-4000-8000-000000000000"),
            (5, "h100", "GPU-6f3c2a10-0000-4000-8000-000000000001"),
            (6, "h100", "GPU-6f3c2a10-0000-4000-8000-000000000003"),
        ]
    );
    let devices: Vec<GpuDevice> = node.iter().map(|gpu| gpu.device.clone()).collect();
    assert_eq!(
        cuda_visible_devices(&[1, 3], &devices),
        "MIG-0a1b2c3d-0000-4000-8000-000000000008,MIG-0a1b2c3d-0000-4000-8000-000000000002"
    );
    assert_eq!(cuda_visible_devices(&[6], &devices), "0");
    assert_eq!(cuda_visible_devices(&[4, 5], &devices), "0,1");

    // A configuration that disagrees with the hardware is an error naming both sides.
    let error = inventory::match_config(&configured(&[("h100", 4)]), &gres).unwrap_err();
    assert!(error.contains("NVML detected GPUs the configuration does not declare"), "{error}");
    let error = inventory::match_config(&configured(&[("a100", 4)]), &gres).unwrap_err();
    assert!(error.starts_with("GPU type `a100`: 4 configured, 0 detected"), "{error}");

    // Utilization and memory for accounting.
    let sample = nvml::sample(&nvml, "GPU-6f3c2a10-0000-4000-8000-000000000003").unwrap();
    assert_eq!((sample.utilization_percent, sample.memory_used_bytes >> 30), (30, 20));
    let sample = nvml::sample(&nvml, "MIG-0a1b2c3d-0000-4000-8000-000000000002").unwrap();
    assert_eq!((sample.utilization_percent, sample.memory_used_bytes >> 30), (0, 10));
}

#[test]
fn a_missing_library_means_no_driver() {
    assert!(nvml::open("/nonexistent/libnvidia-ml.so.1").unwrap().is_none());
}

/// Not a fake: the machine's own driver, when asked for (`DROVER_NVML_REAL=1`).
#[test]
fn real_driver_inventory() {
    if std::env::var("DROVER_NVML_REAL").as_deref() != Ok("1") {
        return;
    }
    let nvml = nvml::open(nvml::DEFAULT_LIB).unwrap().expect("the NVIDIA driver's NVML loads");
    let gpus = nvml::detect(&nvml).unwrap();
    assert!(!gpus.is_empty(), "NVML found no GPU");
    let minors = std::fs::read_to_string("/proc/driver/nvidia-caps/mig-minors").unwrap_or_default();
    for gpu in &gpus {
        println!(
            "GPU {} {:?} {} minor {} {} MiB mig {:?}",
            gpu.index,
            gpu.name,
            gpu.uuid,
            gpu.minor,
            gpu.memory_bytes >> 20,
            gpu.mig
        );
        let sample = nvml::sample(&nvml, &gpu.uuid).unwrap();
        println!("  utilization {}% memory used {} MiB", sample.utilization_percent, sample.memory_used_bytes >> 20);
    }
    for gres in inventory::detected_gres(&gpus, &minors, Path::new("/dev")).unwrap() {
        println!("GRES gpu:{} uuid {} files {:?}", gres.gres_type, gres.uuid, gres.files);
    }
}
