//! `squeue`: the jobs ctld holds in memory, filtered, sorted and printed through Slurm's `-o`
//! (`%[.][width]<letter>`) and `-O` (`Name[:[.]width[suffix]]`) format languages.
//!
//! Argument handling and the round trip to ctld live in [`run`]; everything that decides what a
//! line looks like is the pure [`render`] (and [`render_steps`] for `-s`), driven by tests
//! against real Slurm 22.05 output.

use super::columns::{self, FieldDef, def};
use super::common::{self, StateFilter};
use super::format::{self, Tz};
use super::json;
use clap::{ArgAction, Parser};
use drover_shared::UnixTime;
use drover_shared::grammar::mem::format_mem_mb;
use drover_shared::hostlist;
use drover_shared::job::fields::JobFields;
use drover_shared::job::{JobId, JobInfo, JobState, StepInfo};
use drover_shared::proto::client::{JobQuery, Request, Response, job_lines};
use drover_shared::proto::records::{Answer, JobRecords, read_jobs};
use drover_shared::queue_lines::{self, Field, LineColumn, LineFormat, SortKey};
use std::ffi::OsString;
use std::io::Write as _;

mod listing;

const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";
const LONG_FORMAT: &str = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R";
const START_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R";
const STEPS_FORMAT: &str = "%.15i %.8j %.9P %.8u %.9M %N";
const DEFAULT_SORT: &str = "P,t,-p";

#[derive(Debug, Parser)]
#[command(name = "squeue", about = "View jobs in the Drover queue", disable_help_flag = true, infer_long_args = true)]
struct Args {
    /// Only jobs of these accounts.
    #[arg(short = 'A', long = "account")]
    accounts: Vec<String>,
    /// Show jobs in hidden partitions too.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// One line per array element (pending tasks of an array are otherwise one `N_[a-b]` line).
    #[arg(short = 'r', long = "array")]
    array: bool,
    /// Print no header line.
    #[arg(short = 'h', long = "noheader")]
    noheader: bool,
    /// Print this help.
    #[arg(long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// Repeat every this many seconds.
    #[arg(short = 'i', long = "iterate")]
    iterate: Option<u64>,
    /// Only these job ids.
    #[arg(short = 'j', long = "jobs")]
    jobs: Vec<String>,
    /// Long format, preceded by the date.
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Only the caller's jobs.
    #[arg(long = "me")]
    me: bool,
    /// Cluster to query: Drover serves one, so it must be named (or `all`); `CLUSTER: <name>` first.
    #[arg(short = 'M', long = "clusters")]
    clusters: Option<String>,
    /// Only jobs with these names.
    #[arg(short = 'n', long = "name")]
    names: Vec<String>,
    /// Accepted for compatibility; sizes are never converted.
    #[arg(long = "noconvert")]
    noconvert: bool,
    /// Output format, `%[.][width]<letter>` fields.
    #[arg(short = 'o', long = "format")]
    format: Option<String>,
    /// Output format, `Name[:[.]width[suffix]]` fields.
    #[arg(short = 'O', long = "Format")]
    format_long: Option<String>,
    /// Only jobs in these partitions.
    #[arg(short = 'p', long = "partition")]
    partitions: Vec<String>,
    /// Accepted for compatibility (one line per job and partition).
    #[arg(short = 'P', long = "priority")]
    priority: bool,
    /// Only jobs with these QOS.
    #[arg(short = 'q', long = "qos")]
    qos: Vec<String>,
    /// Sort keys: format letters, `-` for descending.
    #[arg(short = 'S', long = "sort", allow_hyphen_values = true)]
    sort: Option<String>,
    /// Pending jobs with their expected start.
    #[arg(long = "start")]
    start: bool,
    /// Show job steps instead of jobs.
    #[arg(short = 's', long = "steps", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    steps: Option<String>,
    /// Only jobs in these states (`all` for every state).
    #[arg(short = 't', long = "states")]
    states: Vec<String>,
    /// Only jobs of these users (names or uids).
    #[arg(short = 'u', long = "user")]
    users: Vec<String>,
    /// Print the jobs as Slurm's REST `jobs` response in JSON (formatting options are ignored).
    #[arg(long = "json")]
    json: bool,
    /// The same document as `--json`, in YAML.
    #[arg(long = "yaml")]
    yaml: bool,
    /// More messages.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Only jobs on these nodes.
    #[arg(short = 'w', long = "nodelist")]
    nodelist: Vec<String>,
}

