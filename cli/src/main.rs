//! `drover`, the one command-line binary. Invoked through a link named `sbatch`, `srun`,
//! `salloc`, `squeue`, `sacct`, `scancel`, `sinfo`, `scontrol`, `sshare`, `sprio`, `sreport`,
//! `sacctmgr`, `sdiag` or `sstat` it behaves as that Slurm command; invoked as `drover` it takes the applet as its
//! first argument (`drover sbatch …`) or runs an admin verb (`up`, `down`, `status`, `keygen`).

mod admin;
mod client;
mod localtime;
mod options;
mod query;
mod report;
mod salloc;
mod sbatch;
mod spank;
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
        "sdiag" => query::sdiag::run,
        "sstat" => query::sstat::run,
        "why" => query::why::run,
        "audit" => query::audit::run,
        "node" => query::node::run,
        "templates" => query::templates::run,
        "simulate" => query::simulate::run,
        "report" => report::run,
        "sreport" => report::sreport,
        "srun" => srun::run,
        "salloc" => salloc::run,
        "sattach" => |args| Ok(query::unsupported::run("sattach", &args)),
        "sbcast" => |args| Ok(query::unsupported::run("sbcast", &args)),
        "sgather" => |args| Ok(query::unsupported::run("sgather", &args)),
        "strigger" => |args| Ok(query::unsupported::run("strigger", &args)),
        _ => return None,
    })
}

fn main() {
    die_quietly_on_closed_output();
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let argv0 = args.first().map(|a| Path::new(a).file_name().unwrap_or_default().to_string_lossy().into_owned());
    let argv0 = argv0.unwrap_or_else(|| "drover".into());
    let (name, rest) = if let Some(run) = applet(&argv0) {
        let rest = run_applet(&argv0, run, args.split_off(1));
        (argv0, rest)
    } else {
        let verb = args.get(1).map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
        let rest = args.split_off(2.min(args.len()));
        match applet(&verb) {
            Some(run) => {
                let rest = run_applet(&verb, run, rest);
                (verb, rest)
            }
            None => ("drover".into(), admin::run(&verb, rest)),
        }
    };
    match rest {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            let closed = error.chain().any(|cause| {
                cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if closed && stdout_closed() {
                die_of_sigpipe();
            }
            eprintln!("{name}: error: {}", user_message(&error));
            std::process::exit(1);
        }
    }
}

/// A command whose output is closed early (`squeue | head -3`, `drover status | head`) ends as
/// the shell's own tools do: killed by SIGPIPE, with nothing printed. Rust ignores SIGPIPE, so
/// the write fails instead and `print!` panics; the panic hook catches exactly that panic and
/// lets the signal end the process. SIGPIPE stays ignored otherwise: a write to a socket the
/// controller closed must stay an error the command can retry, not its death.
fn die_quietly_on_closed_output() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        let printing =
            message.starts_with("failed printing to stdout") || message.starts_with("failed printing to stderr");
        if printing && message.contains("Broken pipe") {
            die_of_sigpipe();
        }
        default_hook(info);
    }));
}

/// Whether this process's standard output is a pipe or socket whose reader is gone (a write
/// there fails with EPIPE). A broken pipe to the controller is an error to report; one on the
/// output is the reader's choice.
fn stdout_closed() -> bool {
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut fds = [nix::poll::PollFd::new(stdout.as_fd(), nix::poll::PollFlags::empty())];
    nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).is_ok()
        && fds[0].revents().is_some_and(|r| r.intersects(nix::poll::PollFlags::POLLERR | nix::poll::PollFlags::POLLHUP))
}

/// Ends the process by SIGPIPE, quietly, as a shell tool writing to a closed pipe does.
fn die_of_sigpipe() -> ! {
    use nix::sys::signal::{SigHandler, Signal, raise, signal};
    // SAFETY: restoring the default disposition installs no handler; the process then ends by
    // the signal it raises.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
    let _ = raise(Signal::SIGPIPE);
    std::process::exit(141);
}

