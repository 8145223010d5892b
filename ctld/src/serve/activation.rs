//! Doors handed over by ctld's supervisor (systemd's socket activation: `LISTEN_FDS`,
//! `LISTEN_FDNAMES` and `LISTEN_PID`). A supervisor that binds a replica's ports and keeps them
//! across the replica's restarts (systemd `.socket` units, or the test harness's stand-in)
//! leaves nobody a moment to take a port between a crash and the restart. The names ctld
//! takes: `clients` (the client socket), `nodes` (the node port) and `raft` (a replica's Raft
//! port); a door the supervisor does not hand over is bound by ctld itself.

use std::collections::HashMap;

/// The doors handed over, by name.
pub struct Activated {
    fds: listenfd::ListenFd,
    /// Name → index among the handed-over descriptors.
    names: HashMap<String, usize>,
}

impl Activated {
    /// Reads what the supervisor handed over (nothing when `LISTEN_FDS` is unset, or when
    /// `LISTEN_PID` names another process).
    pub fn from_env() -> Activated {
        let fds = listenfd::ListenFd::from_env();
        let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
        let names = names.split(':').enumerate().filter(|(index, _)| *index < fds.len());
        Activated { names: names.map(|(index, name)| (name.to_owned(), index)).collect(), fds }
    }

    /// The TCP listener handed over as `name`, if any.
    pub fn tcp(&mut self, name: &str) -> std::io::Result<Option<std::net::TcpListener>> {
        match self.names.get(name) {
            Some(&index) => self.fds.take_tcp_listener(index),
            None => Ok(None),
        }
    }

    /// The Unix listener handed over as `name`, if any.
    pub fn unix(&mut self, name: &str) -> std::io::Result<Option<std::os::unix::net::UnixListener>> {
        match self.names.get(name) {
            Some(&index) => self.fds.take_unix_listener(index),
            None => Ok(None),
        }
    }
}
