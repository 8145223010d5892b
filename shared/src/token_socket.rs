//! The token socket: `<state_dir>/token.sock`, open to every local user (mode 0666), served by
//! noded on each compute node and by each replica of a replicated controller on its host (where
//! the leader's Unix socket may be on another host). A client on that host that cannot reach the
//! leading ctld's Unix socket connects here; the daemon takes the caller's uid and gid from
//! `SO_PEERCRED`, signs a [`ClientToken`] for them (the host's name — the node's, or
//! `replica-<id>` —, a lifetime of [`TOKEN_LIFETIME`] seconds, a fresh random nonce) with the
//! cluster key, sends it as one frame and closes. The client presents it once to ctld over TCP.

use crate::auth::ClusterKey;
use crate::proto::frame::MessageStream;
use crate::token::{ClientToken, IssuedToken};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Seconds a token stays valid: long enough to connect, short enough that a stolen one is useless.
pub const TOKEN_LIFETIME: i64 = 30;

/// The name a replica's tokens carry as their host, which ctld accepts for a configured replica.
pub fn replica_host(id: u64) -> String {
    format!("replica-{id}")
}

/// The token socket of a daemon's state directory.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("token.sock")
}

/// Why the token socket could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("opening the token socket {path}: {source}")]
pub struct BindError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Binds the token socket of `state_dir` (replacing a stale one) with mode 0666.
pub fn bind(state_dir: &Path) -> Result<tokio::net::UnixListener, BindError> {
    let path = socket_path(state_dir);
    let _ = std::fs::remove_file(&path);
    let error = |source| BindError { path: path.clone(), source };
    let listener = tokio::net::UnixListener::bind(&path).map_err(error)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map_err(error)?;
    Ok(listener)
}

/// Answers every connection with a token for its peer, signed as `host`. A connection that
/// fails is dropped; nothing it sends is read.
pub async fn serve(listener: tokio::net::UnixListener, key: Arc<ClusterKey>, host: String) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let (key, host) = (key.clone(), host.clone());
        tokio::spawn(async move {
            let answer = async {
                let cred = stream.peer_cred().ok()?;
                let token =
                    ClientToken::issue(&key, cred.uid(), cred.gid(), &host, crate::now(), TOKEN_LIFETIME).ok()?;
                let token = IssuedToken { session: token.session_secret(&key), token };
                MessageStream::new(stream).send(&token).await.ok()
            };
            // A peer that does not read its token within the time it would be valid for gets none.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), answer).await;
        });
    }
}
