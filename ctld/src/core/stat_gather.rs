//! `sstat`'s questions to nodes while their answers come in: each question asked of a job's
//! nodes (`CtldMessage::StatJob`) waits here with its client's reply until every node asked has
//! answered or [`GATHER_TIMEOUT_SECS`] passed (the core's tick expires it), then the client gets
//! what came. No `impl Core` here: the core holds a [`StatQueries`] and `stat.rs` drives it.
//!
//! Bounds: at most [`MAX_GATHERING`] questions wait at once (beyond, a request is refused as
//! busy); a node's samples are kept only for steps ctld lists as running on that node, once each.

use drover_shared::job::JobId;
use drover_shared::proto::client::Response;
use drover_shared::proto::stat::{GATHER_TIMEOUT_SECS, NodeSample, StatReport, StepSample};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The most `sstat` questions that may wait for nodes at once.
pub(super) const MAX_GATHERING: usize = 256;

/// One question waiting for its nodes.
#[derive(Debug)]
struct Gathering {
    reply: oneshot::Sender<Response>,
    report: StatReport,
    /// The nodes asked that have not answered yet.
    waiting: Vec<String>,
    deadline: Instant,
}

/// The questions waiting, by query number.
#[derive(Debug, Default)]
pub(crate) struct StatQueries {
    last: u64,
    pending: HashMap<u64, Gathering>,
}

impl StatQueries {
    /// Registers a question sent to `nodes` and returns its number; `Err(reply)` when
    /// [`MAX_GATHERING`] already wait.
    pub(super) fn start(
        &mut self,
        reply: oneshot::Sender<Response>,
        report: StatReport,
        nodes: Vec<String>,
        now: Instant,
    ) -> Result<u64, oneshot::Sender<Response>> {
        if self.pending.len() >= MAX_GATHERING {
            return Err(reply);
        }
        self.last += 1;
        let deadline = now + Duration::from_secs(GATHER_TIMEOUT_SECS);
        self.pending.insert(self.last, Gathering { reply, report, waiting: nodes, deadline });
        Ok(self.last)
    }

    /// Node `node`'s answer to question `query`; the reply and the report once every node asked
    /// has answered. An answer nobody waits for (expired, another node's question, another job)
    /// is dropped.
    pub(super) fn answer(
        &mut self,
        query: u64,
        node: &str,
        job_id: JobId,
        samples: Vec<StepSample>,
    ) -> Option<(oneshot::Sender<Response>, StatReport)> {
        let gathering = self.pending.get_mut(&query)?;
        let position = gathering.waiting.iter().position(|n| n == node)?;
        if gathering.report.job_id != job_id {
            return None;
        }
        gathering.waiting.swap_remove(position);
        for sample in samples {
            let Some(step) = gathering.report.steps.iter_mut().find(|s| s.step_id == sample.step_id) else { continue };
            if step.nodes.iter().any(|n| n == node) && !step.samples.iter().any(|s| s.node == node) {
                step.samples.push(NodeSample { node: node.to_owned(), sample });
            }
        }
        if !gathering.waiting.is_empty() {
            return None;
        }
        self.pending.remove(&query).map(|g| (g.reply, finished(g.report)))
    }

    /// The questions whose time is up, with what came.
    pub(super) fn expired(&mut self, now: Instant) -> Vec<(oneshot::Sender<Response>, StatReport)> {
        let due: Vec<u64> = self.pending.iter().filter(|(_, g)| g.deadline <= now).map(|(q, _)| *q).collect();
        due.into_iter().filter_map(|q| self.pending.remove(&q)).map(|g| (g.reply, finished(g.report))).collect()
    }
}

/// The report with each step's samples in the order of the step's nodes.
pub(super) fn finished(mut report: StatReport) -> StatReport {
    for step in &mut report.steps {
        let order = |sample: &NodeSample| step.nodes.iter().position(|n| *n == sample.node);
        step.samples.sort_by_key(order);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::job::StepId;
    use drover_shared::proto::stat::StepStat;

    fn report() -> StatReport {
        let step = |step_id, nodes: &[&str]| StepStat {
            step_id,
            num_tasks: 2,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            samples: Vec::new(),
        };
        StatReport { job_id: 7, steps: vec![step(StepId::Batch, &["n1"]), step(StepId::Numbered(0), &["n1", "n2"])] }
    }

    fn sample(step_id: StepId, cpu_usec: u64) -> StepSample {
        StepSample { step_id, cpu_usec, ..StepSample::default() }
    }

    #[test]
    fn a_question_is_answered_when_every_node_asked_answered() {
        let mut queries = StatQueries::default();
        let (reply, _answer) = oneshot::channel();
        let now = Instant::now();
        let query = queries.start(reply, report(), vec!["n1".into(), "n2".into()], now).unwrap();
        // Another job's answer, a node not asked, a step the node does not run: dropped.
        assert!(queries.answer(query, "n2", 8, vec![sample(StepId::Numbered(0), 1)]).is_none());
        assert!(queries.answer(query, "n3", 7, vec![sample(StepId::Numbered(0), 1)]).is_none());
        let n2 = vec![sample(StepId::Batch, 99), sample(StepId::Numbered(0), 2)];
        assert!(queries.answer(query, "n2", 7, n2).is_none(), "n1 has not answered");
        let n1 = vec![sample(StepId::Numbered(0), 1), sample(StepId::Batch, 5), sample(StepId::Numbered(9), 1)];
        let (_, done) = queries.answer(query, "n1", 7, n1).expect("all answered");
        let batch: Vec<(&str, u64)> =
            done.steps[0].samples.iter().map(|s| (s.node.as_str(), s.sample.cpu_usec)).collect();
        assert_eq!(batch, [("n1", 5)], "the batch step runs on n1 only");
        let step: Vec<(&str, u64)> =
            done.steps[1].samples.iter().map(|s| (s.node.as_str(), s.sample.cpu_usec)).collect();
        assert_eq!(step, [("n1", 1), ("n2", 2)], "in the step's node order");
        assert!(queries.answer(query, "n1", 7, Vec::new()).is_none(), "answered once");
    }

    #[test]
    fn questions_expire_with_what_came_and_are_bounded() {
        let mut queries = StatQueries::default();
        let now = Instant::now();
        let (reply, _answer) = oneshot::channel();
        let query = queries.start(reply, report(), vec!["n1".into(), "n2".into()], now).unwrap();
        assert!(queries.answer(query, "n1", 7, vec![sample(StepId::Batch, 5)]).is_none());
        assert!(queries.expired(now + Duration::from_secs(1)).is_empty());
        let expired = queries.expired(now + Duration::from_secs(GATHER_TIMEOUT_SECS));
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].1.steps[0].samples.len(), 1);
        assert!(queries.answer(query, "n2", 7, Vec::new()).is_none(), "too late");
        let mut answers = Vec::new();
        for _ in 0..MAX_GATHERING {
            let (reply, answer) = oneshot::channel();
            answers.push(answer);
            assert!(queries.start(reply, report(), vec!["n1".into()], now).is_ok());
        }
        let (reply, _answer) = oneshot::channel();
        assert!(queries.start(reply, report(), vec!["n1".into()], now).is_err());
    }
}
