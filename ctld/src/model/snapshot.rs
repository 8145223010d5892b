//! Read snapshots for job queries. Each job's `JobInfo` is held copy-on-write ([`Shared`]): the
//! core mutates it in place as before (every write files the job id in a dirty set), and a
//! snapshot is chunks of `Arc`s to the records as they were. After each batch of events and each
//! pass the core rebuilds only the chunks that hold a changed job and publishes the snapshot
//! through a `watch` channel. `squeue` and `scontrol show job` filter and encode a snapshot on
//! their connection's task, so they never wait behind a scheduling pass and a pass never waits
//! behind them. The changed job ids are filed by the job table itself
//! ([`crate::model::state::Jobs`]), which the publisher asks for them: plain state of the core,
//! so any number of cores (tests run many at once) publish independently.

use crate::model::state::State;
use drover_shared::UnixTime;
use drover_shared::job::fields::{JobFields, JobInfoView};
use drover_shared::job::{JobId, JobInfo};
use drover_shared::proto::client::JobQuery;
#[cfg(test)]
use drover_shared::proto::client::Response;
use drover_shared::proto::client::push_job_line;
use drover_shared::proto::records::{JOB_LINES_VARIANT, JOBS_VARIANT};
use drover_shared::queue_lines::{self, LineFormat};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::Mutex;

/// Jobs per snapshot chunk: a publish rebuilds only the chunks whose jobs changed.
const CHUNK: u32 = 1024;

/// A value shared copy-on-write with published snapshots: reading is free; the first write
/// after a snapshot took it copies it, and every write marks it changed (a flag the job table
/// reads back, see [`crate::model::state::Jobs`]).
#[derive(Debug, Default)]
pub(crate) struct Shared<T> {
    value: Arc<T>,
    changed: bool,
}

impl<T> Shared<T> {
    pub(crate) fn new(value: T) -> Shared<T> {
        Shared { value: Arc::new(value), changed: true }
    }

    /// Another reference to the current value.
    pub(crate) fn share(&self) -> Arc<T> {
        Arc::clone(&self.value)
    }

    /// Whether it was written since the last call (or since it was made), and forgets that.
    pub(crate) fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Shared<T> {
        Shared::new(value)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.changed = true;
        Arc::make_mut(&mut self.value)
    }
}

/// The visible (committed) jobs at one moment, in job id order, in chunks of [`CHUNK`] ids.
#[derive(Debug, Default)]
pub(crate) struct JobsSnapshot {
    chunks: Vec<Arc<Chunk>>,
}

impl JobsSnapshot {
    /// The uid of job `job_id` if the snapshot holds it (array tasks under their own ids).
    pub(crate) fn owner(&self, job_id: JobId) -> Option<u32> {
        let chunk = self.chunks.iter().find(|c| c.jobs.first().is_some_and(|j| j.job_id / CHUNK == job_id / CHUNK))?;
        chunk.jobs.iter().find(|j| j.job_id == job_id).map(|j| j.uid)
    }

    /// Every visible job, in id order.
    #[cfg(test)]
    pub(crate) fn jobs(&self) -> impl Iterator<Item = &Arc<JobInfo>> {
        self.chunks.iter().flat_map(|chunk| chunk.jobs.iter())
    }
}

/// Up to [`CHUNK`] consecutive ids' records, and the encoding of the last query that read them.
/// A chunk is never changed: a publish replaces the chunks whose jobs changed, so a cached
/// encoding is always of the records the chunk holds.
#[derive(Debug)]
struct Chunk {
    jobs: Vec<Arc<JobInfo>>,
    /// Whether a job here has started and not ended (its elapsed time moves with the clock).
    clock_moves: bool,
    /// The last query's encoding. Shared, not owned by one task: the chunk is read by every
    /// query holding the snapshot, each on its own blocking thread, and whichever encodes last
    /// leaves its bytes here for the pollers that follow. The lock is held only to copy the
    /// cached parts out or to store new ones, never while encoding.
    encoded: Mutex<Option<Encoded>>,
}

/// One query's answer part for one chunk: how many jobs matched and their bytes.
#[derive(Debug)]
struct Encoded {
    query: JobQuery,
    ask: Ask,
    count: usize,
    bytes: Arc<[u8]>,
}

