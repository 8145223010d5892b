//! The node daemon proper: keep a connection to ctld (authenticate, register with what the node
//! holds, heartbeat), start a supervisor for every job ctld launches here, forward cancels and
//! signals to supervisors, and report each job's start and end until ctld acknowledges it.
//!
//! Everything about a job lives in its directory (see [`crate::jobs`]), so this loop keeps only
//! bookkeeping about what it has told the current connection; a restart rebuilds it from disk.

use crate::isolation::{self, NodeIsolation};
use crate::jobs::{held, job_dir, jobs_root, latest};
use crate::prolog::{self, JobScripts};
use crate::supervisor::{self, SupervisorCommand, SupervisorEvent};
use anyhow::Context;
use drover_shared::auth::ClusterKey;
use drover_shared::job::WaitStatus;
use drover_shared::node::GpuDevice;
use drover_shared::proto::frame::MessageStream;
use drover_shared::proto::handshake::node_handshake;
use drover_shared::proto::node::{
    CtldMessage, JobEnd, JobOutcome, JobRun, LaunchRequest, NodeMessage, NodeRegistration,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// What the daemon needs to know about itself.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub name: String,
    /// ctld's node address; a replicated controller's replicas' addresses, comma-separated,
    /// tried in turn.
    pub controller: String,
    /// The config file whose replicas are read again before each connection, so that a replica
    /// added at run time (docs/admin/ha.md) is found without a restart; `None` when the
    /// controller's address was given on the command line.
    pub controller_from: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub key: Arc<ClusterKey>,
    pub cpus: u32,
    pub real_memory_mb: u64,
    pub gpus: Vec<GpuDevice>,
    pub heartbeat: Duration,
    /// The drover-noded binary, executed as `step` for each step (and as `supervise` for each
    /// job when there is no launcher).
    pub exe: PathBuf,
    /// Forks supervisors without executing `exe` (see [`supervisor::Launcher`]).
    pub launcher: Option<Arc<supervisor::Launcher>>,
    /// What the kernel enforces for each job here.
    pub isolation: NodeIsolation,
    /// The prolog and epilog every job here gets.
    pub scripts: JobScripts,
    /// The health check and the time between two runs.
    pub health_check: Option<(PathBuf, Duration)>,
    /// The node config's `reboot_program` (program and arguments), run for `scontrol reboot`.
    pub reboot_program: Option<Vec<String>>,
    /// Where a configless node fetches its config again (`--conf-server`); `None` when it reads a
    /// file of its own.
    pub conf: Option<crate::configless::ConfServer>,
    /// Why this host cannot stand by its declaration (too few CPUs, too little memory), if so:
    /// the node asks to be drained at each registration (`crate::hardware`).
    pub shortfall: Option<String>,
    /// The OCI runtime for `--container` jobs (`[oci]`); read at start, like the prolog.
    pub oci: Option<drover_shared::config::oci::OciConfig>,
}

impl NodeSettings {
    /// The addresses to try now: the config file's replicas where it lists them (and loads),
    /// else `controller`.
    fn controller_addresses(&self) -> String {
        controller_addresses(self.controller_from.as_deref(), &self.controller)
    }

    fn socket(&self) -> PathBuf {
        self.state_dir.join("noded.sock")
    }

    /// Starts the supervisor of the job run in `dir`; its pid.
    fn start_supervisor(&self, dir: &std::path::Path) -> Result<u32, supervisor::SupervisorError> {
        match &self.launcher {
            Some(launcher) => launcher.spawn(&self.exe, dir, &self.socket()),
            None => supervisor::spawn(&self.exe, dir, &self.socket()),
        }
    }
}

/// How often job directories are rescanned even without a supervisor's notice.
const RESCAN: Duration = Duration::from_secs(1);
/// How long an unacknowledged end waits before it is sent again.
const RESEND_END: Duration = Duration::from_secs(5);
/// How long a launch request may sit without a supervisor pid file before the supervisor counts
/// as never started (spawning takes milliseconds).
const UNSTARTED_GRACE: Duration = Duration::from_secs(5);

/// How long one health check may run.
const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// The health check's environment: the fixed admin `PATH` and the script context, nothing else.
fn health_environment() -> Vec<(String, String)> {
    vec![("PATH".into(), prolog::ADMIN_PATH.into()), ("SLURM_SCRIPT_CONTEXT".into(), "health_check".into())]
}

