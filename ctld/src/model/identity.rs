//! Who a client is: the uid and gid the kernel vouched for (`SO_PEERCRED`, or the token a
//! node's noded signed) and where the client connected from, with the host names of remote
//! clients interned so that a [`Caller`] stays `Copy`.

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

    /// Where the request came from, for the audit log: `local` or `host:<node>`.
    pub(crate) fn origin(self) -> String {
        match self.origin {
            Origin::Local => "local".into(),
            Origin::Host(host) => format!("host:{}", host_name(host)),
        }
    }
}

/// An interned host name, so that [`Caller`] stays `Copy`.
pub(crate) type HostId = u32;

static HOSTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The id of a host name (the same id for the same name).
pub(crate) fn intern(host: &str) -> HostId {
    let mut hosts = HOSTS.lock().unwrap_or_else(PoisonError::into_inner);
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
pub(crate) fn host_name(id: HostId) -> String {
    let hosts = HOSTS.lock().unwrap_or_else(PoisonError::into_inner);
    hosts.get(id as usize).cloned().unwrap_or_else(|| "?".into())
}

/// The name of the user `uid`, from the system's user database.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(|u| u.name)
}
