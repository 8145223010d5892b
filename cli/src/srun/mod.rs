//! `srun`: run a job step. Inside an allocation (`SLURM_JOB_ID`, or `--jobid`) it asks ctld for a
//! step, listens on a TCP port for the step's nodes, prints their tasks' output (prefixed with
//! the task id under `-l`) and exits with Slurm's rule: the highest task exit code, or 128 plus
//! the signal of a task killed by one. Outside an allocation it first allocates one the way
//! `salloc` does (an interactive job), runs the step in it and releases it.
//!
//! The I/O port is bound to the address the nodes reach this host by ([`io_address`]), for the
//! step's whole life. Anyone who can reach it may connect: a connection counts for nothing until
//! it proves the step token ctld gave srun and the nodes, within five seconds, or it is dropped;
//! each of the step's nodes is served once.
//!
//! SPANK plugins run in srun's local context ([`crate::spank`]): their options are taken
//! out of the command line before it is read, `init_post_opt` runs before the step is asked
//! for, `local_user_init` once it exists, `exit` at the end.
//!
//! srun's stdin goes to the tasks (task 0 alone under `--pty`); SIGINT/SIGTERM cancel the step;
//! SIGUSR1/SIGUSR2 are ignored (`scancel --signal` reaches the tasks through ctld).
//!
//! ctld is found through `DROVER_SOCKET`, else through the `DROVER_SOCKET` in the environment of
//! the nearest ancestor process of the same user that has it (the batch shell, when a workflow
//! manager stripped srun's environment down to `SLURM_JOB_ID`), else through the configuration
//! (found as every command finds it: `DROVER_CONF`, the cluster home of the `bin/` link srun was
//! run through, else `/etc/drover/cluster.toml`; see `crate::client`). On a host without that
//! socket (a compute node: the socket in a job's `DROVER_SOCKET` is on ctld's host) srun, like
//! every command, reaches ctld through the local noded's token socket.

mod hostfile;
mod multi_prog;
pub(crate) mod options;
mod output;

use crate::client::{OUTAGE_PATIENCE, Resend, call_patiently};
use crate::options::defs::Command;
use crate::spank::Plugins;
use anyhow::{Context, bail};
use drover_shared::job::{JobState, StepLayout, WaitStatus};
use drover_shared::proto::client::{ErrorCode, Request, Response};
use drover_shared::proto::stepio;
use options::{Parsed, StepOptions};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Set by SIGTERM, and by SIGINT before a step exists: srun cancels its step (its tasks get
/// SIGTERM, then SIGKILL) and goes on collecting their exits.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// SIGINTs received: while a step runs, one prints its tasks' status and a second within a
/// second cancels it (Slurm's srun); under `--quit-on-interrupt` one kills it.
static INTERRUPTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn on_interrupt(signal: libc::c_int) {
    if signal == libc::SIGINT {
        INTERRUPTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    } else {
        INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Whether srun was asked to stop (SIGTERM, or any SIGINT).
fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) || INTERRUPTS.load(std::sync::atomic::Ordering::SeqCst) > 0
}

fn catch_interrupts() {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(SigHandler::Handler(on_interrupt), SaFlags::SA_RESTART, SigSet::empty());
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let _ = unsafe { sigaction(signal, &action) };
    }
    // `scancel --signal=USR1 N` reaches srun (a process of the job) and, through ctld, the
    // step's tasks: srun itself must survive it.
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    for signal in [Signal::SIGUSR1, Signal::SIGUSR2] {
        // SAFETY: ignoring a signal installs no handler.
        let _ = unsafe { sigaction(signal, &ignore) };
    }
}

/// How long srun tries to reach a controller that does not answer to cancel its step (on an
/// interrupt, `-K`, `-W`) before it gives up and exits, which ends the tasks on the nodes.
const CANCEL_PATIENCE: Duration = Duration::from_secs(30);

/// How long srun waits for every node of its step to connect. Only connecting is bounded: once
/// every node is connected, the step runs as long as its tasks do, silent or not (its time limit
/// is the job's, enforced on the nodes).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// `srun [options] command [args…]`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    // SPANK's local context: `init`, then the plugins' options come out of the command line.
    let environment: Vec<(String, String)> = std::env::vars().collect();
    let plugins = Plugins::start(Command::Srun, &environment).map_err(anyhow::Error::msg)?;
    let words: Vec<String> = args.iter().map(|arg| arg.to_string_lossy().into_owned()).collect();
    let args: Vec<OsString> =
        plugins.take_options(words).map_err(anyhow::Error::msg)?.into_iter().map(OsString::from).collect();
    let mut options = match options::parse(Command::Srun, &args)? {
        Parsed::Answer(text) => {
            let help = args.iter().any(|arg| arg == "--help" || arg == "-h");
            let plugin_help = if help { plugins.help() } else { String::new() };
            print!("{text}{plugin_help}");
            return Ok(0);
        }
        Parsed::Run(options) => options,
    };
    if options.command.is_empty() {
        bail!("No command given to execute.");
    }
    if options.verbosity > 0 {
        eprint!("{}", options_dump(&options));
    }
    if let Some(note) = &options.slurmd_debug_note {
        eprintln!("srun: {note}");
    }
    // The options to their plugins, `init_post_opt`; what the remote side needs rides in the
    // step's environment.
    options.plugin_env = plugins.job_env().map_err(anyhow::Error::msg)?;
    let code = run_with(&options, &plugins);
    let exited = plugins.exit().map_err(anyhow::Error::msg);
    let code = code?;
    exited?;
    Ok(code)
}

