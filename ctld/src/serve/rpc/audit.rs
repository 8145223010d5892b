//! `drover audit`'s request: a read of the audit table on a connection of its own, off the core
//! task. Operators and admins see every record; a user sees only the records of their own
//! requests, whatever filters they send.

use super::context::ClientContext;
use crate::model::identity::Caller;
use crate::policy::authz::{Operation, Who};
use drover_shared::proto::client::{AuditQuery, ErrorCode, Response};

pub(super) async fn query(context: &ClientContext, caller: Caller, mut query: AuditQuery) -> Response {
    if !Who::of(&context.config.get(), caller).may(Operation::ReadAll) {
        if query.uids.iter().any(|u| *u != caller.uid) {
            return Response::Error {
                code: ErrorCode::AccessDenied,
                detail: "only operators and admins may read other users' audit records".into(),
            };
        }
        query.uids = vec![caller.uid];
    }
    let path = context.db_path.clone();
    match tokio::task::spawn_blocking(move || crate::store::db::query_audit(&path, &query)).await {
        Ok(Ok(rows)) => Response::Audit { rows },
        Ok(Err(e)) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}
