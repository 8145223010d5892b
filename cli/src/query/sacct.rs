//! `sacct`: jobs and their steps from ctld's accounting records, one row per job followed by
//! its step rows (`N.batch`, …) unless `-X`, in fixed-width columns or `|`-separated with
//! `-p`/`-P`.
//!
//! [`run`] turns the options into an [`AccountingQuery`] (the time window is computed here, as
//! Slurm's client does) and prints through the pure [`render`].

use super::common::{self, StateFilter};
use super::format::{self, Tz};
use super::json;
use clap::{ArgAction, Parser};
use drover_shared::UnixTime;
use drover_shared::grammar::mem::format_mem_mb;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::hostlist;
use drover_shared::job::{JobId, JobInfo, MemRequest, StepId, StepInfo};
use drover_shared::proto::client::{AccountingQuery, Request, Response};
use drover_shared::proto::node::JobUsage;
use std::ffi::OsString;

const DEFAULT_FIELDS: &str = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode";
const BRIEF_FIELDS: &str = "JobID,State,ExitCode";
const LONG_FIELDS: &str = "JobID,JobIDRaw,JobName,Partition,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,\
MaxRSSNode,MaxRSSTask,AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks,\
AllocCPUS,Elapsed,State,ExitCode,AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ReqMem,ConsumedEnergy,\
MaxDiskRead,MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,AveDiskWrite,\
ReqTRES,AllocTRES,TRESUsageInAve,TRESUsageInMax,TRESUsageInMaxNode,TRESUsageInMaxTask,TRESUsageInMin,\
TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutMax,TRESUsageOutMaxNode,TRESUsageOutMaxTask,\
TRESUsageOutAve,TRESUsageOutTot";

#[derive(Debug, Parser)]
#[command(
    name = "sacct",
    about = "Show accounting data of Drover jobs and steps",
    disable_help_flag = true,
    infer_long_args = true
)]
struct Args {
    /// Only these accounts.
    #[arg(short = 'A', long = "accounts")]
    accounts: Vec<String>,
    /// Jobs of every user.
    #[arg(short = 'a', long = "allusers")]
    all_users: bool,
    /// Brief listing: JobID, State, ExitCode.
    #[arg(short = 'b', long = "brief")]
    brief: bool,
    /// Also the earlier runs of requeued jobs (`REQUEUED`, `NODE_FAIL`), each before the job's
    /// latest record.
    #[arg(short = 'D', long = "duplicates")]
    duplicates: bool,
    /// Separator for `-p`/`-P` instead of `|`.
    #[arg(long = "delimiter")]
    delimiter: Option<String>,
    /// End of the time window.
    #[arg(short = 'E', long = "endtime")]
    end_time: Option<String>,
    /// List the fields `--format` accepts.
    #[arg(short = 'e', long = "helpformat")]
    help_format: bool,
    /// Print this help.
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// Only these jobs (`N` or `N.step`).
    #[arg(short = 'j', long = "jobs")]
    jobs: Vec<String>,
    /// Accepted for compatibility (every cluster is this one).
    #[arg(short = 'L', long = "allclusters")]
    all_clusters: bool,
    /// Long field list.
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Cluster to query (accepted; Drover serves one cluster).
    #[arg(short = 'M', long = "clusters")]
    clusters: Option<String>,
    /// Only jobs that ran on these nodes.
    #[arg(short = 'N', long = "nodelist")]
    nodelist: Vec<String>,
    /// Only jobs with these names.
    #[arg(long = "name")]
    names: Vec<String>,
    /// Accepted for compatibility; sizes are never converted.
    #[arg(long = "noconvert")]
    noconvert: bool,
    /// No header lines.
    #[arg(short = 'n', long = "noheader")]
    noheader: bool,
    /// Fields to print, `name[%width]`.
    #[arg(short = 'o', long = "format")]
    format: Vec<String>,
    /// `|` after every field.
    #[arg(short = 'p', long = "parsable")]
    parsable: bool,
    /// `|` between fields.
    #[arg(short = 'P', long = "parsable2")]
    parsable2: bool,
    /// Only these QOS.
    #[arg(short = 'q', long = "qos")]
    qos: Vec<String>,
    /// Only these partitions.
    #[arg(short = 'r', long = "partition")]
    partitions: Vec<String>,
    /// Start of the time window.
    #[arg(short = 'S', long = "starttime")]
    start_time: Option<String>,
    /// Only jobs in these states.
    #[arg(short = 's', long = "state")]
    states: Vec<String>,
    /// Print `ReqMem`, `MaxRSS` and `AveRSS` in this unit: K, M, G, T or P.
    #[arg(long = "units")]
    units: Option<String>,
    /// Only these users (names or uids).
    #[arg(short = 'u', long = "user", alias = "uid")]
    users: Vec<String>,
    /// More messages.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Job rows only, no steps.
    #[arg(short = 'X', long = "allocations")]
    allocations: bool,
    /// Print the jobs as Slurm's REST accounting `jobs` response in JSON (formatting options are
    /// ignored).
    #[arg(long = "json")]
    json: bool,
    /// The same document as `--json`, in YAML.
    #[arg(long = "yaml")]
    yaml: bool,
}

/// What a column shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Account,
    AllocCpus,
    AllocNodes,
    AllocTres,
    Cluster,
    Comment,
    Constraints,
    CpuTime,
    CpuTimeRaw,
    DerivedExitCode,
    Elapsed,
    ElapsedRaw,
    Eligible,
    End,
    ExitCode,
    Gid,
    Group,
    JobId,
    JobIdRaw,
    JobName,
    NNodes,
    NodeList,
    NTasks,
    Partition,
    Priority,
    Qos,
    Reason,
    ReqCpus,
    ReqMem,
    ReqNodes,
    ReqTres,
    Start,
    State,
    Submit,
    SubmitLine,
    Suspended,
    Timelimit,
    TimelimitRaw,
    Uid,
    User,
    WorkDir,
    /// CPU time of the batch script's processes (`TotalCPU`, `UserCPU`, `SystemCPU`).
    TotalCpu,
    UserCpu,
    SystemCpu,
    /// Peak RSS of a step's processes: the batch script's on the `.batch` row, the largest task's
    /// of an srun step on its row.
    MaxRss,
    /// The tasks' average peak RSS: known for the `.batch` row (one task).
    AveRss,
    /// Usage Drover does not record (virtual memory, disk I/O, energy …): blank.
    Untracked,
}

