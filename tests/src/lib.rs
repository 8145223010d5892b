//! The end-to-end test harness: builds the real binaries, starts a real single-host cluster with
//! `drover up` in a scratch directory, runs the Slurm commands through their multicall names (as
//! root or as a real unprivileged user via `setpriv`), and tears everything down on drop.
//!
//! Tests that need root, the unprivileged users `alice` and `bob` (created by `.ci/run`) or other
//! tools CI installs are marked `#[ignore = "…"]`, so a plain `cargo test` lists them as ignored
//! rather than passing them; `.ci/run` runs them with `--include-ignored`. Such a test starts with
//! [`require_users`] or [`require_root`], which fail it where the requirement is missing: a test
//! that ran reports `ok` only after its checks ran.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub mod hosts;
pub mod rust_paths;
pub mod sim;

/// The directory holding `drover`, `drover-ctld` and `drover-noded`, built once per test process.
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // target/<profile>/deps/<test-binary> → target/<profile>
        let exe = std::env::current_exe().expect("test binary path");
        let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>").to_owned();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", "drover-cli", "-p", "drover-ctld", "-p", "drover-noded"]);
        if release {
            build.arg("--release");
        }
        let status = build.status().expect("running cargo build");
        assert!(status.success(), "building the binaries failed");
        profile_dir
    })
}

/// Fails the test unless it runs as root and the unprivileged test users exist (tests that call
/// this are `#[ignore]`d by default; `.ci/run` creates the users and runs them).
pub fn require_users() {
    require_root("this test switches to the users alice and bob");
    let missing: Vec<&str> =
        ["alice", "bob"].into_iter().filter(|u| nix::unistd::User::from_name(u).ok().flatten().is_none()).collect();
    assert!(missing.is_empty(), "this test needs the users alice and bob (.ci/run creates them); missing: {missing:?}");
}

/// Fails the test unless it runs as root; `why` says what needs root.
pub fn require_root(why: &str) {
    assert!(nix::unistd::geteuid().is_root(), "{why}: it needs root (run it through .ci/run, or as root)");
}

/// The test cluster's config: two nodes with two GPUs each, a partition per team and a shared one.
pub const CONFIG: &str = r#"
cluster_name = "testcluster"
default_account = "shared"

[controller]
address = "127.0.0.1:0"
state_dir = "state"
node_timeout = 8
kill_wait = 2
min_job_age = 600

[[nodes]]
names = "n[1-2]"
cpus = 4
real_memory = 8000
gpus = { tesla = 2 }

[[partitions]]
name = "main"
nodes = "n[1-2]"
default = true
max_time = "1-00:00:00"
default_mem_per_cpu = 100

[[partitions]]
name = "vision"
nodes = "n1"
allow_accounts = ["vision"]
default_mem_per_cpu = 100

[[partitions]]
name = "nlp"
nodes = "n2"
allow_accounts = ["nlp"]
default_mem_per_cpu = 100

[[accounts]]
name = "vision"
shares = 60

[[accounts]]
name = "nlp"
shares = 40

[[accounts]]
name = "shared"

[[users]]
name = "alice"
default_account = "vision"

[[users]]
name = "bob"
default_account = "nlp"

[[users]]
name = "root"
default_account = "shared"
accounts = ["vision", "nlp"]
"#;

/// A running single-host cluster in a scratch directory.
pub struct Cluster {
    dir: tempfile::TempDir,
    /// File systems mounted inside the scratch directory, unmounted on drop.
    mounts: Vec<PathBuf>,
}

impl Cluster {
    /// Starts a cluster with [`CONFIG`].
    pub fn start() -> Cluster {
        Cluster::start_with(CONFIG)
    }

    /// Starts a cluster with the given config text.
    pub fn start_with(config: &str) -> Cluster {
        Cluster::start_prepared(config, |_| Vec::new())
    }

    /// Starts a cluster after `prepare` ran on the (not yet created) home directory; `prepare`
    /// returns the mount points it created, which are unmounted when the cluster is dropped.
    pub fn start_prepared(config: &str, prepare: impl FnOnce(&Path) -> Vec<PathBuf>) -> Cluster {
        Cluster::start_full(config, prepare, &[], &[])
    }

