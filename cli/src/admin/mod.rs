//! The `drover` admin verbs: `up`, `down`, `status` (a complete single-host cluster), `install`
//! (Drover on a real host, with its systemd units) and `keygen`.

mod cluster;
mod install;

use anyhow::{Context, bail};
use std::ffi::OsString;
use std::path::PathBuf;

pub(crate) const USAGE: &str = "\
usage: drover <command> [options]

Slurm commands (also available through links of these names):
  sbatch srun salloc squeue sacct scancel sinfo scontrol sshare sprio sreport sacctmgr sdiag sstat
  sattach sbcast sgather strigger (not supported, each says why)

Drover's own:
  why JOBID                             every reason the job waits, with the numbers
  report gpu|queue|failures|quota|templates
                                        usage reports (--csv, --json)
  templates                             the job templates you may use (operators: all)
  node history NODE [-n N] [-P]         a node's drains, downs, resumes and job failures
  audit [--user U] [--action A] [--job N] [--since T] [--until T] [-P]
                                        the controller's audit log (users see their own records)
  simulate --config FILE [--from T] [--to T] [--json]
                                        replay recorded jobs under a candidate config (operators)

Local cluster:
  up      [--home DIR] [--config FILE] [--replicas N]
                                        start ctld and a noded per node (only what is missing);
                                        --replicas 3 (3 to 9): replicated controllers on this
                                        host (docs/admin/ha.md), kept by later `up`s. A replica
                                        that stops (it exits when it loses the lead) is missing:
                                        run `up` again, it is their supervisor here. On a home
                                        that ran one controller, --replicas 3 converts it to
                                        replicas and --replicas 1 back, jobs and ids kept
  down    [--home DIR]                  stop what `up` started
  status  [--home DIR]                  say what runs
  keygen  [FILE]                        create a cluster key (default: the config's key_file)

DIR defaults to $DROVER_HOME, else ./.drover; FILE to $DROVER_CONF, else the file DIR's cluster.toml
includes, else etc/cluster.toml. Edit FILE, then `drover up` or `scontrol reconfigure` applies it.
After `up`, `source DIR/env` puts sbatch, squeue, … first on PATH; DIR/bin/sbatch (…) work without.

Installed system (see docs/admin/install.md):
  install [--root DIR] [--prefix DIR] [--config FILE] [--key FILE]
                                        binaries, command links, systemd units, /etc/drover,
                                        /var/lib/drover, /var/spool/drover (`drover install --help`)";

/// Options shared by the cluster verbs.
pub(crate) struct ClusterArgs {
    pub(crate) home: PathBuf,
    pub(crate) config: Option<PathBuf>,
    /// `--replicas N`: 1 for one controller, 3 or more for replicas; `None` keeps what the home runs.
    pub(crate) replicas: Option<usize>,
}

fn parse(args: Vec<OsString>) -> anyhow::Result<ClusterArgs> {
    let mut home = None;
    let mut config = None;
    let mut replicas = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let arg = arg.to_string_lossy().into_owned();
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
            None => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next().map(|v| v.to_string_lossy().into_owned()));
        match key.as_str() {
            "--home" => home = Some(PathBuf::from(value().context("--home needs a directory")?)),
            "--config" => config = Some(PathBuf::from(value().context("--config needs a file")?)),
            "--replicas" => {
                let n = value().context("--replicas needs a number")?;
                match n.parse::<usize>() {
                    Ok(n @ (1 | 3..=9)) => replicas = Some(n),
                    _ => bail!("--replicas {n}: give 1 (one controller) or 3 to 9 (two survive no failure)"),
                }
            }
            _ => bail!("unknown option `{arg}`\n\n{USAGE}"),
        }
    }
    let home =
        home.or_else(|| std::env::var_os("DROVER_HOME").map(PathBuf::from)).unwrap_or_else(|| PathBuf::from(".drover"));
    let home = std::path::absolute(&home).with_context(|| format!("resolving {}", home.display()))?;
    Ok(ClusterArgs { home, config, replicas })
}

/// Runs an admin verb.
pub(crate) fn run(verb: &str, args: Vec<OsString>) -> anyhow::Result<i32> {
    let help = args.iter().any(|a| a == "-h" || a == "--help");
    match verb {
        "up" | "down" | "status" if help => {
            println!("{USAGE}");
            Ok(0)
        }
        "install" => install::run(args),
        "up" => cluster::up(&parse(args)?),
        "down" => cluster::down(&parse(args)?),
        "status" => cluster::status(&parse(args)?),
        "keygen" => keygen(args),
        "" | "help" | "-h" | "--help" => {
            println!("{USAGE}");
            Ok(0)
        }
        "-V" | "--version" => {
            println!("drover {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        _ => bail!("unknown command `{verb}`\n\n{USAGE}"),
    }
}

fn keygen(args: Vec<OsString>) -> anyhow::Result<i32> {
    let path = match args.first() {
        Some(path) => PathBuf::from(path),
        None => drover_shared::config::Config::load(&crate::client::config_path())?.key_file,
    };
    drover_shared::auth::ClusterKey::generate(&path)?;
    println!("wrote cluster key {} (mode 0600)", path.display());
    Ok(0)
}
