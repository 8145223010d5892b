//! The CLI's connection to ctld: find the client socket, say hello, send one request, read one
//! answer. Blocking I/O: every command makes one or two round trips and exits, so a runtime would
//! cost more start-up time than it saves.
//!
//! On a host without ctld's socket (a compute node), with `DROVER_TOKEN_SOCKET` pointing at the
//! local noded's token socket, the client fetches a short-lived signed token there and presents it
//! to ctld's TCP port (`DROVER_CONTROLLER`, else the config's `controller.address`).

use anyhow::{Context, bail};
use drover_shared::auth::{NONCE_LEN, random_bytes};
use drover_shared::proto::client::{MAX_LIST_ITEMS, Request, Response};
use drover_shared::proto::frame::{
    FrameError, MAX_ANSWER_FRAME, MAX_HANDSHAKE_FRAME, MAX_REQUEST_FRAME, decode, encode, read_frame, read_message,
    read_sealed_frame, write_message, write_sealed,
};
use drover_shared::proto::seal::{End, Sealer, SessionKeys, verify_client_session_proof};
use drover_shared::proto::{Hello, HelloReply, MAGIC, PROTOCOL_VERSION, Role, TOO_MANY_CONNECTIONS};
use drover_shared::token::IssuedToken;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a connection refused for want of room is tried again before the refusal is reported.
const REFUSED_RETRY: Duration = Duration::from_secs(3);

/// A byte stream to ctld: its Unix socket or its TCP port.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

pub(crate) fn config() -> anyhow::Result<drover_shared::config::Config> {
    let conf = std::env::var_os("DROVER_CONF").map_or_else(|| PathBuf::from("/etc/drover/cluster.toml"), PathBuf::from);
    Ok(drover_shared::config::Config::load(&conf)?)
}

/// Where ctld's client socket is: `DROVER_SOCKET`, else the config named by `DROVER_CONF`
/// (default `/etc/drover/cluster.toml`).
pub(crate) fn socket_path() -> anyhow::Result<PathBuf> {
    if let Some(socket) = std::env::var_os("DROVER_SOCKET") {
        return Ok(PathBuf::from(socket));
    }
    Ok(config()?.client_socket())
}

/// An open, greeted connection to ctld.
pub(crate) struct Client {
    stream: Box<dyn Stream>,
    /// Remote connections are sealed (see `drover_shared::proto::seal`); local ones need not be.
    sealer: Option<Sealer>,
}

impl Client {
    /// Connects and performs the handshake: on ctld's Unix socket, else (with
    /// `DROVER_TOKEN_SOCKET` set and no local socket) on its TCP port with a token.
    pub(crate) fn connect() -> anyhow::Result<Client> {
        match std::env::var_os("DROVER_TOKEN_SOCKET").map(PathBuf::from) {
            None => Client::connect_at(&socket_path()?),
            Some(tokens) => match socket_path() {
                Ok(path) if path.exists() => Client::connect_at(&path),
                _ => Client::connect_remote(&tokens),
            },
        }
    }

    /// Connects to the socket at `path` and performs the handshake. A refusal for want of room
    /// (this user's connections, or everyone's, at ctld's limit) passes as other connections end,
    /// as in a burst of `srun`s: it is tried again for up to [`REFUSED_RETRY`] before it is reported.
    pub(crate) fn connect_at(path: &std::path::Path) -> anyhow::Result<Client> {
        let deadline = Instant::now() + REFUSED_RETRY;
        let mut pause = Duration::from_millis(20);
        loop {
            let stream = UnixStream::connect(path).with_context(|| {
                format!("Unable to contact slurm controller (connect failure) at {}", path.display())
            })?;
            match Client::greet(Box::new(stream), Role::Client)? {
                Ok(client) => return Ok(client),
                Err(message) if message.contains(TOO_MANY_CONNECTIONS) && Instant::now() + pause < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(message) => bail!("controller refused the connection: {message}"),
            }
        }
    }