/// How long ago a file was last modified (zero if unknown).
fn age(path: &std::path::Path) -> Duration {
    std::fs::metadata(path).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok()).unwrap_or_default()
}

/// Runs the daemon until `shutdown` resolves. Running jobs are left to their supervisors.
pub async fn run(settings: NodeSettings, shutdown: impl std::future::Future) -> anyhow::Result<()> {
    // Job directories hold the scripts that supervisors run as their users, so users must be able
    // to traverse them (0755) but never write where root reads.
    drover_shared::statedir::prepare(&settings.state_dir, 0o755)?;
    std::fs::create_dir_all(jobs_root(&settings.state_dir))
        .with_context(|| format!("creating {}", jobs_root(&settings.state_dir).display()))?;
    let poke = Arc::new(Notify::new());
    let listener = bind_event_socket(&settings)?;
    tokio::spawn(receive_supervisor_events(listener, poke.clone()));
    let tokens = drover_shared::token_socket::bind(&settings.state_dir)?;
    tokio::spawn(drover_shared::token_socket::serve(tokens, settings.key.clone(), settings.name.clone()));
    let boot_time = boot_time();
    let start_time = drover_shared::now();
    tokio::pin!(shutdown);
    let mut backoff = Duration::from_millis(100);
    loop {
        let session = async {
            let stream = connect(&settings, boot_time, start_time).await?;
            tracing::info!(controller = settings.controller, "registered with ctld");
            // A reconfigure may have happened while this node was away.
            refresh_config(&settings);
            serve(&settings, stream, &poke).await
        };
        tokio::select! {
            result = session => {
                match result {
                    Ok(()) => tracing::warn!("ctld closed the connection"),
                    Err(e) => tracing::warn!(error = %format!("{e:#}"), "connection to ctld lost"),
                }
            }
            _ = &mut shutdown => return Ok(()),
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = &mut shutdown => return Ok(()),
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

fn bind_event_socket(settings: &NodeSettings) -> anyhow::Result<tokio::net::UnixListener> {
    let path = settings.socket();
    let _ = std::fs::remove_file(&path);
    tokio::net::UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))
}

/// Supervisors poke this socket when a job starts or ends; any poke triggers a rescan.
async fn receive_supervisor_events(listener: tokio::net::UnixListener, poke: Arc<Notify>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let poke = poke.clone();
        tokio::spawn(async move {
            let mut messages = MessageStream::new(stream);
            let read = tokio::time::timeout(Duration::from_secs(2), messages.recv::<SupervisorEvent>());
            if let Ok(Ok(Some(event))) = read.await {
                tracing::debug!(?event, "supervisor event");
            }
            poke.notify_one();
        });
    }
}

/// When this machine booted (Unix seconds; 0 if unknown), read once.
fn boot_time() -> i64 {
    static BOOT_TIME: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BOOT_TIME.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    })
}

/// Whether the job run's launch request (synced when written) predates this boot: then its
/// supervisor, if it ever ran, died with the machine, whatever its pid file says (pid files are
/// not synced, and a pid can come back after a reboot), and the job must not start again.
fn launched_before_boot(dir: &std::path::Path) -> bool {
    let written = std::fs::metadata(dir.join("launch")).and_then(|m| m.modified()).ok();
    let boot = std::time::UNIX_EPOCH + Duration::from_secs(u64::try_from(boot_time()).unwrap_or(0));
    boot_time() > 0 && written.is_some_and(|written| written < boot)
}

/// A configless node fetches the config again in the background; the copy it writes is what the
/// next connection's controller addresses and the host's commands read.
fn refresh_config(settings: &NodeSettings) {
    let Some(conf) = settings.conf.clone() else { return };
    tokio::spawn(async move {
        match conf.refresh().await {
            Ok(true) => tracing::info!(copy = %conf.cache().display(), "the controller's config changed; copy updated"),
            Ok(false) => {}
            Err(error) => tracing::warn!(error = %error, "config not refreshed; keeping the copy"),
        }
    });
}

