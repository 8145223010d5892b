//! Scheduling in the core: when a pass runs and what comes before it (dependency refreshes,
//! deadlines), the launches of the jobs it started (after their allocation is committed) and the
//! preemptions it decided.

use super::Core;
use crate::model::run_ends::OnEnd;
use crate::model::state::{Allocation, Job, NodeAllocation};
use crate::policy::preempt::{self, Manner};
use crate::policy::scheduler::{self, Decisions, Preemption, Start};
use crate::store::db::AfterCommit;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobId, JobSpec, JobState};
use drover_shared::proto::node::{CtldMessage, LaunchRequest};
use drover_shared::{UnixTime, now};

impl Core {
    /// One scheduling pass (several while array tasks are split off); what it stored goes to
    /// the writer as one item when it ends.
    pub(super) fn schedule(&mut self) {
        self.schedule_passes();
        self.send_outbox();
    }

    fn schedule_passes(&mut self) {
        let now = now();
        self.expire_deadlines(now);
        self.refresh_dependencies(now);
        // A pass starts at most one task of an array (its base record is one queue entry); more
        // passes follow while tasks are split off, so the tasks that fit start together.
        let mut split = false;
        let mut backfill = std::time::Duration::ZERO;
        let mut backfilled = 0;
        let mut preemptions = Vec::new();
        for _ in 0..crate::policy::array::MAX_ARRAY_SIZE {
            let more = self.schedule_pass(now, &mut preemptions);
            backfill += self.state.last_pass.backfill;
            backfilled += self.state.last_pass.backfilled;
            if !more {
                break;
            }
            split = true;
        }
        // A split changes where a base record's dependency stands (`aftercorr` holds per task):
        // show it at once rather than at the next pass.
        if split {
            self.refresh_dependencies(now);
        }
        // What `/metrics` reports: the backfill part of all rounds.
        self.state.last_pass.backfill = backfill;
        self.state.last_pass.backfilled = backfilled;
        self.preempt(preemptions);
    }

    /// Shows where each pending job's dependency stands and cancels the jobs that asked for it
    /// once theirs can never be satisfied.
    fn refresh_dependencies(&mut self, now: UnixTime) {
        let (kill, changed) = crate::policy::dependency::refresh(&mut self.state, now);
        for job_id in changed {
            self.store_job(job_id, false);
        }
        if !kill.is_empty() {
            self.state.dependencies.jobs_ended();
        }
        for job_id in kill {
            self.state.end_job(job_id, JobState::Cancelled, "DependencyNeverSatisfied", now);
            self.store_job(job_id, false);
            self.audit(0, "cancel", Some(job_id), "dependency can never be satisfied".into());
        }
    }

    /// `--deadline`: a pending job that can no longer end by its deadline (now plus its time
    /// limit, the shortest over its partitions, is past it) ends `DEADLINE`, as in Slurm.
    pub(super) fn expire_deadlines(&mut self, now: UnixTime) {
        let config = self.state.config().clone();
        self.state.jobs.refile(now);
        let expired: Vec<JobId> = self
            .state
            .jobs
            .with_deadline()
            .filter(|j| j.committed && j.info.state() == JobState::Pending)
            .filter(|j| {
                j.spec.deadline.is_some_and(|deadline| {
                    let shortest = j
                        .candidates
                        .iter()
                        .filter_map(|name| config.partitions.iter().find(|p| &p.name == name))
                        .map(|p| crate::policy::backfill::time_limit_secs(j, p))
                        .min()
                        .unwrap_or(0);
                    now.saturating_add(shortest) > deadline
                })
            })
            .map(|j| j.info.job_id)
            .collect();
        for job_id in expired {
            self.state.end_job(job_id, JobState::Deadline, "DeadLine", now);
            self.store_job(job_id, false);
            self.audit(0, "deadline", Some(job_id), "cannot end by its deadline".into());
            self.schedule_needed = true;
        }
    }

    /// One scheduling pass: carries out its starts and adds its preemptions to `preemptions`
    /// (sent once the passes are done); true when it split array tasks off their base records.
    fn schedule_pass(&mut self, now: UnixTime, preemptions: &mut Vec<Preemption>) -> bool {
        let mut split_any = false;
        let mut started = Vec::new();
        let Decisions { starts, preemptions: decided } = scheduler::schedule(&mut self.state, now);
        preemptions.extend(decided);
        for Start { job_id, partition, alloc } in starts {
            let base = job_id;
            let task = crate::policy::dependency::ready_task(&self.state, base, now);
            let Some((job_id, split)) = crate::policy::array::claim(&mut self.state, base, task) else { continue };
            if split {
                split_any = true;
                self.store_split(base, job_id);
            }
            if !self.state.start_job(job_id, &partition, alloc, now) {
                continue;
            }
            started.push(job_id);
            tracing::info!(job_id, partition, nodes = ?self.state.jobs[&job_id].info.nodes, "job allocated");
            self.store_job(job_id, true);
            self.after_commit(AfterCommit::Launch(job_id, None));
        }
        self.snapshot_runs(&started);
        split_any
    }

