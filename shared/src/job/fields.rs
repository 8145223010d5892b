//! Lean job answers: a query names the [`JobFields`] its output uses, and ctld encodes each
//! record through a [`JobInfoView`] that leaves the other text and list fields empty. The view
//! encodes exactly as a [`JobInfo`] would (same fields, same order), so the client decodes an
//! ordinary `JobInfo` whose unnamed fields hold their defaults. `squeue` over 100,000 jobs ships
//! a few dozen bytes per job instead of a few hundred, and the client allocates only the text it
//! prints.
//!
//! Numbers, states, times and flags always travel (they cost a byte or a few); only `String`,
//! `Option<String>` and `Vec` fields can be left out.

use super::{JobInfo, StepInfo};
use crate::UnixTime;
use crate::grammar::time::TimeLimit;
use serde::{Deserialize, Serialize};

/// A set of [`JobInfo`]'s text and list fields (bits, combined with `|`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobFields(pub u64);

impl JobFields {
    pub const NONE: JobFields = JobFields(0);
    pub const NAME: JobFields = JobFields(1);
    pub const USER: JobFields = JobFields(1 << 1);
    pub const GROUP: JobFields = JobFields(1 << 2);
    pub const ACCOUNT: JobFields = JobFields(1 << 3);
    pub const QOS: JobFields = JobFields(1 << 4);
    pub const PARTITION: JobFields = JobFields(1 << 5);
    pub const REASON: JobFields = JobFields(1 << 6);
    /// `nodes` and `cpus_per_node`.
    pub const NODES: JobFields = JobFields(1 << 7);
    pub const TRES_PER_NODE: JobFields = JobFields(1 << 8);
    pub const WORK_DIR: JobFields = JobFields(1 << 9);
    pub const COMMAND: JobFields = JobFields(1 << 10);
    /// `stdout`, `stderr` and `stdin`.
    pub const STD_PATHS: JobFields = JobFields(1 << 11);
    pub const COMMENT: JobFields = JobFields(1 << 12);
    pub const DEPENDENCY: JobFields = JobFields(1 << 13);
    pub const STEPS: JobFields = JobFields(1 << 14);
    /// `submit_host` and `submit_line`.
    pub const SUBMIT: JobFields = JobFields(1 << 15);
    pub const NODELIST_REQUESTED: JobFields = JobFields(1 << 16);
    pub const EXCLUDE: JobFields = JobFields(1 << 17);
    pub const CONSTRAINT: JobFields = JobFields(1 << 18);
    /// `array_tasks_pending`.
    pub const ARRAY_TASKS: JobFields = JobFields(1 << 19);
    pub const ALL: JobFields = JobFields(u64::MAX);

    /// Whether every field of `other` is in `self`.
    pub fn contains(self, other: JobFields) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for JobFields {
    type Output = JobFields;
    fn bitor(self, other: JobFields) -> JobFields {
        JobFields(self.0 | other.0)
    }
}

impl std::ops::BitOrAssign for JobFields {
    fn bitor_assign(&mut self, other: JobFields) {
        self.0 |= other.0;
    }
}

/// A [`JobInfo`] as it goes on the wire for a query that named `fields`: every field in
/// `JobInfo`'s order and encoding, the text and lists outside `fields` empty.
/// `job_info_view_encodes_as_job_info` keeps the two structs in step.
#[derive(Debug, Serialize)]
pub struct JobInfoView<'a> {
    job_id: u32,
    name: &'a str,
    user: &'a str,
    uid: u32,
    group: &'a str,
    gid: u32,
    account: &'a str,
    qos: &'a str,
    partition: &'a str,
    state: Option<super::JobState>,
    reason: &'a str,
    priority: u32,
    nice: i32,
    submit_time: UnixTime,
    eligible_time: Option<UnixTime>,
    start_time: Option<UnixTime>,
    end_time: Option<UnixTime>,
    time_limit: Option<TimeLimit>,
    nodes: &'a [String],
    num_nodes: u32,
    num_cpus: u32,
    num_tasks: u32,
    cpus_per_task: u32,
    cpus_per_node: &'a [u32],
    mem: Option<super::MemRequest>,
    mem_per_node_mb: u64,
    tres_per_node: &'a str,
    gpus_allocated: u32,
    work_dir: &'a str,
    command: Option<&'a str>,
    stdout: &'a str,
    stderr: &'a str,
    stdin: &'a str,
    exit_status: super::WaitStatus,
    comment: Option<&'a str>,
    requeue: bool,
    restarts: u32,
    dependency: Option<&'a str>,
    cancelled_by: Option<u32>,
    steps: &'a [StepInfo],
    submit_host: &'a str,
    submit_line: &'a str,
    exclusive: bool,
    nodelist_requested: Option<&'a str>,
    exclude: Option<&'a str>,
    constraint: Option<&'a str>,
    array_job_id: Option<u32>,
    array_task_id: Option<u32>,
    array_tasks_pending: &'a [u32],
    array_max_tasks: u32,
    /// Always sent: a short name.
    template: Option<&'a str>,
}

