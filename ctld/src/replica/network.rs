//! Raft messages between replicas: TCP, authenticated like a node's connection to ctld. The
//! connecting replica and the accepting one each prove they hold the cluster key (HMAC over
//! both nonces, the connecting replica's id and the peer protocol version); after that every
//! frame is sealed (`drover_shared::proto::seal`: per-connection, per-direction keys and an
//! implicit sequence number), so nobody on the path can forge, alter or replay a log entry.
//! One request is in flight per connection.
//!
//! **Warm links.** Every replica keeps [`WARM_LINKS`] idle authenticated connections ("links")
//! to every other, opened by a keeper task per peer that checks them every [`CHECK_EVERY`] and
//! opens what is missing, backing off from 50 ms to 1 s while the peer cannot be reached.
//! openraft asks [`Network::new_client`] for a client per replication stream and, during an
//! election, per vote request (and per leadership check); the [`PeerLink`] it gets takes an idle
//! link for its first call instead of connecting, keeps it while its calls succeed and gives it
//! back when openraft drops it, so one request is in flight per link and an election needs no new
//! connection through a port that may be flooded. A failed or timed-out call drops its link; the
//! next call takes another, or waits within its deadline for the keeper to open one. Only the
//! keeper connects: a call never starts a handshake it may abandon half-way (on a loaded host a
//! handshake can outlast a heartbeat's deadline, and each abandoned one used to count as the peer
//! being unreachable, which stops replication to it for half a second). A call that finds no
//! link reports the peer unreachable only when the keeper's last dial failed.
//!
//! **The Raft port under a flood.** Accepting never waits: each connection is admitted or closed
//! at once. One that has not proved the key holds no more than a place among at most
//! [`MAX_UNPROVEN`] (the oldest is closed to make room for a new one, so a replica's connection
//! always gets in and has until a few hundred newer ones arrived to finish its handshake, which
//! takes one round trip), at most [`MAX_UNPROVEN_PER_SOURCE`] of them per source address (but
//! for the replicas' own addresses: on one host every replica and any local attacker connect
//! from 127.0.0.1, so there the deadlines and the global bound carry it), and must send its
//! hello within [`HELLO_DEADLINE`] and its proof within [`PROOF_DEADLINE`] of the challenge.
//! Authenticated links count per replica: the [`MAX_LINKS_PER_REPLICA`]+1th from one replica
//! closes its oldest. Before the proof a frame is at most 4 KiB and a nonce exactly
//! [`NONCE_LEN`] bytes; nothing an unauthenticated peer sends sizes an allocation.

use super::TypeConfig;
use crate::error::{Failed, refuse};
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
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

type NodeId = u64;

/// The version of this peer protocol (part of every proof).
const PEER_PROTOCOL: u16 = 1;
const MAGIC: [u8; 4] = *b"DRRF";
/// Largest frame between authenticated replicas: a batch of log entries (`max_payload_entries`
/// entries of at most a commit batch each) or a snapshot chunk.
pub(crate) const MAX_PEER_FRAME: usize = 256 << 20;
/// The accepting replica waits this long for a new connection's hello…
const HELLO_DEADLINE: Duration = Duration::from_millis(300);
/// …and this long for its proof once it sent the challenge.
const PROOF_DEADLINE: Duration = Duration::from_millis(300);
/// The connecting replica's bound on connecting and authenticating.
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// Connections the Raft port holds that have not proved the key, at most.
const MAX_UNPROVEN: usize = 256;
/// Of those, from one source address (a replica's address excepted).
const MAX_UNPROVEN_PER_SOURCE: usize = 8;
/// Authenticated links from one replica the Raft port holds, at most: its warm links and those
/// openraft holds (a replication stream, a snapshot, votes and leadership checks in flight).
const MAX_LINKS_PER_REPLICA: usize = 8;
/// Idle links kept open to each peer.
const WARM_LINKS: usize = 2;
/// Idle links kept to each peer, at most (links openraft gave back beyond the warm ones).
const MAX_IDLE_LINKS: usize = 4;
/// How often a keeper checks its peer's idle links (sooner when one was taken).
const CHECK_EVERY: Duration = Duration::from_millis(200);
/// A keeper's pause after a failed dial: the first, doubling up to the last.
const REDIAL: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));
/// At most one warning per this long that the Raft port turns connections away.
const FLOOD_WARNING_EVERY: Duration = Duration::from_secs(60);

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

