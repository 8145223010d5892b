//! `--help`, `--usage` and `--version` text, generated from the option table so it cannot drift from
//! what sbatch accepts.

use super::defs::{ArgKind, OPTIONS, OptionDef, Section};

/// The Slurm release Drover's commands answer to.
pub(crate) const VERSION: &str = "slurm 22.05.8";

/// Column where help text starts.
const HELP_COLUMN: usize = 30;

/// `-t, --time=minutes` as `--help` shows it.
fn synopsis(def: &OptionDef) -> String {
    let short = def.short.map_or_else(|| "    ".to_owned(), |c| format!("-{c}, "));
    let value = match def.apply.arg_kind() {
        ArgKind::None => String::new(),
        ArgKind::Required => format!("={}", def.value_name),
        ArgKind::Optional if def.value_name.is_empty() => String::new(),
        ArgKind::Optional => format!("[={}]", def.value_name),
    };
    format!("  {short}--{}{value}", def.long)
}

/// The `--help` text.
pub(crate) fn help() -> String {
    let mut out = String::from(
        "Usage: sbatch [OPTIONS...] script [args...]\n       sbatch [OPTIONS...] --wrap=\"command string\"\n",
    );
    for section in Section::ALL {
        out.push('\n');
        out.push_str(section.title());
        out.push('\n');
        for def in OPTIONS.iter().filter(|d| d.section == section && d.is_supported()) {
            let synopsis = synopsis(def);
            if synopsis.len() + 2 > HELP_COLUMN {
                out.push_str(&format!("{synopsis}\n{:HELP_COLUMN$}{}\n", "", def.help));
            } else {
                out.push_str(&format!("{synopsis:HELP_COLUMN$}{}\n", def.help));
            }
        }
    }
    let names = |keep: fn(&OptionDef) -> bool| {
        let mut names: Vec<String> = OPTIONS.iter().filter(|d| keep(d)).map(|d| d.display_name()).collect();
        names.sort();
        names
    };
    out.push_str("\nAccepted and ignored (hints Drover has no use for; a warning says so):\n");
    out.push_str(&wrap_words(&names(|d| d.is_ignored()), "  ", "  ", 80));
    out.push_str("\nRecognized but not supported yet:\n");
    out.push_str(&wrap_words(&names(|d| !d.is_supported() && !d.is_ignored()), "  ", "  ", 80));
    out
}

/// The `--usage` text: every supported option in brackets.
pub(crate) fn usage() -> String {
    let items: Vec<String> = OPTIONS
        .iter()
        .filter(|d| d.is_supported() && d.section != Section::Help)
        .map(|d| {
            let value = d.value_name;
            match (d.short, d.apply.arg_kind()) {
                (Some(c), ArgKind::None) => format!("[-{c}]"),
                (Some(c), ArgKind::Required) => format!("[-{c} {value}]"),
                (_, ArgKind::None) => format!("[--{}]", d.long),
                (_, ArgKind::Optional) if value.is_empty() => format!("[--{}]", d.long),
                (_, ArgKind::Required) => format!("[--{}={value}]", d.long),
                (_, ArgKind::Optional) => format!("[--{}[={value}]]", d.long),
            }
        })
        .chain(std::iter::once("script [args...]".to_owned()))
        .collect();
    wrap_words(&items, "Usage: sbatch ", "              ", 80)
}

/// Joins `words` into lines of at most `width` columns; the first line starts with `first`, the
/// others with `indent` (both the same width).
fn wrap_words(words: &[String], first: &str, indent: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::from(first);
    for word in words {
        if line.len() > indent.len() && line.len() + 1 + word.len() > width {
            out.push_str(line.trim_end());
            out.push('\n');
            line = String::from(indent);
        }
        if line.len() > indent.len() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}
