//! Golden bytes for a sample of every message family: an accidental change to the wire encoding
//! fails here before it reaches a mixed-version cluster.

use super::client::{ErrorCode, Request, Response};
use super::node::{CtldMessage, JobEnd, JobOutcome, NodeMessage};
use super::{Hello, MAGIC, PROTOCOL_VERSION, Role};
use crate::job::WaitStatus;

fn hex<T: serde::Serialize>(message: &T) -> String {
    postcard::to_allocvec(message).unwrap().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn golden_bytes() {
    let hello = Hello {
        magic: MAGIC,
        protocol_version: PROTOCOL_VERSION,
        role: Role::Node { name: "n1".into() },
        nonce: vec![7],
    };
    assert_eq!(hex(&hello), "445256520701026e310107");
    assert_eq!(hex(&Request::Ping), "06");
    assert_eq!(hex(&Response::Submitted { job_id: 300 }), "00ac02");
    assert_eq!(hex(&Response::Error { code: ErrorCode::AccessDenied, detail: String::new() }), "070400");
    let end = JobEnd {
        job_id: 5,
        run: 2,
        outcome: JobOutcome::TimedOut,
        exit_status: WaitStatus::signaled(15),
        start_time: Some(10),
        end_time: 20,
    };
    assert_eq!(hex(&NodeMessage::JobEnded(end)), "030502011e011428");
    assert_eq!(hex(&CtldMessage::JobEndAck { job_id: 5, run: 2 }), "040502");
    // Protocol 3: runs in heartbeats, registrations' held jobs, starts, cancels and kills.
    let run = super::node::JobRun { job_id: 5, run: 2 };
    assert_eq!(hex(&NodeMessage::Heartbeat { running: vec![run] }), "01010502");
    assert_eq!(hex(&NodeMessage::JobStarted { job_id: 5, run: 2, start_time: 10 }), "02050214");
    assert_eq!(hex(&CtldMessage::Registered { kill: vec![run] }), "00010502");
    assert_eq!(hex(&CtldMessage::Cancel { job_id: 5, run: 2, kill_wait: 3 }), "03050203");
}

#[test]
fn compat_golden_bytes() {
    // Appended after the node-admin, audit and requeuehold variants.
    use crate::grammar::time::TimeLimit;
    assert_eq!(hex(&Request::QueryNodeFeatures), "19");
    assert_eq!(hex(&Request::SplitArrayTask { array_job_id: 7, task: 3 }), "1a0703");
    assert_eq!(hex(&Response::Error { code: ErrorCode::InvalidTimeValue, detail: String::new() }), "071800");
    let will_run =
        Response::WillRun { job_id: 41, start: 100, cpus: 4, nodes: vec!["n1".into()], partition: "p".into() };
    assert_eq!(hex(&will_run), "1229c8010401026e310170");
    assert_eq!(hex(&Response::NodeFeatures { nodes: vec![("n1".into(), vec!["a".into()])] }), "1301026e31010161");
    assert_eq!(hex(&CtldMessage::SetTimeLimit { job_id: 5, time_limit: TimeLimit::Minutes(10) }), "0705000a");
    let usage = super::node::JobUsage { job_id: 5, user_usec: 1, system_usec: 2, max_rss_kib: 3 };
    assert_eq!(hex(&NodeMessage::JobUsage(usage)), "0605010203");
    assert_eq!(hex(&Request::QueryJobUsage { job_ids: vec![5] }), "1b0105");
    let fields = crate::job::fields::JobFields::NAME | crate::job::fields::JobFields::NODES;
    let query = super::client::JobQuery { users: vec![7], ..Default::default() };
    assert_eq!(hex(&Request::QueryJobFields { query, fields }), "1d0001070000008101");
    let column = crate::queue_lines::LineColumn {
        prefix: String::new(),
        field: crate::queue_lines::Field::Name,
        width: Some(8),
        right: true,
        suffix: " ".into(),
    };
    let sort = vec![crate::queue_lines::SortKey { letter: 'i', descending: true }];
    let format = crate::queue_lines::LineFormat { columns: vec![column], sort };
    assert_eq!(
        hex(&Request::QueryJobLines { query: Default::default(), format }),
        "1e0000000000010004010801012001016901"
    );
    let mut rows = Vec::new();
    super::client::push_job_line(&mut rows, &[1], b"a\n");
    assert_eq!(hex(&Response::JobLines { now: 3, count: 1, rows: rows.clone() }), "1606010b010000000200000001610a");
    let lines = super::client::job_lines(&rows).unwrap();
    assert_eq!(lines, [super::client::JobLine { key: &[1], line: b"a\n" }]);
    assert_eq!(super::client::job_lines(&rows[..rows.len() - 1]), None);
    // After the node history and templates requests and answers (all appended in version 4).
    assert_eq!(hex(&Request::Sacctmgr { args: vec!["a".into()] }), "21010161");
    assert_eq!(hex(&Response::Listing { text: "x\n".into() }), "1902780a");
    assert_eq!(hex(&Response::JobUsage { usage: vec![usage] }), "140105010203");
    assert_eq!(hex(&NodeMessage::StepUsage { step_id: 1, usage }), "070105010203");
    assert_eq!(hex(&Request::QueryStepUsage { job_ids: vec![5] }), "1c0105");
    assert_eq!(hex(&Response::StepUsage { usage: vec![(1, usage)] }), "15010105010203");
    // sacctmgr's changes (appended after SubmitOnce and Simulated).
    let change = crate::sacctmgr::edit::Change::Delete {
        kind: crate::sacctmgr::edit::Kind::User,
        names: vec!["u".into()],
        cluster: None,
        accounts: vec![],
    };
    assert_eq!(hex(&Request::SacctmgrChange { change: Box::new(change), commit: true }), "250201010175000001");
    assert_eq!(hex(&Response::AcctChanged { text: "x".into(), changed: false }), "1c017800");
    // sstat (appended after Diag, in both conversations).
    use super::stat::{StatReport, StepSample, StepStat};
    use crate::job::StepId;
    assert_eq!(hex(&Request::StatJob { job_id: 5 }), "2705");
    assert_eq!(hex(&CtldMessage::StatJob { query: 1, job_id: 5, run: 0 }), "0a010500");
    let sample = StepSample {
        step_id: StepId::Numbered(2),
        first_task: 1,
        tasks: 2,
        cpu_usec: 3,
        rss_kib: 4,
        vmsize_kib: 5,
        pages: 6,
        read_bytes: 7,
        write_bytes: 8,
        processes: 9,
        pids: vec![10],
        task_pids: vec![10],
    };
    let stats = NodeMessage::JobStats { query: 1, job_id: 5, samples: vec![sample] };
    assert_eq!(hex(&stats), "090105010202010203040506070809010a010a");
    let step = StepStat { step_id: StepId::Batch, num_tasks: 1, nodes: vec!["n1".into()], samples: Vec::new() };
    let report = StatReport { job_id: 5, steps: vec![step] };
    assert_eq!(hex(&Response::StepStats(Box::new(report))), "1e0501000101026e3100");
}

#[test]
fn frames_round_trip_and_enforce_limits() {
    use super::frame::{FrameError, MAX_HANDSHAKE_FRAME, read_message, write_message};
    let mut buf = Vec::new();
    write_message(&mut buf, &Request::Ping).unwrap();
    assert_eq!(buf, [0, 0, 0, 1, 6]);
    let back: Request = read_message(&mut buf.as_slice(), MAX_HANDSHAKE_FRAME).unwrap();
    assert_eq!(back, Request::Ping);
    let huge = [0xff, 0xff, 0xff, 0xff];
    let err = read_message::<_, Request>(&mut huge.as_slice(), MAX_HANDSHAKE_FRAME).unwrap_err();
    assert!(matches!(err, FrameError::TooLarge { .. }), "{err}");
    let garbage = [0, 0, 0, 2, 0xff, 0xff];
    assert!(matches!(read_message::<_, Request>(&mut garbage.as_slice(), 100), Err(FrameError::Decode(_))));
}

#[test]
fn usage_golden_bytes() {
    use super::usage::{JobGpuSample, UsageQuery};
    let query = Request::QueryUsage(UsageQuery { start: 1, end: 2, with_jobs: true });
    assert_eq!(hex(&query), "0f020401");
    let sample = JobGpuSample { job_id: 5, gpus: 2, utilization_percent_sum: 40, memory_used_bytes: 0 };
    assert_eq!(hex(&NodeMessage::GpuUsage(vec![sample])), "050105022800");
}

#[test]
fn sealed_streams_refuse_injected_and_replayed_frames() {
    use super::frame::{FrameError, MessageStream};
    use super::seal::{End, Sealer, SessionKeys};
    use tokio::io::AsyncWriteExt;
    let key = crate::auth::ClusterKey::from_bytes([3; 32]);
    let derive = |end| SessionKeys::derive(&key, end, "n1", b"c", b"s", PROTOCOL_VERSION);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        // A sealed pair works both ways.
        let (a, b) = tokio::io::duplex(4096);
        let (mut ctld, mut node) = (MessageStream::new(a), MessageStream::new(b));
        ctld.seal(derive(End::Ctld));
        node.seal(derive(End::Node));
        ctld.send(&CtldMessage::JobEndAck { job_id: 5, run: 0 }).await.unwrap();
        assert_eq!(node.recv::<CtldMessage>().await.unwrap(), Some(CtldMessage::JobEndAck { job_id: 5, run: 0 }));
        node.send(&Request::Ping).await.unwrap();
        assert_eq!(ctld.recv::<Request>().await.unwrap(), Some(Request::Ping));

        // Someone on the path writes frames of their own into the node's stream.
        let (mut wire, b) = tokio::io::duplex(4096);
        let mut node = MessageStream::new(b);
        node.seal(derive(End::Node));
        let mut genuine = Sealer::new(derive(End::Ctld));
        let frame = |payload: Vec<u8>| {
            let mut out = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
            out.extend_from_slice(&payload);
            out
        };
        let mut first = postcard::to_allocvec(&CtldMessage::JobEndAck { job_id: 1, run: 0 }).unwrap();
        genuine.seal(&mut first);
        wire.write_all(&frame(first.clone())).await.unwrap();
        assert!(node.recv::<CtldMessage>().await.unwrap().is_some());
        // The same genuine frame again is a replay.
        wire.write_all(&frame(first)).await.unwrap();
        assert!(matches!(node.recv::<CtldMessage>().await, Err(FrameError::Forged(_))));
        // An unsealed frame (what a forger without the key can write) is refused too.
        let (mut wire, b) = tokio::io::duplex(4096);
        let mut node = MessageStream::new(b);
        node.seal(derive(End::Node));
        let forged = postcard::to_allocvec(&CtldMessage::JobEndAck { job_id: 1, run: 0 }).unwrap();
        wire.write_all(&frame(forged)).await.unwrap();
        assert!(matches!(node.recv::<CtldMessage>().await, Err(FrameError::Forged(_))));
    });
}

