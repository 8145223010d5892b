//! The wire protocol: length-delimited frames carrying postcard messages, a versioned handshake as
//! the first frame of every connection, and the typed messages of the two conversations
//! (CLI ↔ ctld in [`client`], noded ↔ ctld in [`node`]).
//!
//! Rule: message enums and structs change append-only; any change to an existing message bumps
//! [`PROTOCOL_VERSION`]. Golden-byte tests in `tests` pin the encoding. A field appended to a
//! type ctld stores (`JobInfo`, `JobSpec`, the allocation) must default to a value postcard
//! encodes as one zero byte (`None`, `false`, `0`, empty), so that records stored before it
//! decode (`ctld/src/store/db.rs`, `decode_stored`).

pub mod client;
pub mod diag;
pub mod frame;
pub mod handshake;
pub mod node;
pub mod records;
pub mod seal;
pub mod simulate;
pub mod stat;
pub mod stepio;
pub mod usage;

use serde::{Deserialize, Serialize};

/// Magic bytes opening every handshake.
pub const MAGIC: [u8; 4] = *b"DRVR";

/// The protocol version this build speaks; ctld also accepts the previous one.
pub const PROTOCOL_VERSION: u16 = 7;

/// Every refusal of a connection for want of room (too many from one user, or from everyone) says
/// this in its [`HelloReply::Reject`] message: such a refusal passes, so clients try again a few
/// times before they report it.
pub const TOO_MANY_CONNECTIONS: &str = "too many connections";

/// First frame from the connecting side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub magic: [u8; 4],
    pub protocol_version: u16,
    pub role: Role,
    /// The connecting side's challenge for the server (random, 32 bytes for nodes, empty for clients).
    #[serde(with = "serde_bytes")]
    pub nonce: Vec<u8>,
}

/// Who is connecting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// A command-line client on the local Unix socket; its identity comes from `SO_PEERCRED`.
    Client,
    /// A node daemon, which must prove knowledge of the cluster key.
    Node { name: String },
    /// A command-line client on another host, on ctld's TCP port: its identity is the token its
    /// host's noded signed ([`crate::token`]).
    RemoteClient { token: crate::token::ClientToken },
}

/// The server's answer to [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HelloReply {
    /// Accepted (clients), or challenge for the node: the server's nonce and its own proof.
    Accept {
        protocol_version: u16,
        #[serde(with = "serde_bytes")]
        nonce: Vec<u8>,
        #[serde(with = "serde_bytes")]
        proof: Vec<u8>,
    },
    /// Refused, with the reason (wrong magic, unsupported version).
    Reject { message: String },
}

/// The node's proof, sent after [`HelloReply::Accept`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProof {
    #[serde(with = "serde_bytes")]
    pub proof: Vec<u8>,
}

/// Whether a peer's version can be served. Versions 1 (the foundation's messages, before job
/// arrays, scheduling and isolation fields were appended), 2 (node messages without run
/// numbers), 3 (node updates without an incident owner and ticket, job records without
/// their billing TRES or template), 4 (cancel requests without `full`, job specs without
/// `overcommit` and `no_allocate`), 5 (step specs and step launches without
/// `preserve_env`) and 6 (node infos without `reboot`, step specs and step launches without `slurmd_debug`
/// and `parallel_debug`) were never released, so only the current version is
/// accepted; from the first release on, the previous version is accepted too.
pub fn version_supported(version: u16) -> bool {
    version == PROTOCOL_VERSION
}

#[cfg(test)]
mod tests;
