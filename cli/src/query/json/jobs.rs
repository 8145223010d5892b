//! `squeue --json`: Slurm's `v0.0.38_jobs_response`, one `v0.0.38_job_response_properties` per
//! job record squeue lists (after its filters), with every key of that schema.
//!
//! Filled from the record: ids and array fields, names, user and group, account, QOS, partition,
//! state and reason, times (Unix seconds, 0 when unset), time limit (minutes, 0 when unlimited),
//! node and CPU counts, memory per node or per CPU (MB), TRES strings, paths, command, comment,
//! dependency, requested and excluded nodes, features, nice, priority, requeue and restart count,
//! the allocated nodes in `job_resources`. Everything else (federation, burst buffers, het jobs,
//! licenses, frequencies, …) is there empty, zero or false.

use super::meta::{self, Plugin, limit_minutes, merge, time};
use crate::query::common;
use drover_shared::hostlist;
use drover_shared::job::{JobInfo, MemRequest};
use serde_json::{Value, json};

/// The whole `squeue --json` document for `jobs`.
pub(crate) fn document(jobs: &[JobInfo]) -> Value {
    meta::response(Plugin::Slurmctld, "jobs", jobs.iter().map(job).collect())
}

/// One job's object.
pub(crate) fn job(job: &JobInfo) -> Value {
    merge([identity(job), times(job), resources(job), request(job), paths(job), unknown()])
}

/// The allocated nodes as a Slurm host list, empty while pending.
fn node_list(job: &JobInfo) -> String {
    if job.nodes.is_empty() { String::new() } else { hostlist::compress(&job.nodes) }
}

/// Who, what and where: ids, names, state.
fn identity(job: &JobInfo) -> Value {
    json!({
        "account": job.account,
        "array_job_id": job.array_job_id.unwrap_or(0),
        "array_task_id": job.array_task_id.unwrap_or(0),
        "array_max_tasks": job.array_max_tasks,
        "array_task_string": if job.array_job_id.is_some() && job.array_task_id.is_none() {
            job.array_task_text()
        } else {
            String::new()
        },
        "batch_flag": true,
        "batch_host": job.nodes.first().cloned().unwrap_or_default(),
        "command": job.command.clone().unwrap_or_default(),
        "comment": job.comment.clone().unwrap_or_default(),
        "group_id": job.gid,
        "job_id": job.job_id,
        "job_state": job.state().long_name(),
        "name": job.name,
        "partition": job.partition,
        "qos": job.qos,
        "state_description": "",
        "state_reason": job.reason,
        "user_id": job.uid,
        "user_name": job.user,
    })
}

/// Timestamps (Unix seconds) and the limit (minutes).
fn times(job: &JobInfo) -> Value {
    json!({
        "accrue_time": time(job.eligible_time),
        "eligible_time": time(job.eligible_time),
        "end_time": time(job.end_time),
        "start_time": time(job.start_time),
        "submit_time": job.submit_time,
        "time_limit": limit_minutes(job.time_limit),
        "time_minimum": 0,
        "deadline": 0,
        "preempt_time": 0,
        "pre_sus_time": 0,
        "resize_time": 0,
        "suspend_time": 0,
        "last_sched_evaluation": 0,
    })
}

/// What the job holds: counts, memory, TRES, nodes.
fn resources(job: &JobInfo) -> Value {
    let (per_cpu, min_memory) = common::job_min_memory(job);
    let tres = common::tres_string(&common::job_tres(job));
    json!({
        "billable_tres": job.billing.unwrap_or_else(|| u64::from(job.num_cpus)) as f64,
        "cpus": job.num_cpus,
        "node_count": job.num_nodes,
        "tasks": job.num_tasks,
        "cpus_per_task": job.cpus_per_task.to_string(),
        "memory_per_cpu": if per_cpu { min_memory } else { 0 },
        "memory_per_node": if per_cpu { 0 } else { min_memory },
        "minimum_cpus_per_node": job.cpus_per_task.max(1),
        "minimum_tmp_disk_per_node": 0,
        "nodes": node_list(job),
        "tres_per_node": job.tres_per_node,
        "tres_req_str": tres,
        "tres_alloc_str": if common::has_started(job) { tres } else { String::new() },
        "gres_detail": gres_detail(job),
        "job_resources": job_resources(job),
    })
}

/// `gres:gpu:N` requested per node, as Slurm lists a running job's GRES (one item per node).
fn gres_detail(job: &JobInfo) -> Vec<String> {
    if job.tres_per_node.is_empty() || !common::has_started(job) {
        return Vec::new();
    }
    job.nodes.iter().map(|_| job.tres_per_node.trim_start_matches("gres:").to_owned()).collect()
}

/// `job_resources`: the allocation, node by node (empty while pending).
fn job_resources(job: &JobInfo) -> Value {
    let per_cpu = match job.mem {
        Some(MemRequest::PerCpu(mb)) => mb,
        _ => 0,
    };
    let allocated: Vec<Value> = job
        .nodes
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let cpus = job.cpus_per_node.get(i).copied().unwrap_or(0);
            let memory = if per_cpu > 0 { per_cpu.saturating_mul(u64::from(cpus)) } else { job.mem_per_node_mb };
            json!({ "memory": memory, "cpus": cpus, "sockets": { "cores": {} }, "nodename": name })
        })
        .collect();
    json!({
        "nodes": node_list(job),
        "allocated_cpus": if job.nodes.is_empty() { 0 } else { job.num_cpus },
        "allocated_hosts": job.nodes.len(),
        "allocated_nodes": allocated,
    })
}

