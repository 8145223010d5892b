//! Raft messages between replicas: TCP, authenticated like a node's connection to ctld. The
//! connecting replica and the accepting one each prove they hold the cluster key (HMAC over
//! both nonces, the connecting replica's id and the peer protocol version); after that every
//! frame is sealed (`drover_shared::proto::seal`: per-connection, per-direction keys and an
//! implicit sequence number), so nobody on the path can forge, alter or replay a log entry.
//! One request is in flight per connection; a failed or timed-out call drops the connection
//! and the next call opens a new one.

use super::TypeConfig;
use anyhow::{Context, bail};
use drover_shared::auth::{ClusterKey, NONCE_LEN, random_bytes};
use drover_shared::proto::frame::MessageStream;
use drover_shared::proto::seal::{End, SessionKeys};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

type NodeId = u64;

/// The version of this peer protocol (part of every proof).
const PEER_PROTOCOL: u16 = 1;
const MAGIC: [u8; 4] = *b"DRRF";
/// Largest frame between authenticated replicas: a batch of log entries (`max_payload_entries`
/// entries of at most a commit batch each) or a snapshot chunk.
pub(crate) const MAX_PEER_FRAME: usize = 256 << 20;
/// Time for the handshake.
const HANDSHAKE: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize)]
struct PeerHello {
    magic: [u8; 4],
    version: u16,
    from: NodeId,
    nonce: Vec<u8>,
}

#[derive(Debug, Serialize, Deserialize)]
struct PeerChallenge {
    nonce: Vec<u8>,
    proof: Vec<u8>,
}

#[derive(Debug, Serialize, Deserialize)]
struct PeerProof {
    proof: Vec<u8>,
}

#[derive(Debug, Serialize, Deserialize)]
enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
}

/// The name both proofs and the session keys are bound to.
fn peer_name(id: NodeId) -> String {
    format!("replica {id}")
}

/// Makes a link to each peer for openraft.
#[derive(Clone)]
pub(crate) struct Network {
    pub(crate) me: NodeId,
    pub(crate) key: Arc<ClusterKey>,
    /// Replica id → Raft address, from the config.
    pub(crate) peers: Arc<BTreeMap<NodeId, String>>,
    /// When each peer last answered a call (`scontrol ping`).
    pub(crate) answered: Answered,
}

/// When each peer last answered.
pub(crate) type Answered = Arc<std::sync::Mutex<BTreeMap<NodeId, std::time::Instant>>>;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerLink;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerLink {
        let address = self.peers.get(&target).cloned().unwrap_or_else(|| node.addr.clone());
        PeerLink { me: self.me, target, address, key: self.key.clone(), conn: None, answered: self.answered.clone() }
    }
}

/// The connection to one peer.
pub(crate) struct PeerLink {
    me: NodeId,
    target: NodeId,
    address: String,
    key: Arc<ClusterKey>,
    conn: Option<MessageStream<TcpStream>>,
    answered: Answered,
}

/// Why a call failed: the peer could not be reached (back off), or the exchange broke.
enum CallError {
    Unreachable(std::io::Error),
    Network(std::io::Error),
}

impl PeerLink {
    async fn connect(&self) -> anyhow::Result<MessageStream<TcpStream>> {
        let stream =
            TcpStream::connect(&self.address).await.with_context(|| format!("connecting to {}", self.address))?;
        stream.set_nodelay(true)?;
        let mut messages = MessageStream::new(stream);
        let nonce = random_bytes::<NONCE_LEN>()?.to_vec();
        let name = peer_name(self.me);
        messages.send(&PeerHello { magic: MAGIC, version: PEER_PROTOCOL, from: self.me, nonce: nonce.clone() }).await?;
        let challenge: PeerChallenge = messages.recv().await?.context("the peer closed the connection")?;
        if !self.key.verify("replica-server", &name, &nonce, &challenge.nonce, PEER_PROTOCOL, &challenge.proof) {
            bail!("replica {} at {} failed to prove the cluster key", self.target, self.address);
        }
        let proof = self.key.prove("replica-client", &name, &nonce, &challenge.nonce, PEER_PROTOCOL);
        messages.send(&PeerProof { proof }).await?;
        messages.seal(SessionKeys::derive(&self.key, End::Node, &name, &nonce, &challenge.nonce, PEER_PROTOCOL));
        messages.set_max_frame(MAX_PEER_FRAME);
        Ok(messages)
    }

    async fn call(&mut self, rpc: Rpc, ttl: Duration) -> Result<Reply, CallError> {
        let other = |e: anyhow::Error| std::io::Error::other(format!("replica {}: {e:#}", self.target));
        if self.conn.is_none() {
            match tokio::time::timeout(HANDSHAKE.min(ttl), self.connect()).await {
                Ok(Ok(conn)) => self.conn = Some(conn),
                Ok(Err(e)) => return Err(CallError::Unreachable(other(e))),
                Err(_) => return Err(CallError::Unreachable(other(anyhow::anyhow!("handshake timed out")))),
            }
        }
        let conn = self.conn.as_mut().expect("connected above");
        let exchange = async {
            conn.send(&rpc).await?;
            conn.recv::<Reply>().await?.context("the peer closed the connection")
        };
        match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok(reply)) => {
                let mut answered = self.answered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                answered.insert(self.target, std::time::Instant::now());
                Ok(reply)
            }
            Ok(Err(e)) => {
                self.conn = None;
                Err(CallError::Network(other(e)))
            }
            Err(_) => {
                self.conn = None;
                Err(CallError::Network(other(anyhow::anyhow!("no answer in {ttl:?}"))))
            }
        }
    }
}

