//! `sstat`: what running steps use now (memory, CPU time, page faults, I/O), as Slurm 22.05's
//! sstat prints it. ctld asks the job's nodes, which read the steps' cgroups and `/proc`
//! ([`drover_shared::proto::stat`]); this file picks the steps the `-j` items name, sums the
//! nodes' samples per step and renders the fields.
//!
//! A node reports each step as a whole (its processes there), not task by task: a per-task
//! figure is the node's figure divided by the step's tasks there, `…Task` names the first task
//! on that node, and `Ave…` is the step's total over its tasks. CPU frequency, energy and
//! requested frequencies are not measured (`0`, `Unknown`), as on a Slurm node without those
//! plugins.

use super::common;
use super::format;
use clap::{ArgAction, Parser};
use drover_shared::hostlist;
use drover_shared::job::{JobId, StepId};
use drover_shared::proto::client::{ErrorCode, Request, Response};
use drover_shared::proto::stat::{StatReport, StepStat};
use std::collections::HashMap;
use std::ffi::OsString;

/// Slurm 22.05's default field list.
const DEFAULT_FIELDS: &str = "JobID,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,MaxRSSTask,\
AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks,AveCPUFreq,\
ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ConsumedEnergy,MaxDiskRead,MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,\
MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,AveDiskWrite,TRESUsageInAve,TRESUsageInMax,TRESUsageInMaxNode,\
TRESUsageInMaxTask,TRESUsageInMin,TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutAve,\
TRESUsageOutMax,TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutMin,TRESUsageOutMinNode,TRESUsageOutMinTask,\
TRESUsageOutTot";

/// `-i/--pidformat`'s fields.
const PID_FIELDS: &str = "JobID,Nodelist,Pids";

/// The most `-j` items one command takes.
const MAX_ITEMS: usize = 1000;

#[derive(Debug, Parser)]
#[command(name = "sstat", about = "Show what running jobs' steps use now", disable_help_flag = true)]
struct Args {
    /// Every running step of the jobs given without a step.
    #[arg(short = 'a', long = "allsteps")]
    all_steps: bool,
    /// List the fields `--format` accepts.
    #[arg(short = 'e', long = "helpformat")]
    help_format: bool,
    /// Print this help.
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// The pids of each step on each node (JobID, Nodelist, Pids).
    #[arg(short = 'i', long = "pidformat")]
    pid_format: bool,
    /// The jobs or steps to show: `N`, `N.batch`, `N.<step>`, comma-separated.
    #[arg(short = 'j', long = "jobs", value_name = "JOB(.STEP)")]
    jobs: Vec<String>,
    /// No header lines.
    #[arg(short = 'n', long = "noheader")]
    noheader: bool,
    /// Sizes in KiB (and disk I/O in bytes), not converted to larger units.
    #[arg(long = "noconvert")]
    noconvert: bool,
    /// Fields to print, `name[%width]`, comma-separated.
    #[arg(short = 'o', long = "format", visible_alias = "fields", value_name = "FIELDS")]
    format: Vec<String>,
    /// `|` after every field.
    #[arg(short = 'p', long = "parsable")]
    parsable: bool,
    /// `|` between fields.
    #[arg(short = 'P', long = "parsable2")]
    parsable2: bool,
    /// More messages (accepted).
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Jobs or steps, as with `-j`.
    #[arg(value_name = "JOB(.STEP)")]
    operands: Vec<String>,
}

/// What a column shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    JobId,
    Nodelist,
    Pids,
    NTasks,
    /// A measured quantity: its largest per-task value, that value's node or task, the
    /// average over tasks, the smallest (CPU only).
    Max(Metric),
    MaxNode(Metric),
    MaxTask(Metric),
    Ave(Metric),
    Min(Metric),
    MinNode(Metric),
    MinTask(Metric),
    /// `TRESUsageIn…`/`TRESUsageOut…`: the same figures as `name=value` lists.
    Tres(Direction, Stat),
    /// Not measured: `0`.
    Zero,
    /// Not requested: `Unknown`.
    Unknown,
}

/// One quantity the nodes report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Metric {
    Cpu,
    Rss,
    VmSize,
    Pages,
    DiskRead,
    DiskWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    In,
    Out,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stat {
    Ave,
    Max,
    MaxNode,
    MaxTask,
    Min,
    MinNode,
    MinTask,
    Tot,
}

