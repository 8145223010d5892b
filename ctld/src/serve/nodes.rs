//! The node side of ctld: a TCP listener for noded connections. A node proves it holds the cluster
//! key (HMAC challenge-response, both ways), registers, and then the connection carries node
//! messages in and ctld messages out until either side closes it. A configless host asks for the
//! config file instead of registering and is answered at once (`drover_shared::configless`). A
//! hello carrying a client token
//! instead is a remote command-line client ([`crate::serve::remote`]).

use crate::core::Event;
use crate::core::node_link::NodeLink;
use crate::serve::error::{ConnectionError, protocol_break};
use drover_shared::auth::{ClusterKey, NONCE_LEN, random_bytes};
use drover_shared::proto::frame::{MAX_FRAME, MessageStream};
use drover_shared::proto::node::{CtldMessage, NodeMessage};
use drover_shared::proto::seal::{End, SessionKeys};
use drover_shared::proto::{Hello, HelloReply, MAGIC, NodeProof, Role, version_supported};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};

/// Most node connections at once (authenticated or not) on a small cluster.
const MIN_NODE_CONNECTIONS: usize = 16_384;

/// Descriptors kept for everything but node connections: clients, the database, the listeners
/// (a quarter of the limit where that is less).
const RESERVED_DESCRIPTORS: u64 = 4096;

/// Most node connections at once for a cluster of `nodes` configured nodes: room for each node
/// twice over (a node that reconnects holds its old connection until ctld notices it closed,
/// and login hosts and configless fetches come on the same port), never below
/// [`MIN_NODE_CONNECTIONS`] (a fixed 16,384 kept nodes past it from ever registering on a
/// 50,000-node cluster). Raises this process's open-file limit to what that needs where the
/// hard limit allows; where it does not, says so and takes fewer, leaving
/// [`RESERVED_DESCRIPTORS`] free, so that nodes past the limit wait in the listen queue (and
/// retry) while clients are still served, instead of every accept failing for want of a
/// descriptor.
pub(crate) fn connection_slots(nodes: usize) -> usize {
    let wanted = nodes.saturating_mul(2).saturating_add(1024).max(MIN_NODE_CONNECTIONS);
    let descriptors = u64::try_from(wanted).unwrap_or(u64::MAX).saturating_add(RESERVED_DESCRIPTORS * 4);
    let limit = match crate::serve::limits::raise_open_files(descriptors) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "the open-file limit cannot be read");
            return wanted;
        }
    };
    // Under a small limit, a quarter of it is kept instead.
    let room = usize::try_from(limit - RESERVED_DESCRIPTORS.min(limit / 4)).unwrap_or(usize::MAX);
    if room < nodes {
        tracing::warn!(
            nodes,
            open_file_limit = limit,
            node_connections = room,
            "the open-file limit is below what this many nodes need; raise LimitNOFILE (systemd) or the hard limit"
        );
    }
    wanted.min(room)
}

/// Time allowed for hello, proof and registration.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The id of the next node connection. Process-wide: node links are accepted on many tasks and
/// the core tells a node's live connection from an older one only by this id, so ids are never
/// reused; an atomic counter is state of its own, not shared data, and hides no decision.
static CONNECTION_IDS: AtomicU64 = AtomicU64::new(1);