/// Every field squeue can print, Slurm's letters, `-O` names and headers.
const FIELDS: &[FieldDef<Field>] = &[
    def(Some('i'), "JobArrayID", "JOBID", Field::JobId),
    def(Some('A'), "JobID", "JOBID", Field::JobIdRaw),
    def(Some('F'), "ArrayJobID", "ARRAY_JOB_ID", Field::ArrayJobId),
    def(Some('K'), "ArrayTaskID", "ARRAY_TASK_ID", Field::ArrayTaskId),
    def(Some('j'), "Name", "NAME", Field::Name),
    def(Some('u'), "UserName", "USER", Field::User),
    def(Some('U'), "UserID", "UID", Field::Uid),
    def(Some('a'), "Account", "ACCOUNT", Field::Account),
    def(Some('P'), "Partition", "PARTITION", Field::Partition),
    def(Some('q'), "QOS", "QOS", Field::Qos),
    def(Some('t'), "StateCompact", "ST", Field::StateCompact),
    def(Some('T'), "State", "STATE", Field::State),
    def(Some('M'), "TimeUsed", "TIME", Field::TimeUsed),
    def(Some('l'), "TimeLimit", "TIME_LIMIT", Field::TimeLimit),
    def(Some('L'), "TimeLeft", "TIME_LEFT", Field::TimeLeft),
    def(Some('D'), "NumNodes", "NODES", Field::NumNodes),
    def(Some('C'), "NumCPUs", "CPUS", Field::NumCpus),
    def(None, "NumTasks", "TASKS", Field::NumTasks),
    def(Some('b'), "tres-per-node", "TRES_PER_NODE", Field::TresPerNode),
    def(None, "tres-alloc", "TRES_ALLOC", Field::TresAlloc),
    def(Some('m'), "MinMemory", "MIN_MEMORY", Field::MinMemory),
    def(Some('N'), "NodeList", "NODELIST", Field::NodeList),
    def(Some('R'), "ReasonList", "NODELIST(REASON)", Field::ReasonList),
    def(Some('r'), "Reason", "REASON", Field::Reason),
    def(Some('p'), "Priority", "PRIORITY", Field::Priority),
    def(Some('Q'), "PriorityLong", "PRIORITY", Field::PriorityLong),
    def(Some('V'), "SubmitTime", "SUBMIT_TIME", Field::SubmitTime),
    def(Some('S'), "StartTime", "START_TIME", Field::StartTime),
    def(Some('e'), "EndTime", "END_TIME", Field::EndTime),
    def(None, "EligibleTime", "ELIGIBLE_TIME", Field::EligibleTime),
    def(None, "AccrueTime", "ACCRUE_TIME", Field::EligibleTime),
    def(Some('E'), "Dependency", "DEPENDENCY", Field::Dependency),
    def(Some('k'), "Comment", "COMMENT", Field::Comment),
    def(Some('o'), "Command", "COMMAND", Field::Command),
    def(Some('Z'), "WorkDir", "WORK_DIR", Field::WorkDir),
    def(None, "STDOUT", "STDOUT", Field::Stdout),
    def(None, "STDERR", "STDERR", Field::Stderr),
    def(None, "STDIN", "STDIN", Field::Stdin),
    def(Some('y'), "Nice", "NICE", Field::Nice),
    def(Some('c'), "MinCpus", "MIN_CPUS", Field::MinCpus),
    def(None, "cpus-per-task", "CPUS_PER_TASK", Field::CpusPerTask),
    def(Some('d'), "MinTmpDisk", "MIN_TMP_DISK", Field::MinTmpDisk),
    def(Some('f'), "Feature", "FEATURES", Field::Features),
    def(Some('g'), "GroupName", "GROUP", Field::Group),
    def(Some('G'), "GroupID", "GROUP", Field::Gid),
    def(Some('h'), "OverSubscribe", "OVER_SUBSCRIBE", Field::OverSubscribe),
    def(Some('n'), "ReqNodes", "REQ_NODES", Field::ReqNodes),
    def(Some('x'), "ExcNodes", "EXC_NODES", Field::ExcNodes),
    def(Some('v'), "Reservation", "RESERVATION", Field::Reservation),
    def(Some('B'), "BatchHost", "EXEC_HOST", Field::BatchHost),
    def(Some('z'), "SCT", "S:C:T", Field::Sct),
    def(Some('Y'), "SchedNodes", "SCHEDNODES", Field::SchedNodes),
    def(Some('H'), "Sockets", "SOCKETS_PER_NODE", Field::Wildcard),
    def(Some('I'), "Cores", "CORES_PER_SOCKET", Field::Wildcard),
    def(Some('J'), "Threads", "THREADS_PER_CORE", Field::Wildcard),
    def(Some('O'), "Contiguous", "CONTIGUOUS", Field::Contiguous),
    def(Some('w'), "WCKey", "WCKEY", Field::Null),
    def(Some('W'), "Licenses", "LICENSES", Field::Null),
    def(Some('X'), "CoreSpec", "CORE_SPEC", Field::NotAvailable),
    def(None, "Requeue", "REQUEUE", Field::Requeue),
    def(None, "RestartCnt", "RESTARTCNT", Field::RestartCount),
    def(None, "exit_code", "EXIT_CODE", Field::ExitCode),
    def(None, "BatchFlag", "BATCH_FLAG", Field::BatchFlag),
    def(None, "MinTime", "MIN_TIME", Field::NotAvailable),
    def(None, "Deadline", "DEADLINE", Field::NotAvailable),
];

/// One output column of squeue.
pub(crate) type Column = columns::Column<Field>;

/// Parses a `-o` format; letters Drover does not know become empty columns. `%all` is every
/// field, lower-case letters then upper-case, separated by `|`.
pub(crate) fn parse_format(text: &str) -> Vec<Column> {
    if text == "%all" {
        let letters = ('a'..='z').chain('A'..='Z').filter(|l| FIELDS.iter().any(|f| f.letter == Some(*l)));
        let all: Vec<String> = letters.map(|l| format!("%{l}")).collect();
        return columns::parse_percent(&all.join("|"), FIELDS, Field::Unknown);
    }
    columns::parse_percent(text, FIELDS, Field::Unknown)
}

/// Parses a `-O` format; returns the columns and the names Drover does not know (printed as
/// empty columns so that positions stay where a client expects them).
pub(crate) fn parse_long_format(text: &str) -> (Vec<Column>, Vec<String>) {
    columns::parse_named(text, FIELDS, Field::Unknown)
}

/// Parses `-S`: comma-separated format letters, each optionally prefixed by `+` or `-`.
pub(crate) fn parse_sort(text: &str) -> Vec<SortKey> {
    common::comma_list(text)
        .filter_map(|item| {
            let (descending, rest) = match item.as_bytes().first() {
                Some(b'-') => (true, &item[1..]),
                Some(b'+') => (false, &item[1..]),
                _ => (false, item),
            };
            let rest = rest.strip_prefix('%').unwrap_or(rest);
            rest.chars().next().map(|letter| SortKey { letter, descending })
        })
        .collect()
}

/// Everything [`render`] needs besides the jobs.
#[derive(Debug, Clone)]
pub(crate) struct RenderOptions {
    pub(crate) columns: Vec<Column>,
    pub(crate) header: bool,
    pub(crate) sort: Vec<SortKey>,
    /// `-l`: a `ctime` line before the header.
    pub(crate) date_line: bool,
    pub(crate) tz: Tz,
}

/// Renders `jobs` (already selected) sorted by `options.sort`; ties keep ctld's order.
#[cfg(test)]
pub(crate) fn render(jobs: &[JobInfo], now: UnixTime, options: &RenderOptions) -> String {
    let mut listing = listing::Listing::new(options, now, jobs.len());
    jobs.iter().for_each(|job| listing.push(job));
    listing.finish()
}

