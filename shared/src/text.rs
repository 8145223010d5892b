//! Terminal-safe text: the one rule for which characters a user may put in the strings other
//! people see (job names, comments, accounts, node reasons) and the one place every listing makes
//! a stored string safe to print. A control character (C0 with newline, tab and ESC; DEL; C1) or a
//! bidirectional override in a job name could forge rows in `squeue`, break `sacct -P` parsers or
//! send escape sequences to another user's terminal; ctld refuses them at submit and update
//! ([`forbidden`]), and the listings print each as `?` ([`printable`]) so records stored before
//! the rule (or reasons that came from elsewhere) are harmless too.

use std::borrow::Cow;

/// What a listing prints in place of a character it will not print.
pub const REPLACEMENT: char = '?';

/// Whether `c` may not appear in a user-set string: C0 controls (newline, tab and ESC included),
/// DEL, C1 controls, and the Unicode bidirectional embeddings, overrides and isolates that
/// reorder what a terminal shows.
pub fn is_forbidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The first forbidden character of `text`, if any.
pub fn forbidden(text: &str) -> Option<char> {
    // Fast path: ASCII text has a forbidden character only below 0x20 or at DEL.
    if text.is_ascii() {
        return text.bytes().find(|&b| b < 0x20 || b == 0x7f).map(char::from);
    }
    text.chars().find(|&c| is_forbidden(c))
}

/// `text` with every forbidden character replaced by [`REPLACEMENT`]; borrowed when there is none
/// (the usual case costs one scan).
pub fn printable(text: &str) -> Cow<'_, str> {
    if forbidden(text).is_none() {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().map(|c| if is_forbidden(c) { REPLACEMENT } else { c }).collect())
}

/// A value of a delimited listing (`sacct -p/-P`, `sacctmgr -p/-P`): [`printable`], and each
/// occurrence of `delimiter` inside the value printed as [`REPLACEMENT`] too, so a value can never
/// add a column to its row (a job name `x|bob` would otherwise make a parser read `bob` as the
/// next field).
pub fn delimited<'a>(text: &'a str, delimiter: &str) -> Cow<'a, str> {
    let safe = printable(text);
    if delimiter.is_empty() || !safe.contains(delimiter) {
        return safe;
    }
    Cow::Owned(safe.replace(delimiter, &REPLACEMENT.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_forbidden_and_printed_as_question_marks() {
        for bad in ["a\nb", "a\tb", "\u{1b}[31mred", "x\u{7f}", "c1\u{85}", "c1\u{9b}2J", "rtl\u{202e}cod", "\0"] {
            assert!(forbidden(bad).is_some(), "{bad:?}");
            assert!(printable(bad).chars().all(|c| !is_forbidden(c)), "{bad:?}");
            assert_eq!(printable(bad).chars().count(), bad.chars().count(), "{bad:?}");
        }
        assert_eq!(printable("a\nb\u{1b}[2J"), "a?b?[2J");
        for good in ["train-gpt", "a|b", "ünïcödé 名前", "spaces are fine", ""] {
            assert_eq!(forbidden(good), None, "{good:?}");
            assert!(matches!(printable(good), Cow::Borrowed(_)), "{good:?}");
        }
    }

    #[test]
    fn delimited_values_cannot_add_columns() {
        assert_eq!(delimited("x|bob|COMPLETED", "|"), "x?bob?COMPLETED");
        assert_eq!(delimited("a,b", "|"), "a,b");
        assert_eq!(delimited("a::b", "::"), "a?b");
        assert_eq!(delimited("a\n|b", "|"), "a??b");
    }
}

/// An I/O error as a person reads it: the system's words without Rust's `(os error N)`.
pub fn io_reason(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}
