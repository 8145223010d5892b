//! `sbatch`: submit a batch script.
//!
//! The flow follows ripgrep's split between "low" and "high" arguments. Every option is defined once
//! in [`crate::options`], whose table also serves srun's and salloc's command lines
//! ([`crate::srun::options`]); the command line ([`crate::options::layers`]), the `SBATCH_*`
//! environment and the script's `#SBATCH` directives ([`directives`]) are each read through those
//! definitions into their own [`LowArgs`](crate::options::lowargs::LowArgs) ([`layers`]); the layers are merged by precedence (command line over environment over
//! directives) and checked once into a `JobSpec` ([`hiargs`]), which is sent to ctld. Nothing is
//! sent — no connection is even opened — unless every layer and the merged whole are valid.
//!
//! Messages and exit codes follow Slurm's sbatch: `sbatch: error: …` on stderr and exit 1 (or
//! `SLURM_EXIT_ERROR`) for anything the user can fix, `Submitted batch job N` on success.

mod directives;
mod environment;
mod hiargs;
#[cfg(test)]
mod hostile;
mod layers;
mod system;
#[cfg(test)]
mod tests;

use crate::options::defs::{self, Ctx};
use crate::options::help;
use crate::options::layers::{Layer, Origin, UsageError};
use crate::options::lowargs::Action;
use crate::spank;
use drover_shared::UnixTime;
use drover_shared::grammar::date::Calendar;
use drover_shared::job::JobSpec;
use drover_shared::proto::client::{ErrorCode, Request, Response};
use hiargs::{Script, ScriptSource, SubmitContext};
use std::ffi::OsString;
use std::io::Read;
use std::path::Path;

/// How the script is named in messages when it comes from standard input.
const STDIN_NAME: &str = "(stdin)";

/// How the script is named in messages when `--wrap` generated it.
const WRAP_NAME: &str = "(--wrap)";

/// The exit code for errors: `SLURM_EXIT_ERROR` when set to a number, else 1.
fn exit_error() -> i32 {
    std::env::var("SLURM_EXIT_ERROR").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1)
}

/// Prints `sbatch: error: ` before each line of `message` and returns the error exit code.
fn fail(message: &str) -> i32 {
    for line in message.lines() {
        eprintln!("sbatch: error: {line}");
    }
    exit_error()
}

/// sbatch's environment, leaving out variables that are not UTF-8 (a job environment is text).
fn process_environment() -> Vec<(String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect()
}

/// Finds a script named on the command line: a name with a `/` as given, else the working
/// directory, else `$PATH`.
fn resolve_script(name: &str, cwd: &str, env: &[(String, String)]) -> String {
    if name.contains('/') || Path::new(cwd).join(name).is_file() {
        return hiargs::absolute(cwd, name);
    }
    let path_var = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or_default();
    path_var
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| hiargs::absolute(cwd, &format!("{dir}/{name}")))
        .find(|candidate| Path::new(candidate).is_file())
        .unwrap_or_else(|| hiargs::absolute(cwd, name))
}

/// Reads the script named on the command line (`Some`) or standard input (`None`): its absolute
/// path (empty for stdin) and its bytes.
type ReadScript<'a> = &'a dyn Fn(Option<&str>) -> Result<(String, Vec<u8>), String>;

/// What sbatch reads of the world, passed in so that [`prepare`] is a pure function.
pub(crate) struct World<'a> {
    pub(crate) now: UnixTime,
    pub(crate) calendar: &'a dyn Calendar,
    /// The working directory, absolute.
    pub(crate) cwd: String,
    pub(crate) hostname: String,
    pub(crate) environment: Vec<(String, String)>,
    pub(crate) umask: u32,
    pub(crate) prio_process: i32,
    /// sbatch's soft resource limits.
    pub(crate) rlimits: Vec<(String, u64)>,
    pub(crate) read_script: ReadScript<'a>,
    /// Takes the plugins' options out of the script's directives ([`spank::Plugins`]), with the
    /// script's name for messages.
    pub(crate) plugin_directives: &'a dyn Fn(&mut directives::Header, &str) -> Result<(), String>,
}

