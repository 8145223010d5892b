//! Prometheus/OpenMetrics text for ctld's `/metrics`: a [`Registry`] of counters and histograms
//! fed by the client socket (RPC counts and latencies) and the core (scheduler passes), and a
//! [`Snapshot`] of the cluster the core takes on request (jobs, pending reasons, per-account GPUs,
//! nodes). Names follow Prometheus' rules: `drover_` prefix, base units (`_seconds`), `_total` on
//! counters; the list is in `docs/admin/metrics.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Histogram bucket bounds in seconds (shared by RPC and scheduler timings).
const BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// A cumulative histogram of durations.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Histogram {
    /// Observations at or below each bound of [`BUCKETS`].
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    pub(crate) fn observe(&mut self, d: Duration) {
        let secs = d.as_secs_f64();
        for (bound, count) in BUCKETS.iter().zip(self.counts.iter_mut()) {
            if secs <= *bound {
                *count += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in BUCKETS.iter().zip(self.counts.iter()) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", self.count);
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Request kind → latency histogram (its count is the request count).
    rpc: BTreeMap<&'static str, Histogram>,
    scheduler_pass: Histogram,
    scheduler_backfill: Histogram,
    http_requests: BTreeMap<(&'static str, u16), u64>,
}

/// Counters shared by the client socket, the core and the HTTP server. Shared (`Arc`, one std
/// mutex) because every client connection task records its own request's latency as it answers,
/// off the core; the lock is held only to add a sample or to render the text.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    inner: Mutex<Inner>,
}

impl Registry {
    /// One client request of kind `request` answered in `took`.
    pub(crate) fn rpc(&self, request: &'static str, took: Duration) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.rpc.entry(request).or_default().observe(took);
        }
    }

    /// One scheduling pass (all its array rounds and preemption decisions).
    pub(crate) fn scheduler_pass(&self, took: Duration) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.scheduler_pass.observe(took);
        }
    }

    /// The backfill part (reservation planning) of one scheduling pass.
    pub(crate) fn scheduler_backfill(&self, took: Duration) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.scheduler_backfill.observe(took);
        }
    }

    /// Client requests by kind: (kind, answered, total microseconds), for `sdiag`.
    pub(crate) fn rpc_totals(&self) -> Vec<(String, u64, u64)> {
        let Ok(inner) = self.inner.lock() else { return Vec::new() };
        inner.rpc.iter().map(|(kind, h)| ((*kind).to_owned(), h.count, (h.sum * 1e6) as u64)).collect()
    }

    /// One HTTP request to `path` answered with `status`.
    pub(crate) fn http(&self, path: &'static str, status: u16) {
        if let Ok(mut inner) = self.inner.lock() {
            *inner.http_requests.entry((path, status)).or_default() += 1;
        }
    }
}

/// What the core reports of the cluster at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    pub(crate) start_time: i64,
    /// `(state long name, partition)` → jobs in memory.
    pub(crate) jobs: BTreeMap<(String, String), u64>,
    /// `(reason, partition)` → pending jobs.
    pub(crate) pending_reasons: BTreeMap<(String, String), u64>,
    /// Pending jobs (the scheduler's backlog).
    pub(crate) backlog: u64,
    /// `(account, partition)` → GPUs held by running jobs.
    pub(crate) gpus_allocated: BTreeMap<(String, String), u64>,
    /// `(account, partition)` → GPUs held by running jobs that borrow.
    pub(crate) gpus_borrowed: BTreeMap<(String, String), u64>,
    /// account → GPU-seconds allocated since ctld started.
    pub(crate) gpu_seconds: BTreeMap<String, u64>,
    /// `(node, state long name)` → 1 (one series per node).
    pub(crate) nodes: Vec<(String, String, bool)>,
    pub(crate) gpus_total: u64,
    pub(crate) cpus_total: u64,
    pub(crate) cpus_allocated: u64,
    /// account → pending jobs (the status page's queue by team).
    pub(crate) pending_by_account: BTreeMap<String, u64>,
    /// Open incidents (drained or down nodes), node-table order.
    pub(crate) incidents: Vec<OpenIncident>,
    /// Automatic drains withheld over the window's cap since ctld started (alerts).
    pub(crate) auto_drains_withheld: u64,
}

/// A drained or down node's incident, as the status page and metrics show it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpenIncident {
    pub(crate) node: String,
    /// `DRAIN` or `DOWN`.
    pub(crate) state: &'static str,
    pub(crate) reason: String,
    pub(crate) owner: String,
    pub(crate) ticket: Option<String>,
    pub(crate) opened: i64,
}

/// An incident's owner as shown: `unassigned` for flags stored before owners existed.
pub(crate) fn owner_label(owner: &str) -> &str {
    if owner.is_empty() { "unassigned" } else { owner }
}

