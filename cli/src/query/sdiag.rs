//! `sdiag`: ctld's statistics in Slurm's layout (the header with the times, the job counters,
//! the main scheduling and backfill statistics in microseconds, and the requests answered by
//! kind), which monitoring exporters parse line by line. Drover has no agent queue, no
//! accounting daemon link and no per-user request counts: those lines read 0 or are left out
//! (docs/compat.md).

use super::common;
use super::format::{self, Tz};
use clap::{ArgAction, Parser};
use drover_shared::proto::client::{Request, Response};
use drover_shared::proto::diag::{CycleStats, DiagReport};
use std::ffi::OsString;
use std::fmt::Write;

#[derive(Debug, Parser)]
#[command(name = "sdiag", about = "Show the controller's scheduling statistics", disable_help_flag = true)]
struct Args {
    /// Print all statistics (the default).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Reset the statistics (not supported: Drover's counters run from ctld's start).
    #[arg(short = 'r', long = "reset")]
    reset: bool,
    /// Sort the requests by kind (the default).
    #[arg(short = 'i', long = "sort-by-id")]
    by_id: bool,
    /// Sort the requests by total time.
    #[arg(short = 't', long = "sort-by-time")]
    by_time: bool,
    /// Sort the requests by average time.
    #[arg(short = 'T', long = "sort-by-time2")]
    by_average: bool,
    /// Cluster (accepted; Drover serves one cluster).
    #[arg(short = 'M', long = "cluster")]
    cluster: Option<String>,
    /// Print this help.
    #[arg(long = "help", action = ArgAction::Help)]
    help: Option<bool>,
}

/// How the request lines are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Kind,
    Total,
    Average,
}

/// Renders `report` as Slurm 22.05's `sdiag` prints it.
fn render(report: &DiagReport, tz: Tz, order: Order) -> String {
    let when = |t: i64| format!("{} ({t})", format::date_line(t, tz));
    let mut out = String::new();
    let stars = "*******************************************************";
    let _ =
        writeln!(out, "{stars}\nsdiag output at {}\nData since      {}\n{stars}", when(report.now), when(report.since));
    // One task serves every change; reads are answered beside it. No agents, no DBD link.
    let _ = writeln!(out, "Server thread count:  1\nAgent queue size:     0\nAgent count:          0");
    let _ = writeln!(out, "Agent thread count:   0\nDBD Agent queue size: 0\n");
    let _ = writeln!(out, "Jobs submitted: {}", report.jobs_submitted);
    let _ = writeln!(out, "Jobs started:   {}", report.jobs_started);
    let _ = writeln!(out, "Jobs completed: {}", report.jobs_completed);
    let _ = writeln!(out, "Jobs canceled:  {}", report.jobs_canceled);
    let _ = writeln!(out, "Jobs failed:    {}\n", report.jobs_failed);
    let _ = writeln!(out, "Job states ts:  {}", when(report.now));
    let _ = writeln!(out, "Jobs pending:   {}", report.jobs_pending);
    let _ = writeln!(out, "Jobs running:   {}\n", report.jobs_running);
    let main = &report.main;
    let mean = |c: &CycleStats| c.total_us.checked_div(c.cycles).unwrap_or(0);
    let mean_depth = |c: &CycleStats| c.total_depth.checked_div(c.cycles).unwrap_or(0);
    let minutes = u64::try_from((report.now - report.since).max(60) / 60).unwrap_or(1);
    let _ = writeln!(out, "Main schedule statistics (microseconds):");
    let _ = writeln!(out, "\tLast cycle:   {}", main.last_us);
    let _ = writeln!(out, "\tMax cycle:    {}", main.max_us);
    let _ = writeln!(out, "\tTotal cycles: {}", main.cycles);
    if main.cycles > 0 {
        let _ = writeln!(out, "\tMean cycle:   {}", mean(main));
        let _ = writeln!(out, "\tMean depth cycle:  {}", mean_depth(main));
        let _ = writeln!(out, "\tCycles per minute: {}", main.cycles / minutes);
    }
    let _ = writeln!(out, "\tLast queue length: {}\n", main.last_depth);
    let bf = &report.backfill;
    let _ = writeln!(out, "Backfilling stats");
    let _ = writeln!(out, "\tTotal backfilled jobs (since last slurm start): {}", report.backfilled_jobs);
    let _ = writeln!(out, "\tTotal backfilled jobs (since last stats cycle start): {}", report.backfilled_jobs);
    let _ = writeln!(out, "\tTotal backfilled heterogeneous job components: 0");
    let _ = writeln!(out, "\tTotal cycles: {}", bf.cycles);
    let _ = writeln!(out, "\tLast cycle when: {}", bf.last_when.map_or_else(|| "N/A".to_owned(), when));
    let _ = writeln!(out, "\tLast cycle: {}", bf.last_us);
    let _ = writeln!(out, "\tMax cycle:  {}", bf.max_us);
    if bf.cycles > 0 {
        let _ = writeln!(out, "\tMean cycle: {}", mean(bf));
    }
    let _ = writeln!(out, "\tLast depth cycle: {}", bf.last_depth);
    let _ = writeln!(out, "\tLast depth cycle (try sched): {}", bf.last_depth);
    if bf.cycles > 0 {
        let _ = writeln!(out, "\tDepth Mean: {}", mean_depth(bf));
        let _ = writeln!(out, "\tDepth Mean (try depth): {}", mean_depth(bf));
    }
    let _ = writeln!(out, "\tLast queue length: {}", bf.last_depth);
    if bf.cycles > 0 {
        let _ = writeln!(out, "\tQueue length mean: {}", mean_depth(bf));
    }
    let _ = writeln!(out, "\nRemote Procedure Call statistics by message type");
    let mut requests = report.requests.clone();
    let average = |(_, count, total): &(String, u64, u64)| total.checked_div(*count).unwrap_or(0);
    match order {
        Order::Kind => requests.sort_by(|a, b| a.0.cmp(&b.0)),
        Order::Total => requests.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0))),
        Order::Average => requests.sort_by(|a, b| average(b).cmp(&average(a)).then(a.0.cmp(&b.0))),
    }
    for request in &requests {
        let (kind, count, total) = request;
        let _ = writeln!(out, "\t{kind:<40} count:{count:<6} ave_time:{:<6} total_time:{total}", average(request));
    }
    out
}

