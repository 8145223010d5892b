//! End-to-end tests of the per-job supervisor: each test writes a launch request into a scratch
//! job directory, starts the real `drover-noded supervise` through `supervisor::spawn`, and checks
//! what the job did and the `end` it left. They run as root (as CI does) and use only root and
//! `nobody` (uid and gid 65534).

use drover_noded::supervisor;

use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobSpec, WaitStatus};
use drover_shared::proto::frame;
use drover_shared::proto::node::{JobEnd, JobOutcome, LaunchRequest};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use supervisor::{SupervisorCommand, SupervisorEvent};

const NOBODY: u32 = 65534;
const DROVER_NODED: &str = env!("CARGO_BIN_EXE_drover-noded");

/// A scratch node: `root/jobs/<job_id>` as noded would make it, a work directory owned by
/// `nobody`, and a noded socket that collects the supervisor's events.
struct Fixture {
    root: tempfile::TempDir,
    job_dir: PathBuf,
    work_dir: PathBuf,
    noded_socket: PathBuf,
    events: mpsc::Receiver<SupervisorEvent>,
}

impl Fixture {
    fn new(job_id: u32) -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let mode =
            |path: &Path, mode: u32| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        mode(root.path(), 0o711);
        let jobs = root.path().join("jobs");
        std::fs::create_dir(&jobs).unwrap();
        mode(&jobs, 0o711);
        let job_dir = jobs.join(job_id.to_string());
        std::fs::create_dir(&job_dir).unwrap();
        mode(&job_dir, 0o700);
        let work_dir = root.path().join("work");
        std::fs::create_dir(&work_dir).unwrap();
        std::os::unix::fs::chown(&work_dir, Some(NOBODY), Some(NOBODY)).unwrap();
        mode(&work_dir, 0o755);

        let noded_socket = root.path().join("noded.sock");
        let listener = UnixListener::bind(&noded_socket).unwrap();
        let (events_tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                if let Ok(event) = frame::read_message(&mut stream, 4096) {
                    let _ = events_tx.send(event);
                }
            }
        });
        Fixture { root, job_dir, work_dir, noded_socket, events }
    }

    /// A request to run `script` as `nobody` in the work directory, with no time limit.
    fn launch(&self, job_id: u32, script: &str) -> LaunchRequest {
        let work_dir = self.work_dir.to_str().unwrap().to_owned();
        LaunchRequest {
            job_id,
            spec: JobSpec {
                name: "hello".into(),
                work_dir: work_dir.clone(),
                submit_dir: work_dir,
                submit_host: "login1".into(),
                environment: vec![
                    ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
                    ("HOME".into(), "/nonexistent".into()),
                    ("MY_VAR".into(), "hello-env".into()),
                ],
                script: script.as_bytes().to_vec(),
                script_args: vec!["a".into(), "b".into()],
                umask: 0o022,
                ..JobSpec::default()
            },
            user: "nobody".into(),
            uid: NOBODY,
            gid: NOBODY,
            cluster_name: "test".into(),
            partition: "debug".into(),
            account: "research".into(),
            qos: String::new(),
            time_limit: TimeLimit::Unlimited,
            nodes: vec!["node01".into()],
            cpus_per_node: vec![2],
            tasks_per_node: vec![1],
            cpus_on_node: 2,
            mem_per_node_mb: 0,
            gpus: Vec::new(),
            kill_wait: 5,
            ctld_socket: "/nonexistent/ctld.sock".into(),
            array: None,
            restart_count: 0,
        }
    }

    /// Writes the request and spawns its supervisor from this process.
    fn start(&self, launch: &LaunchRequest) -> u32 {
        supervisor::write_launch(&self.job_dir, launch).unwrap();
        supervisor::spawn(Path::new(DROVER_NODED), &self.job_dir, &self.noded_socket).unwrap()
    }

    /// Writes the request and spawns its supervisor from a helper process (this test binary
    /// running [`spawn_helper`]) with `env` added to its environment. With `hang`, the helper
    /// stays alive until the caller kills it.
    fn start_from_helper(
        &self,
        launch: &LaunchRequest,
        env: &[(&str, &str)],
        hang: bool,
    ) -> (std::process::Child, u32) {
        supervisor::write_launch(&self.job_dir, launch).unwrap();
        let pid_file = self.root.path().join("helper.pid");
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["spawn_helper", "--exact", "--nocapture", "--test-threads=1"])
            .env("DROVER_TEST_JOB_DIR", &self.job_dir)
            .env("DROVER_TEST_NODED_SOCKET", &self.noded_socket)
            .env("DROVER_TEST_PID_FILE", &pid_file)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .process_group(0);
        if hang {
            command.env("DROVER_TEST_HANG", "1");
        }
        let helper = command.spawn().unwrap();
        let text = wait_for(Duration::from_secs(20), || {
            std::fs::read_to_string(&pid_file).ok().filter(|text| text.ends_with('\n'))
        });
        (helper, text.trim().parse().unwrap())
    }

    fn wait_end(&self) -> JobEnd {
        wait_for(Duration::from_secs(30), || supervisor::read_end(&self.job_dir).unwrap())
    }

    fn work_file(&self, name: &str) -> PathBuf {
        self.work_dir.join(name)
    }

    fn read_work_file(&self, name: &str) -> String {
        std::fs::read_to_string(self.work_file(name)).unwrap()
    }

    /// Waits until `name` in the work directory holds `n_lines` lines, and returns them.
    fn wait_lines(&self, name: &str, n_lines: usize) -> Vec<String> {
        wait_for(Duration::from_secs(20), || {
            let text = std::fs::read_to_string(self.work_file(name)).ok()?;
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            (lines.len() == n_lines && text.ends_with('\n')).then_some(lines)
        })
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.job_dir.join("supervisor.log")).unwrap_or_default();
            eprintln!("supervisor.log of the failed test:\n{log}");
        }
        // A failed test must not leave its job running.
        if supervisor::supervisor_alive(&self.job_dir) {
            let _ = supervisor::send_command(&self.job_dir, &SupervisorCommand::Cancel { kill_wait: 0 });
            let _ = wait_until(Duration::from_secs(10), || !supervisor::supervisor_alive(&self.job_dir));
        }
    }
}

