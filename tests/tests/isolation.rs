//! Node isolation end to end, on a real `drover up` cluster whose nodes declare four fake GPUs
//! (`c 195:N` nodes made here; no driver is loaded, so an allowed open fails with ENXIO and a
//! denied one with EPERM): a job sees only the GPU it was given, from its script and from the
//! processes it starts, and still only that one after its node daemon was killed and restarted
//! (with `CUDA_VISIBLE_DEVICES=0` and a cpuset of the one CPU it asked for); a job over its
//! memory ends `OUT_OF_MEMORY 0:125` and the node goes on running jobs; no job process or cgroup
//! is left behind, even when the job's supervisor is killed; the prolog and epilog run around
//! each job, and a failing prolog or health check drains the node with its reason (sinfo's
//! `%E`). Needs root: ignored by a plain `cargo test`, run by `.ci/run`.

use drover_e2e::{CONFIG, Cluster, fake_gpus, text};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

fn root() {
    drover_e2e::require_root("the isolation tests make cgroups and device nodes");
}

fn wait_file(path: &Path, cluster: &Cluster) -> String {
    let deadline = Instant::now() + LONG;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with("done\n")
        {
            return text;
        }
        assert!(Instant::now() < deadline, "{} never completed\n{}", path.display(), cluster.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Checks one probe: exactly GPU `allowed` opened to the driver (ENXIO), the others EPERM.
fn check_probe(probe: &str, allowed: u32) {
    for who in ["batch", "child"] {
        for minor in 0..4 {
            let line = probe
                .lines()
                .find(|line| line.starts_with(&format!("{who} nvidia{minor} ")))
                .unwrap_or_else(|| panic!("{probe}"));
            let expected = if minor == allowed { "No such device or address" } else { "Operation not permitted" };
            assert!(line.contains(expected), "{who} nvidia{minor}: expected {expected}, got `{line}`\n{probe}");
        }
    }
}

/// The job cgroups named in `recorded` (the job's own `/proc/self/cgroup`) that still exist, in
/// any hierarchy.
fn job_cgroups_left(recorded: &str) -> Vec<PathBuf> {
    drover_e2e::cgroups_left(recorded, "step_batch")
}

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn a_job_opens_only_its_gpu_even_after_noded_restarts() {
    root();
    let (dev, config) = fake_gpus();
    let cluster = Cluster::start_with(&config);
    let dev = dev.path().display().to_string();
    let script = format!(
        "#!/bin/sh\n#SBATCH --gres=gpu:1 -t 5\n\
         probe() {{ for d in 0 1 2 3; do if dd if={dev}/nvidia$d of=/dev/null count=0 status=none 2>err.$1.$$; then echo \"$1 nvidia$d opened\"; else echo \"$1 nvidia$d $(cat err.$1.$$)\"; fi; done; rm -f err.$1.$$; }}\n\
         run() {{ probe batch; (probe child) > child.$$; cat child.$$; rm child.$$; echo gpus=$SLURM_JOB_GPUS cuda=$CUDA_VISIBLE_DEVICES; grep Cpus_allowed_list /proc/self/status; echo done; }}\n\
         run > probe1.$SLURM_JOB_ID\n\
         while [ ! -e go.$SLURM_JOB_ID ]; do sleep 0.1; done\n\
         run > probe2.$SLURM_JOB_ID\n\
         cat /proc/self/cgroup > cgroup.$SLURM_JOB_ID\n"
    );
    let job_id = cluster.submit(None, "gpu.sh", &script, &[]);
    let workdir = cluster.workdir(None);
    let first = wait_file(&workdir.join(format!("probe1.{job_id}")), &cluster);
    let allowed: u32 = first
        .lines()
        .find_map(|line| line.strip_prefix("gpus="))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no single GPU in SLURM_JOB_GPUS:\n{first}"));
    check_probe(&first, allowed);
    // Its one GPU is device 0 to CUDA, and its one CPU is all it may run on.
    assert!(first.contains(&format!("gpus={allowed} cuda=0\n")), "{first}");
    let cpus =
        first.lines().find_map(|line| line.strip_prefix("Cpus_allowed_list:")).unwrap_or_else(|| panic!("{first}"));
    assert!(cpus.trim().parse::<u32>().is_ok(), "one CPU expected, the job may run on {cpus}");

    // The device program lives in the kernel: killing and restarting noded changes nothing.
    let node = cluster.ok("squeue", &["-h", "-j", &job_id.to_string(), "-o", "%N"]).trim().to_owned();
    cluster.kill9(&format!("noded-{node}"));
    let out = cluster.drover("up");
    assert!(out.status.success(), "restarting noded: {}{}", text(&out.stdout), text(&out.stderr));
    std::fs::write(workdir.join(format!("go.{job_id}")), "").unwrap();
    let second = wait_file(&workdir.join(format!("probe2.{job_id}")), &cluster);
    check_probe(&second, allowed);
    assert_eq!(cluster.wait_state(job_id, "COMPLETED", LONG), "0:0");
    let left = job_cgroups_left(&std::fs::read_to_string(workdir.join(format!("cgroup.{job_id}"))).unwrap());
    assert!(left.is_empty(), "job cgroups left behind: {left:?}");
}

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn a_job_over_its_memory_ends_out_of_memory_and_the_node_stays_up() {
    root();
    let cluster = Cluster::start();
    // `tail` keeps a newline-free stream in memory, far past the 50 MB asked for.
    let job_id = cluster.submit(
        None,
        "oom.sh",
        "#!/bin/sh\n#SBATCH --mem=50M -t 5\ncat /proc/self/cgroup > cgroup.$SLURM_JOB_ID\nhead -c 1G /dev/zero | tail\necho survived\n",
        &[],
    );
    assert_eq!(cluster.wait_state(job_id, "OUT_OF_MEMORY", LONG), "0:125");
    let output = std::fs::read_to_string(cluster.workdir(None).join(format!("slurm-{job_id}.out"))).unwrap();
    // One kill or more: `head` and `tail` are both in the job, and a kernel (cgroup v1's, seen in
    // CI) may kill both before the memory is back under the limit.
    let what = format!("oom-kill event(s) in StepId={job_id}.batch");
    let count = output.lines().find_map(|line| {
        let (n, rest) = line.split_once("Detected ")?.1.split_once(' ')?;
        rest.starts_with(&what).then(|| n.parse::<u32>().ok()).flatten()
    });
    assert!(count.is_some_and(|n| n >= 1), "{output}");
    let next = cluster.submit(None, "after.sh", "#!/bin/sh\n#SBATCH --mem=50M -t 5\necho fine\n", &[]);
    assert_eq!(cluster.wait_state(next, "COMPLETED", LONG), "0:0");
    let left =
        job_cgroups_left(&std::fs::read_to_string(cluster.workdir(None).join(format!("cgroup.{job_id}"))).unwrap());
    assert!(left.is_empty(), "job cgroups left behind: {left:?}");
}

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn prolog_epilog_and_health_check_drain_the_node_on_failure() {
    root();
    let admin = tempfile::Builder::new().prefix("drover-admin-").tempdir_in("/tmp").unwrap();
    let dir = admin.path().display().to_string();
    let script = |name: &str, body: &str| {
        let path = admin.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    };
    let prolog = script(
        "prolog",
        &format!(
            "echo \"$SLURM_JOB_ID $SLURM_SCRIPT_CONTEXT $(id -u)\" >> {dir}/log\n[ \"$SLURM_JOB_NAME\" != badprolog ] || {{ echo 'no scratch' >&2; exit 7; }}\n"
        ),
    );
    let epilog = script("epilog", &format!("echo \"$SLURM_JOB_ID $SLURM_SCRIPT_CONTEXT $(id -u)\" >> {dir}/log\n"));
    let health = script("health", &format!("[ ! -e {dir}/sick ] || {{ echo 'fan 3 failed'; exit 1; }}\n"));
    let node_settings = format!(
        "gpus = {{ tesla = 2 }}\nprolog = \"{prolog}\"\nepilog = \"{epilog}\"\nprolog_epilog_timeout = 10\nhealth_check_program = \"{health}\"\nhealth_check_interval = 1"
    );
    let cluster = Cluster::start_with(&CONFIG.replace("gpus = { tesla = 2 }", &node_settings));

    let good = cluster.submit(None, "good.sh", "#!/bin/sh\n#SBATCH -t 5\ntrue\n", &[]);
    assert_eq!(cluster.wait_state(good, "COMPLETED", LONG), "0:0");
    let deadline = Instant::now() + LONG;
    let log = loop {
        let log = std::fs::read_to_string(admin.path().join("log")).unwrap_or_default();
        if log.contains(&format!("{good} epilog_slurmd 0")) || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(log.contains(&format!("{good} prolog_slurmd 0\n{good} epilog_slurmd 0\n")), "{log}");

    let bad =
        cluster.submit(None, "bad.sh", "#!/bin/sh\n#SBATCH -t 5 -J badprolog\necho ran > ran.$SLURM_JOB_ID\n", &[]);
    cluster.wait_state(bad, "FAILED", LONG);
    assert!(!cluster.workdir(None).join(format!("ran.{bad}")).exists(), "the job ran although its prolog failed");
    let drained = wait_reason(&cluster, "Prolog error: exit code 7: no scratch");
    let mut drained_nodes: Vec<&str> = drained
        .lines()
        .filter(|line| line.contains("Prolog error"))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    drained_nodes.sort_unstable();
    drained_nodes.dedup();
    assert_eq!(drained_nodes.len(), 1, "only the node that ran the prolog drains:\n{drained}");

    std::fs::write(admin.path().join("sick"), "").unwrap();
    wait_reason(&cluster, "Health check failed: exit code 1: fan 3 failed");
    // A drained node takes no new job.
    let next = cluster.submit(None, "next.sh", "#!/bin/sh\n#SBATCH -t 5\ntrue\n", &[]);
    std::thread::sleep(Duration::from_secs(3));
    let state = cluster.ok("squeue", &["-h", "-j", &next.to_string(), "-o", "%T"]);
    assert_eq!(state.trim(), "PENDING", "{}", cluster.ok("sinfo", &["-o", "%N %E"]));
}

/// Waits until sinfo's reason column (`%E`, what `sinfo -R` shows) lists `reason`, and returns
/// the `%N %E` lines.
fn wait_reason(cluster: &Cluster, reason: &str) -> String {
    let deadline = Instant::now() + LONG;
    loop {
        let out = cluster.ok("sinfo", &["-h", "-o", "%N %E"]);
        if out.contains(reason) {
            return out;
        }
        assert!(Instant::now() < deadline, "sinfo -R never showed `{reason}`:\n{out}\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn a_job_whose_supervisor_is_killed_leaves_no_process_or_cgroup() {
    root();
    let cluster = Cluster::start();
    let script = "#!/bin/sh\n#SBATCH -t 5\ncat /proc/self/cgroup > cgroup.$SLURM_JOB_ID\n\
        sleep 600 &\necho $! > sleeper.$SLURM_JOB_ID\nwait\n";
    let job_id = cluster.submit(None, "orphan.sh", script, &[]);
    let workdir = cluster.workdir(None);
    let sleeper_file = workdir.join(format!("sleeper.{job_id}"));
    let deadline = Instant::now() + LONG;
    let sleeper: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&sleeper_file).ok().and_then(|text| text.trim().parse().ok()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the job never started its sleeper\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(100));
    };
    let node = cluster.ok("squeue", &["-h", "-j", &job_id.to_string(), "-o", "%N"]).trim().to_owned();
    let pid_file =
        cluster.home().join(format!("noded-{node}")).join("jobs").join(format!("{job_id}.0")).join("supervisor.pid");
    let supervisor: i32 =
        std::fs::read_to_string(&pid_file).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(supervisor), nix::sys::signal::Signal::SIGKILL).unwrap();

    cluster.wait_state(job_id, "FAILED", LONG);
    let deadline = Instant::now() + Duration::from_secs(15);
    while Path::new(&format!("/proc/{sleeper}")).exists() {
        let stat = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap_or_default();
        assert!(Instant::now() < deadline, "the job's sleeper {sleeper} outlived its supervisor: {stat}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = job_cgroups_left(&std::fs::read_to_string(workdir.join(format!("cgroup.{job_id}"))).unwrap());
    assert!(left.is_empty(), "job cgroups left behind: {left:?}");
}

/// The first of `files` that one of `dirs` has, trimmed.
fn cgroup_value(dirs: &[PathBuf], files: &[&str]) -> Option<String> {
    dirs.iter()
        .flat_map(|dir| files.iter().map(move |file| dir.join(file)))
        .find_map(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.trim().to_owned())
}

/// Every limit on one cluster, for jobs of an unprivileged user, in as few cluster starts as the
/// slow VM of `tests/vm/run.sh` allows (it runs this test on pure cgroup v2): a GPU job opens
/// only its GPU from its script and from a child, runs on its one CPU, as alice, under its memory
/// limit and `pids.max`; a job over its memory ends `OUT_OF_MEMORY 0:125`; a job past its time
/// limit ends `TIMEOUT`; and none of their cgroups is left behind.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn an_unprivileged_users_jobs_get_every_limit() {
    drover_e2e::require_users();
    let (dev, config) = fake_gpus();
    // Time limits run 10 times faster: `-t 1` is 6 s.
    let cluster = Cluster::start_with_env(&config, &[("DROVER_TIME_SCALE", "0.1")]);
    assert!(cluster.logs().contains("enforced:"), "no cgroups on this host:\n{}", cluster.logs());
    let dev = dev.path().display().to_string();
    let workdir = cluster.workdir(Some("alice"));
    let gpu_script = format!(
        "#!/bin/sh\n#SBATCH --gres=gpu:1 -c 1 --mem=64M -t 5\n\
         cat /proc/self/cgroup > cgroup.$SLURM_JOB_ID\n\
         probe() {{ for d in 0 1 2 3; do if dd if={dev}/nvidia$d of=/dev/null count=0 status=none 2>err.$1.$$; then echo \"$1 nvidia$d opened\"; else echo \"$1 nvidia$d $(cat err.$1.$$)\"; fi; done; rm -f err.$1.$$; }}\n\
         {{ probe batch; (probe child) > child.$$; cat child.$$; rm child.$$; echo gpus=$SLURM_JOB_GPUS cuda=$CUDA_VISIBLE_DEVICES; \
         grep Cpus_allowed_list /proc/self/status; echo uid=$(id -u); echo done; }} > probe.$SLURM_JOB_ID\n\
         while [ ! -e go.$SLURM_JOB_ID ]; do sleep 0.2; done\n"
    );
    let gpu = cluster.submit(Some("alice"), "gpu.sh", &gpu_script, &[]);
    let oom = cluster.submit(
        Some("alice"),
        "oom.sh",
        "#!/bin/sh\n#SBATCH --mem=50M -t 5\ncat /proc/self/cgroup > cgroup.$SLURM_JOB_ID\nhead -c 1G /dev/zero | tail\necho survived\n",
        &[],
    );
    let late = cluster.submit(
        Some("alice"),
        "late.sh",
        "#!/bin/sh\n#SBATCH -t 1\ncat /proc/self/cgroup > cgroup.$SLURM_JOB_ID\nsleep 600\n",
        &[],
    );

    let probe = wait_file(&workdir.join(format!("probe.{gpu}")), &cluster);
    let allowed: u32 = probe
        .lines()
        .find_map(|line| line.strip_prefix("gpus="))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no single GPU in SLURM_JOB_GPUS:\n{probe}"));
    check_probe(&probe, allowed);
    assert!(probe.contains(&format!("gpus={allowed} cuda=0\n")), "{probe}");
    let alice = nix::unistd::User::from_name("alice").unwrap().unwrap().uid;
    assert!(probe.contains(&format!("uid={alice}\n")), "{probe}");
    let cpu = probe
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{probe}"));
    assert!(cpu.parse::<u32>().is_ok(), "one CPU expected, the job may run on {cpu}");
    // The limits as the kernel holds them, in whichever hierarchy each is on this host.
    let recorded = std::fs::read_to_string(workdir.join(format!("cgroup.{gpu}"))).unwrap();
    // The job's directories that exist, in every hierarchy (while it runs, all of them).
    let dirs = job_cgroups_left(&recorded);
    let value = |files: &[&str]| cgroup_value(&dirs, files).unwrap_or_else(|| panic!("no {files:?} in {dirs:?}"));
    assert_eq!(value(&["memory.max", "memory.limit_in_bytes"]), (64u64 << 20).to_string(), "{dirs:?}");
    assert_eq!(value(&["pids.max"]), "4096", "{dirs:?}");
    assert_eq!(value(&["cpuset.cpus"]), cpu, "{dirs:?}");
    std::fs::write(workdir.join(format!("go.{gpu}")), "").unwrap();

    assert_eq!(cluster.wait_state(gpu, "COMPLETED", LONG), "0:0");
    assert_eq!(cluster.wait_state(oom, "OUT_OF_MEMORY", LONG), "0:125");
    let output = std::fs::read_to_string(workdir.join(format!("slurm-{oom}.out"))).unwrap();
    assert!(output.contains(&format!("Detected 1 oom-kill event(s) in StepId={oom}.batch")), "{output}");
    cluster.wait_state(late, "TIMEOUT", LONG);
    for job in [gpu, oom, late] {
        let recorded = std::fs::read_to_string(workdir.join(format!("cgroup.{job}"))).unwrap();
        let left = job_cgroups_left(&recorded);
        assert!(left.is_empty(), "job {job}'s cgroups left behind: {left:?}");
    }
}
