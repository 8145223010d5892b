//! SPANK plugins in the client commands: sbatch and salloc (Slurm's allocator context) and srun
//! (the local context). The plugin stack named by the cluster config's `plugstack`
//! (`DROVER_PLUGSTACK` overrides; the config is the one every command finds, see
//! `crate::client`) is loaded, `init` runs, and the options plugins register become options of
//! the command: `--<name>[=value]` (or `--<name> value` for a required value) anywhere before the
//! script or command, listed by `--help` under "Options provided by plugins:".
//!
//! Plugin options are taken out of the command line (and, for sbatch, out of the script's
//! `#SBATCH` lines) before the option table sees them (the table is static), and handed to their
//! plugins in one pass, lowest precedence first, so the last value a callback sees is the one
//! that wins: the script's directives, then `SLURM_SPANK__SLURM_SPANK_OPTION_<plugin>_<option>`
//! variables, then the command line. Then `init_post_opt` runs, and the given options and the
//! job-control environment go into the job's or step's environment (how they reach the remote
//! side, [`Plugins::job_env`]). srun then runs `local_user_init` once its step exists
//! ([`Plugins::local_user_init`]); every command ends with `exit` ([`Plugins::exit`]).

use crate::options::defs::{ArgKind, Command, table};
use drover_spank_compat::{Context, HasArg, Hook, JobInfo, LogLevel, PluginOption, Stack};
use std::cell::RefCell;
use std::path::PathBuf;

/// An option given to a plugin, not yet handed to it: its name and argument.
type Given = (String, Option<String>);

/// The command's plugin stack; without plugins every method does nothing.
pub(crate) struct Plugins {
    stack: Option<Stack>,
    command: Command,
    /// From the `#SBATCH` lines (sbatch), then the command line.
    script: RefCell<Vec<Given>>,
    command_line: RefCell<Vec<Given>>,
    /// The command's environment, for the options given there.
    environment: Vec<(String, String)>,
}

fn plugstack_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("DROVER_PLUGSTACK") {
        return Some(PathBuf::from(path));
    }
    crate::client::config().ok().map(|config| config.plugstack.clone())
}

/// The context `command` hosts plugins in.
fn context_of(command: Command) -> Context {
    match command {
        Command::Srun => Context::Local,
        _ => Context::Allocator,
    }
}

impl Plugins {
    /// Loads the plugins and runs `init`. `environment` is the command's own.
    pub(crate) fn start(command: Command, environment: &[(String, String)]) -> Result<Plugins, String> {
        let none = |stack| Plugins {
            stack,
            command,
            script: RefCell::default(),
            command_line: RefCell::default(),
            environment: environment.to_vec(),
        };
        let Some(path) = plugstack_path() else { return Ok(none(None)) };
        // Plugin lines as the command's own: `srun: …`, `srun: error: …`; `slurm_spank_log`
        // lines as they are; the debug levels not at all.
        let name = command.name();
        drover_spank_compat::set_log_sink(move |level, message| match level {
            LogLevel::SpankLog => eprintln!("{message}"),
            LogLevel::Error | LogLevel::Info => eprintln!("{name}: {}", level.format(message)),
            _ => {}
        });
        let stack = Stack::open(&path, context_of(command), &[]).map_err(|error| error.to_string())?;
        if stack.plugin_names().is_empty() {
            return Ok(none(None));
        }
        stack.call(Hook::Init).map_err(|error| error.to_string())?;
        Ok(none(Some(stack)))
    }

    /// The options the plugins registered.
    fn options(&self) -> Vec<PluginOption> {
        self.stack.as_ref().map(Stack::options).unwrap_or_default()
    }

    /// Takes the plugin options out of `args` (the command's arguments, without argv[0]); stops
    /// where getopt stops: at `--` or the first operand. They are handed to their plugins by
    /// [`Plugins::apply`].
    pub(crate) fn take_options(&self, args: Vec<String>) -> Result<Vec<String>, String> {
        if self.stack.is_none() {
            return Ok(args);
        }
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        let (kept, given) = self.split(&words, true)?;
        self.command_line.borrow_mut().extend(given);
        Ok(kept.into_iter().map(|idx| args[idx].clone()).collect())
    }

    /// Whether a plugin stack is loaded (without one, no word is a plugin option).
    pub(crate) fn loaded(&self) -> bool {
        self.stack.is_some()
    }

    /// sbatch: takes the plugin options out of the words of one `#SBATCH` line (they are handed
    /// to their plugins by [`Plugins::apply`], before the command line's) and returns the indices
    /// of the words to keep. sbatch's `crate::sbatch::directives::take_plugin_options` walks the
    /// script's lines.
    pub(crate) fn take_script_options(&self, words: &[&str]) -> Result<Vec<usize>, String> {
        let (kept, given) = self.split(words, false)?;
        self.script.borrow_mut().extend(given);
        Ok(kept)
    }

