//! Starting supervisors without executing a binary: a small launcher process, forked from noded
//! while noded still has one thread (before its async runtime starts), that forks each job's
//! supervisor from itself on request. The supervisor then runs [`super::main`] in a fork of the
//! launcher instead of in a freshly executed `drover-noded supervise`, which saves loading and
//! relocating the whole binary for every job; noded's own large, multi-threaded address space is
//! not copied either.
//!
//! The supervisor is detached from noded as [`super::spawn`] detaches it, with one fork less:
//! the launcher's child starts a new session and becomes the supervisor. The launcher ignores
//! SIGCHLD, so the kernel reaps supervisors that end while it lives; when it exits (with noded)
//! they are orphaned (init, or the nearest child subreaper, adopts them). The supervisor closes every
//! descriptor it inherited except the device programs the launcher preloaded for it
//! ([`crate::bpf::preload_device_program`]: jobs with the same denied devices share one) and its
//! stdio (stdin `/dev/null`, stdout and stderr appended to
//! `supervisor.log`), and runs in `/`. The launcher dies with noded: it exits at the end of its
//! request stream and asks for SIGKILL when its parent dies. Supervisors never depend on it.
//!
//! Requests on the socket pair are `u32` length (native endian) + `job_dir` + NUL +
//! `noded_socket`; each answer is an `i32`: the supervisor's pid, or `-errno` when it could not
//! be started.

use super::{SupervisorError, jobfiles, procfs};
use crate::sys::{self, process::ForkError, process::Forked};
use nix::sys::signal::Signal;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The longest request the launcher accepts (two paths).
const MAX_REQUEST: usize = 2 * 4096 + 1;

/// noded's end of the launcher.
#[derive(Debug)]
pub struct Launcher {
    stream: Mutex<UnixStream>,
    /// Set once a request could not be sent: the launcher is gone, and supervisors are started
    /// with [`super::spawn`] from then on.
    gone: AtomicBool,
}

impl Launcher {
    /// Forks the launcher. Returns `None` (and starts nothing) when this process has more than
    /// one thread, since only a single-threaded process can be forked and then go on running
    /// ordinary code; callers then start supervisors with [`super::spawn`].
    pub fn start() -> Option<Launcher> {
        let (ours, theirs) = UnixStream::pair().ok()?;
        // The child is an ordinary single-threaded copy that may allocate; it never returns:
        // `serve` ends in `_exit`.
        match sys::process::fork_single_threaded().ok()? {
            Forked::Child => {
                drop(ours);
                serve(theirs)
            }
            Forked::Parent(_) => Some(Launcher { stream: Mutex::new(ours), gone: AtomicBool::new(false) }),
        }
    }

    /// Starts the supervisor of `job_dir`, as [`super::spawn`] does: returns its pid once it
    /// runs, with `supervisor.pid` written (unless the supervisor already finished). When the
    /// launcher is gone (the request cannot be sent), it executes `exe` with [`super::spawn`]
    /// instead. A launcher that took the request but did not answer is an error, not a reason
    /// to start a second supervisor: it may have started the first.
    pub fn spawn(&self, exe: &Path, job_dir: &Path, noded_socket: &Path) -> Result<u32, SupervisorError> {
        if self.gone.load(Ordering::Relaxed) {
            return super::spawn(exe, job_dir, noded_socket);
        }
        let spawn_error = |source: std::io::Error| SupervisorError::Spawn { exe: "(launcher)".into(), source };
        let job_dir = &std::path::absolute(job_dir).map_err(spawn_error)?;
        let noded_socket = std::path::absolute(noded_socket).map_err(spawn_error)?;
        let mut request = job_dir.as_os_str().as_bytes().to_vec();
        request.push(0);
        request.extend_from_slice(noded_socket.as_os_str().as_bytes());
        let length = u32::try_from(request.len()).map_err(|_| spawn_error(std::io::Error::other("paths too long")))?;
        let answer = {
            let mut stream = self.stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut message = length.to_ne_bytes().to_vec();
            message.extend_from_slice(&request);
            if stream.write_all(&message).is_err() {
                self.gone.store(true, Ordering::Relaxed);
                drop(stream);
                return super::spawn(exe, job_dir, &noded_socket);
            }
            let mut answer = [0u8; 4];
            stream.read_exact(&mut answer).map_err(spawn_error)?;
            i32::from_ne_bytes(answer)
        };
        if answer <= 0 {
            return Err(spawn_error(std::io::Error::from_raw_os_error(-answer)));
        }
        if let Some(proc_stat) = procfs::stat(answer) {
            jobfiles::write_pid_file(job_dir, answer, proc_stat.start_time)?;
        }
        u32::try_from(answer).map_err(|_| spawn_error(std::io::Error::other("negative pid")))
    }
}

