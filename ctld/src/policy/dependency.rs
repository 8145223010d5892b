//! Job dependencies (`--dependency`) and the other per-job conditions that keep a pending job out
//! of a scheduling pass: an array's `%N` throttle. The scheduler asks [`eligibility`] once per job;
//! the core calls [`refresh`] before each pass to update what `squeue %E` and `scontrol` show and
//! to find jobs whose dependency can never be satisfied.
//!
//! Forms: `after`, `afterany`, `afterok`, `afternotok`, `aftercorr` with one or more
//! `:`-separated job ids (`N` for a whole job or array, `N_T` for one array task), `after:N+M`
//! (M minutes after N started), `singleton`; items joined by `,` (all must hold) or `?` (any may
//! hold), not both. A job ctld no longer holds in memory counts as satisfied, as in Slurm once the
//! job is purged.
//!
//! `aftercorr:N` holds per array task: task k of the dependent array waits for task k of array N
//! to complete (a failed task k fails only task k; a missing task k counts as satisfied). A base
//! record whose pending tasks wait on different targets is eligible when one of them is, and
//! [`ready_task`] tells the scheduler which task to split off.
//!
//! Cost: a dependency has at most [`MAX_ITEMS`] items, and working one out takes time
//! proportional to its items: each target is found by id, an array's records and the jobs a
//! `singleton` competes with through a [`Lookup`] built once per pass (or per request). Between
//! passes a [`Cache`] keeps each dependency parsed, rebuilds the shown text only when its items'
//! statuses change, and lets the passes after a refresh reuse its statuses where only job ends
//! could change them. A job whose dependency waits on the states of the jobs it names is set
//! aside by the job table until one of them changes ([`refresh`]), so a refresh works out the
//! dependent jobs that may start and those just woken, not every job waiting on a dependency. A
//! dependency that would close a cycle (a job waiting, directly or through other jobs, on
//! itself) is refused by `scontrol update` ([`check_cycle`]).

pub(crate) use crate::model::dependency::{Cache, Dependency, Item, Kind, Status};
use crate::model::refusal::Refusal;
use crate::model::state::{Job, State};
use drover_shared::UnixTime;
use drover_shared::job::{JobId, JobInfo, JobState};
use drover_shared::proto::client::ErrorCode;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The most items (job ids and `singleton`s) one dependency may have.
pub(crate) const MAX_ITEMS: usize = 1000;

fn problem(detail: String) -> Refusal {
    Refusal::new(ErrorCode::Dependency, detail)
}

/// An item as the memo of a [`Lookup`] knows it: kind, target and `+minutes`.
type ItemKey = (Kind, (JobId, Option<u32>), u32);

impl Cache {
    /// The job's parsed dependency, from the cache or parsed now.
    fn dependency(&self, job: &Job) -> Option<Arc<Dependency>> {
        match self.parsed.get(&job.info.job_id) {
            Some(parsed) => Some(parsed.clone()),
            None => parse(job.spec.dependency.as_deref()?).ok().map(Arc::new),
        }
    }
}

/// Where a pass (or one request) finds the jobs a `singleton` competes with: the running and
/// pending jobs by owner and name, built with one walk over the jobs when a pending job's
/// dependency has a `singleton` (an array's records come from the job table's index). Owns job
/// ids only, so the state may change around it (reasons, priorities) while a pass holds it.
#[derive(Default)]
pub(crate) struct Lookup {
    /// (uid, name) → the running jobs and the lowest pending job id with that owner and name.
    named: HashMap<(u32, String), (Vec<JobId>, Option<JobId>)>,
    /// Items already worked out (they do not depend on the job that names them): many jobs
    /// naming the same targets cost one look each. Filled as items are worked out, which is
    /// why working a dependency out takes the lookup `&mut`.
    memo: HashMap<ItemKey, Status>,
    /// Built for the scheduling passes right after a refresh: they may take the statuses it
    /// worked out for dependencies that only wait for ends.
    pass: bool,
}

impl Lookup {
    /// The lookup of a scheduling pass, which follows a [`refresh`] with no job ended since.
    pub(crate) fn for_pass(state: &State) -> Lookup {
        // Without a pending dependent job, no job of the pass asks the lookup anything.
        let lookup = if state.jobs.any_dependent() { Lookup::new(state) } else { Lookup::default() };
        Lookup { pass: true, ..lookup }
    }

