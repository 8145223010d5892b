//! The connecting side of the handshake, shared by every program that dials ctld: a node proves it
//! holds the cluster key (and checks that ctld does), a client just says hello.

use super::frame::{FrameError, MAX_FRAME, MessageStream};
use super::{Hello, HelloReply, MAGIC, NodeProof, PROTOCOL_VERSION, Role};
use crate::auth::{AuthError, ClusterKey, NONCE_LEN, random_bytes};
use thiserror::Error;

/// Why a handshake failed.
#[derive(Debug, Error)]
pub enum HandshakeError {
    /// The connection failed or carried something that is not a handshake.
    #[error("handshake: {0}")]
    Frame(#[from] FrameError),
    /// No randomness for the nonce.
    #[error("handshake: {0}")]
    Random(#[from] AuthError),
    /// ctld refused the hello.
    #[error("ctld refused the connection: {0}")]
    Refused(String),
    /// ctld closed the connection during the handshake.
    #[error("ctld closed the connection during the handshake")]
    Closed,
    /// ctld could not prove it holds the cluster key.
    #[error("ctld failed to prove the cluster key; refusing to talk to it")]
    BadProof,
}

/// Authenticates as node `name` on a fresh connection; afterwards the stream accepts full-size frames.
pub async fn node_handshake<S>(
    messages: &mut MessageStream<S>,
    key: &ClusterKey,
    name: &str,
) -> Result<(), HandshakeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let nonce = random_bytes::<NONCE_LEN>()?.to_vec();
    let hello = Hello {
        magic: MAGIC,
        protocol_version: PROTOCOL_VERSION,
        role: Role::Node { name: name.to_owned() },
        nonce: nonce.clone(),
    };
    messages.send(&hello).await?;
    match messages.recv::<HelloReply>().await? {
        Some(HelloReply::Accept { protocol_version, nonce: server_nonce, proof }) => {
            if !key.verify("ctld", name, &nonce, &server_nonce, protocol_version, &proof) {
                return Err(HandshakeError::BadProof);
            }
            let proof = key.prove("node", name, &nonce, &server_nonce, protocol_version);
            messages.send(&NodeProof { proof }).await?;
        }
        Some(HelloReply::Reject { message }) => return Err(HandshakeError::Refused(message)),
        None => return Err(HandshakeError::Closed),
    }
    messages.set_max_frame(MAX_FRAME);
    Ok(())
}

/// Says hello as a local client; afterwards the stream accepts full-size frames.
pub async fn client_handshake<S>(messages: &mut MessageStream<S>) -> Result<(), HandshakeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let hello = Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role: Role::Client, nonce: Vec::new() };
    messages.send(&hello).await?;
    match messages.recv::<HelloReply>().await? {
        Some(HelloReply::Accept { .. }) => {
            messages.set_max_frame(MAX_FRAME);
            Ok(())
        }
        Some(HelloReply::Reject { message }) => Err(HandshakeError::Refused(message)),
        None => Err(HandshakeError::Closed),
    }
}
