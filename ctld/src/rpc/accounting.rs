//! `sacct`'s request: a read of the accounting database on a connection of its own, off the core
//! task, so a large history query never delays scheduling or submissions.

use super::ClientContext;
use crate::authz::{Operation, Who};
use crate::validate::Caller;
use drover_shared::proto::client::{AccountingQuery, ErrorCode, Response};

/// `sacct`'s usage fields: read like the accounting records (everyone may read them, as Slurm
/// without `PrivateData`).
pub(super) async fn usage(context: &ClientContext, job_ids: Vec<drover_shared::job::JobId>) -> Response {
    let path = context.db_path.clone();
    match tokio::task::spawn_blocking(move || crate::db::query_job_usage(&path, &job_ids)).await {
        Ok(Ok(usage)) => Response::JobUsage { usage },
        Ok(Err(e)) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}

/// `sacct`'s usage fields of srun steps.
pub(super) async fn step_usage(context: &ClientContext, job_ids: Vec<drover_shared::job::JobId>) -> Response {
    let path = context.db_path.clone();
    match tokio::task::spawn_blocking(move || crate::db::query_step_usage(&path, &job_ids)).await {
        Ok(Ok(usage)) => Response::StepUsage { usage },
        Ok(Err(e)) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}

pub(super) async fn query(context: &ClientContext, caller: Caller, mut query: AccountingQuery) -> Response {
    // Like Slurm without PrivateData: everyone may read all jobs with -a; by default a user sees
    // their own, and operators and admins see everyone's.
    if query.users.is_empty()
        && !query.all_users
        && query.job_ids.is_empty()
        && !Who::of(&context.config.get(), caller).may(Operation::ReadAll)
    {
        query.users.push(caller.uid);
    }
    let path = context.db_path.clone();
    match tokio::task::spawn_blocking(move || {
        crate::runs::query(&path, &query, |q| crate::db::query_accounting(&path, q))
    })
    .await
    {
        Ok(Ok(jobs)) => Response::Accounting { now: drover_shared::now(), jobs },
        Ok(Err(e)) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}
