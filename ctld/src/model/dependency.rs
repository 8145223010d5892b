//! A job's `--dependency` as ctld keeps it: the parsed items and where each stands, and the
//! cache of parsed dependencies the scheduling passes share (in the state, so it survives between
//! passes). Parsing, evaluation and the refresh are policy (`policy/dependency.rs`).

use drover_shared::job::JobId;
use std::collections::HashMap;
use std::sync::Arc;

/// The kinds of dependency Drover supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    After,
    AfterAny,
    AfterOk,
    AfterNotOk,
    Singleton,
    AfterCorr,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::After => "after",
            Kind::AfterAny => "afterany",
            Kind::AfterOk => "afterok",
            Kind::AfterNotOk => "afternotok",
            Kind::Singleton => "singleton",
            Kind::AfterCorr => "aftercorr",
        }
    }
}

/// One condition: a kind and, except for `singleton`, one job or array task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) kind: Kind,
    pub(crate) target: Option<(JobId, Option<u32>)>,
    /// `after:N+M`: minutes after the target started.
    pub(crate) delay_minutes: u32,
}

/// A parsed `--dependency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dependency {
    pub(crate) items: Vec<Item>,
    /// Joined by `?`: any item suffices.
    pub(crate) any: bool,
}

/// Where one item or the whole dependency stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Status {
    Satisfied,
    Waiting,
    Never,
}

/// What ctld keeps between passes about each pending dependent job: its parsed dependency, and
/// a hash of its items' statuses when its shown text was last worked out (the text is rebuilt
/// only when they change). `scontrol update` of a dependency forgets the job's entries.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    pub(crate) parsed: HashMap<JobId, Arc<Dependency>>,
    pub(crate) shown: HashMap<JobId, u64>,
    /// Where the dependencies that only wait for ends (`afterok`, `afterany`, `afternotok`)
    /// stood at the last refresh. No job ends during the passes that follow it, so they hold
    /// for those passes (`Lookup::for_pass` in `policy/dependency.rs`), however many an array's starts take.
    pub(crate) stable: HashMap<JobId, Status>,
}

impl Cache {
    /// The job's dependency changed.
    pub(crate) fn forget(&mut self, job_id: JobId) {
        self.parsed.remove(&job_id);
        self.shown.remove(&job_id);
        self.stable.remove(&job_id);
    }

    /// Jobs ended after the refresh (cancelled for a dependency never satisfied): the statuses
    /// it worked out may no longer hold for the passes that follow.
    pub(crate) fn jobs_ended(&mut self) {
        self.stable.clear();
    }
}