/// `scontrol reboot`: runs the node config's `reboot_program` as root, off the runtime, and
/// logs how it ended (a real reboot ends this daemon first; it registers anew once the machine is
/// back, which completes the reboot on ctld's side). Nothing of the request reaches the program.
fn reboot(settings: &NodeSettings) {
    let Some((program, args)) = settings.reboot_program.clone().and_then(|argv| {
        let (program, args) = argv.split_first()?;
        Some((program.clone(), args.to_vec()))
    }) else {
        tracing::error!("reboot asked, but this node's config names no reboot_program");
        return;
    };
    tracing::info!(program, ?args, "node reboot request being processed");
    tokio::task::spawn_blocking(move || {
        let status = std::process::Command::new(&program).args(&args).stdin(std::process::Stdio::null()).status();
        match status {
            Ok(status) if status.success() => tracing::info!(program, "reboot program finished"),
            Ok(status) => tracing::error!(program, %status, "reboot program failed"),
            Err(error) => tracing::error!(program, error = %error, "cannot run the reboot program"),
        }
    });
}

/// The replicas' addresses in the config file `from`, where it lists replicas and loads, else
/// `given`.
fn controller_addresses(from: Option<&std::path::Path>, given: &str) -> String {
    match from.and_then(|path| drover_shared::config::Config::load(path).ok()) {
        Some(config) if !config.replicas.is_empty() => config.controller_addresses().join(","),
        _ => given.to_owned(),
    }
}

/// Milliseconds data sent to ctld may stay unacknowledged before the connection counts as lost.
const UNACKED_LIMIT_MS: u32 = 15_000;

/// How long connecting to one controller address, and then its handshake, may take before the
/// next address is tried (a replica that hangs, or anyone squatting the port).
const ATTEMPT_LIMIT: Duration = Duration::from_secs(2);

async fn connect(settings: &NodeSettings, boot_time: i64, start_time: i64) -> anyhow::Result<MessageStream<TcpStream>> {
    // A replicated controller lists every replica; only the leader accepts (a follower refuses
    // at once, naming the leader). Each address gets one attempt, handshake included, within
    // its limits; the first that completes it is ctld.
    let mut attempt = Err(anyhow::anyhow!("no controller address"));
    for address in settings.controller_addresses().split(',') {
        attempt = open(settings, address).await;
        if attempt.is_ok() {
            break;
        }
        if let Err(error) = &attempt {
            tracing::debug!(address, error = %format!("{error:#}"), "controller address not usable");
        }
    }
    let mut messages = attempt?;
    let registration = NodeRegistration {
        name: settings.name.clone(),
        cpus: settings.cpus,
        real_memory_mb: settings.real_memory_mb,
        gpus: settings.gpus.clone(),
        running: held(&settings.state_dir),
        version: env!("CARGO_PKG_VERSION").into(),
        boot_time,
        start_time,
    };
    messages.send(&NodeMessage::Register(registration)).await?;
    if let Some(reason) = &settings.shortfall {
        messages.send(&NodeMessage::Drain { reason: reason.clone() }).await?;
    }
    Ok(messages)
}

/// Connects to ctld at `address` and authenticates, each step within [`ATTEMPT_LIMIT`].
async fn open(settings: &NodeSettings, address: &str) -> anyhow::Result<MessageStream<TcpStream>> {
    let stream = tokio::time::timeout(ATTEMPT_LIMIT, TcpStream::connect(address))
        .await
        .context("connecting to ctld timed out")?
        .with_context(|| format!("connecting to ctld at {address}"))?;
    stream.set_nodelay(true)?;
    // A controller cut off by the network never closes the connection: heartbeats it leaves
    // unacknowledged for this long drop it, and noded looks for the (new) leader.
    nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::TcpUserTimeout, &UNACKED_LIMIT_MS)
        .context("setting TCP_USER_TIMEOUT")?;
    let mut messages = MessageStream::new(stream);
    let handshake = node_handshake(&mut messages, &settings.key, &settings.name);
    tokio::time::timeout(ATTEMPT_LIMIT, handshake)
        .await
        .with_context(|| format!("ctld at {address} did not answer hello"))??;
    Ok(messages)
}

/// What this connection has been told about each held job.
#[derive(Debug, Default)]
struct Reported {
    started: bool,
    end_sent: Option<Instant>,
    /// The supervisor's drain reason was sent.
    drain_sent: bool,
    /// A cancel or time-limit change the supervisor could not take yet (it was still starting);
    /// retried on each rescan.
    undelivered: Option<SupervisorCommand>,
}

