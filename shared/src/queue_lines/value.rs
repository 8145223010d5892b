//! The text of one squeue field for one job, appended to a line being built (no allocation for
//! the common fields). Fields only the client renders ([`Field::needs_client`]) append nothing
//! here; `squeue` fills them itself.

use super::{Field, clock_into, or_null};
use crate::UnixTime;
use crate::grammar::time::TimeLimit;
use crate::hostlist;
use crate::job::{JobInfo, JobState};
use std::fmt::Write as _;

/// Appends `field`'s text for `job` at `now` to `out`; returns false (appending nothing) for a
/// field only the client renders.
pub fn value(out: &mut String, field: Field, job: &JobInfo, now: UnixTime) -> bool {
    let state = job.state();
    // `fmt::Write` for `String` cannot fail.
    let _ = match field {
        Field::JobId if job.array_job_id.is_none() => write!(out, "{}", job.job_id),
        Field::JobId => write!(out, "{}", job.display_id()),
        Field::JobIdRaw => write!(out, "{}", job.job_id),
        Field::ArrayJobId => write!(out, "{}", job.array_job_id.unwrap_or(job.job_id)),
        Field::ArrayTaskId => write!(out, "{}", job.array_task_text()),
        Field::Name => text(out, &job.name),
        Field::User => text(out, &job.user),
        Field::Uid => write!(out, "{}", job.uid),
        Field::Account => text(out, &job.account),
        Field::Partition => text(out, &job.partition),
        Field::Qos => text(out, &job.qos),
        Field::StateCompact => text(out, state.compact_name()),
        Field::State => text(out, state.long_name()),
        Field::TimeUsed => {
            time_used(out, job, now);
            Ok(())
        }
        Field::TimeLimit => {
            time_limit(out, job.time_limit);
            Ok(())
        }
        Field::TimeLeft => {
            match job.time_limit {
                Some(TimeLimit::Minutes(minutes)) => clock_into(out, i64::from(minutes) * 60 - job.elapsed(now)),
                other => time_limit(out, other),
            }
            Ok(())
        }
        Field::NumNodes => write!(out, "{}", job.num_nodes),
        Field::NumCpus => write!(out, "{}", job.num_cpus),
        Field::NumTasks => write!(out, "{}", job.num_tasks),
        Field::TresPerNode if job.tres_per_node.is_empty() => text(out, "N/A"),
        Field::TresPerNode => text(out, &job.tres_per_node),
        Field::NodeList => write!(out, "{}", hostlist::compress(&job.nodes)),
        Field::ReasonList if shows_reason(state) => write!(out, "({})", job.reason),
        Field::ReasonList => write!(out, "{}", hostlist::compress(&job.nodes)),
        Field::Reason => text(out, &job.reason),
        Field::Priority => write!(out, "{:16.14}", f64::from(job.priority) / f64::from(u32::MAX)),
        Field::PriorityLong => write!(out, "{}", job.priority),
        Field::Dependency => text(out, or_null(job.dependency.as_deref())),
        Field::Comment => text(out, or_null(job.comment.as_deref())),
        Field::Command => text(out, or_null(job.command.as_deref())),
        Field::WorkDir => text(out, &job.work_dir),
        Field::Stdout => text(out, &job.stdout),
        Field::Stderr => text(out, &job.stderr),
        Field::Stdin => text(out, &job.stdin),
        Field::Nice => write!(out, "{}", job.nice),
        Field::MinCpus | Field::CpusPerTask => write!(out, "{}", job.cpus_per_task.max(1)),
        Field::MinTmpDisk | Field::Contiguous => text(out, "0"),
        Field::RestartCount => write!(out, "{}", job.restarts),
        Field::Features => text(out, or_null(job.constraint.as_deref())),
        Field::Group => text(out, &job.group),
        Field::Gid => write!(out, "{}", job.gid),
        Field::OverSubscribe => text(out, if job.exclusive { "NO" } else { "OK" }),
        Field::ReqNodes => text(out, job.nodelist_requested.as_deref().unwrap_or_default()),
        Field::ExcNodes => text(out, job.exclude.as_deref().unwrap_or_default()),
        Field::Reservation | Field::SchedNodes | Field::Null => text(out, "(null)"),
        Field::BatchHost => text(out, job.nodes.first().map_or("n/a", String::as_str)),
        Field::Sct => text(out, "*:*:*"),
        Field::Wildcard => text(out, "*"),
        Field::Requeue => write!(out, "{}", u8::from(job.requeue)),
        Field::ExitCode => write!(out, "{}", job.exit_status),
        Field::BatchFlag => text(out, "1"),
        Field::NotAvailable => text(out, "N/A"),
        Field::Unknown => Ok(()),
        Field::SubmitTime
        | Field::StartTime
        | Field::EndTime
        | Field::EligibleTime
        | Field::TresAlloc
        | Field::MinMemory => return false,
    };
    true
}

fn text(out: &mut String, value: &str) -> std::fmt::Result {
    out.push_str(value);
    Ok(())
}

/// Slurm's display of a time limit for squeue.
fn time_limit(out: &mut String, limit: Option<TimeLimit>) {
    match limit {
        Some(TimeLimit::Unlimited) => out.push_str("UNLIMITED"),
        Some(TimeLimit::Minutes(minutes)) => clock_into(out, i64::from(minutes) * 60),
        None => out.push_str("NOT_SET"),
    }
}

/// Elapsed seconds as squeue shows them: anything beyond a year is `INVALID`.
fn time_used(out: &mut String, job: &JobInfo, now: UnixTime) {
    let used = job.elapsed(now);
    if used > 365 * 86_400 { out.push_str("INVALID") } else { clock_into(out, used) }
}

/// The end squeue prints: actual, else start plus limit for a running job.
pub fn expected_end(job: &JobInfo) -> Option<UnixTime> {
    job.end_time.or_else(|| match (job.start_time, job.time_limit) {
        (Some(start), Some(TimeLimit::Minutes(minutes))) => Some(start + i64::from(minutes) * 60),
        _ => None,
    })
}

/// Seconds of a job's time limit for sorting: unset first, unlimited last.
pub(super) fn limit_seconds(job: &JobInfo) -> u64 {
    match job.time_limit {
        Some(limit) => limit.seconds().unwrap_or(u64::MAX),
        None => 0,
    }
}

/// Whether `%R` shows the reason (pending, or ended in a way that has one) rather than nodes.
fn shows_reason(state: JobState) -> bool {
    matches!(
        state,
        JobState::Pending | JobState::Failed | JobState::Timeout | JobState::OutOfMemory | JobState::Deadline
    )
}
