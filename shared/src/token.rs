//! Client tokens for hosts without ctld's Unix socket. The local noded, which holds the cluster
//! key, learns the caller's uid and gid from `SO_PEERCRED` on its token socket and signs a
//! short-lived, single-use token: uid, gid, the node's name, issue and expiry times and a random
//! nonce, MACed (HMAC-SHA256) with the cluster key. The client presents it to ctld over TCP in its
//! [`Hello`](crate::proto::Hello); ctld checks the MAC, the times, and that the nonce was never
//! used before.

use crate::UnixTime;
use crate::auth::{AuthError, ClusterKey};
use serde::{Deserialize, Serialize};

/// Longest lifetime a token may have; ctld refuses longer ones.
pub const MAX_TOKEN_LIFETIME: i64 = 60;
/// Nonce length in bytes.
pub const TOKEN_NONCE_LEN: usize = 32;

/// What noded hands a local client: the token, and the connection secret that only the client
/// and ctld (which holds the cluster key) can know — the token travels in clear, the secret never
/// does. ctld proves itself with it and both ends seal the connection's frames with keys derived
/// from it, so a token read in flight is useless to whoever read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedToken {
    pub token: ClientToken,
    #[serde(with = "serde_bytes")]
    pub session: Vec<u8>,
}

/// A signed client identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientToken {
    pub uid: u32,
    pub gid: u32,
    /// The node whose noded issued the token.
    pub host: String,
    pub issued: UnixTime,
    pub expires: UnixTime,
    #[serde(with = "serde_bytes")]
    pub nonce: Vec<u8>,
    /// HMAC-SHA256 over all the fields above, with the cluster key.
    #[serde(with = "serde_bytes")]
    pub mac: Vec<u8>,
}

impl ClientToken {
    /// Signs a fresh token for `uid`/`gid` on `host`, valid from `now` for `lifetime` seconds.
    pub fn issue(
        key: &ClusterKey,
        uid: u32,
        gid: u32,
        host: &str,
        now: UnixTime,
        lifetime: i64,
    ) -> Result<ClientToken, AuthError> {
        let nonce = crate::auth::random_bytes::<TOKEN_NONCE_LEN>()?.to_vec();
        let mut token = ClientToken {
            uid,
            gid,
            host: host.to_owned(),
            issued: now,
            expires: now + lifetime,
            nonce,
            mac: Vec::new(),
        };
        token.mac = key.sign(&token.signed_bytes());
        Ok(token)
    }

    /// What the MAC covers: a domain label and every field, length-prefixed.
    fn signed_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for part in [b"drover-client-token-v1".as_slice(), self.host.as_bytes(), &self.nonce] {
            bytes.extend((part.len() as u64).to_be_bytes());
            bytes.extend(part);
        }
        bytes.extend(self.uid.to_be_bytes());
        bytes.extend(self.gid.to_be_bytes());
        bytes.extend(self.issued.to_be_bytes());
        bytes.extend(self.expires.to_be_bytes());
        bytes
    }

    /// The connection secret that goes with this token (see [`IssuedToken`]).
    pub fn session_secret(&self, key: &ClusterKey) -> Vec<u8> {
        let mut bytes = b"drover-client-session-v1".to_vec();
        bytes.extend(&self.mac);
        key.sign(&bytes)
    }

    /// Whether the MAC was made with `key` (constant time).
    pub fn signed_by(&self, key: &ClusterKey) -> bool {
        key.verify_signature(&self.signed_bytes(), &self.mac)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_covers_every_field() {
        let key = ClusterKey::from_bytes([7; crate::auth::KEY_LEN]);
        let other = ClusterKey::from_bytes([8; crate::auth::KEY_LEN]);
        let token = ClientToken::issue(&key, 1000, 1000, "n1", 100, 60).unwrap();
        assert!(token.signed_by(&key));
        assert!(!token.signed_by(&other));
        assert_eq!(token.nonce.len(), TOKEN_NONCE_LEN);
        let changes: [&dyn Fn(&mut ClientToken); 6] = [
            &|t| t.uid = 0,
            &|t| t.gid = 0,
            &|t| t.host = "n2".into(),
            &|t| t.issued -= 1,
            &|t| t.expires += 1,
            &|t| t.nonce[0] ^= 1,
        ];
        for change in changes {
            let mut forged = token.clone();
            change(&mut forged);
            assert!(!forged.signed_by(&key), "{forged:?}");
        }
    }
}