fn run_applet(name: &str, run: Applet, args: Vec<OsString>) -> anyhow::Result<i32> {
    if bare_version(name, &args) {
        println!("{}", options::help::VERSION);
        return Ok(0);
    }
    run(args)
}

/// `sbatch -V` (or `--version`) and nothing else, as tools probe for Slurm: answered before the
/// config is read and the SPANK plugins are loaded, which the commands that host plugins do
/// before parsing their options (plugins add options). The answer is the one the full parse
/// gives; the plugins' `init` does not run for it.
fn bare_version(name: &str, args: &[OsString]) -> bool {
    matches!(name, "sbatch" | "srun" | "salloc") && matches!(args, [only] if only == "-V" || only == "--version")
}

/// An error and its causes as a user reads them: joined by `: `, without Rust's `(os error N)`
/// suffix, and without a cause its outer message already shows (`path: No such file or
/// directory` rather than that followed by the same words again).
pub(crate) fn user_message(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        let text = strip_os_error(&text);
        if text.is_empty() || out.contains(text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(text);
    }
    out
}

/// `No such file or directory (os error 2)` → `No such file or directory`.
pub(crate) fn strip_os_error(text: &str) -> &str {
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') && text[at + 11..text.len() - 1].bytes().all(|b| b.is_ascii_digit()) => {
            &text[..at]
        }
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sacctmgr` printed for a missing config: the OS error twice, each with `(os error 2)`.
    #[test]
    fn messages_carry_no_rust_os_error_suffix_and_no_repeated_cause() {
        let io = std::io::Error::from_raw_os_error(2);
        let error =
            anyhow::Error::new(drover_shared::config::ConfigError::Io { path: "/etc/x.toml".into(), error: io });
        assert_eq!(user_message(&error), "/etc/x.toml: No such file or directory");
        let error = anyhow::Error::new(std::io::Error::from_raw_os_error(13)).context("opening /tmp/out");
        assert_eq!(user_message(&error), "opening /tmp/out: Permission denied");
        assert_eq!(strip_os_error("odd (os error x)"), "odd (os error x)");
    }

    /// Only a bare `-V`/`--version` of the commands that host plugins is answered early; with
    /// anything else beside it (`--wrap -V`, a script's own `-V`) the full parse decides.
    #[test]
    fn only_a_bare_version_is_answered_before_the_plugins_load() {
        let args = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        for name in ["sbatch", "srun", "salloc"] {
            assert!(bare_version(name, &args(&["-V"])));
            assert!(bare_version(name, &args(&["--version"])));
            assert!(!bare_version(name, &args(&["--wrap", "-V"])));
            assert!(!bare_version(name, &args(&["job.sh", "-V"])));
            assert!(!bare_version(name, &args(&[])));
        }
        assert!(!bare_version("sacctmgr", &args(&["-V"])));
        // What the full parse answers (`sbatch::tests::help_version_and_usage_answer_without_a_script`).
        assert_eq!(options::help::VERSION, "slurm 22.05.8");
    }

    /// Every command `drover` dispatches is named in `drover --help`, and so are the subcommands
    /// that were once missing from it (`node history`, `report … templates`).
    #[test]
    fn the_help_names_every_command() {
        let source = include_str!("main.rs");
        let names: Vec<&str> = source
            .lines()
            .filter_map(|line| line.trim().strip_prefix('"')?.split_once("\" =>").map(|(name, _)| name))
            .filter(|name| super::applet(name).is_some())
            .collect();
        assert!(names.len() >= 18, "read only {names:?} from the dispatch");
        let words: Vec<&str> = crate::admin::USAGE.split(|c: char| c.is_whitespace() || "|()".contains(c)).collect();
        for name in names {
            assert!(words.contains(&name), "`drover --help` does not name `{name}`");
        }
        assert!(crate::admin::USAGE.contains("node history"));
        assert!(crate::admin::USAGE.contains("report gpu|queue|failures|quota|templates"));
    }
}
