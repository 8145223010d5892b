//! The three sources of sbatch's options, each read into its own [`Layer`] through the one option
//! table: the command line, the `SBATCH_*` environment variables and the script's `#SBATCH`
//! directives. srun and salloc read only their command line, through the same reader.
//!
//! Each reader reports problems in its own terms: getopt's words for the command line, the variable
//! name for the environment, and `file:line:column` for a directive.

use super::defs::{Apply, ArgKind, Command, Ctx, OptionDef, OptionError, Scope, table};
use super::directives::Header;
use super::getopt::{ScanErrorKind, scan};
use super::lowargs::LowArgs;

/// Where one option came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    CommandLine,
    /// The `SBATCH_*` variable.
    Environment(&'static str),
    /// The directive's 1-based line.
    Script(usize),
}

/// One option as given, for `-v`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Given {
    pub(crate) def: &'static OptionDef,
    pub(crate) value: Option<String>,
    pub(crate) origin: Origin,
}

/// One source's options.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Layer {
    pub(crate) args: LowArgs,
    pub(crate) given: Vec<Given>,
}

/// Applies one occurrence of an option to `args`.
fn apply(def: &'static OptionDef, value: Option<&str>, args: &mut LowArgs, ctx: &Ctx<'_>) -> Result<(), OptionError> {
    match (def.apply, value) {
        (Apply::Flag(set), _) => {
            set(args);
            Ok(())
        }
        (Apply::Value(set), Some(value)) => set(args, value, ctx),
        // The scanner never lets a required value go missing; refuse rather than guess.
        (Apply::Value(_), None) => Err(OptionError::Conflict(format!("{} requires a value", def.display_name()))),
        (Apply::OptionalValue(set), value) => set(args, value, ctx),
        (Apply::NotYet(_), _) => Err(OptionError::NotSupported),
        (Apply::Ignored(_), _) => Ok(()),
    }
}

/// The message for an option that was refused, without its location.
pub(crate) fn describe(def: &OptionDef, error: &OptionError) -> String {
    match error {
        OptionError::Value(e) => e.to_string(),
        OptionError::Conflict(message) => message.clone(),
        OptionError::NotSupported => format!("{} is not supported yet", def.display_name()),
    }
}

/// The command line, read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CommandLine {
    pub(crate) layer: Layer,
    /// The script and its arguments.
    pub(crate) operands: Vec<String>,
    /// The first refused value, reported only if no `--help`-like option asks to answer first.
    pub(crate) error: Option<String>,
}

/// A command line getopt could not read: print it, then the "Try" line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UsageError(pub(crate) String);

/// Reads `command`'s command line.
pub(crate) fn command_line(args: &[String], ctx: &Ctx<'_>, command: Command) -> Result<CommandLine, UsageError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let scanned = scan(&words, command).map_err(|e| UsageError(e.kind.to_string()))?;
    let mut layer = Layer::default();
    let mut error = None;
    for mut found in scanned.found {
        // srun and salloc have always read `-n=4` as `-n 4`.
        let attached_short = words[found.word_idx].starts_with('-')
            && !words[found.word_idx].starts_with("--")
            && found.value_at.is_some_and(|(word_idx, _)| word_idx == found.word_idx);
        if command != Command::Sbatch && attached_short {
            found.value = found.value.map(|v| v.trim_start_matches('=').to_owned());
        }
        let value = found.value.as_deref();
        if let Err(e) = apply(found.def, value, &mut layer.args, ctx) {
            let message = match e {
                OptionError::Value(_) => format!("{}: {}", found.def.display_name(), describe(found.def, &e)),
                _ => describe(found.def, &e),
            };
            error.get_or_insert(message);
        }
        layer.given.push(Given { def: found.def, value: found.value, origin: Origin::CommandLine });
    }
    let operands = args[scanned.operands_idx..].to_vec();
    Ok(CommandLine { layer, operands, error })
}

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
