//! Backfill reservations measured from outside: a real ctld with sixteen simulated nodes of 8 GPUs
//! (`drover-simnode`), as in issue 16. Twelve nodes run a long whole-node job each, and twelve
//! higher-priority whole-node jobs wait for those nodes by name (`-w`), each holding a
//! reservation; a flood of 1-GPU jobs (time limit one minute, running 30–55 s), ranked below,
//! keeps the other four nodes full. A 4-node × 8-GPU job ranked between them is submitted: it
//! needs those four nodes, gets a reservation for when their jobs reach their time limits and
//! keeps it however many 1-GPU jobs follow, so it starts within a minute (the longest time limit
//! of the jobs on the nodes it can use) plus slack. With ten reservations rebuilt every pass, the
//! twelve waiting whole-node jobs took all ten and the wide job, with none, waited for the flood
//! to end. The start estimate `drover why` showed when the reservation was made is compared
//! with the start `sacct` records.

use drover_e2e::sim::{Run, SimCluster};
use std::time::{Duration, Instant};

const NODES: u32 = 16;
/// Nodes that run a long job, each wanted by a higher-priority whole-node job.
const LONG: u32 = 12;
const GPUS_PER_NODE: u32 = 8;
/// The flood's time limit (minutes, as `sbatch -t` takes it) and its run times (seconds).
const LIMIT_MINUTES: u32 = 1;
const RUN_MIN: u32 = 30;
const RUN_SPREAD: u32 = 26;
/// How long the flood goes on after the wide job's reservation is made (seconds).
const FLOOD: u64 = 150;
/// The wide job must start within the longest time limit of the jobs running when it was
/// submitted (none started later may delay it) plus this slack for passes, launches and the
/// loaded CI machine.
const SLACK: i64 = 20;

fn start() -> SimCluster {
    drover_e2e::sim::one_team("backfill", NODES as usize, GPUS_PER_NODE)
}

/// The job stream's run times: a fixed pseudo-random sequence (xorshift).
fn draw(seed: &mut u32, n: u32) -> u32 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 17;
    *seed ^= *seed << 5;
    *seed % n
}

/// A job of `nodes` × `gpus` GPUs (4 CPUs per GPU) that runs `seconds` with a time limit of
/// `minutes`, at `nice` (a lower nice ranks higher: all else is equal, the same user and
/// account), on the node `on` if given.
struct Job<'a> {
    nodes: u32,
    gpus: u32,
    seconds: u32,
    minutes: u32,
    nice: u32,
    on: Option<&'a str>,
}

/// A 1-GPU job of the flood.
fn small(seconds: u32) -> Job<'static> {
    Job { nodes: 1, gpus: 1, seconds, minutes: LIMIT_MINUTES, nice: 5000, on: None }
}

/// Submits a job; returns its id.
fn submit(cluster: &SimCluster, job: &Job, name: &str) -> u32 {
    let script = cluster.root().join("job.sh");
    if !script.exists() {
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    }
    let (nodes, gres, cpus) = (job.nodes.to_string(), format!("--gres=gpu:{}", job.gpus), (job.gpus * 4).to_string());
    let (limit, comment, nice) =
        (job.minutes.to_string(), format!("sim:{}", job.seconds), format!("--nice={}", job.nice));
    let mut args = vec!["--parsable", "-N", &nodes, &gres, "-c", &cpus, "-t", &limit, &nice, "--comment", &comment];
    if let Some(node) = job.on {
        args.extend(["-w", node]);
    }
    let script = script.to_string_lossy().into_owned();
    args.extend(["-J", name, &script]);
    cluster.ok("sbatch", &args).trim().parse().unwrap()
}

/// The unix time of the start `drover why` estimates, if the job holds a reservation.
fn estimate(cluster: &SimCluster, job: u32) -> Option<(i64, String)> {
    let text = cluster.ok("drover", &["why", "--unix", &job.to_string()]);
    let line = text.lines().find(|l| l.starts_with("estimated start:") && l.contains("(backfill reservation)"))?;
    let at = line.split("unix time ").nth(1)?.split(')').next()?.parse().ok()?;
    Some((at, text))
}

fn unix_now() -> i64 {
    i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()).unwrap()
}