impl Field {
    /// Whether the field needs the jobs' measured usage ([`Request::QueryJobUsage`]).
    fn needs_usage(self) -> bool {
        matches!(self, Field::TotalCpu | Field::UserCpu | Field::SystemCpu | Field::MaxRss | Field::AveRss)
    }
}

/// One row of the field table: Slurm's name, default width (negative = left-justified).
struct FieldDef {
    name: &'static str,
    width: i32,
    field: Field,
}

const fn def(name: &'static str, width: i32, field: Field) -> FieldDef {
    FieldDef { name, width, field }
}

/// The fields, in Slurm's table order: a name given with `--format` selects the first field it
/// is a case-insensitive prefix of.
const FIELDS: &[FieldDef] = &[
    def("Account", 10, Field::Account),
    def("AllocCPUS", 10, Field::AllocCpus),
    def("AllocNodes", 10, Field::AllocNodes),
    def("AllocTRES", 10, Field::AllocTres),
    def("AssocID", 10, Field::Untracked),
    def("AveCPU", 10, Field::Untracked),
    def("AveCPUFreq", 10, Field::Untracked),
    def("AveDiskRead", 12, Field::Untracked),
    def("AveDiskWrite", 12, Field::Untracked),
    def("AvePages", 10, Field::Untracked),
    def("AveRSS", 10, Field::AveRss),
    def("AveVMSize", 10, Field::Untracked),
    def("Cluster", 10, Field::Cluster),
    def("Comment", 14, Field::Comment),
    def("Constraints", 19, Field::Constraints),
    def("ConsumedEnergy", 14, Field::Untracked),
    def("CPUTime", 10, Field::CpuTime),
    def("CPUTimeRAW", 10, Field::CpuTimeRaw),
    def("DerivedExitCode", 15, Field::DerivedExitCode),
    def("Elapsed", 10, Field::Elapsed),
    def("ElapsedRaw", 10, Field::ElapsedRaw),
    def("Eligible", 19, Field::Eligible),
    def("End", 19, Field::End),
    def("ExitCode", 8, Field::ExitCode),
    def("GID", 6, Field::Gid),
    def("Group", 9, Field::Group),
    def("JobID", -12, Field::JobId),
    def("JobIDRaw", -12, Field::JobIdRaw),
    def("JobName", 10, Field::JobName),
    def("MaxDiskRead", 12, Field::Untracked),
    def("MaxDiskReadNode", 15, Field::Untracked),
    def("MaxDiskReadTask", 15, Field::Untracked),
    def("MaxDiskWrite", 12, Field::Untracked),
    def("MaxDiskWriteNode", 16, Field::Untracked),
    def("MaxDiskWriteTask", 16, Field::Untracked),
    def("MaxPages", 8, Field::Untracked),
    def("MaxPagesNode", 12, Field::Untracked),
    def("MaxPagesTask", 12, Field::Untracked),
    def("MaxRSS", 10, Field::MaxRss),
    def("MaxRSSNode", 10, Field::Untracked),
    def("MaxRSSTask", 10, Field::Untracked),
    def("MaxVMSize", 10, Field::Untracked),
    def("MaxVMSizeNode", 13, Field::Untracked),
    def("MaxVMSizeTask", 13, Field::Untracked),
    def("MinCPU", 10, Field::Untracked),
    def("MinCPUNode", 10, Field::Untracked),
    def("MinCPUTask", 10, Field::Untracked),
    def("NCPUS", 10, Field::AllocCpus),
    def("NNodes", 8, Field::NNodes),
    def("NodeList", 15, Field::NodeList),
    def("NTasks", 8, Field::NTasks),
    def("Partition", 10, Field::Partition),
    def("Priority", 10, Field::Priority),
    def("QOS", 10, Field::Qos),
    def("Reason", 22, Field::Reason),
    def("ReqCPUFreq", 13, Field::Untracked),
    def("ReqCPUFreqGov", 13, Field::Untracked),
    def("ReqCPUFreqMax", 13, Field::Untracked),
    def("ReqCPUFreqMin", 13, Field::Untracked),
    def("ReqCPUS", 8, Field::ReqCpus),
    def("ReqMem", 10, Field::ReqMem),
    def("ReqNodes", 8, Field::ReqNodes),
    def("ReqTRES", 10, Field::ReqTres),
    def("Reservation", 20, Field::Untracked),
    def("Start", 19, Field::Start),
    def("State", 10, Field::State),
    def("Submit", 19, Field::Submit),
    def("SubmitLine", 20, Field::SubmitLine),
    def("Suspended", 10, Field::Suspended),
    def("SystemCPU", 10, Field::SystemCpu),
    def("Timelimit", 10, Field::Timelimit),
    def("TimelimitRaw", 12, Field::TimelimitRaw),
    def("TotalCPU", 10, Field::TotalCpu),
    def("TRESUsageInAve", 14, Field::Untracked),
    def("TRESUsageInMax", 14, Field::Untracked),
    def("TRESUsageInMaxNode", 18, Field::Untracked),
    def("TRESUsageInMaxTask", 18, Field::Untracked),
    def("TRESUsageInMin", 14, Field::Untracked),
    def("TRESUsageInMinNode", 18, Field::Untracked),
    def("TRESUsageInMinTask", 18, Field::Untracked),
    def("TRESUsageInTot", 14, Field::Untracked),
    def("TRESUsageOutAve", 15, Field::Untracked),
    def("TRESUsageOutMax", 15, Field::Untracked),
    def("TRESUsageOutMaxNode", 19, Field::Untracked),
    def("TRESUsageOutMaxTask", 19, Field::Untracked),
    def("TRESUsageOutTot", 15, Field::Untracked),
    def("UID", 6, Field::Uid),
    def("User", 9, Field::User),
    def("UserCPU", 10, Field::UserCpu),
    def("WCKey", 10, Field::Untracked),
    def("WorkDir", 20, Field::WorkDir),
];

/// One output column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Column {
    name: &'static str,
    field: Field,
    width: usize,
    right: bool,
}

/// A field name given with `--format` that matches no field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Invalid field requested: \"{0}\"")]
pub(crate) struct FieldError(String);

