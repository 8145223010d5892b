//! `sinfo`: partitions and their nodes. Each row aggregates the nodes of one partition that
//! print alike (same state, same CPU count …); node lists, node counts and the `A/I/O/T` counters
//! add up over the row. `-N` prints one row per node and partition instead.
//!
//! [`run`] fetches partitions and nodes in one connection and prints through the pure
//! [`render`].

use super::columns::{self, FieldDef, def};
use super::common;
use super::format::{self, Tz};
use super::json;
use clap::{ArgAction, Parser};
use drover_shared::UnixTime;
use drover_shared::grammar::mem::format_mem_mb;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::hostlist;
use drover_shared::node::{NodeInfo, NodeState, PartitionInfo, RebootState};
use drover_shared::proto::client::{NodeReason, Request, Response};
use std::ffi::OsString;

#[derive(Debug, Parser)]
#[command(name = "sinfo", about = "View Drover partitions and nodes", disable_help_flag = true, infer_long_args = true)]
struct Args {
    /// Show hidden partitions too.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Only nodes that are down or not responding.
    #[arg(short = 'd', long = "dead")]
    dead: bool,
    /// Print no header line.
    #[arg(short = 'h', long = "noheader")]
    noheader: bool,
    /// Print this help.
    #[arg(long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// Repeat every this many seconds.
    #[arg(short = 'i', long = "iterate")]
    iterate: Option<u64>,
    /// Long format, preceded by the date.
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Cluster to query: Drover serves one, so it must be named (or `all`); `CLUSTER: <name>` first.
    #[arg(short = 'M', long = "clusters")]
    clusters: Option<String>,
    /// Only these nodes (a hostlist).
    #[arg(short = 'n', long = "nodes")]
    nodes: Vec<String>,
    /// One line per node.
    #[arg(short = 'N', long = "Node")]
    node_oriented: bool,
    /// Output format, `%[.][width]<letter>` fields.
    #[arg(short = 'o', long = "format")]
    format: Option<String>,
    /// Output format, `Name[:[.]width[suffix]]` fields.
    #[arg(short = 'O', long = "Format")]
    format_long: Option<String>,
    /// Only these partitions.
    #[arg(short = 'p', long = "partition")]
    partitions: Vec<String>,
    /// Down and drained nodes with their reasons, who set them and when.
    #[arg(short = 'R', long = "list-reasons")]
    list_reasons: bool,
    /// Only responding nodes.
    #[arg(short = 'r', long = "responding")]
    responding: bool,
    /// One line per partition with node counts by state.
    #[arg(short = 's', long = "summarize")]
    summarize: bool,
    /// Only nodes in these states.
    #[arg(short = 't', long = "states")]
    states: Vec<String>,
    /// More messages.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Print the nodes as Slurm's REST `nodes` response in JSON (formatting options are ignored).
    #[arg(long = "json")]
    json: bool,
    /// The same document as `--json`, in YAML.
    #[arg(long = "yaml")]
    yaml: bool,
}

/// What a column shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Partition,
    PartitionName,
    Avail,
    TimeLimit,
    DefaultTime,
    JobSize,
    Root,
    OverSubscribe,
    Groups,
    Nodes,
    NodeList,
    NodeHost,
    NodeAddr,
    NodesAi,
    NodesAiot,
    CpusAiot,
    Cpus,
    Memory,
    StateCompact,
    StateLong,
    Gres,
    GresUsed,
    Reason,
    Timestamp,
    User,
    Sct,
    Sockets,
    Cores,
    Threads,
    CpuLoad,
    FreeMem,
    Features,
    Weight,
    TmpDisk,
    Version,
    /// A letter or name Drover does not know: an empty column.
    Unknown,
}

impl Field {
    /// Fields that add up over the nodes of a row rather than tell rows apart.
    fn aggregates(self) -> bool {
        matches!(
            self,
            Field::Nodes
                | Field::NodeList
                | Field::NodeHost
                | Field::NodeAddr
                | Field::NodesAi
                | Field::NodesAiot
                | Field::CpusAiot
        )
    }
}