/// Every field sstat knows, in `--helpformat` order, with Slurm's width (negative: left-aligned).
const FIELDS: &[(&str, i32, Field)] = &[
    ("AveCPU", 10, Field::Ave(Metric::Cpu)),
    ("AveCPUFreq", 10, Field::Zero),
    ("AveDiskRead", 12, Field::Ave(Metric::DiskRead)),
    ("AveDiskWrite", 12, Field::Ave(Metric::DiskWrite)),
    ("AvePages", 10, Field::Ave(Metric::Pages)),
    ("AveRSS", 10, Field::Ave(Metric::Rss)),
    ("AveVMSize", 10, Field::Ave(Metric::VmSize)),
    ("ConsumedEnergy", 14, Field::Zero),
    ("ConsumedEnergyRaw", 17, Field::Zero),
    ("JobID", -12, Field::JobId),
    ("MaxDiskRead", 12, Field::Max(Metric::DiskRead)),
    ("MaxDiskReadNode", 15, Field::MaxNode(Metric::DiskRead)),
    ("MaxDiskReadTask", 15, Field::MaxTask(Metric::DiskRead)),
    ("MaxDiskWrite", 12, Field::Max(Metric::DiskWrite)),
    ("MaxDiskWriteNode", 16, Field::MaxNode(Metric::DiskWrite)),
    ("MaxDiskWriteTask", 16, Field::MaxTask(Metric::DiskWrite)),
    ("MaxPages", 8, Field::Max(Metric::Pages)),
    ("MaxPagesNode", 12, Field::MaxNode(Metric::Pages)),
    ("MaxPagesTask", 14, Field::MaxTask(Metric::Pages)),
    ("MaxRSS", 10, Field::Max(Metric::Rss)),
    ("MaxRSSNode", 10, Field::MaxNode(Metric::Rss)),
    ("MaxRSSTask", 10, Field::MaxTask(Metric::Rss)),
    ("MaxVMSize", 10, Field::Max(Metric::VmSize)),
    ("MaxVMSizeNode", 14, Field::MaxNode(Metric::VmSize)),
    ("MaxVMSizeTask", 14, Field::MaxTask(Metric::VmSize)),
    ("MinCPU", 10, Field::Min(Metric::Cpu)),
    ("MinCPUNode", 10, Field::MinNode(Metric::Cpu)),
    ("MinCPUTask", 10, Field::MinTask(Metric::Cpu)),
    ("Nodelist", 20, Field::Nodelist),
    ("NTasks", 8, Field::NTasks),
    ("Pids", 20, Field::Pids),
    ("ReqCPUFreq", 10, Field::Unknown),
    ("ReqCPUFreqMin", 13, Field::Unknown),
    ("ReqCPUFreqMax", 13, Field::Unknown),
    ("ReqCPUFreqGov", 13, Field::Unknown),
    ("TRESUsageInAve", 14, Field::Tres(Direction::In, Stat::Ave)),
    ("TRESUsageInMax", 14, Field::Tres(Direction::In, Stat::Max)),
    ("TRESUsageInMaxNode", 18, Field::Tres(Direction::In, Stat::MaxNode)),
    ("TRESUsageInMaxTask", 18, Field::Tres(Direction::In, Stat::MaxTask)),
    ("TRESUsageInMin", 14, Field::Tres(Direction::In, Stat::Min)),
    ("TRESUsageInMinNode", 18, Field::Tres(Direction::In, Stat::MinNode)),
    ("TRESUsageInMinTask", 18, Field::Tres(Direction::In, Stat::MinTask)),
    ("TRESUsageInTot", 14, Field::Tres(Direction::In, Stat::Tot)),
    ("TRESUsageOutAve", 15, Field::Tres(Direction::Out, Stat::Ave)),
    ("TRESUsageOutMax", 15, Field::Tres(Direction::Out, Stat::Max)),
    ("TRESUsageOutMaxNode", 19, Field::Tres(Direction::Out, Stat::MaxNode)),
    ("TRESUsageOutMaxTask", 19, Field::Tres(Direction::Out, Stat::MaxTask)),
    ("TRESUsageOutMin", 15, Field::Tres(Direction::Out, Stat::Min)),
    ("TRESUsageOutMinNode", 19, Field::Tres(Direction::Out, Stat::MinNode)),
    ("TRESUsageOutMinTask", 19, Field::Tres(Direction::Out, Stat::MinTask)),
    ("TRESUsageOutTot", 15, Field::Tres(Direction::Out, Stat::Tot)),
];

