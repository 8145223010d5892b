//! Attacks on ctld's two doors: idle and flooding connections, oversized and malformed frames on
//! the client socket, and a node that does not hold the cluster key. Each must be bounded, must
//! not stall other clients, and must change no state.

use drover_e2e::{Cluster, text};
use drover_shared::proto::frame::{MAX_HANDSHAKE_FRAME, read_message, write_message};
use drover_shared::proto::node::{JobEnd, JobOutcome, NodeMessage};
use drover_shared::proto::{Hello, HelloReply, MAGIC, NodeProof, PROTOCOL_VERSION, Role};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// `squeue` must answer quickly while the attack is in progress.
fn assert_responsive(cluster: &Cluster, what: &str) {
    let started = Instant::now();
    let out = cluster.run(None, &cluster.workdir(None), "squeue", &["-h"], None);
    assert!(out.status.success(), "{what}: squeue failed: {}", text(&out.stderr));
    assert!(started.elapsed() < Duration::from_secs(2), "{what}: squeue took {:?}", started.elapsed());
}

#[test]
fn idle_and_flooding_clients_do_not_stall_others() {
    let cluster = Cluster::start();
    // 100 connections that never say hello (slow loris), plus 100 that send half a frame: all
    // within the 256 connections root may hold (more from one uid are refused at once, see
    // hostile_connections.rs).
    let mut idle = Vec::new();
    for i in 0..200 {
        let mut stream = UnixStream::connect(cluster.socket()).expect("connect");
        if i % 2 == 1 {
            stream.write_all(&[0, 0, 0, 40, 1, 2]).unwrap();
        }
        idle.push(stream);
    }
    assert_responsive(&cluster, "200 idle connections");
    // ctld drops connections that do not finish their hello in time.
    std::thread::sleep(Duration::from_secs(6));
    let mut closed = 0;
    for stream in &mut idle {
        stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut buf = [0u8; 1];
        if matches!(stream.read(&mut buf), Ok(0) | Err(_)) {
            closed += 1;
        }
    }
    assert_eq!(closed, idle.len(), "every idle connection is closed after the hello timeout");
    assert_responsive(&cluster, "after the flood");
}

#[test]
fn oversized_and_malformed_frames_close_only_their_connection() {
    let cluster = Cluster::start();
    // A length prefix of 1 GiB on the hello: refused without reading (or allocating) it.
    let mut stream = UnixStream::connect(cluster.socket()).unwrap();
    stream.write_all(&(1u32 << 30).to_be_bytes()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 16];
    assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)), "oversized hello must close the connection");
    // Garbage that decodes as nothing.
    let mut stream = UnixStream::connect(cluster.socket()).unwrap();
    stream.write_all(&[0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff]).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)), "garbage must close the connection");
    // A client posing as a node on the client socket gets nowhere.
    let mut stream = UnixStream::connect(cluster.socket()).unwrap();
    let hello = Hello {
        magic: MAGIC,
        protocol_version: PROTOCOL_VERSION,
        role: Role::Node { name: "n1".into() },
        nonce: vec![0; 32],
    };
    write_message(&mut stream, &hello).unwrap();
    let reply: HelloReply = read_message(&mut stream, MAX_HANDSHAKE_FRAME).unwrap();
    assert!(matches!(reply, HelloReply::Reject { .. }), "{reply:?}");
    assert_responsive(&cluster, "after bad frames");
}

#[test]
fn a_node_without_the_key_is_refused() {
    let cluster = Cluster::start();
    let job_id = cluster.submit(None, "victim.sh", "#!/bin/sh\n#SBATCH -w n1\nsleep 300\n", &[]);
    cluster.wait_state(job_id, "RUNNING", Duration::from_secs(60));
    let mut stream = TcpStream::connect(cluster.node_address()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = Hello {
        magic: MAGIC,
        protocol_version: PROTOCOL_VERSION,
        role: Role::Node { name: "n1".into() },
        nonce: vec![7; 32],
    };
    write_message(&mut stream, &hello).unwrap();
    let reply: HelloReply = read_message(&mut stream, MAX_HANDSHAKE_FRAME).unwrap();
    assert!(matches!(reply, HelloReply::Accept { .. }));
    // A proof made with the wrong key, then a forged end for the running job.
    write_message(&mut stream, &NodeProof { proof: vec![0; 32] }).unwrap();
    let forged = NodeMessage::JobEnded(JobEnd {
        job_id,
        run: 0,
        outcome: JobOutcome::Exited,
        exit_status: Default::default(),
        start_time: None,
        end_time: 0,
    });
    let _ = write_message(&mut stream, &forged);
    let mut buf = [0u8; 16];
    assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)), "ctld must close the connection");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cluster.sacct_state(job_id).unwrap().0, "RUNNING", "the forged end changed nothing");
    let sinfo = cluster.ok("sinfo", &["-h", "-N", "-o", "%N %t"]);
    assert!(sinfo.contains("n1 mix") || sinfo.contains("n1 alloc"), "the real n1 is still registered: {sinfo}");
    assert!(cluster.logs().contains("failed authentication"), "the refusal is logged");
}

#[test]
fn a_state_directory_others_can_write_stops_ctld() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = Cluster::start();
    // Files ctld creates (the database with every job's script and environment, its journal)
    // are owner-only; only the client socket is open to all.
    let state = cluster.home().join("ctld");
    let mut checked = 0;
    for entry in std::fs::read_dir(&state).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
        if entry.path() != cluster.socket() && entry.metadata().unwrap().is_file() {
            assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", entry.path().display());
            checked += 1;
        }
    }
    assert!(checked > 0, "no database files found in {}", state.display());
    let down = cluster.drover("down");
    assert!(down.status.success(), "drover down: {}", text(&down.stderr));
    // Someone loosened the state directory: whoever can write there could swap the database.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut ctld = std::process::Command::new(drover_e2e::bin_dir().join("drover-ctld"))
        .arg("--config")
        .arg(cluster.home().join("cluster.toml"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running drover-ctld");
    let deadline = Instant::now() + Duration::from_secs(10);
    while ctld.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            ctld.kill().unwrap();
            panic!("ctld started on a world-writable state directory");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = ctld.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "ctld exited 0 on a world-writable state directory");
    assert!(stderr.contains("has mode 777") && stderr.contains("chmod go-w"), "{stderr}");
    assert!(UnixStream::connect(cluster.socket()).is_err(), "something still answers on the client socket");
}