fn push_header(out: &mut String, columns: &[Column]) {
    // Headers are cut like values, node lists included (`TIME_LIMI`).
    columns.iter().for_each(|column| column.push_header(out));
    out.push('\n');
}

/// Renders the steps of `jobs` (`-s`), sorted by partition then job id.
pub(crate) fn render_steps(jobs: &[JobInfo], now: UnixTime, options: &RenderOptions) -> String {
    let mut out = String::new();
    if options.header {
        let columns: Vec<Column> =
            options.columns.iter().map(|c| Column { header: step_header(c).to_owned(), ..c.clone() }).collect();
        push_header(&mut out, &columns);
    }
    let mut sorted: Vec<&JobInfo> = jobs.iter().collect();
    sorted.sort_by(|a, b| a.partition.cmp(&b.partition).then(a.job_id.cmp(&b.job_id)));
    for job in sorted {
        for step in job.steps.iter().filter(|s| !s.state.is_terminal()) {
            for column in &options.columns {
                column.push(&mut out, &step_value(column, job, step, now, options.tz), column.field.cuts());
            }
            out.push('\n');
        }
    }
    out
}

fn step_header(column: &Column) -> &str {
    match column.letter {
        Some('i') => "STEPID",
        Some('M') => "TIME",
        _ => &column.header,
    }
}

fn step_value(column: &Column, job: &JobInfo, step: &StepInfo, now: UnixTime, tz: Tz) -> String {
    match column.letter {
        Some('i') => format!("{}.{}", job.display_id(), step.step_id),
        Some('A') => job.job_id.to_string(),
        Some('j') => step.name.clone(),
        Some('M') => {
            let end = step.end_time.unwrap_or(now);
            format::clock(step.start_time.map_or(0, |start| (end - start).max(0)))
        }
        Some('N') => hostlist::compress(&step.nodes),
        Some('S') => format::timestamp_or(step.start_time, tz, "N/A"),
        Some('C') => step.num_cpus.to_string(),
        _ => job_value(column.field, job, now, tz),
    }
}

/// Appends one cell's text: the fields ctld could render too from the shared renderer, the
/// timestamps (local time) and derived TRES and memory figures here.
fn write_value(out: &mut String, field: Field, job: &JobInfo, now: UnixTime, tz: Tz) {
    if queue_lines::value(out, field, job, now) {
        return;
    }
    let text = match field {
        Field::TresAlloc if common::has_started(job) => common::tres_string(&common::job_tres(job)),
        Field::TresAlloc => "(null)".into(),
        Field::MinMemory => format_mem_mb(common::job_min_memory(job).1),
        Field::SubmitTime => format::timestamp(job.submit_time, tz),
        Field::StartTime => format::timestamp_or(job.start_time, tz, "N/A"),
        Field::EndTime => format::timestamp_or(queue_lines::expected_end(job), tz, "N/A"),
        Field::EligibleTime => format::timestamp_or(job.eligible_time, tz, "N/A"),
        _ => String::new(),
    };
    out.push_str(&text);
}

/// One cell's text.
fn job_value(field: Field, job: &JobInfo, now: UnixTime, tz: Tz) -> String {
    let mut out = String::new();
    write_value(&mut out, field, job, now, tz);
    out
}

/// The text and list fields of a record that a column reads (numbers, states and times always
/// come); `needs_cover_every_field` checks each against a full record.
fn field_needs(field: Field) -> JobFields {
    match field {
        Field::JobId | Field::ArrayTaskId => JobFields::ARRAY_TASKS,
        Field::Name => JobFields::NAME,
        Field::User => JobFields::USER,
        Field::Account => JobFields::ACCOUNT,
        Field::Partition => JobFields::PARTITION,
        Field::Qos => JobFields::QOS,
        Field::TresPerNode => JobFields::TRES_PER_NODE,
        Field::TresAlloc => JobFields::NODES | JobFields::TRES_PER_NODE,
        Field::NodeList | Field::BatchHost => JobFields::NODES,
        Field::ReasonList => JobFields::REASON | JobFields::NODES,
        Field::Reason => JobFields::REASON,
        Field::Dependency => JobFields::DEPENDENCY,
        Field::Comment => JobFields::COMMENT,
        Field::Command => JobFields::COMMAND,
        Field::WorkDir => JobFields::WORK_DIR,
        Field::Stdout | Field::Stderr | Field::Stdin => JobFields::STD_PATHS,
        Field::Features => JobFields::CONSTRAINT,
        Field::Group => JobFields::GROUP,
        Field::ReqNodes => JobFields::NODELIST_REQUESTED,
        Field::ExcNodes => JobFields::EXCLUDE,
        _ => JobFields::NONE,
    }
}

/// Everything a listing reads from the records: its columns, sort keys and filters. squeue asks
/// ctld for these only, so a deep queue ships a few dozen bytes per job.
fn needed_fields(filter: &Filter, options: &RenderOptions, steps: bool) -> JobFields {
    // Array task lists decide ids, `-j N_T` and `-r`; the partition is in the default sort.
    let mut fields = JobFields::ARRAY_TASKS | JobFields::PARTITION;
    for column in &options.columns {
        fields |= field_needs(column.field);
    }
    for key in &options.sort {
        if let Some(def) = FIELDS.iter().find(|f| f.letter == Some(key.letter)) {
            fields |= field_needs(def.field);
        }
    }
    let wanted = |list: &[String], field: JobFields| if list.is_empty() { JobFields::NONE } else { field };
    fields |= wanted(&filter.accounts, JobFields::ACCOUNT)
        | wanted(&filter.names, JobFields::NAME)
        | wanted(&filter.qos, JobFields::QOS)
        | wanted(&filter.nodes, JobFields::NODES);
    if steps {
        fields |= JobFields::STEPS;
    }
    fields
}

