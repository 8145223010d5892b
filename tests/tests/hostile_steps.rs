//! Hostile steps and their neighbours, end to end with real daemons and real users: a step's
//! runner lives in its job's cgroups with the tasks it forks, so the job's pids limit bounds what
//! a step can start and cancelling the job leaves nothing of the step behind; jobs and step
//! tasks inherit no descriptor the daemons were started with; `drover up` keeps its logs from
//! other users; and another user connecting to a step's I/O port (idle, with garbage, with a
//! false token) can neither end nor disturb the step, while connections that never prove the
//! step's token are dropped within seconds.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::io::{BufRead, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// Live (not zombie) processes whose command line is exactly `argv`.
fn processes(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv.iter().flat_map(|arg| arg.bytes().chain([0])).collect();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else { continue };
        if std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| cmdline == wanted) && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Whether `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
}

fn parent(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1)).and_then(|p| p.parse().ok()).unwrap_or(0)
}

fn cgroup_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default()
}

/// The line of `/proc/<pid>/cgroup` text for the same hierarchy as `line` (`N:controllers:`).
fn same_hierarchy<'a>(text: &'a str, line: &str) -> Option<&'a str> {
    let prefix = &line[..line.rfind(':')? + 1];
    text.lines().find(|l| l.starts_with(prefix))
}

/// Waits until every pid in `pids` is gone, or fails naming what survived.
fn wait_gone(cluster: &Cluster, pids: &[i32], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<(i32, String)> = pids
            .iter()
            .filter(|&&pid| alive(pid))
            .map(|&pid| (pid, text(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what} survived the job: {left:?}\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until no cgroup of the step recorded in `recorded` is left.
fn wait_no_cgroups(recorded: &str, step: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = drover_e2e::cgroups_left(recorded, step);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "cgroups left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A step of eight `sleep`s over two nodes: each task and the runner that forked it are in
/// `job_<id>/step_0` in every hierarchy the job has (the runner shielded from the OOM killer, the
/// tasks not); `scancel` of the job ends the runner, every task and the cgroups.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn the_step_runner_lives_and_dies_in_the_jobs_cgroup() {
    require_users();
    let cluster = Cluster::start();
    let script = "#!/bin/sh\n#SBATCH -N 2\n#SBATCH -n 8\n#SBATCH -t 5\n#SBATCH -o out-%j.txt\n\
        $DROVER_HOME/bin/srun --overlap -n 8 sleep 3001\n";
    let job_id = cluster.submit(Some("alice"), "runner.sh", script, &[]);
    let tasks = cluster.wait_for("the step's 8 tasks", LONG, || {
        let found = processes(&["sleep", "3001"]);
        (found.len() == 8).then_some(found)
    });
    let runners: Vec<i32> = {
        let mut runners: Vec<i32> = tasks.iter().map(|&pid| parent(pid)).collect();
        runners.sort_unstable();
        runners.dedup();
        runners
    };
    assert_eq!(runners.len(), 2, "one runner per node: {runners:?}");
    for &runner in &runners {
        let cmdline = text(&std::fs::read(format!("/proc/{runner}/cmdline")).unwrap_or_default());
        assert!(cmdline.contains("step\0--step-dir"), "the tasks' parent is not a step runner: {cmdline:?}");
    }
    let isolated = cluster.logs().contains("enforced:");
    let recorded = cgroup_of(tasks[0]);
    if isolated {
        let step = format!("/job_{job_id}/step_0");
        for &task in &tasks {
            let task_cgroups = cgroup_of(task);
            let in_job: Vec<&str> = task_cgroups.lines().filter(|line| line.ends_with(&step)).collect();
            assert!(!in_job.is_empty(), "task {task} is not in {step}:\n{task_cgroups}");
            // At the job's memory limit the kernel picks a task, never the runner.
            let adjust = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap_or_default();
            assert_eq!(adjust(task).trim(), "0", "task {task}");
            // (Where root may not lower it, as in some containers, the runner keeps noded's.)
            let noded = adjust(parent(parent(task)));
            let runner = adjust(parent(task));
            assert!(runner.trim() == "-1000" || runner == noded, "the runner of task {task}: {runner}");
            let runner_cgroups = cgroup_of(parent(task));
            for line in in_job {
                assert_eq!(
                    same_hierarchy(&runner_cgroups, line),
                    Some(line),
                    "the runner of task {task} is outside the job's cgroup:\n{runner_cgroups}"
                );
            }
        }
    }
    let out = cluster.run(Some("alice"), &cluster.workdir(Some("alice")), "scancel", &[&job_id.to_string()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    cluster.wait_state(job_id, "CANCELLED", LONG);
    wait_gone(&cluster, &tasks, "step tasks");
    wait_gone(&cluster, &runners, "step runners");
    assert!(processes(&["sleep", "3001"]).is_empty(), "a task of the step survived");
    if isolated {
        wait_no_cgroups(&recorded, "step_0");
    }
}

/// A step of 40 tasks in a job whose nodes allow 24 processes per job: the runner forks its tasks
/// inside the job's pids limit, so no more than 24 of the job's processes ever run (the rest
/// fail to start and srun says so), and cancelling the job ends them all.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_step_cannot_start_more_processes_than_the_jobs_pids_limit() {
    require_users();
    let config = CONFIG.replace("cpus = 4\n", "cpus = 64\njob_pids_max = 24\n");
    assert_ne!(config, CONFIG, "the harness config changed its cpus line");
    let cluster = Cluster::start_with(&config);
    assert!(cluster.logs().contains("pids v"), "this host enforces no pids limit:\n{}", cluster.logs());
    let script = "#!/bin/sh\n#SBATCH -N 1\n#SBATCH -n 40\n#SBATCH -t 5\n#SBATCH -o out-%j.txt\n\
        $DROVER_HOME/bin/srun --overlap -n 40 sleep 3002\n";
    let job_id = cluster.submit(Some("alice"), "pids.sh", script, &[]);
    cluster.wait_for("the step's first task", LONG, || (!processes(&["sleep", "3002"]).is_empty()).then_some(()));
    // The runner forks all tasks before it relays anything: three seconds see them all.
    let mut most = 0;
    let mut seen = Vec::new();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let now = processes(&["sleep", "3002"]);
        most = most.max(now.len());
        seen.extend(now);
        std::thread::sleep(Duration::from_millis(100));
    }
    seen.sort_unstable();
    seen.dedup();
    eprintln!("at most {most} of the step's 40 tasks ran at once ({} seen)", seen.len());
    assert!(
        most < 24,
        "{most} tasks of the step ran at once in a job limited to 24 processes\n{}",
        std::fs::read_to_string(cluster.workdir(Some("alice")).join(format!("out-{job_id}.txt"))).unwrap_or_default()
    );
    cluster.ok("scancel", &[&job_id.to_string()]);
    cluster.wait_state(job_id, "CANCELLED", LONG);
    wait_gone(&cluster, &seen, "step tasks");
    let out = std::fs::read_to_string(cluster.workdir(Some("alice")).join(format!("out-{job_id}.txt"))).unwrap();
    assert!(
        out.contains("Resource temporarily unavailable"),
        "srun must report the tasks that could not start:\n{out}"
    );
    assert!(!out.contains("os error"), "{out}");
}

/// The descriptor numbers in an `ls -l /proc/<pid>/fd` listing.
fn descriptors(listing: &str) -> Vec<u32> {
    let mut fds: Vec<u32> =
        listing.lines().filter_map(|line| line.split_once(" -> ")?.0.split_whitespace().last()?.parse().ok()).collect();
    fds.sort_unstable();
    fds
}

/// The daemons are started holding an extra descriptor (not close-on-exec) on a file of the
/// test's: neither a batch script's shell nor a step's tasks (on either node) have anything open
/// but stdin, stdout and stderr.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn jobs_and_steps_inherit_no_descriptors_from_the_daemons() {
    require_users();
    let leak = tempfile::Builder::new().prefix("drover-leaked-fd-").tempfile_in("/tmp").unwrap();
    std::fs::set_permissions(leak.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    // Without O_CLOEXEC: `drover up`, and the daemons it starts, inherit it.
    let fd = nix::fcntl::open(leak.path(), nix::fcntl::OFlag::O_RDONLY, nix::sys::stat::Mode::empty()).unwrap();
    let cluster = Cluster::start();
    let noded = cluster.pid("noded-n1");
    let noded_fds = std::fs::read_dir(format!("/proc/{noded}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok().filter(|target| target == leak.path()));
    assert_eq!(noded_fds.count(), 1, "noded did not inherit the test's descriptor; the test proves nothing");
    let script = "#!/bin/sh\n#SBATCH -N 2\n#SBATCH -n 2\n#SBATCH -t 5\n#SBATCH -o out-%j.txt\n\
        sh -c 'ls -l /proc/$$/fd; :' > fds.batch\n\
        $DROVER_HOME/bin/srun -o fds.step.%t sh -c 'ls -l /proc/$$/fd; :'\n\
        echo srun-rc=$?\n";
    let job_id = cluster.submit(Some("alice"), "fds.sh", script, &[]);
    cluster.wait_state(job_id, "COMPLETED", LONG);
    let workdir = cluster.workdir(Some("alice"));
    let out = std::fs::read_to_string(workdir.join(format!("out-{job_id}.txt"))).unwrap_or_default();
    assert!(out.contains("srun-rc=0"), "{out}");
    for name in ["fds.batch", "fds.step.0", "fds.step.1"] {
        let listing = std::fs::read_to_string(workdir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}\n{out}"));
        assert_eq!(descriptors(&listing), [0, 1, 2], "{name}: inherited descriptors:\n{listing}");
        assert!(!listing.contains("drover-leaked-fd"), "{name}:\n{listing}");
    }
    drop(fd);
}

/// `drover up`'s logs name users, jobs and paths: they and their directory are the owner's only
/// (no bit for others, none to write for the group), and bob cannot read them.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn drover_up_logs_are_not_world_readable() {
    require_users();
    let cluster = Cluster::start();
    let log_dir = cluster.home().join("log");
    let mode = std::fs::metadata(&log_dir).unwrap().mode() & 0o7777;
    assert_eq!(mode & 0o027, 0, "{} has mode {mode:o}", log_dir.display());
    let mut logs = 0;
    for entry in std::fs::read_dir(&log_dir).unwrap().flatten() {
        let mode = entry.metadata().unwrap().mode() & 0o7777;
        assert_eq!(mode & 0o037, 0, "{} has mode {mode:o}", entry.path().display());
        logs += 1;
        let out = Command::new("setpriv")
            .args(["--reuid=bob", "--regid=bob", "--init-groups", "--", "cat"])
            .arg(entry.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "bob read {}:\n{}", entry.path().display(), text(&out.stdout));
    }
    assert_eq!(logs, 3, "ctld's and two nodes' logs");
    // A restart (`up` again) keeps them private.
    assert!(cluster.drover("up").status.success());
    for entry in std::fs::read_dir(&log_dir).unwrap().flatten() {
        let mode = entry.metadata().unwrap().mode() & 0o7777;
        assert_eq!(mode & 0o037, 0, "{} has mode {mode:o} after up", entry.path().display());
    }
}

/// Both noded processes stopped (SIGSTOP) while held, continued on drop.
struct Stopped(Vec<i32>);

impl Drop for Stopped {
    fn drop(&mut self) {
        for &pid in &self.0 {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGCONT);
        }
    }
}

/// The TCP ports process `pid` listens on: `(address, port)`.
fn listening(pid: i32) -> Vec<(std::net::Ipv4Addr, u16)> {
    let sockets: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(target.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let mut found = Vec::new();
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 10 || fields[3] != "0A" || !sockets.iter().any(|inode| inode == fields[9]) {
            continue;
        }
        let Some((ip, port)) = fields[1].split_once(':') else { continue };
        let (Ok(ip), Ok(port)) = (u32::from_str_radix(ip, 16), u16::from_str_radix(port, 16)) else { continue };
        found.push((std::net::Ipv4Addr::from(u32::from_be(ip)), port));
    }
    found
}

/// bob connects to alice's srun before her step's nodes can (their daemons are stopped), a dozen
/// times: idle, with garbage, with a false token; the step still runs and prints all its output
/// with exit code 0. A connection that never proves the token is closed within seconds.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn another_user_cannot_disturb_a_steps_io_port() {
    require_users();
    let cluster = Cluster::start();
    let workdir = cluster.workdir(Some("alice"));
    let script = "#!/bin/sh\n#SBATCH -N 2\n#SBATCH -n 2\n#SBATCH -t 5\n#SBATCH -o out-%j.txt\n\
        touch ready\nwhile [ ! -e go ]; do sleep 0.1; done\n\
        $DROVER_HOME/bin/srun -l sh -c 'seq 1 3000; sleep 10'\necho srun-rc=$?\n";
    let job_id = cluster.submit(Some("alice"), "port.sh", script, &[]);
    cluster.wait_for("the job to start", LONG, || workdir.join("ready").exists().then_some(()));
    let stopped = Stopped(vec![cluster.pid("noded-n1"), cluster.pid("noded-n2")]);
    for &pid in &stopped.0 {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGSTOP).unwrap();
    }
    std::fs::write(workdir.join("go"), "").unwrap();
    let srun = cluster.home().join("bin").join("srun").to_string_lossy().into_owned();
    let (ip, port) = cluster.wait_for("srun's I/O port", LONG, || {
        let srun = *processes(&[&srun, "-l", "sh", "-c", "seq 1 3000; sleep 10"]).first()?;
        listening(srun).first().copied()
    });
    // The cluster's nodes reach ctld over loopback: srun listens there, not on every address.
    assert!(ip.is_loopback(), "srun listens on {ip}");
    // bob's connections: every third idle, every third garbage, every third a well-formed hello
    // with a false token.
    let attack = r#"trap '' PIPE
    n=0
    for i in $(seq 1 12); do
        exec {fd}<>/dev/tcp/$1/$2 || continue
        n=$((n + 1))
        case $((i % 3)) in
            1) printf 'GET / HTTP/1.0\r\n\r\n%.0s' $(seq 1 100) >&$fd ;;
            2) printf '\x04\x00\x00\x00fake\x00\x00\x00\x00\x01\x00\x00\x00\x00\x05\x00\x00\x00hello' >&$fd ;;
        esac
    done
    echo connected $n
    sleep 60"#;
    let mut bob = Command::new("setpriv")
        .args(["--reuid=bob", "--regid=bob", "--init-groups", "--", "bash", "-c", attack, "attack"])
        .arg(ip.to_string())
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(bob.stdout.take().unwrap()).read_line(&mut line).unwrap();
    if !line.starts_with("connected ") || line.trim() == "connected 0" {
        let mut err = String::new();
        let _ = bob.stderr.take().unwrap().read_to_string(&mut err);
        panic!("bob's connections to {ip}:{port} failed ({:?}): {line}{err}", bob.wait());
    }
    eprintln!("bob: {}", line.trim());
    drop(stopped);
    // An idle connection is dropped once the deadline for the token passed.
    let mut idle = std::net::TcpStream::connect((ip, port)).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1];
    let read = idle.read(&mut buf);
    eprintln!("an idle connection was closed after {:?} ({read:?})", started.elapsed());
    assert!(
        matches!(read, Ok(0) | Err(_)) && started.elapsed() < Duration::from_secs(8),
        "an idle connection was kept {:?} ({read:?})",
        started.elapsed()
    );
    cluster.wait_state(job_id, "COMPLETED", LONG);
    let _ = bob.kill();
    let _ = bob.wait();
    let out = std::fs::read_to_string(workdir.join(format!("out-{job_id}.txt"))).unwrap_or_default();
    assert!(out.contains("srun-rc=0\n"), "alice's step was disturbed:\n{out}\n{}", cluster.logs());
    for task in 0..2 {
        let lines: Vec<&str> = out.lines().filter(|line| line.starts_with(&format!("{task}: "))).collect();
        let expected: Vec<String> = (1..=3000).map(|n| format!("{task}: {n}")).collect();
        assert_eq!(lines, expected, "task {task}'s output");
    }
}
