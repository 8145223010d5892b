//! The simulated-time scenario tests: the real scheduling pass, usage decay and quota reclaim
//! driven by an injected clock over a made-up cluster, so a week of scheduling runs in seconds.
//! Jobs end when their (known) run time is over; a preempted job ends at the next step (its grace
//! time) and is requeued. The tests print GPU utilization under backlog, delivered share vs
//! configured share for two saturating teams, time to reclaim; `replay_*` drive [`super::replay`].

use crate::model::state::{Job, State};
use crate::policy::scheduler::schedule;
use drover_shared::UnixTime;
use drover_shared::config::Config;
use drover_shared::grammar::gres::parse_gres;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobId, JobInfo, JobSpec, JobState};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

const START: UnixTime = 1_700_000_000;

fn config(extra: &str) -> Config {
    let text = format!(
        r#"
cluster_name = "sim"
[controller]
address = "127.0.0.1:6817"
state_dir = "state"
# Borrowers are reclaimed one step after they start.
preempt_exempt_time = 0
[[nodes]]
names = "g[01-08]"
cpus = 64
real_memory = 512000
gpus = {{ h100 = 8 }}
[[partitions]]
name = "gpu"
nodes = "g[01-08]"
default = true
tres_billing_weights = "CPU=0.1,GRES/gpu:h100=8"
[[accounts]]
name = "teama"
shares = 60
[[accounts]]
name = "teamb"
shares = 40
[[users]]
name = "ann"
default_account = "teama"
[[users]]
name = "ben"
default_account = "teamb"
{extra}
"#
    );
    Config::parse(Path::new("/sim/cluster.toml"), &text).unwrap()
}

/// A deterministic pseudo-random stream (64-bit LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

struct Sim {
    state: State,
    now: UnixTime,
    /// Run time of each job (seconds), known to the simulator only.
    runtime: HashMap<JobId, i64>,
    /// GPU-seconds delivered per account.
    delivered: HashMap<String, f64>,
    busy_gpu_seconds: f64,
    /// Seconds per step.
    step: i64,
    /// The victims the last pass decided to preempt: requeued at the next step.
    preempted: Vec<JobId>,
}

impl Sim {
    fn new(extra: &str, step: i64) -> Sim {
        let mut state = State::new(Arc::new(config(extra)), 1);
        for (i, node) in state.nodes_mut().iter_mut().enumerate() {
            node.connection = Some(i as u64);
            node.responding = true;
            node.registered_once = true;
        }
        state.usage.updated = START;
        Sim {
            state,
            now: START,
            runtime: HashMap::new(),
            delivered: HashMap::new(),
            busy_gpu_seconds: 0.0,
            step,
            preempted: Vec::new(),
        }
    }

    fn submit(&mut self, user: &str, account: &str, gpus: u32, runtime: i64) -> JobId {
        let job_id = self.state.take_job_id();
        let minutes = u32::try_from((runtime + 59) / 60).unwrap();
        let (info, mut spec) = gpu_job(job_id, user, account, gpus, minutes, self.now);
        spec.script = "#!/bin/sh\n".into();
        spec.work_dir = "/".into();
        let info = JobInfo { state: Some(JobState::Pending), reason: "None".into(), priority: 1, ..info };
        let job = Job {
            info: info.into(),
            spec: Arc::new(spec),
            candidates: std::sync::Arc::from(["gpu".to_owned()]),
            node_filter: None,
            alloc: None,
            committed: true,
            launched_at: None,
            cancel_requested_by: None,
            started: false,
            reason_id: 0,
        };
        self.state.jobs.insert(job_id, job);
        self.runtime.insert(job_id, runtime);
        job_id
    }

    fn pending(&self, account: &str) -> usize {
        self.state.jobs.values().filter(|j| j.info.account == account && j.info.state() == JobState::Pending).count()
    }

