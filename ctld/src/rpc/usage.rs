//! `drover report` and `sreport`: usage rollups read on a connection of their own, off the core.
//! Like Slurm without `PrivateData`, everyone may read the usage of every association.

use super::ClientContext;
use drover_shared::proto::client::{ErrorCode, Response};
use drover_shared::proto::usage::UsageQuery;

/// Longest window one report may cover (two years of hours).
const MAX_WINDOW: i64 = 2 * 366 * 86_400;

pub(super) async fn query(context: &ClientContext, query: UsageQuery) -> Response {
    if query.end <= query.start || query.end - query.start > MAX_WINDOW {
        return Response::Error {
            code: ErrorCode::InvalidSpec,
            detail: "the report window must be between 1 second and 2 years".into(),
        };
    }
    let path = context.db_path.clone();
    let config = context.config.get();
    match tokio::task::spawn_blocking(move || crate::accounting::query::report(&path, &config, &query)).await {
        Ok(Ok(report)) => Response::Usage(Box::new(report)),
        Ok(Err(e)) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}