fn rpc_error<E: std::error::Error>(e: CallError) -> RPCError<NodeId, BasicNode, E> {
    match e {
        CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
        CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
    }
}

fn unexpected<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other("the peer answered another request")))
}

/// A peer's answer to a request (`None`: an answer of another kind): its result, its error as
/// the peer's, or the error for a wrong answer.
fn answered<T, E: std::error::Error>(
    target: NodeId,
    answer: Option<Result<T, E>>,
) -> Result<T, RPCError<NodeId, BasicNode, E>> {
    match answer {
        Some(Ok(answer)) => Ok(answer),
        Some(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(target, e))),
        None => Err(unexpected()),
    }
}

impl RaftNetwork<TypeConfig> for PeerLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let reply = self.call(Rpc::Append(rpc), option.hard_ttl()).await.map_err(rpc_error)?;
        answered(self.target, if let Reply::Append(answer) = reply { Some(answer) } else { None })
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        let reply = self.call(Rpc::Snapshot(rpc), option.hard_ttl()).await.map_err(rpc_error)?;
        answered(self.target, if let Reply::Snapshot(answer) = reply { Some(answer) } else { None })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let reply = self.call(Rpc::Vote(rpc), option.hard_ttl()).await.map_err(rpc_error)?;
        answered(self.target, if let Reply::Vote(answer) = reply { Some(answer) } else { None })
    }
}

/// Connections the Raft port holds at once, at most: the replicas need one or two each; further
/// connections wait in the listen queue, so a flood of them cannot take ctld's file descriptors
/// (each unauthenticated one is closed after [`HANDSHAKE`]).
const MAX_PEER_CONNECTIONS: usize = 64;

/// Accepts the other replicas' connections on the Raft port.
pub(crate) async fn serve(listener: TcpListener, raft: Raft<TypeConfig>, network: Network) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_PEER_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: wait instead of trying again at once.
                tracing::warn!(error = %e, "accept on the Raft port failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (raft, network) = (raft.clone(), network.clone());
        tokio::spawn(async move {
            if let Err(e) = serve_peer(stream, raft, network).await {
                tracing::debug!(%peer, error = %format!("{e:#}"), "replica connection closed");
            }
            drop(permit);
        });
    }
}

async fn serve_peer(stream: TcpStream, raft: Raft<TypeConfig>, network: Network) -> anyhow::Result<()> {
    stream.set_nodelay(true)?;
    let mut messages = MessageStream::new(stream);
    let hello: PeerHello =
        tokio::time::timeout(HANDSHAKE, messages.recv()).await.context("no hello")??.context("closed before hello")?;
    if hello.magic != MAGIC || hello.version != PEER_PROTOCOL {
        bail!("not a replica of this version");
    }
    // A replica added at run time (`scontrol reconfigure`) is in the Raft membership before it is
    // in the config this replica started with.
    let member = || raft.metrics().borrow().membership_config.membership().get_node(&hello.from).is_some();
    if hello.from == network.me || !(network.peers.contains_key(&hello.from) || member()) {
        bail!("replica {} is not in this cluster's [[controller.replicas]]", hello.from);
    }
    let name = peer_name(hello.from);
    let nonce = random_bytes::<NONCE_LEN>()?.to_vec();
    let proof = network.key.prove("replica-server", &name, &hello.nonce, &nonce, PEER_PROTOCOL);
    messages.send(&PeerChallenge { nonce: nonce.clone(), proof }).await?;
    let proof: PeerProof =
        tokio::time::timeout(HANDSHAKE, messages.recv()).await.context("no proof")??.context("closed before proof")?;
    if !network.key.verify("replica-client", &name, &hello.nonce, &nonce, PEER_PROTOCOL, &proof.proof) {
        bail!("replica {} failed to prove the cluster key", hello.from);
    }
    messages.seal(SessionKeys::derive(&network.key, End::Ctld, &name, &hello.nonce, &nonce, PEER_PROTOCOL));
    messages.set_max_frame(MAX_PEER_FRAME);
    while let Some(rpc) = messages.recv::<Rpc>().await? {
        let reply = match rpc {
            Rpc::Append(rpc) => Reply::Append(raft.append_entries(rpc).await),
            Rpc::Vote(rpc) => Reply::Vote(raft.vote(rpc).await),
            Rpc::Snapshot(rpc) => Reply::Snapshot(raft.install_snapshot(rpc).await),
        };
        messages.send(&reply).await?;
    }
    Ok(())
}
