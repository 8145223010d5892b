//! The batch script as sbatch reads it: the checks every script must pass, and the `#SBATCH`
//! directives of its header (from which SPANK plugins' options are taken first,
//! [`take_plugin_options`]).
//!
//! The header is every line up to the first one holding a non-blank character other than `#`, so
//! blank lines and comments (the `#!` line included) are skipped and the first command ends it. A
//! directive is a header line that starts, in column 1, with `#SBATCH` (case-sensitive) or the legacy
//! `#SLURM`; `  #SBATCH` and `# SBATCH` are plain comments. After the magic word a directive holds
//! words separated by blanks: `'…'` and `"…"` group characters (the quotes are removed), a backslash
//! takes the next character literally (inside quotes too), and an unquoted, unescaped `#` ends the
//! line. The words are then read like command-line arguments, one directive line at a time, so an
//! option missing its value is reported on its own line.
//!
//! The tokenizer is written with `nom`; every character of every word keeps its column, so errors can
//! point at the exact place in the script.

use crate::spank::Plugins;
use nom::branch::alt;
use nom::bytes::complete::{tag, take_while};
use nom::character::complete::{anychar, char, satisfy};
use nom::combinator::{eof, opt, rest};
use nom::error::{ErrorKind, ParseError};
use nom::multi::{many0, many1};
use nom::sequence::preceded;
use nom::{IResult, Parser};

/// One word of a directive, with the column (1-based, in characters) of each of its characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The word with quotes and escapes removed.
    pub(crate) text: String,
    /// Column of each character of `text`.
    pub(crate) columns: Vec<usize>,
    /// Column where the word starts (its first quote or character).
    pub(crate) start: usize,
    /// Column just after the word.
    pub(crate) end: usize,
}

impl Word {
    /// The column of the character at `offset` in `text`; just after the word when past its end.
    pub(crate) fn column_at(&self, offset: usize) -> usize {
        self.columns.get(offset).copied().unwrap_or(self.end)
    }
}

/// One `#SBATCH` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Directive {
    /// 1-based line number.
    pub(crate) line: usize,
    pub(crate) words: Vec<Word>,
}

/// The directives of a script header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) directives: Vec<Directive>,
    /// The first line that used the legacy `#SLURM` magic word, if any.
    pub(crate) legacy_line: Option<usize>,
}

/// A malformed directive: where it is and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DirectiveError {
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) message: String,
}

impl std::fmt::Display for DirectiveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// Why a script cannot be a batch script at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScriptError {
    Empty,
    OnlyWhitespace,
    NoInterpreter,
    /// The 1-based line holding the first NUL byte.
    Nul(usize),
    /// The 1-based line ending in the first `\r\n`.
    DosLineBreaks(usize),
}

impl std::fmt::Display for ScriptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScriptError::Empty => f.write_str("Batch script is empty!"),
            ScriptError::OnlyWhitespace => f.write_str("Batch script contains only whitespace!"),
            ScriptError::NoInterpreter => f.write_str(
                "This does not look like a batch script.  The first line must start with #! followed by the path to an interpreter.\nFor instance: #!/bin/sh",
            ),
            ScriptError::Nul(line) => write!(f, "Batch script contains a NUL character (line {line}); a script must be text"),
            ScriptError::DosLineBreaks(line) => write!(
                f,
                "Batch script contains DOS line breaks (\\r\\n) instead of UNIX line breaks (\\n), first on line {line}"
            ),
        }
    }
}

/// The 1-based line number of byte `offset`.
fn line_of(script: &[u8], offset: usize) -> usize {
    script[..offset].iter().filter(|b| **b == b'\n').count() + 1
}

/// Checks what sbatch checks of every script before reading its directives.
pub(crate) fn check_script(script: &[u8]) -> Result<(), ScriptError> {
    if script.is_empty() {
        return Err(ScriptError::Empty);
    }
    if script.iter().all(u8::is_ascii_whitespace) {
        return Err(ScriptError::OnlyWhitespace);
    }
    if !script.starts_with(b"#!") {
        return Err(ScriptError::NoInterpreter);
    }
    if let Some(offset) = script.iter().position(|b| *b == 0) {
        return Err(ScriptError::Nul(line_of(script, offset)));
    }
    if let Some(offset) = script.windows(2).position(|w| w == b"\r\n") {
        return Err(ScriptError::DosLineBreaks(line_of(script, offset)));
    }
    Ok(())
}

