//! Multi-tenant scenarios measured from outside (issue 16): a real ctld with 16 simulated nodes
//! of 8 GPUs (`drover-simnode --ignore-term`, so every preempted job lives out its grace time),
//! teams with guarantees, bursts and fair-share shares, and a timed plan of jobs of 1, 2 and 8
//! GPUs, multi-node ones among them, short and long. The harness submits the plan with `sbatch`
//! and reads everything back through `sacct -D` (every run's submit, start, end and GPUs),
//! `drover audit` (each preemption and the job it was for) and `sshare` (the configured shares).
//!
//! Invariants checked on every scenario:
//! - **guarantee**: no team stays below its guarantee while it has waiting work that fits in what
//!   is left of it for longer than `preempt_exempt_time + grace + SLACK` (a victim may be young,
//!   then lives out its grace time, then a pass and a launch);
//! - **reclaim size**: the GPUs preempted for one reclaiming job are at most what it asks plus
//!   the smallest job a reclaim could take that alone covers that (the largest one when none
//!   does); a reclaim could take a run of another team that borrows (beyond the team's
//!   guarantee, its runs counted in start order), ran `preempt_exempt_time`, is not already
//!   being preempted, and whose loss leaves its team at or above its guarantee;
//! - **minimum run time**: no run is preempted before it ran `preempt_exempt_time`, so no job is
//!   preempted twice within it;
//! - **wide job**: a job of 4 whole nodes at the head of the queue, under a flood of small
//!   lower-priority jobs that goes on for 22 s after it, starts once the 4 nodes that drain first
//!   by the time limits of the runs holding them at its submit have actually drained, plus
//!   `SLACK` (its reservation is honoured: the small jobs' limits are a minute, so none fits
//!   before it on its nodes). With `backfill_reservations = 0` the flood refills every node as it
//!   drains and the check fails.
//!
//! Figures reported per scenario: share error (delivered GPU-seconds share against the shares
//! `sshare` shows), GPU utilization in the seconds some job waited, reclaim time including grace
//! (from the first second a reclaiming job waited and fitted in what its team was owed, to its
//! start), preempted GPU-hours. The default is the short version (`.ci/run`; about 70 s for the
//! three on 2 cores, at most 55 s each); `DROVER_SCENARIO_SCALE=N` (or `FULL=1`, N = 4)
//! stretches every time (plan, durations, grace, minimum run time) N times; `bench/scenarios.sh`
//! runs that and prints the table (`docs/admin/scheduling.md`).

// Casts between seconds, counts and GPU numbers: all small (a run of minutes, hundreds of jobs).
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]

use drover_e2e::sim::{Run, SimCluster};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

const NODES: usize = 16;
const GPUS_PER_NODE: u32 = 8;
const TOTAL_GPUS: u32 = NODES as u32 * GPUS_PER_NODE;
/// Seconds allowed beyond a bound for passes, launches, heartbeats and sacct's whole seconds on
/// a busy 2-core CI machine.
const SLACK: i64 = 5;
/// Priority given away by the flood of small jobs (`--nice`), so the wide job heads the queue.
const FLOOD_NICE: &str = "--nice=100000";

/// The time scale: 1 unless `DROVER_SCENARIO_SCALE` (1–50) or `FULL=1` (4) says otherwise.
fn scale() -> f64 {
    if let Ok(text) = std::env::var("DROVER_SCENARIO_SCALE") {
        match text.parse::<f64>() {
            Ok(s) if (1.0..=50.0).contains(&s) => return s,
            _ => panic!("DROVER_SCENARIO_SCALE must be a number from 1 to 50, not {text:?}"),
        }
    }
    if std::env::var("FULL").is_ok_and(|v| v == "1") { 4.0 } else { 1.0 }
}

struct Team {
    name: &'static str,
    guarantee: u32,
    burst: u32,
    shares: u32,
}

/// One job of a plan; times in unscaled seconds.
#[derive(Debug, Clone)]
struct Planned {
    at: f64,
    team: usize,
    nodes: u32,
    /// GPUs per node.
    gpus: u32,
    secs: f64,
    long: bool,
    /// Gives its priority away (the flood under the wide job).
    nice: bool,
    wide: bool,
}

impl Planned {
    fn total(&self) -> u32 {
        self.nodes * self.gpus
    }
}

struct Scenario {
    name: &'static str,
    teams: Vec<Team>,
    plan: Vec<Planned>,
    /// Seconds (unscaled) from the first submission to the read-back.
    window: f64,
    /// `[priority] decay_half_life`, if the scenario shortens it.
    decay: Option<&'static str>,
}

