//! Replicated controllers under a flood of the Raft port (issue 27; docs/admin/ha.md, "Floods of
//! the Raft port"): three replicas from `drover up --replicas 3`, and 700 idle TCP connections
//! held open to each replica's `raft_address` by the test (on loopback only; a connection the
//! replica closes is opened again, at most 1,000 a second per replica, for as long as the test
//! runs and at most [`FLOOD_LIMIT`]). The leader is killed with SIGKILL three times; each time a
//! new leader must be elected and `squeue` as the plain user alice must succeed within
//! [`FAILOVER_BOUND`] of the kill, and the killed replica, started again by `drover up`, must get
//! back in step through its flooded port and the others'.

use drover_e2e::{Cluster, require_users, text};
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Idle connections held open to each replica's Raft port.
const PER_REPLICA: usize = 700;
/// Connections opened per sweep, at most (a sweep every [`SWEEP`]): 1,000 a second per replica.
const OPEN_PER_SWEEP: usize = 100;
const SWEEP: Duration = Duration::from_millis(100);
/// The flood stops by itself after this long, whatever the test does.
const FLOOD_LIMIT: Duration = Duration::from_secs(240);
/// From the leader's kill until alice's `squeue` has an answer, at most.
const FAILOVER_BOUND: Duration = Duration::from_secs(5);
const KILLS: usize = 3;
const LONG_WAIT: Duration = Duration::from_secs(60);

/// What a flood thread reports.
#[derive(Default)]
struct Flood {
    /// Connections held after the last sweep.
    open: AtomicUsize,
    /// Every connection made.
    opened: AtomicUsize,
    /// The port took what it could: [`PER_REPLICA`] connections made, or one refused or timed
    /// out (the listen queue of a port that does not accept is full).
    saturated: AtomicBool,
}