/// Blanks between words: what C's `isspace` accepts.
fn is_blank(c: char) -> bool {
    c.is_ascii_whitespace() || c == '\x0b'
}

/// Tokenizer errors. `at` is the unparsed input where the problem starts; its length locates it.
#[derive(Debug)]
enum LexError<'a> {
    /// A combinator did not match (backtracking, never shown to the user).
    Nom,
    UnterminatedQuote {
        at: &'a str,
        quote: char,
    },
}

impl<'a> ParseError<&'a str> for LexError<'a> {
    fn from_error_kind(_input: &'a str, _kind: ErrorKind) -> Self {
        LexError::Nom
    }

    fn append(_input: &'a str, _kind: ErrorKind, other: Self) -> Self {
        other
    }
}

type Lex<'a, T> = IResult<&'a str, T, LexError<'a>>;

/// Characters of a word, each with the length of the input that was left when it was read (which
/// locates it in the line without carrying the line around).
type Chars = Vec<(usize, char)>;

/// A backslash and the character it escapes; a backslash ending the line escapes nothing.
fn escaped(input: &str) -> Lex<'_, Chars> {
    let (after, _) = char('\\').parse(input)?;
    let left = after.len();
    let (after, c) = opt(anychar).parse(after)?;
    Ok((after, c.map(|c| (left, c)).into_iter().collect()))
}

/// One character that means only itself outside quotes.
fn plain(input: &str) -> Lex<'_, Chars> {
    let left = input.len();
    let (after, c) = satisfy(|c| !is_blank(c) && !matches!(c, '\'' | '"' | '\\' | '#')).parse(input)?;
    Ok((after, vec![(left, c)]))
}

/// One character inside `quote`s: an escape, or anything but the closing quote.
fn quoted_char(quote: char) -> impl Fn(&str) -> Lex<'_, Chars> {
    move |input: &str| {
        if input.starts_with('\\') {
            return escaped(input);
        }
        let left = input.len();
        let (after, c) = satisfy(|c| c != quote && c != '\\').parse(input)?;
        Ok((after, vec![(left, c)]))
    }
}

/// `'…'` or `"…"`; a quote left open is fatal.
fn quoted(input: &str) -> Lex<'_, Chars> {
    let (body, quote) = alt((char('\''), char('"'))).parse(input)?;
    let (after, pieces) = many0(quoted_char(quote)).parse(body)?;
    match char::<&str, LexError<'_>>(quote).parse(after) {
        Ok((after, _)) => Ok((after, pieces.concat())),
        Err(_) => Err(nom::Err::Failure(LexError::UnterminatedQuote { at: input, quote })),
    }
}

/// A raw word: its characters and the input lengths before and after it.
struct RawWord {
    chars: Chars,
    quoted: bool,
    left_before: usize,
    left_after: usize,
}

/// One word: a run of plain characters, escapes and quoted groups.
fn word(input: &str) -> Lex<'_, RawWord> {
    let left_before = input.len();
    let (after, pieces) = many1(alt((plain, escaped, quoted))).parse(input)?;
    let consumed = &input[..left_before - after.len()];
    Ok((
        after,
        RawWord {
            chars: pieces.concat(),
            quoted: consumed.contains(['\'', '"']),
            left_before,
            left_after: after.len(),
        },
    ))
}

/// Which magic word opened a directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Magic {
    Sbatch,
    Legacy,
}

/// A whole directive line: magic word, words, optional trailing comment.
fn directive_line(input: &str) -> Lex<'_, (Magic, Vec<RawWord>)> {
    let blanks = || take_while(is_blank);
    let (after, magic) = alt((tag("#SBATCH"), tag("#SLURM"))).parse(input)?;
    let magic = if magic == "#SBATCH" { Magic::Sbatch } else { Magic::Legacy };
    let (after, words) = many0(preceded(blanks(), word)).parse(after)?;
    let (after, _) = blanks().parse(after)?;
    let (after, _) = alt((preceded(char('#'), rest), eof)).parse(after)?;
    Ok((after, (magic, words)))
}