    /// Starts a cluster with more `drover up` options (`--replicas 3`).
    pub fn start_with_args(config: &str, up_args: &[&str]) -> Cluster {
        Cluster::start_full(config, |_| Vec::new(), &[], up_args)
    }

    /// Starts a cluster whose daemons get `env` (e.g. the fake NVML library for noded).
    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> Cluster {
        Cluster::start_full(config, |_| Vec::new(), env, &[])
    }

    fn start_full(
        config: &str,
        prepare: impl FnOnce(&Path) -> Vec<PathBuf>,
        env: &[(&str, &str)],
        up_args: &[&str],
    ) -> Cluster {
        let bin = bin_dir();
        let dir = tempfile::Builder::new().prefix("drover-e2e-").tempdir_in("/tmp").expect("scratch dir");
        set_mode(dir.path(), 0o755);
        let source = dir.path().join("source.toml");
        // The home's file gets a free port from `drover up`; `127.0.0.1:0` only has to parse.
        std::fs::write(&source, config.replace("127.0.0.1:0", "127.0.0.1:1")).expect("writing config");
        let mounts = prepare(&dir.path().join("home"));
        let cluster = Cluster { dir, mounts };
        let out = Command::new(bin.join("drover"))
            .args(["up", "--home"])
            .arg(cluster.home())
            .arg("--config")
            .arg(&source)
            .args(up_args)
            .env_remove("DROVER_CONF")
            .env_remove("DROVER_SOCKET")
            .envs(env.iter().copied())
            .output()
            .expect("running drover up");
        assert!(
            out.status.success(),
            "drover up failed:\n{}{}\n{}",
            text(&out.stdout),
            text(&out.stderr),
            cluster.logs()
        );
        cluster
    }

    /// The cluster's home (`DROVER_HOME`).
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The admin's config file the cluster was started from (`drover up --config`); the home's
    /// own `cluster.toml` includes it. Edit it, then `scontrol reconfigure`.
    pub fn config_file(&self) -> PathBuf {
        self.dir.path().join("source.toml")
    }

    /// The scratch directory the cluster's home and its config file are in.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `drover <verb> --home <home>` (up, down, status).
    pub fn drover(&self, verb: &str) -> Output {
        Command::new(bin_dir().join("drover"))
            .arg(verb)
            .arg("--home")
            .arg(self.home())
            .output()
            .expect("running drover")
    }

    /// A working directory owned by `user` (root when `None`), for scripts and output files.
    pub fn workdir(&self, user: Option<&str>) -> PathBuf {
        let name = user.unwrap_or("root");
        let path = self.dir.path().join(format!("work-{name}"));
        if !path.exists() {
            std::fs::create_dir_all(&path).expect("creating workdir");
            if let Some(user) = user {
                let u = nix::unistd::User::from_name(user).expect("lookup").expect("user exists");
                nix::unistd::chown(&path, Some(u.uid), Some(u.gid)).expect("chown workdir");
            }
        }
        path
    }

    /// Runs a Slurm command (`sbatch`, `squeue`, …) as `user` (root when `None`) in `cwd`.
    pub fn run(&self, user: Option<&str>, cwd: &Path, command: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = self.command(user, cwd, command, args);
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting {command}: {e}"));
        if let Some(input) = stdin {
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("writing stdin");
        }
        child.wait_with_output().expect("waiting for command")
    }