    /// One step: end what is done (and requeue preempted jobs), charge usage, run a pass.
    fn step(&mut self) {
        self.now += self.step;
        let now = self.now;
        let victims: Vec<JobId> = std::mem::take(&mut self.preempted);
        let done: Vec<JobId> = self
            .state
            .jobs
            .values()
            .filter(|j| j.info.state() == JobState::Running)
            .filter(|j| j.info.start_time.unwrap_or(now) + self.runtime[&j.info.job_id] <= now)
            .map(|j| j.info.job_id)
            .collect();
        // Usage up to now, before anything is released.
        let charges: Vec<(String, String, f64)> = self
            .state
            .jobs
            .values()
            .filter(|j| j.alloc.is_some())
            .map(|j| {
                let weights = &self.state.config().partitions[0].tres_billing_weights;
                (
                    j.info.account.clone(),
                    j.info.user.clone(),
                    crate::model::tres::billing(weights, &crate::model::tres::of_job(&self.state, j)),
                )
            })
            .collect();
        let half_life = self.state.config().priority.decay_half_life;
        self.state.usage.advance(now, half_life, charges.iter().map(|(a, u, b)| (a.as_str(), u.as_str(), *b)));
        for job in self.state.jobs.values().filter(|j| j.alloc.is_some()) {
            #[allow(clippy::cast_precision_loss)]
            let gpus = job.alloc.as_ref().map_or(0, |a| a.nodes.iter().map(|n| n.gpus.len()).sum::<usize>()) as f64;
            #[allow(clippy::cast_precision_loss)]
            let seconds = self.step as f64;
            *self.delivered.entry(job.info.account.clone()).or_default() += gpus * seconds;
            self.busy_gpu_seconds += gpus * seconds;
        }
        for job_id in done {
            self.state.release_job(job_id, now);
            self.state.jobs.get_mut(&job_id).unwrap().info.state = Some(JobState::Completed);
        }
        for job_id in victims {
            self.state.release_job(job_id, now);
            let job = self.state.jobs.get_mut(&job_id).unwrap();
            job.info.state = Some(JobState::Pending);
            job.info.restarts += 1;
            job.info.start_time = None;
        }
        self.state.jobs.retain(|_, j| j.info.state() != JobState::Completed);
        let decisions = schedule(&mut self.state, now);
        self.preempted = decisions.preemptions.into_iter().map(|p| p.victim).collect();
        for start in decisions.starts {
            let job = self.state.jobs.get_mut(&start.job_id).unwrap();
            job.info.state = Some(JobState::Running);
            job.info.start_time = Some(now);
            job.alloc = Some(start.alloc);
        }
    }
}

/// Two teams saturate the cluster for a week with 1–8-GPU jobs of 1–6 hours. Fair Tree over
/// usage decayed with a 7-day half-life steers the delivered share toward 60/40.
#[test]
fn a_week_of_two_saturating_teams() {
    // Five-minute steps: jobs last whole hours, so nothing is lost but time.
    let mut sim = Sim::new("", 300);
    let mut rng = Lcg(42);
    let total_gpus = 64.0;
    for _ in 0..(7 * 86400 / sim.step) {
        for (user, account) in [("ann", "teama"), ("ben", "teamb")] {
            while sim.pending(account) < 20 {
                let gpus = [1, 2, 4, 8][usize::try_from(rng.next(4)).unwrap()];
                let runtime = 3600 * (1 + i64::try_from(rng.next(6)).unwrap());
                sim.submit(user, account, gpus, runtime);
            }
        }
        sim.step();
    }
    #[allow(clippy::cast_precision_loss)]
    let capacity = total_gpus * (sim.now - START) as f64;
    let utilization = sim.busy_gpu_seconds / capacity;
    let a = sim.delivered["teama"];
    let b = sim.delivered["teamb"];
    let share_a = a / (a + b);
    eprintln!(
        "simulated week: GPU utilization {:.1}%, teama {:.1}% (configured 60%), teamb {:.1}% (configured 40%)",
        utilization * 100.0,
        share_a * 100.0,
        (1.0 - share_a) * 100.0
    );
    assert!(utilization > 0.90, "utilization {utilization}");
    assert!((share_a - 0.6).abs() < 0.05, "teama got {share_a}");
}

