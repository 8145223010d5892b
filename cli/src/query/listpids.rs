//! `scontrol listpids [JOB[.STEP]] [NODE]`: the processes of running jobs on one node, one line
//! each (`PID JOBID STEPID LOCALID GLOBALID`, `-` for a process that is not a task's first), as
//! Slurm 22.05 prints them.
//!
//! Slurm asks the local node daemon; Drover asks ctld for the job's step samples (the same
//! question as `sstat`, so the same rule on who sees what: the job's owner, operators and
//! admins) and keeps the named node's. The node is `NODE`, else `SLURMD_NODENAME` (set inside a
//! job), else this host's short name. Without a job, every running job of the caller (all jobs
//! for root, operators and admins) on that node.

use super::common;
use drover_shared::job::{JobId, JobState, StepId};
use drover_shared::proto::client::{JobQuery, Request, Response};
use drover_shared::proto::stat::StatReport;

/// The header line.
const HEADER: &str = "PID      JOBID    STEPID   LOCALID GLOBALID";

/// The lines of `report`'s steps (those `step` names, or all) on `node`.
fn render(report: &StatReport, step: Option<StepId>, node: &str) -> String {
    let mut out = String::new();
    for stat in report.steps.iter().filter(|s| step.is_none_or(|id| s.step_id == id)) {
        for sample in stat.samples.iter().filter(|s| s.node == node).map(|s| &s.sample) {
            for &pid in &sample.pids {
                let task = sample.task_pids.iter().position(|&p| p == pid);
                let (local, global) = match task {
                    Some(local) => {
                        let local = u32::try_from(local).unwrap_or(u32::MAX);
                        (local.to_string(), sample.first_task.saturating_add(local).to_string())
                    }
                    None => ("-".to_owned(), "-".to_owned()),
                };
                let step = stat.step_id.to_string();
                out.push_str(&format!("{pid:<8} {:<8} {step:<8} {local:<7} {global}\n", report.job_id));
            }
        }
    }
    out
}

/// Parses `JOB[.STEP]`.
fn parse_target(text: &str) -> Option<(JobId, Option<StepId>)> {
    let (job, step) = match text.split_once('.') {
        Some((job, step)) => (job, Some(step)),
        None => (text, None),
    };
    let job_id = job.parse::<JobId>().ok().filter(|id| *id > 0)?;
    let step = match step {
        None => None,
        Some("batch") => Some(StepId::Batch),
        Some("extern") => Some(StepId::Extern),
        Some(k) => Some(StepId::Numbered(k.parse().ok()?)),
    };
    Some((job_id, step))
}

/// This host's node name: `SLURMD_NODENAME`, else the short host name.
fn local_node() -> String {
    if let Ok(name) = std::env::var("SLURMD_NODENAME")
        && !name.is_empty()
    {
        return name;
    }
    let host = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    host.split('.').next().unwrap_or_default().to_owned()
}

/// The running jobs the caller may list on `node`.
fn running_jobs_on(node: &str) -> anyhow::Result<Vec<JobId>> {
    let me = common::my_uid();
    // Root's query asks for everyone's; ctld narrows a plain user's under `PrivateData=jobs`,
    // and `StatJob` refuses other users' jobs to them anyway.
    let users = if me == 0 { Vec::new() } else { vec![me] };
    let query = JobQuery { users, states: vec![JobState::Running], ..JobQuery::default() };
    match crate::client::call(&Request::QueryJobs(query))? {
        Response::Jobs { jobs, .. } => {
            Ok(jobs.into_iter().filter(|j| j.nodes.iter().any(|n| n == node)).map(|j| j.job_id).collect())
        }
        Response::Error { code, .. } => anyhow::bail!("{}", code.message()),
        _ => anyhow::bail!("unexpected answer from the controller"),
    }
}

/// Runs `scontrol listpids` with the words after `listpids`.
pub(crate) fn run(words: &[String]) -> anyhow::Result<i32> {
    if words.len() > 2 {
        eprintln!("scontrol: error: too many arguments for listpids: [JOB[.STEP]] [NODE]");
        return Ok(1);
    }
    let target = match words.first().map(String::as_str) {
        None | Some("*" | "-1") => None,
        Some(text) => match parse_target(text) {
            Some(target) => Some(target),
            None => {
                eprintln!("scontrol: error: Invalid job id specified");
                return Ok(1);
            }
        },
    };
    let node = words.get(1).cloned().unwrap_or_else(local_node);
    let targets: Vec<(JobId, Option<StepId>)> = match target {
        Some(target) => vec![target],
        None => running_jobs_on(&node)?.into_iter().map(|id| (id, None)).collect(),
    };
    let mut out = String::from(HEADER);
    out.push('\n');
    let mut status = 0;
    for (job_id, step) in targets {
        match crate::client::call(&Request::StatJob { job_id })? {
            Response::StepStats(report) => out.push_str(&render(&report, step, &node)),
            // Another user's job among root's listing ended meanwhile, or is not the caller's.
            Response::Error { code, .. } if target.is_some() => {
                eprintln!("scontrol: error: {}", code.message());
                status = 1;
            }
            Response::Error { .. } => {}
            _ => anyhow::bail!("unexpected answer from the controller"),
        }
    }
    print!("{out}");
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::proto::stat::{NodeSample, StepSample, StepStat};

    #[test]
    fn one_line_per_process_tasks_numbered() {
        let sample = |node: &str, first_task, pids: Vec<u32>, task_pids: Vec<u32>| NodeSample {
            node: node.into(),
            sample: StepSample { first_task, pids, task_pids, ..StepSample::default() },
        };
        let report = StatReport {
            job_id: 42,
            steps: vec![
                StepStat {
                    step_id: StepId::Batch,
                    num_tasks: 1,
                    nodes: vec!["n1".into()],
                    samples: vec![sample("n1", 0, vec![100, 101], vec![100])],
                },
                StepStat {
                    step_id: StepId::Numbered(0),
                    num_tasks: 4,
                    nodes: vec!["n1".into(), "n2".into()],
                    samples: vec![
                        sample("n1", 0, vec![200, 201, 202], vec![201, 202]),
                        sample("n2", 2, vec![300], vec![300]),
                    ],
                },
            ],
        };
        let mut out = format!("{HEADER}\n");
        out.push_str(&render(&report, None, "n1"));
        expect_test::expect![[r#"
            PID      JOBID    STEPID   LOCALID GLOBALID
            100      42       batch    0       0
            101      42       batch    -       -
            200      42       0        -       -
            201      42       0        0       0
            202      42       0        1       1
        "#]]
        .assert_eq(&out);
        assert_eq!(render(&report, Some(StepId::Numbered(0)), "n2"), "300      42       0        0       2\n");
        assert_eq!(render(&report, Some(StepId::Numbered(3)), "n1"), "");
        assert_eq!(parse_target("42.batch"), Some((42, Some(StepId::Batch))));
        assert_eq!(parse_target("42"), Some((42, None)));
        assert_eq!(parse_target("x"), None);
    }
}
