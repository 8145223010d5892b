//! The metrics and status port under a slowloris (issue 28): 200 connections from one address
//! that send half a request head and hold it once made seven of ten scrapes fail. Now one
//! source holds at most a few connections, a head must arrive whole within a second, accepting
//! never waits for room, and `[metrics] allow` serves only the listed addresses. The scraper runs
//! from another loopback address (127.0.0.2) than the attacker (127.0.0.1); every scrape must
//! succeed, and bob's `sbatch` must stay quick meanwhile.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Connections the attacker keeps open, each with half a request head.
const HELD: usize = 200;

/// One scrape of `/metrics` at `address` from the source address `from`, within 2 s: whether it
/// got a whole 200 answer.
fn scrape(address: SocketAddr, from: &str) -> Result<(), String> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};
    use std::os::fd::AsRawFd;
    let (SocketAddr::V4(target), Ok(source)) = (address, format!("{from}:0").parse::<std::net::SocketAddrV4>()) else {
        return Err(format!("not IPv4: {address} from {from}"));
    };
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::empty(), None).map_err(|e| e.to_string())?;
    bind(fd.as_raw_fd(), &SockaddrIn::from(source)).map_err(|e| format!("bind {from}: {e}"))?;
    // On loopback a connection is made or refused at once (a full listen queue shows as a
    // scrape that gets no answer in time).
    connect(fd.as_raw_fd(), &SockaddrIn::from(target)).map_err(|e| format!("connect: {e}"))?;
    let mut stream = TcpStream::from(fd);
    stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").map_err(|e| format!("write: {e}"))?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|e| format!("read: {e}"))?;
    if answer.starts_with("HTTP/1.1 200") && answer.contains("drover_") {
        Ok(())
    } else {
        Err(format!("answer: {:?}", answer.lines().next()))
    }
}

/// Keeps `HELD` connections from 127.0.0.1 open with half a head each, opening a new one for
/// each that closes, until `stop` (bounded by the caller's time).
fn slowloris(address: SocketAddr, stop: Arc<AtomicBool>) -> usize {
    let mut held: Vec<TcpStream> = Vec::new();
    let mut opened = 0;
    while !stop.load(Ordering::Relaxed) {
        // Closed by the server: read says so; still held: it would block.
        held.retain(|stream| {
            let mut byte = [0u8; 1];
            matches!((&*stream).read(&mut byte), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
        });
        while held.len() < HELD && !stop.load(Ordering::Relaxed) {
            let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else { break };
            let _ = stream.write_all(b"GET /metr");
            let _ = stream.set_nonblocking(true);
            held.push(stream);
            opened += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    opened
}

/// How long `sbatch` takes for bob, the fastest and the slowest of `n`.
fn sbatch_times(cluster: &Cluster, n: usize) -> (Duration, Duration) {
    let dir = cluster.workdir(Some("bob"));
    let mut times = Vec::new();
    for _ in 0..n {
        let started = Instant::now();
        let out = cluster.run(
            Some("bob"),
            &dir,
            "sbatch",
            &["--parsable", "-o", "/dev/null", "--hold", "--wrap", "true"],
            None,
        );
        times.push(started.elapsed());
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    times.sort();
    (times[0], times[times.len() / 2])
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_slowloris_on_the_metrics_port_blinds_no_scraper() {
    require_users();
    let config = format!("{CONFIG}\n[metrics]\nlisten = \"localhost:0\"\n");
    let cluster = Cluster::start_with(&config);
    let address: SocketAddr = std::fs::read_to_string(cluster.home().join("ctld").join("metrics.addr"))
        .expect("metrics.addr")
        .trim()
        .parse()
        .unwrap();
    scrape(address, "127.0.0.2").expect("a scrape before the attack");
    let (_, quiet) = sbatch_times(&cluster, 5);

    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let stop = stop.clone();
        std::thread::spawn(move || slowloris(address, stop))
    };
    std::thread::sleep(Duration::from_secs(2));
    let mut failures = Vec::new();
    for round in 0..10 {
        let started = Instant::now();
        if let Err(error) = scrape(address, "127.0.0.2") {
            failures.push(format!("scrape {round}: {error}"));
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
    }
    let (fastest, median) = sbatch_times(&cluster, 5);
    eprintln!("under the slowloris: bob's sbatch median {median:?} (fastest {fastest:?}; {quiet:?} before)");
    assert!(failures.is_empty(), "scrapes failed under the slowloris: {failures:?}");
    assert!(median < Duration::from_millis(100), "bob's sbatch took {median:?} under the slowloris");

    // Only the scraper's address: the attacker's connections are closed as they are accepted.
    let edited = config.replace("[metrics]\n", "[metrics]\nallow = [\"127.0.0.2\"]\n");
    std::fs::write(cluster.config_file(), edited).unwrap();
    cluster.ok("scontrol", &["reconfigure"]);
    for round in 0..5 {
        scrape(address, "127.0.0.2").unwrap_or_else(|e| panic!("allowed scrape {round}: {e}"));
    }
    assert!(scrape(address, "127.0.0.1").is_err(), "a scrape from outside the allow list was answered");
    stop.store(true, Ordering::Relaxed);
    let opened = attacker.join().unwrap();
    eprintln!("the attacker opened {opened} connections");
    assert!(opened >= HELD, "the attack never held its connections");
}