/// srun once its command line is read: the step, in the given allocation or in a new one.
fn run_with(options: &StepOptions, plugins: &Plugins) -> anyhow::Result<i32> {
    if options.test_only {
        return crate::salloc::test_only(&allocation_of(options), crate::salloc::Allocator::Srun);
    }
    // `-Z` runs outside any allocation srun is in.
    let job_id = options.job_id.filter(|_| !options.no_allocate).or_else(|| {
        ["SLURM_JOB_ID", "SLURM_JOBID"]
            .iter()
            .filter(|_| !options.no_allocate)
            .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
    });
    // A `--multi-prog` file that leaves a task without a program is refused before anything is
    // asked of ctld, as Slurm's srun does.
    if let (true, Some(ntasks)) = (options.multi_prog, options.step.ntasks) {
        multi_prog::task_programs(&options.command, ntasks).map_err(|message| anyhow::anyhow!(message))?;
    }
    let socket = socket_path()?;
    match job_id {
        Some(job_id) => run_step(&socket, job_id, options, plugins),
        None => {
            let allocation = allocation_of(options);
            let who = crate::salloc::Allocator::Srun;
            crate::salloc::with_allocation(&socket, &allocation, who, options.immediate, |job_id| {
                run_step(&socket, job_id, options, plugins)
            })
        }
    }
}

/// The job srun asks for when it is in no allocation. Slurm names it after the command it runs
/// (`srun hostname` → `hostname`).
fn allocation_of(options: &StepOptions) -> drover_shared::job::JobSpec {
    let mut allocation = options.allocation.clone();
    if allocation.name.is_empty() {
        allocation.name = job_name_of(&options.command[0]);
    }
    allocation
}

/// The option dump Slurm's srun starts with under `-v`: the options set, one `name : value`
/// line each (scripts and tests read `verbose : N` and `ntasks : N`).
fn options_dump(options: &StepOptions) -> String {
    let step = &options.step;
    let mut lines: Vec<(&str, String)> = Vec::new();
    if let Some(job_id) = options.job_id {
        lines.push(("jobid", job_id.to_string()));
    }
    if let Some(n) = step.nodes {
        lines.push(("nodes", n.to_string()));
    }
    if let Some(n) = step.ntasks {
        lines.push(("ntasks", n.to_string()));
    }
    if let Some(n) = step.ntasks_per_node {
        lines.push(("ntasks-per-node", n.to_string()));
    }
    if let Some(n) = step.cpus_per_task {
        lines.push(("cpus-per-task", n.to_string()));
    }
    if step.overcommit {
        lines.push(("overcommit", "set".to_owned()));
    }
    if step.overlap {
        lines.push(("overlap", "set".to_owned()));
    }
    if let Some(nodelist) = &options.allocation.nodelist {
        lines.push(("nodelist", nodelist.clone()));
    }
    lines.push(("verbose", options.verbosity.to_string()));
    let mut out = String::from("srun: defined options\nsrun: -------------------- --------------------\n");
    for (name, value) in lines {
        out.push_str(&format!("srun: {name:<20}: {value}\n"));
    }
    out.push_str("srun: -------------------- --------------------\nsrun: end of defined options\n");
    out
}

/// The job name Slurm gives `srun COMMAND` outside an allocation: the command's file name.
fn job_name_of(command: &str) -> String {
    let name = std::path::Path::new(command).file_name().map(|n| n.to_string_lossy().into_owned());
    name.filter(|n| !n.is_empty()).unwrap_or_else(|| command.to_owned())
}

/// Counts in Slurm's run-length form: `[2, 2, 1]` → `2(x2),1`.
fn runs_text(counts: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for chunk in counts.chunk_by(|a, b| a == b) {
        parts.push(if chunk.len() > 1 { format!("{}(x{})", chunk[0], chunk.len()) } else { chunk[0].to_string() });
    }
    parts.join(",")
}

/// Where ctld's socket is (see the module documentation).
pub(crate) fn socket_path() -> anyhow::Result<PathBuf> {
    if let Some(socket) = std::env::var_os("DROVER_SOCKET") {
        return Ok(PathBuf::from(socket));
    }
    if let Some(socket) = inherited_socket() {
        return Ok(socket);
    }
    crate::client::socket_path()
}

/// `DROVER_SOCKET` from the nearest ancestor whose environment we may read (same user).
fn inherited_socket() -> Option<PathBuf> {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..64 {
        if pid <= 1 {
            return None;
        }
        if let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) {
            for entry in environ.split(|&b| b == 0) {
                if let Some(value) = entry.strip_prefix(b"DROVER_SOCKET=") {
                    return Some(PathBuf::from(String::from_utf8_lossy(value).into_owned()));
                }
            }
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The parent pid is the second field after the command name in parentheses.
        let after = &stat[stat.rfind(')')? + 1..];
        pid = after.split_whitespace().nth(1)?.parse().ok()?;
    }
    None
}

/// Where srun listens for its step's nodes and the host it names to them: the address and name
/// in `SLURM_SRUN_COMM_HOST` when set to an address of this host; else the address this host reaches ctld's node port from
/// (the network the nodes share with ctld; loopback on a `drover up` cluster); else the host
/// name and what it resolves to here. Only when none of these can be bound does srun listen on
/// every address (and name the host).
fn io_address() -> (IpAddr, String) {
    let resolve = |host: &str| (host, 0).to_socket_addrs().ok().and_then(|mut addrs| addrs.next()).map(|a| a.ip());
    // Tasks inherit their srun's SLURM_SRUN_COMM_HOST: an srun inside a task on another node
    // must not name that host, so the variable counts only where it is an address of this host.
    if let Ok(host) = std::env::var("SLURM_SRUN_COMM_HOST")
        && let Some(ip) = resolve(&host).filter(|ip| TcpListener::bind((*ip, 0)).is_ok())
    {
        return (ip, host);
    }
    if let Some(ip) = crate::client::config().ok().and_then(|config| route_towards(&config.controller_address)) {
        return (ip, ip.to_string());
    }
    let host =
        nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_else(|_| "127.0.0.1".into());
    (resolve(&host).unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), host)
}