/// Which jobs to show.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    pub(crate) job_ids: Vec<JobId>,
    /// `-j` as given (jobs, arrays, array tasks); `job_ids` are the ids asked of ctld.
    pub(crate) targets: Vec<common::JobTarget>,
    /// `-r`: one line per pending array task.
    pub(crate) expand_arrays: bool,
    pub(crate) users: Vec<u32>,
    pub(crate) accounts: Vec<String>,
    pub(crate) partitions: Vec<String>,
    pub(crate) names: Vec<String>,
    pub(crate) qos: Vec<String>,
    pub(crate) states: StateFilter,
    /// Host names from `-w`, expanded.
    pub(crate) nodes: Vec<String>,
}

impl Filter {
    /// Whether `job` passes every filter; a job pending in several partitions matches any of them.
    pub(crate) fn matches(&self, job: &JobInfo) -> bool {
        let any_or = |list: &[String], value: &str| list.is_empty() || list.iter().any(|item| item == value);
        let id_matches = if self.targets.is_empty() {
            self.job_ids.is_empty() || self.job_ids.contains(&job.job_id)
        } else {
            self.targets.iter().any(|t| t.matches(job))
        };
        id_matches
            && (self.users.is_empty() || self.users.contains(&job.uid))
            && any_or(&self.accounts, &job.account)
            && (self.partitions.is_empty() || common::comma_list(&job.partition).any(|p| any_or(&self.partitions, p)))
            && any_or(&self.names, &job.name)
            && any_or(&self.qos, &job.qos)
            && self.states.matches(job.state())
            && (self.nodes.is_empty() || job.nodes.iter().any(|node| self.nodes.contains(node)))
    }
}

/// The default state selection: jobs that have not ended.
fn default_states() -> StateFilter {
    StateFilter::Only(vec![JobState::Pending, JobState::Running, JobState::Suspended])
}

/// A non-empty environment variable.
fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// Options given on the command line, else taken from `var`.
fn or_env(values: Vec<String>, var: &str) -> Vec<String> {
    if values.is_empty() { env_value(var).into_iter().collect() } else { values }
}

/// Runs `squeue`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("squeue", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let output = json::Output::from_flags(args.json, args.yaml)?;
    if args.format.is_some() && args.format_long.is_some() && output.is_none() {
        anyhow::bail!("-o and -O options are mutually exclusive");
    }
    let steps = args.steps.is_some();
    let (columns, unknown) = if let Some(text) = &args.format_long {
        parse_long_format(text)
    } else if let Some(text) = &args.format {
        (parse_format(text), Vec::new())
    } else if let Some(text) = env_value("SQUEUE_FORMAT") {
        (parse_format(&text), Vec::new())
    } else if let Some(text) = env_value("SQUEUE_FORMAT2") {
        parse_long_format(&text)
    } else {
        let text = match (steps, args.start, args.long) {
            (true, _, _) => STEPS_FORMAT,
            (false, true, _) => START_FORMAT,
            (false, false, true) => LONG_FORMAT,
            (false, false, false) => DEFAULT_FORMAT,
        };
        (parse_format(text), Vec::new())
    };
    for name in unknown {
        eprintln!("squeue: error: Invalid job format specification: {name}");
    }
    let sort_text = args.sort.clone().or_else(|| env_value("SQUEUE_SORT"));
    let sort_text = sort_text.unwrap_or_else(|| if args.start { "S".into() } else { DEFAULT_SORT.into() });

    let state_values = or_env(args.states.clone(), "SQUEUE_STATES");
    let states = if state_values.is_empty() {
        if args.start { StateFilter::Only(vec![JobState::Pending]) } else { default_states() }
    } else {
        common::parse_states(&state_values)?
    };
    let mut users = common::resolve_users(&or_env(args.users.clone(), "SQUEUE_USERS"))?;
    if args.me {
        users.push(common::my_uid());
    }
    let mut nodes = Vec::new();
    for expr in common::flat_list(&args.nodelist) {
        nodes.extend(hostlist::expand(&expr)?);
    }
    let targets = common::parse_job_targets(&args.jobs).map_err(|_| anyhow::anyhow!("Invalid job id specified"))?;
    let mut job_ids: Vec<JobId> = targets.iter().map(|t| t.job_id).collect();
    job_ids.dedup();
    let filter = Filter {
        job_ids,
        expand_arrays: args.array || env_value("SQUEUE_ARRAY").is_some() || targets.iter().any(|t| t.tasks.is_some()),
        targets,
        users,
        accounts: common::flat_list(&or_env(args.accounts.clone(), "SQUEUE_ACCOUNT")),
        partitions: common::flat_list(&or_env(args.partitions.clone(), "SQUEUE_PARTITION")),
        names: common::flat_list(&args.names),
        qos: common::flat_list(&or_env(args.qos.clone(), "SQUEUE_QOS")),
        states,
        nodes,
    };
    if let Some(output) = output {
        return print_document(&filter, output);
    }
    let options = RenderOptions {
        columns,
        header: !args.noheader,
        sort: parse_sort(&sort_text),
        date_line: args.long || args.iterate.is_some(),
        tz: Tz::Local,
    };
    let cluster_line = common::cluster_line(args.clusters.as_deref())?;
    loop {
        // `-M`: Slurm names the cluster before each listing, header or not.
        print!("{}", cluster_line.as_deref().unwrap_or_default());
        let code = query_and_print(&filter, &options, steps)?;
        match args.iterate {
            Some(secs) if code == 0 => {
                println!();
                std::thread::sleep(std::time::Duration::from_secs(secs.max(1)));
            }
            _ => return Ok(code),
        }
    }
}

