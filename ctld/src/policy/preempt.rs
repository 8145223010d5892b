//! Choosing preemption victims to reclaim a guarantee: only borrowed jobs of other teams on the
//! pool's nodes, least fair share first and recently started last, added until the owner's job
//! fits, then pruned so that no victim is preempted whose resources are not needed.

use crate::model::request::PerNodeRequest;
use crate::model::state::{Allocation, State};
use crate::policy::backfill::NodeView;
use crate::policy::scheduler::place;
use drover_shared::config::PartitionConfig;
use drover_shared::job::JobId;
use std::collections::{HashMap, HashSet};

/// The warning a job asked for with `--signal=[{R|B}:]<sig>[@<seconds>]`: signal number, batch
/// shell only, seconds of lead (Slurm's default 60). Preemption sends it and cancels the job
/// after the lead time, instead of cancelling at once.
pub(crate) fn warning(value: &str) -> Option<(i32, bool, u32)> {
    let (flags, rest) = value.split_once(':').unwrap_or(("", value));
    let batch_only = flags.chars().any(|f| f.eq_ignore_ascii_case(&'b'));
    let (name, lead) = match rest.split_once('@') {
        Some((name, lead)) => (name, lead.parse().ok()?),
        None => (rest, 60),
    };
    let signal = match name.parse::<i32>() {
        Ok(number) => nix::sys::signal::Signal::try_from(number).ok()?,
        Err(_) => {
            let upper = name.to_ascii_uppercase();
            let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
            full.parse::<nix::sys::signal::Signal>().ok()?
        }
    };
    Some((signal as i32, batch_only, lead))
}

fn release(views: &mut [NodeView], state: &State, job_id: JobId) {
    let Some(alloc) = state.jobs.get(&job_id).and_then(|j| j.alloc.as_ref()) else { return };
    for share in &alloc.nodes {
        if let Some(&i) = state.node_index.get(&share.node) {
            let view = &mut views[i];
            view.cpus_alloc = view.cpus_alloc.saturating_sub(share.cpus);
            view.mem_alloc_mb = view.mem_alloc_mb.saturating_sub(share.mem_mb);
            view.gpus_alloc.retain(|g| !share.gpus.contains(g));
        }
    }
}

/// Picks the victims for job `for_job`, which may reclaim. `Some((victims, placement))`:
/// preempting `victims` (possibly none, when its preemptions under way are enough) lets it run
/// on `placement`; `None`: no set of borrowed jobs makes room.
#[allow(clippy::too_many_arguments)]
pub(crate) fn choose(
    state: &State,
    views: &[NodeView],
    nodes: &[usize],
    partition: &PartitionConfig,
    request: &PerNodeRequest,
    candidates: &[JobId],
    fairshare: &HashMap<(String, String), f64>,
    for_job: JobId,
) -> Option<(Vec<JobId>, Allocation)> {
    let mut base = views.to_vec();
    for (victim, _) in state.preempting.iter().filter(|(_, f)| **f == for_job) {
        release(&mut base, state, *victim);
    }
    let none = HashSet::new();
    if let Some(alloc) = place(&base, nodes.iter().copied(), &none, partition, request) {
        return Some((Vec::new(), alloc));
    }
    let mut order: Vec<JobId> = candidates.iter().copied().filter(|j| !state.preempting.contains_key(j)).collect();
    let key = |job_id: &JobId| {
        let info = &state.jobs[job_id].info;
        (fairshare.get(&(info.account.clone(), info.user.clone())).copied().unwrap_or(0.0), info.start_time, *job_id)
    };
    order.sort_by(|a, b| key(a).partial_cmp(&key(b)).unwrap_or(std::cmp::Ordering::Equal));
    let mut chosen = Vec::new();
    let mut trial = base.clone();
    let mut fits = false;
    for victim in order {
        release(&mut trial, state, victim);
        chosen.push(victim);
        if place(&trial, nodes.iter().copied(), &none, partition, request).is_some() {
            fits = true;
            break;
        }
    }
    if !fits {
        return None;
    }
    // Prune: drop every victim the job fits without, latest-added first.
    let mut k = chosen.len();
    while k > 0 {
        k -= 1;
        let without: Vec<JobId> = chosen.iter().enumerate().filter(|(i, _)| *i != k).map(|(_, j)| *j).collect();
        let mut trial = base.clone();
        for victim in &without {
            release(&mut trial, state, *victim);
        }
        if place(&trial, nodes.iter().copied(), &none, partition, request).is_some() {
            chosen = without;
        }
    }
    let mut trial = base;
    for victim in &chosen {
        release(&mut trial, state, *victim);
    }
    let alloc = place(&trial, nodes.iter().copied(), &none, partition, request)?;
    Some((chosen, alloc))
}

#[cfg(test)]
mod tests {
    #[test]
    fn signal_warnings_parse() {
        let cases = [
            ("USR1@30", Some((10, false, 30))),
            ("B:TERM", Some((15, true, 60))),
            ("12@5", Some((12, false, 5))),
            ("NOPE", None),
        ];
        for (text, expected) in cases {
            assert_eq!(super::warning(text), expected, "{text}");
        }
    }
}
