//! Usage in the core: fair-share usage charged to running jobs, the nodes' GPU samples and the
//! idle-GPU policy, GPU-seconds per account, and each run's usage record at its end.

use super::Core;
use crate::store::db::DbOp;
use drover_shared::UnixTime;
use drover_shared::job::{JobId, JobState};
use drover_shared::proto::node::CtldMessage;

impl Core {
    /// Decays usage to `now`, charges the running jobs their billing, and saves it now and then.
    /// `save` forces a save (a job just ended: its last seconds are charged and stored with its
    /// end, so a restart never forgets a finished job's usage).
    pub(super) fn charge_usage(&mut self, now: UnixTime, save: bool) {
        let config = self.state.config().clone();
        let charges: Vec<(String, String, f64)> = self
            .state
            .jobs
            .allocated()
            .filter(|j| j.alloc.is_some() && j.info.state() == JobState::Running)
            .map(|j| (j.info.account.clone(), j.info.user.clone(), crate::model::tres::job_billing(&self.state, j)))
            .collect();
        let usage = &mut self.state.usage;
        usage.advance(
            now,
            config.priority.decay_half_life,
            charges.iter().map(|(a, u, b)| (a.as_str(), u.as_str(), *b)),
        );
        if save || usage.save_due(now) {
            usage.saved = now;
            let rows = usage.by_assoc.iter().map(|(k, v)| (k.clone(), *v)).collect();
            let updated = usage.updated;
            self.store(DbOp::SaveUsage { updated, rows });
        }
    }

    /// Adds a node's GPU samples to the running jobs' usage and applies the idle-GPU policy of
    /// their partitions: warn, then cancel (reason `IdleGPU`) or requeue.
    pub(super) fn gpu_samples(&mut self, samples: &[drover_shared::proto::usage::JobGpuSample], now: UnixTime) {
        use crate::store::accounting::IdleStep;
        use drover_shared::config::usage::IdleAction;
        let mut steps = Vec::new();
        {
            let runs = &mut self.runs;
            for sample in samples.iter().filter(|s| s.gpus > 0) {
                let Some(run) = runs.get_mut(&sample.job_id) else { continue };
                run.add_sample(sample.utilization_percent_sum, now);
                let Some(job) = self.state.jobs.get(&sample.job_id).filter(|j| j.info.state() == JobState::Running)
                else {
                    continue;
                };
                let Some(policy) =
                    self.state.config().accounting.idle_gpu.iter().find(|p| p.partition == job.info.partition)
                else {
                    continue;
                };
                let step = run.idle_check(policy, sample.utilization_percent_sum / sample.gpus, now);
                if step != IdleStep::Nothing {
                    steps.push((sample.job_id, step, policy.threshold_percent));
                }
            }
        }
        let kill_wait = self.state.config().kill_wait;
        for (job_id, step, threshold) in steps {
            let (action, idle) = match step {
                IdleStep::Nothing => continue,
                IdleStep::Warn(idle) => (IdleAction::Warn, idle),
                IdleStep::Act(action, idle) => (action, idle),
            };
            let detail = format!("GPUs below {threshold}% utilization for {idle}s");
            tracing::warn!(job_id, ?action, detail, "idle GPUs");
            let Some(job) = self.state.jobs.get_mut(&job_id) else { continue };
            let link = job.info.nodes.first().and_then(|h| self.links.get(h).cloned());
            let run = job.info.restarts;
            match action {
                IdleAction::Warn => self.audit(0, "idle-gpu-warning", Some(job_id), detail),
                IdleAction::Requeue if job.info.requeue => {
                    job.info.reason = "IdleGPU".into();
                    self.mark_requeue(job_id, false);
                    if let Some(link) = &link {
                        let _ = link.tx.send(CtldMessage::Cancel { job_id, run, kill_wait });
                    }
                    self.audit(0, "idle-gpu-requeue", Some(job_id), detail);
                }
                IdleAction::Requeue | IdleAction::Cancel => {
                    job.cancel_requested_by = Some(0);
                    job.info.cancelled_by = Some(0);
                    if let Some(link) = &link {
                        let _ = link.tx.send(CtldMessage::Cancel { job_id, run, kill_wait });
                    }
                    self.state.end_job(job_id, JobState::Cancelled, "IdleGPU", now);
                    self.store_job(job_id, false);
                    self.audit(0, "idle-gpu-cancel", Some(job_id), detail);
                    self.schedule_needed = true;
                }
            }
        }
    }

    /// Adds the GPU-seconds of running jobs since the last call to their accounts' counters.
    pub(super) fn advance_gpu_seconds(&mut self, now: UnixTime) {
        let dt = u64::try_from(now - self.gpu_seconds_at).unwrap_or(0);
        self.gpu_seconds_at = now;
        for job in self.state.jobs.allocated().filter(|j| j.alloc.is_some() && j.info.state() == JobState::Running) {
            *self.gpu_seconds.entry(job.info.account.clone()).or_default() += dt * u64::from(job.info.gpus_allocated);
        }
    }

    /// Takes the usage snapshot of jobs that just got (or, after a restart, hold) an allocation;
    /// whether each borrows comes from the quota split with them running.
    pub(super) fn snapshot_runs(&mut self, job_ids: &[JobId]) {
        if job_ids.is_empty() {
            return;
        }
        self.state.jobs.refile(drover_shared::now());
        let borrowed = crate::policy::quota::Quotas::new(&self.state).borrowed;
        let runs = &mut self.runs;
        for job_id in job_ids {
            let Some(job) = self.state.jobs.get(job_id) else { continue };
            if let Some(snap) = crate::store::accounting::snapshot(&self.state, job, borrowed.contains(job_id)) {
                runs.insert(*job_id, snap);
            }
        }
    }

    /// Queues the usage record of a run that ended (once: the snapshot is taken out).
    pub(super) fn record_run(&mut self, job_id: JobId, state_name: &str, end: UnixTime) {
        let Some(snap) = self.runs.remove(&job_id) else { return };
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        let record = crate::store::accounting::record(job, &snap, state_name, end);
        self.store(DbOp::RecordUsage(Box::new(record)));
    }
}
