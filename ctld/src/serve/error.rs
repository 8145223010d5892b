//! Why a connection on one of ctld's doors ended before its peer closed it: what the door logs
//! when it drops the connection. Nothing here reaches a client; a client is answered with an
//! `ErrorCode` before its connection ends.

use drover_shared::auth::AuthError;
use drover_shared::proto::frame::FrameError;

/// A connection's early end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionError {
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Auth(#[from] AuthError),
    #[error("no answer within the handshake time")]
    Timeout(#[from] tokio::time::error::Elapsed),
    #[error("ctld is shutting down")]
    Shutdown,
    /// The peer broke the protocol: what it did.
    #[error("{0}")]
    Protocol(String),
}

impl<T> From<tokio::sync::mpsc::error::SendError<T>> for ConnectionError {
    fn from(_: tokio::sync::mpsc::error::SendError<T>) -> ConnectionError {
        ConnectionError::Shutdown
    }
}

/// Ends a connection for a protocol break described by the format arguments.
macro_rules! protocol_break {
    ($($arg:tt)*) => {
        return Err($crate::serve::error::ConnectionError::Protocol(format!($($arg)*)))
    };
}
pub(crate) use protocol_break;