    pub(crate) fn new(state: &State) -> Lookup {
        let mut lookup = Lookup::default();
        if !state.jobs.any_singleton() {
            return lookup;
        }
        for job in state.jobs.values().filter(|j| j.committed) {
            let info = &job.info;
            let state = info.state();
            if matches!(state, JobState::Running | JobState::Pending) {
                let entry = lookup.named.entry((info.uid, info.name.clone())).or_default();
                if state == JobState::Running {
                    entry.0.push(info.job_id);
                } else if entry.1.is_none_or(|lowest| info.job_id < lowest) {
                    entry.1 = Some(info.job_id);
                }
            }
        }
        lookup
    }
}

/// Parses a `--dependency` value.
pub(crate) fn parse(text: &str) -> Result<Dependency, Refusal> {
    if text.contains(',') && text.contains('?') {
        return Err(problem(format!("dependency `{text}` mixes `,` and `?`")));
    }
    let any = text.contains('?');
    let mut items = Vec::new();
    let too_many = || problem(format!("a dependency may name at most {MAX_ITEMS} jobs"));
    for part in text.split([',', '?']).filter(|p| !p.is_empty()) {
        if items.len() >= MAX_ITEMS {
            return Err(too_many());
        }
        let mut fields = part.split(':');
        let word = fields.next().unwrap_or_default();
        let kinds = [Kind::After, Kind::AfterAny, Kind::AfterOk, Kind::AfterNotOk, Kind::Singleton, Kind::AfterCorr];
        let Some(kind) = kinds.into_iter().find(|k| word.eq_ignore_ascii_case(k.name())) else {
            let other = word.to_ascii_lowercase();
            return Err(problem(format!("dependency type `{other}` is not supported yet")));
        };
        if kind == Kind::Singleton {
            if fields.next().is_some() {
                return Err(problem(format!("`{part}`: singleton takes no job id")));
            }
            items.push(Item { kind, target: None, delay_minutes: 0 });
            continue;
        }
        let mut any_id = false;
        for field in fields {
            any_id = true;
            if items.len() >= MAX_ITEMS {
                return Err(too_many());
            }
            let (id, delay) = match field.split_once('+') {
                Some((id, minutes)) if kind == Kind::After => {
                    let minutes = minutes.parse().map_err(|_| problem(format!("bad time `{minutes}` in `{part}`")))?;
                    (id, minutes)
                }
                Some(_) => return Err(problem(format!("`{part}`: only `after` takes `+time`"))),
                None => (field, 0),
            };
            let target = parse_target(id).ok_or_else(|| problem(format!("bad job id `{id}` in `{part}`")))?;
            if kind == Kind::AfterCorr && target.1.is_some() {
                return Err(problem(format!("`{part}`: aftercorr names a whole array")));
            }
            items.push(Item { kind, target: Some(target), delay_minutes: delay });
        }
        if !any_id {
            return Err(problem(format!("`{part}` names no job")));
        }
    }
    if items.is_empty() {
        return Err(problem(format!("empty dependency `{text}`")));
    }
    Ok(Dependency { items, any })
}