/// The launcher's loop: one supervisor per request until noded closes the stream.
fn serve(mut stream: UnixStream) -> ! {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    // noded may already have died between the fork and the prctl.
    if nix::unistd::getppid().as_raw() == 1 {
        exit(0);
    }
    // Supervisors are the launcher's children until it exits: ignoring SIGCHLD has the kernel
    // reap them as they end, so none is left a zombie (or judged alive by its pid file).
    sys::process::ignore(Signal::SIGCHLD);
    loop {
        let mut length = [0u8; 4];
        if stream.read_exact(&mut length).is_err() {
            exit(0);
        }
        let length = usize::try_from(u32::from_ne_bytes(length)).unwrap_or(usize::MAX);
        if length > MAX_REQUEST {
            exit(1);
        }
        let mut request = vec![0u8; length];
        if stream.read_exact(&mut request).is_err() {
            exit(0);
        }
        let answer = match request.iter().position(|&byte| byte == 0) {
            Some(nul) => start_one(&request[..nul], &request[nul + 1..]),
            None => -libc::EINVAL,
        };
        if stream.write_all(&answer.to_ne_bytes()).is_err() {
            exit(0);
        }
    }
}

/// Forks one detached supervisor; its pid or `-errno`.
fn start_one(job_dir: &[u8], noded_socket: &[u8]) -> i32 {
    let errno = |error: std::io::Error| -error.raw_os_error().unwrap_or(libc::EIO);
    let job_dir = Path::new(OsStr::from_bytes(job_dir));
    let noded_socket = Path::new(OsStr::from_bytes(noded_socket));
    let log_path = job_dir.join(jobfiles::LOG);
    let log = OpenOptions::new().create(true).append(true).mode(0o600).open(log_path);
    let null = File::open("/dev/null");
    let (log_fd, null_fd) = match (log, null) {
        (Ok(log), Ok(null)) => (OwnedFd::from(log), OwnedFd::from(null)),
        (Err(error), _) | (_, Err(error)) => return errno(error),
    };
    // Jobs with the same denied devices share one device program, loaded here once and
    // inherited by the supervisor (see `crate::bpf`); a failure here is the supervisor's to report.
    if let Ok(Some(isolation)) = crate::isolation::read(job_dir)
        && isolation.cgroup.unified.is_some()
        && !isolation.limits.denied_devices.is_empty()
    {
        let _ = crate::bpf::preload_device_program(&isolation.limits.denied_devices);
    }
    // The launcher has one thread, so its child may run ordinary code. The supervisor keeps
    // nothing it inherited but stdio (`/dev/null`, the log) and the preloaded device programs
    // (owned by `crate::bpf`, which it goes on using), as an exec would close the launcher's
    // close-on-exec descriptors.
    let keep = crate::bpf::preloaded_descriptors();
    match sys::process::fork_detached(&null_fd, &log_fd, &keep, || super::main(job_dir, noded_socket)) {
        Ok(supervisor_pid) => supervisor_pid.as_raw(),
        Err(ForkError::Fork(source)) => errno(source.into()),
        Err(ForkError::Threads) => -libc::EAGAIN,
    }
}

/// Ends the process without running exit handlers registered before the fork (they belong to
/// noded); the supervisor writes its log unbuffered, so nothing is lost.
fn exit(code: i32) -> ! {
    sys::process::exit_now(code)
}
