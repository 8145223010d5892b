//! `srun --slurmd-debug` and `srun --debugger-test` end to end: the step runner's own messages
//! reach srun's stderr at the level asked for (and never above `debug2`); under
//! `--debugger-test` the tasks stop before their exec, srun prints each one's host, real pid and
//! executable (a `--multi-prog` file's program word per task), the stopped tasks end with
//! `scancel` and with the job's time limit, which srun reports as Slurm's does.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn slurmd_debug_sends_the_step_runners_messages_to_srun() {
    require_users();
    let cluster = Cluster::start();
    let dir = cluster.workdir(Some("alice"));
    let srun = |args: &[&str]| {
        let out = cluster.run(Some("alice"), &dir, "srun", args, None);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "srun {args:?}: {stderr}\n{}", cluster.logs());
        stderr
    };
    // Slurm's suite: error → the step logs at verbose, info → debug, verbose → debug2.
    for (level, step, below, above) in [
        ("error", "verbose", None, "slurmstepd: debug:  "),
        ("info", "debug", Some("slurmstepd: debug:  "), "slurmstepd: debug2: "),
        ("verbose", "debug2", Some("slurmstepd: debug2: "), "slurmstepd: debug3: "),
    ] {
        let stderr = srun(&[&format!("--slurmd-debug={level}"), "-t", "5", "true"]);
        let levels = format!("slurmstepd: debug levels are stderr='{step}', logfile='error', syslog='quiet'\n");
        assert!(stderr.contains(&levels), "--slurmd-debug={level}: {stderr}");
        if let Some(line) = below {
            assert!(stderr.contains(line), "--slurmd-debug={level}: {stderr}");
        }
        assert!(!stderr.contains(above), "--slurmd-debug={level}: {stderr}");
    }
    // The messages say what the runner did: the fork, the exec, the exit.
    let stderr = srun(&["--slurmd-debug=verbose", "-N2", "-n2", "-l", "-t", "5", "true"]);
    for node_task in ["0", "1"] {
        for said in [
            format!("{node_task}: slurmstepd: debug2: forked task {node_task} (local id 0) as pid "),
            format!("{node_task}: slurmstepd: debug:  task {node_task} (pid "),
            " exec'd true\n".to_owned(),
            " exited with code 0\n".to_owned(),
        ] {
            assert!(stderr.contains(&said), "{said:?} missing: {stderr}");
        }
    }
    // A number, and the cap: nothing a user asks makes a node log above debug2.
    let stderr = srun(&["--slurmd-debug=9", "-t", "5", "true"]);
    assert!(stderr.contains("srun: Using srun's max debug increment of 4\n"), "{stderr}");
    assert!(stderr.contains("stderr='debug2'") && !stderr.contains("debug3"), "{stderr}");
    let stderr = srun(&["--slurmd-debug=LOUD", "-t", "5", "true"]);
    assert!(stderr.contains("srun: Using srun's max debug increment of 4\n"), "{stderr}");
    // Without the option the runner says nothing.
    let stderr = srun(&["-t", "5", "true"]);
    assert!(!stderr.contains("slurmstepd"), "{stderr}");
}

/// srun started in the background, its stderr read line by line on a thread.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn start(cluster: &Cluster, dir: &std::path::Path, args: &[&str]) -> Running {
        let mut command = cluster.command(Some("alice"), dir, "srun", args);
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("starting srun");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Running { child, lines, seen: Vec::new() }
    }

    /// Waits until `count` lines contain `needle`; returns them.
    fn lines_with(&mut self, needle: &str, count: usize, cluster: &Cluster) -> Vec<String> {
        let deadline = Instant::now() + LONG + LONG;
        loop {
            let found: Vec<String> = self.seen.iter().filter(|l| l.contains(needle)).cloned().collect();
            if found.len() >= count {
                return found;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => {
                    panic!("no {count} lines with {needle:?} in srun's stderr: {:#?}\n{}", self.seen, cluster.logs())
                }
            }
        }
    }

    /// The job id from `-v`'s `srun: jobid N:` line.
    fn job_id(&mut self, cluster: &Cluster) -> String {
        let line = self.lines_with("srun: jobid ", 1, cluster).remove(0);
        line["srun: jobid ".len()..].split(':').next().unwrap().to_owned()
    }

    /// Waits for srun to exit; its stdout.
    fn finish(self, cluster: &Cluster) -> String {
        let deadline = Instant::now() + LONG;
        let mut child = self.child;
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "srun did not exit: {:#?}\n{}", self.seen, cluster.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
        text(&child.wait_with_output().unwrap().stdout)
    }
}

