//! The job runs a node holds, as directories under `<state_dir>/jobs/<job_id>.<run>/`. The
//! directory is the durable record: noded may die and restart at any time, and everything it needs
//! to find its jobs' supervisors again and to report their ends is on disk (see `supervisor` for
//! the files). The run number (the job's restart count at launch) is part of the name, so a
//! requeued job's next run never meets the directory of an earlier one, even on the same node.

use drover_shared::job::JobId;
use drover_shared::proto::node::JobRun;
use std::path::{Path, PathBuf};

/// The directory holding all job directories.
pub(crate) fn jobs_root(state_dir: &Path) -> PathBuf {
    state_dir.join("jobs")
}

/// One job run's directory.
pub(crate) fn job_dir(state_dir: &Path, run: JobRun) -> PathBuf {
    jobs_root(state_dir).join(run.to_string())
}

/// Parses a directory name `<job_id>.<run>`.
fn parse(name: &str) -> Option<JobRun> {
    let (job_id, run) = name.split_once('.')?;
    Some(JobRun { job_id: job_id.parse().ok()?, run: run.parse().ok()? })
}

/// Job runs with a directory, ascending.
pub(crate) fn held(state_dir: &Path) -> Vec<JobRun> {
    let mut runs: Vec<JobRun> = std::fs::read_dir(jobs_root(state_dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(parse))
        .collect();
    runs.sort_unstable();
    runs
}

/// The latest run of `job_id` this node holds (the one a signal for the job is meant for).
pub(crate) fn latest(state_dir: &Path, job_id: JobId) -> Option<JobRun> {
    held(state_dir).into_iter().filter(|r| r.job_id == job_id).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_named_and_found_by_directory() {
        let dir = tempfile::tempdir().unwrap();
        for run in [JobRun { job_id: 7, run: 0 }, JobRun { job_id: 7, run: 1 }, JobRun { job_id: 12, run: 0 }] {
            std::fs::create_dir_all(job_dir(dir.path(), run)).unwrap();
        }
        // Names that are not runs are ignored.
        std::fs::create_dir_all(jobs_root(dir.path()).join("7")).unwrap();
        std::fs::create_dir_all(jobs_root(dir.path()).join("x.1")).unwrap();
        assert_eq!(job_dir(dir.path(), JobRun { job_id: 7, run: 1 }), dir.path().join("jobs/7.1"));
        let held = held(dir.path());
        assert_eq!(
            held,
            vec![JobRun { job_id: 7, run: 0 }, JobRun { job_id: 7, run: 1 }, JobRun { job_id: 12, run: 0 }]
        );
        assert_eq!(latest(dir.path(), 7), Some(JobRun { job_id: 7, run: 1 }));
        assert_eq!(latest(dir.path(), 8), None);
    }
}