/// The local address this host sends from to reach `address` (`host:port`); nothing is sent
/// (a UDP socket's connect only picks the route). `None` for an unspecified address.
fn route_towards(address: &str) -> Option<IpAddr> {
    let target = address.to_socket_addrs().ok()?.find(|a| !a.ip().is_unspecified())?;
    let any: SocketAddr =
        if target.is_ipv4() { (Ipv4Addr::UNSPECIFIED, 0).into() } else { (Ipv6Addr::UNSPECIFIED, 0).into() };
    let socket = std::net::UdpSocket::bind(any).ok()?;
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip()).filter(|ip| !ip.is_unspecified())
}

/// srun's I/O port: bound where [`io_address`] says (every address if that fails) and the
/// `host:port` the nodes are told.
fn open_io_port() -> anyhow::Result<(TcpListener, String)> {
    let (ip, host) = io_address();
    let listener = TcpListener::bind((ip, 0))
        .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)))
        .context("opening srun's I/O port")?;
    let port = listener.local_addr()?.port();
    let host = if host.contains(':') { format!("[{host}]") } else { host };
    Ok((listener, format!("{host}:{port}")))
}

/// What srun learns from the step's nodes.
enum Incoming {
    Output {
        kind: u8,
        task: u32,
        data: Vec<u8>,
    },
    Exit {
        task: u32,
        status: i32,
    },
    /// Under `--debugger-test`: a task stopped before its exec, with its pid on its node.
    Stopped {
        task: u32,
        pid: i32,
    },
    /// A node proved the step token; srun writes the tasks' input here.
    Connected {
        node: u32,
        stream: TcpStream,
    },
    /// A node's connection ended (cleanly or not).
    Closed,
}

/// How long a connection to srun's port has to prove the step token.
const HELLO_DEADLINE: Duration = Duration::from_secs(5);

/// The most connections waiting to prove the token; past it the oldest is dropped. Nodes send
/// their hello as soon as they connect, so only connections that never will are dropped so.
const MAX_UNPROVEN: usize = 256;

/// A connection that has not proved the step token yet.
struct Unproven {
    stream: TcpStream,
    hello: Vec<u8>,
    since: Instant,
}

/// srun's I/O port for the step's whole life. Connections count for nothing until they prove
/// the step token (read without blocking, [`HELLO_DEADLINE`] each); each of the step's nodes is
/// served once, by its own thread ([`serve_node`]).
fn gate(listener: TcpListener, token: Vec<u8>, nodes: usize, tx: mpsc::Sender<Incoming>) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let mut gate = Gate { token, nodes, served: Vec::new(), tx };
    let mut unproven: Vec<Unproven> = Vec::new();
    loop {
        let now = Instant::now();
        unproven.retain(|u| now.duration_since(u.since) < HELLO_DEADLINE);
        let wait = unproven.iter().map(|u| (u.since + HELLO_DEADLINE).saturating_duration_since(now)).min();
        let mut fds = vec![listener.as_fd()];
        fds.extend(unproven.iter().map(|u| u.stream.as_fd()));
        let Ok(ready) = stepio::poll_readable(&fds, wait.map(|w| w + Duration::from_millis(1))) else { return };
        let finished: Vec<usize> = ready
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(index, ready)| **ready && gate.advance(&mut unproven[index - 1]))
            .map(|(index, _)| index - 1)
            .collect();
        for index in finished.into_iter().rev() {
            unproven.swap_remove(index);
        }
        if ready.first().copied().unwrap_or(false) {
            while let Ok((stream, _)) = listener.accept() {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                // A node sends its hello as it connects: most are settled here, before any wait.
                let mut waiting = Unproven { stream, hello: Vec::new(), since: Instant::now() };
                if gate.advance(&mut waiting) {
                    continue;
                }
                if unproven.len() >= MAX_UNPROVEN
                    && let Some(oldest) = unproven.iter().enumerate().min_by_key(|(_, u)| u.since).map(|(i, _)| i)
                {
                    unproven.swap_remove(oldest);
                }
                unproven.push(waiting);
            }
        }
    }
}

/// What the gate knows: the token, how many nodes the step has and which are served.
struct Gate {
    token: Vec<u8>,
    nodes: usize,
    served: Vec<u32>,
    tx: mpsc::Sender<Incoming>,
}

impl Gate {
    /// Reads what arrived of a connection's hello; once it proves the token for a node not yet
    /// served, hands it to a [`serve_node`] thread. Whether the connection is finished with
    /// (served, or to be dropped).
    fn advance(&mut self, waiting: &mut Unproven) -> bool {
        let Some(hello) = read_hello_part(waiting) else { return false };
        if let Ok((proof, node)) = hello
            && stepio::token_matches(&proof, &self.token)
            && usize::try_from(node).is_ok_and(|n| n < self.nodes)
            && !self.served.contains(&node)
            && let Ok(stream) = waiting.stream.try_clone()
        {
            self.served.push(node);
            let tx = self.tx.clone();
            let _ = std::thread::Builder::new().name("step-io".into()).spawn(move || serve_node(stream, node, tx));
        }
        true
    }
}

/// Reads what has arrived of a connection's hello: `None` while incomplete, the hello once it is
/// whole, `Err` when the connection ended or sent something that is no hello.
fn read_hello_part(waiting: &mut Unproven) -> Option<Result<(Vec<u8>, u32), ()>> {
    use std::io::Read;
    loop {
        let need = match stepio::hello_progress(&waiting.hello) {
            stepio::HelloProgress::Need(need) => need,
            stepio::HelloProgress::Done(proof, node) => return Some(Ok((proof, node))),
            stepio::HelloProgress::Invalid => return Some(Err(())),
        };
        let mut buf = vec![0u8; need];
        match waiting.stream.read(&mut buf) {
            Ok(0) => return Some(Err(())),
            Ok(n) => waiting.hello.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Some(Err(())),
        }
    }
}