#[test]
fn admin_golden_bytes() {
    use super::client::{AuditQuery, NodeStateChange, NodeUpdate};
    let drain = NodeUpdate {
        nodes: "n1".into(),
        state: NodeStateChange::Drain,
        reason: Some("x".into()),
        owner: None,
        ticket: Some("T".into()),
    };
    assert_eq!(hex(&Request::UpdateNode(drain)), "13026e310001017800010154");
    assert_eq!(hex(&Request::Reconfigure), "14");
    assert_eq!(hex(&Request::QueryNodeReasons), "15");
    // Appended after them by the requeue work.
    assert_eq!(hex(&Request::RequeueHold { job_ids: vec![5] }), "170105");
    let query = AuditQuery { uids: vec![1000], actions: vec![], job_ids: vec![7], since: Some(3), until: None };
    assert_eq!(hex(&Request::QueryAudit(query)), "1601e807000107010600");
    assert_eq!(hex(&Response::Done), "0f");
    assert_eq!(hex(&Response::Error { code: ErrorCode::InvalidConfig, detail: String::new() }), "071600");
}

#[test]
fn remote_client_hello_golden_bytes() {
    use crate::token::ClientToken;
    let token =
        ClientToken { uid: 1000, gid: 100, host: "n1".into(), issued: 5, expires: 35, nonce: vec![1], mac: vec![2] };
    let hello =
        Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role: Role::RemoteClient { token }, nonce: vec![] };
    assert_eq!(hex(&hello), "445256520702e80764026e310a460101010200");
}

