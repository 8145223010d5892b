//! `salloc`: obtain an allocation, run a command (default `$SHELL`) with the allocation's
//! environment (`SLURM_JOB_ID`, `SLURM_JOB_NODELIST`, …, and `DROVER_SOCKET` so `srun` inside
//! finds ctld), and release the allocation when the command exits; salloc exits with the
//! command's status. `srun` outside an allocation uses the same [`with_allocation`].
//!
//! The allocation is an ordinary job whose batch step only holds it: a shell on the first node
//! that waits for SIGUSR1. Releasing sends SIGUSR1 to that shell alone (`scancel -b
//! --signal=USR1`), so the job ends `COMPLETED` with exit code 0 (Slurm's interactive jobs end
//! the same way; Drover's sacct also shows the holder as the `.batch` step).

use crate::options::defs::Command;
use crate::spank::Plugins;
use crate::srun::options::{self, Parsed, StepOptions};
use anyhow::{Context, bail};
use drover_shared::job::{JobInfo, JobSpec, JobState};
use drover_shared::proto::client::{CancelRequest, ErrorCode, JobQuery, Request, Response};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

/// The batch step of an allocation: wait until released.
const HOLDER: &str = drover_shared::job::ALLOCATION_HOLDER;

/// `salloc [options] [command [args…]]`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    // SPANK's allocator context: `init`, then the plugins' options come out of the command line.
    let environment: Vec<(String, String)> = std::env::vars().collect();
    let plugins = Plugins::start(Command::Salloc, &environment).map_err(anyhow::Error::msg)?;
    let words: Vec<String> = args.iter().map(|arg| arg.to_string_lossy().into_owned()).collect();
    let args: Vec<OsString> =
        plugins.take_options(words).map_err(anyhow::Error::msg)?.into_iter().map(OsString::from).collect();
    let mut options: StepOptions = match options::parse(Command::Salloc, &args)? {
        Parsed::Answer(text) => {
            let help = args.iter().any(|arg| arg == "--help" || arg == "-h");
            let plugin_help = if help { plugins.help() } else { String::new() };
            print!("{text}{plugin_help}");
            return Ok(0);
        }
        Parsed::Run(options) => *options,
    };
    // The options to their plugins, `init_post_opt`; the command salloc runs passes them on to
    // the steps its srun starts.
    let inherited = Plugins::inherited_env(&plugins.job_env().map_err(anyhow::Error::msg)?);
    let code = allocate_and_run(&mut options, &inherited);
    let exited = plugins.exit().map_err(anyhow::Error::msg);
    let code = code?;
    exited?;
    Ok(code)
}

/// salloc once its command line is read: the allocation, and the command run in it with
/// `inherited` (the plugins' variables) in its environment.
fn allocate_and_run(options: &mut StepOptions, inherited: &[(String, String)]) -> anyhow::Result<i32> {
    if options.test_only {
        return test_only(&options.allocation, Allocator::Salloc);
    }
    if options.command.is_empty() {
        options.command = vec![std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into())];
    }
    let socket = crate::srun::socket_path()?;
    if options.no_shell {
        // The allocation outlives salloc: it ends at its time limit or with scancel.
        allocate(&socket, &options.allocation, Allocator::Salloc, options.immediate)?;
        return Ok(0);
    }
    with_allocation(&socket, &options.allocation, Allocator::Salloc, options.immediate, |job_id| {
        let info = query(&socket, job_id, Allocator::Salloc)?.context("the allocation vanished")?;
        let nodelist = drover_shared::hostlist::compress(&info.nodes);
        let status = std::process::Command::new(&options.command[0])
            .args(&options.command[1..])
            .env("SLURM_JOB_ID", job_id.to_string())
            .env("SLURM_JOBID", job_id.to_string())
            .env("SLURM_JOB_NAME", &info.name)
            .env("SLURM_JOB_NODELIST", &nodelist)
            .env("SLURM_NODELIST", &nodelist)
            .env("SLURM_JOB_NUM_NODES", info.nodes.len().to_string())
            .env("SLURM_NNODES", info.nodes.len().to_string())
            .env("SLURM_NTASKS", info.num_tasks.max(1).to_string())
            .env("SLURM_NPROCS", info.num_tasks.max(1).to_string())
            .env("SLURM_JOB_PARTITION", &info.partition)
            .env("SLURM_JOB_ACCOUNT", &info.account)
            .env("DROVER_SOCKET", &socket)
            .envs(options.container.iter().map(|bundle| (drover_shared::job::CONTAINER_ENV, bundle)))
            .envs(inherited.iter().map(|(name, value)| (name, value)))
            .status()
            .with_context(|| format!("running {}", options.command[0]))?;
        Ok(status.code().unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)))
    })
}