/// A fixed pseudo-random sequence (xorshift), so every run submits the same plan.
struct Draw(u32);

impl Draw {
    fn below(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0 % n
    }
    fn between(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * f64::from(self.below(1000)) / 1000.0
    }
}

/// Builds a plan.
struct Plan {
    jobs: Vec<Planned>,
    draw: Draw,
}

impl Plan {
    fn new(seed: u32) -> Plan {
        Plan { jobs: Vec::new(), draw: Draw(seed) }
    }

    /// `count` jobs of `nodes` × `gpus` submitted at `at`, each running `secs`.
    fn batch(&mut self, at: f64, team: usize, count: u32, (nodes, gpus): (u32, u32), secs: f64, long: bool) {
        for _ in 0..count {
            self.jobs.push(Planned { at, team, nodes, gpus, secs, long, nice: false, wide: false });
        }
    }

    /// A job every `every` seconds from `from` to `to`, its shape drawn from `shapes`, running
    /// `secs.0`–`secs.1` seconds.
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &mut self,
        team: usize,
        (from, to): (f64, f64),
        every: f64,
        shapes: &[(u32, u32)],
        secs: (f64, f64),
        nice: bool,
    ) {
        let mut at = from;
        while at < to {
            let (nodes, gpus) = shapes[self.draw.below(shapes.len() as u32) as usize];
            let secs = self.draw.between(secs.0, secs.1);
            self.jobs.push(Planned { at, team, nodes, gpus, secs, long: false, nice, wide: false });
            at += every;
        }
    }
}

/// Timing settings of one run, scaled.
struct Timing {
    scale: f64,
    grace: u32,
    exempt: u32,
}

impl Timing {
    fn new(scale: f64) -> Timing {
        Timing { scale, grace: (2.0 * scale).round() as u32, exempt: (6.0 * scale).round() as u32 }
    }
    fn secs(&self, unscaled: f64) -> f64 {
        unscaled * self.scale
    }
}

fn start(scenario: &Scenario, timing: &Timing) -> SimCluster {
    let accounts: Vec<String> = scenario.teams.iter().map(|t| format!("\"{}\"", t.name)).collect();
    let mut config = format!(
        "kill_wait = {grace}\npreempt_exempt_time = {exempt}\nmin_job_age = 3600\n\
         {nodes}[[users]]\nname = \"root\"\ndefault_account = \"{first}\"\naccounts = [{accounts}]\n",
        grace = timing.grace,
        exempt = timing.exempt,
        first = scenario.teams[0].name,
        accounts = accounts.join(", "),
        nodes = drover_e2e::sim::gpu_nodes(NODES, GPUS_PER_NODE, ""),
    );
    for team in &scenario.teams {
        config.push_str(&format!(
            "[[accounts]]\nname = \"{name}\"\nshares = {shares}\n[[quotas]]\naccount = \"{name}\"\npartition = \"gpu\"\n\
             guarantee = \"gres/gpu={guarantee}\"\nburst = \"gres/gpu={burst}\"\n",
            name = team.name,
            shares = team.shares,
            guarantee = team.guarantee,
            burst = team.burst,
        ));
    }
    if let Some(decay) = scenario.decay {
        config.push_str(&format!("[priority]\ndecay_half_life = \"{decay}\"\n"));
    }
    let top = format!("default_account = \"{}\"", scenario.teams[0].name);
    SimCluster::start(scenario.name, NODES, true, &top, &config)
}

/// A job's time limit: honest, in whole minutes: a short job's run rounded up, a long job's and
/// two more.
fn limit_minutes(job: &Planned, timing: &Timing) -> u64 {
    let secs = timing.secs(job.secs).round().max(1.0) as u64;
    if job.long { secs.div_ceil(60) + 2 } else { secs.div_ceil(60) }
}

/// Submits one planned job; returns its id.
fn submit(cluster: &SimCluster, scenario: &Scenario, job: &Planned, timing: &Timing) -> u32 {
    let script = cluster.root().join("job.sh");
    if !script.exists() {
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    }
    let secs = timing.secs(job.secs).round().max(1.0) as u64;
    let limit = limit_minutes(job, timing);
    let (nodes, gres, cpus) = (job.nodes.to_string(), format!("--gres=gpu:{}", job.gpus), (job.gpus * 4).to_string());
    let (limit, comment) = (limit.to_string(), format!("sim:{secs}"));
    let team = scenario.teams[job.team].name;
    let script = script.to_string_lossy().into_owned();
    let mut args =
        vec!["--parsable", "-A", team, "-N", &nodes, &gres, "-c", &cpus, "-t", &limit, "--comment", &comment];
    if job.nice {
        args.push(FLOOD_NICE);
    }
    args.extend(["-J", if job.wide { "wide" } else { team }, &script]);
    cluster.ok("sbatch", &args).trim().parse().unwrap()
}

