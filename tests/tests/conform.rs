//! Gaps that Slurm's own test suite (tests/slurm-suite/run.sh) found, end to end against a real
//! cluster: the plugin parameters `scontrol show config` reports for what Drover does, srun's
//! overcommit and node-spreading behaviour, and the options and input variables the suite uses.

use drover_e2e::{Cluster, text};

/// `scontrol show config` names the Slurm plugins whose behaviour Drover has, so that clients
/// (and the suite's local-config checks) can tell: consumable TRES, multifactor priority with
/// its weights, backfill, no switch, and a job killed at its time limit.
#[test]
fn show_config_reports_plugin_types_and_priority_weights() {
    let cluster = Cluster::start();
    let config = cluster.ok("scontrol", &["show", "config"]);
    let value = |name: &str| {
        config
            .lines()
            .find_map(|l| l.split_once('=').filter(|(k, _)| k.trim() == name).map(|(_, v)| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("no {name} in:\n{config}"))
    };
    assert_eq!(value("SelectType"), "select/cons_tres");
    assert_eq!(value("PriorityType"), "priority/multifactor");
    assert_eq!(value("SchedulerType"), "sched/backfill");
    assert_eq!(value("SwitchType"), "switch/none");
    assert_eq!(value("OverTimeLimit"), "0 min");
    // Drover's default weights (docs/admin/scheduling.md), not Slurm's zeros.
    assert_eq!(value("PriorityWeightFairShare"), "10000");
    assert_eq!(value("PriorityWeightAge"), "1000");
    assert_eq!(value("PriorityMaxAge"), "7-00:00:00");
    // Slurm's order: alphabetical, as before.
    let names: Vec<&str> = config.lines().skip(1).filter_map(|l| l.split_once('=').map(|(k, _)| k.trim())).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
}

/// `sbatch -n 6` without `-N` on 4-CPU nodes spreads over two nodes, as Slurm's does, instead of
/// being refused as a one-node request; the job's step runs its six tasks there.
#[test]
fn tasks_without_a_node_count_spread_over_nodes() {
    let cluster = Cluster::start();
    let script =
        "#!/bin/sh\necho nnodes=$SLURM_NNODES\n$DROVER_HOME/bin/srun printenv SLURMD_NODENAME | sort | uniq -c\n";
    let job_id = cluster.submit(None, "spread.sh", script, &["-n", "6", "-o", "spread.out"]);
    cluster.wait_state(job_id, "COMPLETED", std::time::Duration::from_secs(60));
    let out = std::fs::read_to_string(cluster.workdir(None).join("spread.out")).expect("job output");
    assert!(out.contains("nnodes=2\n"), "{out}");
    let counts: Vec<&str> = out.lines().skip(1).map(str::trim).collect();
    assert_eq!(counts, ["3 n1", "3 n2"], "{out}");
    // More tasks than the partitions' nodes could hold is still refused at submit.
    let dir = cluster.workdir(None);
    let refused = cluster.run(None, &dir, "sbatch", &["-n", "9", "--wrap", "true"], None);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("Requested node configuration is not available"),
        "{}",
        text(&refused.stderr)
    );
}

/// `srun -N1 -n5 -O` outside an allocation: the allocation is one CPU on one node and the
/// overcommitted step runs its five tasks there; `-v` lists `ntasks : 5` as Slurm's srun does.
#[test]
fn srun_overcommit_allocates_one_cpu_per_node() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let out = cluster.run(
        None,
        &dir,
        "srun",
        &["-N", "1", "-w", "n1", "-n", "5", "--overcommit", "-v", "printenv", "SLURMD_NODENAME"],
        None,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&out.stdout), "n1\n".repeat(5));
    assert!(stderr.contains("srun: ntasks              : 5\n"), "{stderr}");
    assert!(stderr.contains("srun: overcommit          : set\n"), "{stderr}");
}
