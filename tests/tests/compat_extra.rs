//! Slurm command-line compatibility, second round, end to end: `sbatch --test-only`,
//! `aftercorr` and `after:N+time` dependencies, `scontrol update TimeLimit=` of a running job
//! (the supervisor's limit really moves), hold/update of a single pending array task (split off
//! into its own record), stepped ranges and `-M` cluster lines, `--constraint` against node
//! features and `--deadline`.

use drover_e2e::{CONFIG, Cluster, text};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// Unix seconds of a `%FT%T` local timestamp, through `date`.
fn unix(timestamp: &str) -> i64 {
    let out = std::process::Command::new("date").args(["-d", timestamp, "+%s"]).output().expect("running date");
    text(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("date could not read {timestamp:?}"))
}

fn sacct_field(cluster: &Cluster, id: &str, field: &str) -> String {
    cluster.ok("sacct", &["-X", "-P", "-n", "-o", field, "-j", id]).trim().to_owned()
}

/// `--test-only` answers with where and when the job would start, stores nothing and uses no id;
/// a bad partition fails as Slurm's `allocation failure`.
#[test]
fn sbatch_test_only() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let out = cluster.run(None, &dir, "sbatch", &["--test-only", "-n", "2", "--wrap", "true"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    let line = text(&out.stderr);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[..2], ["sbatch:", "Job"], "{line}");
    assert_eq!(words[3..6], ["to", "start", "at"], "{line}");
    assert_eq!(words[7..], ["using", "2", "processors", "on", "nodes", "n1", "in", "partition", "main"], "{line}");
    let preview: u32 = words[2].parse().expect("job id");
    assert!((unix(words[6]) - drover_shared::now()).abs() <= 5, "an idle cluster starts it now: {line}");
    assert_eq!(cluster.ok("squeue", &["-h"]), "", "--test-only created a job");

    // Both nodes busy until the time limit: the estimate is that limit.
    let busy = cluster.submit(None, "busy.sh", "#!/bin/sh\nsleep 300\n", &["-N", "2", "--exclusive", "-t", "10"]);
    assert_eq!(busy, preview, "--test-only used up a job id");
    cluster.squeue_until(&busy.to_string(), "%t", |q| q.trim() == "R");
    let out = cluster.run(None, &dir, "sbatch", &["--test-only", "--wrap", "true"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line = text(&out.stderr);
    let start = unix(line.split_whitespace().nth(6).expect("start"));
    let expected = drover_shared::now() + 600;
    assert!((start - expected).abs() <= 10, "start {start}, expected about {expected}: {line}");
    assert!(line.contains(&format!("Job {} to start", busy + 1)), "{line}");

    let out = cluster.run(None, &dir, "sbatch", &["--test-only", "-p", "nosuch", "--wrap", "true"], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "allocation failure: Invalid partition name specified\n");
    cluster.ok("scancel", &[&busy.to_string()]);
}

/// `aftercorr`: task k waits for task k of the other array; a failed task k fails only task k.
#[test]
fn aftercorr_pairs_array_tasks() {
    let cluster = Cluster::start();
    let first = cluster.submit(
        None,
        "a.sh",
        "#!/bin/sh\nsleep $((1 + 2 * SLURM_ARRAY_TASK_ID))\n[ $SLURM_ARRAY_TASK_ID -ne 1 ]\n",
        &["--array=0-2"],
    );
    let second =
        cluster.submit(None, "b.sh", "#!/bin/sh\ntrue\n", &["--array=0-2", &format!("--dependency=aftercorr:{first}")]);
    let shown = cluster.squeue_until(&second.to_string(), "%i %t %r %E", |q| q.contains("Never"));
    assert!(
        shown.contains(&format!("{second}_[1] PD DependencyNeverSatisfied aftercorr:{first}_*(failed)")),
        "{shown}"
    );
    let deadline = Instant::now() + LONG;
    let id_of = |task: u32| sacct_field(&cluster, &format!("{second}_{task}"), "State");
    while Instant::now() < deadline && !(id_of(0) == "COMPLETED" && id_of(2) == "COMPLETED") {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!((id_of(0), id_of(2)), ("COMPLETED".into(), "COMPLETED".into()));
    for task in [0, 2] {
        let end = unix(&sacct_field(&cluster, &format!("{first}_{task}"), "End"));
        let start = unix(&sacct_field(&cluster, &format!("{second}_{task}"), "Start"));
        assert!(start >= end, "task {task} started at {start}, before its counterpart ended at {end}");
    }
    cluster.ok("scancel", &[&second.to_string()]);
}

/// `after:N+1`: the job waits a minute after N started, shown as Slurm shows it.
#[test]
fn after_with_delay() {
    let cluster = Cluster::start();
    let target = cluster.submit(None, "t.sh", "#!/bin/sh\nsleep 120\n", &[]);
    let dependent = cluster.submit(None, "d.sh", "#!/bin/sh\ntrue\n", &[&format!("--dependency=after:{target}+1")]);
    cluster.squeue_until(&target.to_string(), "%t", |q| q.trim() == "R");
    std::thread::sleep(Duration::from_secs(2));
    let line = cluster.ok("squeue", &["-h", "-j", &dependent.to_string(), "-o", "%t %r %E"]);
    assert_eq!(line, format!("PD Dependency after:{target}+1(unfulfilled)\n"));
    cluster.wait_state(dependent, "COMPLETED", Duration::from_secs(120));
    let started = unix(&sacct_field(&cluster, &target.to_string(), "Start"));
    let dependent_started = unix(&sacct_field(&cluster, &dependent.to_string(), "Start"));
    assert!(dependent_started >= started + 60, "{dependent_started} is less than a minute after {started}");
    cluster.ok("scancel", &[&target.to_string()]);
}

/// A running job's time limit changed with `scontrol update` reaches its supervisor: raised by an
/// admin, the job outlives its old limit; lowered by its owner, it ends `TIMEOUT` at the new one;
/// a user may not raise it. Time limits run 10× faster here (`DROVER_TIME_SCALE=0.1`).
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn running_time_limit_update_takes_effect() {
    drover_e2e::require_users();
    let cluster = Cluster::start_with_env(CONFIG, &[("DROVER_TIME_SCALE", "0.1")]);
    let raised = cluster.submit(None, "r.sh", "#!/bin/sh\nsleep 100\n", &["-t", "1"]);
    let lowered = cluster.submit(Some("alice"), "l.sh", "#!/bin/sh\nsleep 100\n", &["-t", "10"]);
    cluster.squeue_until(&raised.to_string(), "%t", |q| q.trim() == "R");
    cluster.ok("scontrol", &["update", &format!("JobId={raised}"), "TimeLimit=3"]);
    cluster.squeue_until(&lowered.to_string(), "%t", |q| q.trim() == "R");
    let alice_dir = cluster.workdir(Some("alice"));
    let out = cluster.run(
        Some("alice"),
        &alice_dir,
        "scontrol",
        &["update", &format!("JobId={lowered}"), "TimeLimit=20"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), format!("Access/permission denied for job {lowered}\n"));
    let out = cluster.run(
        Some("alice"),
        &alice_dir,
        "scontrol",
        &["update", &format!("JobId={lowered}"), "TimeLimit=1"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &lowered.to_string(), "-o", "%l"]), "1:00\n");

    cluster.wait_state(lowered, "TIMEOUT", LONG);
    let elapsed = |id: u32| {
        let start = unix(&sacct_field(&cluster, &id.to_string(), "Start"));
        unix(&sacct_field(&cluster, &id.to_string(), "End")) - start
    };
    // The old limit was 60 s (scaled), the new 6 s.
    assert!(elapsed(lowered) < 30, "the lowered job ran {} s", elapsed(lowered));
    cluster.wait_state(raised, "TIMEOUT", LONG);
    // The old limit was 6 s, the new 18 s.
    assert!(elapsed(raised) >= 15, "the raised job ran only {} s", elapsed(raised));
}

/// `scontrol hold N_T` and `update JobId=N_T` of tasks that have not started split each task out
/// of the array's pending range into its own record, shown on its own line; `release` acts on it.
#[test]
fn hold_and_update_single_pending_array_tasks() {
    let cluster = Cluster::start();
    let array = cluster.submit(None, "a.sh", "#!/bin/sh\ntrue\n", &["--array=0-3", "--begin=now+1hour", "-t", "30"]);
    let id = array.to_string();
    cluster.squeue_until(&id, "%i %r", |q| q.trim() == format!("{id}_[0-3] BeginTime"));
    cluster.ok("scontrol", &["hold", &format!("{id}_2")]);
    cluster.ok("scontrol", &["update", &format!("JobId={id}_1"), "TimeLimit=5"]);
    let queue = cluster.ok("squeue", &["-h", "-j", &id, "-o", "%i %r %l", "-S", "i"]);
    let mut lines: Vec<&str> = queue.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [format!("{id}_1 BeginTime 5:00"), format!("{id}_2 JobHeldAdmin 30:00"), format!("{id}_[0,3] BeginTime 30:00")],
        "{queue}"
    );
    // The split-off tasks are records of their own, with ids of their own.
    let records = cluster.ok("squeue", &["-h", "-j", &format!("{id}_2"), "-o", "%A %F %K"]);
    let fields: Vec<&str> = records.split_whitespace().collect();
    assert_ne!(fields[0], id, "{records}");
    assert_eq!(fields[1..], [id.as_str(), "2"]);
    cluster.ok("scontrol", &["release", &format!("{id}_2")]);
    cluster.squeue_until(&format!("{id}_2"), "%r", |q| q.trim() == "BeginTime");
    let out = cluster.run(None, &cluster.workdir(None), "scontrol", &["hold", &format!("{id}_9")], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(&format!("Invalid job id specified for job {id}_9")), "{}", text(&out.stderr));
    cluster.ok("scancel", &[&id]);
}

/// A stepped pending range prints as Slurm prints it (`N_[0-8:4]`), and `-M` makes squeue and
/// sinfo name the cluster first (`CLUSTER: <name>`, with or without a header).
#[test]
fn stepped_ranges_and_cluster_lines() {
    let cluster = Cluster::start();
    let array = cluster.submit(None, "s.sh", "#!/bin/sh\ntrue\n", &["--array=0-8:4", "-H"]);
    let id = array.to_string();
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &id, "-o", "%i"]), format!("{id}_[0-8:4]\n"));
    let shown = cluster.ok("scontrol", &["show", "job", &id]);
    assert!(shown.contains(&format!("ArrayJobId={id} ArrayTaskId=0-8:4 ")), "{shown}");
    assert_eq!(
        cluster.ok("squeue", &["-M", "testcluster", "-h", "-j", &id, "-o", "%i"]),
        format!("CLUSTER: testcluster\n{id}_[0-8:4]\n")
    );
    let with_header = cluster.ok("squeue", &["--clusters=testcluster", "-j", &id, "-o", "%i"]);
    assert_eq!(with_header, format!("CLUSTER: testcluster\nJOBID\n{id}_[0-8:4]\n"));
    let sinfo = cluster.ok("sinfo", &["-M", "testcluster", "-o", "%P"]);
    assert!(sinfo.starts_with("CLUSTER: testcluster\nPARTITION\nmain*\n"), "{sinfo}");
    for command in ["squeue", "sinfo"] {
        let out = cluster.run(None, &cluster.workdir(None), command, &["-M", "elsewhere"], None);
        assert_eq!(out.status.code(), Some(1));
        let expected = format!("{command}: error: 'elsewhere' can't be reached now");
        assert!(text(&out.stderr).starts_with(&expected), "{}", text(&out.stderr));
    }
    cluster.ok("scancel", &[&id]);
}