/// One node's connection, after it proved the step token: its tasks' output and exit statuses.
fn serve_node(mut stream: TcpStream, node: u32, tx: mpsc::Sender<Incoming>) {
    if stream.set_nonblocking(false).is_err() {
        let _ = tx.send(Incoming::Closed);
        return;
    }
    if let Ok(writer) = stream.try_clone() {
        let _ = tx.send(Incoming::Connected { node, stream: writer });
    }
    loop {
        match stepio::read_frame(&mut stream) {
            Ok(Some((stepio::EXIT, task, data))) => {
                let status = data.get(..4).and_then(|b| b.try_into().ok()).map_or(9, i32::from_le_bytes);
                let _ = tx.send(Incoming::Exit { task, status });
            }
            Ok(Some((stepio::PID, task, data))) => {
                let pid = data.get(..4).and_then(|b| b.try_into().ok()).map_or(0, i32::from_le_bytes);
                let _ = tx.send(Incoming::Stopped { task, pid });
            }
            Ok(Some((kind, task, data))) => {
                let _ = tx.send(Incoming::Output { kind, task, data });
            }
            Ok(None) | Err(_) => break,
        }
    }
    let _ = tx.send(Incoming::Closed);
}

/// srun's own terminal under `--pty`: its size, and its settings to restore (it is put in raw
/// mode so that every key reaches the remote task).
struct Terminal {
    size: (u16, u16),
    saved: Option<nix::sys::termios::Termios>,
}

impl Terminal {
    fn take() -> Terminal {
        use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let mut size = libc::winsize { ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we own; on failure (stdin is
        // not a terminal) it is left as initialised.
        let _ = unsafe { libc::ioctl(0, libc::TIOCGWINSZ, &mut size) };
        let saved = tcgetattr(&stdin).ok();
        if let Some(saved) = &saved {
            let mut raw = saved.clone();
            cfmakeraw(&mut raw);
            let _ = tcsetattr(&stdin, SetArg::TCSANOW, &raw);
        }
        Terminal { size: (size.ws_row.max(1), size.ws_col.max(1)), saved }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, saved);
        }
    }
}

/// Where the tasks' input comes from (`-i/--input`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum InputSource {
    /// srun's stdin, to every task (the default, `all`).
    Stdin,
    /// srun's stdin to this task alone; the others read end of file at once.
    Task(u32),
    /// No input: every task reads end of file (`none`).
    Nothing,
    /// A file srun opens, to every task.
    File(String),
}

impl InputSource {
    fn of(pattern: Option<&str>) -> InputSource {
        match pattern {
            None | Some("all") => InputSource::Stdin,
            Some("none") => InputSource::Nothing,
            Some(text) => match text.parse() {
                Ok(task) => InputSource::Task(task),
                Err(_) => InputSource::File(text.to_owned()),
            },
        }
    }
}

/// Copies the tasks' input to them once every node is connected (`source`: read by srun; `task`:
/// one task, or [`stepio::ALL_TASKS`]); end of input is passed on as an empty frame. Under
/// `--pty` it goes to task 0 alone. Tasks that get no input (`-i N`, `-i none`) read end of file
/// at once: `others` lists, per node, the tasks to close first.
fn forward_input(
    mut targets: Vec<(u32, TcpStream)>,
    pty: bool,
    task: u32,
    others: &[Vec<u32>],
    mut source: Box<dyn std::io::Read + Send>,
) {
    let task = if pty { 0 } else { task };
    if pty {
        targets.retain(|(node, _)| *node == 0);
    }
    for (node, stream) in &mut targets {
        for &other in others.get(*node as usize).map_or(&[][..], Vec::as_slice) {
            let _ = stepio::write_frame(stream, stepio::STDIN, other, &[]);
        }
    }
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match source.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        for (_, stream) in &mut targets {
            let _ = stepio::write_frame(stream, stepio::STDIN, task, &buf[..n]);
        }
        if n == 0 {
            return;
        }
    }
}

/// What feeds the tasks' input: the task it goes to ([`stepio::ALL_TASKS`] for all), per node the
/// tasks that get none, and the reader.
type InputPlan = (u32, Vec<Vec<u32>>, Box<dyn std::io::Read + Send>);

fn input_plan(source: &InputSource, layout: &StepLayout, work_dir: &str) -> anyhow::Result<InputPlan> {
    let all_but = |keep: Option<u32>| -> Vec<Vec<u32>> {
        layout.tasks.iter().map(|tasks| tasks.iter().copied().filter(|t| Some(*t) != keep).collect()).collect()
    };
    Ok(match source {
        InputSource::Stdin => (stepio::ALL_TASKS, Vec::new(), Box::new(std::io::stdin())),
        InputSource::Task(task) => (*task, all_but(Some(*task)), Box::new(std::io::stdin())),
        InputSource::Nothing => (stepio::ALL_TASKS, all_but(None), Box::new(std::io::empty())),
        InputSource::File(path) => {
            let path = std::path::Path::new(work_dir).join(path);
            let file =
                std::fs::File::open(&path).with_context(|| format!("opening the input file {}", path.display()))?;
            (stepio::ALL_TASKS, Vec::new(), Box::new(file))
        }
    })
}

/// Per task, per stream: the bytes after the last newline, held back under `-l`.
struct Printer {
    label: bool,
    width: usize,
    partial: HashMap<(u8, u32), Vec<u8>>,
    /// Per task: the `-o` and `-e` files, expanded (`None`: srun's own stdout/stderr).
    files: HashMap<u32, (Option<String>, Option<String>)>,
    open: output::Files,
    base: PathBuf,
}

impl Printer {
    fn emit(&mut self, kind: u8, task: u32, data: &[u8]) {
        let (stdout, stderr) = self.files.get(&task).cloned().unwrap_or_default();
        let file = if kind == stepio::STDERR { stderr.or(stdout) } else { stdout };
        if let Some(path) = file {
            if let Err(error) = self.open.write(&self.base, &path, data) {
                eprintln!("srun: error: writing {path}: {error}");
            }
            return;
        }
        let mut out: Box<dyn Write> =
            if kind == stepio::STDERR { Box::new(std::io::stderr()) } else { Box::new(std::io::stdout()) };
        let _ = out.write_all(data);
        let _ = out.flush();
    }