/// One round trip to ctld and one printout; returns the exit code.
fn query_and_print(filter: &Filter, options: &RenderOptions, steps: bool) -> anyhow::Result<i32> {
    let single_id = filter.job_ids.len() == 1;
    let query = job_query(filter);
    if let Some(format) = server_format(filter, options, steps) {
        return print_rendered(Request::QueryJobLines { query, format }, options);
    }
    let fields = needed_fields(filter, options, steps);
    let payload = match fetch_records(query, fields)? {
        Ok(payload) => payload,
        Err(code) => return Ok(code),
    };
    let (now, records) = match decode_records(&payload)? {
        Ok(answer) => answer,
        Err(code) => return Ok(code),
    };
    // Records are rendered as they are read and dropped (steps, rarely asked for, are kept).
    let mut listing = listing::Listing::new(options, now, records.announced());
    let mut kept = Vec::new();
    let target_seen = select(records, filter, single_id, |job| {
        if steps {
            kept.push(job);
        } else {
            listing.push(&job);
        }
    })?;
    if single_id && !target_seen {
        return Ok(common::load_jobs_failed("Invalid job id specified"));
    }
    let mut stdout = std::io::stdout().lock();
    if steps {
        stdout.write_all(render_steps(&kept, now, options).as_bytes())?;
    } else {
        listing.write_to(&mut stdout)?;
    }
    stdout.flush()?;
    Ok(0)
}

/// What to ask ctld for `filter`. A single id is looked up whatever its state, so that an
/// unknown id can be told from one the state filter hides.
fn job_query(filter: &Filter) -> JobQuery {
    let single_id = filter.job_ids.len() == 1;
    JobQuery {
        job_ids: filter.job_ids.clone(),
        users: filter.users.clone(),
        partitions: filter.partitions.clone(),
        states: if single_id { Vec::new() } else { filter.states.to_query() },
        include_finished: single_id
            || match &filter.states {
                StateFilter::All => true,
                StateFilter::Only(states) => states.iter().any(|s| s.is_terminal()),
            },
    }
}

/// The encoded answer to a record query, or the exit code after Slurm's error line.
fn fetch_records(query: JobQuery, fields: JobFields) -> anyhow::Result<Result<Vec<u8>, i32>> {
    match crate::client::call_payload(&Request::QueryJobFields { query, fields }) {
        Ok(payload) => Ok(Ok(payload)),
        Err(error) => Ok(Err(common::load_jobs_failed(error))),
    }
}

/// The time and records of an answer, or the exit code after Slurm's error line.
fn decode_records(payload: &[u8]) -> anyhow::Result<Result<(UnixTime, JobRecords<'_>), i32>> {
    match read_jobs(payload)? {
        Answer::Jobs { now, records } => Ok(Ok((now, records))),
        Answer::Other(Response::Error { code, .. }) => Ok(Err(common::load_jobs_failed(code.message()))),
        Answer::Other(other) => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    }
}

/// `--json`/`--yaml`: every field of the jobs `filter` selects, as one document.
fn print_document(filter: &Filter, output: json::Output) -> anyhow::Result<i32> {
    let payload = match fetch_records(job_query(filter), JobFields::ALL)? {
        Ok(payload) => payload,
        Err(code) => return Ok(code),
    };
    let records = match decode_records(&payload)? {
        Ok((_, records)) => records,
        Err(code) => return Ok(code),
    };
    let single_id = filter.job_ids.len() == 1;
    let mut jobs = Vec::new();
    let target_seen = select(records, filter, single_id, |job| jobs.push(job))?;
    if single_id && !target_seen {
        return Ok(common::load_jobs_failed("Invalid job id specified"));
    }
    json::print(&json::jobs::document(&jobs), output)?;
    Ok(0)
}

/// The line format to have ctld render, when it can render this listing whole: no steps, no
/// array expansion, no `-j` targets, no filters ctld's query does not apply, and every column
/// one it renders (timestamps are rendered here, in the client's time zone). ctld keeps rendered
/// lines per snapshot chunk, so repeated polls of a deep queue cost it a copy.
fn server_format(filter: &Filter, options: &RenderOptions, steps: bool) -> Option<LineFormat> {
    let client_filters = !filter.targets.is_empty()
        || !filter.accounts.is_empty()
        || !filter.names.is_empty()
        || !filter.qos.is_empty()
        || !filter.nodes.is_empty();
    if steps || filter.expand_arrays || client_filters {
        return None;
    }
    let columns = options
        .columns
        .iter()
        .map(|c| {
            Some(LineColumn {
                prefix: c.prefix.clone(),
                field: c.field,
                width: c.width.map(u32::try_from).transpose().ok()?,
                right: c.right,
                suffix: c.suffix.clone(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let format = LineFormat { columns, sort: options.sort.clone() };
    format.check().is_ok().then_some(format)
}

/// Prints a listing ctld renders (see [`server_format`]).
fn print_rendered(request: Request, options: &RenderOptions) -> anyhow::Result<i32> {
    let (now, rows) = match common::jobs_answer(crate::client::call(&request)) {
        Ok(Response::JobLines { now, rows, .. }) => (now, rows),
        Ok(other) => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        Err(code) => return Ok(code),
    };
    let rows = job_lines(&rows).ok_or_else(|| anyhow::anyhow!("malformed job lines from the controller"))?;
    let mut stdout = std::io::stdout().lock();
    listing::write_rendered(options, now, rows, &mut stdout)?;
    stdout.flush()?;
    Ok(0)
}

/// Answers of at least this many records are decoded on a second thread while the first
/// renders (decoding and rendering cost about the same; a thread costs more than a short list).
const PIPELINE_FROM: usize = 2_000;

/// Records decoded per hand-over between the two threads.
const BATCH: usize = 256;

/// Decodes `records`, expands arrays if asked, and hands every record that passes `filter` to
/// `show` in order; returns whether any record was one of `-j`'s targets (for a single id).
fn select(
    records: JobRecords<'_>,
    filter: &Filter,
    single_id: bool,
    mut show: impl FnMut(JobInfo),
) -> anyhow::Result<bool> {
    let decode = |records: JobRecords<'_>, show: &mut dyn FnMut(JobInfo)| -> anyhow::Result<bool> {
        let mut target_seen = false;
        for job in records {
            let job = job?;
            target_seen |= single_id && filter.targets.iter().any(|t| t.matches(&job));
            if filter.expand_arrays {
                job.expand_array().into_iter().filter(|job| filter.matches(job)).for_each(&mut *show);
            } else if filter.matches(&job) {
                show(job);
            }
        }
        Ok(target_seen)
    };
    if records.announced() < PIPELINE_FROM {
        return decode(records, &mut show);
    }
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<JobInfo>>(8);
        let decoder = scope.spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            let seen = decode(records, &mut |job| {
                batch.push(job);
                if batch.len() == BATCH {
                    // The receiver only goes away once this thread is done.
                    let _ = tx.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
                }
            });
            let _ = tx.send(batch);
            seen
        });
        rx.into_iter().flatten().for_each(&mut show);
        decoder.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the record decoder failed")))
    })
}

