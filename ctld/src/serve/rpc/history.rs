//! `drover node history NODE`'s request: a read of the node's history on a connection of its
//! own, off the core task. Anyone may read a node's state changes (as anyone may run
//! `sinfo -R`); under `PrivateData=jobs` a plain user sees only their own jobs' failures.

use super::context::ClientContext;
use crate::model::identity::Caller;
use crate::policy::authz::{Private, Who};
use drover_shared::proto::client::{ErrorCode, Response};

/// The most entries one answer holds.
pub(crate) const MAX_HISTORY: u32 = 10_000;

pub(super) async fn query(context: &ClientContext, caller: Caller, node: String, limit: u32) -> Response {
    let config = context.config.get();
    if !config.nodes.iter().any(|n| n.name == node) {
        return Response::Error { code: ErrorCode::InvalidNodeName, detail: format!("node {node} is not configured") };
    }
    let own_jobs_only = Who::of(&config, caller).limited_to_own(&config, Private::Jobs);
    let path = context.db_path.clone();
    let limit = limit.clamp(1, MAX_HISTORY);
    match tokio::task::spawn_blocking(move || crate::store::db::query_node_history(&path, &node, limit)).await {
        Ok(Ok(mut events)) => {
            if own_jobs_only {
                events.retain(|e| e.job_id.is_none() || e.uid == caller.uid);
            }
            Response::NodeHistory { events }
        }
        Ok(Err(e)) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}
