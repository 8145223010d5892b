//! The CLI's connection to ctld: find the client socket, say hello, send one request, read one
//! answer. Blocking I/O: every command makes one or two round trips and exits, so a runtime would
//! cost more start-up time than it saves.
//!
//! The config (and through it ctld's socket) is found without any variable: `DROVER_CONF` if set;
//! else, for a command run through a cluster home's `bin/` link (`<home>/bin/sbatch`, named by
//! path or found on `PATH`), that home's `cluster.toml`; else `/etc/drover/cluster.toml`; else,
//! on a configless host, the copy its noded keeps (`drover_shared::configless::DEFAULT_CACHE`).
//!
//! On a host without ctld's socket (a compute node), the client fetches a short-lived signed
//! token from the local noded's token socket (`DROVER_TOKEN_SOCKET`, else the config's
//! `token_socket`) and presents it to ctld's TCP port (`DROVER_CONTROLLER`, else the config's
//! `controller.address`).

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

/// How long a command looks for the leading replica of a replicated controller (and a
/// submission waits for a controller that restarts).
pub(crate) const FAILOVER_WAIT: Duration = Duration::from_secs(20);

/// How long a replica's socket may take to answer a hello before the next one is tried, in the
/// first round of looking for the leader; each later round doubles it, up to [`GREET_TIMEOUT`]. A
/// dead replica whose supervisor keeps its ports (socket activation) accepts connections that no
/// one answers: a short first deadline keeps it from holding up a failover, a longer one later
/// keeps a leader slow to answer (a busy host) from being passed over.
const FIRST_GREET_TIMEOUT: Duration = Duration::from_millis(250);

/// The longest a replica's socket may take to answer a hello.
const GREET_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a command that waits on running work (srun's step, an allocation, `sbatch --wait`)
/// keeps trying a controller that does not answer before it gives up on one request: a restart,
/// a failover or a slow start of ctld is waited out, never taken for the end of the work.
pub(crate) const OUTAGE_PATIENCE: Duration = Duration::from_secs(600);

/// The error of a connection that ctld (or a replica stepping down) closed during the handshake.
const HANDSHAKE_CLOSED: &str = "Unable to contact slurm controller (the connection closed during the handshake)";

/// A byte stream to ctld: its Unix socket or its TCP port.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// The config file of an installed system.
const SYSTEM_CONF: &str = "/etc/drover/cluster.toml";

/// The config file commands read (see the module documentation).
pub(crate) fn config_path() -> PathBuf {
    if let Some(conf) = std::env::var_os("DROVER_CONF") {
        return PathBuf::from(conf);
    }
    if let Some(home) = invoked_home() {
        return home.join("cluster.toml");
    }
    let system = PathBuf::from(SYSTEM_CONF);
    let copy = PathBuf::from(drover_shared::configless::DEFAULT_CACHE);
    if !system.exists() && copy.is_file() { copy } else { system }
}

/// The cluster home whose `bin/` holds the link this command was run through, if any: the
/// directory above `bin/` when it has a `cluster.toml`. The link's own path counts, not the
/// binary it points to.
fn invoked_home() -> Option<PathBuf> {
    let argv0 = PathBuf::from(std::env::args_os().next()?);
    let invoked = if argv0.components().count() > 1 {
        argv0
    } else {
        // Found on PATH, as the shell found it: the first directory that has it.
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|dir| dir.join(&argv0)).find(|candidate| candidate.is_file())?
    };
    let invoked = std::path::absolute(invoked).ok()?;
    let bin = invoked.parent()?;
    let home = bin.parent()?;
    (bin.file_name()? == "bin" && home.join("cluster.toml").is_file()).then(|| home.to_owned())
}

/// How long a config read is used again: a command asks for it several times as it starts
/// (its plugins, its socket, the connection), which is one read; a command that waits for
/// minutes (a failover, an allocation) still sees an edit of the file.
const CONFIG_REUSE: Duration = Duration::from_secs(1);

/// The config last read, where from and when.
static CONFIG: std::sync::Mutex<Option<(PathBuf, Instant, std::sync::Arc<drover_shared::config::Config>)>> =
    std::sync::Mutex::new(None);