/// [`CONFIG`] with features: n1 has `ib` and `a100`, n2 has `eth`.
fn config_with_features() -> String {
    let nodes = "[[nodes]]\nnames = \"n[1-2]\"\ncpus = 4\nreal_memory = 8000\ngpus = { tesla = 2 }\n";
    assert!(CONFIG.contains(nodes), "the test config changed");
    let split = "[[nodes]]\nnames = \"n1\"\ncpus = 4\nreal_memory = 8000\ngpus = { tesla = 2 }\nfeatures = [\"ib\", \"a100\"]\n\n\
        [[nodes]]\nnames = \"n2\"\ncpus = 4\nreal_memory = 8000\ngpus = { tesla = 2 }\nfeatures = [\"eth\"]\n";
    CONFIG.replace(nodes, split)
}

/// `--constraint` places jobs on nodes with the features asked (`&`, `|`, parentheses); unknown
/// features and forms are refused as Slurm words it; sinfo and scontrol show the features.
#[test]
fn constraint_selects_nodes_by_feature() {
    let cluster = Cluster::start_with(&config_with_features());
    let dir = cluster.workdir(None);
    let nodes_of = |id: u32| {
        cluster.wait_state(id, "COMPLETED", LONG);
        sacct_field(&cluster, &id.to_string(), "NodeList")
    };
    let on_ib = cluster.submit(None, "c.sh", "#!/bin/sh\ntrue\n", &["-C", "ib"]);
    let on_eth = cluster.submit(None, "c.sh", "#!/bin/sh\ntrue\n", &["--constraint=eth"]);
    let on_both = cluster.submit(None, "c.sh", "#!/bin/sh\ntrue\n", &["-C", "(ib&a100)|eth", "-N", "2"]);
    let a100 = cluster.submit(None, "c.sh", "#!/bin/sh\ntrue\n", &["-C", "a100&ib", "-N", "1"]);
    let matching = cluster.submit(None, "c.sh", "#!/bin/sh\ntrue\n", &["-C", "[a100|eth]", "-x", "n1"]);
    assert_eq!(nodes_of(on_ib), "n1");
    assert_eq!(nodes_of(on_eth), "n2");
    assert_eq!(nodes_of(on_both), "n[1-2]");
    assert_eq!(nodes_of(a100), "n1");
    assert_eq!(nodes_of(matching), "n2");
    for (constraint, message) in [
        ("ib&eth", "Requested node configuration is not available"),
        ("nosuch", "Invalid feature specification"),
        ("a100*2", "Invalid feature specification"),
        ("[ib|eth] -N 2", "Invalid feature specification"),
    ] {
        let (constraint, nodes) = constraint.split_once(" -N ").unwrap_or((constraint, "1"));
        let out = cluster.run(None, &dir, "sbatch", &["-C", constraint, "-N", nodes, "--wrap", "true"], None);
        assert_eq!(out.status.code(), Some(1), "{constraint}");
        assert_eq!(
            text(&out.stderr),
            format!("sbatch: error: Batch job submission failed: {message}\n"),
            "{constraint}"
        );
    }
    assert_eq!(cluster.ok("sinfo", &["-N", "-h", "-p", "main", "-o", "%N %f %b"]), "n1 ib,a100 ib,a100\nn2 eth eth\n");
    let shown = cluster.ok("scontrol", &["show", "node", "n2"]);
    assert!(shown.contains("AvailableFeatures=eth\n   ActiveFeatures=eth\n"), "{shown}");
}

