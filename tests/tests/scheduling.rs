//! Scheduling on a real cluster: QOS limits give Slurm's pending reasons and submit-time
//! refusals; backfill starts a short job beside a blocked big one without delaying it; fair-share
//! usage is charged, shown by `sshare`, and survives a ctld crash; `sprio` shows the factors.

use drover_e2e::{CONFIG, Cluster, text};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// `squeue` `%T %r` of one job.
fn state_reason(cluster: &Cluster, job_id: u32) -> String {
    cluster.ok("squeue", &["-h", "-j", &job_id.to_string(), "-o", "%T %r"]).trim().to_owned()
}

/// Waits until `squeue` shows `expected` for the job.
fn wait_squeue(cluster: &Cluster, job_id: u32, expected: &str) {
    let deadline = Instant::now() + LONG;
    let mut last = String::new();
    while Instant::now() < deadline {
        last = state_reason(cluster, job_id);
        if last == expected {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("job {job_id}: wanted `{expected}`, last `{last}`\n{}", cluster.logs());
}

#[test]
fn qos_limits_give_slurm_reasons_and_refusals() {
    let config =
        format!("{CONFIG}\n[[qos]]\nname = \"gpu\"\ngrp_tres = \"gres/gpu=2\"\nmax_tres_per_job = \"gres/gpu=2\"\n");
    let cluster = Cluster::start_with(&config);
    let sleeper = "#!/bin/sh\nsleep 300\n";
    let first = cluster.submit(None, "a.sh", sleeper, &["-q", "gpu", "--gres=gpu:2", "-t", "10"]);
    wait_squeue(&cluster, first, "RUNNING None");
    let second = cluster.submit(None, "b.sh", sleeper, &["-q", "gpu", "--gres=gpu:1", "-t", "10"]);
    wait_squeue(&cluster, second, "PENDING QOSGrpGRES");
    // The limited job does not hold back a job outside the QOS.
    let third = cluster.submit(None, "c.sh", sleeper, &["--gres=gpu:1", "-t", "10"]);
    wait_squeue(&cluster, third, "RUNNING None");
    let scontrol = cluster.ok("scontrol", &["show", "job", &second.to_string()]);
    assert!(scontrol.contains("Reason=QOSGrpGRES"), "{scontrol}");
    // `drover why` gives the limit with its numbers, where Slurm gives one word.
    let why = cluster.ok("drover", &["why", &second.to_string()]);
    assert!(why.contains("QOSGrpGRES: QOS gpu GrpTRES gres/gpu=2: 2 in use, job asks 1"), "{why}");

    // Four GPUs over two nodes is over MaxTRESPerJob: refused with Slurm's message, no job id used.
    let dir = cluster.workdir(None);
    let out = cluster.run(None, &dir, "sbatch", &["-q", "gpu", "-N", "2", "--gres=gpu:2", "--wrap", "true"], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr)
            .contains("Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"),
        "{}",
        text(&out.stderr)
    );
    cluster.ok("scancel", &[&first.to_string()]);
    wait_squeue(&cluster, second, "RUNNING None");
    cluster.ok("scancel", &[&second.to_string(), &third.to_string()]);
}

/// n1 is full for 10 minutes; a 2-node exclusive job waits for it (Resources) and reserves both
/// nodes; a 5-minute job starts on n2 because it ends first; a 60-minute one would delay the big
/// job and waits (Priority).
#[test]
fn backfill_starts_a_short_job_without_delaying_the_big_one() {
    let cluster = Cluster::start();
    let sleeper = "#!/bin/sh\nsleep 300\n";
    let full = cluster.submit(None, "full.sh", sleeper, &["-c", "4", "-w", "n1", "-t", "10"]);
    wait_squeue(&cluster, full, "RUNNING None");
    let big = cluster.submit(None, "big.sh", sleeper, &["-N", "2", "--exclusive", "-t", "10"]);
    wait_squeue(&cluster, big, "PENDING Resources");
    let long = cluster.submit(None, "long.sh", sleeper, &["-c", "1", "-t", "60"]);
    let short = cluster.submit(None, "short.sh", sleeper, &["-c", "1", "-t", "5"]);
    wait_squeue(&cluster, short, "RUNNING None");
    wait_squeue(&cluster, long, "PENDING Priority");
    assert_eq!(state_reason(&cluster, big), "PENDING Resources");
    // sdiag counts what happened in Slurm's layout: the short job started ahead of the big one
    // is a backfilled job.
    let sdiag = cluster.ok("sdiag", &[]);
    let value = |key: &str| -> u64 {
        let line = sdiag.lines().find(|l| l.split(':').next() == Some(key)).unwrap_or_else(|| panic!("{key}: {sdiag}"));
        line.split_once(':').unwrap().1.trim().parse().unwrap_or_else(|_| panic!("{line}"))
    };
    assert_eq!(value("Jobs submitted"), 4, "{sdiag}");
    assert_eq!((value("Jobs started"), value("Jobs running"), value("Jobs pending")), (2, 2, 2), "{sdiag}");
    assert!(value("\tTotal backfilled jobs (since last slurm start)") >= 1, "{sdiag}");
    assert!(value("\tTotal cycles") >= 1 && value("Server thread count") == 1, "{sdiag}");
    let sprio = cluster.ok("sprio", &["-l"]);
    assert!(sprio.lines().any(|l| l.trim_start().starts_with(&big.to_string())), "{sprio}");
    assert!(sprio.starts_with("          JOBID PARTITION     USER   PRIORITY"), "{sprio}");
    cluster.ok("scancel", &[&full.to_string(), &big.to_string(), &long.to_string(), &short.to_string()]);
}

/// A finished job's usage is charged to its association, shown by `sshare`, and still there
/// after ctld is killed and restarted.
#[test]
fn usage_is_charged_shown_and_survives_a_crash() {
    let cluster = Cluster::start();
    let job_id = cluster.submit(None, "work.sh", "#!/bin/sh\nsleep 3\n", &["-c", "2", "-A", "vision"]);
    assert_eq!(cluster.wait_state(job_id, "COMPLETED", LONG), "0:0");
    let raw_usage = |cluster: &Cluster| -> u64 {
        let out = cluster.ok("sshare", &["-a", "-P", "-n"]);
        let me = nix::unistd::User::from_uid(nix::unistd::geteuid()).unwrap().unwrap().name;
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("vision|{me}|")))
            .unwrap_or_else(|| panic!("no vision/{me} row:\n{out}"))
            .split('|')
            .nth(4)
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = raw_usage(&cluster);
    // About 3 s × 2 CPUs; ticks are one second apart, so allow for one tick either way.
    assert!((2..=10).contains(&before), "RawUsage {before}");
    let header = cluster.ok("sshare", &[]);
    assert!(
        header.starts_with(
            "Account                    User  RawShares  NormShares    RawUsage  EffectvUsage  FairShare \n"
        ),
        "{header}"
    );
    cluster.kill9("ctld");
    let out = cluster.drover("up");
    assert!(out.status.success(), "restart failed: {}{}", text(&out.stdout), text(&out.stderr));
    let after = raw_usage(&cluster);
    assert!(after > 0 && after <= before, "usage before {before}, after restart {after}");
}

