//! The core driven in process: no daemon, no socket, no SQLite. A [`Bench`] owns a [`Core`], the
//! receiving end of its database channel and a fake node link; each test feeds it events the way
//! the event loop does (handle, then publish), plays the writer by hand — acknowledging or failing
//! exactly the operations the core queued — and checks the commit invariants the end-to-end
//! tests check through real daemons: an answer never precedes its commit, a refused submission
//! uses no job id, a failed commit is answered with an error and leaves no job behind, and the end
//! of an earlier run is acknowledged after its commit and changes nothing. Each runs in
//! milliseconds.

use super::*;
use crate::model::snapshot::{JobsSnapshot, Publisher};
use crate::store::db::{AfterCommit, Queued};
use drover_shared::config::Config;
use drover_shared::job::WaitStatus;
use drover_shared::proto::client::ErrorCode;
use drover_shared::proto::node::{CtldMessage, JobEnd, JobOutcome};
use std::path::Path;
use tokio::sync::oneshot::error::TryRecvError;

const CONFIG: &str = r#"
cluster_name = "c"
default_account = "shared"
[controller]
address = "127.0.0.1:6817"
state_dir = "state"
[[nodes]]
names = "n1"
cpus = 4
real_memory = 8000
[[partitions]]
name = "main"
nodes = "n1"
default = true
max_time = "1-00:00:00"
[[accounts]]
name = "shared"
"#;

/// root: a uid every system names, so validation finds a user without the test adding one.
const ROOT: Caller = Caller { uid: 0, gid: 0, origin: crate::model::identity::Origin::Local };

/// A core with its outlets captured.
struct Bench {
    core: Core,
    /// What the core queued for the writer, not yet committed or failed by the test.
    db: std::sync::mpsc::Receiver<Queued>,
    /// The snapshots queries read.
    jobs: tokio::sync::watch::Receiver<Arc<JobsSnapshot>>,
    /// What ctld sent to node n1, once it registered.
    node: Option<mpsc::UnboundedReceiver<CtldMessage>>,
    /// The full specs the fake database holds (the writer reads them back for a launch).
    stored_specs: HashMap<JobId, Box<drover_shared::job::JobSpec>>,
}

impl Bench {
    fn new() -> Bench {
        let config = Config::parse(Path::new("/etc/drover/cluster.toml"), CONFIG).unwrap();
        let state = State::new(Arc::new(config), 1);
        let (db_tx, db) = std::sync::mpsc::channel();
        let (publisher, jobs) = Publisher::new();
        let core = Core::new(state, db_tx, "/nonexistent/ctld.sock".into(), publisher);
        Bench { core, db, jobs, node: None, stored_specs: HashMap::new() }
    }

    /// One event as the event loop handles it: handled, then a snapshot published (which sends
    /// the answers that waited for one).
    fn event(&mut self, event: Event) {
        self.core.handle(event);
        self.core.publish();
    }

    /// Sends a client request; the answer arrives on the returned receiver, if and when it comes.
    fn request(&mut self, request: Request) -> oneshot::Receiver<Response> {
        let (reply, answer) = oneshot::channel();
        self.event(Event::Client { caller: ROOT, request, reply });
        answer
    }

    /// The operations queued for the writer since the last call.
    fn queued(&mut self) -> Vec<Queued> {
        let mut flat = Vec::new();
        for item in self.db.try_iter() {
            item.flatten_into(&mut flat);
        }
        flat
    }

    /// Plays the writer: the transaction holding `ops` committed (`error: None`) or failed.
    fn report(&mut self, ops: Vec<Queued>, error: Option<&str>) {
        let n_ops = ops.len();
        let mut after = Vec::new();
        for op in ops {
            match op {
                Queued::Op(DbOp::InsertJob { info, spec, .. }) if error.is_none() => {
                    self.stored_specs.insert(info.job_id, spec);
                }
                Queued::After(AfterCommit::Launch(job_id, None)) => {
                    after.push(AfterCommit::Launch(job_id, self.stored_specs.get(&job_id).cloned()));
                }
                Queued::After(action) => after.push(action),
                _ => {}
            }
        }
        self.event(Event::Committed(CommitReport { after, error: error.map(str::to_owned), n_ops }));
    }

    /// Commits everything queued so far.
    fn commit(&mut self) {
        let ops = self.queued();
        self.report(ops, None);
    }

