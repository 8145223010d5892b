//! The supervisor process: prepares and forks the job while it has one thread, then starts three
//! threads that turn blocking waits into [`Event`]s (the child's setup report, `waitpid`, the
//! control socket) and runs one loop over them with the time limit and the SIGKILL escalation as
//! deadlines. When the batch shell has exited and every other process of the job is gone, it
//! writes `end`, tells noded, and exits.

use super::child::{self, ForkedJob};
use super::warning::{self, TimeLimitWarning};
use super::{
    SupervisorCommand, SupervisorError, SupervisorEvent, SupervisorReply, control, error_chain, jobfiles, procfs,
};
use crate::cgroup::JobCgroup;
use crate::isolation;
use crate::prolog::{self, JobScripts};
use crate::spank::JobScript;
use crate::sys;
use drover_shared::UnixTime;
use drover_shared::job::WaitStatus;
use drover_shared::proto::frame;
use drover_shared::proto::node::{JobEnd, JobOutcome, JobUsage, LaunchRequest};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How often leftover processes are sent SIGKILL again after the batch shell exited.
const LEFTOVER_KILL_INTERVAL: Duration = Duration::from_millis(100);

/// How long the supervisor waits for leftover processes to die before it writes `end` anyway
/// (a process stuck in the kernel cannot be killed; it is logged).
const LEFTOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// The test hook that scales the time limit.
const TIME_SCALE_VAR: &str = "DROVER_TIME_SCALE";

/// Everything the main loop reacts to, besides its own deadlines.
pub(super) enum Event {
    /// The child finished its setup: `Ok` once the script was exec'd, `Err` with the reason it
    /// could not be.
    SetupReported(Result<(), String>),
    /// `waitpid` reaped a process: the batch shell, or an orphan of the job reparented to us.
    /// `last`: no other child was left right after it, so no process of the job is left either
    /// (orphans are reparented to us before their parent can be reaped). Carried with the reap,
    /// so the loop does not hunt for leftovers of a shell whose job is already gone.
    Reaped { pid: Pid, status: WaitStatus, last: bool },
    /// No child is left: every process of the job is gone.
    NoChildren,
    /// A command from the control socket, and where to send the reply.
    Command { command: SupervisorCommand, reply: mpsc::Sender<SupervisorReply> },
}

/// Why Drover itself ended the job, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Termination {
    Cancelled,
    TimedOut,
}

pub(super) fn run(job_dir: &Path, noded_socket: &Path) -> Result<(), SupervisorError> {
    let job_dir =
        std::path::absolute(job_dir).map_err(|source| SupervisorError::Read { path: job_dir.to_owned(), source })?;
    let me = nix::unistd::getpid();
    let my_start_time = procfs::stat(me.as_raw()).map_or(0, |proc_stat| proc_stat.start_time);
    jobfiles::write_pid_file(&job_dir, me.as_raw(), my_start_time)?;
    // Everything the supervisor creates is private unless it says otherwise.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let launch = jobfiles::read_launch(&job_dir)?;
    become_job_reaper();
    if nix::unistd::geteuid().is_root() {
        // Like slurmstepd: under memory pressure the kernel kills the job, not its supervisor.
        let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    }

    let job_end = supervise(&job_dir, noded_socket, &launch);
    crate::spank::exit();
    let _ = std::fs::remove_file(job_dir.join(jobfiles::CONTROL_SOCKET));
    jobfiles::write_end(&job_dir, &job_end)?;
    log(format_args!("job {} ended: {:?}, exit status {}", job_end.job_id, job_end.outcome, job_end.exit_status));
    notify(noded_socket, &SupervisorEvent::Ended { job_id: launch.job_id });
    Ok(())
}

/// CPU time and peak RSS of the supervisor's reaped descendants: the job's processes (the
/// supervisor is their subreaper and reaps every one of them).
fn children_usage() -> Option<JobUsage> {
    let usage = sys::process::children_usage()?;
    Some(JobUsage {
        job_id: 0,
        user_usec: usage.user_usec,
        system_usec: usage.system_usec,
        max_rss_kib: usage.max_rss_kib,
    })
}

/// Makes the supervisor a child subreaper, so that every process the job starts, even one that
/// daemonizes, stays below it: signalled with the job and reaped before `end` is written.
fn become_job_reaper() {
    if let Err(errno) = nix::sys::prctl::set_child_subreaper(true) {
        log(format_args!("cannot become a subreaper ({errno}); daemonized job processes may escape"));
    }
}

