//! `sreport`: Slurm's usage reports from the hourly rollups — `cluster utilization`, `cluster
//! AccountUtilizationByUser` and `user TopUsage`, with `start=`/`end=` (default: yesterday),
//! `TopCount=`, `-t Seconds|Minutes|Hours|Percent`, `-T cpu|mem|gres/gpu|billing`, `-P`, `-p`, `-n`.

use crate::query::format::{Tz, parse_time_spec, timestamp};
use drover_shared::UnixTime;
use drover_shared::proto::usage::{HourRow, UsageReport};
use std::collections::BTreeMap;

/// Unit of the usage columns (`-t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Seconds,
    Minutes,
    Hours,
    Percent,
}

/// Which report (`cluster utilization`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Utilization,
    AccountByUser,
    TopUsage,
}

/// A parsed `sreport` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    pub(crate) kind: Kind,
    pub(crate) unit: Unit,
    /// `cpu`, `mem`, `gres/gpu` or `billing`.
    pub(crate) tres: String,
    /// 0: table; 1: `-p`; 2: `-P`.
    pub(crate) parsable: u8,
    pub(crate) header: bool,
    pub(crate) start: UnixTime,
    pub(crate) end: UnixTime,
    pub(crate) top: usize,
}

fn unit(text: &str) -> Option<Unit> {
    let t = text.to_ascii_lowercase();
    Some(match t.as_str() {
        "s" | "sec" | "secs" | "seconds" => Unit::Seconds,
        "m" | "min" | "mins" | "minutes" => Unit::Minutes,
        "h" | "hour" | "hours" => Unit::Hours,
        "p" | "per" | "percent" => Unit::Percent,
        _ => return None,
    })
}

/// Parses the arguments after `sreport`.
pub(crate) fn parse(args: &[String], now: UnixTime, tz: Tz) -> Result<Options, String> {
    let midnight = tz.midnight(now);
    let mut o = Options {
        kind: Kind::Utilization,
        unit: Unit::Minutes,
        tres: "cpu".into(),
        parsable: 0,
        header: true,
        start: tz.midnight(midnight - 1),
        end: midnight,
        top: 10,
    };
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = |it: &mut std::slice::Iter<'_, String>, inline: &str| -> Result<String, String> {
            if inline.is_empty() {
                it.next().cloned().ok_or_else(|| format!("option {arg} needs a value"))
            } else {
                Ok(inline.to_owned())
            }
        };
        if arg == "-P" || arg == "--parsable2" {
            o.parsable = 2;
        } else if arg == "-p" || arg == "--parsable" {
            o.parsable = 1;
        } else if arg == "-n" || arg == "--noheader" {
            o.header = false;
        } else if let Some(rest) = arg.strip_prefix("-t").or_else(|| arg.strip_prefix("--time-format=")) {
            let v = value(&mut it, rest)?;
            o.unit = unit(&v).ok_or_else(|| format!("unknown time format `{v}`"))?;
        } else if let Some(rest) = arg.strip_prefix("-T").or_else(|| arg.strip_prefix("--tres=")) {
            let v = value(&mut it, rest)?.to_ascii_lowercase();
            if !["cpu", "mem", "gres/gpu", "billing"].contains(&v.as_str()) {
                return Err(format!("unsupported TRES `{v}` (cpu, mem, gres/gpu, billing)"));
            }
            o.tres = v;
        } else if arg.starts_with('-') {
            return Err(format!("unknown option `{arg}`"));
        } else if let Some((key, v)) = arg.split_once('=') {
            let time = |v: &str| parse_time_spec(v, now, tz).map_err(|_| format!("invalid time `{v}`"));
            match key.to_ascii_lowercase().as_str() {
                "start" => o.start = time(v)?,
                "end" => o.end = time(v)?,
                "topcount" => o.top = v.parse().map_err(|_| format!("invalid TopCount `{v}`"))?,
                other => return Err(format!("unknown option `{other}=`")),
            }
        } else {
            words.push(arg.to_ascii_lowercase());
        }
    }
    o.kind = match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["cluster", "utilization"] => Kind::Utilization,
        ["cluster", "accountutilizationbyuser"] => Kind::AccountByUser,
        ["user", "topusage"] => Kind::TopUsage,
        _ => {
            return Err(format!(
                "unsupported report `{}` (cluster utilization, cluster AccountUtilizationByUser, user TopUsage)",
                words.join(" ")
            ));
        }
    };
    if o.end <= o.start {
        return Err("end must be after start".into());
    }
    Ok(o)
}

