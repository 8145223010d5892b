//! The step I/O stream: one TCP connection from each node of an srun step to srun, carrying the
//! node's proof (the step token ctld gave both sides), then the tasks' output and exit statuses.
//! Blocking I/O on both ends (the step runner and srun are threaded, not async).
//!
//! Layout: hello = `u32 LE token length, token, u32 LE node index`; then frames of
//! `u8 kind, u32 LE task id, u32 LE length, bytes`, kind [`STDOUT`], [`STDERR`], [`EXIT`]
//! (4 bytes: the raw wait status, `i32 LE`) or [`PID`] (4 bytes: a stopped task's pid); srun sends [`STDIN`] frames the other way.
//!
//! srun's port is open to anyone who can reach it, so srun reads each connection's hello without
//! blocking ([`hello_progress`]), bounded in size, and compares the token in constant time
//! ([`token_matches`]). Both ends wait on many descriptors at once with [`poll_readable`].

use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::io::{Read, Write};
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// Output the task wrote to its stdout.
pub const STDOUT: u8 = 1;
/// Output the task wrote to its stderr.
pub const STDERR: u8 = 2;
/// The task ended; the payload is its wait status.
pub const EXIT: u8 = 3;

/// Under `--debugger-test` only: the task stopped itself before its exec; the payload is its
/// pid on the node (`i32 LE`), for srun's proctable.
pub const PID: u8 = 5;

/// srun → node: input for a task ([`ALL_TASKS`]: every task on the node); empty: end of input.
pub const STDIN: u8 = 4;

/// The task id of a [`STDIN`] frame meant for every task of the node.
pub const ALL_TASKS: u32 = u32::MAX;

/// The largest frame payload either side accepts.
pub const MAX_CHUNK: u32 = 1 << 20;

/// Writes the node's hello.
pub fn write_hello(out: &mut impl Write, token: &[u8], node_index: u32) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(token.len() + 8);
    buf.extend_from_slice(&u32::try_from(token.len()).unwrap_or(0).to_le_bytes());
    buf.extend_from_slice(token);
    buf.extend_from_slice(&node_index.to_le_bytes());
    out.write_all(&buf)
}

/// The longest step token a hello may carry.
pub const MAX_TOKEN: u32 = 256;

/// Where reading a hello stands, given its first bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum HelloProgress {
    /// This many more bytes make the hello (or, for the first four, its token length).
    Need(usize),
    /// The hello: `(token, node index)`.
    Done(Vec<u8>, u32),
    /// No hello starts so (a token longer than [`MAX_TOKEN`]).
    Invalid,
}

/// What the bytes read so far of a hello amount to. Never asks for more than the hello, so the
/// frames after it stay unread.
pub fn hello_progress(bytes: &[u8]) -> HelloProgress {
    let Some(len) = bytes.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes) else {
        return HelloProgress::Need(4 - bytes.len());
    };
    if len > MAX_TOKEN {
        return HelloProgress::Invalid;
    }
    let total = 8 + len as usize;
    match bytes.len() {
        n if n < total => HelloProgress::Need(total - n),
        n if n == total => {
            let node = bytes[total - 4..].try_into().map(u32::from_le_bytes).unwrap_or(u32::MAX);
            HelloProgress::Done(bytes[4..total - 4].to_vec(), node)
        }
        _ => HelloProgress::Invalid,
    }
}

/// Whether `proof` is `token`, in time independent of where they differ.
pub fn token_matches(proof: &[u8], token: &[u8]) -> bool {
    proof.len() == token.len() && proof.iter().zip(token).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Waits until one of `fds` can be read (or has hung up) or `timeout` passed (`None`: no
/// limit); returns, per descriptor, whether it is ready. An interrupted wait reports none ready.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> std::io::Result<Vec<bool>> {
    let mut polled: Vec<PollFd<'_>> = fds.iter().map(|&fd| PollFd::new(fd, PollFlags::POLLIN)).collect();
    let timeout = timeout.map_or(PollTimeout::NONE, |t| PollTimeout::try_from(t).unwrap_or(PollTimeout::MAX));
    match nix::poll::poll(&mut polled, timeout) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(vec![false; fds.len()]),
        Err(errno) => return Err(errno.into()),
    }
    // Flags nix does not know (`None`) are still events, as any non-zero `revents` is.
    Ok(polled.iter().map(|p| p.revents().is_none_or(|events| !events.is_empty())).collect())
}