/// What sbatch decided to do.
#[derive(Debug)]
pub(crate) enum Prepared {
    /// Print this on stdout and exit 0 (`--help`, `--usage`, `--version`).
    Answer(String),
    /// Submit the job.
    Submit {
        hi: Box<hiargs::HiArgs>,
        /// Error lines to print before submitting, which do not stop it (legacy `#SLURM`).
        notes: Vec<String>,
        /// Warning lines to print before submitting: options accepted and ignored.
        warnings: Vec<String>,
        /// The `-v` report of every option and where it came from.
        report: String,
    },
}

/// Why sbatch stops without submitting.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The command line cannot be read: printed getopt-style, then the "Try" line.
    Usage(String),
    /// Anything else: each line printed after `sbatch: error: `.
    Error(String),
}

/// Renders what each layer said, for `-v`.
fn report(layers: &[&Layer], script_name: &str) -> String {
    let mut out = String::from("defined options\n");
    for given in layers.iter().flat_map(|l| &l.given) {
        let origin = match &given.origin {
            Origin::CommandLine => "command line".to_owned(),
            Origin::Environment(var) => (*var).to_owned(),
            Origin::Script(line) => format!("{script_name}:{line}"),
        };
        let value = given.value.as_deref().map(|v| format!("={v}")).unwrap_or_default();
        out.push_str(&format!("  --{}{value}  ({origin})\n", given.def.long));
    }
    out.push_str("end of defined options\n");
    out
}