    fn write(&mut self, kind: u8, task: u32, data: &[u8]) {
        if !self.label {
            self.emit(kind, task, data);
            return;
        }
        let buffer = self.partial.entry((kind, task)).or_default();
        buffer.extend_from_slice(data);
        let mut lines = Vec::new();
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            lines.extend_from_slice(format!("{task:>width$}: ", width = self.width).as_bytes());
            lines.extend_from_slice(&line);
        }
        if !lines.is_empty() {
            self.emit(kind, task, &lines);
        }
    }

    fn flush_all(&mut self) {
        let rest: Vec<((u8, u32), Vec<u8>)> = self.partial.drain().filter(|(_, b)| !b.is_empty()).collect();
        for ((kind, task), mut data) in rest {
            data.push(b'\n');
            let label = self.label;
            self.label = false;
            let prefix = format!("{task:>width$}: ", width = self.width);
            self.write(kind, task, &[prefix.as_bytes(), &data].concat());
            self.label = label;
        }
    }
}

/// Creates the step in `job_id`, runs it and returns srun's exit code.
pub(crate) fn run_step(
    socket: &std::path::Path,
    job_id: u32,
    options: &StepOptions,
    plugins: &Plugins,
) -> anyhow::Result<i32> {
    let (listener, address) = open_io_port()?;
    let mut spec = options.step.clone();
    spec.srun_address = address;
    spec.argv = if options.multi_prog {
        multi_prog::argv(&options.command).map_err(|message| anyhow::anyhow!(message))?
    } else {
        options.command.clone()
    };
    spec.environment = options.environment();
    spec.rlimits =
        drover_shared::job::propagated_rlimits(options.propagate.as_deref(), &drover_shared::job::current_rlimits())
            .map_err(|message| anyhow::anyhow!(message))?;
    spec.work_dir = match &options.chdir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("reading the working directory")?.to_string_lossy().into_owned(),
    };
    let work_dir = spec.work_dir.clone();
    let terminal = if options.pty { Some(Terminal::take()) } else { None };
    spec.pty = terminal.as_ref().map(|t| t.size);
    let spec_pty = options.pty;
    let layout = create_step(socket, job_id, spec, options.verbose)?;
    if let Err(message) = plugins.local_user_init(local_job_info(job_id, &layout, options)) {
        // The step exists: it ends before any of its tasks start.
        let request = Request::CancelStep { job_id, step_id: layout.step_id, signal: None };
        let _ = call_patiently(Some(socket), &request, Resend::Safe, "srun", CANCEL_PATIENCE);
        bail!(message);
    }
    if options.verbose {
        // Slurm's line, which tools scrape for the job id and nodes; the counts are the CPUs this
        // step uses on each node (Slurm's are the job's).
        let cpus: Vec<u32> = layout.tasks.iter().map(|t| layout.cpus_per_task.max(1) * t.len() as u32).collect();
        eprintln!(
            "srun: jobid {job_id}: nodes({}):`{}', cpu counts: {}",
            layout.nodes.len(),
            drover_shared::hostlist::compress(&layout.nodes),
            runs_text(&cpus)
        );
        eprintln!("srun: launching StepId={}.{} on host(s) {}", job_id, layout.step_id, layout.nodes.join(","));
    }
    let (tx, rx) = mpsc::channel();
    let expected = layout.nodes.len();
    {
        let token = layout.token.clone();
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("step-port".into())
            .spawn(move || gate(listener, token, expected, tx))
            .context("starting srun's I/O thread")?;
    }
    drop(tx);
    let user = nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name).unwrap_or_default();
    // `%x`: the step's name, else the job's (srun outside an allocation names it after the
    // command, as Slurm does).
    let job_name = Some(options.step.name.clone())
        .filter(|n| !n.is_empty())
        .or_else(|| std::env::var("SLURM_JOB_NAME").ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| options.command.first().map(|c| job_name_of(c)).unwrap_or_default());
    // `%A`/`%a`: the array of the job srun runs in (its environment says).
    let array_var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u32>().ok());
    let array = array_var("SLURM_ARRAY_JOB_ID").zip(array_var("SLURM_ARRAY_TASK_ID"));
    let mut files = HashMap::new();
    for (index, (node, tasks)) in layout.nodes.iter().zip(&layout.tasks).enumerate() {
        for &task in tasks {
            let context = output::TaskContext {
                job_id,
                step_id: layout.step_id,
                task,
                node_index: u32::try_from(index).unwrap_or(u32::MAX),
                node_name: node,
                user: &user,
                job_name: &job_name,
                array,
            };
            // `none` discards; a task id sends that task's stream to srun and discards the others'.
            let expand = |pattern: &Option<String>| match pattern.as_deref() {
                None => None,
                Some("none") => Some("/dev/null".to_owned()),
                Some(id) if id.parse::<u32>().is_ok() => (id.parse() != Ok(task)).then(|| "/dev/null".to_owned()),
                Some(p) => Some(output::expand(p, &context)),
            };
            files.insert(task, (expand(&options.output), expand(&options.error)));
        }
    }
    let mut printer = Printer {
        label: options.label,
        width: (layout.ntasks.saturating_sub(1)).to_string().len(),
        partial: HashMap::new(),
        files,
        open: output::Files::default(),
        base: PathBuf::from(&work_dir),
    };
    // Every task's `-o`/`-e` file exists once the step starts, even one no output reaches (Slurm
    // creates them as the tasks start).
    let paths: Vec<String> =
        printer.files.values().flat_map(|(out, err)| [out.clone(), err.clone()]).flatten().collect();
    for path in paths {
        if let Err(error) = printer.open.write(&printer.base, &path, &[]) {
            eprintln!("srun: error: opening {path}: {error}");
        }
    }
    let mut proctable = options.debugger_test.then(|| Proctable::new(&layout, options));
    let mut statuses: HashMap<u32, i32> = HashMap::new();
    let mut closed = 0;
    // Nodes that proved the step token (each is served once).
    let mut connected = 0;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let total = layout.ntasks as usize;
    catch_interrupts();
    let mut cancel_sent = false;
    let mut writers: Vec<(u32, TcpStream)> = Vec::new();
    let mut input = Some(input_plan(&InputSource::of(options.input.as_deref()), &layout, &work_dir)?);
    // `-W`: when the first task exited; `-K`: whether one exited with a non-zero code.
    let mut first_exit: Option<Instant> = None;
    let mut bad_exit = false;
    let cancel = |signal: Option<i32>| {
        let request = Request::CancelStep { job_id, step_id: layout.step_id, signal };
        if let Err(error) = call_patiently(Some(socket), &request, Resend::Safe, "srun", CANCEL_PATIENCE) {
            let error = crate::user_message(&error);
            eprintln!("srun: error: could not cancel step {job_id}.{}: {error}", layout.step_id);
        }
    };
    let status_line = |statuses: &HashMap<u32, i32>| {
        let (exited, running): (Vec<u32>, Vec<u32>) = (0..layout.ntasks).partition(|t| statuses.contains_key(t));
        for (tasks, what) in [(running, "running"), (exited, "exited")] {
            if !tasks.is_empty() {
                let plural = if tasks.len() > 1 { "tasks" } else { "task" };
                eprintln!("srun: StepId={job_id}.{} {plural} {}: {what}", layout.step_id, task_ranges(&tasks));
            }
        }
    };
    let mut interrupts_seen = INTERRUPTS.load(std::sync::atomic::Ordering::SeqCst);
    let mut last_interrupt: Option<Instant> = None;
    while statuses.len() < total && closed < expected {
        if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) && !cancel_sent {
            cancel_sent = true;
            eprintln!("srun: interrupt: cancelling step {job_id}.{}", layout.step_id);
            cancel(None);
        }
        let interrupts = INTERRUPTS.load(std::sync::atomic::Ordering::SeqCst);
        if interrupts > interrupts_seen && !cancel_sent {
            interrupts_seen = interrupts;
            if options.quit_on_interrupt {
                cancel_sent = true;
                eprintln!("srun: interrupt: killing StepId={job_id}.{}", layout.step_id);
                cancel(Some(libc::SIGKILL));
            } else if last_interrupt.is_some_and(|at| at.elapsed() <= Duration::from_secs(1)) {
                cancel_sent = true;
                eprintln!("srun: interrupt: aborting StepId={job_id}.{}", layout.step_id);
                cancel(None);
            } else {
                last_interrupt = Some(Instant::now());
                eprintln!("srun: interrupt (one more within 1 sec to abort)");
                status_line(&statuses);
            }
        }
        if bad_exit && options.kill_on_bad_exit && !cancel_sent {
            cancel_sent = true;
            eprintln!(
                "srun: error: a task exited with a non-zero code: terminating StepId={job_id}.{}",
                layout.step_id
            );
            cancel(None);
        }
        if let (Some(wait), Some(first)) = (options.wait, first_exit)
            && !cancel_sent
            && first.elapsed() >= Duration::from_secs(wait.into())
        {
            cancel_sent = true;
            eprintln!("srun: First task exited {wait}s ago");
            status_line(&statuses);
            cancel(Some(libc::SIGKILL));
        }
        if connected < expected && Instant::now() >= deadline {
            eprintln!(
                "srun: error: {} of {expected} nodes of StepId={job_id}.{} did not connect within {} s",
                expected - connected,
                layout.step_id,
                CONNECT_TIMEOUT.as_secs()
            );
            if !cancel_sent {
                cancel_sent = true;
                cancel(None);
            }
            break;
        }
        match rx.recv_timeout(Duration::from_millis(200)) {
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Ok(Incoming::Output { kind, task, data }) => printer.write(kind, task, &data),
            Ok(Incoming::Exit { task, status }) => {
                statuses.insert(task, status);
                first_exit.get_or_insert_with(Instant::now);
                bad_exit |= status != 0;
            }
            Ok(Incoming::Stopped { task, pid }) => {
                if let Some(table) = &mut proctable
                    && table.record(task, pid)
                {
                    eprint!("{}", table.dump());
                }
            }
            Ok(Incoming::Closed) => closed += 1,
            Ok(Incoming::Connected { node, stream }) => {
                connected += 1;
                writers.push((node, stream));
                if writers.len() == expected {
                    let targets = std::mem::take(&mut writers);
                    let pty = spec_pty;
                    let (task, others, source) =
                        input.take().unwrap_or((stepio::ALL_TASKS, Vec::new(), Box::new(std::io::empty())));
                    std::thread::spawn(move || forward_input(targets, pty, task, &others, source));
                }
            }
            Err(_) => break,
        }
    }
    // Tasks killed by a signal srun did not send: when the step (or its job) was cancelled, say
    // so, as Slurm's srun does.
    // (A task that never reported counts as killed, as in the summary.)
    let signaled = (0..layout.ntasks).any(|t| statuses.get(&t).is_none_or(|s| WaitStatus(*s).parts().1 != 0));
    if !cancel_sent && signaled {
        // Tasks that never reported went with their node's runner: the job ended around them
        // (its time limit), which ctld may record a moment later.
        let patience = if statuses.len() < total { JOB_END_PATIENCE } else { Duration::ZERO };
        match step_ending(socket, job_id, layout.step_id, patience) {
            Some((JobState::Timeout, end)) => eprintln!(
                "srun: error: *** STEP {job_id}.{} ON {} CANCELLED AT {} DUE TO TIME LIMIT ***",
                layout.step_id,
                layout.nodes.first().map_or("", String::as_str),
                crate::query::format::timestamp(
                    end.unwrap_or_else(drover_shared::now),
                    crate::query::format::Tz::Local
                )
            ),
            Some((JobState::Cancelled, _)) => {
                eprintln!("srun: Job step aborted: StepId={job_id}.{} was cancelled", layout.step_id);
            }
            _ => {}
        }
    }
    // Output that raced the last exit frame.
    while let Ok(message) = rx.try_recv() {
        if let Incoming::Output { kind, task, data } = message {
            printer.write(kind, task, &data);
        }
    }
    printer.flush_all();
    drop(terminal);
    let (code, worst, state) = summarize(&layout, &statuses);
    let done = Request::StepDone { job_id, step_id: layout.step_id, state, exit_status: worst };
    // A controller restarting or failing over meanwhile is waited out: the end is recorded.
    if let Err(error) = call_patiently(Some(socket), &done, Resend::Safe, "srun", OUTAGE_PATIENCE) {
        let error = crate::user_message(&error);
        eprintln!("srun: error: could not record the end of step {job_id}.{}: {error}", layout.step_id);
    }
    Ok(code)
}

