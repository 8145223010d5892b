//! Gaps that Slurm's own test suite (tests/slurm-suite/run.sh) found, end to end against a real
//! cluster: the plugin parameters `scontrol show config` reports for what Drover does, srun's
//! overcommit and node-spreading behaviour, and the options and input variables the suite uses.

use drover_e2e::{Cluster, text};

/// `scontrol show config` names the Slurm plugins whose behaviour Drover has, so that clients
/// (and the suite's local-config checks) can tell: consumable TRES, multifactor priority with
/// its weights, backfill, no switch, and a job killed at its time limit.
#[test]
fn show_config_reports_plugin_types_and_priority_weights() {
    let cluster = Cluster::start();
    let config = cluster.ok("scontrol", &["show", "config"]);
    let value = |name: &str| {
        config
            .lines()
            .find_map(|l| l.split_once('=').filter(|(k, _)| k.trim() == name).map(|(_, v)| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("no {name} in:\n{config}"))
    };
    assert_eq!(value("SelectType"), "select/cons_tres");
    assert_eq!(value("PriorityType"), "priority/multifactor");
    assert_eq!(value("SchedulerType"), "sched/backfill");
    assert_eq!(value("SwitchType"), "switch/none");
    assert_eq!(value("OverTimeLimit"), "0 min");
    // Drover's default weights (docs/admin/scheduling.md), not Slurm's zeros.
    assert_eq!(value("PriorityWeightFairShare"), "10000");
    assert_eq!(value("PriorityWeightAge"), "1000");
    assert_eq!(value("PriorityMaxAge"), "7-00:00:00");
    // Slurm's order: alphabetical, as before.
    let names: Vec<&str> = config.lines().skip(1).filter_map(|l| l.split_once('=').map(|(k, _)| k.trim())).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
}

/// `sbatch -n 6` without `-N` on 4-CPU nodes spreads over two nodes, as Slurm's does, instead of
/// being refused as a one-node request; the job's step runs its six tasks there.
#[test]
fn tasks_without_a_node_count_spread_over_nodes() {
    let cluster = Cluster::start();
    let script =
        "#!/bin/sh\necho nnodes=$SLURM_NNODES\n$DROVER_HOME/bin/srun printenv SLURMD_NODENAME | sort | uniq -c\n";
    let job_id = cluster.submit(None, "spread.sh", script, &["-n", "6", "-o", "spread.out"]);
    cluster.wait_state(job_id, "COMPLETED", std::time::Duration::from_secs(60));
    let out = std::fs::read_to_string(cluster.workdir(None).join("spread.out")).expect("job output");
    assert!(out.contains("nnodes=2\n"), "{out}");
    let counts: Vec<&str> = out.lines().skip(1).map(str::trim).collect();
    assert_eq!(counts, ["3 n1", "3 n2"], "{out}");
    // More tasks than the partitions' nodes could hold is still refused at submit.
    let dir = cluster.workdir(None);
    let refused = cluster.run(None, &dir, "sbatch", &["-n", "9", "--wrap", "true"], None);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("Requested node configuration is not available"),
        "{}",
        text(&refused.stderr)
    );
}

/// `srun -N1 -n5 -O` outside an allocation: the allocation is one CPU on one node and the
/// overcommitted step runs its five tasks there; `-v` lists `ntasks : 5` as Slurm's srun does.
#[test]
fn srun_overcommit_allocates_one_cpu_per_node() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let out = cluster.run(
        None,
        &dir,
        "srun",
        &["-N", "1", "-w", "n1", "-n", "5", "--overcommit", "-v", "printenv", "SLURMD_NODENAME"],
        None,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&out.stdout), "n1\n".repeat(5));
    assert!(stderr.contains("srun: ntasks              : 5\n"), "{stderr}");
    assert!(stderr.contains("srun: overcommit          : set\n"), "{stderr}");
}

