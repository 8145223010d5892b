//! `drover why JOBID`: everything that keeps a job from running, where Slurm shows one reason —
//! its place in the queue of each partition, the limits it hits with their numbers, its team's
//! quota, what each node lacks, reclaims under way, and the planned start of its reservation.

use crate::model::request::PerNodeRequest;
use crate::model::state::{Job, State};
use crate::model::tres;
use crate::policy::backfill::Reservation;
use crate::policy::limits::Running;
use crate::policy::placement::NodeView;
use crate::policy::placement::eligible_nodes;
use crate::policy::priority::{self, Context};
use crate::policy::quota::{self, Quotas};
use drover_shared::UnixTime;
use drover_shared::job::{JobId, JobState};
use drover_shared::proto::client::{ErrorCode, Response};

fn when(now: UnixTime, at: UnixTime) -> String {
    let secs = (at - now).max(0);
    format!("in {}h{:02}m (unix time {at})", secs / 3600, secs % 3600 / 60)
}

/// What one node lacks for the job's first share, or `None` if the share fits now.
fn lacks(view: &NodeView, request: &PerNodeRequest, default_mem_per_cpu: Option<u64>) -> Option<String> {
    if !view.usable() {
        return Some("node is DOWN or not registered".into());
    }
    let mut missing = Vec::new();
    let cpus = if request.exclusive { view.cpus } else { request.cpus(0) };
    let free_cpus = view.cpus.saturating_sub(view.cpus_alloc);
    if cpus > free_cpus || (request.exclusive && view.cpus_alloc > 0) {
        missing.push(format!("CPUs {free_cpus} free of {}, job needs {cpus}", view.cpus));
    }
    let mem = request.mem_mb(cpus, view.real_memory_mb, default_mem_per_cpu);
    let free_mem = view.real_memory_mb.saturating_sub(view.mem_alloc_mb);
    if mem > free_mem {
        missing.push(format!("memory {free_mem}M free, job needs {mem}M"));
    }
    for (gpu_type, count) in &request.gpus {
        let free = view
            .gpus
            .iter()
            .filter(|g| !view.gpus_alloc.contains(&g.index))
            .filter(|g| gpu_type.as_ref().is_none_or(|t| t.eq_ignore_ascii_case(&g.gpu_type)))
            .count();
        if free < *count as usize {
            let what = gpu_type.as_deref().map_or("GPUs".to_owned(), |t| format!("{t} GPUs"));
            missing.push(format!("{what} {free} free, job needs {count}"));
        }
    }
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// The reservation a job holds: its nodes and what it holds on them, from when to when, and
/// since when the job has held a reservation (passes keep it while it holds).
fn reserved(reservation: &Reservation, now: UnixTime) -> String {
    let nodes: Vec<&str> = reservation.nodes().collect();
    let cpus: u32 = reservation.alloc.nodes.iter().map(|n| n.cpus).sum();
    let gpus: usize = reservation.alloc.nodes.iter().map(|n| n.gpus.len()).sum();
    let gpus = if gpus > 0 { format!(", {gpus} GPUs") } else { String::new() };
    format!(
        "backfill reservation: node(s) {} in partition {} ({cpus} CPUs{gpus}) from unix time {} to {}, held since unix time {} ({}s)",
        drover_shared::hostlist::compress(&nodes),
        reservation.partition,
        reservation.start,
        reservation.end,
        reservation.since,
        (now - reservation.since).max(0),
    )
}

fn pending(state: &State, job: &Job, now: UnixTime, lines: &mut Vec<String>) {
    let job_id = job.info.job_id;
    if job.spec.hold || job.info.priority == 0 {
        lines.push("held: release it with `scontrol release`".into());
        return;
    }
    if let Some(begin) = job.spec.begin_time.filter(|t| *t > now) {
        lines.push(format!("begin time not reached: eligible {}", when(now, begin)));
    }
    let mut lookup = crate::policy::dependency::Lookup::new(state);
    if let Err(reason) = crate::policy::dependency::eligibility(state, &mut lookup, job, now) {
        lines.push(format!("{reason}: dependency `{}`", job.info.dependency.clone().unwrap_or_default()));
    }
    let context = Context::new(state);
    let request = PerNodeRequest::from_spec(&job.spec);
    let asked = tres::of_request(&request);
    if let Err(limit) = Running::new(state).check(&state.config(), job, &asked) {
        lines.push(format!("{}: {}", limit.reason, limit.detail));
    }
    let views: Vec<NodeView> = state.nodes().iter().map(NodeView::from).collect();
    let quotas = Quotas::new(state);
    for name in job.candidates.iter() {
        let Some(partition) = state.config().partitions.iter().find(|p| &p.name == name) else { continue };
        let f = context.factors(state, job, partition, now);
        let value = priority::priority(&context.config, &f, job.info.nice);
        let ahead: Vec<JobId> = state
            .jobs
            .values()
            .filter(|j| j.committed && j.info.state() == JobState::Pending && j.info.job_id != job_id)
            .filter(|j| j.candidates.contains(name) && j.info.priority > 0)
            .filter(|j| {
                (j.info.priority, std::cmp::Reverse(j.info.job_id)) > (job.info.priority, std::cmp::Reverse(job_id))
            })
            .map(|j| j.info.job_id)
            .collect();
        let shown: Vec<String> = ahead.iter().take(5).map(ToString::to_string).collect();
        let more = if ahead.len() > 5 { ", …" } else { "" };
        lines.push(format!(
            "partition {name}: priority {value} (age {:.0}, fairshare {:.0}, jobsize {:.0}, partition {:.0}, qos {:.0}, nice {}); {} pending job(s) ahead{}",
            f64::from(context.config.weight_age) * f.age,
            f64::from(context.config.weight_fairshare) * f.fairshare,
            f64::from(context.config.weight_job_size) * f.job_size,
            f64::from(context.config.weight_partition) * f.partition,
            f64::from(context.config.weight_qos) * f.qos,
            job.info.nice,
            ahead.len(),
            if ahead.is_empty() { String::new() } else { format!(": {}{more}", shown.join(", ")) }
        ));
        if let Some(max) = partition.max_nodes.filter(|max| request.n_nodes > *max) {
            lines.push(format!(
                "partition {name}: PartitionNodeLimit: job asks {} nodes, MaxNodes={max}",
                request.n_nodes
            ));
        }
        match quotas.check(state, &quota::PoolFree::new(state, &views), job, partition, &asked) {
            Err(limit) => lines.push(format!("partition {name}: {}: {}", limit.reason, limit.detail)),
            Ok(true) => {
                lines.push(format!("partition {name}: would borrow (beyond its team's guarantee; preemptible)"))
            }
            Ok(false) if quota::quota_of(&state.config(), &job.info.account, name).is_some() => {
                lines.push(format!("partition {name}: inside its team's guarantee; may reclaim borrowed GPUs"));
            }
            Ok(false) => {}
        }
        for i in eligible_nodes(state, job, partition) {
            if let Some(missing) = lacks(&views[i], &request, partition.default_mem_per_cpu) {
                lines.push(format!("  node {}: {missing}", views[i].name));
            }
        }
    }
    let victims: Vec<String> =
        state.preempting.iter().filter(|(_, f)| **f == job_id).map(|(v, _)| v.to_string()).collect();
    if !victims.is_empty() {
        lines.push(format!("reclaim under way: preempting borrowed job(s) {}", victims.join(", ")));
    }
    match state.reservations.get(&job_id) {
        Some(reservation) => {
            lines.push(reserved(reservation, now));
            lines.push(format!("estimated start: {} (backfill reservation)", when(now, reservation.start)));
        }
        None => lines.push(
            "estimated start: unknown (no reservation: not among the top blocked jobs, or blocked by a limit)".into(),
        ),
    }
}

/// The explanation of one job.
pub(crate) fn explain(state: &State, job_id: JobId, now: UnixTime) -> Response {
    let Some(job) = state.jobs.get(&job_id).filter(|j| j.committed) else {
        return Response::Error { code: ErrorCode::InvalidJobId, detail: format!("job {job_id}") };
    };
    let mut lines = vec![format!("job {job_id} is {}, Reason={}", job.info.state().long_name(), job.info.reason)];
    match job.info.state() {
        JobState::Pending => pending(state, job, now, &mut lines),
        JobState::Running => {
            let quotas = Quotas::new(state);
            if quotas.borrowed.contains(&job_id) {
                lines.push(format!(
                    "runs on borrowed capacity in partition {}: it may be preempted",
                    job.info.partition
                ));
            } else if quota::quota_of(&state.config(), &job.info.account, &job.info.partition).is_some() {
                lines.push(format!(
                    "runs inside its team's guarantee in partition {}: never preempted",
                    job.info.partition
                ));
            }
            if let Some(for_job) = state.preempting.get(&job_id) {
                lines.push(format!("being preempted to reclaim a guarantee for job {for_job}"));
            }
        }
        _ => {}
    }
    Response::Explanation { job_id, lines }
}
