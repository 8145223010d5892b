//! Placement measured from outside: a real ctld with four simulated nodes of 8 GPUs
//! (`drover-simnode`) takes a stream of 1- and 2-GPU jobs (6–18 s each) mixed with 8-GPU
//! whole-node jobs (10 s each), submitted over 30 s at about 1.5 times what the cluster can run.
//! Read back through `sacct -D` only: the GPU utilization in the seconds some job waited, and
//! how long each 8-GPU job waited for its start. Best-fit placement packs the small jobs onto the
//! fullest nodes, so whole nodes free up for the 8-GPU jobs; first fit spread them over the
//! emptied nodes and each 8-GPU job had to wait for a node to drain under its reservation. The
//! stream depends on timing, so first fit passes its bounds in some runs; the first test is the
//! same situation made exact: first fit always fails it.

use drover_e2e::sim::{Run, SimCluster};
use std::time::{Duration, Instant};

const NODES: usize = 4;
const GPUS_PER_NODE: u32 = 8;
/// Seconds over which jobs are submitted.
const WINDOW: f64 = 30.0;
/// How long the 8-GPU jobs of the stream may wait for their starts, at most (seconds), and the
/// least GPU utilization in the seconds some job waits. Measured on a loaded 2-core VM, three
/// runs each (mean wait / max wait / utilization): first fit 6.0 s / 10 s / 89.1 %, 3.8 s / 5 s /
/// 94.4 %, 5.2 s / 10 s / 92.5 %; best fit 3.5 s / 5 s / 96.0 %, 3.8 s / 5 s / 94.4 %,
/// 4.2 s / 5 s / 93.9 %. The bounds are set well outside that spread (CI runs on 2 busy cores):
/// they catch a starved wide job or a badly fragmented cluster, not first fit itself, which the
/// exact test does.
const MAX_WAIT_BOUND: i64 = 15;
const UTILIZATION_BOUND: f64 = 0.85;

/// The job stream's sizes and run times: a fixed pseudo-random sequence (xorshift), so every
/// run submits the same jobs.
fn draw(seed: &mut u32, n: u32) -> u32 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 17;
    *seed ^= *seed << 5;
    *seed % n
}

fn start(nodes: usize) -> SimCluster {
    drover_e2e::sim::one_team("packing", nodes, GPUS_PER_NODE)
}

/// Submits a job of `gpus` GPUs (4 CPUs each) that runs `seconds`; returns its id.
fn submit(cluster: &SimCluster, gpus: u32, seconds: u64) -> u32 {
    let script = cluster.root().join("job.sh");
    if !script.exists() {
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    }
    let gres = format!("--gres=gpu:{gpus}");
    let cpus = (gpus * 4).to_string();
    let comment = format!("sim:{seconds}");
    let script = script.to_string_lossy().into_owned();
    let args = ["--parsable", &gres, "-c", &cpus, "-t", "1", "--comment", &comment, "-J", "pack", &script];
    cluster.ok("sbatch", &args).trim().parse().unwrap()
}

/// What the scenario measured.
#[derive(Debug)]
struct Figures {
    /// Busy GPUs ÷ all GPUs, averaged over the seconds in which some job waited.
    utilization_while_waiting: f64,
    /// Seconds in which some job waited.
    waiting_seconds: usize,
    /// Each 8-GPU job's wait (start − submit), seconds.
    whole_node_waits: Vec<i64>,
}

fn measure(runs: &[Run]) -> Figures {
    let first = runs.iter().filter_map(|r| r.submit).min().expect("jobs were submitted");
    let last = runs.iter().filter_map(|r| r.end).max().expect("jobs ended");
    let total = f64::from(GPUS_PER_NODE) * NODES as f64;
    let mut busy_sum = 0.0;
    let mut waiting_seconds = 0;
    for t in first..last {
        let waiting = runs.iter().any(|r| r.submit.is_some_and(|s| s <= t) && r.start.is_none_or(|s| s > t));
        if waiting {
            waiting_seconds += 1;
            busy_sum += f64::from(runs.iter().filter(|r| r.holds_after(t)).map(|r| r.gpus).sum::<u32>()) / total;
        }
    }
    let whole_node_waits =
        runs.iter().filter(|r| r.gpus == GPUS_PER_NODE).filter_map(|r| Some(r.start? - r.submit?)).collect();
    Figures { utilization_while_waiting: busy_sum / waiting_seconds.max(1) as f64, waiting_seconds, whole_node_waits }
}

