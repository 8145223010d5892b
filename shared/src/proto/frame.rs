//! Framing: a 4-byte big-endian length then a postcard payload, with an explicit maximum per
//! connection phase. Blocking helpers serve the CLI; the tokio codec serves the daemons.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{Read, Write};
use thiserror::Error;

/// Largest frame accepted from an authenticated node (and sent to one): a launch carries a job's
/// script, environment and arguments ([`MAX_REQUEST_FRAME`]) with room to spare.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Largest request a client may send to ctld, sized by what a submission can legitimately carry:
/// its batch script, at most 4 MiB (ctld refuses a larger one, as Slurm does by default); its
/// environment and script arguments, which must pass through `execve(2)` to start the job, and
/// Linux caps what `execve` takes (strings and their pointers) at three quarters of the 8 MiB
/// default stack limit, 6 MiB, whatever the stack limit is raised to; and 1 MiB for the rest (at
/// most a few dozen names, paths and comments of 4 KiB, id lists, and postcard's length prefixes,
/// which are at most 3 bytes for each string: 60 KB for 10,000 environment entries). Every other
/// request is much smaller. A longer frame is refused as soon as its length is read.
pub const MAX_REQUEST_FRAME: usize = (4 + 6 + 1) * 1024 * 1024;

/// Largest answer a client accepts from ctld: a job or accounting list of a very deep queue
/// (100,000 jobs take about 25 MB). Only ctld's answers may be this large; ctld never reads more
/// than [`MAX_FRAME`] from anyone.
pub const MAX_ANSWER_FRAME: usize = 1 << 30;

/// Largest frame accepted before a peer has authenticated.
pub const MAX_HANDSHAKE_FRAME: usize = 4096;

/// Why a frame could not be read or written.
#[derive(Debug, Error)]
pub enum FrameError {
    /// The stream failed or closed.
    #[error("connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The announced length exceeds the limit.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: usize, max: usize },
    /// The payload is not a valid message.
    #[error("malformed message: {0}")]
    Decode(#[from] postcard::Error),
    /// A sealed connection received a frame that fails its authentication check.
    #[error("{0}")]
    Forged(#[from] super::seal::BadTag),
}

/// Encodes a message into a frame (length prefix included).
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; 4];
    let out = postcard::to_extend(message, std::mem::take(&mut out))?;
    let len = out.len() - 4;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge { len, max: MAX_FRAME });
    }
    let mut out = out;
    let len32 = u32::try_from(len).map_err(|_| FrameError::TooLarge { len, max: MAX_FRAME })?;
    out[..4].copy_from_slice(&len32.to_be_bytes());
    Ok(out)
}

/// Decodes one payload (without the length prefix).
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    Ok(postcard::from_bytes(payload)?)
}

/// Writes one message as a frame on a blocking stream.
pub fn write_message<W: Write, T: Serialize>(writer: &mut W, message: &T) -> Result<(), FrameError> {
    writer.write_all(&encode(message)?)?;
    writer.flush()?;
    Ok(())
}

/// Reads one message from a blocking stream, refusing frames larger than `max`.
pub fn read_message<R: Read, T: DeserializeOwned>(reader: &mut R, max: usize) -> Result<T, FrameError> {
    decode(&read_frame(reader, max)?)
}

/// Reads one frame's payload from a blocking stream, refusing a length above `max` before
/// allocating.
pub fn read_frame<R: Read>(reader: &mut R, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload)?;
    Ok(payload)
}

/// Writes one message as a sealed frame (see [`super::seal`]) on a blocking stream.
pub fn write_sealed<W: Write, T: Serialize>(
    writer: &mut W,
    message: &T,
    sealer: &mut super::seal::Sealer,
) -> Result<(), FrameError> {
    let mut frame = encode(message)?;
    let mut payload = frame.split_off(4);
    sealer.seal(&mut payload);
    let len = u32::try_from(payload.len()).map_err(|_| FrameError::TooLarge { len: payload.len(), max: MAX_FRAME })?;
    writer.write_all(&len.to_be_bytes())?;
    writer.write_all(&payload)?;
    writer.flush()?;
    Ok(())
}

/// Reads one sealed message from a blocking stream, refusing frames larger than `max` plus the
/// tag.
pub fn read_sealed<R: Read, T: DeserializeOwned>(
    reader: &mut R,
    max: usize,
    sealer: &mut super::seal::Sealer,
) -> Result<T, FrameError> {
    decode(&read_sealed_frame(reader, max, sealer)?)
}

/// Reads one sealed frame's payload (checked and stripped of its tag) from a blocking stream,
/// refusing frames larger than `max` plus the tag.
pub fn read_sealed_frame<R: Read>(
    reader: &mut R,
    max: usize,
    sealer: &mut super::seal::Sealer,
) -> Result<Vec<u8>, FrameError> {
    let mut frame = read_frame(reader, max + super::seal::TAG_LEN)?;
    let len = sealer.open(&frame)?.len();
    frame.truncate(len);
    Ok(frame)
}

