//! "Low" arguments: what one layer of input said — sbatch's command line, its `SBATCH_*` environment
//! or the script's `#SBATCH` directives, or srun's or salloc's command line — typed by the option table in [`super::defs`] but not yet merged
//! with the other layers or checked against them.
//!
//! Every field is an `Option`, `None` meaning "this layer did not say". [`LowArgs::over`] lays one
//! layer over a lower one field by field, which is the whole precedence rule (command line over
//! environment over directives). The field list is written once, in the `low_args!` invocation, so a
//! new option cannot be forgotten by the merge.

use drover_shared::UnixTime;
use drover_shared::grammar::gres::GresRequest;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::MemRequest;

/// `-N min[-max]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeCount {
    pub(crate) min: u32,
    pub(crate) max: Option<u32>,
}

/// An option that answers by itself instead of submitting a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// `-h/--help`.
    Help,
    /// `-u/--usage`.
    Usage,
    /// `-V/--version`.
    Version,
}

macro_rules! low_args {
    ($( $(#[$doc:meta])* $field:ident : $ty:ty, )*) => {
        /// One layer's options; see the module documentation.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub(crate) struct LowArgs {
            $( $(#[$doc])* pub(crate) $field: Option<$ty>, )*
        }

        impl LowArgs {
            /// `self` laid over `lower`: every field this layer set wins, the rest come from `lower`.
            pub(crate) fn over(self, lower: LowArgs) -> LowArgs {
                LowArgs { $( $field: self.$field.or(lower.$field), )* }
            }

            /// The fields this layer set, one `name: value` line each, for tests.
            #[cfg(test)]
            pub(crate) fn render(&self) -> String {
                let mut out = String::new();
                $( if let Some(value) = &self.$field {
                    out.push_str(&format!("{}: {:?}\n", stringify!($field), value));
                } )*
                out
            }
        }
    };
}

low_args! {
    /// `-J/--job-name`.
    job_name: String,
    /// `-p/--partition`, split at commas.
    partitions: Vec<String>,
    /// `-A/--account`.
    account: String,
    /// `-q/--qos`.
    qos: String,
    /// `-t/--time`.
    time_limit: TimeLimit,
    /// `-N/--nodes`.
    nodes: NodeCount,
    /// `-n/--ntasks`.
    ntasks: u32,
    /// `-c/--cpus-per-task`.
    cpus_per_task: u32,
    /// `--ntasks-per-node`.
    ntasks_per_node: u32,
    /// `--mem`, `--mem-per-cpu` or `--mem-per-gpu`: one slot, because they exclude each other.
    mem: MemRequest,
    /// `--gres`.
    gres: Vec<GresRequest>,
    /// `-G/--gpus`.
    gpus: Vec<GresRequest>,
    /// `--gpus-per-node`.
    gpus_per_node: Vec<GresRequest>,
    /// `--gpus-per-task`.
    gpus_per_task: Vec<GresRequest>,
    /// `-o/--output` pattern (`none` already turned into `/dev/null`).
    output: String,
    /// `-e/--error` pattern.
    error: String,
    /// `-i/--input` pattern.
    input: String,
    /// `-D/--chdir` as given.
    chdir: String,
    /// `--export` as given (its grammar already checked).
    export: String,
    /// `--propagate[=rlimit[,…]]` as given (empty: all).
    propagate: String,
    /// `--container`: the OCI bundle, made absolute.
    container: String,
    /// srun's `-m/--distribution`, its grammar checked.
    distribution: String,
    /// srun's `-E/--preserve-env`.
    preserve_env: bool,
    /// `--wrap` command.
    wrap: String,
    /// `--parsable`.
    parsable: bool,
    /// `-H/--hold`.
    hold: bool,
    /// `-Q/--quiet`.
    quiet: bool,
    /// `--comment`.
    comment: String,
    /// `--nice[=adjustment]`.
    nice: i32,
    /// `-b/--begin`, resolved to an instant.
    begin: UnixTime,
    /// `--deadline`, resolved to an instant.
    deadline: UnixTime,
    /// `--requeue` (true) or `--no-requeue` (false): one slot, the last one given wins.
    requeue: bool,
    /// `--open-mode`: true for append.
    open_append: bool,
    /// `--exclusive`.
    exclusive: bool,
    /// `-w/--nodelist`.
    nodelist: String,
    /// `-x/--exclude`.
    exclude: String,
    /// `-C/--constraint`.
    constraint: String,
    /// `-d/--dependency`.
    dependency: String,
    /// `-a/--array`.
    array: String,
    /// `--signal`.
    signal: String,
    /// `--mail-type`.
    mail_type: String,
    /// `--mail-user`.
    mail_user: String,
    /// `--kill-on-invalid-dep=yes|no`.
    kill_on_invalid_dep: bool,
    /// `-W/--wait`.
    wait: bool,
    /// `--test-only`.
    test_only: bool,
    /// `--wckey`.
    wckey: String,
    /// Drover's `--template`.
    template: String,
    /// `--reservation`.
    reservation: String,
    /// `-M/--clusters`: a comma list of cluster names.
    clusters: String,
    /// `--get-user-env[=timeout][mode]`: the argument as given, empty when none.
    get_user_env: String,
    /// `-v`, counted.
    verbose: u8,
    /// `-h`, `-u` or `-V`.
    action: Action,
    /// srun's `-l/--label`.
    label: bool,
    /// srun's `--multi-prog`.
    multi_prog: bool,
    /// srun's `--overlap`.
    overlap: bool,
    /// srun's `-O/--overcommit`.
    overcommit: bool,
    /// srun's `--slurmd-debug=<level>`, as given (read by `drover_shared::log_level`).
    slurmd_debug: String,
    /// srun's `--debugger-test`.
    debugger_test: bool,
    /// srun's `-Z/--no-allocate`.
    no_allocate: bool,
    /// srun's `--pty`.
    pty: bool,
    /// srun's `--jobid`.
    job_id: u32,
    /// srun's and salloc's `-I/--immediate[=secs]` (0 without a value).
    immediate: u32,
    /// salloc's `--no-shell`.
    no_shell: bool,
    /// srun's and salloc's `--mincpus`.
    mincpus: u32,
    /// `--tmp`, megabytes.
    tmp: u64,
    /// srun's `-K/--kill-on-bad-exit`.
    kill_on_bad_exit: bool,
    /// srun's `-W/--wait=sec`.
    step_wait: u32,
    /// srun's `--quit-on-interrupt`.
    quit_on_interrupt: bool,
    /// srun's `--task-prolog`.
    task_prolog: String,
    /// srun's `--task-epilog`.
    task_epilog: String,
}