fn wait_for<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    condition()
}

/// Whether `pid` is still a process running `sleep 1000` (and not a reused pid).
fn sleeper_alive(pid: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| cmdline == b"sleep\x001000\x00")
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

/// Not a test: the helper process of [`Fixture::start_from_helper`], which spawns a supervisor
/// from a process of its own. Does nothing when run by the harness.
#[test]
fn spawn_helper() {
    let (Some(job_dir), Some(noded_socket), Some(pid_file)) = (
        std::env::var_os("DROVER_TEST_JOB_DIR"),
        std::env::var_os("DROVER_TEST_NODED_SOCKET"),
        std::env::var_os("DROVER_TEST_PID_FILE"),
    ) else {
        return;
    };
    let pid = supervisor::spawn(Path::new(DROVER_NODED), Path::new(&job_dir), Path::new(&noded_socket)).unwrap();
    std::fs::write(pid_file, format!("{pid}\n")).unwrap();
    if std::env::var_os("DROVER_TEST_HANG").is_some() {
        loop {
            std::thread::sleep(Duration::from_secs(1000));
        }
    }
}

#[test]
fn runs_as_the_user_with_its_environment() {
    let fixture = Fixture::new(101);
    let mut launch = fixture.launch(
        101,
        r#"#!/bin/sh
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
echo "pwd=$(pwd)"
echo "job=$SLURM_JOB_ID name=$SLURM_JOB_NAME nodes=$SLURM_JOB_NODELIST user=$SLURM_JOB_USER account=$SLURM_JOB_ACCOUNT"
echo "mine=$MY_VAR home=$HOME env=$ENVIRONMENT socket=$DROVER_SOCKET leaked=${CARGO_MANIFEST_DIR-none}"
echo "args=$*"
echo "umask=$(umask)"
echo "oom_score_adj=$(cat /proc/self/oom_score_adj)"
grep SigIgn /proc/self/status > sigign
echo "to stderr" >&2
"#,
    );
    launch.spec.stdout = Some("%x-%4j.out".into());
    let supervisor_pid = fixture.start(&launch);
    assert!(supervisor_pid > 1);

    let job_end = fixture.wait_end();
    assert_eq!(job_end.outcome, JobOutcome::Exited);
    assert_eq!(job_end.exit_status, WaitStatus::exited(0));
    assert_eq!(job_end.job_id, 101);
    let start_time = job_end.start_time.expect("the job started");
    assert!(start_time <= job_end.end_time);
    assert_eq!(supervisor::read_started(&fixture.job_dir).unwrap(), Some(start_time));

    let output_path = fixture.work_file("hello-0101.out");
    assert_eq!(
        std::fs::read_to_string(&output_path).unwrap(),
        format!(
            "uid=65534 gid=65534 groups=65534
pwd={}
job=101 name=hello nodes=node01 user=nobody account=research
mine=hello-env home=/nonexistent env=BATCH socket=/nonexistent/ctld.sock leaked=none
args=a b
umask=0022
oom_score_adj=0
to stderr
",
            fixture.work_dir.display()
        )
    );
    // No ignored signal reaches the job, except those glibc reserves (32, 33) and keeps to itself.
    let sigign = fixture.read_work_file("sigign");
    let ignored = u64::from_str_radix(sigign.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    assert_eq!(ignored & !(0b11 << 31), 0, "{sigign}");
    let output = std::fs::metadata(&output_path).unwrap();
    assert_eq!((output.uid(), output.gid(), output.mode() & 0o777), (NOBODY, NOBODY, 0o644));
    let script = std::fs::metadata(fixture.job_dir.join("script")).unwrap();
    assert_eq!((script.uid(), script.mode() & 0o777), (NOBODY, 0o500));

    // Each event travels on its own connection, so they may arrive in either order.
    let mut events = [
        fixture.events.recv_timeout(Duration::from_secs(5)).unwrap(),
        fixture.events.recv_timeout(Duration::from_secs(5)).unwrap(),
    ];
    events.sort_by_key(|event| matches!(event, SupervisorEvent::Ended { .. }));
    assert_eq!(events, [SupervisorEvent::Started { job_id: 101, start_time }, SupervisorEvent::Ended { job_id: 101 }]);
    assert!(wait_until(Duration::from_secs(10), || !supervisor::supervisor_alive(&fixture.job_dir)));
    assert!(!fixture.job_dir.join("control.sock").exists());
}

#[test]
fn exit_code_is_reported_and_leftovers_are_killed() {
    let fixture = Fixture::new(102);
    let mut launch = fixture.launch(102, "#!/bin/sh\nsetsid sleep 1000 &\necho $! > leftover.pid\nexit 3\n");
    // The supervisor already runs as root: no privilege change at all.
    (launch.uid, launch.gid, launch.user) = (0, 0, "root".into());
    fixture.start(&launch);

    let job_end = fixture.wait_end();
    assert_eq!((job_end.outcome, job_end.exit_status), (JobOutcome::Exited, WaitStatus::exited(3)));
    assert_eq!(job_end.exit_status.to_string(), "3:0");
    let leftover = fixture.read_work_file("leftover.pid");
    assert!(!sleeper_alive(leftover.trim()), "a process that left the job's session outlived the job");
}

#[test]
fn cancel_kills_every_process_of_the_job() {
    let fixture = Fixture::new(103);
    let launch = fixture
        .launch(103, "#!/bin/sh\nsleep 1000 &\necho $! >> pids\nsh -c 'echo $$ >> pids; exec sleep 1000'\nwait\n");
    fixture.start(&launch);
    let pids = fixture.wait_lines("pids", 2);
    assert!(wait_until(Duration::from_secs(10), || pids.iter().all(|pid| sleeper_alive(pid))), "{pids:?}");

    supervisor::send_command(&fixture.job_dir, &SupervisorCommand::Cancel { kill_wait: 5 }).unwrap();
    let job_end = fixture.wait_end();
    assert_eq!((job_end.outcome, job_end.exit_status), (JobOutcome::Cancelled, WaitStatus::signaled(15)));
    for pid in &pids {
        assert!(!sleeper_alive(pid), "sleep {pid} survived the cancel");
    }
    let output = fixture.read_work_file("slurm-103.out");
    assert!(output.starts_with("slurmstepd: error: *** JOB 103 ON node01 CANCELLED AT "), "{output}");
    assert!(!output.contains("TIME LIMIT"), "{output}");
    assert!(supervisor::send_command(&fixture.job_dir, &SupervisorCommand::Cancel { kill_wait: 5 }).is_err());
}

#[test]
fn time_limit_ends_the_job_with_sigkill_after_kill_wait() {
    let fixture = Fixture::new(104);
    let mut launch = fixture.launch(104, "#!/bin/sh\ntrap '' TERM\necho running\nsleep 1000\n");
    launch.time_limit = TimeLimit::Minutes(1);
    launch.kill_wait = 1;
    let started = Instant::now();
    // One minute becomes 0.6 s; the job ignores SIGTERM, so SIGKILL follows a second later.
    let (mut helper, _) = fixture.start_from_helper(&launch, &[("DROVER_TIME_SCALE", "0.01")], false);
    helper.wait().unwrap();

    let job_end = fixture.wait_end();
    let elapsed = started.elapsed();
    assert_eq!((job_end.outcome, job_end.exit_status), (JobOutcome::TimedOut, WaitStatus::signaled(9)));
    assert!(elapsed >= Duration::from_millis(1500), "ended after {elapsed:?}, before the limit and kill_wait");
    let output = fixture.read_work_file("slurm-104.out");
    assert!(output.starts_with("running\nslurmstepd: error: *** JOB 104 ON node01 CANCELLED AT "), "{output}");
    assert!(output.ends_with(" DUE TO TIME LIMIT ***\n"), "{output}");
}

#[test]
fn survives_the_death_of_its_spawner() {
    let fixture = Fixture::new(105);
    let launch = fixture.launch(105, "#!/bin/sh\nwhile [ ! -e go ]; do sleep 0.05; done\necho finished\n");
    let (mut helper, supervisor_pid) = fixture.start_from_helper(&launch, &[], true);
    let recorded = std::fs::read_to_string(fixture.job_dir.join("supervisor.pid")).unwrap();
    assert_eq!(recorded.split_whitespace().next(), Some(supervisor_pid.to_string().as_str()));

    // kill -9 of the spawner's whole process group, as of a crashed noded.
    let helper_pgid = nix::unistd::Pid::from_raw(i32::try_from(helper.id()).unwrap());
    nix::sys::signal::killpg(helper_pgid, nix::sys::signal::Signal::SIGKILL).unwrap();
    helper.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(supervisor::supervisor_alive(&fixture.job_dir));
    assert_eq!(supervisor::read_end(&fixture.job_dir).unwrap(), None);

    std::fs::write(fixture.work_file("go"), "").unwrap();
    let job_end = fixture.wait_end();
    assert_eq!((job_end.outcome, job_end.exit_status), (JobOutcome::Exited, WaitStatus::exited(0)));
    assert_eq!(fixture.read_work_file("slurm-105.out"), "finished\n");
}

#[test]
fn missing_work_dir_is_a_launch_failure() {
    let fixture = Fixture::new(106);
    let mut launch = fixture.launch(106, "#!/bin/sh\necho never\n");
    launch.spec.work_dir = "/nonexistent/drover-test".into();
    fixture.start(&launch);

    let job_end = fixture.wait_end();
    let JobOutcome::LaunchFailed { message } = &job_end.outcome else { panic!("{job_end:?}") };
    assert_eq!(
        message,
        "could not change to the working directory /nonexistent/drover-test: No such file or directory"
    );
    assert_eq!(job_end.start_time, None);
    assert_eq!(supervisor::read_started(&fixture.job_dir).unwrap(), None);
}

#[test]
fn unknown_user_is_a_launch_failure() {
    let fixture = Fixture::new(109);
    let mut launch = fixture.launch(109, "#!/bin/sh\necho never\n");
    (launch.uid, launch.gid, launch.user) = (3_999_999, 3_999_999, "ghost".into());
    fixture.start(&launch);

    let job_end = fixture.wait_end();
    assert_eq!(
        job_end.outcome,
        JobOutcome::LaunchFailed { message: "user id 3999999 is not known on this node".into() }
    );
    assert_eq!((job_end.exit_status, job_end.start_time), (WaitStatus::exited(1), None));
    assert!(!fixture.job_dir.join("script").exists());
}

#[test]
fn a_planted_symlink_cannot_redirect_output_as_root() {
    let fixture = Fixture::new(107);
    let secret = fixture.root.path().join("secret");
    std::fs::write(&secret, "root only\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&secret, fixture.work_file("slurm-107.out")).unwrap();
    fixture.start(&fixture.launch(107, "#!/bin/sh\necho overwritten\n"));

    let job_end = fixture.wait_end();
    let JobOutcome::LaunchFailed { message } = &job_end.outcome else { panic!("{job_end:?}") };
    assert!(message.contains("Permission denied"), "{message}");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root only\n");
}

#[test]
fn signals_reach_the_batch_shell() {
    let fixture = Fixture::new(108);
    let launch = fixture.launch(
        108,
        "#!/bin/sh\ntrap 'echo got USR1; exit 7' USR1\necho ready > ready\nwhile :; do sleep 0.05; done\n",
    );
    fixture.start(&launch);
    fixture.wait_lines("ready", 1);

    let invalid =
        supervisor::send_command(&fixture.job_dir, &SupervisorCommand::Signal { signal: 999, batch_only: false });
    assert!(matches!(invalid, Err(supervisor::SupervisorError::Rejected { .. })), "{invalid:?}");
    let usr1 = nix::sys::signal::Signal::SIGUSR1 as i32;
    supervisor::send_command(&fixture.job_dir, &SupervisorCommand::Signal { signal: usr1, batch_only: true }).unwrap();
    let job_end = fixture.wait_end();
    assert_eq!((job_end.outcome, job_end.exit_status), (JobOutcome::Exited, WaitStatus::exited(7)));
    assert_eq!(fixture.read_work_file("slurm-108.out"), "got USR1\n");
}
