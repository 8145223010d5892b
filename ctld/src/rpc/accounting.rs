//! `sacct`'s request: a read of the accounting database on a connection of its own, off the core
//! task, so a large history query never delays scheduling or submissions.

use super::ClientContext;
use crate::validate::{Caller, is_admin};
use drover_shared::proto::client::{AccountingQuery, ErrorCode, Response};

pub(super) async fn query(context: &ClientContext, caller: Caller, mut query: AccountingQuery) -> Response {
    // Like Slurm without PrivateData: everyone may read all jobs with -a; by default a user sees
    // their own, and an admin sees everyone's.
    if query.users.is_empty() && !query.all_users && query.job_ids.is_empty() && !is_admin(&context.config, caller.uid)
    {
        query.users.push(caller.uid);
    }
    let path = context.db_path.clone();
    match tokio::task::spawn_blocking(move || crate::db::query_accounting(&path, &query)).await {
        Ok(Ok(jobs)) => Response::Accounting { now: drover_shared::now(), jobs },
        Ok(Err(e)) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}
