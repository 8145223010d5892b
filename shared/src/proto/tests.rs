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
    assert_eq!(hex(&hello), "445256520201026e310107");
    assert_eq!(hex(&Request::Ping), "06");
    assert_eq!(hex(&Response::Submitted { job_id: 300 }), "00ac02");
    assert_eq!(hex(&Response::Error { code: ErrorCode::AccessDenied, detail: String::new() }), "070400");
    let end = JobEnd {
        job_id: 5,
        outcome: JobOutcome::TimedOut,
        exit_status: WaitStatus::signaled(15),
        start_time: Some(10),
        end_time: 20,
    };
    assert_eq!(hex(&NodeMessage::JobEnded(end)), "0305011e011428");
    assert_eq!(hex(&CtldMessage::JobEndAck { job_id: 5 }), "0405");
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
