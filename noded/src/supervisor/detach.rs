//! Starting a supervisor from noded so that it does not depend on noded: a double fork. noded's
//! child starts a new session and forks the supervisor, then exits at once; noded reaps that
//! intermediate child before [`spawn`] returns, and the supervisor, orphaned, belongs to init (or
//! to whichever ancestor of noded is a child subreaper). Nothing ties it to noded afterwards: not
//! a parent link, a session, a process group, a terminal or an inherited descriptor, so
//! `kill -9` of noded (or of its process group) leaves the job running.

use super::{SupervisorError, jobfiles, procfs};
use nix::fcntl::OFlag;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Starts `<exe> supervise --job-dir <job_dir> --noded-socket <noded_socket>` detached from the
/// caller (`exe` absolute: noded passes `std::env::current_exe()`), with stdin on /dev/null and
/// stdout and stderr appended to `job_dir/supervisor.log`. Returns the supervisor's pid once it
/// runs, with `supervisor.pid` written (unless the supervisor already finished). Blocks for the
/// two forks and the exec: call it from a blocking context.
pub fn spawn(exe: &Path, job_dir: &Path, noded_socket: &Path) -> Result<u32, SupervisorError> {
    let spawn_error = |source: std::io::Error| SupervisorError::Spawn { exe: exe.to_owned(), source };
    // The supervisor runs in `/`: relative paths are resolved here, against noded's directory.
    let job_dir = &std::path::absolute(job_dir).map_err(spawn_error)?;
    let noded_socket = &std::path::absolute(noded_socket).map_err(spawn_error)?;
    let log_path = job_dir.join(jobfiles::LOG);
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(|source| SupervisorError::Write { path: log_path, source })?;
    let log_for_stderr = log.try_clone().map_err(spawn_error)?;
    let (pid_reader, pid_writer) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|errno| spawn_error(errno.into()))?;

    let mut command = Command::new(exe);
    command
        .arg("supervise")
        .arg("--job-dir")
        .arg(job_dir)
        .arg("--noded-socket")
        .arg(noded_socket)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_for_stderr);
    crate::sys::exec::detach_at_exec(&mut command, pid_writer);
    // `spawn` returns once the supervisor has exec'd (or reports why it could not).
    let mut intermediate = command.spawn().map_err(spawn_error)?;
    // Closes noded's end of the pid pipe.
    drop(command);
    let _ = intermediate.wait();

    let mut pid_bytes = [0u8; 4];
    File::from(pid_reader).read_exact(&mut pid_bytes).map_err(spawn_error)?;
    let supervisor_pid = i32::from_ne_bytes(pid_bytes);
    // The supervisor writes the same record first thing; writing it here too means the record
    // exists when `spawn` returns. A supervisor that already ran to its end has none to write.
    if let Some(proc_stat) = procfs::stat(supervisor_pid) {
        jobfiles::write_pid_file(job_dir, supervisor_pid, proc_stat.start_time)?;
    }
    u32::try_from(supervisor_pid).map_err(|_| spawn_error(std::io::Error::other("negative pid")))
}
