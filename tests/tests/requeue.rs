//! Requeue end to end: every start of a job is a run with its own number, directory and cgroups on
//! the node. A requeued job starts again at once, even on the same node; `requeuehold` leaves it
//! held; a node failure requeues the jobs that may be requeued and ends the others `NODE_FAIL`;
//! when the node comes back its stale runs are killed; `sacct -D` shows every run.

use drover_e2e::{Cluster, text};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// `squeue -h -j <id> -o <format>`.
fn squeue(cluster: &Cluster, job_id: u32, format: &str) -> String {
    cluster.ok("squeue", &["-h", "-j", &job_id.to_string(), "-o", format]).trim().to_owned()
}

/// The run directories node `node` holds (`<id>.<run>`), sorted.
fn run_dirs(cluster: &Cluster, node: &str) -> Vec<String> {
    let dir = cluster.home().join(format!("noded-{node}")).join("jobs");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Whether a process is alive (not gone, not a zombie).
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
}

/// A script that records, per run, its pid and its cgroups in the working directory, then sleeps.
fn recording_script(tag: &str) -> String {
    format!(
        "#!/bin/sh\n#SBATCH -o {tag}-%j.out --open-mode=append\nrun=${{SLURM_RESTART_COUNT:-0}}\necho run=$run\n\
         echo $$ > {tag}-$SLURM_JOB_ID.$run.pid\ncat /proc/self/cgroup > {tag}-$SLURM_JOB_ID.$run.cgroup\nexec sleep 300\n"
    )
}

fn file(cluster: &Cluster, name: &str) -> PathBuf {
    cluster.workdir(None).join(name)
}

/// `scontrol requeue`: the job pends again and starts its next run at once on the same node (no
/// `BeginTime` delay), in a directory of its own; the earlier run's directory goes away once its
/// end is acknowledged; `sacct -D` shows both runs, plain `sacct` the latest.
#[test]
fn requeued_job_relaunches_at_once_on_the_same_node() {
    let cluster = Cluster::start();
    let job_id = cluster.submit(None, "rq.sh", &recording_script("rq"), &["-w", "n1"]);
    let first_pid = file(&cluster, &format!("rq-{job_id}.0.pid"));
    cluster.wait_for("the first run", LONG, || first_pid.exists().then_some(()));
    assert_eq!(run_dirs(&cluster, "n1"), [format!("{job_id}.0")]);
    let requeued_at = Instant::now();
    cluster.ok("scontrol", &["requeue", &job_id.to_string()]);
    let second_pid = file(&cluster, &format!("rq-{job_id}.1.pid"));
    cluster.wait_for("the second run", LONG, || second_pid.exists().then_some(()));
    let relaunch = requeued_at.elapsed();
    eprintln!("scontrol requeue to the next run on the same node: {relaunch:?}");
    // Before run numbers a requeued job waited 10 s (reason BeginTime); now only the kill and one
    // scheduling pass stand between the runs.
    assert!(relaunch < Duration::from_secs(8), "relaunch took {relaunch:?}");
    assert_eq!(squeue(&cluster, job_id, "%t %N"), "R n1");
    let shown = cluster.ok("scontrol", &["show", "job", &job_id.to_string()]);
    assert!(shown.contains("Restarts=1 "), "{shown}");
    let old_pid: i32 = std::fs::read_to_string(&first_pid).unwrap().trim().parse().unwrap();
    assert!(!alive(old_pid), "the first run's script still runs");
    cluster.wait_for("the first run's directory to go", LONG, || {
        (run_dirs(&cluster, "n1") == [format!("{job_id}.1")]).then_some(())
    });
    // The runs had different cgroups (job_<id> and job_<id>_1) and the first one's are gone.
    // The script writes its pid file, then its cgroups: wait for the whole file.
    let cgroups_of = |run: u32| {
        let path = file(&cluster, &format!("rq-{job_id}.{run}.cgroup"));
        cluster.wait_for("the run's cgroup record", LONG, || {
            std::fs::read_to_string(&path).ok().filter(|text| text.ends_with('\n') && text.contains("0::"))
        })
    };
    let (first_cgroups, second_cgroups) = (cgroups_of(0), cgroups_of(1));
    if first_cgroups.contains(&format!("/job_{job_id}")) {
        assert!(second_cgroups.contains(&format!("/job_{job_id}_1/")), "{second_cgroups}");
        let left = drover_e2e::cgroups_left(&first_cgroups, "step_batch");
        assert!(left.is_empty(), "the first run's cgroups are left: {left:?}");
    }
    let plain = cluster.ok("sacct", &["-X", "-P", "-n", "-o", "JobID,State", "-j", &job_id.to_string()]);
    assert_eq!(plain, format!("{job_id}|RUNNING\n"));
    let all = cluster.ok("sacct", &["-D", "-X", "-P", "-n", "-o", "JobID,State,NodeList", "-j", &job_id.to_string()]);
    assert_eq!(all, format!("{job_id}|REQUEUED|n1\n{job_id}|RUNNING|n1\n"));
    let with_steps = cluster.ok("sacct", &["-D", "-P", "-n", "-o", "JobID,State,ExitCode", "-j", &job_id.to_string()]);
    assert_eq!(
        with_steps,
        format!(
            "{job_id}|REQUEUED|0:15\n{job_id}.batch|CANCELLED|0:15\n{job_id}|RUNNING|0:0\n{job_id}.batch|RUNNING|0:0\n"
        )
    );
    let output = std::fs::read_to_string(file(&cluster, &format!("rq-{job_id}.out"))).unwrap();
    assert!(output.contains("run=0\n") && output.contains("run=1\n"), "{output}");
}

