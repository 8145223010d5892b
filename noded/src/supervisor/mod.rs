//! The per-job supervisor (Slurm's slurmstepd role): one process per job that outlives noded, runs
//! the batch script as its owner, enforces the time limit, obeys cancel and signal commands, and
//! leaves the job's end on disk for noded to report.
//!
//! Boundary: noded talks to a supervisor only through this module's public items and the job
//! directory. noded creates `job_dir` (root, 0700, in a state directory whose ancestors others
//! can traverse), writes the job's `isolation` and `prolog-epilog` files, then the request with
//! [`write_launch`] (last, so a directory with a request holds the rest), and calls [`spawn`], which runs
//! `<exe> supervise --job-dir <dir> --noded-socket <sock>`; noded's `main` routes that hidden
//! subcommand to [`main`] before it starts any thread. noded normally starts supervisors through
//! its [`Launcher`] instead, which runs [`main`] in a detached fork of a small single-threaded
//! process (no exec); [`spawn`] remains the fallback. The job directory then holds:
//!
//! | file | written by | content |
//! |---|---|---|
//! | `launch` | noded ([`write_launch`]), atomically and fsynced | postcard [`LaunchRequest`](drover_shared::proto::node::LaunchRequest), no length prefix, 0600 |
//! | `supervisor.pid` | noded, and the supervisor unless it holds its record already; atomically | text `<pid> <start time>\n`, start time = `/proc/<pid>/stat` field 22 |
//! | `supervisor.log` | supervisor (stdout and stderr) | its log, 0600 |
//! | `script` | supervisor | the batch script, owned by the job's user, 0500 |
//! | `control.sock` | supervisor | Unix socket, 0600: one [`SupervisorCommand`] frame in, one [`SupervisorReply`] frame out |
//! | `started` | supervisor, atomically | text `<unix seconds>\n` once the script runs |
//! | `usage` | supervisor, atomically, just before `end` | postcard [`JobUsage`](drover_shared::proto::node::JobUsage): the job's processes' CPU time and peak RSS (`getrusage(RUSAGE_CHILDREN)` from the job's start to its last process's end) |
//! | `end` | supervisor, atomically and fsynced | postcard [`JobEnd`](drover_shared::proto::node::JobEnd), no length prefix |
//!
//! The supervisor makes `job_dir` 0711 so the job's user can exec `script` (readable only by that
//! user) without being able to list the directory. After writing `started` and `end` it sends one
//! [`SupervisorEvent`] frame to `noded_socket` (best effort: noded also rescans job directories).
//! It removes `control.sock` and exits once `end` is written; noded deletes `job_dir` after ctld
//! acknowledges the end.
//!
//! A job's processes are the supervisor's descendants: the supervisor is a child subreaper, so a
//! process that daemonizes out of the script's session is still reparented to it and signalled
//! with the job. When the batch shell exits, whatever it left behind gets SIGKILL, as under
//! Slurm's process tracking, and is reaped before `end` is written.
//!
//! When noded wrote an `isolation` file ([`crate::isolation`]), the supervisor creates the job's
//! cgroups and device filter before the fork and moves the child into them before it may run any
//! of the job's code; after the end it reads the OOM count (a kill makes the job
//! `OUT_OF_MEMORY`), kills whatever is left in them and removes them. Test hook: `DROVER_TIME_SCALE=<factor>` in the
//! supervisor's environment multiplies the time limit (`0.01` turns a minute into 0.6 s).

mod admin_env;
mod child;
mod control;
mod detach;
mod env;
mod jobfiles;
mod launcher;
mod procfs;
mod run;
mod warning;

use drover_shared::UnixTime;
use drover_shared::job::JobId;
use drover_shared::proto::frame::FrameError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use thiserror::Error;

pub use control::send_command;
pub use detach::spawn;
pub use jobfiles::{read_end, read_started, read_usage, supervisor_alive, write_launch};
pub use launcher::Launcher;

