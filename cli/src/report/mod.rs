//! Usage reports: `drover report gpu|queue|failures|quota` (Drover's own, as text, CSV or JSON)
//! and the `sreport` applet (Slurm's `cluster utilization`, `cluster AccountUtilizationByUser`,
//! `user TopUsage`). Both ask ctld for the window's hourly rollups and per-job usage records
//! ([`Request::QueryUsage`]) and do the sums here.

mod drover;
mod sreport;
pub(crate) mod table;

use crate::query::format::{Tz, parse_time_spec};
use anyhow::{Context, bail};
use drover_shared::proto::client::{Request, Response};
use drover_shared::proto::usage::{UsageQuery, UsageReport};
use std::ffi::OsString;
use table::Output;

const USAGE: &str = "usage: drover report gpu|queue|failures|quota|templates [--start TIME] [--end TIME] [--csv|--json] [--seconds]
  gpu       per account: allocated, active, idle-allocated, borrowed and guaranteed GPU-hours, cost
  queue     queue wait (seconds) percentiles per partition and account
  failures  runs that did not complete, by state and reason
  quota     per account: borrowed GPU-hours, borrowing runs, reclaims
  templates per job template and account: runs, failed runs, GPU-hours (`-` for jobs without one)
--seconds gives gpu's figures in GPU-seconds. The window defaults to the last 7 days; TIME takes sacct's forms (now-7days, 2026-11-01, …).";

fn fetch(start: i64, end: i64, with_jobs: bool) -> anyhow::Result<UsageReport> {
    match crate::client::call(&Request::QueryUsage(UsageQuery { start, end, with_jobs }))? {
        Response::Usage(report) => Ok(*report),
        Response::Error { code, detail } => bail!("{code}: {detail}"),
        other => bail!("unexpected answer from the controller: {other:?}"),
    }
}

/// `drover report …`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args: Vec<String> = args.into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let now = drover_shared::now();
    // The window is [start, end); by default it ends after the current second, so a job that
    // ended this second (a run a moment ago) is in it.
    let (mut kind, mut output, mut start, mut end) = (None, Output::Text, now - 7 * 86_400, now + 1);
    let mut seconds = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut time = |name: &str| -> anyhow::Result<i64> {
            let v = it.next().with_context(|| format!("{name} needs a value"))?;
            parse_time_spec(v, now, Tz::Local).map_err(|_| anyhow::anyhow!("invalid time `{v}`"))
        };
        match arg.as_str() {
            "--csv" => output = Output::Csv,
            "--json" => output = Output::Json,
            "--seconds" => seconds = true,
            "-S" | "--start" => start = time("--start")?,
            "-E" | "--end" => end = time("--end")?,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(0);
            }
            "gpu" | "queue" | "failures" | "quota" | "templates" if kind.is_none() => kind = Some(arg.clone()),
            other => {
                eprintln!("drover report: unexpected argument `{other}`\n{USAGE}");
                return Ok(1);
            }
        }
    }
    let Some(kind) = kind else {
        eprintln!("{USAGE}");
        return Ok(1);
    };
    if end <= start {
        bail!("--end must be after --start");
    }
    let report = fetch(start, end, kind != "gpu")?;
    let table = match kind.as_str() {
        "gpu" => drover::gpu(&report, seconds),
        "queue" => drover::queue(&report),
        "failures" => drover::failures(&report),
        "templates" => drover::templates(&report),
        _ => drover::quota(&report),
    };
    print!("{}", table.render(output));
    Ok(0)
}

/// `sreport …`.
pub(crate) fn sreport(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args: Vec<String> = args.into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let now = drover_shared::now();
    let options = match sreport::parse(&args, now, Tz::Local) {
        Ok(o) => o,
        Err(message) => {
            eprintln!("sreport: error: {message}");
            return Ok(1);
        }
    };
    let report = fetch(options.start, options.end, false)?;
    let proper_name = |login: &str| {
        nix::unistd::User::from_name(login)
            .ok()
            .flatten()
            .map(|u| u.gecos.to_string_lossy().split(',').next().unwrap_or_default().to_owned())
            .unwrap_or_default()
    };
    print!("{}", sreport::render(&options, &report, Tz::Local, &proper_name));
    Ok(0)
}
