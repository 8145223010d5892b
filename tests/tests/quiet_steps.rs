//! Work that stays silent for longer than a minute survives (issue 36): srun once gave up on a
//! step whose nodes had connected but whose tasks had not exited within 60 s, and cancelled it.
//! On one cluster with `client_idle_timeout` at its default (60 s), as the plain users alice and
//! bob, at once: `srun sleep 150` outside an allocation, a `salloc` whose shell reads nothing for
//! 150 s and then runs `srun hostname`, `srun --pty` idle for 150 s, `sbatch --wait` of a 150 s
//! job, and a batch job whose step sleeps 150 s. In the middle of it ctld is killed (`kill -9`)
//! and started again: every one of them must carry on and end as its work does, and `sacct`
//! must show each step's real end.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::io::Write;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

/// How long each piece of work stays silent: well past the 60 s both of srun's old bound and of
/// ctld's idle limit on client connections.
const QUIET: Duration = Duration::from_secs(150);

/// When ctld is killed and restarted, counted from the start of the work.
const RESTART_AT: Duration = Duration::from_secs(75);

/// Starts `command` as `user` with its input on a pipe the caller writes to later.
fn spawn(cluster: &Cluster, user: &str, command: &str, args: &[&str]) -> Child {
    let mut cmd = cluster.command(Some(user), &cluster.workdir(Some(user)), command, args);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().unwrap_or_else(|e| panic!("starting {command}: {e}"))
}

/// Writes `input` to the child after `QUIET` of silence, closes its input and waits for it.
fn type_after_quiet(mut child: Child, started: Instant, input: &str) -> Output {
    std::thread::sleep(QUIET.saturating_sub(started.elapsed()));
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("writing the delayed input");
    drop(stdin);
    child.wait_with_output().expect("waiting")
}

fn describe(what: &str, out: &Output) -> String {
    format!("{what}: {:?}\nstdout:\n{}\nstderr:\n{}", out.status, text(&out.stdout), text(&out.stderr))
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn silent_work_outlives_idle_limits_and_a_controller_restart() {
    require_users();
    assert!(!CONFIG.contains("client_idle_timeout"), "this test runs with the default idle limit");
    let cluster = Cluster::start();
    let quiet = QUIET.as_secs().to_string();
    let started = Instant::now();

    // A batch job whose step is silent: its script records srun's exit code.
    let batch = cluster.submit(
        Some("alice"),
        "quiet-step.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -t 5\n#SBATCH -o quiet-step.out\n\"$DROVER_HOME/bin/srun\" sleep {quiet}\necho rc=$?\n"
        ),
        &[],
    );
    let srun = spawn(&cluster, "alice", "srun", &["-t", "5", "sleep", &quiet]);
    let salloc = spawn(&cluster, "bob", "salloc", &["-N1", "-t", "5", "/bin/sh"]);
    let pty = spawn(&cluster, "alice", "srun", &["--pty", "-t", "5", "/bin/sh"]);
    let wait = spawn(&cluster, "bob", "sbatch", &["--wait", "-t", "5", "--wrap", &format!("sleep {quiet}; exit 3")]);

    let srun = std::thread::spawn(move || srun.wait_with_output().expect("waiting for srun"));
    let salloc = std::thread::spawn(move || {
        type_after_quiet(salloc, started, "\"$DROVER_HOME/bin/srun\" hostname; echo srun-rc=$?\nexit\n")
    });
    let pty = std::thread::spawn(move || type_after_quiet(pty, started, "echo pty-$((6*7))\nexit 3\n"));
    let wait = std::thread::spawn(move || wait.wait_with_output().expect("waiting for sbatch --wait"));

    std::thread::sleep(RESTART_AT.saturating_sub(started.elapsed()));
    let running = cluster.ok("squeue", &["-h", "-t", "RUNNING", "-o", "%i"]);
    assert_eq!(running.lines().count(), 5, "all five pieces of work run before the restart:\n{running}");
    cluster.kill9("ctld");
    std::thread::sleep(Duration::from_secs(2));
    let out = cluster.drover("up");
    assert!(out.status.success(), "restarting ctld failed: {}{}", text(&out.stdout), text(&out.stderr));

    let srun = srun.join().expect("srun thread");
    assert_eq!(srun.status.code(), Some(0), "{}\n{}", describe("srun sleep", &srun), cluster.logs());
    assert!(started.elapsed() >= QUIET, "srun returned before its task could have ended");

    let salloc = salloc.join().expect("salloc thread");
    let out = text(&salloc.stdout);
    assert_eq!(salloc.status.code(), Some(0), "{}\n{}", describe("salloc", &salloc), cluster.logs());
    // The nodes are this host's: `hostname` prints its name.
    let host = nix::unistd::gethostname().expect("hostname").to_string_lossy().into_owned();
    assert!(out.contains(&format!("{host}\nsrun-rc=0\n")), "{}", describe("salloc", &salloc));

    let pty = pty.join().expect("pty thread");
    assert_eq!(pty.status.code(), Some(3), "{}\n{}", describe("srun --pty", &pty), cluster.logs());
    assert!(text(&pty.stdout).contains("pty-42"), "{}", describe("srun --pty", &pty));

    let wait = wait.join().expect("sbatch --wait thread");
    assert_eq!(wait.status.code(), Some(3), "{}\n{}", describe("sbatch --wait", &wait), cluster.logs());

    assert_eq!(cluster.wait_state(batch, "COMPLETED", Duration::from_secs(60)), "0:0");
    let batch_out = std::fs::read_to_string(cluster.workdir(Some("alice")).join("quiet-step.out")).unwrap_or_default();
    assert!(batch_out.contains("rc=0"), "the batch job's step: {batch_out:?}\n{}", cluster.logs());

    // Every step ended as its tasks did, after the restart, as accounting shows: none was
    // cancelled.
    let steps = cluster.ok("sacct", &["-a", "-P", "-n", "-o", "JobID,State,ExitCode"]);
    let numbered: Vec<&str> =
        steps.lines().filter(|l| l.split('|').next().is_some_and(|id| id.contains(".0"))).collect();
    assert!(numbered.len() >= 4, "the steps in sacct:\n{steps}");
    for line in &numbered {
        let ended = line.split_once('|').map_or("", |(_, rest)| rest);
        assert!(
            ended == "COMPLETED|0:0" || ended == "FAILED|3:0",
            "a step did not end as its tasks did: {line}\n{steps}"
        );
    }
    assert!(!steps.contains("CANCELLED"), "nothing was cancelled:\n{steps}");
}
