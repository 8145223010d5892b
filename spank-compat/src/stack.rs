//! [`Stack`]: the loaded plugins of one process, and the host-side calls that drive them through
//! a context's hooks in Slurm's order.

use crate::conf::{PlugStack, PlugStackEntry};
use crate::error::SpankError;
use crate::log::{LogLevel, host_log};
use crate::session::{self, HandleCell, Plugin, RegisteredOption, Session, TaskState, option_env_name};
use crate::sys::{self, Library, OptionFn, Outcome, SpankFn};
use std::ffi::{CStr, CString, c_char, c_int, c_uint};
use std::path::{Path, PathBuf};

/// `spank_context_t`: which program hosts the stack. The values are the ABI's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Context {
    /// `S_CTX_ERROR`: no stack is active.
    Error = 0,
    /// `S_CTX_LOCAL`: `srun`.
    Local = 1,
    /// `S_CTX_REMOTE`: the job's supervisor (Slurm's slurmstepd).
    Remote = 2,
    /// `S_CTX_ALLOCATOR`: `sbatch`, `salloc`.
    Allocator = 3,
    /// `S_CTX_SLURMD`: the node daemon.
    Slurmd = 4,
    /// `S_CTX_JOB_SCRIPT`: prolog and epilog.
    JobScript = 5,
}

/// The twelve callbacks, in the order of their symbols' table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `slurm_spank_init`
    Init,
    /// `slurm_spank_job_prolog`
    JobProlog,
    /// `slurm_spank_init_post_opt`
    InitPostOpt,
    /// `slurm_spank_local_user_init`
    LocalUserInit,
    /// `slurm_spank_user_init`
    UserInit,
    /// `slurm_spank_task_init_privileged`
    TaskInitPrivileged,
    /// `slurm_spank_task_init`
    TaskInit,
    /// `slurm_spank_task_post_fork`
    TaskPostFork,
    /// `slurm_spank_task_exit`
    TaskExit,
    /// `slurm_spank_job_epilog`
    JobEpilog,
    /// `slurm_spank_slurmd_exit`
    SlurmdExit,
    /// `slurm_spank_exit`
    Exit,
}

impl Hook {
    /// Every hook.
    pub const ALL: [Hook; 12] = [
        Hook::Init,
        Hook::JobProlog,
        Hook::InitPostOpt,
        Hook::LocalUserInit,
        Hook::UserInit,
        Hook::TaskInitPrivileged,
        Hook::TaskInit,
        Hook::TaskPostFork,
        Hook::TaskExit,
        Hook::JobEpilog,
        Hook::SlurmdExit,
        Hook::Exit,
    ];

    /// The callback's symbol name.
    pub fn symbol(self) -> &'static str {
        match self {
            Hook::Init => "slurm_spank_init",
            Hook::JobProlog => "slurm_spank_job_prolog",
            Hook::InitPostOpt => "slurm_spank_init_post_opt",
            Hook::LocalUserInit => "slurm_spank_local_user_init",
            Hook::UserInit => "slurm_spank_user_init",
            Hook::TaskInitPrivileged => "slurm_spank_task_init_privileged",
            Hook::TaskInit => "slurm_spank_task_init",
            Hook::TaskPostFork => "slurm_spank_task_post_fork",
            Hook::TaskExit => "slurm_spank_task_exit",
            Hook::JobEpilog => "slurm_spank_job_epilog",
            Hook::SlurmdExit => "slurm_spank_slurmd_exit",
            Hook::Exit => "slurm_spank_exit",
        }
    }

    fn idx(self) -> usize {
        Hook::ALL.iter().position(|hook| *hook == self).unwrap_or(0)
    }

    /// Whether the hook is about one task (`S_TASK_*` items are available).
    pub(crate) fn is_per_task(self) -> bool {
        matches!(self, Hook::TaskInitPrivileged | Hook::TaskInit | Hook::TaskPostFork | Hook::TaskExit)
    }
}

/// Step ids with a special meaning (`S_JOB_STEPID`).
pub const STEP_ID_BATCH: u32 = 0xffff_fffb;
/// The extern step.
pub const STEP_ID_EXTERN: u32 = 0xffff_fffc;
/// An interactive step.
pub const STEP_ID_INTERACTIVE: u32 = 0xffff_fffa;

