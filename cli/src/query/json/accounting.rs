//! `sacct --json`: Slurm's `dbv0.0.38_job_info`, one `dbv0.0.38_job` per accounting record sacct
//! selected (window, users, accounts, partitions, states, names, QOS, nodes, `-j`), each with its
//! steps (none under `-X`), with every key of those schemas.
//!
//! Filled from the record: ids, array fields, names, user and group, account, partition, QOS and
//! association, cluster, state and reason, times (Unix seconds, 0 when unset; elapsed in
//! seconds, the limit in minutes), CPU time the nodes measured (user, system, total), exit and
//! derived exit codes (`SUCCESS`, `ERROR` with the return code, `SIGNALED` with the signal,
//! `PENDING` before the end), requested CPUs and memory, TRES requested and allocated (numeric
//! counts with Slurm's TRES ids), constraints, comment, working directory; for each step its
//! state, times, nodes, tasks, exit code and allocated TRES. What Drover does not keep (het
//! jobs, reservations, wckeys, MCS, energy, frequencies, TRES usage statistics) is empty or zero.

use super::meta::{self, Plugin, limit_minutes, merge, time};
use crate::query::common;
use drover_shared::UnixTime;
use drover_shared::hostlist;
use drover_shared::job::{JobId, JobInfo, MemRequest, StepId, StepInfo, WaitStatus};
use drover_shared::proto::node::JobUsage;
use serde_json::{Value, json};
use std::collections::HashMap;

/// What sacct fetched besides the records.
pub(crate) struct AccountingContext<'a> {
    pub(crate) now: UnixTime,
    pub(crate) cluster: &'a str,
    /// Measured usage by job id (the batch script's).
    pub(crate) usage: &'a HashMap<JobId, JobUsage>,
    /// Measured usage of srun steps by `(job id, step number)`.
    pub(crate) step_usage: &'a HashMap<(JobId, u32), JobUsage>,
}

/// The whole `sacct --json` document for `jobs` (their steps already selected).
pub(crate) fn document(jobs: &[JobInfo], context: &AccountingContext<'_>) -> Value {
    meta::response(Plugin::Accounting, "jobs", jobs.iter().map(|j| job(j, context)).collect())
}

/// One job's object.
pub(crate) fn job(job: &JobInfo, context: &AccountingContext<'_>) -> Value {
    let steps: Vec<Value> = job.steps.iter().map(|s| step(job, s, context)).collect();
    merge([
        identity(job, context.cluster),
        job_times(job, context),
        outcome(job),
        job_resources(job),
        json!({
            "steps": steps
        }),
    ])
}

fn identity(job: &JobInfo, cluster: &str) -> Value {
    json!({
        "account": job.account,
        "association": { "account": job.account, "cluster": cluster, "partition": job.partition, "user": job.user },
        "cluster": cluster,
        "comment": { "administrator": "", "job": job.comment.clone().unwrap_or_default(), "system": "" },
        "array": {
            "job_id": job.array_job_id.unwrap_or(0),
            "limits": { "max": { "running": { "tasks": job.array_max_tasks } } },
            "task": if job.array_job_id.is_some() { job.array_task_text() } else { String::new() },
            "task_id": job.array_task_id.unwrap_or(0),
        },
        "container": "",
        "flags": Vec::<String>::new(),
        "group": job.group,
        "het": { "job_id": 0, "job_offset": 0 },
        "job_id": job.job_id,
        "kill_request_user": "",
        "mcs": { "label": "" },
        "name": job.name,
        "partition": job.partition,
        "priority": job.priority,
        "qos": job.qos,
        "reservation": { "id": 0, "name": 0 },
        "user": job.user,
        "wckey": { "wckey": "", "flags": Vec::<String>::new() },
        "working_directory": job.work_dir,
    })
}

/// `seconds`/`microseconds` of a CPU time in microseconds.
fn cpu_time(usec: u64) -> Value {
    json!({ "seconds": usec / 1_000_000, "microseconds": usec % 1_000_000 })
}

/// The `system`, `user` and `total` CPU times of a measured usage (zero when not measured).
fn cpu_times(usage: Option<&JobUsage>) -> Value {
    let (user, system) = usage.map_or((0, 0), |u| (u.user_usec, u.system_usec));
    json!({ "system": cpu_time(system), "user": cpu_time(user), "total": cpu_time(user + system) })
}

fn job_times(job: &JobInfo, context: &AccountingContext<'_>) -> Value {
    let times = json!({
        "elapsed": job.elapsed(context.now),
        "eligible": time(job.eligible_time),
        "end": time(job.end_time),
        "start": time(job.start_time),
        "submission": job.submit_time,
        "suspended": 0,
        "limit": limit_minutes(job.time_limit),
    });
    json!({ "time": merge([times, cpu_times(context.usage.get(&job.job_id))]) })
}

