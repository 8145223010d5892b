//! `drover simulate --config FILE [--from T] [--to T] [--max-jobs N] [--json]`: what a config
//! change would have done to the jobs recorded in accounting. The candidate is read and checked
//! here (a bad file is reported with its `file:line:column` before anything is sent); ctld
//! replays the window's jobs under its running config and under the candidate and answers with
//! both runs' figures per team, printed side by side (`current -> candidate`), or as JSON.

use super::common;
use super::format::{Tz, hms, parse_time_spec, timestamp};
use crate::report::table::json_string;
use anyhow::Context;
use clap::{ArgAction, Parser};
use drover_shared::proto::client::{Request, Response};
use drover_shared::proto::simulate::{DEFAULT_MAX_JOBS, SimRun, SimulateReport, SimulateRequest, TeamFigures};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "drover simulate",
    about = "Replay the recorded jobs under a candidate config and compare it with the running one",
    disable_help_flag = true
)]
struct Args {
    /// The candidate config (TOML, as `drover up --config` takes it).
    #[arg(long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Replay jobs submitted from this time (default: 7 days before --to).
    #[arg(long = "from", value_name = "TIME")]
    from: Option<String>,
    /// Replay jobs submitted before this time (default: now).
    #[arg(long = "to", value_name = "TIME")]
    to: Option<String>,
    /// Refuse windows with more recorded jobs than this.
    #[arg(long = "max-jobs", value_name = "N", default_value_t = DEFAULT_MAX_JOBS)]
    max_jobs: u32,
    /// Seconds of simulated time one scheduling pass stands for (1-600; default: 1 up to
    /// 5,000 jobs, then 1 per 1,000 jobs, at most 120). Smaller is closer to ctld, larger is
    /// faster.
    #[arg(long = "resolution", value_name = "SECONDS")]
    resolution: Option<i64>,
    /// One JSON object instead of the table.
    #[arg(long = "json")]
    json: bool,
    /// Print this help.
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
}

/// Runs `drover simulate`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("drover simulate", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    let path = args.config.context("--config FILE is required: the candidate config to compare")?;
    let now = drover_shared::now();
    let tz = Tz::Local;
    let time = |what: &str, text: &Option<String>| -> anyhow::Result<Option<i64>> {
        text.as_deref()
            .map(|t| parse_time_spec(t, now, tz).map_err(|_| anyhow::anyhow!("{what}: invalid time `{t}`")))
            .transpose()
    };
    let (from, to) = (time("--from", &args.from)?, time("--to", &args.to)?);
    if let (Some(from), Some(to)) = (from, to)
        && from >= to
    {
        anyhow::bail!("--from must be before --to");
    }
    // Checked here, so a bad file is reported before anything is sent; a cluster home's file
    // is replaced by the admin's file it includes (what the scheduler reads).
    let config = drover_shared::config::Config::load(&path).map_err(|e| anyhow::anyhow!("candidate config: {e}"))?;
    let text =
        std::fs::read_to_string(&config.source).with_context(|| format!("reading {}", config.source.display()))?;
    let request = SimulateRequest {
        config_path: config.source.display().to_string(),
        config_text: text,
        from,
        to,
        max_jobs: args.max_jobs,
        resolution_s: args.resolution,
    };
    match crate::client::call(&Request::Simulate(Box::new(request)))? {
        Response::Simulated(report) => {
            print!("{}", if args.json { json(&report) } else { render(&report, tz) });
            Ok(0)
        }
        Response::Error { code, detail } => {
            eprintln!("drover simulate: error: {}: {detail}", code.message());
            Ok(1)
        }
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    }
}

/// One cell: `current -> candidate`, or the value once when both are the same.
fn pair(current: &str, candidate: &str) -> String {
    if current == candidate { current.to_owned() } else { format!("{current} -> {candidate}") }
}