/// `srun --immediate` fails at once on a request that cannot start (held), leaving no job
/// behind, and runs one that can; `--mincpus` and `--tmp` are node constraints: more than any
/// node has is refused, a request that fits runs.
#[test]
fn srun_immediate_mincpus_and_tmp() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let srun = |args: &[&str]| cluster.run(None, &dir, "srun", args, None);
    let started = std::time::Instant::now();
    let out = srun(&["--immediate", "--hold", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("Unable to allocate resources"), "{}", text(&out.stderr));
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(cluster.ok("squeue", &["-h"]), "", "the refused request stayed queued");
    let out = srun(&["--immediate", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = srun(&["--mincpus=999999", "true"]);
    assert_ne!(out.status.code(), Some(0), "no node has 999999 CPUs");
    let out = srun(&["--mincpus=3", "-N1", "sh", "-c", "$DROVER_HOME/bin/squeue -h -j $SLURM_JOB_ID -o %C"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "3", "the allocation holds --mincpus CPUs");
    let out = srun(&["--tmp=999999", "true"]);
    assert_ne!(out.status.code(), Some(0), "no node declares temporary disk");
    assert!(text(&out.stderr).contains("Requested node configuration is not available"), "{}", text(&out.stderr));
    let out = srun(&["--tmp=0", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `salloc --no-shell` exits once granted and leaves the allocation running for `srun --jobid`.
#[test]
fn salloc_no_shell_leaves_the_allocation_running() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let out = cluster.run(None, &dir, "salloc", &["--no-shell", "-N1"], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let job_id: u32 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("salloc: Granted job allocation "))
        .and_then(|id| id.trim().parse().ok())
        .unwrap_or_else(|| panic!("no grant line: {stderr}"));
    assert!(!stderr.contains("Relinquishing"), "{stderr}");
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &job_id.to_string(), "-o", "%T"]).trim(), "RUNNING");
    let out = cluster.run(None, &dir, "srun", &["--jobid", &job_id.to_string(), "echo", "in-allocation"], None);
    assert_eq!(text(&out.stdout), "in-allocation\n", "{}", text(&out.stderr));
    cluster.ok("scancel", &[&job_id.to_string()]);
}

/// `sprio -o` reads Slurm's format letters (lower case normalized, upper case weighted) and
/// `-v` prints the options first.
#[test]
fn sprio_format_and_verbose() {
    let cluster = Cluster::start();
    let busy = cluster.submit(None, "busy.sh", "#!/bin/sh\nsleep 300\n", &["-N2", "--exclusive"]);
    cluster.squeue_until(&busy.to_string(), "%t", |q| q.trim() == "R");
    let queued = cluster.submit(None, "queued.sh", "#!/bin/sh\ntrue\n", &["-N2", "--exclusive"]);
    let id = queued.to_string();
    let out = cluster.ok("sprio", &["-o", "%.8i %.8u %.10y %.10Y %.10F %r", "-j", &id]);
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["JOBID", "USER", "PRIORITY", "PRIORITY", "FAIRSHARE", "PARTITION"], "{out}");
    assert_eq!(lines[1][..2], [id.as_str(), "root"], "{out}");
    assert!(lines[1][2].contains('.') && !lines[1][3].contains('.'), "normalized, then weighted: {out}");
    assert_eq!(lines[1][5], "main", "{out}");
    let out = cluster.ok("sprio", &["--verbose", "-j", &id]);
    assert!(out.contains(&format!("job_flag   = 1\njobs       = {id}\n")), "{out}");
    assert!(out.contains("verbose    = 1\n"), "{out}");
    cluster.ok("scancel", &[&busy.to_string(), &id]);
}

/// Steps started together in a two-node job with one CPU on each node run at the same time, one
/// on each node (they used to queue on the first node, one after another).
#[test]
fn concurrent_steps_spread_over_the_job_nodes() {
    let cluster = Cluster::start();
    let script = "#!/bin/sh\nS=$DROVER_HOME/bin/srun\n\
                  $S -n1 sh -c 'echo $SLURMD_NODENAME $(date +%s); sleep 3' &\n\
                  $S -n1 sh -c 'echo $SLURMD_NODENAME $(date +%s); sleep 3' &\n\
                  wait\n";
    let job_id = cluster.submit(None, "spread-steps.sh", script, &["-N2", "-o", "steps.out"]);
    cluster.wait_state(job_id, "COMPLETED", std::time::Duration::from_secs(60));
    let out = std::fs::read_to_string(cluster.workdir(None).join("steps.out")).expect("job output");
    let mut rows: Vec<(String, i64)> = out
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(node, t)| (node.to_owned(), t.trim().parse().unwrap_or(0))))
        .collect();
    rows.sort();
    assert_eq!(rows.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["n1", "n2"], "{out}");
    assert!((rows[0].1 - rows[1].1).abs() < 3, "the steps ran one after the other: {out}");
}

