//! Crash tests: `kill -9` of ctld at random moments while several clients submit, then a restart
//! and an audit: every acknowledged job exists exactly once with the spec it was submitted with,
//! and nothing unacknowledged appears twice (a submission cut by the kill is sent again by sbatch
//! under its key, and must not be stored twice). `DROVER_SOAK_ROUNDS` raises the number of rounds
//! (CI runs the default 20).

use drover_e2e::{Cluster, text};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CLIENTS: usize = 4;

/// A small deterministic generator, so a failing round can be replayed from its seed.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn acknowledged_jobs_survive_ctld_kill9() {
    let rounds: usize = std::env::var("DROVER_SOAK_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let cluster = Arc::new(Cluster::start());
    let mut seed = 0x5eed_u64 ^ u64::from(std::process::id());
    eprintln!("crash test seed {seed:#x}, {rounds} rounds");
    // name -> acknowledged job id
    let acknowledged: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = Vec::new();
        for client in 0..CLIENTS {
            let cluster = cluster.clone();
            let stop = stop.clone();
            let acknowledged = acknowledged.clone();
            clients.push(std::thread::spawn(move || {
                let dir = cluster.workdir(None);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("r{round}c{client}i{i}");
                    i += 1;
                    let comment = format!("spec-of-{name}");
                    let args = ["--parsable", "-H", "-J", &name, "--comment", &comment, "--wrap", "true"];
                    let out = cluster.run(None, &dir, "sbatch", &args, None);
                    if out.status.success() {
                        let job_id: u32 = text(&out.stdout).trim().parse().expect("a job id");
                        acknowledged.lock().unwrap().insert(name, job_id);
                    }
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(50 + next(&mut seed) % 400));
        cluster.kill9("ctld");
        stop.store(true, Ordering::Relaxed);
        // Restarted while the clients still run: a submission cut by the kill is sent again
        // under its key and answered by the restarted ctld (stored once either way).
        let out = cluster.drover("up");
        assert!(
            out.status.success(),
            "round {round}: restart failed: {}{}\n{}",
            text(&out.stdout),
            text(&out.stderr),
            cluster.logs()
        );
        for client in clients {
            client.join().unwrap();
        }
    }

    // Audit: every job ctld has, by name.
    let listing = cluster.ok("sacct", &["-a", "-X", "-P", "-n", "-S", "2000-01-01", "-o", "JobID,JobName,Comment"]);
    let mut stored: HashMap<String, Vec<(u32, String)>> = HashMap::new();
    for line in listing.lines() {
        let mut fields = line.split('|');
        let (Some(id), Some(name), Some(comment)) = (fields.next(), fields.next(), fields.next()) else {
            panic!("bad sacct line {line:?}")
        };
        stored.entry(name.to_owned()).or_default().push((id.parse().unwrap(), comment.to_owned()));
    }
    let acknowledged = acknowledged.lock().unwrap();
    assert!(acknowledged.len() > rounds, "too few submissions to mean anything: {}", acknowledged.len());
    let mut lost = 0;
    for (name, job_id) in acknowledged.iter() {
        match stored.get(name).map(Vec::as_slice) {
            Some([(id, comment)]) => {
                assert_eq!(id, job_id, "{name} was acknowledged as {job_id} but stored as {id}");
                assert_eq!(comment, &format!("spec-of-{name}"), "{name}: spec changed");
            }
            Some(copies) => panic!("{name} stored {} times: {copies:?}", copies.len()),
            None => lost += 1,
        }
    }
    let duplicates: Vec<_> = stored.iter().filter(|(_, copies)| copies.len() > 1).collect();
    assert!(duplicates.is_empty(), "unacknowledged duplicates: {duplicates:?}");
    let unacknowledged = stored.len() - (acknowledged.len() - lost);
    eprintln!(
        "crash test: {rounds} rounds, {} acknowledged, {} stored, {unacknowledged} stored but unacknowledged, lost {lost}",
        acknowledged.len(),
        stored.len()
    );
    assert_eq!(lost, 0, "acknowledged jobs lost");
}
