//! Pieces every query command needs: getopt-like argument parsing through clap with Slurm's exit
//! codes, user and job-state lists, job id lists, and the job facts several commands print the
//! same way (memory, TRES strings, the `N/A`-style placeholders).

use anyhow::{Context, bail};
use clap::Parser;
use drover_shared::grammar::mem::format_mem_mb;
use drover_shared::job::{JobId, JobInfo, JobState, MemRequest};
use drover_shared::proto::client::Response;
use std::ffi::OsString;

/// Parses `args` (without the command name) into `P`. `--help` prints and yields `Err(0)`; a
/// usage error prints `<command>: error: <what>` and Slurm's hint, and yields `Err(1)`, Slurm's
/// status for a bad option (clients such as Snakemake rely on it).
pub(crate) fn parse_args<P: Parser>(command: &str, args: Vec<OsString>) -> Result<P, i32> {
    if let Some(text) = usage_or_version::<P>(command, &args) {
        print!("{text}");
        return Err(0);
    }
    let argv = std::iter::once(OsString::from(command)).chain(args);
    let clap_command = P::command().after_help(format!(
        "Help options:\n      --help                    show this help message\n      \
         --usage                   display a brief summary of {command} options\n  \
         -V, --version                 display the Slurm release Drover answers to"
    ));
    clap_command.try_get_matches_from(argv).and_then(|matches| P::from_arg_matches(&matches)).map_err(|error| {
        if !error.use_stderr() {
            // Nothing sensible is left to do when stdout is gone.
            let _ = error.print();
            return 0;
        }
        if let Some(message) = unknown_option(&error) {
            eprintln!("{command}: {message}\nTry \"{command} --help\" for more information");
            return 1;
        }
        let rendered = error.render().to_string();
        let what = rendered.lines().next().unwrap_or_default();
        let what = what.strip_prefix("error: ").unwrap_or(what);
        eprintln!("{command}: error: {what}\nTry \"{command} --help\" for more information");
        1
    })
}

/// An option the command does not know, in getopt's words, as Slurm's commands say it
/// (`unrecognized option '--frob'`, `invalid option -- 'Z'`); `None` for other errors.
fn unknown_option(error: &clap::Error) -> Option<String> {
    if error.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let Some(clap::error::ContextValue::String(arg)) = error.get(clap::error::ContextKind::InvalidArg) else {
        return None;
    };
    Some(match arg.strip_prefix('-') {
        Some(short) if !short.starts_with('-') && short.chars().count() == 1 => format!("invalid option -- '{short}'"),
        _ => format!("unrecognized option '{arg}'"),
    })
}

/// `--help` in the layout Slurm's sacct and sstat print (`CMD [<OPTION>]`, `Valid <OPTION> values
/// are:`, each option as `-j, --jobs:` over its description), generated from the options `P`
/// takes.
pub(crate) fn option_list_help<P: clap::CommandFactory>(command: &str) -> String {
    let mut out = format!("{command} [<OPTION>]\n    Valid <OPTION> values are:\n");
    for arg in P::command().get_arguments().filter(|a| !a.is_hide_set() && !a.is_positional()) {
        let name = match (arg.get_short(), arg.get_long()) {
            (Some(c), Some(long)) => format!("-{c}, --{long}"),
            (None, Some(long)) => format!("--{long}"),
            (Some(c), None) => format!("-{c}"),
            (None, None) => continue,
        };
        let about = arg.get_help().map(ToString::to_string).unwrap_or_default();
        out.push_str(&format!("     {name}:\n\t           {about}\n"));
    }
    out
}

/// The answer to `--usage` (every option in brackets, in Slurm's layout) or to `-V`/`--version`
/// (`slurm 22.05.8`, the release Drover's commands answer to), when `args` asks for one before
/// any `--`; `-V` only where the command gives it no other meaning.
fn usage_or_version<P: Parser>(command: &str, args: &[OsString]) -> Option<String> {
    let clap_command = P::command();
    let own_v = clap_command.get_arguments().any(|a| a.get_short() == Some('V'));
    for arg in args.iter().take_while(|a| *a != "--") {
        if arg == "--usage" {
            return Some(usage_text(command, &clap_command));
        }
        if arg == "--version" || (arg == "-V" && !own_v) {
            return Some(format!("{}\n", crate::options::help::VERSION));
        }
    }
    None
}