/// A step's tasks see the variables Slurm's tasks see about their node and their srun, and srun
/// outside an allocation reads the task and node counts and `SLURM_OVERCOMMIT` from its
/// environment.
#[test]
fn step_environment_and_srun_input_variables() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let out = cluster.run(None, &dir, "srun", &["-N1", "-n1", "-c2", "env"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let env = text(&out.stdout);
    let value = |name: &str| {
        env.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).unwrap_or_else(|| panic!("no {name}:\n{env}"))
    };
    assert_eq!(value("SLURM_CPUS_ON_NODE"), "2");
    assert!(value("SLURM_TASK_PID").parse::<u32>().is_ok_and(|p| p > 1), "{env}");
    let out =
        cluster.run(None, &dir, "srun", &["-n2", "-O", "sh", "-c", "[ $SLURM_TASK_PID = $$ ] && echo own-pid"], None);
    assert_eq!(text(&out.stdout), "own-pid\nown-pid\n", "SLURM_TASK_PID is the task's pid: {}", text(&out.stderr));
    assert_eq!(value("SLURM_TOPOLOGY_ADDR_PATTERN"), "node");
    assert!(value("SLURM_SRUN_COMM_PORT").parse::<u16>().is_ok_and(|p| p > 0), "{env}");
    assert_eq!(value("SLURM_SRUN_COMM_HOST"), value("SLURM_LAUNCH_NODE_IPADDR"));
    assert!(value("SLURM_LAUNCH_NODE_IPADDR").parse::<std::net::IpAddr>().is_ok(), "{env}");

    let mut srun = std::process::Command::new(cluster.home().join("bin/srun"));
    srun.args(["printenv", "SLURM_PROCID"]).current_dir(&dir);
    srun.env("DROVER_CONF", cluster.home().join("cluster.toml"))
        .env("DROVER_SOCKET", cluster.home().join("ctld/ctld.sock"))
        .env("SLURM_NPROCS", "5")
        .env("SLURM_NNODES", "1")
        .env("SLURM_OVERCOMMIT", "1")
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_JOBID");
    let out = srun.output().expect("running srun");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut ids: Vec<u32> = text(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect();
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2, 3, 4], "five tasks from SLURM_NPROCS");
}

/// `srun -K` ends the step when a task fails; `srun -W 2` kills the tasks still running two
/// seconds after the first one exited, naming them in Slurm's ranges.
#[test]
fn srun_kill_on_bad_exit_and_wait() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let started = std::time::Instant::now();
    let script = "[ $SLURM_PROCID = 1 ] && exit 2; sleep 20; echo SHOULD_NOT_BE_HERE";
    let out = cluster.run(None, &dir, "srun", &["-n3", "-O", "-K", "sh", "-c", script], None);
    assert_ne!(out.status.code(), Some(0));
    assert!(!text(&out.stdout).contains("SHOULD_NOT_BE_HERE"), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "{:?}", started.elapsed());

    let started = std::time::Instant::now();
    let script = "[ $SLURM_PROCID = 1 ] && exit 0; sleep 30";
    let out = cluster.run(None, &dir, "srun", &["-n4", "-O", "-W2", "sh", "-c", script], None);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("First task exited 2s ago"), "{stderr}");
    assert!(stderr.contains("tasks 0,2-3: running"), "{stderr}");
    assert!(stderr.contains("tasks 0,2-3: Killed"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "{:?}", started.elapsed());
}

