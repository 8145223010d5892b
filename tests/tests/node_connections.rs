//! More nodes than ctld has descriptors for: a site whose ctld runs under a `LimitNOFILE` too low
//! for its cluster (or anyone opening connections to the node port). ctld runs under an open-file
//! limit of 1,024 (`prlimit`) against 1,500 simulated nodes (`drover-simnode`, the real protocol).
//! Nodes get in up to ctld's node-connection bound, which keeps a quarter of the descriptors for
//! clients, and the rest wait and retry; meanwhile every command must be answered. Before the
//! bound followed the limit, the nodes took every descriptor and each client's connection failed
//! with "Too many open files" at ctld's accept.

use drover_e2e::sim::{ONE_TEAM, SimCluster, gpu_nodes};
use std::time::{Duration, Instant};

const NODES: usize = 1500;
const OPEN_FILES: u64 = 1024;

#[test]
#[ignore = "needs prlimit and about 1,600 descriptors for the simulator; .ci/run runs it"]
fn nodes_past_the_open_file_limit_leave_room_for_commands() {
    let cluster = SimCluster::start_limited(
        "nofile",
        NODES,
        "default_account = \"ml\"",
        &(gpu_nodes(NODES, 8, "") + ONE_TEAM),
        OPEN_FILES,
    );
    // Nodes come in until ctld's bound (768 here), well past what a handful would be.
    let idle = |cluster: &SimCluster| -> usize {
        let out = cluster.command("sinfo", &["-h", "-o", "%D %t"]);
        if !out.status.success() {
            return 0;
        }
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().strip_suffix(" idle").and_then(|n| n.trim().parse::<usize>().ok()))
            .sum()
    };
    cluster.wait_for("500 nodes registered", || (idle(&cluster) >= 500).then_some(()));
    // The rest keep knocking; commands are answered all along.
    let until = Instant::now() + Duration::from_secs(10);
    let mut calls = 0;
    while Instant::now() < until {
        let began = Instant::now();
        let out = cluster.command("squeue", &["-h"]);
        assert!(
            out.status.success(),
            "squeue failed while nodes were knocking (call {calls}): {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            cluster.logs()
        );
        assert!(began.elapsed() < Duration::from_secs(3), "squeue took {:?}", began.elapsed());
        calls += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let registered = idle(&cluster);
    let bound = usize::try_from(OPEN_FILES - OPEN_FILES / 4).unwrap();
    assert!(
        (500..=bound).contains(&registered),
        "{registered} nodes registered; ctld's bound under a limit of {OPEN_FILES} is {bound}\n{}",
        cluster.logs()
    );
    // ctld logs to stdout, errors to stderr.
    let log =
        ["ctld.out", "ctld.log"].map(|f| std::fs::read_to_string(cluster.root().join(f)).unwrap_or_default()).concat();
    assert!(log.contains("the open-file limit is below what this many nodes need"), "no warning in ctld's log\n{log}");
    // A job still goes in and out.
    let out = cluster.ok("sbatch", &["--parsable", "-H", "--wrap", "true", "-o", "/dev/null"]);
    let job = out.trim().to_owned();
    cluster.ok("scancel", &[&job]);
}
