//! One unprivileged user attacking ctld's client socket with connections: a thousand connections
//! that say hello and then nothing, and connections that announce a large frame and send all of it
//! but its last byte. The attacker is alice, through a helper process running with her uid
//! (`drover-hostile-client` under `setpriv`), so ctld sees her uid through `SO_PEERCRED`. During
//! each attack ctld's resident memory must stay under 500 MB and bob's and root's `squeue` must
//! answer within 1 s; alice's connections beyond her share are refused with a message a person can
//! read, and silent connections are closed after `client_idle_timeout`. Alice's connections all
//! busy with queries must not slow the others' down either.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use drover_shared::proto::frame::{MAX_FRAME, MAX_REQUEST_FRAME};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// ctld's resident memory must stay below this during an attack.
const RSS_LIMIT_KIB: u64 = 500 * 1000;
/// Another user's `squeue` must answer within this during an attack.
const SQUEUE_LIMIT: Duration = Duration::from_secs(1);

/// The helper process attacking as `user`, holding its connections until dropped.
struct Attack {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Its `ready` line's fields.
    accepted: usize,
    refused: usize,
    sent: usize,
    complete: usize,
    refusal: String,
}

impl Attack {
    /// Opens `count` connections to the cluster's socket as `user`; with `mode` a number above 0,
    /// each accepted one announces a frame of that many bytes and sends all but the last; with
    /// `busy`, each sends queries back to back.
    fn start(cluster: &Cluster, user: &str, count: usize, mode: impl std::fmt::Display) -> Attack {
        let mut child = Command::new("setpriv")
            .args([&format!("--reuid={user}"), &format!("--regid={user}"), "--init-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_drover-hostile-client"))
            .arg(cluster.socket())
            .args([count.to_string(), mode.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting drover-hostile-client");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("reading the helper's ready line");
        let (fields, refusal) =
            line.trim_end().split_once(" refusal=").unwrap_or_else(|| panic!("helper said {line:?}"));
        let field = |name: &str| -> usize {
            let prefix = format!("{name}=");
            let value = fields.split_whitespace().find_map(|f| f.strip_prefix(&prefix));
            value.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {name} in {line:?}"))
        };
        Attack {
            accepted: field("accepted"),
            refused: field("refused"),
            sent: field("sent"),
            complete: field("complete"),
            refusal: refusal.to_owned(),
            child,
            stdin,
            stdout,
        }
    }

    /// How many of the accepted connections ctld has closed by now.
    fn closed(&mut self) -> usize {
        self.ask("closed")
    }

    /// How many answers the busy connections got so far.
    fn served(&mut self) -> usize {
        self.ask("served")
    }

    /// Sends `what` to the helper and reads the number of its `what=N` answer.
    fn ask(&mut self, what: &str) -> usize {
        writeln!(self.stdin, "{what}").expect("asking the helper");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("reading the helper's answer");
        let value = line.trim().strip_prefix(&format!("{what}=")).and_then(|rest| rest.split_whitespace().next());
        value.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("helper said {line:?}"))
    }
}

impl Drop for Attack {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// ctld's resident memory in KiB, from `/proc/<pid>/status`.
fn ctld_rss_kib(cluster: &Cluster) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", cluster.pid("ctld"))).expect("ctld's status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("a VmRSS line");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("VmRSS in kB")
}

/// Runs `squeue -h` as `user` (root when `None`), asserting that it succeeds; how long it took.
fn timed_squeue(cluster: &Cluster, user: Option<&str>) -> Duration {
    let started = Instant::now();
    let out = cluster.run(user, &cluster.workdir(user), "squeue", &["-h"], None);
    let took = started.elapsed();
    assert!(out.status.success(), "squeue as {user:?} failed: {}{}", text(&out.stderr), cluster.logs());
    took
}

/// Asserts that bob's and root's `squeue` answer within [`SQUEUE_LIMIT`] and ctld's memory is
/// under [`RSS_LIMIT_KIB`]; returns the slowest `squeue` and the memory.
fn assert_others_served(cluster: &Cluster, what: &str) -> (Duration, u64) {
    let bob = timed_squeue(cluster, Some("bob"));
    let root = timed_squeue(cluster, None);
    let rss = ctld_rss_kib(cluster);
    eprintln!("{what}: bob's squeue {bob:?}, root's {root:?}, ctld VmRSS {rss} kB");
    assert!(bob < SQUEUE_LIMIT, "{what}: bob's squeue took {bob:?}");
    assert!(root < SQUEUE_LIMIT, "{what}: root's squeue took {root:?}");
    assert!(rss < RSS_LIMIT_KIB, "{what}: ctld's VmRSS is {rss} kB");
    (bob.max(root), rss)
}

/// Asserts that alice's `squeue` is refused with the per-user connection message, in words.
fn assert_alice_refused(cluster: &Cluster) {
    let out = cluster.run(Some("alice"), &cluster.workdir(Some("alice")), "squeue", &["-h"], None);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "alice's squeue succeeded beyond her connection limit");
    assert!(stderr.contains("controller refused the connection: too many connections"), "{stderr}");
    assert!(!stderr.contains("os error") && !stderr.contains("Error {") && !stderr.contains("Refusal"), "{stderr}");
}

