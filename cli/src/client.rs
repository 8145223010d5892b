//! The CLI's connection to ctld: find the client socket, say hello, send one request, read one
//! answer. Blocking I/O: every command makes one or two round trips and exits, so a runtime would
//! cost more start-up time than it saves.

use anyhow::{Context, bail};
use drover_shared::proto::client::{Request, Response};
use drover_shared::proto::frame::{MAX_FRAME, MAX_HANDSHAKE_FRAME, read_message, write_message};
use drover_shared::proto::{Hello, HelloReply, MAGIC, PROTOCOL_VERSION, Role};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// Where ctld's client socket is: `DROVER_SOCKET`, else the config named by `DROVER_CONF`
/// (default `/etc/drover/cluster.toml`).
pub(crate) fn socket_path() -> anyhow::Result<PathBuf> {
    if let Some(socket) = std::env::var_os("DROVER_SOCKET") {
        return Ok(PathBuf::from(socket));
    }
    let conf = std::env::var_os("DROVER_CONF").map_or_else(|| PathBuf::from("/etc/drover/cluster.toml"), PathBuf::from);
    let config = drover_shared::config::Config::load(&conf)?;
    Ok(config.client_socket())
}

/// An open, greeted connection to ctld.
pub(crate) struct Client {
    stream: UnixStream,
}

impl Client {
    /// Connects and performs the handshake.
    pub(crate) fn connect() -> anyhow::Result<Client> {
        Client::connect_at(&socket_path()?)
    }

    /// Connects to the socket at `path` and performs the handshake.
    pub(crate) fn connect_at(path: &std::path::Path) -> anyhow::Result<Client> {
        let mut stream = UnixStream::connect(path)
            .with_context(|| format!("Unable to contact slurm controller (connect failure) at {}", path.display()))?;
        let hello = Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role: Role::Client, nonce: Vec::new() };
        write_message(&mut stream, &hello)?;
        match read_message::<_, HelloReply>(&mut stream, MAX_HANDSHAKE_FRAME)? {
            HelloReply::Accept { .. } => Ok(Client { stream }),
            HelloReply::Reject { message } => bail!("controller refused the connection: {message}"),
        }
    }

    /// Sends one request and waits for its answer.
    pub(crate) fn call(&mut self, request: &Request) -> anyhow::Result<Response> {
        write_message(&mut self.stream, request)?;
        Ok(read_message(&mut self.stream, MAX_FRAME)?)
    }
}

/// Connects, sends one request, returns the answer.
pub(crate) fn call(request: &Request) -> anyhow::Result<Response> {
    Client::connect()?.call(request)
}

/// Like [`call`], on an explicit socket.
pub(crate) fn call_at(path: &std::path::Path, request: &Request) -> anyhow::Result<Response> {
    Client::connect_at(path)?.call(request)
}
