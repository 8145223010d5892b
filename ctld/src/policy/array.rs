//! Job arrays. One submission creates one record, the array's *base record*: it gets the job id
//! N, `ArrayJobId=N`, and stands for every task still pending (`N_[0-3]`). When the scheduler
//! starts a task, that task is split off into a record of its own with a fresh job id
//! (`JobId=N+k ArrayJobId=N ArrayTaskId=0`); the last task to leave the base record keeps the
//! base record and its id, as in Slurm. Every task that ran is therefore a real job record, in
//! memory and in the database, and `squeue`, `scontrol` and `sacct` show them without guessing.

use crate::model::refusal::Refusal;
use crate::model::state::{Job, State};
use drover_shared::grammar::array::{ArraySpec, parse_array, uniform_step};
use drover_shared::job::{JobId, JobState};
use drover_shared::proto::client::ErrorCode;
use drover_shared::proto::node::ArrayTask;

/// Slurm's default `MaxArraySize`: task indexes run from 0 to 1000.
pub(crate) const MAX_ARRAY_SIZE: u32 = 1001;

/// Parses a submission's `--array` value.
pub(crate) fn parse(text: &str) -> Result<ArraySpec, Refusal> {
    parse_array(text, MAX_ARRAY_SIZE - 1).map_err(|e| Refusal::new(ErrorCode::BadArraySpec, e.to_string()))
}

/// Turns a freshly numbered job into an array's base record.
pub(crate) fn init(job: &mut Job) {
    let Some(text) = job.spec.array.as_deref() else { return };
    // Validated at submit; a value that no longer parses leaves a plain job.
    let Ok(spec) = parse(text) else { return };
    let info = &mut job.info;
    info.array_job_id = Some(info.job_id);
    info.array_max_tasks = spec.max_running;
    if let [only] = spec.indexes[..] {
        info.array_task_id = Some(only);
    } else {
        info.array_tasks_pending = spec.indexes;
    }
}

/// Whether the record still stands for several pending tasks.
pub(crate) fn is_base_with_pending(job: &Job) -> bool {
    job.info.array_task_id.is_none() && !job.info.array_tasks_pending.is_empty()
}

/// Takes one pending task out of the base record `job_id` (the lowest, or `task`), and returns
/// the id of the record that now is that task, with whether it is a new record. A plain job or a
/// single task is returned as it is. `None` when `task` is not pending there.
pub(crate) fn claim(state: &mut State, job_id: JobId, task: Option<u32>) -> Option<(JobId, bool)> {
    let job = state.jobs.get_mut(&job_id)?;
    if !is_base_with_pending(job) {
        return match task {
            None => Some((job_id, false)),
            Some(t) => (job.info.array_task_id == Some(t)).then_some((job_id, false)),
        };
    }
    let pending = &mut job.info.array_tasks_pending;
    let position = match task {
        None => 0,
        Some(t) => pending.iter().position(|p| *p == t)?,
    };
    let index = pending.remove(position);
    if pending.is_empty() {
        // The last task keeps the base record and its id.
        job.info.array_task_id = Some(index);
        return Some((job_id, false));
    }
    let new_id = state.take_job_id();
    let job = &state.jobs[&job_id];
    let mut info = job.info.clone();
    info.job_id = new_id;
    info.array_task_id = Some(index);
    info.array_tasks_pending = Vec::new();
    let task_job = Job {
        info: info.into(),
        spec: job.spec.clone(),
        candidates: job.candidates.clone(),
        node_filter: job.node_filter.clone(),
        alloc: None,
        committed: true,
        launched_at: None,
        cancel_requested_by: None,
        started: false,
        reason_id: 0,
    };
    state.jobs.insert(new_id, task_job);
    Some((new_id, true))
}

/// Tasks of array `array_job_id` running now (for the `%N` throttle).
pub(crate) fn running_tasks(state: &State, array_job_id: JobId) -> u32 {
    let running = state
        .jobs
        .array_records(array_job_id)
        .filter_map(|id| state.jobs.get(&id))
        .filter(|j| j.info.state() == JobState::Running)
        .count();
    u32::try_from(running).unwrap_or(u32::MAX)
}

/// Whether the array's throttle keeps this record's next task from starting. The throttle is
/// the array's: `scontrol update ArrayTaskThrottle=` sets it on the base record, and a task split
/// off before then (held and released, or requeued) follows it too; the record's own copy is
/// used only once the base record is gone.
pub(crate) fn throttled(state: &State, job: &Job) -> bool {
    let Some(array) = job.info.array_job_id else { return false };
    let max = state.jobs.get(&array).map_or(job.info.array_max_tasks, |base| base.info.array_max_tasks);
    max > 0 && running_tasks(state, array) >= max
}

/// Every record of array `array_job_id` (its base record and its split-off tasks).
pub(crate) fn members(state: &State, array_job_id: JobId) -> Vec<JobId> {
    state.jobs.array_records(array_job_id).collect()
}

/// What the node needs to know about an array task (`%A`, `%a`, `SLURM_ARRAY_*`).
pub(crate) fn launch_info(job: &Job) -> Option<ArrayTask> {
    let array_job_id = job.info.array_job_id?;
    let task_id = job.info.array_task_id?;
    let indexes =
        job.spec.array.as_deref().and_then(|text| parse(text).ok()).map(|s| s.indexes).unwrap_or_else(|| vec![task_id]);
    Some(ArrayTask {
        array_job_id,
        task_id,
        count: u32::try_from(indexes.len()).unwrap_or(u32::MAX),
        min: indexes.first().copied().unwrap_or(task_id),
        max: indexes.last().copied().unwrap_or(task_id),
        step: uniform_step(&indexes),
    })
}
