//! Converting a running cluster between one controller and replicas (docs/admin/ha.md,
//! "Converting a running cluster"): `drover up --replicas 3` on a home that ran one controller
//! seeds the first replica from its database (the others receive it as a Raft snapshot), and
//! `drover up --replicas 1` seeds one controller again from the replicas'. Jobs of plain users
//! (ended, running, pending), their ids, accounting and fair-share usage carry over both ways,
//! and a new submission gets the next id.

use drover_e2e::{Cluster, bin_dir, require_users, text};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// Runs `drover up --home <home>` with `args`, asserting success; returns what it printed.
fn up(cluster: &Cluster, args: &[&str]) -> String {
    let out = std::process::Command::new(bin_dir().join("drover"))
        .arg("up")
        .arg("--home")
        .arg(cluster.home())
        .args(args)
        .env_remove("DROVER_CONF")
        .env_remove("DROVER_SOCKET")
        .output()
        .expect("running drover up");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "drover up {args:?} failed:\n{said}\n{}", cluster.logs());
    said
}

/// What the cluster shows of `ids`: accounting (`sacct`), the queue (`squeue`) and alice's
/// usage records (`sreport`), each as root sees it.
fn shown(cluster: &Cluster, ids: &[u32]) -> (String, String, String) {
    let list = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let sacct = cluster.ok("sacct", &["-X", "-P", "-n", "-o", "JobID,User,Account,State,ExitCode", "-j", &list]);
    let squeue = cluster.ok("squeue", &["-h", "-o", "%i %u %a %T", "-S", "i"]);
    let report =
        ["-P", "-n", "-t", "seconds", "cluster", "AccountUtilizationByUser", "start=now-1hours", "end=now+1hours"];
    let sreport = cluster.ok("sreport", &report);
    (sacct, squeue, sreport)
}

/// alice's raw fair-share usage in `vision` (`sshare -a`).
fn alice_usage(cluster: &Cluster) -> f64 {
    let share = cluster.ok("sshare", &["-a", "-P", "-n"]);
    share
        .lines()
        .map(|l| l.split('|').collect::<Vec<_>>())
        .find(|f| f.first().is_some_and(|a| a.trim() == "vision") && f.get(1) == Some(&"alice"))
        .and_then(|f| f.get(4)?.parse().ok())
        .unwrap_or_else(|| panic!("no usage row for alice in vision:\n{share}"))
}

/// A plain user reaches the controller after each conversion (the replicas' state directories
/// are 0755 whatever ctld's umask) and sees their own jobs.
fn alice_sees(cluster: &Cluster, ids: &[u32]) {
    let out = cluster.run(
        Some("alice"),
        &cluster.workdir(Some("alice")),
        "squeue",
        &["-h", "-u", "alice", "-o", "%i", "-S", "i"],
        None,
    );
    assert!(out.status.success(), "squeue as alice: {}", text(&out.stderr));
    let listed: Vec<u32> = text(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(listed, ids, "alice's queue");
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn one_controller_converted_to_three_replicas_and_back_keeps_every_job_and_its_id() {
    require_users();
    let cluster = Cluster::start();
    let done = cluster.submit(Some("alice"), "done.sh", "#!/bin/sh\nsleep 2\n", &[]);
    let failed = cluster.submit(Some("bob"), "failed.sh", "#!/bin/sh\nexit 3\n", &[]);
    let running = cluster.submit(Some("alice"), "running.sh", "#!/bin/sh\nsleep 300\n", &[]);
    let later = cluster.submit(Some("bob"), "later.sh", "#!/bin/sh\ntrue\n", &["--begin=now+1hour"]);
    let last = cluster.submit(Some("alice"), "last.sh", "#!/bin/sh\ntrue\n", &[]);
    cluster.wait_state(done, "COMPLETED", WAIT);
    cluster.wait_state(failed, "FAILED", WAIT);
    cluster.wait_state(last, "COMPLETED", WAIT);
    cluster.wait_state(running, "RUNNING", WAIT);
    let mut ids = vec![done, failed, running, later, last];
    let before = shown(&cluster, &ids);
    assert_eq!(before.0.lines().count(), 5, "{}", before.0);
    assert_eq!(before.1, format!("{running} alice vision RUNNING\n{later} bob nlp PENDING\n"));
    let usage = alice_usage(&cluster);
    assert!(usage >= 2.0, "alice's 2 s job is charged: {usage}");

    // One controller → three replicas.
    let said = up(&cluster, &["--replicas", "3"]);
    assert!(said.contains("converting the cluster") && said.contains("from one controller to 3 replicas"), "{said}");
    assert!(said.contains("replica 1 seeded from") && said.contains("5 jobs, next job id"), "{said}");
    let status = text(&cluster.drover("status").stdout);
    assert_eq!(status.matches(", leader\n").count(), 1, "{status}");
    assert_eq!(status.matches(", follower\n").count(), 2, "{status}");
    assert!(!status.contains("ctld: "), "the single controller is gone: {status}");
    assert_eq!(shown(&cluster, &ids), before, "what the replicas show");
    assert!(alice_usage(&cluster) >= usage * 0.9, "usage carried over");
    alice_sees(&cluster, &[running]);
    let next = cluster.submit(Some("alice"), "next.sh", "#!/bin/sh\ntrue\n", &[]);
    assert_eq!(next, last + 1, "the id after the converted cluster's last");
    cluster.wait_state(next, "COMPLETED", WAIT);
    ids.push(next);
    // The followers hold the seeded history too: they got it as a snapshot, so once they are in
    // step the leader may die and the next one shows everything.
    cluster.wait_replicas_in_step(3, WAIT);
    let with_next = shown(&cluster, &ids);
    let leader = cluster.leader();
    cluster.kill9(&format!("ctld-{leader}"));
    assert_eq!(shown(&cluster, &ids), with_next, "what the next leader shows");
    let said = up(&cluster, &[]);
    assert!(said.contains(&format!("started ctld-{leader} ")) && !said.contains("converting"), "{said}");
    cluster.wait_state(running, "RUNNING", WAIT);

    // Three replicas → one controller.
    let said = up(&cluster, &["--replicas", "1"]);
    assert!(said.contains("from 3 replicas to one controller"), "{said}");
    assert!(said.contains("6 jobs, next job id"), "{said}");
    let status = text(&cluster.drover("status").stdout);
    assert!(status.contains("ctld: running") && !status.contains("ctld-"), "{status}");
    assert_eq!(shown(&cluster, &ids), with_next, "what the single controller shows");
    assert!(alice_usage(&cluster) >= usage * 0.9, "usage carried back");
    alice_sees(&cluster, &[running]);
    let again = cluster.submit(Some("bob"), "again.sh", "#!/bin/sh\ntrue\n", &[]);
    assert_eq!(again, next + 1);
    cluster.wait_state(again, "COMPLETED", WAIT);
    // The job that ran through both conversions ends once, accounted.
    cluster.ok("scancel", &[&running.to_string()]);
    cluster.wait_state(running, "CANCELLED", WAIT);
    // The replaced state was set aside, not deleted.
    let old: Vec<String> = std::fs::read_dir(cluster.home())
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().filter(|n| n.starts_with("old-")).map(str::to_owned))
        .collect();
    assert!(!old.is_empty(), "DIR/old-<time>/ holds what the conversions replaced");
}