/// Makes a link to each peer for openraft, and keeps [`WARM_LINKS`] idle authenticated
/// connections ready to each (see the module docs).
#[derive(Clone)]
pub(crate) struct Network {
    me: NodeId,
    key: Arc<ClusterKey>,
    /// Replica id → Raft address, from the config.
    peers: Arc<BTreeMap<NodeId, String>>,
    /// When each peer last answered a call (`scontrol ping`).
    answered: Answered,
    /// Each peer's idle links, by id; a keeper task per peer fills them.
    warm: Arc<std::sync::Mutex<BTreeMap<NodeId, Arc<Warm>>>>,
}

/// When each peer last answered.
pub(crate) type Answered = Arc<std::sync::Mutex<BTreeMap<NodeId, std::time::Instant>>>;

/// An authenticated, sealed connection to a peer, between exchanges.
type Link = MessageStream<TcpStream>;

impl Network {
    /// The network of replica `me`, with a keeper task per other replica of `peers` (replica id
    /// → Raft address) that keeps links to it warm. Must be called on the runtime.
    pub(crate) fn new(
        me: NodeId,
        key: Arc<ClusterKey>,
        peers: BTreeMap<NodeId, String>,
        answered: Answered,
    ) -> Network {
        let network = Network { me, key, peers: Arc::new(peers), answered, warm: Arc::default() };
        for (&target, address) in network.peers.iter() {
            if target != me {
                network.warm(target, address);
            }
        }
        network
    }

