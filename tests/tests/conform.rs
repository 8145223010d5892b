//! Gaps that Slurm's own test suite (tests/slurm-suite/run.sh) found, end to end against a real
//! cluster: the plugin parameters `scontrol show config` reports for what Drover does, srun's
//! overcommit and node-spreading behaviour, and the options and input variables the suite uses.

use drover_e2e::Cluster;

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
