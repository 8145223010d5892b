//! The what-if simulation behind `drover simulate`: recorded jobs replayed through the real
//! scheduling pass ([`schedule`]: priority, fair share, limits, quotas, reclaim, backfill,
//! placement) over a fresh [`State`] of a given config, in simulated time. Each job arrives at
//! its recorded submit time (not before its recorded eligible time) and, once started, runs for
//! its recorded run time (at most its time limit); a preempted job ends at the next second and
//! is requeued (or cancelled, as its QOS says). Passes follow events (submissions, ends, begin
//! times) as in ctld, plus ticks while jobs pend (ctld's 10 s, spaced out while passes change
//! nothing). Nothing here touches ctld's live state: the state is the simulation's own.

use crate::model::identity::Caller;
use crate::model::state::{Job, State};
use crate::policy::authz::{Operation, Who};
use crate::policy::placement::could_ever_fit;
use crate::policy::scheduler::schedule;
use crate::policy::validate::{UnknownNodes, node_filter};
use drover_shared::UnixTime;
use drover_shared::config::{Config, Role};
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobId, JobInfo, JobSpec, JobState};
use drover_shared::proto::simulate::{Fidelity, SimRun, TeamFigures};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(test)]
mod tests;

/// One job as accounting recorded it: what it asked for, when, and when its last run started
/// and ended.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) info: JobInfo,
    pub(crate) spec: JobSpec,
}

impl Recorded {
    /// When the job could first start: its eligible time, never before its submission.
    pub(crate) fn eligible(&self) -> UnixTime {
        self.info.eligible_time.unwrap_or(self.info.submit_time).max(self.info.submit_time)
    }

    /// How long its (last) run took, at least a second.
    fn runtime(&self) -> i64 {
        match (self.info.start_time, self.info.end_time) {
            (Some(start), Some(end)) => (end - start).max(1),
            _ => 1,
        }
    }

    /// The recorded wait (start less eligible time) of a job that ran once.
    pub(crate) fn recorded_wait(&self) -> Option<i64> {
        let start = self.info.start_time?;
        (self.info.restarts == 0).then(|| (start - self.eligible()).max(0))
    }
}

/// What bounds one run.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    /// Simulated seconds past the window's end the run may go on (jobs still pending then
    /// count as never started).
    pub(crate) horizon: i64,
    /// Seconds between ticks while jobs pend (ctld's is 10).
    pub(crate) tick: i64,
    /// Passes run on multiples of this many seconds (from the start): 1 runs one after every
    /// second with an event, as ctld does; more coalesce the events of that many seconds into
    /// one pass (a large replay's speed, for up to that much added wait).
    pub(crate) resolution: i64,
    /// Simulated seconds between the passes that plan backfill reservations (the others carry
    /// the planned ones over, as a ctld pass past its planning time does): Slurm's
    /// `bf_interval`. 0 plans in every pass, as ctld does.
    pub(crate) backfill_interval: i64,
    /// Jobs a planning pass may plan a reservation for, at most (held ones included; the
    /// config's `backfill_max_job_test` bounds the new ones too). ctld bounds its planning by
    /// time (150 ms); a replay counts jobs instead, so the same replay gives the same figures
    /// however fast the machine runs it.
    pub(crate) backfill_jobs: usize,
    /// Wall-clock time the run must end by.
    pub(crate) deadline: Option<Instant>,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            horizon: 31 * 86_400,
            tick: 10,
            resolution: 1,
            backfill_interval: 0,
            backfill_jobs: usize::MAX,
            deadline: None,
        }
    }
}

/// A run that could not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SimError {
    #[error("the simulation ran past its time budget of {0} s; replay a shorter window (--from/--to)")]
    OverBudget(u64),
}

/// What one run produced: the figures, and each started job's simulated wait.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    pub(crate) run: SimRun,
    pub(crate) waits: HashMap<JobId, i64>,
}

/// The longest pause between ticks when passes change nothing.
const MAX_TICK: i64 = 300;

#[derive(Default)]
struct Team {
    figures: TeamFigures,
    waits: Vec<i64>,
    gpu_secs: f64,
    lost_gpu_secs: f64,
    limit_hits: HashSet<JobId>,
    quota_hits: HashSet<JobId>,
}

