//! Tidy: every Rust source file opens with a `//!` module doc, and none has a stray `dbg!`,
//! trailing whitespace or an `unsafe` block without a `// SAFETY:` comment just above it.
//! `unsafe` stays where it is allowed: ctld, shared and sim forbid it at every crate root, noded
//! denies it at its crate roots and allows it only in `noded/src/sys/`. And every test that
//! `docs/security.md` names as proof exists. ctld's layers import only downwards (serve → core →
//! {policy, store} → model), and no source picks its module file with `#[path]`.

use drover_e2e::rust_paths::{CrateReading, module_of};
use std::path::{Path, PathBuf};

/// The crates whose sources tidy reads, relative to the workspace root.
const CRATES: [&str; 7] = ["shared", "ctld", "noded", "cli", "spank-compat", "tests", "sim"];

/// The one folder of noded where `unsafe` code may live, and the module line in noded's
/// library root that allows it there.
const NODED_SYS: &str = "noded/src/sys/";
const NODED_SYS_MODULE: &str = "pub mod sys;";

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

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Every Rust file of the scanned crates: `(path relative to the root, text)`.
fn workspace_sources() -> Vec<(String, String)> {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in CRATES {
        sources(&root.join(dir), &mut files);
    }
    assert!(files.len() > 20, "found only {} files", files.len());
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            (file.strip_prefix(root).unwrap().display().to_string(), text)
        })
        .collect()
}

/// A line without its `//` comment (good enough for Rust sources: `//` inside a string literal
/// only shortens what is checked).
fn code_of(line: &str) -> &str {
    line.split("//").next().unwrap_or_default()
}

