//! `sshare`: the fair-share tree with shares and decayed usage, one row per association, in
//! Slurm's columns (`-l` adds NormUsage, LevelFS for Fair Tree, GrpTRESMins, TRESRunMins) and its
//! parsable forms (`-p`, `-P`).

use super::common;
use clap::{ArgAction, Parser};
use drover_shared::proto::client::{Request, Response, ShareRow};
use std::ffi::OsString;

#[derive(Debug, Parser)]
#[command(name = "sshare", about = "Show fair-share information", disable_help_flag = true, infer_long_args = true)]
struct Args {
    /// Show every user association, not just the caller's.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Only these accounts (and what is below them).
    #[arg(short = 'A', long = "accounts")]
    accounts: Vec<String>,
    /// Print this help.
    #[arg(long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// Long format.
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// No header.
    #[arg(short = 'n', long = "noheader")]
    noheader: bool,
    /// Parsable, `|` after every field.
    #[arg(short = 'p', long = "parsable")]
    parsable: bool,
    /// Parsable, `|` between fields.
    #[arg(short = 'P', long = "parsable2")]
    parsable2: bool,
    /// Only these users' associations.
    #[arg(short = 'u', long = "users")]
    users: Vec<String>,
    /// User associations only.
    #[arg(short = 'U', long = "Users")]
    users_only: bool,
    /// Cluster (accepted; Drover serves one cluster).
    #[arg(short = 'M', long = "clusters")]
    clusters: Option<String>,
}

/// How to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    Table,
    /// `-p`: a `|` after every field.
    Parsable,
    /// `-P`: `|` between fields.
    Parsable2,
}

struct Column {
    header: &'static str,
    width: usize,
    left: bool,
}

const fn col(header: &'static str, width: usize, left: bool) -> Column {
    Column { header, width, left }
}

fn columns(long: bool, fair_tree: bool) -> Vec<Column> {
    let mut c = vec![
        col("Account", 20, true),
        col("User", 10, false),
        col("RawShares", 10, false),
        col("NormShares", 11, false),
        col("RawUsage", 11, false),
    ];
    if long {
        c.push(col("NormUsage", 11, false));
    }
    c.push(col("EffectvUsage", 13, false));
    c.push(col("FairShare", 10, false));
    if long {
        if fair_tree {
            c.push(col("LevelFS", 10, false));
        }
        c.push(col("GrpTRESMins", 30, false));
        c.push(col("TRESRunMins", 30, false));
    }
    c
}

fn float(value: f64) -> String {
    if value.is_infinite() { "inf".into() } else { format!("{value:.6}") }
}

fn cells(row: &ShareRow, long: bool, fair_tree: bool) -> Vec<String> {
    let is_root = row.depth == 0;
    let indent = " ".repeat(row.depth as usize);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let raw_usage = row.raw_usage.get().max(0.0) as u64;
    let mut c = vec![
        format!("{indent}{}", row.account),
        row.user.clone().unwrap_or_default(),
        row.raw_shares.filter(|_| !is_root).map(|s| s.to_string()).unwrap_or_default(),
        float(row.norm_shares.get()),
        raw_usage.to_string(),
    ];
    if long {
        c.push(if is_root { String::new() } else { float(row.norm_usage.get()) });
    }
    c.push(float(row.effective_usage.get()));
    c.push(row.fairshare.map(|f| float(f.get())).unwrap_or_default());
    if long {
        if fair_tree {
            c.push(row.level_fs.filter(|_| !is_root).map(|l| float(l.get())).unwrap_or_default());
        }
        c.push(row.grp_tres_mins.clone());
        c.push(row.tres_run_mins.clone());
    }
    c
}

fn fit(text: &str, column: &Column) -> String {
    let text = if text.chars().count() > column.width {
        let kept: String = text.chars().take(column.width - 1).collect();
        format!("{kept}+")
    } else {
        text.to_owned()
    };
    if column.left { format!("{text:<w$}", w = column.width) } else { format!("{text:>w$}", w = column.width) }
}

fn line(values: &[String], columns: &[Column], style: Style) -> String {
    match style {
        Style::Table => values.iter().zip(columns).map(|(v, c)| format!("{} ", fit(v, c))).collect::<String>() + "\n",
        Style::Parsable => values.iter().map(|v| format!("{v}|")).collect::<String>() + "\n",
        Style::Parsable2 => values.join("|") + "\n",
    }
}

