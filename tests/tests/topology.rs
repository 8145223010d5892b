//! Topology-aware placement measured from outside: a real ctld with sixteen simulated nodes of 8
//! GPUs (`drover-simnode`) under two leaf switches of eight nodes and a spine above them
//! (`[[topology.switches]]`). Two nodes of each leaf switch run a 7-GPU job, so best fit alone
//! would take those four nodes first for a 4-node job and spread it over both switches; with the
//! topology it goes under one leaf switch (the fullest nodes of that switch first). A 1-GPU job
//! still goes to the node with the fewest GPUs free. A 10-node job fits under no leaf switch and
//! goes under the spine. Placement is read back through `squeue` and `scontrol show job`. A topology
//! that names an unknown node or puts a node in two leaf switches keeps ctld from starting, with
//! the reason.

use drover_e2e::sim::{SimCluster, gpu_nodes};
use std::process::Command;

const TOPOLOGY: &str = "[[topology.switches]]\nname = \"s1\"\nnodes = \"sim[01-08]\"\n\
    [[topology.switches]]\nname = \"s2\"\nnodes = \"sim[09-16]\"\n\
    [[topology.switches]]\nname = \"spine\"\nswitches = \"s[1-2]\"\n";

fn users() -> &'static str {
    "[[accounts]]\nname = \"ml\"\n[[users]]\nname = \"root\"\ndefault_account = \"ml\"\n"
}

/// Submits a job of `nodes` nodes × `gpus` GPUs (1 CPU per GPU) that runs an hour, on `on` if
/// given; returns its id.
fn submit(cluster: &SimCluster, nodes: u32, gpus: u32, on: Option<&str>) -> u32 {
    let script = cluster.root().join("job.sh");
    if !script.exists() {
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    }
    let (n, gres, cpus) = (nodes.to_string(), format!("--gres=gpu:{gpus}"), gpus.to_string());
    let script = script.to_string_lossy().into_owned();
    let mut args = vec!["--parsable", "-N", &n, &gres, "-c", &cpus, "--comment", "sim:3600"];
    if let Some(node) = on {
        args.extend(["-w", node]);
    }
    args.push(&script);
    cluster.ok("sbatch", &args).trim().parse().unwrap()
}

/// The nodes a running job holds, per `squeue %N`, checked against `scontrol show job`.
fn nodes_of(cluster: &SimCluster, job: u32) -> Vec<String> {
    let list = cluster.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%N"]);
    let list = list.trim();
    let shown = cluster.ok("scontrol", &["show", "job", &job.to_string()]);
    assert!(shown.contains(&format!(" NodeList={list}\n")) || shown.contains(&format!(" NodeList={list} ")), "{shown}");
    drover_shared::hostlist::expand(list).unwrap()
}

fn switch_of(node: &str) -> &'static str {
    let n: u32 = node.trim_start_matches("sim").parse().unwrap();
    if n <= 8 { "s1" } else { "s2" }
}

#[test]
fn multi_node_jobs_go_under_the_lowest_switch_that_holds_them() {
    let config = gpu_nodes(16, 8, "") + users() + TOPOLOGY;
    let cluster = SimCluster::start("topology", 16, false, "default_account = \"ml\"", &config);
    let fillers: Vec<u32> =
        ["sim01", "sim02", "sim09", "sim10"].iter().map(|n| submit(&cluster, 1, 7, Some(n))).collect();
    cluster.wait_running(&fillers, "the 7-GPU jobs");

    let four = submit(&cluster, 4, 1, None);
    cluster.wait_running(&[four], "the 4-node job");
    let nodes = nodes_of(&cluster, four);
    assert_eq!(nodes.len(), 4);
    let switch = switch_of(&nodes[0]);
    assert!(nodes.iter().all(|n| switch_of(n) == switch), "the 4-node job spans switches: {nodes:?}");
    let fullest: Vec<&str> = if switch == "s1" { vec!["sim01", "sim02"] } else { vec!["sim09", "sim10"] };
    assert!(fullest.iter().all(|f| nodes.iter().any(|n| n == f)), "best fit within the switch: {nodes:?}");

    // Single-node best fit holds: the fullest nodes with a GPU free are the other switch's two
    // 7-GPU nodes (1 GPU free each); the first of them takes a 1-GPU job.
    let one = submit(&cluster, 1, 1, None);
    cluster.wait_running(&[one], "the 1-GPU job");
    let expected = if switch == "s1" { "sim09" } else { "sim01" };
    let shown = cluster.ok("squeue", &["-h", "-o", "%i %N %b"]);
    assert_eq!(nodes_of(&cluster, one), [expected], "best fit for a 1-GPU job:\n{shown}");

    // Ten nodes fit under no leaf switch: the job goes under the spine.
    let ten = submit(&cluster, 10, 1, None);
    cluster.wait_running(&[ten], "the 10-node job");
    assert_eq!(nodes_of(&cluster, ten).len(), 10);
}

#[test]
fn a_bad_topology_keeps_ctld_from_starting_with_the_reason() {
    let dir = tempfile::Builder::new().prefix("drover-topology-bad-").tempdir_in("/tmp").unwrap();
    let cases = [
        (
            "[[topology.switches]]\nname = \"s1\"\nnodes = \"sim[01-02],gx\"\n",
            "names node `gx`, which is not configured",
        ),
        (
            "[[topology.switches]]\nname = \"s1\"\nnodes = \"sim[01-02]\"\n[[topology.switches]]\nname = \"s2\"\nnodes = \"sim[02-03]\"\n",
            "node `sim02` is in leaf switches `s1` and `s2`",
        ),
    ];
    for (topology, expected) in cases {
        let config = format!(
            "cluster_name = \"bad\"\n[controller]\naddress = \"127.0.0.1:1\"\nstate_dir = \"{root}/state\"\n\
             key_file = \"{root}/cluster.key\"\n{nodes}{users}{topology}",
            root = dir.path().display(),
            nodes = gpu_nodes(4, 8, ""),
            users = users(),
        );
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, config).unwrap();
        let out = Command::new(drover_e2e::bin_dir().join("drover-ctld")).arg("--config").arg(&path).output().unwrap();
        let stderr = drover_e2e::text(&out.stderr);
        assert!(!out.status.success(), "ctld started with a bad topology");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(stderr.contains("topology.switches["), "{stderr}");
    }
}