/// The chosen TRES's seconds in one hourly row.
fn used(row: &HourRow, tres: &str) -> u64 {
    match tres {
        "gres/gpu" => row.gpu_secs,
        "mem" => row.mem_mb_secs,
        "billing" => row.billing_secs,
        _ => row.cpu_secs,
    }
}

#[allow(clippy::cast_precision_loss)]
fn value(secs: u64, total: u64, unit: Unit) -> String {
    match unit {
        Unit::Seconds => secs.to_string(),
        Unit::Minutes => ((secs + 30) / 60).to_string(),
        Unit::Hours => ((secs + 1800) / 3600).to_string(),
        Unit::Percent => format!("{:.2}%", if total == 0 { 0.0 } else { secs as f64 * 100.0 / total as f64 }),
    }
}

fn unit_words(o: &Options) -> String {
    let what = if o.tres == "cpu" { "CPU" } else { "TRES" };
    match o.unit {
        Unit::Seconds => format!("{what} Seconds"),
        Unit::Minutes => format!("{what} Minutes"),
        Unit::Hours => format!("{what} Hours"),
        Unit::Percent => "Percentage of Total".into(),
    }
}

fn line(cells: &[String], widths: &[usize], parsable: u8) -> String {
    match parsable {
        2 => cells.join("|") + "\n",
        1 => cells.iter().map(|c| format!("{c}|")).collect::<String>() + "\n",
        _ => cells.iter().zip(widths).map(|(c, w)| format!("{c:>w$}")).collect::<Vec<_>>().join(" ") + "\n",
    }
}