const FIELDS: &[FieldDef<Field>] = &[
    def(Some('P'), "Partition", "PARTITION", Field::Partition),
    def(Some('R'), "PartitionName", "PARTITION", Field::PartitionName),
    def(Some('a'), "Available", "AVAIL", Field::Avail),
    def(Some('l'), "Time", "TIMELIMIT", Field::TimeLimit),
    def(Some('L'), "DefaultTime", "DEFAULTTIME", Field::DefaultTime),
    def(Some('s'), "Size", "JOB_SIZE", Field::JobSize),
    def(Some('r'), "Root", "ROOT", Field::Root),
    def(Some('h'), "OverSubscribe", "OVERSUBSCRIBE", Field::OverSubscribe),
    def(Some('g'), "Groups", "GROUPS", Field::Groups),
    def(Some('D'), "Nodes", "NODES", Field::Nodes),
    def(Some('N'), "NodeList", "NODELIST", Field::NodeList),
    def(Some('n'), "NodeHost", "HOSTNAMES", Field::NodeHost),
    def(Some('o'), "NodeAddr", "NODE_ADDR", Field::NodeAddr),
    def(Some('A'), "NodeAI", "NODES(A/I)", Field::NodesAi),
    def(Some('F'), "NodeAIOT", "NODES(A/I/O/T)", Field::NodesAiot),
    def(Some('C'), "CPUsState", "CPUS(A/I/O/T)", Field::CpusAiot),
    def(Some('c'), "CPUs", "CPUS", Field::Cpus),
    def(Some('m'), "Memory", "MEMORY", Field::Memory),
    def(Some('t'), "StateCompact", "STATE", Field::StateCompact),
    def(Some('T'), "StateLong", "STATE", Field::StateLong),
    def(Some('G'), "Gres", "GRES", Field::Gres),
    def(None, "GresUsed", "GRES_USED", Field::GresUsed),
    def(Some('E'), "Reason", "REASON", Field::Reason),
    def(Some('H'), "Timestamp", "TIMESTAMP", Field::Timestamp),
    def(Some('u'), "User", "USER", Field::User),
    def(Some('z'), "SocketCoreThread", "S:C:T", Field::Sct),
    def(Some('X'), "Sockets", "SOCKETS", Field::Sockets),
    def(Some('Y'), "Cores", "CORES", Field::Cores),
    def(Some('Z'), "Threads", "THREADS", Field::Threads),
    def(Some('O'), "CPUsLoad", "CPU_LOAD", Field::CpuLoad),
    def(Some('e'), "FreeMem", "FREE_MEM", Field::FreeMem),
    def(Some('f'), "Features", "AVAIL_FEATURES", Field::Features),
    def(Some('b'), "FeaturesAct", "ACTIVE_FEATURES", Field::Features),
    def(Some('w'), "Weight", "WEIGHT", Field::Weight),
    def(Some('d'), "Disk", "TMP_DISK", Field::TmpDisk),
    def(Some('v'), "Version", "VERSION", Field::Version),
];

/// One output column of sinfo.
pub(crate) type Column = columns::Column<Field>;

/// Node lists are padded but never cut.
fn cuts(field: Field) -> bool {
    !matches!(field, Field::NodeList | Field::NodeHost)
}

/// Parses a `-o` format.
pub(crate) fn parse_format(text: &str) -> Vec<Column> {
    columns::parse_percent(text, FIELDS, Field::Unknown)
}

/// Parses a `-O` format; unknown names become empty columns and are returned for a warning.
pub(crate) fn parse_long_format(text: &str) -> (Vec<Column>, Vec<String>) {
    columns::parse_named(text, FIELDS, Field::Unknown)
}

/// Which built-in layout to use when no `-o`/`-O` is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Default,
    Summarize,
    Long,
    Node,
    NodeLong,
    /// `-R`: down and drained nodes by reason.
    Reasons,
}

/// The built-in format of `mode`; `#` widths (longest value, at least 9) are filled in from the
/// data.
pub(crate) fn builtin_format(mode: Mode, partitions: &[PartitionInfo], nodes: &[NodeInfo]) -> Vec<Column> {
    let part_width = partitions.iter().map(|p| partition_label(p).len()).max().unwrap_or(0).max(9);
    let node_width = nodes.iter().map(|n| n.name.len()).max().unwrap_or(0).max(9);
    let text = match mode {
        Mode::Default => format!("%{part_width}P %.5a %.10l %.6D %.6t %N"),
        Mode::Summarize => format!("%{part_width}P %.5a %.10l %.16F %N"),
        Mode::Long => format!("%{part_width}P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"),
        Mode::Node => format!("%{node_width}N %.6D %{part_width}P %6t"),
        Mode::Reasons => "%20E %9u %19H %N".to_owned(),
        Mode::NodeLong => {
            format!("%{node_width}N %.6D %.{part_width}P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E")
        }
    };
    parse_format(&text)
}

/// Everything [`render`] needs besides the data.
#[derive(Debug, Clone)]
pub(crate) struct RenderOptions {
    pub(crate) columns: Vec<Column>,
    pub(crate) header: bool,
    /// `-N`: one row per node and partition.
    pub(crate) node_oriented: bool,
    pub(crate) date_line: bool,
    pub(crate) tz: Tz,
    /// Who set each node's reason and when (`%u`, `%H`).
    pub(crate) reasons: Vec<NodeReason>,
    /// Node name → its features (`%f`, `%b`); fetched only when a column shows them.
    pub(crate) features: Features,
}

/// Node name → its features, as the config lists them.
pub(crate) type Features = std::collections::HashMap<String, Vec<String>>;

/// A node's features as sinfo and scontrol print them: a comma list, `(null)` when none.
pub(crate) fn features_text(features: &[String]) -> String {
    if features.is_empty() { "(null)".into() } else { features.join(",") }
}

fn partition_label(partition: &PartitionInfo) -> String {
    if partition.default { format!("{}*", partition.name) } else { partition.name.clone() }
}