/// Renders the rows already selected.
pub(crate) fn render(rows: &[ShareRow], fair_tree: bool, long: bool, style: Style, header: bool) -> String {
    let columns = columns(long, fair_tree);
    let mut out = String::new();
    if header {
        out += &line(&columns.iter().map(|c| c.header.to_owned()).collect::<Vec<_>>(), &columns, style);
        if style == Style::Table {
            out += &line(&columns.iter().map(|c| "-".repeat(c.width)).collect::<Vec<_>>(), &columns, style);
        }
    }
    for row in rows {
        out += &line(&cells(row, long, fair_tree), &columns, style);
    }
    out
}

/// Keeps account rows (unless `users_only`) and the user rows asked for.
fn select(rows: Vec<ShareRow>, args: &Args, me: &str) -> Vec<ShareRow> {
    let users = common::flat_list(&args.users);
    let accounts = common::flat_list(&args.accounts);
    rows.into_iter()
        .filter(|row| accounts.is_empty() || accounts.contains(&row.account))
        .filter(|row| match &row.user {
            None => !args.users_only,
            Some(user) if !users.is_empty() => users.contains(user),
            Some(user) => args.all || user == me,
        })
        .collect()
}

pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("sshare", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let (fair_tree, rows) = match crate::client::call(&Request::QueryShares) {
        Ok(Response::Shares { fair_tree, rows }) => (fair_tree, rows),
        Ok(Response::Error { code, detail }) => anyhow::bail!("{code}: {detail}"),
        Ok(other) => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        Err(error) => {
            eprintln!("sshare: error: {error:#}");
            return Ok(1);
        }
    };
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid()).ok().flatten().map(|u| u.name).unwrap_or_default();
    let rows = select(rows, &args, &me);
    let style = if args.parsable2 {
        Style::Parsable2
    } else if args.parsable {
        Style::Parsable
    } else {
        Style::Table
    };
    print!("{}", render(&rows, fair_tree, args.long, style, !args.noheader));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::scenario::sample_stdout;

    /// The sample cluster: root (user root), teama 60 (root), teamb 40 (nobody, root); no usage.
    fn sample_rows() -> Vec<ShareRow> {
        let tres = "cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0".to_owned();
        let row =
            |account: &str, user: Option<&str>, depth: u32, shares: Option<u32>, norm: f64, fs: Option<f64>| ShareRow {
                account: account.into(),
                user: user.map(str::to_owned),
                depth,
                raw_shares: shares,
                norm_shares: norm.into(),
                raw_usage: 0.0.into(),
                norm_usage: 0.0.into(),
                effective_usage: (if depth == 0 { 1.0 } else { 0.0 }).into(),
                fairshare: fs.map(Into::into),
                level_fs: (depth > 0).then_some(f64::INFINITY.into()),
                tres_run_mins: tres.clone(),
                grp_tres_mins: String::new(),
            };
        vec![
            row("root", None, 0, None, 0.0, None),
            row("root", Some("root"), 1, Some(1), 1.0 / 101.0, Some(1.0)),
            row("teama", None, 1, Some(60), 60.0 / 101.0, None),
            row("teama", Some("root"), 2, Some(1), 1.0, Some(1.0)),
            row("teamb", None, 1, Some(40), 40.0 / 101.0, None),
            row("teamb", Some("nobody"), 2, Some(1), 0.5, Some(1.0)),
            row("teamb", Some("root"), 2, Some(1), 0.5, Some(1.0)),
        ]
    }

    fn args(extra: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("sshare").chain(extra.iter().copied())).unwrap()
    }

    #[test]
    fn matches_the_slurm_samples() {
        let cases: &[(&str, &[&str], bool, Style)] = &[
            ("sshare_default.txt", &[], false, Style::Table),
            ("sshare_all.txt", &["-a"], false, Style::Table),
            ("sshare_all_long.txt", &["-a", "-l"], true, Style::Table),
            ("sshare_parsable.txt", &["-a", "-P"], false, Style::Parsable2),
        ];
        for (sample, extra, long, style) in cases {
            let rows = select(sample_rows(), &args(extra), "root");
            assert_eq!(render(&rows, true, *long, *style, true), sample_stdout(sample), "{sample}");
        }
    }
}
