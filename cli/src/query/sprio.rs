//! `sprio`: the priority of each pending job per partition and the weighted factors it is made
//! of (Slurm's default columns show only factors whose weight is set; `-l` shows all, `-n` the
//! normalized values, `-w` the weights).

use super::common;
use clap::{ArgAction, Parser};
use drover_shared::proto::client::{PriorityRow, PriorityWeights, Request, Response};
use std::ffi::OsString;

#[derive(Debug, Parser)]
#[command(
    name = "sprio",
    about = "Show the priority factors of pending jobs",
    disable_help_flag = true,
    infer_long_args = true
)]
struct Args {
    /// No header.
    #[arg(short = 'h', long = "noheader")]
    noheader: bool,
    /// Print this help.
    #[arg(long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// Only these jobs.
    #[arg(short = 'j', long = "jobs")]
    jobs: Vec<String>,
    /// Long format.
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Normalized factors (0–1) instead of weighted ones.
    #[arg(short = 'n', long = "norm")]
    norm: bool,
    /// Only these partitions.
    #[arg(short = 'p', long = "partition")]
    partitions: Vec<String>,
    /// Only these users' jobs (adds the USER column).
    #[arg(short = 'u', long = "user")]
    users: Vec<String>,
    /// Show the configured weights.
    #[arg(short = 'w', long = "weights")]
    weights: bool,
    /// Cluster (accepted; Drover serves one cluster).
    #[arg(short = 'M', long = "clusters")]
    clusters: Option<String>,
    /// Output format: `%[.][width]letter` fields (Slurm's letters).
    #[arg(short = 'o', long = "format")]
    format: Option<String>,
    /// Print the options first.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    JobId,
    Partition,
    User,
    Priority,
    Site,
    Age,
    Assoc,
    FairShare,
    JobSize,
    PartitionFactor,
    Qos,
    Nice,
    Tres,
}

impl Field {
    fn header(self) -> &'static str {
        match self {
            Field::JobId => "JOBID",
            Field::Partition | Field::PartitionFactor => "PARTITION",
            Field::User => "USER",
            Field::Priority => "PRIORITY",
            Field::Site => "SITE",
            Field::Age => "AGE",
            Field::Assoc => "ASSOC",
            Field::FairShare => "FAIRSHARE",
            Field::JobSize => "JOBSIZE",
            Field::Qos => "QOS",
            Field::Nice => "NICE",
            Field::Tres => "TRES",
        }
    }

    /// Width, and whether the value is right-justified (`%.15i`).
    fn width(self) -> (usize, bool) {
        match self {
            Field::JobId => (15, true),
            Field::Partition => (9, false),
            Field::User => (8, true),
            Field::Nice => (11, true),
            Field::Tres => (20, true),
            _ => (10, true),
        }
    }
}

fn fields(long: bool, with_user: bool, weights: &PriorityWeights) -> Vec<Field> {
    if long {
        use Field::*;
        return vec![
            JobId,
            Partition,
            User,
            Priority,
            Site,
            Age,
            Assoc,
            FairShare,
            JobSize,
            PartitionFactor,
            Qos,
            Nice,
            Tres,
        ];
    }
    let mut f = vec![Field::JobId, Field::Partition];
    if with_user {
        f.push(Field::User);
    }
    f.extend([Field::Priority, Field::Site]);
    let optional = [
        (weights.age, Field::Age),
        (weights.assoc, Field::Assoc),
        (weights.fairshare, Field::FairShare),
        (weights.job_size, Field::JobSize),
        (weights.partition, Field::PartitionFactor),
        (weights.qos, Field::Qos),
    ];
    f.extend(optional.iter().filter(|(w, _)| *w != 0).map(|(_, field)| *field));
    if !weights.tres.is_empty() {
        f.push(Field::Tres);
    }
    f
}

fn weighted(weight: u32, factor: f64) -> String {
    format!("{:.0}", f64::from(weight) * factor)
}