async fn serve(settings: &NodeSettings, mut messages: MessageStream<TcpStream>, poke: &Notify) -> anyhow::Result<()> {
    let mut reported: HashMap<JobRun, Reported> = HashMap::new();
    let mut heartbeat = tokio::time::interval(settings.heartbeat);
    let mut rescan = tokio::time::interval(RESCAN);
    let (health_program, health_every) = settings.health_check.clone().unzip();
    let mut health = tokio::time::interval(health_every.unwrap_or(Duration::from_secs(3600)));
    loop {
        tokio::select! {
            _ = health.tick(), if health_program.is_some() => {
                let program = health_program.clone().unwrap_or_default();
                let check = move || prolog::run(&program, &health_environment(), HEALTH_CHECK_TIMEOUT);
                let checked = tokio::task::spawn_blocking(check).await;
                match checked {
                    Ok(Ok(())) => tracing::debug!("health check passed"),
                    Ok(Err(message)) => {
                        let reason = format!("Health check failed: {message}");
                        tracing::warn!(reason, "draining this node");
                        messages.send(&NodeMessage::Drain { reason }).await?;
                    }
                    Err(error) => tracing::error!(error = %error, "health check task failed"),
                }
            }
            incoming = messages.recv::<CtldMessage>() => {
                let Some(message) = incoming? else { return Ok(()) };
                handle(settings, message, &mut reported, &mut messages).await?;
            }
            _ = heartbeat.tick() => {
                messages.send(&NodeMessage::Heartbeat { running: held(&settings.state_dir) }).await?;
                let (dir, gpus) = (settings.state_dir.clone(), settings.gpus.clone());
                let samples = tokio::task::spawn_blocking(move || crate::gpu_usage::sample_held(&dir, &gpus)).await.unwrap_or_default();
                if !samples.is_empty() {
                    messages.send(&NodeMessage::GpuUsage(samples)).await?;
                }
            }
            _ = rescan.tick() => report(settings, &mut reported, &mut messages, Scan::Full).await?,
            () = poke.notified() => report(settings, &mut reported, &mut messages, Scan::News).await?,
        }
    }
}

async fn handle(
    settings: &NodeSettings,
    message: CtldMessage,
    reported: &mut HashMap<JobRun, Reported>,
    messages: &mut MessageStream<TcpStream>,
) -> anyhow::Result<()> {
    match message {
        CtldMessage::Reconfigured => refresh_config(settings),
        CtldMessage::Reboot => reboot(settings),
        // Answers a config request only, which a node link does not make.
        CtldMessage::Config { .. } => {}
        CtldMessage::Registered { kill } => {
            for run in kill {
                tracing::warn!(
                    job_id = run.job_id,
                    run = run.run,
                    "ctld no longer runs this job run here; cancelling it"
                );
                command(settings, run, SupervisorCommand::Cancel { kill_wait: 5 }, reported, messages).await?;
            }
        }
        CtldMessage::Launch(request) => {
            let run = JobRun { job_id: request.job_id, run: request.restart_count };
            if let Err(e) = launch(settings, &request) {
                tracing::error!(job_id = run.job_id, run = run.run, error = %format!("{e:#}"), "launch failed");
                let end = JobEnd {
                    job_id: run.job_id,
                    run: run.run,
                    outcome: JobOutcome::LaunchFailed { message: format!("{e:#}") },
                    exit_status: WaitStatus::exited(1),
                    start_time: None,
                    end_time: drover_shared::now(),
                };
                let _ = std::fs::remove_dir_all(job_dir(&settings.state_dir, run));
                messages.send(&NodeMessage::JobEnded(end)).await?;
            }
        }
        CtldMessage::Signal { job_id, signal, batch_only } => {
            // A signal is for the job's current run: the latest this node holds.
            if let Some(run) = latest(&settings.state_dir, job_id) {
                command(settings, run, SupervisorCommand::Signal { signal, batch_only }, reported, messages).await?;
            }
        }
        CtldMessage::Cancel { job_id, run, kill_wait } => {
            let run = JobRun { job_id, run };
            command(settings, run, SupervisorCommand::Cancel { kill_wait }, reported, messages).await?;
        }
        CtldMessage::LaunchStep(request) => {
            let (job_id, step_id) = (request.job.job_id, request.step_id);
            let oci = settings.oci.as_ref();
            match crate::step::launch(
                &settings.exe,
                &settings.state_dir,
                &settings.isolation,
                &settings.gpus,
                oci,
                &request,
            ) {
                Ok(pid) => tracing::info!(job_id, step_id, pid, "step runner started"),
                Err(e) => {
                    tracing::error!(job_id, step_id, error = %format!("{:#}", anyhow::Error::new(e)), "step launch failed")
                }
            }
        }
        CtldMessage::SignalStep { job_id, step_id, signal, kill_wait } => {
            if let Err(e) = crate::step::signal(&settings.state_dir, job_id, step_id, signal, kill_wait) {
                tracing::info!(job_id, step_id, error = %e, "step not signalled");
            }
        }
        CtldMessage::SetTimeLimit { job_id, time_limit } => {
            // A new limit is for the job's current run: the latest this node holds.
            if let Some(run) = latest(&settings.state_dir, job_id) {
                let seconds = time_limit.seconds();
                command(settings, run, SupervisorCommand::SetTimeLimit { seconds }, reported, messages).await?;
            }
        }
        CtldMessage::StatJob { query, job_id, run } => {
            // Reading a few /proc files per process: off the runtime, answered at once.
            let dir = settings.state_dir.clone();
            let read = tokio::task::spawn_blocking(move || crate::stat::sample_job(&dir, job_id, run));
            let samples = read.await.unwrap_or_default();
            messages.send(&NodeMessage::JobStats { query, job_id, samples }).await?;
        }
        CtldMessage::JobEndAck { job_id, run } => {
            let run = JobRun { job_id, run };
            reported.remove(&run);
            let dir = job_dir(&settings.state_dir, run);
            if !supervisor::supervisor_alive(&dir)
                && let Err(e) = std::fs::remove_dir_all(&dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(job_id, run = run.run, error = %e, "could not remove job directory");
            }
        }
    }
    Ok(())
}

