//! Shared-key authentication between ctld and noded: HMAC-SHA256 challenge-response over a cluster
//! key file. Each side sends a random nonce; each proves knowledge of the key with a MAC over its
//! role, both nonces and the protocol version, so a recorded proof never replays.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Key length in bytes.
pub const KEY_LEN: usize = 32;

/// Nonce length in bytes.
pub const NONCE_LEN: usize = 32;

/// Why a key could not be loaded or created.
#[derive(Debug, Error)]
pub enum AuthError {
    /// The key file could not be read or written.
    #[error("cluster key file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The key file is readable by group or others.
    #[error("cluster key file {path} has mode {mode:o}; it must be readable by its owner only (chmod 600)")]
    Permissions { path: PathBuf, mode: u32 },
    /// The key file does not hold a key.
    #[error("cluster key file {path} is not a Drover key (expected {KEY_LEN} bytes, hex encoded)")]
    Malformed { path: PathBuf },
    /// The system random source failed.
    #[error("no randomness available: {0}")]
    Random(String),
}

/// The cluster key.
#[derive(Clone)]
pub struct ClusterKey([u8; KEY_LEN]);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

/// Random bytes from the OS.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl ClusterKey {
    /// Creates a new random key file with mode 0600; fails if the file exists.
    pub fn generate(path: &Path) -> Result<ClusterKey, AuthError> {
        use std::io::Write;
        let key = ClusterKey(random_bytes()?);
        let io = |source| AuthError::Io { path: path.to_owned(), source };
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io)?;
        writeln!(file, "{}", hex(&key.0)).map_err(io)?;
        Ok(key)
    }

    /// Loads a key file, refusing one that others can read.
    pub fn load(path: &Path) -> Result<ClusterKey, AuthError> {
        let io = |source| AuthError::Io { path: path.to_owned(), source };
        let metadata = std::fs::metadata(path).map_err(io)?;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(AuthError::Permissions { path: path.to_owned(), mode });
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        let text = text.trim();
        let malformed = || AuthError::Malformed { path: path.to_owned() };
        if text.len() != KEY_LEN * 2 {
            return Err(malformed());
        }
        let mut key = [0u8; KEY_LEN];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| malformed())?;
        }
        Ok(ClusterKey(key))
    }

    fn mac(&self, role: &str, name: &str, client_nonce: &[u8], server_nonce: &[u8], version: u16) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        for part in [role.as_bytes(), name.as_bytes(), client_nonce, server_nonce] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.update(&version.to_be_bytes());
        mac
    }

    /// The proof one side sends: `role` is `ctld` or `node`, `name` the node's name.
    pub fn prove(&self, role: &str, name: &str, client_nonce: &[u8], server_nonce: &[u8], version: u16) -> Vec<u8> {
        self.mac(role, name, client_nonce, server_nonce, version).finalize().into_bytes().to_vec()
    }

    /// A key from raw bytes (unit tests).
    #[cfg(test)]
    pub(crate) fn from_bytes(bytes: [u8; KEY_LEN]) -> ClusterKey {
        ClusterKey(bytes)
    }

    /// A MAC over `bytes` with the key (client tokens, [`crate::token`]).
    pub fn sign(&self, bytes: &[u8]) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(bytes);
        mac.finalize().into_bytes().to_vec()
    }

    /// Checks a MAC made by [`ClusterKey::sign`], in constant time.
    pub fn verify_signature(&self, bytes: &[u8], signature: &[u8]) -> bool {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(bytes);
        mac.verify_slice(signature).is_ok()
    }

    /// Checks a peer's proof in constant time.
    pub fn verify(
        &self,
        role: &str,
        name: &str,
        client_nonce: &[u8],
        server_nonce: &[u8],
        version: u16,
        proof: &[u8],
    ) -> bool {
        self.mac(role, name, client_nonce, server_nonce, version).verify_slice(proof).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_role_name_and_nonces() {
        let dir = std::env::temp_dir().join(format!("drover-key-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let key = ClusterKey::generate(&dir).unwrap();
        let loaded = ClusterKey::load(&dir).unwrap();
        let proof = key.prove("node", "gpu01", b"c", b"s", 1);
        assert!(loaded.verify("node", "gpu01", b"c", b"s", 1, &proof));
        assert!(!loaded.verify("ctld", "gpu01", b"c", b"s", 1, &proof));
        assert!(!loaded.verify("node", "gpu02", b"c", b"s", 1, &proof));
        assert!(!loaded.verify("node", "gpu01", b"c", b"x", 1, &proof));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(ClusterKey::load(&dir), Err(AuthError::Permissions { .. })));
        std::fs::remove_file(&dir).unwrap();
    }
}