/// The job's record, waiting out a controller that does not answer (see [`patiently`]).
fn query(socket: &Path, job_id: u32, who: Allocator) -> anyhow::Result<Option<JobInfo>> {
    let request = Request::QueryJobs(JobQuery { job_ids: vec![job_id], include_finished: true, ..JobQuery::default() });
    match patiently(socket, &request, who)? {
        Response::Jobs { jobs, .. } => Ok(jobs.into_iter().find(|j| j.job_id == job_id)),
        Response::Error { code, detail } => bail!("{code} ({detail})"),
        other => bail!("unexpected answer from ctld: {other:?}"),
    }
}

/// `--test-only` of srun and salloc: when and where the allocation `request` would start, as
/// Slurm's answer words it (`srun: Job N to start at … using K processors on nodes … in
/// partition P`); nothing is submitted. Returns the exit code.
pub(crate) fn test_only(request: &JobSpec, who: Allocator) -> anyhow::Result<i32> {
    let spec = allocation_spec(request)?;
    match crate::client::call(&Request::TestOnly(Box::new(spec)))? {
        Response::WillRun { job_id, start, cpus, nodes, partition } => {
            let tz = crate::query::format::Tz::Local;
            eprintln!("{}", crate::sbatch::will_run_line(who.name(), job_id, start, cpus, &nodes, &partition, tz));
            Ok(0)
        }
        Response::Error { code, .. } => {
            // As Slurm, through its perror: no `srun: error:` prefix.
            eprintln!("allocation failure: {}", code.message());
            Ok(1)
        }
        other => bail!("unexpected answer from ctld: {other:?}"),
    }
}

/// Who allocates: the lines each prints on stderr are its own, as in Slurm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Allocator {
    /// `salloc: Pending job allocation N`, `Granted …`, `Relinquishing …`.
    Salloc,
    /// `srun: job N queued and waiting for resources`, `… has been allocated resources` (only
    /// after waiting); no lines for an allocation granted at once.
    Srun,
}

impl Allocator {
    /// The command's name, which starts its lines on stderr.
    fn name(self) -> &'static str {
        match self {
            Allocator::Salloc => "salloc",
            Allocator::Srun => "srun",
        }
    }
}

/// Sends a request that may be sent again (a query, a release or a cancel) while an allocation
/// is waited for, held or released: a controller that restarts or fails over meanwhile is waited
/// out (`crate::client::OUTAGE_PATIENCE`), never taken for the end of the allocation.
fn patiently(socket: &Path, request: &Request, who: Allocator) -> anyhow::Result<Response> {
    use crate::client::{OUTAGE_PATIENCE, Resend, call_patiently};
    call_patiently(Some(socket), request, Resend::Safe, who.name(), OUTAGE_PATIENCE)
}

/// Allocates what `request` asks, runs `body` with the job id once the allocation is granted,
/// and releases it whatever `body` returns. With `immediate`, gives up (and cancels the request)
/// unless the allocation is granted within that many seconds.
pub(crate) fn with_allocation(
    socket: &Path,
    request: &JobSpec,
    who: Allocator,
    immediate: Option<u32>,
    body: impl FnOnce(u32) -> anyhow::Result<i32>,
) -> anyhow::Result<i32> {
    let job_id = allocate(socket, request, who, immediate)?;
    let result = body(job_id);
    // A release before the holder's trap is set ends it as well: its node records exit 0
    // (`drover_shared::job::holder_status`), so no wait for the trap is needed here.
    if who == Allocator::Salloc {
        eprintln!("salloc: Relinquishing job allocation {job_id}");
    }
    let release = CancelRequest {
        job_ids: vec![job_id],
        signal: Some(libc::SIGUSR1),
        batch_only: true,
        ..CancelRequest::default()
    };
    // ctld signals a job only once its node reported the script started: until then, try again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match patiently(socket, &Request::Cancel(release.clone()), who) {
            Ok(Response::Cancelled { results })
                if results.iter().any(|(_, r)| *r == Err(ErrorCode::TransitionState))
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(_) => break,
            Err(error) => {
                eprintln!("{}: error: could not release job {job_id}: {}", who.name(), crate::user_message(&error));
                break;
            }
        }
    }
    result
}

/// Whether a pending allocation waits for resources, to be announced as queued. Slurm's
/// controller answers an allocation request only after trying to place it; here the scheduling
/// pass follows the submission's commit, and the answer may come first. A job waits once a pass
/// has given it a reason (or a second has gone by): before that, a job about to start would be
/// announced as queued.
fn waits(job: Option<&JobInfo>, since_submit: Duration) -> bool {
    job.is_some_and(|j| j.reason != "None") || since_submit >= Duration::from_secs(1)
}