/// Compact state as sinfo prints it: lower case, `drain`/`drng` for drained nodes, `boot` for an
/// idle node whose reboot waits, `@` after a busy or drained node's requested reboot and `^`
/// after an issued one, `*` when not responding.
fn state_compact(node: &NodeInfo) -> String {
    let busy = node.cpus_alloc > 0;
    let mark = reboot_mark(node);
    let base = match (node.state, node.drain) {
        // A node rebooting is DOWN until it registers; its state names the reboot.
        (NodeState::Down, _) if node.reboot != Some(RebootState::Issued) => "down",
        (_, true) if busy => "drng",
        (_, true) => "drain",
        _ if mark.is_some() && !matches!(node.state, NodeState::Allocated | NodeState::Mixed) => "boot",
        _ => node.state.compact_name(),
    };
    let mark = if base == "boot" && mark == Some('@') { None } else { mark };
    finish_state(base.to_owned(), mark, node)
}

fn state_long(node: &NodeInfo) -> String {
    let busy = node.cpus_alloc > 0;
    let mark = reboot_mark(node);
    let base = match (node.state, node.drain) {
        (NodeState::Down, _) if node.reboot != Some(RebootState::Issued) => "down".into(),
        (_, true) if busy => "draining".into(),
        (_, true) => "drained".into(),
        _ if mark.is_some() && !matches!(node.state, NodeState::Allocated | NodeState::Mixed) => "reboot".into(),
        _ => node.state.long_name().to_ascii_lowercase(),
    };
    let mark = if base == "reboot" && mark == Some('@') { None } else { mark };
    finish_state(base, mark, node)
}

/// `@` for a requested reboot, `^` for an issued one.
fn reboot_mark(node: &NodeInfo) -> Option<char> {
    node.reboot.map(|r| match r {
        RebootState::Requested => '@',
        RebootState::Issued => '^',
    })
}

fn finish_state(mut state: String, mark: Option<char>, node: &NodeInfo) -> String {
    state.extend(mark);
    if node.not_responding {
        state.push('*');
    }
    state
}

/// Whether a node counts as "other" (neither allocated nor idle) in the `A/I/O/T` counters.
fn is_other(node: &NodeInfo) -> bool {
    node.drain || node.not_responding || matches!(node.state, NodeState::Down | NodeState::Unknown)
}

/// GPUs by type as a GRES string (`gpu:a100:4`, `gpu:1`), `(null)` without GPUs.
pub(crate) fn gres_string(node: &NodeInfo) -> String {
    let mut types: Vec<(&str, u32)> = Vec::new();
    for gpu in &node.gpus {
        match types.iter_mut().find(|(t, _)| *t == gpu.gpu_type) {
            Some((_, count)) => *count += 1,
            None => types.push((&gpu.gpu_type, 1)),
        }
    }
    if types.is_empty() {
        return "(null)".into();
    }
    let items: Vec<String> =
        types.iter().map(|(t, n)| if t.is_empty() { format!("gpu:{n}") } else { format!("gpu:{t}:{n}") }).collect();
    items.join(",")
}

/// A node's configured TRES (`CfgTRES`): CPUs, memory, billing (its CPUs) and GPUs.
pub(crate) fn node_tres(node: &NodeInfo) -> Vec<(&'static str, String)> {
    let mut tres = vec![
        ("cpu", node.cpus.to_string()),
        ("mem", format_mem_mb(node.real_memory_mb)),
        ("billing", node.cpus.to_string()),
    ];
    if !node.gpus.is_empty() {
        tres.push(("gres/gpu", node.gpus.len().to_string()));
    }
    tres
}

/// What of a node's TRES is allocated (`AllocTRES`), only the kinds in use.
pub(crate) fn node_alloc_tres(node: &NodeInfo) -> Vec<(&'static str, String)> {
    let mut tres = Vec::new();
    if node.cpus_alloc > 0 {
        tres.push(("cpu", node.cpus_alloc.to_string()));
    }
    if node.mem_alloc_mb > 0 {
        tres.push(("mem", format_mem_mb(node.mem_alloc_mb)));
    }
    if !node.gpus_alloc.is_empty() {
        tres.push(("gres/gpu", node.gpus_alloc.len().to_string()));
    }
    tres
}

/// Allocated GPUs by type with their indices (`gpu:a100:2(IDX:0-1)`), `(null)` without GPUs.
pub(crate) fn gres_used_string(node: &NodeInfo) -> String {
    if node.gpus.is_empty() {
        return "(null)".into();
    }
    let mut types: Vec<&str> = Vec::new();
    for gpu in &node.gpus {
        if !types.contains(&gpu.gpu_type.as_str()) {
            types.push(&gpu.gpu_type);
        }
    }
    let items: Vec<String> = types
        .iter()
        .map(|t| {
            let used: Vec<u32> = node
                .gpus
                .iter()
                .filter(|g| g.gpu_type == *t && node.gpus_alloc.contains(&g.index))
                .map(|g| g.index)
                .collect();
            let indices = if used.is_empty() { "N/A".to_owned() } else { index_ranges(&used) };
            let name = if t.is_empty() { "gpu".to_owned() } else { format!("gpu:{t}") };
            format!("{name}:{}(IDX:{indices})", used.len())
        })
        .collect();
    items.join(",")
}