/// `Usage: squeue [-A account] [--all] ...`: the visible options of `clap_command`, each in
/// brackets with its value name, wrapped at 80 columns; the operands last.
fn usage_text(command: &str, clap_command: &clap::Command) -> String {
    let mut items: Vec<String> = Vec::new();
    let mut operands = Vec::new();
    for arg in clap_command.get_arguments().filter(|a| !a.is_hide_set()) {
        if arg.get_id() == "help" {
            continue;
        }
        let value = arg
            .get_value_names()
            .and_then(|names| names.first())
            .map(|name| name.to_ascii_lowercase())
            .unwrap_or_else(|| arg.get_id().as_str().to_owned());
        let takes_value = arg.get_action().takes_values();
        let item = match (arg.get_short(), arg.get_long(), takes_value) {
            (None, None, _) => {
                operands.push(format!("[{value}...]"));
                continue;
            }
            (Some(c), _, false) => format!("[-{c}]"),
            (Some(c), _, true) => format!("[-{c} {value}]"),
            (None, Some(long), false) => format!("[--{long}]"),
            (None, Some(long), true) => format!("[--{long}={value}]"),
        };
        items.push(item);
    }
    items.extend(operands);
    let first = format!("Usage: {command}");
    let indent = " ".repeat(first.len());
    let mut out = String::new();
    let mut line = first;
    for item in items {
        if line.len() > indent.len() && line.len() + 1 + item.len() > 80 {
            out.push_str(&line);
            out.push('\n');
            line = indent.clone();
        }
        line.push(' ');
        line.push_str(&item);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// Splits a comma list, dropping empty items (`a,,b,` → `a`, `b`).
pub(crate) fn comma_list(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|item| !item.is_empty())
}

/// Every comma list of a repeatable option, flattened.
pub(crate) fn flat_list(values: &[String]) -> Vec<String> {
    values.iter().flat_map(|value| comma_list(value)).map(str::to_owned).collect()
}

/// Resolves user names or numeric uids to uids.
pub(crate) fn resolve_users(values: &[String]) -> anyhow::Result<Vec<u32>> {
    let mut uids = Vec::new();
    for name in flat_list(values) {
        let uid = if name.bytes().all(|b| b.is_ascii_digit()) {
            name.parse().with_context(|| format!("Invalid user: {name}"))?
        } else {
            match nix::unistd::User::from_name(&name) {
                Ok(Some(user)) => user.uid.as_raw(),
                Ok(None) => bail!("Invalid user: {name}"),
                Err(errno) => bail!("Invalid user: {name}: {errno}"),
            }
        };
        if !uids.contains(&uid) {
            uids.push(uid);
        }
    }
    Ok(uids)
}

/// The caller's effective uid (`--me`).
pub(crate) fn my_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// A job id argument: a job or a whole array (`12`), one array task (`12_3`), or several
/// (`12_[1-3,5]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobTarget {
    pub(crate) job_id: JobId,
    /// `None` for the whole job or array.
    pub(crate) tasks: Option<Vec<u32>>,
}

impl JobTarget {
    /// Whether `job` (a record ctld reported) is, or stands for, what this argument names.
    pub(crate) fn matches(&self, job: &JobInfo) -> bool {
        match &self.tasks {
            None => job.job_id == self.job_id || job.array_job_id == Some(self.job_id),
            Some(tasks) => {
                job.array_job_id == Some(self.job_id)
                    && match job.array_task_id {
                        Some(task) => tasks.contains(&task),
                        None => job.array_tasks_pending.iter().any(|t| tasks.contains(t)),
                    }
            }
        }
    }
}

