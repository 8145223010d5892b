//! `--help`, `--usage` and `--version` text of sbatch, srun and salloc, generated from each
//! command's rows of the option table so it cannot drift from what the command accepts.

use super::defs::{ArgKind, Command, OptionDef, Section, table};

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

/// What follows the options in `command`'s usage line.
fn operands(command: Command) -> &'static str {
    match command {
        Command::Sbatch => "script [args...]",
        Command::Srun => "executable [args...]",
        Command::Salloc => "[command [args...]]",
    }
}

/// `command`'s `--help` text.
pub(crate) fn help(command: Command) -> String {
    let name = command.name();
    let mut out = format!("Usage: {name} [OPTIONS...] {}\n", operands(command));
    if command == Command::Sbatch {
        out.push_str("       sbatch [OPTIONS...] --wrap=\"command string\"\n");
    }
    for section in Section::ALL {
        let defs: Vec<&OptionDef> = table(command).filter(|d| d.section == section && d.is_supported()).collect();
        if defs.is_empty() {
            continue;
        }
        out.push('\n');
        out.push_str(section.title());
        out.push('\n');
        for def in defs {
            let synopsis = synopsis(def);
            let help = def.help_in(command);
            if synopsis.len() + 2 > HELP_COLUMN {
                out.push_str(&format!("{synopsis}\n{:HELP_COLUMN$}{help}\n", ""));
            } else {
                out.push_str(&format!("{synopsis:HELP_COLUMN$}{help}\n"));
            }
        }
    }
    let names = |keep: fn(&OptionDef) -> bool| {
        let mut names: Vec<String> = table(command).filter(|d| keep(d)).map(|d| d.display_name()).collect();
        names.sort();
        names
    };
    let ignored = names(|d| d.is_ignored());
    if !ignored.is_empty() {
        out.push_str(match command {
            Command::Sbatch => "\nAccepted and ignored (hints Drover has no use for; a warning says so):\n",
            Command::Srun | Command::Salloc => "\nAccepted and ignored (hints Drover has no use for):\n",
        });
        out.push_str(&wrap_words(&ignored, "  ", "  ", 80));
    }
    let not_yet = names(|d| !d.is_supported() && !d.is_ignored());
    if !not_yet.is_empty() {
        out.push_str("\nRecognized but not supported yet:\n");
        out.push_str(&wrap_words(&not_yet, "  ", "  ", 80));
    }
    out
}

/// `command`'s `--usage` text: every supported option in brackets.
pub(crate) fn usage(command: Command) -> String {
    let items: Vec<String> = table(command)
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
        // Slurm's sbatch --usage ends in `executable [args...]`, though its --help says `script`.
        .chain(std::iter::once(match command {
            Command::Sbatch => "executable [args...]".to_owned(),
            _ => operands(command).to_owned(),
        }))
        .collect();
    let first = format!("Usage: {} ", command.name());
    wrap_words(&items, &first, &" ".repeat(first.len()), 80)
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