/// `0-1,3` for sorted indices.
fn index_ranges(indices: &[u32]) -> String {
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for index in sorted {
        match ranges.last_mut() {
            Some((_, hi)) if *hi + 1 == index => *hi = index,
            _ => ranges.push((index, index)),
        }
    }
    let items: Vec<String> =
        ranges.iter().map(|(lo, hi)| if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") }).collect();
    items.join(",")
}

fn limit(limit: Option<TimeLimit>, unset: &str) -> String {
    match limit {
        Some(TimeLimit::Unlimited) => "infinite".into(),
        Some(TimeLimit::Minutes(minutes)) => format::clock(i64::from(minutes) * 60),
        None => unset.into(),
    }
}

/// A value that tells rows apart: the same for every node of a row.
fn node_value(field: Field, partition: &PartitionInfo, node: Option<&NodeInfo>, options: &RenderOptions) -> String {
    let reason_by = |n: &NodeInfo| options.reasons.iter().find(|r| r.node == n.name && n.reason.is_some());
    let features = &options.features;
    let per_node = |f: &dyn Fn(&NodeInfo) -> String| node.map_or_else(|| "n/a".to_owned(), f);
    match field {
        Field::Partition => partition_label(partition),
        Field::PartitionName => partition.name.clone(),
        Field::Avail => if partition.up { "up" } else { "down" }.into(),
        Field::TimeLimit => limit(Some(partition.max_time), "n/a"),
        Field::DefaultTime => limit(partition.default_time, "n/a"),
        Field::JobSize => match partition.max_nodes {
            Some(max) => format!("1-{max}"),
            None => "1-infinite".into(),
        },
        Field::Root => "no".into(),
        Field::OverSubscribe => "NO".into(),
        Field::Groups => "all".into(),
        Field::Cpus => per_node(&|n| n.cpus.to_string()),
        Field::Memory => per_node(&|n| n.real_memory_mb.to_string()),
        Field::StateCompact => per_node(&state_compact),
        Field::StateLong => per_node(&state_long),
        Field::Gres => per_node(&gres_string),
        Field::GresUsed => per_node(&gres_used_string),
        Field::Reason => per_node(&|n| match &n.reason {
            // Drover's incident owner and ticket follow the reason when they say more than
            // Slurm's USER column does.
            Some(reason) => match reason_by(n) {
                Some(r) if r.ticket.is_some() || (r.owner != r.user && !["system", ""].contains(&r.owner.as_str())) => {
                    let ticket = r.ticket.as_ref().map(|t| format!(" ticket={t}")).unwrap_or_default();
                    format!("{reason} [owner={}{ticket}]", r.owner)
                }
                _ => reason.clone(),
            },
            None if n.not_responding && n.state == NodeState::Down => "Not responding".into(),
            None => "none".into(),
        }),
        Field::Timestamp => {
            per_node(&|n| reason_by(n).map_or_else(|| "Unknown".into(), |r| format::timestamp(r.time, options.tz)))
        }
        Field::User => per_node(&|n| reason_by(n).map_or_else(|| "Unknown".into(), |r| r.user.clone())),
        Field::Sct => per_node(&|n| format!("1:{}:1", n.cpus)),
        Field::Sockets | Field::Threads => "1".into(),
        Field::Cores => per_node(&|n| n.cpus.to_string()),
        Field::CpuLoad | Field::FreeMem => "N/A".into(),
        Field::Features => per_node(&|n| features_text(features.get(&n.name).map_or(&[][..], Vec::as_slice))),
        Field::Weight => "1".into(),
        Field::TmpDisk => "0".into(),
        Field::Version => per_node(&|n| n.version.clone()),
        Field::Unknown => String::new(),
        // Aggregates are computed over the row in `row_value`.
        Field::Nodes
        | Field::NodeList
        | Field::NodeHost
        | Field::NodeAddr
        | Field::NodesAi
        | Field::NodesAiot
        | Field::CpusAiot => String::new(),
    }
}

fn row_value(field: Field, partition: &PartitionInfo, nodes: &[&NodeInfo], options: &RenderOptions) -> String {
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let count = |f: &dyn Fn(&NodeInfo) -> bool| nodes.iter().filter(|n| f(n)).count();
    let allocated = count(&|n| !is_other(n) && matches!(n.state, NodeState::Allocated | NodeState::Mixed));
    let idle = count(&|n| !is_other(n) && n.state == NodeState::Idle);
    let other = count(&|n| is_other(n));
    match field {
        Field::Nodes => nodes.len().to_string(),
        Field::NodeList | Field::NodeHost => hostlist::compress(&names),
        Field::NodeAddr => {
            let mut addresses: Vec<&str> = Vec::new();
            for node in nodes {
                if !addresses.contains(&node.address.as_str()) {
                    addresses.push(&node.address);
                }
            }
            addresses.join(",")
        }
        Field::NodesAi => format!("{allocated}/{idle}"),
        Field::NodesAiot => format!("{allocated}/{idle}/{other}/{}", nodes.len()),
        Field::CpusAiot => {
            let sum = |f: &dyn Fn(&NodeInfo) -> u32| nodes.iter().map(|n| f(n)).sum::<u32>();
            let alloc = sum(&|n| n.cpus_alloc);
            let free_ok = sum(&|n| if is_other(n) { 0 } else { n.cpus.saturating_sub(n.cpus_alloc) });
            let free_other = sum(&|n| if is_other(n) { n.cpus.saturating_sub(n.cpus_alloc) } else { 0 });
            format!("{alloc}/{free_ok}/{free_other}/{}", sum(&|n| n.cpus))
        }
        _ => node_value(field, partition, nodes.first().copied(), options),
    }
}

/// Renders partitions (in the order given) and their nodes.
pub(crate) fn render(
    partitions: &[PartitionInfo],
    nodes: &[NodeInfo],
    now: UnixTime,
    options: &RenderOptions,
) -> String {
    let mut out = String::new();
    if options.date_line {
        out.push_str(&format::date_line(now, options.tz));
        out.push('\n');
    }
    if options.header {
        options.columns.iter().for_each(|column| column.push_header(&mut out));
        out.push('\n');
    }
    let mut rows: Vec<(&PartitionInfo, Vec<&NodeInfo>)> = Vec::new();
    if options.node_oriented {
        for node in nodes {
            for partition in partitions.iter().filter(|p| p.nodes.contains(&node.name)) {
                rows.push((partition, vec![node]));
            }
        }
    } else {
        for partition in partitions {
            let members: Vec<&NodeInfo> =
                partition.nodes.iter().filter_map(|name| nodes.iter().find(|n| &n.name == name)).collect();
            if members.is_empty() {
                rows.push((partition, Vec::new()));
                continue;
            }
            let mut groups: Vec<(String, Vec<&NodeInfo>)> = Vec::new();
            for node in members {
                let key: Vec<String> = options
                    .columns
                    .iter()
                    .filter(|c| !c.field.aggregates())
                    .map(|c| node_value(c.field, partition, Some(node), options))
                    .collect();
                let key = key.join("\u{0}");
                match groups.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, group)) => group.push(node),
                    None => groups.push((key, vec![node])),
                }
            }
            // Within a partition, rows go by state, descending.
            groups.sort_by(|a, b| state_compact(b.1[0]).cmp(&state_compact(a.1[0])));
            rows.extend(groups.into_iter().map(|(_, group)| (partition, group)));
        }
    }
    for (partition, group) in rows {
        for column in &options.columns {
            column.push(&mut out, &row_value(column.field, partition, &group, options), cuts(column.field));
        }
        out.push('\n');
    }
    out
}