/// A cluster whose `[controller]` section has `extra` added.
fn cluster_with(extra: &str) -> Cluster {
    Cluster::start_with(&CONFIG.replace("min_job_age = 600\n", &format!("min_job_age = 600\n{extra}\n")))
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_thousand_idle_connections_of_one_user_lock_out_nobody() {
    require_users();
    let cluster = Cluster::start();
    let before = ctld_rss_kib(&cluster);
    // 1,050 connections that finish the hello and then say nothing: more than ctld served in all.
    let attack = Attack::start(&cluster, "alice", 1050, 0);
    assert_eq!(attack.accepted, 64, "alice holds the default per-user share, no more");
    assert_eq!(attack.refused, 1050 - 64, "every other connection is refused at once");
    assert!(attack.refusal.contains("too many connections to the controller from this user"), "{}", attack.refusal);
    let (slowest, rss) = assert_others_served(&cluster, "1,050 idle connections of alice");
    assert_alice_refused(&cluster);
    // Submitting and waiting for the commit works for others too.
    let job = cluster.submit(Some("bob"), "during.sh", "#!/bin/sh\ntrue\n", &["-H"]);
    assert!(cluster.ok("squeue", &["-h", "-o", "%i %u"]).contains(&format!("{job} bob")));
    eprintln!("idle attack: ctld VmRSS before {before} kB, during {rss} kB; slowest squeue {slowest:?}");
    // Her connections closed, alice is served again.
    drop(attack);
    cluster.wait_for("alice to be served again", Duration::from_secs(10), || {
        let out = cluster.run(Some("alice"), &cluster.workdir(Some("alice")), "squeue", &["-h"], None);
        out.status.success().then_some(())
    });
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn idle_connections_are_closed_after_the_idle_timeout() {
    require_users();
    let cluster = cluster_with("max_connections_per_user = 16\nclient_idle_timeout = 4");
    // Half of alice's share says hello and nothing; the other half also sends most of a frame.
    let opened = Instant::now();
    let mut idle = Attack::start(&cluster, "alice", 8, 0);
    let mut half = Attack::start(&cluster, "alice", 20, 1 << 20);
    assert_eq!((idle.accepted, half.accepted, half.refused), (8, 8, 12), "the per-user limit from the config");
    assert!(half.sent >= 8 * ((1 << 20) - 1), "each sent all but a byte of its frame: {} bytes", half.sent);
    assert_eq!(half.complete, 8);
    assert_eq!((idle.closed(), half.closed()), (0, 0), "nothing is closed before the timeout");
    assert_alice_refused(&cluster);
    assert_others_served(&cluster, "alice at her limit");
    // The timeout counts from the hello, for a frame still arriving too.
    cluster.wait_for("alice's silent connections to be closed", Duration::from_secs(15), || {
        (idle.closed() == 8 && half.closed() == 8).then_some(())
    });
    let closed_after = opened.elapsed();
    eprintln!("alice's 16 connections were closed {closed_after:?} after they opened (timeout 4 s)");
    assert!(closed_after >= Duration::from_secs(4), "closed before the idle timeout: {closed_after:?}");
    // With her connections closed by ctld, alice is served again without closing anything herself.
    let out = cluster.run(Some("alice"), &cluster.workdir(Some("alice")), "squeue", &["-h"], None);
    assert!(out.status.success(), "alice after the timeout: {}", text(&out.stderr));
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn half_sent_frames_hold_bounded_memory() {
    require_users();
    let cluster = Cluster::start();
    let before = ctld_rss_kib(&cluster);
    // A frame above what any request can carry is refused as soon as its length is read.
    let mut oversized = Attack::start(&cluster, "alice", 10, MAX_FRAME);
    assert_eq!(oversized.accepted, 10);
    cluster.wait_for("oversized frames to be refused", Duration::from_secs(5), || {
        (oversized.closed() == 10).then_some(())
    });
    assert!(oversized.sent < 10 * MAX_FRAME / 2, "ctld read {} bytes of frames it must refuse", oversized.sent);
    drop(oversized);
    // 100 connections, each announcing the largest request ctld accepts and sending all but its
    // last byte (alice gets 64 of them, her share).
    let attack = Attack::start(&cluster, "alice", 100, MAX_REQUEST_FRAME);
    assert_eq!(attack.accepted, 64);
    // What the attack got into ctld and the kernel's socket buffers: at least what alice's
    // budget for unfinished frames lets ctld read (22 MiB beyond 64 KiB per connection).
    assert!(attack.sent > 20 << 20, "the attack sent only {} bytes", attack.sent);
    let mut worst = (Duration::ZERO, 0);
    for _ in 0..5 {
        let (slowest, rss) = assert_others_served(&cluster, "64 half-sent frames of alice");
        worst = (worst.0.max(slowest), worst.1.max(rss));
        std::thread::sleep(Duration::from_millis(300));
    }
    // Others still submit large scripts: alice's budget is hers alone.
    let big = format!("#!/bin/sh\n{}true\n", "# padding padding padding padding padding padding\n".repeat(40_000));
    let started = Instant::now();
    let job = cluster.submit(Some("bob"), "big.sh", &big, &["-H"]);
    let submit_took = started.elapsed();
    assert!(submit_took < Duration::from_secs(5), "bob's 2 MB submission took {submit_took:?}");
    assert!(cluster.ok("squeue", &["-h", "-o", "%i %u"]).contains(&format!("{job} bob")));
    let rss = ctld_rss_kib(&cluster);
    assert!(rss < RSS_LIMIT_KIB, "after bob's submission: ctld's VmRSS is {rss} kB");
    eprintln!(
        "half-sent frames: {} bytes sent by alice ({} complete); ctld VmRSS before {before} kB, during at most {} \
         kB; slowest squeue {:?}; bob's 2 MB sbatch {submit_took:?}",
        attack.sent,
        attack.complete,
        worst.1.max(rss),
        worst.0
    );
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn busy_connections_of_one_user_do_not_starve_others() {
    require_users();
    let cluster = Cluster::start();
    // Jobs for the queries to read, alice's and bob's.
    for user in ["alice", "bob"] {
        for i in 0..5 {
            cluster.submit(Some(user), &format!("held{i}.sh"), "#!/bin/sh\ntrue\n", &["-H"]);
        }
    }
    let before = ctld_rss_kib(&cluster);
    // All of alice's share of connections sending job and accounting queries back to back.
    let mut attack = Attack::start(&cluster, "alice", 64, "busy");
    assert_eq!(attack.accepted, 64);
    std::thread::sleep(Duration::from_millis(500));
    let served_before = attack.served();
    let mut worst = (Duration::ZERO, 0);
    for _ in 0..5 {
        let (slowest, rss) = assert_others_served(&cluster, "64 busy connections of alice");
        worst = (worst.0.max(slowest), worst.1.max(rss));
    }
    let served = attack.served() - served_before;
    assert!(served >= 100, "alice's connections were not busy: {served} answers while the others were timed");
    eprintln!(
        "busy connections: alice got {served} answers meanwhile; ctld VmRSS before {before} kB, during at most {} \
         kB; slowest squeue {:?}",
        worst.1, worst.0
    );
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_burst_of_commands_beyond_the_per_user_limit_waits_for_room() {
    require_users();
    // Two connections per user: twelve of alice's commands at once (a burst of `srun`s, say)
    // are refused for a moment and try again until there is room.
    let cluster = cluster_with("max_connections_per_user = 2");
    let dir = cluster.workdir(Some("alice"));
    let started = Instant::now();
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..12)
            .map(|_| scope.spawn(|| cluster.run(Some("alice"), &dir, "squeue", &["-h", "-u", "alice"], None)))
            .collect();
        for run in runs {
            let out = run.join().expect("squeue thread");
            assert!(out.status.success(), "a command of the burst failed: {}", text(&out.stderr));
        }
    });
    eprintln!("twelve squeue of alice at once, two connections allowed: {:?}", started.elapsed());
}

/// Runs the helper's `ids:N` mode as alice: one `scancel` request naming `n` job ids; returns
/// how long ctld took to answer and the start of its answer.
fn cancel_many_as_alice(cluster: &Cluster, n: u32) -> (u64, String) {
    let out = Command::new("setpriv")
        .args(["--reuid=alice", "--regid=alice", "--init-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_drover-hostile-client"))
        .arg(cluster.socket())
        .args(["1", &format!("ids:{n}")])
        .output()
        .expect("running drover-hostile-client");
    let line = text(&out.stdout);
    let (ms, answer) = line
        .trim()
        .strip_prefix("answered ms=")
        .and_then(|rest| rest.split_once(" answer="))
        .unwrap_or_else(|| panic!("helper said {line:?} {}", text(&out.stderr)));
    (ms.parse().expect("milliseconds"), answer.to_owned())
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_request_naming_millions_of_jobs_is_refused_before_any_work() {
    require_users();
    let cluster = Cluster::start();
    // Two million ids fit one 11 MiB request; each would cost the core a lookup and an audit
    // record. Bob submits meanwhile.
    let attack = std::thread::scope(|scope| {
        let attack = scope.spawn(|| cancel_many_as_alice(&cluster, 2_000_000));
        std::thread::sleep(Duration::from_millis(300));
        for _ in 0..5 {
            let started = Instant::now();
            let out =
                cluster.run(Some("bob"), &cluster.workdir(Some("bob")), "sbatch", &["-H", "--wrap", "true"], None);
            assert!(out.status.success(), "{}", text(&out.stderr));
            assert!(started.elapsed() < Duration::from_secs(1), "bob's sbatch took {:?}", started.elapsed());
            std::thread::sleep(Duration::from_millis(200));
        }
        attack.join().expect("the attack")
    });
    let (ms, answer) = attack;
    assert!(answer.contains("InvalidSpec") && answer.contains("at most 10000"), "{answer}");
    assert!(ms < 2_000, "the refusal took {ms} ms");
    assert!(ctld_rss_kib(&cluster) < 500 * 1024);
    // Nothing was audited for the refused ids.
    let audit = cluster.ok("drover", &["audit", "-P", "--action", "cancel"]);
    assert!(audit.lines().count() <= 1, "{audit}");

    // The command splits a long list itself: 25,000 ids of which one is alice's job.
    let job = cluster.submit(Some("alice"), "held.sh", "#!/bin/sh\ntrue\n", &["-H"]);
    let mut ids: Vec<String> = (0..24_999u32).map(|i| (1_000_000 + i).to_string()).collect();
    ids.push(job.to_string());
    let mut args: Vec<&str> = ids.iter().map(String::as_str).collect();
    args.insert(0, "-Q");
    let out = cluster.run(Some("alice"), &cluster.workdir(Some("alice")), "scancel", &args, None);
    assert!(out.status.success() || out.status.code() == Some(1), "{}", text(&out.stderr));
    cluster.wait_state(job, "CANCELLED", Duration::from_secs(30));
}
