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
                if let Err(e) = one_node(&node, &key, &controller, warp, heartbeat, &counters).await {
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

async fn one_node(
    node: &drover_shared::config::NodeConfig,
    key: &ClusterKey,
    controller: &str,
    warp: f64,
    heartbeat: u64,
    counters: &Counters,
) -> anyhow::Result<()> {
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
    let mut running: HashSet<JobRun> = HashSet::new();
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
                        let tx = ended_tx.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(real).await;
                            let _ = tx.send(run);
                        });
                    }
                    Some(CtldMessage::Cancel { job_id, run, .. }) => {
                        let run = JobRun { job_id, run };
                        if running.remove(&run) {
                            end(&mut messages, run, JobOutcome::Cancelled, counters).await?;
                        }
                    }
                    Some(_) => {}
                }
            }
            Some(run) = ended_rx.recv() => {
                if running.remove(&run) {
                    end(&mut messages, run, JobOutcome::Exited, counters).await?;
                }
            }
            _ = beat.tick() => {
                messages.send(&NodeMessage::Heartbeat { running: running.iter().copied().collect() }).await?;
            }
        }
    }
}

fn simulated_seconds(spec: &JobSpec, limit: Option<u64>) -> u64 {
    spec.comment.as_deref().and_then(|c| c.strip_prefix("sim:")).and_then(|s| s.parse().ok()).or(limit).unwrap_or(60)
}

async fn end(
    messages: &mut MessageStream<TcpStream>,
    run: JobRun,
    outcome: JobOutcome,
    counters: &Counters,
) -> anyhow::Result<()> {
    counters.ended.fetch_add(1, Ordering::Relaxed);
    let now = drover_shared::now();
    let end = JobEnd {
        job_id: run.job_id,
        run: run.run,
        outcome,
        exit_status: WaitStatus::default(),
        start_time: None,
        end_time: now,
    };
    messages.send(&NodeMessage::JobEnded(end)).await?;
    Ok(())
}

async fn connect_client(socket: &Path) -> anyhow::Result<MessageStream<UnixStream>> {
    let stream = UnixStream::connect(socket).await.with_context(|| format!("connecting to {}", socket.display()))?;
    let mut messages = MessageStream::new(stream);
    client_handshake(&mut messages).await?;
    Ok(messages)
}

fn job_spec(i: usize, hold: bool, gpus: u64, seconds: u64) -> JobSpec {
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
        ..JobSpec::default()
    }
}

/// Submits `count` jobs from `clients` connections; prints the acknowledged rate.
pub(crate) async fn submit(
    socket: &Path,
    count: usize,
    clients: usize,
    hold: bool,
    gpus: u64,
    seconds: u64,
) -> anyhow::Result<()> {
    let clients = clients.max(1);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let socket = socket.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut messages = connect_client(&socket).await?;
            let mut acknowledged = 0usize;
            for i in (client..count).step_by(clients) {
                messages.send(&Request::Submit(Box::new(job_spec(i, hold, gpus, seconds)))).await?;
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