    /// Node n1 registers on connection 1, holding no jobs.
    fn register_node(&mut self) {
        let (tx, rx) = mpsc::unbounded_channel();
        let registration = NodeRegistration {
            name: "n1".into(),
            cpus: 4,
            real_memory_mb: 8000,
            gpus: Vec::new(),
            running: Vec::new(),
            version: "test".into(),
            boot_time: 1,
            start_time: 1,
        };
        self.event(Event::NodeConnected {
            registration,
            link: NodeLink { connection_id: 1, tx },
            address: "n1".into(),
        });
        self.node = Some(rx);
        self.commit();
        assert!(matches!(self.sent_to_node().as_slice(), [CtldMessage::Registered { .. }]));
    }

    /// What ctld sent to n1 since the last call.
    fn sent_to_node(&mut self) -> Vec<CtldMessage> {
        let node = self.node.as_mut().expect("n1 registered");
        std::iter::from_fn(|| node.try_recv().ok()).collect()
    }

    /// Submits a job and commits it; its id.
    fn submitted(&mut self) -> JobId {
        let mut answer = self.request(Request::Submit(Box::new(spec())));
        self.commit();
        match answer.try_recv() {
            Ok(Response::Submitted { job_id }) => job_id,
            other => panic!("expected an id, got {other:?}"),
        }
    }

    /// The ids the published snapshot shows.
    fn visible(&self) -> Vec<JobId> {
        self.jobs.borrow().jobs().map(|j| j.job_id).collect()
    }
}

fn spec() -> drover_shared::job::JobSpec {
    drover_shared::job::JobSpec { script: "#!/bin/sh\ntrue\n".into(), work_dir: "/".into(), ..Default::default() }
}

/// The database operations among what the core queued (its after-commit markers left out).
fn stored(queued: &[Queued]) -> impl Iterator<Item = &DbOp> {
    queued.iter().filter_map(|q| if let Queued::Op(op) = q { Some(op) } else { None })
}

fn inserts(ops: &[Queued]) -> Vec<JobId> {
    stored(ops)
        .filter_map(|op| match op {
            DbOp::InsertJob { info, .. } => Some(info.job_id),
            _ => None,
        })
        .collect()
}

/// `sbatch` gets its id only once the writer reports the insert committed, and the job is
/// visible to queries by then; until that report, nothing is answered and nothing shows.
#[test]
fn a_submission_is_answered_only_after_its_commit() {
    let mut bench = Bench::new();
    let mut answer = bench.request(Request::Submit(Box::new(spec())));
    let ops = bench.queued();
    assert_eq!(inserts(&ops), vec![1]);
    assert!(ops.iter().any(|op| matches!(op, Queued::After(AfterCommit::AnswerSubmit(1)))));
    assert_eq!(answer.try_recv(), Err(TryRecvError::Empty), "answered before the commit");
    assert!(bench.visible().is_empty(), "an uncommitted job is visible");
    // Other events pass and the answer still waits: only the commit report releases it.
    bench.event(Event::Tick);
    assert_eq!(answer.try_recv(), Err(TryRecvError::Empty), "answered before the commit");

    bench.report(ops, None);
    assert_eq!(answer.try_recv(), Ok(Response::Submitted { job_id: 1 }));
    assert_eq!(bench.visible(), vec![1], "answered before a snapshot showing the job");
}

/// A submission sent again under its key (its connection broke before the answer) makes no
/// second job: it is answered with the first one's id, once that is committed; another user's
/// identical key, a new key, and a key after a failed commit each make a job of their own.
#[test]
fn a_submission_sent_again_under_its_key_is_answered_with_its_job() {
    let mut bench = Bench::new();
    let key = vec![7u8; drover_shared::proto::client::SUBMIT_KEY_LEN];
    let once = |key: &[u8]| Request::SubmitOnce { key: key.to_vec(), spec: Box::new(spec()) };
    let mut first = bench.request(once(&key));
    let mut again = bench.request(once(&key));
    let ops = bench.queued();
    assert_eq!(inserts(&ops), vec![1], "one job for one key");
    assert!(stored(&ops).any(|op| matches!(op, DbOp::SubmitKey { job_id: 1, .. })), "the key is stored with the job");
    assert_eq!(again.try_recv(), Err(TryRecvError::Empty), "answered before the job's commit");
    bench.report(ops, None);
    assert_eq!(first.try_recv(), Ok(Response::Submitted { job_id: 1 }));
    assert_eq!(again.try_recv(), Ok(Response::Submitted { job_id: 1 }));
    // A new key is a new submission.
    let mut other = bench.request(once(&[8u8; drover_shared::proto::client::SUBMIT_KEY_LEN]));
    let ops = bench.queued();
    assert_eq!(inserts(&ops), vec![2]);
    // A batch that fails stores neither the job nor its key: sent again, it is new.
    bench.report(ops, Some("disk full"));
    assert!(matches!(other.try_recv(), Ok(Response::Error { code: ErrorCode::StorageUnavailable, .. })));
    let _retry = bench.request(once(&[8u8; drover_shared::proto::client::SUBMIT_KEY_LEN]));
    assert_eq!(inserts(&bench.queued()), vec![3]);
    // A key of the wrong length is refused.
    let mut short = bench.request(once(&[1, 2, 3]));
    assert!(matches!(short.try_recv(), Ok(Response::Error { code: ErrorCode::InvalidSpec, .. })));
}

