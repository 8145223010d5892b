//! Tidy: every Rust source file opens with a `//!` module doc, and none has a stray `dbg!`,
//! trailing whitespace or an `unsafe` block without a `// SAFETY:` comment just above it.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn tidy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for dir in ["shared", "ctld", "noded", "cli", "spank-compat", "tests"] {
        sources(&root.join(dir), &mut files);
    }
    assert!(files.len() > 20, "found only {} files", files.len());
    let mut problems = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let rel = file.strip_prefix(root).unwrap().display().to_string();
        if !text.starts_with("//!") {
            problems.push(format!("{rel}: does not open with a `//!` module doc"));
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.ends_with(' ') || line.ends_with('\t') {
                problems.push(format!("{rel}:{}: trailing whitespace", i + 1));
            }
            if line.contains(concat!("dbg", "!(")) {
                problems.push(format!("{rel}:{}: dbg! left in", i + 1));
            }
            let code = line.split("//").next().unwrap_or_default();
            if code.contains("unsafe {") && !code.contains("unsafe fn") {
                let above = lines[..i].iter().rev().take(6).any(|l| l.contains("SAFETY:"));
                if !above && !line.contains("SAFETY:") {
                    problems.push(format!("{rel}:{}: unsafe block without a `// SAFETY:` comment", i + 1));
                }
            }
        }
    }
    assert!(problems.is_empty(), "tidy found:\n{}", problems.join("\n"));
}