/// Accepts node connections until the listener fails.
pub(crate) async fn serve(
    listener: TcpListener,
    key: Arc<ClusterKey>,
    events: mpsc::UnboundedSender<Event>,
    remote: crate::serve::remote::Remote,
    max_connections: usize,
) {
    let slots = Arc::new(Semaphore::new(max_connections));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        match listener.accept().await {
            Ok((stream, peer)) => {
                let key = key.clone();
                let events = events.clone();
                let remote = remote.clone();
                tokio::spawn(async move {
                    if let Err(e) = handle(stream, peer.to_string(), key, events, remote).await {
                        tracing::info!(peer = %peer, error = %e, "node connection ended");
                    }
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept on node port failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle(
    stream: TcpStream,
    peer: String,
    key: Arc<ClusterKey>,
    events: mpsc::UnboundedSender<Event>,
    remote: crate::serve::remote::Remote,
) -> Result<(), ConnectionError> {
    stream.set_nodelay(true)?;
    let mut messages = MessageStream::new(stream);
    let Some(hello) = tokio::time::timeout(HANDSHAKE_TIMEOUT, messages.recv::<Hello>()).await?? else {
        protocol_break!("closed before hello")
    };
    if let Role::RemoteClient { token } = hello.role {
        if hello.magic != MAGIC || !version_supported(hello.protocol_version) || hello.nonce.len() != NONCE_LEN {
            messages.send(&HelloReply::Reject { message: "unsupported hello".into() }).await?;
            return Ok(());
        }
        return crate::serve::remote::serve(messages, token, &hello.nonce, &peer, &remote).await;
    }
    let (name, first) = tokio::time::timeout(HANDSHAKE_TIMEOUT, authenticate(&mut messages, hello, &key)).await??;
    let registration = match first {
        NodeMessage::Register(registration) if registration.name == name => registration,
        NodeMessage::FetchConfig { have } => {
            let config = remote.context.config.get();
            return serve_config(messages, &name, &peer, have, &config.source_text).await;
        }
        _ => protocol_break!("node {name} did not register"),
    };
    let connection_id = CONNECTION_IDS.fetch_add(1, Ordering::Relaxed);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let link = NodeLink { connection_id, tx };
    events.send(Event::NodeConnected { registration, link, address: peer })?;
    let result = async {
        loop {
            tokio::select! {
                incoming = messages.recv::<NodeMessage>() => {
                    let Some(message) = incoming? else { return Ok(()) };
                    events.send(Event::NodeMessage { node: name.clone(), connection_id, message })?;
                }
                outgoing = rx.recv() => {
                    // `None`: the core dropped this link (node declared down); close the connection.
                    let Some(message): Option<CtldMessage> = outgoing else { return Ok(()) };
                    messages.send(&message).await?;
                }
            }
        }
    }
    .await;
    let _ = events.send(Event::NodeDisconnected { node: name, connection_id });
    result
}

/// Answers a configless host's [`NodeMessage::FetchConfig`] with the admin's file in force (or
/// only its digest, when the host's copy is that one) and closes the connection.
async fn serve_config(
    mut messages: MessageStream<TcpStream>,
    host: &str,
    peer: &str,
    have: Option<String>,
    text: &str,
) -> Result<(), ConnectionError> {
    use drover_shared::configless::{MAX_CONFIG_BYTES, digest};
    if text.len() > MAX_CONFIG_BYTES {
        protocol_break!("the config file is larger than {MAX_CONFIG_BYTES} bytes; not served to {host}");
    }
    let digest = digest(text);
    let unchanged = have.as_deref() == Some(digest.as_str());
    if !unchanged {
        tracing::info!(host, peer, digest = &digest[..12], "config served to a configless host");
    }
    let text = (!unchanged).then(|| text.to_owned());
    tokio::time::timeout(HANDSHAKE_TIMEOUT, messages.send(&CtldMessage::Config { digest, text })).await??;
    Ok(())
}

/// Checks a node's hello and proof, seals the connection and reads its first message (its
/// registration, or a configless host's config request).
async fn authenticate(
    messages: &mut MessageStream<TcpStream>,
    hello: Hello,
    key: &ClusterKey,
) -> Result<(String, NodeMessage), ConnectionError> {
    let Role::Node { name } = hello.role.clone() else { protocol_break!("not a node") };
    if hello.magic != MAGIC || !version_supported(hello.protocol_version) || hello.nonce.len() != NONCE_LEN {
        messages.send(&HelloReply::Reject { message: "unsupported hello".into() }).await?;
        protocol_break!("bad hello from {name}");
    }
    let version = hello.protocol_version;
    let server_nonce = random_bytes::<NONCE_LEN>()?.to_vec();
    let proof = key.prove("ctld", &name, &hello.nonce, &server_nonce, version);
    messages.send(&HelloReply::Accept { protocol_version: version, nonce: server_nonce.clone(), proof }).await?;
    let Some(node_proof) = messages.recv::<NodeProof>().await? else { protocol_break!("closed before proof") };
    if !key.verify("node", &name, &hello.nonce, &server_nonce, version, &node_proof.proof) {
        protocol_break!("node {name} failed authentication");
    }
    messages.seal(SessionKeys::derive(key, End::Ctld, &name, &hello.nonce, &server_nonce, version));
    messages.set_max_frame(MAX_FRAME);
    match messages.recv::<NodeMessage>().await? {
        Some(first) => Ok((name, first)),
        None => protocol_break!("node {name} closed before registering"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Room for every node twice over, at least the small cluster's figure, and never all of
    /// the descriptors the process may open.
    #[test]
    fn node_connections_follow_the_cluster_and_leave_descriptors_free() {
        let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        let room = usize::try_from(hard - RESERVED_DESCRIPTORS.min(hard / 4)).unwrap();
        assert_eq!(connection_slots(10), MIN_NODE_CONNECTIONS.min(room));
        assert_eq!(connection_slots(50_000), 101_024.min(room));
        assert!(connection_slots(10_000_000) <= room);
    }
}
