//! Replicated controllers (`[[controller.replicas]]`, docs/admin/ha.md): three or more ctld
//! processes keep the state database in step with Raft (openraft). Every batch the writer would
//! commit becomes one log entry; each replica applies committed entries to its own `drover.db`
//! with the writer's own code (`state_machine.rs`), and the leader releases a batch's
//! `AfterCommit` actions only once its entry is committed on a majority and applied (`writer.rs`).
//! Only the leader runs the core: a replica that wins an election builds its core from its own
//! database, as a restarted ctld does, and a leader that stops leading ends its process at once
//! (its supervisor restarts it as a follower). The log lives in `raft.db` (`log_store.rs`);
//! replicas talk over authenticated, sealed TCP (`network.rs`).
//!
//! Layer: beside the store, for the wiring in `lib.rs`; it imports only the store and the model.

mod log_store;
mod membership;
mod network;
pub(crate) mod seed;
mod state_machine;
mod wire;
pub(crate) mod writer;

use crate::error::Failed;
use drover_shared::auth::ClusterKey;
use drover_shared::config::Config;
use drover_shared::proto::client::ReplicaState;
use openraft::{BasicNode, Raft, ServerState, SnapshotPolicy};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

openraft::declare_raft_types!(
    /// The Raft types of the controller's log.
    pub(crate) TypeConfig:
        D = wire::Batch,
        R = wire::Applied,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Leader heartbeats (ms). openraft also gives each append (a heartbeat, or entries) this long
/// for its answer, which includes the follower's write of the entries to disk: 100 ms was
/// overrun on a loaded two-core host, and each overrun drops a link and delays the commit.
const HEARTBEAT_MS: u64 = 200;
/// How long a snapshot chunk's sending and installing may take (ms; openraft's default of
/// 200 ms was overrun by a 3 MiB chunk's write on a loaded host, and every overrun starts the
/// chunk again: a wiped follower never caught up).
const SNAPSHOT_CHUNK_MS: u64 = 3000;
/// A follower that hears no leader stands for election after openraft's leader lease (the
/// range's upper end) plus a random time in this range (ms): 1.2 to 1.6 s of silence, longer
/// when it has seen a longer log than its own (then the other stands first).
const ELECTION_MS: (u64, u64) = (400, 800);
/// A leader that has heard from no majority for this long stops (ms). It is shorter than the
/// least silence after which a follower may stand for election (lease + shortest timeout), so a
/// cut-off leader is gone before another can be elected: there is never a moment with two
/// leaders answering clients.
const LOST_QUORUM_MS: u64 = 1000;
const _: () = assert!(LOST_QUORUM_MS < ELECTION_MS.1 + ELECTION_MS.0);
/// How long the first replica of a new cluster listens for a leader before it proposes the
/// membership (ms).
const BOOTSTRAP_WAIT_MS: u64 = 2000;
/// How often the replicas' states are refreshed for `scontrol ping` (ms).
const STATE_EVERY_MS: u64 = 200;
/// A replica that answered the leader within this long is up (ms; heartbeats go every 200 ms).
const FRESH_MS: u64 = 1000;

/// What a replica does when it can no longer lead (it lost the lead or its majority, left the
/// membership, or a proposal failed): given by the binary, which ends the process (status 75,
/// so that the supervisor starts it again as a follower). The library never exits on its own.
pub type StepDown = fn(&str) -> !;

/// This process's replica: its Raft node and where its state database is.
pub(crate) struct Replica {
    pub(crate) step_down: StepDown,
    pub(crate) raft: Raft<TypeConfig>,
    pub(crate) id: u64,
    pub(crate) db_path: PathBuf,
    /// Every configured replica's node address, by id (config order is id order here); the
    /// membership task keeps it to the config in force.
    addresses: Arc<std::sync::Mutex<BTreeMap<u64, String>>>,
    answered: network::Answered,
}

/// Opens replica `id`'s log and state database (in its state directory), snapshotting every
/// `snapshot_every` entries (the log before a snapshot, but for a few entries, is purged),
/// starts its Raft node
/// and the Raft port (`raft_port` when its supervisor bound it, see ctld's `main.rs`), and, on a replica that never held a log, proposes the configured
/// membership (every replica proposes the same one; the first election decides).
pub(crate) async fn start(
    config: &Config,
    id: u64,
    key: Arc<ClusterKey>,
    snapshot_every: u64,
    raft_port: Option<std::net::TcpListener>,
    step_down: StepDown,
) -> crate::error::Result<Replica> {
    let me = config.replicas.iter().find(|r| r.id == id).failed("this replica is not in the config")?;
    let log = log_store::LogStore::open(&me.state_dir.join("raft.db"))?;
    let blank = log.is_blank();
    let db_path = me.state_dir.join("drover.db");
    let state_machine = state_machine::StateMachine::open(&db_path)?;
    let raft_config = openraft::Config {
        cluster_name: config.cluster_name.clone(),
        heartbeat_interval: HEARTBEAT_MS,
        install_snapshot_timeout: SNAPSHOT_CHUNK_MS,
        election_timeout_min: ELECTION_MS.0,
        election_timeout_max: ELECTION_MS.1,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every),
        max_in_snapshot_log_to_keep: (snapshot_every / 20).min(100),
        max_payload_entries: 16,
        ..openraft::Config::default()
    }
    .validate()
    .failed("the Raft settings")?;
    let peers: BTreeMap<u64, String> = config.replicas.iter().map(|r| (r.id, r.raft_address.clone())).collect();
    let answered = network::Answered::default();
    let network = network::Network::new(id, key, peers, answered.clone());
    let raft = Raft::new(id, Arc::new(raft_config), network.clone(), log, state_machine)
        .await
        .failed("starting the Raft node")?;
    let listener = match raft_port {
        Some(listener) => {
            listener.set_nonblocking(true).failed("the Raft port handed over")?;
            tokio::net::TcpListener::from_std(listener).failed("the Raft port handed over")?
        }
        None => tokio::net::TcpListener::bind(&me.raft_address)
            .await
            .failed_with(|| format!("binding the Raft port {}", me.raft_address))?,
    };
    tokio::spawn(network::serve(listener, raft.clone(), network));
    // A new cluster: the replica with the lowest id proposes the membership, once it has heard
    // from no leader for a while. Only one replica may: a blank replica that proposed its own
    // would stand for election with its short log and depose a working leader (Raft without
    // pre-vote), and a wiped replica of a running cluster hears from the leader well before.
    // A first replica seeded from a single controller's database (`seed.rs`) holds a position
    // and a membership already, so it is not untouched and proposes nothing.
    let first = config.replicas.iter().map(|r| r.id).min() == Some(id);
    if blank && first {
        let members: BTreeMap<u64, BasicNode> =
            config.replicas.iter().map(|r| (r.id, BasicNode::new(r.raft_address.clone()))).collect();
        let raft = raft.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(BOOTSTRAP_WAIT_MS)).await;
            let untouched = {
                let m = raft.metrics().borrow().clone();
                m.current_leader.is_none() && m.last_log_index.is_none() && m.vote.leader_id.term == 0
            };
            if untouched {
                tracing::info!("no replica holds a log: proposing the configured membership");
                if let Err(e) = raft.initialize(members).await {
                    tracing::info!(error = %e, "membership not proposed");
                }
            }
        });
    }
    tracing::info!(replica = id, raft = me.raft_address, "replica started");
    let addresses =
        Arc::new(std::sync::Mutex::new(config.replicas.iter().map(|r| (r.id, r.address.clone())).collect()));
    Ok(Replica { step_down, raft, id, db_path, addresses, answered })
}

