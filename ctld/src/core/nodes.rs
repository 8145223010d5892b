//! Nodes in the core: the link to each node's noded (the core alone holds it), registration,
//! the node's messages, jobs missing from their node's reports, and the partitions `sinfo`
//! lists.

use super::node_link::NodeLink;
use super::{Core, LAUNCH_GRACE};
use crate::store::db::DbOp;
use drover_shared::job::{JobId, JobState};
use drover_shared::node::PartitionInfo;
use drover_shared::proto::node::{CtldMessage, JobRun, NodeMessage, NodeRegistration};
use drover_shared::{UnixTime, now};
use std::collections::HashMap;

impl Core {
    pub(super) fn partitions(&self) -> Vec<PartitionInfo> {
        self.state
            .config()
            .partitions
            .iter()
            .map(|p| {
                let nodes: Vec<_> = p
                    .nodes
                    .iter()
                    .filter_map(|n| self.state.node_index().get(n).map(|&i| &self.state.nodes()[i]))
                    .collect();
                PartitionInfo {
                    name: p.name.clone(),
                    default: p.default,
                    up: true,
                    hidden: p.hidden,
                    max_time: p.max_time,
                    default_time: p.default_time,
                    max_nodes: p.max_nodes,
                    nodes: p.nodes.clone(),
                    allow_accounts: p.allow_accounts.clone(),
                    allow_qos: p.allow_qos.clone(),
                    priority_job_factor: p.priority_job_factor,
                    priority_tier: p.priority_tier,
                    total_cpus: nodes.iter().map(|n| n.cpus).sum(),
                    total_mem_mb: nodes.iter().map(|n| n.real_memory_mb).sum(),
                    total_gpus: u32::try_from(nodes.iter().map(|n| n.gpus.len()).sum::<usize>()).unwrap_or(u32::MAX),
                }
            })
            .collect()
    }

    pub(super) fn node_registered(&mut self, registration: NodeRegistration, link: NodeLink, address: String) {
        let now = now();
        let name = registration.name.clone();
        let Some(node) = self.state.node_mut(&name) else {
            tracing::warn!(node = name, "registration from a node that is not in the config");
            return;
        };
        let was_down = node.registered_once && !node.responding;
        node.connection = Some(link.connection_id);
        self.links.insert(registration.name.clone(), link.clone());
        node.responding = true;
        node.registered_once = true;
        node.last_heartbeat = now;
        node.cpus = registration.cpus.min(node.config.cpus).max(1);
        node.real_memory_mb = registration.real_memory_mb.min(node.config.real_memory_mb);
        if !registration.gpus.is_empty() {
            node.gpus = registration.gpus.clone().into();
        }
        node.address = address;
        node.boot_time = Some(registration.boot_time);
        node.start_time = Some(registration.start_time);
        node.version = registration.version.clone();
        let start_time = registration.start_time;
        tracing::info!(node = name, cpus = node.cpus, gpus = node.gpus.len(), held = ?registration.running, was_down, "node registered");
        self.audit(0, "node-register", None, format!("node {name}"));
        // Runs the node holds that ctld no longer runs there (ended, requeued, earlier runs) must die.
        let kill = self.stale_runs(&name, &registration.running);
        let _ = link.tx.send(CtldMessage::Registered { kill });
        // Changed time limits again: the change may have been sent while the node was away.
        let jobs = &self.state.jobs;
        self.limits_changed.retain(|job_id| jobs.get(job_id).is_some_and(|j| j.info.state() == JobState::Running));
        for job_id in &self.limits_changed {
            let job = &self.state.jobs[job_id];
            if let (Some(time_limit), Some(true)) = (job.info.time_limit, job.info.nodes.first().map(|h| h == &name)) {
                let _ = link.tx.send(CtldMessage::SetTimeLimit { job_id: *job_id, time_limit });
            }
        }
        if let Some(node) = self.state.node_mut(&name) {
            node.held_report = Some((now, registration.running));
        }
        self.reboot_done(&name, start_time);
        self.schedule_needed = true;
    }