impl<'a> JobInfoView<'a> {
    /// `job` with only `fields` of its text and lists.
    pub fn new(job: &'a JobInfo, fields: JobFields) -> JobInfoView<'a> {
        let has = |field: JobFields| fields.contains(field);
        let text = |field: JobFields, value: &'a String| if has(field) { value.as_str() } else { "" };
        let optional = |field: JobFields, value: &'a Option<String>| if has(field) { value.as_deref() } else { None };
        let list = |field: JobFields, value: &'a [String]| if has(field) { value } else { &[] };
        let numbers = |field: JobFields, value: &'a [u32]| if has(field) { value } else { &[] };
        JobInfoView {
            job_id: job.job_id,
            name: text(JobFields::NAME, &job.name),
            user: text(JobFields::USER, &job.user),
            uid: job.uid,
            group: text(JobFields::GROUP, &job.group),
            gid: job.gid,
            account: text(JobFields::ACCOUNT, &job.account),
            qos: text(JobFields::QOS, &job.qos),
            partition: text(JobFields::PARTITION, &job.partition),
            state: job.state,
            reason: text(JobFields::REASON, &job.reason),
            priority: job.priority,
            nice: job.nice,
            submit_time: job.submit_time,
            eligible_time: job.eligible_time,
            start_time: job.start_time,
            end_time: job.end_time,
            time_limit: job.time_limit,
            nodes: list(JobFields::NODES, &job.nodes),
            num_nodes: job.num_nodes,
            num_cpus: job.num_cpus,
            num_tasks: job.num_tasks,
            cpus_per_task: job.cpus_per_task,
            cpus_per_node: numbers(JobFields::NODES, &job.cpus_per_node),
            mem: job.mem,
            mem_per_node_mb: job.mem_per_node_mb,
            tres_per_node: text(JobFields::TRES_PER_NODE, &job.tres_per_node),
            gpus_allocated: job.gpus_allocated,
            work_dir: text(JobFields::WORK_DIR, &job.work_dir),
            command: optional(JobFields::COMMAND, &job.command),
            stdout: text(JobFields::STD_PATHS, &job.stdout),
            stderr: text(JobFields::STD_PATHS, &job.stderr),
            stdin: text(JobFields::STD_PATHS, &job.stdin),
            exit_status: job.exit_status,
            comment: optional(JobFields::COMMENT, &job.comment),
            requeue: job.requeue,
            restarts: job.restarts,
            dependency: optional(JobFields::DEPENDENCY, &job.dependency),
            cancelled_by: job.cancelled_by,
            steps: if has(JobFields::STEPS) { &job.steps } else { &[] },
            submit_host: text(JobFields::SUBMIT, &job.submit_host),
            submit_line: text(JobFields::SUBMIT, &job.submit_line),
            exclusive: job.exclusive,
            nodelist_requested: optional(JobFields::NODELIST_REQUESTED, &job.nodelist_requested),
            exclude: optional(JobFields::EXCLUDE, &job.exclude),
            constraint: optional(JobFields::CONSTRAINT, &job.constraint),
            array_job_id: job.array_job_id,
            array_task_id: job.array_task_id,
            array_tasks_pending: numbers(JobFields::ARRAY_TASKS, &job.array_tasks_pending),
            array_max_tasks: job.array_max_tasks,
            template: job.template.as_deref(),
        }
    }
}

/// `job` as a client that asked for `fields` receives it (what encoding a [`JobInfoView`] and
/// decoding it gives), without the round trip: for tests of what each field set covers.
pub fn project(job: &JobInfo, fields: JobFields) -> JobInfo {
    let bytes = postcard::to_allocvec(&JobInfoView::new(job, fields)).expect("a job record always encodes");
    postcard::from_bytes(&bytes).expect("a view decodes as a JobInfo")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobState, MemRequest, StepId, WaitStatus};