/// One output column.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    name: &'static str,
    field: Field,
    width: usize,
    right: bool,
}

/// Parses `--format` lists: `name[%width]`, comma-separated, names matched case-insensitively
/// (exactly, else as the start of a name). `Err` names the field that matches none.
fn parse_fields(lists: &[String]) -> Result<Vec<Column>, String> {
    let mut columns = Vec::new();
    for item in common::flat_list(lists) {
        let (name, width) = match item.split_once('%') {
            Some((name, width)) => (name, Some(width.parse::<i32>().map_err(|_| item.clone())?)),
            None => (item.as_str(), None),
        };
        let lower = name.to_ascii_lowercase();
        let exact = FIELDS.iter().find(|(n, _, _)| n.eq_ignore_ascii_case(name));
        let prefix = || FIELDS.iter().find(|(n, _, _)| !lower.is_empty() && n.to_ascii_lowercase().starts_with(&lower));
        let &(name, default, field) = exact.or_else(prefix).ok_or_else(|| name.to_owned())?;
        // A width beyond any screen is a typo; bounded so a column never costs more.
        let width = width.unwrap_or(default).clamp(-1000, 1000);
        columns.push(Column { name, field, width: width.unsigned_abs() as usize, right: width > 0 });
    }
    Ok(columns)
}

/// How rows are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Fixed,
    /// `-p` (`trailing`) or `-P`.
    Parsable {
        trailing: bool,
    },
}

/// A step's figures, summed over the nodes that answered.
#[derive(Debug, Clone, Default, PartialEq)]
struct Totals {
    /// `--noconvert`: sizes as they were measured.
    noconvert: bool,
    tasks: u32,
    nodes: Vec<String>,
    pids: Vec<u32>,
    /// Per metric: (largest per-task value, its node, its task), (smallest …), total.
    extremes: HashMap<MetricKey, Extremes>,
}

type MetricKey = u8;

fn key(metric: Metric) -> MetricKey {
    metric as u8
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Extremes {
    max: (u64, String, u32),
    min: Option<(u64, String, u32)>,
    total: u64,
}

const METRICS: [Metric; 6] =
    [Metric::Cpu, Metric::Rss, Metric::VmSize, Metric::Pages, Metric::DiskRead, Metric::DiskWrite];

/// Sums a step's samples (see the module's note on per-task figures).
fn totals(step: &StepStat) -> Totals {
    let mut totals = Totals::default();
    for node in &step.samples {
        let sample = &node.sample;
        totals.tasks += sample.tasks;
        totals.nodes.push(node.node.clone());
        totals.pids.extend(&sample.pids);
        let per_node_tasks = u64::from(sample.tasks.max(1));
        for metric in METRICS {
            let value = match metric {
                Metric::Cpu => sample.cpu_usec,
                Metric::Rss => sample.rss_kib,
                Metric::VmSize => sample.vmsize_kib,
                Metric::Pages => sample.pages,
                Metric::DiskRead => sample.read_bytes,
                Metric::DiskWrite => sample.write_bytes,
            };
            let per_task = value / per_node_tasks;
            let entry = totals.extremes.entry(key(metric)).or_default();
            entry.total = entry.total.saturating_add(value);
            if per_task > entry.max.0 || entry.max.1.is_empty() {
                entry.max = (per_task, node.node.clone(), sample.first_task);
            }
            if entry.min.as_ref().is_none_or(|min| per_task < min.0) {
                entry.min = Some((per_task, node.node.clone(), sample.first_task));
            }
        }
    }
    if totals.tasks == 0 && !step.samples.is_empty() {
        totals.tasks = step.num_tasks;
    }
    totals
}

/// A size in KiB as Slurm prints it by default: in the largest unit that divides it exactly
/// (`4636K`, `2M`, `3G`); `0` for nothing.
fn size_kib(kib: u64) -> String {
    if kib == 0 {
        return "0".into();
    }
    let units = ['K', 'M', 'G', 'T', 'P'];
    let (mut value, mut unit) = (kib, 0);
    while value.is_multiple_of(1024) && unit + 1 < units.len() {
        value /= 1024;
        unit += 1;
    }
    format!("{value}{}", units[unit])
}

/// A byte count as sstat prints disk I/O: exact bytes below a KiB or when not a whole number of
/// KiB, else as [`size_kib`].
fn size_bytes(bytes: u64) -> String {
    if bytes.is_multiple_of(1024) { size_kib(bytes / 1024) } else { bytes.to_string() }
}

/// CPU time as sstat prints it: `HH:MM:SS`, `D-HH:MM:SS` from one day on.
fn cpu_time(usec: u64) -> String {
    format::hms(i64::try_from(usec / 1_000_000).unwrap_or(i64::MAX))
}

fn metric_text(metric: Metric, value: u64, noconvert: bool) -> String {
    match metric {
        Metric::Cpu => cpu_time(value),
        Metric::Rss | Metric::VmSize if noconvert && value > 0 => format!("{value}K"),
        Metric::Rss | Metric::VmSize => size_kib(value),
        Metric::Pages => value.to_string(),
        Metric::DiskRead | Metric::DiskWrite if noconvert => value.to_string(),
        Metric::DiskRead | Metric::DiskWrite => size_bytes(value),
    }
}

/// The TRES names of each direction, with the metric each shows (`None`: energy, not measured).
fn tres_keys(direction: Direction) -> &'static [(&'static str, Option<Metric>)] {
    match direction {
        Direction::In => &[
            ("cpu", Some(Metric::Cpu)),
            ("energy", None),
            ("fs/disk", Some(Metric::DiskRead)),
            ("mem", Some(Metric::Rss)),
            ("pages", Some(Metric::Pages)),
            ("vmem", Some(Metric::VmSize)),
        ],
        Direction::Out => &[("energy", None), ("fs/disk", Some(Metric::DiskWrite))],
    }
}