/// Sends a command to a job run's supervisor; a run this node does not hold is reported cancelled
/// so ctld can release it, and a cancel the supervisor cannot take yet is kept for the next rescan.
async fn command(
    settings: &NodeSettings,
    run: JobRun,
    cmd: SupervisorCommand,
    reported: &mut HashMap<JobRun, Reported>,
    messages: &mut MessageStream<TcpStream>,
) -> anyhow::Result<()> {
    let job_id = run.job_id;
    let dir = job_dir(&settings.state_dir, run);
    if !dir.exists() {
        if matches!(cmd, SupervisorCommand::Cancel { .. }) {
            let end = JobEnd {
                job_id,
                run: run.run,
                outcome: JobOutcome::Cancelled,
                exit_status: WaitStatus::default(),
                start_time: None,
                end_time: drover_shared::now(),
            };
            messages.send(&NodeMessage::JobEnded(end)).await?;
        }
        return Ok(());
    }
    if let Err(e) = supervisor::send_command(&dir, &cmd) {
        tracing::info!(job_id, run = run.run, error = %e, "supervisor not reachable yet; will retry");
        // A cancel is kept over anything else; a new time limit over an older one.
        let entry = reported.entry(run).or_default();
        let keep = match (&cmd, &entry.undelivered) {
            (SupervisorCommand::Cancel { .. }, _) => true,
            (SupervisorCommand::SetTimeLimit { .. }, Some(SupervisorCommand::Cancel { .. })) => false,
            (SupervisorCommand::SetTimeLimit { .. }, _) => true,
            (SupervisorCommand::Signal { .. }, _) => false,
        };
        if keep {
            entry.undelivered = Some(cmd);
        }
    }
    Ok(())
}