/// What a connection's read buffer may hold without drawing on its [`ReadBudget`]: every small
/// request (queries, cancels, most submissions) fits, so ordinary traffic never waits on a budget,
/// and a thousand connections hold at most 64 MiB this way.
pub const FREE_READ_BUFFER: usize = 64 * 1024;

/// First size of a read buffer, and how much it reads ahead before a frame's length is known.
const INITIAL_READ_BUFFER: usize = 4096;

/// A frame's payload up to this size is written together with its length in one write.
const SMALL_WRITE: usize = 64 * 1024;

/// Budget pools count memory in units of this many bytes (a pool of `n` bytes holds
/// `n / BUDGET_UNIT` permits, so one acquisition never exceeds a `u32`).
pub const BUDGET_UNIT: usize = 1024;

/// Memory that a connection's unfinished frame may hold beyond [`FREE_READ_BUFFER`], drawn from
/// every one of its pools (for example the sender's own and everyone's) as the bytes actually
/// arrive, and given back when the stream starts reading its next frame (so that it also covers
/// the message decoded from the frame while that is served) or when the connection closes. A
/// connection whose pools are exhausted stops reading (the sender's writes block) until another
/// frame gives memory back, or until whoever serves it gives up waiting (ctld's idle timeout).
///
/// The pools are tokio semaphores (one permit per [`BUDGET_UNIT`]) because waiting for memory must
/// be asynchronous and fair: waiters are served in arrival order, and a connection that is dropped
/// while waiting leaves its place without taking anything.
#[derive(Clone, Default)]
pub struct ReadBudget {
    pools: Vec<std::sync::Arc<tokio::sync::Semaphore>>,
}

impl ReadBudget {
    /// A budget drawing on each of `pools` (made by [`ReadBudget::pool`]).
    pub fn new(pools: Vec<std::sync::Arc<tokio::sync::Semaphore>>) -> ReadBudget {
        ReadBudget { pools }
    }

    /// A pool of `bytes` bytes of unfinished frames.
    pub fn pool(bytes: usize) -> std::sync::Arc<tokio::sync::Semaphore> {
        std::sync::Arc::new(tokio::sync::Semaphore::new(bytes / BUDGET_UNIT))
    }
}

/// The units a connection's read buffer currently holds of its budget's pools.
struct Charge {
    budget: ReadBudget,
    units: u32,
}

impl Charge {
    /// Units a buffer of `capacity` bytes needs.
    fn units_for(capacity: usize) -> u32 {
        u32::try_from(capacity.saturating_sub(FREE_READ_BUFFER).div_ceil(BUDGET_UNIT)).unwrap_or(u32::MAX)
    }

    /// Takes what a buffer of `capacity` bytes needs beyond what is held, from every pool, waiting
    /// until they have it. Cancel-safe: units are recorded only once every pool gave them, and
    /// permits taken from some pools before a cancellation go back when they are dropped.
    async fn cover(&mut self, capacity: usize) -> Result<(), FrameError> {
        let wanted = Charge::units_for(capacity);
        if wanted <= self.units {
            return Ok(());
        }
        let more = wanted - self.units;
        let mut taken = Vec::with_capacity(self.budget.pools.len());
        for pool in &self.budget.pools {
            let permits = pool
                .clone()
                .acquire_many_owned(more)
                .await
                .map_err(|_| FrameError::Io(std::io::Error::other("the server is shutting down")))?;
            taken.push(permits);
        }
        for permits in taken {
            permits.forget();
        }
        self.units = wanted;
        Ok(())
    }

