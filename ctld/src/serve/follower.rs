//! A following replica's doors. Each replica of a replicated controller binds its client socket
//! and its node port when it starts and holds them while it follows, so that nobody else can
//! take them (a squatter on a follower's port once made every newly elected leader fail to
//! bind and exit). Until the replica leads, every connection on either door is answered at
//! once with a refusal that names the leader, as far as this replica knows it ("not the
//! leader; replica 2 leads at 10.0.0.2:6817"): commands and noded move on to the next replica
//! instead of waiting. What a peer sent is never parsed; at most [`MAX_ANSWERING`] refusals are
//! being written at once, and each gets [`ANSWER_TIME`].

use drover_shared::proto::HelloReply;
use drover_shared::proto::frame::MessageStream;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

/// Refusals being written at once, at most; a connection beyond them is closed unanswered.
const MAX_ANSWERING: usize = 256;

/// How long one refusal may take to write.
const ANSWER_TIME: Duration = Duration::from_millis(200);

/// The refusal a follower answers with, naming the leader where known.
pub(crate) fn not_leader(leader: Option<String>) -> String {
    match leader {
        Some(leader) => format!("not the leader; {leader} leads"),
        None => "not the leader; an election is under way".to_owned(),
    }
}

/// Answers every connection on `clients` and `nodes` with [`not_leader`] (`leader` says who leads
/// now) until the future is dropped; the listeners stay bound for the leader this replica may
/// become.
pub(crate) async fn answer(clients: &UnixListener, nodes: &TcpListener, leader: impl Fn() -> Option<String>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_ANSWERING));
    loop {
        let message = tokio::select! {
            accepted = clients.accept() => accepted.ok().map(|(stream, _)| Door::Client(stream)),
            accepted = nodes.accept() => accepted.ok().map(|(stream, _)| Door::Node(stream)),
        };
        let Some(door) = message else {
            // Out of file descriptors, say: wait instead of trying again at once.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let refusal = not_leader(leader());
        tokio::spawn(async move {
            match door {
                Door::Client(stream) => refuse(stream, refusal).await,
                Door::Node(stream) => refuse(stream, refusal).await,
            }
            drop(slot);
        });
    }
}

enum Door {
    Client(tokio::net::UnixStream),
    Node(tokio::net::TcpStream),
}

/// Writes the refusal as the answer to a hello and closes the connection.
async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(stream: S, message: String) {
    let mut messages = MessageStream::new(stream);
    let _ = tokio::time::timeout(ANSWER_TIME, messages.send(&HelloReply::Reject { message })).await;
    let mut stream = messages.into_stream();
    // What the peer already sent is read without waiting: a socket closed with unread bytes
    // would reset the connection before the peer reads the refusal.
    let mut unread = [0u8; 4096];
    let _ =
        tokio::time::timeout(Duration::from_millis(20), tokio::io::AsyncReadExt::read(&mut stream, &mut unread)).await;
    let _ = tokio::time::timeout(ANSWER_TIME, tokio::io::AsyncWriteExt::shutdown(&mut stream)).await;
}

#[cfg(test)]
mod tests {
    use super::not_leader;

    #[test]
    fn the_refusal_names_the_leader_where_known() {
        assert_eq!(
            not_leader(Some("replica 2 at 10.0.0.2:6817".into())),
            "not the leader; replica 2 at 10.0.0.2:6817 leads"
        );
        assert!(not_leader(None).contains("election"));
    }
}
