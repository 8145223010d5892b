//! Remote clients: a command on a host without ctld's Unix socket gets a short-lived, single-use
//! token from its local noded, or on a controller host from the local replica
//! ([`drover_shared::token_socket`]), and presents it in its hello on ctld's
//! TCP port. ctld accepts the connection only if the token is signed with the cluster key, is
//! within its lifetime (at most [`MAX_TOKEN_LIFETIME`] seconds), names a configured node or
//! replica (`replica-<id>`), and its
//! nonce was never used before; the connection then serves requests as the token's uid, audited
//! with origin `host:<node>`. Refusals close the connection with the reason and are audited.

use crate::core::Event;
use crate::model::identity::{Caller, HostNames, Origin};
use crate::serve::error::ConnectionError;
use crate::serve::rpc::context::ClientContext;
use drover_shared::UnixTime;
use drover_shared::auth::{ClusterKey, NONCE_LEN, random_bytes};
use drover_shared::proto::frame::MessageStream;
use drover_shared::proto::seal::{End, SessionKeys, client_session_proof};
use drover_shared::proto::{HelloReply, PROTOCOL_VERSION};
use drover_shared::token::{ClientToken, MAX_TOKEN_LIFETIME, TOKEN_NONCE_LEN};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use thiserror::Error;

/// Seconds a token's issue time may lie ahead of ctld's clock (clock skew between hosts).
const CLOCK_SKEW: i64 = 30;

/// Why a token is refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum TokenRefusal {
    #[error("token not signed with the cluster key")]
    WrongKey,
    #[error("token expired")]
    Expired,
    #[error("token not valid yet or valid for too long")]
    BadLifetime,
    #[error("token from unknown host {0}")]
    UnknownHost(String),
    #[error("token already used")]
    Replayed,
}

/// Checks tokens and remembers the nonces of accepted ones until they expire.
#[derive(Debug)]
pub(crate) struct Tokens {
    pub(crate) key: Arc<ClusterKey>,
    used: Mutex<HashMap<Vec<u8>, UnixTime>>,
    /// The names of the hosts accepted tokens came from, shared with the core (see [`HostNames`]).
    hosts: Arc<HostNames>,
}

impl Tokens {
    pub(crate) fn new(key: Arc<ClusterKey>, hosts: Arc<HostNames>) -> Tokens {
        Tokens { key, used: Mutex::new(HashMap::new()), hosts }
    }

    /// Accepts a token once: the caller it stands for, or why not.
    pub(crate) fn accept(
        &self,
        token: &ClientToken,
        now: UnixTime,
        is_node: impl Fn(&str) -> bool,
    ) -> Result<Caller, TokenRefusal> {
        if token.nonce.len() != TOKEN_NONCE_LEN || !token.signed_by(&self.key) {
            return Err(TokenRefusal::WrongKey);
        }
        if now > token.expires {
            return Err(TokenRefusal::Expired);
        }
        if token.issued > now + CLOCK_SKEW || token.expires - token.issued > MAX_TOKEN_LIFETIME {
            return Err(TokenRefusal::BadLifetime);
        }
        if !is_node(&token.host) {
            return Err(TokenRefusal::UnknownHost(token.host.clone()));
        }
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        used.retain(|_, expires| *expires >= now);
        if used.insert(token.nonce.clone(), token.expires).is_some() {
            return Err(TokenRefusal::Replayed);
        }
        Ok(Caller { uid: token.uid, gid: token.gid, origin: Origin::Host(self.hosts.intern(&token.host)) })
    }
}

/// What ctld needs to serve remote clients on its TCP port.
#[derive(Clone)]
pub(crate) struct Remote {
    pub(crate) tokens: Arc<Tokens>,
    pub(crate) context: ClientContext,
}