/// Where the supervisor writes the batch script in a job directory.
pub fn script_path(job_dir: &Path) -> std::path::PathBuf {
    job_dir.join(jobfiles::SCRIPT)
}

/// A command noded sends to a running supervisor over `control.sock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SupervisorCommand {
    /// Sends `signal` to every process of the job, or only to the batch shell when `batch_only`.
    /// Not a cancel: the job ends however the signal makes it end.
    Signal { signal: i32, batch_only: bool },
    /// SIGCONT and SIGTERM to every process of the job, SIGKILL after `kill_wait` seconds;
    /// the job ends `Cancelled`.
    Cancel { kill_wait: u32 },
    /// `scontrol update JobId=N TimeLimit=…` of a running job: the time limit, counted from the
    /// job's start as before, becomes `seconds` (`None`: unlimited). A limit already passed ends
    /// the job at once (`TIMEOUT`).
    SetTimeLimit { seconds: Option<u64> },
}

/// The supervisor's answer to one [`SupervisorCommand`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SupervisorReply {
    /// Done: the signals are sent.
    Accepted,
    /// Not done, with the reason (unknown signal, job already ended).
    Rejected { message: String },
}

/// What a supervisor tells noded on `noded_socket`, one frame per connection. The files in the
/// job directory are the truth; these only save noded a rescan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SupervisorEvent {
    /// `started` is written: the batch script runs.
    Started { job_id: JobId, start_time: UnixTime },
    /// `end` is written: read it with [`read_end`].
    Ended { job_id: JobId },
}

/// Why a supervisor operation failed.
#[derive(Debug, Error)]
pub enum SupervisorError {
    /// A job-directory file could not be read.
    #[error("could not read {path}")]
    Read { path: PathBuf, source: std::io::Error },
    /// A job-directory file could not be written.
    #[error("could not write {path}")]
    Write { path: PathBuf, source: std::io::Error },
    /// A job-directory file holds something else than expected.
    #[error("malformed {path}: {reason}")]
    Malformed { path: PathBuf, reason: String },
    /// The supervisor process could not be started.
    #[error("could not start the supervisor {exe}")]
    Spawn { exe: PathBuf, source: std::io::Error },
    /// The control socket could not be created.
    #[error("could not listen on {path}")]
    Listen { path: PathBuf, source: std::io::Error },
    /// The control socket did not answer.
    #[error("could not reach the supervisor at {path}")]
    Connect { path: PathBuf, source: std::io::Error },
    /// The command or its reply could not be exchanged.
    #[error("command exchange with the supervisor at {path} failed")]
    Exchange { path: PathBuf, source: FrameError },
    /// The supervisor refused a command.
    #[error("the supervisor refused the command: {message}")]
    Rejected { message: String },
    /// The job's user cannot be resolved on this node.
    #[error("user id {uid} is not known on this node")]
    UnknownUser { uid: u32 },
    /// A system call failed.
    #[error("{operation} failed")]
    Sys { operation: &'static str, source: nix::errno::Errno },
    /// The launch cannot proceed; the message says why.
    #[error("{0}")]
    Refused(String),
    /// The job's cgroups could not be set up.
    #[error("could not set up the job's cgroups")]
    Cgroup(#[source] crate::cgroup::CgroupError),
}

/// The supervisor's entry point, run by `drover-noded supervise --job-dir <dir> --noded-socket
/// <sock>` from a process with no other thread; returns the process exit code (0 once `end` is
/// written, 1 when the supervisor could not even do that, which noded sees as a dead supervisor
/// without an `end`).
pub fn main(job_dir: &Path, noded_socket: &Path) -> i32 {
    match run::run(job_dir, noded_socket) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{} supervisor: {}", drover_shared::now(), error_chain(&error));
            1
        }
    }
}

/// An error with its sources, `outer: inner: innermost`, for logs and `LaunchFailed` messages.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
