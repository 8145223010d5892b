//! `drover report` and `sreport`: usage rollups read on a connection of their own, off the core;
//! and the `PrivateData=usage` filter of those and of `sshare`'s rows. Without it (Slurm's
//! default) everyone may read the usage of every association; with it a plain user's answers
//! keep account rows but only their own user rows.

use super::context::ClientContext;
use crate::model::identity::Caller;
use crate::policy::authz::{Private, Who};
use drover_shared::proto::client::{ErrorCode, Response};
use drover_shared::proto::usage::UsageQuery;

/// Longest window one report may cover (two years of hours).
const MAX_WINDOW: i64 = 2 * 366 * 86_400;

/// The caller's user name when `PrivateData=usage` limits them to their own usage.
fn own_usage_only(context: &ClientContext, caller: Caller) -> Option<String> {
    let config = context.config.get();
    let limited = Who::of(&config, caller).limited_to_own(&config, Private::Usage);
    limited.then(|| crate::model::identity::user_name(caller.uid).unwrap_or_else(|| caller.uid.to_string()))
}

/// `sshare`'s answer (from the core) as the caller may see it.
pub(super) fn shares(context: &ClientContext, caller: Caller, mut answer: Response) -> Response {
    if let (Some(me), Response::Shares { rows, .. }) = (own_usage_only(context, caller), &mut answer) {
        rows.retain(|row| row.user.as_ref().is_none_or(|user| *user == me));
    }
    answer
}

pub(super) async fn query(context: &ClientContext, caller: Caller, query: UsageQuery) -> Response {
    if query.end <= query.start || query.end - query.start > MAX_WINDOW {
        return Response::Error {
            code: ErrorCode::InvalidSpec,
            detail: "the report window must be between 1 second and 2 years".into(),
        };
    }
    let path = context.db_path.clone();
    let config = context.config.get();
    match tokio::task::spawn_blocking(move || crate::store::accounting::query::report(&path, &config, &query)).await {
        Ok(Ok(mut report)) => {
            if let Some(me) = own_usage_only(context, caller) {
                report.hours.retain(|row| row.user == me);
                report.jobs.retain(|job| job.user == me);
                // Reclaims name other teams' jobs.
                report.reclaims.clear();
            }
            Response::Usage(Box::new(report))
        }
        Ok(Err(e)) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}