fn tres(totals: &Totals, direction: Direction, stat: Stat) -> String {
    let mut parts = Vec::new();
    for &(name, metric) in tres_keys(direction) {
        let value = match (metric, stat) {
            // Energy has no task to name.
            (None, Stat::MaxTask | Stat::MinTask) => continue,
            (None, Stat::MaxNode | Stat::MinNode) => totals.nodes.first().cloned().unwrap_or_default(),
            (None, _) => "0".into(),
            (Some(metric), stat) => {
                let Some(e) = totals.extremes.get(&key(metric)) else { continue };
                let min = e.min.clone().unwrap_or_default();
                match stat {
                    Stat::Ave => metric_text(metric, e.total / u64::from(totals.tasks.max(1)), totals.noconvert),
                    Stat::Max => metric_text(metric, e.max.0, totals.noconvert),
                    Stat::MaxNode => e.max.1.clone(),
                    Stat::MaxTask => e.max.2.to_string(),
                    Stat::Min => metric_text(metric, min.0, totals.noconvert),
                    Stat::MinNode => min.1,
                    Stat::MinTask => min.2.to_string(),
                    Stat::Tot => metric_text(metric, e.total, totals.noconvert),
                }
            }
        };
        parts.push(format!("{name}={value}"));
    }
    parts.join(",")
}

/// The text of one field for a step; `pids` are the ones to print (all nodes', or one node's
/// under `-i`).
fn value(field: Field, job_id: JobId, step: StepId, totals: &Totals) -> String {
    let extremes = |metric: Metric| totals.extremes.get(&key(metric)).cloned().unwrap_or_default();
    match field {
        Field::JobId => format!("{job_id}.{step}"),
        Field::Nodelist => hostlist::compress(&totals.nodes),
        Field::Pids => totals.pids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        Field::NTasks => totals.tasks.to_string(),
        Field::Max(metric) => metric_text(metric, extremes(metric).max.0, totals.noconvert),
        Field::MaxNode(metric) => extremes(metric).max.1,
        Field::MaxTask(metric) => extremes(metric).max.2.to_string(),
        Field::Ave(metric) => {
            metric_text(metric, extremes(metric).total / u64::from(totals.tasks.max(1)), totals.noconvert)
        }
        Field::Min(metric) => metric_text(metric, extremes(metric).min.unwrap_or_default().0, totals.noconvert),
        Field::MinNode(metric) => extremes(metric).min.unwrap_or_default().1,
        Field::MinTask(metric) => extremes(metric).min.unwrap_or_default().2.to_string(),
        Field::Tres(direction, stat) => tres(totals, direction, stat),
        Field::Zero => "0".into(),
        Field::Unknown => "Unknown".into(),
    }
}

