//! `sstat` (and `scontrol listpids`): what a running job's steps use now. The core checks who
//! asks, lists the job's running steps, asks each of the job's connected nodes
//! ([`CtldMessage::StatJob`]) and answers once they all answered or the question expired
//! (`stat_gather.rs`); the numbers are never stored.
//!
//! Who sees what: the job's owner, operators and admins. Under `PrivateData=jobs` another
//! user's job does not exist for a plain user (`InvalidJobId`, as an unknown job); without it,
//! the job is visible but its steps' usage is refused (`AccessDenied`), as Slurm's node daemon
//! refuses another user's step statistics.
//!
//! This file is a child module of `core` (declared there), so it extends [`Core`] directly.

use super::Core;
use crate::model::identity::Caller;
use crate::policy::authz::{Operation, Private, Who};
use drover_shared::job::{JobId, JobState};
use drover_shared::proto::client::{ErrorCode, Response};
use drover_shared::proto::node::CtldMessage;
use drover_shared::proto::stat::{StatReport, StepSample, StepStat};
use std::time::Instant;
use tokio::sync::oneshot;

impl Core {
    /// `sstat -j N`: asks the job's nodes and answers when they did (or their time is up).
    pub(crate) fn stat_job(&mut self, caller: Caller, job_id: JobId, reply: oneshot::Sender<Response>) {
        let config = self.state.config();
        let who = Who::of(config, caller);
        let unknown = || Response::Error { code: ErrorCode::InvalidJobId, detail: format!("job {job_id} not found") };
        let Some(job) = self.state.jobs.get(&job_id) else {
            let _ = reply.send(unknown());
            return;
        };
        if who.limited_to_own(config, Private::Jobs) && job.info.uid != caller.uid {
            let _ = reply.send(unknown());
            return;
        }
        if job.info.uid != caller.uid && !who.may(Operation::ReadAll) {
            let detail = format!("job {job_id} belongs to another user");
            let _ = reply.send(Response::Error { code: ErrorCode::AccessDenied, detail });
            return;
        }
        let running = job.info.state() == JobState::Running && job.alloc.is_some();
        let steps: Vec<StepStat> = if running {
            job.info
                .steps
                .iter()
                .filter(|s| s.end_time.is_none())
                .map(|s| StepStat {
                    step_id: s.step_id,
                    num_tasks: s.num_tasks,
                    nodes: s.nodes.clone(),
                    samples: Vec::new(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let report = StatReport { job_id, steps };
        let run = job.info.restarts;
        let mut nodes: Vec<String> = Vec::new();
        for node in report.steps.iter().flat_map(|s| &s.nodes) {
            if !nodes.contains(node) && self.links.contains_key(node) {
                nodes.push(node.clone());
            }
        }
        if nodes.is_empty() {
            let _ = reply.send(Response::StepStats(Box::new(report)));
            return;
        }
        let query = match self.stat_queries.start(reply, report, nodes.clone(), Instant::now()) {
            Ok(query) => query,
            Err(reply) => {
                let detail = "too many sstat requests wait for nodes; try again".to_owned();
                let _ = reply.send(Response::Error { code: ErrorCode::Internal, detail });
                return;
            }
        };
        for node in &nodes {
            if let Some(link) = self.links.get(node) {
                let _ = link.tx.send(CtldMessage::StatJob { query, job_id, run });
            }
        }
    }

    /// A node's answer to a `StatJob` question.
    pub(super) fn job_stats(&mut self, node: &str, query: u64, job_id: JobId, samples: Vec<StepSample>) {
        if let Some((reply, report)) = self.stat_queries.answer(query, node, job_id, samples) {
            let _ = reply.send(Response::StepStats(Box::new(report)));
        }
    }

    /// At each tick: the questions whose nodes did not all answer in time get what came.
    pub(super) fn expire_stats(&mut self) {
        for (reply, report) in self.stat_queries.expired(Instant::now()) {
            let _ = reply.send(Response::StepStats(Box::new(report)));
        }
    }
}