/// Splits a comma list whose items may hold bracketed comma lists (`12_[1,3],14`).
pub(crate) fn split_ids(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(text[start..].trim());
    items.into_iter().filter(|item| !item.is_empty()).collect()
}

/// Parses one job id argument (see [`JobTarget`]).
pub(crate) fn parse_job_target(text: &str) -> Option<JobTarget> {
    let number =
        |s: &str| (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<u32>().ok()).flatten();
    let (job, tasks) = match text.split_once('_') {
        None => return number(text).filter(|id| *id > 0).map(|job_id| JobTarget { job_id, tasks: None }),
        Some(parts) => parts,
    };
    let job_id = number(job).filter(|id| *id > 0)?;
    let inner = tasks.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(tasks);
    let tasks =
        drover_shared::grammar::array::parse_array(inner, u32::MAX - 1).ok().filter(|s| s.max_running == 0)?.indexes;
    Some(JobTarget { job_id, tasks: Some(tasks) })
}

/// Parses every job id argument of a repeatable option.
pub(crate) fn parse_job_targets(values: &[String]) -> anyhow::Result<Vec<JobTarget>> {
    let mut targets: Vec<JobTarget> = Vec::new();
    for item in values.iter().flat_map(|v| split_ids(v)) {
        let target = parse_job_target(item).ok_or_else(|| anyhow::anyhow!("Invalid job id: {item}"))?;
        if !targets.contains(&target) {
            targets.push(target);
        }
    }
    Ok(targets)
}

/// Slurm state names Drover accepts in filters but never reports (flags such as COMPLETING, or
/// states it has no use for yet): they select nothing.
const UNREPRESENTED_STATES: [&str; 22] = [
    "CG",
    "COMPLETING",
    "CF",
    "CONFIGURING",
    "RH",
    "REQUEUE_HOLD",
    "RS",
    "RESIZING",
    "SE",
    "SPECIAL_EXIT",
    "ST",
    "STOPPED",
    "RV",
    "REVOKED",
    "SO",
    "STAGE_OUT",
    "RF",
    "REQUEUE_FED",
    "RD",
    "RESV_DEL_HOLD",
    "SI",
    "SIGNALING",
];

/// A `-t/--states` or `-s/--state` selection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StateFilter {
    /// `all`, or no selection where the command shows everything.
    All,
    /// Only these states (possibly none, when only unrepresented names were given).
    Only(Vec<JobState>),
}

impl StateFilter {
    /// Whether a job in `state` passes.
    pub(crate) fn matches(&self, state: JobState) -> bool {
        match self {
            StateFilter::All => true,
            StateFilter::Only(states) => states.contains(&state),
        }
    }

    /// The states to ask ctld for (empty = any).
    pub(crate) fn to_query(&self) -> Vec<JobState> {
        match self {
            StateFilter::All => Vec::new(),
            StateFilter::Only(states) => states.clone(),
        }
    }

    /// Whether no job can pass.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, StateFilter::Only(states) if states.is_empty())
    }
}

/// Parses a comma list of long or compact state names, case-insensitively; `all` selects every
/// state.
pub(crate) fn parse_states(values: &[String]) -> anyhow::Result<StateFilter> {
    let mut states = Vec::new();
    for name in flat_list(values) {
        if name.eq_ignore_ascii_case("all") {
            return Ok(StateFilter::All);
        }
        match JobState::parse(&name) {
            Some(state) => {
                if !states.contains(&state) {
                    states.push(state);
                }
            }
            None if UNREPRESENTED_STATES.iter().any(|s| s.eq_ignore_ascii_case(&name)) => {}
            None => bail!("Invalid job state specified: {name}"),
        }
    }
    Ok(StateFilter::Only(states))
}

