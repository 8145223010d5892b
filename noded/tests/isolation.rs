//! Kernel enforcement of a job's isolation, through the real supervisor: the device program
//! (fake GPU nodes `c 195:N` and a fake MIG capability node: ENXIO when allowed, because no driver
//! is loaded, EPERM when denied), the memory limit and its OOM kill, `pids.max`, `--signal`
//! before the time limit, and that a job's cgroups are gone once it ended. Runs as root (as CI
//! does) on whatever cgroup layout the host has: a plain `cargo test` lists these tests as
//! ignored, `.ci/run` runs them (`--include-ignored`), and each fails where it cannot run its
//! check (not root, or no memory or pids controller).

use drover_noded::bpf::CharDevice;
use drover_noded::cgroup::NodeCgroups;
use drover_noded::isolation::{self, JobIsolation};
use drover_noded::supervisor;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobSpec, WaitStatus};
use drover_shared::proto::node::{JobEnd, JobOutcome, LaunchRequest};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;
const DROVER_NODED: &str = env!("CARGO_BIN_EXE_drover-noded");
const NVIDIA_MAJOR: u32 = 195;

fn root() {
    assert!(nix::unistd::geteuid().is_root(), "the kernel isolation tests need root (.ci/run runs them)");
}

/// A scratch node with its own cgroup scope, and one job directory.
struct Fixture {
    _root: tempfile::TempDir,
    job_dir: PathBuf,
    work_dir: PathBuf,
    cgroups: NodeCgroups,
    job_id: u32,
}

impl Fixture {
    fn new(job_id: u32) -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let mode =
            |path: &Path, mode: u32| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        mode(root.path(), 0o711);
        let job_dir = root.path().join("jobs").join(job_id.to_string());
        std::fs::create_dir_all(&job_dir).unwrap();
        mode(&root.path().join("jobs"), 0o711);
        mode(&job_dir, 0o700);
        let work_dir = root.path().join("work");
        std::fs::create_dir(&work_dir).unwrap();
        std::os::unix::fs::chown(&work_dir, Some(NOBODY), Some(NOBODY)).unwrap();
        mode(&work_dir, 0o755);
        let scope = format!("drover_isotest_{}_{job_id}", std::process::id());
        let cgroups = NodeCgroups::prepare(&scope).expect("cgroups usable as root");
        Fixture { _root: root, job_dir, work_dir, cgroups, job_id }
    }

    fn launch(&self, script: &str) -> LaunchRequest {
        let work_dir = self.work_dir.to_str().unwrap().to_owned();
        LaunchRequest {
            job_id: self.job_id,
            spec: JobSpec {
                name: "iso".into(),
                work_dir: work_dir.clone(),
                submit_dir: work_dir,
                submit_host: "login1".into(),
                environment: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
                script: script.as_bytes().to_vec(),
                umask: 0o022,
                ..JobSpec::default()
            },
            user: "nobody".into(),
            uid: NOBODY,
            gid: NOBODY,
            cluster_name: "test".into(),
            partition: "debug".into(),
            account: String::new(),
            qos: String::new(),
            time_limit: TimeLimit::Unlimited,
            nodes: vec!["node01".into()],
            cpus_per_node: vec![1],
            tasks_per_node: vec![1],
            cpus_on_node: 1,
            mem_per_node_mb: 0,
            gpus: Vec::new(),
            kill_wait: 1,
            ctld_socket: "/nonexistent/ctld.sock".into(),
            array: None,
            restart_count: 0,
        }
    }

    /// Writes the launch and its isolation, starts the supervisor with `env`, waits for the end.
    fn run(&self, launch: &LaunchRequest, limits: drover_noded::cgroup::JobLimits, env: &[(&str, &str)]) -> JobEnd {
        self.start(launch, limits, env);
        self.wait_end()
    }

    /// Writes the launch and its isolation and starts the supervisor with `env`.
    fn start(&self, launch: &LaunchRequest, limits: drover_noded::cgroup::JobLimits, env: &[(&str, &str)]) {
        supervisor::write_launch(&self.job_dir, launch).unwrap();
        let plan = JobIsolation { cgroup: self.cgroups.job(self.job_id, 0), limits, cuda_visible_devices: None };
        isolation::write(&self.job_dir, &plan).unwrap();
        // The supervisor inherits the environment of its spawner.
        let saved: Vec<(String, Option<String>)> =
            env.iter().map(|(name, _)| ((*name).to_owned(), std::env::var(name).ok())).collect();
        for (name, value) in env {
            // SAFETY: tests that pass an environment run nothing else that reads it meanwhile
            // (the variable is only read by the supervisor child process).
            unsafe { std::env::set_var(name, value) };
        }
        let noded_socket = self.job_dir.join("no-noded.sock");
        supervisor::spawn(Path::new(DROVER_NODED), &self.job_dir, &noded_socket).unwrap();
        for (name, value) in saved {
            // SAFETY: as above.
            unsafe {
                match value {
                    Some(value) => std::env::set_var(&name, value),
                    None => std::env::remove_var(&name),
                }
            }
        }
    }

    fn wait_end(&self) -> JobEnd {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(end) = supervisor::read_end(&self.job_dir).unwrap() {
                return end;
            }
            assert!(Instant::now() < deadline, "no end; supervisor.log:\n{}", self.supervisor_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.work_dir.join(format!("slurm-{}.out", self.job_id))).unwrap_or_default()
    }

    fn supervisor_log(&self) -> String {
        std::fs::read_to_string(self.job_dir.join("supervisor.log")).unwrap_or_default()
    }

    /// Every directory the job had, in any hierarchy.
    fn job_dirs(&self) -> Vec<PathBuf> {
        let spec = self.cgroups.job(self.job_id, 0);
        let mut dirs: Vec<PathBuf> = spec.unified.into_iter().collect();
        for controller in [spec.memory, spec.cpuset, spec.pids].into_iter().flatten() {
            match controller {
                drover_noded::cgroup::Controller::V1(dir) | drover_noded::cgroup::Controller::V2(dir) => dirs.push(dir),
            }
        }
        dirs
    }

    fn assert_cgroups_gone(&self) {
        for dir in self.job_dirs() {
            assert!(!dir.exists(), "{} was left behind\n{}", dir.display(), self.supervisor_log());
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if supervisor::supervisor_alive(&self.job_dir) {
            let _ = supervisor::send_command(&self.job_dir, &supervisor::SupervisorCommand::Cancel { kill_wait: 0 });
            std::thread::sleep(Duration::from_secs(1));
        }
        self.cgroups.remove_empty();
    }
}