fn render(report: &SimulateReport, tz: Tz) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Replayed {} jobs submitted {} to {} ({} not replayed: never ran or not ended); one pass per {} s of \
         simulated time; {:.1} s.",
        report.jobs,
        timestamp(report.from, tz),
        timestamp(report.to, tz),
        report.skipped,
        report.resolution_s,
        report.elapsed_ms as f64 / 1000.0
    );
    let (cur, cand) = (&report.current, &report.candidate);
    let _ = writeln!(
        out,
        "GPU utilization: {} of {} GPUs.",
        pair(&format!("{:.1}%", cur.gpu_utilization * 100.0), &format!("{:.1}%", cand.gpu_utilization * 100.0)),
        cur.total_gpus.max(cand.total_gpus)
    );
    let f = &report.fidelity;
    let _ = writeln!(
        out,
        "The current config reproduces the recorded waits of {} jobs with a median error of {} s (p95 {} s).\n",
        f.jobs, f.median_abs_error_s, f.p95_abs_error_s
    );
    let headers = [
        "TEAM",
        "JOBS",
        "WAIT P50",
        "WAIT P95",
        "GPU-HOURS",
        "DELIVERED",
        "SHARE",
        "GUARANTEE",
        "PREEMPTED",
        "LOST GPU-H",
        "LIMIT HITS",
        "QUOTA HITS",
        "REFUSED",
        "NEVER RAN",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let empty = TeamFigures::default();
    for account in accounts(cur, cand) {
        let a = cur.teams.iter().find(|t| t.account == account).unwrap_or(&empty);
        let b = cand.teams.iter().find(|t| t.account == account).unwrap_or(&empty);
        let pct = |v: f64| format!("{:.1}%", v * 100.0);
        let n = |v: u32| v.to_string();
        rows.push(vec![
            drover_shared::text::printable(&account).into_owned(),
            n(a.jobs.max(b.jobs)),
            pair(&hms(a.wait_p50_s), &hms(b.wait_p50_s)),
            pair(&hms(a.wait_p95_s), &hms(b.wait_p95_s)),
            pair(&format!("{:.1}", a.gpu_hours), &format!("{:.1}", b.gpu_hours)),
            pair(&pct(a.delivered_fraction), &pct(b.delivered_fraction)),
            pair(&pct(a.share_fraction), &pct(b.share_fraction)),
            pair(&a.guaranteed_gpus.to_string(), &b.guaranteed_gpus.to_string()),
            pair(&n(a.preemptions), &n(b.preemptions)),
            pair(&format!("{:.1}", a.lost_gpu_hours), &format!("{:.1}", b.lost_gpu_hours)),
            pair(&n(a.limit_hits), &n(b.limit_hits)),
            pair(&n(a.quota_hits), &n(b.quota_hits)),
            pair(&n(a.refused), &n(b.refused)),
            pair(&n(a.never_started), &n(b.never_started)),
        ]);
    }
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).chain([headers[i].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    out.push_str(&line(&headers.map(str::to_owned)));
    for row in &rows {
        out.push_str(&line(row));
    }
    out.push_str("Cells read `current -> candidate`; one value where both agree.\n");
    out
}

/// Every team of either run: the current run's order, then the candidate's others.
fn accounts(current: &SimRun, candidate: &SimRun) -> Vec<String> {
    let mut names: Vec<String> = current.teams.iter().map(|t| t.account.clone()).collect();
    for team in &candidate.teams {
        if !names.contains(&team.account) {
            names.push(team.account.clone());
        }
    }
    names
}

fn json_run(run: &SimRun) -> String {
    let mut out = format!(
        "{{\"gpu_utilization\": {:.6}, \"total_gpus\": {}, \"passes\": {}, \"end\": {}, \"teams\": [",
        run.gpu_utilization, run.total_gpus, run.passes, run.end
    );
    for (i, t) in run.teams.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"account\": {}, \"jobs\": {}, \"never_started\": {}, \"refused\": {}, \"wait_p50_s\": {}, \
             \"wait_p95_s\": {}, \"gpu_hours\": {:.3}, \"delivered_fraction\": {:.6}, \"share_fraction\": {:.6}, \
             \"guaranteed_gpus\": {}, \"preemptions\": {}, \"lost_gpu_hours\": {:.3}, \"limit_hits\": {}, \
             \"quota_hits\": {}}}",
            if i == 0 { "" } else { ", " },
            json_string(&t.account),
            t.jobs,
            t.never_started,
            t.refused,
            t.wait_p50_s,
            t.wait_p95_s,
            t.gpu_hours,
            t.delivered_fraction,
            t.share_fraction,
            t.guaranteed_gpus,
            t.preemptions,
            t.lost_gpu_hours,
            t.limit_hits,
            t.quota_hits
        );
    }
    out.push_str("]}");
    out
}

fn json(report: &SimulateReport) -> String {
    let f = &report.fidelity;
    let teams: Vec<String> = f
        .teams
        .iter()
        .map(|(account, recorded, simulated, error)| {
            format!(
                "{{\"account\": {}, \"recorded_wait_p50_s\": {recorded}, \"simulated_wait_p50_s\": {simulated}, \
                 \"median_abs_error_s\": {error}}}",
                json_string(account)
            )
        })
        .collect();
    format!(
        "{{\"from\": {}, \"to\": {}, \"jobs\": {}, \"skipped\": {}, \"resolution_s\": {}, \"elapsed_ms\": {},\n \
         \"fidelity\": {{\"jobs\": {}, \"median_abs_error_s\": {}, \"p95_abs_error_s\": {}, \"teams\": [{}]}},\n \
         \"current\": {},\n \"candidate\": {}}}\n",
        report.from,
        report.to,
        report.jobs,
        report.skipped,
        report.resolution_s,
        report.elapsed_ms,
        f.jobs,
        f.median_abs_error_s,
        f.p95_abs_error_s,
        teams.join(", "),
        json_run(&report.current),
        json_run(&report.candidate)
    )
}
