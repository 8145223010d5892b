//! Per-frame authentication on node connections. The handshake proves that both ends hold the
//! cluster key; sealing keeps that true for every frame after it, so that nobody on the path can
//! inject, drop-and-replace, replay or reorder messages (say, a forged `LaunchJob` to a node that
//! runs it as root, or a forged job end to ctld).
//!
//! Each direction has its own key, derived from the cluster key, the node's name and both
//! handshake nonces, so keys differ per connection and per direction. Every frame carries
//! `payload || HMAC-SHA256(direction key, sequence || payload)`; the sequence number is not sent:
//! each end counts the frames it has sent and received, so a replayed or reordered frame fails
//! its check. The payload stays readable: sealing gives integrity, not secrecy.

use crate::auth::ClusterKey;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of the tag appended to every sealed frame.
pub const TAG_LEN: usize = 32;

/// The two directions' keys of one connection, as one end sees them.
#[derive(Clone)]
pub struct SessionKeys {
    send: [u8; 32],
    recv: [u8; 32],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

/// Which end of a connection derives the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Ctld,
    /// The connecting side: a node, or a remote client.
    Node,
}

fn hmac32(secret: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac
}

/// ctld's proof to a remote client that it knows the token's connection secret (and so holds the
/// cluster key): an HMAC over both nonces.
pub fn client_session_proof(secret: &[u8], client_nonce: &[u8], server_nonce: &[u8]) -> Vec<u8> {
    hmac32(secret, &[b"ctld", client_nonce, server_nonce]).finalize().into_bytes().to_vec()
}

/// Checks [`client_session_proof`] in constant time.
pub fn verify_client_session_proof(secret: &[u8], client_nonce: &[u8], server_nonce: &[u8], proof: &[u8]) -> bool {
    hmac32(secret, &[b"ctld", client_nonce, server_nonce]).verify_slice(proof).is_ok()
}

impl SessionKeys {
    /// Derives both directions' keys after a successful handshake.
    pub fn derive(
        key: &ClusterKey,
        end: End,
        node: &str,
        client_nonce: &[u8],
        server_nonce: &[u8],
        version: u16,
    ) -> SessionKeys {
        let direction = |role: &str| -> [u8; 32] {
            let bytes = key.prove(role, node, client_nonce, server_nonce, version);
            bytes.try_into().expect("HMAC-SHA256 output is 32 bytes")
        };
        let to_ctld = direction("seal node to ctld");
        let to_node = direction("seal ctld to node");
        match end {
            End::Ctld => SessionKeys { send: to_node, recv: to_ctld },
            End::Node => SessionKeys { send: to_ctld, recv: to_node },
        }
    }
}

impl SessionKeys {
    /// Derives both directions' keys of a remote-client connection from the token's connection
    /// secret and both nonces.
    pub fn for_client(secret: &[u8], end: End, client_nonce: &[u8], server_nonce: &[u8]) -> SessionKeys {
        let direction = |label: &[u8]| -> [u8; 32] {
            hmac32(secret, &[label, client_nonce, server_nonce]).finalize().into_bytes().into()
        };
        let to_ctld = direction(b"seal client to ctld");
        let to_client = direction(b"seal ctld to client");
        match end {
            End::Ctld => SessionKeys { send: to_client, recv: to_ctld },
            End::Node => SessionKeys { send: to_ctld, recv: to_client },
        }
    }
}

/// One connection's sealing state: the keys and both sequence counters.
#[derive(Debug)]
pub struct Sealer {
    keys: SessionKeys,
    sent: u64,
    received: u64,
}

/// A sealed frame failed its check: forged, altered, replayed or out of order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame {sequence} failed its authentication check (forged, altered, replayed or reordered)")]
pub struct BadTag {
    pub sequence: u64,
}

fn tag(key: &[u8; 32], sequence: u64, payload: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(&sequence.to_be_bytes());
    mac.update(payload);
    mac
}

impl Sealer {
    pub fn new(keys: SessionKeys) -> Sealer {
        Sealer { keys, sent: 0, received: 0 }
    }

    /// Appends the next outgoing frame's tag to `payload`.
    pub fn seal(&mut self, payload: &mut Vec<u8>) {
        let tag = tag(&self.keys.send, self.sent, payload).finalize().into_bytes();
        self.sent += 1;
        payload.extend_from_slice(&tag);
    }

    /// Checks the next incoming frame and returns its payload without the tag.
    pub fn open<'a>(&mut self, frame: &'a [u8]) -> Result<&'a [u8], BadTag> {
        let sequence = self.received;
        let Some(split) = frame.len().checked_sub(TAG_LEN) else { return Err(BadTag { sequence }) };
        let (payload, received_tag) = frame.split_at(split);
        tag(&self.keys.recv, sequence, payload).verify_slice(received_tag).map_err(|_| BadTag { sequence })?;
        self.received += 1;
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Sealer, Sealer) {
        let key = ClusterKey::from_bytes([9; 32]);
        let ctld = SessionKeys::derive(&key, End::Ctld, "n1", b"client", b"server", 3);
        let node = SessionKeys::derive(&key, End::Node, "n1", b"client", b"server", 3);
        (Sealer::new(ctld), Sealer::new(node))
    }

    #[test]
    fn sealed_frames_open_in_order_on_the_other_end() {
        let (mut ctld, mut node) = pair();
        for text in [&b"launch"[..], b"", b"cancel"] {
            let mut frame = text.to_vec();
            ctld.seal(&mut frame);
            assert_eq!(node.open(&frame).unwrap(), text);
        }
        let mut frame = b"heartbeat".to_vec();
        node.seal(&mut frame);
        assert_eq!(ctld.open(&frame).unwrap(), b"heartbeat");
    }

    #[test]
    fn altered_replayed_reflected_and_foreign_frames_fail() {
        let (mut ctld, mut node) = pair();
        let mut first = b"launch job 5".to_vec();
        ctld.seal(&mut first);
        let mut altered = first.clone();
        altered[0] ^= 1;
        assert_eq!(node.open(&altered), Err(BadTag { sequence: 0 }));
        assert!(node.open(&first).is_ok());
        // The same bytes again: a replay.
        assert_eq!(node.open(&first), Err(BadTag { sequence: 1 }));
        // A frame sent by the node, bounced back to it: the directions have different keys.
        let mut own = b"job 5 ended".to_vec();
        node.seal(&mut own);
        let (_, mut fresh_node) = pair();
        assert!(fresh_node.open(&own).is_err());
        // A frame sealed for another connection (other nonces).
        let key = ClusterKey::from_bytes([9; 32]);
        let mut other = Sealer::new(SessionKeys::derive(&key, End::Ctld, "n1", b"client2", b"server", 3));
        let mut foreign = b"launch".to_vec();
        other.seal(&mut foreign);
        let (_, mut node) = pair();
        assert!(node.open(&foreign).is_err());
        // Shorter than a tag.
        assert!(node.open(b"short").is_err());
    }
}
