//! The configless side of noded (`--conf-server`, see `drover_shared::configless`): fetch the
//! admin's config file from the leading controller with the cluster key, keep the host's copy
//! (`<state_dir>/conf-cache/cluster.toml`) in step with it, and, on a login host
//! (`drover-noded --login`), serve the token socket that lets the host's users reach ctld.
//!
//! At start the copy is fetched before anything else reads the config: a controller that cannot
//! be reached leaves the host on the copy it has, and a host with no copy yet waits for one
//! (there is nothing it could run with). Afterwards a node fetches again when ctld says a
//! reconfigure changed the file and after each registration (a reconfigure may have happened
//! while it was away); a login host asks every [`LOGIN_REFRESH`].

use drover_shared::auth::ClusterKey;
use drover_shared::configless::{LOGIN_REFRESH, MAX_CONFIG_BYTES, cache_path, digest, store};
use drover_shared::proto::frame::MessageStream;
use drover_shared::proto::handshake::node_handshake;
use drover_shared::proto::node::{CtldMessage, NodeMessage};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long one controller address may take to connect, authenticate and answer.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(3);

/// Why the config could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("no controller address to fetch the config from")]
    NoAddress,
    #[error("{address}: {message}")]
    Address { address: String, message: String },
    #[error("writing the config copy {path}: {}", drover_shared::text::io_reason(source))]
    Store { path: PathBuf, source: std::io::Error },
}

/// Where and as whom a configless host fetches its config.
#[derive(Debug, Clone)]
pub struct ConfServer {
    /// `--conf-server`'s addresses (`host:port`, comma-separated on the command line).
    pub addresses: Vec<String>,
    pub key: Arc<ClusterKey>,
    /// The name this host authenticates as (its node name, or a login host's name).
    pub host: String,
    /// noded's state directory, which holds the copy.
    pub state_dir: PathBuf,
}

impl ConfServer {
    /// The copy's path.
    pub fn cache(&self) -> PathBuf {
        cache_path(&self.state_dir)
    }

    /// The addresses to ask, in order: `--conf-server`'s, then the controllers the copy lists
    /// (replicas added since the host was set up), each once.
    fn candidates(&self) -> Vec<String> {
        let mut all = self.addresses.clone();
        if let Ok(copy) = drover_shared::config::Config::load(&self.cache()) {
            for address in copy.controller_addresses() {
                if !all.contains(&address) {
                    all.push(address);
                }
            }
        }
        all
    }

    /// Asks each controller address in turn for the config; the first that answers (the leader:
    /// a following replica refuses) decides. Writes the copy when it changed; returns whether
    /// it did.
    pub async fn refresh(&self) -> Result<bool, FetchError> {
        let have = std::fs::read_to_string(self.cache()).ok().map(|text| digest(&text));
        let mut last = FetchError::NoAddress;
        for address in self.candidates() {
            match fetch_from(&address, &self.key, &self.host, have.clone()).await {
                Ok(None) => return Ok(false),
                Ok(Some(text)) => {
                    return store(&self.state_dir, &text)
                        .map_err(|source| FetchError::Store { path: self.cache(), source });
                }
                Err(message) => {
                    tracing::debug!(address, message, "controller address gave no config");
                    last = FetchError::Address { address, message };
                }
            }
        }
        Err(last)
    }

    /// At start: fetches the config, or keeps the copy the host has when no controller answers,
    /// or waits (trying again with a growing pause, at most 10 s) for a host with no copy.
    pub fn obtain_at_start(&self) -> Result<(), FetchError> {
        // A runtime without worker threads (and no name lookups, which would start one): the
        // supervisor launcher needs a process without threads after this returns.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| FetchError::Store { path: self.cache(), source })?;
        let mut pause = Duration::from_millis(500);
        loop {
            match runtime.block_on(self.refresh()) {
                Ok(changed) => {
                    tracing::info!(copy = %self.cache().display(), changed, "config fetched from the controller");
                    return Ok(());
                }
                Err(error @ FetchError::Store { .. }) => return Err(error),
                Err(error) if self.cache().is_file() => {
                    tracing::warn!(error = %error, copy = %self.cache().display(), "no controller gave the config; running with the copy");
                    return Ok(());
                }
                Err(error) => {
                    tracing::warn!(error = %error, "no controller gave the config and there is no copy yet; trying again");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(10));
                }
            }
        }
    }
}

/// Resolves `address` (`host:port`) without a name service thread where it is an IP address.
fn resolve(address: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = address.parse::<SocketAddr>() {
        return Ok(addr);
    }
    address
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve: {}", drover_shared::text::io_reason(&e)))?
        .next()
        .ok_or_else(|| "cannot resolve: no address".to_owned())
}

/// One attempt at one address: `Ok(None)` when the host's copy (digest `have`) is current.
async fn fetch_from(
    address: &str,
    key: &ClusterKey,
    host: &str,
    have: Option<String>,
) -> Result<Option<String>, String> {
    let addr = resolve(address)?;
    let attempt = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting: {}", drover_shared::text::io_reason(&e)))?;
        let mut messages = MessageStream::new(stream);
        node_handshake(&mut messages, key, host).await.map_err(|e| e.to_string())?;
        messages.send(&NodeMessage::FetchConfig { have }).await.map_err(|e| e.to_string())?;
        match messages.recv::<CtldMessage>().await.map_err(|e| e.to_string())? {
            Some(CtldMessage::Config { text: Some(text), digest: sent }) => {
                if text.len() > MAX_CONFIG_BYTES || digest(&text) != sent {
                    return Err("the controller sent a config that does not match its digest".to_owned());
                }
                // Only a file that loads replaces the copy.
                drover_shared::config::Config::parse(Path::new("cluster.toml"), &text)
                    .map_err(|e| format!("the controller's config does not load here: {e}"))?;
                Ok(Some(text))
            }
            Some(CtldMessage::Config { text: None, .. }) => Ok(None),
            Some(_) => Err("the controller answered something else".to_owned()),
            None => Err("the controller closed the connection".to_owned()),
        }
    };
    tokio::time::timeout(ATTEMPT_LIMIT, attempt).await.map_err(|_| "no answer in time".to_owned())?
}

/// A login host's daemon: serves the token socket as `host` and keeps the copy in step, until
/// `shutdown` resolves.
pub async fn run_login(
    state_dir: &Path,
    key: Arc<ClusterKey>,
    host: String,
    conf: Option<ConfServer>,
    shutdown: impl std::future::Future,
) -> Result<(), LoginError> {
    drover_shared::statedir::prepare(state_dir, 0o755)?;
    let tokens = drover_shared::token_socket::bind(state_dir)?;
    tokio::spawn(drover_shared::token_socket::serve(tokens, key, host.clone()));
    tracing::info!(host, "login host: serving the token socket");
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = tokio::time::sleep(LOGIN_REFRESH) => {}
            _ = &mut shutdown => return Ok(()),
        }
        if let Some(conf) = &conf {
            match conf.refresh().await {
                Ok(true) => {
                    tracing::info!(copy = %conf.cache().display(), "the controller's config changed; copy updated")
                }
                Ok(false) => {}
                Err(error) => tracing::warn!(error = %error, "config not refreshed; keeping the copy"),
            }
        }
    }
}

/// Why a login host's daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error(transparent)]
    StateDir(#[from] drover_shared::statedir::StateDirError),
    #[error(transparent)]
    TokenSocket(#[from] drover_shared::token_socket::BindError),
}
