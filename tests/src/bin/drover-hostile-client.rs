//! A hostile client of ctld's Unix socket for the end-to-end attack tests, run as an unprivileged
//! user (so that ctld sees that user's uid through `SO_PEERCRED`): `drover-hostile-client SOCKET
//! COUNT ANNOUNCE` opens COUNT connections one after another and says hello on each; with ANNOUNCE
//! above 0, each accepted connection then announces a frame of ANNOUNCE bytes and sends all of it
//! but its last byte (as much as ctld lets it send within 2 s of no progress); with ANNOUNCE
//! `busy`, each accepted connection sends job and accounting queries back to back, reading each
//! answer, until the helper exits. It prints one line, `ready accepted=A refused=R failed=F
//! sent=BYTES complete=C refusal=MESSAGE`, and then answers each `closed` line on its standard
//! input with `closed=N open=M` (how many of the accepted connections ctld has closed by now; not
//! in `busy` mode, whose threads read the same connections) and
//! each `served` line with `served=N` (answers the busy connections got so far), until its
//! standard input ends. `drover-hostile-client SOCKET 1 ids:N` instead sends one `scancel` of N
//! job ids (no such jobs: 1,000,000,000 and up) and prints `answered ms=T answer=TEXT` (the
//! answer's first 200 characters) once ctld answers.

use drover_shared::proto::client::{AccountingQuery, JobQuery, Request};
use drover_shared::proto::frame::{MAX_ANSWER_FRAME, MAX_HANDSHAKE_FRAME, read_frame, read_message, write_message};
use drover_shared::proto::{Hello, HelloReply, MAGIC, PROTOCOL_VERSION, Role};
use std::io::{BufRead, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, socket, count, announce] = args.as_slice() else {
        eprintln!("usage: drover-hostile-client SOCKET COUNT ANNOUNCE");
        std::process::exit(2);
    };
    let count: usize = count.parse().expect("COUNT is a number");
    if let Some(ids) = announce.strip_prefix("ids:") {
        cancel_many(socket, ids.parse().expect("ids:N takes a number"));
        return;
    }
    let busy = announce == "busy";
    let announce: u32 = if busy { 0 } else { announce.parse().expect("ANNOUNCE is a number or `busy`") };
    let (mut accepted, mut refused, mut failed, mut refusal) = (Vec::new(), 0, 0, String::new());
    for _ in 0..count {
        match greet(socket) {
            Ok(Ok(stream)) => accepted.push(stream),
            Ok(Err(message)) => {
                refused += 1;
                refusal = message;
            }
            Err(_) => failed += 1,
        }
    }
    let (sent, complete) = if announce > 0 { half_send(&accepted, announce) } else { (0, 0) };
    let served = Arc::new(AtomicUsize::new(0));
    if busy {
        for stream in &accepted {
            let (stream, served) = (stream.try_clone().expect("cloning a connection"), served.clone());
            std::thread::spawn(move || query_forever(stream, &served));
        }
    }
    println!(
        "ready accepted={} refused={refused} failed={failed} sent={sent} complete={complete} refusal={refusal}",
        accepted.len()
    );
    std::io::stdout().flush().expect("stdout");
    for line in std::io::stdin().lock().lines() {
        match line.expect("stdin").trim() {
            "closed" => {
                let closed = accepted.iter().filter(|s| is_closed(s)).count();
                println!("closed={closed} open={}", accepted.len() - closed);
            }
            "served" => println!("served={}", served.load(Ordering::Relaxed)),
            _ => continue,
        }
        std::io::stdout().flush().expect("stdout");
    }
}

/// One `scancel` of `n` job ids that do not exist, timed until its answer.
fn cancel_many(socket: &str, n: u32) {
    let mut stream = greet(socket).expect("connecting").expect("accepted");
    stream.set_read_timeout(Some(Duration::from_secs(600))).expect("timeout");
    let job_ids = (0..n).map(|i| 1_000_000_000 + i).collect();
    let request = Request::Cancel(drover_shared::proto::client::CancelRequest { job_ids, ..Default::default() });
    let started = Instant::now();
    write_message(&mut stream, &request).expect("sending the request");
    let answer: drover_shared::proto::client::Response =
        read_message(&mut stream, MAX_ANSWER_FRAME).expect("reading the answer");
    let text: String = format!("{answer:?}").chars().take(200).collect();
    println!("answered ms={} answer={text}", started.elapsed().as_millis());
}

/// Connects and says hello: the connection when accepted, the refusal's message when refused.
fn greet(socket: &str) -> std::io::Result<Result<UnixStream, String>> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let hello = Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role: Role::Client, nonce: Vec::new() };
    // A refused connection may be closed before the hello arrives; its reason is still readable.
    let _ = write_message(&mut stream, &hello);
    match read_message::<_, HelloReply>(&mut stream, MAX_HANDSHAKE_FRAME) {
        Ok(HelloReply::Accept { .. }) => Ok(Ok(stream)),
        Ok(HelloReply::Reject { message }) => Ok(Err(message)),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// Announces a frame of `announce` bytes on every stream and sends all but its last byte, round
/// robin without blocking, until done or nothing moved for 2 s. Returns the bytes sent and how many
/// streams sent everything.
fn half_send(streams: &[UnixStream], announce: u32) -> (usize, usize) {
    let mut head = announce.to_be_bytes().to_vec();
    head.resize(64 * 1024, 0x55);
    let total = 4 + announce as usize - 1;
    let mut written = vec![0usize; streams.len()];
    let mut broken = vec![false; streams.len()];
    for stream in streams {
        stream.set_nonblocking(true).expect("non-blocking");
    }
    let mut last_progress = Instant::now();
    while last_progress.elapsed() < Duration::from_secs(2) {
        let mut moved = false;
        for (i, mut stream) in streams.iter().enumerate() {
            if broken[i] || written[i] == total {
                continue;
            }
            // The length first, then filler bytes.
            let bytes = if written[i] < 4 { &head[written[i]..] } else { &head[4..] };
            let bytes = &bytes[..bytes.len().min(total - written[i])];
            match stream.write(bytes) {
                Ok(n) => {
                    written[i] += n;
                    moved |= n > 0;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => broken[i] = true,
            }
        }
        if moved {
            last_progress = Instant::now();
        } else if written.iter().zip(&broken).all(|(w, b)| *b || *w == total) {
            break;
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    (written.iter().sum(), written.iter().filter(|w| **w == total).count())
}

/// Sends job and accounting queries back to back on `stream`, counting the answers, until the
/// connection fails.
fn query_forever(mut stream: UnixStream, served: &AtomicUsize) {
    stream.set_read_timeout(None).expect("blocking reads");
    let requests = [Request::QueryJobs(JobQuery::default()), Request::QueryAccounting(AccountingQuery::default())];
    for request in requests.iter().cycle() {
        if write_message(&mut stream, request).is_err() || read_frame(&mut stream, MAX_ANSWER_FRAME).is_err() {
            return;
        }
        served.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether ctld has closed the connection by now (end of stream or a reset), without waiting.
fn is_closed(mut stream: &UnixStream) -> bool {
    stream.set_nonblocking(true).expect("non-blocking");
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    }
}
