//! Job dependencies (`--dependency`) and the other per-job conditions that keep a pending job out
//! of a scheduling pass: an array's `%N` throttle. The scheduler asks [`eligibility`] once per job;
//! the core calls [`refresh`] before each pass to update what `squeue %E` and `scontrol` show and
//! to find jobs whose dependency can never be satisfied.
//!
//! Forms: `after`, `afterany`, `afterok`, `afternotok` with one or more `:`-separated job ids
//! (`N` for a whole job or array, `N_T` for one array task), `singleton`; items joined by `,`
//! (all must hold) or `?` (any may hold), not both. A job ctld no longer holds in memory counts as
//! satisfied, as in Slurm once the job is purged.

use crate::state::{Job, State};
use crate::validate::Rejection;
use drover_shared::UnixTime;
use drover_shared::job::{JobId, JobInfo, JobState};
use drover_shared::proto::client::ErrorCode;

/// The kinds of dependency Drover supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    After,
    AfterAny,
    AfterOk,
    AfterNotOk,
    Singleton,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::After => "after",
            Kind::AfterAny => "afterany",
            Kind::AfterOk => "afterok",
            Kind::AfterNotOk => "afternotok",
            Kind::Singleton => "singleton",
        }
    }
}

/// One condition: a kind and, except for `singleton`, one job or array task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) kind: Kind,
    pub(crate) target: Option<(JobId, Option<u32>)>,
}

/// A parsed `--dependency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dependency {
    pub(crate) items: Vec<Item>,
    /// Joined by `?`: any item suffices.
    pub(crate) any: bool,
}

/// Where one item or the whole dependency stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Satisfied,
    Waiting,
    Never,
}

fn problem(detail: String) -> Rejection {
    (ErrorCode::Dependency, detail)
}