/// A proctable line, `srun: task:0, host:n1, pid:123, executable:id`: (task, host, pid, executable).
fn entry(line: &str) -> (u32, String, i32, String) {
    let rest = line.strip_prefix("srun: task:").unwrap_or_else(|| panic!("{line}"));
    let fields: Vec<&str> = rest.split(", ").collect();
    let [task, host, pid, executable] = fields.as_slice() else { panic!("{line}") };
    (
        task.parse().unwrap(),
        host.strip_prefix("host:").unwrap().to_owned(),
        pid.strip_prefix("pid:").unwrap().parse().unwrap(),
        executable.strip_prefix("executable:").unwrap().to_owned(),
    )
}

/// The state letter in `/proc/PID/stat` (`None` once the process is gone).
fn proc_state(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().next().map(str::to_owned)
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn debugger_test_holds_the_tasks_stopped_before_their_exec() {
    require_users();
    // Time limits run 10× faster: `-t1` ends the job after 6 s.
    let cluster = Cluster::start_with_env(CONFIG, &[("DROVER_TIME_SCALE", "0.1")]);
    let dir = cluster.workdir(Some("alice"));
    let alice = nix::unistd::User::from_name("alice").unwrap().unwrap().uid.as_raw();

    // Two tasks held before `id` runs: real pids, stopped, the job's user's; then scancel.
    let mut srun = Running::start(&cluster, &dir, &["-v", "-N1", "-n2", "-t5", "--debugger-test", "id"]);
    let job_id = srun.job_id(&cluster);
    let mut table: Vec<_> = srun.lines_with("srun: task:", 2, &cluster).iter().map(|l| entry(l)).collect();
    table.sort();
    assert_eq!(table.iter().map(|(t, ..)| *t).collect::<Vec<_>>(), [0, 1], "{table:?}");
    for (_, host, pid, executable) in &table {
        assert!(host == "n1" || host == "n2", "{table:?}");
        assert_eq!(executable, "id");
        assert_eq!(proc_state(*pid).as_deref(), Some("T"), "task pid {pid} is not stopped: {table:?}");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(uid.split_whitespace().nth(1) == Some(&alice.to_string()), "{uid}");
    }
    assert_ne!(table[0].2, table[1].2);
    cluster.ok("scancel", &[&job_id]);
    let stdout = srun.finish(&cluster);
    assert!(!stdout.contains("uid="), "a stopped task ran its program: {stdout}");
    for (_, _, pid, _) in &table {
        cluster.wait_for("the stopped task to end", LONG, || proc_state(*pid).is_none_or(|s| s == "Z").then_some(()));
    }

    // Left stopped, they end with the job's time limit, which srun reports.
    let mut srun = Running::start(&cluster, &dir, &["-N1", "-n2", "-t1", "--debugger-test", "id"]);
    srun.lines_with("srun: task:", 2, &cluster);
    srun.lines_with("TIME LIMIT", 1, &cluster);
    srun.finish(&cluster);

    // `--multi-prog`: each task's executable is its program word in the file.
    std::fs::write(dir.join("mpmd.conf"), "1-2   hostname\n0,3   date\n").unwrap();
    let args = ["-v", "-n4", "-O", "-l", "-t5", "--debugger-test", "--multi-prog", "mpmd.conf"];
    let mut srun = Running::start(&cluster, &dir, &args);
    let job_id = srun.job_id(&cluster);
    let mut table: Vec<_> = srun.lines_with("srun: task:", 4, &cluster).iter().map(|l| entry(l)).collect();
    table.sort();
    let executables: Vec<&str> = table.iter().map(|(_, _, _, e)| e.as_str()).collect();
    assert_eq!(executables, ["date", "hostname", "hostname", "date"], "{table:?}");
    assert!(table.iter().all(|(_, _, pid, _)| proc_state(*pid).as_deref() == Some("T")), "{table:?}");
    cluster.ok("scancel", &[&job_id]);
    srun.finish(&cluster);

    // A file with no program for a task is refused before anything is allocated.
    let args = ["--debugger-test", "-v", "-n5", "-O", "-l", "--multi-prog", "mpmd.conf"];
    let out = cluster.run(Some("alice"), &dir, "srun", &args, None);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("Configuration file mpmd.conf invalid, no record for task id 4"), "{stderr}");
    assert!(!stderr.contains("srun: jobid"), "{stderr}");
}