/// What the simulation knows of a job beyond the state's record.
struct Tracked {
    team: usize,
    runtime: i64,
    /// The run under way: its start, GPUs and billing.
    run: Option<(UnixTime, u64, f64)>,
    /// Set when the job was preempted: whether it is requeued.
    preempted: Option<bool>,
}

/// The job a recorded one becomes under `state`'s config, or why that config refuses it (no
/// such account, user association, partition or QOS, over a time limit, or it could never fit).
fn admit(state: &State, rec: &Recorded) -> Option<Job> {
    let config = &state.config();
    let info = &rec.info;
    let account = &info.account;
    if !config.accounts.iter().any(|a| &a.name == account) {
        return None;
    }
    // An admin (root, or a user the config makes one) may charge any account, as at submit.
    let role = if info.uid == 0 { Role::Admin } else { config.role_of(&info.user) };
    let admin = Who { caller: Caller::local(info.uid, info.gid), role }.may(Operation::ChargeAnyAccount);
    let may_charge = admin
        || match config.users.iter().find(|u| u.name == info.user) {
            Some(user) => user.accounts.contains(account) || &user.default_account == account,
            None => config.default_account.as_deref() == Some(account.as_str()),
        };
    if !may_charge {
        return None;
    }
    let qos = config.qos.iter().find(|q| q.name == info.qos)?;
    let names: Vec<String> = if rec.spec.partitions.is_empty() {
        vec![config.default_partition().name.clone()]
    } else {
        rec.spec.partitions.clone()
    };
    let over = |limit: TimeLimit| match (rec.spec.time_limit, limit) {
        (Some(TimeLimit::Minutes(asked)), TimeLimit::Minutes(max)) => asked > max,
        _ => false,
    };
    if qos.max_wall.is_some_and(over) {
        return None;
    }
    let mut candidates = Vec::new();
    for name in &names {
        let partition = config.partitions.iter().find(|p| &p.name == name)?;
        if crate::policy::validate::account_allowed(config, account, &partition.allow_accounts)
            && (partition.allow_qos.is_empty() || partition.allow_qos.contains(&info.qos))
            && !over(partition.max_time)
        {
            candidates.push(partition);
        }
    }
    let eligible = rec.eligible();
    let mut spec = rec.spec.clone();
    spec.dependency = None;
    spec.array = None;
    spec.hold = false;
    spec.deadline = None;
    spec.begin_time = (eligible > info.submit_time).then_some(eligible);
    let node_filter = node_filter(state, &spec, UnknownNodes::Skip).unwrap_or_default();
    let mut job = Job {
        info: JobInfo::default().into(),
        spec: Arc::new(spec),
        candidates: candidates.iter().map(|p| p.name.clone()).collect(),
        node_filter,
        alloc: None,
        committed: true,
        launched_at: None,
        cancel_requested_by: None,
        started: false,
        reason_id: 0,
    };
    if !candidates.iter().any(|p| could_ever_fit(state, &job, p)) {
        return None;
    }
    job.info = JobInfo {
        job_id: info.job_id,
        name: info.name.clone(),
        user: info.user.clone(),
        uid: info.uid,
        account: account.clone(),
        qos: info.qos.clone(),
        partition: job.candidates.join(","),
        state: Some(JobState::Pending),
        reason: "None".into(),
        priority: crate::policy::validate::initial_priority(qos.priority, 1, info.nice),
        nice: info.nice,
        submit_time: info.submit_time,
        eligible_time: Some(eligible),
        time_limit: info.time_limit.or(rec.spec.time_limit),
        num_nodes: info.num_nodes,
        num_cpus: info.num_cpus,
        num_tasks: info.num_tasks,
        cpus_per_task: info.cpus_per_task,
        mem: info.mem,
        requeue: info.requeue,
        exclusive: info.exclusive,
        billing: info.billing,
        ..JobInfo::default()
    }
    .into();
    Some(job)
}

fn gpus_of(job: &Job) -> u64 {
    job.alloc.as_ref().map_or(0, |a| a.nodes.iter().map(|n| n.gpus.len() as u64).sum())
}

/// Seconds of `[start, end)` inside `[from, to)`.
fn overlap(start: UnixTime, end: UnixTime, from: UnixTime, to: UnixTime) -> i64 {
    (end.min(to) - start.max(from)).max(0)
}

