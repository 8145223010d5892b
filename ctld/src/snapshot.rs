//! Read snapshots for job queries. Each job's `JobInfo` is held copy-on-write ([`Shared`]): the
//! core mutates it in place as before (every write files the job id in a dirty set), and a
//! snapshot is chunks of `Arc`s to the records as they were. After each batch of events and each
//! pass the core rebuilds only the chunks that hold a changed job and publishes the snapshot
//! through a `watch` channel. `squeue` and `scontrol show job` filter and encode a snapshot on
//! their connection's task, so they never wait behind a scheduling pass and a pass never waits
//! behind them. The dirty set is global: a process has one [`Publisher`] (ctld's core).

use crate::state::State;
use drover_shared::UnixTime;
use drover_shared::job::fields::{JobFields, JobInfoView};
use drover_shared::job::{JobId, JobInfo};
use drover_shared::proto::client::JobQuery;
#[cfg(test)]
use drover_shared::proto::client::Response;
use serde::ser::{Serialize, SerializeStructVariant, Serializer};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::Mutex;

/// Jobs per snapshot chunk: a publish rebuilds only the chunks whose jobs changed.
const CHUNK: u32 = 1024;

/// Ids of the jobs changed since the last publish (any mutable access counts, so it may
/// overcount; it never misses a change made through [`Shared`] or [`touch`]).
static DIRTY: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// Records that a job's record, or whether it is visible, changed.
pub(crate) fn touch(job_id: JobId) {
    if let Ok(mut dirty) = DIRTY.lock() {
        dirty.insert(job_id);
    }
}

/// What a shared value is filed under in the dirty set.
pub(crate) trait Keyed {
    fn key(&self) -> JobId;
}

impl Keyed for JobInfo {
    fn key(&self) -> JobId {
        self.job_id
    }
}

/// A value shared copy-on-write with published snapshots: reading is free; the first write
/// after a snapshot took it copies it, and every write marks it changed.
#[derive(Debug, Default)]
pub(crate) struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    pub(crate) fn new(value: T) -> Shared<T> {
        Shared(Arc::new(value))
    }

    /// Another reference to the current value.
    pub(crate) fn share(&self) -> Arc<T> {
        Arc::clone(&self.0)
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
        &self.0
    }
}

impl<T: Clone + Keyed> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        touch(self.0.key());
        Arc::make_mut(&mut self.0)
    }
}

/// The visible (committed) jobs at one moment, in job id order, in chunks of [`CHUNK`] ids.
#[derive(Debug, Default)]
pub(crate) struct JobsSnapshot {
    chunks: Vec<Arc<Chunk>>,
}

impl JobsSnapshot {
    /// Every visible job, in id order.
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
    encoded: Mutex<Option<Encoded>>,
}

/// One query's answer part for one chunk: how many records matched and their bytes.
#[derive(Debug)]
struct Encoded {
    query: JobQuery,
    fields: JobFields,
    count: usize,
    bytes: Arc<[u8]>,
}

impl Chunk {
    fn new(jobs: Vec<Arc<JobInfo>>) -> Chunk {
        Chunk { jobs, encoded: Mutex::new(None) }
    }

