//! What the core publishes: the job snapshots queries read (after each batch of events), the
//! answers that wait for the snapshot that shows their change, and the numbers `/metrics` serves.

use super::Core;
use drover_shared::job::JobState;
use drover_shared::now;
use drover_shared::proto::client::Response;
use std::sync::Arc;
use tokio::sync::oneshot;

impl Core {
    /// Publishes a snapshot if jobs changed, then sends the answers that waited for it.
    pub(super) fn publish(&mut self) {
        self.publisher.publish(&mut self.state);
        for (reply, response) in self.deferred.drain(..) {
            let _ = reply.send(response);
        }
    }

    pub(super) fn answer_after_publish(&mut self, reply: oneshot::Sender<Response>, response: Response) {
        self.deferred.push((reply, response));
    }

    /// Names remote clients' hosts in audit records from the table the serve layer interns them in.
    pub(crate) fn with_host_names(mut self, hosts: Arc<crate::model::identity::HostNames>) -> Core {
        self.hosts = hosts;
        self
    }

    /// Serves `/metrics` from this core's registry.
    pub(crate) fn with_metrics(mut self, registry: Arc<crate::core::metrics::Registry>) -> Core {
        self.metrics = registry;
        self
    }

    /// What `sdiag` shows: the job counts, the jobs pending and running, the passes and the
    /// requests answered.
    pub(super) fn diag(&self) -> drover_shared::proto::diag::DiagReport {
        let counts = self.state.counts;
        let (mut pending, mut running) = (0, 0);
        for job in self.state.jobs.values() {
            match job.info.state() {
                JobState::Pending => pending += 1,
                JobState::Running => running += 1,
                _ => {}
            }
        }
        drover_shared::proto::diag::DiagReport {
            since: self.started_at,
            now: now(),
            jobs_submitted: counts.submitted,
            jobs_started: counts.started,
            jobs_completed: counts.completed,
            jobs_canceled: counts.canceled,
            jobs_failed: counts.failed,
            jobs_pending: pending,
            jobs_running: running,
            main: self.cycles.main,
            backfill: self.cycles.backfill,
            backfilled_jobs: self.cycles.backfilled,
            requests: self.metrics.rpc_totals(),
        }
    }

    pub(super) fn metrics_snapshot(&self) -> crate::core::metrics::Snapshot {
        let mut snap = crate::core::metrics::Snapshot {
            start_time: self.started_at,
            gpu_seconds: self.gpu_seconds.clone(),
            ..Default::default()
        };
        let borrowed = crate::policy::quota::Quotas::new(&self.state).borrowed;
        for job in self.state.jobs.values().filter(|j| j.committed) {
            let state = job.info.state();
            *snap.jobs.entry((state.long_name().to_owned(), job.info.partition.clone())).or_default() += 1;
            if state == JobState::Pending {
                snap.backlog += 1;
                *snap.pending_reasons.entry((job.info.reason.clone(), job.info.partition.clone())).or_default() += 1;
                *snap.pending_by_account.entry(job.info.account.clone()).or_default() += 1;
            }
            if job.alloc.is_some() && state == JobState::Running {
                let key = (job.info.account.clone(), job.info.partition.clone());
                let gpus = u64::from(job.info.gpus_allocated);
                *snap.gpus_allocated.entry(key.clone()).or_default() += gpus;
                if borrowed.contains(&job.info.job_id) {
                    *snap.gpus_borrowed.entry(key).or_default() += gpus;
                }
            }
        }
        snap.auto_drains_withheld = self.state.auto_drains.withheld;
        for node in self.state.nodes() {
            snap.nodes.push((
                node.config.name.clone(),
                node.state().long_name().to_owned(),
                node.drain_reason.is_some(),
            ));
            let reason =
                node.down_reason.as_ref().map(|r| ("DOWN", r)).or(node.drain_reason.as_ref().map(|r| ("DRAIN", r)));
            if let Some((state, reason)) = reason {
                let incident = node.incident.clone();
                snap.incidents.push(super::metrics::OpenIncident {
                    node: node.config.name.clone(),
                    state,
                    reason: reason.clone(),
                    owner: incident
                        .as_ref()
                        .map_or_else(|| crate::model::incident::SYSTEM_OWNER.to_owned(), |i| i.owner.clone()),
                    ticket: incident.and_then(|i| i.ticket),
                    opened: node.reason_set.map_or(0, |(_, t)| t),
                });
            }
            snap.gpus_total += node.gpus.len() as u64;
            snap.cpus_total += u64::from(node.cpus);
            snap.cpus_allocated += u64::from(node.cpus_alloc);
        }
        snap
    }
}