fn launch(settings: &NodeSettings, request: &LaunchRequest) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let run = JobRun { job_id: request.job_id, run: request.restart_count };
    let dir = job_dir(&settings.state_dir, run);
    if dir.exists() {
        // A repeated launch (ctld restarted before it saw the start): the supervisor already runs.
        tracing::info!(job_id = request.job_id, run = run.run, "launch for a job run already held; ignored");
        return Ok(());
    }
    std::fs::DirBuilder::new().mode(0o700).create(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let busy_cpus: Vec<Vec<u32>> = held(&settings.state_dir)
        .into_iter()
        .filter(|&other| other != run)
        .filter_map(|other| isolation::read(&job_dir(&settings.state_dir, other)).ok().flatten())
        .filter_map(|plan| plan.limits.cpus.map(|cpus| isolation::parse_cpu_list(&cpus)))
        .collect();
    let plan = settings.isolation.plan(request, &settings.gpus, &busy_cpus).map_err(anyhow::Error::msg)?;
    if let Some(plan) = &plan {
        let path = dir.join(isolation::ISOLATION_FILE);
        isolation::write(&dir, plan).with_context(|| format!("writing {}", path.display()))?;
    }
    settings.scripts.write(&dir).with_context(|| format!("writing {}", dir.join(prolog::SCRIPTS_FILE).display()))?;
    if let Some(bundle) = drover_shared::job::container_bundle(&request.spec.environment)
        && request.spec.script != drover_shared::job::ALLOCATION_HOLDER.as_bytes()
    {
        let owner = crate::container::Owner {
            job_id: request.job_id,
            step: "batch".to_owned(),
            node: &settings.name,
            user: &request.user,
            uid: request.uid,
            gid: request.gid,
        };
        let devices = settings.isolation.device_files(&request.gpus);
        let script = Some(supervisor::script_path(&dir));
        let plan = crate::container::plan(settings.oci.as_ref(), bundle, &dir, devices, owner, script)
            .map_err(anyhow::Error::msg)?;
        crate::container::write(&dir, &Ok(plan))
            .with_context(|| format!("writing {}", dir.join(crate::container::PLAN_FILE).display()))?;
    }
    // The launch request last (synced): a directory with one holds everything its supervisor
    // reads, so a supervisor started for it after a crash of noded finds its isolation.
    supervisor::write_launch(&dir, request)?;
    let pid = settings.start_supervisor(&dir)?;
    tracing::info!(job_id = request.job_id, run = run.run, pid, "supervisor started");
    Ok(())
}

/// How much [`report`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// What supervisors write (`started`, `end`, and a drain reason, which comes before `end`):
    /// after a supervisor's poke.
    News,
    /// Also whether each unended job's supervisor still lives (or never started): every
    /// [`RESCAN`].
    Full,
}

