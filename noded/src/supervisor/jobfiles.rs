//! The job directory as the on-disk contract between noded and a supervisor (see the table in the
//! module above): file names, their encodings, and atomic replacement, so that a reader never
//! sees half a file and an `end` survives a crash of the node right after it was written.

use super::{SupervisorError, procfs};
use drover_shared::UnixTime;
use drover_shared::proto::node::{JobEnd, JobUsage, LaunchRequest};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub(super) const LAUNCH: &str = "launch";
pub(super) const PID_FILE: &str = "supervisor.pid";
pub(super) const LOG: &str = "supervisor.log";
pub(super) const SCRIPT: &str = "script";
pub(super) const CONTROL_SOCKET: &str = "control.sock";
pub(super) const STARTED: &str = "started";
pub(super) const END: &str = "end";
pub(super) const USAGE: &str = "usage";

/// Writes the launch request into a job directory noded created; call before [`super::spawn`].
pub fn write_launch(job_dir: &Path, launch: &LaunchRequest) -> Result<(), SupervisorError> {
    write_postcard(job_dir, LAUNCH, launch, Durability::Synced)
}

pub(super) fn read_launch(job_dir: &Path) -> Result<LaunchRequest, SupervisorError> {
    read_postcard(&job_dir.join(LAUNCH))
}

/// The job's end, once its supervisor wrote it; `Ok(None)` while the job has not ended.
pub fn read_end(job_dir: &Path) -> Result<Option<JobEnd>, SupervisorError> {
    match read_postcard(&job_dir.join(END)) {
        Ok(job_end) => Ok(Some(job_end)),
        Err(SupervisorError::Read { source, .. }) if source.kind() == ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// When the batch script started, once it has; `Ok(None)` before.
pub fn read_started(job_dir: &Path) -> Result<Option<UnixTime>, SupervisorError> {
    let path = job_dir.join(STARTED);
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| SupervisorError::Malformed { path, reason: format!("`{}` is not a time", text.trim()) }),
        Err(source) if source.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SupervisorError::Read { path, source }),
    }
}

/// Whether the supervisor recorded in `supervisor.pid` still runs. The recorded start time must
/// match the process's, so a pid the kernel has since given to another process does not count,
/// and neither does a zombie.
pub fn supervisor_alive(job_dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(job_dir.join(PID_FILE)) else { return false };
    let mut words = text.split_ascii_whitespace();
    let (Some(Ok(pid)), Some(Ok(start_time))) =
        (words.next().map(str::parse::<i32>), words.next().map(str::parse::<u64>))
    else {
        return false;
    };
    procfs::stat(pid).is_some_and(|proc_stat| proc_stat.start_time == start_time && proc_stat.is_running())
}

/// Records `pid`, which started at `start_time` (`/proc/<pid>/stat` field 22), as the job's
/// supervisor; a record that already says exactly that (noded wrote it first) is left as it is.
/// Atomic but not synced: it only matters while the machine runs (noded treats every job
/// launched before the current boot as ended, whatever its pid file says).
pub(super) fn write_pid_file(job_dir: &Path, pid: i32, start_time: u64) -> Result<(), SupervisorError> {
    let record = format!("{pid} {start_time}\n");
    if std::fs::read(job_dir.join(PID_FILE)).is_ok_and(|held| held == record.as_bytes()) {
        return Ok(());
    }
    write_atomic(job_dir, PID_FILE, record.as_bytes(), Durability::Atomic)
        .map_err(|source| SupervisorError::Write { path: job_dir.join(PID_FILE), source })
}

/// `started` is atomic but not synced: after a crash of the machine (which ends the job too) it
/// may be lost, and the job's end record then has no start time; `end` itself is synced.
pub(super) fn write_started(job_dir: &Path, start_time: UnixTime) -> Result<(), SupervisorError> {
    write_atomic(job_dir, STARTED, format!("{start_time}\n").as_bytes(), Durability::Atomic)
        .map_err(|source| SupervisorError::Write { path: job_dir.join(STARTED), source })
}

pub(super) fn write_end(job_dir: &Path, job_end: &JobEnd) -> Result<(), SupervisorError> {
    write_postcard(job_dir, END, job_end, Durability::Synced)
}