/// Parses `--format` lists: `name[%width]`, comma-separated; `ALL` selects every field.
pub(crate) fn parse_fields(lists: &[String]) -> Result<Vec<Column>, FieldError> {
    let mut columns = Vec::new();
    for item in common::flat_list(lists) {
        let (name, width) = match item.split_once('%') {
            Some((name, width)) => (name, Some(width)),
            None => (item.as_str(), None),
        };
        if name.eq_ignore_ascii_case("all") {
            columns.extend(FIELDS.iter().map(|def| column(def, None)));
            continue;
        }
        let width = match width {
            None => None,
            Some(text) => Some(text.parse::<i32>().map_err(|_| FieldError(item.clone()))?),
        };
        let lower = name.to_ascii_lowercase();
        let def = FIELDS
            .iter()
            .find(|def| !lower.is_empty() && def.name.to_ascii_lowercase().starts_with(&lower))
            .ok_or_else(|| FieldError(name.to_owned()))?;
        columns.push(column(def, width));
    }
    Ok(columns)
}

fn column(def: &FieldDef, width: Option<i32>) -> Column {
    let width = width.unwrap_or(def.width);
    Column {
        name: def.name,
        field: def.field,
        width: usize::try_from(width.unsigned_abs()).unwrap_or(0),
        right: width > 0,
    }
}

/// How rows are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Fixed-width columns, each followed by a space, and a dash line under the header.
    Fixed,
    /// `-p` (`trailing`) or `-P`: values separated by `delimiter`.
    Parsable { delimiter: String, trailing: bool },
}

/// A `-j` item: a job, or one step of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobSelector {
    target: common::JobTarget,
    step: Option<StepId>,
}

/// Parses `-j` items: `N`, `N.batch`, `N.extern`, `N.<n>`.
fn parse_selectors(values: &[String]) -> anyhow::Result<Vec<JobSelector>> {
    let mut selectors = Vec::new();
    for item in values.iter().flat_map(|v| common::split_ids(v)) {
        let (job, step) = match item.split_once('.') {
            Some((job, step)) => (job, Some(step)),
            None => (item, None),
        };
        let target = common::parse_job_target(job);
        let step = match step {
            None => None,
            Some("batch") => Some(StepId::Batch),
            Some("extern") => Some(StepId::Extern),
            Some(n) => Some(StepId::Numbered(n.parse().map_err(|_| anyhow::anyhow!("Invalid job id: {item}"))?)),
        };
        let Some(target) = target else { anyhow::bail!("Invalid job id: {item}") };
        selectors.push(JobSelector { target, step });
    }
    Ok(selectors)
}

/// Everything [`render`] needs besides the jobs.
#[derive(Debug, Clone)]
pub(crate) struct RenderOptions {
    pub(crate) columns: Vec<Column>,
    pub(crate) header: bool,
    pub(crate) layout: Layout,
    /// `-X`: no step rows.
    pub(crate) allocations: bool,
    /// `-j` items; a job or step row is printed when one selects it (empty = all).
    pub(crate) selectors: Vec<JobSelector>,
    /// The cluster's name, for `Cluster`.
    pub(crate) cluster: String,
    pub(crate) tz: Tz,
    /// Measured usage by job id, for `TotalCPU`, `MaxRSS` … (fetched only when shown).
    pub(crate) usage: std::collections::HashMap<JobId, JobUsage>,
    /// Measured usage of srun steps by `(job id, step id)`.
    pub(crate) step_usage: std::collections::HashMap<(JobId, u32), JobUsage>,
    /// `--units`: sizes in this unit (`K` … `P`) instead of the largest that keeps them above 1.
    pub(crate) units: Option<char>,
}

/// A size in KiB in the fixed unit `unit` (`--units`): two decimals unless whole (`0.05G`, `16G`).
fn kib_in(value: u64, unit: char) -> String {
    let exponent = ['K', 'M', 'G', 'T', 'P'].iter().position(|u| *u == unit).unwrap_or(0);
    let number = value as f64 / 1024f64.powi(i32::try_from(exponent).unwrap_or(0));
    if number.fract() == 0.0 { format!("{number:.0}{unit}") } else { format!("{number:.2}{unit}") }
}

/// `TotalCPU`-style time: `MM:SS.mmm` below an hour, else `HH:MM:SS` or `D-HH:MM:SS`.
fn cpu_time(usec: u64) -> String {
    let secs = usec / 1_000_000;
    if secs < 3600 {
        format!("{:02}:{:02}.{:03}", secs / 60, secs % 60, usec % 1_000_000 / 1000)
    } else {
        format::hms(i64::try_from(secs).unwrap_or(i64::MAX))
    }
}

/// A size in KiB as sacct prints `MaxRSS`: divided by 1024 while above 1024, with the unit;
/// two decimals unless exact (`1024K`, `50.79M`, `2G`).
fn kib(value: u64) -> String {
    let units = ['K', 'M', 'G', 'T', 'P'];
    let mut number = value as f64;
    let mut unit = 0;
    while number > 1024.0 && unit + 1 < units.len() {
        number /= 1024.0;
        unit += 1;
    }
    if number.fract() == 0.0 { format!("{number:.0}{}", units[unit]) } else { format!("{number:.2}{}", units[unit]) }
}

/// A job row or one of its step rows.
#[derive(Clone, Copy)]
enum Row<'a> {
    Job(&'a JobInfo),
    Step(&'a JobInfo, &'a StepInfo),
}

/// Renders the header and one row per job (in the order given) followed by its steps.
pub(crate) fn render(jobs: &[JobInfo], now: UnixTime, options: &RenderOptions) -> String {
    let mut out = String::new();
    if options.header {
        let names: Vec<&str> = options.columns.iter().map(|c| c.name).collect();
        push_line(&mut out, options, &names, false);
        if options.layout == Layout::Fixed {
            let dashes: Vec<String> = options.columns.iter().map(|c| "-".repeat(c.width)).collect();
            let dashes: Vec<&str> = dashes.iter().map(String::as_str).collect();
            push_line(&mut out, options, &dashes, false);
        }
    }
    for job in jobs {
        let mut rows = Vec::new();
        if selected(options, job, None) {
            rows.push(Row::Job(job));
        }
        if !options.allocations {
            rows.extend(
                job.steps.iter().filter(|s| selected(options, job, Some(s.step_id))).map(|s| Row::Step(job, s)),
            );
        }
        for row in rows {
            let values: Vec<String> = options.columns.iter().map(|c| value(c.field, row, now, options)).collect();
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            push_line(&mut out, options, &values, true);
        }
    }
    out
}

fn selected(options: &RenderOptions, job: &JobInfo, step: Option<StepId>) -> bool {
    options.selectors.is_empty()
        || options.selectors.iter().any(|s| s.target.matches(job) && (s.step.is_none() || s.step == step))
}