/// One line: fixed-width cells (cut with a `+` when too long) or `|`-separated.
fn push_line(out: &mut String, columns: &[Column], layout: Layout, values: &[String], mark_cut: bool) {
    match layout {
        Layout::Fixed => {
            for (column, value) in columns.iter().zip(values) {
                let value = &*drover_shared::text::printable(value);
                if mark_cut && column.width > 0 && value.chars().count() > column.width {
                    out.extend(value.chars().take(column.width - 1).chain(['+']));
                } else {
                    format::push_cell(out, value, Some(column.width), column.right, true);
                }
                out.push(' ');
            }
        }
        Layout::Parsable { trailing } => {
            let cells: Vec<_> = values.iter().map(|v| drover_shared::text::delimited(v, "|")).collect();
            out.push_str(&cells.join("|"));
            if trailing {
                out.push('|');
            }
        }
    }
    out.push('\n');
}

fn header(columns: &[Column], layout: Layout) -> String {
    let mut out = String::new();
    let names: Vec<String> = columns.iter().map(|c| c.name.to_owned()).collect();
    push_line(&mut out, columns, layout, &names, false);
    if layout == Layout::Fixed {
        let dashes: Vec<String> = columns.iter().map(|c| "-".repeat(c.width)).collect();
        push_line(&mut out, columns, layout, &dashes, false);
    }
    out
}

/// What the command line chose beside the fields and the layout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Choice {
    /// `-a`.
    all_steps: bool,
    /// `-i`: a row per node.
    per_node: bool,
    /// `--noconvert`.
    noconvert: bool,
}

/// The rows of one step: one, or one per node that answered under `-i`.
fn step_rows(columns: &[Column], layout: Layout, job_id: JobId, step: &StepStat, choice: Choice) -> String {
    let mut out = String::new();
    let mut row = |totals: &Totals| {
        let totals = &Totals { noconvert: choice.noconvert, ..totals.clone() };
        let values: Vec<String> = columns.iter().map(|c| value(c.field, job_id, step.step_id, totals)).collect();
        push_line(&mut out, columns, layout, &values, true);
    };
    if choice.per_node {
        for node in &step.samples {
            let one = StepStat { samples: vec![node.clone()], ..step.clone() };
            row(&totals(&one));
        }
    } else {
        row(&totals(step));
    }
    out
}

/// A `-j` item: a job, and the step it names (`None`: the job's running steps as Slurm picks
/// them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Item {
    job_id: JobId,
    step: Option<StepId>,
}

/// Parses `N`, `N.batch`, `N.<k>` items (comma lists, repeated options).
fn parse_items(values: &[String]) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    for text in values.iter().flat_map(|v| common::split_ids(v)) {
        let (job, step) = match text.split_once('.') {
            Some((job, step)) => (job, Some(step)),
            None => (text, None),
        };
        let job_id = job.parse::<JobId>().ok().filter(|id| *id > 0).ok_or_else(|| text.to_owned())?;
        let step = match step {
            None => None,
            Some("batch") => Some(StepId::Batch),
            Some("extern") => Some(StepId::Extern),
            Some(k) => Some(StepId::Numbered(k.parse().map_err(|_| text.to_owned())?)),
        };
        let item = Item { job_id, step };
        if !items.contains(&item) {
            items.push(item);
        }
        if items.len() > MAX_ITEMS {
            return Err(format!("more than {MAX_ITEMS} jobs"));
        }
    }
    Ok(items)
}

/// The steps of `report` an item selects: the one it names; else with `-a` every running step;
/// else the lowest running srun step, or, when there is none, every running step (the batch
/// step), as Slurm 22.05 picks them.
fn selected(report: &StatReport, step: Option<StepId>, all_steps: bool) -> Vec<&StepStat> {
    match step {
        Some(id) => report.steps.iter().filter(|s| s.step_id == id).collect(),
        None if all_steps => report.steps.iter().collect(),
        None => {
            let lowest =
                report.steps.iter().filter(|s| matches!(s.step_id, StepId::Numbered(_))).min_by_key(|s| s.step_id);
            match lowest {
                Some(step) => vec![step],
                None => report.steps.iter().collect(),
            }
        }
    }
}