    /// The command line [`Cluster::run`] runs, for a test that spawns it itself (to write its
    /// input later, say); stdio is left to the caller.
    pub fn command(&self, user: Option<&str>, cwd: &Path, command: &str, args: &[&str]) -> Command {
        let program = self.home().join("bin").join(command);
        let mut cmd = match user {
            Some(user) => {
                let mut c = Command::new("setpriv");
                c.args([&format!("--reuid={user}"), &format!("--regid={user}"), "--init-groups", "--"]).arg(&program);
                c.env("HOME", format!("/home/{user}")).env("USER", user).env("LOGNAME", user);
                c
            }
            None => Command::new(&program),
        };
        cmd.args(args).current_dir(cwd);
        cmd.env("DROVER_HOME", self.home()).env("DROVER_CONF", self.home().join("cluster.toml"));
        // As `source DIR/env` sets it: replicas (`--replicas 3`) are found from the config.
        if std::fs::read_to_string(self.home().join("env")).is_ok_and(|env| env.contains("unset DROVER_SOCKET")) {
            cmd.env_remove("DROVER_SOCKET");
        } else {
            cmd.env("DROVER_SOCKET", self.home().join("ctld").join("ctld.sock"));
        }
        cmd
    }

    /// Runs a command as root in root's workdir and returns stdout, asserting success.
    pub fn ok(&self, command: &str, args: &[&str]) -> String {
        let out = self.run(None, &self.workdir(None), command, args, None);
        assert!(out.status.success(), "{command} {args:?} failed:\n{}{}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout)
    }

    /// Writes a script into `user`'s workdir and submits it with `sbatch --parsable`; returns the job id.
    pub fn submit(&self, user: Option<&str>, name: &str, script: &str, args: &[&str]) -> u32 {
        let dir = self.workdir(user);
        let path = dir.join(name);
        std::fs::write(&path, script).expect("writing script");
        let mut all = vec!["--parsable"];
        all.extend_from_slice(args);
        let path_str = path.to_string_lossy().into_owned();
        all.push(&path_str);
        let out = self.run(user, &dir, "sbatch", &all, None);
        assert!(out.status.success(), "sbatch failed:\n{}{}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("sbatch --parsable printed {:?}", text(&out.stdout)))
    }

    /// The job's state per `sacct` (`COMPLETED`, `RUNNING`, …) and exit code.
    pub fn sacct_state(&self, job_id: u32) -> Option<(String, String)> {
        let out = self.ok("sacct", &["-X", "-P", "-n", "-o", "State,ExitCode", "-j", &job_id.to_string()]);
        let line = out.lines().next()?;
        let (state, exit) = line.split_once('|')?;
        Some((state.to_owned(), exit.to_owned()))
    }

    /// Waits until `sacct` shows the job in `state` (prefix match, so `CANCELLED` matches
    /// Polls `probe` every 100 ms until it returns `Some`; fails naming `what`, with the daemon
    /// logs, after `timeout`.
    pub fn wait_for<T>(&self, what: &str, timeout: Duration, probe: impl FnMut() -> Option<T>) -> T {
        poll(what, timeout, || self.logs(), probe)
    }

    /// Polls `squeue -h -j <id> -o <format>` for up to 60 s until `done` accepts its output.
    pub fn squeue_until(&self, id: &str, format: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        while Instant::now() < deadline {
            last = self.ok("squeue", &["-h", "-j", id, "-o", format]);
            if done(&last) {
                return last;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("squeue -j {id} never got there; last:\n{last}\n{}", self.logs());
    }

    /// `CANCELLED by 0`); returns the exit code.
    pub fn wait_state(&self, job_id: u32, state: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        while Instant::now() < deadline {
            last = self.sacct_state(job_id);
            if let Some((s, exit)) = &last
                && s.starts_with(state)
            {
                return exit.clone();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("job {job_id} did not reach {state} within {timeout:?}; last seen {last:?}\n{}", self.logs());
    }

    /// The leading replica's id, from `scontrol -d ping`'s primary line (`up --replicas N`).
    pub fn leader(&self) -> u64 {
        let ping = self.ok("scontrol", &["-d", "ping"]);
        let primary = ping.lines().find(|l| l.starts_with("Slurmctld(primary)")).unwrap_or_else(|| panic!("{ping}"));
        let id = primary.split("(replica ").nth(1).and_then(|rest| rest.split(',').next());
        id.and_then(|id| id.parse().ok()).unwrap_or_else(|| panic!("no replica id in {primary}"))
    }

    /// Waits until `scontrol -d ping` shows `count` replicas up, none behind the leader.
    pub fn wait_replicas_in_step(&self, count: usize, timeout: Duration) {
        self.wait_for("every replica up and in step", timeout, || {
            let ping = self.ok("scontrol", &["-d", "ping"]);
            (ping.matches("is UP").count() == count && ping.matches("behind: 0)").count() == count).then_some(())
        });
    }

    /// The pid `up` recorded for a daemon (`ctld`, `noded-n1`).
    pub fn pid(&self, daemon: &str) -> i32 {
        let path = self.home().join("run").join(format!("{daemon}.pid"));
        std::fs::read_to_string(&path).expect("pid file").trim().parse().expect("pid")
    }

    /// Kills a daemon with SIGKILL and waits until it is gone.
    pub fn kill9(&self, daemon: &str) {
        let pid = nix::unistd::Pid::from_raw(self.pid(daemon));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill -9");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.is_empty() || stat.contains(") Z") {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{daemon} did not die");
    }

    /// Stops node `name`'s noded (SIGTERM; its jobs keep running under their supervisors) and
    /// starts it again with `wrapper` in front of its command line, e.g. `nsenter
    /// --net=/run/netns/X` to put the daemon, and every job it starts from then on, in another
    /// network namespace. The pid file is updated so `drover down` stops the new daemon.
    pub fn restart_node_with(&self, name: &str, wrapper: &[&str]) {
        let daemon = format!("noded-{name}");
        let pid = nix::unistd::Pid::from_raw(self.pid(&daemon));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("stopping noded");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")) {
            assert!(Instant::now() < deadline, "{daemon} did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        let conf = self.home().join("cluster.toml");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home().join("log").join(format!("{daemon}.log")))
            .expect("opening the node's log");
        let (program, args) = wrapper.split_first().expect("a wrapper command");
        let mut command = Command::new(program);
        command.args(args).arg(bin_dir().join("drover-noded"));
        command.arg("--config").arg(&conf).args(["--name", name, "--state-dir"]).arg(self.home().join(&daemon));
        command.env("DROVER_CONF", &conf).stdin(Stdio::null());
        command.stdout(log.try_clone().expect("log")).stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn().unwrap_or_else(|e| panic!("starting {daemon} under {wrapper:?}: {e}"));
        std::fs::write(self.home().join("run").join(format!("{daemon}.pid")), format!("{}\n", child.id()))
            .expect("writing the pid file");
        // The daemon outlives this call; a thread reaps it when `drover down` stops it.
        std::thread::spawn(move || child.wait());
    }

    /// ctld's client socket.
    pub fn socket(&self) -> PathBuf {
        self.home().join("ctld").join("ctld.sock")
    }

    /// ctld's node address, from the derived config.
    pub fn node_address(&self) -> String {
        drover_shared::config::Config::load(&self.home().join("cluster.toml"))
            .expect("derived config")
            .controller_address
    }

    /// GET `path` from ctld's HTTP listener (`[metrics] listen`): (status line, body).
    pub fn http_get(&self, path: &str) -> (String, String) {
        use std::io::{Read, Write};
        let addr = std::fs::read_to_string(self.home().join("ctld").join("metrics.addr")).expect("metrics.addr");
        let mut stream = std::net::TcpStream::connect(addr.trim()).expect("connecting to the metrics port");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("reading the answer");
        let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
        (head.lines().next().unwrap_or_default().to_owned(), body.to_owned())
    }

    /// All daemon logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        for entry in std::fs::read_dir(self.home().join("log")).into_iter().flatten().flatten() {
            all.push_str(&format!("==> {} <==\n", entry.path().display()));
            all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
        all
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Cancel whatever still runs so no job outlives the test, then stop the daemons.
        let root = self.workdir(None);
        let _ = self.run(None, &root, "scancel", &["--state=PENDING,RUNNING", "-u", "root,alice,bob"], None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let out = self.run(None, &root, "squeue", &["-h", "-t", "RUNNING"], None);
            if text(&out.stdout).trim().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.drover("down");
        // `drover down` leaves jobs running by design (they survive daemon restarts); a job ctld
        // no longer counts as running (a stale run on a node that never came back) must not
        // outlive the test either.
        kill_processes_mentioning(&self.home());
        for mount in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(mount).status();
        }
    }
}

/// Kills every process whose command line mentions `path` (supervisors and job scripts of this
/// cluster's nodes).
fn kill_processes_mentioning(path: &Path) {
    let needle = path.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if String::from_utf8_lossy(&cmdline).contains(&needle) {
            use nix::sys::signal::{Signal, kill, killpg};
            use nix::unistd::{Pid, getpgid, getpgrp};
            let pid = Pid::from_raw(pid);
            // Its process group too: a job's children do not mention the path.
            if let Ok(group) = getpgid(Some(pid))
                && group != getpgrp()
                && group.as_raw() > 1
            {
                let _ = killpg(group, Signal::SIGKILL);
            }
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Polls `probe` every 100 ms until it returns `Some`; fails naming `what`, with `logs()`, after
/// `timeout`.
pub fn poll<T>(what: &str, timeout: Duration, logs: impl Fn() -> String, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Bytes as text, lossily.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs the Python 3 `script` with `input` on its standard input; its standard output. Fails the
/// test when the script fails (with its error and the input).
pub fn python(input: &str, script: &str) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child.stdin.take().expect("piped").write_all(input.as_bytes()).expect("python3's input");
    let out = child.wait_with_output().expect("python3");
    assert!(out.status.success(), "python3 failed: {}\n{input}", text(&out.stderr));
    text(&out.stdout)
}

/// The job cgroups named in `recorded` (a process's `/proc/self/cgroup`, taken while it ran in
/// the cgroup `step`) that still exist, in any hierarchy.
pub fn cgroups_left(recorded: &str, step: &str) -> Vec<std::path::PathBuf> {
    let job_paths: Vec<&str> = recorded
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .filter_map(|path| path.strip_suffix(&format!("/{step}")))
        .collect();
    assert!(!job_paths.is_empty(), "the process ran in no {step} cgroup:\n{recorded}");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let mut left = Vec::new();
    for mount in
        mounts.lines().filter(|line| line.contains(" cgroup")).filter_map(|line| line.split_whitespace().nth(1))
    {
        for job_path in &job_paths {
            let dir = std::path::Path::new(mount).join(job_path.trim_start_matches('/'));
            if dir.exists() {
                left.push(dir);
            }
        }
    }
    left
}

/// Whether the ctld behind the client socket at `socket` leads: it accepts a client's hello. A
/// following replica holds its socket too but refuses every hello ("not the leader").
pub fn leads(socket: &Path) -> bool {
    use drover_shared::proto::frame::{MAX_HANDSHAKE_FRAME, read_message, write_message};
    use drover_shared::proto::{Hello, HelloReply, MAGIC, PROTOCOL_VERSION, Role};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let hello = Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role: Role::Client, nonce: Vec::new() };
    write_message(&mut stream, &hello).is_ok()
        && matches!(read_message::<_, HelloReply>(&mut stream, MAX_HANDSHAKE_FRAME), Ok(HelloReply::Accept { .. }))
}

/// Four fake GPU device nodes (`c 195:0-3`) in a scratch directory, and [`CONFIG`] with its
/// nodes declaring them. No driver is loaded: an allowed open fails with ENXIO, a denied one
/// with EPERM. Needs root (mknod).
pub fn fake_gpus() -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix("drover-fake-dev-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for minor in 0..4 {
        let path = dir.path().join(format!("nvidia{minor}"));
        let dev = nix::sys::stat::makedev(195, minor);
        nix::sys::stat::mknod(
            &path,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            dev,
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let gpus = format!("gpus = {{ tesla = 4 }}\ngpu_files = {{ tesla = \"{}/nvidia[0-3]\" }}", dir.path().display());
    let config = CONFIG.replace("gpus = { tesla = 2 }", &gpus);
    assert_ne!(config, CONFIG, "the harness config changed its GPU line");
    (dir, config)
}
