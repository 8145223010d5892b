//! drover-simnode: scale-benchmark tools that speak Drover's real protocol to a real ctld.
//!
//! - `nodes`: one process stands in for many nodes of the config (each its own authenticated TCP
//!   connection, registration and heartbeats); launched jobs "run" for their simulated duration
//!   (`--comment sim:SECONDS`, else their time limit) divided by `--warp`, then end `0:0`
//!   (`sim:SECONDS:exit=CODE`: with that exit code); a
//!   cancelled job ends at once, or with `--ignore-term` after its grace time (the kill wait).
//! - `submit`: many clients submitting held or runnable jobs over the client socket as fast as ctld
//!   acknowledges them (`--sbatch-like ENV_BYTES`: each with what `sbatch job.sh` sends from a
//!   login shell, environment and script included); prints the acknowledged rate.
//! - `query`: times `QueryJobs` round trips (what `squeue` costs ctld), alone or under concurrent load.

#![forbid(unsafe_code)]

mod nodes;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Simulated nodes and bulk clients for scale benchmarks.
#[derive(Debug, Parser)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Stand in for the first COUNT nodes of the config.
    Nodes {
        #[arg(long)]
        config: PathBuf,
        /// ctld's node address (default: the config's).
        #[arg(long)]
        controller: Option<String>,
        #[arg(long)]
        count: usize,
        /// Simulated seconds per real second.
        #[arg(long, default_value_t = 1.0)]
        warp: f64,
        /// Seconds between heartbeats of each node.
        #[arg(long, default_value_t = 10)]
        heartbeat: u64,
        /// Simulated jobs ignore SIGTERM: a cancelled job ends only when its grace time (the
        /// cancel's kill wait, in real seconds) is over, as a job that does not stop on SIGTERM
        /// would. By default a cancelled job ends at once.
        #[arg(long)]
        ignore_term: bool,
    },
    /// Submit COUNT jobs from CLIENTS concurrent connections.
    Submit {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        count: usize,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Submit the jobs held.
        #[arg(long)]
        hold: bool,
        /// GPUs per job (`--gres=gpu:N`).
        #[arg(long, default_value_t = 0)]
        gpus: u64,
        /// Simulated run time of each job, seconds.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Make each job look like `sbatch job.sh` from a login shell: an environment of about
        /// this many bytes (names, values and `=`/NUL separators), a 400-byte script, a command
        /// path, a submit line and a home working directory.
        #[arg(long, value_name = "ENV_BYTES")]
        sbatch_like: Option<usize>,
        /// Give each job this `--dependency` (e.g. `afterok:12`).
        #[arg(long)]
        dependency: Option<String>,
    },
    /// Time REPEAT job queries, from CLIENTS concurrent connections.
    Query {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long, default_value_t = 20)]
        repeat: usize,
        #[arg(long, default_value_t = 1)]
        clients: usize,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .init();
    // One connection per simulated node: as many descriptors as the hard limit allows.
    if let Ok((soft, hard)) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        match Args::parse().command {
            Command::Nodes { config, controller, count, warp, heartbeat, ignore_term } => {
                nodes::run(&config, controller, count, warp, heartbeat, ignore_term).await
            }
            Command::Submit { socket, count, clients, hold, gpus, seconds, sbatch_like, dependency } => {
                let shape = nodes::Shape { hold, gpus, seconds, dependency };
                nodes::submit(&socket, count, clients, &shape, sbatch_like).await
            }
            Command::Query { socket, repeat, clients } => nodes::query(&socket, repeat, clients).await,
        }
    })
}