/// Parses a `--dependency` value.
pub(crate) fn parse(text: &str) -> Result<Dependency, Rejection> {
    if text.contains(',') && text.contains('?') {
        return Err(problem(format!("dependency `{text}` mixes `,` and `?`")));
    }
    let any = text.contains('?');
    let mut items = Vec::new();
    for part in text.split([',', '?']).filter(|p| !p.is_empty()) {
        let mut fields = part.split(':');
        let kind = match fields.next().unwrap_or_default().to_ascii_lowercase().as_str() {
            "after" => Kind::After,
            "afterany" => Kind::AfterAny,
            "afterok" => Kind::AfterOk,
            "afternotok" => Kind::AfterNotOk,
            "singleton" => Kind::Singleton,
            other => return Err(problem(format!("dependency type `{other}` is not supported yet"))),
        };
        if kind == Kind::Singleton {
            if fields.next().is_some() {
                return Err(problem(format!("`{part}`: singleton takes no job id")));
            }
            items.push(Item { kind, target: None });
            continue;
        }
        let mut any_id = false;
        for id in fields {
            any_id = true;
            items.push(Item {
                kind,
                target: Some(parse_target(id).ok_or_else(|| problem(format!("bad job id `{id}` in `{part}`")))?),
            });
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
        Some((job, task)) => Some((number(job).filter(|j| *j > 0)?, Some(number(task)?))),
        None => Some((number(text).filter(|j| *j > 0)?, None)),
    }
}

/// Submit-time check: the value parses and every job it names is known.
pub(crate) fn validate(state: &State, text: &str) -> Result<(), Rejection> {
    let dependency = parse(text)?;
    for item in &dependency.items {
        if let Some(target) = item.target {
            if targets(state, target).is_empty() {
                return Err(problem(format!("job {} is not known", show_target(target))));
            }
        }
    }
    Ok(())
}

fn show_target((job_id, task): (JobId, Option<u32>)) -> String {
    match task {
        Some(task) => format!("{job_id}_{task}"),
        None => job_id.to_string(),
    }
}

/// The committed records a target stands for: a job, every record of an array, or one task.
fn targets(state: &State, (job_id, task): (JobId, Option<u32>)) -> Vec<&JobInfo> {
    let is_array = state.jobs.get(&job_id).is_some_and(|j| j.info.array_job_id == Some(job_id));
    state
        .jobs
        .values()
        .filter(|j| j.committed)
        .map(|j| &*j.info)
        .filter(|info| match task {
            None if is_array => info.array_job_id == Some(job_id),
            None => info.job_id == job_id,
            Some(t) => {
                info.array_job_id == Some(job_id)
                    && (info.array_task_id == Some(t)
                        || (info.array_task_id.is_none() && info.array_tasks_pending.contains(&t)))
            }
        })
        .collect()
}

fn item_status(state: &State, job: &Job, item: &Item) -> Status {
    let Some(target) = item.target else {
        let blocked = state.jobs.values().any(|other| {
            other.committed
                && other.info.job_id != job.info.job_id
                && other.info.uid == job.info.uid
                && other.info.name == job.info.name
                && (other.info.state() == JobState::Running
                    || (other.info.state() == JobState::Pending && other.info.job_id < job.info.job_id))
        });
        return if blocked { Status::Waiting } else { Status::Satisfied };
    };
    let records = targets(state, target);
    // A target whose own task is still pending in a base record has not started.
    let started = |info: &JobInfo| {
        info.state() != JobState::Pending
            && (info.array_task_id.is_some()
                || info.array_tasks_pending.is_empty()
                || target.1.is_none() && info.state().is_terminal())
    };
    let ended = |info: &JobInfo| info.state().is_terminal();
    match item.kind {
        Kind::After if records.iter().all(|i| started(i)) => Status::Satisfied,
        Kind::AfterAny if records.iter().all(|i| ended(i)) => Status::Satisfied,
        Kind::AfterOk => {
            if records.iter().any(|i| ended(i) && i.state() != JobState::Completed) {
                Status::Never
            } else if records.iter().all(|i| ended(i)) {
                Status::Satisfied
            } else {
                Status::Waiting
            }
        }
        Kind::AfterNotOk if records.iter().all(|i| ended(i)) => {
            if records.iter().any(|i| i.state() != JobState::Completed) { Status::Satisfied } else { Status::Never }
        }
        _ => Status::Waiting,
    }
}

/// Where a job's dependency stands, and the text Slurm shows for it (`None` once satisfied):
/// each unsatisfied item with `(unfulfilled)` or `(failed)`.
pub(crate) fn evaluate(state: &State, job: &Job) -> (Status, Option<String>) {
    let Some(text) = job.spec.dependency.as_deref() else { return (Status::Satisfied, None) };
    let Ok(dependency) = parse(text) else { return (Status::Satisfied, None) };
    let statuses: Vec<Status> = dependency.items.iter().map(|item| item_status(state, job, item)).collect();
    let overall = if dependency.any {
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
    if overall == Status::Satisfied {
        return (overall, None);
    }
    let shown: Vec<String> = dependency
        .items
        .iter()
        .zip(&statuses)
        .filter(|(_, status)| **status != Status::Satisfied)
        .map(|(item, status)| {
            let word = if *status == Status::Never { "failed" } else { "unfulfilled" };
            match item.target {
                Some(target) => format!("{}:{}({word})", item.kind.name(), show_target(target)),
                None => format!("{}({word})", item.kind.name()),
            }
        })
        .collect();
    (overall, Some(shown.join(if dependency.any { "?" } else { "," })))
}

/// Whether a pending job may be considered by this pass; `Err` carries the pending reason.
pub(crate) fn eligibility(state: &State, job: &Job, _now: UnixTime) -> Result<(), &'static str> {
    match evaluate(state, job).0 {
        Status::Waiting => return Err("Dependency"),
        Status::Never => return Err("DependencyNeverSatisfied"),
        Status::Satisfied => {}
    }
    if crate::array::throttled(state, job) {
        return Err("JobArrayTaskLimit");
    }
    Ok(())
}

/// Updates the shown dependency of every pending job; returns the jobs whose dependency can
/// never be satisfied and that asked to be cancelled then (`--kill-on-invalid-dep=yes`), and the
/// jobs whose shown text changed (to store).
pub(crate) fn refresh(state: &mut State) -> (Vec<JobId>, Vec<JobId>) {
    let mut updates = Vec::new();
    let mut kill = Vec::new();
    for job in state
        .jobs
        .values()
        .filter(|j| j.committed && j.info.state() == JobState::Pending && j.spec.dependency.is_some())
    {
        let (status, shown) = evaluate(state, job);
        if shown != job.info.dependency {
            updates.push((job.info.job_id, shown));
        }
        if status == Status::Never && job.spec.kill_on_invalid_dep {
            kill.push(job.info.job_id);
        }
    }
    let changed = updates.iter().map(|(id, _)| *id).collect();
    for (job_id, shown) in updates {
        if let Some(job) = state.jobs.get_mut(&job_id) {
            job.info.dependency = shown;
        }
    }
    (kill, changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    fn check(text: &str, expected: Expect) {
        expected.assert_debug_eq(&parse(text).map_err(|(_, detail)| detail));
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
                            },
                            Item {
                                kind: Singleton,
                                target: None,
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
        check(
            "aftercorr:4",
            expect![[r#"
                Err(
                    "dependency type `aftercorr` is not supported yet",
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
