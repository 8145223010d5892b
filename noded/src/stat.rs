//! What a running job's steps use on this node now (`sstat`): read when ctld asks
//! ([`drover_shared::proto::node::CtldMessage::StatJob`]), never sampled in the background.
//!
//! A step is a cgroup below the job's: `step_batch` (the batch script) and `step_<k>` (srun
//! steps), in every hierarchy the job has. For each, the processes are the union of the
//! `cgroup.procs` files; their memory (`VmHWM`, `VmSize`), major faults and I/O (`rchar`,
//! `wchar`) come from `/proc/<pid>`; CPU time from the v2 cgroup's `cpu.stat` (`usage_usec`,
//! which counts processes that already ended), or, on a host without one, from the live
//! processes' times plus those of the children they reaped. The task ids of an srun step on this
//! node come from its launch (`steps/<job>.<k>/launch`); the batch step is task 0.
//!
//! Bounds: at most [`MAX_STEPS_PER_NODE`] steps, [`MAX_PROCESSES`] processes read per step and
//! [`MAX_PIDS`] ids listed; a `cgroup.procs` file is read up to [`MAX_PROCS_FILE`] bytes.

use crate::cgroup::job::BATCH_STEP;
use crate::cgroup::{Controller, JobCgroupSpec};
use drover_shared::job::{JobId, StepId};
use drover_shared::proto::node::{JobRun, StepLaunch};
use drover_shared::proto::stat::{MAX_PIDS, MAX_STEPS_PER_NODE, StepSample};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most processes of one step whose `/proc` entries are read.
pub const MAX_PROCESSES: usize = 4096;

/// The most bytes of one `cgroup.procs` file read (about 100,000 pids).
const MAX_PROCS_FILE: u64 = 1 << 20;

/// Clock ticks per second of `/proc/<pid>/stat` times (the kernel's `USER_HZ`, 100 on every
/// architecture Linux exposes to user space here).
const USER_HZ: u64 = 100;

/// The samples of every step of run `run` of `job_id` on this node; empty when it holds none
/// (or runs jobs without cgroups, where there is nothing to read them from).
pub fn sample_job(state_dir: &Path, job_id: JobId, run: u32) -> Vec<StepSample> {
    let Some(spec) = job_cgroups(state_dir, job_id, run) else { return Vec::new() };
    let mut samples = Vec::new();
    for (step_id, dirs) in step_dirs(&spec) {
        if samples.len() == MAX_STEPS_PER_NODE {
            break;
        }
        let (first_task, tasks) = match step_id {
            StepId::Numbered(k) => step_tasks(state_dir, job_id, k).unwrap_or((0, 0)),
            _ => (0, 1),
        };
        let mut sample = sample_step(&dirs);
        sample.task_pids = match step_id {
            StepId::Numbered(k) => step_task_pids(state_dir, job_id, k, tasks),
            // The script: the one process of the step whose parent (the supervisor) is outside it.
            _ => sample
                .pids
                .iter()
                .copied()
                .filter(|&pid| parent(pid).is_some_and(|p| !sample.pids.contains(&p)))
                .take(1)
                .collect(),
        };
        sample.step_id = step_id;
        sample.first_task = first_task;
        sample.tasks = tasks;
        samples.push(sample);
    }
    samples
}

/// The job run's cgroups: from its directory on the batch host, else from the isolation a step
/// of the run carries on the job's other nodes.
fn job_cgroups(state_dir: &Path, job_id: JobId, run: u32) -> Option<JobCgroupSpec> {
    let job_dir = crate::jobs::job_dir(state_dir, JobRun { job_id, run });
    if let Ok(Some(plan)) = crate::isolation::read(&job_dir) {
        return Some(plan.cgroup);
    }
    let prefix = format!("{job_id}.");
    let entries = std::fs::read_dir(state_dir.join("steps")).ok()?;
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|entry| read_launch(&entry.path()).is_some_and(|launch| launch.job.restart_count == run))
        .find_map(|entry| crate::isolation::read(&entry.path()).ok().flatten())
        .map(|plan| plan.cgroup)
}

fn read_launch(step_dir: &Path) -> Option<StepLaunch> {
    let bytes = std::fs::read(step_dir.join("launch")).ok()?;
    postcard::from_bytes(&bytes).ok()
}

/// The first task id and the task count of srun step `step_id` on this node.
fn step_tasks(state_dir: &Path, job_id: JobId, step_id: u32) -> Option<(u32, u32)> {
    let launch = read_launch(&crate::step::step_dir(state_dir, job_id, step_id))?;
    let tasks = launch.layout.tasks.get(launch.node_index as usize)?;
    Some((tasks.first().copied().unwrap_or(0), u32::try_from(tasks.len()).unwrap_or(u32::MAX)))
}

