//! Test fixtures: the jobs, nodes and partitions of the Slurm 22.05 sample capture in
//! `testdata/` (see `/work/shared/baseline/samples/README.md`), as ctld would report them, and a
//! reader for the samples' stdout part.
//!
//! Array 29 (`--array=0-3`: tasks 0 and 1 run as jobs 30 and 31, 2-3 pend in the base record;
//! task 2 later ran as job 38) and array 32 (`--array=0-3 --hold`) are here as ctld keeps them.

use drover_shared::UnixTime;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobInfo, JobState, MemRequest, StepId, StepInfo, WaitStatus};
use drover_shared::node::{GpuDevice, NodeInfo, NodeState, PartitionInfo};

/// `2026-11-29T23:35:39Z`, when the queue views were captured.
pub(crate) const NOW: UnixTime = at(39);

/// The unix time of `2026-11-29T23:35:<second>Z` (seconds beyond 59 roll into later minutes).
pub(crate) const fn at(second: i64) -> UnixTime {
    1_795_995_300 + second
}

/// The stdout part of a sample file (between the `$ command` line and the `---` trailer).
pub(crate) fn sample_stdout(name: &str) -> String {
    let path = format!("{}/src/query/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
    let mut out = String::new();
    for line in text.split_inclusive('\n').skip(1) {
        if line.starts_with("--- stderr ---") || line.starts_with("--- exit: ") {
            break;
        }
        out.push_str(line);
    }
    out
}

/// `text` with a `$` at the end of every line (as `cat -A` shows it), so that expectations with
/// trailing blanks survive editors and the no-trailing-whitespace rule.
pub(crate) fn mark_line_ends(text: &str) -> String {
    text.lines().map(|line| format!("{line}$\n")).collect()
}

const WORK_DIR: &str = "/tmp/slurm-samples.CYvrXx";

/// A root job of account teama in partition main, one CPU with 100 MB per CPU, submitted at
/// 23:35:29 and pending with no reason yet.
fn job(job_id: u32, name: &str) -> JobInfo {
    JobInfo {
        job_id,
        name: name.into(),
        user: "root".into(),
        uid: 0,
        group: "root".into(),
        gid: 0,
        account: "teama".into(),
        qos: "normal".into(),
        partition: "main".into(),
        state: Some(JobState::Pending),
        reason: "None".into(),
        priority: 10687,
        submit_time: at(29),
        eligible_time: Some(at(29)),
        time_limit: Some(TimeLimit::Unlimited),
        num_nodes: 1,
        num_cpus: 1,
        num_tasks: 1,
        cpus_per_task: 1,
        mem: Some(MemRequest::PerCpu(100)),
        mem_per_node_mb: 100,
        work_dir: WORK_DIR.into(),
        stdout: "/dev/null".into(),
        stderr: "/dev/null".into(),
        stdin: "/dev/null".into(),
        requeue: true,
        submit_host: "localhost".into(),
        ..JobInfo::default()
    }
}

fn pending(mut job: JobInfo, reason: &str, eligible: bool) -> JobInfo {
    job.submit_time = at(35);
    job.eligible_time = eligible.then_some(at(35));
    job.reason = reason.into();
    job
}

fn batch_step(state: JobState, exit: WaitStatus, start: UnixTime, end: Option<UnixTime>, nodes: &[&str]) -> StepInfo {
    StepInfo {
        step_id: StepId::Batch,
        name: "batch".into(),
        state,
        exit_status: exit,
        start_time: Some(start),
        end_time: end,
        num_cpus: 1,
        num_tasks: 1,
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
    }
}

fn running(mut job: JobInfo, nodes: &[&str]) -> JobInfo {
    job.state = Some(JobState::Running);
    job.start_time = Some(at(31));
    job.nodes = nodes.iter().map(|n| (*n).to_owned()).collect();
    job.cpus_per_node = vec![1; nodes.len()];
    job.steps = vec![batch_step(JobState::Running, WaitStatus::default(), at(31), None, &nodes[..1])];
    job
}

fn waitres() -> JobInfo {
    let mut waitres = pending(job(33, "waitres"), "Resources", true);
    waitres.priority = 11250;
    waitres.num_nodes = 4;
    waitres.num_cpus = 4;
    waitres.num_tasks = 4;
    waitres.exclusive = true;
    waitres
}

fn bigjob() -> JobInfo {
    let mut bigjob = job(26, "bigjob");
    bigjob.priority = 10875;
    bigjob.num_nodes = 2;
    bigjob.num_cpus = 2;
    bigjob.num_tasks = 2;
    running(bigjob, &["n2", "n3"])
}

fn timeoutjob() -> JobInfo {
    let mut timeoutjob = job(23, "timeoutjob");
    timeoutjob.time_limit = Some(TimeLimit::Minutes(1));
    running(timeoutjob, &["n2"])
}

fn gpujob() -> JobInfo {
    let mut gpujob = job(27, "gpujob");
    gpujob.tres_per_node = "gres:gpu:1".into();
    gpujob.gpus_allocated = 1;
    gpujob.stdout = format!("{WORK_DIR}/gpujob-27.out");
    gpujob.stderr = gpujob.stdout.clone();
    running(gpujob, &["n4"])
}

fn sleeper() -> JobInfo {
    let mut sleeper = job(25, "sleeper");
    sleeper.partition = "teamA".into();
    sleeper.priority = 15187;
    sleeper.time_limit = Some(TimeLimit::Minutes(10));
    running(sleeper, &["n1"])
}

fn nobodyjob() -> JobInfo {
    let mut nobodyjob = job(28, "nobodyjob");
    nobodyjob.user = "nobody".into();
    nobodyjob.uid = 65534;
    nobodyjob.group = "nogroup".into();
    nobodyjob.gid = 65534;
    nobodyjob.account = "teamb".into();
    nobodyjob.partition = "teamB".into();
    running(nobodyjob, &["n1"])
}

/// An array's base record standing for the pending `tasks`.
fn array_base(mut job: JobInfo, tasks: &[u32]) -> JobInfo {
    job.submit_time = at(32);
    job.eligible_time = job.eligible_time.map(|_| at(34));
    job.array_job_id = Some(job.job_id);
    job.array_tasks_pending = tasks.to_vec();
    job
}

/// Task `task` of array `array`, split off into record `job_id`, running on `node` since 23:35:34.
fn array_task(array: u32, task: u32, job_id: u32, node: &str) -> JobInfo {
    let mut job = job(job_id, "arrjob");
    job.submit_time = at(32);
    job.eligible_time = Some(at(34));
    job.array_job_id = Some(array);
    job.array_task_id = Some(task);
    let mut job = running(job, &[node]);
    job.start_time = Some(at(34));
    job.steps[0].start_time = Some(at(34));
    job
}

/// Array 29's base record with tasks 2-3 pending, and array 32, held.
fn arrays_pending() -> (JobInfo, JobInfo) {
    let arrjob = array_base(pending(job(29, "arrjob"), "Priority", true), &[2, 3]);
    let mut arrheld = array_base(pending(job(32, "arrheld"), "JobHeldUser", false), &[0, 1, 2, 3]);
    arrheld.priority = 0;
    (arrjob, arrheld)
}

/// The records of array 29 at [`NOW`] in the order Slurm listed them for `squeue -j 29`.
pub(crate) fn array_29() -> Vec<JobInfo> {
    vec![arrays_pending().0, array_task(29, 1, 31, "n4"), array_task(29, 0, 30, "n3")]
}

/// Array 32 at [`NOW`].
pub(crate) fn array_32() -> Vec<JobInfo> {
    vec![arrays_pending().1]
}

/// The queue at [`NOW`], in the order Slurm listed ties.
pub(crate) fn queue() -> Vec<JobInfo> {
    let mut depwait = pending(job(37, "depwait"), "Dependency", false);
    depwait.dependency = Some("afterok:25(unfulfilled)".into());
    let mut depjob = pending(job(36, "depjob"), "DependencyNeverSatisfied", false);
    depjob.dependency = Some("afterok:24(failed)".into());
    let waitprio = pending(job(34, "waitprio"), "Priority", true);
    let mut heldjob = pending(job(35, "heldjob"), "JobHeldUser", false);
    heldjob.priority = 0;
    let (arrjob, arrheld) = arrays_pending();
    vec![
        waitres(),
        depwait,
        depjob,
        waitprio,
        arrjob,
        heldjob,
        arrheld,
        bigjob(),
        array_task(29, 0, 30, "n3"),
        array_task(29, 1, 31, "n4"),
        timeoutjob(),
        gpujob(),
        sleeper(),
        nobodyjob(),
    ]
}

fn ended(mut job: JobInfo, state: JobState, end: UnixTime, exit: WaitStatus, step: (JobState, WaitStatus)) -> JobInfo {
    job.state = Some(state);
    job.end_time = Some(end);
    job.exit_status = exit;
    for batch in &mut job.steps {
        batch.state = step.0;
        batch.exit_status = step.1;
        batch.end_time = Some(end);
    }
    job
}

fn cancelled(job: JobInfo, end: UnixTime) -> JobInfo {
    let mut job =
        ended(job, JobState::Cancelled, end, WaitStatus::signaled(15), (JobState::Cancelled, WaitStatus::signaled(15)));
    job.cancelled_by = Some(0);
    job
}

/// The jobs after the scenario ended, as accounting keeps them (ids 20, 23–26, 28, 36).
pub(crate) fn finished() -> Vec<JobInfo> {
    let mut wrap = job(20, "wrap");
    wrap.submit_time = at(27);
    wrap.eligible_time = Some(at(27));
    wrap.stdout = format!("{WORK_DIR}/slurm-20.out");
    wrap.stderr = wrap.stdout.clone();
    let mut wrap = running(wrap, &["n1"]);
    wrap.start_time = Some(at(28));
    wrap.steps[0].start_time = Some(at(28));
    let wrap =
        ended(wrap, JobState::Completed, at(28), WaitStatus::default(), (JobState::Completed, WaitStatus::default()));

    let timeout_exit = WaitStatus::signaled(15);
    let mut timeoutjob =
        ended(timeoutjob(), JobState::Timeout, at(31 + 76), timeout_exit, (JobState::Cancelled, timeout_exit));
    timeoutjob.reason = "TimeLimit".into();

    let failed_exit = WaitStatus::exited(3);
    let mut failjob = ended(
        running(job(24, "failjob"), &["n3"]),
        JobState::Failed,
        at(31),
        failed_exit,
        (JobState::Failed, failed_exit),
    );
    failjob.reason = "NonZeroExitCode".into();

    let mut depjob = cancelled(pending(job(36, "depjob"), "DependencyNeverSatisfied", false), at(39));
    depjob.dependency = Some("afterok:24(failed)".into());

    let mut task_2 = array_task(29, 2, 38, "n1");
    task_2.start_time = Some(at(31 + 16));
    task_2.steps[0].start_time = task_2.start_time;
    let mut arrjob = cancelled(arrays_pending().0, at(31 + 80));
    arrjob.eligible_time = Some(at(34));

    vec![
        wrap,
        timeoutjob,
        failjob,
        cancelled(sleeper(), at(39)),
        cancelled(bigjob(), at(31 + 80)),
        cancelled(nobodyjob(), at(31 + 80)),
        cancelled(array_task(29, 0, 30, "n3"), at(34 + 77)),
        cancelled(array_task(29, 1, 31, "n4"), at(34 + 77)),
        cancelled(task_2, at(31 + 80)),
        arrjob,
        depjob,
    ]
}

/// Node `n1..n4` of the capture: 2 CPUs, 4000 MB, one untyped GPU, all CPUs allocated.
pub(crate) fn nodes() -> Vec<NodeInfo> {
    (1..=4)
        .map(|i| NodeInfo {
            name: format!("n{i}"),
            state: NodeState::Allocated,
            not_responding: false,
            drain: false,
            reason: None,
            cpus: 2,
            cpus_alloc: 2,
            real_memory_mb: 4000,
            mem_alloc_mb: 200,
            gpus: vec![GpuDevice { index: 0, gpu_type: String::new(), uuid: String::new() }],
            gpus_alloc: Vec::new(),
            partitions: vec!["main".into(), "teamA".into(), "teamB".into()],
            address: "127.0.0.1".into(),
            boot_time: Some(at(-1212)),
            noded_start_time: Some(at(-163)),
            last_busy_time: Some(at(28)),
            version: "22.05.8".into(),
            reboot: None,
        })
        .collect()
}

/// Partitions main (default), teamA and teamB, each over all four nodes.
pub(crate) fn partitions() -> Vec<PartitionInfo> {
    [("main", 1), ("teamA", 10), ("teamB", 5)]
        .into_iter()
        .map(|(name, factor)| PartitionInfo {
            name: name.into(),
            default: name == "main",
            up: true,
            hidden: false,
            max_time: TimeLimit::Unlimited,
            default_time: None,
            max_nodes: None,
            nodes: (1..=4).map(|i| format!("n{i}")).collect(),
            allow_accounts: Vec::new(),
            allow_qos: Vec::new(),
            priority_job_factor: factor,
            priority_tier: 1,
            total_cpus: 8,
            total_mem_mb: 16000,
            total_gpus: 4,
        })
        .collect()
}
