//! `drover`, the one command-line binary. Invoked through a link named `sbatch`, `srun`,
//! `salloc`, `squeue`, `sacct`, `scancel`, `sinfo`, `scontrol`, `sshare`, `sprio`, `sreport` or
//! `sacctmgr` it behaves as that Slurm command; invoked as `drover` it takes the applet as its
//! first argument (`drover sbatch …`) or runs an admin verb (`up`, `down`, `status`, `keygen`).

mod admin;
mod client;
mod localtime;
mod query;
mod report;
mod salloc;
mod sbatch;
mod srun;

use std::ffi::OsString;
use std::path::Path;

/// An applet's entry point: arguments after the command name, result is the process exit code.
type Applet = fn(Vec<OsString>) -> anyhow::Result<i32>;

fn applet(name: &str) -> Option<Applet> {
    Some(match name {
        "sbatch" => sbatch::run,
        "squeue" => query::squeue::run,
        "sacct" => query::sacct::run,
        "scancel" => query::scancel::run,
        "sinfo" => query::sinfo::run,
        "scontrol" => query::scontrol::run,
        "sshare" => query::sshare::run,
        "sacctmgr" => query::sacctmgr::run,
        "sprio" => query::sprio::run,
        "why" => query::why::run,
        "audit" => query::audit::run,
        "report" => report::run,
        "sreport" => report::sreport,
        "srun" => srun::run,
        "salloc" => salloc::run,
        _ => return None,
    })
}

fn main() {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let argv0 = args.first().map(|a| Path::new(a).file_name().unwrap_or_default().to_string_lossy().into_owned());
    let argv0 = argv0.unwrap_or_else(|| "drover".into());
    let (name, rest) = if let Some(run) = applet(&argv0) {
        (argv0, run_applet(run, args.split_off(1)))
    } else {
        let verb = args.get(1).map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
        let rest = args.split_off(2.min(args.len()));
        match applet(&verb) {
            Some(run) => (verb, run_applet(run, rest)),
            None => ("drover".into(), admin::run(&verb, rest)),
        }
    };
    match rest {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            eprintln!("{name}: error: {error:#}");
            std::process::exit(1);
        }
    }
}

fn run_applet(run: Applet, args: Vec<OsString>) -> anyhow::Result<i32> {
    run(args)
}
