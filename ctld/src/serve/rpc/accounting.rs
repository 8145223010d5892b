//! `sacct`'s request: a read of the accounting database on a connection of its own, off the core
//! task, so a large history query never delays scheduling or submissions. Under
//! `PrivateData=jobs` a plain user reads only their own jobs' records and usage.

use super::context::ClientContext;
use crate::model::identity::Caller;
use crate::policy::authz::{Operation, Private, Who};
use drover_shared::job::JobId;
use drover_shared::proto::client::{AccountingQuery, ErrorCode, Response};

/// Whether the caller may see job `job_id`: always, unless `PrivateData=jobs` limits them to
/// their own jobs and the job (live or in the database) is another user's or does not exist.
pub(super) fn owns(context: &ClientContext, caller: Caller, job_id: JobId) -> bool {
    if limited_to(context, caller).is_none() {
        return true;
    }
    let snapshot = context.jobs.borrow().clone();
    snapshot.owner(job_id).is_some_and(|uid| uid == caller.uid)
}

/// `sprio`'s answer (from the core) as the caller may see it: under `PrivateData=jobs` only
/// their own jobs' rows.
pub(super) fn priorities(context: &ClientContext, caller: Caller, mut answer: Response) -> Response {
    if limited_to(context, caller).is_some()
        && let Response::Priorities { rows, .. } = &mut answer
    {
        let me = crate::model::identity::user_name(caller.uid).unwrap_or_else(|| caller.uid.to_string());
        rows.retain(|row| row.user == me);
    }
    answer
}

/// `job_ids` less those `PrivateData=jobs` hides from the caller: `limited_to` is the caller's
/// uid when it applies. Reads the database, so it runs off the async tasks.
fn visible_ids(path: &std::path::Path, limited_to: Option<u32>, job_ids: Vec<JobId>) -> Result<Vec<JobId>, String> {
    let Some(uid) = limited_to.filter(|_| !job_ids.is_empty()) else { return Ok(job_ids) };
    let query = AccountingQuery { job_ids, users: vec![uid], ..AccountingQuery::default() };
    let own = crate::store::db::query_accounting(path, &query).map_err(|e| e.to_string())?;
    let mut ids: Vec<JobId> = own.iter().map(|job| job.job_id).collect();
    ids.sort_unstable();
    ids.dedup();
    Ok(query.job_ids.into_iter().filter(|id| ids.binary_search(id).is_ok()).collect())
}

/// The caller's uid when `PrivateData=jobs` limits them to their own jobs.
fn limited_to(context: &ClientContext, caller: Caller) -> Option<u32> {
    let config = context.config.get();
    Who::of(&config, caller).limited_to_own(&config, Private::Jobs).then_some(caller.uid)
}

/// `sacct`'s usage fields: read like the accounting records (everyone may read them, as Slurm
/// without `PrivateData`).
pub(super) async fn usage(context: &ClientContext, caller: Caller, job_ids: Vec<JobId>) -> Response {
    read_usage(context, caller, job_ids, crate::store::db::query_job_usage, |usage| Response::JobUsage { usage }).await
}

/// `sacct`'s usage fields of srun steps.
pub(super) async fn step_usage(context: &ClientContext, caller: Caller, job_ids: Vec<JobId>) -> Response {
    read_usage(context, caller, job_ids, crate::store::db::query_step_usage, |usage| Response::StepUsage { usage })
        .await
}

/// Reads the usage of the jobs of `job_ids` the caller may see with `read`, off the async tasks.
async fn read_usage<T: Send + 'static>(
    context: &ClientContext,
    caller: Caller,
    job_ids: Vec<JobId>,
    read: fn(&std::path::Path, &[JobId]) -> Result<T, crate::store::db::DbError>,
    answer: fn(T) -> Response,
) -> Response {
    let (path, limited) = (context.db_path.clone(), limited_to(context, caller));
    let work = move || {
        let job_ids = visible_ids(&path, limited, job_ids)?;
        read(&path, &job_ids).map_err(|e| e.to_string())
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(usage)) => answer(usage),
        Ok(Err(detail)) => Response::Error { code: ErrorCode::Internal, detail },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}

pub(super) async fn query(context: &ClientContext, caller: Caller, mut query: AccountingQuery) -> Response {
    // Like Slurm without PrivateData: everyone may read all jobs with -a; by default a user sees
    // their own, and operators and admins see everyone's. With `PrivateData=jobs` a user sees
    // only their own, whatever they ask.
    if limited_to(context, caller).is_some() {
        if !(query.users.is_empty() || query.users.contains(&caller.uid)) {
            return Response::Accounting { now: drover_shared::now(), jobs: Vec::new() };
        }
        query.users = vec![caller.uid];
        query.all_users = false;
    }
    if query.users.is_empty()
        && !query.all_users
        && query.job_ids.is_empty()
        && !Who::of(&context.config.get(), caller).may(Operation::ReadAll)
    {
        query.users.push(caller.uid);
    }
    let path = context.db_path.clone();
    match tokio::task::spawn_blocking(move || {
        crate::store::runs::query(&path, &query, |q| crate::store::db::query_accounting(&path, q))
    })
    .await
    {
        Ok(Ok(jobs)) => Response::Accounting { now: drover_shared::now(), jobs },
        Ok(Err(e)) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
        Err(e) => Response::Error { code: ErrorCode::Internal, detail: e.to_string() },
    }
}
