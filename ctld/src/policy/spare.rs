//! What a reclaim frees beyond its job's need, kept for its team: a victim of 8 GPUs preempted
//! for a 1-GPU job frees 7 more, and handed to borrowers they are preempted again (at age 0 under
//! `preempt_exempt_time = 0`) as soon as the team's next job arrives. So the spare part, at most
//! what the team is still owed, is held (`model::state::TeamHold`) until the reclaim's hold ends: the pass
//! takes it off the node views and lends it only to jobs of that team that may reclaim.

use crate::model::state::{Allocation, NodeAllocation, State};
use crate::model::tres::Tres;
use crate::policy::placement::NodeView;
use crate::policy::preempt::{Taken, give_back, take_free};
use crate::policy::quota::{Quotas, quota_of};
use drover_shared::UnixTime;
use drover_shared::config::Config;
use drover_shared::job::JobId;

/// The victims' shares less `alloc` (the reclaiming job's placement), with at most `cap` GPUs
/// (CPUs and memory in proportion to the GPUs kept on each node). `None` when nothing is spare.
pub(crate) fn spare_of(state: &State, victims: &[JobId], alloc: &Allocation, cap: u64) -> Option<Allocation> {
    let mut left = cap;
    let mut nodes: Vec<NodeAllocation> = Vec::new();
    for share in victims.iter().filter_map(|v| state.jobs.get(v)?.alloc.as_ref()).flat_map(|a| &a.nodes) {
        if left == 0 {
            break;
        }
        let mine = alloc.nodes.iter().find(|n| n.node == share.node);
        let gpus: Vec<u32> = share.gpus.iter().copied().filter(|g| mine.is_none_or(|m| !m.gpus.contains(g))).collect();
        if gpus.is_empty() {
            continue;
        }
        let kept: Vec<u32> = gpus.iter().copied().take(usize::try_from(left).unwrap_or(usize::MAX)).collect();
        left -= kept.len() as u64;
        let (cpus, mem_mb) = (
            share.cpus.saturating_sub(mine.map_or(0, |m| m.cpus)),
            share.mem_mb.saturating_sub(mine.map_or(0, |m| m.mem_mb)),
        );
        let (n, of) = (kept.len() as u64, gpus.len() as u64);
        let cpus = u32::try_from(u64::from(cpus) * n / of).unwrap_or(cpus);
        nodes.push(NodeAllocation { node: share.node.clone(), cpus, mem_mb: mem_mb * n / of, gpus: kept, tasks: 0 });
    }
    (!nodes.is_empty()).then_some(Allocation { nodes })
}

/// The GPUs a team may still be given before it reaches its guarantee: its guarantee of GPUs
/// minus what it holds minus what its job asked.
pub(crate) fn owed_gpus(state: &State, quotas: &Quotas, account: &str, partition: &str, asked: &Tres) -> u64 {
    owed(&state.config(), quotas, account, partition).saturating_sub(asked.get("gres/gpu").copied().unwrap_or(0))
}

/// The team's guarantee of GPUs in `partition` minus what it holds there.
fn owed(config: &Config, quotas: &Quotas, account: &str, partition: &str) -> u64 {
    let Some(q) = quota_of(config, account, partition) else { return 0 };
    let Some(guarantee) = config.quotas[q].guarantee.get("gres/gpu") else { return 0 };
    guarantee.saturating_sub(quotas.held(q).get("gres/gpu").copied().unwrap_or(0))
}

/// The pass's team holds: what each took on the node views, and which are lent to the job the
/// pass is placing.
pub(crate) struct TeamHolds {
    taken: Vec<Taken>,
    lent: Vec<usize>,
}

impl TeamHolds {
    /// Drops the holds past their deadline or of teams no longer owed a GPU, and takes what the
    /// others hold that is free on `views`.
    pub(crate) fn take(state: &mut State, quotas: &Quotas, views: &mut [NodeView], now: UnixTime) -> TeamHolds {
        let config = std::sync::Arc::clone(&state.config());
        state.team_holds.retain(|hold| hold.until >= now && owed(&config, quotas, &hold.account, &hold.partition) > 0);
        let taken = state.team_holds.iter().map(|h| take_free(views, &state.node_index(), &h.alloc)).collect();
        TeamHolds { taken, lent: Vec::new() }
    }

    /// Lends `job_id`'s team its holds in the partitions where the job may reclaim; returns the
    /// view indexes that changed.
    pub(crate) fn lend(
        &mut self,
        state: &State,
        quotas: &Quotas,
        views: &mut [NodeView],
        job_id: JobId,
        asked: &Tres,
    ) -> Vec<usize> {
        let job = &state.jobs[&job_id];
        let mut changed = Vec::new();
        // Holds made later in the pass (by its reclaims) are not taken until the next pass.
        for (k, hold) in state.team_holds.iter().enumerate().take(self.taken.len()) {
            let team = quota_of(&state.config(), &hold.account, &hold.partition);
            if team.is_some()
                && quota_of(&state.config(), &job.info.account, &hold.partition) == team
                && job.candidates.contains(&hold.partition)
                && quotas.may_reclaim(&state.config(), job, &hold.partition, asked)
            {
                give_back(views, &self.taken[k]);
                changed.extend(self.taken[k].iter().map(|(i, _)| *i));
                self.taken[k].clear();
                self.lent.push(k);
            }
        }
        changed
    }

    /// Takes back, after the job they were lent to, what of the lent holds is still free;
    /// returns the view indexes that changed.
    pub(crate) fn retake(&mut self, state: &State, views: &mut [NodeView]) -> Vec<usize> {
        let mut changed = Vec::new();
        for k in std::mem::take(&mut self.lent) {
            self.taken[k] = take_free(views, &state.node_index(), &state.team_holds[k].alloc);
            changed.extend(self.taken[k].iter().map(|(i, _)| *i));
        }
        changed
    }

    /// Whether a hold is lent now (the job may fit where jobs of its shape did not).
    pub(crate) fn lending(&self) -> bool {
        !self.lent.is_empty()
    }
}