/// Escapes a label value (backslash, quote, newline).
fn esc(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The exposition text (Prometheus text format 0.0.4).
pub(crate) fn render(registry: &Registry, snap: &Snapshot) -> String {
    let mut out = String::new();
    head(&mut out, "drover_ctld_start_time_seconds", "gauge", "Unix time ctld started.");
    let _ = writeln!(out, "drover_ctld_start_time_seconds {}", snap.start_time);

    head(&mut out, "drover_jobs", "gauge", "Jobs in ctld's memory by state and partition.");
    for ((state, partition), n) in &snap.jobs {
        let _ = writeln!(out, "drover_jobs{{state=\"{}\",partition=\"{}\"}} {n}", esc(state), esc(partition));
    }
    head(&mut out, "drover_jobs_pending", "gauge", "Pending jobs by reason and partition.");
    for ((reason, partition), n) in &snap.pending_reasons {
        let _ = writeln!(out, "drover_jobs_pending{{reason=\"{}\",partition=\"{}\"}} {n}", esc(reason), esc(partition));
    }
    head(&mut out, "drover_scheduler_backlog_jobs", "gauge", "Pending jobs the scheduler considers.");
    let _ = writeln!(out, "drover_scheduler_backlog_jobs {}", snap.backlog);

    head(&mut out, "drover_account_gpus_allocated", "gauge", "GPUs held by running jobs per account and partition.");
    for ((account, partition), n) in &snap.gpus_allocated {
        let _ = writeln!(
            out,
            "drover_account_gpus_allocated{{account=\"{}\",partition=\"{}\"}} {n}",
            esc(account),
            esc(partition)
        );
    }
    head(&mut out, "drover_account_gpus_borrowed", "gauge", "GPUs held by running jobs that borrow idle guarantee.");
    for ((account, partition), n) in &snap.gpus_borrowed {
        let _ = writeln!(
            out,
            "drover_account_gpus_borrowed{{account=\"{}\",partition=\"{}\"}} {n}",
            esc(account),
            esc(partition)
        );
    }
    head(
        &mut out,
        "drover_account_gpu_seconds_total",
        "counter",
        "GPU-seconds allocated to an account's jobs since ctld started.",
    );
    for (account, n) in &snap.gpu_seconds {
        let _ = writeln!(out, "drover_account_gpu_seconds_total{{account=\"{}\"}} {n}", esc(account));
    }
    head(&mut out, "drover_node_state", "gauge", "1 for each node, labelled with its state.");
    for (node, state, _) in &snap.nodes {
        let _ = writeln!(out, "drover_node_state{{node=\"{}\",state=\"{}\"}} 1", esc(node), esc(state));
    }
    head(&mut out, "drover_node_drained", "gauge", "1 when the node is drained.");
    for (node, _, drained) in &snap.nodes {
        let _ = writeln!(out, "drover_node_drained{{node=\"{}\"}} {}", esc(node), u8::from(*drained));
    }
    head(&mut out, "drover_node_incidents_open", "gauge", "Drained or down nodes, by incident owner.");
    let mut by_owner: BTreeMap<&str, u64> = BTreeMap::new();
    for incident in &snap.incidents {
        *by_owner.entry(owner_label(&incident.owner)).or_default() += 1;
    }
    for (owner, n) in &by_owner {
        let _ = writeln!(out, "drover_node_incidents_open{{owner=\"{}\"}} {n}", esc(owner));
    }
    head(
        &mut out,
        "drover_auto_drains_withheld_total",
        "counter",
        "Automatic drains withheld because the window already held its cap (alerts).",
    );
    let _ = writeln!(out, "drover_auto_drains_withheld_total {}", snap.auto_drains_withheld);
    head(&mut out, "drover_node_incident_age_seconds", "gauge", "How long each open incident has been open.");
    let now = drover_shared::now();
    for incident in &snap.incidents {
        let _ = writeln!(
            out,
            "drover_node_incident_age_seconds{{node=\"{}\",owner=\"{}\"}} {}",
            esc(&incident.node),
            esc(owner_label(&incident.owner)),
            (now - incident.opened).max(0)
        );
    }
    head(&mut out, "drover_gpus", "gauge", "GPUs the nodes have.");
    let _ = writeln!(out, "drover_gpus {}", snap.gpus_total);
    head(&mut out, "drover_cpus", "gauge", "CPUs the nodes have.");
    let _ = writeln!(out, "drover_cpus {}", snap.cpus_total);
    head(&mut out, "drover_cpus_allocated", "gauge", "CPUs held by running jobs.");
    let _ = writeln!(out, "drover_cpus_allocated {}", snap.cpus_allocated);

    let inner = registry
        .inner
        .lock()
        .map(|i| (i.rpc.clone(), i.scheduler_pass.clone(), i.scheduler_backfill.clone(), i.http_requests.clone()));
    if let Ok((rpc, pass, backfill, http)) = inner {
        head(&mut out, "drover_scheduler_pass_duration_seconds", "histogram", "Time of one scheduling pass.");
        pass.render(&mut out, "drover_scheduler_pass_duration_seconds", "");
        head(
            &mut out,
            "drover_scheduler_backfill_duration_seconds",
            "histogram",
            "Time of the backfill part (reservation planning) of one scheduling pass.",
        );
        backfill.render(&mut out, "drover_scheduler_backfill_duration_seconds", "");
        head(&mut out, "drover_rpc_requests_total", "counter", "Client requests answered, by request.");
        for (request, h) in &rpc {
            let _ = writeln!(out, "drover_rpc_requests_total{{request=\"{request}\"}} {}", h.count);
        }
        head(
            &mut out,
            "drover_rpc_request_duration_seconds",
            "histogram",
            "Time to answer a client request, by request.",
        );
        for (request, h) in &rpc {
            h.render(&mut out, "drover_rpc_request_duration_seconds", &format!("request=\"{request}\""));
        }
        head(&mut out, "drover_http_requests_total", "counter", "HTTP requests answered, by path and status code.");
        for ((path, status), n) in &http {
            let _ = writeln!(out, "drover_http_requests_total{{path=\"{path}\",code=\"{status}\"}} {n}");
        }
    }
    out
}

/// The `request` label of a client request.
pub(crate) fn request_name(request: &drover_shared::proto::client::Request) -> &'static str {
    use drover_shared::proto::client::Request as R;
    match request {
        R::Submit(_) | R::SubmitOnce { .. } => "submit",
        R::Diag => "diag",
        R::StatJob { .. } => "stat_job",
        R::RebootNodes(_) => "reboot_nodes",
        R::CancelReboot { .. } => "cancel_reboot",
        R::QueryJobs(_) | R::QueryJobFields { .. } | R::QueryJobLines { .. } => "query_jobs",
        R::QueryAccounting(_) => "query_accounting",
        R::Cancel(_) => "cancel",
        R::QueryNodes => "query_nodes",
        R::QueryPartitions => "query_partitions",
        R::Ping => "ping",
        R::CancelTasks { .. } => "cancel_tasks",
        R::Hold { .. } => "hold",
        R::Requeue { .. } => "requeue",
        R::RequeueHold { .. } => "requeuehold",
        R::ShowConfig => "show_config",
        R::Sacctmgr { .. } => "sacctmgr",
        R::SacctmgrChange { .. } => "sacctmgr_change",
        R::Simulate(_) => "simulate",
        R::UpdateJob { .. } => "update_job",
        R::QueryShares => "query_shares",
        R::QueryPriority => "query_priority",
        R::Explain { .. } => "explain",
        R::QueryUsage(_) => "query_usage",
        R::UpdateNode(_) => "update_node",
        R::Reconfigure => "reconfigure",
        R::QueryNodeReasons => "query_node_reasons",
        R::QueryAudit(_) => "query_audit",
        R::QueryNodeHistory { .. } => "query_node_history",
        R::QueryTemplates => "query_templates",
        R::TestOnly(_) => "test_only",
        R::QueryNodeFeatures => "query_node_features",
        R::SplitArrayTask { .. } => "split_array_task",
        R::QueryJobUsage { .. } => "query_job_usage",
        R::QueryStepUsage { .. } => "query_step_usage",
        R::QueryReplicas => "query_replicas",
        R::CreateStep { .. } => "create_step",
        R::StepDone { .. } => "step_done",
        R::CancelStep { .. } => "cancel_step",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// srun's step requests have labels of their own (they were counted as `other`).
    #[test]
    fn step_requests_are_named() {
        use drover_shared::job::{JobState, WaitStatus};
        use drover_shared::proto::client::Request;
        let done =
            Request::StepDone { job_id: 1, step_id: 0, state: JobState::Completed, exit_status: WaitStatus::default() };
        assert_eq!(request_name(&done), "step_done");
        assert_eq!(request_name(&Request::CancelStep { job_id: 1, step_id: 0, signal: None }), "cancel_step");
    }

    #[test]
    fn text_has_help_type_and_escaped_labels() {
        let registry = Registry::default();
        registry.rpc("submit", Duration::from_millis(2));
        registry.scheduler_pass(Duration::from_micros(300));
        let mut snap = Snapshot { backlog: 3, ..Snapshot::default() };
        snap.jobs.insert(("PENDING".into(), "main".into()), 3);
        snap.gpus_allocated.insert(("vi\"sion".into(), "main".into()), 2);
        let text = render(&registry, &snap);
        assert!(
            text.contains("# TYPE drover_jobs gauge\ndrover_jobs{state=\"PENDING\",partition=\"main\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("drover_account_gpus_allocated{account=\"vi\\\"sion\",partition=\"main\"} 2"), "{text}");
        assert!(text.contains("drover_rpc_requests_total{request=\"submit\"} 1"), "{text}");
        assert!(
            text.contains("drover_rpc_request_duration_seconds_bucket{request=\"submit\",le=\"0.001\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("drover_rpc_request_duration_seconds_bucket{request=\"submit\",le=\"0.0025\"} 1"),
            "{text}"
        );
        assert!(text.contains("drover_scheduler_pass_duration_seconds_bucket{le=\"0.0005\"} 1"), "{text}");
        assert!(text.contains("drover_scheduler_pass_duration_seconds_count 1"), "{text}");
        assert!(text.lines().all(|l| !l.ends_with(' ')));
    }
}