/// Everything sbatch does before it talks to ctld: read the three layers, merge them, check the
/// whole and build the job.
pub(crate) fn prepare(args: &[String], world: &World<'_>) -> Result<Prepared, Failure> {
    let ctx = Ctx { now: world.now, calendar: world.calendar };
    let command_line = crate::options::layers::command_line(args, &ctx, defs::Command::Sbatch)
        .map_err(|UsageError(message)| Failure::Usage(message))?;
    match command_line.layer.args.action {
        Some(Action::Help) => return Ok(Prepared::Answer(help::help(defs::Command::Sbatch))),
        Some(Action::Usage) => return Ok(Prepared::Answer(help::usage(defs::Command::Sbatch))),
        Some(Action::Version) => return Ok(Prepared::Answer(format!("{}\n", help::VERSION))),
        None => {}
    }
    if let Some(message) = &command_line.error {
        return Err(Failure::Error(message.clone()));
    }
    let env_layer = layers::environment(&world.environment, &ctx).map_err(Failure::Error)?;

    let script = match (&command_line.layer.args.wrap, command_line.operands.split_first()) {
        (Some(_), Some(_)) => return Err(Failure::Error("script arguments not permitted with --wrap option".into())),
        (Some(command), None) => {
            Script { source: ScriptSource::Wrap, bytes: hiargs::wrap_script(command), args: Vec::new() }
        }
        (None, Some((name, _))) if name == ":" => {
            return Err(Failure::Error("heterogeneous jobs (`:` on the command line) are not supported yet".into()));
        }
        (None, Some((name, script_args))) => {
            let (path, bytes) = (world.read_script)(Some(name)).map_err(Failure::Error)?;
            Script { source: ScriptSource::File { name: name.clone(), path }, bytes, args: script_args.to_vec() }
        }
        (None, None) => {
            let (_, bytes) = (world.read_script)(None).map_err(Failure::Error)?;
            Script { source: ScriptSource::Stdin, bytes, args: Vec::new() }
        }
    };
    let script_name = match &script.source {
        ScriptSource::File { name, .. } => name.clone(),
        ScriptSource::Stdin => STDIN_NAME.to_owned(),
        ScriptSource::Wrap => WRAP_NAME.to_owned(),
    };
    directives::check_script(&script.bytes).map_err(|e| Failure::Error(e.to_string()))?;
    let mut header =
        directives::parse_header(&script.bytes).map_err(|e| Failure::Error(format!("{script_name}:{e}")))?;
    (world.plugin_directives)(&mut header, &script_name).map_err(Failure::Error)?;
    let notes = header
        .legacy_line
        .map(|line| format!("{script_name}:{line}: change #SLURM to #SBATCH in your script and check that the options are valid for sbatch"))
        .into_iter()
        .collect();
    let script_layer = layers::directives(&header, &script_name, &ctx).map_err(Failure::Error)?;

    let low = command_line.layer.args.clone().over(env_layer.args.clone()).over(script_layer.args.clone());
    let submit_ctx = SubmitContext {
        cwd: world.cwd.clone(),
        hostname: world.hostname.clone(),
        environment: world.environment.clone(),
        umask: world.umask,
        prio_process: world.prio_process,
        rlimits: world.rlimits.clone(),
        argv: std::iter::once("sbatch").chain(args.iter().map(String::as_str)).map(str::to_owned).collect(),
    };
    let hi = hiargs::build(low, script, &submit_ctx).map_err(Failure::Error)?;
    let layers = [&command_line.layer, &env_layer, &script_layer];
    let mut warnings: Vec<String> = Vec::new();
    for given in layers.iter().flat_map(|l| &l.given).filter(|g| g.def.is_ignored()) {
        let warning = format!("{} is accepted and ignored: Drover has no use for this hint", given.def.display_name());
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    let report = report(&layers, &script_name);
    Ok(Prepared::Submit { hi: Box::new(hi), notes, warnings, report })
}

/// Runs `sbatch`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args: Vec<String> = match args.into_iter().map(OsString::into_string).collect() {
        Ok(args) => args,
        Err(bad) => return Ok(fail(&format!("argument {} is not valid UTF-8", bad.to_string_lossy()))),
    };
    let Ok(cwd) = std::env::current_dir() else {
        return Ok(fail("cannot read the current working directory"));
    };
    let Some(cwd) = cwd.to_str().map(str::to_owned) else {
        return Ok(fail("the current working directory is not valid UTF-8"));
    };
    let environment = process_environment();
    let plugins = match spank::Plugins::start(defs::Command::Sbatch, &environment) {
        Ok(plugins) => plugins,
        Err(message) => return Ok(fail(&message)),
    };
    let args = match plugins.take_options(args) {
        Ok(args) => args,
        Err(message) => return Ok(fail(&message)),
    };
    let read_script = |name: Option<&str>| -> Result<(String, Vec<u8>), String> {
        match name {
            Some(name) => {
                let path = resolve_script(name, &cwd, &environment);
                let bytes = std::fs::read(&path)
                    .map_err(|e| format!("Unable to open file {name}: {}", crate::strip_os_error(&e.to_string())))?;
                Ok((path, bytes))
            }
            None => {
                let mut bytes = Vec::new();
                std::io::stdin()
                    .lock()
                    .read_to_end(&mut bytes)
                    .map_err(|e| format!("Unable to read the batch script from standard input: {e}"))?;
                Ok((String::new(), bytes))
            }
        }
    };
    let world = World {
        now: drover_shared::now(),
        calendar: &crate::localtime::LocalCalendar,
        cwd: cwd.clone(),
        hostname: system::hostname(),
        environment: environment.clone(),
        umask: system::umask(),
        prio_process: system::priority(),
        rlimits: drover_shared::job::current_rlimits(),
        read_script: &read_script,
        plugin_directives: &|header, name| directives::take_plugin_options(&plugins, header, name),
    };
    match prepare(&args, &world) {
        Ok(Prepared::Answer(text)) => {
            let plugin_help =
                if args.iter().any(|arg| arg == "--help" || arg == "-h") { plugins.help() } else { String::new() };
            print!("{text}{plugin_help}");
            Ok(0)
        }
        Ok(Prepared::Submit { mut hi, notes, warnings, report }) => {
            if let Err(message) = plugins.finish(&mut hi.job_spec.environment) {
                return Ok(fail(&message));
            }
            for note in &notes {
                fail(note);
            }
            for warning in &warnings {
                eprintln!("sbatch: warning: {warning}");
            }
            if hi.verbose > 0 {
                report.lines().for_each(|line| eprintln!("sbatch: {line}"));
            }
            Ok(submit(*hi))
        }
        Err(Failure::Usage(message)) => {
            eprintln!("sbatch: {message}");
            eprintln!("Try \"sbatch --help\" for more information");
            Ok(exit_error())
        }
        Err(Failure::Error(message)) => Ok(fail(&message)),
    }
}

