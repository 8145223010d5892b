//! The token socket: `<state_dir>/token.sock`, open to every local user (mode 0666). A client on
//! this host that cannot reach ctld's Unix socket connects here; noded takes its uid and gid from
//! `SO_PEERCRED`, signs a [`ClientToken`] for them (this node's name, a lifetime of
//! [`TOKEN_LIFETIME`] seconds, a fresh random nonce) with the cluster key, sends it as one frame
//! and closes. The client presents it once to ctld over TCP.

use anyhow::Context;
use drover_shared::auth::ClusterKey;
use drover_shared::proto::frame::MessageStream;
use drover_shared::token::{ClientToken, IssuedToken};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Seconds a token stays valid: long enough to connect, short enough that a stolen one is useless.
pub const TOKEN_LIFETIME: i64 = 30;

/// The token socket of a node's state directory.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("token.sock")
}

/// Binds the token socket (replacing a stale one) with mode 0666.
pub fn bind(state_dir: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    let path = socket_path(state_dir);
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("chmod 0666 {}", path.display()))?;
    Ok(listener)
}

/// Answers every connection with a token for its peer.
pub async fn serve(listener: tokio::net::UnixListener, key: Arc<ClusterKey>, node: String) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let (key, node) = (key.clone(), node.clone());
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &key, &node).await {
                tracing::debug!(error = %format!("{e:#}"), "token request failed");
            }
        });
    }
}

async fn answer(stream: tokio::net::UnixStream, key: &ClusterKey, node: &str) -> anyhow::Result<()> {
    let cred = stream.peer_cred()?;
    let token = ClientToken::issue(key, cred.uid(), cred.gid(), node, drover_shared::now(), TOKEN_LIFETIME)?;
    let token = IssuedToken { session: token.session_secret(key), token };
    tracing::debug!(uid = cred.uid(), "client token issued");
    let mut messages = MessageStream::new(stream);
    messages.send(&token).await?;
    Ok(())
}
