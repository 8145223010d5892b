//! One source of options read through the one option table into a [`Layer`], and the reader that
//! sbatch, srun and salloc share: their command line ([`command_line`]), whose problems are
//! reported in getopt's words. sbatch's other two sources, the `SBATCH_*` environment and the
//! script's `#SBATCH` directives, are read into the same [`Layer`] by `crate::sbatch::layers`.

use super::defs::{Apply, Command, Ctx, OptionDef, OptionError};
use super::getopt::scan;
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
pub(crate) fn apply(
    def: &'static OptionDef,
    value: Option<&str>,
    args: &mut LowArgs,
    ctx: &Ctx<'_>,
) -> Result<(), OptionError> {
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