/// The pids an srun step's runner wrote for its tasks here (`tasks`), in local task order.
fn step_task_pids(state_dir: &Path, job_id: JobId, step_id: u32, tasks: u32) -> Vec<u32> {
    let path = crate::step::step_dir(state_dir, job_id, step_id).join("tasks");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|line| line.trim().parse().ok()).take(tasks as usize).collect()
}

/// The parent of process `pid`, from `/proc/<pid>/stat`.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Each step's directories, one per hierarchy the job has, by step (batch first, then by id).
fn step_dirs(spec: &JobCgroupSpec) -> BTreeMap<StepId, Vec<PathBuf>> {
    let mut job_dirs: Vec<&PathBuf> = spec.unified.iter().collect();
    for controller in [&spec.memory, &spec.cpuset, &spec.pids].into_iter().flatten() {
        let (Controller::V1(dir) | Controller::V2(dir)) = controller;
        if !job_dirs.contains(&dir) {
            job_dirs.push(dir);
        }
    }
    let mut steps: BTreeMap<StepId, Vec<PathBuf>> = BTreeMap::new();
    for job_dir in job_dirs {
        for entry in std::fs::read_dir(job_dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(step_id) = parse_step(&name) else { continue };
            if entry.path().is_dir() {
                steps.entry(step_id).or_default().push(entry.path());
            }
        }
    }
    steps
}

/// `step_batch` → `Batch`, `step_<k>` → `Numbered(k)`.
fn parse_step(name: &str) -> Option<StepId> {
    if name == BATCH_STEP {
        return Some(StepId::Batch);
    }
    name.strip_prefix("step_")?.parse().ok().map(StepId::Numbered)
}

/// Reads one step's processes and CPU time from its cgroup directories.
fn sample_step(dirs: &[PathBuf]) -> StepSample {
    let mut pids: Vec<u32> = Vec::new();
    for dir in dirs {
        pids.extend(read_procs(&dir.join("cgroup.procs")));
    }
    pids.sort_unstable();
    pids.dedup();
    let mut sample = StepSample { processes: u32::try_from(pids.len()).unwrap_or(u32::MAX), ..StepSample::default() };
    let mut proc_cpu_usec = 0u64;
    for &pid in pids.iter().take(MAX_PROCESSES) {
        let Some(process) = read_process(Path::new("/proc").join(pid.to_string()).as_path()) else { continue };
        proc_cpu_usec = proc_cpu_usec.saturating_add(process.cpu_usec);
        sample.rss_kib = sample.rss_kib.saturating_add(process.rss_kib);
        sample.vmsize_kib = sample.vmsize_kib.saturating_add(process.vmsize_kib);
        sample.pages = sample.pages.saturating_add(process.major_faults);
        sample.read_bytes = sample.read_bytes.saturating_add(process.read_bytes);
        sample.write_bytes = sample.write_bytes.saturating_add(process.write_bytes);
    }
    let cgroup_cpu = dirs.iter().find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
        key_value(&text, "usage_usec")
    });
    sample.cpu_usec = cgroup_cpu.unwrap_or(proc_cpu_usec);
    pids.truncate(MAX_PIDS);
    sample.pids = pids;
    sample
}

/// The pids in a `cgroup.procs` file (at most [`MAX_PROCS_FILE`] bytes of it).
fn read_procs(path: &Path) -> Vec<u32> {
    let mut text = String::new();
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.take(MAX_PROCS_FILE).read_to_string(&mut text);
    }
    text.lines().filter_map(|line| line.trim().parse().ok()).collect()
}

/// What one process uses, from `/proc/<pid>`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Process {
    cpu_usec: u64,
    rss_kib: u64,
    vmsize_kib: u64,
    major_faults: u64,
    read_bytes: u64,
    write_bytes: u64,
}