/// `exit_code`/`derived_exit_code`'s object for a wait status, `PENDING` before the end.
fn exit_code(status: Option<WaitStatus>) -> Value {
    let Some(status) = status else {
        return json!({ "status": "PENDING", "return_code": 0, "signal": { "signal_id": 0, "name": "" } });
    };
    let (code, signal) = common::sacct_exit_parts(status);
    let (text, name) = match (code, signal) {
        (_, 0) if code == 0 => ("SUCCESS", String::new()),
        (_, 0) => ("ERROR", String::new()),
        _ => ("SIGNALED", signal_name(signal)),
    };
    json!({ "status": text, "return_code": code, "signal": { "signal_id": signal, "name": name } })
}

/// A signal's name (`SIGKILL`), or its number when it has none.
fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal).map_or_else(|_| signal.to_string(), |s| s.as_str().to_owned())
}

/// How the job ended: state, reason, exit codes (sacct's rules: `0:0` for ends the controller
/// decided, the worst srun step for the derived code).
fn outcome(job: &JobInfo) -> Value {
    let state = job.state();
    let ended = state.is_terminal().then_some(job.exit_status);
    let exit = if common::ended_by_controller(state) { ended.map(|_| WaitStatus::default()) } else { ended };
    let derived = job
        .steps
        .iter()
        .filter(|s| matches!(s.step_id, StepId::Numbered(_)))
        .map(|s| s.exit_status)
        .max_by_key(|s| common::sacct_exit_parts(*s))
        .unwrap_or_default();
    let reason = if job.start_time.is_none() && !state.is_terminal() { job.reason.as_str() } else { "None" };
    json!({
        "state": { "current": state.long_name(), "reason": reason },
        "exit_code": exit_code(exit),
        "derived_exit_code": exit_code(ended.map(|_| derived)),
    })
}

/// One TRES of a list, with Slurm's fixed ids (`gres/gpu` takes the first id of dynamic TRES).
fn tres(kind: &str, name: &str, count: u64) -> Value {
    let id = match kind {
        "cpu" => 1,
        "mem" => 2,
        "node" => 4,
        "billing" => 5,
        _ => 1001,
    };
    json!({ "type": kind, "name": name, "id": id, "count": count })
}

/// The job's TRES as counts: CPUs, memory (MB), nodes, billing and GPUs.
fn tres_list(job: &JobInfo) -> Vec<Value> {
    let mut list = vec![
        tres("cpu", "", u64::from(job.num_cpus)),
        tres("mem", "", common::job_mem_total_mb(job)),
        tres("node", "", u64::from(job.num_nodes)),
        tres("billing", "", job.billing.unwrap_or_else(|| u64::from(job.num_cpus))),
    ];
    let gpus = common::job_gpus(job);
    if gpus > 0 {
        list.push(tres("gres", "gpu", u64::from(gpus)));
    }
    list
}

fn job_resources(job: &JobInfo) -> Value {
    let started = common::has_started(job);
    json!({
        "allocation_nodes": if started { job.nodes.len() } else { 0 }.to_string(),
        "constraints": job.constraint.clone().unwrap_or_default(),
        "nodes": if job.nodes.is_empty() { "None assigned".to_owned() } else { hostlist::compress(&job.nodes) },
        "required": { "CPUs": job.num_cpus, "memory": common::job_min_memory(job).1 },
        "tres": {
            "allocated": if started { tres_list(job) } else { Vec::new() },
            "requested": tres_list(job),
        },
    })
}

/// An empty TRES usage statistics block.
fn no_statistics() -> Value {
    json!({ "average": [], "max": [], "min": [], "total": [] })
}

/// One step's object.
fn step(job: &JobInfo, step: &StepInfo, context: &AccountingContext<'_>) -> Value {
    let usage = match step.step_id {
        StepId::Batch => context.usage.get(&job.job_id),
        StepId::Numbered(k) => context.step_usage.get(&(job.job_id, k)),
        StepId::Extern => None,
    };
    let elapsed = step.start_time.map_or(0, |start| (step.end_time.unwrap_or(context.now) - start).max(0));
    let times = json!({
        "elapsed": elapsed,
        "end": time(step.end_time),
        "start": time(step.start_time),
        "suspended": 0,
    });
    json!({
        "time": merge([times, cpu_times(usage)]),
        "exit_code": exit_code(step.state.is_terminal().then_some(step.exit_status)),
        "nodes": {
            "count": step.nodes.len(),
            "range": if step.nodes.is_empty() { String::new() } else { hostlist::compress(&step.nodes) },
        },
        "tasks": { "count": step.num_tasks },
        "pid": "",
        "CPU": { "requested_frequency": { "min": 0, "max": 0 }, "governor": Vec::<String>::new() },
        "kill_request_user": "",
        "state": step.state.long_name(),
        "statistics": { "CPU": { "actual_frequency": 0 }, "energy": { "consumed": 0 } },
        "step": { "job_id": job.job_id, "het": { "component": 0 }, "id": step.step_id.to_string(), "name": step.name },
        "task": "",
        "tres": { "requested": no_statistics(), "consumed": no_statistics(), "allocated": step_tres(job, step) },
    })
}

