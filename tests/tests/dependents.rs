//! Jobs waiting on a dependency, measured from outside: a real ctld with two simulated nodes of
//! 8 GPUs (`drover-simnode`) and 1,000 jobs queued behind a long-running job (`afterany`). ctld
//! sets such jobs aside until a job their dependency names changes state (they cost a pass
//! nothing meanwhile), so what this checks is that nothing is missed: a job waiting on a job that
//! completes starts within seconds of that end (as `sacct` records both), a chain of dependencies
//! runs through, `afternotok` on a completed job and `afterok` on a failed one show
//! `DependencyNeverSatisfied` with Slurm's `(failed)` text (and are cancelled under
//! `--kill-on-invalid-dep=yes`), a changed dependency (`scontrol update Dependency=`) takes
//! effect at once, and the 1,000 queued jobs stay pending with reason `Dependency` until their
//! job ends (cancelled) and then all run.

use drover_e2e::sim::{Run, SimCluster};
use std::process::Command;

/// Jobs queued behind the long job.
const QUEUED: usize = 1000;
/// How long after a job's end (as `sacct` records it, whole seconds) a job that waited on it may
/// start, at most: a pass follows each end; the slack is for the loaded CI machine.
const PROMPT: i64 = 3;

fn start() -> SimCluster {
    drover_e2e::sim::one_team("dependents", 2, 8)
}

/// Submits a 1-GPU job that runs `sim` (`SECONDS[:exit=CODE]`) with the extra `args`.
fn submit(cluster: &SimCluster, sim: &str, args: &[&str]) -> u32 {
    let script = cluster.root().join("job.sh");
    if !script.exists() {
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    }
    let comment = format!("sim:{sim}");
    let script = script.to_string_lossy().into_owned();
    let mut all = vec!["--parsable", "--gres=gpu:1", "-c", "1", "--comment", &comment];
    all.extend(args);
    all.push(&script);
    cluster.ok("sbatch", &all).trim().parse().unwrap()
}

/// `squeue`'s state, reason and dependency of one job (`None` once it left the queue).
fn queued(cluster: &SimCluster, job: u32) -> Option<String> {
    let out = cluster.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%t %r %E"]);
    Some(out.trim().to_owned()).filter(|l| !l.is_empty())
}

fn run_of(runs: &[Run], job: u32) -> Run {
    runs.iter().find(|r| r.job == job).cloned().unwrap_or_else(|| panic!("no run of job {job} in sacct"))
}

#[test]
fn dependent_jobs_wake_when_their_jobs_end() {
    let cluster = start();
    let long = submit(&cluster, "3600", &[]);
    cluster.wait_running(&[long], "the long job");
    // The queue behind it, over the client socket (1,000 sbatch processes would take minutes);
    // each job runs no simulated time once it starts.
    let socket = cluster.root().join("state").join("ctld.sock");
    let out = Command::new(drover_e2e::bin_dir().join("drover-simnode"))
        .args(["submit", "--socket", socket.to_str().unwrap(), "--count", &QUEUED.to_string(), "--clients", "4"])
        .args(["--gpus", "1", "--seconds", "0", "--dependency", &format!("afterany:{long}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", drover_e2e::text(&out.stderr));

    let short = submit(&cluster, "2", &[]);
    let failing = submit(&cluster, "2:exit=3", &[]);
    let after_short = submit(&cluster, "1", &[&format!("--dependency=afterok:{short}")]);
    let chain = submit(&cluster, "1", &[&format!("--dependency=afterany:{after_short}")]);
    let not_ok = submit(&cluster, "1", &[&format!("--dependency=afternotok:{short}")]);
    let after_failed = submit(&cluster, "1", &[&format!("--dependency=afterok:{failing}")]);
    let killed = submit(&cluster, "1", &["--kill-on-invalid-dep=yes", &format!("--dependency=afterok:{failing}")]);
    let moved = submit(&cluster, "1", &[&format!("--dependency=afterok:{long}")]);

    cluster.wait_for("the short jobs to end and the chain to run", || {
        let runs = cluster.runs();
        let done = |job| runs.iter().any(|r| r.job == job && r.state == "COMPLETED");
        (done(short) && done(after_short) && done(chain)).then_some(())
    });
    cluster.wait_for("the dependencies that can never be satisfied", || {
        let never = format!("PD DependencyNeverSatisfied afternotok:{short}(failed)");
        let failed = format!("PD DependencyNeverSatisfied afterok:{failing}(failed)");
        let killed_gone = queued(&cluster, killed).is_none();
        (queued(&cluster, not_ok) == Some(never) && queued(&cluster, after_failed) == Some(failed) && killed_gone)
            .then_some(())
    });
    let runs = cluster.runs();
    let (short_run, after_run, chain_run) = (run_of(&runs, short), run_of(&runs, after_short), run_of(&runs, chain));
    let waited = after_run.start.unwrap() - short_run.end.unwrap();
    assert!((0..=PROMPT).contains(&waited), "afterok started {waited} s after its job ended: {runs:?}");
    let waited = chain_run.start.unwrap() - after_run.end.unwrap();
    assert!((0..=PROMPT).contains(&waited), "afterany started {waited} s after its job ended: {runs:?}");
    assert_eq!(run_of(&runs, failing).state, "FAILED");
    let killed_run = run_of(&runs, killed);
    assert_eq!(killed_run.state, "CANCELLED", "{killed_run:?}");
    let shown = cluster.ok("scontrol", &["show", "job", &killed.to_string()]);
    assert!(shown.contains("Reason=DependencyNeverSatisfied"), "{shown}");

    // The queue behind the long job waits, with Slurm's reason and text.
    let waiting = cluster.ok("squeue", &["-h", "-t", "PD", "-o", "%r %E"]);
    let behind = format!("Dependency afterany:{long}(unfulfilled)");
    let count = waiting.lines().filter(|l| *l == behind).count();
    assert_eq!(count, QUEUED, "jobs waiting on the long job:\n{}", &waiting[..waiting.len().min(2000)]);

    // A changed dependency counts at once: `moved` now waits on a job that already completed.
    cluster.ok("scontrol", &["update", &format!("JobId={moved}"), &format!("Dependency=afterok:{short}")]);
    cluster.wait_for("the job whose dependency changed to run", || {
        cluster.runs().iter().any(|r| r.job == moved && r.state == "COMPLETED").then_some(())
    });

    // The long job ends (cancelled, which `afterany` takes as an end): the whole queue runs.
    cluster.ok("scancel", &[&long.to_string()]);
    cluster.wait_up_to("the queue behind the long job to run", std::time::Duration::from_secs(120), || {
        let pending = cluster.ok("squeue", &["-h", "-t", "PD", "-o", "%i"]);
        let left = pending.lines().count();
        // `not_ok` and `after_failed` stay pending for good.
        (left == 2).then_some(())
    });
    let runs = cluster.runs();
    let long_end = run_of(&runs, long).end.unwrap();
    let behind: Vec<&Run> = runs.iter().filter(|r| r.job > long && r.job < short).collect();
    assert_eq!(behind.len(), QUEUED);
    assert!(behind.iter().all(|r| r.state == "COMPLETED"), "{behind:?}");
    let first = behind.iter().filter_map(|r| r.start).min().unwrap();
    assert!(first - long_end <= PROMPT, "the first queued job started {} s after the long job ended", first - long_end);
}