/// Two nodes of 8 GPUs: an 8-GPU job runs on the first and a long 4-GPU job on the second; when
/// the 8-GPU job has ended, a second long 4-GPU job must join the first one (first fit put it
/// on the emptied first node), so a new 8-GPU job starts at once instead of waiting minutes.
#[test]
fn a_small_job_leaves_the_whole_node_whole() {
    let cluster = start(2);
    let first_whole = submit(&cluster, GPUS_PER_NODE, 4);
    cluster.wait_running(&[first_whole], "the first 8-GPU job");
    let long = submit(&cluster, 4, 600);
    cluster.wait_running(&[long], "a long 4-GPU job beside it");
    cluster.wait_for("the first 8-GPU job to end", || (!cluster.states().contains_key(&first_whole)).then_some(()));
    let second_long = submit(&cluster, 4, 600);
    cluster.wait_running(&[second_long], "the second long 4-GPU job");
    let whole = submit(&cluster, GPUS_PER_NODE, 4);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && cluster.states().get(&whole).is_some_and(|s| s != "RUNNING") {
        std::thread::sleep(Duration::from_millis(100));
    }
    let runs = cluster.runs();
    let nodes = cluster.ok("squeue", &["-h", "-o", "%i %N"]);
    let started = runs.iter().find(|r| r.job == whole).and_then(|r| Some(r.start? - r.submit?));
    assert!(
        started.is_some_and(|wait| wait <= 3),
        "the 8-GPU job did not start within 3 s (wait {started:?}); jobs and nodes:\n{nodes}\n{}",
        cluster.logs()
    );
}

#[test]
fn whole_node_jobs_start_promptly_among_small_ones() {
    let cluster = start(NODES);
    let mut seed = 16_u32;
    let began = Instant::now();
    let (mut small, mut whole) = (Vec::new(), Vec::new());
    let mut tick = 0u32;
    // Every half second a 1- or 2-GPU job (12 s on average); every five seconds an 8-GPU job.
    while began.elapsed().as_secs_f64() < WINDOW {
        let gpus = if draw(&mut seed, 5) < 3 { 1 } else { 2 };
        small.push(submit(&cluster, gpus, 6 + u64::from(draw(&mut seed, 13))));
        if tick % 10 == 5 {
            whole.push(submit(&cluster, GPUS_PER_NODE, 10));
        }
        tick += 1;
        let next = Duration::from_millis(500 * u64::from(tick));
        std::thread::sleep(next.saturating_sub(began.elapsed()));
    }
    eprintln!("submitted {} small and {} 8-GPU jobs in {:?}", small.len(), whole.len(), began.elapsed());
    cluster.wait_up_to("every job to end", Duration::from_secs(180), || cluster.states().is_empty().then_some(()));
    // The last ends reach the accounting with the commit after them.
    let all: Vec<u32> = small.iter().chain(&whole).copied().collect();
    let runs = cluster.wait_for("every job's end in sacct", || {
        let runs = cluster.runs();
        all.iter().all(|j| runs.iter().any(|r| r.job == *j && r.end.is_some())).then_some(runs)
    });
    let figures = measure(&runs);
    let waits = &figures.whole_node_waits;
    let mean = waits.iter().sum::<i64>() as f64 / waits.len().max(1) as f64;
    let max = waits.iter().copied().max().unwrap_or(0);
    eprintln!(
        "utilization while jobs waited: {:.1} % over {} s; 8-GPU waits (s): {waits:?}, mean {mean:.1}, max {max}",
        100.0 * figures.utilization_while_waiting,
        figures.waiting_seconds
    );
    assert_eq!(waits.len(), whole.len(), "every 8-GPU job ran on 8 GPUs: {runs:?}");
    assert!(
        figures.utilization_while_waiting >= UTILIZATION_BOUND,
        "GPU utilization while jobs waited: {:.1} % (bound {:.0} %)",
        100.0 * figures.utilization_while_waiting,
        100.0 * UTILIZATION_BOUND
    );
    assert!(
        max <= MAX_WAIT_BOUND,
        "8-GPU jobs waited {waits:?} s (mean {mean:.1}, max {max}, bound {MAX_WAIT_BOUND})\n{}",
        cluster.logs()
    );
}