/// Team B floods the pool while team A is idle; A's guarantee (32 GPUs) is lent. Then A submits
/// 32 one-GPU jobs: every one of them starts within two steps (one to preempt, one for the
/// victims' grace; a step stands for a 10 s grace time here), and no job of A's is ever preempted.
#[test]
fn reclaiming_a_guarantee_takes_one_grace_period() {
    let quotas = "[[quotas]]\naccount = \"teama\"\npartition = \"gpu\"\nguarantee = \"gres/gpu=32\"\n\
        [[quotas]]\naccount = \"teamb\"\npartition = \"gpu\"\nguarantee = \"gres/gpu=32\"\n";
    let mut sim = Sim::new(quotas, 10);
    for _ in 0..64 {
        sim.submit("ben", "teamb", 1, 86400);
    }
    sim.step();
    assert_eq!(sim.state.jobs.values().filter(|j| j.info.state() == JobState::Running).count(), 64);
    let submitted = sim.now;
    let owners: Vec<JobId> = (0..32).map(|_| sim.submit("ann", "teama", 1, 86400)).collect();
    let mut started_at = None;
    for _ in 0..10 {
        sim.step();
        if owners.iter().all(|j| sim.state.jobs[j].info.state() == JobState::Running) {
            started_at = Some(sim.now);
            break;
        }
    }
    let reclaim = started_at.expect("team A's jobs started") - submitted;
    let requeued = sim.state.jobs.values().filter(|j| j.info.restarts > 0).count();
    eprintln!("reclaim of a 32-GPU guarantee: {reclaim} s at {} s steps, {requeued} borrowed jobs requeued", sim.step);
    assert!(reclaim <= 2 * sim.step, "took {reclaim} s");
    assert_eq!(requeued, 32, "exactly the borrowed jobs");
    assert!(sim.state.jobs.values().filter(|j| j.info.account == "teama").all(|j| j.info.restarts == 0));
}

/// A job of `user` charging `account` that asks for `gpus` GPUs (and 8 CPUs each) on one node
/// for `minutes`, submitted at `submit` to `gpu`: its record (state left to the caller) and spec.
fn gpu_job(job_id: JobId, user: &str, account: &str, gpus: u32, minutes: u32, submit: UnixTime) -> (JobInfo, JobSpec) {
    let spec = JobSpec {
        gres_per_node: parse_gres(&format!("gpu:{gpus}")).unwrap(),
        cpus_per_task: Some(8 * gpus),
        time_limit: Some(TimeLimit::Minutes(minutes)),
        ..JobSpec::default()
    };
    let info = JobInfo {
        job_id,
        user: user.into(),
        account: account.into(),
        qos: "normal".into(),
        partition: "gpu".into(),
        submit_time: submit,
        eligible_time: Some(submit),
        time_limit: spec.time_limit,
        requeue: true,
        ..JobInfo::default()
    };
    (info, spec)
}

/// A recorded job of `account` asking for `gpus` GPUs on one node, submitted at `submit`, whose
/// run took `runtime` seconds.
fn recorded(job_id: JobId, account: &str, gpus: u32, submit: UnixTime, runtime: i64) -> super::Recorded {
    let user = if account == "teama" { "ann" } else { "ben" };
    let minutes = u32::try_from(runtime / 60 + 10).unwrap();
    let (info, spec) = gpu_job(job_id, user, account, gpus, minutes, submit);
    let info = JobInfo {
        state: Some(JobState::Completed),
        start_time: Some(submit),
        end_time: Some(submit + runtime),
        ..info
    };
    super::Recorded { info, spec }
}

/// Sixteen whole-node jobs of an hour on eight nodes: half start at once, half an hour later;
/// the run's figures say so, and a config without team B refuses B's jobs.
#[test]
fn replay_queues_what_does_not_fit_and_refuses_what_the_config_lacks() {
    let jobs: Vec<super::Recorded> = (1..=16).map(|i| recorded(i, "teama", 8, START, 3600)).collect();
    let bounds = super::Bounds::default();
    let out = super::replay(Arc::new(config("")), &jobs, START, START + 86_400, &bounds).unwrap();
    let a = &out.run.teams[0];
    assert_eq!((a.account.as_str(), a.jobs, a.never_started, a.refused), ("teama", 16, 0, 0));
    assert_eq!((a.wait_p50_s, a.wait_p95_s), (0, 3600));
    assert!((a.gpu_hours - 128.0).abs() < 1e-6, "{a:?}");
    assert_eq!(out.run.end, START + 7200);

    let mine: Vec<super::Recorded> = vec![recorded(1, "teama", 1, START, 60), recorded(2, "teamb", 1, START, 60)];
    let text = String::from(
        "cluster_name = \"sim\"\n[controller]\naddress = \"127.0.0.1:6817\"\n\
         state_dir = \"state\"\n[[nodes]]\nnames = \"g01\"\ncpus = 64\nreal_memory = 512000\ngpus = { h100 = 8 }\n\
         [[partitions]]\nname = \"gpu\"\nnodes = \"g01\"\ndefault = true\n[[accounts]]\nname = \"teama\"\n\
         [[users]]\nname = \"ann\"\ndefault_account = \"teama\"\n",
    );
    let without_b = Config::parse(Path::new("/sim/candidate.toml"), &text).unwrap();
    let out = super::replay(Arc::new(without_b), &mine, START, START + 86_400, &bounds).unwrap();
    let b = out.run.teams.iter().find(|t| t.account == "teamb").unwrap();
    assert_eq!((b.jobs, b.refused, b.never_started), (1, 1, 0), "refused is not never started");
}

