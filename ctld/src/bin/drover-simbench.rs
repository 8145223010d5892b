//! drover-simbench: times `drover simulate` over a synthetic accounting database (see
//! `drover_ctld::simbench`): writes DB if it does not exist yet, then replays its week under
//! the cluster's config and a candidate, and prints the time and the figures.
//!
//!   [RESOLUTION=S] drover-simbench DB [NODES] [JOBS] [DAYS]
//!
//! With `CONFIGS=DIR` it writes the database if needed and the cluster's config and the
//! candidate (`DIR/cluster.toml`, `DIR/candidate.toml`) instead of replaying, for a real ctld
//! to serve (`bench/simulate_load.sh`).

#![forbid(unsafe_code)]

use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let db = PathBuf::from(args.first().context("usage: drover-simbench DB [NODES] [JOBS] [DAYS]")?);
    let arg = |i: usize, default: usize| -> anyhow::Result<usize> {
        args.get(i)
            .map_or(Ok(default), |v| v.parse().with_context(|| format!("argument {}: {v:?} is not a count", i + 1)))
    };
    let (nodes, jobs, days) = (arg(1, 1000)?, arg(2, 100_000)?, arg(3, 7)?);
    let days = i64::try_from(days)?;
    if !db.exists() {
        let began = Instant::now();
        drover_ctld::simbench::generate(&db, nodes, jobs, days)?;
        println!("generated {jobs} jobs over {days} days in {:.1} s", began.elapsed().as_secs_f64());
    }
    if let Some(dir) = std::env::var_os("CONFIGS").filter(|d| !d.is_empty()).map(PathBuf::from) {
        for (name, candidate) in [("cluster.toml", false), ("candidate.toml", true)] {
            let path = dir.join(name);
            std::fs::write(&path, drover_ctld::simbench::config_text(nodes, candidate))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(());
    }
    let began = Instant::now();
    let resolution = std::env::var("RESOLUTION")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.parse::<i64>())
        .transpose()
        .context("RESOLUTION")?;
    let report = drover_ctld::simbench::replay(&db, nodes, days, u32::try_from(jobs.max(1))?, resolution)?;
    let wall = began.elapsed().as_secs_f64();
    println!(
        "simulate: nodes={nodes} jobs={} days={days} resolution_s={} wall_s={wall:.1} (both runs, database read \
         included) passes_current={} passes_candidate={}",
        report.jobs, report.resolution_s, report.current.passes, report.candidate.passes
    );
    println!(
        "utilization current={:.1}% candidate={:.1}%",
        report.current.gpu_utilization * 100.0,
        report.candidate.gpu_utilization * 100.0
    );
    for (cur, cand) in report.current.teams.iter().zip(&report.candidate.teams) {
        println!(
            "{:8} wait p50 {:>6}s -> {:>6}s  p95 {:>6}s -> {:>6}s  GPU-h {:>9.0} -> {:>9.0}  preempted {} -> {}",
            cur.account,
            cur.wait_p50_s,
            cand.wait_p50_s,
            cur.wait_p95_s,
            cand.wait_p95_s,
            cur.gpu_hours,
            cand.gpu_hours,
            cur.preemptions,
            cand.preemptions
        );
    }
    Ok(())
}