    /// Fetches a token from the local noded's token socket and connects to ctld's TCP port.
    fn connect_remote(token_socket: &std::path::Path) -> anyhow::Result<Client> {
        let mut tokens = UnixStream::connect(token_socket)
            .with_context(|| format!("Unable to get a token from the local noded at {}", token_socket.display()))?;
        let issued: IssuedToken = read_message(&mut tokens, MAX_HANDSHAKE_FRAME)?;
        let address = match std::env::var("DROVER_CONTROLLER") {
            Ok(address) => address,
            Err(_) => config()?.controller_address,
        };
        let stream = std::net::TcpStream::connect(&address)
            .with_context(|| format!("Unable to contact slurm controller (connect failure) at {address}"))?;
        stream.set_nodelay(true)?;
        let mut stream: Box<dyn Stream> = Box::new(stream);
        let nonce = random_bytes::<NONCE_LEN>()?.to_vec();
        let role = Role::RemoteClient { token: issued.token };
        let hello = Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role, nonce: nonce.clone() };
        write_message(&mut stream, &hello)?;
        match read_message::<_, HelloReply>(&mut stream, MAX_HANDSHAKE_FRAME)? {
            HelloReply::Accept { nonce: server_nonce, proof, .. } => {
                if !verify_client_session_proof(&issued.session, &nonce, &server_nonce, &proof) {
                    bail!("the controller at {address} failed to prove the cluster key; refusing to talk to it");
                }
                let keys = SessionKeys::for_client(&issued.session, End::Node, &nonce, &server_nonce);
                Ok(Client { stream, sealer: Some(Sealer::new(keys)) })
            }
            HelloReply::Reject { message } => bail!("controller refused the connection: {message}"),
        }
    }

    /// Says hello: the connection, or the message ctld refused it with.
    fn greet(mut stream: Box<dyn Stream>, role: Role) -> anyhow::Result<Result<Client, String>> {
        let hello = Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role, nonce: Vec::new() };
        // ctld refuses a connection over its limits (too many from this user) before reading the
        // hello and closes it, so writing the hello may fail; its reason is still there to read.
        let sent = write_message(&mut stream, &hello);
        match (read_message::<_, HelloReply>(&mut stream, MAX_HANDSHAKE_FRAME), sent) {
            (Ok(HelloReply::Reject { message }), _) => Ok(Err(message)),
            (Ok(HelloReply::Accept { .. }), Ok(())) => Ok(Ok(Client { stream, sealer: None })),
            (Ok(HelloReply::Accept { .. }), Err(_)) | (Err(_), _) => {
                bail!("Unable to contact slurm controller (the connection closed during the handshake)")
            }
        }
    }

    /// Sends one request and waits for its answer.
    pub(crate) fn call(&mut self, request: &Request) -> anyhow::Result<Response> {
        Ok(decode(&self.exchange(request)?)?)
    }

    /// Sends one request and returns its answer's payload undecoded.
    fn exchange(&mut self, request: &Request) -> anyhow::Result<Vec<u8>> {
        // Measured before anything is sent: ctld closes a connection whose request is larger.
        let frame = match encode(request) {
            Ok(frame) if frame.len() - 4 <= MAX_REQUEST_FRAME => frame,
            Ok(frame) => request_too_large(frame.len() - 4)?,
            Err(FrameError::TooLarge { len, .. }) => request_too_large(len)?,
            Err(e) => return Err(e.into()),
        };
        match &mut self.sealer {
            Some(sealer) => {
                write_sealed(&mut self.stream, request, sealer)?;
                Ok(read_sealed_frame(&mut self.stream, MAX_ANSWER_FRAME, sealer)?)
            }
            None => {
                self.stream.write_all(&frame)?;
                self.stream.flush()?;
                Ok(read_frame(&mut self.stream, MAX_ANSWER_FRAME)?)
            }
        }
    }
}

/// The error for a request of `size` bytes, more than ctld reads.
fn request_too_large(size: usize) -> anyhow::Result<Vec<u8>> {
    bail!(
        "the request takes {} MiB, more than the controller accepts ({} MiB); the batch script, environment or \
         arguments are too large",
        size.div_ceil(1 << 20),
        MAX_REQUEST_FRAME >> 20
    )
}

/// Connects, sends one request, returns the answer's payload undecoded (for answers read record
/// by record, see `drover_shared::proto::records`).
pub(crate) fn call_payload(request: &Request) -> anyhow::Result<Vec<u8>> {
    Client::connect()?.exchange(request)
}

/// Connects, sends one request, returns the answer.
pub(crate) fn call(request: &Request) -> anyhow::Result<Response> {
    Client::connect()?.call(request)
}

/// Sends `make(chunk)` for each run of at most [`MAX_LIST_ITEMS`] of `items` (one request
/// with an empty list when there are none) over one connection; the answers in order, each with
/// its chunk. ctld refuses longer lists, so a command given more splits them here.
pub(crate) fn call_chunked<'a, T: Clone>(
    items: &'a [T],
    make: impl Fn(Vec<T>) -> Request,
) -> anyhow::Result<Vec<(&'a [T], Response)>> {
    let mut client = Client::connect()?;
    let chunks: Vec<&[T]> = if items.is_empty() { vec![items] } else { items.chunks(MAX_LIST_ITEMS).collect() };
    chunks.into_iter().map(|chunk| Ok((chunk, client.call(&make(chunk.to_vec()))?))).collect()
}

/// Like [`call`], on an explicit socket.
pub(crate) fn call_at(path: &std::path::Path, request: &Request) -> anyhow::Result<Response> {
    Client::connect_at(path)?.call(request)
}