/// `srun -i`: a file srun reads, `none`, or one task's stdin (the others read end of file at
/// once); `-o none` and `-o N` (only task N's output reaches srun's stdout).
#[test]
fn srun_input_and_output_routing() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    std::fs::write(dir.join("in.txt"), "echo from-file\nexit 0\n").expect("writing input");
    let srun = |args: &[&str], stdin: Option<&str>| cluster.run(None, &dir, "srun", args, stdin);
    let out = srun(&["--input=in.txt", "-n2", "bash"], None);
    assert_eq!(text(&out.stdout), "from-file\nfrom-file\n", "{}", text(&out.stderr));
    let out = srun(&["-i", "none", "cat"], Some("not read\n"));
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), String::new()), "{}", text(&out.stderr));
    let out = srun(&["--input=2", "-n4", "-O", "-l", "sh", "-c", "cat; echo done"], Some("to-two\n"));
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(lines, ["0: done", "1: done", "2: done", "2: to-two", "3: done"], "{}", text(&out.stderr));
    let out = srun(&["--output=none", "id"], None);
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), String::new()));
    let out = srun(&["--output=3", "-n4", "-O", "printenv", "SLURM_PROCID"], None);
    assert_eq!(text(&out.stdout), "3\n");
}

/// `srun --task-prolog/--task-epilog`: each runs once per task as the user; the prolog's
/// `print`, `export` and `unset` lines shape the task; an epilog's leftovers are killed and a
/// long epilog does not hold the step for long.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn srun_task_prolog_and_epilog() {
    drover_e2e::require_users();
    let cluster = Cluster::start();
    let dir = cluster.workdir(Some("alice"));
    let pre = dir.join("pre.txt");
    let post = dir.join("post.txt");
    let script = |name: &str, body: String| {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("writing script");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    };
    script(
        "prolog.sh",
        format!("id -un >> {}\necho print HEADER\necho export TEST=prolog_qa\necho unset DISPLAY\n", pre.display()),
    );
    script("epilog.sh", format!("id -un >> {}\nsleep 200 &\nsleep 200\n", post.display()));
    let started = std::time::Instant::now();
    let out = cluster.run(
        Some("alice"),
        &dir,
        "srun",
        &[
            "-n3",
            "-O",
            "--task-prolog=prolog.sh",
            "--task-epilog=epilog.sh",
            "sh",
            "-c",
            "echo TEST=$TEST DISPLAY=${DISPLAY}X",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.matches("HEADER\n").count(), 3, "{stdout}");
    assert_eq!(stdout.matches("TEST=prolog_qa DISPLAY=X\n").count(), 3, "{stdout}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "{:?}", started.elapsed());
    let read = |path: &std::path::Path| std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(read(&pre), "alice\n".repeat(3));
    assert_eq!(read(&post), "alice\n".repeat(3));
    let left = std::process::Command::new("pgrep").args(["-u", "alice", "-f", "sleep 200"]).output().expect("pgrep");
    assert_eq!(text(&left.stdout), "", "the epilogs' children were left running");
}

/// srun's soft resource limits reach its tasks (Slurm's PropagateResourceLimits=ALL): a batch
/// script lowers its limits and the step's tasks see the lowered ones.
#[test]
fn srun_propagates_resource_limits() {
    let cluster = Cluster::start();
    let script = "#!/bin/sh\nulimit -c 100\nulimit -n 500\nulimit -s 4000\n\
                  $DROVER_HOME/bin/srun sh -c 'echo core=$(ulimit -c) nofile=$(ulimit -n) stack=$(ulimit -s)'\n";
    let job_id = cluster.submit(None, "limits.sh", script, &["-o", "limits.out"]);
    cluster.wait_state(job_id, "COMPLETED", std::time::Duration::from_secs(60));
    let out = std::fs::read_to_string(cluster.workdir(None).join("limits.out")).expect("job output");
    assert_eq!(out, "core=100 nofile=500 stack=4000\n");
}

/// srun creates every task's `-e` file when the step starts, even when no task writes to it;
/// `%x` outside an allocation is the job's name, the command's; `--mem=1` runs (the memory
/// cgroup has Slurm's 30 MB floor).
#[test]
fn srun_creates_empty_error_files() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let out = cluster.run(None, &dir, "srun", &["--output=out.%x.txt", "--mem=1", "true"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(dir.join("out.true.txt").exists(), "%x is the command's name");
    let out = cluster.run(None, &dir, "srun", &["--error=err-%t.txt", "-n2", "-O", "true"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for task in 0..2 {
        let path = dir.join(format!("err-{task}.txt"));
        assert_eq!(std::fs::read(&path).ok(), Some(Vec::new()), "{}", path.display());
    }
}

/// `srun -N-3` is at most three nodes (at least one); srun runs inside a task of another srun
/// (each outer task starts an inner step of the same job).
#[test]
fn srun_node_range_without_minimum_and_nested_steps() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let inner = "$DROVER_HOME/bin/srun -l -n4 -O --overlap true && echo inner-ok";
    let out = cluster.run(None, &dir, "srun", &["-N-3", "-n4", "-O", "--overlap", "sh", "-c", inner], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "inner-ok\n".repeat(4), "{}", text(&out.stderr));
}

/// A running srun and the lines it has printed so far (stdout and stderr together).
struct Watched {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: String,
}

impl Watched {
    fn start(cluster: &Cluster, args: &[&str]) -> Watched {
        use std::io::BufRead;
        let mut child = std::process::Command::new(cluster.home().join("bin/srun"))
            .args(args)
            .current_dir(cluster.workdir(None))
            .env("DROVER_CONF", cluster.home().join("cluster.toml"))
            .env("DROVER_SOCKET", cluster.home().join("ctld/ctld.sock"))
            .env_remove("SLURM_JOB_ID")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starting srun");
        let (tx, lines) = std::sync::mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            std::io::BufReader::new(out).lines().map_while(Result::ok).for_each(|l| drop(tx.send(l)))
        });
        std::thread::spawn(move || {
            std::io::BufReader::new(err).lines().map_while(Result::ok).for_each(|l| drop(tx2.send(l)))
        });
        Watched { child, lines, seen: String::new() }
    }

    /// Waits (30 s at most) for a line containing `text`.
    fn expect(&mut self, text: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !self.seen.contains(text) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push_str(&(line + "\n")),
                Err(_) => panic!("no {text:?} from srun; it printed:\n{}", self.seen),
            }
        }
    }

    fn interrupt(&self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    }
}