/// Reads a hello: `(token, node index)`; a token longer than [`MAX_TOKEN`] bytes is refused.
pub fn read_hello(input: &mut impl Read) -> std::io::Result<(Vec<u8>, u32)> {
    let len = read_u32(input)?;
    if len > MAX_TOKEN {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "step token too long"));
    }
    let mut token = vec![0; len as usize];
    input.read_exact(&mut token)?;
    Ok((token, read_u32(input)?))
}

/// Writes one frame.
pub fn write_frame(out: &mut impl Write, kind: u8, task: u32, data: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(data.len() + 9);
    buf.push(kind);
    buf.extend_from_slice(&task.to_le_bytes());
    buf.extend_from_slice(&u32::try_from(data.len()).unwrap_or(MAX_CHUNK).to_le_bytes());
    buf.extend_from_slice(data);
    out.write_all(&buf)?;
    out.flush()
}

/// Reads one frame; `None` at a clean end of stream.
pub fn read_frame(input: &mut impl Read) -> std::io::Result<Option<(u8, u32, Vec<u8>)>> {
    let mut kind = [0u8; 1];
    match input.read_exact(&mut kind) {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        other => other?,
    }
    let task = read_u32(input)?;
    let len = read_u32(input)?;
    if len > MAX_CHUNK {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "step frame too large"));
    }
    let mut data = vec![0; len as usize];
    input.read_exact(&mut data)?;
    Ok(Some((kind[0], task, data)))
}

fn read_u32(input: &mut impl Read) -> std::io::Result<u32> {
    let mut bytes = [0u8; 4];
    input.read_exact(&mut bytes)?;
    Ok(u32::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        write_hello(&mut buf, b"secret", 1).unwrap();
        write_frame(&mut buf, STDOUT, 3, b"hello\n").unwrap();
        write_frame(&mut buf, EXIT, 3, &256i32.to_le_bytes()).unwrap();
        let mut input = &buf[..];
        assert_eq!(read_hello(&mut input).unwrap(), (b"secret".to_vec(), 1));
        assert_eq!(read_frame(&mut input).unwrap(), Some((STDOUT, 3, b"hello\n".to_vec())));
        assert_eq!(read_frame(&mut input).unwrap(), Some((EXIT, 3, 256i32.to_le_bytes().to_vec())));
        assert_eq!(read_frame(&mut input).unwrap(), None);
    }

    #[test]
    fn hellos_are_read_piece_by_piece_and_bounded() {
        let mut hello = Vec::new();
        write_hello(&mut hello, b"secret", 7).unwrap();
        assert_eq!(hello_progress(&[]), HelloProgress::Need(4));
        assert_eq!(hello_progress(&hello[..2]), HelloProgress::Need(2));
        assert_eq!(hello_progress(&hello[..4]), HelloProgress::Need(10));
        assert_eq!(hello_progress(&hello[..13]), HelloProgress::Need(1));
        assert_eq!(hello_progress(&hello), HelloProgress::Done(b"secret".to_vec(), 7));
        assert_eq!(hello_progress(&(MAX_TOKEN + 1).to_le_bytes()), HelloProgress::Invalid);
        assert_eq!(hello_progress(b"GET / HTTP/1.0\r\n"), HelloProgress::Invalid);
        assert!(token_matches(b"secret", b"secret"));
        assert!(!token_matches(b"secreT", b"secret"));
        assert!(!token_matches(b"secret!", b"secret"));
    }
}