/// An admin's job charged to an account outside the admin's associations ran (admins may charge
/// any account): the replay under the same config admits it, and refuses a plain user's.
#[test]
fn replay_admits_what_an_admin_charged_to_another_account() {
    let mut jobs = vec![recorded(1, "teamb", 1, START, 60), recorded(2, "teamb", 1, START, 60)];
    // Job 1: ann (an admin, associated with teama only) charged teamb. Job 2: root did.
    jobs[0].info.user = "ann".into();
    jobs[0].info.uid = 1000;
    jobs[1].info.user = "root".into();
    jobs[1].info.uid = 0;
    // Job 3: ben charged teama, outside his association and no admin: refused.
    let mut third = recorded(3, "teama", 1, START, 60);
    third.info.user = "ben".into();
    third.info.uid = 1001;
    jobs.push(third);
    let with_admin = config("").source_text.replace("[controller]\n", "[controller]\nadmins = [\"ann\"]\n");
    let with_admin = Config::parse(Path::new("/sim/cluster.toml"), &with_admin).unwrap();
    let out = super::replay(Arc::new(with_admin), &jobs, START, START + 86_400, &super::Bounds::default()).unwrap();
    let b = out.run.teams.iter().find(|t| t.account == "teamb").unwrap();
    assert_eq!((b.jobs, b.refused), (2, 0), "{b:?}");
    let a = out.run.teams.iter().find(|t| t.account == "teama").unwrap();
    assert_eq!((a.jobs, a.refused), (1, 1), "{a:?}");
}

/// Team B fills the pool with borrowed GPUs; team A's 32 one-GPU jobs a minute later reclaim
/// its guarantee: 32 of B's runs are preempted (and requeued), A waits a second or two, and the
/// replay of the same jobs under the config they ran under reproduces A's recorded waits.
#[test]
fn replay_counts_reclaims_and_their_lost_gpu_hours() {
    let quotas = "[[quotas]]\naccount = \"teama\"\npartition = \"gpu\"\nguarantee = \"gres/gpu=32\"\n\
        [[quotas]]\naccount = \"teamb\"\npartition = \"gpu\"\nguarantee = \"gres/gpu=32\"\n";
    let mut jobs: Vec<super::Recorded> = (1..=64).map(|i| recorded(i, "teamb", 1, START, 7200)).collect();
    jobs.extend((65..=96).map(|i| recorded(i, "teama", 1, START + 60, 600)));
    let out = super::replay(Arc::new(config(quotas)), &jobs, START, START + 86_400, &super::Bounds::default()).unwrap();
    let a = out.run.teams.iter().find(|t| t.account == "teama").unwrap();
    let b = out.run.teams.iter().find(|t| t.account == "teamb").unwrap();
    assert_eq!(b.preemptions, 32, "{b:?}");
    assert!((b.lost_gpu_hours - 32.0 * 61.0 / 3600.0).abs() < 0.01, "{b:?}");
    assert_eq!(a.preemptions, 0);
    assert!(a.wait_p95_s <= 2, "{a:?}");
    assert_eq!(a.guaranteed_gpus, 32);
    let fidelity = super::fidelity(&jobs, &out);
    assert_eq!(fidelity.jobs, 96, "every job ran once in the record and started in the replay");
}
