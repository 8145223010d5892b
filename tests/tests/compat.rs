//! Slurm command-line compatibility, end to end: job arrays (numbering, throttle, display,
//! cancel of single tasks, `SLURM_ARRAY_*`, `%A_%a` output names), dependencies (`afterok`,
//! `afternotok`, `afterany`, `singleton`, `?`, `DependencyNeverSatisfied`,
//! `--kill-on-invalid-dep`) and `scontrol hold`/`release`, against a real cluster.

use drover_e2e::{Cluster, text};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// Polls `sacct -X -P -n -o JobID,State -j <id>` until it prints `expected`.
fn sacct_until(cluster: &Cluster, id: &str, expected: &str) {
    let deadline = Instant::now() + LONG;
    let mut last = String::new();
    while Instant::now() < deadline {
        last = cluster.ok("sacct", &["-X", "-P", "-n", "-o", "JobID,State", "-j", id]);
        if last == expected {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("sacct -j {id} never printed\n{expected}last:\n{last}");
}

/// An array of six tasks, at most two at a time: each task is its own job record once it
/// starts, the last one to start keeps the array's id, and every task sees its place.
#[test]
fn array_with_throttle_runs_every_task_once() {
    let cluster = Cluster::start();
    let script = "#!/bin/sh\n#SBATCH -J sweep\n#SBATCH -o arr-%A_%a.out\n\
        echo id=$SLURM_ARRAY_JOB_ID task=$SLURM_ARRAY_TASK_ID count=$SLURM_ARRAY_TASK_COUNT \
        min=$SLURM_ARRAY_TASK_MIN max=$SLURM_ARRAY_TASK_MAX step=$SLURM_ARRAY_TASK_STEP\nsleep 1\n";
    let array = cluster.submit(None, "sweep.sh", script, &["--array=0-10:2%2"]);
    let id = array.to_string();

    // Never more than two tasks run at once; the rest wait as one `N_[…%2]` line.
    let deadline = Instant::now() + LONG;
    let mut saw_pending_range = false;
    let mut saw_running_pair = false;
    loop {
        let queue = cluster.ok("squeue", &["-h", "-j", &id, "-o", "%i %t %r"]);
        let running = queue.lines().filter(|l| l.contains(" R ")).count();
        assert!(running <= 2, "throttle exceeded:\n{queue}");
        saw_running_pair |= running == 2;
        saw_pending_range |=
            queue.lines().any(|l| l.starts_with(&format!("{id}_[")) && l.ends_with("%2] PD JobArrayTaskLimit"));
        if queue.trim().is_empty() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(saw_pending_range, "the pending tasks were never shown as one throttled range");
    assert!(saw_running_pair, "`squeue -j <array>` never showed two running tasks");

    // squeue is empty once every end is known; accounting has them once they are committed.
    let deadline = Instant::now() + LONG;
    let mut sacct = String::new();
    while Instant::now() < deadline {
        sacct = cluster.ok("sacct", &["-X", "-P", "-n", "-o", "JobID,JobIDRaw,State", "-j", &id]);
        if sacct.lines().count() == 6 && sacct.lines().all(|l| l.ends_with("|COMPLETED")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let rows: Vec<Vec<&str>> = sacct.lines().map(|l| l.split('|').collect()).collect();
    let tasks: Vec<String> = rows.iter().map(|r| r[0].to_owned()).collect();
    let expected: Vec<String> = [0, 2, 4, 6, 8, 10].iter().map(|t| format!("{id}_{t}")).collect();
    assert_eq!(tasks, expected, "{sacct}");
    assert!(rows.iter().all(|r| r[2] == "COMPLETED"), "{sacct}");
    // The last task to start keeps the array's id; the others got ids of their own.
    assert_eq!(rows[5][1], id, "{sacct}");
    assert!(rows[..5].iter().all(|r| r[1].parse::<u32>().unwrap() > array), "{sacct}");

    for task in [0, 2, 4, 6, 8, 10] {
        let path = cluster.workdir(None).join(format!("arr-{id}_{task}.out"));
        let output = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(output.trim(), format!("id={id} task={task} count=6 min=0 max=10 step=2"));
    }
    // `sacct -j N_T` selects one task, with its batch step. (Output names are checked below.)
    let one = cluster.ok("sacct", &["-P", "-n", "-o", "JobID,State", "-j", &format!("{id}_4")]);
    assert_eq!(one, format!("{id}_4|COMPLETED\n{id}_4.batch|COMPLETED\n"));
}

/// Pending tasks show as one line (`-r` expands them); `scancel N_T` of a pending task drops it
/// from the array (no record of it remains, as in Slurm); `scancel N` cancels the rest.
#[test]
fn array_display_and_cancel() {
    let cluster = Cluster::start();
    let array = cluster.submit(None, "held.sh", "#!/bin/sh\n#SBATCH -J arrheld\ntrue\n", &["--array=0-3", "--hold"]);
    let id = array.to_string();
    let queue = cluster.ok("squeue", &["-j", &id]);
    assert_eq!(
        queue,
        format!(
            "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n\
             {:>18}      main  arrheld     root PD       0:00      1 (JobHeldUser)\n",
            format!("{id}_[0-3]")
        )
    );
    let expanded = cluster.ok("squeue", &["-h", "-r", "-j", &id, "-o", "%i %F %K %A"]);
    assert_eq!(expanded, (0..4).map(|t| format!("{id}_{t} {id} {t} {id}\n")).collect::<String>());
    let show = cluster.ok("scontrol", &["show", "job", &id]);
    assert!(show.starts_with(&format!("JobId={id} ArrayJobId={id} ArrayTaskId=0-3 JobName=arrheld\n")), "{show}");

    cluster.ok("scancel", &[&format!("{id}_2")]);
    let queue = cluster.ok("squeue", &["-h", "-j", &id, "-o", "%i %t"]);
    assert_eq!(queue, format!("{id}_[0-1,3] PD\n"));
    let shown = cluster.run(None, &cluster.workdir(None), "scontrol", &["show", "job", &format!("{id}_2")], None);
    assert_eq!(shown.status.code(), Some(1), "a cancelled pending task leaves no record");
    // An unknown task is reported like an unknown job.
    let out = cluster.run(None, &cluster.workdir(None), "scancel", &["-v", &format!("{id}_9")], None);
    assert!(
        text(&out.stderr).contains(&format!("Kill job error on job id {id}_9: Invalid job id specified")),
        "{}",
        text(&out.stderr)
    );

    cluster.ok("scancel", &[&id]);
    sacct_until(&cluster, &id, &format!("{id}_[0-1,3]|CANCELLED by 0\n"));
}

/// Dependency chains: afterok on a failed job never becomes satisfied (and is cancelled with
/// `--kill-on-invalid-dep=yes`), afternotok runs, afterany waits for the end, `?` needs one.
#[test]
fn dependencies() {
    let cluster = Cluster::start();
    let failed = cluster.submit(None, "fail.sh", "#!/bin/sh\n#SBATCH -J failjob\nexit 3\n", &[]);
    cluster.wait_state(failed, "FAILED", LONG);
    let sleeper = cluster.submit(None, "sleep.sh", "#!/bin/sh\n#SBATCH -J sleeper\nsleep 8\n", &[]);
    let never = cluster.submit(None, "dep.sh", "#!/bin/sh\ntrue\n", &[&format!("--dependency=afterok:{failed}")]);
    let killed = cluster.submit(
        None,
        "dep.sh",
        "#!/bin/sh\ntrue\n",
        &["--kill-on-invalid-dep=yes", &format!("--dependency=afterok:{failed}")],
    );
    let notok = cluster.submit(None, "dep.sh", "#!/bin/sh\ntrue\n", &[&format!("--dependency=afternotok:{failed}")]);
    let after_any = cluster.submit(None, "dep.sh", "#!/bin/sh\ntrue\n", &[&format!("--dependency=afterany:{sleeper}")]);
    let either = cluster.submit(
        None,
        "dep.sh",
        "#!/bin/sh\ntrue\n",
        &[&format!("--dependency=afterok:{failed}?afterany:{sleeper}")],
    );

    let line = cluster.squeue_until(&never.to_string(), "%t %r %E", |q| q.contains("Never"));
    assert_eq!(line, format!("PD DependencyNeverSatisfied afterok:{failed}(failed)\n"));
    let waiting = cluster.ok("squeue", &["-h", "-j", &after_any.to_string(), "-o", "%t %r %E"]);
    assert_eq!(waiting, format!("PD Dependency afterany:{sleeper}(unfulfilled)\n"));
    cluster.wait_state(killed, "CANCELLED", LONG);
    cluster.wait_state(notok, "COMPLETED", LONG);
    cluster.wait_state(after_any, "COMPLETED", LONG);
    cluster.wait_state(either, "COMPLETED", LONG);
    let (sleeper_end, after_start) = (
        cluster.ok("sacct", &["-X", "-P", "-n", "-o", "End", "-j", &sleeper.to_string()]),
        cluster.ok("sacct", &["-X", "-P", "-n", "-o", "Start", "-j", &after_any.to_string()]),
    );
    assert!(after_start >= sleeper_end, "afterany started at {after_start} before its target ended at {sleeper_end}");
    let shown = cluster.ok("scontrol", &["show", "job", &never.to_string()]);
    assert!(shown.contains(&format!("Reason=DependencyNeverSatisfied Dependency=afterok:{failed}(failed)")), "{shown}");

    // A dependency on a job ctld does not know is refused at submit.
    let out = cluster.run(None, &cluster.workdir(None), "sbatch", &["-d", "afterok:999999", "--wrap", "true"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("Job dependency problem"), "{}", text(&out.stderr));
}

/// `singleton`: a second job of the same name and user waits until the first has ended.
#[test]
fn singleton_waits_for_the_earlier_job() {
    let cluster = Cluster::start();
    let first = cluster.submit(None, "one.sh", "#!/bin/sh\n#SBATCH -J single -d singleton\nsleep 6\n", &[]);
    let second = cluster.submit(None, "one.sh", "#!/bin/sh\n#SBATCH -J single -d singleton\ntrue\n", &[]);
    cluster.squeue_until(&first.to_string(), "%t", |q| q.trim() == "R");
    let line = cluster.ok("squeue", &["-h", "-j", &second.to_string(), "-o", "%t %r %E"]);
    assert_eq!(line, "PD Dependency singleton(unfulfilled)\n");
    cluster.wait_state(second, "COMPLETED", LONG);
}

/// `scontrol hold` and `release`: an admin hold shows `JobHeldAdmin`, a released job runs.
#[test]
fn hold_and_release() {
    let cluster = Cluster::start();
    let held = cluster.submit(None, "h.sh", "#!/bin/sh\ntrue\n", &["-H"]);
    let later = cluster.submit(None, "h.sh", "#!/bin/sh\ntrue\n", &["--begin=now+1hour"]);
    cluster.ok("scontrol", &["hold", &later.to_string()]);
    let line = cluster.ok("squeue", &["-h", "-j", &later.to_string(), "-o", "%t %r %p"]);
    assert_eq!(line, "PD JobHeldAdmin 0.00000000000000\n");
    cluster.ok("scontrol", &["release", &held.to_string()]);
    cluster.wait_state(held, "COMPLETED", LONG);
    let out = cluster.run(None, &cluster.workdir(None), "scontrol", &["release", "999999"], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "Invalid job id specified for job 999999\n");
}

/// `scontrol requeue` from inside the job, as submitit does on preemption: the job pends again
/// under the same id, runs again with `SLURM_RESTART_COUNT=1`, and sacct shows the last run.
#[test]
fn requeue_from_inside_the_job() {
    let cluster = Cluster::start();
    let scontrol = cluster.home().join("bin").join("scontrol");
    let script = format!(
        "#!/bin/sh\n#SBATCH -o rq-%j.out --open-mode=append\necho run=${{SLURM_RESTART_COUNT:-0}}\n\
         if [ -z \"$SLURM_RESTART_COUNT\" ]; then {} requeue ${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}; sleep 30; fi\nexit 4\n",
        scontrol.display()
    );
    let array = cluster.submit(None, "rq.sh", &script, &["--array=7"]);
    cluster.wait_state(array, "FAILED", LONG);
    let output = std::fs::read_to_string(cluster.workdir(None).join(format!("rq-{array}.out"))).unwrap();
    let runs: Vec<&str> = output.lines().filter(|l| l.starts_with("run=")).collect();
    assert_eq!(runs, ["run=0", "run=1"], "{output}");
    let sacct =
        cluster.ok("sacct", &["-X", "-P", "-n", "-o", "JobID,JobIDRaw,State,ExitCode", "-j", &array.to_string()]);
    assert_eq!(sacct, format!("{array}_7|{array}|FAILED|4:0\n"));
    let shown = cluster.ok("scontrol", &["show", "job", &array.to_string()]);
    assert!(shown.contains("Requeue=1 Restarts=1 "), "{shown}");
    // A job that may not be requeued says so.
    let fixed = cluster.submit(None, "s.sh", "#!/bin/sh\nsleep 30\n", &["--no-requeue"]);
    cluster.squeue_until(&fixed.to_string(), "%t", |q| q.trim() == "R");
    let out = cluster.run(None, &cluster.workdir(None), "scontrol", &["requeue", &fixed.to_string()], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), format!("Requested operation is presently disabled for job {fixed}\n"));
}

/// `sbatch --wait` returns the job's exit code; for an array, the highest of its tasks'.
#[test]
fn sbatch_wait_returns_the_exit_code() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let out = cluster.run(None, &dir, "sbatch", &["--wait", "--parsable", "--wrap", "exit 5"], None);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let job_id: u32 = text(&out.stdout).trim().parse().expect("job id first");
    assert_eq!(cluster.sacct_state(job_id), Some(("FAILED".into(), "5:0".into())));
    let out = cluster.run(None, &dir, "sbatch", &["-W", "--array=0-2", "--wrap", "exit $SLURM_ARRAY_TASK_ID"], None);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = cluster.run(None, &dir, "sbatch", &["--wait", "-Q", "--wrap", "true"], None);
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), String::new()));
}

/// `sbatch -M <cluster>` names the cluster in its output, as Slurm does; another name fails.
#[test]
fn sbatch_clusters_option() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let out = cluster.run(None, &dir, "sbatch", &["--parsable", "-M", "testcluster", "--wrap", "hostname"], None);
    let stdout = text(&out.stdout);
    let (id, name) = stdout.trim().split_once(';').unwrap_or_else(|| panic!("{stdout:?} {}", text(&out.stderr)));
    assert!(id.parse::<u32>().is_ok() && name == "testcluster", "{stdout}");
    let out = cluster.run(None, &dir, "sbatch", &["--clusters=testcluster", "--wrap", "hostname"], None);
    assert_eq!(
        text(&out.stdout),
        format!("Submitted batch job {} on cluster testcluster\n", id.parse::<u32>().unwrap() + 1)
    );
    let out = cluster.run(None, &dir, "sbatch", &["-M", "elsewhere", "--wrap", "hostname"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("sbatch: error: 'elsewhere' can't be reached now"), "{}", text(&out.stderr));
}

/// `scontrol update job` changes a pending job's limit, name, comment and an array's throttle;
/// a running job's limit too (see `compat_extra.rs` for its effect), not its name; unknown ids
/// fail as Slurm words it.
#[test]
fn update_pending_jobs() {
    let cluster = Cluster::start();
    let job = cluster.submit(None, "u.sh", "#!/bin/sh\ntrue\n", &["-H", "-t", "30", "-J", "before"]);
    cluster.ok("scontrol", &["update", &format!("JobId={job}"), "TimeLimit=10", "Name=after", "Comment=hello"]);
    let line = cluster.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%j %l %k"]);
    assert_eq!(line, "after 10:00 hello\n");

    let array = cluster.submit(None, "a.sh", "#!/bin/sh\nsleep 30\n", &["--array=0-3%1"]);
    let id = array.to_string();
    cluster.squeue_until(&id, "%i %t", |q| q.contains(&format!("{id}_[1-3%1] PD")));
    cluster.ok("scontrol", &["update", &format!("JobId={id}"), "ArrayTaskThrottle=3"]);
    cluster.squeue_until(&id, "%i %t", |q| q.lines().filter(|l| l.ends_with(" R")).count() == 3);
    let running = cluster.ok("squeue", &["-h", "-j", &format!("{id}_0"), "-o", "%A"]);
    let out = cluster.run(
        None,
        &cluster.workdir(None),
        "scontrol",
        &["update", &format!("JobId={}", running.trim()), "TimeLimit=5"],
        None,
    );
    assert!(out.status.success(), "a running job's limit can be changed: {}", text(&out.stderr));
    assert_eq!(cluster.ok("squeue", &["-h", "-j", running.trim(), "-o", "%l"]), "5:00\n");
    let out = cluster.run(
        None,
        &cluster.workdir(None),
        "scontrol",
        &["update", &format!("JobId={}", running.trim()), "Name=x"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), format!("Job is no longer pending execution for job {}\n", running.trim()));

    let out = cluster.run(None, &cluster.workdir(None), "scontrol", &["update", "JobId=999999", "TimeLimit=5"], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "Invalid job id specified for job 999999\n");
    cluster.ok("scontrol", &["release", &job.to_string()]);
    cluster.wait_state(job, "COMPLETED", LONG);
}

/// An array task without `-o` writes to `slurm-%A_%a.out`, as in Slurm.
#[test]
fn array_default_output_name() {
    let cluster = Cluster::start();
    let array = cluster.submit(None, "d.sh", "#!/bin/sh\necho task $SLURM_ARRAY_TASK_ID\n", &["--array=3-4"]);
    cluster.wait_state(array, "COMPLETED", LONG);
    for task in [3, 4] {
        let path = cluster.workdir(None).join(format!("slurm-{array}_{task}.out"));
        let deadline = Instant::now() + LONG;
        let expected = format!("task {task}\n");
        while std::fs::read_to_string(&path).ok().as_ref() != Some(&expected) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap_or_default(), format!("task {task}\n"), "{}", path.display());
    }
}