/// The `p`-th percentile (0–100) of sorted values, nearest rank; 0 when there are none.
pub(crate) fn percentile(sorted: &[i64], p: usize) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * p).div_ceil(100).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Replays `jobs` under `config`; figures cover the window `[from, to)`.
#[allow(clippy::too_many_lines, clippy::cast_precision_loss)]
pub(crate) fn replay(
    config: Arc<Config>,
    jobs: &[Recorded],
    from: UnixTime,
    to: UnixTime,
    bounds: &Bounds,
) -> Result<Outcome, SimError> {
    let began = Instant::now();
    let mut state = State::new(config.clone(), 1);
    state.planning_jobs = bounds.backfill_jobs;
    for (i, node) in state.nodes_mut().iter_mut().enumerate() {
        node.connection = Some(i as u64);
        node.responding = true;
        node.registered_once = true;
    }
    let total_gpus: u64 = state.nodes().iter().map(|n| n.gpus.len() as u64).sum();
    // Teams: the config's accounts in its order, then accounts it lacks.
    let mut team_index: HashMap<String, usize> = HashMap::new();
    let mut teams: Vec<Team> = Vec::new();
    let used: HashSet<&str> = jobs.iter().map(|j| j.info.account.as_str()).collect();
    let mut names: Vec<String> =
        config.accounts.iter().map(|a| a.name.clone()).filter(|a| used.contains(a.as_str())).collect();
    let mut missing: Vec<String> =
        used.iter().filter(|a| !config.accounts.iter().any(|c| c.name == **a)).map(|a| (*a).to_owned()).collect();
    missing.sort();
    names.extend(missing);
    for name in names {
        team_index.insert(name.clone(), teams.len());
        let mut team = Team::default();
        team.figures.account = name;
        teams.push(team);
    }

    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| (jobs[i].info.submit_time, jobs[i].info.job_id));
    let first = order.first().map_or(from, |&i| jobs[i].info.submit_time);
    let mut now = first.min(from);
    let origin = now;
    let resolution = bounds.resolution.max(1);
    let quantize = |t: UnixTime| origin + (t - origin + resolution - 1).div_euclid(resolution) * resolution;
    state.usage.updated = now;
    let half_life = config.priority.decay_half_life;

    let mut tracked: HashMap<JobId, Tracked> = HashMap::with_capacity(jobs.len());
    let mut waits: HashMap<JobId, i64> = HashMap::with_capacity(jobs.len());
    let mut ends: BinaryHeap<Reverse<(UnixTime, JobId, u32)>> = BinaryHeap::new();
    let mut begins: BinaryHeap<Reverse<UnixTime>> = BinaryHeap::new();
    let mut rates: HashMap<(String, String), f64> = HashMap::new();
    let mut next = 0;
    let mut pending = 0usize;
    let mut passes = 0u64;
    let mut tick = bounds.tick.max(1);
    let mut last_pass = now;
    let mut last_backfill = i64::MIN / 2;
    let horizon_end = to.saturating_add(bounds.horizon);

    loop {
        if let Some(deadline) = bounds.deadline
            && passes % 64 == 0
            && Instant::now() > deadline
        {
            return Err(SimError::OverBudget(deadline.saturating_duration_since(began).as_secs()));
        }
        let t_submit = order.get(next).map(|&i| jobs[i].info.submit_time);
        let t_end = ends.peek().map(|Reverse((t, _, _))| *t);
        let t_begin = begins.peek().map(|Reverse(t)| *t);
        let t_tick = (pending > 0).then(|| last_pass + tick);
        let Some(t) = [t_submit, t_end, t_begin, t_tick].into_iter().flatten().min() else { break };
        let t = quantize(t);
        if t > horizon_end {
            break;
        }
        let event = [t_submit, t_end, t_begin].into_iter().flatten().any(|e| e <= t);
        now = now.max(t);
        state.usage.advance(now, half_life, rates.iter().map(|((a, u), b)| (a.as_str(), u.as_str(), *b)));

        // Ends (and the ends of preempted runs) first: what they free is free for this pass.
        while let Some(&Reverse((at, job_id, run))) = ends.peek() {
            if at > now {
                break;
            }
            ends.pop();
            let Some(job) = state.jobs.get(&job_id) else { continue };
            if job.info.restarts != run || job.alloc.is_none() {
                continue;
            }
            let key = (job.info.account.clone(), job.info.user.clone());
            let Some(track) = tracked.get_mut(&job_id) else { continue };
            let Some((started, gpus, billing)) = track.run.take() else { continue };
            if let Some(rate) = rates.get_mut(&key) {
                *rate -= billing;
                if *rate <= 1e-9 {
                    rates.remove(&key);
                }
            }
            let team = &mut teams[track.team];
            let clipped = overlap(started, at, from, to) as f64 * gpus as f64;
            team.gpu_secs += clipped;
            state.release_job(job_id, now);
            match track.preempted.take() {
                Some(requeue) => {
                    team.figures.preemptions += 1;
                    team.lost_gpu_secs += (at - started) as f64 * gpus as f64;
                    if requeue {
                        let job = state.jobs.get_mut(&job_id).expect("tracked");
                        job.info.state = Some(JobState::Pending);
                        job.info.reason = "None".into();
                        job.info.restarts += 1;
                        job.info.start_time = None;
                        pending += 1;
                    } else {
                        state.jobs.remove(&job_id);
                    }
                }
                None => {
                    state.jobs.remove(&job_id);
                }
            }
        }
        // Submissions.
        while let Some(&i) = order.get(next) {
            let rec = &jobs[i];
            if rec.info.submit_time > now {
                break;
            }
            next += 1;
            let team = team_index[&rec.info.account];
            teams[team].figures.jobs += 1;
            match admit(&state, rec) {
                Some(job) => {
                    if let Some(at) = job.spec.begin_time {
                        begins.push(Reverse(at));
                    }
                    tracked
                        .insert(rec.info.job_id, Tracked { team, runtime: rec.runtime(), run: None, preempted: None });
                    state.jobs.insert(rec.info.job_id, job);
                    pending += 1;
                }
                None => teams[team].figures.refused += 1,
            }
        }
        while begins.peek().is_some_and(|Reverse(at)| *at <= now) {
            begins.pop();
        }

        let plan = now - last_backfill >= bounds.backfill_interval;
        // Planning is bounded by the jobs it plans (`backfill_jobs`), not by the clock.
        state.planning_time = if plan { Duration::MAX } else { Duration::ZERO };
        if plan {
            last_backfill = now;
        }
        let decisions = schedule(&mut state, now);
        passes += 1;
        last_pass = now;
        let changed = !decisions.starts.is_empty() || !decisions.preemptions.is_empty();
        tick = if event || changed { bounds.tick.max(1) } else { (tick * 2).min(MAX_TICK) };
        for start in decisions.starts {
            let Some(job) = state.jobs.get_mut(&start.job_id) else { continue };
            let Some(track) = tracked.get_mut(&start.job_id) else { continue };
            let info = &mut job.info;
            info.state = Some(JobState::Running);
            info.reason = "None".into();
            info.partition = start.partition.clone();
            info.start_time = Some(now);
            let partition = config.partitions.iter().find(|p| p.name == start.partition);
            if info.time_limit.is_none() {
                info.time_limit = partition.map(|p| p.default_time.unwrap_or(p.max_time));
            }
            if info.restarts == 0 {
                let wait = (now - info.eligible_time.unwrap_or(info.submit_time)).max(0);
                waits.insert(start.job_id, wait);
                teams[track.team].waits.push(wait);
            }
            job.alloc = Some(start.alloc);
            let job = &state.jobs[&start.job_id];
            let limit = partition.map_or(i64::MAX, |p| crate::policy::backfill::time_limit_secs(job, p));
            let billing = crate::model::tres::job_billing(&state, job);
            let gpus = gpus_of(job);
            *rates.entry((job.info.account.clone(), job.info.user.clone())).or_default() += billing;
            track.run = Some((now, gpus, billing));
            ends.push(Reverse((now.saturating_add(track.runtime.min(limit)), start.job_id, job.info.restarts)));
            pending -= 1;
        }
        for preemption in decisions.preemptions {
            let victim = preemption.victim;
            let Some(job) = state.jobs.get(&victim) else { continue };
            let Some(track) = tracked.get_mut(&victim) else { continue };
            if track.preempted.is_some() {
                continue;
            }
            let qos = config.qos.iter().find(|q| q.name == job.info.qos);
            track.preempted = Some(qos.is_none_or(|q| q.preempt_requeue) && job.info.requeue);
            ends.push(Reverse((now + 1, victim, job.info.restarts)));
        }
        #[cfg(test)]
        {
            // The tallies kept up to date count what summing afresh counts.
            let built = crate::model::tally::Tally::build(&state);
            assert!(state.tally(now).same_counts(&built), "tallies drifted at {now}");
        }
        for job_id in state.jobs.take_changed() {
            let Some(job) = state.jobs.get(&job_id) else { continue };
            if job.info.state() != JobState::Pending {
                continue;
            }
            let Some(track) = tracked.get(&job_id) else { continue };
            let reason = job.info.reason.as_str();
            if reason.starts_with("QOS") || reason.starts_with("Assoc") {
                teams[track.team].limit_hits.insert(job_id);
            } else if reason.starts_with("Quota") {
                teams[track.team].quota_hits.insert(job_id);
            }
        }
    }

    // Runs still under way at the end count up to it; jobs still pending never started.
    for (job_id, track) in &tracked {
        if let Some((started, gpus, _)) = track.run {
            teams[track.team].gpu_secs += overlap(started, now, from, to) as f64 * gpus as f64;
        }
        if !waits.contains_key(job_id) {
            teams[track.team].figures.never_started += 1;
        }
    }
    let delivered: f64 = teams.iter().map(|t| t.gpu_secs).sum();
    let shares: HashMap<&str, u32> = config.accounts.iter().map(|a| (a.name.as_str(), a.shares)).collect();
    let share_sum: f64 = teams.iter().map(|t| f64::from(*shares.get(t.figures.account.as_str()).unwrap_or(&0))).sum();
    let mut out = Vec::with_capacity(teams.len());
    for mut team in teams {
        team.waits.sort_unstable();
        let f = &mut team.figures;
        f.wait_p50_s = percentile(&team.waits, 50);
        f.wait_p95_s = percentile(&team.waits, 95);
        f.gpu_hours = team.gpu_secs / 3600.0;
        f.delivered_fraction = if delivered > 0.0 { team.gpu_secs / delivered } else { 0.0 };
        let share = f64::from(*shares.get(f.account.as_str()).unwrap_or(&0));
        f.share_fraction = if share_sum > 0.0 { share / share_sum } else { 0.0 };
        f.guaranteed_gpus =
            config.quotas.iter().filter(|q| q.account == f.account).filter_map(|q| q.guarantee.get("gres/gpu")).sum();
        f.lost_gpu_hours = team.lost_gpu_secs / 3600.0;
        f.limit_hits = u32::try_from(team.limit_hits.len()).unwrap_or(u32::MAX);
        f.quota_hits = u32::try_from(team.quota_hits.len()).unwrap_or(u32::MAX);
        out.push(team.figures);
    }
    let capacity = total_gpus as f64 * (to - from).max(1) as f64;
    let run = SimRun {
        teams: out,
        gpu_utilization: if capacity > 0.0 { (delivered / capacity).min(1.0) } else { 0.0 },
        total_gpus,
        passes,
        end: now,
    };
    Ok(Outcome { run, waits })
}