    /// Gives back what a buffer of `capacity` bytes does not need.
    fn release_to(&mut self, capacity: usize) {
        let keep = Charge::units_for(capacity);
        if keep < self.units {
            for pool in &self.budget.pools {
                pool.add_permits((self.units - keep) as usize);
            }
            self.units = keep;
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.release_to(0);
    }
}

/// An async framed stream of messages over any tokio byte stream.
///
/// Reading never reserves memory for a length a peer announced: the buffer grows with the bytes
/// that actually arrive (doubling, but never past the announced frame), and a frame longer than
/// the stream's bound is refused as soon as its length is read.
pub struct MessageStream<S> {
    stream: S,
    /// Bytes read and not yet returned: the start of the next frame (its length, then payload).
    buffer: Vec<u8>,
    /// Largest payload accepted (tag included on a sealed stream).
    max: usize,
    /// Set once a node connection is authenticated: every frame after that carries a tag.
    sealer: Option<super::seal::Sealer>,
    /// What the buffer holds of a read budget, once one is set.
    charge: Option<Charge>,
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> MessageStream<S> {
    /// Wraps a stream, starting with the handshake limit.
    pub fn new(stream: S) -> Self {
        MessageStream { stream, buffer: Vec::new(), max: MAX_HANDSHAKE_FRAME, sealer: None, charge: None }
    }

    /// The stream, to look at (whether a socket between exchanges was closed, say).
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The stream itself (bytes buffered and not yet read as a frame are dropped).
    pub fn into_stream(self) -> S {
        self.stream
    }

    /// Raises the frame limit once the peer has authenticated.
    pub fn set_max_frame(&mut self, max: usize) {
        let tag = if self.sealer.is_some() { super::seal::TAG_LEN } else { 0 };
        self.max = max + tag;
    }

    /// From now on, the memory an unfinished frame holds beyond [`FREE_READ_BUFFER`] is drawn
    /// from `budget`'s pools.
    pub fn set_read_budget(&mut self, budget: ReadBudget) {
        // Only the hello was read so far: the buffer is within FREE_READ_BUFFER and owes nothing.
        self.charge = Some(Charge { budget, units: 0 });
    }

    /// From now on, seals every frame sent and checks every frame received (see [`super::seal`]);
    /// the frame limit grows by the tag.
    pub fn seal(&mut self, keys: super::seal::SessionKeys) {
        self.max += super::seal::TAG_LEN;
        self.sealer = Some(super::seal::Sealer::new(keys));
    }

    /// Sends one answer to a client, which may exceed the frame bound this stream reads with
    /// (up to [`MAX_ANSWER_FRAME`]).
    pub async fn send_answer<T: Serialize>(&mut self, message: &T) -> Result<(), FrameError> {
        self.send_encoded_answer(postcard::to_allocvec(message)?).await
    }

    /// Sends an answer already encoded (a message's postcard bytes, without the length), which
    /// may exceed the read bound like [`MessageStream::send_answer`]'s.
    pub async fn send_encoded_answer(&mut self, payload: Vec<u8>) -> Result<(), FrameError> {
        let tag = if self.sealer.is_some() { super::seal::TAG_LEN } else { 0 };
        self.send_payload(payload, MAX_ANSWER_FRAME + tag).await
    }

    /// Sends one message, bounded like the frames this stream reads.
    pub async fn send<T: Serialize>(&mut self, message: &T) -> Result<(), FrameError> {
        self.send_payload(postcard::to_allocvec(message)?, self.max).await
    }

    async fn send_payload(&mut self, mut bytes: Vec<u8>, max: usize) -> Result<(), FrameError> {
        use tokio::io::AsyncWriteExt;
        if let Some(sealer) = &mut self.sealer {
            sealer.seal(&mut bytes);
        }
        let len = bytes.len();
        let too_large = FrameError::TooLarge { len, max };
        if len > max {
            return Err(too_large);
        }
        let head = u32::try_from(len).map_err(|_| too_large)?.to_be_bytes();
        if len <= SMALL_WRITE {
            let mut frame = Vec::with_capacity(4 + len);
            frame.extend_from_slice(&head);
            frame.extend_from_slice(&bytes);
            self.stream.write_all(&frame).await?;
        } else {
            self.stream.write_all(&head).await?;
            self.stream.write_all(&bytes).await?;
        }
        self.stream.flush().await?;
        Ok(())
    }

    /// Receives one message; `Ok(None)` when the peer closed the connection cleanly. Cancel-safe:
    /// bytes read so far stay in the stream's buffer for the next call.
    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        let Some(frame) = self.recv_frame().await? else { return Ok(None) };
        let payload = &frame[4..];
        match &mut self.sealer {
            Some(sealer) => Ok(Some(decode(sealer.open(payload)?)?)),
            None => Ok(Some(decode(payload)?)),
        }
    }

    /// Reads until a whole frame is buffered and returns it, length prefix included.
    async fn recv_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        use tokio::io::AsyncReadExt;
        // The previous frame (and what was decoded from it) is done with: what it held goes back.
        if let Some(charge) = &mut self.charge {
            charge.release_to(self.buffer.capacity());
        }
        loop {
            let filled = self.buffer.len();
            let need = match self.buffer.first_chunk::<4>() {
                Some(head) => {
                    let len = u32::from_be_bytes(*head) as usize;
                    if len > self.max {
                        return Err(FrameError::TooLarge { len, max: self.max });
                    }
                    4 + len
                }
                None => 4,
            };
            if filled >= need {
                // The bytes after this frame (the next one's start, when a peer sends ahead) move
                // to a buffer of their own; the frame's buffer leaves with the frame.
                let rest = self.buffer.split_off(need);
                return Ok(Some(std::mem::replace(&mut self.buffer, rest)));
            }
            let capacity = self.buffer.capacity();
            if filled == capacity {
                // Grow with what arrives: double, but never past the frame once its length is
                // known (before that, read ahead at most the first buffer's size).
                let limit = if filled >= 4 { need } else { INITIAL_READ_BUFFER };
                let target = (capacity * 2).max(INITIAL_READ_BUFFER).min(limit);
                if let Some(charge) = &mut self.charge {
                    charge.cover(target).await?;
                }
                self.buffer.reserve_exact(target - filled);
            }
            if self.stream.read_buf(&mut self.buffer).await? == 0 {
                return if self.buffer.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()))
                };
            }
        }
    }
}
