//! Who may hold ctld's client connections, and how much of ctld each connection may use: at most
//! `controller.max_connections_per_user` connections per plain user and [`USER_CONNECTIONS`] for
//! all plain users together, with [`RESERVED_CONNECTIONS`] more that only root, operators and
//! admins can take (so no user can lock them out); memory for unfinished requests (frames still
//! arriving) from a per-uid pool and, for plain users, from one pool they share; and at most
//! [`REQUESTS_PER_USER`] requests of one plain user served at once, so that one user's many busy
//! connections queue behind each other instead of in front of everyone else's requests. Nodes
//! connect on the node port and never count here.

use drover_shared::proto::TOO_MANY_CONNECTIONS;
use drover_shared::proto::frame::{MAX_REQUEST_FRAME, ReadBudget};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use thiserror::Error;
use tokio::sync::Semaphore;

/// Client connections all plain users together may hold.
pub(crate) const USER_CONNECTIONS: usize = 1024;
/// Client connections beyond [`USER_CONNECTIONS`] that only root, operators and admins may hold.
pub(crate) const RESERVED_CONNECTIONS: usize = 256;
/// Requests of one plain user served at once (read, handled and answered); the user's other
/// requests wait their turn, in arrival order, on their own connections. Root, operators and
/// admins are bounded only by their connections.
pub(crate) const REQUESTS_PER_USER: usize = 8;
/// Memory the unfinished requests of one uid may hold beyond each connection's small free buffer:
/// two requests of the largest size ([`MAX_REQUEST_FRAME`]) arriving at once, and a bit more.
pub(crate) const UNFINISHED_PER_USER: usize = 2 * MAX_REQUEST_FRAME + 2 * 1024 * 1024;
/// Memory the unfinished requests of all plain users together may hold beyond the free buffers
/// (1,024 connections of at most 64 KiB each, 64 MiB): with them, what clients can make ctld
/// hold stays under 200 MiB.
pub(crate) const UNFINISHED_USERS: usize = 128 * 1024 * 1024;

/// Why a connection is refused; the text is what the client prints.
#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum Refusal {
    #[error(
        "{TOO_MANY_CONNECTIONS} to the controller from this user (at most {limit} at once); wait for \
         some to finish and try again"
    )]
    PerUser { limit: usize },
    #[error("the controller is serving {TOO_MANY_CONNECTIONS} (at most {limit} at once); try again shortly")]
    Everyone { limit: usize },
}

/// The connections, memory pools and request turns of every uid that has a connection open.
///
/// One std mutex guards the counts: it is held only to count a connection in or out, never across
/// an await, so a lock is cheaper and simpler than a task owning the counts behind a channel.
pub(crate) struct Admission {
    uids: Mutex<Uids>,
    /// What plain users' unfinished requests may hold together.
    users_pool: Arc<Semaphore>,
}

#[derive(Default)]
struct Uids {
    by_uid: HashMap<u32, PerUid>,
    /// Connections of plain users, and of root, operators and admins.
    users: usize,
    privileged: usize,
}

struct PerUid {
    connections: usize,
    pool: Arc<Semaphore>,
    turns: Arc<Semaphore>,
}

/// An admitted connection: counted until dropped.
pub(crate) struct Admitted {
    admission: Arc<Admission>,
    uid: u32,
    privileged: bool,
    /// The memory its unfinished requests draw on.
    pub(crate) budget: ReadBudget,
    /// A permit from here is held while one of its requests is served.
    pub(crate) turns: Arc<Semaphore>,
}

impl Admission {
    pub(crate) fn new() -> Arc<Admission> {
        Arc::new(Admission { uids: Mutex::default(), users_pool: ReadBudget::pool(UNFINISHED_USERS) })
    }

