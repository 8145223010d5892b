//! `scontrol show config`: the parameters Drover has, under Slurm's names and in Slurm's units,
//! so that clients that read them (Snakemake reads `MaxArraySize` and `MinJobAge`) find them.
//! Parameters Drover has no counterpart for are left out rather than invented; the plugin
//! names are those of the Slurm plugins whose behaviour Drover has: consumable TRES per node
//! (`select/cons_tres`), multifactor priority, backfill, no interconnect switch, and a job
//! killed at its time limit (`OverTimeLimit` 0). And `sacctmgr`: the accounts, users and QOS of
//! the configuration ctld runs, as the caller may see them.

use super::context::ClientContext;
use crate::model::identity::{Caller, user_name};
use drover_shared::config::sched::FairShareAlgorithm;
use drover_shared::proto::client::{ErrorCode, Response};

pub(super) fn show(context: &ClientContext) -> Response {
    let config = context.config.get();
    let controller = config.controller_address.split(':').next().unwrap_or_default().to_owned();
    let priority = &config.priority;
    let fair_tree_flag = match priority.fairshare {
        FairShareAlgorithm::FairTree => "",
        FairShareAlgorithm::Classic => "NO_FAIR_TREE",
    };
    let entries = [
        ("ClusterName", config.cluster_name.clone()),
        ("JobRequeue", "1".to_owned()),
        ("KillWait", format!("{} sec", config.kill_wait)),
        ("MaxArraySize", crate::policy::array::MAX_ARRAY_SIZE.to_string()),
        ("MaxTasksPerNode", config.max_tasks_per_node.to_string()),
        ("MinJobAge", format!("{} sec", config.min_job_age)),
        ("OverTimeLimit", "0 min".to_owned()),
        ("PriorityDecayHalfLife", days_clock(priority.decay_half_life)),
        ("PriorityFavorSmall", if priority.favor_small { "Yes" } else { "No" }.to_owned()),
        ("PriorityFlags", fair_tree_flag.to_owned()),
        ("PriorityMaxAge", days_clock(priority.max_age)),
        ("PriorityType", "priority/multifactor".to_owned()),
        ("PriorityWeightAge", priority.weight_age.to_string()),
        ("PriorityWeightAssoc", priority.weight_assoc.to_string()),
        ("PriorityWeightFairShare", priority.weight_fairshare.to_string()),
        ("PriorityWeightJobSize", priority.weight_job_size.to_string()),
        ("PriorityWeightPartition", priority.weight_partition.to_string()),
        ("PriorityWeightQOS", priority.weight_qos.to_string()),
        ("PrivateData", private_data(config.private_data)),
        ("ResumeTimeout", format!("{} sec", config.resume_timeout)),
        ("SchedulerType", "sched/backfill".to_owned()),
        ("SelectType", "select/cons_tres".to_owned()),
        ("SlurmctldHost[0]", controller),
        ("SlurmdTimeout", format!("{} sec", config.node_timeout)),
        ("SwitchType", "switch/none".to_owned()),
    ];
    Response::Config {
        now: drover_shared::now(),
        entries: entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    }
}

/// `PrivateData` as Slurm prints it: the values set, comma-separated, or `none`.
fn private_data(private: drover_shared::config::PrivateData) -> String {
    let set = [private.accounts, private.jobs, private.usage, private.users];
    let names: Vec<&str> =
        ["accounts", "jobs", "usage", "users"].into_iter().zip(set).filter(|(_, on)| *on).map(|(n, _)| n).collect();
    if names.is_empty() { "none".to_owned() } else { names.join(",") }
}

/// `sacctmgr ARGS…` from the configuration in force, for `caller` (known by uid; a uid without
/// a name is a plain user named by its number, who sees no one's private rows).
pub(super) fn sacctmgr(context: &ClientContext, caller: Caller, args: &[String]) -> Response {
    let viewer = if caller.uid == 0 {
        "root".to_owned()
    } else {
        user_name(caller.uid).unwrap_or_else(|| caller.uid.to_string())
    };
    match drover_shared::sacctmgr::listing(&context.config.get(), args, Some(&viewer)) {
        Ok(text) => Response::Listing { text },
        Err(detail) => Response::Error { code: ErrorCode::InvalidSpec, detail },
    }
}

/// Seconds as Slurm prints a configured duration: `D-HH:MM:SS`, `NONE` for 0.
fn days_clock(seconds: u64) -> String {
    if seconds == 0 {
        return "NONE".to_owned();
    }
    let (days, rest) = (seconds / 86400, seconds % 86400);
    format!("{days}-{:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_read_as_slurm_prints_them() {
        assert_eq!(super::days_clock(7 * 86400), "7-00:00:00");
        assert_eq!(super::days_clock(90061), "1-01:01:01");
        assert_eq!(super::days_clock(0), "NONE");
    }
}