    /// The records matching `query`, encoded for `fields`: from the cache when the last query was
    /// the same (pollers repeat theirs), else encoded and cached.
    fn encode(&self, query: &JobQuery, fields: JobFields) -> Result<(usize, Arc<[u8]>), postcard::Error> {
        let mut cached = self.encoded.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(hit) = cached.as_ref().filter(|e| e.fields == fields && e.query == *query) {
            return Ok((hit.count, Arc::clone(&hit.bytes)));
        }
        let (mut count, mut bytes) = (0, Vec::new());
        for job in self.jobs.iter().filter(|job| matches(query, job)) {
            count += 1;
            bytes = if fields == JobFields::ALL {
                postcard::to_extend(&**job, bytes)?
            } else {
                postcard::to_extend(&JobInfoView::new(job, fields), bytes)?
            };
        }
        let bytes: Arc<[u8]> = bytes.into();
        *cached = Some(Encoded { query: query.clone(), fields, count, bytes: Arc::clone(&bytes) });
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
    pub(crate) fn publish(&mut self, state: &State) {
        let dirty = DIRTY.lock().map(|mut d| std::mem::take(&mut *d)).unwrap_or_default();
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

/// The answer to a job query: encodes exactly as `Response::Jobs { now, jobs }` (the wire
/// contract), but from the snapshot's shared records, without copying them.
#[derive(Debug)]
pub(crate) struct JobsAnswer {
    pub(crate) now: UnixTime,
    pub(crate) jobs: Vec<Arc<JobInfo>>,
    /// The text and list fields the client asked for.
    pub(crate) fields: JobFields,
}

/// `Response::Jobs`'s position among `Response`'s variants (checked by a test against the enum).
const JOBS_VARIANT: u32 = 1;

impl Serialize for JobsAnswer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Records<'a>(&'a [Arc<JobInfo>], JobFields);
        impl Serialize for Records<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                if self.1 == JobFields::ALL {
                    serializer.collect_seq(self.0.iter().map(|job| &**job))
                } else {
                    serializer.collect_seq(self.0.iter().map(|job| JobInfoView::new(job, self.1)))
                }
            }
        }
        let mut variant = serializer.serialize_struct_variant("Response", JOBS_VARIANT, "Jobs", 2)?;
        variant.serialize_field("now", &self.now)?;
        variant.serialize_field("jobs", &Records(&self.jobs, self.fields))?;
        variant.end()
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

/// Answers a job query from a snapshot.
pub(crate) fn query_jobs(snapshot: &JobsSnapshot, query: &JobQuery, fields: JobFields, now: UnixTime) -> JobsAnswer {
    let jobs = snapshot.jobs().filter(|j| matches(query, j)).cloned().collect();
    JobsAnswer { now, jobs, fields }
}