/// Runs the job to its end; every failure becomes part of the returned end.
fn supervise(job_dir: &Path, noded_socket: &Path, launch: &LaunchRequest) -> JobEnd {
    let launch_failed = |error: SupervisorError| {
        let message = error_chain(&error);
        log(format_args!("job {} could not start: {message}", launch.job_id));
        job_end(launch, JobOutcome::LaunchFailed { message }, WaitStatus::exited(1), None)
    };
    let isolation = match isolation::read(job_dir) {
        Ok(isolation) => isolation,
        Err(source) => {
            return launch_failed(SupervisorError::Read { path: job_dir.join(isolation::ISOLATION_FILE), source });
        }
    };
    let cuda_visible_devices = isolation.as_ref().and_then(|isolation| isolation.cuda_visible_devices.clone());
    let command = match child::prepare(job_dir, launch, cuda_visible_devices) {
        Ok(command) => command,
        Err(error) => return launch_failed(error),
    };
    let listener = match control::bind(job_dir) {
        Ok(listener) => listener,
        Err(error) => return launch_failed(error),
    };
    let cgroup = match &isolation {
        Some(isolation) => match JobCgroup::create(&isolation.cgroup, launch.job_id, &isolation.limits) {
            Ok(cgroup) => Some(cgroup),
            Err(error) => return launch_failed(SupervisorError::Cgroup(error)),
        },
        None => None,
    };
    let scripts = match JobScripts::read(job_dir) {
        Ok(scripts) => scripts,
        Err(source) => {
            remove_cgroup(cgroup.as_ref());
            return launch_failed(SupervisorError::Read { path: job_dir.join(prolog::SCRIPTS_FILE), source });
        }
    };
    let script_timeout = Duration::from_secs(u64::from(scripts.timeout_seconds.max(1)));
    // SPANK's job_script context, just before the node's prolog; a failure is a prolog failure.
    if let Err(message) =
        crate::spank::job_script(JobScript::Prolog, &command.script_environment("prolog_slurmd"), script_timeout)
    {
        log(format_args!("job {}: SPANK job_prolog failed: {message}", launch.job_id));
        prolog::write_drain(job_dir, &format!("Prolog error: {message}"));
        remove_cgroup(cgroup.as_ref());
        return launch_failed(SupervisorError::Refused(format!("the SPANK job prolog failed: {message}")));
    }
    if let Some(program) = &scripts.prolog
        && let Err(message) = prolog::run(program, &command.script_environment("prolog_slurmd"), script_timeout)
    {
        log(format_args!("job {}: prolog failed: {message}", launch.job_id));
        prolog::write_drain(job_dir, &format!("Prolog error: {message}"));
        remove_cgroup(cgroup.as_ref());
        return launch_failed(SupervisorError::Refused(format!("the prolog failed: {message}")));
    }
    let epilog_env = command.script_environment("epilog_slurmd");
    let epilog = scripts.epilog.clone().map(|program| (program, epilog_env.clone(), script_timeout));
    if let Err(error) = crate::spank::start(launch, &job_dir.join(jobfiles::SCRIPT)) {
        crate::spank::exit();
        remove_cgroup(cgroup.as_ref());
        return launch_failed(SupervisorError::Refused(error.to_string()));
    }
    let (mut job, report) = match child::fork_job(&command) {
        Ok(forked) => forked,
        Err(error) => {
            remove_cgroup(cgroup.as_ref());
            return launch_failed(error);
        }
    };
    // The child waits for this release: nothing of the job runs outside its cgroups.
    if let Some(cgroup) = &cgroup
        && let Err(error) = cgroup.enter(job.pid.as_raw())
    {
        let _ = nix::sys::signal::kill(job.pid, Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(job.pid, None);
        remove_cgroup(Some(cgroup));
        return launch_failed(SupervisorError::Cgroup(error));
    }
    job.release();
    crate::spank::task_post_fork(0, job.pid.as_raw());
    let limit_from = Instant::now();
    let limit = launch.time_limit.seconds().map(scaled_time_limit);
    let limit_at = limit.map(|limit| limit_from + limit);
    let warning = launch.spec.signal.as_deref().and_then(warning::parse);
    let warn_at = match (limit_at, warning) {
        (Some(limit_at), Some(warning)) => {
            let lead = scaled_time_limit(warning.lead_seconds);
            Some(limit_at.checked_sub(lead).unwrap_or_else(Instant::now))
        }
        _ => None,
    };

    // One std channel into the single-threaded main loop: every source blocks in a system call
    // in its own thread, and events are few, so an unbounded channel never grows.
    let (events_tx, events_rx) = mpsc::channel();
    spawn_thread("setup-report", events_tx.clone(), move |events| {
        let mut message = String::new();
        let reported = (&report).read_to_string(&mut message);
        let setup = match reported {
            Ok(_) if message.is_empty() => Ok(()),
            Ok(_) => Err(message),
            Err(error) => Err(format!("could not read the job's setup report: {error}")),
        };
        let _ = events.send(Event::SetupReported(setup));
    });
    let reaper_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = std::sync::Arc::clone(&reaper_done);
    spawn_thread("reaper", events_tx.clone(), move |events| {
        reap_children(events);
        done.store(true, std::sync::atomic::Ordering::Release);
    });
    spawn_thread("control", events_tx, move |events| control::serve(listener, events));

    let supervision = Supervision {
        job_dir,
        noded_socket,
        launch,
        job,
        setup: None,
        start_time: None,
        status: None,
        termination: None,
        limit_from,
        limit_at,
        kill_at: None,
        no_children: false,
        leftovers_since: None,
        cgroup,
        warning,
        warn_at,
        stderr: None,
    };
    let before = children_usage();
    let job_end = supervision.run(&events_rx);
    // The remote context ends before the job_script context's epilog, as in Slurm.
    crate::spank::exit();
    // Measured between the job's start and the end of its last process: a prolog before and
    // an epilog after are not the job's.
    if let (Some(before), Some(after)) = (before, children_usage()) {
        let usage = JobUsage {
            job_id: launch.job_id,
            user_usec: after.user_usec.saturating_sub(before.user_usec),
            system_usec: after.system_usec.saturating_sub(before.system_usec),
            max_rss_kib: after.max_rss_kib,
        };
        if let Err(error) = jobfiles::write_usage(job_dir, &usage) {
            log(format_args!("{}", error_chain(&error)));
        }
    }
    // The reaper waits for any child: until it has seen the last one go, it could reap the
    // epilog's process before `prolog::run` does (which then cannot tell how the epilog ended
    // and drains the node). It ends promptly once no child is left; where processes of the job
    // survive, the epilog runs after a bounded wait, as before.
    let reaper_deadline = Instant::now() + REAPER_WAIT;
    while (epilog.is_some() || crate::spank::has_plugins())
        && !reaper_done.load(std::sync::atomic::Ordering::Acquire)
        && Instant::now() < reaper_deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    // SPANK's job_script context, just before the node's epilog; a failure drains the node.
    if let Err(message) = crate::spank::job_script(JobScript::Epilog, &epilog_env, script_timeout) {
        log(format_args!("job {}: SPANK job_epilog failed: {message}", launch.job_id));
        prolog::write_drain(job_dir, &format!("Epilog error: {message}"));
    }
    if let Some((program, env, timeout)) = epilog
        && let Err(message) = prolog::run(&program, &env, timeout)
    {
        log(format_args!("job {}: epilog failed: {message}", launch.job_id));
        prolog::write_drain(job_dir, &format!("Epilog error: {message}"));
    }
    job_end
}

/// Kills what is left in the job's cgroups and removes them; a failure is logged (the
/// directories then stay for an admin to see).
fn remove_cgroup(cgroup: Option<&JobCgroup>) {
    if let Some(cgroup) = cgroup
        && let Err(error) = cgroup.remove()
    {
        log(format_args!("{}", error_chain(&error)));
    }
}

fn spawn_thread(name: &str, events: mpsc::Sender<Event>, body: impl FnOnce(mpsc::Sender<Event>) + Send + 'static) {
    let spawned = std::thread::Builder::new().name(name.to_owned()).spawn(move || body(events));
    if let Err(error) = spawned {
        // Without this thread the loop would wait forever for its events; a supervisor that
        // cannot start a thread cannot supervise.
        log(format_args!("cannot start the {name} thread: {error}"));
        std::process::exit(1);
    }
}

/// How long the epilog waits for the reaper thread to end (see its use).
const REAPER_WAIT: Duration = Duration::from_secs(2);

/// Reaps every child until none is left; the batch shell and reparented orphans alike.
fn reap_children(events: mpsc::Sender<Event>) {
    loop {
        match sys::process::wait_any() {
            Ok((pid, raw_status)) => {
                let last = !sys::process::has_children();
                let _ = events.send(Event::Reaped { pid, status: WaitStatus(raw_status), last });
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => {
                let _ = events.send(Event::NoChildren);
                return;
            }
        }
    }
}

/// `DROVER_TIME_SCALE` applied to a time limit: a test hook, documented in the module docs.
fn scaled_time_limit(seconds: u64) -> Duration {
    let scale = std::env::var(TIME_SCALE_VAR).ok().and_then(|text| text.parse::<f64>().ok());
    match scale {
        Some(scale) if scale.is_finite() && scale > 0.0 => Duration::from_secs_f64(seconds as f64 * scale),
        _ => Duration::from_secs(seconds),
    }
}

/// The main loop's state.
struct Supervision<'a> {
    job_dir: &'a Path,
    noded_socket: &'a Path,
    launch: &'a LaunchRequest,
    job: ForkedJob,
    /// The child's setup report, once it came.
    setup: Option<Result<(), String>>,
    start_time: Option<UnixTime>,
    /// The batch shell's wait status, once reaped.
    status: Option<WaitStatus>,
    termination: Option<Termination>,
    /// When the time limit's clock started (the job's start).
    limit_from: Instant,
    limit_at: Option<Instant>,
    kill_at: Option<Instant>,
    no_children: bool,
    /// When the batch shell's end was first seen with processes left over.
    leftovers_since: Option<Instant>,
    /// The job's cgroups, when noded gave it some.
    cgroup: Option<JobCgroup>,
    /// `--signal`, and when to send it.
    warning: Option<TimeLimitWarning>,
    warn_at: Option<Instant>,
    /// The batch shell's stderr, kept from its start for messages after its end.
    stderr: Option<File>,
}

impl Supervision<'_> {
    fn run(mut self, events: &mpsc::Receiver<Event>) -> JobEnd {
        loop {
            let now = Instant::now();
            let mut wake_at = [self.limit_at, self.kill_at, self.warn_at].into_iter().flatten().min();
            if let (Some(_), Some(_)) = (self.status, &self.setup) {
                if self.no_children {
                    break;
                }
                // The batch shell is gone: so must be everything it left behind.
                let since = *self.leftovers_since.get_or_insert(now);
                if now.duration_since(since) >= LEFTOVER_TIMEOUT {
                    log(format_args!(
                        "processes of job {} survive SIGKILL: {:?}",
                        self.launch.job_id,
                        self.job_processes()
                    ));
                    break;
                }
                self.signal_job(Signal::SIGKILL);
                if let Some(cgroup) = &self.cgroup {
                    cgroup.kill();
                }
                wake_at = Some(now + LEFTOVER_KILL_INTERVAL);
            }
            let event = match wake_at {
                Some(wake_at) => events.recv_timeout(wake_at.saturating_duration_since(now)),
                None => events.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(event) => self.handle(event),
                Err(mpsc::RecvTimeoutError::Timeout) => self.handle_deadlines(Instant::now()),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let cgroup = self.cgroup.take();
        let oom_kills = cgroup.as_ref().map_or(0, JobCgroup::oom_kills);
        if oom_kills > 0 {
            let job_id = self.launch.job_id;
            log(format_args!("job {job_id}: {oom_kills} oom-kill event(s)"));
            if let Some(stderr) = &mut self.stderr {
                let _ = stderr.write_all(oom_notice(job_id, oom_kills).as_bytes());
            }
        }
        let job_end = self.job_end(oom_kills > 0);
        remove_cgroup(cgroup.as_ref());
        job_end
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::SetupReported(Ok(())) => {
                let start_time = drover_shared::now();
                self.start_time = Some(start_time);
                self.setup = Some(Ok(()));
                log(format_args!("job {} started as pid {}", self.launch.job_id, self.job.pid));
                self.stderr = self.job.shell_stderr();
                if let Err(error) = jobfiles::write_started(self.job_dir, start_time) {
                    log(format_args!("{}", error_chain(&error)));
                }
                let job_id = self.launch.job_id;
                // Fire and forget: noded rescans job directories anyway.
                notify(self.noded_socket, &SupervisorEvent::Started { job_id, start_time });
            }
            Event::SetupReported(Err(message)) => {
                log(format_args!("job {} could not start: {message}", self.launch.job_id));
                self.setup = Some(Err(message));
            }
            Event::Reaped { pid, status, last } => {
                if pid == self.job.pid {
                    crate::spank::task_exit(0, pid.as_raw(), status.0);
                    self.status = Some(drover_shared::job::holder_status(&self.launch.spec.script, status));
                }
                self.no_children |= last;
            }
            Event::NoChildren => self.no_children = true,
            Event::Command { command, reply } => {
                let _ = reply.send(self.obey(command));
            }
        }
    }

    fn obey(&mut self, command: SupervisorCommand) -> SupervisorReply {
        log(format_args!("job {}: {command:?}", self.launch.job_id));
        let ended = SupervisorReply::Rejected { message: "the batch script has ended".into() };
        match command {
            SupervisorCommand::Signal { signal, batch_only } => {
                let Ok(signal) = Signal::try_from(signal) else {
                    return SupervisorReply::Rejected { message: format!("invalid signal {signal}") };
                };
                if self.status.is_some() {
                    return ended;
                }
                if batch_only {
                    let _ = self.job.signal_shell(signal);
                } else {
                    self.signal_job(signal);
                }
            }
            SupervisorCommand::Cancel { kill_wait } => {
                if self.status.is_some() {
                    return ended;
                }
                self.terminate(Termination::Cancelled, kill_wait);
            }
            SupervisorCommand::SetTimeLimit { seconds } => {
                if self.status.is_some() || self.termination.is_some() {
                    return ended;
                }
                self.limit_at = seconds.map(|seconds| self.limit_from + scaled_time_limit(seconds));
                // A `--signal` warning not sent yet moves with the limit.
                if self.warn_at.is_some() {
                    self.warn_at = match (self.limit_at, self.warning) {
                        (Some(limit_at), Some(warning)) => {
                            let lead = scaled_time_limit(warning.lead_seconds);
                            Some(limit_at.checked_sub(lead).unwrap_or_else(Instant::now))
                        }
                        _ => None,
                    };
                }
            }
        }
        SupervisorReply::Accepted
    }

    fn handle_deadlines(&mut self, now: Instant) {
        if self.warn_at.is_some_and(|warn_at| warn_at <= now) {
            self.warn_at = None;
            if let (Some(warning), None) = (self.warning, self.status) {
                log(format_args!("job {}: {:?} before the time limit", self.launch.job_id, warning.signal));
                if warning.batch_only {
                    let _ = self.job.signal_shell(warning.signal);
                } else {
                    self.signal_job(warning.signal);
                }
            }
        }
        if self.limit_at.is_some_and(|limit_at| limit_at <= now) {
            self.limit_at = None;
            if self.status.is_none() {
                self.terminate(Termination::TimedOut, self.launch.kill_wait);
            }
        }
        if self.kill_at.is_some_and(|kill_at| kill_at <= now) {
            self.kill_at = None;
            self.signal_job(Signal::SIGKILL);
        }
    }

    /// Slurm's end of a job: a line in its stderr, SIGCONT and SIGTERM to all its processes,
    /// SIGKILL `kill_wait` seconds later. The first reason to end the job is the one reported.
    fn terminate(&mut self, termination: Termination, kill_wait: u32) {
        if self.termination.is_none() {
            self.termination = Some(termination);
            self.write_notice(termination);
        }
        self.signal_job(Signal::SIGCONT);
        self.signal_job(Signal::SIGTERM);
        let kill_at = Instant::now() + Duration::from_secs(u64::from(kill_wait));
        self.kill_at = Some(self.kill_at.map_or(kill_at, |earlier| earlier.min(kill_at)));
    }

    fn write_notice(&self, termination: Termination) {
        let Some(mut stderr) = self.job.shell_stderr() else { return };
        let node_name = self.launch.nodes.first().map_or("", String::as_str);
        let notice =
            termination_notice(self.launch.job_id, node_name, &local_timestamp(drover_shared::now()), termination);
        let _ = stderr.write_all(notice.as_bytes());
    }

    /// The job's processes: the batch shell's process group while the shell is unreaped (its pid
    /// cannot be reused before), and every descendant of the supervisor, which catches the
    /// processes that left the group or the session.
    fn signal_job(&self, signal: Signal) {
        if self.status.is_none() {
            let _ = nix::sys::signal::killpg(self.job.pid, signal);
        }
        for pid in self.job_processes() {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
        }
    }

    fn job_processes(&self) -> Vec<i32> {
        procfs::descendants(nix::unistd::getpid().as_raw())
    }

    fn job_end(self, out_of_memory: bool) -> JobEnd {
        let exit_status = self.status.unwrap_or(WaitStatus::exited(1));
        let outcome = match (self.setup, self.termination) {
            (Some(Err(message)), _) => JobOutcome::LaunchFailed { message },
            (_, Some(Termination::Cancelled)) => JobOutcome::Cancelled,
            (_, Some(Termination::TimedOut)) => JobOutcome::TimedOut,
            (_, None) if out_of_memory => JobOutcome::OutOfMemory,
            (_, None) => JobOutcome::Exited,
        };
        job_end(self.launch, outcome, exit_status, self.start_time)
    }
}

fn job_end(
    launch: &LaunchRequest,
    outcome: JobOutcome,
    exit_status: WaitStatus,
    start_time: Option<UnixTime>,
) -> JobEnd {
    JobEnd {
        job_id: launch.job_id,
        run: launch.restart_count,
        outcome,
        exit_status,
        start_time,
        end_time: drover_shared::now(),
    }
}

/// Slurm's line in the job's stderr when Drover ends it.
fn termination_notice(job_id: u32, node_name: &str, timestamp: &str, termination: Termination) -> String {
    let reason = match termination {
        Termination::Cancelled => "",
        Termination::TimedOut => " DUE TO TIME LIMIT",
    };
    format!("slurmstepd: error: *** JOB {job_id} ON {node_name} CANCELLED AT {timestamp}{reason} ***\n")
}

/// Slurm's line in the job's stderr when the OOM killer struck in the job.
fn oom_notice(job_id: u32, oom_kills: u64) -> String {
    format!(
        "slurmstepd: error: Detected {oom_kills} oom-kill event(s) in StepId={job_id}.batch. Some of your processes may have been killed by the cgroup out-of-memory handler.\n"
    )
}

/// `2024-05-01T10:00:00` in the node's local time, as Slurm prints times.
fn local_timestamp(time: UnixTime) -> String {
    let Some(tm) = sys::time::local_time(time) else { return time.to_string() };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// Sends one event to noded without ever waiting for it, so that a stalled noded cannot stall
/// the supervisor: a non-blocking connect (which fails at once when noded's backlog is full) and
/// a non-blocking write of one small frame (which fits an empty socket buffer). Best effort:
/// noded also rescans job directories.
fn notify(noded_socket: &Path, event: &SupervisorEvent) {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr};
    let sent = (|| -> Result<(), String> {
        let socket = nix::sys::socket::socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(|errno| errno.desc().to_owned())?;
        let address = UnixAddr::new(noded_socket).map_err(|errno| errno.desc().to_owned())?;
        nix::sys::socket::connect(socket.as_raw_fd(), &address).map_err(|errno| errno.desc().to_owned())?;
        frame::write_message(&mut UnixStream::from(socket), event).map_err(|error| error.to_string())
    })();
    if let Err(error) = sent {
        log(format_args!("could not notify noded at {}: {error}", noded_socket.display()));
    }
}

/// One line in `supervisor.log` (the supervisor's stderr).
fn log(message: std::fmt::Arguments<'_>) {
    eprintln!("{} supervisor[{}]: {message}", drover_shared::now(), std::process::id());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_read_like_slurm() {
        assert_eq!(
            termination_notice(1234, "gpu01", "2024-05-01T10:00:00", Termination::Cancelled),
            "slurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT 2024-05-01T10:00:00 ***\n"
        );
        assert_eq!(
            termination_notice(7, "n1", "2024-05-01T10:00:00", Termination::TimedOut),
            "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***\n"
        );
        let timestamp = local_timestamp(1_714_557_600);
        assert_eq!(timestamp.len(), "2024-05-01T10:00:00".len(), "{timestamp}");
        assert!(timestamp.starts_with("2024-05-01T") || timestamp.starts_with("2024-04-30T"), "{timestamp}");
    }
}
