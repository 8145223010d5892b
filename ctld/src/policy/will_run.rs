//! `sbatch --test-only`: where and when a job would start if it were submitted now. The job is
//! validated exactly as a submission, then placed on the nodes as they are (start now) or, if it
//! does not fit, on the nodes as the running jobs' time limits free them (the backfill timeline).
//! Pending jobs are not taken into account, as Slurm's own estimate does not either; nothing is
//! stored and the job id is only previewed.

use crate::model::request::PerNodeRequest;
use crate::model::state::{Job, State};
use crate::policy::backfill::{Reservations, Timeline, time_limit_secs};
use crate::policy::placement::{NodeView, eligible_nodes, place};
use drover_shared::UnixTime;
use drover_shared::proto::client::{ErrorCode, Response};
use std::collections::HashSet;

/// The planned start of `job` (already validated) over its candidate partitions: the earliest.
pub(crate) fn estimate(state: &State, job: &Job, job_id: drover_shared::job::JobId, now: UnixTime) -> Response {
    let earliest_begin = job.spec.begin_time.unwrap_or(now).max(now);
    let views: Vec<NodeView> = state.nodes().iter().map(NodeView::from).collect();
    let request = PerNodeRequest::from_spec(&job.spec);
    let mut timeline = Timeline::new(state, now);
    let mut best: Option<(UnixTime, Vec<String>, u32, String)> = None;
    for name in job.candidates.iter() {
        let Some(partition) = state.config().partitions.iter().find(|p| &p.name == name) else { continue };
        if partition.max_nodes.is_some_and(|max| request.n_nodes > max) {
            continue;
        }
        let nodes = eligible_nodes(state, job, partition);
        let found = match place(&views, nodes.iter().copied(), &HashSet::new(), partition, &request) {
            Some(alloc) => Some((now, alloc.nodes)),
            None => {
                let limit = time_limit_secs(job, partition);
                let none = Reservations::default();
                let found = timeline.earliest(&views, &nodes, partition, &request, &none, limit, None);
                found.map(|(start, alloc)| (start, alloc.nodes))
            }
        };
        let Some((start, shares)) = found else { continue };
        let start = start.max(earliest_begin);
        if best.as_ref().is_none_or(|(b, ..)| start < *b) {
            let cpus = shares.iter().map(|s| s.cpus).sum();
            let names = shares.into_iter().map(|s| s.node).collect();
            best = Some((start, names, cpus, name.clone()));
        }
    }
    match best {
        Some((start, nodes, cpus, partition)) => Response::WillRun { job_id, start, cpus, nodes, partition },
        None => Response::Error {
            code: ErrorCode::StepsBusy,
            detail: "no node of the job's partitions can take it (nodes down or not registered)".into(),
        },
    }
}