/// What the job asked for besides counts: nodes, features, dependency, flags.
fn request(job: &JobInfo) -> Value {
    json!({
        "contiguous": false,
        "dependency": job.dependency.clone().unwrap_or_default(),
        "derived_exit_code": 0,
        "exit_code": job.exit_status.0,
        "excluded_nodes": job.exclude.clone().unwrap_or_default(),
        "features": job.constraint.clone().unwrap_or_default(),
        "flags": Vec::<String>::new(),
        "nice": job.nice,
        "priority": job.priority,
        "required_nodes": job.nodelist_requested.clone().unwrap_or_default(),
        "requeue": job.requeue,
        "restart_cnt": job.restarts,
        "shared": if job.exclusive { "none" } else { "" },
        "show_flags": Vec::<String>::new(),
    })
}

/// Where the job reads and writes.
fn paths(job: &JobInfo) -> Value {
    json!({
        "current_working_directory": job.work_dir,
        "standard_error": job.stderr,
        "standard_input": job.stdin,
        "standard_output": job.stdout,
    })
}

/// The keys Drover has no value for, with the schema's type.
fn unknown() -> Value {
    let strings = [
        "admin_comment",
        "batch_features",
        "burst_buffer",
        "burst_buffer_state",
        "cluster",
        "cluster_features",
        "container",
        "core_spec",
        "thread_spec",
        "cores_per_socket",
        "cpu_frequency_minimum",
        "cpu_frequency_maximum",
        "cpu_frequency_governor",
        "cpus_per_tres",
        "federation_origin",
        "federation_siblings_active",
        "federation_siblings_viable",
        "het_job_id_set",
        "licenses",
        "mcs_label",
        "memory_per_tres",
        "resv_name",
        "system_comment",
        "tres_bind",
        "tres_freq",
        "tres_per_job",
        "tres_per_socket",
        "tres_per_task",
        "wckey",
    ];
    let integers = [
        "association_id",
        "delay_boot",
        "max_cpus",
        "max_nodes",
        "tasks_per_core",
        "tasks_per_socket",
        "tasks_per_board",
        "het_job_id",
        "het_job_offset",
        "sockets_per_board",
        "sockets_per_node",
        "threads_per_core",
    ];
    let mut out = serde_json::Map::new();
    out.extend(strings.iter().map(|k| ((*k).to_owned(), json!(""))));
    out.extend(integers.iter().map(|k| ((*k).to_owned(), json!(0))));
    out.insert("profile".into(), json!([]));
    out.insert("reboot".into(), json!(false));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::scenario;

    fn find(document: &Value, id: u32) -> &Value {
        let jobs = document["jobs"].as_array().expect("a job list");
        jobs.iter().find(|j| j["job_id"] == id).expect("the job")
    }

    #[test]
    fn running_and_pending_jobs() {
        let document = document(&scenario::queue());
        assert_eq!(document["meta"]["plugin"]["type"], "openapi/v0.0.38");
        assert_eq!(document["errors"], json!([]));
        let bigjob = find(&document, 26);
        assert_eq!(bigjob["job_state"], "RUNNING");
        assert_eq!(bigjob["nodes"], "n[2-3]");
        assert_eq!(bigjob["node_count"], 2);
        assert_eq!(bigjob["start_time"], scenario::at(31));
        assert_eq!(bigjob["memory_per_cpu"], 100);
        assert_eq!(bigjob["memory_per_node"], 0);
        assert_eq!(bigjob["cpus_per_task"], "1");
        assert_eq!(bigjob["job_resources"]["allocated_hosts"], 2);
        assert_eq!(bigjob["job_resources"]["allocated_nodes"][1]["nodename"], "n3");
        assert_eq!(bigjob["tres_alloc_str"], "cpu=2,mem=200M,node=2,billing=2");
        let waitres = find(&document, 33);
        assert_eq!(waitres["job_state"], "PENDING");
        assert_eq!(waitres["state_reason"], "Resources");
        assert_eq!(waitres["nodes"], "");
        assert_eq!(waitres["end_time"], 0);
        assert_eq!(waitres["shared"], "none");
        assert_eq!(waitres["tres_alloc_str"], "");
    }

    #[test]
    fn limits_gpus_and_arrays() {
        let document = document(&scenario::queue());
        assert_eq!(find(&document, 23)["time_limit"], 1);
        assert_eq!(find(&document, 25)["time_limit"], 10);
        assert_eq!(find(&document, 26)["time_limit"], 0, "unlimited");
        let gpujob = find(&document, 27);
        assert_eq!(gpujob["tres_per_node"], "gres:gpu:1");
        assert_eq!(gpujob["gres_detail"], json!(["gpu:1"]));
        let array = find(&document, 29);
        assert_eq!(array["array_job_id"], 29);
        assert_eq!(array["array_task_string"], "2-3");
        let task = find(&document, 30);
        assert_eq!(task["array_task_id"], 0);
        assert_eq!(task["array_task_string"], "");
    }

    #[test]
    fn every_job_has_the_same_keys() {
        let document = document(&scenario::queue());
        let keys = |job: &Value| job.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
        let jobs = document["jobs"].as_array().expect("a job list");
        assert!(jobs.len() > 5);
        assert!(jobs.iter().all(|job| keys(job) == keys(&jobs[0])));
        assert_eq!(keys(&jobs[0]).len(), 108, "every key of v0.0.38_job_response_properties");
    }
}