/// How long srun waits for ctld to record the end of a job whose end took the step's runners.
const JOB_END_PATIENCE: Duration = Duration::from_secs(10);

/// How ctld records the end of the step's job: `Cancelled` when the step or its job was
/// cancelled, `Timeout` when the job reached its time limit (with the job's end time); `None`
/// otherwise. A job still running is asked about again for up to `patience`.
fn step_ending(
    socket: &std::path::Path,
    job_id: u32,
    step_id: u32,
    patience: Duration,
) -> Option<(JobState, Option<drover_shared::UnixTime>)> {
    use drover_shared::job::StepId;
    use drover_shared::proto::client::JobQuery;
    let deadline = Instant::now() + patience;
    loop {
        let query = JobQuery { job_ids: vec![job_id], include_finished: true, ..JobQuery::default() };
        let request = Request::QueryJobs(query);
        let Ok(Response::Jobs { jobs, .. }) =
            call_patiently(Some(socket), &request, Resend::Safe, "srun", OUTAGE_PATIENCE)
        else {
            return None;
        };
        let job = jobs.iter().find(|j| j.job_id == job_id)?;
        let step_cancelled =
            job.steps.iter().any(|s| s.step_id == StepId::Numbered(step_id) && s.state == JobState::Cancelled);
        match job.state() {
            JobState::Timeout => return Some((JobState::Timeout, job.end_time)),
            JobState::Cancelled => return Some((JobState::Cancelled, job.end_time)),
            JobState::Running if !step_cancelled && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(250));
            }
            _ if step_cancelled => return Some((JobState::Cancelled, job.end_time)),
            _ => return None,
        }
    }
}

