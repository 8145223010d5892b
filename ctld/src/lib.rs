//! drover-ctld, the controller: the only owner of cluster state and the only writer of its
//! database. [`run`] wires the pieces together: the database writer thread, the core event loop,
//! the client socket, the node port and a timer.

#![forbid(unsafe_code)]

// The layers, from the top; each imports only the layers below it (`tests/tests/tidy.rs` checks
// the direction): serve → core → {policy, store} → model.
mod core;
pub mod error;
mod model;
mod policy;
mod replica;
mod serve;
mod store;

#[doc(hidden)]
pub use core::simbench;
#[doc(hidden)]
pub use policy::passbench;

use crate::error::Failed;
use drover_shared::auth::ClusterKey;
use drover_shared::config::Config;
pub use replica::StepDown;
pub use serve::activation::Activated;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};

/// The sockets ctld serves, bound by the caller.
pub struct Listeners {
    /// Local clients (`sbatch`, `squeue`, …).
    pub clients: UnixListener,
    /// noded connections.
    pub nodes: TcpListener,
}

/// Tuning knobs that are not cluster configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// Most database operations committed in one transaction (1 = a commit per change, the
    /// baseline the ingest benchmark compares against).
    pub max_commit_batch: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options { max_commit_batch: 4096 }
    }
}

/// How often the core checks node liveness, begin times and old jobs.
const TICK: Duration = Duration::from_secs(1);

/// One replica of a replicated controller (`[[controller.replicas]]`), started and following
/// until it leads (see `replica/mod.rs`).
pub struct Replication(replica::Replica);

impl Replication {
    /// Starts replica `id` of `config` (its Raft node and port; no client or node doors),
    /// snapshotting every `snapshot_every` log entries.
    /// `raft_port`: the Raft port as the replica's supervisor bound it, if it did.
    pub async fn start(
        config: &Config,
        id: u64,
        snapshot_every: u64,
        raft_port: Option<std::net::TcpListener>,
        step_down: StepDown,
    ) -> crate::error::Result<Replication> {
        let key = Arc::new(ClusterKey::load(&config.key_file)?);
        Ok(Replication(replica::start(config, id, key, snapshot_every.max(1), raft_port, step_down).await?))
    }

    /// Waits until this replica leads with everything committed before applied.
    pub async fn until_leader(&self) -> crate::error::Result<()> {
        self.0.until_leader().await
    }

    /// Whether this replica may stand for election (not before it holds its doors).
    pub fn electable(&self, electable: bool) {
        self.0.electable(electable);
    }

    /// Holds `listeners` while this replica follows, answering every connection on them that
    /// this replica does not lead and who does (see `serve::follower`), until it leads with
    /// everything committed before applied; then they are the leader's doors.
    pub async fn follow(&self, listeners: &Listeners) -> crate::error::Result<()> {
        tokio::select! {
            led = self.0.until_leader() => led,
            () = serve::follower::answer(&listeners.clients, &listeners.nodes, || self.0.leader_hint()) => {
                crate::error::refuse!("the follower's doors closed")
            }
        }
    }
}

/// Seeds this controller's state directory from other controllers' state databases and says
/// what it did (`drover-ctld --seed FILE`, docs/admin/ha.md): replica `replica` (the first one)
/// of a new replicated cluster from a single controller's database, or, without `replica`, a
/// single controller from replicas' databases (the one that applied the furthest). The files
/// given are only read.
pub fn seed(config: &Config, replica: Option<u64>, files: &[std::path::PathBuf]) -> crate::error::Result<String> {
    Ok(match replica {
        Some(id) => replica::seed::into_replica(config, id, files)?,
        None => replica::seed::into_single(config, files)?,
    })
}

/// Runs ctld until `shutdown` resolves.
pub async fn run(
    config: Config,
    options: Options,
    listeners: Listeners,
    shutdown: impl std::future::Future,
) -> crate::error::Result<()> {
    run_with(config, options, listeners, None, shutdown).await
}

/// Runs a leading replica until `shutdown` resolves or it stops leading (then the process exits).
pub async fn run_replica(
    config: Config,
    options: Options,
    listeners: Listeners,
    replication: Replication,
    shutdown: impl std::future::Future,
) -> crate::error::Result<()> {
    run_with(config, options, listeners, Some(replication.0), shutdown).await
}

