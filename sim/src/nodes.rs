//! The simulated nodes, the bulk submitter and the query timer behind `drover-simnode`.

use anyhow::{Context, bail};
use drover_shared::auth::ClusterKey;
use drover_shared::config::Config;
use drover_shared::grammar::gres::GresRequest;
use drover_shared::job::{JobSpec, WaitStatus};
use drover_shared::proto::client::{JobQuery, Request, Response};
use drover_shared::proto::frame::MessageStream;
use drover_shared::proto::handshake::{client_handshake, node_handshake};
use drover_shared::proto::node::{CtldMessage, JobEnd, JobOutcome, JobRun, NodeMessage, NodeRegistration};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::mpsc;

#[derive(Default)]
struct Counters {
    registered: AtomicU64,
    started: AtomicU64,
    ended: AtomicU64,
}

/// Runs `count` simulated nodes until interrupted, printing counters every five seconds.
pub(crate) async fn run(
    config_path: &Path,
    controller: Option<String>,
    count: usize,
    warp: f64,
    heartbeat: u64,
    ignore_term: bool,
) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    let key = Arc::new(ClusterKey::load(&config.key_file)?);
    let controller = controller.unwrap_or_else(|| config.controller_address.clone());
    let counters = Arc::new(Counters::default());
    if config.nodes.len() < count {
        bail!("the config has {} nodes, {count} asked for", config.nodes.len());
    }
    for node in config.nodes.iter().take(count).cloned() {
        let (key, controller, counters) = (key.clone(), controller.clone(), counters.clone());
        tokio::spawn(async move {
            loop {
                let timing = Timing { warp, heartbeat, ignore_term };
                if let Err(e) = one_node(&node, &key, &controller, timing, &counters).await {
                    tracing::warn!(node = node.name, error = %e, "simulated node disconnected");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
    }
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        println!(
            "t={:.0}s registered={} started={} ended={}",
            started.elapsed().as_secs_f64(),
            counters.registered.load(Ordering::Relaxed),
            counters.started.load(Ordering::Relaxed),
            counters.ended.load(Ordering::Relaxed)
        );
        // The benchmark script reads these lines from a file; do not let them sit in a buffer.
        std::io::Write::flush(&mut std::io::stdout())?;
    }
}

/// How a simulated node's jobs pass time.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// Simulated seconds per real second.
    warp: f64,
    /// Seconds between heartbeats.
    heartbeat: u64,
    /// Whether a cancelled job runs on until its kill wait is over.
    ignore_term: bool,
}

async fn one_node(
    node: &drover_shared::config::NodeConfig,
    key: &ClusterKey,
    controller: &str,
    timing: Timing,
    counters: &Counters,
) -> anyhow::Result<()> {
    let Timing { warp, heartbeat, ignore_term } = timing;
    let stream = TcpStream::connect(controller).await.with_context(|| format!("connecting to {controller}"))?;
    stream.set_nodelay(true)?;
    let mut messages = MessageStream::new(stream);
    node_handshake(&mut messages, key, &node.name).await?;
    let now = drover_shared::now();
    let registration = NodeRegistration {
        name: node.name.clone(),
        cpus: node.cpus,
        real_memory_mb: node.real_memory_mb,
        gpus: node.gpus.clone(),
        running: Vec::new(),
        version: "sim".into(),
        boot_time: now,
        start_time: now,
    };
    messages.send(&NodeMessage::Register(registration)).await?;
    counters.registered.fetch_add(1, Ordering::Relaxed);
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel::<JobRun>();
    let (cancelled_tx, mut cancelled_rx) = mpsc::unbounded_channel::<JobRun>();
    let mut running: HashSet<JobRun> = HashSet::new();
    // The exit code each running job ends with when its time is up.
    let mut exits: std::collections::HashMap<JobRun, u8> = std::collections::HashMap::new();
    let mut beat = tokio::time::interval(Duration::from_secs(heartbeat.max(1)));
    loop {
        tokio::select! {
            incoming = messages.recv::<CtldMessage>() => {
                match incoming? {
                    None => return Ok(()),
                    Some(CtldMessage::Launch(request)) => {
                        let job_id = request.job_id;
                        let run = JobRun { job_id, run: request.restart_count };
                        running.insert(run);
                        counters.started.fetch_add(1, Ordering::Relaxed);
                        messages.send(&NodeMessage::JobStarted { job_id, run: run.run, start_time: drover_shared::now() }).await?;
                        let simulated = simulated_seconds(&request.spec, request.time_limit.seconds());
                        let real = Duration::from_secs_f64(simulated as f64 / warp.max(0.001));
                        exits.insert(run, exit_code(&request.spec));
                        let tx = ended_tx.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(real).await;
                            let _ = tx.send(run);
                        });
                    }
                    Some(CtldMessage::Cancel { job_id, run, kill_wait }) => {
                        let run = JobRun { job_id, run };
                        if ignore_term && running.contains(&run) {
                            // SIGKILL comes when the grace is over; the job ends then.
                            let tx = cancelled_tx.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(Duration::from_secs(u64::from(kill_wait))).await;
                                let _ = tx.send(run);
                            });
                        } else if running.remove(&run) {
                            exits.remove(&run);
                            end(&mut messages, run, JobOutcome::Cancelled, WaitStatus::default(), counters).await?;
                        }
                    }
                    Some(_) => {}
                }
            }
            Some(run) = ended_rx.recv() => {
                let code = exits.remove(&run).unwrap_or(0);
                if running.remove(&run) {
                    end(&mut messages, run, JobOutcome::Exited, WaitStatus::exited(code), counters).await?;
                }
            }
            Some(run) = cancelled_rx.recv() => {
                exits.remove(&run);
                if running.remove(&run) {
                    end(&mut messages, run, JobOutcome::Cancelled, WaitStatus::default(), counters).await?;
                }
            }
            _ = beat.tick() => {
                messages.send(&NodeMessage::Heartbeat { running: running.iter().copied().collect() }).await?;
            }
        }
    }
}