/// What sbatch prints and returns once ctld has answered (or could not be reached).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) stdout: String,
    /// Lines for stderr, complete with their `sbatch: ` prefix.
    pub(crate) stderr: Vec<String>,
    /// `true` for success (exit 0), `false` for the error exit code.
    pub(crate) ok: bool,
}

/// Turns ctld's answer into sbatch's output, as Slurm's sbatch words it.
pub(crate) fn outcome(answer: anyhow::Result<Response>, hi: &hiargs::HiArgs) -> Outcome {
    let failed = |mut stderr: Vec<String>, message: &str| {
        stderr.push(format!("sbatch: error: Batch job submission failed: {message}"));
        Outcome { stdout: String::new(), stderr, ok: false }
    };
    match answer {
        Ok(Response::Submitted { job_id }) => {
            let stdout = match (hi.quiet, hi.parsable, &hi.clusters) {
                (true, _, _) => String::new(),
                (false, true, None) => format!("{job_id}\n"),
                (false, true, Some(cluster)) => format!("{job_id};{cluster}\n"),
                (false, false, None) => format!("Submitted batch job {job_id}\n"),
                (false, false, Some(cluster)) => format!("Submitted batch job {job_id} on cluster {cluster}\n"),
            };
            Outcome { stdout, stderr: Vec::new(), ok: true }
        }
        Ok(Response::WillRun { job_id, start, cpus, nodes, partition }) => {
            let line =
                will_run_line("sbatch", job_id, start, cpus, &nodes, &partition, crate::query::format::Tz::Local);
            Outcome { stdout: String::new(), stderr: vec![line], ok: true }
        }
        Ok(Response::Error { code, detail }) if hi.test_only => {
            let mut stderr = Vec::new();
            if hi.verbose > 0 && !detail.is_empty() {
                stderr.push(format!("sbatch: {detail}"));
            }
            // Slurm prints this one through `slurm_perror`: no `sbatch: error:` prefix.
            stderr.push(format!("allocation failure: {}", code.message()));
            Outcome { stdout: String::new(), stderr, ok: false }
        }
        Ok(Response::Error { code, detail }) => {
            let mut stderr = Vec::new();
            if code == ErrorCode::InvalidPartition && !hi.job_spec.partitions.is_empty() {
                stderr
                    .push(format!("sbatch: error: invalid partition specified: {}", hi.job_spec.partitions.join(",")));
            }
            if hi.verbose > 0 && !detail.is_empty() {
                stderr.push(format!("sbatch: {detail}"));
            } else if code == ErrorCode::InvalidSpec && !detail.is_empty() {
                // Slurm's text alone ("Invalid job specification") does not say what to fix.
                stderr.push(format!("sbatch: error: {}", drover_shared::text::printable(&detail)));
            }
            failed(stderr, code.message())
        }
        Ok(other) => {
            let stderr = if hi.verbose > 0 {
                vec![format!("sbatch: unexpected answer from the controller: {other:?}")]
            } else {
                Vec::new()
            };
            failed(stderr, ErrorCode::Internal.message())
        }
        Err(e) => {
            let stderr = if hi.verbose > 0 { vec![format!("sbatch: {e:#}")] } else { Vec::new() };
            failed(stderr, "Unable to contact slurm controller (connect failure)")
        }
    }
}

/// `--test-only`'s answer, as Slurm's sbatch (srun, salloc: `command`) words it.
pub(crate) fn will_run_line(
    command: &str,
    job_id: drover_shared::job::JobId,
    start: drover_shared::UnixTime,
    cpus: u32,
    nodes: &[String],
    partition: &str,
    tz: crate::query::format::Tz,
) -> String {
    format!(
        "{command}: Job {job_id} to start at {} using {cpus} processors on nodes {} in partition {partition}",
        crate::query::format::timestamp(start, tz),
        drover_shared::hostlist::compress(nodes)
    )
}