/// `--deadline`: a job that can still end by its deadline runs; one that cannot (at once, or
/// after waiting held) ends `DEADLINE`; a deadline already past is refused.
#[test]
fn deadline_ends_jobs_that_cannot_finish_in_time() {
    let cluster = Cluster::start();
    let fine = cluster.submit(None, "d.sh", "#!/bin/sh\ntrue\n", &["--deadline=now+1hour", "-t", "5"]);
    let too_long = cluster.submit(None, "d.sh", "#!/bin/sh\ntrue\n", &["--deadline=now+1minute", "-t", "5"]);
    let held = cluster.submit(None, "d.sh", "#!/bin/sh\ntrue\n", &["-H", "--deadline=now+70seconds", "-t", "1"]);
    cluster.wait_state(fine, "COMPLETED", LONG);
    cluster.wait_state(too_long, "DEADLINE", LONG);
    assert_eq!(sacct_field(&cluster, &too_long.to_string(), "Start"), "Unknown", "it never started");
    let queue = cluster.ok("squeue", &["-h", "-j", &held.to_string(), "-o", "%t %r"]);
    assert_eq!(queue, "PD JobHeldUser\n", "still in time while held");
    cluster.wait_state(held, "DEADLINE", LONG);
    let state = cluster.ok("squeue", &["-h", "-t", "all", "-j", &held.to_string(), "-o", "%T %r"]);
    assert_eq!(state, "DEADLINE DeadLine\n");
    let out = cluster.run(None, &cluster.workdir(None), "sbatch", &["--deadline=2020-01-01", "--wrap", "true"], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "sbatch: error: Batch job submission failed: Invalid time specification\n");
}