/// Renders the report `o` asks for from `report` (the window's rollups).
pub(crate) fn render(o: &Options, report: &UsageReport, tz: Tz, proper_name: &dyn Fn(&str) -> String) -> String {
    let secs = u64::try_from(o.end - o.start).unwrap_or(0);
    let capacity = match o.tres.as_str() {
        "gres/gpu" => report.gpus,
        _ => report.cpus,
    } * secs;
    let rows: Vec<&HourRow> = report
        .hours
        .iter()
        .filter(|r| r.gpu_type.is_empty() && r.hour >= o.start - o.start.rem_euclid(3600) && r.hour < o.end)
        .collect();
    let period = format!("{} - {}", timestamp(o.start, tz), timestamp(o.end - 1, tz));
    let mut out = String::new();
    let (title, headers, widths, table): (String, Vec<&str>, Vec<usize>, Vec<Vec<String>>) = match o.kind {
        Kind::Utilization => {
            let alloc: u64 = rows.iter().map(|r| used(r, &o.tres)).sum::<u64>().min(capacity.max(1));
            let idle = capacity.saturating_sub(alloc);
            let v = |s| value(s, capacity, o.unit);
            (
                format!("Cluster Utilization {period}"),
                vec!["Cluster", "Allocated", "Down", "PLND Down", "Idle", "Planned", "Reported"],
                vec![9, 10, 10, 9, 10, 7, 10],
                vec![vec![report.cluster.clone(), v(alloc), v(0), v(0), v(idle), v(0), v(capacity)]],
            )
        }
        Kind::AccountByUser => {
            let mut per: BTreeMap<&str, (u64, BTreeMap<&str, u64>)> = BTreeMap::new();
            for r in &rows {
                let e = per.entry(r.account.as_str()).or_default();
                e.0 += used(r, &o.tres);
                *e.1.entry(r.user.as_str()).or_default() += used(r, &o.tres);
            }
            let total: u64 = per.values().map(|v| v.0).sum();
            let v = |s| value(s, capacity, o.unit);
            let mut table =
                vec![vec![report.cluster.clone(), "root".into(), String::new(), String::new(), v(total), "0".into()]];
            for (account, (sum, users)) in &per {
                table.push(vec![
                    report.cluster.clone(),
                    (*account).to_owned(),
                    String::new(),
                    String::new(),
                    v(*sum),
                    "0".into(),
                ]);
                for (user, s) in users {
                    table.push(vec![
                        report.cluster.clone(),
                        (*account).to_owned(),
                        (*user).to_owned(),
                        proper_name(user),
                        v(*s),
                        "0".into(),
                    ]);
                }
            }
            (
                format!("Cluster/Account/User Utilization {period} ({secs} secs)"),
                vec!["Cluster", "Account", "Login", "Proper Name", "Used", "Energy"],
                vec![9, 15, 9, 15, 10, 9],
                table,
            )
        }
        Kind::TopUsage => {
            let mut per: BTreeMap<(&str, &str), u64> = BTreeMap::new();
            for r in &rows {
                *per.entry((r.user.as_str(), r.account.as_str())).or_default() += used(r, &o.tres);
            }
            let mut ranked: Vec<_> = per.into_iter().collect();
            ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            ranked.truncate(o.top);
            let table = ranked
                .into_iter()
                .map(|((user, account), s)| {
                    vec![
                        report.cluster.clone(),
                        user.to_owned(),
                        proper_name(user),
                        account.to_owned(),
                        value(s, capacity, o.unit),
                        "0".into(),
                    ]
                })
                .collect();
            (
                format!("Top {} Users {period} ({secs} secs)", o.top),
                vec!["Cluster", "Login", "Proper Name", "Account", "Used", "Energy"],
                vec![9, 9, 15, 15, 10, 9],
                table,
            )
        }
    };
    if o.header {
        let rule = "-".repeat(80);
        out += &format!("{rule}\n{title}\nUsage reported in {}\n{rule}\n", unit_words(o));
        let headers: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
        out += &line(&headers, &widths, o.parsable);
        if o.parsable == 0 {
            out += &line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(), &widths, 0);
        }
    }
    for row in &table {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| {
                if o.parsable == 0 && c.chars().count() > *w {
                    c.chars().take(w - 1).collect::<String>() + "+"
                } else {
                    c.clone()
                }
            })
            .collect();
        out += &line(&cells, &widths, o.parsable);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: UnixTime = 1_764_460_800 + 10 * 3600; // 2025-11-30 10:00 UTC

    fn report() -> UsageReport {
        let row = |hour, user: &str, account: &str, cpu_secs, gpu_secs| HourRow {
            hour,
            user: user.into(),
            account: account.into(),
            partition: "main".into(),
            cpu_secs,
            gpu_secs,
            ..HourRow::default()
        };
        let day = 1_764_374_400; // 2025-11-29 00:00 UTC
        UsageReport {
            cluster: "testcluster".into(),
            cpus: 8,
            gpus: 4,
            hours: vec![
                row(day, "alice", "vision", 14_400, 7200),
                row(day + 3600, "bob", "nlp", 3600, 0),
                row(day + 7200, "alice", "vision", 1800, 0),
            ],
            ..UsageReport::default()
        }
    }

    fn run(args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let o = parse(&args, NOW, Tz::Fixed(0)).unwrap();
        render(&o, &report(), Tz::Fixed(0), &|u| format!("{u} name"))
    }

    #[test]
    fn utilization_defaults_to_yesterday_in_minutes() {
        // 8 CPUs × 86400 s = 11520 CPU-minutes; 19800 CPU-s = 330 min allocated.
        assert_eq!(
            run(&["cluster", "utilization"]),
            "--------------------------------------------------------------------------------
Cluster Utilization 2025-11-29T00:00:00 - 2025-11-29T23:59:59
Usage reported in CPU Minutes
--------------------------------------------------------------------------------
  Cluster  Allocated       Down PLND Down       Idle Planned   Reported
--------- ---------- ---------- --------- ---------- ------- ----------
testclus+        330          0         0      11190       0      11520
"
        );
        assert!(run(&["-P", "-t", "percent", "cluster", "Utilization"]).ends_with(
            "Cluster|Allocated|Down|PLND Down|Idle|Planned|Reported\ntestcluster|2.86%|0.00%|0.00%|97.14%|0.00%|100.00%\n"
        ));
        assert!(
            run(&["-P", "-T", "gres/gpu", "-thours", "cluster", "utilization"])
                .ends_with("testcluster|2|0|0|94|0|96\n")
        );
    }

    #[test]
    fn account_by_user_and_top_usage() {
        assert!(run(&["-P", "cluster", "AccountUtilizationByUser", "start=2025-11-29", "end=2025-11-30"]).ends_with(
            "Cluster|Account|Login|Proper Name|Used|Energy
testcluster|root|||330|0
testcluster|nlp|||60|0
testcluster|nlp|bob|bob name|60|0
testcluster|vision|||270|0
testcluster|vision|alice|alice name|270|0
"
        ));
        assert!(run(&["-P", "-n", "user", "TopUsage", "TopCount=1"]) == "testcluster|alice|alice name|vision|270|0\n");
        let args: Vec<String> = ["cluster", "nonsense"].iter().map(|a| (*a).to_owned()).collect();
        assert!(parse(&args, NOW, Tz::Fixed(0)).is_err());
    }
}
