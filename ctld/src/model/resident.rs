//! What of a job's submission ctld keeps in memory. A job's `JobSpec` is split in two: the
//! fields the scheduler, limits, dependencies and `scontrol update` read stay resident (the
//! *resident spec*), interned in a [`SpecPool`] so that jobs submitted with the same options share
//! one copy; what only the launch needs (the batch script, the environment, output patterns,
//! working and submit directories, the submit line, …) lives only in the job's row in SQLite,
//! which always holds the whole spec. The writer thread reads it back when it commits the job's
//! allocation (`db::AfterCommit::Launch`), and [`complete`] joins both halves into the spec the
//! node gets. The job's name and comment, which `scontrol update` may change, are taken from its
//! `JobInfo`, which holds the same values.

use drover_shared::job::{JobInfo, JobSpec};
use std::collections::HashSet;
use std::sync::Arc;

/// The resident half of `spec`: everything ctld reads after the submission, the launch-only
/// fields left empty.
pub(crate) fn resident(spec: &JobSpec) -> JobSpec {
    // Destructured in full, so a new `JobSpec` field does not compile until it is sorted into
    // one half or the other (here and in `complete`).
    let JobSpec {
        name: _,
        partitions,
        account,
        qos,
        time_limit,
        nodes_min,
        nodes_max,
        ntasks,
        cpus_per_task,
        ntasks_per_node,
        mem,
        gres_per_node,
        gpus,
        gpus_per_task,
        stdout: _,
        stderr: _,
        stdin: _,
        open_append: _,
        work_dir: _,
        submit_dir: _,
        submit_host: _,
        environment: _,
        export: _,
        script: _,
        script_args: _,
        command: _,
        hold,
        begin_time,
        deadline,
        comment: _,
        nice,
        requeue,
        exclusive,
        nodelist,
        exclude,
        constraint,
        dependency,
        array,
        signal,
        mail_type: _,
        mail_user: _,
        umask,
        submit_line: _,
        kill_on_invalid_dep,
        wckey: _,
        template: _,
        overcommit,
        no_allocate,
    } = spec;
    JobSpec {
        partitions: partitions.clone(),
        account: account.clone(),
        qos: qos.clone(),
        time_limit: *time_limit,
        nodes_min: *nodes_min,
        nodes_max: *nodes_max,
        ntasks: *ntasks,
        cpus_per_task: *cpus_per_task,
        ntasks_per_node: *ntasks_per_node,
        mem: *mem,
        gres_per_node: gres_per_node.clone(),
        gpus: gpus.clone(),
        gpus_per_task: gpus_per_task.clone(),
        hold: *hold,
        begin_time: *begin_time,
        deadline: *deadline,
        nice: *nice,
        requeue: *requeue,
        exclusive: *exclusive,
        nodelist: nodelist.clone(),
        exclude: exclude.clone(),
        constraint: constraint.clone(),
        dependency: dependency.clone(),
        array: array.clone(),
        signal: signal.clone(),
        // The step runner on every node of the job reads it (`LaunchStep`).
        umask: *umask,
        kill_on_invalid_dep: *kill_on_invalid_dep,
        overcommit: *overcommit,
        no_allocate: *no_allocate,
        ..JobSpec::default()
    }
}

/// The whole spec of a job: the resident fields as they are now (updates included), the
/// launch-only fields from the spec `stored` with the job, name and comment from `info`.
pub(crate) fn complete(resident: &JobSpec, info: &JobInfo, stored: JobSpec) -> JobSpec {
    let JobSpec {
        name: _,
        partitions: _,
        account: _,
        qos: _,
        time_limit: _,
        nodes_min: _,
        nodes_max: _,
        ntasks: _,
        cpus_per_task: _,
        ntasks_per_node: _,
        mem: _,
        gres_per_node: _,
        gpus: _,
        gpus_per_task: _,
        stdout,
        stderr,
        stdin,
        open_append,
        work_dir,
        submit_dir,
        submit_host,
        environment,
        export,
        script,
        script_args,
        command,
        hold: _,
        begin_time: _,
        deadline: _,
        comment: _,
        nice: _,
        requeue: _,
        exclusive: _,
        nodelist: _,
        exclude: _,
        constraint: _,
        dependency: _,
        array: _,
        signal: _,
        mail_type,
        mail_user,
        umask: _,
        submit_line,
        kill_on_invalid_dep: _,
        wckey,
        template,
        overcommit: _,
        no_allocate: _,
    } = stored;
    JobSpec {
        name: info.name.clone(),
        comment: info.comment.clone(),
        stdout,
        stderr,
        stdin,
        open_append,
        work_dir,
        submit_dir,
        submit_host,
        environment,
        export,
        script,
        script_args,
        command,
        mail_type,
        mail_user,
        submit_line,
        wckey,
        template,
        ..resident.clone()
    }
}

/// Values shared between jobs: one copy of each distinct value some job holds, forgotten by
/// [`Pool::prune`] once no job holds it.
#[derive(Debug)]
pub(crate) struct Pool<T: ?Sized> {
    values: HashSet<Arc<T>>,
}

impl<T: ?Sized> Default for Pool<T> {
    fn default() -> Pool<T> {
        Pool { values: HashSet::new() }
    }
}