/// The config (see [`config_path`]), read again once [`CONFIG_REUSE`] has passed. A file that
/// cannot be read or parsed is tried again at every call.
pub(crate) fn config() -> anyhow::Result<std::sync::Arc<drover_shared::config::Config>> {
    let path = config_path();
    let mut cached = CONFIG.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((from, at, config)) = cached.as_ref()
        && *from == path
        && at.elapsed() < CONFIG_REUSE
    {
        return Ok(config.clone());
    }
    let config = std::sync::Arc::new(drover_shared::config::Config::load(&path)?);
    *cached = Some((path, Instant::now(), config.clone()));
    Ok(config)
}

/// Where ctld's client socket is: `DROVER_SOCKET`, else the config's (see [`config_path`]); of
/// replicated controllers, the first replica's (connecting looks for the leader among all of
/// them, see [`Client::connect_via`]).
pub(crate) fn socket_path() -> anyhow::Result<PathBuf> {
    if let Some(socket) = std::env::var_os("DROVER_SOCKET") {
        return Ok(PathBuf::from(socket));
    }
    let config = config()?;
    Ok(config.client_sockets().swap_remove(0))
}

/// The local token socket: `DROVER_TOKEN_SOCKET`, else the config's `token_socket` (noded's)
/// where it exists, else, on a replicated controller's host, a local replica's
/// (`<replica state_dir>/token.sock`) where one exists.
fn token_socket() -> Option<PathBuf> {
    if let Some(tokens) = std::env::var_os("DROVER_TOKEN_SOCKET") {
        return Some(PathBuf::from(tokens));
    }
    let config = config().ok()?;
    std::iter::once(config.token_socket.clone())
        .chain(config.replicas.iter().map(|r| drover_shared::token_socket::socket_path(&r.state_dir)))
        .find(|tokens| tokens.exists())
}

/// Whether the config lists replicated controllers (see docs/admin/ha.md).
fn replicated(config: &drover_shared::config::Config) -> bool {
    config.replicas.len() >= 2
}

/// An open, greeted connection to ctld.
pub(crate) struct Client {
    stream: Box<dyn Stream>,
    /// Remote connections are sealed (see `drover_shared::proto::seal`); local ones need not be.
    sealer: Option<Sealer>,
}

impl Client {
    /// Connects and performs the handshake: on ctld's Unix socket, else (where this host has
    /// no such socket but a token socket, see [`token_socket`]) on its TCP port with a token.
    /// Of replicated controllers, the leader is looked for (see [`Client::connect_replicas`]).
    pub(crate) fn connect() -> anyhow::Result<Client> {
        let path = match std::env::var_os("DROVER_SOCKET") {
            Some(socket) => PathBuf::from(socket),
            None => match config() {
                Ok(config) if replicated(&config) => return Client::connect_replicas(&config),
                Ok(config) => config.client_socket(),
                Err(error) => {
                    return match token_socket() {
                        Some(tokens) => Client::connect_remote(&tokens),
                        None => Err(error),
                    };
                }
            },
        };
        Client::connect_via(&path)
    }