/// The teams' normalized shares per `sshare` (account rows).
fn shares(cluster: &SimCluster, teams: &[Team]) -> Vec<f64> {
    let out = cluster.ok("sshare", &["-a", "-P", "-n"]);
    teams
        .iter()
        .map(|team| {
            out.lines()
                .map(|l| l.split('|').collect::<Vec<_>>())
                .find(|f| f.first().is_some_and(|a| a.trim() == team.name) && f.get(1).is_some_and(|u| u.is_empty()))
                .and_then(|f| f.get(3)?.parse().ok())
                .unwrap_or_else(|| panic!("no sshare row for account {}:\n{out}", team.name))
        })
        .collect()
}

/// What one scenario measured, and the invariants it broke.
#[derive(Debug, Default)]
struct Figures {
    jobs: usize,
    /// Per team: delivered share of GPU-seconds, configured share.
    delivered: Vec<(f64, f64)>,
    share_error: f64,
    utilization_while_waiting: f64,
    waiting_seconds: usize,
    /// Reclaiming jobs' waits from the start of their wait to their start, seconds.
    reclaim_waits: Vec<i64>,
    /// Longest time a team stayed below its guarantee with fitting work waiting, seconds.
    longest_deficit: i64,
    preempted_runs: usize,
    preempted_gpu_hours: f64,
    wide_wait: Option<i64>,
    wide_bound: Option<i64>,
    failures: Vec<String>,
}

/// The seconds `[from, to)` in which a job waited: from its submit to its first start, and from
/// each preempted run's end to the next start; `end` closes a wait still open.
fn waits(records: &[&Run], end: i64) -> Vec<(i64, i64)> {
    let mut records = records.to_vec();
    records.sort_by_key(|r| r.start.unwrap_or(i64::MAX));
    let mut cursor = records.iter().filter_map(|r| r.submit).min();
    let mut out = Vec::new();
    for record in &records {
        let Some(from) = cursor else { break };
        match record.start {
            Some(start) => {
                if start > from {
                    out.push((from, start));
                }
                cursor = if record.preempted() { record.end } else { None };
            }
            None => {
                out.push((from, end));
                cursor = None;
            }
        }
    }
    if let Some(from) = cursor.filter(|f| *f < end) {
        out.push((from, end));
    }
    out
}