/// Whether `word` occurs in `text` as a whole word (not inside `unsafe_code` or `not_unsafe`).
fn has_word(text: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

#[test]
fn tidy() {
    let mut problems = Vec::new();
    for (rel, text) in workspace_sources() {
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
            let code = code_of(line);
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

/// The crate roots that must carry an attribute on `unsafe_code`, and which: every library,
/// binary and `src/bin/` root of ctld, shared and sim forbids it; noded's roots deny it (its
/// `sys` module allows it).
fn crate_root_rules(files: &[(String, String)]) -> Vec<(String, &'static str)> {
    let mut rules = Vec::new();
    for (rel, _) in files {
        let attribute = match rel.split('/').next() {
            Some("ctld" | "shared" | "sim") => "#![forbid(unsafe_code)]",
            Some("noded") => "#![deny(unsafe_code)]",
            _ => continue,
        };
        let crate_dir = rel.split('/').next().unwrap_or_default();
        let in_src = rel.strip_prefix(crate_dir).and_then(|rest| rest.strip_prefix("/src/")).unwrap_or_default();
        let is_root =
            matches!(in_src, "lib.rs" | "main.rs") || in_src.strip_prefix("bin/").is_some_and(|bin| !bin.contains('/'));
        if is_root {
            rules.push((rel.clone(), attribute));
        }
    }
    rules
}

#[test]
fn unsafe_stays_where_it_is_allowed() {
    let files = workspace_sources();
    let mut problems = Vec::new();
    let rules = crate_root_rules(&files);
    for expected in [
        "ctld/src/lib.rs",
        "ctld/src/main.rs",
        "shared/src/lib.rs",
        "sim/src/main.rs",
        "noded/src/lib.rs",
        "noded/src/main.rs",
    ] {
        assert!(rules.iter().any(|(rel, _)| rel == expected), "{expected} is not found as a crate root");
    }
    for (rel, attribute) in &rules {
        let text = &files.iter().find(|(path, _)| path == rel).unwrap().1;
        if !text.lines().any(|line| line.trim() == *attribute) {
            problems.push(format!("{rel}: crate root without `{attribute}`"));
        }
    }
    for (rel, text) in &files {
        if !rel.starts_with("noded/src/") || rel.starts_with(NODED_SYS) {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = code_of(line);
            if has_word(code, "unsafe") {
                problems.push(format!("{rel}:{}: `unsafe` outside {NODED_SYS}", i + 1));
            }
            if code.contains("allow(unsafe_code)") {
                let allows_sys = rel == "noded/src/lib.rs"
                    && lines[i + 1..].iter().map(|l| l.trim()).find(|l| !l.is_empty()) == Some(NODED_SYS_MODULE);
                if !allows_sys {
                    problems.push(format!("{rel}:{}: `unsafe_code` allowed outside {NODED_SYS}", i + 1));
                }
            }
        }
    }
    assert!(problems.is_empty(), "unsafe code out of place:\n{}", problems.join("\n"));
}

/// ctld's layers, each with the layers its files may name as `crate::<layer>`: itself and the
/// ones below it (serve → core → {policy, store} → model; policy and store never each other;
/// `replica`, the replicated writer and state machine, sits on the store and only `lib.rs`
/// wires it in).
const CTLD_LAYERS: [(&str, &[&str]); 6] = [
    ("model", &["model"]),
    ("store", &["store", "model"]),
    ("replica", &["replica", "store", "model"]),
    ("policy", &["policy", "model"]),
    ("core", &["core", "policy", "store", "model"]),
    ("serve", &["serve", "core", "policy", "store", "model"]),
];

/// ctld's library sources below `src` (not `main.rs` or `bin/`, which are crates of their own):
/// `(path relative to the workspace root, module, text)`.
fn ctld_library(src: &Path, shown_as: &str) -> Vec<(String, Vec<String>, String)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files
        .into_iter()
        .filter_map(|file| {
            let below = file.strip_prefix(src).unwrap().to_path_buf();
            if below == Path::new("main.rs") || below.starts_with("bin") {
                return None;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            Some((format!("{shown_as}/{}", below.display()), module_of(&below), text))
        })
        .collect()
}

/// Every path in ctld's library below `src` that leads from a layer into one its layer may not
/// name, resolved as the compiler would (`drover_e2e::rust_paths`): multi-line `use` groups,
/// `super::` from any module, aliases, re-exports and strings included.
fn layer_violations(src: &Path, shown_as: &str) -> Vec<String> {
    let files = ctld_library(src, shown_as);
    assert!(files.len() > 30, "found only {} files in {}", files.len(), src.display());
    let reading = CrateReading::read(&files);
    // The reader must see the layers: most files name a layer below or beside their own.
    let into_layers = reading
        .named
        .iter()
        .filter_map(|(_, named)| reading.resolve(&named.module, &named.segments))
        .filter(|target| target.first().is_some_and(|top| CTLD_LAYERS.iter().any(|(l, _)| *l == top.as_str())))
        .count();
    assert!(into_layers > 500, "only {into_layers} paths into ctld's layers were read");
    let mut problems = Vec::new();
    for (file, named) in &reading.named {
        let Some((layer, allowed)) =
            named.module.first().and_then(|top| CTLD_LAYERS.iter().find(|(layer, _)| *layer == top.as_str()))
        else {
            continue;
        };
        let Some(target) = reading.resolve(&named.module, &named.segments) else { continue };
        let Some(top) = target.first() else { continue };
        if CTLD_LAYERS.iter().any(|(other, _)| *other == top.as_str()) && !allowed.contains(&top.as_str()) {
            problems.push(format!(
                "{file}:{}: the {layer} layer names `{}`, which is `crate::{}`",
                named.line,
                named.segments.join("::"),
                target.join("::")
            ));
        }
    }
    problems
}

#[test]
fn ctld_layers_import_only_downwards() {
    let files = workspace_sources();
    let mut problems = layer_violations(&workspace_root().join("ctld/src"), "ctld/src");
    for (rel, text) in &files {
        for (i, line) in text.lines().enumerate() {
            if code_of(line).contains(concat!("#[", "path")) {
                problems.push(format!(
                    "{rel}:{}: a path attribute picks the module's file; put the file where its module is",
                    i + 1
                ));
            }
        }
    }
    assert!(problems.is_empty(), "ctld's layers out of order:\n{}", problems.join("\n"));
}

/// Each way a path has slipped past a line-by-line reading, planted in a copy of ctld's sources:
/// the guard names the file it was planted in, and the copy without a plant passes.
#[test]
fn the_layer_guard_catches_every_planted_shape() {
    let src = workspace_root().join("ctld/src");
    let copy = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    sources(&src, &mut files);
    for file in &files {
        let to = copy.path().join(file.strip_prefix(&src).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(file, &to).unwrap();
    }
    assert_eq!(layer_violations(copy.path(), "copy"), Vec::<String>::new(), "the unplanted copy passes");
    // Each plant: the lines added to files, and the file the guard must name.
    let plants: [(&[(&str, &str)], &str); 8] = [
        (&[("model/state.rs", "use crate::core::Core;\n")], "model/state.rs"),
        // rustfmt's form of a long import.
        (&[("model/state.rs", "use crate::{\n    core::Core,\n    model::identity::Caller,\n};\n")], "model/state.rs"),
        // In a layer's mod.rs, `super` is the crate root.
        (&[("policy/mod.rs", "pub(crate) use super::core::Core;\n")], "policy/mod.rs"),
        // A re-export of another layer from the model layer's root, and a path through it
        // from a layer that may name the model.
        (
            &[
                ("model/mod.rs", "pub(crate) use super::store;\n"),
                ("policy/limits.rs", "fn planted() { let _ = crate::model::store::Db::open; }\n"),
            ],
            "policy/limits.rs",
        ),
        (&[("model/mod.rs", "pub(crate) use super::store;\n")], "model/mod.rs"),
        // The crate root re-exports core::simbench as crate::simbench.
        (&[("model/tally.rs", "fn planted() { crate::simbench::run(); }\n")], "model/tally.rs"),
        (&[("model/usage.rs", "use crate as c;\nfn planted() { c::core::run(); }\n")], "model/usage.rs"),
        // `//` inside a string hid the rest of the line from a comment-stripping reader.
        (
            &[("model/identity.rs", "const PLANTED: &str = \"http://example.org\"; use crate::serve::Server;\n")],
            "model/identity.rs",
        ),
    ];
    for (plant, named) in plants {
        let originals: Vec<(PathBuf, String)> = plant
            .iter()
            .map(|(file, _)| {
                let path = copy.path().join(file);
                (path.clone(), std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        for ((_, text), (path, original)) in plant.iter().zip(&originals) {
            std::fs::write(path, format!("{original}{text}")).unwrap();
        }
        let problems = layer_violations(copy.path(), "copy");
        for (path, original) in originals.iter().rev() {
            std::fs::write(path, original).unwrap();
        }
        assert!(
            problems.iter().any(|p| p.starts_with(&format!("copy/{named}:"))),
            "planting {plant:?} went unseen in {named}: {problems:?}"
        );
    }
}

/// One reference to code in `docs/security.md`: a file, or a function in it.
#[derive(Debug, PartialEq, Eq)]
struct CodeRef {
    /// As written (`authz.rs` stands for `tests/tests/authz.rs`).
    file: String,
    function: Option<String>,
}

impl CodeRef {
    /// `path/to/file.rs`, `path/to/file.rs::name` or the short forms `file.rs(::name)`.
    fn parse(token: &str) -> Option<CodeRef> {
        let (file, function) = match token.split_once("::") {
            Some((file, function)) => (file, Some(function)),
            None => (token, None),
        };
        let file_ok = file.strip_suffix(".rs").is_some_and(|stem| {
            !stem.is_empty() && stem.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/' | '.'))
        });
        let function_ok = function.is_none_or(is_identifier);
        (file_ok && function_ok).then(|| CodeRef { file: file.to_owned(), function: function.map(str::to_owned) })
    }

    /// The file, relative to the workspace root: a bare file name is an end-to-end test.
    fn path(&self) -> PathBuf {
        if self.file.contains('/') { PathBuf::from(&self.file) } else { Path::new("tests/tests").join(&self.file) }
    }
}

fn is_identifier(text: &str) -> bool {
    text.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The backticked spans of `text`, each with the text between it and the span before.
fn backticked(text: &str) -> Vec<(&str, &str)> {
    let mut spans = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('`') {
        let Some(close) = rest[open + 1..].find('`') else { break };
        spans.push((&rest[..open], &rest[open + 1..open + 1 + close]));
        rest = &rest[open + 1 + close + 1..];
    }
    spans
}

/// Every code reference of the document: backticked `file.rs(::name)` anywhere, and in a table's
/// "proven by" column also a bare test name that follows a reference after a comma
/// (`attacks.rs::one`, `two` names two tests of `attacks.rs`). Each with its line number.
fn security_references(doc: &str) -> Vec<(usize, CodeRef)> {
    let mut found = Vec::new();
    let mut proven_by_column: Option<usize> = None;
    for (i, line) in doc.lines().enumerate() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if !line.trim_start().starts_with('|') {
            proven_by_column = None;
        } else if let Some(column) = cells.iter().position(|cell| cell.trim().eq_ignore_ascii_case("proven by")) {
            proven_by_column = Some(column);
            continue;
        }
        for (column, cell) in cells.iter().enumerate() {
            let in_proof_column = proven_by_column == Some(column);
            let mut last_file: Option<String> = None;
            for (gap, token) in backticked(cell) {
                if let Some(code_ref) = CodeRef::parse(token) {
                    last_file = Some(code_ref.file.clone());
                    found.push((i + 1, code_ref));
                } else if in_proof_column
                    && gap.trim() == ","
                    && is_identifier(token)
                    && token.contains('_')
                    && let Some(file) = &last_file
                {
                    found.push((i + 1, CodeRef { file: file.clone(), function: Some(token.to_owned()) }));
                } else {
                    last_file = None;
                }
            }
        }
    }
    found
}

/// Whether `text` defines a function `name`.
fn defines_function(text: &str, name: &str) -> bool {
    [format!("fn {name}("), format!("fn {name}<")].iter().any(|pattern| text.contains(pattern.as_str()))
}

#[test]
fn security_doc_names_tests_that_exist() {
    let root = workspace_root();
    let doc = std::fs::read_to_string(root.join("docs/security.md")).unwrap();
    let references = security_references(&doc);
    assert!(references.len() > 20, "found only {} references in docs/security.md", references.len());
    let mut problems = Vec::new();
    for (line, code_ref) in &references {
        let path = code_ref.path();
        let Ok(text) = std::fs::read_to_string(root.join(&path)) else {
            problems.push(format!("docs/security.md:{line}: `{}`: no file {}", code_ref.file, path.display()));
            continue;
        };
        if let Some(function) = &code_ref.function
            && !defines_function(&text, function)
        {
            problems.push(format!("docs/security.md:{line}: no `fn {function}` in {}", path.display()));
        }
    }
    assert!(problems.is_empty(), "docs/security.md names what does not exist:\n{}", problems.join("\n"));
}

#[test]
fn security_references_are_read_as_written() {
    let doc = "\
| attacker | proven by |\n\
|---|---|\n\
| a | `tests/tests/x.rs::one` (see `y.rs`), `authz.rs::two`, `two_more` and `not_a_test` |\n\
\n\
Prose: `z.rs::four`, `five`; `HMAC(key)` and `sacct -D`.\n";
    let refs: Vec<String> = security_references(doc)
        .into_iter()
        .map(|(line, r)| format!("{line} {} {}", r.path().display(), r.function.unwrap_or_default()))
        .collect();
    assert_eq!(
        refs,
        [
            "3 tests/tests/x.rs one",
            "3 tests/tests/y.rs ",
            "3 tests/tests/authz.rs two",
            "3 tests/tests/authz.rs two_more",
            "5 tests/tests/z.rs four",
        ]
    );
}

/// The import circles among ctld's library files: each strongly connected set of two or more
/// files, by the paths each file names into another (resolved as in [`layer_violations`]), the
/// largest first.
fn import_circles(src: &Path) -> Vec<Vec<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let files = ctld_library(src, "ctld/src");
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(_, module, _)| module.clone()).collect();
    let reading = CrateReading::read(&files);
    // The file a resolved path lands in: its longest prefix that is a file's module.
    let file_of =
        |target: &[String]| (0..=target.len()).rev().map(|n| target[..n].to_vec()).find(|m| modules.contains(m));
    let file_module: BTreeMap<&str, &Vec<String>> =
        files.iter().map(|(name, module, _)| (name.as_str(), module)).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (file, named) in &reading.named {
        let Some(target) = reading.resolve(&named.module, &named.segments) else { continue };
        let (Some(to), Some(from)) = (file_of(&target), file_module.get(file.as_str())) else { continue };
        if to != **from && !to.is_empty() {
            edges.entry((*from).clone()).or_default().insert(to);
        }
    }
    // Tarjan's strongly connected components, iteratively deep enough for a crate's files.
    struct Walk<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<Vec<String>, usize>,
        low: BTreeMap<Vec<String>, usize>,
        stack: Vec<Vec<String>>,
        on_stack: BTreeSet<Vec<String>>,
        found: Vec<Vec<String>>,
    }
    fn visit(walk: &mut Walk, v: &Vec<String>) {
        let n = walk.index.len();
        walk.index.insert(v.clone(), n);
        walk.low.insert(v.clone(), n);
        walk.stack.push(v.clone());
        walk.on_stack.insert(v.clone());
        let next: Vec<Vec<String>> = walk.edges.get(v).into_iter().flatten().cloned().collect();
        for w in next {
            if !walk.index.contains_key(&w) {
                visit(walk, &w);
                let low = walk.low[v].min(walk.low[&w]);
                walk.low.insert(v.clone(), low);
            } else if walk.on_stack.contains(&w) {
                let low = walk.low[v].min(walk.index[&w]);
                walk.low.insert(v.clone(), low);
            }
        }
        if walk.low[v] == walk.index[v] {
            let mut circle = Vec::new();
            while let Some(w) = walk.stack.pop() {
                walk.on_stack.remove(&w);
                let done = &w == v;
                circle.push(w.join("::"));
                if done {
                    break;
                }
            }
            if circle.len() > 1 {
                circle.sort();
                walk.found.push(circle);
            }
        }
    }
    let mut walk = Walk {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for module in &modules {
        if !walk.index.contains_key(module) {
            visit(&mut walk, module);
        }
    }
    let mut found = walk.found;
    found.sort_by_key(|circle| std::cmp::Reverse(circle.len()));
    found
}

/// No import circle in ctld's library spans more than a handful of files: a circle is code that
/// can only be understood (and changed) together.
#[test]
fn ctld_import_circles_stay_small() {
    let circles = import_circles(&workspace_root().join("ctld/src"));
    for circle in &circles {
        eprintln!("{} files: {}", circle.len(), circle.join(" "));
    }
    let largest = circles.first().map_or(0, Vec::len);
    assert!(largest <= 5, "an import circle of {largest} files in ctld: {:?}", circles.first());
}