fn cell(field: Field, row: &PriorityRow, weights: &PriorityWeights, norm: bool) -> String {
    let value = |weight: u32, factor: drover_shared::proto::client::Real| {
        if norm { format!("{:.7}", factor.get()) } else { weighted(weight, factor.get()) }
    };
    match field {
        Field::JobId => row.job_id.to_string(),
        Field::Partition => row.partition.clone(),
        Field::User => row.user.clone(),
        Field::Priority if norm => format!("{:.7}", f64::from(row.priority) / f64::from(u32::MAX)),
        Field::Priority => row.priority.to_string(),
        Field::Site => row.site.to_string(),
        Field::Age => value(weights.age, row.age),
        Field::Assoc => value(weights.assoc, row.assoc),
        Field::FairShare => value(weights.fairshare, row.fairshare),
        Field::JobSize => value(weights.job_size, row.job_size),
        Field::PartitionFactor => value(weights.partition, row.partition_factor),
        Field::Qos => value(weights.qos, row.qos),
        Field::Nice => row.nice.to_string(),
        Field::Tres => row.tres.clone(),
    }
}

fn weight_cell(field: Field, weights: &PriorityWeights) -> String {
    match field {
        Field::JobId => "Weights".into(),
        Field::Site => "1".into(),
        Field::Age => weights.age.to_string(),
        Field::Assoc => weights.assoc.to_string(),
        Field::FairShare => weights.fairshare.to_string(),
        Field::JobSize => weights.job_size.to_string(),
        Field::PartitionFactor => weights.partition.to_string(),
        Field::Qos => weights.qos.to_string(),
        Field::Tres => weights.tres.clone(),
        _ => String::new(),
    }
}

fn line(fields: &[Field], value: impl Fn(Field) -> String) -> String {
    let cells: Vec<String> = fields
        .iter()
        .map(|&f| {
            let (width, right) = f.width();
            let text: String = value(f).chars().take(width).collect();
            if right { format!("{text:>width$}") } else { format!("{text:<width$}") }
        })
        .collect();
    cells.join(" ") + "\n"
}

/// What one letter of `-o` prints: the field, and whether it is the normalized value (`%a`,
/// lower case) or the weighted one (`%A`).
fn format_field(letter: char) -> Option<(Field, bool)> {
    let field = match letter.to_ascii_lowercase() {
        'a' => Field::Age,
        'b' => Field::Assoc,
        'f' => Field::FairShare,
        'i' => Field::JobId,
        'j' => Field::JobSize,
        'n' => Field::Nice,
        'p' => Field::PartitionFactor,
        'q' => Field::Qos,
        'r' => Field::Partition,
        's' => Field::Site,
        't' => Field::Tres,
        'u' => Field::User,
        'y' => Field::Priority,
        _ => return None,
    };
    // Upper case is the weighted value, except `%N` (nice), `%r`, `%S`, `%i`, `%u`, which
    // have one reading.
    Some((field, letter.is_ascii_lowercase() && !matches!(letter, 'i' | 'n' | 'r' | 'u')))
}