fn parse_target(text: &str) -> Option<(JobId, Option<u32>)> {
    let number = |s: &str| (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten();
    match text.split_once('_') {
        // `N_*`: the whole array, as `N`.
        Some((job, "*")) => Some((number(job).filter(|j| *j > 0)?, None)),
        Some((job, task)) => Some((number(job).filter(|j| *j > 0)?, Some(number(task)?))),
        None => Some((number(text).filter(|j| *j > 0)?, None)),
    }
}

/// Submit-time check: the value parses and every job it names is known.
pub(crate) fn validate(state: &State, text: &str) -> Result<(), Refusal> {
    let dependency = parse(text)?;
    for item in &dependency.items {
        if let Some(target) = item.target
            && targets(state, target).is_empty()
        {
            return Err(problem(format!("job {} is not known", show_target(target))));
        }
    }
    Ok(())
}

/// `scontrol update`: every job the dependency `text` (already validated) waits on, directly or
/// through the dependencies of the jobs it names, each with the job of `text` it is reached
/// through. One walk per request, each job once: at most the items of the jobs it reaches.
pub(crate) fn reachable(state: &State, text: &str) -> HashMap<JobId, JobId> {
    let mut reached: HashMap<JobId, JobId> = HashMap::new();
    let Ok(dependency) = parse(text) else { return reached };
    let mut next: Vec<(JobId, JobId)> =
        dependency.items.iter().filter_map(|i| i.target).map(|(target, _)| (target, target)).collect();
    while let Some((target, via)) = next.pop() {
        if reached.contains_key(&target) {
            continue;
        }
        reached.insert(target, via);
        let Some(text) = state.jobs.get(&target).and_then(|j| j.spec.dependency.as_deref()) else { continue };
        if let Ok(further) = parse(text) {
            next.extend(further.items.iter().filter_map(|i| i.target).map(|(t, _)| (t, via)));
        }
    }
    reached
}

/// Whether giving `job_id` a dependency that reaches `reached` ([`reachable`]) would make it
/// wait on itself: the job, or its array if it is an array record, is among them.
pub(crate) fn check_cycle(state: &State, job_id: JobId, reached: &HashMap<JobId, JobId>) -> Result<(), Refusal> {
    let array = state.jobs.get(&job_id).and_then(|j| j.info.array_job_id);
    match std::iter::once(job_id).chain(array).find_map(|own| reached.get(&own).map(|via| (own, *via))) {
        None => Ok(()),
        Some((own, via)) if own == via => {
            Err(problem(format!("circular dependency: job {job_id} would depend on itself")))
        }
        Some((_, via)) => {
            Err(problem(format!("circular dependency: job {job_id} would depend on itself through job {via}")))
        }
    }
}

fn show_target((job_id, task): (JobId, Option<u32>)) -> String {
    match task {
        Some(task) => format!("{job_id}_{task}"),
        None => job_id.to_string(),
    }
}

/// A target as Slurm shows it in `%E`/`Dependency=`: a whole array is `N_*`.
fn shown_target(state: &State, target: (JobId, Option<u32>)) -> String {
    let is_array = state.jobs.get(&target.0).is_some_and(|j| j.info.array_job_id == Some(target.0));
    if target.1.is_none() && is_array { format!("{}_*", target.0) } else { show_target(target) }
}

/// The committed records a target stands for: a job, every record of an array, or one task.
/// A plain job is found by id; an array's records through the job table's index.
fn targets(state: &State, (job_id, task): (JobId, Option<u32>)) -> Vec<&JobInfo> {
    let Some(job) = state.jobs.get(&job_id) else { return Vec::new() };
    let is_array = job.info.array_job_id == Some(job_id);
    if task.is_none() && !is_array {
        return if job.committed { vec![&*job.info] } else { Vec::new() };
    }
    state
        .jobs
        .array_records(job_id)
        .filter_map(|id| state.jobs.get(&id))
        .filter(|j| j.committed)
        .map(|j| &*j.info)
        .filter(|info| match task {
            None => true,
            Some(t) => {
                info.array_task_id == Some(t) || (info.array_task_id.is_none() && info.array_tasks_pending.contains(&t))
            }
        })
        .collect()
}

/// Where one item other than `aftercorr` stands for `job` (those hold per task: [`Evaluation`]).
fn item_status(state: &State, lookup: &mut Lookup, job: &Job, item: &Item, now: UnixTime) -> Status {
    let Some(target) = item.target else {
        let me = job.info.job_id;
        let blocked = lookup.named.get(&(job.info.uid, job.info.name.clone())).is_some_and(|(running, lowest)| {
            running.iter().any(|id| *id != me) || lowest.is_some_and(|lowest| lowest < me)
        });
        return if blocked { Status::Waiting } else { Status::Satisfied };
    };
    if let Some(job) = state.jobs.get(&target.0)
        && target.1.is_none()
        && job.info.array_job_id != Some(target.0)
    {
        // A plain job: found by id, nothing to remember.
        let records: &[&JobInfo] = if job.committed { &[&*job.info] } else { &[] };
        return target_status(records, item, target, now);
    }
    let key = (item.kind, target, item.delay_minutes);
    if let Some(status) = lookup.memo.get(&key) {
        return *status;
    }
    let status = target_status(&targets(state, target), item, target, now);
    lookup.memo.insert(key, status);
    status
}

/// Where an item stands given the records its target stands for.
fn target_status(records: &[&JobInfo], item: &Item, target: (JobId, Option<u32>), now: UnixTime) -> Status {
    // A target whose own task is still pending in a base record has not started.
    let started = |info: &JobInfo| {
        info.state() != JobState::Pending
            && (info.array_task_id.is_some()
                || info.array_tasks_pending.is_empty()
                || target.1.is_none() && info.state().is_terminal())
    };
    let ended = |info: &JobInfo| info.state().is_terminal();
    match item.kind {
        Kind::After if records.iter().all(|i| started(i)) => {
            let delay = i64::from(item.delay_minutes) * 60;
            let started_long_enough =
                records.iter().all(|i| i.start_time.is_none_or(|start| start.saturating_add(delay) <= now));
            if started_long_enough { Status::Satisfied } else { Status::Waiting }
        }
        Kind::AfterAny if records.iter().all(|i| ended(i)) => Status::Satisfied,
        Kind::AfterOk => completed_status(records),
        Kind::AfterNotOk if records.iter().all(|i| ended(i)) => {
            if records.iter().any(|i| i.state() != JobState::Completed) { Status::Satisfied } else { Status::Never }
        }
        _ => Status::Waiting,
    }
}

/// `afterok`: every record completed; never once one ended otherwise.
fn completed_status(records: &[&JobInfo]) -> Status {
    let ended = |info: &JobInfo| info.state().is_terminal();
    if records.iter().any(|i| ended(i) && i.state() != JobState::Completed) {
        Status::Never
    } else if records.iter().all(|i| ended(i)) {
        Status::Satisfied
    } else {
        Status::Waiting
    }
}

/// The array tasks a record stands for: its own, or the pending ones of a base record; `[None]`
/// for a job that is no array task.
fn tasks_of(job: &Job) -> Vec<Option<u32>> {
    match job.info.array_task_id {
        Some(task) => vec![Some(task)],
        None if !job.info.array_tasks_pending.is_empty() => {
            job.info.array_tasks_pending.iter().map(|t| Some(*t)).collect()
        }
        None => vec![None],
    }
}

/// One job's dependency worked out once: every item but `aftercorr` (the same for each task),
/// and, for `aftercorr`, the target arrays' records by task index, so that a base record of many
/// pending tasks costs one scan of the jobs, not one per task.
struct Evaluation<'a> {
    dependency: Arc<Dependency>,
    /// `None` for the `aftercorr` items.
    fixed: Vec<Option<Status>>,
    /// Target array → task index → the records standing for that task.
    corr: HashMap<JobId, HashMap<u32, Vec<&'a JobInfo>>>,
    state: &'a State,
}