/// Two teams share `main` (4 GPUs), each guaranteed 2. nlp floods it with 4 one-GPU jobs and
/// borrows vision's idle GPUs; vision submits one job: exactly one borrowed nlp job is preempted
/// (requeued with the same id, restart count 1) within the grace time, and vision's job runs.
#[test]
fn a_guarantee_is_reclaimed_from_a_borrower() {
    let quotas = "\n[[quotas]]\naccount = \"vision\"\npartition = \"main\"\nguarantee = \"gres/gpu=2\"\n\
        [[quotas]]\naccount = \"nlp\"\npartition = \"main\"\nguarantee = \"gres/gpu=2\"\n";
    // The borrowers are reclaimed as soon as they run: no minimum run time.
    let config = CONFIG.replace("kill_wait = 2\n", "kill_wait = 2\npreempt_exempt_time = 0\n");
    let cluster = Cluster::start_with(&format!("{config}{quotas}"));
    let sleeper = "#!/bin/sh\nsleep 300\n";
    let flood: Vec<u32> = (0..4)
        .map(|i| cluster.submit(None, &format!("nlp{i}.sh"), sleeper, &["-A", "nlp", "--gres=gpu:1", "-t", "10"]))
        .collect();
    for job_id in &flood {
        wait_squeue(&cluster, *job_id, "RUNNING None");
    }
    let started = Instant::now();
    let owner = cluster.submit(None, "vision.sh", sleeper, &["-A", "vision", "--gres=gpu:1", "-t", "10"]);
    wait_squeue(&cluster, owner, "RUNNING None");
    let reclaim_time = started.elapsed();
    // kill_wait = 2 s of grace, plus a pass or two.
    assert!(reclaim_time < Duration::from_secs(15), "reclaim took {reclaim_time:?}");
    let states: Vec<String> = flood.iter().map(|j| state_reason(&cluster, *j)).collect();
    let requeued: Vec<u32> =
        flood.iter().zip(&states).filter(|(_, s)| s.starts_with("PENDING")).map(|(j, _)| *j).collect();
    assert_eq!(requeued.len(), 1, "{states:?}");
    assert_eq!(states.iter().filter(|s| *s == "RUNNING None").count(), 3, "{states:?}");
    let shown = cluster.ok("scontrol", &["show", "job", &requeued[0].to_string()]);
    assert!(shown.contains("Restarts=1"), "{shown}");
    let all: Vec<String> = flood.iter().chain([&owner]).map(|j| j.to_string()).collect();
    cluster.ok("scancel", &all.iter().map(String::as_str).collect::<Vec<_>>());
}
