//! Job steps end to end: `srun` inside a batch job runs tasks on both nodes with Slurm's task
//! variables and labels, exits with the highest task exit code, works from an environment
//! stripped to `SLURM_JOB_ID`, and leaves `N.batch`, `N.0`, `N.1`… rows in `sacct`; one step
//! can be cancelled while the job runs on; `salloc` and `srun` outside an allocation allocate,
//! run and release.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

fn wait_for_file(path: &std::path::Path, needle: &str, cluster: &Cluster) -> String {
    let deadline = Instant::now() + LONG;
    while Instant::now() < deadline {
        let content = std::fs::read_to_string(path).unwrap_or_default();
        if content.contains(needle) {
            return content;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{} never contained {needle:?}: {:?}\n{}", path.display(), std::fs::read_to_string(path), cluster.logs());
}

/// The done-when: a two-node, four-task step prints each task's ids through `srun -l`;
/// exit codes follow Slurm; a stripped environment still finds ctld; sacct shows the steps.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn multi_node_steps_in_a_batch_job() {
    require_users();
    let cluster = Cluster::start();
    let script = "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -n 4\n#SBATCH -t 5\n#SBATCH --mem=100M\n#SBATCH -o out-%j.txt\n\
        S=$DROVER_HOME/bin/srun\n\
        $S -l bash -c 'echo procid=$SLURM_PROCID localid=$SLURM_LOCALID nodeid=$SLURM_NODEID node=$SLURMD_NODENAME \
        step=$SLURM_STEP_ID ntasks=$SLURM_NTASKS nodes=$SLURM_STEP_NODELIST tpn=$SLURM_TASKS_PER_NODE uid=$(id -u)'\n\
        echo rc0=$?\n\
        $S -n 2 -N 2 bash -c 'echo err-$SLURM_PROCID >&2; exit $((SLURM_PROCID + 3))'\n\
        echo rc1=$?\n\
        env -i SLURM_JOB_ID=$SLURM_JOB_ID $S -n1 /bin/sh -c 'echo stripped=$SLURM_PROCID job=$SLURM_JOB_ID'\n\
        echo rc2=$?\n\
        $S -o step-%j.%s-%t-%N.txt -e err-%s.txt bash -c 'echo to-file $SLURM_PROCID; echo warn $SLURM_PROCID >&2'\n";
    let job_id = cluster.submit(Some("alice"), "steps.sh", script, &[]);
    assert_eq!(cluster.wait_state(job_id, "COMPLETED", LONG), "0:0");
    let out_path = cluster.workdir(Some("alice")).join(format!("out-{job_id}.txt"));
    let out = std::fs::read_to_string(&out_path).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    let uid = nix::unistd::User::from_name("alice").unwrap().unwrap().uid;
    for (task, local, node, name) in [(0, 0, 0, "n1"), (1, 1, 0, "n1"), (2, 0, 1, "n2"), (3, 1, 1, "n2")] {
        let line = format!(
            "{task}: procid={task} localid={local} nodeid={node} node={name} step=0 ntasks=4 nodes=n[1-2] tpn=2(x2) uid={uid}"
        );
        assert!(out.contains(&line), "missing {line:?} in:\n{out}\n{}", cluster.logs());
    }
    assert!(out.contains("rc0=0\n"), "{out}");
    assert!(out.contains("err-0\n") && out.contains("err-1\n"), "{out}");
    assert!(out.contains("srun: error: n2: task 1: Exited with exit code 4"), "{out}");
    assert!(out.contains("rc1=4\n"), "{out}");
    assert!(out.contains(&format!("stripped=0 job={job_id}\n")), "{out}\n{}", cluster.logs());
    assert!(out.contains("rc2=0\n"), "{out}");
    let workdir = cluster.workdir(Some("alice"));
    let mut warnings = std::fs::read_to_string(workdir.join("err-3.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    warnings.sort();
    assert_eq!(warnings, ["warn 0", "warn 1", "warn 2", "warn 3"], "-e without %t: one file for all tasks");
    for (task, node) in [(0, "n1"), (1, "n1"), (2, "n2"), (3, "n2")] {
        let path = workdir.join(format!("step-{job_id}.3-{task}-{node}.txt"));
        let content = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(content, format!("to-file {task}\n"));
    }
    let rows = cluster.ok("sacct", &["-j", &job_id.to_string(), "-P", "-n", "-o", "JobID,State,ExitCode,NTasks"]);
    for row in [
        format!("{job_id}.batch|COMPLETED|0:0"),
        format!("{job_id}.0|COMPLETED|0:0|4"),
        format!("{job_id}.1|FAILED|4:0|2"),
        format!("{job_id}.2|COMPLETED|0:0|1"),
    ] {
        assert!(rows.contains(&row), "missing {row:?} in:\n{rows}");
    }
}

/// `scancel N.S` ends that step only; `squeue -s` lists the running steps; the job runs on.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn cancelling_one_step_leaves_the_job_running() {
    require_users();
    let cluster = Cluster::start();
    let script = "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -n 2\n#SBATCH -t 5\n#SBATCH -o out-%j.txt\ntrap 'echo batch-usr1' USR1\n\
        $DROVER_HOME/bin/srun -J sleep -l bash -c 'trap \"echo usr1-$SLURM_PROCID\" USR1; while :; do sleep 0.1; done'\n\
        echo srun-rc=$?\ntouch after-step\nsleep 300\n";
    let job_id = cluster.submit(Some("alice"), "cancel.sh", script, &[]);
    let step = format!("{job_id}.0");
    let deadline = Instant::now() + LONG;
    loop {
        let listed = cluster.ok("squeue", &["-s", "-h", "-o", "%i %j"]);
        if listed.contains(&step) {
            assert!(listed.contains(&format!("{step} sleep")), "{listed}");
            break;
        }
        assert!(Instant::now() < deadline, "step never listed by squeue -s\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    // `scontrol show step` lists the running step (and the batch step) in Slurm's layout.
    let shown = cluster.ok("scontrol", &["show", "step", &step]);
    assert!(shown.starts_with(&format!("StepId={step} ")), "{shown}");
    assert!(shown.contains("State=RUNNING") && shown.contains("NodeList=n[1-2]"), "{shown}");
    assert!(shown.contains("Nodes=2 CPUs=2 Tasks=2 Name=sleep"), "{shown}");
    let all = cluster.ok("scontrol", &["show", "steps", &job_id.to_string()]);
    assert!(all.contains(&format!("StepId={job_id}.batch ")) && all.contains(&format!("StepId={step} ")), "{all}");
    // `scancel --signal` (without -b) reaches the step's tasks on both nodes; srun survives it.
    cluster.ok("scancel", &["--signal=USR1", &job_id.to_string()]);
    let out_path = cluster.workdir(Some("alice")).join(format!("out-{job_id}.txt"));
    wait_for_file(&out_path, "0: usr1-0", &cluster);
    wait_for_file(&out_path, "1: usr1-1", &cluster);
    let out = cluster.run(Some("bob"), &cluster.workdir(Some("bob")), "scancel", &[&step], None);
    assert!(!out.status.success() || !text(&out.stderr).is_empty(), "bob may not cancel alice's step");
    let out = cluster.run(Some("alice"), &cluster.workdir(Some("alice")), "scancel", &[&step], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let workdir = cluster.workdir(Some("alice"));
    let content = wait_for_file(&workdir.join(format!("out-{job_id}.txt")), "srun-rc=", &cluster);
    assert!(!content.contains("srun-rc=0"), "{content}");
    assert!(
        workdir.join("after-step").exists() || {
            std::thread::sleep(Duration::from_secs(1));
            workdir.join("after-step").exists()
        }
    );
    let rows = cluster.ok("sacct", &["-j", &job_id.to_string(), "-P", "-n", "-o", "JobID,State"]);
    assert!(rows.contains(&format!("{job_id}|RUNNING")), "{rows}");
    assert!(rows.contains(&format!("{step}|CANCELLED")), "{rows}");
    cluster.ok("scancel", &[&job_id.to_string()]);
    cluster.wait_state(job_id, "CANCELLED", LONG);
}

/// `salloc CMD` runs the command with the allocation's environment, and `srun` inside it and
/// `srun` from a login shell run steps; both allocations are released and end COMPLETED.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn salloc_and_srun_outside_an_allocation() {
    require_users();
    let cluster = Cluster::start();
    let dir = cluster.workdir(Some("alice"));
    let srun_path = cluster.home().join("bin").join("srun");
    let command = format!(
        "echo job=$SLURM_JOB_ID nodes=$SLURM_JOB_NODELIST; {} -l -N2 -n2 hostname >/dev/null && echo step-ok",
        srun_path.display()
    );
    let out =
        cluster.run(Some("alice"), &dir, "salloc", &["-N", "2", "-n", "2", "-t", "5", "bash", "-c", &command], None);
    assert!(out.status.success(), "{}{}\n{}", text(&out.stdout), text(&out.stderr), cluster.logs());
    let stdout = text(&out.stdout);
    assert!(stdout.contains("nodes=n[1-2]") && stdout.contains("step-ok"), "{stdout}");
    let job_id: u32 = stdout
        .split("job=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("job id");
    assert!(text(&out.stderr).contains(&format!("salloc: Granted job allocation {job_id}")), "{}", text(&out.stderr));
    assert_eq!(cluster.wait_state(job_id, "COMPLETED", LONG), "0:0");

    let out = cluster.run(
        Some("alice"),
        &dir,
        "srun",
        &["-n", "3", "-N", "2", "-l", "-t", "5", "bash", "-c", "echo task=$SLURM_PROCID; exit $SLURM_PROCID"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}{}", text(&out.stdout), text(&out.stderr));
    let stdout = text(&out.stdout);
    for task in 0..3 {
        assert!(stdout.contains(&format!("{task}: task={task}\n")), "{stdout}");
    }
    // As Slurm's srun: no salloc lines, the job named after the command, and under -v the
    // option dump and the `jobid N: nodes(K):`list'` line tools scrape the job id from.
    let out = cluster.run(Some("alice"), &dir, "srun", &["-v", "-N", "2", "-n", "2", "-t", "5", "/bin/true"], None);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("salloc:"), "{stderr}");
    assert!(stderr.contains("srun: verbose             : 1\n"), "{stderr}");
    let job_id: u32 = stderr
        .split("srun: jobid ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no jobid line in {stderr}"));
    assert!(stderr.contains(&format!("srun: jobid {job_id}: nodes(2):`n[1-2]', cpu counts: 1(x2)\n")), "{stderr}");
    let shown = cluster.ok("scontrol", &["show", "job", &job_id.to_string()]);
    assert!(shown.contains("JobName=true\n") || shown.contains("JobName=true "), "{shown}");

    // `--multi-prog`: each task runs its line of the file, with its id and offset.
    std::fs::write(dir.join("mpmd.conf"), "# two programs\n0 echo first %t\n1-3 /bin/echo task:%t:offset:%o\n")
        .unwrap();
    let out =
        cluster.run(Some("alice"), &dir, "srun", &["-n", "4", "-l", "-t", "5", "--multi-prog", "mpmd.conf"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(lines, ["0: first 0", "1: task:1:offset:0", "2: task:2:offset:1", "3: task:3:offset:2"]);

    // `-m`: cyclic deals the tasks to the nodes in turn, plane=2 in blocks of two, block (the
    // default) keeps them together.
    for (how, expected) in [
        ("cyclic", ["0: n1", "1: n2", "2: n1", "3: n2", "4: n1"]),
        ("plane=2", ["0: n1", "1: n1", "2: n2", "3: n2", "4: n1"]),
        ("block", ["0: n1", "1: n1", "2: n1", "3: n2", "4: n2"]),
    ] {
        let args = ["-N", "2", "-n", "5", "-l", "-t", "5", "-m", how, "sh", "-c", "echo $SLURMD_NODENAME"];
        let out = cluster.run(Some("alice"), &dir, "srun", &args, None);
        assert!(out.status.success(), "-m {how}: {}", text(&out.stderr));
        let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
        lines.sort();
        assert_eq!(lines, expected, "-m {how}");
    }
    // Arbitrary: task i on the i-th listed host, from `-w` with `-m arbitrary` or from the file
    // SLURM_HOSTFILE names (which makes the distribution arbitrary by itself, as in Slurm).
    let sorted_lines = |out: &std::process::Output| {
        let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    let node_name = ["-l", "-t", "5", "sh", "-c", "echo $SLURMD_NODENAME"];
    let args: Vec<&str> = ["-m", "arbitrary", "-w", "n2,n1,n2"].into_iter().chain(node_name).collect();
    let out = cluster.run(Some("alice"), &dir, "srun", &args, None);
    assert!(out.status.success(), "-m arbitrary -w: {}", text(&out.stderr));
    assert_eq!(sorted_lines(&out), ["0: n2", "1: n1", "2: n2"]);
    std::fs::write(dir.join("hosts"), "n1\n# second and third\nn[2,2]\nn1\n").unwrap();
    let output = |mut command: std::process::Command| command.output().expect("running srun");
    let mut srun = cluster.command(Some("alice"), &dir, "srun", &node_name);
    srun.env("SLURM_HOSTFILE", dir.join("hosts"));
    let out = output(srun);
    assert!(out.status.success(), "SLURM_HOSTFILE: {}", text(&out.stderr));
    assert_eq!(sorted_lines(&out), ["0: n1", "1: n2", "2: n2", "3: n1"]);
    // `-n` takes the first entries; more tasks than hosts listed, no list, or a host outside
    // the job are refused with the reason.
    let mut srun = cluster.command(Some("alice"), &dir, "srun", &["-n", "2", "-l", "-t", "5", "hostname"]);
    srun.env("SLURM_HOSTFILE", dir.join("hosts"));
    let out = output(srun);
    assert!(out.status.success(), "-n 2 with SLURM_HOSTFILE: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 2, "{}", text(&out.stdout));
    let mut srun = cluster.command(Some("alice"), &dir, "srun", &["-n", "5", "-t", "5", "true"]);
    srun.env("SLURM_HOSTFILE", dir.join("hosts"));
    let out = output(srun);
    assert!(!out.status.success() && text(&out.stderr).contains("Too few NodeNames"), "{}", text(&out.stderr));
    let out = cluster.run(Some("alice"), &dir, "srun", &["-n", "2", "-t", "5", "-m", "arbitrary", "true"], None);
    assert!(!out.status.success() && text(&out.stderr).contains("SLURM_HOSTFILE"), "{}", text(&out.stderr));
    let inside = format!("{} -m arbitrary -w n2 true; echo rc=$?", srun_path.display());
    let out = cluster.run(Some("alice"), &dir, "salloc", &["-w", "n1", "-t", "5", "bash", "-c", &inside], None);
    assert!(text(&out.stdout).contains("rc=1"), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stderr).contains("n2 is not one of the job's nodes"), "{}", text(&out.stderr));

    // Back-to-back sruns on an idle cluster start at once: none says it is queued (2–4 of 8 did,
    // announced before the pass that started them).
    for round in 0..8 {
        let out = cluster.run(Some("alice"), &dir, "srun", &["-t", "1", "true"], None);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "round {round}: {stderr}");
        assert!(!stderr.contains("queued and waiting"), "round {round} on an idle cluster: {stderr}");
    }
}

/// Steps run in `job_<id>/step_<n>` below the job's cgroups on every node, obey the job's memory
/// limit there (also on a node that is not the batch host), and leave no cgroup behind.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn steps_run_inside_the_job_cgroup() {
    require_users();
    let cluster = Cluster::start();
    let script = "#!/bin/sh\n#SBATCH -N 2\n#SBATCH -n 2\n#SBATCH -t 5\n#SBATCH --mem=50M\n#SBATCH -o out-%j.txt\n\
        S=$DROVER_HOME/bin/srun\n\
        $S sh -c 'cat /proc/self/cgroup > cg.$SLURM_JOB_ID.$SLURM_NODEID'\n\
        $S sh -c 'if [ $SLURM_NODEID = 1 ]; then head -c 1G /dev/zero | tail; exit $?; fi; echo survived-$SLURM_NODEID'\n\
        echo rc1=$?\n";
    let job_id = cluster.submit(Some("alice"), "cgroup.sh", script, &[]);
    cluster.wait_state(job_id, "COMPLETED", LONG);
    let workdir = cluster.workdir(Some("alice"));
    let out = std::fs::read_to_string(workdir.join(format!("out-{job_id}.txt"))).unwrap();
    assert!(out.contains("survived-0") && !out.contains("survived-1"), "{out}");
    assert!(out.contains("rc1=137"), "the task over the job's memory on n2 must be killed:\n{out}\n{}", cluster.logs());
    let isolated = cluster.logs().contains("enforced:");
    for node in 0..2 {
        let recorded = std::fs::read_to_string(workdir.join(format!("cg.{job_id}.{node}"))).unwrap();
        if !isolated {
            continue;
        }
        assert!(recorded.contains(&format!("/job_{job_id}/step_0")), "node {node}: {recorded}");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = drover_e2e::cgroups_left(&recorded, "step_0");
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "cgroups left behind on node {node}: {left:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Four fake GPU device files per node (shared by both nodes of this host) and the config.
fn fake_gpus() -> (tempfile::TempDir, String) {
    let dir = tempfile::Builder::new().prefix("drover-fake-dev-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for minor in 0..4 {
        let path = dir.path().join(format!("nvidia{minor}"));
        let dev = nix::sys::stat::makedev(195, minor);
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o666);
        nix::sys::stat::mknod(&path, nix::sys::stat::SFlag::S_IFCHR, mode, dev).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let gpus = format!("gpus = {{ tesla = 4 }}\ngpu_files = {{ tesla = \"{}/nvidia[0-3]\" }}", dir.path().display());
    let config = CONFIG.replace("gpus = { tesla = 2 }", &gpus);
    assert_ne!(config, CONFIG, "the harness config changed its GPU line");
    (dir, config)
}

/// A step task on either node can open only the GPU its job was given on that node: the others
/// are refused by the job's device program, also on the node that is not the batch host.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_step_opens_only_its_jobs_gpus() {
    require_users();
    let (dev, config) = fake_gpus();
    let cluster = Cluster::start_with(&config);
    assert!(cluster.logs().contains("enforced:"), "no cgroups on this host:\n{}", cluster.logs());
    let dev = dev.path().display();
    let script = format!(
        "#!/bin/sh\n#SBATCH -N 2 -n 2 --gres=gpu:1 -t 5 -o out-%j.txt\n\
         $DROVER_HOME/bin/srun -l sh -c 'for d in 0 1 2 3; do if dd if={dev}/nvidia$d of=/dev/null count=0 status=none 2>/dev/null; \
         then echo nvidia$d opened; else dd if={dev}/nvidia$d of=/dev/null count=0 status=none 2>&1 | sed \"s/^/nvidia$d /\"; fi; done; \
         echo gpus=$SLURM_STEP_GPUS cuda=$CUDA_VISIBLE_DEVICES'\n"
    );
    let job_id = cluster.submit(Some("alice"), "gpu.sh", &script, &[]);
    cluster.wait_state(job_id, "COMPLETED", LONG);
    let out = std::fs::read_to_string(cluster.workdir(Some("alice")).join(format!("out-{job_id}.txt"))).unwrap();
    for task in 0..2 {
        let lines: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix(&format!("{task}: "))).collect();
        let allowed: u32 = lines
            .iter()
            .find_map(|l| l.strip_prefix("gpus="))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("task {task}: no single GPU:\n{out}"));
        assert!(lines.contains(&format!("gpus={allowed} cuda=0").as_str()), "{out}");
        for minor in 0..4 {
            let line =
                lines.iter().find(|l| l.starts_with(&format!("nvidia{minor} "))).unwrap_or_else(|| panic!("{out}"));
            let expected = if minor == allowed { "No such device or address" } else { "Operation not permitted" };
            assert!(line.contains(expected), "task {task} nvidia{minor}: expected {expected}, got `{line}`\n{out}");
        }
    }
}

/// A step waits while the job's running steps hold the CPUs it needs (Slurm's "step creation
/// temporarily disabled"), and starts once they are free; `--overlap` does not wait.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn steps_share_the_jobs_cpus() {
    require_users();
    let cluster = Cluster::start();
    let script = "#!/bin/sh\n#SBATCH -N 1 -n 2 -t 5 -o out-%j.txt\nS=$DROVER_HOME/bin/srun\n\
        $S -n2 sh -c 'sleep 2; echo first-done' &\nsleep 1\n\
        $S --overlap -n1 echo overlapped\n\
        $S -n1 echo second\nwait\n";
    let job_id = cluster.submit(Some("alice"), "share.sh", script, &[]);
    cluster.wait_state(job_id, "COMPLETED", LONG);
    let out = std::fs::read_to_string(cluster.workdir(Some("alice")).join(format!("out-{job_id}.txt"))).unwrap();
    let at = |needle: &str| out.find(needle).unwrap_or_else(|| panic!("no {needle:?} in:\n{out}"));
    assert!(at("overlapped") < at("first-done"), "{out}");
    assert!(
        at(&format!("srun: Job {job_id} step creation temporarily disabled, retrying (Requested nodes are busy)"))
            < at("first-done"),
        "{out}"
    );
    assert!(at("first-done") < at("second"), "{out}");
}

/// srun's stdin reaches every task; under `--pty` task 0 runs on a terminal (here srun itself
/// runs under `script`, which gives it one).
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn stdin_and_pty() {
    require_users();
    let cluster = Cluster::start();
    let dir = cluster.workdir(Some("alice"));
    let out = cluster.run(Some("alice"), &dir, "srun", &["-N2", "-n2", "-l", "-t", "5", "cat"], Some("hello\nworld\n"));
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let stdout = text(&out.stdout);
    for task in 0..2 {
        assert!(stdout.contains(&format!("{task}: hello\n{task}: world\n")), "{stdout}");
    }
    let script = "#!/bin/sh\n#SBATCH -n 1 -t 5 -o out-%j.txt\n\
        printf 'echo typed-$((6*7))\\nexit 3\\n' | script -qec \"$DROVER_HOME/bin/srun --pty sh -c 'test -t 0 && echo on-a-tty; exec sh -i'\" /dev/null\n\
        echo rc=$?\n";
    let job_id = cluster.submit(Some("alice"), "pty.sh", script, &[]);
    cluster.wait_state(job_id, "COMPLETED", LONG);
    let out = std::fs::read_to_string(cluster.workdir(Some("alice")).join(format!("out-{job_id}.txt"))).unwrap();
    assert!(out.contains("on-a-tty") && out.contains("typed-42"), "{out}");
    assert!(out.contains("rc=3"), "{out}");
}

/// PropagateResourceLimits for batch jobs: the submitting shell's soft limits (here
/// `ulimit -Sn 77`) reach the batch script, as they reach srun's tasks; `--propagate=NONE`
/// keeps the node's own.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn sbatch_propagates_the_submitters_resource_limits() {
    require_users();
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let submit = |extra: &str, out: &str| -> u32 {
        let line = format!(
            "ulimit -Sn 77 && exec {} --parsable {extra} -o {out} --wrap 'echo soft=$(ulimit -Sn) var=$SLURM_RLIMIT_NOFILE'",
            cluster.home().join("bin").join("sbatch").display()
        );
        let output = std::process::Command::new("sh")
            .args(["-c", &line])
            .current_dir(&dir)
            .env("DROVER_HOME", cluster.home())
            .env("DROVER_CONF", cluster.home().join("cluster.toml"))
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout).trim().parse().unwrap()
    };
    let all = submit("", "all.out");
    let none = submit("--propagate=NONE", "none.out");
    for job in [all, none] {
        assert_eq!(cluster.wait_state(job, "COMPLETED", LONG), "0:0");
    }
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    assert_eq!(read("all.out"), "soft=77 var=77\n");
    let none = read("none.out");
    assert!(none.starts_with("soft=") && !none.starts_with("soft=77 ") && none.ends_with("var=\n"), "{none}");
}

/// `srun -E` keeps the job's node and task counts in the tasks' environment (a plain step gets
/// its own); `srun --test-only` and `salloc --test-only` answer when and where the allocation
/// would start, in Slurm's words, and submit nothing.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn preserve_env_keeps_the_jobs_counts_and_test_only_submits_nothing() {
    require_users();
    let cluster = Cluster::start();
    let script = "#!/bin/sh\n#SBATCH -N 2\n#SBATCH -n 4\n#SBATCH -t 5\n#SBATCH -o env-%j.txt\n\
        echo job=$SLURM_NNODES/$SLURM_NTASKS\n\
        $DROVER_HOME/bin/srun -E -n1 -N1 sh -c 'echo E=$SLURM_NNODES/$SLURM_NTASKS'\n\
        $DROVER_HOME/bin/srun --preserve-env -n1 -N1 sh -c 'echo long=$SLURM_NNODES/$SLURM_NTASKS'\n\
        $DROVER_HOME/bin/srun -n1 -N1 sh -c 'echo plain=$SLURM_NNODES/$SLURM_NTASKS'\n";
    let job_id = cluster.submit(Some("alice"), "env.sh", script, &[]);
    assert_eq!(cluster.wait_state(job_id, "COMPLETED", LONG), "0:0");
    let out = std::fs::read_to_string(cluster.workdir(Some("alice")).join(format!("env-{job_id}.txt"))).unwrap();
    assert_eq!(out, "job=2/4\nE=2/4\nlong=2/4\nplain=1/1\n");

    let dir = cluster.workdir(Some("alice"));
    for (command, args) in
        [("srun", vec!["--test-only", "-N", "2", "true"]), ("salloc", vec!["--test-only", "-N", "1"])]
    {
        let out = cluster.run(Some("alice"), &dir, command, &args, None);
        let said = text(&out.stderr);
        assert!(out.status.success(), "{command} --test-only: {said}");
        let line =
            said.lines().find(|l| l.starts_with(&format!("{command}: Job "))).unwrap_or_else(|| panic!("{said}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(words[2].parse::<u32>().is_ok() && words[3..6] == ["to", "start", "at"], "{line}");
        assert!(words[6].starts_with("20") && line.contains(" processors on nodes n"), "{line}");
    }
    assert_eq!(cluster.ok("squeue", &["-h"]).trim(), "", "--test-only submitted a job");
}