    /// The indices of the words that are not plugin options (with their values), and the plugin
    /// options. `stop_at_operand`: the rest after `--` or the first operand is kept unread.
    fn split(&self, words: &[&str], stop_at_operand: bool) -> Result<(Vec<usize>, Vec<Given>), String> {
        let plugin_options = self.options();
        let mut kept = Vec::with_capacity(words.len());
        let mut given = Vec::new();
        let mut idx = 0;
        while idx < words.len() {
            let word = words[idx];
            if word == "--" || !word.starts_with('-') || word == "-" {
                if stop_at_operand {
                    kept.extend(idx..words.len());
                    break;
                }
                kept.push(idx);
                idx += 1;
                continue;
            }
            let takes_next = if let Some(body) = word.strip_prefix("--") {
                let (name, inline) = match body.split_once('=') {
                    Some((name, value)) => (name, Some(value.to_owned())),
                    None => (body, None),
                };
                if let Some(option) = plugin_options.iter().find(|option| option.name == name) {
                    let value = match (option.has_arg, inline) {
                        (HasArg::No, Some(_)) => return Err(format!("option '--{name}' doesn't allow an argument")),
                        (HasArg::Required, None) => {
                            idx += 1;
                            Some(
                                words
                                    .get(idx)
                                    .map(|value| (*value).to_owned())
                                    .ok_or_else(|| format!("option '--{name}' requires an argument"))?,
                            )
                        }
                        (_, inline) => inline,
                    };
                    given.push((name.to_owned(), value));
                    idx += 1;
                    continue;
                }
                inline.is_none() && self.long_takes_value(name)
            } else {
                // Short options: the next word is a value when the last letter wants one.
                let mut takes_next = false;
                for (at, letter) in word.char_indices().skip(1) {
                    if let Some(def) = table(self.command).find(|def| def.short == Some(letter))
                        && def.apply.arg_kind() == ArgKind::Required
                    {
                        takes_next = at + letter.len_utf8() == word.len();
                        break;
                    }
                }
                takes_next
            };
            kept.push(idx);
            if takes_next && idx + 1 < words.len() {
                kept.push(idx + 1);
                idx += 1;
            }
            idx += 1;
        }
        Ok((kept, given))
    }

    /// Whether the command's long option `name` (or the one option it abbreviates) wants the
    /// next word as its value.
    fn long_takes_value(&self, name: &str) -> bool {
        let exact = table(self.command).find(|def| def.long == name);
        let def = exact.or_else(|| {
            let mut candidates = table(self.command).filter(|def| def.long.starts_with(name));
            let first = candidates.next();
            first.filter(|_| candidates.next().is_none())
        });
        def.is_some_and(|def| def.apply.arg_kind() == ArgKind::Required)
    }

    /// Hands every given option to its plugin, lowest precedence first: the script's, the
    /// environment's, the command line's. A refused value is Slurm's `Invalid --name argument`.
    pub(crate) fn apply(&self) -> Result<(), String> {
        let Some(stack) = &self.stack else { return Ok(()) };
        for (name, value) in self.script.borrow_mut().drain(..) {
            stack.set_option(&name, value.as_deref()).map_err(|error| error.to_string())?;
        }
        stack
            .set_options_from_env(self.environment.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|error| error.to_string())?;
        for (name, value) in self.command_line.borrow_mut().drain(..) {
            stack.set_option(&name, value.as_deref()).map_err(|error| error.to_string())?;
        }
        Ok(())
    }

    /// The `--help` section for plugin options (empty without any).
    pub(crate) fn help(&self) -> String {
        self.stack.as_ref().map(|stack| format!("\n{}", stack.help())).filter(|text| text.len() > 1).unwrap_or_default()
    }

    /// Applies the options ([`Plugins::apply`]), runs `init_post_opt` and returns what the job's
    /// or step's environment must carry: `_SLURM_SPANK_OPTION_<plugin>_<option>` for each given
    /// option, `SLURM_SPANK_<NAME>` for each job-control variable.
    pub(crate) fn job_env(&self) -> Result<Vec<(String, String)>, String> {
        let Some(stack) = &self.stack else { return Ok(Vec::new()) };
        self.apply()?;
        stack.call(Hook::InitPostOpt).map_err(|error| error.to_string())?;
        Ok(stack.job_env_additions())
    }

    /// salloc: what the command it runs gets so that `srun` inside sees the same plugin options
    /// (as environment-given options, `SLURM_SPANK__SLURM_SPANK_OPTION_<plugin>_<option>`),
    /// with the job-control variables; from [`Plugins::job_env`]'s answer.
    pub(crate) fn inherited_env(job_env: &[(String, String)]) -> Vec<(String, String)> {
        job_env
            .iter()
            .map(|(name, value)| {
                let name =
                    if name.starts_with("_SLURM_SPANK_OPTION_") { format!("SLURM_SPANK_{name}") } else { name.clone() };
                (name, value.clone())
            })
            .collect()
    }

    /// srun, once its step exists: `local_user_init` with what plugins may ask of the step.
    pub(crate) fn local_user_init(&self, job: JobInfo) -> Result<(), String> {
        let Some(stack) = &self.stack else { return Ok(()) };
        stack.set_job(job);
        stack.call(Hook::LocalUserInit).map_err(|error| error.to_string())
    }

    /// `exit`; the plugins are unloaded.
    pub(crate) fn exit(self) -> Result<(), String> {
        match self.stack {
            Some(stack) => stack.exit().map_err(|error| error.to_string()),
            None => Ok(()),
        }
    }

    /// sbatch: the options and job-control variables into the job's `environment`, then `exit`.
    pub(crate) fn finish(self, environment: &mut Vec<(String, String)>) -> Result<(), String> {
        for (name, value) in self.job_env()? {
            environment.retain(|(n, _)| *n != name);
            environment.push((name, value));
        }
        self.exit()
    }
}