/// The step's allocated CPUs, memory and nodes.
fn step_tres(job: &JobInfo, step: &StepInfo) -> Vec<Value> {
    let nodes = u64::try_from(step.nodes.len()).unwrap_or(0);
    let memory = match job.mem {
        Some(MemRequest::PerCpu(mb)) => mb.saturating_mul(u64::from(step.num_cpus)),
        _ => job.mem_per_node_mb.saturating_mul(nodes),
    };
    vec![tres("cpu", "", u64::from(step.num_cpus)), tres("mem", "", memory), tres("node", "", nodes)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::scenario;

    fn find(document: &Value, id: u32) -> &Value {
        let jobs = document["jobs"].as_array().expect("a job list");
        jobs.iter().find(|j| j["job_id"] == id).expect("the job")
    }

    fn build(jobs: &[JobInfo], usage: &HashMap<JobId, JobUsage>) -> Value {
        let steps = HashMap::new();
        let context = AccountingContext { now: scenario::NOW, cluster: "c1", usage, step_usage: &steps };
        document(jobs, &context)
    }

    #[test]
    fn ended_jobs_with_exit_codes_and_steps() {
        let document = build(&scenario::finished(), &HashMap::new());
        assert_eq!(document["meta"]["plugin"]["name"], "Slurm OpenAPI DB v0.0.38");
        let wrap = find(&document, 20);
        assert_eq!(wrap["state"], json!({"current": "COMPLETED", "reason": "None"}));
        assert_eq!(wrap["exit_code"]["status"], "SUCCESS");
        assert_eq!(wrap["cluster"], "c1");
        assert_eq!(wrap["association"]["account"], "teama");
        assert_eq!(wrap["time"]["elapsed"], 0);
        assert_eq!(wrap["time"]["limit"], 0);
        assert_eq!(wrap["nodes"], "n1");
        assert_eq!(wrap["steps"][0]["step"]["id"], "batch");
        assert_eq!(wrap["steps"][0]["state"], "COMPLETED");
        assert_eq!(wrap["steps"][0]["nodes"], json!({"count": 1, "range": "n1"}));
        let failjob = find(&document, 24);
        assert_eq!(
            failjob["exit_code"],
            json!({"status": "ERROR", "return_code": 3, "signal": {"signal_id": 0, "name": ""}})
        );
        assert_eq!(failjob["state"]["current"], "FAILED");
        let timeoutjob = find(&document, 23);
        assert_eq!(timeoutjob["state"]["current"], "TIMEOUT");
        assert_eq!(timeoutjob["exit_code"]["status"], "SUCCESS", "sacct's 0:0 for ends the controller decided");
        assert_eq!(timeoutjob["steps"][0]["exit_code"]["status"], "SIGNALED");
        assert_eq!(timeoutjob["steps"][0]["exit_code"]["signal"]["name"], "SIGTERM");
        assert_eq!(timeoutjob["time"]["elapsed"], 76);
    }

    #[test]
    fn tres_usage_and_pending_records() {
        let usage =
            HashMap::from([(20, JobUsage { job_id: 20, user_usec: 1_500_000, system_usec: 250_000, max_rss_kib: 1 })]);
        let document = build(&scenario::finished(), &usage);
        let wrap = find(&document, 20);
        assert_eq!(wrap["time"]["user"], json!({"seconds": 1, "microseconds": 500_000}));
        assert_eq!(wrap["time"]["total"], json!({"seconds": 1, "microseconds": 750_000}));
        assert_eq!(wrap["steps"][0]["time"]["system"]["microseconds"], 250_000);
        let cpu = json!({"type": "cpu", "name": "", "id": 1, "count": 1});
        assert_eq!(wrap["tres"]["allocated"][0], cpu);
        assert_eq!(wrap["tres"]["requested"][1], json!({"type": "mem", "name": "", "id": 2, "count": 100}));
        assert_eq!(wrap["required"], json!({"CPUs": 1, "memory": 100}));
        let depjob = find(&document, 36);
        assert_eq!(depjob["tres"]["allocated"], json!([]));
        assert_eq!(depjob["nodes"], "None assigned");
        let queue = build(&scenario::queue(), &HashMap::new());
        let waitres = find(&queue, 33);
        assert_eq!(waitres["exit_code"]["status"], "PENDING");
        assert_eq!(waitres["state"]["reason"], "Resources");
    }
}
