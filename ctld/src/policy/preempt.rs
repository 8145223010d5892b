//! Reclaiming a guarantee: how much a team is owed, which running jobs may be preempted for it,
//! and the victim set that frees enough with the least waste.
//!
//! A team is owed its guarantee minus what it runs minus what is already being freed for it
//! (victims in their grace time count as freed). Victims are borrowed jobs of other teams on the
//! pool's nodes that have run at least `preempt_exempt_time`, and never so many of one team that
//! it would fall below its own guarantee. Of the sets that make the job fit, the one preempting
//! the fewest GPUs (CPUs for a job without GPUs) wins, then the one losing the least work
//! (resources × time run: the most recently started), then the lowest priority. What the victims
//! free is kept for the reclaiming job ([`Hold`]) until it starts or the hold's deadline passes,
//! and several reclaiming jobs of one pass share one [`Planner`], so what is freed for one is not
//! freed again for another.

use crate::model::request::PerNodeRequest;
use crate::model::state::{Allocation, Hold, NodeAllocation, State};
use crate::model::tres::{self, Tres};
use crate::policy::placement::{NodeView, place};
use crate::policy::quota::{Quotas, quota_of};
use drover_shared::UnixTime;
use drover_shared::config::PartitionConfig;
use drover_shared::job::JobId;
use std::collections::{BTreeMap, HashMap, HashSet};

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
        if let Some(&i) = state.node_index().get(&share.node) {
            views[i].release(share);
        }
    }
}

/// What of a hold was taken on a set of node views (view index, the part taken there), so that
/// exactly that can be given back.
pub(crate) type Taken = Vec<(usize, NodeAllocation)>;

/// Takes what of `alloc` is free on `views`.
pub(crate) fn take_free(
    views: &mut [NodeView],
    node_index: &crate::model::state::NodeIndex,
    alloc: &Allocation,
) -> Taken {
    let mut taken = Vec::new();
    for share in &alloc.nodes {
        let Some(&i) = node_index.get(&share.node) else { continue };
        let view = &mut views[i];
        let part = NodeAllocation {
            node: share.node.clone(),
            cpus: share.cpus.min(view.cpus.saturating_sub(view.cpus_alloc)),
            mem_mb: share.mem_mb.min(view.real_memory_mb.saturating_sub(view.mem_alloc_mb)),
            gpus: share.gpus.iter().copied().filter(|g| !view.gpus_alloc.contains(g)).collect(),
            tasks: 0,
        };
        view.take(&part);
        taken.push((i, part));
    }
    taken
}

/// Gives back what [`take_free`] took.
pub(crate) fn give_back(views: &mut [NodeView], taken: &Taken) {
    for (i, part) in taken {
        views[*i].release(part);
    }
}

/// How a preempted job is stopped: requeued (else it ends `PREEMPTED`; a QOS with
/// `preempt_mode = "cancel"` or the job's `--no-requeue`), the grace between its SIGTERM and
/// SIGKILL (its QOS's `grace_time`, else the controller's `kill_wait`), and the `--signal`
/// warning (signal, batch shell only, lead seconds) it is sent first when it asked for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Manner {
    pub(crate) requeue: bool,
    pub(crate) grace: u32,
    pub(crate) warning: Option<(i32, bool, u32)>,
}

/// How `victim` is preempted; `None` when it is no longer known.
pub(crate) fn manner(state: &State, victim: JobId) -> Option<Manner> {
    let job = state.jobs.get(&victim)?;
    let qos = state.config().qos.iter().find(|q| q.name == job.info.qos);
    Some(Manner {
        requeue: qos.is_none_or(|q| q.preempt_requeue) && job.info.requeue,
        grace: qos.and_then(|q| q.grace_time).unwrap_or(state.config().kill_wait),
        warning: job.spec.signal.as_deref().and_then(warning),
    })
}

/// Seconds from a victim's preemption until it is gone: its `--signal` lead, then its QOS's
/// grace time (else the controller's `kill_wait`).
pub(crate) fn grace_secs(state: &State, victim: JobId) -> i64 {
    let Some(Manner { grace, warning, .. }) = manner(state, victim) else { return 0 };
    let lead = warning.map_or(0, |(_, _, lead)| lead);
    i64::from(grace) + i64::from(lead)
}

