//! The `drover simulate` benchmark: writes a synthetic accounting database (a week of jobs from
//! eight teams on a made-up GPU cluster, stored as ctld stores them) and times the replay of it
//! under the cluster's config and a candidate (one team's shares and guarantee doubled) through
//! the same path ctld serves (`core::simulate::run`). `bench/simulate.sh` drives it through
//! `src/bin/drover-simbench.rs`.

use drover_shared::UnixTime;
use drover_shared::config::Config;
use drover_shared::grammar::gres::parse_gres;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobInfo, JobSpec, JobState};
use drover_shared::proto::simulate::{SimulateReport, SimulateRequest};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

/// When the synthetic week starts.
pub const START: UnixTime = 1_767_225_600;
/// Teams (accounts), one user each.
const TEAMS: usize = 8;

/// The benchmark cluster's config: `nodes` nodes of 8 GPUs and 64 CPUs in one partition, eight
/// teams with shares 10..45; with `candidate`, team0's shares and guarantee are doubled.
pub fn config_text(nodes: usize, candidate: bool) -> String {
    let mut text = format!(
        "cluster_name = \"simbench\"\n[controller]\naddress = \"127.0.0.1:6817\"\nstate_dir = \"state\"\n\
         [[nodes]]\nnames = \"g[{first:05}-{nodes:05}]\"\ncpus = 64\nreal_memory = 512000\ngpus = {{ h100 = 8 }}\n\
         [[partitions]]\nname = \"gpu\"\nnodes = \"g[{first:05}-{nodes:05}]\"\ndefault = true\nmax_time = \"2-00:00:00\"\n\
         default_mem_per_cpu = 1000\ntres_billing_weights = \"CPU=0.1,GRES/gpu=8\"\n",
        first = 1,
    );
    let gpus = nodes * 8;
    for t in 0..TEAMS {
        let boost = if candidate && t == 0 { 2 } else { 1 };
        let _ = write!(
            text,
            "[[accounts]]\nname = \"team{t}\"\nshares = {}\n[[users]]\nname = \"user{t}\"\ndefault_account = \"team{t}\"\n",
            (10 + 5 * t) * boost
        );
        if t < 2 {
            let _ = write!(
                text,
                "[[quotas]]\naccount = \"team{t}\"\npartition = \"gpu\"\nguarantee = \"gres/gpu={}\"\n",
                gpus / 20 * boost
            );
        }
    }
    text
}

/// A deterministic pseudo-random stream (64-bit LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// `jobs` jobs over `days` days (arrivals heavier by day than by night), 1–16 GPUs, run times
/// of 5 minutes to 12 hours, about 85 % of the GPU-hours of `nodes` nodes.
pub fn workload(nodes: usize, jobs: usize, days: i64) -> Vec<(JobInfo, JobSpec)> {
    let mut rng = Lcg(7);
    let span = days * 86_400;
    let mut out = Vec::with_capacity(jobs);
    // Mean GPU-seconds per job for 85 % of the capacity.
    #[allow(clippy::cast_precision_loss)]
    let mean_gpu_secs = (nodes * 8) as f64 * span as f64 * 0.85 / jobs.max(1) as f64;
    for i in 0..jobs {
        // Two of three arrivals in the day's busy half.
        let mut submit = START + i64::try_from(rng.next(u64::try_from(span).unwrap_or(1))).unwrap_or(0);
        if rng.next(3) < 2 {
            let day = (submit - START) / 86_400;
            submit = START + day * 86_400 + 8 * 3600 + i64::try_from(rng.next(12 * 3600)).unwrap_or(0);
        }
        let team = usize::try_from(rng.next(TEAMS as u64)).unwrap_or(0);
        let gpus: u32 = [1, 1, 1, 2, 2, 4, 4, 8, 8, 16][usize::try_from(rng.next(10)).unwrap_or(0)];
        // Run time: exponential around the mean (the mix averages 4.7 GPUs a job), 5 min to 12 h.
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
        let runtime = {
            let u = (rng.next(10_000) as f64 + 0.5) / 10_000.0;
            let mean = mean_gpu_secs / 4.7;
            (-u.ln() * mean).clamp(300.0, 43_200.0) as i64
        };
        let minutes = u32::try_from((runtime * 3 / 2 + 59) / 60).unwrap_or(u32::MAX).min(2880);
        let (n_nodes, per_node) = if gpus > 8 { (gpus / 8, 8) } else { (1, gpus) };
        let spec = JobSpec {
            work_dir: "/".into(),
            gres_per_node: parse_gres(&format!("gpu:{per_node}")).expect("gres"),
            cpus_per_task: Some(8 * per_node),
            nodes_min: Some(n_nodes),
            time_limit: Some(TimeLimit::Minutes(minutes)),
            ..JobSpec::default()
        };
        let start = submit + i64::try_from(rng.next(600)).unwrap_or(0);
        let info = JobInfo {
            job_id: u32::try_from(i + 1).unwrap_or(u32::MAX),
            name: "bench".into(),
            user: format!("user{team}"),
            uid: 10_000 + u32::try_from(team).unwrap_or(0),
            account: format!("team{team}"),
            qos: "normal".into(),
            partition: "gpu".into(),
            state: Some(JobState::Completed),
            submit_time: submit,
            eligible_time: Some(submit),
            start_time: Some(start),
            end_time: Some(start + runtime),
            time_limit: Some(TimeLimit::Minutes(minutes)),
            num_nodes: n_nodes,
            requeue: true,
            ..JobInfo::default()
        };
        out.push((info, spec));
    }
    out
}

/// Writes the synthetic database at `path`.
pub fn generate(path: &Path, nodes: usize, jobs: usize, days: i64) -> crate::error::Result<()> {
    crate::store::accounting::replay::write_recorded(path, &workload(nodes, jobs, days))?;
    Ok(())
}

/// Replays the database at `path` (window: the synthetic `days` days) under the config of
/// `nodes` nodes and its candidate, as ctld would.
pub fn replay(
    path: &Path,
    nodes: usize,
    days: i64,
    max_jobs: u32,
    resolution_s: Option<i64>,
) -> crate::error::Result<SimulateReport> {
    let parse = |candidate| Config::parse(Path::new("/bench/cluster.toml"), &config_text(nodes, candidate));
    let current = Arc::new(parse(false)?);
    let candidate = Arc::new(parse(true)?);
    let request = SimulateRequest {
        config_path: "/bench/candidate.toml".into(),
        config_text: String::new(),
        from: Some(START),
        to: Some(START + days * 86_400),
        max_jobs,
        resolution_s,
    };
    let budget = std::time::Duration::from_secs(3600);
    super::simulate::run(path, current, candidate, &request, drover_shared::now(), budget)
        .map_err(|r| crate::error::Error::Refused(r.detail))
}