/// Reports starts and ends found on disk that this connection has not been told (or that are
/// still unacknowledged after [`RESEND_END`]).
async fn report(
    settings: &NodeSettings,
    reported: &mut HashMap<JobRun, Reported>,
    messages: &mut MessageStream<TcpStream>,
    scan: Scan,
) -> anyhow::Result<()> {
    let now = Instant::now();
    for (step_id, usage) in crate::step::take_spooled_usage(&settings.state_dir) {
        messages.send(&NodeMessage::StepUsage { step_id, usage }).await?;
    }
    for run in held(&settings.state_dir) {
        let job_id = run.job_id;
        let dir = job_dir(&settings.state_dir, run);
        let entry = reported.entry(run).or_default();
        let end = match supervisor::read_end(&dir) {
            Ok(end) => end,
            Err(e) => {
                tracing::warn!(job_id, error = %e, "unreadable end record");
                None
            }
        };
        if !entry.drain_sent
            && (scan == Scan::Full || end.is_some())
            && let Some(reason) = prolog::read_drain(&dir)
        {
            entry.drain_sent = true;
            tracing::warn!(job_id, reason, "draining this node");
            messages.send(&NodeMessage::Drain { reason }).await?;
        }
        if !entry.started
            && let Ok(Some(start_time)) = supervisor::read_started(&dir)
        {
            entry.started = true;
            messages.send(&NodeMessage::JobStarted { job_id, run: run.run, start_time }).await?;
        }
        let end = match end {
            Some(end) => Some(end),
            None if scan == Scan::News => None,
            None if !dir.join("launch").exists() => None,
            // The machine rebooted since the launch: nothing of the job survived it.
            None if launched_before_boot(&dir) => {
                tracing::warn!(job_id, "the node rebooted while the job ran");
                Some(JobEnd {
                    job_id,
                    run: run.run,
                    outcome: JobOutcome::LaunchFailed { message: "the node rebooted while the job ran".into() },
                    exit_status: WaitStatus::signaled(9),
                    start_time: supervisor::read_started(&dir).ok().flatten(),
                    end_time: drover_shared::now(),
                })
            }
            None if supervisor::supervisor_alive(&dir) => None,
            // The supervisor may have written its end and exited between the read above and the
            // liveness check: read again before calling it dead.
            None if let Ok(Some(end)) = supervisor::read_end(&dir) => Some(end),
            // The supervisor vanished without writing an end (killed with SIGKILL): report one so
            // the job does not hang forever. Before its pid file exists it may still be starting.
            None if dir.join("supervisor.pid").exists() => {
                tracing::warn!(job_id, "supervisor died without recording the job's end");
                // Nothing of the job may outlive it: kill what is left in its cgroups.
                if let Ok(Some(plan)) = isolation::read(&dir)
                    && let Err(error) = crate::cgroup::JobCgroup::existing(&plan.cgroup, job_id).remove()
                {
                    let error = format!("{:#}", anyhow::Error::new(error));
                    tracing::error!(job_id, error, "could not remove the job's cgroups");
                }
                Some(JobEnd {
                    job_id,
                    run: run.run,
                    outcome: JobOutcome::LaunchFailed { message: "job supervisor died".into() },
                    exit_status: WaitStatus::signaled(9),
                    start_time: supervisor::read_started(&dir).ok().flatten(),
                    end_time: drover_shared::now(),
                })
            }
            // Written but never started: noded died between writing the launch request and
            // starting the supervisor. The job has not run, so start it now.
            None if age(&dir.join("launch")) > UNSTARTED_GRACE => {
                tracing::warn!(job_id, "job was launched but its supervisor never started; starting it");
                match settings.start_supervisor(&dir) {
                    Ok(pid) => tracing::info!(job_id, pid, "supervisor started"),
                    Err(e) => tracing::error!(job_id, error = %e, "could not start the supervisor"),
                }
                None
            }
            None => None,
        };
        if end.is_some() {
            entry.undelivered = None;
        } else if let Some(cmd) = entry.undelivered.take()
            && let Err(e) = supervisor::send_command(&dir, &cmd)
        {
            tracing::info!(job_id, error = %e, "supervisor still not reachable; will retry");
            entry.undelivered = Some(cmd);
        }
        if let Some(end) = end
            && entry.end_sent.is_none_or(|t| now.duration_since(t) >= RESEND_END)
        {
            entry.end_sent = Some(now);
            // The usage first: ctld stores it, and the end's acknowledgement lets noded forget
            // the directory that holds it.
            if let Ok(Some(usage)) = supervisor::read_usage(&dir) {
                messages.send(&NodeMessage::JobUsage(usage)).await?;
            }
            messages.send(&NodeMessage::JobEnded(end)).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_launches_written_before_this_boot_count_as_rebooted() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!launched_before_boot(dir.path()), "no launch request: nothing to judge");
        std::fs::write(dir.path().join("launch"), b"x").unwrap();
        assert!(!launched_before_boot(dir.path()), "written just now");
        let file = std::fs::File::options().write(true).open(dir.path().join("launch")).unwrap();
        file.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000)).unwrap();
        assert!(launched_before_boot(dir.path()), "written in 1970, before any boot of this machine");
    }

    /// A replica added to the file at run time is among the addresses of the next connection;
    /// a file without replicas, or one that does not load, leaves the given address.
    #[test]
    fn the_replicas_are_read_again_before_each_connection() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cluster.toml");
        let replica = |id: u32| {
            format!(
                "[[controller.replicas]]\nid = {id}\naddress = \"127.0.0.1:{}\"\nraft_address = \"127.0.0.1:{}\"\nstate_dir = \"r{id}\"\n",
                7000 + id,
                7100 + id
            )
        };
        let base = "cluster_name = \"c\"\n[controller]\naddress = \"127.0.0.1:6817\"\nstate_dir = \"s\"\n";
        let rest = "[[nodes]]\nnames = \"n1\"\ncpus = 1\nreal_memory = 100\n[[partitions]]\nname = \"p\"\nnodes = \"n1\"\ndefault = true\n";
        std::fs::write(&file, format!("{base}{}{}{}{rest}", replica(1), replica(2), replica(3))).unwrap();
        let given = controller_addresses(Some(&file), "x");
        assert_eq!(given, "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003");
        std::fs::write(&file, format!("{base}{}{}{}{}{rest}", replica(1), replica(2), replica(3), replica(4))).unwrap();
        assert_eq!(controller_addresses(Some(&file), &given), format!("{given},127.0.0.1:7004"));
        std::fs::write(&file, format!("{base}{rest}")).unwrap();
        assert_eq!(controller_addresses(Some(&file), "127.0.0.1:6817"), "127.0.0.1:6817");
        std::fs::write(&file, "not toml [").unwrap();
        assert_eq!(controller_addresses(Some(&file), &given), given);
        assert_eq!(controller_addresses(None, "a:1"), "a:1");
    }
}
