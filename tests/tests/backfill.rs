//! Backfill reservations measured from outside: a real ctld with eight simulated nodes of 8 GPUs
//! (`drover-simnode`). A flood of 1-GPU jobs (time limit one minute, running 30–55 s) keeps the
//! cluster full; a 4-node × 8-GPU job is submitted into it, ranked above the flood, and gets a
//! backfill reservation; then a second flood of 1-GPU jobs ranked *above* the wide job arrives
//! faster than the cluster runs it. Reservations persist across passes and bind the jobs
//! submitted after them, so the wide job starts once the jobs on its reserved nodes reach their
//! time limits: within a minute (the longest running job's limit) plus slack. With ten
//! reservations rebuilt every pass, the later flood's blocked jobs took every reservation and the
//! wide job waited for the flood to end. The start estimate `drover why` showed when the
//! reservation was made is compared with the start `sacct` records.

use drover_e2e::sim::{Run, SimCluster};
use std::time::{Duration, Instant};

const NODES: usize = 8;
const GPUS_PER_NODE: u32 = 8;
/// The flood's time limit (minutes, as `sbatch -t` takes it) and its run times (seconds).
const LIMIT_MINUTES: u32 = 1;
const RUN_MIN: u32 = 30;
const RUN_SPREAD: u32 = 26;
/// How long the later flood goes on after the wide job's reservation is made (seconds).
const FLOOD: u64 = 150;
/// The wide job must start within the longest time limit of the jobs running when it was
/// submitted (none started later may delay it) plus this slack for passes, launches and the
/// loaded CI machine.
const SLACK: i64 = 20;

fn start() -> SimCluster {
    let config = format!(
        r#"[[nodes]]
names = "sim[1-{NODES}]"
cpus = 64
real_memory = 512000
gpus = {{ h100 = {GPUS_PER_NODE} }}
[[partitions]]
name = "gpu"
nodes = "sim[1-{NODES}]"
default = true
[[accounts]]
name = "ml"
[[users]]
name = "root"
default_account = "ml"
"#
    );
    SimCluster::start("backfill", NODES, false, "default_account = \"ml\"", &config)
}

/// The job stream's run times: a fixed pseudo-random sequence (xorshift).
fn draw(seed: &mut u32, n: u32) -> u32 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 17;
    *seed ^= *seed << 5;
    *seed % n
}

/// Submits a job of `nodes` × `gpus` GPUs (4 CPUs per GPU) that runs `seconds`, at `nice`
/// (a lower nice ranks higher: all else is equal, the same user and account); returns its id.
fn submit(cluster: &SimCluster, nodes: u32, gpus: u32, seconds: u32, nice: u32, name: &str) -> u32 {
    let script = cluster.root().join("job.sh");
    if !script.exists() {
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    }
    let (nodes, gres, cpus) = (nodes.to_string(), format!("--gres=gpu:{gpus}"), (gpus * 4).to_string());
    let (limit, comment, nice) = (LIMIT_MINUTES.to_string(), format!("sim:{seconds}"), format!("--nice={nice}"));
    let script = script.to_string_lossy().into_owned();
    let args =
        ["--parsable", "-N", &nodes, &gres, "-c", &cpus, "-t", &limit, &nice, "--comment", &comment, "-J", name, &script];
    cluster.ok("sbatch", &args).trim().parse().unwrap()
}

/// The unix time of the start `drover why` estimates, if the job holds a reservation.
fn estimate(cluster: &SimCluster, job: u32) -> Option<(i64, String)> {
    let text = cluster.ok("drover", &["why", &job.to_string()]);
    let line = text.lines().find(|l| l.starts_with("estimated start:") && l.contains("(backfill reservation)"))?;
    let at = line.split("unix time ").nth(1)?.split(')').next()?.parse().ok()?;
    Some((at, text))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

#[test]
fn a_wide_job_starts_within_a_time_limit_under_a_flood_of_small_jobs() {
    let cluster = start();
    let mut seed = 16_u32;
    let mut run_time = || RUN_MIN + draw(&mut seed, RUN_SPREAD);
    // The first flood fills the cluster and queues a few more; it ranks below the wide job.
    let total = NODES as u32 * GPUS_PER_NODE;
    for _ in 0..total + 16 {
        submit(&cluster, 1, 1, run_time(), 5000, "low");
    }
    cluster.wait_for("the cluster to fill", || {
        let states = cluster.states();
        (states.values().filter(|s| *s == "RUNNING").count() >= total as usize).then_some(())
    });
    let wide = submit(&cluster, 4, GPUS_PER_NODE, 10, 2000, "wide");
    let (estimated, why) =
        cluster.wait_for("the wide job's reservation in `drover why`", || estimate(&cluster, wide));
    let reserved_at = unix_now();
    eprintln!("when reserved: {why}");
    // The later flood ranks above the wide job and comes faster than the cluster runs it
    // (64 GPUs, 42 s a job on average: about 1.5 jobs a second; this sends 3).
    let began = Instant::now();
    let mut tick = 0u64;
    let mut started = None;
    let mut estimates: Vec<(u64, Option<i64>)> = Vec::new();
    while began.elapsed() < Duration::from_secs(FLOOD) {
        submit(&cluster, 1, 1, run_time(), 0, "high");
        if tick % 2 == 0 {
            submit(&cluster, 1, 1, run_time(), 5000, "low");
        }
        tick += 1;
        if tick % 6 == 0 && started.is_none() {
            // How the estimate moves while the job waits (it should only move earlier).
            let now = estimate(&cluster, wide).map(|(at, _)| at);
            if estimates.last().is_none_or(|(_, last)| *last != now) {
                estimates.push((began.elapsed().as_secs(), now));
            }
        }
        if tick % 6 == 0 && cluster.states().get(&wide).is_some_and(|s| s == "RUNNING") {
            started.get_or_insert(began.elapsed());
            // Keep flooding a little after the start, then stop: the figure is taken.
            if began.elapsed() > started.unwrap() + Duration::from_secs(5) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(333 * tick).saturating_sub(began.elapsed()));
    }
    let run: Run = cluster.wait_up_to("the wide job's start in sacct", Duration::from_secs(240), || {
        cluster.runs().into_iter().find(|r| r.job == wide && r.start.is_some())
    });
    let (submitted, actual) = (run.submit.unwrap(), run.start.unwrap());
    let wait = actual - submitted;
    let bound = i64::from(LIMIT_MINUTES) * 60 + SLACK;
    eprintln!("estimates while it waited (seconds into the later flood, estimated start): {estimates:?}");
    eprintln!(
        "wide job {wide}: submitted {submitted}, reserved by {reserved_at}, estimated start {estimated}, \
         started {actual}: waited {wait} s (bound {bound} s); estimate error (actual − estimated) {} s",
        actual - estimated
    );
    assert!(wait <= bound, "the wide job waited {wait} s (bound {bound} s)\n{}", cluster.logs());
    // The estimate comes from the running jobs' time limits; they end earlier, so the job may
    // start earlier than estimated, but never later than the estimate plus the slack.
    assert!(actual <= estimated + SLACK, "started at {actual}, {} s after the estimate {estimated}", actual - estimated);
}