async fn run_with(
    config: Config,
    options: Options,
    listeners: Listeners,
    replica: Option<replica::Replica>,
    shutdown: impl std::future::Future,
) -> crate::error::Result<()> {
    let config = Arc::new(config);
    let key = Arc::new(ClusterKey::load(&config.key_file)?);
    let db_path = match &replica {
        Some(replica) => replica.db_path.clone(),
        None => config.state_dir.join("drover.db"),
    };
    // A replica's database belongs to its state machine: the core loads from it read-only.
    let conn = store::db::open(&db_path, replica.is_some())?;
    // The accounts, users and QOS sacctmgr changed, over the file's.
    let acct_edits = store::db::load_acct_edits(&conn, &db_path)?;
    let config = Arc::new(
        drover_shared::sacctmgr::edit::overlay(&config, &acct_edits)
            .map_err(|e| crate::error::Error::Refused(format!("{}: {e}", config.source.display())))?,
    );
    let (stored, next_job_id) = store::db::load_active(&conn, &db_path)?;
    tracing::info!(db = %db_path.display(), n_active = stored.len(), next_job_id, "state loaded");
    let mut state = model::state::State::new(config.clone(), next_job_id);
    store::db::load_usage(&conn, &db_path, &mut state.usage)?;
    let requeues = store::runs::load_intents(&conn, &db_path)?;
    let submit_keys = store::db::load_submit_keys(&conn, &db_path, drover_shared::now())?;
    core::restore(&mut state, stored);
    core::node_admin::restore_node_states(&mut state, store::db::load_node_states(&conn, &db_path)?);

    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let (db_tx, db_rx) = std::sync::mpsc::channel();
    let writer_events = events_tx.clone();
    let writer_path = db_path.clone();
    let replica_states = replica.as_ref().map(replica::Replica::publish_states);
    let follow_config = replica.as_ref().map(replica::Replica::follow_config);
    let writer = std::thread::Builder::new().name("db-writer".into());
    let writer = match replica {
        None => writer.spawn(move || {
            let mut sink = store::db::Embedded { conn, path: writer_path };
            store::db::run_writer_loop(db_rx, options.max_commit_batch, &mut sink, |report| {
                let _ = writer_events.send(core::Event::Committed(report));
            });
        }),
        Some(replica) => {
            drop(conn);
            replica.stop_when_deposed();
            let runtime = tokio::runtime::Handle::current();
            let step_down = replica.step_down;
            writer.spawn(move || {
                replica::writer::run(
                    replica.raft,
                    step_down,
                    runtime,
                    &writer_path,
                    db_rx,
                    options.max_commit_batch,
                    |report| {
                        let _ = writer_events.send(core::Event::Committed(report));
                    },
                );
            })
        }
    }
    .failed("starting the database writer thread")?;

    let socket = config.client_socket().to_string_lossy().into_owned();
    let registry = Arc::new(core::metrics::Registry::default());
    let (publisher, jobs_snapshot) = model::snapshot::Publisher::new();
    let hosts = Arc::new(model::identity::HostNames::default());
    let node_slots = serve::nodes::connection_slots(state.nodes().len());
    let core = core::Core::new(state, db_tx, socket, publisher)
        .with_metrics(registry.clone())
        .with_requeues(requeues)
        .with_submit_keys(submit_keys)
        .with_host_names(hosts.clone())
        .with_acct_edits(acct_edits);
    let shared_config = core.shared_config();
    if let Some(follow_config) = follow_config {
        let config = shared_config.clone();
        follow_config(Box::new(move || config.get().replicas.clone()));
    }
    let http = match &config.metrics.listen {
        Some(listen) => {
            let listener =
                TcpListener::bind(listen).await.failed_with(|| format!("binding the metrics port {listen}"))?;
            let bound = listener.local_addr()?;
            let addr_file = config.state_dir.join("metrics.addr");
            std::fs::write(&addr_file, format!("{bound}\n"))
                .failed_with(|| format!("writing {}", addr_file.display()))?;
            tracing::info!(%bound, "serving /metrics and the status page");
            let context = serve::http::HttpContext {
                events: events_tx.clone(),
                metrics: registry.clone(),
                db_path: db_path.clone(),
                config: shared_config.clone(),
            };
            Some(tokio::spawn(serve::http::serve(listener, context)))
        }
        None => None,
    };
    let client_context = serve::rpc::context::ClientContext {
        events: events_tx.clone(),
        db_path,
        config: shared_config,
        metrics: registry,
        jobs: jobs_snapshot,
        admission: serve::rpc::admission::Admission::new(),
        replicas: replica_states,
        answering: Arc::default(),
    };
    let answering = client_context.answering.clone();
    let remote = serve::remote::Remote {
        tokens: Arc::new(serve::remote::Tokens::new(key.clone(), hosts)),
        context: client_context.clone(),
    };
    let clients = tokio::spawn(serve::rpc::serve(listeners.clients, client_context));
    let nodes = tokio::spawn(serve::nodes::serve(listeners.nodes, key, events_tx.clone(), remote, node_slots));
    let ticker = tokio::spawn(async move {
        let mut interval = tokio::time::interval(TICK);
        loop {
            interval.tick().await;
            if events_tx.send(core::Event::Tick).is_err() {
                return;
            }
        }
    });
    core.run(events_rx, shutdown).await;
    // New connections are refused from here; the answers the core gave on its way out are
    // written before the process ends.
    clients.abort();
    answering.settled(Duration::from_secs(2)).await;
    nodes.abort();
    ticker.abort();
    if let Some(http) = http {
        http.abort();
    }
    // The core is gone and with it the writer's only sender: the writer commits what is queued
    // and returns.
    let joined = tokio::task::spawn_blocking(move || writer.join()).await.failed("waiting for the database writer")?;
    if joined.is_err() {
        crate::error::refuse!("the database writer thread panicked");
    }
    Ok(())
}
