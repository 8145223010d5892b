//! Reads the module paths a crate's Rust sources name, resolved to where they lead, for the
//! layer guard of `tests/tests/tidy.rs`. It lexes each file (comments, strings, raw strings,
//! char literals and lifetimes are skipped, so `"http://…"` hides nothing after it), reads every
//! `use` item whole (groups over several lines, `self`, `as` aliases, globs), and resolves each
//! path from the module the file (or an inline `mod x { … }`) is: `crate::`, `self::`,
//! `super::` (any number), an alias a `use` bound (`use crate as c;`), a child module, and the
//! names modules re-export (`pub use core::simbench;` in the crate root makes
//! `crate::simbench::…` a path into `core`). Paths into other crates resolve to nothing.
//!
//! It is no compiler: a name bound by a glob import or declared by a macro is not followed.
//! The layer rules only need where `crate`-relative names lead, and those are all written out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One token of Rust source: what the path reader needs, with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
    /// A literal, lifetime or number: ends any path.
    Other,
}

fn lex(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let is_start = |c: char| c.is_alphabetic() || c == '_';
    let is_cont = |c: char| c.is_alphanumeric() || c == '_';
    // Skips a quoted body starting after the opening quote; returns the index after the closing
    // one, counting lines.
    let quoted = |mut i: usize, quote: char, line: &mut usize| {
        while i < chars.len() {
            match chars[i] {
                '\\' => i += 2,
                c if c == quote => return i + 1,
                '\n' => {
                    *line += 1;
                    i += 1;
                }
                _ => i += 1,
            }
        }
        i
    };
    // A raw string from its `r`: `r"…"`, `r#"…"#`, …; `None` when it is not one (`r#ident`).
    let raw = |i: usize, line: &mut usize| -> Option<usize> {
        let mut j = i + 1;
        let mut hashes = 0;
        while chars.get(j) == Some(&'#') {
            hashes += 1;
            j += 1;
        }
        if chars.get(j) != Some(&'"') {
            return None;
        }
        j += 1;
        while j < chars.len() {
            if chars[j] == '\n' {
                *line += 1;
            }
            if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                return Some(j + 1 + hashes);
            }
            j += 1;
        }
        Some(j)
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if chars[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            '"' => {
                out.push((Token::Other, line));
                i = quoted(i + 1, '"', &mut line);
            }
            '\'' => {
                // A char literal (`'x'`, `'\n'`, `'\u{1F600}'`) or a lifetime (`'a`).
                if next == Some('\\') {
                    i = quoted(i + 1, '\'', &mut line);
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1;
                    while i < chars.len() && is_cont(chars[i]) {
                        i += 1;
                    }
                }
                out.push((Token::Other, line));
            }
            ':' if next == Some(':') => {
                out.push((Token::Sep, line));
                i += 2;
            }
            c if c.is_ascii_digit() => {
                while i < chars.len() && is_cont(chars[i]) {
                    i += 1;
                }
                out.push((Token::Other, line));
            }
            c if is_start(c) => {
                // Prefixed literals: b"…", br"…", c"…", r"…", r#"…"#, b'x'; raw identifiers r#x.
                let prefix: String = chars[i..].iter().take_while(|c| is_cont(**c)).collect();
                let after = chars.get(i + prefix.len()).copied();
                if matches!(prefix.as_str(), "b" | "c") && after == Some('"') {
                    out.push((Token::Other, line));
                    i = quoted(i + 2, '"', &mut line);
                    continue;
                }
                if prefix == "b" && after == Some('\'') {
                    out.push((Token::Other, line));
                    i = quoted(i + 2, '\'', &mut line);
                    continue;
                }
                if matches!(prefix.as_str(), "r" | "br" | "cr") && matches!(after, Some('"' | '#')) {
                    let at = i + prefix.len() - 1;
                    if let Some(end) = raw(at, &mut line) {
                        out.push((Token::Other, line));
                        i = end;
                        continue;
                    }
                    if prefix == "r" {
                        // r#ident
                        let ident: String = chars[i + 2..].iter().take_while(|c| is_cont(**c)).collect();
                        i += 2 + ident.len();
                        out.push((Token::Ident(ident), line));
                        continue;
                    }
                }
                i += prefix.len();
                out.push((Token::Ident(prefix), line));
            }
            c => {
                out.push((Token::Punct(c), line));
                i += 1;
            }
        }
    }
    out
}

/// One path a file names: the segments as written and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The module the path is written in (from the crate root).
    pub module: Vec<String>,
    pub segments: Vec<String>,
    pub line: usize,
}

/// What one file says: the paths it names, and the names its `use` items bind, per module.
#[derive(Debug, Default)]
struct FileReading {
    named: Vec<Named>,
    /// (module, bound name, path as written)
    binds: Vec<(Vec<String>, String, Vec<String>)>,
    /// Inline modules (`mod x { … }`) and declared modules (`mod x;`).
    modules: Vec<Vec<String>>,
}

