//! The crate's errors ([`SpankError`]) and the numeric `ESPANK_*` codes of the ABI ([`Espank`]).

use std::path::PathBuf;
use thiserror::Error;

/// `spank_err_t`: what the exported functions return to plugins. The values are the ABI's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Espank {
    /// `ESPANK_SUCCESS`
    Success = 0,
    /// `ESPANK_ERROR`
    Error = 3000,
    /// `ESPANK_BAD_ARG`
    BadArg = 3001,
    /// `ESPANK_NOT_TASK`
    NotTask = 3002,
    /// `ESPANK_ENV_EXISTS`
    EnvExists = 3003,
    /// `ESPANK_ENV_NOEXIST`
    EnvNoexist = 3004,
    /// `ESPANK_NOSPACE`
    NoSpace = 3005,
    /// `ESPANK_NOT_REMOTE`
    NotRemote = 3006,
    /// `ESPANK_NOEXIST`
    NoExist = 3007,
    /// `ESPANK_NOT_EXECD`
    NotExecd = 3008,
    /// `ESPANK_NOT_AVAIL`
    NotAvail = 3009,
    /// `ESPANK_NOT_LOCAL`
    NotLocal = 3010,
}

impl Espank {
    /// The message `spank_strerror` returns, NUL-terminated.
    pub(crate) fn message_nul(self) -> &'static [u8] {
        match self {
            Espank::Success => b"Success\0",
            Espank::Error => b"Generic error\0",
            Espank::BadArg => b"Bad argument\0",
            Espank::NotTask => b"Not in task context\0",
            Espank::EnvExists => b"Environment variable exists\0",
            Espank::EnvNoexist => b"No such environment variable\0",
            Espank::NoSpace => b"Buffer too small\0",
            Espank::NotRemote => b"Valid only in remote context\0",
            Espank::NoExist => b"Id/pid does not exist on this node\0",
            Espank::NotExecd => b"Lookup by pid requested, but no tasks running\0",
            Espank::NotAvail => b"Item not available from this callback\0",
            Espank::NotLocal => b"Valid only in local or allocator context\0",
        }
    }

    /// The message without its NUL.
    pub fn message(self) -> &'static str {
        let bytes = self.message_nul();
        std::str::from_utf8(&bytes[..bytes.len() - 1]).unwrap_or("Unknown error")
    }

    /// The code for a number, if it is one.
    pub fn from_code(code: i32) -> Option<Espank> {
        const ALL: [Espank; 12] = [
            Espank::Success,
            Espank::Error,
            Espank::BadArg,
            Espank::NotTask,
            Espank::EnvExists,
            Espank::EnvNoexist,
            Espank::NoSpace,
            Espank::NotRemote,
            Espank::NoExist,
            Espank::NotExecd,
            Espank::NotAvail,
            Espank::NotLocal,
        ];
        ALL.into_iter().find(|e| *e as i32 == code)
    }
}

/// Why loading or running the plugin stack failed.
#[derive(Debug, Error)]
pub enum SpankError {
    /// `plugstack.conf` (or a file it includes) could not be read.
    #[error("could not read {path}")]
    ReadConf { path: PathBuf, source: std::io::Error },
    /// An `include` nests too deeply (a loop, most likely).
    #[error("{path}: includes nest deeper than {max} levels")]
    IncludeDepth { path: PathBuf, max: usize },
    /// A `required` plugin could not be loaded.
    #[error("required SPANK plugin {path} could not be loaded: {reason}")]
    Load { path: PathBuf, reason: String },
    /// A plugin stack is already active in this process (there is one per process).
    #[error("a SPANK plugin stack is already active in this process")]
    Busy,
    /// A required plugin's callback returned non-zero.
    #[error("SPANK plugin {plugin}: {hook} failed (returned {rc})")]
    HookFailed { plugin: String, hook: &'static str, rc: i32 },
    /// A plugin's code died of a fault signal; the stack is unusable from then on.
    #[error("SPANK plugin {plugin} crashed with {signal} in {hook}")]
    Crashed { plugin: String, hook: &'static str, signal: String },
    /// An earlier crash left the stack unusable.
    #[error("the SPANK plugin stack is unusable after a plugin crashed")]
    Poisoned,
    /// A plugin option's callback refused its argument (Slurm's message).
    #[error("Invalid --{name} argument: {arg}")]
    InvalidOption { name: String, arg: String },
    /// No loaded plugin provides this option.
    #[error("unknown plugin option --{name}")]
    UnknownOption { name: String },
    /// The operation is not valid in the stack's context.
    #[error("{operation} is not valid in the {context:?} context")]
    WrongContext { operation: &'static str, context: crate::Context },
    /// Changing the effective user for `user_init` failed.
    #[error("{operation} failed")]
    Sys { operation: &'static str, source: std::io::Error },
}