/// Serves a client whose hello carried `token`: refuses it with the reason, or answers its
/// requests as the token's user.
pub(crate) async fn serve<S>(
    mut messages: MessageStream<S>,
    token: ClientToken,
    client_nonce: &[u8],
    peer: &str,
    remote: &Remote,
) -> Result<(), ConnectionError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let config = remote.context.config.get();
    let now = drover_shared::now();
    // A node's noded signs as the node; a replica, on a controller host, as `replica-<id>`; a
    // login host's `drover-noded --login` as the login host (`[controller] login_hosts`).
    let known = |host: &str| {
        config.node(host).is_some()
            || config.replicas.iter().any(|r| drover_shared::token_socket::replica_host(r.id) == host)
            || config.login_hosts.iter().any(|login| login == host)
    };
    match remote.tokens.accept(&token, now, known) {
        Ok(caller) => {
            tracing::debug!(peer, uid = caller.uid, host = token.host, "remote client accepted");
            // A remote connection counts under its uid like a local one.
            let admitted = match crate::serve::rpc::admit(&remote.context, caller) {
                Ok(admitted) => admitted,
                Err(refusal) => {
                    messages.send(&HelloReply::Reject { message: refusal.to_string() }).await?;
                    return Ok(());
                }
            };
            // Prove the cluster key to the client through the token's connection secret, then
            // seal the connection: a token read in flight is useless without the secret.
            let secret = token.session_secret(&remote.tokens.key);
            let server_nonce = random_bytes::<NONCE_LEN>()?.to_vec();
            let proof = client_session_proof(&secret, client_nonce, &server_nonce);
            let accept = HelloReply::Accept { protocol_version: PROTOCOL_VERSION, nonce: server_nonce.clone(), proof };
            messages.send(&accept).await?;
            messages.seal(SessionKeys::for_client(&secret, End::Ctld, client_nonce, &server_nonce));
            crate::serve::rpc::serve_requests(messages, caller, admitted, &remote.context).await
        }
        Err(refusal) => {
            tracing::warn!(peer, uid = token.uid, host = token.host, %refusal, "remote client refused");
            let detail = format!("peer={peer} host={} {refusal}", token.host);
            let _ = remote.context.events.send(Event::RemoteRefused { uid: token.uid, detail });
            messages.send(&HelloReply::Reject { message: refusal.to_string() }).await?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> Arc<ClusterKey> {
        let dir = std::env::temp_dir().join(format!("drover-remote-test-{}-{byte}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let key = ClusterKey::generate(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        Arc::new(key)
    }

    #[test]
    fn expired_replayed_wrong_key_and_unknown_hosts_are_refused() {
        let (good, bad) = (key(1), key(2));
        let tokens = Tokens::new(good.clone(), Arc::default());
        let nodes = |host: &str| host == "n1";
        let now = 1_000_000;
        let token = ClientToken::issue(&good, 1000, 100, "n1", now, 60).unwrap();
        let caller = tokens.accept(&token, now + 5, nodes).unwrap();
        assert_eq!((caller.uid, caller.gid, caller.origin(&tokens.hosts)), (1000, 100, "host:n1".to_owned()));
        assert_eq!(tokens.accept(&token, now + 6, nodes), Err(TokenRefusal::Replayed));
        let late = ClientToken::issue(&good, 1000, 100, "n1", now, 60).unwrap();
        assert_eq!(tokens.accept(&late, now + 61, nodes), Err(TokenRefusal::Expired));
        let forged = ClientToken::issue(&bad, 0, 0, "n1", now, 60).unwrap();
        assert_eq!(tokens.accept(&forged, now, nodes), Err(TokenRefusal::WrongKey));
        let mut root = ClientToken::issue(&good, 1000, 100, "n1", now, 60).unwrap();
        root.uid = 0;
        assert_eq!(tokens.accept(&root, now, nodes), Err(TokenRefusal::WrongKey));
        let long = ClientToken::issue(&good, 1000, 100, "n1", now, 3600).unwrap();
        assert_eq!(tokens.accept(&long, now, nodes), Err(TokenRefusal::BadLifetime));
        let future = ClientToken::issue(&good, 1000, 100, "n1", now + 300, 60).unwrap();
        assert_eq!(tokens.accept(&future, now, nodes), Err(TokenRefusal::BadLifetime));
        let elsewhere = ClientToken::issue(&good, 1000, 100, "n7", now, 60).unwrap();
        assert_eq!(tokens.accept(&elsewhere, now, nodes), Err(TokenRefusal::UnknownHost("n7".into())));
        // A used nonce is forgotten only after its token expired, when it is refused anyway.
        let fresh = ClientToken::issue(&good, 1000, 100, "n1", now + 100, 60).unwrap();
        assert!(tokens.accept(&fresh, now + 100, nodes).is_ok());
        assert_eq!(tokens.used.lock().unwrap().len(), 1);
    }
}