impl Replica {
    /// Waits until this replica leads and has applied every entry committed before its term.
    pub(crate) async fn until_leader(&self) -> crate::error::Result<()> {
        let mut metrics = self.raft.metrics();
        loop {
            let leads = {
                let m = metrics.borrow_and_update();
                m.state == ServerState::Leader && m.current_leader == Some(self.id)
            };
            // Everything in this leader's log is applied first, its own entries of an earlier
            // life included: a replica killed while leading may restart still leading the same
            // term (its vote is stored), with entries it proposed then in its log but not yet
            // committed; they commit now, and the state (the next job id among it) must hold them.
            let applied_all = {
                let m = metrics.borrow();
                m.last_applied.map(|l| l.index) >= m.last_log_index
            };
            if leads && applied_all {
                match self.raft.ensure_linearizable().await {
                    Ok(_) => {
                        tracing::info!(replica = self.id, "this replica leads; loading the state");
                        return Ok(());
                    }
                    Err(e) => tracing::info!(error = %e, "elected but not confirmed"),
                }
            }
            metrics.changed().await.failed("the Raft node stopped")?;
        }
    }

    /// Whether this replica may stand for election. A replica that does not hold its client
    /// socket and node port yet (someone else has a port) must not lead: nobody could reach it.
    /// It still votes and replicates.
    pub(crate) fn electable(&self, electable: bool) {
        self.raft.runtime_config().elect(electable);
    }

