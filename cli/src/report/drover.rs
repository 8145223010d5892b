//! `drover report gpu|queue|failures|quota|templates`: per-team GPU-hours (allocated, active, idle,
//! borrowed, guaranteed, cost), queue wait percentiles per partition and team, failed runs by
//! state and reason, quota borrowing and reclaims, and runs and GPU-hours per job template. Each as text, `--csv` or `--json`.

use super::table::Table;
use drover_shared::proto::usage::UsageReport;
use std::collections::{BTreeMap, BTreeSet};

#[allow(clippy::cast_precision_loss)]
fn hours(secs: u64) -> String {
    format!("{:.2}", secs as f64 / 3600.0)
}

/// Price of one GPU-hour of `gpu_type`, from the report's price list.
#[allow(clippy::cast_precision_loss)]
fn price(report: &UsageReport, gpu_type: &str) -> f64 {
    let find =
        |t: &str| report.gpu_hour_price_milli.iter().find(|(name, _)| name == t).map(|(_, p)| *p as f64 / 1000.0);
    find(gpu_type).or_else(|| find("*")).unwrap_or(0.0)
}

/// Per team: allocated, active, idle-allocated, borrowed and guaranteed GPU-hours (GPU-seconds
/// with `seconds`) and their cost.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn gpu(report: &UsageReport, seconds: bool) -> Table {
    let unit = if seconds { "Seconds" } else { "Hours" };
    let names: Vec<String> =
        ["Alloc", "Active", "Idle", "Borrowed", "Guaranteed"].iter().map(|n| format!("{n}GPU{unit}")).collect();
    let mut t = Table::new(&[
        ("Account", false),
        (&names[0], true),
        (&names[1], true),
        (&names[2], true),
        (&names[3], true),
        (&names[4], true),
        ("Cost", true),
    ]);
    let hours = |secs: u64| if seconds { secs.to_string() } else { hours(secs) };
    // account → (alloc, active, borrowed, cost)
    let mut per: BTreeMap<&str, (u64, u64, u64, f64)> = BTreeMap::new();
    for row in &report.hours {
        let e = per.entry(row.account.as_str()).or_default();
        if row.gpu_type.is_empty() {
            e.0 += row.gpu_secs;
            e.1 += row.active_gpu_secs;
            e.2 += row.borrowed_gpu_secs;
        } else {
            e.3 += row.gpu_secs as f64 / 3600.0 * price(report, &row.gpu_type);
        }
    }
    let sampled = report.hours.iter().any(|r| r.active_gpu_secs > 0);
    let mut total = (0, 0, 0, 0.0);
    let push = |t: &mut Table, name: &str, (alloc, active, borrowed, cost): (u64, u64, u64, f64)| {
        let (active, idle) =
            if sampled { (hours(active), hours(alloc.saturating_sub(active))) } else { ("-".into(), "-".into()) };
        t.rows.push(vec![
            name.to_owned(),
            hours(alloc),
            active,
            idle,
            hours(borrowed),
            hours(alloc - borrowed),
            format!("{cost:.2}"),
        ]);
    };
    for (account, v) in &per {
        total = (total.0 + v.0, total.1 + v.1, total.2 + v.2, total.3 + v.3);
        push(&mut t, account, *v);
    }
    if per.len() > 1 {
        push(&mut t, "TOTAL", total);
    }
    t
}

/// The `p`-th percentile (nearest rank) of sorted `values`.
pub(crate) fn percentile(sorted: &[i64], p: u32) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (u64::from(p) * sorted.len() as u64).div_ceil(100).max(1);
    sorted[usize::try_from(rank - 1).unwrap_or(0).min(sorted.len() - 1)]
}