/// `(null)` for an unset string, Slurm's placeholder in scontrol and squeue.
/// `-M/--clusters` of squeue and sinfo: Drover serves one cluster, so the list must name it (or
/// be `all`). Returns the `CLUSTER: <name>` line Slurm prints first, or Slurm's error.
pub(crate) fn cluster_line(wanted: Option<&str>) -> anyhow::Result<Option<String>> {
    let Some(wanted) = wanted else { return Ok(None) };
    let cluster = match crate::client::call(&drover_shared::proto::client::Request::Ping)? {
        drover_shared::proto::client::Response::Pong { cluster, .. } => cluster,
        other => bail!("unexpected answer from the controller: {other:?}"),
    };
    check_cluster(wanted, &cluster).map(Some)
}

/// The `CLUSTER:` line for `-M wanted` on cluster `cluster`, or Slurm's error for a list that
/// does not name it.
pub(crate) fn check_cluster(wanted: &str, cluster: &str) -> anyhow::Result<String> {
    if comma_list(wanted).any(|name| name == cluster || name.eq_ignore_ascii_case("all")) {
        Ok(format!("CLUSTER: {cluster}\n"))
    } else {
        bail!(
            "'{wanted}' can't be reached now, or it is an invalid entry for --cluster.  Use 'sacctmgr list clusters' to see available clusters."
        )
    }
}

/// A job's text or `(null)`, owned.
pub(crate) fn or_null(value: Option<&str>) -> String {
    drover_shared::queue_lines::or_null(value).to_owned()
}

/// Whether the job ever got nodes.
pub(crate) fn has_started(job: &JobInfo) -> bool {
    job.start_time.is_some() && !job.nodes.is_empty()
}

/// GPUs of the job: allocated once started, else the per-node request times the node count.
pub(crate) fn job_gpus(job: &JobInfo) -> u32 {
    if has_started(job) || job.gpus_allocated > 0 {
        return job.gpus_allocated;
    }
    gpus_per_node(&job.tres_per_node).saturating_mul(job.num_nodes.max(1))
}

/// The GPU count in a `gres:gpu[:type]:N` TRES-per-node string (0 when it asks for none).
fn gpus_per_node(tres_per_node: &str) -> u32 {
    comma_list(tres_per_node)
        .filter_map(|item| {
            let rest = item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")).unwrap_or(item);
            let mut parts = rest.split(':');
            (parts.next() == Some("gpu")).then(|| parts.next_back().and_then(|n| n.parse::<u32>().ok()).unwrap_or(1))
        })
        .sum()
}

/// Total memory of the job in megabytes, from its request (`--mem-per-cpu` × CPUs, `--mem` ×
/// nodes, `--mem-per-gpu` × GPUs), else from the allocation.
pub(crate) fn job_mem_total_mb(job: &JobInfo) -> u64 {
    let nodes = u64::from(job.num_nodes.max(1));
    match job.mem {
        Some(MemRequest::PerCpu(mb)) => mb.saturating_mul(u64::from(job.num_cpus)),
        Some(MemRequest::PerNode(mb)) if mb > 0 => mb.saturating_mul(nodes),
        Some(MemRequest::PerGpu(mb)) => mb.saturating_mul(u64::from(job_gpus(job))),
        _ => job.mem_per_node_mb.saturating_mul(nodes),
    }
}

/// The job's minimum memory as Slurm reports it: `(per-CPU?, megabytes)`.
pub(crate) fn job_min_memory(job: &JobInfo) -> (bool, u64) {
    match job.mem {
        Some(MemRequest::PerCpu(mb)) => (true, mb),
        Some(MemRequest::PerNode(mb)) if mb > 0 => (false, mb),
        _ => (false, job.mem_per_node_mb),
    }
}

/// The job's TRES in Slurm's TRES-id order (`cpu`, `mem`, `node`, `billing`, `gres/gpu`). Billing
/// is what ctld charges the job's fair share per second (its partition's `TRESBillingWeights`); a
/// record stored before ctld kept it shows the CPU count, the billing without weights.
pub(crate) fn job_tres(job: &JobInfo) -> Vec<(&'static str, String)> {
    let mut tres = vec![
        ("cpu", job.num_cpus.to_string()),
        ("mem", format_mem_mb(job_mem_total_mb(job))),
        ("node", job.num_nodes.to_string()),
        ("billing", job.billing.unwrap_or_else(|| u64::from(job.num_cpus)).to_string()),
    ];
    let gpus = job_gpus(job);
    if gpus > 0 {
        tres.push(("gres/gpu", gpus.to_string()));
    }
    tres
}