    /// Who leads, as this replica knows it, for a follower's refusal: `replica N at ADDRESS`
    /// (the leader's node address), or `None` while there is no leader.
    pub(crate) fn leader_hint(&self) -> Option<String> {
        let leader = self.raft.metrics().borrow().current_leader?;
        let addresses = self.addresses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Some(match addresses.get(&leader) {
            Some(address) => format!("replica {leader} at {address}"),
            None => format!("replica {leader}"),
        })
    }

    /// Publishes every replica's state as this leader sees it (`scontrol ping`), every
    /// [`STATE_EVERY_MS`].
    pub(crate) fn publish_states(&self) -> tokio::sync::watch::Receiver<Vec<ReplicaState>> {
        let (publish, states) = tokio::sync::watch::channel(Vec::new());
        let (metrics, id) = (self.raft.metrics(), self.id);
        let (addresses, answered) = (self.addresses.clone(), self.answered.clone());
        tokio::spawn(async move {
            loop {
                let rows = {
                    let m = metrics.borrow();
                    let last = m.last_log_index.unwrap_or(0);
                    let answered = answered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    // The Raft membership's replicas (a new one while it catches up, too), at
                    // their configured node address, else their Raft address.
                    let configured = addresses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                    let members: BTreeMap<u64, String> = m
                        .membership_config
                        .membership()
                        .nodes()
                        .map(|(id, node)| (*id, configured.get(id).cloned().unwrap_or_else(|| node.addr.clone())))
                        .collect();
                    let members = if members.is_empty() { configured } else { members };
                    members
                        .iter()
                        .map(|(&replica, address)| {
                            let matched = m.replication.as_ref().and_then(|r| r.get(&replica).copied());
                            let behind = match (replica == id, matched) {
                                (true, _) => Some(0),
                                (false, Some(matched)) => Some(last.saturating_sub(matched.map_or(0, |l| l.index))),
                                (false, None) => None,
                            };
                            let fresh =
                                answered.get(&replica).is_some_and(|at| at.elapsed() < Duration::from_millis(FRESH_MS));
                            ReplicaState {
                                id: replica,
                                address: address.clone(),
                                leader: replica == id,
                                up: replica == id || fresh,
                                behind,
                            }
                        })
                        .collect()
                };
                if publish.send(rows).is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(STATE_EVERY_MS)).await;
            }
        });
        states
    }

    /// Keeps the Raft membership to the configured replicas while this replica leads: the
    /// function returned is given the config's replicas to read every [`STATE_EVERY_MS`]; when
    /// they change (`scontrol reconfigure`, which
    /// allows one added or removed at a time), a new replica is added as a learner, and once
    /// it has caught up the membership is changed to the configured set; a removed one is left
    /// out. A leader that removed itself exits (status 75) once the change is committed. Only a
    /// change made while this replica leads counts: the config it started with may be older
    /// than the membership.
    pub(crate) fn follow_config(&self) -> impl FnOnce(ConfiguredReplicas) + use<> {
        let (raft, id, addresses, step_down) = (self.raft.clone(), self.id, self.addresses.clone(), self.step_down);
        move |config| follow_config(raft, id, addresses, config, step_down)
    }

    /// Ends the process the moment this replica stops leading or has heard from no majority for
    /// [`LOST_QUORUM_MS`], so that a deposed leader never answers or schedules beside the new one.
    pub(crate) fn stop_when_deposed(&self) {
        let mut metrics = self.raft.metrics();
        let (id, step_down) = (self.id, self.step_down);
        tokio::spawn(async move {
            loop {
                let lost = {
                    let m = metrics.borrow_and_update();
                    if m.state != ServerState::Leader {
                        Some(format!("now {:?}", m.state))
                    } else {
                        m.millis_since_quorum_ack
                            .filter(|ms| *ms > LOST_QUORUM_MS)
                            .map(|ms| format!("no majority heard for {ms} ms"))
                    }
                };
                if let Some(why) = lost {
                    tracing::error!(
                        replica = id,
                        why,
                        "leadership lost; exiting so that the supervisor restarts this replica as a follower"
                    );
                    step_down("leadership lost");
                }
                let _ = tokio::time::timeout(Duration::from_millis(100), metrics.changed()).await;
            }
        });
    }
}