/// `--comment sim:SECONDS[:exit=CODE]`: the simulated run time (else the time limit, else 60 s).
fn simulated_seconds(spec: &JobSpec, limit: Option<u64>) -> u64 {
    let field = spec.comment.as_deref().and_then(|c| c.strip_prefix("sim:"));
    field.and_then(|s| s.split(':').next()).and_then(|s| s.parse().ok()).or(limit).unwrap_or(60)
}

/// `--comment sim:SECONDS:exit=CODE`: the exit code the job ends with (else 0).
fn exit_code(spec: &JobSpec) -> u8 {
    let field = spec.comment.as_deref().and_then(|c| c.strip_prefix("sim:"));
    field.and_then(|s| s.split(':').find_map(|f| f.strip_prefix("exit="))).and_then(|c| c.parse().ok()).unwrap_or(0)
}

async fn end(
    messages: &mut MessageStream<TcpStream>,
    run: JobRun,
    outcome: JobOutcome,
    exit_status: WaitStatus,
    counters: &Counters,
) -> anyhow::Result<()> {
    counters.ended.fetch_add(1, Ordering::Relaxed);
    let now = drover_shared::now();
    let end = JobEnd { job_id: run.job_id, run: run.run, outcome, exit_status, start_time: None, end_time: now };
    messages.send(&NodeMessage::JobEnded(end)).await?;
    Ok(())
}

async fn connect_client(socket: &Path) -> anyhow::Result<MessageStream<UnixStream>> {
    let stream = UnixStream::connect(socket).await.with_context(|| format!("connecting to {}", socket.display()))?;
    let mut messages = MessageStream::new(stream);
    client_handshake(&mut messages).await?;
    Ok(messages)
}

/// What every job of a `submit` run asks for.
pub(crate) struct Shape {
    pub(crate) hold: bool,
    /// GPUs per job (`--gres=gpu:N`).
    pub(crate) gpus: u64,
    /// Simulated run time, seconds.
    pub(crate) seconds: u64,
    /// `--dependency`, if any.
    pub(crate) dependency: Option<String>,
}

fn job_spec(i: usize, shape: &Shape) -> JobSpec {
    let Shape { hold, gpus, seconds, .. } = *shape;
    JobSpec {
        name: format!("sim{i}"),
        work_dir: "/tmp".into(),
        submit_dir: "/tmp".into(),
        submit_host: "sim".into(),
        script: b"#!/bin/sh\ntrue\n".to_vec(),
        hold,
        comment: Some(format!("sim:{seconds}")),
        gres_per_node: if gpus > 0 {
            vec![GresRequest { name: "gpu".into(), gres_type: None, count: gpus }]
        } else {
            Vec::new()
        },
        stdout: Some("/dev/null".into()),
        dependency: shape.dependency.clone(),
        ..JobSpec::default()
    }
}