/// Joins `name=value` pairs with commas.
pub(crate) fn tres_string(tres: &[(&str, String)]) -> String {
    tres.iter().map(|(name, value)| format!("{name}={value}")).collect::<Vec<_>>().join(",")
}

/// `(E, S)` of a wait status as sacct prints it: exit statuses of 128 and above lose 128.
pub(crate) fn sacct_exit_parts(status: drover_shared::job::WaitStatus) -> (i32, i32) {
    let (code, signal) = status.parts();
    (if code >= 128 { code - 128 } else { code }, signal)
}

/// Whether `state` is one a controller decides on its own (cancel, time limit, node failure …)
/// rather than the batch script's exit: Slurm records the accounting exit code at that moment,
/// before the script's status arrives, so sacct shows `0:0` for such jobs while scontrol shows
/// the script's status.
pub(crate) fn ended_by_controller(state: JobState) -> bool {
    matches!(
        state,
        JobState::Cancelled | JobState::Timeout | JobState::NodeFail | JobState::Preempted | JobState::Deadline
    )
}

/// Prints Slurm's `slurm_load_jobs error: <why>` line; returns the exit code (1).
pub(crate) fn load_jobs_failed(why: impl std::fmt::Display) -> i32 {
    eprintln!("slurm_load_jobs error: {why}");
    1
}

/// A job query's answer; an error answer or a failed connection is printed as Slurm's
/// `slurm_load_jobs error:` line and becomes exit code 1 (`Err`).
pub(crate) fn jobs_answer(answer: anyhow::Result<Response>) -> Result<Response, i32> {
    match answer {
        Ok(Response::Error { code, .. }) => Err(load_jobs_failed(code.message())),
        Ok(answer) => Ok(answer),
        Err(error) => Err(load_jobs_failed(error)),
    }
}