/// Sends the job and prints the outcome; returns the exit code.
fn submit(mut hi: hiargs::HiArgs) -> i32 {
    if let Some(wanted) = hi.clusters.take() {
        // Drover serves one cluster: `-M` must name it (a list must contain it).
        let cluster = match crate::client::call(&Request::Ping) {
            Ok(Response::Pong { cluster, .. }) => cluster,
            _ => return fail("Batch job submission failed: Unable to contact slurm controller (connect failure)"),
        };
        if !wanted.split(',').any(|name| name == cluster) {
            return fail(&format!(
                "'{wanted}' can't be reached now, or it is an invalid entry for --cluster.  Use 'sacctmgr list clusters' to see available clusters."
            ));
        }
        hi.clusters = Some(cluster);
    }
    // The spec moves into the request; the partitions stay behind for the error message.
    let partitions = hi.job_spec.partitions.clone();
    let job_spec = std::mem::replace(&mut hi.job_spec, JobSpec { partitions, ..JobSpec::default() });
    let answer = if hi.test_only {
        crate::client::call(&Request::TestOnly(Box::new(job_spec)))
    } else {
        crate::client::submit(None, job_spec, "sbatch")
    };
    let submitted = match &answer {
        Ok(Response::Submitted { job_id }) => Some(*job_id),
        _ => None,
    };
    let outcome = outcome(answer, &hi);
    print!("{}", outcome.stdout);
    outcome.stderr.iter().for_each(|line| eprintln!("{line}"));
    match (outcome.ok, submitted) {
        (true, Some(job_id)) if hi.wait => {
            use std::io::Write;
            let _ = std::io::stdout().flush();
            match wait_for(job_id) {
                Ok(code) => code,
                Err(e) => fail(&format!("--wait: {e:#}")),
            }
        }
        (true, _) => 0,
        (false, _) => exit_error(),
    }
}

/// A query of `--wait`'s: a controller that restarts or fails over while the job runs is waited
/// out (`crate::client::OUTAGE_PATIENCE` for each query), never taken for the end of the job.
fn patiently(request: &Request) -> anyhow::Result<Response> {
    use crate::client::{OUTAGE_PATIENCE, Resend, call_patiently};
    call_patiently(None, request, Resend::Safe, "sbatch", OUTAGE_PATIENCE)
}

/// `--wait`: polls ctld until the job, or every record of the array, has ended; returns the
/// exit code Slurm's sbatch gives: the job's exit code, 1 for a job ended by a signal, and the
/// highest of them for an array.
fn wait_for(job_id: drover_shared::job::JobId) -> anyhow::Result<i32> {
    let mut delay = std::time::Duration::from_millis(250);
    loop {
        let query = drover_shared::proto::client::JobQuery {
            job_ids: vec![job_id],
            include_finished: true,
            ..Default::default()
        };
        let jobs = match patiently(&Request::QueryJobs(query))? {
            Response::Jobs { jobs, .. } if !jobs.is_empty() => jobs,
            // Aged out of ctld's memory: accounting has the final records.
            Response::Jobs { .. } => {
                let query = drover_shared::proto::client::AccountingQuery {
                    job_ids: vec![job_id],
                    all_users: true,
                    ..Default::default()
                };
                match patiently(&Request::QueryAccounting(query))? {
                    Response::Accounting { jobs, .. } => jobs,
                    other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
                }
            }
            Response::Error { code, .. } => anyhow::bail!("{}", code.message()),
            other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        };
        if !jobs.is_empty() && jobs.iter().all(|j| j.state().is_terminal()) {
            let code = jobs
                .iter()
                .map(|j| match j.exit_status.parts() {
                    (_, signal) if signal != 0 => 1,
                    (code, _) => code,
                })
                .max()
                .unwrap_or(0);
            return Ok(code);
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(std::time::Duration::from_secs(2));
    }
}