    fn full() -> JobInfo {
        JobInfo {
            job_id: 7,
            name: "train".into(),
            user: "alice".into(),
            uid: 1001,
            group: "vision".into(),
            gid: 2001,
            account: "vision".into(),
            qos: "normal".into(),
            partition: "gpu,cpu".into(),
            state: Some(JobState::Running),
            reason: "None".into(),
            priority: 4_000_000,
            nice: -5,
            submit_time: 1_700_000_000,
            eligible_time: Some(1_700_000_001),
            start_time: Some(1_700_000_002),
            end_time: Some(1_700_000_900),
            time_limit: Some(TimeLimit::Minutes(60)),
            nodes: vec!["n1".into(), "n2".into()],
            num_nodes: 2,
            num_cpus: 8,
            num_tasks: 2,
            cpus_per_task: 4,
            cpus_per_node: vec![4, 4],
            mem: Some(MemRequest::PerNode(4096)),
            mem_per_node_mb: 4096,
            tres_per_node: "gres:gpu:2".into(),
            gpus_allocated: 4,
            work_dir: "/home/alice".into(),
            command: Some("/home/alice/train.sh".into()),
            stdout: "/home/alice/out".into(),
            stderr: "/home/alice/err".into(),
            stdin: "/dev/null".into(),
            exit_status: WaitStatus::default(),
            comment: Some("c".into()),
            requeue: true,
            restarts: 1,
            dependency: Some("afterok:3".into()),
            cancelled_by: Some(0),
            steps: vec![StepInfo {
                step_id: StepId::Batch,
                name: "batch".into(),
                state: JobState::Running,
                exit_status: WaitStatus::default(),
                start_time: Some(1_700_000_002),
                end_time: None,
                num_cpus: 4,
                num_tasks: 1,
                nodes: vec!["n1".into()],
            }],
            submit_host: "login1".into(),
            submit_line: "sbatch train.sh".into(),
            exclusive: true,
            nodelist_requested: Some("n[1-2]".into()),
            exclude: Some("n3".into()),
            constraint: Some("a100".into()),
            array_job_id: Some(5),
            array_task_id: Some(2),
            array_tasks_pending: vec![3, 4],
            array_max_tasks: 2,
            template: Some("train".into()),
        }
    }

    /// With every field named, the view's bytes are the record's; with none, the text and lists
    /// come back empty and every number, state and time as it was.
    #[test]
    fn job_info_view_encodes_as_job_info() {
        let job = full();
        assert_eq!(
            postcard::to_allocvec(&JobInfoView::new(&job, JobFields::ALL)).unwrap(),
            postcard::to_allocvec(&job).unwrap()
        );
        let lean = project(&job, JobFields::NONE);
        let expected = JobInfo {
            name: String::new(),
            user: String::new(),
            group: String::new(),
            account: String::new(),
            qos: String::new(),
            partition: String::new(),
            reason: String::new(),
            nodes: Vec::new(),
            cpus_per_node: Vec::new(),
            tres_per_node: String::new(),
            work_dir: String::new(),
            command: None,
            stdout: String::new(),
            stderr: String::new(),
            stdin: String::new(),
            comment: None,
            dependency: None,
            steps: Vec::new(),
            submit_host: String::new(),
            submit_line: String::new(),
            nodelist_requested: None,
            exclude: None,
            constraint: None,
            array_tasks_pending: Vec::new(),
            ..job.clone()
        };
        assert_eq!(lean, expected);
        let named = project(&job, JobFields::NAME | JobFields::NODES);
        assert_eq!((named.name.as_str(), named.nodes.len(), named.cpus_per_node.len()), ("train", 2, 2));
        assert_eq!(named.user, "");
    }
}