/// SIGINT to srun prints its tasks' status and leaves them running (a second one within a
/// second would abort); a step cancelled from outside makes srun say so; under
/// `--quit-on-interrupt` one SIGINT kills the step.
#[test]
fn srun_interrupts_as_slurm() {
    let cluster = Cluster::start();
    let script = "trap '' INT; echo WAITING; sleep 100";
    let mut srun = Watched::start(&cluster, &["-v", "-N1", "sh", "-c", script]);
    srun.expect("WAITING");
    srun.interrupt();
    srun.expect("srun: interrupt (one more within 1 sec to abort)");
    srun.expect("task 0: running");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let job_id = cluster.ok("squeue", &["-h", "-o", "%i"]).trim().to_owned();
    assert!(!job_id.is_empty(), "the step was cancelled by one SIGINT");
    cluster.ok("scancel", &[&job_id]);
    srun.expect("Job step aborted");
    let _ = srun.child.wait();

    let mut srun = Watched::start(&cluster, &["-v", "-N1", "--quit-on-interrupt", "sh", "-c", script]);
    srun.expect("WAITING");
    srun.interrupt();
    srun.expect("task 0: Killed");
    let _ = srun.child.wait();
}

/// `%A` and `%a` in srun's `-o` are the array's job id and the task id of the job srun runs in.
#[test]
fn srun_output_array_tokens() {
    let cluster = Cluster::start();
    let script = "#!/bin/sh\n$DROVER_HOME/bin/srun --output=o.%A.%a.txt echo hi\n";
    let job_id = cluster.submit(None, "arr.sh", script, &["--array=1-2", "-o", "/dev/null"]);
    let dir = cluster.workdir(None);
    for task in 1..=2 {
        let path = dir.join(format!("o.{job_id}.{task}.txt"));
        cluster.wait_for("the task's step output", std::time::Duration::from_secs(60), || {
            std::fs::read_to_string(&path).ok().filter(|t| t == "hi\n")
        });
    }
}