/// Whether `node` is in one of the `-t` states (compact or long names, `drain` for any drained
/// node, `resp`/`no_resp`/`no_respond`, `reboot_requested`/`reboot_issued`, `all` for every
/// node). The states Slurm 22.05 accepts that no Drover node is ever in (cloud, future, power
/// saving, reservations) match none.
fn node_in_states(node: &NodeInfo, states: &[String]) -> bool {
    states.iter().any(|wanted| {
        let wanted = wanted.to_ascii_lowercase();
        if wanted == "all" {
            return true;
        }
        let compact = state_compact(node);
        let long = state_long(node);
        let bare = |state: &str| state.trim_end_matches(['*', '@', '^']).to_owned();
        bare(&compact) == wanted
            || bare(&long) == wanted
            || node.state.compact_name() == wanted
            || node.state.long_name().eq_ignore_ascii_case(&wanted)
            || (wanted == "drain" && node.drain)
            || (matches!(wanted.as_str(), "reboot_requested" | "reboot" | "boot")
                && node.reboot == Some(RebootState::Requested))
            || (matches!(wanted.as_str(), "reboot_issued" | "reboot^" | "boot^")
                && node.reboot == Some(RebootState::Issued))
            || (wanted == "resp" && !node.not_responding)
            || ((wanted == "no_resp" || wanted == "no_respond") && node.not_responding)
    })
}

/// The state names `-t` accepts: Slurm 22.05's list, with Drover's short `resp`/`no_resp`.
const NODE_STATE_NAMES: [&str; 38] = [
    "all",
    "cloud",
    "fail",
    "future",
    "futr",
    "no_respond",
    "npc",
    "perfctrs",
    "planned",
    "power_down",
    "powering_down",
    "powered_down",
    "powering_up",
    "reboot_issued",
    "reboot_requested",
    "reboot",
    "boot",
    "reboot^",
    "boot^",
    "resv",
    "reserved",
    "idle",
    "alloc",
    "allocated",
    "mix",
    "mixed",
    "down",
    "drain",
    "drained",
    "drng",
    "draining",
    "unk",
    "unknown",
    "resp",
    "no_resp",
    "comp",
    "completing",
    "maint",
];

