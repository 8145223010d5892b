//! drover-ctld entry point: parse flags, load the config, start logging, bind the client socket
//! and the node port, run until SIGTERM/SIGINT.

#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

/// The Drover controller.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Cluster configuration file.
    #[arg(long, env = "DROVER_CONF", default_value = "/etc/drover/cluster.toml")]
    config: PathBuf,
    /// Overrides the config's state directory.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Overrides the config's node address (port 0 picks a free port).
    #[arg(long)]
    listen: Option<String>,
    /// Writes the bound node port here once listening.
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// Most changes committed in one SQLite transaction (1 disables batching; for benchmarks).
    #[arg(long, env = "DROVER_COMMIT_BATCH", default_value_t = 4096)]
    commit_batch: usize,
    /// Runs as this replica of `[[controller.replicas]]` (required when the config lists them).
    #[arg(long, env = "DROVER_REPLICA")]
    replica: Option<u64>,
    /// A replica snapshots its state database after this many log entries and purges the log
    /// before the snapshot (tests set it low).
    #[arg(long, env = "DROVER_SNAPSHOT_EVERY", default_value_t = 2000)]
    snapshot_every: u64,
    /// Seeds this controller's empty state directory from FILE and exits (repeat it to give
    /// every replica's database when going back to one controller): docs/admin/ha.md,
    /// "Converting a running cluster". FILE is only read; stop the controller that wrote it first.
    #[arg(long, value_name = "FILE")]
    seed: Vec<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut config = drover_shared::config::Config::load(&args.config)?;
    match (args.replica, config.replicas.is_empty()) {
        (Some(id), false) => config.select_replica(id).map_err(anyhow::Error::msg)?,
        (None, false) => anyhow::bail!(
            "{} lists [[controller.replicas]]: start each replica with --replica ID",
            args.config.display()
        ),
        (Some(_), true) => anyhow::bail!("--replica: {} lists no [[controller.replicas]]", args.config.display()),
        (None, true) => {}
    }
    if let Some(dir) = args.state_dir {
        config.state_dir = dir;
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // The database holds every job's script and environment: every file ctld creates is
    // owner-only (the client socket is opened up explicitly below), and the directory stays
    // traversable so that users reach the socket inside it.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    drover_shared::statedir::prepare(&config.state_dir, 0o755)?;
    if !args.seed.is_empty() {
        println!("{}", drover_ctld::seed(&config, args.replica, &args.seed)?);
        return Ok(());
    }
    let socket_path = config.client_socket();
    let address = args.listen.unwrap_or_else(|| config.controller_address.clone());
    // Doors a supervisor bound and keeps across restarts (socket activation), if any.
    let mut activated = drover_ctld::Activated::from_env();
    let replication = match args.replica {
        Some(id) => {
            let raft_port = activated.tcp("raft").context("the Raft port handed over")?;
            let replication =
                drover_ctld::Replication::start(&config, id, args.snapshot_every, raft_port, step_down).await?;
            // Not a candidate before it holds its doors (below): nobody could reach it.
            replication.electable(false);
            // Commands on this host reach whichever replica leads, on whatever host, with a token
            // from this socket (as on a compute node, where noded serves one).
            let key = std::sync::Arc::new(drover_shared::auth::ClusterKey::load(&config.key_file)?);
            let tokens = drover_shared::token_socket::bind(&config.state_dir)?;
            tokio::spawn(drover_shared::token_socket::serve(
                tokens,
                key,
                drover_shared::token_socket::replica_host(id),
            ));
            Some(replication)
        }
        None => None,
    };
    // Both doors are bound before the replica may lead, and held while it follows (answering
    // that it does not lead), so that nobody can take its ports meanwhile. A replica whose port
    // someone else holds (after a crash, say) keeps voting and replicating and tries again every
    // second; one controller alone cannot start without its doors.
    let mut complained = None::<std::time::Instant>;
    let started = std::time::Instant::now();
    let listeners = loop {
        match bind_doors(&mut activated, &socket_path, &address).await {
            Ok(listeners) => break listeners,
            // A ctld killed a moment ago may hold its port until its last thread has exited (one
            // in an fsync dies late): a single controller waits for it, up to 10 s.
            Err(error)
                if replication.is_none() && address_in_use(&error) && started.elapsed() < Duration::from_secs(10) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) if replication.is_some() => {
                if complained.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                    tracing::error!(
                        error = %format!("{error:#}"),
                        "cannot open this replica's doors; it follows without standing for election and tries again every second"
                    );
                    complained = Some(std::time::Instant::now());
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(error) => return Err(error),
        }
    };
    let port = listeners.nodes.local_addr()?.port();
    if let Some(replication) = &replication {
        replication.electable(true);
        tracing::info!(replica = args.replica, "following; waiting to lead");
        replication.follow(&listeners).await?;
    }
    if let Some(port_file) = args.port_file {
        std::fs::write(&port_file, format!("{port}\n")).with_context(|| format!("writing {}", port_file.display()))?;
    }
    tracing::info!(socket = %socket_path.display(), port, cluster = config.cluster_name, "drover-ctld listening");
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
    };
    let options = drover_ctld::Options { max_commit_batch: args.commit_batch };
    match replication {
        None => drover_ctld::run(config, options, listeners, shutdown).await?,
        Some(replication) => drover_ctld::run_replica(config, options, listeners, replication, shutdown).await?,
    }
    Ok(())
}

/// The client socket at `socket_path` (open to every local user: identity comes from
/// `SO_PEERCRED`, not from the socket's mode) and the node port at `address`: as handed over by
/// the supervisor, else bound here.
async fn bind_doors(
    activated: &mut drover_ctld::Activated,
    socket_path: &std::path::Path,
    address: &str,
) -> anyhow::Result<drover_ctld::Listeners> {
    let clients = match activated.unix("clients").context("the client socket handed over")? {
        Some(listener) => {
            listener.set_nonblocking(true)?;
            tokio::net::UnixListener::from_std(listener)?
        }
        None => {
            let _ = std::fs::remove_file(socket_path);
            let listener = tokio::net::UnixListener::bind(socket_path)
                .with_context(|| format!("binding {}", socket_path.display()))?;
            std::fs::set_permissions(socket_path, std::fs::Permissions::from_mode(0o666))?;
            listener
        }
    };
    let nodes = match activated.tcp("nodes").context("the node port handed over")? {
        Some(listener) => {
            listener.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(listener)?
        }
        None => tokio::net::TcpListener::bind(address).await.with_context(|| format!("binding {address}"))?,
    };
    Ok(drover_ctld::Listeners { clients, nodes })
}

/// Whether binding failed because the address is taken.
fn address_in_use(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::AddrInUse))
}

/// A replica that can no longer lead ends the process with status 75: its supervisor starts it
/// again, as a follower (docs/admin/ha.md).
fn step_down(why: &str) -> ! {
    tracing::error!(why, "this replica steps down; exiting with status 75");
    std::process::exit(75)
}
