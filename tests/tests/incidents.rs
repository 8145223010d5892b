//! Incident ownership on nodes, end to end with the real users alice and bob: a drain carries an
//! owner and a ticket that `sinfo -R`, `drover node history`, the status page and the metrics
//! show, and that survive kill -9 of ctld; a resume closes the incident; bad owners and tickets
//! are refused and change nothing. A node where jobs of two users keep dying of a hardware
//! signal (`SIGBUS`) is drained by ctld with those jobs as evidence, while one user's never drain
//! it (exit codes never count at all: `hostile_round2.rs`).

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::process::Output;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// The test config with bob as an operator, the HTTP listener, and `extra` lines at the end.
fn config(extra: &str) -> String {
    let base = CONFIG.replace("name = \"bob\"\n", "name = \"bob\"\nrole = \"operator\"\n");
    format!("{base}\n[metrics]\nlisten = \"localhost:0\"\n{extra}")
}

fn as_user(cluster: &Cluster, user: &str, command: &str, args: &[&str]) -> Output {
    cluster.run(Some(user), &cluster.workdir(Some(user)), command, args, None)
}

/// GET `path` from ctld's HTTP listener: the body.
fn get(cluster: &Cluster, path: &str) -> String {
    cluster.http_get(path).1
}

/// `drover node history NODE -P --noheader` as `user` (root when `None`): one field list per entry.
fn history(cluster: &Cluster, user: Option<&str>, node: &str) -> Vec<Vec<String>> {
    let out = cluster.run(user, &cluster.workdir(user), "drover", &["node", "history", node, "-P", "--noheader"], None);
    assert!(out.status.success(), "drover node history failed: {}", text(&out.stderr));
    text(&out.stdout).lines().map(|l| l.split('|').map(str::to_owned).collect()).collect()
}