/// Runs `sinfo`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("sinfo", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let states = common::flat_list(&args.states);
    if let Some(bad) = states.iter().find(|s| !NODE_STATE_NAMES.contains(&s.to_ascii_lowercase().as_str())) {
        anyhow::bail!("Invalid node state specified: {bad}");
    }
    let mut wanted_nodes = Vec::new();
    for expr in common::flat_list(&args.nodes) {
        wanted_nodes.extend(hostlist::expand(&expr)?);
    }
    let wanted_partitions = common::flat_list(&args.partitions);
    let output = json::Output::from_flags(args.json, args.yaml)?;
    let cluster_line = common::cluster_line(args.clusters.as_deref())?;
    loop {
        let (now, mut partitions, mut nodes, reasons) = match fetch() {
            Ok(data) => data,
            Err(error) => {
                eprintln!("slurm_load_partitions: {error}");
                return Ok(1);
            }
        };
        partitions.retain(|p| {
            if wanted_partitions.is_empty() { args.all || !p.hidden } else { wanted_partitions.contains(&p.name) }
        });
        nodes.retain(|n| {
            (wanted_nodes.is_empty() || wanted_nodes.contains(&n.name))
                && (states.is_empty() || node_in_states(n, &states))
                && (!args.responding || !n.not_responding)
                && (!args.dead || n.not_responding || n.state == NodeState::Down)
        });
        let node_filtered = !wanted_nodes.is_empty() || !states.is_empty() || args.responding || args.dead;
        if node_filtered {
            // Partitions left without a matching node print nothing.
            partitions.retain(|p| p.nodes.iter().any(|name| nodes.iter().any(|n| &n.name == name)));
        }
        if let Some(output) = output {
            // The nodes of the partitions shown, each once.
            nodes.retain(|n| partitions.iter().any(|p| p.nodes.contains(&n.name)));
            let features = fetch_features()?;
            let context = json::nodes::NodeContext { reasons: &reasons, features: &features };
            json::print(&json::nodes::document(&nodes, &context), output)?;
            return Ok(0);
        }
        if args.list_reasons {
            // Node-centred: one row per reason over all partitions, down and drained nodes only.
            nodes.retain(|n| {
                (n.drain || n.state == NodeState::Down) && partitions.iter().any(|p| p.nodes.contains(&n.name))
            });
            partitions = if nodes.is_empty() { Vec::new() } else { vec![all_nodes(&nodes)] };
        }
        let mode = match (args.node_oriented, args.long, args.summarize) {
            _ if args.list_reasons => Mode::Reasons,
            (true, true, _) => Mode::NodeLong,
            (true, false, _) => Mode::Node,
            (false, _, true) => Mode::Summarize,
            (false, true, false) => Mode::Long,
            (false, false, false) => Mode::Default,
        };
        let columns = if let Some(text) = &args.format_long {
            let (columns, unknown) = parse_long_format(text);
            for name in unknown {
                eprintln!("sinfo: error: Invalid node format specification: {name}");
            }
            columns
        } else if let Some(text) = &args.format {
            parse_format(text)
        } else {
            builtin_format(mode, &partitions, &nodes)
        };
        let features =
            if columns.iter().any(|c| c.field == Field::Features) { fetch_features()? } else { Features::new() };
        let options = RenderOptions {
            columns,
            header: !args.noheader,
            node_oriented: args.node_oriented,
            date_line: args.long || args.iterate.is_some(),
            tz: Tz::Local,
            reasons,
            features,
        };
        // `-M`: Slurm names the cluster before each listing, header or not.
        print!("{}{}", cluster_line.as_deref().unwrap_or_default(), render(&partitions, &nodes, now, &options));
        match args.iterate {
            Some(secs) => {
                println!();
                std::thread::sleep(std::time::Duration::from_secs(secs.max(1)));
            }
            None => return Ok(0),
        }
    }
}

/// One pseudo-partition holding `nodes`, for the node-centred `-R` listing.
fn all_nodes(nodes: &[NodeInfo]) -> PartitionInfo {
    PartitionInfo {
        name: String::new(),
        default: false,
        up: true,
        hidden: false,
        max_time: TimeLimit::Unlimited,
        default_time: None,
        max_nodes: None,
        nodes: nodes.iter().map(|n| n.name.clone()).collect(),
        allow_accounts: Vec::new(),
        allow_qos: Vec::new(),
        priority_job_factor: 1,
        priority_tier: 1,
        total_cpus: 0,
        total_mem_mb: 0,
        total_gpus: 0,
    }
}

/// Every node's features.
pub(crate) fn fetch_features() -> anyhow::Result<Features> {
    match crate::client::call(&Request::QueryNodeFeatures)? {
        Response::NodeFeatures { nodes } => Ok(nodes.into_iter().collect()),
        Response::Error { code, .. } => anyhow::bail!("{}", code.message()),
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    }
}

/// What sinfo shows: the time, partitions, nodes and who set the nodes' reasons.
type Snapshot = (UnixTime, Vec<PartitionInfo>, Vec<NodeInfo>, Vec<NodeReason>);

/// Partitions, nodes and who set the nodes' reasons, in one connection.
fn fetch() -> anyhow::Result<Snapshot> {
    let mut client = crate::client::Client::connect()?;
    let partitions = match client.call(&Request::QueryPartitions)? {
        Response::Partitions { partitions } => partitions,
        Response::Error { code, .. } => anyhow::bail!("{}", code.message()),
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    };
    let (now, nodes) = match client.call(&Request::QueryNodes)? {
        Response::Nodes { now, nodes } => (now, nodes),
        Response::Error { code, .. } => anyhow::bail!("{}", code.message()),
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    };
    let reasons = match client.call(&Request::QueryNodeReasons)? {
        Response::NodeReasons { reasons } => reasons,
        _ => Vec::new(),
    };
    Ok((now, partitions, nodes, reasons))
}

#[cfg(test)]
mod tests {
    use super::super::scenario::{self, sample_stdout};
    use super::*;
    use drover_shared::node::GpuDevice;
    use expect_test::expect;