    /// Counts a connection of `uid` in, or refuses it: a plain user beyond `per_user` connections
    /// or beyond [`USER_CONNECTIONS`] in all; root, operators and admins (`privileged`) beyond
    /// [`RESERVED_CONNECTIONS`] of their own.
    pub(crate) fn admit(self: &Arc<Self>, uid: u32, privileged: bool, per_user: usize) -> Result<Admitted, Refusal> {
        let mut uids = self.uids.lock().unwrap_or_else(PoisonError::into_inner);
        let own = uids.by_uid.get(&uid).map_or(0, |u| u.connections);
        if privileged {
            if uids.privileged >= RESERVED_CONNECTIONS {
                return Err(Refusal::Everyone { limit: USER_CONNECTIONS + RESERVED_CONNECTIONS });
            }
        } else if own >= per_user.max(1) {
            return Err(Refusal::PerUser { limit: per_user.max(1) });
        } else if uids.users >= USER_CONNECTIONS {
            return Err(Refusal::Everyone { limit: USER_CONNECTIONS });
        }
        if privileged {
            uids.privileged += 1;
        } else {
            uids.users += 1;
        }
        let turns = if privileged { RESERVED_CONNECTIONS } else { REQUESTS_PER_USER };
        let entry = uids.by_uid.entry(uid).or_insert_with(|| PerUid {
            connections: 0,
            pool: ReadBudget::pool(UNFINISHED_PER_USER),
            turns: Arc::new(Semaphore::new(turns)),
        });
        entry.connections += 1;
        let pools =
            if privileged { vec![entry.pool.clone()] } else { vec![entry.pool.clone(), self.users_pool.clone()] };
        Ok(Admitted {
            admission: self.clone(),
            uid,
            privileged,
            budget: ReadBudget::new(pools),
            turns: entry.turns.clone(),
        })
    }

    /// Open connections: plain users', then root's, operators' and admins'.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let uids = self.uids.lock().unwrap_or_else(PoisonError::into_inner);
        (uids.users, uids.privileged)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut uids = self.admission.uids.lock().unwrap_or_else(PoisonError::into_inner);
        if self.privileged {
            uids.privileged -= 1;
        } else {
            uids.users -= 1;
        }
        if let Some(entry) = uids.by_uid.get_mut(&self.uid) {
            entry.connections -= 1;
            // Its last connection is gone, and with it every charge on the uid's pool and turn.
            if entry.connections == 0 {
                uids.by_uid.remove(&self.uid);
            }
        }
    }
}

/// Whether `uid` is root, an operator or an admin; looks the user name up only when the config
/// names operators or admins at all.
pub(crate) fn privileged(config: &drover_shared::config::Config, uid: u32) -> bool {
    use drover_shared::config::Role;
    let any_role =
        !config.admins.is_empty() || !config.operators.is_empty() || config.users.iter().any(|u| u.role > Role::User);
    uid == 0 || (any_role && crate::policy::authz::role(config, uid) >= Role::Operator)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_capped_each_and_together_and_privileged_callers_keep_their_room() {
        let admission = Admission::new();
        let alice: Vec<Admitted> = (0..3).map(|_| admission.admit(1001, false, 3).unwrap()).collect();
        assert_eq!(admission.admit(1001, false, 3).err(), Some(Refusal::PerUser { limit: 3 }));
        let bob = admission.admit(1002, false, 3).unwrap();
        let root = admission.admit(0, true, 3).unwrap();
        assert_eq!(admission.counts(), (4, 1));
        drop(alice);
        assert_eq!(admission.counts(), (1, 1));
        assert!(admission.admit(1001, false, 3).is_ok(), "alice's closed connections count no more");
        // Plain users all together.
        let many: Vec<Admitted> = (0..USER_CONNECTIONS - 1)
            .map(|i| admission.admit(2000 + u32::try_from(i).unwrap(), false, 1).unwrap())
            .collect();
        assert_eq!(admission.admit(1003, false, 3).err(), Some(Refusal::Everyone { limit: USER_CONNECTIONS }));
        let admins: Vec<Admitted> = (1..RESERVED_CONNECTIONS).map(|_| admission.admit(0, true, 3).unwrap()).collect();
        assert!(admission.admit(0, true, 3).is_err(), "the reserve is bounded too");
        drop((many, admins, bob, root));
        assert_eq!(admission.counts(), (0, 0));
        assert!(admission.uids.lock().unwrap().by_uid.is_empty());
    }
}
