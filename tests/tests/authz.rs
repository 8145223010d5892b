//! Authorization and audit, end to end with the real users alice and bob: users act only on their
//! own jobs; operators act on any job and drain or resume nodes but cannot reconfigure; admins
//! reconfigure, and a broken config file leaves the old one in force; a drain survives a ctld
//! restart; every state-changing request is in the audit log with its outcome, refused ones too.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::process::Output;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);
/// A job that stays pending (begin time an hour away) until the test is done with it.
const LATER: &str = "#!/bin/sh\n#SBATCH --begin=now+3600\ntrue\n";
const SLEEPER: &str = "#!/bin/sh\nsleep 300\n";

/// The test config with bob as an operator.
fn operator_config() -> String {
    CONFIG.replace("name = \"bob\"\n", "name = \"bob\"\nrole = \"operator\"\n")
}

fn as_user(cluster: &Cluster, user: &str, command: &str, args: &[&str]) -> Output {
    cluster.run(Some(user), &cluster.workdir(Some(user)), command, args, None)
}

/// `squeue` state and reason of a job.
fn queue_state(cluster: &Cluster, job_id: u32) -> String {
    cluster.ok("squeue", &["-h", "-j", &job_id.to_string(), "-o", "%T|%r|%l"]).trim().to_owned()
}

/// Compact sinfo state of one node in partition main.
fn node_state(cluster: &Cluster, node: &str) -> String {
    cluster.ok("sinfo", &["-h", "-N", "-p", "main", "-n", node, "-o", "%t"]).trim().to_owned()
}

