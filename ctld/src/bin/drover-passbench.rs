//! drover-passbench: times the real scheduling pass over a made-up cluster (see
//! `drover_ctld::passbench`): a pass that fills an empty cluster, one more that settles it (the
//! tallies take the fill's starts), the first pass after PENDING jobs arrive at once, passes
//! over the full cluster with them queued, and a pass after some running jobs end.
//!
//!   drover-passbench NODES PENDING [PASSES] [quotas] [dependent=N]
//!
//! With `quotas` each of the eight teams has a guaranteed quota (with burst and, for half of
//! them, lending limits) in the pool. With `dependent=N`, N more jobs wait on a running job
//! (`--dependency=afterok:<it>`), and each measured pass is preceded by the dependency refresh,
//! as in ctld.

#![forbid(unsafe_code)]

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| -> anyhow::Result<usize> {
        args.get(i)
            .map_or(Ok(default), |v| v.parse().with_context(|| format!("argument {}: {v:?} is not a count", i + 1)))
    };
    let (nodes, pending, passes) = (arg(0, 10_000)?, arg(1, 100_000)?, arg(2, 3)?);
    let (mut quotas, mut dependent) = (false, 0usize);
    for (i, arg) in args.iter().enumerate().skip(3) {
        match arg.split_once('=') {
            None if arg == "quotas" => quotas = true,
            None if arg.is_empty() => {}
            Some(("dependent", n)) => {
                dependent = n.parse().with_context(|| format!("argument {}: {n:?} is not a count", i + 1))?;
            }
            _ => anyhow::bail!("argument {}: {arg:?} is neither \"quotas\" nor \"dependent=N\"", i + 1),
        }
    }
    println!("quotas: {}", if quotas { "eight teams" } else { "none" });
    let mut bench = drover_ctld::passbench::Bench::new(nodes, quotas);
    // About enough jobs to fill every GPU (the mix averages 3.7 GPUs per job).
    bench.submit(nodes * 8 * 10 / 37);
    let fill = bench.pass();
    println!(
        "fill pass: nodes={nodes} started={} pending={} total_s={:.3} backfill_s={:.3}",
        fill.started, fill.pending, fill.total_s, fill.backfill_s
    );
    // The fill's starts are tallied (what runs, quota use) at the next pass; taken here, so that
    // the pass after the pending jobs arrive is theirs alone, as in ctld, where the queue builds
    // over many passes after the cluster filled.
    let settle = bench.pass();
    println!("settle pass: started={} total_s={:.3}", settle.started, settle.total_s);
    if dependent > 0 {
        let target = bench.submit_dependent(dependent).map_err(anyhow::Error::msg)?;
        println!("dependent: jobs={dependent} waiting on running job {target} (afterok)");
    }
    let before = drover_ctld::passbench::rss_kib();
    bench.submit(pending);
    let after = drover_ctld::passbench::rss_kib();
    let queued = bench.pass();
    #[allow(clippy::cast_precision_loss)]
    let per_job = (after.saturating_sub(before)) as f64 * 1024.0 / pending.max(1) as f64;
    println!(
        "memory: pending_jobs={pending} rss_delta_kib={} bytes_per_pending_job={per_job:.0}",
        after.saturating_sub(before)
    );
    println!(
        "full pass: pending={} started={} total_s={:.3} backfill_s={:.3}",
        queued.pending, queued.started, queued.total_s, queued.backfill_s
    );
    for i in 0..passes {
        let r = bench.pass();
        println!(
            "full pass {i}: pending={} started={} total_s={:.3} backfill_s={:.3} reservations={} carried={}",
            r.pending, r.started, r.total_s, r.backfill_s, r.reservations, r.carried
        );
    }
    bench.end_some(nodes / 10);
    let r = bench.pass();
    println!(
        "pass after {} jobs ended: pending={} started={} total_s={:.3} backfill_s={:.3} reservations={} carried={}",
        nodes / 10,
        r.pending,
        r.started,
        r.total_s,
        r.backfill_s,
        r.reservations,
        r.carried
    );
    Ok(())
}