/// Answers a job query from a snapshot as the encoded payload of `Response::Jobs`, each chunk's
/// part reused when the previous query of that chunk asked the same: a poller repeating its
/// query over 100,000 unchanged jobs costs a copy of their bytes, not their encoding.
pub(crate) fn encode_jobs(
    snapshot: &JobsSnapshot,
    query: &JobQuery,
    fields: JobFields,
    now: UnixTime,
) -> Result<Vec<u8>, postcard::Error> {
    let parts = snapshot.chunks.iter().map(|chunk| chunk.encode(query, fields)).collect::<Result<Vec<_>, _>>()?;
    let count: usize = parts.iter().map(|(count, _)| count).sum();
    let size: usize = parts.iter().map(|(_, bytes)| bytes.len()).sum();
    let mut out = postcard::to_extend(&JOBS_VARIANT, Vec::with_capacity(size + 24))?;
    out = postcard::to_extend(&now, out)?;
    out = postcard::to_extend(&count, out)?;
    for (_, bytes) in &parts {
        out.extend_from_slice(bytes);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_shared::job::JobState;

    /// The copy-free answer encodes byte for byte like the protocol's `Response::Jobs`.
    #[test]
    fn jobs_answer_encodes_as_response_jobs() {
        let jobs: Vec<JobInfo> = (1..=3)
            .map(|job_id| JobInfo {
                job_id,
                name: format!("job{job_id}"),
                user: "alice".into(),
                partition: "main".into(),
                state: Some(if job_id == 2 { JobState::Running } else { JobState::Pending }),
                reason: "Priority".into(),
                nodes: vec!["n1".into()],
                ..JobInfo::default()
            })
            .collect();
        let answer = JobsAnswer {
            now: 1_700_000_000,
            jobs: jobs.iter().cloned().map(Arc::new).collect(),
            fields: JobFields::ALL,
        };
        let expected = Response::Jobs { now: 1_700_000_000, jobs };
        assert_eq!(postcard::to_allocvec(&answer).unwrap(), postcard::to_allocvec(&expected).unwrap());
        let empty = JobsAnswer { now: 5, jobs: Vec::new(), fields: JobFields::NAME };
        let expected = Response::Jobs { now: 5, jobs: Vec::new() };
        assert_eq!(postcard::to_allocvec(&empty).unwrap(), postcard::to_allocvec(&expected).unwrap());
    }

    /// The encoded answer is `Response::Jobs` byte for byte, for every filter and field set; a
    /// repeated query reuses the chunk parts, and a changed job's chunk is encoded afresh.
    #[test]
    fn encoded_answers_match_response_jobs_and_follow_changes() {
        let mut state = state();
        let (mut publisher, rx) = Publisher::new();
        let ids: Vec<JobId> = (0..5).map(|i| 2_000_000_000 + i * (CHUNK / 2)).collect();
        for &id in &ids {
            add(&mut state, id, true);
        }
        state.jobs.get_mut(&ids[1]).unwrap().info.uid = 7;
        state.jobs.get_mut(&ids[2]).unwrap().info.state = Some(JobState::Completed);
        publisher.publish(&state);
        let expected = |query: &JobQuery, fields: JobFields, snapshot: &JobsSnapshot| {
            let jobs = snapshot
                .jobs()
                .filter(|j| matches(query, j))
                .map(|j| drover_shared::job::fields::project(j, fields))
                .collect();
            postcard::to_allocvec(&Response::Jobs { now: 9, jobs }).unwrap()
        };
        let queries = [
            JobQuery::default(),
            JobQuery { users: vec![7], ..JobQuery::default() },
            JobQuery { include_finished: true, ..JobQuery::default() },
            JobQuery { job_ids: vec![ids[3]], ..JobQuery::default() },
        ];
        for query in &queries {
            for fields in [JobFields::ALL, JobFields::NONE, JobFields::REASON] {
                let snapshot = rx.borrow().clone();
                let first = encode_jobs(&snapshot, query, fields, 9).unwrap();
                assert_eq!(first, expected(query, fields, &snapshot), "{query:?} {fields:?}");
                assert_eq!(encode_jobs(&snapshot, query, fields, 9).unwrap(), first);
            }
        }
        let before = encode_jobs(&rx.borrow().clone(), &queries[0], JobFields::REASON, 9).unwrap();
        state.jobs.get_mut(&ids[4]).unwrap().info.reason = "Resources".into();
        publisher.publish(&state);
        let snapshot = rx.borrow().clone();
        let after = encode_jobs(&snapshot, &queries[0], JobFields::REASON, 9).unwrap();
        assert_ne!(after, before);
        assert_eq!(after, expected(&queries[0], JobFields::REASON, &snapshot));
    }

    /// A snapshot shares records until the core writes one; the write copies it and counts.
    #[test]
    fn writes_copy_and_count() {
        let mut info = Shared::new(JobInfo { job_id: 4_000_000_007, ..JobInfo::default() });
        let taken = info.share();
        info.reason = "Resources".into();
        assert!(DIRTY.lock().unwrap().contains(&4_000_000_007));
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
        let job = crate::state::Job {
            info: info.into(),
            spec: Arc::default(),
            candidates: Vec::new(),
            alloc: None,
            committed,
            launched_at: None,
            cancel_requested_by: None,
        };
        state.jobs.insert(job_id, job);
        touch(job_id);
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
        publisher.publish(&state);
        let first = rx.borrow().clone();
        assert_eq!(visible(&rx).iter().map(|(id, _)| *id).collect::<Vec<_>>(), ids);

        state.jobs.get_mut(&ids[2]).unwrap().info.reason = "Resources".into();
        state.jobs.get_mut(&3_000_000_003).unwrap().committed = true;
        touch(3_000_000_003);
        state.jobs.remove(&ids[0]);
        touch(ids[0]);
        publisher.publish(&state);
        assert_eq!(
            visible(&rx),
            vec![(ids[1], "None".to_owned()), (3_000_000_003, "None".to_owned()), (ids[2], "Resources".to_owned())]
        );
        assert_eq!(first.jobs().map(|j| (j.job_id, j.reason.as_str())).last(), Some((ids[2], "None")));
        assert_eq!(first.jobs().count(), 3);

        // Nothing changed: the published snapshot stays the same object.
        let before = rx.borrow().clone();
        publisher.publish(&state);
        assert!(Arc::ptr_eq(&before, &rx.borrow()));
    }
}
