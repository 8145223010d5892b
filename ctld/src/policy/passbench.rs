//! An in-process benchmark of the scheduling pass at scale: a made-up cluster of GPU nodes (two
//! GPU types), many teams, and a queue of pending jobs of mixed GPU types and sizes, held in the
//! same `State` the core owns and scheduled by the real pass. It reports each pass's time split
//! into the main pass and the backfill part (reservations), and the resident memory the pending
//! jobs added. No sockets or database, so the figures are repeatable (and can run under
//! callgrind); `bench/pass.sh` drives it.

use crate::model::state::{Job, State};
use crate::policy::scheduler::schedule;
use drover_shared::UnixTime;
use drover_shared::config::Config;
use drover_shared::grammar::gres::parse_gres;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobId, JobInfo, JobSpec, JobState};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

const START: UnixTime = 1_700_000_000;
/// Teams (accounts), one user each.
const TEAMS: usize = 8;

/// A deterministic pseudo-random stream (64-bit LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(self.0 >> 33).unwrap_or(0) % n
    }
}

fn config(nodes: usize, quotas: bool) -> Config {
    let half = nodes / 2;
    let mut text = format!(
        r#"
cluster_name = "bench"
[controller]
address = "127.0.0.1:6817"
state_dir = "state"
[[nodes]]
names = "h[{first:06}-{half:06}]"
cpus = 64
real_memory = 512000
gpus = {{ h100 = 8 }}
[[nodes]]
names = "a[{first:06}-{rest:06}]"
cpus = 64
real_memory = 512000
gpus = {{ a100 = 8 }}
[[partitions]]
name = "gpu"
nodes = "h[{first:06}-{half:06}],a[{first:06}-{rest:06}]"
default = true
max_time = "7-00:00:00"
default_mem_per_cpu = 1000
"#,
        first = 1,
        rest = nodes - half,
    );
    for t in 0..TEAMS {
        let _ = write!(
            text,
            "[[accounts]]\nname = \"team{t}\"\nshares = {}\n[[users]]\nname = \"user{t}\"\ndefault_account = \"team{t}\"\n",
            10 + 5 * t
        );
    }
    if quotas {
        // Eight teams' quotas in the one pool: each guaranteed a tenth of the GPUs (80 % of the
        // pool guaranteed in all), bursting to a quarter; the even teams lend only half their
        // idle guarantee, so borrowers meet the lending check too.
        let gpus = nodes * 8;
        let (guarantee, burst) = ((gpus / 10).max(1), (gpus / 4).max(1));
        for t in 0..TEAMS {
            let _ = write!(
                text,
                "[[quotas]]\naccount = \"team{t}\"\npartition = \"gpu\"\nguarantee = \"gres/gpu={guarantee}\"\nburst = \"gres/gpu={burst}\"\n"
            );
            if t % 2 == 0 {
                let _ = writeln!(text, "lend = \"gres/gpu={}\"", guarantee / 2);
            }
        }
    }
    Config::parse(Path::new("/bench/cluster.toml"), &text).expect("benchmark config")
}

/// The made-up cluster and its queue.
pub struct Bench {
    state: State,
    rng: Lcg,
    now: UnixTime,
    /// Whether each pass is preceded by the dependency refresh (dependent jobs queued).
    refresh: bool,
}

/// One measured pass.
#[derive(Debug, Clone, Copy)]
pub struct PassReport {
    /// Wall time of the whole pass (with the dependency refresh before it, when dependent jobs
    /// are queued), seconds.
    pub total_s: f64,
    /// Of which spent planning backfill reservations, seconds.
    pub backfill_s: f64,
    /// Jobs started by the pass.
    pub started: usize,
    /// Jobs still pending after it.
    pub pending: usize,
    /// Pending jobs it considered (not held, begin time come).
    pub considered: usize,
    /// Backfill reservations held after it, and of those carried over unchecked (the pass's
    /// planning time was spent).
    pub reservations: usize,
    pub carried: usize,
}

impl Bench {
    /// A cluster of `nodes` nodes (8 GPUs, 64 CPUs each; half H100, half A100), all up; with
    /// `quotas`, each of the eight teams has a guaranteed quota in the pool.
    pub fn new(nodes: usize, quotas: bool) -> Bench {
        let mut state = State::new(Arc::new(config(nodes.max(2), quotas)), 1);
        for (i, node) in state.nodes_mut().iter_mut().enumerate() {
            node.connection = Some(i as u64);
            node.responding = true;
            node.registered_once = true;
        }
        state.usage.updated = START;
        Bench { state, rng: Lcg(7), now: START, refresh: false }
    }