/// `--debugger-test`'s table of the step's tasks (Slurm's MPIR proctable): each task's host, the
/// pid it stopped with there and its executable, printed once every task reported its pid.
struct Proctable {
    hosts: Vec<String>,
    executables: Vec<String>,
    pids: Vec<Option<i32>>,
    printed: bool,
}

impl Proctable {
    fn new(layout: &StepLayout, options: &StepOptions) -> Proctable {
        let ntasks = layout.ntasks as usize;
        let mut hosts = vec![String::new(); ntasks];
        for (node, tasks) in layout.nodes.iter().zip(&layout.tasks) {
            for &task in tasks {
                if let Some(host) = hosts.get_mut(task as usize) {
                    host.clone_from(node);
                }
            }
        }
        // Under `--multi-prog`, each task's program word as the file writes it.
        let executables = match options.multi_prog {
            true => multi_prog::task_programs(&options.command, layout.ntasks).unwrap_or_default(),
            false => Vec::new(),
        };
        let command = options.command.first().cloned().unwrap_or_default();
        let executables = (0..ntasks).map(|t| executables.get(t).cloned().unwrap_or_else(|| command.clone())).collect();
        Proctable { hosts, executables, pids: vec![None; ntasks], printed: false }
    }

    /// Records task `task`'s pid; whether the table is now complete (the first time only).
    fn record(&mut self, task: u32, pid: i32) -> bool {
        if let Some(slot) = self.pids.get_mut(task as usize) {
            *slot = Some(pid);
        }
        let complete = !self.printed && self.pids.iter().all(Option::is_some);
        self.printed |= complete;
        complete
    }

    /// srun's lines, one per task, as Slurm's `--debugger-test` prints them.
    fn dump(&self) -> String {
        let mut out = String::new();
        for (task, ((host, pid), executable)) in self.hosts.iter().zip(&self.pids).zip(&self.executables).enumerate() {
            let pid = pid.unwrap_or(0);
            out.push_str(&format!("srun: task:{task}, host:{host}, pid:{pid}, executable:{executable}\n"));
        }
        out
    }
}

/// What `local_user_init` and later local hooks may ask of the step (`spank_get_item`).
fn local_job_info(job_id: u32, layout: &StepLayout, options: &StepOptions) -> drover_spank_compat::JobInfo {
    drover_spank_compat::JobInfo {
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        job_id,
        step_id: layout.step_id,
        n_nodes: u32::try_from(layout.nodes.len()).unwrap_or(u32::MAX),
        total_task_count: layout.ntasks,
        argv: options.command.clone(),
        cpus_per_task: layout.cpus_per_task.max(1),
        ..drover_spank_compat::JobInfo::default()
    }
}