/// Queue wait (start − eligible) per partition and team: jobs, p50, p90, p99, max.
pub(crate) fn queue(report: &UsageReport) -> Table {
    let mut t = Table::new(&[
        ("Partition", false),
        ("Account", false),
        ("Jobs", true),
        ("WaitP50", true),
        ("WaitP90", true),
        ("WaitP99", true),
        ("WaitMax", true),
    ]);
    let mut waits: BTreeMap<(&str, &str), Vec<i64>> = BTreeMap::new();
    for job in report.jobs.iter().filter(|j| j.start_time >= report.start && j.start_time < report.end) {
        waits
            .entry((job.partition.as_str(), job.account.as_str()))
            .or_default()
            .push((job.start_time - job.eligible_time).max(0));
    }
    for ((partition, account), mut w) in waits {
        w.sort_unstable();
        let max = w.last().copied().unwrap_or(0);
        t.rows.push(vec![
            partition.to_owned(),
            account.to_owned(),
            w.len().to_string(),
            percentile(&w, 50).to_string(),
            percentile(&w, 90).to_string(),
            percentile(&w, 99).to_string(),
            max.to_string(),
        ]);
    }
    t
}

/// Runs that did not complete, by state and reason, with the teams they belong to.
pub(crate) fn failures(report: &UsageReport) -> Table {
    let mut t =
        Table::new(&[("State", false), ("Reason", false), ("Jobs", true), ("GPUHours", true), ("Accounts", false)]);
    let mut per: BTreeMap<(&str, &str), (u64, u64, BTreeSet<&str>)> = BTreeMap::new();
    for job in
        report.jobs.iter().filter(|j| j.state != "COMPLETED" && j.end_time >= report.start && j.end_time < report.end)
    {
        let e = per.entry((job.state.as_str(), job.reason.as_str())).or_default();
        e.0 += 1;
        e.1 += u64::try_from(job.end_time - job.start_time).unwrap_or(0) * u64::from(job.gpus);
        e.2.insert(job.account.as_str());
    }
    for ((state, reason), (n, gpu_secs, accounts)) in per {
        t.rows.push(vec![
            state.to_owned(),
            reason.to_owned(),
            n.to_string(),
            hours(gpu_secs),
            accounts.into_iter().collect::<Vec<_>>().join(","),
        ]);
    }
    t
}

/// Per job template and account: runs ended in the window, failed ones (any end but
/// `COMPLETED`) and GPU-hours; `-` stands for jobs submitted without a template.
pub(crate) fn templates(report: &UsageReport) -> Table {
    let mut t = Table::new(&[
        ("Template", false),
        ("Account", false),
        ("Runs", true),
        ("NotCompleted", true),
        ("GPUHours", true),
    ]);
    let mut per: BTreeMap<(&str, &str), (u64, u64, u64)> = BTreeMap::new();
    for job in report.jobs.iter().filter(|j| j.end_time >= report.start && j.end_time < report.end) {
        let template = if job.template.is_empty() { "-" } else { job.template.as_str() };
        let e = per.entry((template, job.account.as_str())).or_default();
        e.0 += 1;
        e.1 += u64::from(job.state != "COMPLETED");
        e.2 += u64::try_from(job.end_time - job.start_time).unwrap_or(0) * u64::from(job.gpus);
    }
    for ((template, account), (runs, failed, gpu_secs)) in per {
        t.rows.push(vec![
            template.to_owned(),
            account.to_owned(),
            runs.to_string(),
            failed.to_string(),
            hours(gpu_secs),
        ]);
    }
    t
}

