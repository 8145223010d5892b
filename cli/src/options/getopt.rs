//! A getopt_long scanner over one command's rows of the option table, used for sbatch's, srun's and
//! salloc's command lines and for the words of each `#SBATCH` line alike: `--name=value`, `--name value`, unambiguous abbreviations of long names,
//! `-x value`, `-xvalue`, clustered flags (`-HQ`), `--` to end the options, and — as sbatch asks of
//! getopt — a stop at the first word that is not an option (the script, or srun's command, and its
//! arguments).
//!
//! The scanner only finds options and their values and reports where each one is (word index and
//! character offset), so a caller can turn a position into a script line and column. Checking the
//! values is the option table's job.

use super::defs::{ArgKind, Command, OptionDef, table};

/// One option found in the words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// Its definition.
    pub(crate) def: &'static OptionDef,
    /// Index of the word that names it.
    pub(crate) word_idx: usize,
    /// Its value, if it has one.
    pub(crate) value: Option<String>,
    /// Where the value starts: word index and character offset in that word.
    pub(crate) value_at: Option<(usize, usize)>,
}

/// What a scan found: options in order, then where the operands begin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scan {
    pub(crate) found: Vec<Found>,
    /// Index of the first operand (script name); equal to the word count when there is none.
    pub(crate) operands_idx: usize,
}

/// A word the scanner could not make sense of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanError {
    /// Index of the offending word.
    pub(crate) word_idx: usize,
    /// Character offset of the offending part within that word.
    pub(crate) offset: usize,
    pub(crate) kind: ScanErrorKind,
}

/// The getopt_long failures, worded as GNU getopt words them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScanErrorKind {
    /// `--foo`: the whole word as given.
    UnrecognizedLong(String),
    /// `-z`.
    InvalidShort(char),
    /// `--ti`: the prefix and the long names it could mean.
    Ambiguous(String, Vec<&'static str>),
    /// `--time` at the end of the words.
    MissingLongArgument(&'static str),
    /// `-t` at the end of the words.
    MissingShortArgument(char),
    /// `--hold=yes`.
    UnexpectedArgument(&'static str),
}

impl std::fmt::Display for ScanErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanErrorKind::UnrecognizedLong(word) => write!(f, "unrecognized option '{word}'"),
            ScanErrorKind::InvalidShort(c) => write!(f, "invalid option -- '{c}'"),
            ScanErrorKind::Ambiguous(prefix, names) => {
                write!(f, "option '{prefix}' is ambiguous; possibilities:")?;
                names.iter().try_for_each(|name| write!(f, " '--{name}'"))
            }
            ScanErrorKind::MissingLongArgument(name) => write!(f, "option '--{name}' requires an argument"),
            ScanErrorKind::MissingShortArgument(c) => write!(f, "option requires an argument -- '{c}'"),
            ScanErrorKind::UnexpectedArgument(name) => write!(f, "option '--{name}' doesn't allow an argument"),
        }
    }
}

/// Looks a long name up among `command`'s rows: an exact match, else the one definition the prefix
/// abbreviates.
fn lookup_long(command: Command, name: &str) -> Result<&'static OptionDef, Option<Vec<&'static str>>> {
    if name.is_empty() {
        return Err(None);
    }
    if let Some(def) = table(command).find(|d| d.long == name) {
        return Ok(def);
    }
    let candidates: Vec<&'static OptionDef> = table(command).filter(|d| d.long.starts_with(name)).collect();
    match candidates.as_slice() {
        [] => Err(None),
        [one] => Ok(one),
        many => Err(Some(many.iter().map(|d| d.long).collect())),
    }
}

/// Scans `words` against `command`'s rows.
pub(crate) fn scan(words: &[&str], command: Command) -> Result<Scan, ScanError> {
    let mut found = Vec::new();
    let mut idx = 0;
    while idx < words.len() {
        let word = words[idx];
        if word == "--" {
            return Ok(Scan { found, operands_idx: idx + 1 });
        }
        let option_idx = idx;
        if let Some(body) = word.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (body, None),
            };
            let def = lookup_long(command, name).map_err(|candidates| ScanError {
                word_idx: idx,
                offset: 0,
                kind: match candidates {
                    Some(names) => ScanErrorKind::Ambiguous(format!("--{name}"), names),
                    None => ScanErrorKind::UnrecognizedLong(word.to_owned()),
                },
            })?;
            let value_offset = 2 + name.chars().count() + 1;
            let (value, value_at) = match (def.apply.arg_kind(), inline) {
                (ArgKind::None, Some(_)) => {
                    return Err(ScanError {
                        word_idx: idx,
                        offset: 0,
                        kind: ScanErrorKind::UnexpectedArgument(def.long),
                    });
                }
                (ArgKind::None, None) | (ArgKind::Optional, None) => (None, None),
                (_, Some(value)) => (Some(value.to_owned()), Some((idx, value_offset))),
                (ArgKind::Required, None) => match words.get(idx + 1) {
                    Some(next) => {
                        idx += 1;
                        (Some((*next).to_owned()), Some((idx, 0)))
                    }
                    None => {
                        return Err(ScanError {
                            word_idx: idx,
                            offset: 0,
                            kind: ScanErrorKind::MissingLongArgument(def.long),
                        });
                    }
                },
            };
            found.push(Found { def, word_idx: option_idx, value, value_at });
            idx += 1;
            continue;
        }
        let Some(cluster) = word.strip_prefix('-').filter(|c| !c.is_empty()) else {
            // The first operand: sbatch stops here.
            return Ok(Scan { found, operands_idx: idx });
        };
        for (char_idx, (byte_idx, c)) in cluster.char_indices().enumerate() {
            let offset = 1 + char_idx;
            let def = table(command).find(|d| d.short == Some(c)).ok_or(ScanError {
                word_idx: idx,
                offset,
                kind: ScanErrorKind::InvalidShort(c),
            })?;
            let rest = &cluster[byte_idx + c.len_utf8()..];
            match def.apply.arg_kind() {
                ArgKind::None => found.push(Found { def, word_idx: option_idx, value: None, value_at: None }),
                ArgKind::Optional => {
                    let value = (!rest.is_empty()).then(|| rest.to_owned());
                    let value_at = value.as_ref().map(|_| (option_idx, offset + 1));
                    found.push(Found { def, word_idx: option_idx, value, value_at });
                    break;
                }
                ArgKind::Required if !rest.is_empty() => {
                    found.push(Found {
                        def,
                        word_idx: option_idx,
                        value: Some(rest.to_owned()),
                        value_at: Some((option_idx, offset + 1)),
                    });
                    break;
                }
                ArgKind::Required => {
                    let Some(next) = words.get(idx + 1) else {
                        return Err(ScanError { word_idx: idx, offset, kind: ScanErrorKind::MissingShortArgument(c) });
                    };
                    idx += 1;
                    found.push(Found {
                        def,
                        word_idx: option_idx,
                        value: Some((*next).to_owned()),
                        value_at: Some((idx, 0)),
                    });
                    break;
                }
            }
        }
        idx += 1;
    }
    Ok(Scan { found, operands_idx: words.len() })
}