/// Runs `sdiag`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("sdiag", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    common::cluster_line(args.cluster.as_deref())?;
    if args.reset {
        eprintln!("sdiag: error: resetting the statistics is not supported: Drover's counters run from ctld's start");
        return Ok(1);
    }
    let _ = (args.all, args.by_id);
    let order = if args.by_time {
        Order::Total
    } else if args.by_average {
        Order::Average
    } else {
        Order::Kind
    };
    let report = match crate::client::call(&Request::Diag) {
        Ok(Response::Diag(report)) => report,
        Ok(Response::Error { code, detail }) => {
            eprintln!("slurm_get_statistics: {}: {detail}", code.message());
            return Ok(1);
        }
        Ok(other) => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        Err(error) => {
            eprintln!("slurm_get_statistics: {}", crate::user_message(&error));
            return Ok(1);
        }
    };
    print!("{}", render(&report, Tz::Local, order));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines prometheus-slurm-exporter reads (`Server thread count`, `Agent queue size`,
    /// `DBD Agent queue size`, the main and backfill `Last cycle`/`Mean cycle`, `Cycles per
    /// minute`, `Depth Mean`, the backfilled job totals) are there, as `key: value`.
    #[test]
    fn the_layout_exporters_parse() {
        let report = DiagReport {
            since: 0,
            now: 600,
            jobs_submitted: 12,
            jobs_started: 10,
            jobs_completed: 7,
            jobs_canceled: 2,
            jobs_failed: 1,
            jobs_pending: 2,
            jobs_running: 1,
            main: CycleStats {
                cycles: 20,
                last_when: Some(590),
                last_us: 150,
                max_us: 900,
                total_us: 4000,
                last_depth: 3,
                total_depth: 40,
            },
            backfill: CycleStats {
                cycles: 4,
                last_when: Some(580),
                last_us: 80,
                max_us: 120,
                total_us: 400,
                last_depth: 2,
                total_depth: 8,
            },
            backfilled_jobs: 3,
            requests: vec![("submit".into(), 12, 2400), ("query_jobs".into(), 30, 900)],
        };
        let out = render(&report, Tz::Fixed(0), Order::Kind);
        expect_test::expect![[r#"
            *******************************************************
            sdiag output at Thu Jan 01 00:10:00 1970 (600)
            Data since      Thu Jan 01 00:00:00 1970 (0)
            *******************************************************
            Server thread count:  1
            Agent queue size:     0
            Agent count:          0
            Agent thread count:   0
            DBD Agent queue size: 0

            Jobs submitted: 12
            Jobs started:   10
            Jobs completed: 7
            Jobs canceled:  2
            Jobs failed:    1

            Job states ts:  Thu Jan 01 00:10:00 1970 (600)
            Jobs pending:   2
            Jobs running:   1

            Main schedule statistics (microseconds):
            	Last cycle:   150
            	Max cycle:    900
            	Total cycles: 20
            	Mean cycle:   200
            	Mean depth cycle:  2
            	Cycles per minute: 2
            	Last queue length: 3

            Backfilling stats
            	Total backfilled jobs (since last slurm start): 3
            	Total backfilled jobs (since last stats cycle start): 3
            	Total backfilled heterogeneous job components: 0
            	Total cycles: 4
            	Last cycle when: Thu Jan 01 00:09:40 1970 (580)
            	Last cycle: 80
            	Max cycle:  120
            	Mean cycle: 100
            	Last depth cycle: 2
            	Last depth cycle (try sched): 2
            	Depth Mean: 2
            	Depth Mean (try depth): 2
            	Last queue length: 2
            	Queue length mean: 2

            Remote Procedure Call statistics by message type
            	query_jobs                               count:30     ave_time:30     total_time:900
            	submit                                   count:12     ave_time:200    total_time:2400
        "#]]
        .assert_eq(&out);
        // What the exporter's parser keys on: `key: value` with the key's own spacing.
        for key in ["Server thread count", "Agent queue size", "DBD Agent queue size", "\tCycles per minute"] {
            assert!(out.lines().any(|l| l.split(':').next() == Some(key)), "{key}");
        }
        assert_eq!(out.lines().filter(|l| l.split(':').next() == Some("\tLast cycle")).count(), 2);
        let by_time = render(&report, Tz::Fixed(0), Order::Total);
        assert!(by_time.find("\tsubmit").unwrap() < by_time.find("\tquery_jobs").unwrap());
    }
}
