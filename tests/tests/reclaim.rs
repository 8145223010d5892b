//! Guarantee reclaim measured from outside: a real ctld with 16 simulated 8-GPU nodes
//! (`drover-simnode`, whose jobs ignore SIGTERM so each victim stays in its grace time), three
//! teams with guarantees 40/24/24 GPUs and bursts 72/96/48. Teams A and B fill the cluster with
//! whole-node jobs; team C then reclaims its guarantee three ways: eight one-GPU jobs released at
//! once, eight more submitted one after another, and five eight-GPU jobs released at once (only
//! one of which is inside C's guarantee). Everything is read back through `sacct -D` (runs,
//! states, GPUs, times) and `drover audit` (each preemption and the job it was for), and checked
//! against the invariants of issue 16: the GPUs preempted for a reclaim are at most the need plus
//! the smallest victim that covers it, no team that held its guarantee is pushed below it, and no
//! run is preempted before the minimum run time (`preempt_exempt_time`).

use drover_e2e::sim::SimCluster;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const GRACE: u32 = 2;
const EXEMPT: i64 = 6;
const GPUS_PER_NODE: u32 = 8;
/// Team, guarantee, burst (GPUs).
const TEAMS: [(&str, u32, u32); 3] = [("ta", 40, 72), ("tb", 24, 96), ("tc", 24, 48)];

/// ctld with 16 simulated 8-GPU nodes whose jobs ignore SIGTERM, and the three teams' quotas.
fn start() -> SimCluster {
    let mut config = format!(
        r#"kill_wait = {GRACE}
preempt_exempt_time = {EXEMPT}
min_job_age = 600
[[nodes]]
names = "sim[01-16]"
cpus = 64
real_memory = 512000
gpus = {{ h100 = {GPUS_PER_NODE} }}
[[partitions]]
name = "gpu"
nodes = "sim[01-16]"
default = true
[[users]]
name = "root"
default_account = "ta"
accounts = ["ta", "tb", "tc"]
"#
    );
    for (team, guarantee, burst) in TEAMS {
        config.push_str(&format!(
            "[[accounts]]\nname = \"{team}\"\n[[quotas]]\naccount = \"{team}\"\npartition = \"gpu\"\n\
             guarantee = \"gres/gpu={guarantee}\"\nburst = \"gres/gpu={burst}\"\n"
        ));
    }
    SimCluster::start("reclaim", 16, true, "default_account = \"ta\"", &config)
}

/// Submits one job; returns its id.
fn submit(cluster: &SimCluster, team: &str, gpus: u32, held: bool) -> u32 {
    let script = cluster.root().join("job.sh");
    if !script.exists() {
        std::fs::write(&script, "#!/bin/sh\nsleep 3600\n").unwrap();
    }
    let gres = format!("--gres=gpu:{gpus}");
    let cpus = (gpus * 2).to_string();
    let mut args = vec!["--parsable", "-A", team, &gres, "-c", &cpus, "-t", "60", "-J", team];
    if held {
        args.push("--hold");
    }
    let script = script.to_string_lossy().into_owned();
    args.push(&script);
    cluster.ok("sbatch", &args).trim().parse().unwrap()
}

/// Submits `count` jobs held, then releases them with one `scontrol release`.
fn release_at_once(cluster: &SimCluster, team: &str, gpus: u32, count: usize) -> Vec<u32> {
    let jobs: Vec<u32> = (0..count).map(|_| submit(cluster, team, gpus, true)).collect();
    let list: Vec<String> = jobs.iter().map(u32::to_string).collect();
    cluster.ok("scontrol", &["release", &list.join(",")]);
    jobs
}

/// What one reclaim phase cost.
#[derive(Debug)]
struct Phase {
    name: &'static str,
    /// GPUs the reclaiming jobs were owed (what they asked, up to what is left of the guarantee).
    need: u32,
    victims: Vec<u32>,
    preempted_gpus: u32,
    smallest_victim: u32,
}

