//! What the core keeps between a change it queued for commit and the commit's report: a requeue
//! request's answer and its accepted runs, what a sacctmgr change replaced (put back if the
//! commit fails), and steps waiting to be answered and launched (with the CPUs running steps
//! hold).

use drover_shared::config::Config;
use drover_shared::job::{JobId, StepLayout, StepSpec};
use drover_shared::proto::client::{ErrorCode, Response};
use drover_shared::proto::node::JobRun;
use drover_shared::sacctmgr::edit::Edit;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::oneshot;

/// A requeue request whose intents are being committed.
#[derive(Debug)]
pub(super) struct Waiting {
    pub(super) reply: oneshot::Sender<Response>,
    pub(super) results: Vec<(JobId, Result<(), ErrorCode>)>,
    pub(super) accepted: Vec<JobRun>,
    pub(super) hold: bool,
}

/// What a stored change replaced, kept until its commit is reported (put back if it failed).
#[derive(Debug)]
pub(super) struct Undo {
    pub(super) config: Arc<Config>,
    pub(super) edits: Vec<Edit>,
}

/// Steps whose row is queued for commit, waiting to be answered and launched.
type PendingSteps = HashMap<(JobId, u32), (oneshot::Sender<Response>, Box<StepSpec>, StepLayout)>;

/// What the core remembers about steps besides their rows.
#[derive(Default)]
pub(crate) struct Steps {
    pub(super) pending: PendingSteps,
    /// CPUs each running step holds on each of its nodes (by node name); `--overlap` steps hold
    /// none. Lost on a ctld restart (steps then overlap until they end).
    pub(super) held: HashMap<(JobId, u32), Vec<(String, u32)>>,
}

impl Steps {
    /// Whether a step's answer waits for the commit of its row.
    pub(crate) fn commits_waiting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// CPUs the job's running steps hold on `node`.
    pub(super) fn held_on(&self, job_id: JobId, node: &str) -> u32 {
        self.held
            .iter()
            .filter(|((job, _), _)| *job == job_id)
            .flat_map(|(_, shares)| shares.iter())
            .filter(|(name, _)| name == node)
            .map(|(_, cpus)| cpus)
            .sum()
    }
}
