//! The jobs a node holds, as directories under `<state_dir>/jobs/<job_id>/`. The directory is the
//! durable record: noded may die and restart at any time, and everything it needs to find its jobs'
//! supervisors again and to report their ends is on disk (see `supervisor` for the files).

use drover_shared::job::JobId;
use std::path::{Path, PathBuf};

/// The directory holding all job directories.
pub(crate) fn jobs_root(state_dir: &Path) -> PathBuf {
    state_dir.join("jobs")
}

/// One job's directory.
pub(crate) fn job_dir(state_dir: &Path, job_id: JobId) -> PathBuf {
    jobs_root(state_dir).join(job_id.to_string())
}

/// Job ids with a directory, ascending.
pub(crate) fn held(state_dir: &Path) -> Vec<JobId> {
    let mut ids: Vec<JobId> = std::fs::read_dir(jobs_root(state_dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    ids.sort_unstable();
    ids
}