#[cfg(test)]
mod tests {
    use super::super::scenario::{self, sample_stdout};
    use super::*;
    use expect_test::expect;

    fn options(format: &str) -> RenderOptions {
        RenderOptions {
            columns: parse_format(format),
            header: true,
            sort: parse_sort(DEFAULT_SORT),
            date_line: false,
            tz: Tz::Fixed(0),
        }
    }

    /// The queue of the sample capture.
    fn queue() -> Vec<JobInfo> {
        scenario::queue()
    }

    #[test]
    fn default_matches_slurm() {
        let jobs: Vec<JobInfo> = queue().into_iter().filter(|j| default_states().matches(j.state())).collect();
        assert_eq!(render(&jobs, scenario::NOW, &options(DEFAULT_FORMAT)), sample_stdout("squeue_default.txt"));
    }

    #[test]
    fn format_matches_slurm() {
        let jobs = queue();
        assert_eq!(render(&jobs, scenario::NOW, &options("%i %P %j %u %t %M %D %R")), sample_stdout("squeue_fmt.txt"));
        let mut noheader = options("%i|%T|%r");
        noheader.header = false;
        assert_eq!(render(&jobs, scenario::NOW, &noheader), sample_stdout("squeue_noheader_fmt.txt"));
    }

    #[test]
    fn all_fields() {
        let columns = parse_format("%all");
        let letters: String = columns.iter().filter_map(|c| c.letter).collect();
        assert_eq!(letters, "abcdefghijklmnopqrtuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
        assert!(columns.iter().all(|c| c.field != Field::Unknown && c.width.is_none()));
        assert_eq!(columns.iter().filter(|c| c.suffix == "|").count(), columns.len() - 1);
        let header = render(&[], scenario::NOW, &options("%all"));
        assert!(header.starts_with("ACCOUNT|TRES_PER_NODE|MIN_CPUS|"), "{header}");
    }

    /// A filter every job passes.
    fn every_job() -> Filter {
        Filter {
            job_ids: Vec::new(),
            targets: Vec::new(),
            expand_arrays: false,
            users: Vec::new(),
            accounts: Vec::new(),
            partitions: Vec::new(),
            names: Vec::new(),
            qos: Vec::new(),
            states: StateFilter::All,
            nodes: Vec::new(),
        }
    }

    /// Long answers are decoded on a second thread: the jobs shown, their order and the target
    /// check are those of the one-thread path, for answers on both sides of the threshold.
    #[test]
    fn pipelined_selection_matches_one_thread() {
        let sample = queue();
        for count in [PIPELINE_FROM - 1, PIPELINE_FROM + BATCH * 3 + 7] {
            let jobs: Vec<JobInfo> = (0..count)
                .map(|i| {
                    let mut job = sample[i % sample.len()].clone();
                    job.job_id = u32::try_from(i).unwrap() + 1;
                    job
                })
                .collect();
            let payload = postcard::to_allocvec(&Response::Jobs { now: scenario::NOW, jobs: jobs.clone() }).unwrap();
            let target = common::parse_job_targets(&["7".to_owned()]).unwrap();
            let filters = [
                every_job(),
                Filter { states: default_states(), expand_arrays: true, ..every_job() },
                Filter { names: vec![sample[0].name.clone()], targets: target, ..every_job() },
            ];
            for filter in filters {
                let Answer::Jobs { records, .. } = read_jobs(&payload).unwrap() else { panic!("not a job list") };
                let mut shown = Vec::new();
                let seen = select(records, &filter, true, |job| shown.push(job)).unwrap();
                let expected: Vec<JobInfo> = jobs
                    .iter()
                    .flat_map(|job| if filter.expand_arrays { job.expand_array() } else { vec![job.clone()] })
                    .filter(|job| filter.matches(job))
                    .collect();
                assert_eq!(shown, expected, "{count} records");
                assert_eq!(seen, jobs.iter().any(|job| filter.targets.iter().any(|t| t.matches(job))));
            }
        }
    }

    /// A listing ctld renders prints exactly what the client renders itself, for every format
    /// ctld takes (each field alone, the standard formats, `-O`), in every sort order.
    #[test]
    fn rendered_by_ctld_matches_rendered_here() {
        let jobs = queue();
        let filter = every_job();
        let mut formats: Vec<Vec<Column>> = FIELDS
            .iter()
            .filter_map(|def| def.letter)
            .map(|letter| parse_format(&format!("%.7{letter} |%{letter}")))
            .collect();
        formats.extend([DEFAULT_FORMAT, LONG_FORMAT, "%i %P %j %u %t %M %D %R"].map(parse_format));
        formats.push(parse_long_format("JobID:8,State:.10,Reason,NumNodes:4|,TimeLeft").0);
        let mut server_rendered = 0;
        for columns in formats {
            for sort in ["", DEFAULT_SORT, "-M,i", "N,-D", "u,-j,P"] {
                let mut options = options("%i");
                options.columns = columns.clone();
                options.sort = parse_sort(sort);
                let Some(format) = server_format(&filter, &options, false) else {
                    assert!(columns.iter().any(|c| c.field.needs_client()), "{columns:?}");
                    continue;
                };
                server_rendered += 1;
                let mut rows = Vec::new();
                let (mut line, mut key, mut cell) = (String::new(), Vec::new(), String::new());
                for job in &jobs {
                    line.clear();
                    key.clear();
                    queue_lines::render_line(&format, job, scenario::NOW, &mut line, &mut key, &mut cell);
                    drover_shared::proto::client::push_job_line(&mut rows, &key, line.as_bytes());
                }
                let mut printed = Vec::new();
                listing::write_rendered(&options, scenario::NOW, job_lines(&rows).unwrap(), &mut printed).unwrap();
                let here = render(&jobs, scenario::NOW, &options);
                assert_eq!(String::from_utf8(printed).unwrap(), here, "{columns:?} sorted by {sort:?}");
            }
        }
        assert!(server_rendered > 200, "{server_rendered}");
    }

    /// Every column and sort key renders the same from a record carrying only the fields
    /// [`needed_fields`] asks for as from the full record.
    #[test]
    fn needs_cover_every_field() {
        let mut jobs = queue();
        // One record with every text field set, so that no column reads an empty field by luck.
        jobs.push(JobInfo {
            job_id: 999,
            comment: Some("note".into()),
            dependency: Some("afterok:1".into()),
            command: Some("/home/alice/run.sh".into()),
            work_dir: "/home/alice".into(),
            stdout: "/home/alice/out".into(),
            stderr: "/home/alice/err".into(),
            stdin: "/home/alice/in".into(),
            constraint: Some("a100".into()),
            nodelist_requested: Some("n1".into()),
            exclude: Some("n2".into()),
            group: "vision".into(),
            tres_per_node: "gres:gpu:1".into(),
            ..jobs[0].clone()
        });
        let filter = every_job();
        for def in FIELDS {
            let Some(letter) = def.letter else { continue };
            for (format, sort) in [(format!("%{letter}"), "i".to_owned()), ("%i".to_owned(), format!("{letter},i"))] {
                let mut options = options(&format);
                options.sort = parse_sort(&sort);
                let fields = needed_fields(&filter, &options, false);
                let lean: Vec<JobInfo> =
                    jobs.iter().map(|job| drover_shared::job::fields::project(job, fields)).collect();
                let (full, lean) = (render(&jobs, scenario::NOW, &options), render(&lean, scenario::NOW, &options));
                assert_eq!(full, lean, "format {format} sort {sort}");
                let (full, lean_steps) = (render_steps(&jobs, scenario::NOW, &options), {
                    let fields = needed_fields(&filter, &options, true);
                    let lean: Vec<JobInfo> =
                        jobs.iter().map(|job| drover_shared::job::fields::project(job, fields)).collect();
                    render_steps(&lean, scenario::NOW, &options)
                });
                assert_eq!(full, lean_steps, "steps, format {format} sort {sort}");
            }
        }
        // The filters read what they compare.
        let narrow = Filter {
            accounts: vec!["physics".into()],
            names: vec!["train".into()],
            qos: vec!["normal".into()],
            nodes: vec!["n1".into()],
            ..filter
        };
        let fields = needed_fields(&narrow, &options("%i"), false);
        for job in &jobs {
            let lean = drover_shared::job::fields::project(job, fields);
            assert_eq!(narrow.matches(job), narrow.matches(&lean), "job {}", job.job_id);
        }
    }

    #[test]
    fn long_matches_slurm() {
        let mut long = options(LONG_FORMAT);
        long.date_line = true;
        assert_eq!(render(&queue(), scenario::NOW, &long), sample_stdout("squeue_long.txt"));
    }

    #[test]
    fn long_format_option_matches_slurm() {
        // `-O JobID` is the record's own id (30, not 29_0).
        let expected = sample_stdout("squeue_json_like_fields.txt");
        let (columns, unknown) = parse_long_format("JobID,Name,State,Reason,TimeLimit,NumCPUs,Partition");
        assert!(unknown.is_empty());
        let opts = RenderOptions { columns, ..options("") };
        assert_eq!(render(&queue(), scenario::NOW, &opts), expected);
    }

    #[test]
    fn filters_match_slurm() {
        let select = |filter: &Filter| -> Vec<JobInfo> { queue().into_iter().filter(|j| filter.matches(j)).collect() };
        let base = Filter { states: default_states(), ..every_job() };
        let nobody = Filter { users: vec![65534], ..base.clone() };
        assert_eq!(
            render(&select(&nobody), scenario::NOW, &options(DEFAULT_FORMAT)),
            sample_stdout("squeue_user_nobody.txt")
        );
        let pending = Filter { states: StateFilter::Only(vec![JobState::Pending]), ..base.clone() };
        assert_eq!(
            render(&select(&pending), scenario::NOW, &options(DEFAULT_FORMAT)),
            sample_stdout("squeue_pending.txt")
        );
        let two = Filter { job_ids: vec![36, 37], ..base.clone() };
        let mut jobs = select(&two);
        for job in &mut jobs {
            job.reason = "DependencyNeverSatisfied".into(); // captured after the sleeper was cancelled
        }
        assert_eq!(render(&jobs, scenario::NOW, &options(DEFAULT_FORMAT)), sample_stdout("squeue_dep_never.txt"));
    }

    #[test]
    fn arrays_match_slurm() {
        let expand = |jobs: &[JobInfo]| -> Vec<JobInfo> { jobs.iter().flat_map(JobInfo::expand_array).collect() };
        let array = scenario::array_29();
        assert_eq!(render(&array, scenario::NOW, &options(DEFAULT_FORMAT)), sample_stdout("squeue_array.txt"));
        assert_eq!(
            render(&expand(&array), scenario::NOW, &options(DEFAULT_FORMAT)),
            sample_stdout("squeue_array_r.txt")
        );
        let held = scenario::array_32();
        assert_eq!(render(&held, scenario::NOW, &options(DEFAULT_FORMAT)), sample_stdout("squeue_array_held.txt"));
        assert_eq!(
            render(&expand(&held), scenario::NOW, &options(DEFAULT_FORMAT)),
            sample_stdout("squeue_array_r_flag.txt")
        );
        // `-j 29_2,29_1` picks single tasks, pending or running.
        let filter = Filter {
            job_ids: vec![29],
            targets: common::parse_job_targets(&["29_2,29_1".to_owned()]).expect("targets"),
            expand_arrays: true,
            users: Vec::new(),
            accounts: Vec::new(),
            partitions: Vec::new(),
            names: Vec::new(),
            qos: Vec::new(),
            states: default_states(),
            nodes: Vec::new(),
        };
        let picked: Vec<JobInfo> = expand(&array).into_iter().filter(|j| filter.matches(j)).collect();
        let mut opts = options("%i %F %K %A %t");
        opts.header = false;
        expect![[r#"
            29_2 29 2 29 PD
            29_1 29 1 31 R
        "#]]
        .assert_eq(&render(&picked, scenario::NOW, &opts));
    }

    #[test]
    fn start_matches_slurm() {
        let mut jobs: Vec<JobInfo> = queue().into_iter().filter(|j| j.state() == JobState::Pending).collect();
        jobs.sort_by_key(|job| job.job_id); // ctld's order; --start ties keep it
        let opts = RenderOptions { sort: parse_sort("S"), ..options(START_FORMAT) };
        assert_eq!(render(&jobs, scenario::NOW, &opts), sample_stdout("squeue_start.txt"));
    }

    #[test]
    fn steps_match_slurm() {
        let jobs: Vec<JobInfo> = queue().into_iter().filter(|j| j.state() == JobState::Running).collect();
        assert_eq!(render_steps(&jobs, scenario::NOW, &options(STEPS_FORMAT)), sample_stdout("squeue_steps.txt"));
    }

    fn check(format: &str, expect: expect_test::Expect) {
        let mut jobs = queue();
        jobs.truncate(1);
        jobs.push(scenario::queue().into_iter().find(|j| j.job_id == 25).expect("sleeper"));
        let mut opts = options(format);
        opts.sort = parse_sort("i");
        expect.assert_eq(&render(&jobs, scenario::NOW, &opts));
    }

    #[test]
    fn other_fields() {
        check(
            "%A|%F|%K|%a|%q|%U|%g|%G|%l|%L|%C|%b|%m|%N|%Q|%y|%c|%h|%B|%E|%k|%o|%Z|%Y|%z",
            expect![[r#"
                JOBID|ARRAY_JOB_ID|ARRAY_TASK_ID|ACCOUNT|QOS|UID|GROUP|GROUP|TIME_LIMIT|TIME_LEFT|CPUS|TRES_PER_NODE|MIN_MEMORY|NODELIST|PRIORITY|NICE|MIN_CPUS|OVER_SUBSCRIBE|EXEC_HOST|DEPENDENCY|COMMENT|COMMAND|WORK_DIR|SCHEDNODES|S:C:T
                25|25|N/A|teama|normal|0|root|0|10:00|9:52|1|N/A|100M|n1|15187|0|1|OK|n1|(null)|(null)|(null)|/tmp/slurm-samples.CYvrXx|(null)|*:*:*
                33|33|N/A|teama|normal|0|root|0|UNLIMITED|UNLIMITED|4|N/A|100M||11250|0|1|NO|n/a|(null)|(null)|(null)|/tmp/slurm-samples.CYvrXx|(null)|*:*:*
            "#]],
        );
        check(
            "%V|%S|%e|%p|%T|%R",
            expect![[r#"
                SUBMIT_TIME|START_TIME|END_TIME|PRIORITY|STATE|NODELIST(REASON)
                2026-11-29T23:35:29|2026-11-29T23:35:31|2026-11-29T23:45:31|0.00000353599899|RUNNING|n1
                2026-11-29T23:35:35|N/A|N/A|0.00000261934474|PENDING|(Resources)
            "#]],
        );
        check(
            ">%5i<%.5j>%!z%-",
            expect![[r#"
                >JOBID< NAME>z
                >25   <sleep>z
                >33   <waitr>z
            "#]],
        );
    }

    #[test]
    fn long_format_widths_and_suffixes() {
        let (columns, unknown) = parse_long_format("JobID:|,StateCompact:.4|,Bogus:x,NodeList:3");
        assert_eq!(unknown, ["Bogus"]);
        let mut jobs = queue();
        jobs.retain(|j| j.job_id == 26);
        let opts = RenderOptions { columns, ..options("") };
        expect![[r#"
            JOBID|  ST|BOGUSxNOD
            26|   R|xn[2-3]
        "#]]
        .assert_eq(&render(&jobs, scenario::NOW, &opts));
    }

    fn parse(args: &[&str]) -> Result<Args, i32> {
        common::parse_args::<Args>("squeue", args.iter().map(OsString::from).collect())
    }

    #[test]
    fn getopt_like_arguments() {
        let args = parse(&["-aho", "%i %t", "--job", "5", "-j6,7", "--states=all", "-u", "nobody"]).expect("valid");
        assert!(args.all && args.noheader);
        assert_eq!(args.format.as_deref(), Some("%i %t"));
        assert_eq!(args.jobs, ["5", "6,7"]);
        assert_eq!((args.states, args.users), (vec!["all".to_owned()], vec!["nobody".to_owned()]));
        let args = parse(&["-O", "JobID:\u{1f},StateCompact:\u{1f},", "--all", "--noconvert", "-s"]).expect("valid");
        assert_eq!(args.steps.as_deref(), Some(""));
        assert_eq!(parse(&["--only-job-state"]).err(), Some(1));
        assert_eq!(parse(&["stray"]).err(), Some(1));
        // getopt takes the next word as `-S`'s value even when it starts with `-`.
        assert_eq!(parse(&["-S", "-i,P"]).expect("valid").sort.as_deref(), Some("-i,P"));
    }

    #[test]
    fn sort_keys() {
        assert_eq!(
            parse_sort("P,t,-p"),
            [
                SortKey { letter: 'P', descending: false },
                SortKey { letter: 't', descending: false },
                SortKey { letter: 'p', descending: true }
            ]
        );
        let mut opts = options("%i");
        opts.header = false;
        opts.sort = parse_sort("-i");
        expect![[r#"
            37
            36
            35
            34
            33
            32_[0-3]
            29_1
            29_0
            29_[2-3]
            28
            27
            26
            25
            23
        "#]]
        .assert_eq(&render(&queue(), scenario::NOW, &opts));
    }
}