/// Asks ctld for the step; while the job's running steps hold the CPUs it needs, waits and asks
/// again, as Slurm's srun does.
fn create_step(
    socket: &std::path::Path,
    job_id: u32,
    spec: drover_shared::job::StepSpec,
    verbose: bool,
) -> anyhow::Result<StepLayout> {
    catch_interrupts();
    let mut waited = false;
    let mut pause = Duration::from_millis(200);
    loop {
        let request = Request::CreateStep { job_id, spec: Box::new(spec.clone()) };
        // Sent once: a connection that broke after sending it is not retried (two steps).
        match call_patiently(Some(socket), &request, Resend::Never, "srun", OUTAGE_PATIENCE)? {
            Response::StepCreated(layout) => {
                if waited {
                    eprintln!("srun: Step created for StepId={job_id}.{}", layout.step_id);
                }
                return Ok(*layout);
            }
            Response::Error { code: ErrorCode::StepsBusy, detail } => {
                if !waited {
                    eprintln!(
                        "srun: Job {job_id} step creation temporarily disabled, retrying ({})",
                        ErrorCode::StepsBusy
                    );
                    if verbose {
                        eprintln!("srun: {detail}");
                    }
                    waited = true;
                }
                if interrupted() {
                    bail!("Unable to create step for job {job_id}: interrupted");
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Response::Error { code, detail } => bail!("Unable to create step for job {job_id}: {code} ({detail})"),
            other => bail!("unexpected answer from ctld: {other:?}"),
        }
    }
}

/// srun's exit code, the step's recorded status and state, and Slurm's error lines for tasks
/// that failed (a task that never reported counts as killed).
fn summarize(layout: &StepLayout, statuses: &HashMap<u32, i32>) -> (i32, WaitStatus, JobState) {
    let mut code = 0;
    let mut worst = WaitStatus::default();
    let mut worst_code = 0;
    let mut signaled = false;
    for (node, tasks) in layout.nodes.iter().zip(&layout.tasks) {
        let mut by_message: Vec<(String, Vec<u32>)> = Vec::new();
        for &task in tasks {
            let status = WaitStatus(statuses.get(&task).copied().unwrap_or(9));
            let (exit, signal) = status.parts();
            let (this, message) = if signal != 0 {
                signaled = true;
                (128 + signal, signal_name(signal))
            } else {
                (exit, format!("Exited with exit code {exit}"))
            };
            if this > worst_code {
                worst_code = this;
                worst = status;
            }
            code = code.max(this);
            if this != 0 {
                match by_message.iter_mut().find(|(m, _)| *m == message) {
                    Some((_, ids)) => ids.push(task),
                    None => by_message.push((message, vec![task])),
                }
            }
        }
        for (message, ids) in by_message {
            let plural = if ids.len() > 1 { "tasks" } else { "task" };
            eprintln!("srun: error: {node}: {plural} {}: {message}", task_ranges(&ids));
        }
    }
    let state = match (code, signaled) {
        (0, _) => JobState::Completed,
        (_, true) => JobState::Cancelled,
        _ => JobState::Failed,
    };
    (code, worst, state)
}

/// Task ids as Slurm lists them: runs of consecutive ids as ranges, `0,2-9`.
fn task_ranges(ids: &[u32]) -> String {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    let mut parts: Vec<String> = Vec::new();
    for run in sorted.chunk_by(|a, b| a + 1 == *b) {
        parts.push(match run {
            [one] => one.to_string(),
            [first, .., last] => format!("{first}-{last}"),
            [] => continue,
        });
    }
    parts.join(",")
}

fn signal_name(signal: i32) -> String {
    match signal {
        9 => "Killed".into(),
        15 => "Terminated".into(),
        11 => "Segmentation fault".into(),
        6 => "Aborted".into(),
        2 => "Interrupt".into(),
        _ => format!("Killed by signal {signal}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_debugger_test_table_is_slurm_s_once_every_task_reported() {
        let layout = StepLayout {
            job_id: 7,
            step_id: 0,
            nodes: vec!["n1".into(), "n2".into()],
            tasks: vec![vec![0, 2], vec![1]],
            ntasks: 3,
            cpus_per_task: 1,
            token: Vec::new(),
        };
        let options = StepOptions { command: vec!["/usr/bin/id".into()], ..StepOptions::default() };
        let mut table = Proctable::new(&layout, &options);
        assert!(!table.record(2, 300));
        assert!(!table.record(0, 100));
        // A task id no task has changes nothing.
        assert!(!table.record(9, 900));
        assert!(table.record(1, 200));
        // Printed once.
        assert!(!table.record(1, 200));
        assert_eq!(
            table.dump(),
            "srun: task:0, host:n1, pid:100, executable:/usr/bin/id\n\
             srun: task:1, host:n2, pid:200, executable:/usr/bin/id\n\
             srun: task:2, host:n1, pid:300, executable:/usr/bin/id\n"
        );
    }

    #[test]
    fn verbose_line_counts_and_job_names() {
        assert_eq!(runs_text(&[2, 2, 1]), "2(x2),1");
        assert_eq!(runs_text(&[4]), "4");
        assert_eq!(runs_text(&[1, 3, 3, 3]), "1,3(x3)");
        assert_eq!(job_name_of("/usr/bin/hostname"), "hostname");
        assert_eq!(job_name_of("true"), "true");
        assert_eq!(task_ranges(&[9, 0, 2, 3, 4, 5, 6, 7, 8]), "0,2-9");
        assert_eq!(task_ranges(&[1, 3, 5]), "1,3,5");
        assert_eq!(task_ranges(&[4]), "4");
    }

    /// `-v` lists the options set, in Slurm's `name : value` layout.
    #[test]
    fn option_dump_lists_what_was_set() {
        let Ok(Parsed::Run(options)) =
            options::parse(Command::Srun, &["-N1".into(), "-n5".into(), "-O".into(), "-v".into(), "true".into()])
        else {
            panic!("srun refused -N1 -n5 -O -v")
        };
        let dump = options_dump(&options);
        assert!(dump.contains("srun: ntasks              : 5\n"), "{dump}");
        assert!(dump.contains("srun: nodes               : 1\n"), "{dump}");
        assert!(dump.contains("srun: overcommit          : set\n"), "{dump}");
        assert!(dump.contains("srun: verbose             : 1\n"), "{dump}");
        assert!(dump.starts_with("srun: defined options\n") && dump.ends_with("srun: end of defined options\n"));
        // The allocation of an overcommitted step: one task (one CPU per task) on each node.
        assert_eq!((options.allocation.ntasks, options.allocation.nodes_min), (None, Some(1)));
    }
}