#[test]
fn answers_may_exceed_the_read_bound_but_nothing_else_may() {
    use super::frame::{MAX_ANSWER_FRAME, MAX_FRAME, MessageStream};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (a, b) = tokio::io::duplex(1 << 20);
        let (mut ctld, mut client) = (MessageStream::new(a), MessageStream::new(b));
        ctld.set_max_frame(MAX_FRAME);
        client.set_max_frame(MAX_ANSWER_FRAME);
        // A job list of a very deep queue: bigger than any frame ctld reads.
        let big = Response::Error { code: ErrorCode::Internal, detail: "x".repeat(MAX_FRAME + 1) };
        let (sent, received) = tokio::join!(ctld.send_answer(&big), client.recv::<Response>());
        sent.unwrap();
        assert_eq!(received.unwrap(), Some(big.clone()));
        // The bound ctld reads (and sends anything else) with is unchanged.
        assert!(ctld.send(&big).await.is_err());
    });
}

#[test]
fn unfinished_frames_hold_what_arrived_and_wait_for_their_budget() {
    use super::frame::{FrameError, MAX_REQUEST_FRAME, MessageStream, ReadBudget, encode};
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (own, everyone) = (ReadBudget::pool(2 << 20), ReadBudget::pool(4 << 20));
        let budget = ReadBudget::new(vec![own.clone(), everyone.clone()]);
        let server = |stream| {
            let mut messages = MessageStream::new(stream);
            messages.set_max_frame(MAX_REQUEST_FRAME);
            messages.set_read_budget(budget.clone());
            messages
        };
        let short = Duration::from_millis(100);
        // The largest frame announced, 300 KiB of it sent: the buffer holds what arrived (512 KiB
        // at most, 448 KiB of it beyond the free 64 KiB), not the 11 MiB announced.
        let (mut wire_a, a) = tokio::io::duplex(4 << 20);
        let mut first = server(a);
        wire_a.write_all(&u32::try_from(MAX_REQUEST_FRAME).unwrap().to_be_bytes()).await.unwrap();
        wire_a.write_all(&vec![0; 300 << 10]).await.unwrap();
        assert!(tokio::time::timeout(short, first.recv::<Response>()).await.is_err(), "the frame is not complete");
        assert_eq!(2048 - own.available_permits(), 448, "KiB held beyond the free buffer");
        assert_eq!(4096 - everyone.available_permits(), 448, "both pools are charged");
        // A second frame of 1.9 MiB on the same budget waits for room, and gets it when the first
        // connection goes.
        let (mut wire_b, b) = tokio::io::duplex(4 << 20);
        let mut second = server(b);
        let message = Response::Error { code: ErrorCode::Internal, detail: "y".repeat(1900 << 10) };
        wire_b.write_all(&encode(&message).unwrap()).await.unwrap();
        assert!(tokio::time::timeout(short, second.recv::<Response>()).await.is_err(), "it waits for memory");
        drop(first);
        assert_eq!(second.recv::<Response>().await.unwrap(), Some(message));
        assert!(2048 - own.available_permits() >= 1800, "the message is charged while it is served");
        // A frame longer than the bound is refused on its length, before anything is buffered;
        // reading it gave back what the previous message held.
        wire_b.write_all(&u32::try_from(MAX_REQUEST_FRAME + 1).unwrap().to_be_bytes()).await.unwrap();
        assert!(matches!(second.recv::<Response>().await, Err(FrameError::TooLarge { .. })));
        assert_eq!((own.available_permits(), everyone.available_permits()), (2048, 4096), "all given back");
    });
}

/// Protocol 7: a step spec's and a step launch's last fields are `slurmd_debug` and
/// `parallel_debug` (`srun --slurmd-debug`, `--debugger-test`), appended after `preserve_env`.
#[test]
fn step_spec_debug_fields_golden_bytes() {
    let spec = crate::job::StepSpec { slurmd_debug: 3, parallel_debug: true, ..crate::job::StepSpec::default() };
    assert_eq!(hex(&spec), "00000000000000000000000000000000000301");
    let plain = crate::job::StepSpec::default();
    let (with, without) = (hex(&spec), hex(&plain));
    // Only the two trailing bytes differ: preserve_env (false), then 3 and true.
    assert_eq!(with[..with.len() - 4], without[..without.len() - 4]);
    assert!(with.ends_with("000301") && without.ends_with("000000"), "{with} {without}");
}
