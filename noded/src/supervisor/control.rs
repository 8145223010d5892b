//! The control socket `job_dir/control.sock`: noded connects, sends one [`SupervisorCommand`]
//! frame and reads one [`SupervisorReply`] frame. Only root (or the supervisor's own uid, for an
//! unprivileged developer run) may connect, checked with `SO_PEERCRED` on top of the socket's
//! 0600 mode.

use super::run::Event;
use super::{SupervisorCommand, SupervisorError, SupervisorReply, jobfiles};
use drover_shared::proto::frame;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// Largest command frame accepted.
const MAX_COMMAND_FRAME: usize = 4096;

/// How long either side waits for the other before giving up on one exchange.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends one command to the supervisor of the job in `job_dir` and waits until it has acted.
pub fn send_command(job_dir: &Path, command: &SupervisorCommand) -> Result<(), SupervisorError> {
    let path = job_dir.join(jobfiles::CONTROL_SOCKET);
    let connect_error = |source| SupervisorError::Connect { path: path.clone(), source };
    let exchange_error = |source| SupervisorError::Exchange { path: path.clone(), source };
    let mut stream = UnixStream::connect(&path).map_err(connect_error)?;
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT)).map_err(connect_error)?;
    stream.set_write_timeout(Some(EXCHANGE_TIMEOUT)).map_err(connect_error)?;
    frame::write_message(&mut stream, command).map_err(exchange_error)?;
    match frame::read_message(&mut stream, MAX_COMMAND_FRAME).map_err(exchange_error)? {
        SupervisorReply::Accepted => Ok(()),
        SupervisorReply::Rejected { message } => Err(SupervisorError::Rejected { message }),
    }
}

/// Creates the control socket, mode 0600 (the supervisor's umask 077 covers the moment between
/// bind and chmod).
pub(super) fn bind(job_dir: &Path) -> Result<UnixListener, SupervisorError> {
    let path = job_dir.join(jobfiles::CONTROL_SOCKET);
    let listen_error = |source| SupervisorError::Listen { path: path.clone(), source };
    match std::fs::remove_file(&path) {
        Err(source) if source.kind() != std::io::ErrorKind::NotFound => return Err(listen_error(source)),
        _ => {}
    }
    let listener = UnixListener::bind(&path).map_err(listen_error)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(listen_error)?;
    Ok(listener)
}

/// Serves the control socket for the life of the process: a dedicated thread, because accepting
/// blocks and commands are rare. Each command goes to the main loop as an [`Event`] with a
/// one-shot reply channel, so the reply says what the main loop did, not merely that it queued.
pub(super) fn serve(listener: UnixListener, events: mpsc::Sender<Event>) {
    let my_uid = nix::unistd::geteuid().as_raw();
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let allowed = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
            .is_ok_and(|peer| peer.uid() == 0 || peer.uid() == my_uid);
        if !allowed {
            continue;
        }
        let _ = stream.set_read_timeout(Some(EXCHANGE_TIMEOUT));
        let _ = stream.set_write_timeout(Some(EXCHANGE_TIMEOUT));
        let Ok(command) = frame::read_message::<_, SupervisorCommand>(&mut stream, MAX_COMMAND_FRAME) else { continue };
        let (reply_tx, reply_rx) = mpsc::channel();
        let reply = if events.send(Event::Command { command, reply: reply_tx }).is_ok() {
            reply_rx.recv_timeout(EXCHANGE_TIMEOUT).ok()
        } else {
            None
        };
        let reply = reply.unwrap_or_else(|| SupervisorReply::Rejected { message: "the job has ended".into() });
        let _ = frame::write_message(&mut stream, &reply);
    }
}
