//! What is to happen to running jobs beyond their own course, in one place: what the end of a
//! job's current run does (the job pends again, held or not, after `scontrol requeue` or a
//! preemption that requeues; or it ends `PREEMPTED`), and the cancels due later (a preempted job
//! warned with its `--signal` is cancelled once its lead time is over). The core carries these
//! out when the run's end arrives or the time comes, and stores a requeue's intent so that it
//! survives a restart of ctld.

use drover_shared::UnixTime;
use drover_shared::job::JobId;
use std::collections::HashMap;

/// What the end of a job's current run does, besides recording the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnEnd {
    /// The job pends again under the same id, held if `hold` (`requeuehold`).
    Requeue { hold: bool },
    /// The job ends `PREEMPTED`.
    Preempted,
}

/// The end actions of running jobs and the cancels due later.
#[derive(Debug, Default)]
pub(crate) struct RunEnds {
    on_end: HashMap<JobId, OnEnd>,
    /// Due time, job, and the grace between its SIGTERM and SIGKILL (seconds).
    cancels: Vec<(UnixTime, JobId, u32)>,
}

impl RunEnds {
    /// Sets what the end of the job's current run does (replacing what was set).
    pub(crate) fn set(&mut self, job_id: JobId, on_end: OnEnd) {
        self.on_end.insert(job_id, on_end);
    }

    /// What the end of the job's current run does, taken: it applies once.
    pub(crate) fn take(&mut self, job_id: JobId) -> Option<OnEnd> {
        self.on_end.remove(&job_id)
    }

    /// Forgets the job's end action: its run ended some other way (its node failed and it was
    /// requeued for that).
    pub(crate) fn forget(&mut self, job_id: JobId) {
        self.on_end.remove(&job_id);
    }

    /// The requeues under way when ctld last stopped, as stored (job → held).
    pub(crate) fn restore_requeues(&mut self, requeues: HashMap<JobId, bool>) {
        for (job_id, hold) in requeues {
            self.on_end.insert(job_id, OnEnd::Requeue { hold });
        }
    }

    /// Cancels the job at `at`, with `grace` seconds between its SIGTERM and SIGKILL.
    pub(crate) fn cancel_at(&mut self, at: UnixTime, job_id: JobId, grace: u32) {
        self.cancels.push((at, job_id, grace));
    }

    /// The cancels due by `now` (job, grace), taken.
    pub(crate) fn due_cancels(&mut self, now: UnixTime) -> Vec<(JobId, u32)> {
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.cancels).into_iter().partition(|(at, _, _)| *at <= now);
        self.cancels = later;
        due.into_iter().map(|(_, job_id, grace)| (job_id, grace)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_action_applies_once_and_cancels_come_when_due() {
        let mut ends = RunEnds::default();
        ends.restore_requeues(HashMap::from([(1, true)]));
        ends.set(2, OnEnd::Preempted);
        assert_eq!(ends.take(1), Some(OnEnd::Requeue { hold: true }));
        assert_eq!(ends.take(1), None);
        ends.forget(2);
        assert_eq!(ends.take(2), None);
        ends.cancel_at(100, 3, 30);
        ends.cancel_at(200, 4, 30);
        assert!(ends.due_cancels(99).is_empty());
        assert_eq!(ends.due_cancels(150), vec![(3, 30)]);
        assert_eq!(ends.due_cancels(250), vec![(4, 30)]);
        assert!(ends.due_cancels(300).is_empty());
    }
}