/// What the job used, written just before `end`; `Ok(None)` when it was not measured.
pub fn read_usage(job_dir: &Path) -> Result<Option<JobUsage>, SupervisorError> {
    match read_postcard(&job_dir.join(USAGE)) {
        Ok(usage) => Ok(Some(usage)),
        Err(SupervisorError::Read { source, .. }) if source.kind() == ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Atomic but not synced: written just before `end`, whose sync makes the rename durable; after
/// a crash of the machine its content may be lost, and the job's usage is then not recorded.
pub(super) fn write_usage(job_dir: &Path, usage: &JobUsage) -> Result<(), SupervisorError> {
    write_postcard(job_dir, USAGE, usage, Durability::Atomic)
}

fn read_postcard<T: DeserializeOwned>(path: &Path) -> Result<T, SupervisorError> {
    let bytes = std::fs::read(path).map_err(|source| SupervisorError::Read { path: path.to_owned(), source })?;
    postcard::from_bytes(&bytes)
        .map_err(|error| SupervisorError::Malformed { path: path.to_owned(), reason: error.to_string() })
}

fn write_postcard<T: Serialize>(
    job_dir: &Path,
    name: &str,
    value: &T,
    durability: Durability,
) -> Result<(), SupervisorError> {
    let path = job_dir.join(name);
    let bytes = postcard::to_allocvec(value)
        .map_err(|error| SupervisorError::Malformed { path: path.clone(), reason: error.to_string() })?;
    write_atomic(job_dir, name, &bytes, durability).map_err(|source| SupervisorError::Write { path, source })
}

/// How much a job-directory file must survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// A reader sees the old file or the new one, never half of one; a crash of the machine may
    /// lose it (a crash of noded or the supervisor cannot: the page cache outlives them).
    Atomic,
    /// Atomic, and on disk when the call returns: it survives a crash of the machine.
    Synced,
}

/// Replaces `job_dir/name` by a file holding `bytes`, mode 0600: writes a temporary file named
/// after the writing process (so noded and the supervisor never share one) and renames it over
/// the old name; [`Durability::Synced`] syncs the file before the rename and the directory after.
fn write_atomic(job_dir: &Path, name: &str, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
    let tmp_path = job_dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp_path)?;
    let written =
        file.write_all(bytes).and_then(|()| if durability == Durability::Synced { file.sync_all() } else { Ok(()) });
    if let Err(error) = written {
        let _ = std::fs::remove_file(&tmp_path);
        return Err(error);
    }
    std::fs::rename(&tmp_path, job_dir.join(name))?;
    if durability == Durability::Synced { File::open(job_dir)?.sync_all() } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::job::WaitStatus;
    use drover_shared::proto::node::JobOutcome;

    #[test]
    fn end_and_started_round_trip() {
        let job_dir = tempfile::tempdir().unwrap();
        assert_eq!(read_end(job_dir.path()).unwrap(), None);
        assert_eq!(read_started(job_dir.path()).unwrap(), None);
        let job_end = JobEnd {
            job_id: 7,
            run: 1,
            outcome: JobOutcome::LaunchFailed { message: "no".into() },
            exit_status: WaitStatus::exited(1),
            start_time: None,
            end_time: 1_700_000_000,
        };
        write_end(job_dir.path(), &job_end).unwrap();
        write_started(job_dir.path(), 1_699_999_999).unwrap();
        assert_eq!(read_end(job_dir.path()).unwrap(), Some(job_end));
        assert_eq!(read_started(job_dir.path()).unwrap(), Some(1_699_999_999));
        let names: Vec<_> = std::fs::read_dir(job_dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "temporary files left behind: {names:?}");
        std::fs::write(job_dir.path().join(END), b"\xff\xff").unwrap();
        assert!(matches!(read_end(job_dir.path()), Err(SupervisorError::Malformed { .. })));
    }

    #[test]
    fn alive_checks_pid_and_start_time() {
        let job_dir = tempfile::tempdir().unwrap();
        assert!(!supervisor_alive(job_dir.path()));
        let me = i32::try_from(std::process::id()).unwrap();
        let start_time = procfs::stat(me).unwrap().start_time;
        write_pid_file(job_dir.path(), me, start_time).unwrap();
        assert!(supervisor_alive(job_dir.path()));
        std::fs::write(job_dir.path().join(PID_FILE), format!("{me} {}\n", start_time + 1)).unwrap();
        assert!(!supervisor_alive(job_dir.path()), "a recycled pid must not count");
        std::fs::write(job_dir.path().join(PID_FILE), "nonsense").unwrap();
        assert!(!supervisor_alive(job_dir.path()));
    }
}