/// The configured replicas, read anew each time (the config in force after `scontrol
/// reconfigure`).
pub(crate) type ConfiguredReplicas = Box<dyn Fn() -> Vec<drover_shared::config::Replica> + Send>;

/// See [`Replica::follow_config`].
fn follow_config(
    raft: Raft<TypeConfig>,
    id: u64,
    addresses: Arc<std::sync::Mutex<BTreeMap<u64, String>>>,
    config: ConfiguredReplicas,
    step_down: StepDown,
) {
    let mut applied = config();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(STATE_EVERY_MS)).await;
            let wanted = config();
            if wanted == applied {
                continue;
            }
            *addresses.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                wanted.iter().map(|r| (r.id, r.address.clone())).collect();
            match membership::change(&raft, &wanted).await {
                Ok(()) => applied = wanted,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "membership not changed yet; trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            }
            if !applied.iter().any(|r| r.id == id) {
                tracing::error!(replica = id, "this replica left the membership; exiting");
                step_down("left the membership");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::StorageError;

    /// A fresh log and state database in a scratch directory (kept while the test runs).
    struct Fresh;

    impl
        openraft::testing::StoreBuilder<TypeConfig, log_store::LogStore, state_machine::StateMachine, tempfile::TempDir>
        for Fresh
    {
        async fn build(
            &self,
        ) -> Result<(tempfile::TempDir, log_store::LogStore, state_machine::StateMachine), StorageError<u64>> {
            let dir = tempfile::tempdir().expect("scratch directory");
            let log = log_store::LogStore::open(&dir.path().join("raft.db")).expect("the log");
            let state = state_machine::StateMachine::open(&dir.path().join("drover.db")).expect("the state database");
            Ok((dir, log, state))
        }
    }

    /// openraft's own conformance suite for log storage and state machines (vote, log ranges,
    /// truncation, purge, membership, apply, snapshots) passes on the SQLite log and the state
    /// database.
    #[test]
    fn the_log_and_the_state_database_pass_openrafts_storage_suite() {
        openraft::testing::Suite::test_all(Fresh).expect("the storage suite");
    }
}