    /// Peer `target`'s idle links; the first time, starts its keeper (a replica added at run
    /// time gets one when openraft first asks for a link to it).
    fn warm(&self, target: NodeId, address: &str) -> Arc<Warm> {
        let mut warm = lock(&self.warm);
        warm.entry(target)
            .or_insert_with(|| {
                let links = Arc::new(Warm::default());
                let dialer = Dialer { me: self.me, target, address: address.to_owned(), key: self.key.clone() };
                tokio::spawn(keep_warm(Arc::downgrade(&links), dialer));
                links
            })
            .clone()
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerLink;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerLink {
        let address = self.peers.get(&target).cloned().unwrap_or_else(|| node.addr.clone());
        let warm = self.warm(target, &address);
        PeerLink { target, conn: None, warm, answered: self.answered.clone() }
    }
}

/// A peer's idle links, newest last.
struct Warm {
    idle: std::sync::Mutex<Vec<Link>>,
    /// Wakes the keeper when a link was taken.
    taken: tokio::sync::Notify,
    /// Wakes the calls waiting for a link when one was given back.
    given: tokio::sync::Notify,
    /// Whether the keeper's last dial made a link (true until one failed): a call that finds no
    /// idle link within its deadline reports the peer unreachable (openraft then backs off)
    /// only when it is; a reachable but slow peer is tried again at the next heartbeat.
    reachable: std::sync::atomic::AtomicBool,
}

impl Default for Warm {
    fn default() -> Warm {
        Warm {
            idle: std::sync::Mutex::default(),
            taken: tokio::sync::Notify::new(),
            given: tokio::sync::Notify::new(),
            reachable: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

impl Warm {
    /// The newest idle link that is still open (closed ones are dropped on the way).
    fn take(&self) -> Option<Link> {
        let link = {
            let mut idle = lock(&self.idle);
            std::iter::from_fn(|| idle.pop()).find(open)
        };
        self.taken.notify_one();
        link
    }

    /// Keeps `link` for the next call, unless [`MAX_IDLE_LINKS`] wait already.
    fn give_back(&self, link: Link) {
        {
            let mut idle = lock(&self.idle);
            if idle.len() < MAX_IDLE_LINKS {
                idle.push(link);
            }
        }
        self.given.notify_waiters();
    }

    /// An idle link, waiting up to `within` for one to be given back (the keeper opens one as
    /// soon as one is taken); `None` when none came.
    async fn wait(&self, within: Duration) -> Option<Link> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let given = self.given.notified();
            tokio::pin!(given);
            // Registered before the look, so a link given back in between wakes this call.
            given.as_mut().enable();
            if let Some(link) = self.take() {
                return Some(link);
            }
            tokio::time::timeout_at(deadline, given).await.ok()?;
        }
    }

    /// Drops the idle links the peer closed; how many more the keeper should open.
    fn missing(&self) -> usize {
        let mut idle = lock(&self.idle);
        idle.retain(open);
        WARM_LINKS.saturating_sub(idle.len())
    }
}

/// Whether an idle link is still open: between exchanges a peer sends nothing, so a link with
/// anything to read (its end, most likely) is done with.
fn open(link: &Link) -> bool {
    matches!(link.get_ref().try_read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Keeps [`WARM_LINKS`] idle links to one peer open for as long as the network lives: checks them
/// every [`CHECK_EVERY`] and at once when one was taken, and opens what is missing, backing off
/// from [`REDIAL`]'s first pause to its last while the peer cannot be reached.
async fn keep_warm(warm: std::sync::Weak<Warm>, dialer: Dialer) {
    let mut pause = REDIAL.0;
    loop {
        let Some(links) = warm.upgrade() else { return };
        if links.missing() == 0 {
            let _ = tokio::time::timeout(CHECK_EVERY, links.taken.notified()).await;
            continue;
        }
        match tokio::time::timeout(DIAL_TIMEOUT, dialer.dial()).await {
            Ok(Ok(link)) => {
                links.reachable.store(true, std::sync::atomic::Ordering::Relaxed);
                links.give_back(link);
                pause = REDIAL.0;
            }
            failed => {
                links.reachable.store(false, std::sync::atomic::Ordering::Relaxed);
                let error = match failed {
                    Ok(Err(e)) => format!("{e:#}"),
                    _ => format!("no handshake within {DIAL_TIMEOUT:?}"),
                };
                tracing::debug!(replica = dialer.target, error, "no link to the replica yet");
                drop(links);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(REDIAL.1);
            }
        }
    }
}

/// What opening a link to one peer takes.
#[derive(Clone)]
struct Dialer {
    me: NodeId,
    target: NodeId,
    address: String,
    key: Arc<ClusterKey>,
}

impl Dialer {
    /// Connects and authenticates (the caller bounds the time).
    async fn dial(&self) -> crate::error::Result<Link> {
        let stream =
            TcpStream::connect(&self.address).await.failed_with(|| format!("connecting to {}", self.address))?;
        stream.set_nodelay(true)?;
        let mut messages = MessageStream::new(stream);
        let nonce = random_bytes::<NONCE_LEN>()?.to_vec();
        let name = peer_name(self.me);
        messages.send(&PeerHello { magic: MAGIC, version: PEER_PROTOCOL, from: self.me, nonce: nonce.clone() }).await?;
        let challenge: PeerChallenge = messages.recv().await?.failed("the peer closed the connection")?;
        if challenge.nonce.len() != NONCE_LEN
            || !self.key.verify("replica-server", &name, &nonce, &challenge.nonce, PEER_PROTOCOL, &challenge.proof)
        {
            refuse!("replica {} at {} failed to prove the cluster key", self.target, self.address);
        }
        let proof = self.key.prove("replica-client", &name, &nonce, &challenge.nonce, PEER_PROTOCOL);
        messages.send(&PeerProof { proof }).await?;
        messages.seal(SessionKeys::derive(&self.key, End::Node, &name, &nonce, &challenge.nonce, PEER_PROTOCOL));
        messages.set_max_frame(MAX_PEER_FRAME);
        Ok(messages)
    }
}

/// openraft's client of one peer: it takes a warm link for its first call (waiting, within the
/// call's deadline, for the keeper to open one when none is idle), keeps it while calls
/// succeed, and gives it back when dropped.
pub(crate) struct PeerLink {
    target: NodeId,
    /// The link between calls; a call holds it, so a call openraft gives up on (its future
    /// dropped mid-exchange) drops the link with it and no half-read answer is left behind.
    conn: Option<Link>,
    warm: Arc<Warm>,
    answered: Answered,
}

impl Drop for PeerLink {
    fn drop(&mut self) {
        if let Some(link) = self.conn.take() {
            self.warm.give_back(link);
        }
    }
}

/// Why a call failed: the peer could not be reached (back off), or the exchange broke.
enum CallError {
    Unreachable(std::io::Error),
    Network(std::io::Error),
}

impl PeerLink {
    async fn call(&mut self, rpc: Rpc, ttl: Duration) -> Result<Reply, CallError> {
        let target = self.target;
        let other = |e: crate::error::Error| std::io::Error::other(format!("replica {target}: {e:#}"));
        let started = tokio::time::Instant::now();
        let conn = match self.conn.take() {
            Some(conn) => Some(conn),
            None => self.warm.wait(ttl).await,
        };
        let Some(mut conn) = conn else {
            let why = crate::error::Error::Refused(format!("no link within {ttl:?}"));
            return Err(if self.warm.reachable.load(std::sync::atomic::Ordering::Relaxed) {
                CallError::Network(other(why))
            } else {
                CallError::Unreachable(other(why))
            });
        };
        let ttl = ttl.saturating_sub(started.elapsed());
        let exchange = async {
            conn.send(&rpc).await?;
            conn.recv::<Reply>().await?.failed("the peer closed the connection")
        };
        match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok(reply)) => {
                lock(&self.answered).insert(target, std::time::Instant::now());
                self.conn = Some(conn);
                Ok(reply)
            }
            Ok(Err(e)) => Err(CallError::Network(other(e))),
            Err(_) => Err(CallError::Network(other(crate::error::Error::Refused(format!("no answer in {ttl:?}"))))),
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

/// Who holds the Raft port's connections: those that have not proved the key yet (oldest first,
/// counted per source address) and each replica's links. Every entry holds the sender whose drop
/// closes its connection.
#[derive(Default)]
struct Gate {
    next: u64,
    unproven: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    per_source: HashMap<IpAddr, usize>,
    links: BTreeMap<NodeId, VecDeque<(u64, oneshot::Sender<()>)>>,
    /// Connections refused or closed to make room, since the last warning.
    turned_away: u64,
}

/// A connection's place at the [`Gate`]; `closed` resolves when the gate closes it.
struct Admitted {
    serial: u64,
    closed: oneshot::Receiver<()>,
}

impl Gate {
    /// Admits a connection from `source` (`trusted`: a replica's address, held to the global
    /// bound only): `None` when the source holds [`MAX_UNPROVEN_PER_SOURCE`] unproven
    /// connections already; at [`MAX_UNPROVEN`], the oldest unproven one is closed for it.
    fn admit(&mut self, source: IpAddr, trusted: bool) -> Option<Admitted> {
        let held = self.per_source.get(&source).copied().unwrap_or(0);
        if !trusted && held >= MAX_UNPROVEN_PER_SOURCE {
            self.turned_away += 1;
            return None;
        }
        if self.unproven.len() >= MAX_UNPROVEN
            && let Some((_, (oldest, _closed))) = self.unproven.pop_first()
        {
            self.release(oldest);
            self.turned_away += 1;
        }
        let serial = self.next;
        self.next += 1;
        let (close, closed) = oneshot::channel();
        self.unproven.insert(serial, (source, close));
        *self.per_source.entry(source).or_default() += 1;
        Some(Admitted { serial, closed })
    }

    fn release(&mut self, source: IpAddr) {
        if let Some(held) = self.per_source.get_mut(&source) {
            *held -= 1;
            if *held == 0 {
                self.per_source.remove(&source);
            }
        }
    }

    /// Connection `serial` proved it is `replica`'s: it leaves the unproven ones and joins the
    /// replica's links, the oldest of which is closed beyond [`MAX_LINKS_PER_REPLICA`]. False
    /// when it was closed meanwhile.
    fn prove(&mut self, serial: u64, replica: NodeId) -> bool {
        let Some((source, close)) = self.unproven.remove(&serial) else { return false };
        self.release(source);
        let links = self.links.entry(replica).or_default();
        links.push_back((serial, close));
        if links.len() > MAX_LINKS_PER_REPLICA {
            links.pop_front();
        }
        true
    }

    /// Connection `serial` (of `replica`, once proven) ended.
    fn forget(&mut self, serial: u64, replica: Option<NodeId>) {
        match replica {
            None => {
                if let Some((source, _)) = self.unproven.remove(&serial) {
                    self.release(source);
                }
            }
            Some(replica) => {
                if let Some(links) = self.links.get_mut(&replica) {
                    links.retain(|(s, _)| *s != serial);
                    if links.is_empty() {
                        self.links.remove(&replica);
                    }
                }
            }
        }
    }
}

/// A connection's entry at the gate, forgotten when its task ends.
struct Ticket {
    gate: Arc<std::sync::Mutex<Gate>>,
    serial: u64,
    replica: Option<NodeId>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.gate).forget(self.serial, self.replica);
    }
}

/// Accepts the other replicas' connections on the Raft port. Accepting never waits for room:
/// each connection is admitted or closed at once (see [`Gate::admit`]), and what it holds before
/// it proves the key is bounded in number and time.
pub(crate) async fn serve(listener: TcpListener, raft: Raft<TypeConfig>, network: Network) {
    let gate = Arc::new(std::sync::Mutex::new(Gate::default()));
    // Addresses replicas connect from; on one host, everyone's: see the module docs.
    let replica_hosts: HashSet<IpAddr> =
        network.peers.values().filter_map(|a| a.parse::<std::net::SocketAddr>().ok()).map(|a| a.ip()).collect();
    let mut warned = tokio::time::Instant::now();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: wait instead of trying again at once.
                tracing::warn!(error = %e, "accept on the Raft port failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let admitted = {
            let mut gate = lock(&gate);
            let admitted = gate.admit(peer.ip(), replica_hosts.contains(&peer.ip()));
            if gate.turned_away > 0 && warned.elapsed() >= FLOOD_WARNING_EVERY {
                tracing::warn!(
                    connections = gate.turned_away,
                    "the Raft port is flooded: connections that had not proved the cluster key were refused or \
                     closed to make room"
                );
                gate.turned_away = 0;
                warned = tokio::time::Instant::now();
            }
            admitted
        };
        let Some(admitted) = admitted else { continue };
        let ticket = Ticket { gate: gate.clone(), serial: admitted.serial, replica: None };
        let (raft, network) = (raft.clone(), network.clone());
        tokio::spawn(async move {
            if let Err(e) = serve_peer(stream, admitted.closed, ticket, raft, network).await {
                tracing::debug!(%peer, error = %format!("{e:#}"), "replica connection closed");
            }
        });
    }
}

/// Serves one connection: the handshake within its deadlines, then the peer's calls, until it
/// closes, fails or the gate closes it.
async fn serve_peer(
    stream: TcpStream,
    mut closed: oneshot::Receiver<()>,
    mut ticket: Ticket,
    raft: Raft<TypeConfig>,
    network: Network,
) -> crate::error::Result<()> {
    let (mut messages, from) = tokio::select! {
        proven = tokio::time::timeout(HELLO_DEADLINE + PROOF_DEADLINE, handshake(stream, &raft, &network)) => {
            proven.failed("no handshake in time")??
        }
        _ = &mut closed => refuse!("closed to make room for a newer connection"),
    };
    if !lock(&ticket.gate).prove(ticket.serial, from) {
        refuse!("closed to make room for a newer connection");
    }
    ticket.replica = Some(from);
    loop {
        let rpc = tokio::select! {
            rpc = messages.recv::<Rpc>() => rpc?,
            _ = &mut closed => refuse!("replica {from} opened a newer link"),
        };
        let Some(rpc) = rpc else { return Ok(()) };
        let reply = match rpc {
            Rpc::Append(rpc) => Reply::Append(raft.append_entries(rpc).await),
            Rpc::Vote(rpc) => Reply::Vote(raft.vote(rpc).await),
            Rpc::Snapshot(rpc) => Reply::Snapshot(raft.install_snapshot(rpc).await),
        };
        messages.send(&reply).await?;
    }
}

/// The accepting side's handshake: the hello within [`HELLO_DEADLINE`], the proof within
/// [`PROOF_DEADLINE`] of the challenge; the authenticated, sealed link and the replica's id.
async fn handshake(
    stream: TcpStream,
    raft: &Raft<TypeConfig>,
    network: &Network,
) -> crate::error::Result<(Link, NodeId)> {
    stream.set_nodelay(true)?;
    let mut messages = MessageStream::new(stream);
    let hello: PeerHello = tokio::time::timeout(HELLO_DEADLINE, messages.recv())
        .await
        .failed("no hello")??
        .failed("closed before hello")?;
    if hello.magic != MAGIC || hello.version != PEER_PROTOCOL || hello.nonce.len() != NONCE_LEN {
        refuse!("not a replica of this version");
    }
    // A replica added at run time (`scontrol reconfigure`) is in the Raft membership before it is
    // in the config this replica started with.
    let member = || raft.metrics().borrow().membership_config.membership().get_node(&hello.from).is_some();
    if hello.from == network.me || !(network.peers.contains_key(&hello.from) || member()) {
        refuse!("replica {} is not in this cluster's [[controller.replicas]]", hello.from);
    }
    let name = peer_name(hello.from);
    let nonce = random_bytes::<NONCE_LEN>()?.to_vec();
    let proof = network.key.prove("replica-server", &name, &hello.nonce, &nonce, PEER_PROTOCOL);
    messages.send(&PeerChallenge { nonce: nonce.clone(), proof }).await?;
    let proof: PeerProof = tokio::time::timeout(PROOF_DEADLINE, messages.recv())
        .await
        .failed("no proof")??
        .failed("closed before proof")?;
    if !network.key.verify("replica-client", &name, &hello.nonce, &nonce, PEER_PROTOCOL, &proof.proof) {
        refuse!("replica {} failed to prove the cluster key", hello.from);
    }
    messages.seal(SessionKeys::derive(&network.key, End::Ctld, &name, &hello.nonce, &nonce, PEER_PROTOCOL));
    messages.set_max_frame(MAX_PEER_FRAME);
    Ok((messages, hello.from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// A source beyond its bound is refused at once; a replica's address only meets the global
    /// bound, where the oldest unproven connection is closed to let the new one in.
    #[test]
    fn the_gate_bounds_unproven_connections_per_source_and_in_all() {
        let mut gate = Gate::default();
        let mut stranger: Vec<Admitted> =
            (0..MAX_UNPROVEN_PER_SOURCE).map(|_| gate.admit(ip("10.0.0.9"), false).unwrap()).collect();
        assert!(gate.admit(ip("10.0.0.9"), false).is_none());
        assert_eq!(gate.turned_away, 1);
        // One that ends makes room for the next.
        let done = stranger.pop().unwrap();
        gate.forget(done.serial, None);
        stranger.push(gate.admit(ip("10.0.0.9"), false).unwrap());

        let mut local: Vec<Admitted> =
            (0..MAX_UNPROVEN * 2).map(|_| gate.admit(ip("127.0.0.1"), true).unwrap()).collect();
        assert_eq!(gate.unproven.len(), MAX_UNPROVEN);
        assert_eq!(gate.per_source.values().sum::<usize>(), MAX_UNPROVEN);
        // The stranger's connections were the oldest: closed first.
        for admitted in &mut stranger {
            assert_eq!(admitted.closed.try_recv(), Err(oneshot::error::TryRecvError::Closed));
        }
        assert!(!gate.per_source.contains_key(&ip("10.0.0.9")));
        let newest = local.last_mut().unwrap();
        assert_eq!(newest.closed.try_recv(), Err(oneshot::error::TryRecvError::Empty));
        // The newest proves it is replica 2's; it no longer counts as unproven.
        assert!(gate.prove(newest.serial, 2));
        assert_eq!(gate.unproven.len(), MAX_UNPROVEN - 1);
        // One closed meanwhile cannot prove anything.
        assert!(!gate.prove(local[0].serial, 2));
    }

    /// A replica's links beyond the bound close its oldest; ended links are forgotten.
    #[test]
    fn a_replicas_newest_links_replace_its_oldest() {
        let mut gate = Gate::default();
        let mut links: Vec<Admitted> =
            (0..=MAX_LINKS_PER_REPLICA).map(|_| gate.admit(ip("127.0.0.1"), true).unwrap()).collect();
        for link in &links {
            assert!(gate.prove(link.serial, 3));
        }
        assert_eq!(gate.links[&3].len(), MAX_LINKS_PER_REPLICA);
        assert_eq!(links[0].closed.try_recv(), Err(oneshot::error::TryRecvError::Closed));
        assert_eq!(links[1].closed.try_recv(), Err(oneshot::error::TryRecvError::Empty));
        for link in &links {
            gate.forget(link.serial, Some(3));
        }
        assert!(gate.links.is_empty() && gate.unproven.is_empty() && gate.per_source.is_empty());
    }
}