/// What a query wants of each matching job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ask {
    /// Its record with these text and list fields (`Response::Jobs`).
    Records(JobFields),
    /// Its rendered line and sort key (`Response::JobLines`), at the given clock when the line
    /// moves with it (the format shows elapsed time and the chunk holds a started job).
    Lines(Arc<LineFormat>, Option<UnixTime>),
}

impl Chunk {
    fn new(jobs: Vec<Arc<JobInfo>>) -> Chunk {
        let clock_moves = jobs.iter().any(|j| j.start_time.is_some() && j.end_time.is_none());
        Chunk { jobs, clock_moves, encoded: Mutex::new(None) }
    }

    /// The jobs matching `query`, encoded as `ask` says: from the cache when the last query was
    /// the same (pollers repeat theirs), else encoded and cached.
    fn encode(&self, query: &JobQuery, ask: &Ask, now: UnixTime) -> Result<(usize, Arc<[u8]>), postcard::Error> {
        let ask = match ask {
            Ask::Lines(format, _) => {
                Ask::Lines(Arc::clone(format), (self.clock_moves && format.uses_clock()).then_some(now))
            }
            records => records.clone(),
        };
        let mut cached = self.encoded.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(hit) = cached.as_ref().filter(|e| e.ask == ask && e.query == *query) {
            return Ok((hit.count, Arc::clone(&hit.bytes)));
        }
        let matching = self.jobs.iter().filter(|job| matches(query, job));
        let (mut count, mut bytes) = (0, Vec::new());
        match &ask {
            Ask::Records(JobFields::ALL) => {
                for job in matching {
                    count += 1;
                    bytes = postcard::to_extend(&**job, bytes)?;
                }
            }
            Ask::Records(fields) => {
                for job in matching {
                    count += 1;
                    bytes = postcard::to_extend(&JobInfoView::new(job, *fields), bytes)?;
                }
            }
            Ask::Lines(format, _) => {
                let (mut line, mut key, mut cell) = (String::new(), Vec::new(), String::new());
                for job in matching {
                    count += 1;
                    line.clear();
                    key.clear();
                    queue_lines::render_line(format, job, now, &mut line, &mut key, &mut cell);
                    push_job_line(&mut bytes, &key, line.as_bytes());
                }
            }
        }
        let bytes: Arc<[u8]> = bytes.into();
        *cached = Some(Encoded { query: query.clone(), ask, count, bytes: Arc::clone(&bytes) });
        Ok((count, bytes))
    }
}

/// What the core keeps to publish snapshots.
#[derive(Debug)]
pub(crate) struct Publisher {
    tx: tokio::sync::watch::Sender<Arc<JobsSnapshot>>,
    /// Chunk index → its jobs, as last published.
    chunks: BTreeMap<u32, Arc<Chunk>>,
    built: bool,
}

impl Publisher {
    pub(crate) fn new() -> (Publisher, tokio::sync::watch::Receiver<Arc<JobsSnapshot>>) {
        let (tx, rx) = tokio::sync::watch::channel(Arc::new(JobsSnapshot::default()));
        (Publisher { tx, chunks: BTreeMap::new(), built: false }, rx)
    }

    /// Publishes a new snapshot if any job changed since the last one, rebuilding only the
    /// chunks that hold a changed job.
    pub(crate) fn publish(&mut self, state: &mut State) {
        let dirty = state.jobs.take_changed();
        let chunks: BTreeSet<u32> = if self.built {
            dirty.iter().map(|id| id / CHUNK).collect()
        } else {
            self.built = true;
            state.jobs.keys().map(|id| id / CHUNK).collect()
        };
        if chunks.is_empty() {
            return;
        }
        let mut changed = false;
        for chunk in chunks {
            let (first, last) = (chunk * CHUNK, chunk.saturating_mul(CHUNK).saturating_add(CHUNK - 1));
            let jobs: Vec<Arc<JobInfo>> = state
                .jobs
                .range(first..=last)
                .map(|(_, j)| j)
                .filter(|j| j.committed)
                .map(|j| j.info.share())
                .collect();
            if jobs.is_empty() {
                changed |= self.chunks.remove(&chunk).is_some();
            } else {
                self.chunks.insert(chunk, Arc::new(Chunk::new(jobs)));
                changed = true;
            }
        }
        if !changed {
            return;
        }
        let snapshot = JobsSnapshot { chunks: self.chunks.values().cloned().collect() };
        self.tx.send_replace(Arc::new(snapshot));
    }
}