/// `scancel --signal` follows Slurm's rule: without `-b` or `-f` only the job's steps get the
/// signal, never the batch shell; `-b` signals the batch shell only; `-f/--full` both.
#[test]
fn scancel_signal_reaches_steps_batch_or_both() {
    let cluster = Cluster::start();
    // The shell waits in `wait`, which a trapped signal interrupts at once; the step's task
    // reports each signal it gets. srun itself ignores USR1/USR2.
    let script = "#!/bin/bash\ntrap 'echo batch-usr1' USR1\ntrap 'echo batch-usr2' USR2\n\
        $DROVER_HOME/bin/srun -n1 bash -c 'trap \"echo step-usr1\" USR1; trap \"echo step-usr2\" USR2; \
        echo step-up; while :; do sleep 0.1; done' &\n\
        while :; do wait; done\n";
    let job_id = cluster.submit(None, "signals.sh", script, &["-N1", "-n1", "-t", "5", "-o", "signals.out"]);
    let path = cluster.workdir(None).join("signals.out");
    let wait_lines = |needle: &str, count: usize| {
        cluster.wait_for(needle, std::time::Duration::from_secs(60), || {
            let out = std::fs::read_to_string(&path).unwrap_or_default();
            (out.lines().filter(|l| *l == needle).count() >= count).then_some(out)
        })
    };
    wait_lines("step-up", 1);
    let id = job_id.to_string();
    // Neither -b nor -f: the step only.
    cluster.ok("scancel", &["--signal=USR1", &id]);
    wait_lines("step-usr1", 1);
    // -b: the batch shell only. The shell's USR1 (had it been sent) left before this USR2.
    cluster.ok("scancel", &["-b", "--signal=USR2", &id]);
    let out = wait_lines("batch-usr2", 1);
    assert!(!out.contains("batch-usr1"), "a signal without -b reached the batch shell:\n{out}");
    // -f: both.
    cluster.ok("scancel", &["--full", "--signal=USR1", &id]);
    wait_lines("batch-usr1", 1);
    let out = wait_lines("step-usr1", 2);
    assert!(!out.contains("step-usr2"), "-b reached the step:\n{out}");
    assert_eq!(out.lines().filter(|l| *l == "batch-usr2").count(), 1, "{out}");
    cluster.ok("scancel", &[&id]);
}

/// `sbatch -O -n 12` on two 4-CPU nodes: the allocation holds one task's CPUs on one node
/// (Slurm's rule for `-O`), the job keeps its 12 tasks (`SLURM_NTASKS`), and its steps
/// overcommit too (`SLURM_OVERCOMMIT`): a plain `srun` runs the 12 tasks on that one CPU.
#[test]
fn sbatch_overcommit_allocates_one_task_per_node() {
    let cluster = Cluster::start();
    let script = "#!/bin/sh\necho ntasks=$SLURM_NTASKS overcommit=$SLURM_OVERCOMMIT\n\
        $DROVER_HOME/bin/squeue -h -j $SLURM_JOB_ID -o 'cpus=%C nodes=%D'\n\
        $DROVER_HOME/bin/srun printenv SLURM_PROCID | wc -l\n";
    let job_id = cluster.submit(None, "over.sh", script, &["-O", "-n", "12", "-o", "over.out"]);
    cluster.wait_state(job_id, "COMPLETED", std::time::Duration::from_secs(60));
    let out = std::fs::read_to_string(cluster.workdir(None).join("over.out")).expect("job output");
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert_eq!(lines, ["ntasks=12 overcommit=1", "cpus=1 nodes=1", "12"], "{out}");
    // Without -O the same request is still more than the cluster holds.
    let dir = cluster.workdir(None);
    let refused = cluster.run(None, &dir, "sbatch", &["-n", "12", "--wrap", "true"], None);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
}