    /// Connects to ctld's socket at `path` where this host has it, else (a compute node, where
    /// `path` is the socket on ctld's host, as in a job's `DROVER_SOCKET`) through the local
    /// token socket to ctld's TCP port. A path that names a replica's socket (a job's
    /// `DROVER_SOCKET` names the replica that led when the job started) looks for whichever
    /// replica leads now.
    pub(crate) fn connect_via(path: &std::path::Path) -> anyhow::Result<Client> {
        if let Ok(config) = config()
            && replicated(&config)
            && config.client_sockets().iter().any(|socket| socket == path)
        {
            return Client::connect_replicas(&config);
        }
        if !path.exists()
            && let Some(tokens) = token_socket()
        {
            return Client::connect_remote(&tokens);
        }
        Client::connect_at(path)
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

    /// Connects to whichever replica leads (see docs/admin/ha.md), round after round until one
    /// answers or [`FAILOVER_WAIT`] has passed (an election takes a second or two): each
    /// replica's socket that this host has (a follower answers at once that it does not lead),
    /// then, where this host has a token socket (a compute node's noded, or a replica's on a
    /// controller host whose leader is elsewhere), each replica's address. Every attempt has a
    /// deadline ([`GREET_TIMEOUT`]): a replica that hangs, or anyone squatting a port, costs one
    /// attempt, and the next replica is tried. Only a connection that could not be made is tried
    /// elsewhere: a request is never sent twice.
    fn connect_replicas(config: &drover_shared::config::Config) -> anyhow::Result<Client> {
        let deadline = Instant::now() + FAILOVER_WAIT;
        let sockets = config.client_sockets();
        let addresses = config.controller_addresses();
        let mut last = None;
        let mut patience = FIRST_GREET_TIMEOUT;
        loop {
            for socket in sockets.iter().filter(|socket| socket.exists()) {
                match Client::greet_local(socket, patience) {
                    Ok(client) => return Ok(client),
                    Err(error) => last = Some(error),
                }
            }
            if let Some(tokens) = token_socket() {
                match Client::remote_round(&tokens, &addresses, patience) {
                    Ok(client) => return Ok(client),
                    Err(error) => last = Some(error),
                }
            }
            if Instant::now() >= deadline {
                // An I/O error as the cause: a command waiting out an outage tries again.
                let detail = last.map_or_else(|| "no replica's socket exists here".into(), |e| crate::user_message(&e));
                let cause = std::io::Error::new(std::io::ErrorKind::NotConnected, detail);
                return Err(anyhow::Error::new(cause)
                    .context("Unable to contact slurm controller (connect failure): no replica leads"));
            }
            std::thread::sleep(Duration::from_millis(100));
            patience = (patience * 2).min(GREET_TIMEOUT);
        }
    }

    /// One replica's local socket, greeted within `patience`.
    fn greet_local(socket: &std::path::Path, patience: Duration) -> anyhow::Result<Client> {
        let stream =
            UnixStream::connect(socket).with_context(|| format!("no controller answers at {}", socket.display()))?;
        // A replica that hangs (stopped, or deposed and about to exit) must not hold the
        // command: its hello gets a deadline, and the connection none after it.
        stream.set_read_timeout(Some(patience))?;
        stream.set_write_timeout(Some(patience))?;
        let handle = stream.try_clone()?;
        match Client::greet(Box::new(stream), Role::Client)? {
            Ok(client) => {
                handle.set_read_timeout(None)?;
                handle.set_write_timeout(None)?;
                Ok(client)
            }
            Err(message) => bail!("controller refused the connection: {message}"),
        }
    }

    /// Fetches a token from the local token socket and connects to ctld's TCP port: of
    /// replicated controllers, to whichever replica leads, each address in turn, round after
    /// round for up to [`FAILOVER_WAIT`]; of one controller, its address once.
    fn connect_remote(token_socket: &std::path::Path) -> anyhow::Result<Client> {
        let addresses = match std::env::var("DROVER_CONTROLLER") {
            Ok(address) => vec![address],
            Err(_) => config()?.controller_addresses(),
        };
        let deadline = Instant::now() + FAILOVER_WAIT;
        // One controller gets the whole deadline at once; replicas a growing one (see
        // FIRST_GREET_TIMEOUT).
        let mut patience = if addresses.len() < 2 { GREET_TIMEOUT } else { FIRST_GREET_TIMEOUT };
        loop {
            let error = match Client::remote_round(token_socket, &addresses, patience) {
                Ok(client) => return Ok(client),
                Err(error) => error,
            };
            if addresses.len() < 2 || Instant::now() >= deadline {
                return Err(error);
            }
            std::thread::sleep(Duration::from_millis(100));
            patience = (patience * 2).min(GREET_TIMEOUT);
        }
    }

    /// Tries each address once, with a fresh token each: the first connection made and greeted,
    /// or the last error.
    fn remote_round(
        token_socket: &std::path::Path,
        addresses: &[String],
        patience: Duration,
    ) -> anyhow::Result<Client> {
        let mut last = anyhow::anyhow!("no controller address");
        for address in addresses {
            match Client::greet_remote(token_socket, address, patience) {
                Ok(client) => return Ok(client),
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    /// Connects to ctld's TCP port at `address` with a token from `token_socket`: the connection
    /// and the handshake each within `patience`; ctld must prove the cluster key.
    fn greet_remote(token_socket: &std::path::Path, address: &str, patience: Duration) -> anyhow::Result<Client> {
        let mut tokens = UnixStream::connect(token_socket)
            .with_context(|| format!("Unable to get a token from {}", token_socket.display()))?;
        tokens.set_read_timeout(Some(GREET_TIMEOUT))?;
        let issued: IssuedToken = read_message(&mut tokens, MAX_HANDSHAKE_FRAME)?;
        let connect_error = || format!("Unable to contact slurm controller (connect failure) at {address}");
        let target = std::net::ToSocketAddrs::to_socket_addrs(address)
            .with_context(connect_error)?
            .next()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such address"))
            .with_context(connect_error)?;
        let stream = std::net::TcpStream::connect_timeout(&target, patience).with_context(connect_error)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(patience))?;
        stream.set_write_timeout(Some(patience))?;
        let handle = stream.try_clone()?;
        let mut stream: Box<dyn Stream> = Box::new(stream);
        let nonce = random_bytes::<NONCE_LEN>()?.to_vec();
        let role = Role::RemoteClient { token: issued.token };
        let hello = Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role, nonce: nonce.clone() };
        write_message(&mut stream, &hello).with_context(connect_error)?;
        match read_message::<_, HelloReply>(&mut stream, MAX_HANDSHAKE_FRAME).with_context(connect_error)? {
            HelloReply::Accept { nonce: server_nonce, proof, .. } => {
                if !verify_client_session_proof(&issued.session, &nonce, &server_nonce, &proof) {
                    bail!("the controller at {address} failed to prove the cluster key; refusing to talk to it");
                }
                handle.set_read_timeout(None)?;
                handle.set_write_timeout(None)?;
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
            // Kept as the cause, so that a command waiting out an outage knows to try again.
            (Ok(HelloReply::Accept { .. }), Err(error)) => Err(anyhow::Error::new(error).context(HANDSHAKE_CLOSED)),
            (Err(error), _) => Err(anyhow::Error::new(error).context(HANDSHAKE_CLOSED)),
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

/// Submits `spec` once: under a random key ([`Request::SubmitOnce`]), sent again when the
/// connection breaks before the answer or the controller cannot be reached (a crash, a
/// failover), for up to [`FAILOVER_WAIT`]; the controller answers a key it already stored with
/// that job, so a submission is never made twice. `who` names the command in the one line it
/// prints while it waits.
pub(crate) fn submit(
    path: Option<&std::path::Path>,
    spec: drover_shared::job::JobSpec,
    who: &str,
) -> anyhow::Result<Response> {
    let key = random_bytes::<{ drover_shared::proto::client::SUBMIT_KEY_LEN }>()?.to_vec();
    let request = Request::SubmitOnce { key, spec: Box::new(spec) };
    call_patiently(path, &request, Resend::Safe, who, FAILOVER_WAIT)
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

/// Whether `error` means that the controller could not be reached or the connection broke (a
/// socket that is gone or refuses, a connection closed or reset), as opposed to an answer, a
/// refusal or a malformed exchange: only such errors are worth waiting out.
pub(crate) fn unreachable(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause.is::<std::io::Error>() || matches!(cause.downcast_ref::<FrameError>(), Some(FrameError::Io(_)))
    })
}

/// Whether a request may be sent again after its connection broke before the answer came: true
/// for queries and for changes that mean the same the second time (a step's end, a signal);
/// false for one that would be done twice (a new step).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    Safe,
    Never,
}

/// Like [`call`] (through ctld's socket at `path`, or as [`Client::connect_via`] finds it), for a
/// command that waits on running work: while the controller cannot be
/// reached (restarting, failing over), tries again with a growing pause (at most 2 s) for up to
/// `patience`, saying once on stderr, as `who`, that it waits and once that the controller
/// answers again. A connection that broke after the request was sent is retried only where
/// `resend` allows it.
pub(crate) fn call_patiently(
    path: Option<&std::path::Path>,
    request: &Request,
    resend: Resend,
    who: &str,
    patience: Duration,
) -> anyhow::Result<Response> {
    let deadline = Instant::now() + patience;
    let mut pause = Duration::from_millis(100);
    let mut waiting = false;
    loop {
        let connected = match path {
            Some(path) => Client::connect_via(path),
            None => Client::connect(),
        };
        let error = match connected {
            Ok(mut client) => match client.call(request) {
                Err(error) if resend == Resend::Safe && unreachable(&error) => error,
                answer => {
                    if waiting && answer.is_ok() {
                        eprintln!("{who}: the controller answers again");
                    }
                    return answer;
                }
            },
            Err(error) if unreachable(&error) => error,
            Err(error) => return Err(error),
        };
        if Instant::now() + pause >= deadline {
            return Err(error.context(format!("the controller did not answer for {} s", patience.as_secs())));
        }
        if !waiting {
            waiting = true;
            eprintln!("{who}: error: {}; retrying", crate::user_message(&error));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}