    /// Submits `count` jobs: 1, 2, 4 or 8 GPUs on one node, or 2 whole nodes; H100, A100 or any
    /// type; 8 CPUs per GPU; time limits of 1–24 hours; a random team.
    pub fn submit(&mut self, count: usize) {
        for _ in 0..count {
            let team = self.rng.next(TEAMS);
            let gpu_type = ["h100:", "a100:", ""][self.rng.next(3)];
            let (nodes, gpus) = [(1, 1), (1, 1), (1, 2), (1, 4), (1, 8), (2, 8)][self.rng.next(6)];
            let hours = 1 + u32::try_from(self.rng.next(24)).unwrap_or(0);
            let spec = JobSpec {
                script: b"#!/bin/sh\n".to_vec(),
                work_dir: "/".into(),
                nodes_min: Some(nodes),
                gres_per_node: parse_gres(&format!("gpu:{gpu_type}{gpus}")).expect("gres"),
                cpus_per_task: Some(8 * gpus),
                time_limit: Some(TimeLimit::Minutes(hours * 60)),
                ..JobSpec::default()
            };
            self.insert(spec, team);
        }
    }

    /// Submits `count` one-GPU jobs that wait on the newest running job (`afterok`; the oldest
    /// end first in [`Bench::end_some`]) and returns its id;
    /// from then on each pass is preceded by the dependency refresh, as in ctld.
    pub fn submit_dependent(&mut self, count: usize) -> Result<JobId, String> {
        let target = self
            .state
            .jobs
            .values()
            .rev()
            .find(|j| j.info.state() == JobState::Running)
            .map(|j| j.info.job_id)
            .ok_or("no running job to wait on")?;
        for i in 0..count {
            let spec = JobSpec {
                script: b"#!/bin/sh\n".to_vec(),
                work_dir: "/".into(),
                gres_per_node: parse_gres("gpu:1").expect("gres"),
                cpus_per_task: Some(8),
                time_limit: Some(TimeLimit::Minutes(60)),
                dependency: Some(format!("afterok:{target}")),
                ..JobSpec::default()
            };
            self.insert(spec, i % TEAMS);
        }
        self.refresh = true;
        Ok(target)
    }

    fn insert(&mut self, spec: JobSpec, team: usize) {
        let job_id: JobId = self.state.take_job_id();
        let info = JobInfo {
            job_id,
            name: "bench".into(),
            user: format!("user{team}"),
            uid: 2000 + u32::try_from(team).unwrap_or(0),
            account: format!("team{team}"),
            qos: "normal".into(),
            partition: "gpu".into(),
            state: Some(JobState::Pending),
            reason: "None".into(),
            priority: 1,
            submit_time: self.now,
            eligible_time: Some(self.now),
            time_limit: spec.time_limit,
            ..JobInfo::default()
        };
        // As ctld holds it: the resident half, shared with the jobs submitted alike.
        let spec = self.state.specs.resident(&spec);
        let job = Job {
            info: info.into(),
            spec,
            // As ctld holds it: shared with the jobs of the same list.
            candidates: self.state.partition_lists.share(&Arc::from(["gpu".to_owned()])),
            node_filter: None,
            alloc: None,
            committed: true,
            launched_at: None,
            cancel_requested_by: None,
            started: false,
            reason_id: 0,
        };
        self.state.jobs.insert(job_id, job);
    }

    /// Runs one pass at the bench's clock and starts what it chose.
    pub fn pass(&mut self) -> PassReport {
        let began = Instant::now();
        if self.refresh {
            crate::policy::dependency::refresh(&mut self.state, self.now);
        }
        let starts = schedule(&mut self.state, self.now).starts;
        let total_s = began.elapsed().as_secs_f64();
        let backfill_s = self.state.last_pass.backfill.as_secs_f64();
        let started = starts.len();
        // The pass already holds each start's allocation on its nodes.
        for start in starts {
            let job = self.state.jobs.get_mut(&start.job_id).expect("started job");
            job.info.state = Some(JobState::Running);
            job.info.start_time = Some(self.now);
            job.alloc = Some(start.alloc);
        }
        let pending = self.state.jobs.values().filter(|j| j.info.state() == JobState::Pending).count();
        let considered = self.state.last_pass.considered;
        let (reservations, carried) = (self.state.reservations.len(), self.state.last_pass.carried);
        PassReport { total_s, backfill_s, started, pending, considered, reservations, carried }
    }

    /// Ends `count` running jobs (the oldest ids first) and advances the clock a minute.
    pub fn end_some(&mut self, count: usize) {
        self.now += 60;
        let done: Vec<JobId> = self
            .state
            .jobs
            .values()
            .filter(|j| j.info.state() == JobState::Running)
            .take(count)
            .map(|j| j.info.job_id)
            .collect();
        for job_id in done {
            self.state.release_job(job_id, self.now);
            self.state.jobs.remove(&job_id);
        }
    }
}

/// This process's resident set, KiB (from `/proc/self/statm`).
pub fn rss_kib() -> u64 {
    let page_kib = 4;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .map_or(0, |pages| pages * page_kib)
}
