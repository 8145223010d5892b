//! GPU usage samples of held jobs through the fake NVML library (GPU `i` reports `10 × i` %
//! utilization; MIG instances report none): the sums ctld turns into active GPU-seconds.

use drover_fake_nvml::LIB_PATH;
use drover_noded::{gpu_usage, nvml};

#[test]
fn jobs_are_sampled_per_gpu_and_mig_instance() {
    let nvml = nvml::open(LIB_PATH).unwrap().expect("the fake library loads");
    let gpu = |i: u32| format!("GPU-6f3c2a10-0000-4000-8000-00000000000{i}");
    let jobs = vec![
        (5, vec![gpu(1), gpu(3)]),
        (6, vec!["MIG-0a1b2c3d-0000-4000-8000-000000000007".to_owned()]),
        (7, vec!["GPU-not-on-this-node".to_owned()]),
    ];
    let samples = gpu_usage::sample_jobs(&nvml, &jobs);
    let summary: Vec<(u32, u32, u32)> = samples.iter().map(|s| (s.job_id, s.gpus, s.utilization_percent_sum)).collect();
    // Job 5: 10 % + 30 %; job 6: one MIG instance, no utilization; job 7: nothing to sample.
    assert_eq!(summary, [(5, 2, 40), (6, 1, 0)]);
}