/// Per team: borrowed GPU-hours, runs that borrowed, and runs reclaimed by preemption.
pub(crate) fn quota(report: &UsageReport) -> Table {
    let mut t =
        Table::new(&[("Account", false), ("BorrowedGPUHours", true), ("BorrowingRuns", true), ("Reclaimed", true)]);
    let mut per: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for row in report.hours.iter().filter(|r| r.gpu_type.is_empty()) {
        per.entry(row.account.as_str()).or_default().0 += row.borrowed_gpu_secs;
    }
    for job in report.jobs.iter().filter(|j| j.borrowed) {
        per.entry(job.account.as_str()).or_default().1 += 1;
    }
    let account_of: BTreeMap<u32, &str> = report.jobs.iter().map(|j| (j.job_id, j.account.as_str())).collect();
    for (_, job_id, _) in &report.reclaims {
        let account = job_id.and_then(|id| account_of.get(&id).copied()).unwrap_or("(unknown)");
        per.entry(account).or_default().2 += 1;
    }
    for (account, (secs, runs, reclaimed)) in per {
        t.rows.push(vec![account.to_owned(), hours(secs), runs.to_string(), reclaimed.to_string()]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::table::Output;
    use drover_shared::proto::usage::{HourRow, JobUsage};

    fn sample() -> UsageReport {
        let row = |account: &str, gpu_type: &str, gpu_secs, borrowed| HourRow {
            account: account.into(),
            gpu_type: gpu_type.into(),
            gpu_secs,
            borrowed_gpu_secs: borrowed,
            ..HourRow::default()
        };
        let job = |job_id, account: &str, eligible, start, end, state: &str, borrowed| JobUsage {
            job_id,
            account: account.into(),
            partition: "main".into(),
            eligible_time: eligible,
            start_time: start,
            end_time: end,
            state: state.into(),
            reason: if state == "FAILED" { "NonZeroExitCode".into() } else { "None".into() },
            gpus: 2,
            borrowed,
            ..JobUsage::default()
        };
        UsageReport {
            start: 0,
            end: 100_000,
            hours: vec![
                row("nlp", "", 3600, 3600),
                row("nlp", "h100", 3600, 3600),
                row("vision", "", 9000, 0),
                row("vision", "h100", 7200, 0),
                row("vision", "t4", 1800, 0),
            ],
            jobs: vec![
                job(1, "vision", 0, 10, 3610, "COMPLETED", false),
                job(2, "vision", 0, 30, 930, "FAILED", false),
                job(3, "nlp", 100, 100, 1900, "PREEMPTED", true),
            ],
            gpu_hour_price_milli: vec![("h100".into(), 4000), ("*".into(), 500)],
            reclaims: vec![(1000, Some(3), "reclaimed for job 4 (cancel, grace 2s)".into())],
            ..UsageReport::default()
        }
    }

    #[test]
    fn gpu_hours_and_cost_per_team() {
        // vision: 2.5 GPU-h, 2 h of H100 at 4 + 0.5 h of T4 at 0.5 = 8.25; nlp: 1 h H100 borrowed = 4.
        assert!(gpu(&sample(), true).render(Output::Csv).starts_with("Account,AllocGPUSeconds,ActiveGPUSeconds,IdleGPUSeconds,BorrowedGPUSeconds,GuaranteedGPUSeconds,Cost\nnlp,3600,-,-,3600,0,4.00\n"));
        let text = gpu(&sample(), false).render(Output::Text);
        assert_eq!(
            text,
            "Account  AllocGPUHours  ActiveGPUHours  IdleGPUHours  BorrowedGPUHours  GuaranteedGPUHours   Cost
-------  -------------  --------------  ------------  ----------------  ------------------  -----
nlp               1.00               -             -              1.00                0.00   4.00
vision            2.50               -             -              0.00                2.50   8.25
TOTAL             3.50               -             -              1.00                2.50  12.25
"
        );
    }

    #[test]
    fn queue_failures_and_quota() {
        let r = sample();
        assert_eq!(
            queue(&r).render(Output::Csv),
            "Partition,Account,Jobs,WaitP50,WaitP90,WaitP99,WaitMax\nmain,nlp,1,0,0,0,0\nmain,vision,2,10,30,30,30\n"
        );
        assert_eq!(
            failures(&r).render(Output::Csv),
            "State,Reason,Jobs,GPUHours,Accounts\nFAILED,NonZeroExitCode,1,0.50,vision\nPREEMPTED,None,1,1.00,nlp\n"
        );
        assert_eq!(
            quota(&r).render(Output::Csv),
            "Account,BorrowedGPUHours,BorrowingRuns,Reclaimed\nnlp,1.00,1,1\nvision,0.00,0,0\n"
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!((percentile(&v, 50), percentile(&v, 90), percentile(&v, 99)), (50, 90, 99));
        assert_eq!(percentile(&[7], 99), 7);
    }
}