/// How long a hold outlives its victims' grace: time for the nodes to report the ends.
pub(crate) const HOLD_MARGIN: i64 = 30;

fn get(tres: &Tres, name: &str) -> u64 {
    tres.get(name).copied().unwrap_or(0)
}

/// A running job that may be preempted, with what its loss costs.
struct Candidate {
    job_id: JobId,
    /// Its team's quota in the pool (`None`: a team without one, never protected).
    team: Option<usize>,
    tres: Tres,
    /// GPUs it holds, and CPUs.
    gpus: u64,
    cpus: u64,
    /// Resource-seconds it has run: what its preemption throws away.
    lost: u64,
    priority: u32,
}

/// The cost of preempting a set: resources beyond the need (GPUs, or CPUs for a job without
/// GPUs), then work lost, then priority. Lower is better.
type Cost = (u64, u64, u64);

/// The reclaim bookkeeping of one scheduling pass, shared by every reclaiming job in it.
pub(crate) struct Planner {
    /// Node capacity with every victim under way released and the holds of reclaiming jobs taken.
    view: Vec<NodeView>,
    /// What each reclaiming job's hold took on `view`.
    held: HashMap<JobId, Taken>,
    /// Per quota: what its team may still lose before it falls below its guarantee (held minus
    /// being preempted minus guarantee), per TRES the guarantee names.
    spare: Vec<BTreeMap<String, i64>>,
    /// Per quota: TRES being freed for its team's jobs (victims in their grace time).
    freeing: Vec<Tres>,
    /// Per (quota, partition): the jobs that may be preempted for that team there, found once
    /// per pass (those chosen since are skipped).
    pools: HashMap<(usize, String), Pool>,
}

/// The candidates for one team's reclaims in one partition, and where they run.
struct Pool {
    candidates: Vec<Candidate>,
    /// View index → the candidates on that node and the GPUs each holds there.
    on_node: HashMap<usize, Vec<(usize, u64)>>,
}

impl Planner {
    /// `views`: the pass's node views; `main_holds`: the holds taken on them.
    pub(crate) fn new(
        state: &State,
        views: &[NodeView],
        main_holds: &HashMap<JobId, Taken>,
        quotas: &Quotas,
    ) -> Planner {
        let config = &state.config();
        let mut view = views.to_vec();
        for taken in main_holds.values() {
            give_back(&mut view, taken);
        }
        #[allow(clippy::cast_possible_wrap)]
        let mut spare: Vec<BTreeMap<String, i64>> = config
            .quotas
            .iter()
            .enumerate()
            .map(|(q, quota)| {
                quota
                    .guarantee
                    .iter()
                    .map(|(name, g)| (name.clone(), get(quotas.held(q), name) as i64 - *g as i64))
                    .collect()
            })
            .collect();
        let mut freeing = vec![Tres::new(); config.quotas.len()];
        let mut dying: Vec<(&JobId, &JobId)> = state.preempting.iter().collect();
        dying.sort_unstable();
        for (victim, for_job) in dying {
            let Some(job) = state.jobs.get(victim).filter(|j| j.alloc.is_some()) else { continue };
            release(&mut view, state, *victim);
            let tres = tres::of_job(state, job);
            let pool = &job.info.partition;
            if let Some(q) = quota_of(config, &job.info.account, pool) {
                lose(&mut spare[q], &tres);
            }
            if let Some(q) = state.jobs.get(for_job).and_then(|f| quota_of(config, &f.info.account, pool)) {
                tres::add(&mut freeing[q], &tres);
            }
        }
        let mut holds: Vec<(&JobId, &Hold)> = state.reclaim_holds.iter().collect();
        holds.sort_unstable_by_key(|(j, _)| **j);
        let held = holds.into_iter().map(|(j, h)| (*j, take_free(&mut view, &state.node_index(), &h.alloc))).collect();
        Planner { view, held, spare, freeing, pools: HashMap::new() }
    }

    /// A job started in the pass: it takes its allocation here too.
    pub(crate) fn started(&mut self, state: &State, alloc: &Allocation) {
        take_free(&mut self.view, &state.node_index(), alloc);
    }

