//! Framing: a 4-byte big-endian length then a postcard payload, with an explicit maximum per
//! connection phase. Blocking helpers serve the CLI; the tokio codec serves the daemons.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{Read, Write};
use thiserror::Error;

/// Largest frame accepted after the handshake: a job script plus its environment fits easily.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

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

/// The tokio codec for the same frames.
pub fn codec(max: usize) -> tokio_util::codec::LengthDelimitedCodec {
    tokio_util::codec::LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(max)
        .new_codec()
}

/// An async framed stream of messages over any tokio byte stream.
pub struct MessageStream<S> {
    inner: tokio_util::codec::Framed<S, tokio_util::codec::LengthDelimitedCodec>,
    /// Set once a node connection is authenticated: every frame after that carries a tag.
    sealer: Option<super::seal::Sealer>,
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> MessageStream<S> {
    /// Wraps a stream, starting with the handshake limit.
    pub fn new(stream: S) -> Self {
        MessageStream { inner: tokio_util::codec::Framed::new(stream, codec(MAX_HANDSHAKE_FRAME)), sealer: None }
    }

    /// Raises the frame limit once the peer has authenticated.
    pub fn set_max_frame(&mut self, max: usize) {
        let tag = if self.sealer.is_some() { super::seal::TAG_LEN } else { 0 };
        self.inner.codec_mut().set_max_frame_length(max + tag);
    }

    /// From now on, seals every frame sent and checks every frame received (see [`super::seal`]);
    /// the frame limit grows by the tag.
    pub fn seal(&mut self, keys: super::seal::SessionKeys) {
        let max = self.inner.codec().max_frame_length();
        self.inner.codec_mut().set_max_frame_length(max + super::seal::TAG_LEN);
        self.sealer = Some(super::seal::Sealer::new(keys));
    }

    /// Sends one answer to a client, which may exceed the frame bound this stream reads with
    /// (up to [`MAX_ANSWER_FRAME`]); the read bound is unchanged afterwards.
    pub async fn send_answer<T: Serialize>(&mut self, message: &T) -> Result<(), FrameError> {
        self.send_encoded_answer(postcard::to_allocvec(message)?).await
    }

    /// Sends an answer already encoded (a message's postcard bytes, without the length), which
    /// may exceed the read bound like [`MessageStream::send_answer`]'s.
    pub async fn send_encoded_answer(&mut self, payload: Vec<u8>) -> Result<(), FrameError> {
        let bound = self.inner.codec().max_frame_length();
        let tag = if self.sealer.is_some() { super::seal::TAG_LEN } else { 0 };
        self.inner.codec_mut().set_max_frame_length(MAX_ANSWER_FRAME + tag);
        let sent = self.send_payload(payload).await;
        self.inner.codec_mut().set_max_frame_length(bound);
        sent
    }

    /// Sends one message.
    pub async fn send<T: Serialize>(&mut self, message: &T) -> Result<(), FrameError> {
        self.send_payload(postcard::to_allocvec(message)?).await
    }

    async fn send_payload(&mut self, mut bytes: Vec<u8>) -> Result<(), FrameError> {
        use futures::SinkExt;
        if let Some(sealer) = &mut self.sealer {
            sealer.seal(&mut bytes);
        }
        self.inner.send(bytes::Bytes::from(bytes)).await.map_err(FrameError::Io)
    }

    /// Receives one message; `Ok(None)` when the peer closed the connection cleanly.
    pub async fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        use futures::StreamExt;
        match self.inner.next().await {
            None => Ok(None),
            Some(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                Err(FrameError::TooLarge { len: 0, max: self.inner.codec().max_frame_length() })
            }
            Some(Err(e)) => Err(FrameError::Io(e)),
            Some(Ok(frame)) => match &mut self.sealer {
                Some(sealer) => Ok(Some(decode(sealer.open(&frame)?)?)),
                None => Ok(Some(decode(&frame)?)),
            },
        }
    }

    /// Gives back the underlying stream parts for splitting.
    pub fn into_inner(self) -> tokio_util::codec::Framed<S, tokio_util::codec::LengthDelimitedCodec> {
        self.inner
    }
}