/// What the host knows of the job (and step), answered through `spank_get_item`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobInfo {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (`S_JOB_SUPPLEMENTARY_GIDS`).
    pub groups: Vec<u32>,
    pub job_id: u32,
    /// [`STEP_ID_BATCH`] for a batch job.
    pub step_id: u32,
    pub n_nodes: u32,
    /// This node's index in the allocation.
    pub node_id: u32,
    pub local_task_count: u32,
    pub total_task_count: u32,
    /// `S_JOB_NCPUS` is a `uint16_t` in the ABI.
    pub n_cpus: u16,
    pub argv: Vec<String>,
    /// The step environment the tasks start from; plugins change it with `spank_setenv`.
    pub env: Vec<(String, String)>,
    /// The global id of each local task (index = local id); empty means local id = global id.
    pub task_global_ids: Vec<u32>,
    pub cpus_per_task: u32,
    /// E.g. `0-3,8`.
    pub job_alloc_cores: String,
    /// MB.
    pub job_alloc_mem: u64,
    pub step_alloc_cores: String,
    /// MB.
    pub step_alloc_mem: u64,
    pub restart_count: u32,
    /// 0 when the job is not part of an array.
    pub array_job_id: u32,
    pub array_task_id: u32,
}

impl JobInfo {
    pub(crate) fn global_id(&self, local_id: u32) -> u32 {
        self.task_global_ids.get(local_id as usize).copied().unwrap_or(local_id)
    }
}

/// Whether an option takes an argument (`has_arg` in getopt_long's terms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HasArg {
    No,
    Required,
    Optional,
}

/// A command-line option a plugin registered: `--<name>[=<arginfo>]  <usage>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginOption {
    pub plugin: String,
    pub name: String,
    pub arginfo: Option<String>,
    pub usage: String,
    pub has_arg: HasArg,
}

/// The `spank_option` layout (x86_64: 40 bytes).
#[repr(C)]
pub(crate) struct RawOption {
    pub(crate) name: *const c_char,
    pub(crate) arginfo: *const c_char,
    pub(crate) usage: *const c_char,
    pub(crate) has_arg: c_int,
    pub(crate) val: c_int,
    pub(crate) cb: Option<OptionFn>,
}

/// The plugin version a plugin must have been built for: 22.05, any micro version.
const HOST_VERSION: u32 = 0x16_05_08;

/// The plugins of this process, loaded for one context. One per process; dropping it unloads
/// them. See the crate docs for the order a context calls the hooks in.
#[derive(Debug)]
pub struct Stack {
    warnings: Vec<String>,
}

impl Stack {
    /// Reads `plugstack` (a missing file is an empty stack) and loads its plugins for `context`.
    pub fn open(plugstack: &Path, context: Context, plugin_dirs: &[PathBuf]) -> Result<Stack, SpankError> {
        let conf = PlugStack::read(plugstack)?;
        Stack::load(&conf, context, plugin_dirs)
    }

    /// Loads the plugins of `conf` with `RTLD_NOW` for `context`. A `required` plugin that fails
    /// to load fails the whole stack; an `optional` one is skipped with a warning.
    pub fn load(conf: &PlugStack, context: Context, plugin_dirs: &[PathBuf]) -> Result<Stack, SpankError> {
        {
            let mut guard = session::lock();
            if guard.is_some() {
                return Err(SpankError::Busy);
            }
            *guard = Some(Session::new(context));
        }
        let mut stack = Stack { warnings: conf.warnings.clone() };
        for entry in &conf.entries {
            match load_plugin(entry, context, plugin_dirs) {
                Ok(Some(loaded)) => stack.add(loaded, context)?,
                Ok(None) => {}
                Err(reason) if entry.required => {
                    return Err(SpankError::Load { path: entry.path.clone(), reason });
                }
                Err(reason) => {
                    let warning = format!(
                        "{}: optional SPANK plugin {} not loaded: {reason}",
                        entry.origin,
                        entry.path.display()
                    );
                    host_log(LogLevel::Error, &warning);
                    stack.warnings.push(warning);
                }
            }
        }
        Ok(stack)
    }