fn wait_node_state(cluster: &Cluster, node: &str, state: &str) {
    let deadline = Instant::now() + LONG;
    while Instant::now() < deadline {
        if node_state(cluster, node) == state {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("node {node} did not become {state}; last {}\n{}", node_state(cluster, node), cluster.logs());
}

fn refused(out: &Output, stderr: &str) {
    assert_eq!(out.status.code(), Some(1), "stdout {} stderr {}", text(&out.stdout), text(&out.stderr));
    assert_eq!(text(&out.stderr), stderr);
}

/// The audit log as root sees it: `(user, action, job id, outcome)` per record.
fn audit(cluster: &Cluster, args: &[&str]) -> Vec<(String, String, String, String)> {
    let mut all = vec!["audit", "-P", "-n"];
    all.extend_from_slice(args);
    let out = cluster.run(None, &cluster.workdir(None), "drover", &all, None);
    assert!(out.status.success(), "drover audit failed: {}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('|').collect();
            assert_eq!(f.len(), 8, "{line}");
            assert!(f[0].len() == 19 && f[2].parse::<u32>().is_ok(), "{line}");
            (f[1].to_owned(), f[4].to_owned(), f[5].to_owned(), f[6].to_owned())
        })
        .collect()
}

/// The audit log once `ready` holds for it: records are committed with the writer's next batch,
/// a moment after the answer to a refused request.
fn audit_when(
    cluster: &Cluster,
    args: &[&str],
    ready: impl Fn(&[(String, String, String, String)]) -> bool,
) -> Vec<(String, String, String, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = audit(cluster, args);
        if ready(&rows) || Instant::now() > deadline {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn has(rows: &[(String, String, String, String)], user: &str, action: &str, job: &str, outcome: &str) -> bool {
    rows.iter().any(|(u, a, j, o)| u == user && a == action && j == job && o == outcome)
}

/// A plain user cannot hold, update, requeue or cancel another user's job, nor drain a node,
/// update it or reconfigure; each refusal has Slurm's message, changes nothing and is audited.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn users_act_only_on_their_own_jobs() {
    require_users();
    let cluster = Cluster::start();
    let pending = cluster.submit(Some("alice"), "later.sh", LATER, &["-t", "30"]);
    let running = cluster.submit(Some("alice"), "sleep.sh", SLEEPER, &[]);
    cluster.wait_state(running, "RUNNING", LONG);
    let before = queue_state(&cluster, pending);
    assert_eq!(before, "PENDING|BeginTime|30:00");
    let (p, r) = (pending.to_string(), running.to_string());

    let denied = |id: &str| format!("Access/permission denied for job {id}\n");
    refused(&as_user(&cluster, "bob", "scontrol", &["hold", &p]), &denied(&p));
    refused(&as_user(&cluster, "bob", "scontrol", &["update", &format!("JobId={p}"), "TimeLimit=5"]), &denied(&p));
    refused(&as_user(&cluster, "bob", "scontrol", &["requeue", &r]), &denied(&r));
    let out = as_user(&cluster, "bob", "scancel", &[&r]);
    assert_eq!(text(&out.stderr), format!("scancel: error: Kill job error on job id {r}: Access/permission denied\n"));
    refused(
        &as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n1", "State=DRAIN", "Reason=mine now"]),
        "slurm_update error: Access/permission denied\n",
    );
    refused(
        &as_user(&cluster, "alice", "scontrol", &["update", "NodeName=n[1-2]", "State=DOWN", "Reason=x"]),
        "slurm_update error: Access/permission denied\n",
    );
    refused(
        &as_user(&cluster, "bob", "scontrol", &["reconfigure"]),
        "slurm_reconfigure error: Access/permission denied\n",
    );
    // A reason is required before anything is sent, as in Slurm.
    refused(
        &as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n1", "State=DRAIN"]),
        "You must specify a reason when DOWNING or DRAINING a node. Request denied\n",
    );

    // Nothing changed.
    assert_eq!(queue_state(&cluster, pending), before);
    assert!(queue_state(&cluster, running).starts_with("RUNNING|"));
    assert_eq!(cluster.ok("sinfo", &["-h", "-R"]), "");
    assert!(["mix", "alloc", "idle"].contains(&node_state(&cluster, "n1").as_str()));

    // The owner may.
    let out = as_user(&cluster, "alice", "scontrol", &["hold", &p]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(queue_state(&cluster, pending), "PENDING|JobHeldUser|30:00");

    // Every refusal is audited; bob sees his own records only, and may not ask for alice's.
    let denied = "Access/permission denied";
    let rows = audit_when(&cluster, &["--user", "bob"], |rows| has(rows, "bob", "reconfigure", "", denied));
    for (action, job) in
        [("hold", p.as_str()), ("update", &p), ("requeue", &r), ("cancel", &r), ("drain", ""), ("reconfigure", "")]
    {
        assert!(has(&rows, "bob", action, job, denied), "no refused {action} {job} in {rows:#?}");
    }
    assert!(has(
        &audit_when(&cluster, &["--user", "alice", "--action", "down"], |r| !r.is_empty()),
        "alice",
        "down",
        "",
        denied
    ));
    assert!(has(&audit(&cluster, &["--job", &p]), "alice", "hold", &p, "ok"));
    let own = as_user(&cluster, "bob", "drover", &["audit", "-P", "-n"]);
    assert!(own.status.success(), "{}", text(&own.stderr));
    assert!(text(&own.stdout).lines().all(|l| l.split('|').nth(1) == Some("bob")), "{}", text(&own.stdout));
    assert!(text(&own.stdout).contains("|reconfigure|"), "{}", text(&own.stdout));
    let out = as_user(&cluster, "bob", "drover", &["audit", "--user", "alice"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("drover audit: error: Access/permission denied"), "{}", text(&out.stderr));
}

/// An operator drains a node (no new jobs; the running one finishes: `drng` → `drain`), holds
/// another user's job, but cannot reconfigure; the drain, its reason, user and time survive a
/// ctld restart; `RESUME` puts the node back and the waiting job starts.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn operator_drains_and_holds_but_cannot_reconfigure() {
    require_users();
    let cluster = Cluster::start_with(&operator_config());
    let pending = cluster.submit(Some("alice"), "later.sh", LATER, &[]);
    let p = pending.to_string();
    let out = as_user(&cluster, "bob", "scontrol", &["hold", &p]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(queue_state(&cluster, pending).starts_with("PENDING|JobHeldAdmin|"));
    // alice cannot release an operator's hold; bob can.
    refused(
        &as_user(&cluster, "alice", "scontrol", &["release", &p]),
        &format!("Access/permission denied for job {p}\n"),
    );
    assert!(as_user(&cluster, "bob", "scontrol", &["release", &p]).status.success());
    assert!(queue_state(&cluster, pending).starts_with("PENDING|BeginTime|"));
    refused(
        &as_user(&cluster, "bob", "scontrol", &["reconfigure"]),
        "slurm_reconfigure error: Access/permission denied\n",
    );

    let running = cluster.submit(Some("alice"), "sleep.sh", SLEEPER, &["-w", "n1"]);
    cluster.wait_state(running, "RUNNING", LONG);
    let out = as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n1", "State=DRAIN", "Reason=fan failing"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(node_state(&cluster, "n1"), "drng");
    let show = cluster.ok("scontrol", &["show", "node", "n1"]);
    assert!(show.contains("State=MIXED+DRAIN "), "{show}");
    assert!(show.contains("Reason=fan failing [bob@"), "{show}");
    let waiting = cluster.submit(Some("alice"), "next.sh", "#!/bin/sh\ntrue\n", &["-w", "n1"]);
    std::thread::sleep(Duration::from_secs(3));
    assert!(queue_state(&cluster, waiting).starts_with("PENDING|"), "{}", queue_state(&cluster, waiting));
    assert!(queue_state(&cluster, running).starts_with("RUNNING|"));
    cluster.ok("scancel", &[&running.to_string()]);
    wait_node_state(&cluster, "n1", "drain");

    // The drain, its reason, user and time survive kill -9 of ctld.
    let reasons = cluster.ok("sinfo", &["-R"]);
    let lines: Vec<&str> = reasons.lines().collect();
    assert_eq!(lines[0], "REASON               USER      TIMESTAMP           NODELIST");
    assert_eq!(lines.len(), 2, "{reasons}");
    assert!(lines[1].starts_with("fan failing          bob       20") && lines[1].ends_with(" n1"), "{reasons}");
    cluster.kill9("ctld");
    let out = cluster.drover("up");
    assert!(out.status.success(), "restart failed: {}", text(&out.stderr));
    assert_eq!(cluster.ok("sinfo", &["-R"]), reasons);
    wait_node_state(&cluster, "n1", "drain");
    assert!(queue_state(&cluster, waiting).starts_with("PENDING|"));

    let out = as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n1", "State=RESUME"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    cluster.wait_state(waiting, "COMPLETED", LONG);
    assert_eq!(cluster.ok("sinfo", &["-h", "-R"]), "");
    refused(
        &as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n9", "State=DRAIN", "Reason=x"]),
        "slurm_update error: Invalid node name specified\n",
    );
}

/// An admin's reconfigure applies a changed file (a partition limit and a role), and refuses a
/// broken one with the loader's error while the old config stays in force.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn reconfigure_applies_valid_files_and_keeps_the_old_config_otherwise() {
    require_users();
    let cluster = Cluster::start();
    let file = cluster.config_file();
    let original = std::fs::read_to_string(&file).unwrap();
    assert_eq!(cluster.ok("sinfo", &["-h", "-p", "main", "-o", "%l"]).trim(), "1-00:00:00");
    refused(
        &as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n2", "State=DRAIN", "Reason=x"]),
        "slurm_update error: Access/permission denied\n",
    );

    let changed = original
        .replace("max_time = \"1-00:00:00\"", "max_time = \"2-00:00:00\"")
        .replace("name = \"bob\"\n", "name = \"bob\"\nrole = \"operator\"\n");
    assert_ne!(changed, original, "the test config's layout changed; adapt the test");
    assert!(changed.contains("role = \"operator\""), "{changed}");
    std::fs::write(&file, &changed).unwrap();
    refused(
        &as_user(&cluster, "bob", "scontrol", &["reconfigure"]),
        "slurm_reconfigure error: Access/permission denied\n",
    );
    assert_eq!(cluster.ok("sinfo", &["-h", "-p", "main", "-o", "%l"]).trim(), "1-00:00:00");
    assert_eq!(cluster.ok("scontrol", &["reconfigure"]), "");
    assert_eq!(cluster.ok("sinfo", &["-h", "-p", "main", "-o", "%l"]).trim(), "2-00:00:00");
    let out = as_user(
        &cluster,
        "bob",
        "scontrol",
        &["update", "NodeName=n2", "State=DRAIN", "Reason=bob is an operator now"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(node_state(&cluster, "n2"), "drain");

    // A broken file: refused with file:line:column, the old config (and bob's role) stay.
    let broken = changed.replace("role = \"operator\"", "role = \"wizard\"");
    std::fs::write(&file, &broken).unwrap();
    let line = broken.lines().position(|l| l == "role = \"wizard\"").unwrap() + 1;
    let out = cluster.run(None, &cluster.workdir(None), "scontrol", &["reconfigure"], None);
    assert_eq!(out.status.code(), Some(1));
    let expected = format!(
        "slurm_reconfigure error: Invalid configuration file\n{}:{line}:8: users[1].role: unknown role `wizard` (expected user, operator or admin)\n",
        file.display()
    );
    assert_eq!(text(&out.stderr), expected);
    assert_eq!(cluster.ok("sinfo", &["-h", "-p", "main", "-o", "%l"]).trim(), "2-00:00:00");
    let out = as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n2", "State=RESUME"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(node_state(&cluster, "n2"), "idle");
    let rows = audit_when(&cluster, &["--action", "reconfigure"], |rows| rows.len() >= 3);
    assert!(has(&rows, "bob", "reconfigure", "", "Access/permission denied"), "{rows:#?}");
    assert!(has(&rows, "root", "reconfigure", "", "ok"), "{rows:#?}");
    assert!(has(&rows, "root", "reconfigure", "", "Invalid configuration file"), "{rows:#?}");
}

/// Every state-changing request is in the audit log with who did it and the outcome: submit,
/// cancel, hold, release, update, requeue, steps, drain, resume, reconfigure, refused ones included.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn audit_records_every_action_with_its_outcome() {
    require_users();
    let cluster = Cluster::start_with(&operator_config());
    let pending = cluster.submit(Some("alice"), "later.sh", LATER, &["-t", "30"]);
    let running = cluster.submit(Some("alice"), "sleep.sh", SLEEPER, &["--requeue"]);
    cluster.wait_state(running, "RUNNING", LONG);
    let (p, r) = (pending.to_string(), running.to_string());
    let out =
        cluster.run(Some("alice"), &cluster.workdir(Some("alice")), "sbatch", &["-p", "nope", "--wrap", "true"], None);
    assert!(!out.status.success());
    let ok = |user: &str, command: &str, args: &[&str]| {
        let out = as_user(&cluster, user, command, args);
        assert!(out.status.success(), "{user} {command} {args:?}: {}", text(&out.stderr));
    };
    ok("alice", "srun", &[&format!("--jobid={r}"), "true"]);
    let out = as_user(&cluster, "bob", "srun", &[&format!("--jobid={r}"), "true"]);
    assert!(!out.status.success(), "bob ran a step in alice's job");
    ok("bob", "scontrol", &["hold", &p]);
    ok("bob", "scontrol", &["release", &p]);
    ok("alice", "scontrol", &["update", &format!("JobId={p}"), "TimeLimit=10"]);
    ok("alice", "scontrol", &["requeue", &r]);
    ok("bob", "scontrol", &["update", "NodeName=n2", "State=DRAIN", "Reason=audit"]);
    ok("bob", "scontrol", &["update", "NodeName=n2", "State=RESUME"]);
    ok("alice", "scancel", &[&p]);
    cluster.ok("scontrol", &["reconfigure"]);
    let _ = as_user(&cluster, "alice", "scontrol", &["update", "NodeName=n2", "State=DRAIN", "Reason=x"]);
    let _ = as_user(&cluster, "alice", "scontrol", &["update", &format!("JobId={p}"), "TimeLimit=5"]);

    let rows =
        audit_when(&cluster, &[], |rows| has(rows, "alice", "update", &p, "Job/step already completing or completed"));
    let expected = [
        ("alice", "submit", p.as_str(), "ok"),
        ("alice", "submit", "", "Invalid partition name specified"),
        ("bob", "hold", &p, "ok"),
        ("bob", "release", &p, "ok"),
        ("alice", "update", &p, "ok"),
        ("alice", "requeue", &r, "ok"),
        ("alice", "step", &r, "ok"),
        ("bob", "step", &r, "Access/permission denied"),
        ("bob", "drain", "", "ok"),
        ("bob", "resume", "", "ok"),
        ("alice", "cancel", &p, "ok"),
        ("root", "reconfigure", "", "ok"),
        ("alice", "drain", "", "Access/permission denied"),
        ("alice", "update", &p, "Job/step already completing or completed"),
    ];
    for (user, action, job, outcome) in expected {
        assert!(has(&rows, user, action, job, outcome), "missing {user} {action} {job} {outcome} in {rows:#?}");
    }
    // Filters: by action, by job, and a time window that ends before everything.
    assert!(audit(&cluster, &["--action", "drain,resume"]).iter().all(|r| r.1 == "drain" || r.1 == "resume"));
    assert!(audit(&cluster, &["--job", &r]).iter().all(|row| row.2 == r));
    assert!(audit(&cluster, &["--until", "2000-01-01T00:00:00"]).is_empty());
    assert!(audit(&cluster, &["--since", "now-1hour"]).len() >= rows.len());
    // The table form has a header and one line per record.
    let table = cluster.ok("drover", &["audit", "--action", "submit"]);
    assert!(
        table.starts_with("TIME                USER       UID    ORIGIN       ACTION       JOBID    OUTCOME"),
        "{table}"
    );
    assert_eq!(table.lines().count(), 1 + audit(&cluster, &["--action", "submit"]).len());
    assert!(table.contains(" local "), "{table}");
}

/// `State=DOWN` (an operator's) ends the node's jobs `NODE_FAIL` at once and gives it no work
/// until `RESUME`; the reason shows in `sinfo -R` and `scontrol show node`.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn down_ends_the_nodes_jobs_until_resume() {
    require_users();
    let cluster = Cluster::start_with(&operator_config());
    // A job that may not be requeued ends NODE_FAIL; one that may pends again (Slurm's JobRequeue).
    let running = cluster.submit(Some("alice"), "sleep.sh", SLEEPER, &["-w", "n2", "--no-requeue"]);
    let requeued = cluster.submit(Some("alice"), "sleep.sh", SLEEPER, &["-w", "n2"]);
    cluster.wait_state(running, "RUNNING", LONG);
    cluster.wait_state(requeued, "RUNNING", LONG);
    let out = as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n2", "State=DOWN", "Reason=PSU"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    cluster.wait_state(running, "NODE_FAIL", LONG);
    cluster.wait_for("the requeueable job to pend again", LONG, || {
        queue_state(&cluster, requeued).starts_with("PENDING|").then_some(())
    });
    let out = cluster.ok("scancel", &[&requeued.to_string()]);
    assert!(out.is_empty(), "{out}");
    assert_eq!(node_state(&cluster, "n2"), "down");
    let show = cluster.ok("scontrol", &["show", "node", "n2"]);
    assert!(show.contains("State=DOWN ") && show.contains("Reason=PSU [bob@"), "{show}");
    assert!(cluster.ok("sinfo", &["-h", "-R"]).starts_with("PSU                  bob "));
    let waiting = cluster.submit(Some("alice"), "next.sh", "#!/bin/sh\ntrue\n", &["-w", "n2"]);
    std::thread::sleep(Duration::from_secs(2));
    assert!(queue_state(&cluster, waiting).starts_with("PENDING|"), "{}", queue_state(&cluster, waiting));
    let out = as_user(&cluster, "bob", "scontrol", &["update", "NodeName=n2", "State=RESUME"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    cluster.wait_state(waiting, "COMPLETED", LONG);
    let rows = audit_when(&cluster, &["--action", "down,resume"], |rows| rows.len() >= 2);
    assert!(has(&rows, "bob", "down", "", "ok") && has(&rows, "bob", "resume", "", "ok"), "{rows:#?}");
}