impl<'a> Evaluation<'a> {
    fn new(
        state: &'a State,
        lookup: &mut Lookup,
        job: &Job,
        dependency: Arc<Dependency>,
        now: UnixTime,
    ) -> Evaluation<'a> {
        let fixed = dependency
            .items
            .iter()
            .map(|item| (item.kind != Kind::AfterCorr).then(|| item_status(state, &mut *lookup, job, item, now)))
            .collect();
        let arrays: HashSet<JobId> = dependency
            .items
            .iter()
            .filter(|i| i.kind == Kind::AfterCorr)
            .filter_map(|i| i.target)
            .map(|t| t.0)
            .collect();
        let mut corr: HashMap<JobId, HashMap<u32, Vec<&JobInfo>>> = HashMap::new();
        for array in arrays {
            let by_task = corr.entry(array).or_default();
            let records = state.jobs.array_records(array).filter_map(|id| state.jobs.get(&id));
            for info in records.filter(|j| j.committed).map(|j| &j.info) {
                match info.array_task_id {
                    Some(task) => by_task.entry(task).or_default().push(info),
                    None => info.array_tasks_pending.iter().for_each(|t| by_task.entry(*t).or_default().push(info)),
                }
            }
        }
        Evaluation { dependency, fixed, corr, state }
    }

    /// Where the dependency stands for one task (`None`: a job that is no array task), with each
    /// item's status. Task k of an `aftercorr` waits for task k of the target array (a target
    /// without task k counts as satisfied); a job that is no array task waits for the whole array.
    fn for_task(&self, task: Option<u32>) -> (Status, Vec<Status>) {
        let statuses: Vec<Status> = self
            .dependency
            .items
            .iter()
            .zip(&self.fixed)
            .map(|(item, fixed)| match (fixed, item.target, task) {
                (Some(status), _, _) => *status,
                (None, Some(target), Some(k)) => {
                    let records = self.corr.get(&target.0).and_then(|by_task| by_task.get(&k));
                    completed_status(records.map_or(&[][..], Vec::as_slice))
                }
                (None, Some(target), None) => completed_status(&targets(self.state, target)),
                (None, None, _) => Status::Satisfied,
            })
            .collect();
        let overall = if self.dependency.any {
            if statuses.contains(&Status::Satisfied) {
                Status::Satisfied
            } else if statuses.iter().all(|s| *s == Status::Never) {
                Status::Never
            } else {
                Status::Waiting
            }
        } else if statuses.contains(&Status::Never) {
            Status::Never
        } else if statuses.iter().all(|s| *s == Status::Satisfied) {
            Status::Satisfied
        } else {
            Status::Waiting
        };
        (overall, statuses)
    }

    fn has_corr(&self) -> bool {
        self.fixed.iter().any(Option::is_none)
    }
}