/// Rows under a `-o` format: each field padded to its width, the format's text around it.
fn render_format(format: &str, rows: &[PriorityRow], weights: &PriorityWeights, noheader: bool) -> String {
    let items = super::format::parse_percent(format);
    let render_line = |value: &dyn Fn(Field, bool) -> String| {
        let mut out = String::new();
        for item in &items {
            out.push_str(&item.prefix);
            let text = format_field(item.letter).map_or_else(String::new, |(field, norm)| value(field, norm));
            super::format::push_cell(&mut out, &text, item.width, item.right, true);
            out.push_str(&item.suffix);
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = String::new();
    if !noheader {
        out += &render_line(&|field, _| field.header().to_owned());
    }
    for row in rows {
        out += &render_line(&|field, norm| cell(field, row, weights, norm));
    }
    out
}

/// The options, as Slurm's sprio prints them under `-v` before its table.
fn options_dump(args: &Args, job_ids: &[u32]) -> String {
    let list = |items: &[String]| if items.is_empty() { "(null)".to_owned() } else { items.join(",") };
    let jobs: Vec<String> = job_ids.iter().map(u32::to_string).collect();
    format!(
        "-----------------------------\nformat     = {}\njob_flag   = {}\njobs       = {}\npartition  = {}\n\
         users      = {}\nverbose    = {}\n-----------------------------\n\n\n",
        args.format.as_deref().unwrap_or("(null)"),
        u8::from(!job_ids.is_empty()),
        list(&jobs),
        list(&common::flat_list(&args.partitions)),
        list(&common::flat_list(&args.users)),
        args.verbose,
    )
}

/// Renders rows (or the weights line) in Slurm's layout.
fn render(rows: &[PriorityRow], weights: &PriorityWeights, args: &Args) -> String {
    if let Some(format) = args.format.as_deref().filter(|_| !args.weights) {
        return render_format(format, rows, weights, args.noheader);
    }
    let fields = fields(args.long, !args.users.is_empty(), weights);
    let mut out = String::new();
    if !args.noheader {
        out += &line(&fields, |f| f.header().to_owned());
    }
    if args.weights {
        out += &line(&fields, |f| weight_cell(f, weights));
        return out;
    }
    for row in rows {
        out += &line(&fields, |f| cell(f, row, weights, args.norm));
    }
    out
}

pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("sprio", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let (weights, mut rows) = match crate::client::call(&Request::QueryPriority) {
        Ok(Response::Priorities { weights, rows }) => (weights, rows),
        Ok(Response::Error { code, detail }) => anyhow::bail!("{code}: {detail}"),
        Ok(other) => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        Err(error) => {
            eprintln!("sprio: error: {error:#}");
            return Ok(1);
        }
    };
    let mut job_ids = Vec::new();
    for item in common::flat_list(&args.jobs) {
        match item.parse::<u32>() {
            Ok(job_id) => job_ids.push(job_id),
            Err(_) => anyhow::bail!("Invalid job id: {item}"),
        }
    }
    let partitions = common::flat_list(&args.partitions);
    let users = common::flat_list(&args.users);
    rows.retain(|r| job_ids.is_empty() || job_ids.contains(&r.job_id));
    rows.retain(|r| partitions.is_empty() || partitions.contains(&r.partition));
    rows.retain(|r| users.is_empty() || users.contains(&r.user));
    rows.sort_by(|a, b| a.job_id.cmp(&b.job_id).then(a.partition.cmp(&b.partition)));
    if args.verbose > 0 {
        print!("{}", options_dump(&args, &job_ids));
    }
    print!("{}", render(&rows, &weights, &args));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::scenario::sample_stdout;

    fn args(extra: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("sprio").chain(extra.iter().copied())).unwrap()
    }

    /// The sample's weights and jobs 29, 33, 34: fair share 1, JobSize 0.1875 or 0.75, partition
    /// factor 1/10, no age yet.
    #[test]
    fn matches_the_slurm_samples() {
        let weights = PriorityWeights {
            age: 1000,
            assoc: 0,
            fairshare: 10000,
            job_size: 1000,
            partition: 5000,
            qos: 2000,
            tres: String::new(),
        };
        let row = |job_id: u32, priority: u32, job_size: f64| PriorityRow {
            job_id,
            partition: "main".into(),
            user: "root".into(),
            priority,
            fairshare: 1.0.into(),
            job_size: job_size.into(),
            partition_factor: 0.1.into(),
            ..PriorityRow::default()
        };
        let rows = [row(29, 10687, 0.1875), row(33, 11250, 0.75), row(34, 10687, 0.1875)];
        let cases: &[(&str, &[&str])] =
            &[("sprio_default.txt", &[]), ("sprio_long.txt", &["-l"]), ("sprio_weights.txt", &["-w"])];
        for (sample, extra) in cases {
            assert_eq!(render(&rows, &weights, &args(extra)), sample_stdout(sample), "{sample}");
        }
        // `-o`: Slurm's letters, lower case normalized, upper case weighted.
        let text = render(&rows[..1], &weights, &args(&["-o", "%.6i %.8u %.10y %.10Y %.10f %.10F %.6N %r"]));
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["JOBID", "USER", "PRIORITY", "PRIORITY", "FAIRSHARE", "FAIRSHARE", "NICE", "PARTITION"]);
        assert_eq!(lines[1][..2], ["29", "root"]);
        assert!(lines[1][2].starts_with("0.00000"), "{text}");
        assert_eq!(lines[1][3..], ["10687", "1.0000000", "10000", "0", "main"], "{text}");
        assert_eq!(
            text.lines().nth(1).map(str::len),
            Some(6 + 1 + 8 + 1 + 10 + 1 + 10 + 1 + 10 + 1 + 10 + 1 + 6 + 1 + 4)
        );
        let dump = options_dump(&args(&["-v", "-j", "29"]), &[29]);
        assert!(dump.contains("format     = (null)\njob_flag   = 1\njobs       = 29\npartition  = (null)\n"), "{dump}");
        assert!(dump.contains("users      = (null)\nverbose    = 1\n"), "{dump}");
    }
}