    fn options(mode: Mode, partitions: &[PartitionInfo], nodes: &[NodeInfo]) -> RenderOptions {
        RenderOptions {
            columns: builtin_format(mode, partitions, nodes),
            header: true,
            node_oriented: matches!(mode, Mode::Node | Mode::NodeLong),
            date_line: matches!(mode, Mode::Long | Mode::NodeLong),
            tz: Tz::Fixed(0),
            reasons: Vec::new(),
            features: Features::new(),
        }
    }

    #[test]
    fn list_reasons_by_reason_user_and_time() {
        let mut nodes = scenario::nodes();
        nodes[0].drain = true;
        nodes[0].reason = Some("bad fan".into());
        nodes[1].drain = true;
        nodes[1].reason = Some("bad fan".into());
        nodes[1].cpus_alloc = 1;
        nodes[2].state = NodeState::Down;
        nodes[2].reason = Some("PSU".into());
        let reason = |node: &str, reason: &str, user: &str| NodeReason {
            node: node.into(),
            reason: reason.into(),
            uid: 1001,
            user: user.into(),
            time: 1_764_460_800,
            owner: user.into(),
            ticket: None,
        };
        let kept: Vec<NodeInfo> = nodes.into_iter().take(3).collect();
        let mut opts = options(Mode::Reasons, &[], &kept);
        opts.reasons =
            vec![reason("n1", "bad fan", "bob"), reason("n2", "bad fan", "bob"), reason("n3", "PSU", "root")];
        expect![[r#"
            REASON               USER      TIMESTAMP           NODELIST
            bad fan              bob       2025-11-30T00:00:00 n[1-2]
            PSU                  root      2025-11-30T00:00:00 n3
        "#]]
        .assert_eq(&render(&[all_nodes(&kept)], &kept, 0, &opts));
    }

    /// `sinfo -t all` (Slurm's own tests use it) lists every node; the other state names Slurm
    /// 22.05 accepts are accepted, and those no Drover node is in match none.
    #[test]
    fn every_state_name_of_slurm_is_accepted_and_all_means_every_node() {
        for name in ["all", "ALL", "no_respond", "future", "power_down", "reboot_requested", "resv", "idle", "mix"] {
            assert!(NODE_STATE_NAMES.contains(&name.to_ascii_lowercase().as_str()), "{name} refused");
        }
        let mut nodes = scenario::nodes();
        nodes[0].state = NodeState::Down;
        nodes[1].not_responding = true;
        let all = ["all".to_owned()];
        assert!(nodes.iter().all(|n| node_in_states(n, &all)));
        let responding = ["no_respond".to_owned()];
        assert_eq!(nodes.iter().filter(|n| node_in_states(n, &responding)).count(), 1);
        let future = ["future".to_owned()];
        assert!(!nodes.iter().any(|n| node_in_states(n, &future)));
    }

    /// A reboot shows in the state names as Slurm 22.05 prints them, and `-t reboot_requested`
    /// / `-t reboot_issued` pick those nodes.
    #[test]
    fn reboot_states_are_named_as_slurm_names_them() {
        let mut node = scenario::nodes()[0].clone();
        node.state = NodeState::Idle;
        node.cpus_alloc = 0;
        node.drain = false;
        node.not_responding = false;
        let names = |node: &NodeInfo| (state_compact(node), state_long(node));
        node.reboot = Some(RebootState::Requested);
        assert_eq!(names(&node), ("boot".into(), "reboot".into()));
        assert!(node_in_states(&node, &["reboot_requested".to_owned()]));
        for name in ["reboot", "boot", "BOOT"] {
            assert!(NODE_STATE_NAMES.contains(&name.to_ascii_lowercase().as_str()), "{name} refused");
        }
        node.state = NodeState::Mixed;
        node.cpus_alloc = 1;
        assert!(node_in_states(&node, &["boot".to_owned()]), "a busy node whose reboot waits is `boot` to -t");
        node.cpus_alloc = 0;
        node.state = NodeState::Idle;
        assert!(!node_in_states(&node, &["reboot_issued".to_owned()]));
        node.drain = true;
        assert_eq!(names(&node), ("drain@".into(), "drained@".into()));
        node.cpus_alloc = 4;
        node.state = NodeState::Mixed;
        assert_eq!(names(&node), ("drng@".into(), "draining@".into()));
        node.drain = false;
        assert_eq!(names(&node), ("mix@".into(), "mixed@".into()));
        node.cpus_alloc = 0;
        node.state = NodeState::Down;
        node.reboot = Some(RebootState::Issued);
        assert_eq!(names(&node), ("boot^".into(), "reboot^".into()));
        assert!(node_in_states(&node, &["reboot_issued".to_owned()]));
        node.drain = true;
        node.not_responding = true;
        assert_eq!(names(&node), ("drain^*".into(), "drained^*".into()));
        node.reboot = None;
        assert_eq!(names(&node), ("down*".into(), "down*".into()), "DOWN outranks a drain");
    }

    #[test]
    fn builtin_formats_match_slurm() {
        let (partitions, nodes) = (scenario::partitions(), scenario::nodes());
        let render_mode = |mode| render(&partitions, &nodes, scenario::NOW, &options(mode, &partitions, &nodes));
        assert_eq!(render_mode(Mode::Default), sample_stdout("sinfo_default.txt"));
        assert_eq!(render_mode(Mode::Summarize), sample_stdout("sinfo_summarize.txt"));
        assert_eq!(render_mode(Mode::NodeLong), sample_stdout("sinfo_nodes_long.txt"));
    }

    #[test]
    fn format_matches_slurm() {
        let (partitions, nodes) = (scenario::partitions(), scenario::nodes());
        let opts = RenderOptions {
            columns: parse_format("%P %a %l %D %t %N %C %G"),
            ..options(Mode::Default, &partitions, &nodes)
        };
        assert_eq!(render(&partitions, &nodes, scenario::NOW, &opts), sample_stdout("sinfo_fmt.txt"));
    }

    #[test]
    fn rows_split_by_state() {
        let partitions = scenario::partitions();
        let mut nodes = scenario::nodes();
        nodes[0].state = NodeState::Idle;
        nodes[0].cpus_alloc = 0;
        nodes[1].state = NodeState::Mixed;
        nodes[1].cpus_alloc = 1;
        nodes[2].drain = true;
        nodes[2].reason = Some("bad fan".into());
        nodes[3].state = NodeState::Down;
        nodes[3].not_responding = true;
        nodes[3].cpus_alloc = 0;
        nodes[3].gpus = vec![
            GpuDevice { index: 0, gpu_type: "a100".into(), uuid: String::new() },
            GpuDevice { index: 1, gpu_type: "a100".into(), uuid: String::new() },
        ];
        nodes[1].gpus_alloc = vec![0];
        let partitions = &partitions[..1];
        let opts = options(Mode::Default, partitions, &nodes);
        expect![[r#"
            PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST
            main*        up   infinite      1    mix n2
            main*        up   infinite      1   idle n1
            main*        up   infinite      1   drng n3
            main*        up   infinite      1  down* n4
        "#]]
        .assert_eq(&render(partitions, &nodes, scenario::NOW, &opts));
        let opts = RenderOptions { columns: parse_format("%P|%F|%C|%A|%T|%E|%G|%c|%z"), ..opts };
        expect![[r#"
            PARTITION|NODES(A/I/O/T)|CPUS(A/I/O/T)|NODES(A/I)|STATE|REASON|GRES|CPUS|S:C:T
            main*|1/0/0/1|1/1/0/2|1/0|mixed|none|gpu:1|2|1:2:1
            main*|0/1/0/1|0/2/0/2|0/1|idle|none|gpu:1|2|1:2:1
            main*|0/0/1/1|2/0/0/2|0/0|draining|bad fan|gpu:1|2|1:2:1
            main*|0/0/1/1|0/0/2/2|0/0|down*|Not responding|gpu:a100:2|2|1:2:1
        "#]]
        .assert_eq(&render(partitions, &nodes, scenario::NOW, &opts));
        let (columns, unknown) = parse_long_format("NodeHost:5,GresUsed:20,StateLong:.10,Bogus");
        assert_eq!(unknown, ["Bogus"]);
        let opts = RenderOptions { columns, node_oriented: true, ..opts };
        expect![[r#"
            HOSTNGRES_USED                STATEBOGUS               $
            n1   gpu:0(IDX:N/A)            idle                    $
            n2   gpu:1(IDX:0)             mixed                    $
            n3   gpu:0(IDX:N/A)        draining                    $
            n4   gpu:a100:0(IDX:N/A)      down*                    $
        "#]]
        .assert_eq(&scenario::mark_line_ends(&render(partitions, &nodes, scenario::NOW, &opts)));
    }

    #[test]
    fn features_per_node() {
        let (partitions, nodes) = (scenario::partitions(), scenario::nodes());
        let mut opts = RenderOptions { columns: parse_format("%N %f %b"), ..options(Mode::Node, &partitions, &nodes) };
        opts.features.insert("n1".into(), vec!["ib".into(), "a100".into()]);
        let text = render(&partitions[..1], &nodes, scenario::NOW, &opts);
        let n1 = text.lines().find(|l| l.starts_with("n1 ")).unwrap_or_default();
        let n2 = text.lines().find(|l| l.starts_with("n2 ")).unwrap_or_default();
        assert_eq!((n1, n2), ("n1 ib,a100 ib,a100", "n2 (null) (null)"), "{text}");
    }

    #[test]
    fn partition_without_nodes_and_only_partition_column() {
        let mut partitions = scenario::partitions();
        partitions[2].nodes.clear();
        partitions[1].max_time = TimeLimit::Minutes(90);
        let nodes = scenario::nodes();
        let opts =
            RenderOptions { columns: parse_format("%P %l %D %t %N"), ..options(Mode::Default, &partitions, &nodes) };
        expect![[r#"
            PARTITION TIMELIMIT NODES STATE NODELIST$
            main* infinite 4 alloc n[1-4]$
            teamA 1:30:00 4 alloc n[1-4]$
            teamB infinite 0 n/a $
        "#]]
        .assert_eq(&scenario::mark_line_ends(&render(&partitions, &nodes, scenario::NOW, &opts)));
        let opts = RenderOptions { columns: parse_format("%P"), header: false, ..opts };
        expect![[r#"
            main*
            teamA
            teamB
        "#]]
        .assert_eq(&render(&partitions, &nodes, scenario::NOW, &opts));
    }
}