/// The task of a base record the scheduler should split off next: the first pending task whose
/// `aftercorr` dependency holds. `None` (take the lowest) when the job has no `aftercorr`.
pub(crate) fn ready_task(state: &State, job_id: JobId, now: UnixTime) -> Option<u32> {
    let job = state.jobs.get(&job_id)?;
    let dependency = parse(job.spec.dependency.as_deref()?).ok()?;
    if !dependency.items.iter().any(|i| i.kind == Kind::AfterCorr) || job.info.array_task_id.is_some() {
        return None;
    }
    let mut lookup = Lookup::new(state);
    let evaluation = Evaluation::new(state, &mut lookup, job, Arc::new(dependency), now);
    job.info.array_tasks_pending.iter().copied().find(|t| evaluation.for_task(Some(*t)).0 == Status::Satisfied)
}

/// Where a job's dependency stands, with each item's status (`None`: no dependency, or one that
/// no longer parses, which counts as satisfied).
fn judge<'a>(
    state: &'a State,
    lookup: &mut Lookup,
    job: &Job,
    now: UnixTime,
) -> Option<(Evaluation<'a>, Status, Vec<Status>)> {
    let dependency = state.dependencies.dependency(job)?;
    let evaluation = Evaluation::new(state, lookup, job, dependency, now);
    // Only `aftercorr` differs between tasks; otherwise one evaluation stands for all.
    let tasks = if evaluation.has_corr() { tasks_of(job) } else { vec![None] };
    let rank = |s: Status| match s {
        Status::Satisfied => 0,
        Status::Waiting => 1,
        Status::Never => 2,
    };
    let mut best: Option<(Status, Vec<Status>)> = None;
    for task in tasks {
        let result = evaluation.for_task(task);
        if best.as_ref().is_none_or(|(b, _)| rank(result.0) < rank(*b)) {
            best = Some(result);
        }
        if best.as_ref().is_some_and(|(b, _)| *b == Status::Satisfied) {
            break;
        }
    }
    let (overall, statuses) = best?;
    Some((evaluation, overall, statuses))
}

/// Where a job's dependency stands, and the text Slurm shows for it (`None` once satisfied):
/// each unsatisfied item with `(unfulfilled)` or `(failed)`. A base record of pending tasks
/// stands where its best task stands (satisfied, else waiting, else never).
#[cfg(test)]
pub(crate) fn evaluate(state: &State, lookup: &mut Lookup, job: &Job, now: UnixTime) -> (Status, Option<String>) {
    let Some((evaluation, overall, statuses)) = judge(state, lookup, job, now) else {
        return (Status::Satisfied, None);
    };
    (overall, shown(state, &evaluation, overall, &statuses))
}

/// The text Slurm shows for a dependency whose items stand at `statuses` (`None` once satisfied).
fn shown(state: &State, evaluation: &Evaluation<'_>, overall: Status, statuses: &[Status]) -> Option<String> {
    if overall == Status::Satisfied {
        return None;
    }
    let shown: Vec<String> = evaluation
        .dependency
        .items
        .iter()
        .zip(statuses)
        .filter(|(_, status)| **status != Status::Satisfied)
        .map(|(item, status)| {
            let word = if *status == Status::Never { "failed" } else { "unfulfilled" };
            match item.target {
                Some(target) if item.delay_minutes > 0 => {
                    format!("{}:{}+{}({word})", item.kind.name(), shown_target(state, target), item.delay_minutes)
                }
                Some(target) => format!("{}:{}({word})", item.kind.name(), shown_target(state, target)),
                None => format!("{}({word})", item.kind.name()),
            }
        })
        .collect();
    Some(shown.join(if evaluation.dependency.any { "?" } else { "," }))
}