/// One line; `values` are cut with a `+` (fixed layout) when `mark_cut`, headers without. Control
/// characters in a value print as `?`, and in the parsable layouts so does the delimiter inside a
/// value, so no stored string can add a line or a column (`drover_shared::text`).
fn push_line(out: &mut String, options: &RenderOptions, values: &[&str], mark_cut: bool) {
    match &options.layout {
        Layout::Fixed => {
            for (column, value) in options.columns.iter().zip(values) {
                let value = &*drover_shared::text::printable(value);
                if mark_cut && value.chars().count() > column.width && column.width > 0 {
                    let cut: String = value.chars().take(column.width - 1).chain(['+']).collect();
                    out.push_str(&cut);
                } else {
                    format::push_cell(out, value, Some(column.width), column.right, true);
                }
                out.push(' ');
            }
        }
        Layout::Parsable { delimiter, trailing } => {
            let values: Vec<_> = values.iter().map(|v| drover_shared::text::delimited(v, delimiter)).collect();
            out.push_str(&values.join(delimiter.as_str()));
            if *trailing && !values.is_empty() {
                out.push_str(delimiter);
            }
        }
    }
    out.push('\n');
}

/// `name=value` pairs sorted by name, as sacct prints TRES.
fn sorted_tres(mut tres: Vec<(&'static str, String)>) -> String {
    tres.sort_by(|a, b| a.0.cmp(b.0));
    common::tres_string(&tres)
}

fn exit_code(status: drover_shared::job::WaitStatus) -> String {
    let (code, signal) = common::sacct_exit_parts(status);
    format!("{code}:{signal}")
}

fn value(field: Field, row: Row<'_>, now: UnixTime, options: &RenderOptions) -> String {
    match row {
        Row::Job(job) => job_value(field, job, now, options),
        Row::Step(job, step) => step_value(field, job, step, now, options),
    }
}

fn job_value(field: Field, job: &JobInfo, now: UnixTime, options: &RenderOptions) -> String {
    let tz = options.tz;
    let state = job.state();
    let elapsed = job.elapsed(now);
    match field {
        Field::Account => job.account.clone(),
        Field::AllocCpus => job.num_cpus.to_string(),
        Field::AllocNodes => if common::has_started(job) { job.nodes.len() } else { 0 }.to_string(),
        Field::AllocTres => {
            if common::has_started(job) {
                sorted_tres(common::job_tres(job))
            } else {
                String::new()
            }
        }
        Field::Cluster => options.cluster.clone(),
        Field::Comment => job.comment.clone().unwrap_or_default(),
        Field::Constraints => job.constraint.clone().unwrap_or_default(),
        Field::CpuTime => format::hms(elapsed * i64::from(job.num_cpus)),
        Field::CpuTimeRaw => (elapsed * i64::from(job.num_cpus)).to_string(),
        Field::DerivedExitCode => {
            let worst = job
                .steps
                .iter()
                .filter(|s| matches!(s.step_id, StepId::Numbered(_)))
                .map(|s| s.exit_status)
                .max_by_key(|s| common::sacct_exit_parts(*s));
            worst.map_or_else(|| "0:0".into(), exit_code)
        }
        Field::Elapsed => format::hms(elapsed),
        Field::ElapsedRaw => elapsed.to_string(),
        Field::Eligible => format::timestamp_or(job.eligible_time, tz, "Unknown"),
        Field::End => format::timestamp_or(job.end_time, tz, "Unknown"),
        Field::ExitCode => {
            if common::ended_by_controller(state) {
                "0:0".into()
            } else {
                exit_code(job.exit_status)
            }
        }
        Field::Gid => job.gid.to_string(),
        Field::Group => job.group.clone(),
        Field::JobId => job.display_id(),
        Field::JobIdRaw => job.job_id.to_string(),
        Field::JobName => job.name.clone(),
        Field::NNodes | Field::ReqNodes => job.num_nodes.to_string(),
        Field::NodeList => {
            if job.nodes.is_empty() {
                "None assigned".into()
            } else {
                hostlist::compress(&job.nodes)
            }
        }
        Field::Partition => job.partition.clone(),
        Field::Priority => job.priority.to_string(),
        Field::Qos => job.qos.clone(),
        // Accounting keeps the reason a job waited; once it ran, Slurm shows `None`.
        Field::Reason => {
            if job.start_time.is_none() && !state.is_terminal() {
                job.reason.clone()
            } else {
                "None".into()
            }
        }
        Field::ReqCpus => job.num_cpus.to_string(),
        Field::ReqMem => match options.units {
            Some(unit) => kib_in(common::job_min_memory(job).1 * 1024, unit),
            None => format_mem_mb(common::job_min_memory(job).1),
        },
        Field::ReqTres => sorted_tres(common::job_tres(job)),
        Field::Start => format::timestamp_or(job.start_time, tz, "Unknown"),
        Field::State => match (state, job.cancelled_by) {
            (drover_shared::job::JobState::Cancelled, Some(uid)) => format!("CANCELLED by {uid}"),
            _ => state.long_name().into(),
        },
        Field::Submit => format::timestamp(job.submit_time, tz),
        Field::SubmitLine => job.submit_line.clone(),
        Field::Suspended => format::hms(0),
        Field::Timelimit => match job.time_limit {
            Some(TimeLimit::Minutes(minutes)) => format::hms(i64::from(minutes) * 60),
            Some(TimeLimit::Unlimited) => "UNLIMITED".into(),
            None => "Partition_Limit".into(),
        },
        Field::TimelimitRaw => match job.time_limit {
            Some(TimeLimit::Minutes(minutes)) => minutes.to_string(),
            Some(TimeLimit::Unlimited) => "UNLIMITED".into(),
            None => "Partition_Limit".into(),
        },
        Field::Uid => job.uid.to_string(),
        Field::User => job.user.clone(),
        Field::WorkDir => job.work_dir.clone(),
        Field::TotalCpu | Field::UserCpu | Field::SystemCpu => {
            usage_value(field, options.usage.get(&job.job_id), options.units)
        }
        Field::NTasks | Field::MaxRss | Field::AveRss | Field::Untracked => String::new(),
    }
}

/// A usage field of a job or `.batch` row; blank when the job was not measured.
fn usage_value(field: Field, usage: Option<&JobUsage>, units: Option<char>) -> String {
    let Some(usage) = usage else { return String::new() };
    match field {
        Field::TotalCpu => cpu_time(usage.user_usec + usage.system_usec),
        Field::UserCpu => cpu_time(usage.user_usec),
        Field::SystemCpu => cpu_time(usage.system_usec),
        Field::MaxRss | Field::AveRss => {
            units.map_or_else(|| kib(usage.max_rss_kib), |unit| kib_in(usage.max_rss_kib, unit))
        }
        _ => String::new(),
    }
}

fn step_value(field: Field, job: &JobInfo, step: &StepInfo, now: UnixTime, options: &RenderOptions) -> String {
    let tz = options.tz;
    let elapsed = step.start_time.map_or(0, |start| (step.end_time.unwrap_or(now) - start).max(0));
    let n_nodes = step.nodes.len();
    match field {
        Field::Account => job.account.clone(),
        Field::AllocCpus => step.num_cpus.to_string(),
        Field::AllocNodes | Field::NNodes => n_nodes.to_string(),
        Field::AllocTres => {
            let mem_mb = match job.mem {
                Some(MemRequest::PerCpu(mb)) => mb.saturating_mul(u64::from(step.num_cpus)),
                _ => job.mem_per_node_mb.saturating_mul(u64::try_from(n_nodes).unwrap_or(0)),
            };
            let tres =
                vec![("cpu", step.num_cpus.to_string()), ("mem", format_mem_mb(mem_mb)), ("node", n_nodes.to_string())];
            sorted_tres(tres)
        }
        Field::Cluster => options.cluster.clone(),
        Field::CpuTime => format::hms(elapsed * i64::from(step.num_cpus)),
        Field::CpuTimeRaw => (elapsed * i64::from(step.num_cpus)).to_string(),
        Field::Elapsed => format::hms(elapsed),
        Field::ElapsedRaw => elapsed.to_string(),
        Field::Eligible | Field::Start | Field::Submit => format::timestamp_or(step.start_time, tz, "Unknown"),
        Field::End => format::timestamp_or(step.end_time, tz, "Unknown"),
        Field::ExitCode => exit_code(step.exit_status),
        Field::JobId => format!("{}.{}", job.display_id(), step.step_id),
        Field::JobIdRaw => format!("{}.{}", job.job_id, step.step_id),
        Field::JobName => step.name.clone(),
        Field::NodeList => {
            if step.nodes.is_empty() {
                "None assigned".into()
            } else {
                hostlist::compress(&step.nodes)
            }
        }
        Field::NTasks => step.num_tasks.to_string(),
        Field::State => step.state.long_name().into(),
        // The batch script as its supervisor measured it; srun steps as their nodes did (the
        // average over tasks is known only for the batch script's one task).
        Field::TotalCpu | Field::UserCpu | Field::SystemCpu | Field::MaxRss | Field::AveRss => match step.step_id {
            StepId::Batch => usage_value(field, options.usage.get(&job.job_id), options.units),
            StepId::Numbered(k) if field != Field::AveRss => {
                usage_value(field, options.step_usage.get(&(job.job_id, k)), options.units)
            }
            _ => String::new(),
        },
        Field::Suspended => format::hms(0),
        Field::Comment
        | Field::Constraints
        | Field::DerivedExitCode
        | Field::Gid
        | Field::Group
        | Field::Partition
        | Field::Priority
        | Field::Qos
        | Field::Reason
        | Field::ReqCpus
        | Field::ReqMem
        | Field::ReqNodes
        | Field::ReqTres
        | Field::SubmitLine
        | Field::Timelimit
        | Field::TimelimitRaw
        | Field::Uid
        | Field::User
        | Field::WorkDir
        | Field::Untracked => String::new(),
    }
}

/// The default time window of Slurm's sacct: with `-j`, since the epoch; with `-s` only, the
/// present instant; otherwise since local midnight. `-S`/`-E` override either end; with `-s` an
/// explicit start alone also ends the window.
pub(crate) fn time_window(
    has_jobs: bool,
    has_states: bool,
    start: Option<UnixTime>,
    end: Option<UnixTime>,
    now: UnixTime,
    tz: Tz,
) -> (UnixTime, UnixTime) {
    let default_start = match (has_jobs, has_states) {
        (true, _) => 0,
        (false, true) => now,
        (false, false) => tz.midnight(now),
    };
    let window_start = start.unwrap_or(default_start);
    let window_end = match (end, start) {
        (Some(end), _) => end,
        (None, Some(start)) if has_states => start,
        _ => now,
    };
    (window_start, window_end)
}

fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// Prints the field names for `-e`, four to a line.
fn print_field_names() {
    for chunk in FIELDS.chunks(4) {
        let line: Vec<String> = chunk.iter().map(|def| format!("{:<20}", def.name)).collect();
        println!("{}", line.join("").trim_end());
    }
}

/// Runs `sacct`.
/// `sacct --help` in Slurm's layout (`sacct [<OPTION>]`, `Valid <OPTION> values are:`, each
/// option as `-A, --accounts:` over its description), generated from the options sacct takes.
fn help_text() -> String {
    let mut out = common::option_list_help::<Args>("sacct");
    out.push_str(
        "\n     valid start/end time formats are...\n\t           HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], \
         MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], today, tomorrow, midnight, noon, fika, teatime, \
         now[{+|-}count[seconds|minutes|hours|days|weeks]]\n",
    );
    out
}

pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    if args.iter().take_while(|a| *a != "--").any(|a| a == "--help" || a == "-h") {
        print!("{}", help_text());
        return Ok(0);
    }
    let args = match common::parse_args::<Args>("sacct", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    if args.help_format {
        print_field_names();
        return Ok(0);
    }
    let field_lists = if !args.format.is_empty() {
        args.format.clone()
    } else if let Some(text) = env_value("SACCT_FORMAT") {
        vec![text]
    } else if args.brief {
        vec![BRIEF_FIELDS.into()]
    } else if args.long {
        vec![LONG_FIELDS.into()]
    } else {
        vec![DEFAULT_FIELDS.into()]
    };
    let output = json::Output::from_flags(args.json, args.yaml)?;
    // With `--json`/`--yaml` the fields are not shown: a bad `-o` does not matter.
    let columns = match parse_fields(&field_lists) {
        Err(_) if output.is_some() => Vec::new(),
        columns => columns?,
    };
    let selectors = parse_selectors(&args.jobs)?;
    let states = if args.states.is_empty() { StateFilter::All } else { common::parse_states(&args.states)? };
    let tz = Tz::Local;
    let now = drover_shared::now();
    let start = args.start_time.as_deref().map(|t| format::parse_time_spec(t, now, tz)).transpose()?;
    let end = args.end_time.as_deref().map(|t| format::parse_time_spec(t, now, tz)).transpose()?;
    let (window_start, window_end) = time_window(!selectors.is_empty(), !args.states.is_empty(), start, end, now, tz);
    let mut job_ids: Vec<JobId> = selectors.iter().map(|s| s.target.job_id).collect();
    job_ids.dedup();
    let query = AccountingQuery {
        job_ids,
        users: common::resolve_users(&args.users)?,
        all_users: args.all_users,
        accounts: common::flat_list(&args.accounts),
        partitions: common::flat_list(&args.partitions),
        states: states.to_query(),
        window_start: Some(window_start),
        window_end: Some(window_end),
        duplicates: args.duplicates,
    };
    let layout = match (args.parsable, args.parsable2) {
        (false, false) => Layout::Fixed,
        (trailing, _) => Layout::Parsable { delimiter: args.delimiter.clone().unwrap_or_else(|| "|".into()), trailing },
    };
    let units = match args.units.as_deref().map(str::to_ascii_uppercase).as_deref() {
        None => None,
        Some(unit @ ("K" | "M" | "G" | "T" | "P")) => unit.chars().next(),
        Some(other) => anyhow::bail!("Invalid unit specification: {other} (expected K, M, G, T or P)"),
    };
    let mut options = RenderOptions {
        columns,
        header: !args.noheader,
        layout,
        allocations: args.allocations,
        selectors,
        cluster: String::new(),
        tz,
        usage: Default::default(),
        step_usage: Default::default(),
        units,
    };
    // Only unrepresented states (COMPLETING, REQUEUED …) were asked for: nothing can match.
    let (now, mut jobs) = if states.is_empty() {
        (now, Vec::new())
    } else {
        match crate::client::call(&Request::QueryAccounting(query))? {
            Response::Accounting { now, jobs } => (now, jobs),
            Response::Error { code, detail } => anyhow::bail!("{}{}", code.message(), suffix(&detail)),
            other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        }
    };
    let names = common::flat_list(&args.names);
    let qos = common::flat_list(&args.qos);
    let mut nodes = Vec::new();
    for expr in common::flat_list(&args.nodelist) {
        nodes.extend(hostlist::expand(&expr)?);
    }
    // An array's records follow each other by task index, its base record last (as Slurm).
    jobs.sort_by_key(|job| (job.array_job_id.unwrap_or(job.job_id), job.array_task_id.unwrap_or(u32::MAX), job.job_id));
    jobs.retain(|job| {
        (names.is_empty() || names.contains(&job.name))
            && (qos.is_empty() || qos.contains(&job.qos))
            && (nodes.is_empty() || job.nodes.iter().any(|n| nodes.contains(n)))
    });
    if let Some(output) = output {
        return print_document(jobs, now, options, output);
    }
    if options.columns.iter().any(|c| c.field == Field::Cluster) {
        options.cluster = fetch_cluster()?;
    }
    if options.columns.iter().any(|c| c.field.needs_usage()) {
        fetch_usage(&jobs, &mut options)?;
    }
    print!("{}", render(&jobs, now, &options));
    Ok(0)
}

/// The cluster's name, as ctld answers a ping.
fn fetch_cluster() -> anyhow::Result<String> {
    match crate::client::call(&Request::Ping)? {
        Response::Pong { cluster, .. } => Ok(cluster),
        _ => Ok(String::new()),
    }
}

/// The measured usage of `jobs` and, without `-X`, of their srun steps, into `options`.
fn fetch_usage(jobs: &[JobInfo], options: &mut RenderOptions) -> anyhow::Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    let job_ids: Vec<JobId> = jobs.iter().map(|j| j.job_id).collect();
    for (_, answer) in crate::client::call_chunked(&job_ids, |job_ids| Request::QueryJobUsage { job_ids })? {
        match answer {
            Response::JobUsage { usage } => options.usage.extend(usage.into_iter().map(|u| (u.job_id, u))),
            Response::Error { code, detail } => anyhow::bail!("{}{}", code.message(), suffix(&detail)),
            other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        }
    }
    if !options.allocations {
        for (_, answer) in crate::client::call_chunked(&job_ids, |job_ids| Request::QueryStepUsage { job_ids })? {
            match answer {
                Response::StepUsage { usage } => {
                    options.step_usage.extend(usage.into_iter().map(|(step, u)| ((u.job_id, step), u)));
                }
                Response::Error { code, detail } => anyhow::bail!("{}{}", code.message(), suffix(&detail)),
                other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
            }
        }
    }
    Ok(())
}