/// A change (here `scancel`) is answered after its commit too, not when the core decides it.
#[test]
fn a_cancel_is_answered_only_after_its_commit() {
    let mut bench = Bench::new();
    let job_id = bench.submitted();
    let request = drover_shared::proto::client::CancelRequest { job_ids: vec![job_id], ..Default::default() };
    let mut answer = bench.request(Request::Cancel(request));
    let ops = bench.queued();
    assert!(stored(&ops).any(|op| matches!(op, DbOp::UpdateJob { info, .. } if info.job_id == job_id)));
    assert_eq!(answer.try_recv(), Err(TryRecvError::Empty), "answered before the commit");
    bench.report(ops, None);
    assert!(answer.try_recv().is_ok_and(|r| !matches!(r, Response::Error { .. })));
}

/// A refused submission is answered at once, queues no job and uses no id: the next accepted
/// one gets the id the refused one would have had.
#[test]
fn a_refused_submission_uses_no_job_id() {
    let mut bench = Bench::new();
    let first = bench.submitted();
    let refused = drover_shared::job::JobSpec { partitions: vec!["nosuch".into()], ..spec() };
    let mut answer = bench.request(Request::Submit(Box::new(refused)));
    assert!(matches!(answer.try_recv(), Ok(Response::Error { code: ErrorCode::InvalidPartition, .. })));
    let ops = bench.queued();
    assert!(inserts(&ops).is_empty(), "a refused submission queued a job");
    assert!(!ops.iter().any(|op| matches!(op, Queued::After(AfterCommit::AnswerSubmit(_)))));
    assert!(
        stored(&ops).any(|op| matches!(op, DbOp::Audit { action, job_id: None, .. } if action == "submit")),
        "refusal not audited"
    );
    assert_eq!(bench.core.state.jobs.len(), 1);
    bench.report(ops, None);
    assert_eq!(bench.submitted(), first + 1);
}

/// When the transaction holding a submission fails, the client gets an error, the job is
/// forgotten (never shown, never scheduled) and nothing of it reaches the database.
#[test]
fn a_failed_commit_answers_an_error_and_keeps_nothing() {
    let mut bench = Bench::new();
    let mut answer = bench.request(Request::Submit(Box::new(spec())));
    let ops = bench.queued();
    assert_eq!(inserts(&ops), vec![1]);
    bench.report(ops, Some("disk I/O error"));
    match answer.try_recv() {
        Ok(Response::Error { code: ErrorCode::StorageUnavailable, detail }) => assert_eq!(detail, "disk I/O error"),
        other => panic!("expected a storage error, got {other:?}"),
    }
    assert!(bench.core.state.jobs.is_empty(), "the failed job is still in memory");
    assert!(bench.visible().is_empty(), "the failed job is visible");
    assert!(bench.stored_specs.is_empty());
    // A pass has nothing to place: no allocation, no launch queued for the lost job.
    bench.core.schedule();
    assert!(!bench.queued().iter().any(|op| matches!(op, Queued::After(AfterCommit::Launch(..)))));
}

/// A change whose commit fails is answered with the error, not with the outcome it would have had.
#[test]
fn a_failed_commit_of_a_change_answers_an_error() {
    let mut bench = Bench::new();
    let job_id = bench.submitted();
    let mut answer = bench.request(Request::Hold { job_ids: vec![job_id], hold: Some(true) });
    let ops = bench.queued();
    bench.report(ops, Some("database is locked"));
    assert!(matches!(answer.try_recv(), Ok(Response::Error { code: ErrorCode::StorageUnavailable, .. })));
}