/// Whether a pending job may be considered by this pass; `Err` carries the pending reason.
/// `lookup` is the pass's ([`Lookup::new`] on the state the pass started from).
pub(crate) fn eligibility(state: &State, lookup: &mut Lookup, job: &Job, now: UnixTime) -> Result<(), &'static str> {
    let stable = if lookup.pass { state.dependencies.stable.get(&job.info.job_id).copied() } else { None };
    let status =
        stable.unwrap_or_else(|| judge(state, lookup, job, now).map_or(Status::Satisfied, |(_, status, _)| status));
    match status {
        Status::Waiting => return Err("Dependency"),
        Status::Never => return Err("DependencyNeverSatisfied"),
        Status::Satisfied => {}
    }
    if crate::policy::array::throttled(state, job) {
        return Err("JobArrayTaskLimit");
    }
    Ok(())
}

/// Whether a dependency's status changes only when the jobs it names change state (so a job
/// waiting on it may be set aside until one does, [`crate::model::state::Jobs::block`]): no
/// `singleton` (other jobs of the same name) and no `after:N+M` (the clock).
fn event_driven(dependency: &Dependency) -> bool {
    dependency.items.iter().all(|i| i.kind != Kind::Singleton && i.delay_minutes == 0)
}

/// Updates the shown dependency of every pending dependent job the job table has not set aside;
/// returns the jobs whose dependency can never be satisfied and that asked to be cancelled then
/// (`--kill-on-invalid-dep=yes`), and the jobs whose shown text changed (to store).
///
/// A job whose dependency waits (or can never be satisfied) and depends on the named jobs'
/// states only ([`event_driven`]) is then set aside with its reason: it is out of the ready jobs
/// and of the next refreshes until one of the jobs it names changes state (the job table wakes
/// it at its next `refile`), so the refresh and the pass cost the dependent jobs that may start
/// and those just woken, not every job waiting on a dependency.
pub(crate) fn refresh(state: &mut State, now: UnixTime) -> (Vec<JobId>, Vec<JobId>) {
    let mut updates = Vec::new();
    let mut kill = Vec::new();
    let mut block = Vec::new();
    let mut cache = Cache::default();
    state.jobs.refile(now);
    let mut lookup = if state.jobs.any_dependent() { Lookup::new(state) } else { Lookup::default() };
    for job in state.jobs.dependent_open().filter(|j| j.committed && j.info.state() == JobState::Pending) {
        let job_id = job.info.job_id;
        let ends_only = |d: &Dependency| {
            d.items.iter().all(|i| matches!(i.kind, Kind::AfterOk | Kind::AfterAny | Kind::AfterNotOk))
        };
        let mut stable = false;
        let mut targets: Option<Vec<(JobId, bool)>> = None;
        if let Some(dependency) = state.dependencies.dependency(job) {
            stable = ends_only(&dependency);
            if event_driven(&dependency) {
                targets = Some(dependency.items.iter().filter_map(|i| i.target).map(|t| watched(state, t)).collect());
            }
            cache.parsed.insert(job_id, dependency);
        }
        let judged = judge(state, &mut lookup, job, now);
        let status = judged.as_ref().map_or(Status::Satisfied, |(_, status, _)| *status);
        if stable {
            cache.stable.insert(job_id, status);
        }
        // The text changes only with its items' statuses: rebuilt only then.
        let fingerprint = {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            judged.as_ref().map(|(_, status, statuses)| (status, statuses)).hash(&mut hasher);
            hasher.finish()
        };
        if state.dependencies.shown.get(&job_id) != Some(&fingerprint) {
            let text =
                judged.as_ref().and_then(|(evaluation, status, statuses)| shown(state, evaluation, *status, statuses));
            if text != job.info.dependency {
                updates.push((job_id, text));
            }
        }
        cache.shown.insert(job_id, fingerprint);
        if status == Status::Never && job.spec.kill_on_invalid_dep {
            kill.push(job_id);
        } else if status != Status::Satisfied
            && let Some(targets) = targets
        {
            block.push((job_id, status, targets));
        }
    }
    state.dependencies = cache;
    let changed = updates.iter().map(|(id, _)| *id).collect();
    for (job_id, shown) in updates {
        if let Some(job) = state.jobs.get_mut(&job_id) {
            job.info.dependency = shown;
        }
    }
    for (job_id, status, _) in &block {
        // The reason the pass would give it, which it no longer sees.
        let reason = if *status == Status::Never { "DependencyNeverSatisfied" } else { "Dependency" };
        if state.jobs.get(job_id).is_some_and(|j| j.info.reason != reason)
            && let Some(job) = state.jobs.get_mut(job_id)
        {
            job.info.reason = reason.to_owned();
        }
    }
    // Filed now, so each block applies to the job as it is after the changes above.
    state.jobs.refile(now);
    for (job_id, _, targets) in block {
        state.jobs.block(job_id, targets);
        state.dependencies.forget(job_id);
    }
    (kill, changed)
}