/// Whether `job` answers `query` (the filters the core used to apply to its own state).
fn matches(query: &JobQuery, j: &JobInfo) -> bool {
    (query.job_ids.is_empty()
        || query.job_ids.contains(&j.job_id)
        || j.array_job_id.is_some_and(|a| query.job_ids.contains(&a)))
        && (query.include_finished || !query.job_ids.is_empty() || !j.state().is_terminal())
        && (query.users.is_empty() || query.users.contains(&j.uid))
        && (query.partitions.is_empty() || j.partition.split(',').any(|p| query.partitions.iter().any(|q| q == p)))
        && (query.states.is_empty() || query.states.contains(&j.state()))
}

/// Answers a job query from a snapshot as an encoded payload: `Response::Jobs` for records,
/// `Response::JobLines` for lines. Each chunk's part is reused when the previous query of that
/// chunk asked the same: a poller repeating its query over 100,000 unchanged jobs costs a copy of
/// their bytes, not their encoding.
pub(crate) fn encode_jobs(
    snapshot: &JobsSnapshot,
    query: &JobQuery,
    ask: &Ask,
    now: UnixTime,
) -> Result<Vec<u8>, postcard::Error> {
    let parts = snapshot.chunks.iter().map(|chunk| chunk.encode(query, ask, now)).collect::<Result<Vec<_>, _>>()?;
    let count: usize = parts.iter().map(|(count, _)| count).sum();
    let size: usize = parts.iter().map(|(_, bytes)| bytes.len()).sum();
    let mut out = Vec::with_capacity(size + 32);
    match ask {
        Ask::Records(_) => {
            out = postcard::to_extend(&JOBS_VARIANT, out)?;
            out = postcard::to_extend(&now, out)?;
            out = postcard::to_extend(&count, out)?;
        }
        Ask::Lines(..) => {
            out = postcard::to_extend(&JOB_LINES_VARIANT, out)?;
            out = postcard::to_extend(&now, out)?;
            out = postcard::to_extend(&u32::try_from(count).unwrap_or(u32::MAX), out)?;
            out = postcard::to_extend(&size, out)?;
        }
    }
    for (_, bytes) in &parts {
        out.extend_from_slice(bytes);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::job::JobState;

    /// Line answers are `Response::JobLines` with every matching job's rendered line and key; a
    /// chunk with a running job is rendered again when the clock moves, one of pending jobs is not.
    #[test]
    fn line_answers_render_every_job_and_follow_the_clock() {
        use drover_shared::queue_lines::{Field, LineColumn, SortKey};
        let mut state = state();
        let (mut publisher, rx) = Publisher::new();
        let ids: Vec<JobId> = (0..3).map(|i| 1_000_000_000 + i * CHUNK).collect();
        for &id in &ids {
            add(&mut state, id, true);
        }
        let running = &mut state.jobs.get_mut(&ids[1]).unwrap().info;
        running.state = Some(JobState::Running);
        running.start_time = Some(100);
        publisher.publish(&mut state);
        let column =
            |field| LineColumn { prefix: String::new(), field, width: Some(10), right: true, suffix: " ".into() };
        let format = Arc::new(LineFormat {
            columns: vec![column(Field::JobId), column(Field::TimeUsed), column(Field::ReasonList)],
            sort: vec![SortKey { letter: 'M', descending: true }],
        });
        let snapshot = rx.borrow().clone();
        let expected = |now| {
            let mut rows = Vec::new();
            let (mut line, mut key, mut cell) = (String::new(), Vec::new(), String::new());
            for job in snapshot.jobs() {
                line.clear();
                key.clear();
                queue_lines::render_line(&format, job, now, &mut line, &mut key, &mut cell);
                push_job_line(&mut rows, &key, line.as_bytes());
            }
            postcard::to_allocvec(&Response::JobLines { now, count: 3, rows }).unwrap()
        };
        let ask = Ask::Lines(Arc::clone(&format), None);
        let at_160 = encode_jobs(&snapshot, &JobQuery::default(), &ask, 160).unwrap();
        assert_eq!(at_160, expected(160));
        let answer: Response = postcard::from_bytes(&at_160).unwrap();
        let Response::JobLines { rows, .. } = answer else { panic!("not lines") };
        let lines = drover_shared::proto::client::job_lines(&rows).unwrap();
        assert_eq!(std::str::from_utf8(lines[1].line).unwrap(), format!("{:>10} {:>10} {:>10} \n", ids[1], "1:00", ""));
        let at_220 = encode_jobs(&snapshot, &JobQuery::default(), &ask, 220).unwrap();
        assert_eq!(at_220, expected(220));
        assert_ne!(at_160, at_220);
        // The pending jobs' chunks kept their parts (cached without the clock).
        let pending = snapshot.chunks[0].encoded.lock().unwrap();
        assert!(matches!(&pending.as_ref().unwrap().ask, Ask::Lines(_, None)));
    }

    /// A snapshot shares records until the core writes one; the write copies it and counts.
    #[test]
    fn writes_copy_and_count() {
        let mut info = Shared::new(JobInfo { job_id: 4_000_000_007, ..JobInfo::default() });
        assert!(info.take_changed(), "a new record counts as changed");
        let taken = info.share();
        assert!(!info.take_changed());
        info.reason = "Resources".into();
        assert!(info.take_changed());
        assert!(!info.take_changed());
        assert_eq!(taken.reason, "");
        assert_eq!(info.reason, "Resources");
        assert!(!Arc::ptr_eq(&taken, &info.share()));
    }

    fn state() -> State {
        let text = "cluster_name = \"c\"\ndefault_account = \"shared\"\n[controller]\naddress = \"127.0.0.1:6817\"\n\
            state_dir = \"state\"\n[[nodes]]\nnames = \"n1\"\ncpus = 4\nreal_memory = 8000\n\
            [[partitions]]\nname = \"main\"\nnodes = \"n1\"\ndefault = true\n[[accounts]]\nname = \"shared\"\n";
        let config = drover_shared::config::Config::parse(std::path::Path::new("/c.toml"), text).unwrap();
        State::new(Arc::new(config), 1)
    }

    fn add(state: &mut State, job_id: JobId, committed: bool) {
        let info = JobInfo { job_id, state: Some(JobState::Pending), reason: "None".into(), ..JobInfo::default() };
        let job = crate::model::state::Job {
            info: info.into(),
            spec: Arc::default(),
            candidates: Arc::from([]),
            node_filter: None,
            alloc: None,
            committed,
            launched_at: None,
            cancel_requested_by: None,
            started: false,
            reason_id: 0,
        };
        state.jobs.insert(job_id, job);
    }

    fn visible(rx: &tokio::sync::watch::Receiver<Arc<JobsSnapshot>>) -> Vec<(JobId, String)> {
        rx.borrow().jobs().map(|j| (j.job_id, j.reason.clone())).collect()
    }

    /// Publishing rebuilds only what changed, yet every publish shows exactly the committed jobs
    /// as they are now, across chunks; an earlier snapshot keeps what it saw.
    #[test]
    fn incremental_publish_shows_the_current_jobs() {
        let mut state = state();
        let (mut publisher, rx) = Publisher::new();
        let ids = [3_000_000_001, 3_000_000_002, 3_000_000_000 + CHUNK * 3 + 5];
        for id in ids {
            add(&mut state, id, true);
        }
        add(&mut state, 3_000_000_003, false);
        publisher.publish(&mut state);
        let first = rx.borrow().clone();
        assert_eq!(visible(&rx).iter().map(|(id, _)| *id).collect::<Vec<_>>(), ids);

        state.jobs.get_mut(&ids[2]).unwrap().info.reason = "Resources".into();
        state.jobs.get_mut(&3_000_000_003).unwrap().committed = true;
        state.jobs.touch(3_000_000_003);
        state.jobs.remove(&ids[0]);
        publisher.publish(&mut state);
        assert_eq!(
            visible(&rx),
            vec![(ids[1], "None".to_owned()), (3_000_000_003, "None".to_owned()), (ids[2], "Resources".to_owned())]
        );
        assert_eq!(first.jobs().map(|j| (j.job_id, j.reason.as_str())).last(), Some((ids[2], "None")));
        assert_eq!(first.jobs().count(), 3);

        // Nothing changed: the published snapshot stays the same object.
        let before = rx.borrow().clone();
        publisher.publish(&mut state);
        assert!(Arc::ptr_eq(&before, &rx.borrow()));
        // Lent out mutably but not written (as a pass looks at every pending job): still the same.
        assert_eq!(state.jobs.get_mut(&ids[1]).unwrap().info.reason, "None");
        publisher.publish(&mut state);
        assert!(Arc::ptr_eq(&before, &rx.borrow()));
    }

    /// A pending reason the pass sets is published but files nothing again (a pass over a
    /// million waiting jobs sets a million reasons); the same reason again changes nothing.
    #[test]
    fn a_reason_is_published_without_filing_the_job_again() {
        let mut state = state();
        let (mut publisher, rx) = Publisher::new();
        let id = 2_000_000_001;
        add(&mut state, id, true);
        state.jobs.refile(0);
        publisher.publish(&mut state);
        assert!(!state.jobs.unfiled_contains(id));

        state.jobs.set_reason(id, "Resources");
        assert!(!state.jobs.unfiled_contains(id), "a reason alone filed the job again");
        publisher.publish(&mut state);
        assert_eq!(visible(&rx), vec![(id, "Resources".to_owned())]);

        let before = rx.borrow().clone();
        state.jobs.set_reason(id, "Resources");
        publisher.publish(&mut state);
        assert!(Arc::ptr_eq(&before, &rx.borrow()), "the same reason published a new snapshot");
        // Through get_mut, as before, the job is filed again.
        state.jobs.get_mut(&id).unwrap().info.reason = "Priority".into();
        assert!(state.jobs.unfiled_contains(id));
        // The reason changed other than through set_reason: the earlier one set again is written.
        state.jobs.set_reason(id, "Resources");
        assert_eq!(state.jobs.get(&id).unwrap().info.reason, "Resources");
        // Replaced whole (a requeue, a restart's load): the same.
        let mut job = state.jobs.remove(&id).unwrap();
        job.info.reason = "Priority".into();
        state.jobs.insert(id, job);
        state.jobs.set_reason(id, "Resources");
        assert_eq!(state.jobs.get(&id).unwrap().info.reason, "Resources");
    }

    /// A priority the ranking sets is published; it files the job again only when it becomes or
    /// stops being 0 (a held job's, out of the ready jobs), with or without a reason beside it.
    #[test]
    fn a_priority_files_the_job_again_only_across_zero() {
        let mut state = state();
        let (mut publisher, rx) = Publisher::new();
        let id = 2_000_000_002;
        add(&mut state, id, true); // priority 0
        state.jobs.refile(0);
        publisher.publish(&mut state);
        assert!(!state.jobs.ready_contains(id));
        let priority = |rx: &tokio::sync::watch::Receiver<Arc<JobsSnapshot>>| {
            rx.borrow().jobs().map(|j| (j.job_id, j.priority, j.reason.clone())).collect::<Vec<_>>()
        };

        state.jobs.set_priority(id, 5);
        assert!(state.jobs.unfiled_contains(id), "leaving 0 must file the job again");
        state.jobs.refile(0);
        assert!(state.jobs.ready_contains(id));
        publisher.publish(&mut state);
        assert_eq!(priority(&rx), vec![(id, 5, "None".to_owned())]);

        state.jobs.set_priority(id, 7);
        assert!(!state.jobs.unfiled_contains(id), "a priority above 0 alone filed the job again");
        state.jobs.set_reason_and_priority(id, "Resources", Some(9));
        assert!(!state.jobs.unfiled_contains(id));
        publisher.publish(&mut state);
        assert_eq!(priority(&rx), vec![(id, 9, "Resources".to_owned())]);

        // The same reason with a new priority still writes the priority.
        state.jobs.set_reason_and_priority(id, "Resources", Some(0));
        assert!(state.jobs.unfiled_contains(id), "reaching 0 must file the job again");
        state.jobs.refile(0);
        assert!(!state.jobs.ready_contains(id));
        publisher.publish(&mut state);
        assert_eq!(priority(&rx), vec![(id, 0, "Resources".to_owned())]);
    }
}
