//! Who a client is: the uid and gid the kernel vouched for (`SO_PEERCRED`, or the token a
//! node's noded signed) and where the client connected from, with the host names of remote
//! clients interned (in one [`HostNames`] table the serve layer and the core share) so that a
//! [`Caller`] stays `Copy`.

use std::sync::{Mutex, PoisonError};

/// The identity of a client, from `SO_PEERCRED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) origin: Origin,
}

/// Where a client connected from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// ctld's Unix socket (`SO_PEERCRED`).
    Local,
    /// ctld's TCP port with a token from this host's noded.
    Host(HostId),
}

impl Caller {
    /// A caller on ctld's Unix socket.
    pub(crate) fn local(uid: u32, gid: u32) -> Caller {
        Caller { uid, gid, origin: Origin::Local }
    }

    /// Where the request came from, for the audit log: `local` or `host:<node>`, the host's
    /// name from the table it was interned in.
    pub(crate) fn origin(self, hosts: &HostNames) -> String {
        match self.origin {
            Origin::Local => "local".into(),
            Origin::Host(host) => format!("host:{}", hosts.name(host)),
        }
    }
}

/// An interned host name, so that [`Caller`] stays `Copy`.
pub(crate) type HostId = u32;

/// The names of the hosts remote clients came from, interned so that a [`Caller`] stays `Copy`
/// (`Who` in the policy layer and every handler pass callers by value).
///
/// One table per ctld, shared (`Arc`) between the serve layer and the core: the remote-client
/// connection tasks intern names as they accept tokens, concurrently and off the core, and the
/// core reads them back when it writes an audit record. Hence the mutex; it is held only to look
/// up or append one name. The table only grows, by at most one name per configured node (a token
/// names its node, and only configured nodes are accepted).
#[derive(Debug, Default)]
pub(crate) struct HostNames {
    names: Mutex<Vec<String>>,
}

impl HostNames {
    /// The id of a host name (the same id for the same name).
    pub(crate) fn intern(&self, host: &str) -> HostId {
        let mut hosts = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let index = match hosts.iter().position(|h| h == host) {
            Some(index) => index,
            None => {
                hosts.push(host.to_owned());
                hosts.len() - 1
            }
        };
        HostId::try_from(index).unwrap_or(HostId::MAX)
    }

    /// The name behind a host id.
    pub(crate) fn name(&self, id: HostId) -> String {
        let hosts = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        hosts.get(id as usize).cloned().unwrap_or_else(|| "?".into())
    }
}

/// The name of the user `uid`, from the system's user database.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(|u| u.name)
}