/// What sstat prints for one item: its rows (stdout) and its error lines (stderr).
fn render_item(
    item: Item,
    answer: &Result<StatReport, ErrorCode>,
    columns: &[Column],
    layout: Layout,
    choice: Choice,
) -> (String, String) {
    let job_id = item.job_id;
    let report = match answer {
        Ok(report) => report,
        Err(ErrorCode::AccessDenied) => {
            return (
                String::new(),
                format!(
                    "sstat: error: problem getting step_layout for JobId={job_id}: {}\n",
                    ErrorCode::AccessDenied.message()
                ),
            );
        }
        Err(_) => return (String::new(), format!("sstat: error: couldn't get steps for job {job_id}\n")),
    };
    let steps = selected(report, item.step, choice.all_steps);
    if steps.is_empty() {
        let error = match item.step {
            None => format!("sstat: error: No steps running for job {job_id}\n"),
            Some(step) => format!("sstat: error: StepId={job_id}.{step} not found running.\n"),
        };
        return (String::new(), error);
    }
    let (mut out, mut errors) = (String::new(), String::new());
    for step in steps {
        if step.samples.is_empty() {
            errors.push_str(&format!(
                "sstat: error: problem getting step_layout for StepId={job_id}.{}: no node of the step answered\n",
                step.step_id
            ));
            continue;
        }
        out.push_str(&step_rows(columns, layout, job_id, step, choice));
    }
    (out, errors)
}

fn print_field_names() {
    for chunk in FIELDS.chunks(4) {
        let line: Vec<String> = chunk.iter().map(|(name, _, _)| format!("{name:<20}")).collect();
        println!("{}", line.join("").trim_end());
    }
}

