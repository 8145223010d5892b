//! Host for existing SPANK plugins: C shared objects built against Slurm's `<slurm/spank.h>`
//! (22.05 ABI), loaded unchanged.
//!
//! - [`PlugStack`] parses `plugstack.conf` (`required`/`optional` lines with arguments,
//!   `include` globs).
//! - [`Stack`] loads the plugins with `RTLD_NOW` (a missing symbol is named in the error) for one
//!   [`Context`] and drives their callbacks; there is one per process, because plugins reach the
//!   host through process-global C functions.
//! - The functions plugins call (`spank_get_item`, `spank_getenv`, `spank_option_getopt`, the
//!   `slurm_*` loggers, …) are defined by this crate: fixed-argument ones in Rust (`abi`), the
//!   variadic ones in a small C shim (`csrc/shim.c`). A binary that hosts plugins must export
//!   them: its build.rs prints
//!   `cargo:rustc-link-arg-bins=-Wl,--dynamic-list=$DEP_DROVER_SPANK_DYNLIST`.
//!
//! Hook order per context (Slurm's): allocator (`sbatch`, `salloc`) and local (`srun`): `init`,
//! options ([`Stack::set_option`] and [`Stack::set_options_from_env`], lowest precedence
//! first), `init_post_opt`, [`Stack::job_env_additions`] into the job or step; in srun
//! [`Stack::set_job`] and `local_user_init` once the step exists; `exit`. Remote (the job's
//! supervisor, an srun step's runner): [`Stack::set_job`], [`Stack::remote_init`] (`init`,
//! the options that travelled in the job environment, `init_post_opt`), [`Stack::user_init`]
//! (effective uid dropped to the user), fork; in the task [`Stack::task_init_privileged`] as root,
//! become the user, [`Stack::task_init`], exec with [`Stack::env`]; in the supervisor
//! [`Stack::task_post_fork`], [`Stack::task_exit`] when reaped, [`Stack::exit`]. Slurmd (the
//! node daemon, or a process standing for it): `init` when it starts ([`Stack::call`] with
//! [`Hook::Init`]), `slurmd_exit` when it stops. Job script (a process of its own, as root, around
//! each job): [`Stack::set_job`] with the job's id, uid and gid, then `job_prolog` before the job
//! or `job_epilog` after it. Those two contexts keep only the plugins that define one of their
//! hooks.
//!
//! Crash isolation: every plugin callback runs under a guard (sigsetjmp and handlers for
//! SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS on an alternate stack). A plugin that faults
//! makes the call return [`SpankError::Crashed`] naming the plugin, hook and signal, and the stack
//! refuses every later call ([`SpankError::Poisoned`]): the host reports the failure and stops
//! using plugins. Plugins only ever run in the per-job supervisor, the per-step runner and
//! noded's slurmd and job_script helpers (processes apart from noded) and in the client
//! commands, never inside noded, so the worst a plugin can do is end its job or step (or, in
//! the slurmd context's `init`, stop noded from starting, as it stops slurmd).

mod abi;
mod conf;
mod error;
mod log;
mod session;
mod stack;
mod sys;

pub use conf::{PlugStack, PlugStackEntry};
pub use error::{Espank, SpankError};
pub use log::{LogLevel, log_line, set_log_sink};
pub use session::option_env_name;
pub use stack::{
    Context, HasArg, Hook, JobInfo, PluginOption, STEP_ID_BATCH, STEP_ID_EXTERN, STEP_ID_INTERACTIVE, Stack,
};

/// The path of the linker's dynamic list naming every symbol plugins need from the host.
pub const DYNAMIC_LIST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/spank.dynlist");

/// The directory holding Drover's own `slurm/spank.h` (for building plugins without Slurm's).
pub const INCLUDE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