/// sacct `TotalCPU`, `UserCPU`, `SystemCPU` and `MaxRSS` are what the batch script's processes
/// used, measured by the supervisor: a script that burns CPU and fills a 64 MiB buffer shows both.
#[test]
fn sacct_shows_measured_cpu_and_memory() {
    let cluster = Cluster::start();
    let script = "#!/bin/sh\ni=0\nwhile [ $i -lt 300000 ]; do i=$((i+1)); done\n\
        dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null\n";
    let job = cluster.submit(None, "u.sh", script, &[]);
    cluster.wait_state(job, "COMPLETED", LONG);
    let rows =
        cluster.ok("sacct", &["-P", "-n", "-o", "JobID,TotalCPU,UserCPU,SystemCPU,MaxRSS", "-j", &job.to_string()]);
    let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let seconds = |text: &str| -> f64 {
        let (minutes, rest) = text.split_once(':').unwrap_or_else(|| panic!("{text}"));
        minutes.parse::<f64>().unwrap() * 60.0 + rest.parse::<f64>().unwrap_or_else(|_| panic!("{text}"))
    };
    let (job_row, batch_row) = (&rows[0], &rows[1]);
    assert_eq!(batch_row[0], format!("{job}.batch"));
    assert!(seconds(job_row[2]) > 0.1, "UserCPU {}", job_row[2]);
    assert!(seconds(job_row[1]) >= seconds(job_row[2]), "TotalCPU {} < UserCPU {}", job_row[1], job_row[2]);
    assert_eq!(job_row[4], "", "MaxRSS is a step field");
    assert_eq!(batch_row[1..4], job_row[1..4]);
    let rss = batch_row[4];
    let megabytes: f64 = rss.strip_suffix('M').and_then(|m| m.parse().ok()).unwrap_or_else(|| panic!("MaxRSS {rss}"));
    assert!((64.0..200.0).contains(&megabytes), "MaxRSS {rss}");
}