/// Reads one use tree from `at` (after `use` or inside a group) with the `prefix` written
/// before it; returns the index after it.
fn use_tree(
    tokens: &[(Token, usize)],
    mut at: usize,
    prefix: Vec<String>,
    module: &[String],
    reading: &mut FileReading,
) -> usize {
    let mut segments = prefix;
    loop {
        let Some((token, line)) = tokens.get(at) else { return at };
        match token {
            Token::Sep => at += 1,
            Token::Ident(name) => {
                segments.push(name.clone());
                at += 1;
                if tokens.get(at).map(|t| &t.0) == Some(&Token::Sep) {
                    at += 1;
                    continue;
                }
                let mut path = segments.clone();
                if path.last().is_some_and(|s| s == "self") && path.len() > 1 {
                    path.pop();
                }
                let mut bound = path.last().cloned().unwrap_or_default();
                if tokens.get(at).map(|t| &t.0) == Some(&Token::Ident("as".into())) {
                    if let Some((Token::Ident(alias), _)) = tokens.get(at + 1) {
                        bound = alias.clone();
                    }
                    at += 2;
                }
                reading.named.push(Named { module: module.to_vec(), segments: path.clone(), line: *line });
                if bound != "_" {
                    reading.binds.push((module.to_vec(), bound, path));
                }
                return at;
            }
            Token::Punct('*') => {
                reading.named.push(Named { module: module.to_vec(), segments: segments.clone(), line: *line });
                return at + 1;
            }
            Token::Punct('{') => {
                at += 1;
                loop {
                    match tokens.get(at).map(|t| &t.0) {
                        None => return at,
                        Some(Token::Punct('}')) => return at + 1,
                        Some(Token::Punct(',')) => at += 1,
                        Some(_) => {
                            let before = at;
                            at = use_tree(tokens, at, segments.clone(), module, reading);
                            if at == before {
                                at += 1;
                            }
                        }
                    }
                }
            }
            _ => return at,
        }
    }
}