    fn add(&mut self, loaded: Loaded, context: Context) -> Result<(), SpankError> {
        let mut guard = session::lock();
        let session = guard.as_mut().ok_or(SpankError::Poisoned)?;
        let plugin_idx = session.plugins.len();
        if context != Context::Allocator {
            for raw in &loaded.options {
                // SAFETY: the table entries come from the plugin's `spank_options` array, whose
                // strings live as long as the library does.
                if let Err(code) = unsafe { register_option(session, plugin_idx, raw) } {
                    self.warnings.push(format!(
                        "SPANK plugin {}: option table entry refused: {}",
                        loaded.plugin.name,
                        code.message()
                    ));
                }
            }
        }
        session.plugins.push(loaded.plugin);
        Ok(())
    }

    /// Lines of plugstack.conf that were skipped and optional plugins that did not load.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The context the stack was loaded for.
    pub fn context(&self) -> Context {
        session::lock().as_ref().map_or(Context::Error, |session| session.context)
    }

    /// The names of the loaded plugins, in stack order.
    pub fn plugin_names(&self) -> Vec<String> {
        session::lock().as_ref().map_or_else(Vec::new, |s| s.plugins.iter().map(|p| p.name.clone()).collect())
    }

    /// Sets what `spank_get_item` answers; in the remote context also the step environment.
    pub fn set_job(&self, job: JobInfo) {
        if let Some(session) = session::lock().as_mut() {
            session.env = job.env.clone();
            session.job = Some(job);
        }
    }

    /// Replaces the step environment plugins see and change (remote context), and the start
    /// [`Stack::apply_env_changes`] compares with: in a forked task, its own environment, so that
    /// `task_init` sees (`S_JOB_ENV`, `spank_getenv`) and changes exactly what the task gets.
    pub fn set_env(&self, env: Vec<(String, String)>) {
        if let Some(session) = session::lock().as_mut() {
            if let Some(job) = session.job.as_mut() {
                job.env.clone_from(&env);
            }
            session.env = env;
        }
    }

    /// The step environment as plugins left it (remote context): what the tasks get.
    pub fn env(&self) -> Vec<(String, String)> {
        session::lock().as_ref().map_or_else(Vec::new, |session| session.env.clone())
    }

    /// Applies the changes plugins made to the step environment (remote context: `spank_setenv`,
    /// `spank_unsetenv`, and the removal of the option variables) to `env`, an environment built
    /// independently from the same start (the task's own, with its pid in it).
    pub fn apply_env_changes(&self, env: &mut Vec<(String, String)>) {
        let guard = session::lock();
        let Some(session) = guard.as_ref() else { return };
        let initial = session.job.as_ref().map_or(&[][..], |job| job.env.as_slice());
        for (name, _) in initial {
            if session.env_get(name).is_none() {
                env.retain(|(n, _)| n != name);
            }
        }
        for (name, value) in &session.env {
            if initial.iter().any(|(n, v)| n == name && v == value) {
                continue;
            }
            match env.iter_mut().find(|(n, _)| n == name) {
                Some(entry) => entry.1.clone_from(value),
                None => env.push((name.clone(), value.clone())),
            }
        }
    }

    /// The job-control environment plugins set (local and allocator contexts).
    pub fn job_control_env(&self) -> Vec<(String, String)> {
        session::lock().as_ref().map_or_else(Vec::new, |session| session.job_control_env.clone())
    }

    /// Calls `hook` of every plugin that has it, in stack order. A non-zero return from a
    /// required plugin stops the chain with [`SpankError::HookFailed`]; from an optional one it
    /// is logged. A crash stops everything with [`SpankError::Crashed`].
    pub fn call(&self, hook: Hook) -> Result<(), SpankError> {
        let n_plugins = {
            let guard = session::lock();
            let session = guard.as_ref().ok_or(SpankError::Poisoned)?;
            if session.poisoned {
                return Err(SpankError::Poisoned);
            }
            session.plugins.len()
        };
        for plugin_idx in 0..n_plugins {
            let (callback, handle, ac, av, name, required) = {
                let mut guard = session::lock();
                let session = guard.as_mut().ok_or(SpankError::Poisoned)?;
                let plugin = &mut session.plugins[plugin_idx];
                let Some(callback) = plugin.callbacks[hook.idx()] else { continue };
                let ac = c_int::try_from(plugin.argv.len() - 1).unwrap_or(0);
                let call =
                    (callback, plugin.handle_ptr(), ac, plugin.argv.as_mut_ptr(), plugin.name.clone(), plugin.required);
                session.current = Some((plugin_idx, hook));
                call
            };
            // SAFETY: `callback` is this plugin's symbol for `hook`, called with its handle and
            // its own NULL-terminated argument array, both owned by the session, which is not
            // dropped while `self` lives.
            let outcome = unsafe { sys::call_guarded(callback, handle, ac, av) };
            let mut guard = session::lock();
            if let Some(session) = guard.as_mut() {
                session.current = None;
            }
            match outcome {
                Outcome::Returned(0) => {}
                Outcome::Returned(rc) if required => {
                    return Err(SpankError::HookFailed { plugin: name, hook: hook.symbol(), rc });
                }
                Outcome::Returned(rc) => {
                    host_log(LogLevel::Error, &format!("spank: {name}: {} failed (returned {rc})", hook.symbol()));
                }
                Outcome::Crashed(signal) => {
                    if let Some(session) = guard.as_mut() {
                        session.poisoned = true;
                    }
                    return Err(SpankError::Crashed {
                        plugin: name,
                        hook: hook.symbol(),
                        signal: sys::signal_name(signal),
                    });
                }
            }
        }
        Ok(())
    }

