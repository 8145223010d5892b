//! Slurm's value grammars, one module per grammar: each parses the text a user typed into a typed
//! value or a [`ValueError`] that says what was expected.

pub mod array;
pub mod constraint;
pub mod date;
pub mod gres;
pub mod mem;
pub mod pattern;
pub mod time;

use thiserror::Error;

/// A value that does not follow its grammar; the message says what was expected.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
#[error("invalid {what} `{value}`: expected {expected}")]
pub struct ValueError {
    /// The kind of value (`time limit`, `memory size`, …).
    pub what: &'static str,
    /// The text as given.
    pub value: String,
    /// What the grammar wanted instead.
    pub expected: &'static str,
}

impl ValueError {
    pub(crate) fn new(what: &'static str, value: &str, expected: &'static str) -> Self {
        ValueError { what, value: value.to_owned(), expected }
    }
}