/// Runs `sstat`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let before_operands = || args.iter().take_while(|a| *a != "--");
    if before_operands().any(|a| a == "--help" || a == "-h") {
        print!("{}", common::option_list_help::<Args>("sstat"));
        return Ok(0);
    }
    if before_operands().any(|a| a == "--usage") {
        // Slurm's sstat answers `--usage` with its one line and the hint, not the option list.
        print!("Usage: sstat [options] -j <job(.stepid)>\n\tUse --help for help\n");
        return Ok(0);
    }
    let args = match common::parse_args::<Args>("sstat", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let _ = args.verbose;
    let choice = Choice { all_steps: args.all_steps, per_node: args.pid_format, noconvert: args.noconvert };
    if args.help_format {
        print_field_names();
        return Ok(0);
    }
    let lists = if args.pid_format {
        vec![PID_FIELDS.to_owned()]
    } else if args.format.is_empty() {
        vec![DEFAULT_FIELDS.to_owned()]
    } else {
        args.format.clone()
    };
    let columns = match parse_fields(&lists) {
        Ok(columns) => columns,
        Err(name) => {
            eprintln!("sstat: error: Invalid field requested: \"{name}\"");
            return Ok(1);
        }
    };
    let items: Vec<String> = args.jobs.iter().chain(&args.operands).cloned().collect();
    let items = match parse_items(&items) {
        Ok(items) => items,
        Err(text) => {
            eprintln!("sstat: error: Invalid job id: {text}");
            return Ok(1);
        }
    };
    if items.is_empty() {
        eprintln!("sstat: error: You didn't give me any jobs to stat.");
        return Ok(1);
    }
    let layout = if args.parsable2 {
        Layout::Parsable { trailing: false }
    } else if args.parsable {
        Layout::Parsable { trailing: true }
    } else {
        Layout::Fixed
    };
    if !args.noheader {
        print!("{}", header(&columns, layout));
    }
    let mut answers: HashMap<JobId, Result<StatReport, ErrorCode>> = HashMap::new();
    for item in items {
        let answer = match answers.entry(item.job_id) {
            std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let answer = match crate::client::call(&Request::StatJob { job_id: item.job_id }) {
                    Ok(Response::StepStats(report)) => Ok(*report),
                    Ok(Response::Error { code, .. }) => Err(code),
                    Ok(_) => anyhow::bail!("unexpected answer from the controller"),
                    Err(error) => {
                        eprintln!("sstat: error: {}", crate::user_message(&error));
                        return Ok(1);
                    }
                };
                slot.insert(answer)
            }
        };
        let (out, errors) = render_item(item, answer, &columns, layout, choice);
        print!("{out}");
        eprint!("{errors}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::proto::stat::{NodeSample, StepSample};

    /// `--help` in Slurm's layout: what scripts and Slurm's own tests look for.
    #[test]
    fn help_lists_the_options_in_slurms_layout() {
        let help = common::option_list_help::<Args>("sstat");
        assert!(help.starts_with("sstat [<OPTION>]\n    Valid <OPTION> values are:\n"), "{help}");
        assert!(help.contains("     -j, --jobs:\n"), "{help}");
        assert!(!help.contains("JOB(.STEP)]..."), "operands are not options: {help}");
    }

    fn sample(node: &str, first_task: u32, tasks: u32, cpu_secs: u64, rss_kib: u64) -> NodeSample {
        NodeSample {
            node: node.into(),
            sample: StepSample {
                step_id: StepId::Numbered(0),
                first_task,
                tasks,
                cpu_usec: cpu_secs * 1_000_000,
                rss_kib,
                vmsize_kib: rss_kib * 2,
                pages: 3,
                read_bytes: 2048,
                write_bytes: 100,
                processes: tasks,
                pids: vec![100 + first_task],
                task_pids: vec![100 + first_task],
            },
        }
    }

    fn report() -> StatReport {
        let batch = StepStat {
            step_id: StepId::Batch,
            num_tasks: 1,
            nodes: vec!["n1".into()],
            samples: vec![NodeSample {
                node: "n1".into(),
                sample: StepSample { tasks: 1, cpu_usec: 65_000_000, rss_kib: 102_400, ..StepSample::default() },
            }],
        };
        let step = StepStat {
            step_id: StepId::Numbered(0),
            num_tasks: 3,
            nodes: vec!["n1".into(), "n2".into()],
            samples: vec![sample("n1", 0, 2, 10, 4096), sample("n2", 2, 1, 2, 4636)],
        };
        StatReport { job_id: 12, steps: vec![batch, step] }
    }

    fn render(item: Item, choice: Choice, format: &str, layout: Layout) -> (String, String) {
        let columns = parse_fields(&[format.to_owned()]).unwrap();
        render_item(item, &Ok(report()), &columns, layout, choice)
    }

    #[test]
    fn sizes_times_and_bytes_print_as_sstat_prints_them() {
        assert_eq!(size_kib(0), "0");
        assert_eq!(size_kib(4636), "4636K");
        assert_eq!(size_kib(2048), "2M");
        assert_eq!(size_kib(3 * 1024 * 1024), "3G");
        assert_eq!(size_bytes(2468), "2468");
        assert_eq!(size_bytes(4096), "4K");
        assert_eq!(cpu_time(999_999), "00:00:00");
        assert_eq!(cpu_time(65_000_000), "00:01:05");
        assert_eq!(cpu_time(90_000 * 1_000_000), "1-01:00:00");
    }

    /// A job alone shows its lowest srun step (Slurm skips the batch step then); `-a` every
    /// running step; a job without srun steps its batch step.
    #[test]
    fn the_steps_a_job_id_selects() {
        let format = "JobID,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,MinCPU,MinCPUTask,AveCPU,NTasks";
        let parsable = Layout::Parsable { trailing: false };
        let (out, errors) = render(Item { job_id: 12, step: None }, Choice::default(), format, parsable);
        // Per task: n1's 4096K over its 2 tasks, n2's 4636K on task 2, (4096K + 4636K) / 3 on
        // average; CPU 5 s a task on n1, 2 s on n2, 12 s / 3 on average.
        assert_eq!(out, "12.0|4636K|n2|2|2910K|00:00:02|2|00:00:04|3\n");
        assert_eq!(errors, "");
        let (out, _) = render(
            Item { job_id: 12, step: None },
            Choice { all_steps: true, ..Choice::default() },
            "JobID,MaxRSS,AveCPU",
            parsable,
        );
        assert_eq!(out, "12.batch|100M|00:01:05\n12.0|4636K|00:00:04\n");
        let (out, _) =
            render(Item { job_id: 12, step: Some(StepId::Batch) }, Choice::default(), "JobID,NTasks", parsable);
        assert_eq!(out, "12.batch|1\n");
        let noconvert = Choice { noconvert: true, ..Choice::default() };
        let (out, _) = render(Item { job_id: 12, step: Some(StepId::Batch) }, noconvert, "MaxRSS,AveVMSize", parsable);
        assert_eq!(out, "102400K|0\n", "--noconvert keeps KiB; nothing is 0");
        let mut only_batch = report();
        only_batch.steps.truncate(1);
        let columns = parse_fields(&["JobID".to_owned()]).unwrap();
        let (out, _) =
            render_item(Item { job_id: 12, step: None }, &Ok(only_batch), &columns, parsable, Choice::default());
        assert_eq!(out, "12.batch\n");
    }

    #[test]
    fn errors_say_what_slurm_says() {
        let columns = parse_fields(&["JobID".to_owned()]).unwrap();
        let fixed = Layout::Fixed;
        let item = Item { job_id: 7, step: None };
        let (_, errors) = render_item(item, &Err(ErrorCode::InvalidJobId), &columns, fixed, Choice::default());
        assert_eq!(errors, "sstat: error: couldn't get steps for job 7\n");
        let none = StatReport { job_id: 7, steps: Vec::new() };
        let (_, errors) = render_item(item, &Ok(none.clone()), &columns, fixed, Choice::default());
        assert_eq!(errors, "sstat: error: No steps running for job 7\n");
        let step = Item { job_id: 7, step: Some(StepId::Numbered(3)) };
        let (_, errors) = render_item(step, &Ok(none), &columns, fixed, Choice::default());
        assert_eq!(errors, "sstat: error: StepId=7.3 not found running.\n");
        let (_, errors) = render_item(item, &Err(ErrorCode::AccessDenied), &columns, fixed, Choice::default());
        assert_eq!(errors, "sstat: error: problem getting step_layout for JobId=7: Access/permission denied\n");
    }

    #[test]
    fn fixed_columns_tres_lists_and_pid_rows() {
        let columns = parse_fields(&["JobID,MaxRSS,TRESUsageInMax%40,TRESUsageOutTot%-30".to_owned()]).unwrap();
        let mut out = header(&columns, Layout::Fixed);
        let (rows, _) = render_item(
            Item { job_id: 12, step: Some(StepId::Numbered(0)) },
            &Ok(report()),
            &columns,
            Layout::Fixed,
            Choice::default(),
        );
        out.push_str(&rows);
        // Each cell is followed by a space, as Slurm prints them: the last one's padding too.
        assert!(out.lines().all(|line| line.ends_with(' ')), "{out:?}");
        let trimmed: String = out.lines().map(|line| format!("{}\n", line.trim_end())).collect();
        expect_test::expect![[r#"
            JobID            MaxRSS                           TRESUsageInMax TRESUsageOutTot
            ------------ ---------- ---------------------------------------- ------------------------------
            12.0              4636K cpu=00:00:05,energy=0,fs/disk=2K,mem=46+ energy=0,fs/disk=200
        "#]]
        .assert_eq(&trimmed);
        let item = Item { job_id: 12, step: Some(StepId::Numbered(0)) };
        let (out, _) = render(
            item,
            Choice { per_node: true, ..Choice::default() },
            PID_FIELDS,
            Layout::Parsable { trailing: true },
        );
        assert_eq!(out, "12.0|n1|100|\n12.0|n2|102|\n");
        assert_eq!(parse_fields(&["maxrss".into()]).unwrap()[0].name, "MaxRSS", "an exact name wins");
        assert_eq!(parse_fields(&["tresusageinmaxn".into()]).unwrap()[0].name, "TRESUsageInMaxNode");
        assert_eq!(parse_fields(&["Bogus".into()]), Err("Bogus".to_owned()));
        let every: Vec<&str> = DEFAULT_FIELDS.split(',').collect();
        assert_eq!(parse_fields(&[DEFAULT_FIELDS.into()]).unwrap().len(), every.len());
    }

    #[test]
    fn items_are_jobs_and_steps() {
        let items = parse_items(&["5,6.batch".into(), "7.2".into(), "5".into()]).unwrap();
        assert_eq!(
            items,
            [
                Item { job_id: 5, step: None },
                Item { job_id: 6, step: Some(StepId::Batch) },
                Item { job_id: 7, step: Some(StepId::Numbered(2)) }
            ]
        );
        assert_eq!(parse_items(&["x".into()]), Err("x".to_owned()));
        assert_eq!(parse_items(&["5.y".into()]), Err("5.y".to_owned()));
    }
}