#[test]
fn reclaim_preempts_only_what_is_owed() {
    let cluster = start();
    // Timed from a running cluster (building the binaries is not part of the scenario).
    let started = Instant::now();
    let gpus_of_team = |team: &str| TEAMS.iter().find(|t| t.0 == team).unwrap().1;

    // Fill: A up to its burst, B the rest, all whole-node jobs.
    let (a_jobs, b_jobs) = (72 / GPUS_PER_NODE, (128 - 72) / GPUS_PER_NODE);
    let mut fill: Vec<u32> = (0..a_jobs).map(|_| submit(&cluster, "ta", GPUS_PER_NODE, false)).collect();
    fill.extend((0..b_jobs).map(|_| submit(&cluster, "tb", GPUS_PER_NODE, false)));
    cluster.wait_running(&fill, "the cluster to fill");
    eprintln!("cluster full after {:?}", started.elapsed());
    // Past the minimum run time, so the fill jobs may be preempted.
    std::thread::sleep(Duration::from_secs(EXEMPT as u64 + 1));

    let mut phases = Vec::new();
    let mut seen = 0;
    let mut phase = |name, need: u32, cluster: &SimCluster, seen: &mut usize| {
        eprintln!("{name}: all running after {:?}", started.elapsed());
        // Let any further (wrong) preemption show: two grace times and a few passes.
        std::thread::sleep(Duration::from_secs(u64::from(2 * GRACE) + 2));
        let all = cluster.preemptions();
        let new: Vec<(i64, u32, u32)> = all[*seen..].to_vec();
        *seen = all.len();
        let runs = cluster.runs();
        let size =
            |victim: u32| runs.iter().filter(|r| r.job == victim && r.preempted()).map(|r| r.gpus).max().unwrap_or(0);
        let victims: Vec<u32> = new.iter().map(|p| p.1).collect();
        let preempted_gpus = victims.iter().map(|v| size(*v)).sum();
        // The smallest borrowed job that alone covers the need: every fill job is whole-node.
        let smallest_victim = GPUS_PER_NODE;
        phases.push(Phase { name, need, victims, preempted_gpus, smallest_victim });
    };

    // 1. Eight one-GPU jobs of C, released at once.
    let c1 = release_at_once(&cluster, "tc", 1, 8);
    cluster.wait_running(&c1, "C's eight one-GPU jobs released at once");
    phase("8 x 1 GPU released at once", 8, &cluster, &mut seen);

    // 2. Eight more, one after another.
    let mut c2 = Vec::new();
    for _ in 0..8 {
        c2.push(submit(&cluster, "tc", 1, false));
        std::thread::sleep(Duration::from_millis(300));
    }
    cluster.wait_running(&c2, "C's eight one-GPU jobs submitted one after another");
    phase("8 x 1 GPU one after another", 8, &cluster, &mut seen);

    // 3. Five eight-GPU jobs at once: C holds 16 of its 24, so one of them is owed.
    let c3 = release_at_once(&cluster, "tc", GPUS_PER_NODE, 5);
    cluster.wait_for("one of C's eight-GPU jobs to run", || {
        let states = cluster.states();
        (c3.iter().filter(|j| states.get(j).is_some_and(|s| s == "RUNNING")).count() >= 1).then_some(())
    });
    phase("5 x 8 GPU released at once", gpus_of_team("tc") - 16, &cluster, &mut seen);

    let runs = cluster.runs();
    let preemptions = cluster.preemptions();
    eprintln!("{:<30} {:>5} {:>8} {:>14}", "reclaim", "need", "victims", "GPUs preempted");
    for p in &phases {
        eprintln!("{:<30} {:>5} {:>8} {:>14}", p.name, p.need, p.victims.len(), p.preempted_gpus);
    }
    let mut failures = Vec::new();

    // GPUs preempted for a reclaim ≤ the need plus the smallest victim that covers it.
    for p in &phases {
        if p.preempted_gpus > p.need + p.smallest_victim {
            failures.push(format!(
                "{}: {} GPUs preempted ({} jobs {:?}) for a need of {}",
                p.name,
                p.preempted_gpus,
                p.victims.len(),
                p.victims,
                p.need
            ));
        }
        // Whole-node victims: the fewest that cover the need.
        let fewest = p.need.div_ceil(GPUS_PER_NODE) as usize;
        if p.victims.len() != fewest {
            failures.push(format!("{}: {} victims, {fewest} cover the need", p.name, p.victims.len()));
        }
    }

    // No team that held its guarantee is pushed below it by a preemption.
    for victim in runs.iter().filter(|r| r.preempted()) {
        let Some(t) = victim.end else { continue };
        let guarantee = gpus_of_team(&victim.team);
        let team_runs = runs.iter().filter(|r| r.team == victim.team);
        let before: u32 = team_runs.clone().filter(|r| r.holds_after(t - 1)).map(|r| r.gpus).sum();
        let after: u32 = team_runs.filter(|r| r.holds_after(t)).map(|r| r.gpus).sum();
        if before >= guarantee && after < guarantee {
            failures.push(format!(
                "preempting job {} took team {} from {before} to {after} GPUs, below its guarantee of {guarantee}",
                victim.job, victim.team
            ));
        }
    }

    // No run is preempted before it ran the minimum run time.
    for (at, victim, for_job) in &preemptions {
        let run = runs
            .iter()
            .find(|r| r.job == *victim && r.start.is_some_and(|s| s <= *at) && r.end.is_none_or(|e| e >= *at));
        if let Some(start) = run.and_then(|r| r.start)
            && at - start < EXEMPT
        {
            failures.push(format!("job {victim} preempted for {for_job} {}s after its run started", at - start));
        }
    }
    let mut count: HashMap<u32, usize> = HashMap::new();
    for (_, victim, _) in &preemptions {
        *count.entry(*victim).or_default() += 1;
    }
    eprintln!(
        "preempted runs: {}, jobs preempted more than once: {}, elapsed {:?}",
        preemptions.len(),
        count.values().filter(|c| **c > 1).count(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.logs());
}
