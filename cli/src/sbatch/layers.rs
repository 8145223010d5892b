//! sbatch's own two sources of options, each read into its own [`Layer`] through the one option
//! table: the `SBATCH_*` environment variables and the script's `#SBATCH` directives. The third,
//! the command line, is read by [`crate::options::layers::command_line`] as srun's and salloc's is.
//!
//! Each reader reports problems in its own terms: the variable name for the environment, and
//! `file:line:column` for a directive.

use super::directives::Header;
use crate::options::defs::{ArgKind, Command, Ctx, OptionError, Scope, table};
use crate::options::getopt::{ScanErrorKind, scan};
use crate::options::layers::{Given, Layer, Origin, apply, describe};

/// Whether an environment value turns a flag on: empty, `yes`, or a non-zero number.
fn flag_enabled(value: &str) -> bool {
    let value = value.trim();
    value.is_empty() || value.eq_ignore_ascii_case("yes") || value.parse::<i64>().is_ok_and(|n| n != 0)
}

/// Reads the `SBATCH_*` variables of `env`, in table order.
pub(crate) fn environment(env: &[(String, String)], ctx: &Ctx<'_>) -> Result<Layer, String> {
    let mut layer = Layer::default();
    for def in table(Command::Sbatch) {
        let Some(var) = def.env else { continue };
        let Some((_, raw)) = env.iter().find(|(name, _)| name == var) else { continue };
        let value = match def.apply.arg_kind() {
            ArgKind::None if !flag_enabled(raw) => continue,
            ArgKind::None => None,
            ArgKind::Required if raw.is_empty() => continue,
            ArgKind::Optional if raw.is_empty() => None,
            ArgKind::Required | ArgKind::Optional => Some(raw.as_str()),
        };
        apply(def, value, &mut layer.args, ctx).map_err(|e| format!("{var}: {}", describe(def, &e)))?;
        layer.given.push(Given { def, value: value.map(str::to_owned), origin: Origin::Environment(var) });
    }
    Ok(layer)
}

/// Reads the directives of a script named `file` (as the user named it, or `(stdin)`).
pub(crate) fn directives(header: &Header, file: &str, ctx: &Ctx<'_>) -> Result<Layer, String> {
    let mut layer = Layer::default();
    for directive in &header.directives {
        let at = |column: usize, message: String| format!("{file}:{}:{column}: {message}", directive.line);
        let texts: Vec<&str> = directive.words.iter().map(|w| w.text.as_str()).collect();
        let scanned = scan(&texts, Command::Sbatch).map_err(|e| {
            let column = directive.words.get(e.word_idx).map_or(1, |w| w.column_at(e.offset));
            let hint = match e.kind {
                ScanErrorKind::UnrecognizedLong(_) | ScanErrorKind::InvalidShort(_) => {
                    ": expected an sbatch option (see sbatch --help)"
                }
                ScanErrorKind::MissingLongArgument(_) | ScanErrorKind::MissingShortArgument(_) => {
                    ": expected its value on the same line"
                }
                ScanErrorKind::Ambiguous(..) | ScanErrorKind::UnexpectedArgument(_) => "",
            };
            at(column, format!("{}{hint}", e.kind))
        })?;
        if let Some(word) = directive.words.get(scanned.operands_idx) {
            return Err(at(
                word.start,
                format!("invalid directive `{}`: expected an option such as --time=10 or -N 2", word.text),
            ));
        }
        for found in scanned.found {
            let option_column = directive.words.get(found.word_idx).map_or(1, |w| w.start);
            if found.def.scope == Scope::CommandLine {
                return Err(at(
                    option_column,
                    format!("{} is only valid on the command line", found.def.display_name()),
                ));
            }
            if let Err(e) = apply(found.def, found.value.as_deref(), &mut layer.args, ctx) {
                let column = match (&e, found.value_at) {
                    (OptionError::Value(_), Some((word_idx, offset))) => {
                        directive.words.get(word_idx).map_or(option_column, |w| w.column_at(offset))
                    }
                    _ => option_column,
                };
                return Err(at(column, describe(found.def, &e)));
            }
            layer.given.push(Given { def: found.def, value: found.value, origin: Origin::Script(directive.line) });
        }
    }
    Ok(layer)
}