    /// The options plugins registered (without the disabled duplicates), for `--help` and the
    /// command-line parser.
    pub fn options(&self) -> Vec<PluginOption> {
        let guard = session::lock();
        let Some(session) = guard.as_ref() else { return Vec::new() };
        session
            .options
            .iter()
            .filter(|option| !option.disabled)
            .map(|option| PluginOption {
                plugin: session.plugins.get(option.plugin_idx).map_or_else(String::new, |p| p.name.clone()),
                name: option.name.clone(),
                arginfo: option.arginfo.clone(),
                usage: option.usage.clone(),
                has_arg: match option.has_arg {
                    0 => HasArg::No,
                    1 => HasArg::Required,
                    _ => HasArg::Optional,
                },
            })
            .collect()
    }

    /// `--help`'s section: `Options provided by plugins:` and one line per option; empty when no
    /// plugin registered one.
    pub fn help(&self) -> String {
        let options = self.options();
        if options.is_empty() {
            return String::new();
        }
        let mut help = String::from("Options provided by plugins:\n");
        for option in options {
            let mut left = format!("      --{}", option.name);
            match (&option.arginfo, option.has_arg) {
                (Some(info), HasArg::Optional) => left.push_str(&format!("[={info}]")),
                (Some(info), _) => left.push_str(&format!("={info}")),
                (None, _) => {}
            }
            help.push_str(&format!("{left:<30} {}\n", option.usage));
        }
        help
    }

    /// The user gave `--<name>[=<optarg>]` (local and allocator contexts): runs the option's
    /// callback with `remote = 0` and remembers the value. A refused value is Slurm's
    /// `Invalid --<name> argument: <arg>`.
    pub fn set_option(&self, name: &str, optarg: Option<&str>) -> Result<(), SpankError> {
        self.apply_option(|option, _| option.name == name, optarg, false)?
            .then_some(())
            .ok_or_else(|| SpankError::UnknownOption { name: name.to_owned() })
    }