/// Column (1-based, in characters) of the byte at `offset` in `line`.
fn column(line: &str, offset: usize) -> usize {
    line.get(..offset).map_or(offset, |prefix| prefix.chars().count()) + 1
}

/// Splits one directive line into words; `None` when the line is not a directive.
fn tokenize(line: &str, line_no: usize) -> Result<Option<(Magic, Vec<Word>)>, DirectiveError> {
    let at = |left: usize, message: String| DirectiveError {
        line: line_no,
        column: column(line, line.len() - left),
        message,
    };
    let (magic, raw_words) = match directive_line(line) {
        Ok((_, parsed)) => parsed,
        Err(nom::Err::Failure(LexError::UnterminatedQuote { at: rest, quote })) => {
            let kind = if quote == '"' { "double" } else { "single" };
            return Err(at(rest.len(), format!("unterminated {kind} quote: expected a closing {quote}")));
        }
        // The line does not start with a magic word.
        Err(nom::Err::Error(_)) if !line.starts_with("#SBATCH") && !line.starts_with("#SLURM") => return Ok(None),
        Err(_) => {
            return Err(at(
                line.len(),
                "cannot split this directive into words: expected words, quotes and comments".into(),
            ));
        }
    };
    let mut words = Vec::with_capacity(raw_words.len());
    for raw in raw_words {
        if raw.chars.is_empty() && !raw.quoted {
            // A lone backslash at the end of the line: nothing to read.
            continue;
        }
        let word = Word {
            text: raw.chars.iter().map(|(_, c)| c).collect(),
            columns: raw.chars.iter().map(|(left, _)| column(line, line.len() - left)).collect(),
            start: column(line, line.len() - raw.left_before),
            end: column(line, line.len() - raw.left_after),
        };
        if word.text.starts_with(':') || ["hetjob", "packjob"].iter().any(|w| word.text.eq_ignore_ascii_case(w)) {
            return Err(at(
                raw.left_before,
                format!(
                    "heterogeneous job separator `{}` found: Drover runs no heterogeneous jobs; submit each \
                     component as a job of its own (--dependency orders them) or use srun --multi-prog",
                    word.text
                ),
            ));
        }
        words.push(word);
    }
    Ok(Some((magic, words)))
}

/// Reads the directives of a script header. The script must have passed [`check_script`].
pub(crate) fn parse_header(script: &[u8]) -> Result<Header, DirectiveError> {
    let mut header = Header::default();
    for (idx, raw_line) in script.split(|b| *b == b'\n').enumerate() {
        let line_no = idx + 1;
        if raw_line.starts_with(b"#SBATCH") || raw_line.starts_with(b"#SLURM") {
            let line = std::str::from_utf8(raw_line).map_err(|e| DirectiveError {
                line: line_no,
                column: String::from_utf8_lossy(&raw_line[..e.valid_up_to()]).chars().count() + 1,
                message: "invalid UTF-8 in directive: expected text".into(),
            })?;
            if let Some((magic, words)) = tokenize(line, line_no)? {
                if magic == Magic::Legacy && header.legacy_line.is_none() {
                    header.legacy_line = Some(line_no);
                }
                header.directives.push(Directive { line: line_no, words });
            }
            continue;
        }
        match raw_line.iter().find(|b| !b.is_ascii_whitespace() && **b != b'\x0b') {
            None | Some(b'#') => continue,
            Some(_) => break,
        }
    }
    Ok(header)
}

/// Takes the plugin options out of the script's `#SBATCH` lines (`file` names the script in
/// messages), before the option table reads them.
pub(crate) fn take_plugin_options(plugins: &Plugins, header: &mut Header, file: &str) -> Result<(), String> {
    if !plugins.loaded() {
        return Ok(());
    }
    for directive in &mut header.directives {
        let words: Vec<&str> = directive.words.iter().map(|word| word.text.as_str()).collect();
        let kept = plugins.take_script_options(&words).map_err(|message| {
            let column = directive.words.first().map_or(1, |word| word.start);
            format!("{file}:{}:{column}: {message}", directive.line)
        })?;
        let mut idx = 0;
        directive.words.retain(|_| {
            let keep = kept.contains(&idx);
            idx += 1;
            keep
        });
    }
    header.directives.retain(|directive| !directive.words.is_empty());
    Ok(())
}