/// scancel's `-w`, `-q`, `-R` and `-i`: only the jobs every filter selects (and the user
/// confirms) are cancelled.
#[test]
fn scancel_node_qos_reservation_and_interactive() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let on_n1 = cluster.submit(None, "s.sh", "#!/bin/sh\nsleep 60\n", &["-w", "n1"]);
    let on_n2 = cluster.submit(None, "s.sh", "#!/bin/sh\nsleep 60\n", &["-w", "n2"]);
    for id in [on_n1, on_n2] {
        cluster.squeue_until(&id.to_string(), "%t", |q| q.trim() == "R");
    }
    let state = |id: u32| cluster.ok("squeue", &["-h", "-t", "all", "-j", &id.to_string(), "-o", "%T"]);
    cluster.ok("scancel", &["-R", "maint"]);
    cluster.ok("scancel", &["-q", "nosuch"]);
    assert_eq!((state(on_n1), state(on_n2)), ("RUNNING\n".into(), "RUNNING\n".into()));

    let out = cluster.run(None, &dir, "scancel", &["-i", "-w", "n[1-2]"], Some("n\nn\n"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let asked = text(&out.stdout);
    assert!(asked.contains(&format!("Cancel job_id={on_n1} name=s.sh partition=main [y/n]? ")), "{asked}");
    assert_eq!((state(on_n1), state(on_n2)), ("RUNNING\n".into(), "RUNNING\n".into()));

    cluster.ok("scancel", &["-q", "normal", "--nodelist=n2"]);
    cluster.wait_state(on_n2, "CANCELLED", LONG);
    assert_eq!(state(on_n1), "RUNNING\n");
    let out = cluster.run(None, &dir, "scancel", &["--interactive", &on_n1.to_string()], Some("y\n"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    cluster.wait_state(on_n1, "CANCELLED", LONG);
}

/// A time limit changed while the batch host's noded is down reaches the supervisor when noded
/// registers again (time limits run 10× faster: the old one is 180 s, the new one 6 s).
#[test]
fn time_limit_change_reaches_a_node_that_was_away() {
    let cluster = Cluster::start_with_env(CONFIG, &[("DROVER_TIME_SCALE", "0.1")]);
    let job = cluster.submit(
        None,
        "r.sh",
        "#!/bin/sh\necho started\nsleep 300\n",
        &["-t", "30", "-w", "n1", "-o", "away.out"],
    );
    // The script itself must run (its supervisor outlives noded), not only be allocated.
    let output = cluster.workdir(None).join("away.out");
    let deadline = Instant::now() + LONG;
    while std::fs::read_to_string(&output).unwrap_or_default().is_empty() {
        assert!(Instant::now() < deadline, "job never started\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster.kill9("noded-n1");
    std::thread::sleep(Duration::from_secs(1));
    cluster.ok("scontrol", &["update", &format!("JobId={job}"), "TimeLimit=1"]);
    let out = cluster.drover("up");
    assert!(out.status.success(), "restart failed: {}{}", text(&out.stdout), text(&out.stderr));
    cluster.wait_state(job, "TIMEOUT", LONG);
    let start = unix(&sacct_field(&cluster, &job.to_string(), "Start"));
    let elapsed = unix(&sacct_field(&cluster, &job.to_string(), "End")) - start;
    assert!(elapsed < 60, "the job ran {elapsed} s: the new limit never reached its supervisor");
}

/// An srun step's row in sacct shows what its tasks used on every node: CPU time added up, the
/// largest RSS (two tasks on two nodes, each filling a 48 MiB buffer).
#[test]
fn sacct_shows_step_usage() {
    let cluster = Cluster::start();
    let script = "#!/bin/sh\n#SBATCH -N 2 -n 2\n\
        $DROVER_HOME/bin/srun sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; \
        dd if=/dev/zero of=/dev/null bs=48M count=1 2>/dev/null'\n";
    let job = cluster.submit(None, "s.sh", script, &[]);
    cluster.wait_state(job, "COMPLETED", LONG);
    let id = job.to_string();
    let step_row = || {
        let rows = cluster.ok("sacct", &["-P", "-n", "-o", "JobID,TotalCPU,MaxRSS,AveRSS,NodeList", "-j", &id]);
        rows.lines().find(|l| l.starts_with(&format!("{id}.0|"))).map(str::to_owned).unwrap_or_default()
    };
    // The nodes send a step's usage on their next rescan (within a second of its end).
    let deadline = Instant::now() + LONG;
    let mut row = step_row();
    while row.split('|').nth(2).unwrap_or_default().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        row = step_row();
    }
    let fields: Vec<&str> = row.split('|').collect();
    assert_eq!(fields.len(), 5, "{row}");
    assert_eq!(fields[4], "n[1-2]");
    let (minutes, seconds) = fields[1].split_once(':').unwrap_or_else(|| panic!("TotalCPU {row}"));
    let total = minutes.parse::<f64>().unwrap() * 60.0 + seconds.parse::<f64>().unwrap();
    assert!(total > 0.1, "TotalCPU {row}");
    let rss: f64 = fields[2].strip_suffix('M').and_then(|m| m.parse().ok()).unwrap_or_else(|| panic!("MaxRSS {row}"));
    assert!((48.0..150.0).contains(&rss), "MaxRSS {row}");
    assert_eq!(fields[3], "", "AveRSS of a step is not measured per task");
}