/// How closely `outcome` (a run of the config the jobs ran under) reproduces their recorded
/// waits.
pub(crate) fn fidelity(jobs: &[Recorded], outcome: &Outcome) -> Fidelity {
    let mut all = Vec::new();
    let mut per_team: std::collections::BTreeMap<&str, (Vec<i64>, Vec<i64>, Vec<i64>)> = Default::default();
    for rec in jobs {
        let (Some(recorded), Some(&simulated)) = (rec.recorded_wait(), outcome.waits.get(&rec.info.job_id)) else {
            continue;
        };
        let error = (simulated - recorded).abs();
        all.push(error);
        let team = per_team.entry(rec.info.account.as_str()).or_default();
        team.0.push(recorded);
        team.1.push(simulated);
        team.2.push(error);
    }
    all.sort_unstable();
    let teams = per_team
        .into_iter()
        .map(|(account, (mut recorded, mut simulated, mut errors))| {
            recorded.sort_unstable();
            simulated.sort_unstable();
            errors.sort_unstable();
            (account.to_owned(), percentile(&recorded, 50), percentile(&simulated, 50), percentile(&errors, 50))
        })
        .collect();
    Fidelity {
        jobs: u32::try_from(all.len()).unwrap_or(u32::MAX),
        median_abs_error_s: percentile(&all, 50),
        p95_abs_error_s: percentile(&all, 95),
        teams,
    }
}