/// `scancel --signal` of a job that has not started yet: ctld refuses it as Slurm's does ("Job
/// can not be altered now"), and scancel tries again after 5 s, as Slurm's does, by when the
/// job and its step run: the signal arrives instead of being lost.
#[test]
fn scancel_signal_waits_for_a_starting_job() {
    let cluster = Cluster::start();
    let script = "#!/bin/bash\n$DROVER_HOME/bin/srun -n1 bash -c 'trap \"echo step-usr1\" USR1; \
        echo step-up; for i in $(seq 150); do sleep 0.1; done'\n";
    let job_id = cluster.submit(None, "later.sh", script, &["--begin=now+2", "-t", "2", "-o", "later.out"]);
    let dir = cluster.workdir(None);
    let started = std::time::Instant::now();
    let out = cluster.run(None, &dir, "scancel", &["-v", "--signal=USR1", &job_id.to_string()], None);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(started.elapsed() >= std::time::Duration::from_secs(5), "no retry: {stderr}");
    assert!(stderr.contains("scancel: Job is in transitional state, retrying"), "{stderr}");
    let path = dir.join("later.out");
    cluster.wait_for("the step's signal", std::time::Duration::from_secs(30), || {
        std::fs::read_to_string(&path).ok().filter(|out| out.contains("step-usr1"))
    });
    assert_eq!(cluster.sacct_state(job_id).map(|s| s.0).as_deref(), Some("RUNNING"));
    cluster.ok("scancel", &[&job_id.to_string()]);
}

/// `srun -Z/--no-allocate` by root (or the SlurmUser, the user ctld runs as; here the test's
/// own user): the tasks run on the `-w` nodes, more of them than a node has CPUs; without `-w`
/// it is an error.
#[test]
fn srun_no_allocate_runs_on_the_named_nodes() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let srun = |args: &[&str]| cluster.run(None, &dir, "srun", args, None);
    let out = srun(&["-N1", "--nodelist=n2", "--no-allocate", "printenv", "SLURMD_NODENAME"]);
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "n2\n".to_owned()), "{}", text(&out.stderr));
    let out = srun(&["-Z", "-w", "n1", "-n", "6", "printenv", "SLURM_PROCID"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 6, "{}", text(&out.stdout));
    let out = srun(&["-Z", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--no-allocate needs the nodes to run on"), "{}", text(&out.stderr));
}

/// Hostile: `srun -Z` by a plain user is refused by ctld (the privilege is checked there, not
/// by srun), with Slurm's access error; nothing runs and no job is left behind.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn srun_no_allocate_is_refused_to_plain_users() {
    drover_e2e::require_users();
    let cluster = Cluster::start();
    let dir = cluster.workdir(Some("alice"));
    let marker = dir.join("ran-without-allocation");
    let command = format!("touch {}", marker.display());
    for args in [
        vec!["-Z", "-w", "n1", "sh", "-c", command.as_str()],
        vec!["--no-allocate", "--nodelist=n1,n2", "-N2", "sh", "-c", command.as_str()],
    ] {
        let out = cluster.run(Some("alice"), &dir, "srun", &args, None);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("Access/permission denied"), "{stderr}");
    }
    // Inside an allocation of her own, -Z is refused too (it does not use the allocation).
    let script = format!("#!/bin/sh\n$DROVER_HOME/bin/srun -Z -w n2 sh -c '{command}'\necho rc=$?\n");
    let job_id = cluster.submit(Some("alice"), "z.sh", &script, &["-o", "z.out"]);
    cluster.wait_state(job_id, "COMPLETED", std::time::Duration::from_secs(60));
    let out = std::fs::read_to_string(dir.join("z.out")).unwrap_or_default();
    assert!(out.contains("rc=1"), "{out}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!marker.exists(), "a plain user ran tasks without an allocation");
    let jobs = cluster.ok("sacct", &["-a", "-X", "-n", "-P", "-o", "JobID"]);
    assert_eq!(jobs.trim(), job_id.to_string(), "only alice's own batch job was ever created: {jobs}");
}
