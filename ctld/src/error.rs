//! The errors ctld's library returns to its binaries: an operation that failed, named with what
//! it was doing (`binding the Raft port 10.0.0.1:6820: address in use`), or a state that is not
//! as it must be, in words. The binaries print them; clients never see them (a client is
//! answered with an `ErrorCode`).

/// Why starting, running or stopping a part of ctld failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `what` failed because of `cause`.
    #[error("{what}: {cause}")]
    Failed { what: String, cause: Box<dyn std::error::Error + Send + Sync> },
    /// Something is not as it must be.
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Frame(#[from] drover_shared::proto::frame::FrameError),
    #[error("{0}")]
    Auth(#[from] drover_shared::auth::AuthError),
    #[error("{0}")]
    Database(#[from] rusqlite::Error),
    /// The store or a replica's seeding failed; its message names the operation.
    #[error("{0}")]
    Inner(Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    Config(#[from] drover_shared::config::ConfigError),
    #[error("no answer in time")]
    Timeout(#[from] tokio::time::error::Elapsed),
}

/// A result of ctld's library.
pub type Result<T> = std::result::Result<T, Error>;

/// Names the operation a result or option belongs to, turning its failure into an [`Error`].
pub(crate) trait Failed<T> {
    /// The failure, as part of `what`.
    fn failed(self, what: impl Into<String>) -> Result<T>;
    /// [`Failed::failed`], with the words made only on failure.
    fn failed_with(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<Box<dyn std::error::Error + Send + Sync>>> Failed<T> for std::result::Result<T, E> {
    fn failed(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::Failed { what: what.into(), cause: e.into() })
    }

    fn failed_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Failed { what: what(), cause: e.into() })
    }
}

impl<T> Failed<T> for Option<T> {
    fn failed(self, what: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| Error::Refused(what.into()))
    }

    fn failed_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| Error::Refused(what()))
    }
}

/// Returns an [`Error::Refused`] with the formatted words.
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::Refused(format!($($arg)*)))
    };
}
pub(crate) use refuse;