/// The records `-j` selects, each with the steps it selects (none under `-X`): what the text
/// would list as rows, grouped by job.
pub(crate) fn select_rows(jobs: Vec<JobInfo>, options: &RenderOptions) -> Vec<JobInfo> {
    jobs.into_iter()
        .filter_map(|mut job| {
            let job_row = selected(options, &job, None);
            let steps = std::mem::take(&mut job.steps);
            if !options.allocations {
                job.steps = steps.into_iter().filter(|s| selected(options, &job, Some(s.step_id))).collect();
            }
            (job_row || !job.steps.is_empty()).then_some(job)
        })
        .collect()
}

/// `--json`/`--yaml`: the selected records with their usage, as one document.
fn print_document(
    jobs: Vec<JobInfo>,
    now: UnixTime,
    mut options: RenderOptions,
    output: json::Output,
) -> anyhow::Result<i32> {
    let jobs = select_rows(jobs, &options);
    let cluster = fetch_cluster()?;
    fetch_usage(&jobs, &mut options)?;
    let context = json::accounting::AccountingContext {
        now,
        cluster: &cluster,
        usage: &options.usage,
        step_usage: &options.step_usage,
    };
    json::print(&json::accounting::document(&jobs, &context), output)?;
    Ok(0)
}

/// `: detail` when ctld added one.
fn suffix(detail: &str) -> String {
    if detail.is_empty() { String::new() } else { format!(": {detail}") }
}