/// Submits the allocation `request` asks for and waits until it is granted; its job id.
/// `immediate`: seconds to wait at most (0: only the scheduling pass that follows the
/// submission, at most a second); a held request fails at once. One that was not granted is
/// cancelled.
fn allocate(socket: &Path, request: &JobSpec, who: Allocator, immediate: Option<u32>) -> anyhow::Result<u32> {
    let spec = allocation_spec(request)?;
    let job_id = match crate::client::submit(Some(socket), spec, who.name())? {
        Response::Submitted { job_id } => job_id,
        Response::Error { code, detail } => bail!("Job submit/allocate failed: {code} ({detail})"),
        other => bail!("unexpected answer from ctld: {other:?}"),
    };
    wait_for_grant(socket, job_id, who, immediate)
}

/// The job an interactive allocation submits: `request` with the holder script, the current
/// directory, host, environment and umask (also what `--test-only` asks about).
pub(crate) fn allocation_spec(request: &JobSpec) -> anyhow::Result<JobSpec> {
    let mut spec = request.clone();
    let cwd = std::env::current_dir().context("reading the working directory")?.to_string_lossy().into_owned();
    if spec.name.is_empty() {
        spec.name = "interactive".into();
    }
    spec.work_dir = cwd.clone();
    spec.submit_dir = cwd;
    spec.submit_host = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    // The process's environment, and what the options put there (`--container`'s
    // `SLURM_CONTAINER`, which ctld checks against the cluster's runtime at submit).
    let asked = std::mem::take(&mut spec.environment);
    spec.environment = std::env::vars().filter(|(name, _)| !asked.iter().any(|(n, _)| n == name)).collect();
    spec.environment.extend(asked);
    spec.script = HOLDER.as_bytes().to_vec();
    spec.stdout = Some("/dev/null".into());
    // An interactive allocation is never requeued (its holder is a person at a terminal), as in
    // Slurm: a node failure ends it NODE_FAIL.
    spec.requeue = Some(false);
    let mask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    nix::sys::stat::umask(mask);
    spec.umask = mask.bits();
    spec.submit_line = std::env::args().collect::<Vec<_>>().join(" ");
    Ok(spec)
}

/// Waits until the submitted allocation runs (or gives up under `--immediate`).
fn wait_for_grant(socket: &Path, job_id: u32, who: Allocator, immediate: Option<u32>) -> anyhow::Result<u32> {
    let mut announced = false;
    let submitted = std::time::Instant::now();
    loop {
        let job = query(socket, job_id, who)?;
        let state = job.as_ref().map(JobInfo::state);
        if let (Some(seconds), Some(JobState::Pending)) = (immediate, state) {
            let held = job.as_ref().is_some_and(|j| j.reason.starts_with("JobHeld"));
            if held || submitted.elapsed() >= Duration::from_secs(seconds.max(1).into()) {
                let reason = job.map(|j| j.reason).unwrap_or_default();
                let cancel = CancelRequest { job_ids: vec![job_id], ..CancelRequest::default() };
                let _ = patiently(socket, &Request::Cancel(cancel), who);
                bail!("Unable to allocate resources: Immediate execution impossible (job {job_id} pending, {reason})");
            }
        }
        match state {
            Some(JobState::Running) => break,
            Some(JobState::Pending) | None => {
                let waiting = waits(job.as_ref(), submitted.elapsed());
                if !announced && waiting {
                    match who {
                        Allocator::Salloc => eprintln!("salloc: Pending job allocation {job_id}"),
                        Allocator::Srun => eprintln!("srun: job {job_id} queued and waiting for resources"),
                    }
                    announced = true;
                }
                // Ask often while the first pass is due, then every 200 ms.
                let pause = if waiting { 200 } else { 10 };
                std::thread::sleep(Duration::from_millis(pause));
            }
            Some(other) => bail!("job allocation {job_id} ended before it was granted ({})", other.long_name()),
        }
    }
    match who {
        Allocator::Salloc => eprintln!("salloc: Granted job allocation {job_id}"),
        Allocator::Srun if announced => eprintln!("srun: job {job_id} has been allocated resources"),
        Allocator::Srun => {}
    }
    Ok(job_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Back-to-back sruns on an idle cluster printed `queued and waiting for resources` for a
    /// job the pass was about to start (2–4 of 8 in Slurm's suite): only a job a pass left
    /// waiting, or one still pending after a second, is announced.
    #[test]
    fn a_job_is_announced_as_queued_only_once_a_pass_left_it_waiting() {
        let fresh = JobInfo { state: Some(JobState::Pending), reason: "None".into(), ..JobInfo::default() };
        assert!(!waits(Some(&fresh), Duration::from_millis(50)));
        assert!(!waits(None, Duration::from_millis(50)));
        let judged = JobInfo { reason: "Resources".into(), ..fresh.clone() };
        assert!(waits(Some(&judged), Duration::from_millis(50)));
        assert!(waits(Some(&fresh), Duration::from_secs(1)));
    }
}