/// A character-device major no driver of this host registered (`/proc/devices`), for a fake
/// `nvidia-caps`.
fn unused_char_major() -> u32 {
    let devices = std::fs::read_to_string("/proc/devices").unwrap();
    let block_start = devices.find("Block devices:").unwrap_or(devices.len());
    let used: Vec<u32> =
        devices[..block_start].lines().filter_map(|line| line.split_whitespace().next()?.parse().ok()).collect();
    (234..=511).rev().find(|major| !used.contains(major)).expect("a free major")
}

fn mknod(path: &Path, major: u32, minor: u32) {
    let dev = nix::sys::stat::makedev(u64::from(major), u64::from(minor));
    nix::sys::stat::mknod(path, nix::sys::stat::SFlag::S_IFCHR, nix::sys::stat::Mode::from_bits_truncate(0o666), dev)
        .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// A shell loop that tries to open each named device for reading and writing and prints
/// `<name> <result>`, from the batch script itself and from a background process it starts.
fn probe_script(names: &[&str]) -> String {
    let names = names.join(" ");
    format!(
        "#!/bin/sh\nprobe() {{ for d in {names}; do if dd if=dev/$d of=/dev/null count=0 status=none 2>err.$1; then echo \"$1 $d opened\"; else echo \"$1 $d $(cat err.$1)\"; fi; done; }}\nprobe batch\n(probe child) > child.out\ncat child.out\n"
    )
}

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn device_filter_allows_only_the_allocated_gpu_and_its_mig_capabilities() {
    root();
    let fixture = Fixture::new(9101);
    let dev = fixture.work_dir.join("dev");
    std::fs::create_dir(&dev).unwrap();
    let caps_major = unused_char_major();
    let mut gpu_files = Vec::new();
    for minor in 0..4 {
        let path = dev.join(format!("nvidia{minor}"));
        mknod(&path, NVIDIA_MAJOR, minor);
        gpu_files.push(vec![path]);
    }
    // Two MIG instances' GI/CI capability nodes; the job gets the first instance (caps 10, 11).
    for minor in [10, 11, 20, 21] {
        mknod(&dev.join(format!("nvidia-cap{minor}")), caps_major, minor);
    }
    let mut denied = isolation::denied_devices(&gpu_files, &[1]).unwrap();
    assert_eq!(denied, [0, 2, 3].map(|minor| CharDevice { major: NVIDIA_MAJOR, minor }));
    denied.extend([20, 21].map(|minor| CharDevice { major: caps_major, minor }));

    let names =
        ["nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia-cap10", "nvidia-cap11", "nvidia-cap20", "nvidia-cap21"];
    let launch = fixture.launch(&probe_script(&names));
    let limits = drover_noded::cgroup::JobLimits { denied_devices: denied, ..Default::default() };
    let end = fixture.run(&launch, limits, &[]);
    assert_eq!(
        (end.outcome.clone(), end.exit_status),
        (JobOutcome::Exited, WaitStatus::exited(0)),
        "{}",
        fixture.supervisor_log()
    );

    let output = fixture.output();
    for who in ["batch", "child"] {
        for name in names {
            let line = output
                .lines()
                .find(|line| line.starts_with(&format!("{who} {name} ")))
                .unwrap_or_else(|| panic!("no {who} {name} in:\n{output}"));
            let allowed = ["nvidia1", "nvidia-cap10", "nvidia-cap11"].contains(&name);
            let expected = if allowed { "No such device or address" } else { "Operation not permitted" };
            assert!(line.contains(expected), "{who} opening {name}: expected {expected}, got `{line}`\n{output}");
        }
    }
    fixture.assert_cgroups_gone();
    // Outside the job's cgroup the same node reaches the (missing) driver.
    let outside = std::fs::File::open(dev.join("nvidia0")).unwrap_err();
    assert_eq!(outside.raw_os_error(), Some(libc::ENXIO));
}

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn memory_over_the_limit_is_oom_killed_and_reported() {
    root();
    let fixture = Fixture::new(9102);
    assert!(fixture.cgroups.memory.is_some(), "no memory controller on this host");
    // `tail` keeps the whole newline-free stream in memory: far past 64 MB.
    let launch = fixture.launch("#!/bin/sh\necho before\nhead -c 512M /dev/zero | tail\necho after\n");
    let limits = drover_noded::cgroup::JobLimits { memory_bytes: Some(64 << 20), ..Default::default() };
    let end = fixture.run(&launch, limits, &[]);
    assert_eq!(end.outcome, JobOutcome::OutOfMemory, "{}\n{}", fixture.output(), fixture.supervisor_log());
    let output = fixture.output();
    assert!(output.contains("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=9102.batch."), "{output}");
    fixture.assert_cgroups_gone();
}

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn a_fork_bomb_is_contained_by_pids_max() {
    root();
    let fixture = Fixture::new(9103);
    assert!(fixture.cgroups.pids.is_some(), "no pids controller on this host");
    // A subshell wants 200 sleepers; 16 processes are allowed, so its forks start failing.
    let script = "#!/bin/sh\n(for i in $(seq 200); do sleep 600 & done) 2>/dev/null\ntouch ready\nwhile [ ! -e go ]; do sleep 0.05; done\n";
    let launch = fixture.launch(script);
    let limits = drover_noded::cgroup::JobLimits { pids_max: Some(16), ..Default::default() };
    fixture.start(&launch, limits, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fixture.work_dir.join("ready").exists() {
        assert!(Instant::now() < deadline, "the bomb never finished\n{}{}", fixture.output(), fixture.supervisor_log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let pids_dir = match fixture.cgroups.job(fixture.job_id, 0).pids.unwrap() {
        drover_noded::cgroup::Controller::V1(dir) | drover_noded::cgroup::Controller::V2(dir) => dir,
    };
    let current: u32 = std::fs::read_to_string(pids_dir.join("pids.current")).unwrap().trim().parse().unwrap();
    std::fs::write(fixture.work_dir.join("go"), "").unwrap();
    assert!(current <= 16, "{current} processes under pids.max 16");
    assert!(current >= 10, "only {current} processes: the limit, not something else, must stop the bomb");
    // The sleepers left behind are killed with the job.
    let end = fixture.wait_end();
    assert_eq!(end.outcome, JobOutcome::Exited, "{}", fixture.supervisor_log());
    fixture.assert_cgroups_gone();
}

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn signal_option_warns_before_the_time_limit() {
    root();
    let fixture = Fixture::new(9104);
    let mut launch = fixture.launch(
        "#!/bin/sh\ntrap 'echo warned; date +%s.%N > warned' USR1\necho running\nwhile :; do sleep 0.1; done\n",
    );
    launch.time_limit = TimeLimit::Minutes(1);
    // With the time scaled by 0.05 the limit is 3 s and the warning comes 0.5 s (10 s scaled)
    // before it.
    launch.spec.signal = Some("B:USR1@10".into());
    let started = Instant::now();
    let end = fixture.run(&launch, drover_noded::cgroup::JobLimits::default(), &[("DROVER_TIME_SCALE", "0.05")]);
    assert_eq!(end.outcome, JobOutcome::TimedOut, "{}", fixture.supervisor_log());
    let output = fixture.output();
    let warned = output.find("warned").unwrap_or_else(|| panic!("the USR1 handler never ran:\n{output}"));
    let cancelled = output.find("DUE TO TIME LIMIT").unwrap_or_else(|| panic!("no time-limit notice:\n{output}"));
    assert!(warned < cancelled, "{output}");
    assert!(started.elapsed() >= Duration::from_secs(3), "ended before the limit");
    fixture.assert_cgroups_gone();
}