    /// Options given in the environment as `SLURM_SPANK__SLURM_SPANK_OPTION_<plugin>_<option>`;
    /// call this before the command line's [`Stack::set_option`]s, as Slurm does.
    pub fn set_options_from_env<I, K, V>(&self, env: I) -> Result<(), SpankError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        for (key, value) in env {
            let Some(env_name) = key.as_ref().strip_prefix("SLURM_SPANK_") else { continue };
            let value = value.as_ref();
            let matches = |option: &RegisteredOption, plugin: &str| option_env_name(plugin, &option.name) == env_name;
            let optarg = (!value.is_empty()).then_some(value);
            self.apply_option(matches, optarg, false)?;
        }
        Ok(())
    }

    /// What the job's environment must carry for the options given here (local and allocator
    /// contexts, after `init_post_opt`): `_SLURM_SPANK_OPTION_<plugin>_<option>=<arg or "">`
    /// for each, then `SLURM_SPANK_<NAME>=<value>` for each job-control variable (sbatch's rule).
    pub fn job_env_additions(&self) -> Vec<(String, String)> {
        let guard = session::lock();
        let Some(session) = guard.as_ref() else { return Vec::new() };
        let mut env: Vec<(String, String)> = session
            .options
            .iter()
            .filter(|option| !option.disabled)
            .filter_map(|option| {
                let value = option.value.as_ref()?;
                let plugin = &session.plugins.get(option.plugin_idx)?.name;
                Some((option_env_name(plugin, &option.name), value.clone().unwrap_or_default()))
            })
            .collect();
        for (name, value) in &session.job_control_env {
            let name = name.strip_prefix("SPANK_").unwrap_or(name);
            env.push((format!("SLURM_SPANK_{name}"), value.clone()));
        }
        env
    }

    /// Remote context: hands the options that travelled in the step environment to their
    /// plugins (`remote = 1`), then removes every `_SLURM_SPANK_OPTION_*` and
    /// `SPANK__SLURM_SPANK_OPTION_*` variable from it.
    pub fn apply_remote_options(&self) -> Result<(), SpankError> {
        let travelled: Vec<(String, String)> = {
            let guard = session::lock();
            let Some(session) = guard.as_ref() else { return Ok(()) };
            session.env.iter().filter(|(name, _)| name.starts_with("_SLURM_SPANK_OPTION_")).cloned().collect()
        };
        for (name, value) in travelled {
            let matches = |option: &RegisteredOption, plugin: &str| option_env_name(plugin, &option.name) == name;
            let optarg = (!value.is_empty()).then_some(value.as_str());
            self.apply_option(matches, optarg, true)?;
        }
        if let Some(session) = session::lock().as_mut() {
            session.env.retain(|(name, _)| {
                !name.starts_with("_SLURM_SPANK_OPTION_") && !name.starts_with("SPANK__SLURM_SPANK_OPTION_")
            });
        }
        Ok(())
    }

    /// Runs the callback of the first enabled option `matches` accepts; `Ok(false)` if none did.
    fn apply_option(
        &self,
        matches: impl Fn(&RegisteredOption, &str) -> bool,
        optarg: Option<&str>,
        remote: bool,
    ) -> Result<bool, SpankError> {
        let (cb, val, name, plugin) = {
            let mut guard = session::lock();
            let session = guard.as_mut().ok_or(SpankError::Poisoned)?;
            if session.poisoned {
                return Err(SpankError::Poisoned);
            }
            let plugins = &session.plugins;
            let Some(option) = session.options.iter_mut().find(|option| {
                !option.disabled && plugins.get(option.plugin_idx).is_some_and(|plugin| matches(option, &plugin.name))
            }) else {
                return Ok(false);
            };
            let optarg = if option.has_arg == 0 { None } else { optarg.map(str::to_owned) };
            option.value = Some(optarg);
            (option.cb, option.val, option.name.clone(), plugins[option.plugin_idx].name.clone())
        };
        let Some(cb) = cb else { return Ok(true) };
        let c_optarg = optarg.map(|arg| CString::new(arg).unwrap_or_default());
        // SAFETY: `cb` comes from the plugin's option registration; the plugin stays loaded
        // while `self` lives; `c_optarg` outlives the call.
        match unsafe { sys::call_option_guarded(cb, val, c_optarg.as_deref(), remote) } {
            Outcome::Returned(0) => Ok(true),
            Outcome::Returned(_) => Err(SpankError::InvalidOption { name, arg: optarg.unwrap_or_default().to_owned() }),
            Outcome::Crashed(signal) => {
                if let Some(session) = session::lock().as_mut() {
                    session.poisoned = true;
                }
                Err(SpankError::Crashed { plugin, hook: "an option callback", signal: sys::signal_name(signal) })
            }
        }
    }

    /// Remote context, before the tasks: `init`, the travelled options, `init_post_opt`.
    pub fn remote_init(&self) -> Result<(), SpankError> {
        self.call(Hook::Init)?;
        self.apply_remote_options()?;
        self.call(Hook::InitPostOpt)
    }

    /// Remote context: `user_init`, with the job's user as the effective identity when the
    /// process runs as root (privileges come back afterwards).
    pub fn user_init(&self) -> Result<(), SpankError> {
        let job = session::lock().as_ref().and_then(|session| session.job.clone());
        let saved = match &job {
            Some(job) if sys::is_root() && job.uid != 0 => Some(sys::drop_effective(job.uid, job.gid, &job.groups)?),
            _ => None,
        };
        let result = self.call(Hook::UserInit);
        if let Some(saved) = saved {
            sys::restore_effective(&saved)?;
        }
        result
    }

    fn set_task(&self, local_id: u32, pid: i32, exit_status: Option<i32>) {
        if let Some(session) = session::lock().as_mut() {
            let global_id = session.job.as_ref().map_or(local_id, |job| job.global_id(local_id));
            session.task = Some(TaskState { local_id, global_id, pid, exit_status });
        }
    }

    fn clear_task(&self) {
        if let Some(session) = session::lock().as_mut() {
            session.task = None;
        }
    }

    fn call_for_task(&self, hook: Hook, local_id: u32, pid: i32, exit_status: Option<i32>) -> Result<(), SpankError> {
        self.set_task(local_id, pid, exit_status);
        let result = self.call(hook);
        self.clear_task();
        result
    }

    /// In the forked task, still root: `task_init_privileged`.
    pub fn task_init_privileged(&self, local_id: u32) -> Result<(), SpankError> {
        // SAFETY: plain getter.
        let pid = unsafe { libc::getpid() };
        self.call_for_task(Hook::TaskInitPrivileged, local_id, pid, None)
    }

    /// In the forked task, as the user, just before exec: `task_init`. Exec with [`Stack::env`].
    pub fn task_init(&self, local_id: u32) -> Result<(), SpankError> {
        // SAFETY: plain getter.
        let pid = unsafe { libc::getpid() };
        self.call_for_task(Hook::TaskInit, local_id, pid, None)
    }

    /// In the supervisor, once the task `pid` is forked: `task_post_fork`.
    pub fn task_post_fork(&self, local_id: u32, pid: i32) -> Result<(), SpankError> {
        if let Some(session) = session::lock().as_mut() {
            let global_id = session.job.as_ref().map_or(local_id, |job| job.global_id(local_id));
            session.tasks.push((pid, local_id, global_id));
        }
        self.call_for_task(Hook::TaskPostFork, local_id, pid, None)
    }

    /// In the supervisor, once the task is reaped with `wait_status` (as `waitpid` gives it):
    /// `task_exit`.
    pub fn task_exit(&self, local_id: u32, pid: i32, wait_status: i32) -> Result<(), SpankError> {
        self.call_for_task(Hook::TaskExit, local_id, pid, Some(wait_status))
    }

    /// The last hook of local, allocator and remote contexts: `exit`.
    pub fn exit(&self) -> Result<(), SpankError> {
        self.call(Hook::Exit)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let session = session::lock().take();
        drop(session);
    }
}