#[test]
fn a_wide_job_starts_within_a_time_limit_under_a_flood_of_small_jobs() {
    let cluster = start();
    let mut seed = 16_u32;
    let mut run_time = || RUN_MIN + draw(&mut seed, RUN_SPREAD);
    // Long whole-node jobs on the first twelve nodes, then the higher-priority jobs that wait
    // for those nodes (a reservation each).
    let names: Vec<String> = (1..=LONG).map(|i| format!("sim{i:02}")).collect();
    let long: Vec<u32> = names
        .iter()
        .map(|n| {
            let job = Job { nodes: 1, gpus: GPUS_PER_NODE, seconds: 900, minutes: 15, nice: 5000, on: Some(n) };
            submit(&cluster, &job, "long")
        })
        .collect();
    cluster.wait_running(&long, "the long jobs");
    for name in &names {
        let job = Job { nodes: 1, gpus: GPUS_PER_NODE, seconds: 60, minutes: 15, nice: 0, on: Some(name) };
        submit(&cluster, &job, "waiting");
    }
    // The flood fills the other four nodes and queues more.
    let free = (NODES - LONG) * GPUS_PER_NODE;
    for _ in 0..free + 16 {
        submit(&cluster, &small(run_time()), "small");
    }
    cluster.wait_for("the cluster to fill", || {
        let states = cluster.states();
        (states.values().filter(|s| *s == "RUNNING").count() >= (LONG + free) as usize).then_some(())
    });
    let job = Job { nodes: 4, gpus: GPUS_PER_NODE, seconds: 10, minutes: LIMIT_MINUTES, nice: 2000, on: None };
    let wide = submit(&cluster, &job, "wide");
    // Its reservation, as `drover why` shows it (checked at the end, after the wait).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut reserved = estimate(&cluster, wide);
    while reserved.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        reserved = estimate(&cluster, wide);
    }
    let reserved_at = unix_now();
    let estimated = reserved.as_ref().map(|(at, _)| *at);
    let why = reserved.map_or_else(|| cluster.ok("drover", &["why", &wide.to_string()]), |(_, text)| text);
    eprintln!("10 s after the submission: {why}");
    // More 1-GPU jobs, faster than the four nodes run them (32 GPUs, 42 s a job on average:
    // about 0.8 jobs a second; this sends 2).
    let began = Instant::now();
    let mut tick = 0u64;
    let mut started = None;
    let mut estimates: Vec<(u64, Option<i64>)> = Vec::new();
    while began.elapsed() < Duration::from_secs(FLOOD) {
        submit(&cluster, &small(run_time()), "small");
        tick += 1;
        if tick.is_multiple_of(4) && started.is_none() {
            // How the estimate moves while the job waits (it should only move earlier).
            let now = estimate(&cluster, wide).map(|(at, _)| at);
            if estimates.last().is_none_or(|(_, last)| *last != now) {
                estimates.push((began.elapsed().as_secs(), now));
            }
        }
        if tick.is_multiple_of(4) && cluster.states().get(&wide).is_some_and(|s| s == "RUNNING") {
            started.get_or_insert(began.elapsed());
            // Keep flooding a little after the start, then stop: the figure is taken.
            if began.elapsed() > started.unwrap() + Duration::from_secs(5) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500 * tick).saturating_sub(began.elapsed()));
    }
    let run: Run = cluster.wait_up_to("the wide job's start in sacct", Duration::from_secs(240), || {
        cluster.runs().into_iter().find(|r| r.job == wide && r.start.is_some())
    });
    let (submitted, actual) = (run.submit.unwrap(), run.start.unwrap());
    let wait = actual - submitted;
    let bound = i64::from(LIMIT_MINUTES) * 60 + SLACK;
    eprintln!("estimates while it waited (seconds into the later flood, estimated start): {estimates:?}");
    eprintln!(
        "wide job {wide}: submitted {submitted}, reserved by {reserved_at}, estimated start {estimated:?}, \
         started {actual}: waited {wait} s (bound {bound} s); estimate error (actual − estimated) {:?} s",
        estimated.map(|e| actual - e)
    );
    assert!(wait <= bound, "the wide job waited {wait} s (bound {bound} s)\n{}", cluster.logs());
    // The estimate comes from the running jobs' time limits; they end earlier, so the job may
    // start earlier than estimated, but never later than the estimate plus the slack.
    let estimated = estimated.expect("the wide job held a reservation");
    assert!(
        actual <= estimated + SLACK,
        "started at {actual}, {} s after the estimate {estimated}",
        actual - estimated
    );
}