fn read_file(module: &[String], text: &str) -> FileReading {
    let tokens = lex(text);
    let mut reading = FileReading::default();
    // The inline module each open brace belongs to, innermost last: (brace depth, module).
    let mut stack: Vec<(usize, Vec<String>)> = vec![(0, module.to_vec())];
    let mut depth = 0;
    let mut pending_mod: Option<String> = None;
    let mut i = 0;
    while i < tokens.len() {
        let current = stack.last().expect("the file's module").1.clone();
        let (token, line) = &tokens[i];
        match token {
            Token::Punct('{') => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    let mut inner = current.clone();
                    inner.push(name);
                    reading.modules.push(inner.clone());
                    stack.push((depth, inner));
                }
                i += 1;
            }
            Token::Punct('}') => {
                if stack.len() > 1 && stack.last().is_some_and(|(d, _)| *d == depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Token::Punct(';') => {
                if let Some(name) = pending_mod.take() {
                    let mut inner = current.clone();
                    inner.push(name);
                    reading.modules.push(inner);
                }
                i += 1;
            }
            Token::Ident(word) if word == "mod" => {
                if let Some((Token::Ident(name), _)) = tokens.get(i + 1) {
                    pending_mod = Some(name.clone());
                    i += 2;
                } else {
                    i += 1;
                }
            }
            Token::Ident(word) if word == "use" => {
                i = use_tree(&tokens, i + 1, Vec::new(), &current, &mut reading);
            }
            Token::Ident(first) => {
                // A path in an expression or a type: only one written with `::` can leave the
                // module (a single name is a local item or a `use` binding, read above).
                let starts = i == 0 || !matches!(tokens[i - 1].0, Token::Sep | Token::Punct('$' | '.'));
                let mut segments = vec![first.clone()];
                let mut j = i + 1;
                while tokens.get(j).map(|t| &t.0) == Some(&Token::Sep) {
                    match tokens.get(j + 1) {
                        Some((Token::Ident(next), _)) => {
                            segments.push(next.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                if starts && segments.len() > 1 {
                    reading.named.push(Named { module: current, segments, line: *line });
                }
                i = j.max(i + 1);
            }
            _ => i += 1,
        }
    }
    reading
}

/// The module a source file is, from its path below the crate's `src/`: `lib.rs` is the root,
/// `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`.
pub fn module_of(below_src: &Path) -> Vec<String> {
    let mut parts: Vec<String> =
        below_src.iter().map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
    if parts.last().is_some_and(|last| last == "mod" || last == "lib") {
        parts.pop();
    }
    parts
}

/// A crate's sources read together: every path they name, and what the names lead to.
#[derive(Debug, Default)]
pub struct CrateReading {
    /// (file, what it names)
    pub named: Vec<(String, Named)>,
    binds: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    modules: BTreeSet<Vec<String>>,
}

impl CrateReading {
    /// Reads `files` (`(name, module, text)`) of one crate.
    pub fn read(files: &[(String, Vec<String>, String)]) -> CrateReading {
        let mut crate_reading = CrateReading::default();
        crate_reading.modules.insert(Vec::new());
        for (name, module, text) in files {
            crate_reading.modules.insert(module.clone());
            let reading = read_file(module, text);
            crate_reading.modules.extend(reading.modules);
            for (module, bound, path) in reading.binds {
                crate_reading.binds.entry(module).or_default().insert(bound, path);
            }
            crate_reading.named.extend(reading.named.into_iter().map(|named| (name.clone(), named)));
        }
        crate_reading
    }

    /// Where `segments`, written in `module`, lead: the path from the crate root, or `None` for
    /// a path into another crate (or one this reader cannot follow).
    pub fn resolve(&self, module: &[String], segments: &[String]) -> Option<Vec<String>> {
        self.resolve_within(module, segments, 0)
    }

    fn resolve_within(&self, module: &[String], segments: &[String], hops: usize) -> Option<Vec<String>> {
        if hops > 16 {
            return None;
        }
        let (first, rest) = segments.split_first()?;
        let (mut at, mut rest): (Vec<String>, &[String]) = match first.as_str() {
            "crate" => (Vec::new(), rest),
            "self" => (module.to_vec(), rest),
            "super" => {
                let mut at = module.to_vec();
                at.pop()?;
                let mut rest = rest;
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop()?;
                    rest = &rest[1..];
                }
                (at, rest)
            }
            name => {
                // A name bound in this module or, for an item written inside a function of an
                // inline module, an enclosing one; else a child module; else another crate.
                let bound = (0..=module.len())
                    .rev()
                    .find_map(|n| self.binds.get(&module[..n]).and_then(|b| b.get(name)).map(|p| (n, p)));
                if let Some((n, path)) = bound {
                    if path.first().is_some_and(|s| s == name) && path.len() == 1 {
                        return None;
                    }
                    (self.resolve_within(&module[..n], path, hops + 1)?, rest)
                } else {
                    let mut child = module.to_vec();
                    child.push(name.to_owned());
                    if !self.modules.contains(&child) {
                        return None;
                    }
                    (child, rest)
                }
            }
        };
        // Each further segment: a child module, or a name the module binds (a re-export).
        while let Some((segment, tail)) = rest.split_first() {
            let mut child = at.clone();
            child.push(segment.clone());
            if let Some(path) =
                self.binds.get(&at).and_then(|b| b.get(segment)).filter(|_| !self.modules.contains(&child))
            {
                let mut target = self.resolve_within(&at, path, hops + 1).unwrap_or(child);
                target.extend(tail.iter().cloned());
                return Some(target);
            }
            at = child;
            rest = tail;
        }
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(files: &[(&str, &str)]) -> CrateReading {
        let files: Vec<(String, Vec<String>, String)> =
            files.iter().map(|(path, text)| (path.to_string(), module_of(Path::new(path)), text.to_string())).collect();
        CrateReading::read(&files)
    }

    fn v(path: &str) -> Vec<String> {
        path.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect()
    }

    #[test]
    fn lexing_skips_what_is_not_code() {
        let tokens = lex("let u = \"http://x\"; let c = '\"'; /* a /* b */ c */ r#\"crate::core\"# 'a x::y");
        let idents: Vec<&str> =
            tokens.iter().filter_map(|(t, _)| if let Token::Ident(s) = t { Some(s.as_str()) } else { None }).collect();
        assert_eq!(idents, ["let", "u", "let", "c", "x", "y"]);
    }

    #[test]
    fn paths_resolve_through_aliases_supers_and_re_exports() {
        let r = reading(&[
            ("lib.rs", "mod core; mod model; pub use core::simbench;\nuse crate as c;"),
            ("core/mod.rs", "pub mod simbench; pub use super::model;"),
            ("core/simbench.rs", ""),
            ("model/mod.rs", "mod state;"),
            ("model/state.rs", "use crate::{\n  core::simbench::Run,\n};"),
        ]);
        let state = v("model::state");
        assert_eq!(r.resolve(&state, &v("crate::simbench::Run")), Some(v("core::simbench::Run")));
        assert_eq!(r.resolve(&state, &v("super::super::core")), Some(v("core")));
        assert_eq!(r.resolve(&v("model"), &v("super::core::x")), Some(v("core::x")));
        assert_eq!(r.resolve(&state, &v("c::core::x")), Some(v("core::x")));
        assert_eq!(r.resolve(&state, &v("std::sync::Arc")), None);
        assert_eq!(r.resolve(&state, &v("crate::core::model::State")), Some(v("model::State")));
        let named: Vec<Vec<String>> =
            r.named.iter().filter(|(f, _)| f == "model/state.rs").map(|(_, n)| n.segments.clone()).collect();
        assert_eq!(named, [v("crate::core::simbench::Run")]);
    }
}