/// A plugin loaded but not yet in the session.
struct Loaded {
    plugin: Plugin,
    options: Vec<RawOption>,
}

fn resolve(path: &Path, plugin_dirs: &[PathBuf]) -> PathBuf {
    if path.is_absolute() {
        return path.to_owned();
    }
    plugin_dirs.iter().map(|dir| dir.join(path)).find(|candidate| candidate.exists()).unwrap_or_else(|| path.to_owned())
}

/// Loads one plugin; `Ok(None)` when the context skips it.
fn load_plugin(entry: &PlugStackEntry, context: Context, plugin_dirs: &[PathBuf]) -> Result<Option<Loaded>, String> {
    let path = resolve(&entry.path, plugin_dirs);
    let library = Library::open(&path)?;
    let name = read_str_symbol(&library, c"plugin_name").ok_or("it does not define plugin_name")?;
    let plugin_type = read_str_symbol(&library, c"plugin_type").ok_or("it does not define plugin_type")?;
    if plugin_type != "spank" {
        return Err(format!("its plugin_type is `{plugin_type}`, not `spank`"));
    }
    let version_ptr = library.symbol(c"plugin_version").ok_or("it does not define plugin_version")?;
    // SAFETY: `plugin_version` is an `unsigned int` data symbol of the plugin (SPANK_PLUGIN).
    let version = unsafe { *version_ptr.cast::<c_uint>() };
    if version & 0x00ff_ff00 != HOST_VERSION & 0x00ff_ff00 {
        return Err(format!(
            "it was built for Slurm {}.{:02}, the host speaks {}.{:02}",
            version >> 16,
            (version >> 8) & 0xff,
            HOST_VERSION >> 16,
            (HOST_VERSION >> 8) & 0xff
        ));
    }
    if let Some(init) = library.symbol(c"init") {
        // SAFETY: a plugin's `init` symbol is `int init(void)` by the plugin ABI.
        let init: sys::InitFn = unsafe { std::mem::transmute::<*mut std::ffi::c_void, sys::InitFn>(init) };
        // SAFETY: see above; the library stays loaded.
        match unsafe { sys::call_init_guarded(init) } {
            Outcome::Returned(0) => {}
            Outcome::Returned(rc) => return Err(format!("its init() returned {rc}")),
            Outcome::Crashed(signal) => return Err(format!("its init() crashed with {}", sys::signal_name(signal))),
        }
    }
    let mut callbacks: [Option<SpankFn>; 12] = [None; 12];
    for (slot, hook) in callbacks.iter_mut().zip(Hook::ALL) {
        let symbol = CString::new(hook.symbol()).unwrap_or_default();
        *slot = library.symbol(&symbol).map(|address| {
            // SAFETY: every callback symbol has the `spank_f` signature by the plugin ABI.
            unsafe { std::mem::transmute::<*mut std::ffi::c_void, SpankFn>(address) }
        });
    }
    if callbacks.iter().all(Option::is_none) {
        return Err("it exports 0 symbols".to_owned());
    }
    let has = |hook: Hook| callbacks[hook.idx()].is_some();
    let keep = match context {
        Context::Slurmd => has(Hook::Init) || has(Hook::SlurmdExit),
        Context::JobScript => has(Hook::JobProlog) || has(Hook::JobEpilog),
        _ => true,
    };
    if !keep {
        return Ok(None);
    }
    let mut options = Vec::new();
    if let Some(table) = library.symbol(c"spank_options") {
        let mut entry = table.cast::<RawOption>().cast_const();
        // SAFETY: `spank_options` is an array of `struct spank_option` ended by an entry whose
        // name is NULL (SPANK_OPTIONS_TABLE_END); we stop there.
        unsafe {
            while !(*entry).name.is_null() {
                options.push(RawOption {
                    name: (*entry).name,
                    arginfo: (*entry).arginfo,
                    usage: (*entry).usage,
                    has_arg: (*entry).has_arg,
                    val: (*entry).val,
                    cb: (*entry).cb,
                });
                entry = entry.add(1);
            }
        }
    }
    let args: Vec<CString> = entry.args.iter().map(|arg| CString::new(arg.as_str()).unwrap_or_default()).collect();
    let mut argv: Vec<*mut c_char> = args.iter().map(|arg| arg.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let plugin = Plugin {
        name,
        required: entry.required,
        handle: Box::new(HandleCell { _magic: 0x5350_4b48 }),
        callbacks,
        _args: args,
        argv,
        _library: library,
    };
    Ok(Some(Loaded { plugin, options }))
}

fn read_str_symbol(library: &Library, name: &CStr) -> Option<String> {
    let address = library.symbol(name)?;
    // SAFETY: `plugin_name` and `plugin_type` are NUL-terminated `char[]` data symbols.
    Some(unsafe { CStr::from_ptr(address.cast::<c_char>()) }.to_string_lossy().into_owned())
}

/// Adds an option for `plugin_idx`, with `spank_option_register`'s rules.
///
/// # Safety
/// The strings of `raw` must be NULL or valid C strings.
pub(crate) unsafe fn register_option(
    session: &mut Session,
    plugin_idx: usize,
    raw: &RawOption,
) -> Result<(), crate::Espank> {
    use crate::Espank;
    if raw.name.is_null() || raw.usage.is_null() {
        return Err(Espank::BadArg);
    }
    // SAFETY: non-NULL, valid C strings by the caller's promise.
    let text = |ptr: *const c_char| unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned();
    let name = text(raw.name);
    if name.len() > 75 {
        return Err(Espank::NoSpace);
    }
    let mut disabled = false;
    if let Some(other) = session.options.iter().find(|option| option.name == name && !option.disabled) {
        if other.plugin_idx == plugin_idx {
            return Ok(());
        }
        let owner = session.plugins.get(other.plugin_idx).map_or("another plugin", |p| p.name.as_str());
        host_log(
            LogLevel::Error,
            &format!("spank: option --{name} is already provided by {owner}; this one is ignored"),
        );
        disabled = true;
    }
    session.options.push(RegisteredOption {
        plugin_idx,
        name,
        arginfo: (!raw.arginfo.is_null()).then(|| text(raw.arginfo)),
        usage: text(raw.usage),
        has_arg: raw.has_arg,
        val: raw.val,
        cb: raw.cb,
        value: None,
        disabled,
    });
    Ok(())
}