#[allow(clippy::too_many_lines)]
fn measure(
    scenario: &Scenario,
    timing: &Timing,
    ids: &HashMap<u32, usize>,
    runs: &[Run],
    preemptions: &[(i64, u32, u32)],
    configured: &[f64],
    end: i64,
) -> Figures {
    let mut f = Figures { jobs: ids.len(), ..Figures::default() };
    let begin = runs.iter().filter_map(|r| r.submit).min().unwrap_or(end);
    let team_of = |job: u32| ids.get(&job).map(|&i| scenario.plan[i].team);
    let size_of = |job: u32| ids.get(&job).map_or(0, |&i| scenario.plan[i].total());
    let guarantee = |team: usize| scenario.teams[team].guarantee;
    let mut by_job: BTreeMap<u32, Vec<&Run>> = BTreeMap::new();
    for run in runs.iter().filter(|r| ids.contains_key(&r.job)) {
        by_job.entry(run.job).or_default().push(run);
    }
    let job_waits: Vec<(u32, Vec<(i64, i64)>)> =
        by_job.iter().map(|(job, records)| (*job, waits(records, end))).collect();
    let started: Vec<&Run> = runs.iter().filter(|r| r.start.is_some() && ids.contains_key(&r.job)).collect();
    let holds = |team: usize, t: i64| -> u32 {
        started.iter().filter(|r| team_of(r.job) == Some(team) && r.holds_after(t)).map(|r| r.gpus).sum()
    };

    // Delivered GPU-seconds per team over the window, against the configured shares.
    let mut delivered = vec![0.0_f64; scenario.teams.len()];
    for run in &started {
        let (Some(team), Some(start)) = (team_of(run.job), run.start) else { continue };
        let stop = run.end.unwrap_or(end).min(end);
        delivered[team] += f64::from(run.gpus) * (stop - start).max(0) as f64;
    }
    let sum: f64 = delivered.iter().sum::<f64>().max(1.0);
    f.delivered = delivered.iter().zip(configured).map(|(d, c)| (d / sum, *c)).collect();
    f.share_error = f.delivered.iter().map(|(d, c)| (d - c).abs()).fold(0.0, f64::max);

    // Utilization in the seconds some job waited; each team's deficits against its guarantee.
    let bound = i64::from(timing.exempt + timing.grace) + SLACK;
    let mut busy_sum = 0.0;
    let mut deficit_since: Vec<Option<i64>> = vec![None; scenario.teams.len()];
    for t in begin..end {
        let waiting: Vec<u32> = job_waits
            .iter()
            .filter(|(_, w)| w.iter().any(|(from, to)| *from <= t && t < *to))
            .map(|(job, _)| *job)
            .collect();
        if !waiting.is_empty() {
            f.waiting_seconds += 1;
            busy_sum += f64::from(started.iter().filter(|r| r.holds_after(t)).map(|r| r.gpus).sum::<u32>());
        }
        for (team, deficit) in deficit_since.iter_mut().enumerate() {
            let held = holds(team, t);
            let owed = guarantee(team).saturating_sub(held);
            let fitting = waiting.iter().any(|j| team_of(*j) == Some(team) && size_of(*j) <= owed);
            match (fitting && owed > 0, *deficit) {
                (true, None) => *deficit = Some(t),
                (false, Some(since)) => {
                    *deficit = None;
                    let length = t - since;
                    f.longest_deficit = f.longest_deficit.max(length);
                    if length > bound {
                        f.failures.push(format!(
                            "guarantee: team {} stayed below its guarantee of {} GPUs with fitting work waiting \
                             for {length} s from {} s (bound {bound} s = preempt_exempt_time + grace + {SLACK})",
                            scenario.teams[team].name,
                            guarantee(team),
                            since - begin
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    for (team, since) in deficit_since.iter().enumerate() {
        if let Some(since) = since {
            let length = end - since;
            f.longest_deficit = f.longest_deficit.max(length);
            if length > bound {
                f.failures.push(format!(
                    "guarantee: team {} below its guarantee with fitting work waiting from {} s to the end ({length} s)",
                    scenario.teams[team].name,
                    since - begin
                ));
            }
        }
    }
    f.utilization_while_waiting = busy_sum / (f64::from(TOTAL_GPUS) * f.waiting_seconds.max(1) as f64);

    // Preempted runs and what they cost.
    let preempted: Vec<&&Run> = started.iter().filter(|r| r.preempted()).collect();
    f.preempted_runs = preempted.len();
    f.preempted_gpu_hours = preempted
        .iter()
        .map(|r| f64::from(r.gpus) * (r.end.unwrap_or(end) - r.start.unwrap_or(end)).max(0) as f64)
        .sum::<f64>()
        / 3600.0;

    // What a reclaim at `t` for `team` could take (ctld's rules, read from outside): runs of the
    // other teams that borrow (each team's runs in start order beyond its guarantee), ran at
    // least `preempt_exempt_time`, are not already being preempted (`going`: runs preempted by
    // `t` and still running), and whose loss leaves their team at or above its guarantee.
    let takeable = |team: usize, t: i64, going: &[u32]| -> Vec<(u32, u32)> {
        let mut sizes = Vec::new();
        for other in (0..scenario.teams.len()).filter(|o| *o != team) {
            let mut held: Vec<&&Run> =
                started.iter().filter(|r| team_of(r.job) == Some(other) && r.holds_after(t - 1)).collect();
            held.sort_by_key(|r| (r.start, r.job));
            let leaving: u32 = held.iter().filter(|r| going.contains(&r.job)).map(|r| r.gpus).sum();
            let spare = held.iter().map(|r| r.gpus).sum::<u32>().saturating_sub(leaving + guarantee(other));
            let mut cumulative = 0;
            for run in held {
                cumulative += run.gpus;
                let borrowed = cumulative > guarantee(other);
                let old_enough = run.start.is_some_and(|s| t - s >= i64::from(timing.exempt));
                if borrowed && old_enough && !going.contains(&run.job) && run.gpus <= spare {
                    sizes.push((run.job, run.gpus));
                }
            }
        }
        sizes
    };
    let mut for_jobs: BTreeMap<u32, Vec<(i64, u32)>> = BTreeMap::new();
    for (at, victim, for_job) in preemptions {
        for_jobs.entry(*for_job).or_default().push((*at, *victim));
    }
    for (for_job, victims) in &for_jobs {
        let (Some(team), need) = (team_of(*for_job), size_of(*for_job)) else { continue };
        let first = victims.iter().map(|v| v.0).min().unwrap_or(end);
        let run_at = |victim: u32, at: i64| {
            runs.iter().find(|r| r.job == victim && r.start.is_some_and(|s| s <= at) && r.end.is_none_or(|e| e >= at))
        };
        let victim_sizes: Vec<u32> = victims.iter().filter_map(|(at, v)| run_at(*v, *at)).map(|r| r.gpus).collect();
        let preempted_gpus: u32 = victim_sizes.iter().sum();
        // The victims themselves were takeable, whatever this reading of the rules says.
        let going: Vec<u32> = preemptions
            .iter()
            .filter(|(at, victim, other)| other != for_job && *at <= first && run_at(*victim, first - 1).is_some())
            .map(|p| p.1)
            .collect();
        let could_take = takeable(team, first, &going);
        let mut candidates: Vec<u32> = could_take.iter().map(|c| c.1).collect();
        candidates.extend(&victim_sizes);
        let covering = candidates.iter().copied().filter(|s| *s >= need).min();
        let allowance = need + covering.or_else(|| candidates.iter().copied().max()).unwrap_or(0);
        if preempted_gpus > allowance {
            f.failures.push(format!(
                "reclaim size: {preempted_gpus} GPUs preempted ({} runs) for job {for_job} of team {} asking {need} \
                 (allowed {allowance}: the need plus the smallest takeable job that covers it); victims {victims:?}, \
                 takeable (job, GPUs) at {} s: {could_take:?}",
                victims.len(),
                scenario.teams[team].name,
                first - begin
            ));
        }
        // Reclaim time: from the first second of the wait the preemptions fell in at which the job
        // fitted in what its team was owed, to its start.
        let wait = job_waits
            .iter()
            .find(|(job, _)| job == for_job)
            .and_then(|(_, w)| w.iter().find(|(from, to)| *from <= first && first <= *to).copied());
        if let Some((from, to)) = wait {
            let owed_from = (from..=first).find(|t| need <= guarantee(team).saturating_sub(holds(team, *t)));
            f.reclaim_waits.push(to - owed_from.unwrap_or(first));
        }
    }

    // Minimum run time: every preempted run ran `preempt_exempt_time` first.
    let mut times: HashMap<u32, Vec<i64>> = HashMap::new();
    for (at, victim, for_job) in preemptions {
        times.entry(*victim).or_default().push(*at);
        let run = runs
            .iter()
            .find(|r| r.job == *victim && r.start.is_some_and(|s| s <= *at) && r.end.is_none_or(|e| e >= *at));
        if let Some(start) = run.and_then(|r| r.start)
            && at - start < i64::from(timing.exempt)
        {
            f.failures.push(format!(
                "minimum run time: job {victim} preempted for job {for_job} {} s after its run started \
                 (preempt_exempt_time {})",
                at - start,
                timing.exempt
            ));
        }
    }
    for (victim, mut at) in times {
        at.sort_unstable();
        if at.windows(2).any(|w| w[1] - w[0] < i64::from(timing.exempt)) {
            f.failures
                .push(format!("minimum run time: job {victim} preempted twice within {} s: {at:?}", timing.exempt));
        }
    }

    // The wide job: it heads the queue, so its reservation is planned at its submit on the nodes
    // that drain first by the time limits of the runs then holding them (a node's drain: the
    // latest start + limit of those runs). Honoured, it keeps every later job off those nodes,
    // so the job starts by the time they actually drained (the latest end of those runs), plus
    // slack; with ties, the latest of the tied nodes counts. Without a reservation the flood
    // refills each node as it drains.
    if let Some((&job, &index)) = ids.iter().find(|(_, i)| scenario.plan[**i].wide) {
        let wide = &scenario.plan[index];
        let submit_at = by_job.get(&job).and_then(|r| r.iter().filter_map(|r| r.submit).min()).unwrap_or(end);
        let mut drains: BTreeMap<String, (i64, i64)> =
            (1..=NODES).map(|n| (format!("sim{n:02}"), (submit_at, submit_at))).collect();
        for run in started.iter().filter(|r| r.holds_after(submit_at) && r.job != job) {
            let Some(&i) = ids.get(&run.job) else { continue };
            let by_limit = run.start.unwrap_or(submit_at) + 60 * limit_minutes(&scenario.plan[i], timing) as i64;
            let actual = run.end.unwrap_or(end);
            for node in &run.nodes {
                if let Some(drain) = drains.get_mut(node) {
                    *drain = (drain.0.max(by_limit), drain.1.max(actual));
                }
            }
        }
        let mut by_limit: Vec<i64> = drains.values().map(|d| d.0).collect();
        by_limit.sort_unstable();
        let planned = by_limit[(wide.nodes as usize).clamp(1, NODES) - 1];
        let drained = drains.values().filter(|d| d.0 <= planned).map(|d| d.1).max().unwrap_or(submit_at) - submit_at;
        let bound = drained + SLACK;
        f.wide_bound = Some(bound);
        let first_start = by_job.get(&job).and_then(|r| r.iter().filter_map(|r| r.start).min());
        f.wide_wait = first_start.map(|s| s - submit_at);
        let wait = f.wide_wait.unwrap_or(end - submit_at);
        if f.wide_wait.is_none() || wait > bound {
            f.failures.push(format!(
                "wide job: job {job} ({} nodes x {} GPUs) {} {wait} s after its submit (bound {bound} s: the nodes \
                 that drain first by time limits had drained {drained} s after it, plus {SLACK}); this depends on \
                 backfill reservations being honoured",
                wide.nodes,
                wide.gpus,
                if f.wide_wait.is_some() { "started" } else { "had not started" }
            ));
        }
    }
    f
}

/// Runs one scenario: start the cluster, submit the plan on time, read back, measure.
fn run(scenario: &Scenario) -> Figures {
    let timing = Timing::new(scale());
    let cluster = start(scenario, &timing);
    let mut order: Vec<usize> = (0..scenario.plan.len()).collect();
    order.sort_by(|a, b| scenario.plan[*a].at.total_cmp(&scenario.plan[*b].at));
    let began = Instant::now();
    let mut ids = HashMap::new();
    for index in order {
        let job = &scenario.plan[index];
        let due = Duration::from_secs_f64(timing.secs(job.at));
        std::thread::sleep(due.saturating_sub(began.elapsed()));
        ids.insert(submit(&cluster, scenario, job, &timing), index);
    }
    let window = Duration::from_secs_f64(timing.secs(scenario.window));
    std::thread::sleep(window.saturating_sub(began.elapsed()));
    let end = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let runs = cluster.runs();
    let preemptions = cluster.preemptions();
    let configured = shares(&cluster, &scenario.teams);
    let figures = measure(scenario, &timing, &ids, &runs, &preemptions, &configured, end);
    report(scenario, &timing, &figures);
    if !figures.failures.is_empty() {
        eprintln!("{}", cluster.logs());
    }
    figures
}

/// Prints the scenario's row of the figures table (and appends it to `DROVER_SCENARIO_REPORT`).
fn report(scenario: &Scenario, timing: &Timing, f: &Figures) {
    let teams: Vec<String> = scenario
        .teams
        .iter()
        .zip(&f.delivered)
        .map(|(t, (d, c))| format!("{} {:.0}/{:.0}", t.name, 100.0 * d, 100.0 * c))
        .collect();
    let reclaim = if f.reclaim_waits.is_empty() {
        "none".to_owned()
    } else {
        let mean = f.reclaim_waits.iter().sum::<i64>() as f64 / f.reclaim_waits.len() as f64;
        format!("{mean:.1} / {}", f.reclaim_waits.iter().max().unwrap_or(&0))
    };
    let wide = match (f.wide_wait, f.wide_bound) {
        (Some(w), Some(b)) => format!("{w} (bound {b})"),
        (None, Some(b)) => format!("not started (bound {b})"),
        _ => "-".into(),
    };
    let row = format!(
        "| {} | {} | {} | {:.1} pp ({}) | {:.1} % over {} s | {} | {} | {} | {:.3} | {} |",
        scenario.name,
        timing.scale,
        f.jobs,
        100.0 * f.share_error,
        teams.join(", "),
        100.0 * f.utilization_while_waiting,
        f.waiting_seconds,
        reclaim,
        f.longest_deficit,
        f.preempted_runs,
        f.preempted_gpu_hours,
        wide
    );
    eprintln!("scenario {}: grace {} s, preempt_exempt_time {} s\n{row}", scenario.name, timing.grace, timing.exempt);
    for failure in &f.failures {
        eprintln!("  FAILED {failure}");
    }
    if let Some(path) = std::env::var_os("DROVER_SCENARIO_REPORT") {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        writeln!(file, "{row}").unwrap();
        for failure in &f.failures {
            writeln!(file, "<!-- FAILED {} -->", failure.replace("--", "-")).unwrap();
        }
    }
}

fn check(figures: &Figures) {
    assert!(figures.failures.is_empty(), "invariants broken:\n{}", figures.failures.join("\n"));
}

/// The three teams of issue 16.
fn issue_teams(shares: [u32; 3]) -> Vec<Team> {
    vec![
        Team { name: "ta", guarantee: 40, burst: 72, shares: shares[0] },
        Team { name: "tb", guarantee: 24, burst: 96, shares: shares[1] },
        Team { name: "tc", guarantee: 24, burst: 48, shares: shares[2] },
    ]
}

/// Issue 16's scenario. A holds its guarantee with long whole-node jobs; B borrows the rest with
/// a long two-node job and a stream of 1-, 2- and 8-GPU jobs (6–15 s) while C is idle. C then
/// bursts: 1-, 2- and 8-GPU jobs inside its guarantee (reclaimed from B; long jobs of 40 s, so
/// C stays at its guarantee through the wide job's wait), then two-node jobs beyond it. At 22 s A submits a
/// 4-node × 8-GPU job, beyond its guarantee (it cannot reclaim), under B's flood of small jobs
/// that gave their priority away (`--nice`). A job that reclaims its team's guarantee would
/// rightly start before the wide job (owners first): the plan keeps every team at or above its
/// guarantee while the wide job waits, so its wait measures the backfill reservation alone.
fn issue_scenario() -> Scenario {
    let (a, b, c) = (0, 1, 2);
    let mut plan = Plan::new(16);
    plan.batch(0.0, a, 5, (1, 8), 45.0, true);
    plan.batch(0.0, b, 1, (2, 8), 45.0, true);
    plan.stream(b, (0.0, 44.0), 0.25, &[(1, 1), (1, 1), (1, 2), (1, 2), (1, 8)], (6.0, 15.0), true);
    plan.batch(10.0, c, 8, (1, 1), 40.0, true);
    plan.batch(10.0, c, 2, (1, 2), 40.0, true);
    plan.batch(10.0, c, 1, (1, 8), 40.0, true);
    // Two-node jobs beyond C's guarantee; they give their priority away too, so the wide job
    // heads the queue.
    for _ in 0..2 {
        plan.jobs.push(Planned {
            at: 13.0,
            team: c,
            nodes: 2,
            gpus: 8,
            secs: 15.0,
            long: false,
            nice: true,
            wide: false,
        });
    }
    plan.jobs.push(Planned { at: 22.0, team: a, nodes: 4, gpus: 8, secs: 8.0, long: false, nice: false, wide: true });
    Scenario { name: "issue-16", teams: issue_teams([40, 24, 24]), plan: plan.jobs, window: 52.0, decay: None }
}

/// All teams saturated with different shares: guarantees 64/32/16 and shares 4/2/1, each team
/// alone asking for about the whole cluster all the time (1-, 2- and 8-GPU jobs and two-node
/// jobs, 5–12 s). Delivered shares should follow the guarantees and the fair-share split of the
/// rest; no team may fall below its guarantee while its queue is full.
fn saturated_scenario() -> Scenario {
    let teams = vec![
        Team { name: "ta", guarantee: 64, burst: 128, shares: 4 },
        Team { name: "tb", guarantee: 32, burst: 128, shares: 2 },
        Team { name: "tc", guarantee: 16, burst: 128, shares: 1 },
    ];
    let mut plan = Plan::new(7);
    let shapes = [(1, 1), (1, 1), (1, 2), (1, 2), (1, 8), (2, 8)];
    for team in 0..3 {
        plan.stream(team, (0.0, 30.0), 0.3, &shapes, (5.0, 12.0), false);
    }
    Scenario { name: "saturated", teams, plan: plan.jobs, window: 32.0, decay: Some("2") }
}

/// A team returns after a long idle period while the others borrow everything: A runs a little,
/// then idles while B and C fill the cluster with long two-node and whole-node jobs (B to its
/// burst); past the minimum run time A returns with two two-node jobs and eight 1-GPU jobs,
/// exactly its guarantee. The reclaim should take two of B's two-node jobs and one of C's
/// whole-node jobs (40 GPUs for 40), and leave B and C at or above their guarantees.
fn return_scenario() -> Scenario {
    let (a, b, c) = (0, 1, 2);
    let mut plan = Plan::new(3);
    plan.batch(0.0, a, 4, (1, 8), 4.0, false);
    plan.batch(6.0, b, 6, (2, 8), 40.0, true);
    plan.batch(6.0, c, 4, (1, 8), 40.0, true);
    plan.batch(18.0, a, 2, (2, 8), 10.0, false);
    plan.batch(18.0, a, 8, (1, 1), 10.0, false);
    Scenario { name: "team-returns", teams: issue_teams([1, 1, 1]), plan: plan.jobs, window: 32.0, decay: Some("2") }
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn issue_16_scenario_holds_its_invariants() {
    check(&run(&issue_scenario()));
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn saturated_teams_get_their_guarantees_and_shares() {
    check(&run(&saturated_scenario()));
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_returning_team_reclaims_exactly_its_guarantee() {
    check(&run(&return_scenario()));
}

/// The measurement itself, on hand-made runs: waits, deficits, reclaim sizes and the minimum run
/// time are found where they are and only there.
#[test]
fn the_measurement_finds_each_broken_invariant() {
    let scenario = Scenario {
        name: "unit",
        teams: vec![
            Team { name: "ta", guarantee: 8, burst: 16, shares: 1 },
            Team { name: "tb", guarantee: 8, burst: 16, shares: 1 },
        ],
        plan: vec![
            Planned { at: 0.0, team: 1, nodes: 1, gpus: 8, secs: 100.0, long: true, nice: false, wide: false },
            Planned { at: 0.0, team: 1, nodes: 1, gpus: 8, secs: 100.0, long: true, nice: false, wide: false },
            Planned { at: 0.0, team: 1, nodes: 1, gpus: 8, secs: 100.0, long: true, nice: false, wide: false },
            Planned { at: 0.0, team: 0, nodes: 1, gpus: 1, secs: 10.0, long: false, nice: false, wide: false },
        ],
        window: 100.0,
        decay: None,
    };
    let timing = Timing::new(1.0);
    let run = |job, team: &str, state: &str, start: Option<i64>, end: Option<i64>, gpus| Run {
        job,
        team: team.into(),
        state: state.into(),
        submit: Some(0),
        start,
        end,
        gpus,
        nodes: Vec::new(),
    };
    let ids: HashMap<u32, usize> = [(1, 0), (2, 1), (3, 2), (4, 3)].into();
    // B holds 24 GPUs (16 borrowed); A's 1-GPU job waits from 0 s. Two B jobs are preempted for
    // it at 10 s and job 1 again at 15 s, 2 s after its restart (24 GPUs for a need of 1: allowed
    // 1 + 8, the smallest job it could take).
    let runs = vec![
        run(1, "tb", "REQUEUED", Some(0), Some(12), 8),
        run(1, "tb", "RUNNING", Some(13), None, 8),
        run(2, "tb", "REQUEUED", Some(0), Some(12), 8),
        run(2, "tb", "PENDING", None, None, 0),
        run(3, "tb", "RUNNING", Some(0), None, 8),
        run(4, "ta", "RUNNING", Some(30), None, 1),
    ];
    let preemptions = vec![(10, 1, 4), (10, 2, 4), (15, 1, 4)];
    let f = measure(&scenario, &timing, &ids, &runs, &preemptions, &[0.5, 0.5], 40);
    let text = f.failures.join("\n");
    assert!(text.contains("reclaim size: 24 GPUs preempted (3 runs) for job 4"), "{text}");
    assert!(
        text.contains("guarantee: team ta stayed below its guarantee of 8 GPUs with fitting work waiting for 30 s"),
        "{text}"
    );
    assert!(text.contains("minimum run time: job 1 preempted for job 4 2 s after its run started"), "{text}");
    assert!(text.contains("minimum run time: job 1 preempted twice within 6 s: [10, 15]"), "{text}");
    assert!(!text.contains("job 2 preempted"), "{text}");
    assert!(!text.contains("team tb"), "B waited only while above its guarantee: {text}");
    assert_eq!(f.reclaim_waits, [30]);
    assert_eq!(f.preempted_runs, 2);
    // Job 2 waits from its preemption at 12 s to the end: B then holds 16 of its 8.
    assert_eq!(waits(&runs.iter().filter(|r| r.job == 2).collect::<Vec<_>>(), 40), [(12, 40)]);
}