/// The history once `ready` holds for it (entries are committed with the writer's next batch).
fn history_when(
    cluster: &Cluster,
    user: Option<&str>,
    node: &str,
    ready: impl Fn(&[Vec<String>]) -> bool,
) -> Vec<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = history(cluster, user, node);
        if ready(&rows) || Instant::now() > deadline {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn node_state(cluster: &Cluster, node: &str) -> String {
    cluster.ok("sinfo", &["-h", "-N", "-p", "main", "-n", node, "-o", "%t"]).trim().to_owned()
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_drain_carries_owner_and_ticket_through_history_status_page_metrics_and_a_restart() {
    require_users();
    let cluster = Cluster::start_with(&config(""));
    // A plain user may not drain, with or without an owner.
    let out =
        as_user(&cluster, "alice", "scontrol", &["update", "NodeName=n1", "State=DRAIN", "Reason=x", "Owner=alice"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // Bad owners and tickets are refused with what is allowed, and change nothing.
    for (word, expected) in [
        ("Owner=a b", "owner must be a name"),
        ("Owner=x;rm", "owner must be a name"),
        ("Ticket=https://t/1 2", "ticket must be an id or a link"),
    ] {
        let out = as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n1", "State=DRAIN", "Reason=x", word]);
        assert_eq!(out.status.code(), Some(1), "{word}: {}", text(&out.stdout));
        assert!(text(&out.stderr).contains(expected), "{word}: {}", text(&out.stderr));
    }
    let out = as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n1", "State=RESUME", "Owner=bob"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("owner and ticket go with state=drain or state=down"), "{}", text(&out.stderr));
    assert_eq!(node_state(&cluster, "n1"), "idle");
    assert!(history(&cluster, None, "n1").is_empty());

    let out = as_user(
        &cluster,
        "bob",
        "scontrol",
        &["update", "NodeName=n1", "State=DRAIN", "Reason=fan failing", "Owner=hw-team", "Ticket=INC-42"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(node_state(&cluster, "n1"), "drain");
    let reasons = cluster.ok("sinfo", &["-R", "-h", "-o", "%E|%u|%N"]);
    assert_eq!(reasons, "fan failing [owner=hw-team ticket=INC-42]|bob|n1\n");
    let rows = history_when(&cluster, None, "n1", |r| !r.is_empty());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][1..7], ["drain", "bob", "hw-team", "", "INC-42", "fan failing"], "{rows:?}");
    // Anyone may read a node's history, as anyone may run `sinfo -R`.
    assert_eq!(history(&cluster, Some("alice"), "n1"), rows);
    let page = get(&cluster, "/");
    assert!(
        page.contains("<tr><td>n1</td><td>DRAIN</td><td>fan failing</td><td>hw-team</td><td>INC-42</td><td>"),
        "{page}"
    );
    let metrics = get(&cluster, "/metrics");
    assert!(metrics.contains("drover_node_incidents_open{owner=\"hw-team\"} 1\n"), "{metrics}");
    assert!(metrics.contains("drover_node_incident_age_seconds{node=\"n1\",owner=\"hw-team\"} "), "{metrics}");

    // The incident and the history survive kill -9 of ctld.
    cluster.kill9("ctld");
    let out = cluster.drover("up");
    assert!(out.status.success(), "restart failed: {}", text(&out.stderr));
    assert_eq!(cluster.ok("sinfo", &["-R", "-h", "-o", "%E|%u|%N"]), reasons);
    assert_eq!(history(&cluster, None, "n1"), rows);

    // A resume closes the incident; its entry names the incident it closed.
    let out = as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n1", "State=RESUME"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = history_when(&cluster, None, "n1", |r| r.len() == 2);
    assert_eq!(rows[1][1..6], ["resume", "bob", "hw-team", "", "INC-42"], "{rows:?}");
    assert!(!cluster.ok("sinfo", &["-R", "-h"]).contains("n1"));
    let metrics = get(&cluster, "/metrics");
    assert!(!metrics.contains("drover_node_incidents_open{"), "{metrics}");
    assert!(!get(&cluster, "/").contains("<td>INC-42</td>"));
    // Unknown nodes are named in the error.
    let out = cluster.run(None, &cluster.workdir(None), "drover", &["node", "history", "n9"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("node n9 is not configured"), "{}", text(&out.stderr));
}

/// A job that dies of a bus error, which points at the node's memory.
const FAILING: &str = "#!/bin/sh\nkill -BUS $$\n";

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn hardware_failures_of_two_users_drain_a_node_with_evidence_one_users_never_do() {
    require_users();
    let extra = "[incidents]\nauto_drain_failures = 3\nauto_drain_users = 2\nauto_drain_window = 600\n";
    let cluster = Cluster::start_with(
        &config(extra).replace("min_job_age = 600\n", "min_job_age = 600\nprivate_data = [\"jobs\"]\n"),
    );
    // Five of alice's jobs alone dying of SIGBUS: each is in the history, the node stays in service.
    let mut alice_jobs = Vec::new();
    for i in 0..5 {
        let job = cluster.submit(Some("alice"), &format!("fail{i}.sh"), FAILING, &["-w", "n1"]);
        cluster.wait_state(job, "FAILED", LONG);
        alice_jobs.push(job);
    }
    let rows = history_when(&cluster, None, "n1", |r| r.len() == 5);
    assert_eq!(rows.len(), 5, "{rows:?}");
    for (row, job) in rows.iter().zip(&alice_jobs) {
        assert_eq!(row[1..5], ["job_failure", "alice", "", &job.to_string()], "{rows:?}");
        assert_eq!(row[7], "FAILED 0:7 (JobLaunchFailure)", "{rows:?}");
    }
    assert_eq!(node_state(&cluster, "n1"), "idle");

    // One of bob's: jobs of two users now fail there, and ctld drains the node.
    let bob_job = cluster.submit(Some("bob"), "fail.sh", FAILING, &["-w", "n1"]);
    cluster.wait_state(bob_job, "FAILED", LONG);
    let rows = history_when(&cluster, None, "n1", |r| r.iter().any(|e| e[1] == "auto_drain"));
    let drain = rows.iter().find(|e| e[1] == "auto_drain").unwrap_or_else(|| panic!("no automatic drain: {rows:?}"));
    assert_eq!(drain[3], "system");
    assert_eq!(drain[6], "jobs keep failing here");
    let recent = &alice_jobs[3..];
    let evidence = format!("3 jobs of 2 users failed within 600 s: jobs {},{},{bob_job}", recent[0], recent[1]);
    assert_eq!(drain[7], evidence, "{rows:?}");
    assert_eq!(node_state(&cluster, "n1"), "drain");
    assert_eq!(cluster.ok("sinfo", &["-R", "-h", "-o", "%E|%u|%N"]), "jobs keep failing here|root|n1\n");
    let page = get(&cluster, "/");
    assert!(page.contains("<td>jobs keep failing here</td><td>system</td>"), "{page}");
    // New work goes elsewhere; n2 is untouched.
    let next = cluster.submit(Some("alice"), "ok.sh", "#!/bin/sh\ntrue\n", &[]);
    cluster.wait_state(next, "COMPLETED", LONG);
    assert_eq!(cluster.ok("sacct", &["-j", &next.to_string(), "-X", "-n", "-P", "-o", "NodeList"]).trim(), "n2");

    // Under PrivateData=jobs alice sees the drain and her own failures, not bob's.
    let seen = history(&cluster, Some("alice"), "n1");
    assert!(seen.iter().any(|e| e[1] == "auto_drain"), "{seen:?}");
    assert!(!seen.iter().any(|e| e[4] == bob_job.to_string()), "{seen:?}");
    assert_eq!(seen.iter().filter(|e| e[1] == "job_failure").count(), 5, "{seen:?}");

    // The audit log has the system's drain with its evidence.
    let audit = cluster.ok("drover", &["audit", "-P", "-n", "-a", "drain"]);
    assert!(audit.contains(&format!("owner=system evidence={evidence}")), "{audit}");
}