#[cfg(test)]
mod tests {
    use super::super::scenario::{self, sample_stdout};
    use super::*;
    use expect_test::expect;

    fn options(fields: &str) -> RenderOptions {
        RenderOptions {
            columns: parse_fields(&[fields.to_owned()]).expect("fields"),
            header: true,
            layout: Layout::Fixed,
            allocations: false,
            selectors: Vec::new(),
            cluster: "baseline".into(),
            usage: Default::default(),
            step_usage: Default::default(),
            units: None,
            tz: Tz::Fixed(0),
        }
    }

    fn parsable2(fields: &str) -> RenderOptions {
        RenderOptions { layout: Layout::Parsable { delimiter: "|".into(), trailing: false }, ..options(fields) }
    }

    /// Jobs 20, 23, 24, 25, 26, array 29 and job 36 of the capture (the sample's
    /// `-j 20,24,23,25,26,29,36`).
    fn jobs() -> Vec<JobInfo> {
        scenario::finished().into_iter().filter(|j| j.job_id != 28).collect()
    }

    #[test]
    fn arrays_match_slurm() {
        let array: Vec<JobInfo> = jobs().into_iter().filter(|j| j.array_job_id == Some(29)).collect();
        assert_eq!(render(&array, scenario::NOW, &options(DEFAULT_FIELDS)), sample_stdout("sacct_array.txt"));
        let opts = parsable2("JobID,JobIDRaw,JobName,State,ExitCode,Elapsed");
        assert_eq!(render(&array, scenario::NOW, &opts), sample_stdout("sacct_array_P.txt"));
        let one = RenderOptions {
            selectors: parse_selectors(&["29_2".to_owned()]).expect("selector"),
            ..parsable2("JobID,JobIDRaw")
        };
        assert_eq!(render(&array, scenario::NOW, &one), "JobID|JobIDRaw\n29_2|38\n29_2.batch|38.batch\n29_[2-3]|29\n");
    }

