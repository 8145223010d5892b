//! drover-ctld entry point: parse flags, load the config, start logging, bind the client socket
//! and the node port, run until SIGTERM/SIGINT.

#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

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
    let _ = std::fs::remove_file(&socket_path);
    // A replica opens its doors only once it leads: until then clients and nodes find the
    // leader by trying the next replica.
    let replication = match args.replica {
        Some(id) => {
            let replication = drover_ctld::Replication::start(&config, id, args.snapshot_every).await?;
            tracing::info!(replica = id, "following; waiting to lead");
            replication.until_leader().await?;
            Some(replication)
        }
        None => None,
    };
    let clients =
        tokio::net::UnixListener::bind(&socket_path).with_context(|| format!("binding {}", socket_path.display()))?;
    // Every local user may connect; identity comes from SO_PEERCRED, not from the socket's mode.
    std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o666))?;
    let address = args.listen.unwrap_or_else(|| config.controller_address.clone());
    let nodes = tokio::net::TcpListener::bind(&address).await.with_context(|| format!("binding {address}"))?;
    let port = nodes.local_addr()?.port();
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
    let listeners = drover_ctld::Listeners { clients, nodes };
    match replication {
        None => drover_ctld::run(config, options, listeners, shutdown).await,
        Some(replication) => drover_ctld::run_replica(config, options, listeners, replication, shutdown).await,
    }
}