    /// Plans a reclaim for `job_id`, a job of the team of quota `own` asking `asked` (inside
    /// what is left of that team's guarantee) on `nodes` of the pool `partition`.
    /// `Some((victims, placement))`: preempting `victims` (none when what is already free or
    /// being freed is enough) lets it run on `placement`, which is now kept for it; `None`:
    /// nothing may be preempted that makes room.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan(
        &mut self,
        state: &State,
        quotas: &Quotas,
        own: usize,
        partition: &PartitionConfig,
        nodes: &[usize],
        request: &PerNodeRequest,
        asked: &Tres,
        job_id: JobId,
        now: UnixTime,
    ) -> Option<(Vec<JobId>, Allocation)> {
        if let Some(taken) = self.held.remove(&job_id) {
            give_back(&mut self.view, &taken);
        }
        // What is free or being freed: the nodes of its own victims first.
        let own_nodes: HashSet<&str> = state
            .preempting
            .iter()
            .filter(|(_, f)| **f == job_id)
            .filter_map(|(v, _)| state.jobs.get(v)?.alloc.as_ref())
            .flat_map(|a| a.nodes.iter().map(|n| n.node.as_str()))
            .collect();
        let (mut ordered, rest): (Vec<usize>, Vec<usize>) =
            nodes.iter().partition(|&&i| own_nodes.contains(self.view[i].name.as_str()));
        ordered.extend(rest);
        let none = HashSet::new();
        if let Some(alloc) = place(&self.view, ordered.iter().copied(), &none, partition, request) {
            self.held.insert(job_id, take_free(&mut self.view, &state.node_index(), &alloc));
            return Some((Vec::new(), alloc));
        }
        // Owed: its guarantee minus what its team runs minus what is being freed for it.
        let guarantee = &state.config().quotas[own].guarantee;
        let owed = guarantee
            .iter()
            .all(|(name, g)| get(quotas.held(own), name) + get(&self.freeing[own], name) + get(asked, name) <= *g);
        if !owed {
            return None;
        }
        let key = (own, partition.name.clone());
        let pool = match self.pools.remove(&key) {
            Some(pool) => pool,
            None => Self::pool(state, quotas, own, partition, now),
        };
        let by_gpus = request.n_gpus() > 0;
        let chosen = self.choose(state, &pool, nodes, partition, request, by_gpus);
        let result = chosen.and_then(|victims| {
            self.commit(state, &pool.candidates, victims, own, &ordered, partition, request, job_id)
        });
        self.pools.insert(key, pool);
        result
    }

    /// Preempts `victims` (indexes into `candidates`) on the planner's view and places the job
    /// on what they free.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &mut self,
        state: &State,
        candidates: &[Candidate],
        victims: Vec<usize>,
        own: usize,
        ordered: &[usize],
        partition: &PartitionConfig,
        request: &PerNodeRequest,
        job_id: JobId,
    ) -> Option<(Vec<JobId>, Allocation)> {
        let none = HashSet::new();
        for &k in &victims {
            release(&mut self.view, state, candidates[k].job_id);
        }
        let Some(alloc) = place(&self.view, ordered.iter().copied(), &none, partition, request) else {
            // Not preempted after all: they hold their resources again.
            for &k in &victims {
                let alloc = state.jobs[&candidates[k].job_id].alloc.as_ref();
                for share in alloc.into_iter().flat_map(|a| &a.nodes) {
                    if let Some(&i) = state.node_index().get(&share.node) {
                        self.view[i].take(share);
                    }
                }
            }
            return None;
        };
        for &k in &victims {
            let victim = &candidates[k];
            if let Some(q) = victim.team {
                lose(&mut self.spare[q], &victim.tres);
            }
            tres::add(&mut self.freeing[own], &victim.tres);
        }
        self.held.insert(job_id, take_free(&mut self.view, &state.node_index(), &alloc));
        Some((victims.into_iter().map(|k| candidates[k].job_id).collect(), alloc))
    }

    /// The jobs that may be preempted for team `own` in `partition`: borrowed jobs of other
    /// teams on the pool's nodes, not already being preempted, that ran at least the exempt time.
    fn pool(state: &State, quotas: &Quotas, own: usize, partition: &PartitionConfig, now: UnixTime) -> Pool {
        let config = &state.config();
        // A QOS's own `preempt_exempt_time` wins over the controller's (Slurm's QOS
        // `PreemptExemptTime` over its global one).
        let exempt = |job: &crate::model::state::Job| {
            let qos = config.qos.iter().find(|q| q.name == job.info.qos).and_then(|q| q.preempt_exempt_time);
            i64::from(qos.unwrap_or(config.preempt_exempt_time))
        };
        let pool: HashSet<&String> = partition.nodes.iter().collect();
        let mut ids: Vec<JobId> = quotas.borrowed.iter().copied().collect();
        ids.sort_unstable();
        let candidates: Vec<Candidate> = ids
            .into_iter()
            .filter(|v| !state.preempting.contains_key(v))
            .filter_map(|v| state.jobs.get(&v))
            .filter(|job| {
                let team = quota_of(config, &job.info.account, &partition.name);
                let ran = now - job.info.start_time.unwrap_or(now);
                team != Some(own)
                    && ran >= exempt(job)
                    && job.alloc.as_ref().is_some_and(|a| a.nodes.iter().any(|n| pool.contains(&n.node)))
            })
            .map(|job| {
                let tres = tres::of_job(state, job);
                let (gpus, cpus) = (get(&tres, "gres/gpu"), get(&tres, "cpu"));
                let ran = u64::try_from(now - job.info.start_time.unwrap_or(now)).unwrap_or(0);
                Candidate {
                    job_id: job.info.job_id,
                    team: quota_of(config, &job.info.account, &partition.name),
                    lost: ran.saturating_mul(gpus.max(1)),
                    tres,
                    gpus,
                    cpus,
                    priority: job.info.priority,
                }
            })
            .collect();
        let mut on_node: HashMap<usize, Vec<(usize, u64)>> = HashMap::new();
        for (k, candidate) in candidates.iter().enumerate() {
            let alloc = state.jobs[&candidate.job_id].alloc.as_ref();
            for share in alloc.into_iter().flat_map(|a| &a.nodes) {
                if let Some(&i) = state.node_index().get(&share.node) {
                    on_node.entry(i).or_default().push((k, share.gpus.len() as u64));
                }
            }
        }
        Pool { candidates, on_node }
    }

    /// Whether preempting `set` leaves every victim team at or above its guarantee.
    fn keeps_guarantees(&self, candidates: &[Candidate], set: &[usize]) -> bool {
        let mut loss: HashMap<usize, Tres> = HashMap::new();
        for &k in set {
            if let Some(q) = candidates[k].team {
                tres::add(loss.entry(q).or_default(), &candidates[k].tres);
            }
        }
        #[allow(clippy::cast_possible_wrap)]
        loss.iter().all(|(q, lost)| self.spare[*q].iter().all(|(name, spare)| get(lost, name) as i64 <= *spare))
    }

    fn cost(candidates: &[Candidate], set: &[usize], by_gpus: bool) -> Cost {
        let size = set.iter().map(|&k| if by_gpus { candidates[k].gpus } else { candidates[k].cpus }).sum();
        let lost = set.iter().map(|&k| candidates[k].lost).sum();
        let priority = set.iter().map(|&k| u64::from(candidates[k].priority)).sum();
        (size, lost, priority)
    }

    /// The cheapest set of candidates (indexes) that lets the job fit on `nodes`: per node the
    /// cheapest set that frees that node's share (every subset of its candidates when they are
    /// few, else the cheapest first, pruned), then the cheapest nodes for the job's node count.
    fn choose(
        &self,
        state: &State,
        pool: &Pool,
        nodes: &[usize],
        partition: &PartitionConfig,
        request: &PerNodeRequest,
        by_gpus: bool,
    ) -> Option<Vec<usize>> {
        const EXHAUSTIVE: usize = 10;
        let candidates = &pool.candidates;
        let wanted = request.n_nodes as usize;
        let per_node_gpus = u64::from(request.n_gpus());
        // Per node: the cheapest set that frees it, with its cost.
        let mut per_node: Vec<(Cost, usize, Vec<usize>)> = Vec::new();
        for (order, &i) in nodes.iter().enumerate() {
            let view = &self.view[i];
            if request.place_on(view, 0, partition).is_some() {
                per_node.push(((0, 0, 0), order, Vec::new()));
                continue;
            }
            let Some(on_node) = pool.on_node.get(&i) else { continue };
            // Candidates chosen earlier in the pass are already being preempted.
            let local: Vec<(usize, u64)> = on_node
                .iter()
                .copied()
                .filter(|(k, _)| !state.preempting.contains_key(&candidates[*k].job_id))
                .collect();
            // The GPUs that must be freed on this node: no set freeing fewer can work.
            let short = per_node_gpus.saturating_sub(view.gpus.len().saturating_sub(view.gpus_alloc.len()) as u64);
            // A one-node job takes the cheapest node: sets preempting more GPUs than the best
            // found so far cannot win.
            let bound = if wanted == 1 && by_gpus {
                per_node.iter().map(|(cost, _, _)| cost.0).min().unwrap_or(u64::MAX)
            } else {
                u64::MAX
            };
            if local.is_empty() || bound < short {
                continue;
            }
            let mut scratch = None;
            let mut fits = |set: &[usize]| {
                let scratch = scratch.get_or_insert_with(|| view.clone());
                fits_without(scratch, view, state, candidates, set, request, partition)
            };
            let mut best: Option<(Cost, Vec<usize>)> = None;
            let mut sets = Vec::new();
            if local.len() <= EXHAUSTIVE {
                // Sums per subset, each from the subset without its lowest member.
                let mut here = vec![0_u64; 1 << local.len()];
                let mut total = vec![0_u64; 1 << local.len()];
                for mask in 1_usize..(1 << local.len()) {
                    let low = mask.trailing_zeros() as usize;
                    let (k, gpus) = local[low];
                    here[mask] = here[mask & (mask - 1)] + gpus;
                    total[mask] = total[mask & (mask - 1)] + candidates[k].gpus;
                    if here[mask] < short || total[mask] > bound {
                        continue;
                    }
                    sets.push(
                        local.iter().enumerate().filter(|(b, _)| mask & (1 << b) != 0).map(|(_, m)| m.0).collect(),
                    );
                }
            } else {
                let mut sorted: Vec<usize> = local.iter().map(|(k, _)| *k).collect();
                sorted.sort_by_key(|&k| Self::cost(candidates, &[k], by_gpus));
                let mut set = Vec::new();
                for k in sorted {
                    set.push(k);
                    if fits(&set) && self.keeps_guarantees(candidates, &set) {
                        break;
                    }
                }
                // Drop every victim the job fits without, the costliest first.
                let mut k = set.len();
                while k > 0 {
                    k -= 1;
                    let without: Vec<usize> =
                        set.iter().enumerate().filter(|(j, _)| *j != k).map(|(_, v)| *v).collect();
                    if fits(&without) {
                        set = without;
                    }
                }
                sets.push(set);
            }
            for set in sets {
                let cost = Self::cost(candidates, &set, by_gpus);
                if best.as_ref().is_some_and(|(c, _)| cost >= *c) {
                    continue;
                }
                if fits(&set) && self.keeps_guarantees(candidates, &set) {
                    best = Some((cost, set));
                }
            }
            if let Some((cost, set)) = best {
                per_node.push((cost, order, set));
            }
        }
        per_node.sort();
        if per_node.len() < wanted {
            return None;
        }
        let mut chosen: Vec<usize> = per_node.into_iter().take(wanted).flat_map(|(_, _, set)| set).collect();
        chosen.sort_unstable();
        chosen.dedup();
        self.keeps_guarantees(candidates, &chosen).then_some(chosen)
    }
}

/// Whether the job's share fits on `node` once the candidates in `set` are gone from it
/// (`scratch`: a copy of `node` to work on).
fn fits_without(
    scratch: &mut NodeView,
    node: &NodeView,
    state: &State,
    candidates: &[Candidate],
    set: &[usize],
    request: &PerNodeRequest,
    partition: &PartitionConfig,
) -> bool {
    scratch.cpus_alloc = node.cpus_alloc;
    scratch.mem_alloc_mb = node.mem_alloc_mb;
    scratch.gpus_alloc.clone_from(&node.gpus_alloc);
    for &k in set {
        let alloc = state.jobs[&candidates[k].job_id].alloc.as_ref();
        for share in alloc.into_iter().flat_map(|a| &a.nodes).filter(|s| s.node == node.name) {
            scratch.release(share);
        }
    }
    request.place_on(scratch, 0, partition).is_some()
}

/// Takes `tres` off what a team may still lose.
#[allow(clippy::cast_possible_wrap)]
fn lose(spare: &mut BTreeMap<String, i64>, tres: &Tres) {
    for (name, left) in spare.iter_mut() {
        *left -= get(tres, name) as i64;
    }
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
