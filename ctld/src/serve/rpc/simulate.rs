//! `drover simulate`: operators and admins only (a replay of a week can take a core for tens of
//! seconds), one at a time, on a blocking thread off the core within a wall-clock budget. The
//! candidate config arrives as text and is validated here; a bad one is refused with the
//! loader's `file:line:column` message.

use super::context::ClientContext;
use crate::model::identity::Caller;
use crate::policy::authz::{Operation, Who};
use drover_shared::config::Config;
use drover_shared::proto::client::{ErrorCode, Response};
use drover_shared::proto::simulate::SimulateRequest;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Wall-clock time one simulation (both runs) may take.
const BUDGET: Duration = Duration::from_secs(300);
/// The longest candidate config accepted.
const MAX_CONFIG_BYTES: usize = 4 << 20;
/// The most nodes a candidate may declare (a replay holds every node and views them each pass).
const MAX_NODES: usize = 100_000;

/// Set while a simulation runs.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Clears [`RUNNING`] when the simulation ends, however it ends.
struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.store(false, Ordering::Release);
    }
}

pub(super) async fn simulate(context: &ClientContext, caller: Caller, request: SimulateRequest) -> Response {
    let error = |code, detail: String| Response::Error { code, detail };
    let current = context.config.get();
    if !Who::of(&current, caller).may(Operation::Simulate) {
        return error(ErrorCode::AccessDenied, "drover simulate is for operators and admins".into());
    }
    if request.config_text.len() > MAX_CONFIG_BYTES {
        return error(ErrorCode::InvalidSpec, format!("the candidate config is over {} MiB", MAX_CONFIG_BYTES >> 20));
    }
    // The candidate file with sacctmgr's changes over it, as a reconfigure would run it.
    let candidate = match Config::parse(Path::new(&request.config_path), &request.config_text)
        .map_err(|e| e.to_string())
        .and_then(|file| drover_shared::sacctmgr::edit::overlay(&file, &context.config.edits()))
    {
        Ok(config) => Arc::new(config),
        Err(e) => return error(ErrorCode::InvalidSpec, format!("candidate config: {e}")),
    };
    if candidate.nodes.len() > MAX_NODES {
        let detail = format!(
            "the candidate config declares {} nodes; a simulation takes at most {MAX_NODES}",
            candidate.nodes.len()
        );
        return error(ErrorCode::InvalidSpec, detail);
    }
    if let Err(refusal) = crate::core::simulate::window(&request, drover_shared::now()) {
        return error(refusal.code, refusal.detail);
    }
    if RUNNING.swap(true, Ordering::AcqRel) {
        return error(ErrorCode::InvalidSpec, "another simulation is running; try again when it is done".into());
    }
    let guard = Running;
    let path = context.db_path.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let _guard = guard;
        crate::core::simulate::run(&path, current, candidate, &request, drover_shared::now(), BUDGET)
    })
    .await;
    match answer {
        Ok(Ok(report)) => Response::Simulated(Box::new(report)),
        Ok(Err(refusal)) => error(refusal.code, refusal.detail),
        Err(e) => error(ErrorCode::Internal, e.to_string()),
    }
}
