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

/// How long a name found in the system's user or group database is used again before it is
/// looked up anew. Every submission needs its user's and group's names (and the audit record the
/// user's again); each lookup reads `/etc/passwd` or asks the site's directory (LDAP, sssd), so
/// they are kept for a minute, as Slurm keeps its own. A uid or gid without a name is looked up
/// every time: a user just added can submit at once.
const NAME_REUSE: std::time::Duration = std::time::Duration::from_secs(60);

/// At most this many names are kept; past it the table starts over (a uid per user: a site
/// has far fewer users than this, and a caller cannot make up uids).
const NAMES_KEPT: usize = 65_536;

/// Names found lately, by id, with when they were found.
type Names = Mutex<Option<std::collections::HashMap<u32, (String, std::time::Instant)>>>;

static USER_NAMES: Names = Mutex::new(None);
static GROUP_NAMES: Names = Mutex::new(None);

/// `id`'s name from `names` if it was found less than [`NAME_REUSE`] ago, else from `look_up`
/// (and kept when there is one).
fn cached_name(names: &Names, id: u32, look_up: impl FnOnce() -> Option<String>) -> Option<String> {
    let now = std::time::Instant::now();
    if let Some((name, at)) = names.lock().unwrap_or_else(PoisonError::into_inner).as_ref().and_then(|n| n.get(&id))
        && now.duration_since(*at) < NAME_REUSE
    {
        return Some(name.clone());
    }
    // Looked up without the lock held: a slow directory holds up no other lookup.
    let name = look_up()?;
    let mut names = names.lock().unwrap_or_else(PoisonError::into_inner);
    let names = names.get_or_insert_with(Default::default);
    if names.len() >= NAMES_KEPT {
        names.clear();
    }
    names.insert(id, (name.clone(), now));
    Some(name)
}

/// The name of the user `uid`, from the system's user database (kept for [`NAME_REUSE`]).
pub(crate) fn user_name(uid: u32) -> Option<String> {
    cached_name(&USER_NAMES, uid, || {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(|u| u.name)
    })
}

/// The name of the group `gid`, from the system's group database (kept for [`NAME_REUSE`]).
pub(crate) fn group_name(gid: u32) -> Option<String> {
    cached_name(&GROUP_NAMES, gid, || {
        nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)).ok().flatten().map(|g| g.name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name is looked up once and then reused; an id without a name is looked up every time.
    #[test]
    fn names_are_reused_and_missing_ones_looked_up_again() {
        let names: Names = Mutex::new(None);
        let mut lookups = 0;
        for _ in 0..3 {
            let name = cached_name(&names, 7, || {
                lookups += 1;
                Some("alice".to_owned())
            });
            assert_eq!(name.as_deref(), Some("alice"));
        }
        assert_eq!(lookups, 1);
        let mut misses = 0;
        for _ in 0..3 {
            assert_eq!(
                cached_name(&names, 8, || {
                    misses += 1;
                    None
                }),
                None
            );
        }
        assert_eq!(misses, 3);
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(user_name(0).as_deref(), Some("root"));
    }
}