/// A sacctmgr change is in force at once, stored and audited, and answered only after its
/// commit; a failed commit puts the configuration back as it was.
#[test]
fn a_sacctmgr_change_is_answered_after_its_commit_and_undone_when_it_fails() {
    use drover_shared::sacctmgr::edit::{Change, Kind};
    let add = |name: &str| Request::SacctmgrChange {
        change: Box::new(Change::Add {
            kind: Kind::Account,
            names: vec![name.to_owned()],
            cluster: None,
            accounts: vec![],
            settings: vec![],
        }),
        commit: true,
    };
    let has = |bench: &Bench, name: &str| bench.core.state.config().accounts.iter().any(|a| a.name == name);
    let mut bench = Bench::new();
    let mut answer = bench.request(add("proj1"));
    assert!(has(&bench, "proj1"));
    assert!(bench.core.shared_config().get().accounts.iter().any(|a| a.name == "proj1"));
    let ops = bench.queued();
    assert!(stored(&ops).any(|op| matches!(op, DbOp::AcctEntity(e) if e.name == "proj1" && e.record.is_some())));
    assert!(
        stored(&ops)
            .any(|op| matches!(op, DbOp::Audit { action, outcome, .. } if action == "sacctmgr" && outcome == "ok"))
    );
    assert_eq!(answer.try_recv(), Err(TryRecvError::Empty), "answered before the commit");
    bench.report(ops, None);
    assert!(matches!(answer.try_recv(), Ok(Response::AcctChanged { changed: true, .. })));

    let mut answer = bench.request(add("proj2"));
    assert!(has(&bench, "proj2"));
    let ops = bench.queued();
    bench.report(ops, Some("database is locked"));
    assert!(matches!(answer.try_recv(), Ok(Response::Error { code: ErrorCode::StorageUnavailable, .. })));
    assert!(has(&bench, "proj1") && !has(&bench, "proj2"), "the failed change is undone, the stored one kept");
    assert!(!bench.core.shared_config().get().accounts.iter().any(|a| a.name == "proj2"));
}

/// A job is launched only after its allocation is committed.
#[test]
fn a_launch_waits_for_its_allocation_commit() {
    let mut bench = Bench::new();
    bench.register_node();
    let job_id = bench.submitted();
    bench.core.schedule();
    assert_eq!(bench.core.state.jobs[&job_id].info.state(), JobState::Running);
    assert!(bench.sent_to_node().is_empty(), "launched before the allocation's commit");
    bench.commit();
    assert!(matches!(bench.sent_to_node().as_slice(), [CtldMessage::Launch(l)] if l.job_id == job_id));
}

/// The end of an earlier run of a job (requeued since) is acknowledged — after a commit, so the
/// node forgets it only then — and changes nothing: the current run keeps running and nothing of
/// the job is stored. The current run's end, by contrast, ends the job.
#[test]
fn an_old_runs_end_is_acknowledged_and_ignored() {
    let mut bench = Bench::new();
    bench.register_node();
    let job_id = bench.submitted();
    bench.core.schedule();
    bench.commit();
    assert!(matches!(bench.sent_to_node().as_slice(), [CtldMessage::Launch(_)]));
    // The job now runs its second run (run 1), as after a requeue and a new start.
    bench.core.state.jobs.get_mut(&job_id).unwrap().info.restarts = 1;
    let end = |run| JobEnd {
        job_id,
        run,
        outcome: JobOutcome::Exited,
        exit_status: WaitStatus::exited(0),
        start_time: Some(10),
        end_time: 20,
    };
    let message = |run| Event::NodeMessage {
        node: "n1".into(),
        connection_id: 1,
        message: drover_shared::proto::node::NodeMessage::JobEnded(end(run)),
    };

    bench.event(message(0));
    let ops = bench.queued();
    assert!(
        matches!(ops.as_slice(), [Queued::After(AfterCommit::AckJobEnd { job_id: j, run: 0, .. })] if *j == job_id),
        "an old run's end queued {ops:?}"
    );
    assert!(bench.sent_to_node().is_empty(), "acknowledged before the commit");
    assert_eq!(bench.core.state.jobs[&job_id].info.state(), JobState::Running);
    bench.report(ops, None);
    assert!(matches!(bench.sent_to_node().as_slice(), [CtldMessage::JobEndAck { job_id: j, run: 0 }] if *j == job_id));
    assert_eq!(bench.core.state.jobs[&job_id].info.state(), JobState::Running);

    bench.event(message(1));
    let ops = bench.queued();
    assert!(stored(&ops).any(|op| matches!(op, DbOp::UpdateJob { info, .. } if info.job_id == job_id)));
    assert_eq!(bench.core.state.jobs[&job_id].info.state(), JobState::Completed);
    assert!(bench.sent_to_node().is_empty(), "acknowledged before the commit");
    bench.report(ops, None);
    assert!(matches!(bench.sent_to_node().as_slice(), [CtldMessage::JobEndAck { job_id: j, run: 1 }] if *j == job_id));
}

