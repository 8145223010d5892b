//! SPANK plugins in sbatch (Slurm's allocator context): the plugin stack named by the cluster
//! config's `plugstack` (`DROVER_PLUGSTACK` overrides; the config is the one every command finds,
//! see `crate::client`) is loaded, `init` runs, and the options plugins register become
//! command-line options: `--<name>[=value]` (or `--<name> value` for a required value) anywhere
//! before the script name, listed by `--help` under "Options provided by plugins:". Their values
//! are also read from `SLURM_SPANK__SLURM_SPANK_OPTION_<plugin>_<option>` first, as Slurm does.
//! Once the job is built, `init_post_opt` runs and the options and the job-control environment
//! go into the job's environment (how they reach the supervisor), then `exit`.
//!
//! Plugin options are taken out of the command line before the option table sees it (the table
//! is static); `#SBATCH` lines do not carry them yet.

use super::defs::{ArgKind, Command, table};
use drover_spank_compat::{Context, HasArg, Hook, Stack};
use std::path::PathBuf;

/// The allocator-context stack; `None` without plugins.
pub(crate) struct Allocator {
    stack: Option<Stack>,
}

fn plugstack_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("DROVER_PLUGSTACK") {
        return Some(PathBuf::from(path));
    }
    drover_shared::config::Config::load(&crate::client::config_path()).ok().map(|config| config.plugstack)
}

impl Allocator {
    /// Loads the plugins and runs `init`, then the options given in the environment.
    pub(crate) fn start(environment: &[(String, String)]) -> Result<Allocator, String> {
        let Some(path) = plugstack_path() else { return Ok(Allocator { stack: None }) };
        let stack = Stack::open(&path, Context::Allocator, &[]).map_err(|error| error.to_string())?;
        if stack.plugin_names().is_empty() {
            return Ok(Allocator { stack: None });
        }
        stack.call(Hook::Init).map_err(|error| error.to_string())?;
        stack
            .set_options_from_env(environment.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|error| error.to_string())?;
        Ok(Allocator { stack: Some(stack) })
    }

    /// Takes the plugin options out of `args` (sbatch's arguments, without argv[0]), handing
    /// each to its plugin; stops where getopt stops: at `--` or the first operand.
    pub(crate) fn take_options(&self, args: Vec<String>) -> Result<Vec<String>, String> {
        let Some(stack) = &self.stack else { return Ok(args) };
        let plugin_options = stack.options();
        let mut kept = Vec::with_capacity(args.len());
        let mut words = args.into_iter();
        while let Some(word) = words.next() {
            if word == "--" || !word.starts_with('-') || word == "-" {
                kept.push(word);
                kept.extend(words);
                break;
            }
            if let Some(body) = word.strip_prefix("--") {
                let (name, inline) = match body.split_once('=') {
                    Some((name, value)) => (name, Some(value.to_owned())),
                    None => (body, None),
                };
                if let Some(option) = plugin_options.iter().find(|option| option.name == name) {
                    let value = match (option.has_arg, inline) {
                        (HasArg::No, Some(_)) => return Err(format!("option '--{name}' doesn't allow an argument")),
                        (HasArg::Required, None) => {
                            Some(words.next().ok_or_else(|| format!("option '--{name}' requires an argument"))?)
                        }
                        (_, inline) => inline,
                    };
                    stack.set_option(name, value.as_deref()).map_err(|error| error.to_string())?;
                    continue;
                }
                let takes_next = inline.is_none()
                    && table(Command::Sbatch)
                        .find(|def| def.long == name)
                        .is_some_and(|def| def.apply.arg_kind() == ArgKind::Required);
                kept.push(word);
                if takes_next {
                    kept.extend(words.next());
                }
                continue;
            }
            // Short options: the next word is a value when the last letter wants one.
            let mut takes_next = false;
            for (idx, letter) in word.char_indices().skip(1) {
                if let Some(def) = table(Command::Sbatch).find(|def| def.short == Some(letter))
                    && def.apply.arg_kind() == ArgKind::Required
                {
                    takes_next = idx + letter.len_utf8() == word.len();
                    break;
                }
            }
            kept.push(word);
            if takes_next {
                kept.extend(words.next());
            }
        }
        Ok(kept)
    }

    /// The `--help` section for plugin options (empty without any).
    pub(crate) fn help(&self) -> String {
        self.stack.as_ref().map(|stack| format!("\n{}", stack.help())).filter(|text| text.len() > 1).unwrap_or_default()
    }

    /// `init_post_opt`, the options and job-control variables into the job's `environment`,
    /// then `exit`.
    pub(crate) fn finish(self, environment: &mut Vec<(String, String)>) -> Result<(), String> {
        let Some(stack) = self.stack else { return Ok(()) };
        stack.call(Hook::InitPostOpt).map_err(|error| error.to_string())?;
        for (name, value) in stack.job_env_additions() {
            environment.retain(|(n, _)| *n != name);
            environment.push((name, value));
        }
        stack.exit().map_err(|error| error.to_string())
    }
}