impl<T: ?Sized + std::hash::Hash + Eq> Pool<T> {
    /// The shared copy of `value`.
    pub(crate) fn share(&mut self, value: &Arc<T>) -> Arc<T> {
        if let Some(shared) = self.values.get(&**value) {
            return Arc::clone(shared);
        }
        self.values.insert(Arc::clone(value));
        Arc::clone(value)
    }

    /// The shared copy of `value`, which is moved into the pool where it is new.
    pub(crate) fn intern(&mut self, value: T) -> Arc<T>
    where
        T: Sized,
    {
        if let Some(shared) = self.values.get(&value) {
            return Arc::clone(shared);
        }
        let shared = Arc::new(value);
        self.values.insert(Arc::clone(&shared));
        shared
    }

    /// Forgets the values no job holds any more.
    pub(crate) fn prune(&mut self) {
        self.values.retain(|value| Arc::strong_count(value) > 1);
    }

    /// How many distinct values are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

/// The partition lists jobs may run in (`Job::candidates`), shared between jobs: a million jobs
/// submitted to one partition hold one list, not a million vectors of names (about 70 bytes a
/// job). Pruned with the specs.
pub(crate) type PartitionLists = Pool<[String]>;

/// Resident specs shared between jobs: a bulk submission of one script keeps one copy.
/// A job changes its spec through [`SpecPool::modify`] (copy, change, share again).
#[derive(Debug, Default)]
pub(crate) struct SpecPool {
    specs: Pool<JobSpec>,
}

impl SpecPool {
    /// The shared copy of `spec`.
    pub(crate) fn intern(&mut self, spec: JobSpec) -> Arc<JobSpec> {
        self.specs.intern(spec)
    }

    /// The resident half of a whole spec, shared.
    pub(crate) fn resident(&mut self, spec: &JobSpec) -> Arc<JobSpec> {
        self.intern(resident(spec))
    }

    /// Changes one job's spec without touching the other jobs that share it.
    pub(crate) fn modify(&mut self, spec: &mut Arc<JobSpec>, change: impl FnOnce(&mut JobSpec)) {
        let mut changed = JobSpec::clone(spec);
        change(&mut changed);
        *spec = self.intern(changed);
    }

    /// Forgets the specs no job holds any more.
    pub(crate) fn prune(&mut self) {
        self.specs.prune();
    }

    /// How many distinct resident specs are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.specs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submitted(i: usize) -> JobSpec {
        JobSpec {
            name: format!("job{i}"),
            work_dir: "/home/u".into(),
            submit_dir: "/home/u".into(),
            submit_host: "login1".into(),
            environment: vec![("PATH".into(), "/usr/bin".into()), ("I".into(), i.to_string())],
            script: format!("#!/bin/sh\necho {i}\n").into_bytes(),
            script_args: vec!["a".into()],
            command: Some("/home/u/job.sh".into()),
            stdout: Some("out-%j".into()),
            comment: Some("c".into()),
            submit_line: format!("sbatch job.sh {i}"),
            umask: 0o022,
            hold: true,
            mail_user: Some("u@x".into()),
            wckey: Some("w".into()),
            export: Some("ALL".into()),
            ..JobSpec::default()
        }
    }

    #[test]
    fn jobs_of_one_submission_share_their_resident_spec() {
        let mut pool = SpecPool::default();
        let a = pool.resident(&submitted(1));
        let b = pool.resident(&submitted(2));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.script.is_empty() && a.environment.is_empty() && a.name.is_empty());
        assert_eq!(a.umask, 0o022);
        let mut c = Arc::clone(&b);
        pool.modify(&mut c, |s| s.hold = false);
        assert!(!c.hold && b.hold);
        assert_eq!(pool.len(), 2);
        drop(c);
        pool.prune();
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn jobs_with_one_partition_list_share_it() {
        let mut lists = PartitionLists::default();
        let list = |names: &[&str]| -> Arc<[String]> { names.iter().map(|n| (*n).to_owned()).collect() };
        let a = lists.share(&list(&["gpu", "cpu"]));
        let b = lists.share(&list(&["gpu", "cpu"]));
        assert!(Arc::ptr_eq(&a, &b));
        // Another order is another list: the order is the order partitions are tried in.
        let c = lists.share(&list(&["cpu", "gpu"]));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(lists.len(), 2);
        drop(c);
        lists.prune();
        assert_eq!(lists.len(), 1);
        drop((a, b));
        lists.prune();
        assert_eq!(lists.len(), 0);
    }

    #[test]
    fn complete_rebuilds_the_submitted_spec() {
        let spec = submitted(7);
        let info = JobInfo { name: spec.name.clone(), comment: spec.comment.clone(), ..JobInfo::default() };
        let resident = resident(&spec);
        assert_eq!(complete(&resident, &info, spec.clone()), spec);
        // Updates made in memory win over the stored spec.
        let mut updated = resident.clone();
        updated.time_limit = Some(drover_shared::grammar::time::TimeLimit::Minutes(5));
        updated.hold = false;
        let info = JobInfo { name: "renamed".into(), comment: None, ..info };
        let whole = complete(&updated, &info, spec.clone());
        assert_eq!(whole.name, "renamed");
        assert_eq!(whole.comment, None);
        assert_eq!(whole.time_limit, updated.time_limit);
        assert!(!whole.hold);
        assert_eq!(whole.script, spec.script);
        assert_eq!(whole.environment, spec.environment);
    }
}