    /// What a node needs to run `job`'s processes on its `share` of the allocation (the batch
    /// script on the first node, step tasks on any). `spec` is the whole spec for the batch
    /// launch (`resident::complete`); step launches send the resident one (the step runner reads
    /// only its umask).
    pub(super) fn launch_request(
        &self,
        job: &Job,
        spec: JobSpec,
        alloc: &Allocation,
        share: &NodeAllocation,
    ) -> LaunchRequest {
        LaunchRequest {
            job_id: job.info.job_id,
            spec,
            user: job.info.user.clone(),
            uid: job.info.uid,
            gid: job.info.gid,
            cluster_name: self.state.config().cluster_name.clone(),
            partition: job.info.partition.clone(),
            account: job.info.account.clone(),
            qos: job.info.qos.clone(),
            time_limit: job.info.time_limit.unwrap_or(TimeLimit::Unlimited),
            nodes: job.info.nodes.clone(),
            cpus_per_node: alloc.nodes.iter().map(|n| n.cpus).collect(),
            tasks_per_node: alloc.nodes.iter().map(|n| n.tasks).collect(),
            cpus_on_node: share.cpus,
            mem_per_node_mb: share.mem_mb,
            gpus: share.gpus.clone(),
            kill_wait: self.state.config().kill_wait,
            ctld_socket: self.ctld_socket.clone(),
            array: crate::policy::array::launch_info(job),
            restart_count: job.info.restarts,
        }
    }

    pub(super) fn launch(&mut self, job_id: JobId, stored: Option<Box<JobSpec>>) {
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        if job.info.state() != JobState::Running {
            return; // cancelled between allocation and commit
        }
        let Some(alloc) = &job.alloc else { return };
        let Some(batch_share) = alloc.nodes.first() else { return };
        let Some(stored) = stored else {
            // Its row could not be read back (logged by the writer): nothing to start it with.
            tracing::error!(job_id, "no stored spec to launch the job with; the job fails");
            self.fail_launch(job_id);
            return;
        };
        let spec = crate::model::resident::complete(&job.spec, &job.info, *stored);
        let request = self.launch_request(job, spec, alloc, batch_share);
        let batch_host = batch_share.node.clone();
        // Checked at submit; a launch that still would not fit a node frame is never sent (it
        // would drop the node's connection): the job fails instead.
        let size = postcard::experimental::serialized_size(&request).map_or(usize::MAX, |size| size + 8);
        if size > drover_shared::proto::frame::MAX_FRAME {
            tracing::error!(job_id, size, "launch message exceeds the node frame limit; the job fails");
            self.fail_launch(job_id);
            return;
        }
        let link = self.links.get(&batch_host).cloned();
        match link.map(|l| l.tx.send(CtldMessage::Launch(Box::new(request)))) {
            Some(Ok(())) => tracing::info!(job_id, node = batch_host, "launch sent"),
            _ => {
                tracing::warn!(job_id, node = batch_host, "node went away before launch; job requeued");
                self.requeue(job_id);
            }
        }
    }

    /// A job that cannot be started at all ends `FAILED` (`JobLaunchFailure`) and frees its nodes.
    fn fail_launch(&mut self, job_id: JobId) {
        let now = now();
        self.runs.remove(&job_id);
        self.state.release_job(job_id, now);
        self.state.end_job(job_id, JobState::Failed, "JobLaunchFailure", now);
        self.store_job(job_id, false);
        self.schedule_needed = true;
    }

    /// Sends the preemptions the passes decided (`requests`): the job's `--signal` warning and SIGTERM
    /// after its lead time, else SIGTERM now; SIGKILL after the victim QOS's `grace_time` (else
    /// `kill_wait`); the job is requeued with the same id (restart count + 1)
    /// or, with `preempt_mode = "cancel"` or `--no-requeue`, ends `PREEMPTED`.
    pub(super) fn preempt(&mut self, requests: Vec<Preemption>) {
        for Preemption { victim, for_job } in requests {
            let Some(Manner { requeue, grace, warning }) = preempt::manner(&self.state, victim) else { continue };
            let job = &self.state.jobs[&victim];
            let batch_host = job.info.nodes.first().cloned();
            let run = job.info.restarts;
            if requeue {
                self.mark_requeue(victim, false);
            } else {
                self.state.run_ends.set(victim, OnEnd::Preempted);
            }
            let link = batch_host.and_then(|h| self.links.get(&h).cloned());
            match (warning, link) {
                (Some((signal, batch_only, lead)), Some(link)) => {
                    let _ = link.tx.send(CtldMessage::Signal { job_id: victim, signal, batch_only });
                    self.state.run_ends.cancel_at(now() + i64::from(lead), victim, grace);
                }
                (None, Some(link)) => {
                    let _ = link.tx.send(CtldMessage::Cancel { job_id: victim, run, kill_wait: grace });
                }
                (_, None) => {}
            }
            let how = if requeue { "requeue" } else { "cancel" };
            self.audit(0, "preempt", Some(victim), format!("reclaimed for job {for_job} ({how}, grace {grace}s)"));
        }
        self.cancel_warned();
    }

    /// Cancels the warned victims whose lead time is over.
    pub(super) fn cancel_warned(&mut self) {
        for (job_id, grace) in self.state.run_ends.due_cancels(now()) {
            let running = self
                .state
                .jobs
                .get(&job_id)
                .filter(|j| j.alloc.is_some())
                .and_then(|j| j.info.nodes.first().cloned().map(|h| (h, j.info.restarts)));
            if let Some((link, run)) = running.and_then(|(h, run)| self.links.get(&h).cloned().map(|l| (l, run))) {
                let _ = link.tx.send(CtldMessage::Cancel { job_id, run, kill_wait: grace });
            }
        }
    }
}