/// What the job table watches for a target: its job id, and whether that id is an array's (any
/// of its records changing counts).
fn watched(state: &State, (job_id, task): (JobId, Option<u32>)) -> (JobId, bool) {
    let is_array = task.is_some() || state.jobs.get(&job_id).is_some_and(|j| j.info.array_job_id == Some(job_id));
    (job_id, is_array)
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    fn check(text: &str, expected: Expect) {
        expected.assert_debug_eq(&parse(text).map_err(|refusal| refusal.detail));
    }

    #[test]
    fn grammar() {
        check(
            "afterok:12:13_2?singleton",
            expect![[r#"
                Ok(
                    Dependency {
                        items: [
                            Item {
                                kind: AfterOk,
                                target: Some(
                                    (
                                        12,
                                        None,
                                    ),
                                ),
                                delay_minutes: 0,
                            },
                            Item {
                                kind: AfterOk,
                                target: Some(
                                    (
                                        13,
                                        Some(
                                            2,
                                        ),
                                    ),
                                ),
                                delay_minutes: 0,
                            },
                            Item {
                                kind: Singleton,
                                target: None,
                                delay_minutes: 0,
                            },
                        ],
                        any: true,
                    },
                )
            "#]],
        );
        check(
            "afterok:1,afterany:2?after:3",
            expect![[r#"
                Err(
                    "dependency `afterok:1,afterany:2?after:3` mixes `,` and `?`",
                )
            "#]],
        );
        assert_eq!(parse("afterok:5_*").map(|d| d.items[0].target), Ok(Some((5, None))));
        check(
            "aftercorr:4",
            expect![[r#"
            Ok(
                Dependency {
                    items: [
                        Item {
                            kind: AfterCorr,
                            target: Some(
                                (
                                    4,
                                    None,
                                ),
                            ),
                            delay_minutes: 0,
                        },
                    ],
                    any: false,
                },
            )
        "#]],
        );
        check(
            "after:3+10:5",
            expect![[r#"
            Ok(
                Dependency {
                    items: [
                        Item {
                            kind: After,
                            target: Some(
                                (
                                    3,
                                    None,
                                ),
                            ),
                            delay_minutes: 10,
                        },
                        Item {
                            kind: After,
                            target: Some(
                                (
                                    5,
                                    None,
                                ),
                            ),
                            delay_minutes: 0,
                        },
                    ],
                    any: false,
                },
            )
        "#]],
        );
        check(
            "afterok:3+10",
            expect![[r#"
            Err(
                "`afterok:3+10`: only `after` takes `+time`",
            )
        "#]],
        );
        check(
            "aftercorr:4_1",
            expect![[r#"
            Err(
                "`aftercorr:4_1`: aftercorr names a whole array",
            )
        "#]],
        );
        check(
            "after:3+x",
            expect![[r#"
            Err(
                "bad time `x` in `after:3+x`",
            )
        "#]],
        );
        check(
            "afterburstbuffer:3",
            expect![[r#"
            Err(
                "dependency type `afterburstbuffer` is not supported yet",
            )
        "#]],
        );
        check(
            "afterok:x",
            expect![[r#"
                Err(
                    "bad job id `x` in `afterok:x`",
                )
            "#]],
        );
    }
}