/// Rows as a table: columns padded to `widths` (the last column, beyond them, unpadded) or, when
/// `parsable`, `|`-separated; `header` puts `headers` first.
pub(crate) fn render_table(
    headers: &[&str],
    widths: &[usize],
    rows: &[Vec<String>],
    parsable: bool,
    header: bool,
) -> String {
    let line = |cells: &[String]| {
        if parsable {
            let cells: Vec<_> = cells.iter().map(|c| drover_shared::text::delimited(c, "|")).collect();
            return format!("{}\n", cells.join("|"));
        }
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let cell = drover_shared::text::printable(cell);
            match widths.get(i) {
                Some(width) => out.push_str(&format!("{cell:<width$} ")),
                None => out.push_str(&cell),
            }
        }
        format!("{}\n", out.trim_end())
    };
    let mut out = String::new();
    if header {
        out.push_str(&line(&headers.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>()));
    }
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Parser)]
    #[command(name = "demo", disable_help_flag = true)]
    struct Demo {
        #[arg(short = 'A', long = "accounts")]
        accounts: Vec<String>,
        #[arg(short = 'a', long = "all")]
        all: bool,
        #[arg(long = "wckey")]
        wckey: Option<String>,
        #[arg(long = "help", action = clap::ArgAction::Help)]
        help: Option<bool>,
        #[arg(value_name = "job_id")]
        ids: Vec<String>,
    }

    /// `--usage` and `-V`/`--version` in Slurm's layout, answered before clap sees the rest.
    #[test]
    fn usage_and_version() {
        let args = |items: &[&str]| items.iter().map(OsString::from).collect::<Vec<_>>();
        expect_test::expect![[r#"
            Some(
                "Usage: demo [-A accounts] [-a] [--wckey=wckey] [job_id...]\n",
            )
        "#]]
        .assert_debug_eq(&usage_or_version::<Demo>("demo", &args(&["-a", "--usage"])));
        assert_eq!(usage_or_version::<Demo>("demo", &args(&["-V"])).as_deref(), Some("slurm 22.05.8\n"));
        assert_eq!(usage_or_version::<Demo>("demo", &args(&["--version"])).as_deref(), Some("slurm 22.05.8\n"));
        assert_eq!(usage_or_version::<Demo>("demo", &args(&["--", "--usage"])), None);
        assert_eq!(parse_args::<Demo>("demo", args(&["--usage"])).err(), Some(0));
        assert!(parse_args::<Demo>("demo", args(&["-a", "5"])).is_ok_and(|d| d.all && d.ids == ["5"]));
        let unknown = |items: &[&str]| {
            let argv = std::iter::once("demo").chain(items.iter().copied());
            Demo::try_parse_from(argv).err().and_then(|error| unknown_option(&error))
        };
        assert_eq!(unknown(&["--frob"]).as_deref(), Some("unrecognized option '--frob'"));
        assert_eq!(unknown(&["--frob=3"]).as_deref(), Some("unrecognized option '--frob'"));
        assert_eq!(unknown(&["-aZ"]).as_deref(), Some("invalid option -- 'Z'"));
        assert_eq!(unknown(&["--accounts"]), None, "a missing value is another error");
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn states() {
        let parse = |items: &[&str]| match parse_states(&strings(items)) {
            Ok(filter) => format!("{filter:?}"),
            Err(error) => error.to_string(),
        };
        assert_eq!(parse(&["PD,r"]), "Only([Pending, Running])");
        assert_eq!(parse(&["pending", "CANCELLED,oom"]), "Only([Pending, Cancelled, OutOfMemory])");
        assert_eq!(parse(&["CG"]), "Only([])");
        assert_eq!(parse(&["r,ALL"]), "All");
        assert_eq!(parse(&["bogus"]), "Invalid job state specified: bogus");
    }

    #[test]
    fn job_ids_and_users() {
        let ids = |values: &[&str]| {
            parse_job_targets(&strings(values))
                .map(|t| t.iter().map(|t| (t.job_id, t.tasks.clone())).collect::<Vec<_>>())
        };
        assert_eq!(ids(&["20,24", "23", "20"]).ok(), Some(vec![(20, None), (24, None), (23, None)]));
        assert_eq!(ids(&["29_1,29_[2-3]"]).ok(), Some(vec![(29, Some(vec![1])), (29, Some(vec![2, 3]))]));
        assert_eq!(ids(&["29_x"]).map_err(|e| e.to_string()), Err("Invalid job id: 29_x".into()));
        assert_eq!(resolve_users(&strings(&["0,root", "65534"])).ok(), Some(vec![0, 65534]));
        let unknown = resolve_users(&strings(&["no-such-user-here"])).map_err(|e| e.to_string());
        assert_eq!(unknown, Err("Invalid user: no-such-user-here".into()));
    }

    #[test]
    fn clusters_option() {
        let check = |wanted: &str| check_cluster(wanted, "tc").map_err(|e| e.to_string());
        assert_eq!(check("tc"), Ok("CLUSTER: tc\n".into()));
        assert_eq!(check("other,tc"), Ok("CLUSTER: tc\n".into()));
        assert_eq!(check("all"), Ok("CLUSTER: tc\n".into()));
        assert_eq!(
            check("other"),
            Err("'other' can't be reached now, or it is an invalid entry for --cluster.  Use 'sacctmgr list clusters' to see available clusters.".into())
        );
    }

    #[test]
    fn gpus_in_tres_per_node() {
        assert_eq!(gpus_per_node("gres:gpu:1"), 1);
        assert_eq!(gpus_per_node("gres:gpu:a100:2,gres:shard:1"), 2);
        assert_eq!(gpus_per_node("gres/gpu"), 1);
        assert_eq!(gpus_per_node(""), 0);
    }
}