    #[test]
    fn measured_usage() {
        let mut opts = RenderOptions {
            selectors: parse_selectors(&["29_2".to_owned()]).expect("selector"),
            ..parsable2("JobID,TotalCPU,UserCPU,SystemCPU,MaxRSS,AveRSS")
        };
        let usage = JobUsage { job_id: 38, user_usec: 3_723_456_789, system_usec: 1_500_000, max_rss_kib: 52_008 };
        opts.usage.insert(38, usage);
        let array: Vec<JobInfo> = jobs().into_iter().filter(|j| j.array_job_id == Some(29)).collect();
        expect![[r#"
            JobID|TotalCPU|UserCPU|SystemCPU|MaxRSS|AveRSS
            29_2|01:02:04|01:02:03|00:01.500||
            29_2.batch|01:02:04|01:02:03|00:01.500|50.79M|50.79M
            29_[2-3]|||||
        "#]]
        .assert_eq(&render(&array, scenario::NOW, &opts));
        assert_eq!(
            (kib(1024), kib(1025), kib(2 * 1024 * 1024), kib(0)),
            ("1024K".into(), "1.00M".into(), "2G".into(), "0K".into())
        );
        opts.units = Some('G');
        opts.columns = parse_fields(&["JobID,ReqMem,MaxRSS".to_owned()]).expect("fields");
        let shown = render(&array, scenario::NOW, &opts);
        assert!(shown.contains("29_2.batch||0.05G\n"), "{shown}");
        assert_eq!(
            (kib_in(4000 * 1024, 'G'), kib_in(16 * 1024 * 1024, 'G'), kib_in(512, 'M')),
            ("3.91G".into(), "16G".into(), "0.50M".into())
        );
    }

    #[test]
    fn default_matches_slurm() {
        assert_eq!(render(&jobs(), scenario::NOW, &options(DEFAULT_FIELDS)), sample_stdout("sacct_default.txt"));
    }

    #[test]
    fn allocations_match_slurm() {
        let opts =
            RenderOptions { allocations: true, ..options("JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode") };
        assert_eq!(render(&jobs(), scenario::NOW, &opts), sample_stdout("sacct_X_fmt.txt"));
    }

    #[test]
    fn parsable_matches_slurm() {
        let opts = parsable2("JobID,JobName,State,ExitCode,Elapsed");
        assert_eq!(render(&jobs(), scenario::NOW, &opts), sample_stdout("sacct_fmt_P.txt"));
        let opts = RenderOptions { header: false, ..parsable2(DEFAULT_FIELDS) };
        assert_eq!(render(&jobs(), scenario::NOW, &opts), sample_stdout("sacct_parsable2_noheader.txt"));
        let states: Vec<JobInfo> = jobs().into_iter().filter(|j| [23, 24, 25, 36].contains(&j.job_id)).collect();
        let opts = RenderOptions { allocations: true, ..parsable2("JobID,State,ExitCode,DerivedExitCode,Reason") };
        assert_eq!(render(&states, scenario::NOW, &opts), sample_stdout("sacct_states_fmt.txt"));
    }

    #[test]
    fn all_users_match_slurm() {
        let two: Vec<JobInfo> = scenario::finished().into_iter().filter(|j| [20, 28].contains(&j.job_id)).collect();
        let opts = RenderOptions { allocations: true, ..options("JobID,User,Account,Partition,State") };
        assert_eq!(render(&two, scenario::NOW, &opts), sample_stdout("sacct_allusers_today.txt"));
    }

    #[test]
    fn unknown_job_prints_the_header_only() {
        assert_eq!(render(&[], scenario::NOW, &options(DEFAULT_FIELDS)), sample_stdout("err_sacct_bad_id.txt"));
    }

    #[test]
    fn field_names() {
        let names = |text: &str| match parse_fields(&[text.to_owned()]) {
            Ok(columns) => {
                columns.iter().map(|c| format!("{}:{}{}", c.name, if c.right { "" } else { "-" }, c.width)).collect()
            }
            Err(error) => vec![error.to_string()],
        };
        assert_eq!(
            names("jobid,JOBIDRAW,state%20,nodelist%-256"),
            ["JobID:-12", "JobIDRaw:-12", "State:20", "NodeList:-256"]
        );
        assert_eq!(
            names("user,elapsed,start,end,ncpus,ReqMem"),
            ["User:9", "Elapsed:10", "Start:19", "End:19", "NCPUS:10", "ReqMem:10"]
        );
        assert_eq!(names("jobn,alloccpu,exit"), ["JobName:10", "AllocCPUS:10", "ExitCode:8"]);
        assert_eq!(names("Account%256"), ["Account:256"]);
        assert_eq!(names("bogus"), ["Invalid field requested: \"bogus\""]);
        assert_eq!(names("state%x"), ["Invalid field requested: \"state%x\""]);
    }

    #[test]
    fn other_fields() {
        let check = |fields: &str, expect: expect_test::Expect| {
            let picked: Vec<JobInfo> = jobs().into_iter().filter(|j| [24, 26, 36].contains(&j.job_id)).collect();
            expect.assert_eq(&render(&picked, scenario::NOW, &parsable2(fields)));
        };
        check(
            "JobIDRaw,User,UID,Group,GID,QOS,Timelimit,TimelimitRaw,NNodes,AllocNodes,NodeList,ReqMem,ReqCPUS,ReqNodes",
            expect![[r#"
                JobIDRaw|User|UID|Group|GID|QOS|Timelimit|TimelimitRaw|NNodes|AllocNodes|NodeList|ReqMem|ReqCPUS|ReqNodes
                24|root|0|root|0|normal|UNLIMITED|UNLIMITED|1|1|n3|100M|1|1
                24.batch||||||||1|1|n3|||
                26|root|0|root|0|normal|UNLIMITED|UNLIMITED|2|2|n[2-3]|100M|2|2
                26.batch||||||||1|1|n2|||
                36|root|0|root|0|normal|UNLIMITED|UNLIMITED|1|0|None assigned|100M|1|1
            "#]],
        );
        check(
            "JobID,Start,End,Submit,Eligible,ElapsedRaw,CPUTime,CPUTimeRAW,AllocTRES,ReqTRES,Cluster,Priority,WorkDir,MaxRSS",
            expect![[r#"
                JobID|Start|End|Submit|Eligible|ElapsedRaw|CPUTime|CPUTimeRAW|AllocTRES|ReqTRES|Cluster|Priority|WorkDir|MaxRSS
                24|2026-11-29T23:35:31|2026-11-29T23:35:31|2026-11-29T23:35:29|2026-11-29T23:35:29|0|00:00:00|0|billing=1,cpu=1,mem=100M,node=1|billing=1,cpu=1,mem=100M,node=1|baseline|10687|/tmp/slurm-samples.CYvrXx|
                24.batch|2026-11-29T23:35:31|2026-11-29T23:35:31|2026-11-29T23:35:31|2026-11-29T23:35:31|0|00:00:00|0|cpu=1,mem=100M,node=1||baseline|||
                26|2026-11-29T23:35:31|2026-11-29T23:36:51|2026-11-29T23:35:29|2026-11-29T23:35:29|80|00:02:40|160|billing=2,cpu=2,mem=200M,node=2|billing=2,cpu=2,mem=200M,node=2|baseline|10875|/tmp/slurm-samples.CYvrXx|
                26.batch|2026-11-29T23:35:31|2026-11-29T23:36:51|2026-11-29T23:35:31|2026-11-29T23:35:31|80|00:01:20|80|cpu=1,mem=100M,node=1||baseline|||
                36|Unknown|2026-11-29T23:35:39|2026-11-29T23:35:35|Unknown|0|00:00:00|0||billing=1,cpu=1,mem=100M,node=1|baseline|10687|/tmp/slurm-samples.CYvrXx|
            "#]],
        );
    }

    #[test]
    fn layouts_and_selection() {
        let opts = RenderOptions {
            layout: Layout::Parsable { delimiter: "\u{1f}".into(), trailing: true },
            header: false,
            selectors: parse_selectors(&["24.batch,26".to_owned()]).expect("selectors"),
            ..options("JobID,State%5")
        };
        expect![[r#"
            24.batch\u{1f}FAILED\u{1f}
            26\u{1f}CANCELLED by 0\u{1f}
            26.batch\u{1f}CANCELLED\u{1f}
        "#]]
        .assert_eq(&render(&jobs(), scenario::NOW, &opts).replace('\u{1f}', "\\u{1f}"));
        let opts = RenderOptions { allocations: true, ..options("JobID%5,JobName%-3,State%4") };
        expect![[r#"
            JobID Job Stat $
            ----- --- ---- $
               20 wr+ COM+ $
               23 ti+ TIM+ $
               24 fa+ FAI+ $
               25 sl+ CAN+ $
               26 bi+ CAN+ $
             29_0 ar+ CAN+ $
             29_1 ar+ CAN+ $
             29_2 ar+ CAN+ $
            29_[+ ar+ CAN+ $
               36 de+ CAN+ $
        "#]]
        .assert_eq(&scenario::mark_line_ends(&render(&jobs(), scenario::NOW, &opts)));
    }

    /// `sacct --help` in Slurm's layout: what scripts and Slurm's own suite look for.
    #[test]
    fn help_in_slurms_layout() {
        let text = help_text();
        for needle in [
            "sacct [<OPTION>]\n",
            "Valid <OPTION> values are:",
            "-A, --accounts:",
            "-j, --jobs:",
            "-s, --state:",
            "-S, --starttime:",
            "valid start/end time formats are...",
        ] {
            assert!(text.contains(needle), "{needle} missing from\n{text}");
        }
        assert_eq!(run(vec![OsString::from("--help")]).ok(), Some(0));
    }

    fn parse(args: &[&str]) -> Result<Args, i32> {
        common::parse_args::<Args>("sacct", args.iter().map(OsString::from).collect())
    }

    #[test]
    fn getopt_like_arguments() {
        let args = parse(&["-nP", "-j", "20", "--job", "24", "-o", "JobID,State", "--format=nodelist%-256", "-X"])
            .expect("valid");
        assert!(args.noheader && args.parsable2 && args.allocations);
        assert_eq!(args.jobs, ["20", "24"]);
        assert_eq!(args.format, ["JobID,State", "nodelist%-256"]);
        let args = parse(&[
            "-X",
            "--parsable2",
            "--clusters",
            "all",
            "--noheader",
            "--format=JobIdRaw,State",
            "--starttime",
            "2026-11-27T13:00",
            "--endtime",
            "now",
            "--name",
            "0f3e",
        ])
        .expect("snakemake's status query");
        assert_eq!((args.start_time.as_deref(), args.names), (Some("2026-11-27T13:00"), vec!["0f3e".to_owned()]));
        // Snakemake's account guess must fail the way it does on Slurm.
        assert_eq!(parse(&["-nu", "root", "-o", "Account%256", "|", "tail", "-1"]).err(), Some(1));
    }

    #[test]
    fn windows() {
        let utc = Tz::Fixed(0);
        let now = scenario::NOW;
        let midnight = now - (23 * 3600 + 35 * 60 + 39);
        assert_eq!(time_window(false, false, None, None, now, utc), (midnight, now));
        assert_eq!(time_window(true, false, None, None, now, utc), (0, now));
        assert_eq!(time_window(false, true, None, None, now, utc), (now, now));
        assert_eq!(time_window(true, true, None, None, now, utc), (0, now));
        assert_eq!(time_window(false, true, Some(100), None, now, utc), (100, 100));
        assert_eq!(time_window(false, false, Some(100), None, now, utc), (100, now));
        assert_eq!(time_window(true, false, None, Some(200), now, utc), (0, 200));
    }
}
