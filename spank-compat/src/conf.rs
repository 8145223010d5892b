//! `plugstack.conf`: which plugins to load, in which order, with which arguments.
//!
//! Per line, text after `#` is a comment; tokens split on blanks; a line is
//! `required|optional <path> [arg ...]` or `include <glob>`. A relative include glob is relative
//! to the including file's directory; no match is fine; matches are read in glob order. A bad line
//! is reported in [`PlugStack::warnings`] and skipped, as Slurm logs and skips it. A missing top
//! file is an empty stack.

use crate::error::SpankError;
use crate::sys;
use std::path::{Path, PathBuf};

/// Includes nest at most this deep (a file including itself stops here).
const MAX_INCLUDE_DEPTH: usize = 16;

/// One `required` or `optional` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlugStackEntry {
    /// `required`: a failure to load, or a non-zero return from a callback, fails the job or
    /// command; `optional`: it is only logged.
    pub required: bool,
    /// As written; a relative path is searched in the plugin directories at load time.
    pub path: PathBuf,
    /// The rest of the line, passed to every callback as `ac`/`av`.
    pub args: Vec<String>,
    /// `file:line`, for messages.
    pub origin: String,
}

/// A parsed plugin stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlugStack {
    /// The plugins in stack (file, then include) order.
    pub entries: Vec<PlugStackEntry>,
    /// Lines that were skipped, each `file:line: why`.
    pub warnings: Vec<String>,
}

impl PlugStack {
    /// Reads `path` and whatever it includes; a missing `path` is an empty stack.
    pub fn read(path: &Path) -> Result<PlugStack, SpankError> {
        let mut stack = PlugStack::default();
        match std::fs::read_to_string(path) {
            Ok(text) => stack.parse_file(path, &text, 0)?,
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(SpankError::ReadConf { path: path.to_owned(), source }),
        }
        Ok(stack)
    }

    /// Parses `text` as if it were the file `path` (includes are resolved next to `path`).
    pub fn parse(path: &Path, text: &str) -> Result<PlugStack, SpankError> {
        let mut stack = PlugStack::default();
        stack.parse_file(path, text, 0)?;
        Ok(stack)
    }

    fn parse_file(&mut self, path: &Path, text: &str, depth: usize) -> Result<(), SpankError> {
        if depth > MAX_INCLUDE_DEPTH {
            return Err(SpankError::IncludeDepth { path: path.to_owned(), max: MAX_INCLUDE_DEPTH });
        }
        for (line_idx, line) in text.lines().enumerate() {
            let origin = format!("{}:{}", path.display(), line_idx + 1);
            let code = line.split('#').next().unwrap_or_default();
            let mut tokens = code.split([' ', '\t']).filter(|token| !token.is_empty());
            let Some(keyword) = tokens.next() else { continue };
            match keyword {
                "required" | "optional" => {
                    let Some(plugin) = tokens.next() else {
                        self.warnings.push(format!("{origin}: `{keyword}` without a plugin path"));
                        continue;
                    };
                    self.entries.push(PlugStackEntry {
                        required: keyword == "required",
                        path: PathBuf::from(plugin),
                        args: tokens.map(str::to_owned).collect(),
                        origin,
                    });
                }
                "include" => {
                    let Some(pattern) = tokens.next() else {
                        self.warnings.push(format!("{origin}: `include` without a pattern"));
                        continue;
                    };
                    let pattern = match path.parent() {
                        Some(dir) if !Path::new(pattern).is_absolute() => dir.join(pattern),
                        _ => PathBuf::from(pattern),
                    };
                    for included in sys::glob(&pattern) {
                        let text = std::fs::read_to_string(&included)
                            .map_err(|source| SpankError::ReadConf { path: included.clone(), source })?;
                        self.parse_file(&included, &text, depth + 1)?;
                    }
                }
                other => self.warnings.push(format!("{origin}: unknown keyword `{other}`, line ignored")),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_comments_and_bad_keywords() {
        let stack = PlugStack::parse(
            Path::new("/etc/drover/plugstack.conf"),
            "# comment\n\nrequired /opt/a.so x=1\ty=2 # trailing\noptional\tb.so\nbogus c.so\nrequired\n",
        )
        .unwrap();
        let got: Vec<_> =
            stack.entries.iter().map(|e| (e.required, e.path.display().to_string(), e.args.clone())).collect();
        assert_eq!(
            got,
            vec![
                (true, "/opt/a.so".to_owned(), vec!["x=1".to_owned(), "y=2".to_owned()]),
                (false, "b.so".to_owned(), vec![]),
            ]
        );
        assert_eq!(stack.entries[1].origin, "/etc/drover/plugstack.conf:4");
        assert_eq!(stack.warnings.len(), 2, "{:?}", stack.warnings);
        assert!(stack.warnings[0].contains(":5: unknown keyword `bogus`"));
    }

    #[test]
    fn includes_are_globbed_in_order_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("plugstack.conf.d")).unwrap();
        std::fs::write(dir.path().join("plugstack.conf.d/20-b.conf"), "optional b.so\n").unwrap();
        std::fs::write(dir.path().join("plugstack.conf.d/10-a.conf"), "required a.so\n").unwrap();
        let top = dir.path().join("plugstack.conf");
        std::fs::write(
            &top,
            "required first.so\ninclude plugstack.conf.d/*.conf\ninclude nothing/*.conf\noptional last.so\n",
        )
        .unwrap();
        let stack = PlugStack::read(&top).unwrap();
        let names: Vec<_> = stack.entries.iter().map(|e| e.path.display().to_string()).collect();
        assert_eq!(names, ["first.so", "a.so", "b.so", "last.so"]);
        assert!(stack.warnings.is_empty());
    }

    #[test]
    fn a_missing_file_is_an_empty_stack_and_a_loop_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(PlugStack::read(&dir.path().join("none.conf")).unwrap(), PlugStack::default());
        let top = dir.path().join("loop.conf");
        std::fs::write(&top, "include loop.conf\n").unwrap();
        assert!(matches!(PlugStack::read(&top), Err(SpankError::IncludeDepth { .. })));
    }
}