/// Holds up to [`PER_REPLICA`] idle connections to `address` open until `stop` is set (or
/// [`FLOOD_LIMIT`] has passed): each sweep drops the connections the replica closed and opens
/// new ones in their place.
fn flood(address: SocketAddr, stop: &AtomicBool, report: &Flood) {
    assert!(address.ip().is_loopback(), "the flood goes to loopback addresses only, not {address}");
    let started = Instant::now();
    let mut held: Vec<TcpStream> = Vec::with_capacity(PER_REPLICA);
    let mut byte = [0u8; 1];
    while !stop.load(Ordering::Relaxed) && started.elapsed() < FLOOD_LIMIT {
        // A connection the replica closed reads its end (or an error); an open one would block.
        held.retain_mut(
            |stream| matches!(stream.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        );
        for _ in 0..OPEN_PER_SWEEP.min(PER_REPLICA - held.len()) {
            // A replica that is down refuses: try again next sweep.
            let Ok(stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
                report.saturated.store(true, Ordering::Relaxed);
                break;
            };
            stream.set_nonblocking(true).expect("a non-blocking socket");
            held.push(stream);
            if report.opened.fetch_add(1, Ordering::Relaxed) + 1 >= PER_REPLICA {
                report.saturated.store(true, Ordering::Relaxed);
            }
        }
        report.open.store(held.len(), Ordering::Relaxed);
        std::thread::sleep(SWEEP);
    }
}

/// Whether `scontrol -d ping` lists three replicas, all up and in step.
fn in_step(cluster: &Cluster) -> bool {
    let ping = cluster.ok("scontrol", &["-d", "ping"]);
    ping.lines().count() == 3 && ping.lines().all(|l| l.contains(" is UP (") && l.contains("behind: 0)"))
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn elections_go_on_while_the_raft_ports_are_flooded() {
    require_users();
    // Three floods of PER_REPLICA sockets each, beside the cluster's own descriptors.
    let (soft, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let want = (4 * PER_REPLICA as u64).min(hard);
    if soft < want {
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, want, hard).unwrap();
    }
    let cluster = Cluster::start_with_args(drover_e2e::CONFIG, &["--replicas", "3"]);
    let alice = cluster.workdir(Some("alice"));
    let config = drover_shared::config::Config::load(&cluster.home().join("cluster.toml")).expect("the home's config");
    let ports: Vec<SocketAddr> =
        config.replicas.iter().map(|r| r.raft_address.parse().expect("an IP:port Raft address")).collect();
    assert_eq!(ports.len(), 3);
    drover_e2e::poll("three replicas in step", LONG_WAIT, || cluster.logs(), || in_step(&cluster).then_some(()));

    let stop = Arc::new(AtomicBool::new(false));
    let reports: Vec<Arc<Flood>> = ports.iter().map(|_| Arc::default()).collect();
    let floods: Vec<_> = ports
        .iter()
        .zip(&reports)
        .map(|(&port, report)| {
            let (stop, report) = (stop.clone(), report.clone());
            std::thread::spawn(move || flood(port, &stop, &report))
        })
        .collect();
    let opened = || reports.iter().map(|r| r.opened.load(Ordering::Relaxed)).collect::<Vec<_>>();
    // The flood is in place before the first kill.
    drover_e2e::poll(
        "the floods to be in place",
        Duration::from_secs(30),
        || format!("connections opened per replica: {:?}", opened()),
        || reports.iter().all(|r| r.saturated.load(Ordering::Relaxed)).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(1));
    // Nothing shows while the leader lives.
    let out = cluster.run(Some("alice"), &alice, "squeue", &[], None);
    assert!(out.status.success(), "alice's squeue under the flood: {}{}", text(&out.stderr), cluster.logs());

    let mut failovers = Vec::new();
    for kill in 1..=KILLS {
        let leader = cluster.leader();
        cluster.kill9(&format!("ctld-{leader}"));
        let killed = Instant::now();
        let out = cluster.run(Some("alice"), &alice, "squeue", &[], None);
        let answered = killed.elapsed();
        assert!(
            out.status.success(),
            "kill {kill}: alice's squeue after replica {leader} was killed failed after {answered:?}: {}{}",
            text(&out.stderr),
            cluster.logs()
        );
        let next = cluster.leader();
        assert_ne!(next, leader, "kill {kill}: the killed replica cannot lead");
        let open: Vec<usize> = reports.iter().map(|r| r.open.load(Ordering::Relaxed)).collect();
        eprintln!(
            "kill {kill}: replica {leader} killed; replica {next} leads; alice's squeue answered {:.2} s after the \
             kill (flood connections held: {open:?})",
            answered.as_secs_f64()
        );
        failovers.push(answered);
        assert!(answered <= FAILOVER_BOUND, "kill {kill}: alice's squeue answered {answered:?} after the kill");

        // `drover up` starts the killed replica again; it gets back in step through the flood.
        let restarted = Instant::now();
        let out = cluster.drover("up");
        assert!(out.status.success(), "{}{}\n{}", text(&out.stdout), text(&out.stderr), cluster.logs());
        drover_e2e::poll(
            "the restarted replica back in step",
            LONG_WAIT,
            || cluster.logs(),
            || in_step(&cluster).then_some(()),
        );
        eprintln!(
            "kill {kill}: replica {leader} back in step {:.2} s after drover up",
            restarted.elapsed().as_secs_f64()
        );
    }
    stop.store(true, Ordering::Relaxed);
    for flood in floods {
        flood.join().expect("a flood thread");
    }
    let worst = failovers.iter().max().expect("kills");
    let mean = failovers.iter().sum::<Duration>() / u32::try_from(failovers.len()).unwrap();
    eprintln!(
        "{KILLS} kills under the flood: kill to alice's answer mean {:.2} s, worst {:.2} s; connections opened per \
         replica: {:?}",
        mean.as_secs_f64(),
        worst.as_secs_f64(),
        opened()
    );
}