/// A login shell's environment of about `bytes` bytes (each entry counts its name, value, `=`
/// and a NUL): the usual variables, then `BENCH_PAD_<i>` entries of 64-byte values to reach it.
fn login_environment(bytes: usize) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("SHELL", "/bin/bash"),
        ("HOME", "/home/alice"),
        ("USER", "alice"),
        ("LOGNAME", "alice"),
        ("LANG", "en_US.UTF-8"),
        ("TERM", "xterm-256color"),
        ("HOSTNAME", "login01"),
        ("PWD", "/home/alice/project"),
        ("OLDPWD", "/home/alice"),
        ("PATH", "/home/alice/.local/bin:/opt/conda/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ("LD_LIBRARY_PATH", "/usr/local/cuda/lib64:/opt/conda/lib"),
        ("MODULEPATH", "/etc/modulefiles:/usr/share/modulefiles:/opt/modulefiles"),
        ("CONDA_PREFIX", "/opt/conda"),
        ("SSH_CONNECTION", "10.0.0.17 52144 10.0.0.2 22"),
        ("SSH_TTY", "/dev/pts/3"),
        ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ("XDG_SESSION_ID", "412"),
        ("MAIL", "/var/mail/alice"),
        ("HISTSIZE", "10000"),
        ("EDITOR", "vim"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let size = |env: &[(String, String)]| env.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
    let mut i = 0;
    while size(&env) < bytes {
        env.push((format!("BENCH_PAD_{i}"), format!("{i:064}")));
        i += 1;
    }
    env
}

/// A 400-byte batch script.
fn batch_script() -> Vec<u8> {
    let mut script = b"#!/bin/bash\n#SBATCH --gres=gpu:1\n#SBATCH --time=04:00:00\nset -euo pipefail\n".to_vec();
    script.extend(b"module load cuda\nsource /opt/conda/bin/activate train\n");
    while script.len() < 392 {
        script.extend(b"# step\n");
    }
    script.extend(b"python train.py\n");
    script
}

/// Submits `count` jobs from `clients` connections; prints the acknowledged rate. With
/// `sbatch_like`, each job carries what `sbatch job.sh` sends (see the `--sbatch-like` option).
pub(crate) async fn submit(
    socket: &Path,
    count: usize,
    clients: usize,
    shape: &Shape,
    sbatch_like: Option<usize>,
) -> anyhow::Result<()> {
    let shape = std::sync::Arc::new(Shape { dependency: shape.dependency.clone(), ..*shape });
    let like = sbatch_like.map(|bytes| std::sync::Arc::new((login_environment(bytes), batch_script())));
    let clients = clients.max(1);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let socket = socket.to_owned();
        let like = like.clone();
        let shape = shape.clone();
        tasks.push(tokio::spawn(async move {
            let mut messages = connect_client(&socket).await?;
            let mut acknowledged = 0usize;
            for i in (client..count).step_by(clients) {
                let mut spec = job_spec(i, &shape);
                if let Some(like) = &like {
                    let (environment, script) = &**like;
                    spec.environment = environment.clone();
                    spec.script = script.clone();
                    spec.work_dir = "/home/alice/project".into();
                    spec.submit_dir = "/home/alice/project".into();
                    spec.submit_host = "login01".into();
                    spec.command = Some("/home/alice/project/job.sh".into());
                    spec.submit_line = format!("sbatch --hold -J sim{i} job.sh");
                    spec.stdout = None;
                    spec.umask = 0o022;
                }
                messages.send(&Request::Submit(Box::new(spec))).await?;
                match messages.recv::<Response>().await? {
                    Some(Response::Submitted { .. }) => acknowledged += 1,
                    other => bail!("submission refused: {other:?}"),
                }
            }
            anyhow::Ok(acknowledged)
        }));
    }
    let mut acknowledged = 0;
    for task in tasks {
        acknowledged += task.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "submitted={acknowledged} clients={clients} seconds={seconds:.2} rate={:.0}",
        acknowledged as f64 / seconds
    );
    Ok(())
}

/// Times `repeat` job queries per client over `clients` concurrent connections; prints p50/p99.
pub(crate) async fn query(socket: &Path, repeat: usize, clients: usize) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for _ in 0..clients.max(1) {
        let socket = socket.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut messages = connect_client(&socket).await?;
            // Job lists may exceed the request bound, as the CLI's readers allow.
            messages.set_max_frame(drover_shared::proto::frame::MAX_ANSWER_FRAME);
            let mut times = Vec::with_capacity(repeat);
            let mut n_jobs = 0;
            for _ in 0..repeat {
                let started = Instant::now();
                messages.send(&Request::QueryJobs(JobQuery::default())).await?;
                match messages.recv::<Response>().await? {
                    Some(Response::Jobs { jobs, .. }) => n_jobs = jobs.len(),
                    other => bail!("query failed: {other:?}"),
                }
                times.push(started.elapsed());
            }
            anyhow::Ok((times, n_jobs))
        }));
    }
    let mut all = Vec::new();
    let mut n_jobs = 0;
    for task in tasks {
        let (times, n) = task.await??;
        all.extend(times);
        n_jobs = n;
    }
    all.sort();
    // The percentile at index floor(p × (n − 1) / 100), computed in integers.
    let pick = |percent: usize| all[(all.len() - 1) * percent / 100].as_secs_f64() * 1000.0;
    println!("jobs={n_jobs} clients={clients} queries={} p50_ms={:.1} p99_ms={:.1}", all.len(), pick(50), pick(99));
    Ok(())
}