    /// Jobs ctld runs on a node that the node's last report (registration or heartbeat) no
    /// longer holds, launched more than the launch grace before that report: NODE_FAIL. One walk
    /// over the allocated jobs per tick for every node that reported since the last (a walk per heartbeat
    /// cost nodes x jobs: 10,000 nodes x 100,000 jobs delayed ctld past the launch grace itself).
    pub(super) fn lost_jobs(&mut self) {
        let reports: HashMap<String, (UnixTime, std::collections::HashSet<JobRun>)> = self
            .state
            .nodes_mut()
            .iter_mut()
            .filter_map(|n| {
                n.held_report.take().map(|(at, held)| (n.config.name.clone(), (at, held.into_iter().collect())))
            })
            .collect();
        if reports.is_empty() {
            return;
        }
        let lost: Vec<(JobId, UnixTime, u32, String)> = self
            .state
            .jobs
            .allocated()
            .filter(|j| j.alloc.is_some())
            .filter_map(|j| {
                let node = j.info.nodes.first()?;
                let (at, held) = reports.get(node)?;
                let run = JobRun { job_id: j.info.job_id, run: j.info.restarts };
                (!held.contains(&run) && j.launched_at.is_some_and(|t| at - t > LAUNCH_GRACE))
                    .then(|| (run.job_id, *at, j.info.uid, node.clone()))
            })
            .collect();
        for (job_id, at, uid, node) in lost {
            tracing::warn!(job_id, reported_at = at, "node no longer holds the job");
            self.fail_on_node(job_id, now());
            self.job_failed_on_node(&node, job_id, uid, "NODE_FAIL (the node no longer held the job)".into(), false);
        }
    }

    pub(super) fn node_message(&mut self, node: &str, connection_id: u64, message: NodeMessage) {
        let now = now();
        let Some(n) = self.state.node_mut(node) else { return };
        if n.connection != Some(connection_id) {
            return; // a message from a connection ctld already gave up on
        }
        n.last_heartbeat = now;
        match message {
            NodeMessage::Register(_) => {}
            NodeMessage::Heartbeat { running } => {
                self.cancel_superseded(node, &running);
                if let Some(n) = self.state.node_mut(node) {
                    n.held_report = Some((now, running));
                }
            }
            NodeMessage::JobStarted { job_id, run, start_time } => {
                if let Some(job) = self.state.jobs.get_mut(&job_id)
                    && job.info.state() == JobState::Running
                    && job.info.restarts == run
                {
                    job.info.start_time = Some(start_time);
                    job.started = true;
                    if let Some(step) = job.info.steps.first_mut() {
                        step.start_time = Some(start_time);
                    }
                    // The job is stored running since its allocation; this only makes the
                    // start exact, so it rides with the next commit instead of forcing one.
                    let info = Box::new(job.info.clone());
                    self.store_unhurried(DbOp::UpdateJob { info, alloc: None });
                }
            }
            NodeMessage::JobEnded(end) => self.job_ended(node, end, now),
            NodeMessage::GpuUsage(samples) => self.gpu_samples(&samples, now),
            NodeMessage::StepUsage { step_id, usage } => {
                // Only for a job that runs or ran on this node.
                let ran_here =
                    self.state.jobs.get(&usage.job_id).is_some_and(|j| j.info.nodes.iter().any(|h| h == node));
                if ran_here {
                    self.store(DbOp::StepUsage { step_id, node: node.to_owned(), usage });
                }
            }
            NodeMessage::JobUsage(usage) => {
                // Only for a job this node runs or ran: a node cannot write another's record.
                let ran_here =
                    self.state.jobs.get(&usage.job_id).is_some_and(|j| j.info.nodes.first().is_some_and(|h| h == node));
                if ran_here {
                    self.store(DbOp::JobUsage(usage));
                }
            }
            NodeMessage::Drain { reason } => self.node_drains_itself(node, reason),
            NodeMessage::JobStats { query, job_id, samples } => self.job_stats(node, query, job_id, samples),
            // Answered before registration (`serve::nodes`); a registered node does not send it.
            NodeMessage::FetchConfig { .. } => tracing::debug!(node, "config request on a node link ignored"),
        }
    }
}
