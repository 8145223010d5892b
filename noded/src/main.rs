//! drover-noded entry point. `drover-noded --name N` runs the node daemon; the hidden
//! `drover-noded supervise --job-dir D --noded-socket S` is the per-job supervisor the daemon
//! starts for each job (the same binary, so a node has one executable to install); the hidden
//! `step`, `spank-slurmd` and `spank-job-script` subcommands are the step runner and the SPANK
//! helpers (`drover_noded::spank`).

#![deny(unsafe_code)]

use anyhow::Context;
use clap::{Parser, Subcommand};
use drover_noded::{daemon, supervisor};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The Drover node daemon.
#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

#[derive(Debug, clap::Args)]
struct DaemonArgs {
    /// Cluster configuration file.
    #[arg(long, env = "DROVER_CONF", default_value = "/etc/drover/cluster.toml")]
    config: PathBuf,
    /// This node's name, as in the config (default: the short host name).
    #[arg(long)]
    name: Option<String>,
    /// Where job directories and the supervisor socket live.
    #[arg(long, default_value = "/var/spool/drover")]
    state_dir: PathBuf,
    /// ctld's node address (default: the config's controller address).
    #[arg(long)]
    controller: Option<String>,
    /// Seconds between heartbeats.
    #[arg(long, default_value_t = 2)]
    heartbeat: u64,
    /// Print this host's CPUs, sockets, cores, threads, memory and GPUs (Slurm's `slurmd -C`,
    /// and as a `[[nodes]]` table for cluster.toml), then exit.
    #[arg(short = 'C', long = "print-hardware")]
    print_hardware: bool,
    /// Configless: fetch the config from the controller at these addresses (`host:port`,
    /// comma-separated; Slurm's `slurmd --conf-server`) instead of reading --config, and keep a
    /// copy in the state directory (docs/admin/configless.md).
    #[arg(long, value_name = "HOST:PORT[,...]")]
    conf_server: Option<String>,
    /// The cluster key a configless host authenticates with (placed by hand on each host).
    #[arg(long, default_value = "/etc/drover/cluster.key")]
    key: PathBuf,
    /// Run as a login host's daemon: no jobs, only the token socket through which the host's
    /// users reach ctld (and, with --conf-server, the config copy).
    #[arg(long)]
    login: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one job's supervisor (started by the daemon, not by hand).
    #[command(hide = true)]
    Supervise {
        #[arg(long)]
        job_dir: PathBuf,
        #[arg(long)]
        noded_socket: PathBuf,
    },
    /// Run this node's tasks of one srun step (started by the daemon, not by hand).
    #[command(hide = true)]
    Step {
        #[arg(long)]
        step_dir: PathBuf,
    },
    /// Run one task in its OCI container (started for `--container` jobs, not by hand).
    #[command(hide = true)]
    Container {
        #[arg(long)]
        plan: String,
        #[arg(last = true)]
        argv: Vec<String>,
    },
    /// Host the SPANK plugins' slurmd context while the daemon runs (started by the daemon).
    #[command(hide = true)]
    SpankSlurmd,
    /// Run the SPANK plugins' job_prolog or job_epilog (started by a job's supervisor).
    #[command(hide = true)]
    SpankJobScript { hook: String },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::Supervise { job_dir, noded_socket }) = args.command {
        std::process::exit(supervisor::main(&job_dir, &noded_socket));
    }
    if let Some(Command::Step { step_dir }) = args.command {
        std::process::exit(drover_noded::step::main(&step_dir));
    }
    if let Some(Command::Container { plan, argv }) = args.command {
        std::process::exit(drover_noded::container::run::main(&plan, argv));
    }
    if let Some(Command::SpankSlurmd) = args.command {
        std::process::exit(drover_noded::spank::slurmd_main());
    }
    if let Some(Command::SpankJobScript { hook }) = args.command {
        std::process::exit(drover_noded::spank::job_script_main(&hook));
    }
    let args = args.daemon;
    if args.print_hardware {
        return print_hardware(args.name);
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let name = match args.name.clone() {
        Some(name) => name,
        None => nix::unistd::gethostname()?.to_string_lossy().split('.').next().unwrap_or_default().to_owned(),
    };
    // Configless: the config comes from the controller, before anything reads it.
    let conf = match &args.conf_server {
        Some(servers) => {
            let key = drover_shared::auth::ClusterKey::load(&args.key)?;
            drover_shared::statedir::prepare(&args.state_dir, 0o755)?;
            let conf = drover_noded::configless::ConfServer {
                addresses: servers.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned).collect(),
                key: Arc::new(key),
                host: name.clone(),
                state_dir: args.state_dir.clone(),
            };
            conf.obtain_at_start()?;
            Some(conf)
        }
        None => None,
    };
    let config_file = conf.as_ref().map_or_else(|| args.config.clone(), drover_noded::configless::ConfServer::cache);
    let config = drover_shared::config::Config::load(&config_file)?;
    // The key: a configless host's own (--key); else the config's.
    let key = match &conf {
        Some(conf) => conf.key.clone(),
        None => Arc::new(drover_shared::auth::ClusterKey::load(&config.key_file)?),
    };
    if args.login {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        return runtime.block_on(async {
            let shutdown = async {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
                tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
            };
            Ok(drover_noded::configless::run_login(&args.state_dir, key, name, conf, shutdown).await?)
        });
    }
    // Before any thread starts; job supervisors inherit the variable (`spank` module).
    drover_noded::sys::process::set_env_single_threaded(drover_noded::spank::PLUGSTACK_ENV, &config.plugstack)?;
    let node = config.node(&name).with_context(|| match &conf {
        Some(_) => format!("node `{name}` is not in the controller's config (copy: {})", config.path.display()),
        None => format!("node `{name}` is not in {}", config.path.display()),
    })?;
    let (gpus, source) = drover_noded::nvml::node_gpus(&node.gpus, &node.gpu_files).map_err(|message| {
        anyhow::anyhow!("the GPU inventory of node `{name}` disagrees with {}: {message}", config.path.display())
    })?;
    for gpu in &gpus {
        let files: Vec<String> = gpu.files.iter().map(|path| path.display().to_string()).collect();
        tracing::info!(
            index = gpu.device.index,
            gpu_type = gpu.device.gpu_type,
            uuid = gpu.device.uuid,
            files = files.join(","),
            source,
            "GPU"
        );
    }
    let gpu_files = gpus.iter().map(|gpu| gpu.files.clone()).collect();
    let isolation = drover_noded::isolation::NodeIsolation::set_up(node, &args.state_dir, gpu_files);
    // After the isolation set-up (which may move noded into its own cgroup leaf, where
    // supervisors must start too) and before the runtime's threads.
    let launcher = supervisor::Launcher::start().map(Arc::new);
    if launcher.is_none() {
        tracing::warn!("no supervisor launcher (noded already runs threads): each job executes drover-noded supervise");
    }
    let exe = std::env::current_exe().context("locating the drover-noded binary")?;
    // The SPANK slurmd context: `init` now (a failure stops noded, as it stops slurmd),
    // `slurmd_exit` when `slurmd_plugins` is dropped on the way out. After the launcher's fork,
    // which must not hold the helper's pipe.
    let slurmd_plugins = drover_noded::spank::SlurmdPlugins::start(&exe)?;
    if let Some(plugins) = &slurmd_plugins {
        tracing::info!(pid = plugins.pid(), "SPANK plugins initialized in the slurmd context");
    }
    // A node whose real CPUs or memory fall short of its declaration is drained at registration
    // (with Slurm's reason), unless the config's declaration wins (`config_overrides`).
    let hardware = drover_noded::hardware::this_host();
    let shortfall = if config.config_overrides() {
        None
    } else {
        hardware.and_then(|hardware| drover_noded::hardware::shortfall(&hardware, node.cpus, node.real_memory_mb))
    };
    if let Some(reason) = &shortfall {
        tracing::warn!(node = name, reason, "this host has less than the config declares; the node will be drained");
    }
    let settings = daemon::NodeSettings {
        name: name.clone(),
        controller_from: args.controller.is_none().then(|| config_file.clone()),
        controller: args.controller.unwrap_or_else(|| config.controller_addresses().join(",")),
        state_dir: args.state_dir.clone(),
        key,
        conf,
        cpus: node.cpus,
        real_memory_mb: node.real_memory_mb,
        gpus: gpus.into_iter().map(|gpu| gpu.device).collect(),
        heartbeat: Duration::from_secs(args.heartbeat.max(1)),
        exe,
        launcher,
        isolation,
        scripts: drover_noded::prolog::JobScripts {
            prolog: node.prolog.clone(),
            epilog: node.epilog.clone(),
            timeout_seconds: node.prolog_epilog_timeout,
        },
        shortfall,
        oci: config.oci.clone(),
        health_check: node
            .health_check_program
            .clone()
            .map(|program| (program, Duration::from_secs(u64::from(node.health_check_interval)))),
        reboot_program: node.reboot_program.clone(),
    };
    tracing::info!(node = name, controller = settings.controller, "drover-noded starting");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let isolation = settings.isolation.clone();
    runtime.block_on(async {
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
            tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
        };
        daemon::run(settings, shutdown).await
    })?;
    isolation.tear_down();
    drop(slurmd_plugins);
    Ok(())
}

/// `drover-noded -C`: this host's hardware, and its GPUs where NVML has them.
fn print_hardware(name: Option<String>) -> anyhow::Result<()> {
    let hardware = drover_noded::hardware::this_host().context("reading /sys/devices/system/cpu and /proc/meminfo")?;
    let name = match name {
        Some(name) => name,
        None => nix::unistd::gethostname()?.to_string_lossy().split('.').next().unwrap_or_default().to_owned(),
    };
    let gpus = drover_noded::nvml::detected_types().unwrap_or_default();
    let uptime = std::fs::read_to_string("/proc/uptime").ok();
    let uptime = uptime.as_deref().and_then(|t| t.split('.').next()?.parse().ok()).unwrap_or(0);
    print!("{}", drover_noded::hardware::describe(&name, &hardware, &gpus, uptime));
    Ok(())
}