/// `scontrol requeuehold`: the job's run is killed and the job pends held (`JobHeldUser`,
/// restart count raised) until `scontrol release`; then it runs with `SLURM_RESTART_COUNT=1`.
/// `State=SpecialExit` is refused and changes nothing.
#[test]
fn requeuehold_requeues_then_holds() {
    let cluster = Cluster::start();
    let job_id = cluster.submit(None, "rh.sh", &recording_script("rh"), &[]);
    let first_pid = file(&cluster, &format!("rh-{job_id}.0.pid"));
    cluster.wait_for("the first run", LONG, || first_pid.exists().then_some(()));
    let id = job_id.to_string();
    let out = cluster.run(None, &cluster.workdir(None), "scontrol", &["requeuehold", "State=SpecialExit", &id], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("SPECIAL_EXIT state is not supported yet"), "{}", text(&out.stderr));
    assert_eq!(squeue(&cluster, job_id, "%t"), "R", "a refused requeuehold changes nothing");
    std::thread::sleep(Duration::from_millis(1100)); // so the reset submit time differs
    cluster.ok("scontrol", &["requeuehold", &id]);
    cluster.wait_for("the held job", LONG, || (squeue(&cluster, job_id, "%t %r") == "PD JobHeldUser").then_some(()));
    let shown = cluster.ok("scontrol", &["show", "job", &id]);
    assert!(shown.contains("Restarts=1 ") && shown.contains("Priority=0 "), "{shown}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(squeue(&cluster, job_id, "%t %r"), "PD JobHeldUser", "a held job stays pending");
    cluster.ok("scontrol", &["release", &id]);
    let second_pid = file(&cluster, &format!("rh-{job_id}.1.pid"));
    cluster.wait_for("the released run", LONG, || second_pid.exists().then_some(()));
    assert_eq!(squeue(&cluster, job_id, "%t"), "R");
    let all = cluster.ok("sacct", &["-D", "-X", "-P", "-n", "-o", "JobID,State", "-j", &id]);
    assert_eq!(all, format!("{job_id}|REQUEUED\n{job_id}|RUNNING\n"));
    // A requeue resets the submit time, as in Slurm; the earlier run keeps the original.
    let submits = cluster.ok("sacct", &["-D", "-X", "-P", "-n", "-o", "Submit", "-j", &id]);
    let submits: Vec<&str> = submits.lines().collect();
    assert!(submits.len() == 2 && submits[0] < submits[1], "{submits:?}");
}

/// A node that stops answering: its `--requeue` job pends again at once (same id, restart count
/// 1, the earlier run kept as `NODE_FAIL` for `sacct -D`), its `--no-requeue` job ends
/// `NODE_FAIL`. When the node answers again, both stale runs are killed, and the requeued job,
/// pinned to that node, runs there again as run 1 with `SLURM_RESTART_COUNT=1`.
#[test]
fn node_failure_requeues_and_the_returning_node_kills_stale_runs() {
    let cluster = Cluster::start();
    let requeued = cluster.submit(None, "a.sh", &recording_script("nf"), &["-w", "n2", "--requeue"]);
    let fixed = cluster.submit(None, "b.sh", &recording_script("nf"), &["-w", "n2", "--no-requeue"]);
    let pid_file = |job: u32, run: u32| file(&cluster, &format!("nf-{job}.{run}.pid"));
    cluster.wait_for("both first runs", LONG, || {
        (pid_file(requeued, 0).exists() && pid_file(fixed, 0).exists()).then_some(())
    });
    let read_pid = |path: PathBuf| -> i32 { std::fs::read_to_string(path).unwrap().trim().parse().unwrap() };
    let (stale_a, stale_b) = (read_pid(pid_file(requeued, 0)), read_pid(pid_file(fixed, 0)));
    let noded = nix::unistd::Pid::from_raw(cluster.pid("noded-n2"));
    nix::sys::signal::kill(noded, nix::sys::signal::Signal::SIGSTOP).unwrap();
    cluster.wait_state(fixed, "NODE_FAIL", Duration::from_secs(30));
    cluster.wait_for("the requeued job to pend", LONG, || (squeue(&cluster, requeued, "%t") == "PD").then_some(()));
    let shown = cluster.ok("scontrol", &["show", "job", &requeued.to_string()]);
    assert!(shown.contains("Restarts=1 "), "{shown}");
    // Both runs still run on the cut-off node: nobody could tell them to stop.
    assert!(alive(stale_a) && alive(stale_b));
    nix::sys::signal::kill(noded, nix::sys::signal::Signal::SIGCONT).unwrap();
    cluster.wait_for("the requeued job's run 1", LONG, || pid_file(requeued, 1).exists().then_some(()));
    assert_eq!(squeue(&cluster, requeued, "%t %N"), "R n2");
    cluster.wait_for("the stale runs to die", LONG, || (!alive(stale_a) && !alive(stale_b)).then_some(()));
    cluster.wait_for("only run 1 left on n2", LONG, || {
        (run_dirs(&cluster, "n2") == [format!("{requeued}.1")]).then_some(())
    });
    let all = cluster.ok("sacct", &["-D", "-X", "-P", "-n", "-o", "JobID,State", "-j", &format!("{requeued},{fixed}")]);
    assert_eq!(all, format!("{requeued}|NODE_FAIL\n{requeued}|RUNNING\n{fixed}|NODE_FAIL\n"));
    let output = std::fs::read_to_string(file(&cluster, &format!("nf-{requeued}.out"))).unwrap();
    assert_eq!(output.matches("run=1\n").count(), 1, "{output}");
}

/// A two-node job whose other node fails pends again, and ctld cancels the earlier run's batch
/// script on the surviving batch host at its next heartbeat, so the job never runs twice.
#[test]
fn a_requeued_multi_node_job_is_killed_on_its_surviving_batch_host() {
    let cluster = Cluster::start();
    let script = "#!/bin/sh\nrun=${SLURM_RESTART_COUNT:-0}\necho $SLURMD_NODENAME > mn-$SLURM_JOB_ID.$run.host\n\
                  echo $$ > mn-$SLURM_JOB_ID.$run.pid\nexec sleep 300\n";
    let job_id = cluster.submit(None, "mn.sh", script, &["-N", "2"]);
    let pid_file = file(&cluster, &format!("mn-{job_id}.0.pid"));
    cluster.wait_for("the first run", LONG, || pid_file.exists().then_some(()));
    let batch_host = std::fs::read_to_string(file(&cluster, &format!("mn-{job_id}.0.host"))).unwrap().trim().to_owned();
    let other = if batch_host == "n1" { "n2" } else { "n1" };
    let script_pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let noded = nix::unistd::Pid::from_raw(cluster.pid(&format!("noded-{other}")));
    nix::sys::signal::kill(noded, nix::sys::signal::Signal::SIGSTOP).unwrap();
    cluster.wait_for("the job to pend again", LONG, || (squeue(&cluster, job_id, "%t") == "PD").then_some(()));
    cluster
        .wait_for("the first run's script to be killed on the batch host", LONG, || (!alive(script_pid)).then_some(()));
    nix::sys::signal::kill(noded, nix::sys::signal::Signal::SIGCONT).unwrap();
    cluster.wait_for("the second run", LONG, || file(&cluster, &format!("mn-{job_id}.1.pid")).exists().then_some(()));
    let all = cluster.ok("sacct", &["-D", "-X", "-P", "-n", "-o", "JobID,State", "-j", &job_id.to_string()]);
    assert_eq!(all, format!("{job_id}|NODE_FAIL\n{job_id}|RUNNING\n"));
}

/// A requeue under way survives a ctld crash: ctld is killed as soon as `scontrol requeue` answers, the
/// run's end (its script ignores SIGTERM until the SIGKILL) arrives only after the restart, and
/// the job still pends again and runs its next run instead of ending `CANCELLED`.
#[test]
fn a_requeue_under_way_survives_a_ctld_crash() {
    let cluster = Cluster::start();
    let script = "#!/bin/sh\nrun=${SLURM_RESTART_COUNT:-0}\necho $$ > cr-$SLURM_JOB_ID.$run.pid\n\
                  trap 'echo TERM ignored' TERM\nwhile true; do sleep 1; done\n";
    let job_id = cluster.submit(None, "cr.sh", script, &[]);
    cluster.wait_for("the first run", LONG, || file(&cluster, &format!("cr-{job_id}.0.pid")).exists().then_some(()));
    // scontrol's answer comes after the intent is committed: kill ctld the moment it answers.
    cluster.ok("scontrol", &["requeue", &job_id.to_string()]);
    cluster.kill9("ctld");
    assert!(cluster.drover("up").status.success(), "{}", cluster.logs());
    cluster.wait_for("the second run", LONG, || file(&cluster, &format!("cr-{job_id}.1.pid")).exists().then_some(()));
    let all = cluster.ok("sacct", &["-D", "-X", "-P", "-n", "-o", "JobID,State", "-j", &job_id.to_string()]);
    assert_eq!(all, format!("{job_id}|REQUEUED\n{job_id}|RUNNING\n"));
}