/// Requests the serve layer answers itself are refused by the core, not served from its state.
#[test]
fn requests_served_off_the_core_are_refused_there() {
    let mut bench = Bench::new();
    let mut answer = bench.request(Request::ShowConfig);
    assert!(matches!(answer.try_recv(), Ok(Response::Error { code: ErrorCode::Internal, .. })));
    assert!(bench.queued().is_empty());
}

/// A shutdown does not drop what clients asked just before it: the queued submission is served,
/// its commit awaited, and its answer sent before the core returns (it was answered
/// "unavailable" although its job could be stored).
#[tokio::test]
async fn a_shutdown_answers_what_was_asked_before_it() {
    let Bench { core, db, .. } = Bench::new();
    let (events, events_rx) = mpsc::unbounded_channel();
    let (reply, mut answer) = oneshot::channel();
    events.send(Event::Client { caller: ROOT, request: Request::Submit(Box::new(spec())), reply }).unwrap();
    // The writer, played by hand: it commits what the core queued after a while.
    let writer_events = events.clone();
    let writer = std::thread::spawn(move || {
        let first = db.recv_timeout(std::time::Duration::from_secs(5)).expect("the submission is stored");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut ops = Vec::new();
        std::iter::once(first).chain(db.try_iter()).for_each(|item| item.flatten_into(&mut ops));
        let n_ops = ops.len();
        let after = ops.into_iter().filter_map(|op| if let Queued::After(a) = op { Some(a) } else { None }).collect();
        let _ = writer_events.send(Event::Committed(CommitReport { after, error: None, n_ops }));
    });
    core.run(events_rx, std::future::ready(())).await;
    writer.join().unwrap();
    assert_eq!(answer.try_recv(), Ok(Response::Submitted { job_id: 1 }));
}

/// `sstat`: the job's owner (here root) gets the job's running steps with what their node
/// answered, once it answered; a plain user gets `AccessDenied` for another user's job, and
/// under `PrivateData=jobs` the job does not exist for them; a job ctld does not hold is
/// `InvalidJobId`.
#[test]
fn a_stat_question_goes_to_the_jobs_node_and_is_answered_with_its_samples() {
    use drover_shared::job::StepId;
    use drover_shared::proto::stat::StepSample;
    let mut bench = Bench::new();
    bench.register_node();
    let job_id = bench.submitted();
    bench.core.schedule();
    bench.commit();
    assert!(matches!(bench.sent_to_node().as_slice(), [CtldMessage::Launch(_)]));

    let mut answer = bench.request(Request::StatJob { job_id });
    let sent = bench.sent_to_node();
    let [CtldMessage::StatJob { query, job_id: asked, run: 0 }] = sent.as_slice() else { panic!("sent {sent:?}") };
    assert_eq!(*asked, job_id);
    assert!(matches!(answer.try_recv(), Err(TryRecvError::Empty)), "answered before the node");
    let sample = StepSample { step_id: StepId::Batch, tasks: 1, rss_kib: 4096, ..StepSample::default() };
    let samples = vec![sample.clone(), StepSample { step_id: StepId::Numbered(9), ..StepSample::default() }];
    let message = drover_shared::proto::node::NodeMessage::JobStats { query: *query, job_id, samples };
    bench.event(Event::NodeMessage { node: "n1".into(), connection_id: 1, message });
    let Ok(Response::StepStats(report)) = answer.try_recv() else { panic!("no report") };
    assert_eq!(report.job_id, job_id);
    let [batch] = report.steps.as_slice() else { panic!("{report:?}") };
    assert_eq!((batch.step_id, batch.nodes.as_slice()), (StepId::Batch, ["n1".to_owned()].as_slice()));
    assert_eq!(batch.samples.len(), 1, "the step ctld does not run is dropped: {report:?}");
    assert_eq!(batch.samples[0].sample, sample);

    let stranger = Caller { uid: 4242, gid: 4242, origin: crate::model::identity::Origin::Local };
    let ask = |bench: &mut Bench, job_id| {
        let (reply, mut answer) = oneshot::channel();
        bench.event(Event::Client { caller: stranger, request: Request::StatJob { job_id }, reply });
        match answer.try_recv() {
            Ok(Response::Error { code, .. }) => code,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(ask(&mut bench, job_id), ErrorCode::AccessDenied);
    assert_eq!(ask(&mut bench, job_id + 100), ErrorCode::InvalidJobId);
    bench.core.state.config_mut().private_data.jobs = true;
    assert_eq!(ask(&mut bench, job_id), ErrorCode::InvalidJobId);
    assert!(bench.sent_to_node().is_empty(), "nothing asked of the node for refused questions");
}