/// Reads `stat`, `status` and `io` of the process whose `/proc` directory is `dir`; `None` once
/// it is gone.
fn read_process(dir: &Path) -> Option<Process> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let mut process = parse_stat(&stat)?;
    if let Ok(status) = std::fs::read_to_string(dir.join("status")) {
        let kib = |key: &str| {
            status.lines().find_map(|line| {
                let value = line.strip_prefix(key)?.strip_prefix(':')?;
                value.split_whitespace().next()?.parse::<u64>().ok()
            })
        };
        process.rss_kib = kib("VmHWM").or_else(|| kib("VmRSS")).unwrap_or(0);
        process.vmsize_kib = kib("VmSize").unwrap_or(0);
    }
    if let Ok(io) = std::fs::read_to_string(dir.join("io")) {
        let value = |key: &str| io.lines().find_map(|line| line.strip_prefix(key)?.trim().parse::<u64>().ok());
        process.read_bytes = value("rchar:").unwrap_or(0);
        process.write_bytes = value("wchar:").unwrap_or(0);
    }
    Some(process)
}

/// CPU times (own and reaped children's) and major faults from a `/proc/<pid>/stat` line.
fn parse_stat(text: &str) -> Option<Process> {
    // The command name may hold spaces and parentheses: the fields start after the last `)`.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 of proc(5) (the state).
    let field = |number: usize| fields.get(number - 3).and_then(|v| v.parse::<u64>().ok());
    let ticks = [14, 15, 16, 17].iter().map(|&n| field(n).unwrap_or(0)).fold(0u64, u64::saturating_add);
    Some(Process {
        cpu_usec: ticks.saturating_mul(1_000_000 / USER_HZ),
        major_faults: field(12).unwrap_or(0),
        ..Process::default()
    })
}

/// The value of `key` in a flat-keyed cgroup file (`usage_usec 1234`).
fn key_value(text: &str, key: &str) -> Option<u64> {
    text.lines().filter_map(|line| line.split_once(' ')).find(|(name, _)| *name == key)?.1.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_cpu_times_and_major_faults_after_the_last_parenthesis() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime …
        let line = "4242 (a (b) c) R 1 4242 4242 0 -1 4194304 100 0 7 0 150 50 30 20 20 0 1 0 5 123456 99";
        let process = parse_stat(line).unwrap();
        assert_eq!(process.major_faults, 7);
        assert_eq!(process.cpu_usec, (150 + 50 + 30 + 20) * 10_000);
        assert_eq!(parse_stat("no parenthesis"), None);
        assert_eq!(parent(std::process::id()), Some(std::os::unix::process::parent_id()));
    }

    #[test]
    fn steps_are_found_by_directory_name_in_every_hierarchy() {
        assert_eq!(parse_step("step_batch"), Some(StepId::Batch));
        assert_eq!(parse_step("step_3"), Some(StepId::Numbered(3)));
        assert_eq!(parse_step("step_x"), None);
        assert_eq!(parse_step("cgroup.procs"), None);
        let root = tempfile::tempdir().unwrap();
        let (unified, memory) = (root.path().join("unified/job_5"), root.path().join("memory/job_5"));
        for dir in [unified.join("step_batch"), unified.join("step_0"), memory.join("step_batch")] {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(unified.join("cgroup.procs"), "").unwrap();
        let spec = JobCgroupSpec {
            unified: Some(unified.clone()),
            memory: Some(Controller::V1(memory.clone())),
            cpuset: None,
            pids: Some(Controller::V2(unified.clone())),
        };
        let steps = step_dirs(&spec);
        let ids: Vec<StepId> = steps.keys().copied().collect();
        assert_eq!(ids, [StepId::Batch, StepId::Numbered(0)]);
        assert_eq!(steps[&StepId::Batch], [unified.join("step_batch"), memory.join("step_batch")]);
    }

    /// A step's processes are the union of its `cgroup.procs` files; its CPU time is the
    /// cgroup's where `cpu.stat` has it; this process stands in for a task.
    #[test]
    fn a_step_sample_reads_the_processes_of_its_cgroups() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let me = std::process::id();
        std::fs::write(a.join("cgroup.procs"), format!("{me}\n")).unwrap();
        std::fs::write(b.join("cgroup.procs"), format!("{me}\n999999999\n")).unwrap();
        std::fs::write(a.join("cpu.stat"), "usage_usec 4321\nuser_usec 4000\n").unwrap();
        let sample = sample_step(&[a.clone(), b.clone()]);
        assert_eq!(sample.processes, 2);
        assert_eq!(sample.pids, [me, 999_999_999]);
        assert_eq!(sample.cpu_usec, 4321);
        assert!(sample.rss_kib > 0 && sample.vmsize_kib > 0, "{sample:?}");
        std::fs::remove_file(a.join("cpu.stat")).unwrap();
        // Enough CPU for a few clock ticks.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let sample = sample_step(&[a]);
        assert!(sample.cpu_usec > 0, "this test process has used CPU: {sample:?}");
    }
}
