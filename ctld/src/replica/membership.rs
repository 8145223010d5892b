//! Changing the replicas at run time (docs/admin/ha.md, "Adding or removing a replica"): the
//! leader makes the Raft membership the configured set of replicas, with openraft's two steps —
//! a new replica joins as a learner and receives the log (or a snapshot) until it has caught
//! up, then one `change_membership` makes the configured set the voters (a removed replica is
//! left out of it).

use super::TypeConfig;
use crate::error::Failed;
use drover_shared::config::Replica;
use openraft::{BasicNode, Raft};
use std::collections::BTreeSet;
use std::time::Duration;

/// How long a new replica may take to catch up before the change is tried again.
const CATCH_UP: Duration = Duration::from_secs(30);

/// Makes the voters `wanted`'s ids, adding each new one as a learner first (and waiting until
/// it has caught up).
pub(crate) async fn change(raft: &Raft<TypeConfig>, wanted: &[Replica]) -> crate::error::Result<()> {
    let voters: BTreeSet<u64> = raft.metrics().borrow().membership_config.membership().voter_ids().collect();
    let ids: BTreeSet<u64> = wanted.iter().map(|r| r.id).collect();
    for replica in wanted.iter().filter(|r| !voters.contains(&r.id)) {
        tracing::info!(replica = replica.id, raft = replica.raft_address, "adding a replica: catching it up");
        let node = BasicNode::new(replica.raft_address.clone());
        tokio::time::timeout(CATCH_UP, raft.add_learner(replica.id, node, true))
            .await
            .failed_with(|| format!("replica {} did not catch up within {CATCH_UP:?}", replica.id))?
            .failed_with(|| format!("adding replica {}", replica.id))?;
    }
    if ids != voters {
        tracing::info!(?voters, wanted = ?ids, "changing the membership");
        raft.change_membership(ids.clone(), false).await.failed("changing the membership")?;
        tracing::info!(voters = ?ids, "membership changed");
    }
    Ok(())
}
