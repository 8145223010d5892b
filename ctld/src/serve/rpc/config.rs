//! `scontrol show config`: the parameters Drover has, under Slurm's names and in Slurm's units,
//! so that clients that read them (Snakemake reads `MaxArraySize` and `MinJobAge`) find them.
//! Parameters Drover has no counterpart for are left out rather than invented. And `sacctmgr`:
//! the accounts, users and QOS of the configuration ctld runs, as the caller may see them.

use super::ClientContext;
use crate::model::identity::{Caller, user_name};
use drover_shared::proto::client::{ErrorCode, Response};

pub(super) fn show(context: &ClientContext) -> Response {
    let config = context.config.get();
    let controller = config.controller_address.split(':').next().unwrap_or_default().to_owned();
    let entries = [
        ("ClusterName", config.cluster_name.clone()),
        ("JobRequeue", "1".to_owned()),
        ("KillWait", format!("{} sec", config.kill_wait)),
        ("MaxArraySize", crate::policy::array::MAX_ARRAY_SIZE.to_string()),
        ("MaxTasksPerNode", config.max_tasks_per_node.to_string()),
        ("MinJobAge", format!("{} sec", config.min_job_age)),
        ("PrivateData", private_data(config.private_data)),
        ("SlurmctldHost[0]", controller),
        ("SlurmdTimeout", format!("{} sec", config.node_timeout)),
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
