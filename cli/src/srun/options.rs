//! srun's and salloc's command line, read through their rows of the one option table
//! ([`crate::options::defs`]) by the same getopt_long scanner sbatch uses: Slurm's spellings (`-n4`,
//! `-n 4`, `--ntasks=4`, `--ntasks 4`, unique prefixes such as `--ntask=4`, clustered flags such as
//! `-lv`), options up to the first word that is not one, then the command. srun and salloc read
//! the same options; salloc ignores the step's ones.
//!
//! Accepted and applied: `-n`, `-N`, `--ntasks-per-node`, `-c`, `-l/--label`, `-J`, `-D`,
//! `--export`, `--overlap`, `-O/--overcommit`, `--jobid`, `-v`, `-o/-e` (step patterns), `--pty`; for a new allocation also `-p`, `-t`, `-A`, `-q`,
//! `--mem`, `--mem-per-cpu`, `--gpus`/`-G`, `--gres`, `--gpus-per-node`, `--gpus-per-task`, `-w`,
//! `--exclusive`. Accepted without effect (documented in docs/compat.md): `-u/--unbuffered`
//! (output is always relayed as it comes), `--exact`, `--cpu-bind`, `--mpi`,
//! `-K/--kill-on-bad-exit`, `-Q/--quiet`, `--signal`. `-h/--help`, `--usage` and `-V/--version`
//! answer by themselves.

use crate::localtime::LocalCalendar;
use crate::options::defs::{Command, Ctx};
use crate::options::help;
use crate::options::layers::{self, UsageError};
use crate::options::lowargs::Action;
use anyhow::{anyhow, bail};
use drover_shared::job::{JobSpec, StepSpec};
use std::ffi::OsString;

/// What srun (or salloc) was asked.
#[derive(Debug, Default, Clone)]
pub(crate) struct StepOptions {
    pub(crate) step: StepSpec,
    pub(crate) command: Vec<String>,
    pub(crate) label: bool,
    /// `--multi-prog`: the command is a configuration file of programs per task.
    pub(crate) multi_prog: bool,
    pub(crate) job_id: Option<u32>,
    pub(crate) chdir: Option<String>,
    pub(crate) export: Option<String>,
    /// `--propagate`: the resource limits the tasks get (all by default).
    pub(crate) propagate: Option<String>,
    /// `--container`: the OCI bundle the tasks run in (`SLURM_CONTAINER` in their environment).
    pub(crate) container: Option<String>,
    /// `-m/--distribution` (`SLURM_DISTRIBUTION` in the tasks' environment, which ctld lays the
    /// step out by).
    pub(crate) distribution: Option<String>,
    /// An arbitrary distribution's host of each task, comma-separated (`SLURM_ARBITRARY_NODELIST`
    /// in the step's environment, which ctld lays the tasks out by).
    pub(crate) arbitrary_nodelist: Option<String>,
    pub(crate) verbose: bool,
    /// How many `-v`: srun prints its options' dump from one on, as Slurm's does.
    pub(crate) verbosity: u8,
    /// `--pty`: task 0 on a pseudo-terminal, srun's terminal in raw mode.
    pub(crate) pty: bool,
    /// `-o`, `-e`: step output patterns ([`super::output`]).
    pub(crate) output: Option<String>,
    pub(crate) error: Option<String>,
    /// The job to request when there is no allocation yet.
    pub(crate) allocation: JobSpec,
    /// `-I/--immediate[=secs]`: give up on an allocation not granted within this many seconds.
    pub(crate) immediate: Option<u32>,
    /// salloc's `--no-shell`: exit once granted, leaving the allocation to run.
    pub(crate) no_shell: bool,
    /// `--test-only`: print when and where the allocation would start; run nothing.
    pub(crate) test_only: bool,
    /// `--debugger-test`: the tasks start stopped (the step's `parallel_debug`) and srun prints
    /// each one's host, pid and executable.
    pub(crate) debugger_test: bool,
    /// srun's line when it capped `--slurmd-debug`.
    pub(crate) slurmd_debug_note: Option<String>,
    /// `-K`: end the step when a task exits with a non-zero code.
    pub(crate) kill_on_bad_exit: bool,
    /// `-W sec`: kill the tasks still running this long after the first one exited.
    pub(crate) wait: Option<u32>,
    /// `-i`: `all`, `none`, a task id or a file.
    pub(crate) input: Option<String>,
    /// `--quit-on-interrupt`: the first SIGINT kills the step.
    pub(crate) quit_on_interrupt: bool,
    /// `-Z/--no-allocate`: run on the `-w` nodes outside any allocation srun is in (ctld allows
    /// it to root and the SlurmUser only).
    pub(crate) no_allocate: bool,
    /// What SPANK plugins pass to the remote side (their options, job-control variables):
    /// added to the step's environment whatever `--export` says.
    pub(crate) plugin_env: Vec<(String, String)>,
}

/// What srun's or salloc's command line asks.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Print this on stdout and exit 0 (`--help`, `--usage`, `--version`).
    Answer(String),
    /// Run (or allocate and run) the command.
    Run(Box<StepOptions>),
}

/// Parses the arguments after the command name through `command`'s rows of the option table
/// (getopt_long's spellings, abbreviations included; `-n=4` is read as `-n 4`, as srun always
/// has). An argument that is not UTF-8 is read with its invalid bytes replaced.
pub(crate) fn parse(command: Command, args: &[OsString]) -> anyhow::Result<Parsed> {
    // Input variables come first, so the command line's options override them.
    let mut words: Vec<String> = input_variables(command, &std::env::vars().collect::<Vec<_>>());
    words.extend(args.iter().map(|a| a.to_string_lossy().into_owned()));
    let ctx = Ctx { now: drover_shared::now(), calendar: &LocalCalendar };
    let command_line = layers::command_line(&words, &ctx, command).map_err(|UsageError(message)| anyhow!(message))?;
    let low = command_line.layer.args;
    match low.action {
        Some(Action::Help) => return Ok(Parsed::Answer(help::help(command))),
        Some(Action::Usage) => return Ok(Parsed::Answer(help::usage(command))),
        Some(Action::Version) => return Ok(Parsed::Answer(format!("{}\n", help::VERSION))),
        None => {}
    }
    if let Some(message) = command_line.error {
        bail!(message);
    }
    let mut options = StepOptions { command: command_line.operands, ..StepOptions::default() };
    let (step, spec) = (&mut options.step, &mut options.allocation);
    options.label = low.label.unwrap_or(false);
    options.multi_prog = low.multi_prog.unwrap_or(false);
    step.overlap = low.overlap.unwrap_or(false);
    step.overcommit = low.overcommit.unwrap_or(false);
    step.preserve_env = low.preserve_env.unwrap_or(false);
    if let Some(level) = &low.slurmd_debug {
        (step.slurmd_debug, options.slurmd_debug_note) = drover_shared::log_level::slurmd_debug_increment(level);
    }
    options.debugger_test = low.debugger_test.unwrap_or(false);
    step.parallel_debug = options.debugger_test;
    options.verbose = low.verbose.is_some_and(|n| n > 0);
    options.verbosity = low.verbose.unwrap_or(0);
    options.pty = low.pty.unwrap_or(false);
    spec.exclusive = low.exclusive.unwrap_or(false);
    step.ntasks = low.ntasks;
    spec.ntasks = low.ntasks;
    // A step takes the minimum of `-N min-max`; so does the allocation srun or salloc asks for.
    step.nodes = low.nodes.map(|n| n.min);
    spec.nodes_min = step.nodes;
    step.ntasks_per_node = low.ntasks_per_node;
    spec.ntasks_per_node = low.ntasks_per_node;
    step.cpus_per_task = low.cpus_per_task;
    spec.cpus_per_task = low.cpus_per_task;
    if let Some(name) = low.job_name {
        step.name.clone_from(&name);
        spec.name = name;
    }
    options.chdir = low.chdir;
    options.export = low.export;
    options.propagate = low.propagate;
    if let Some(bundle) = &low.container {
        spec.environment.push((drover_shared::job::CONTAINER_ENV.to_owned(), bundle.clone()));
    }
    options.container = low.container;
    options.distribution = low.distribution;
    options.job_id = low.job_id;
    spec.partitions = low.partitions.unwrap_or_default();
    spec.time_limit = low.time_limit;
    spec.account = low.account;
    spec.qos = low.qos;
    spec.mem = low.mem;
    spec.gpus = low.gpus.unwrap_or_default();
    spec.gres_per_node = low.gres.unwrap_or_default();
    spec.gres_per_node.extend(low.gpus_per_node.unwrap_or_default());
    spec.gpus_per_task = low.gpus_per_task.unwrap_or_default();
    spec.nodelist = low.nodelist;
    spec.template = low.template;
    options.output = low.output;
    options.error = low.error;
    spec.hold = low.hold.unwrap_or(false);
    spec.begin_time = low.begin;
    options.immediate = low.immediate;
    options.no_shell = low.no_shell.unwrap_or(false);
    options.test_only = low.test_only.unwrap_or(false);
    options.kill_on_bad_exit = low.kill_on_bad_exit.unwrap_or(false);
    options.wait = low.step_wait.filter(|w| *w > 0);
    options.input = low.input;
    options.quit_on_interrupt = low.quit_on_interrupt.unwrap_or(false);
    if command == Command::Srun {
        arbitrary(&mut options)?;
    }
    let (step, spec) = (&mut options.step, &mut options.allocation);
    if command == Command::Srun && low.no_allocate == Some(true) {
        // Slurm's `-Z`: the tasks go to the `-w` nodes without a job allocation. Drover
        // asks ctld for an allocation marked `no_allocate` (refused to anyone but root and the
        // SlurmUser) of one CPU on each named node, which its step overcommits.
        let Some(nodelist) = spec.nodelist.as_deref() else {
            bail!("--no-allocate needs the nodes to run on: -w/--nodelist");
        };
        let nodes = drover_shared::hostlist::count(nodelist)?;
        options.no_allocate = true;
        spec.no_allocate = true;
        spec.nodes_min = Some(u32::try_from(nodes).unwrap_or(u32::MAX));
        step.nodes = spec.nodes_min;
        step.overcommit = true;
    }
    // The node runs them from the step's working directory; srun names them from its own.
    let cwd = std::env::current_dir().unwrap_or_default();
    let absolute = |path: String| cwd.join(path).to_string_lossy().into_owned();
    step.task_prolog = low.task_prolog.map(absolute);
    step.task_epilog = low.task_epilog.map(absolute);
    if low.tmp.is_some_and(|mb| mb > 0) {
        // Every node reports TmpDisk=0 (Drover has no temporary-disk setting): none can hold it.
        bail!("Unable to allocate resources: Requested node configuration is not available");
    }
    if let Some(mincpus) = low.mincpus {
        // At least `mincpus` CPUs of each node: the allocation's CPUs per task grow until the
        // tasks on a node hold that many (the step's own CPUs per task are unchanged).
        let tasks_per_node = match (low.ntasks_per_node, low.ntasks, low.nodes) {
            (Some(k), _, _) => k,
            (None, Some(n), nodes) => n / nodes.map_or(1, |c| c.min.max(1)),
            (None, None, _) => 1,
        }
        .max(1);
        let cpus = spec.cpus_per_task.unwrap_or(1);
        if tasks_per_node.saturating_mul(cpus) < mincpus {
            spec.cpus_per_task = Some(mincpus.div_ceil(tasks_per_node));
        }
    }
    if step.overcommit {
        // An allocation for an overcommitted step is sized as if each node ran one task
        // (Slurm's rule for `-O`): its CPUs per task on each of its nodes. The step then runs
        // all its tasks there, up to MaxTasksPerNode.
        spec.ntasks = None;
        spec.ntasks_per_node = None;
    }
    Ok(Parsed::Run(Box::new(options)))
}

/// srun's arbitrary distribution: `-m arbitrary` with `-w`, or `SLURM_HOSTFILE` without `-w`
/// (which makes the distribution arbitrary, as in Slurm). The list decides the task count (the
/// first `-n` entries when `-n` is given) and the allocation's nodes.
fn arbitrary(options: &mut StepOptions) -> anyhow::Result<()> {
    let asked = options.distribution.as_deref().is_some_and(|d| d.split([':', ',']).next() == Some("arbitrary"));
    let hostfile = std::env::var("SLURM_HOSTFILE").ok().filter(|f| !f.is_empty());
    let source = match (&options.allocation.nodelist, hostfile) {
        (Some(list), _) if asked => list.clone(),
        (None, Some(file)) => file,
        (None, None) if asked => bail!("--distribution=arbitrary needs the hosts: -w/--nodelist or SLURM_HOSTFILE"),
        _ => return Ok(()),
    };
    let mut hosts = super::hostfile::task_hosts(&source)?;
    if let Some(ntasks) = options.step.ntasks {
        let wanted = usize::try_from(ntasks).unwrap_or(usize::MAX);
        if wanted > hosts.len() {
            bail!("Too few NodeNames in the host list for {ntasks} tasks ({} listed)", hosts.len());
        }
        hosts.truncate(wanted);
    }
    let distinct = super::hostfile::distinct(&hosts);
    let ntasks = u32::try_from(hosts.len()).unwrap_or(u32::MAX);
    let nodes = u32::try_from(distinct.len()).unwrap_or(u32::MAX);
    if !asked {
        options.distribution = Some("arbitrary".to_owned());
    }
    options.arbitrary_nodelist = Some(hosts.join(","));
    options.step.ntasks = Some(ntasks);
    options.step.nodes = Some(nodes);
    // The allocation holds, on every listed host, room for the most tasks any one of them runs
    // (Drover's allocations are even across nodes; Slurm sizes each node by its own count).
    let mut per_host: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for host in &hosts {
        *per_host.entry(host.as_str()).or_default() += 1;
    }
    let most = per_host.values().copied().max().unwrap_or(1);
    let most = u32::try_from(most).unwrap_or(u32::MAX);
    let spec = &mut options.allocation;
    spec.ntasks = Some(nodes.saturating_mul(most));
    spec.ntasks_per_node = Some(most);
    spec.nodes_min = Some(nodes);
    spec.nodelist = Some(distinct.join(","));
    Ok(())
}

/// The input variables srun and salloc read (Slurm's names), as the options they stand for.
/// Only variables no job sets for its own steps (for the counts, see
/// [`OUTSIDE_INPUT_VARIABLES`]).
const INPUT_VARIABLES: [(Command, &str, &str); 13] = [
    (Command::Srun, "SLURM_ACCOUNT", "account"),
    (Command::Srun, "SLURM_PARTITION", "partition"),
    (Command::Srun, "SLURM_QOS", "qos"),
    (Command::Srun, "SLURM_TIMELIMIT", "time"),
    (Command::Srun, "SLURM_STDOUTMODE", "output"),
    (Command::Srun, "SLURM_STDERRMODE", "error"),
    (Command::Srun, "SLURM_CONTAINER", "container"),
    (Command::Srun, "SLURM_DISTRIBUTION", "distribution"),
    (Command::Salloc, "SALLOC_CONTAINER", "container"),
    (Command::Salloc, "SALLOC_ACCOUNT", "account"),
    (Command::Salloc, "SALLOC_PARTITION", "partition"),
    (Command::Salloc, "SALLOC_QOS", "qos"),
    (Command::Salloc, "SALLOC_TIMELIMIT", "time"),
];

/// The input variables srun reads only outside an allocation: inside one, the job's own
/// environment carries these (its counts, not the step's), and a step defaults to the job's
/// tasks anyway.
const OUTSIDE_INPUT_VARIABLES: [(&str, &str); 3] =
    [("SLURM_NNODES", "nodes"), ("SLURM_NPROCS", "ntasks"), ("SLURM_NTASKS", "ntasks")];

/// `--option=value` words for the input variables of `command` set (non-empty) in `env`.
fn input_variables(command: Command, env: &[(String, String)]) -> Vec<String> {
    let value_of = |var: &str| env.iter().find(|(name, value)| name == var && !value.is_empty()).map(|(_, v)| v);
    let mut words: Vec<String> = INPUT_VARIABLES
        .iter()
        .filter(|(for_command, _, _)| *for_command == command)
        .filter_map(|(_, var, long)| Some(format!("--{long}={}", value_of(var)?)))
        .collect();
    let in_allocation = value_of("SLURM_JOB_ID").or_else(|| value_of("SLURM_JOBID")).is_some();
    if command == Command::Srun && !in_allocation {
        words.extend(
            OUTSIDE_INPUT_VARIABLES.iter().filter_map(|(var, long)| Some(format!("--{long}={}", value_of(var)?))),
        );
    }
    // Inside an allocation too: an `sbatch -O` job sets it for its steps.
    if command == Command::Srun && value_of("SLURM_OVERCOMMIT").is_some_and(|v| v != "0") {
        words.push("--overcommit".to_owned());
    }
    words
}

impl StepOptions {
    /// The tasks' environment under `--export` (default `ALL`): `NONE` passes only `SLURM_*`
    /// variables; a list passes those named (plus all with `ALL,…`) and sets `NAME=value` ones.
    /// The plugins' variables ([`StepOptions::plugin_env`]) are added in every case.
    pub(crate) fn environment(&self) -> Vec<(String, String)> {
        let current: Vec<(String, String)> = std::env::vars().collect();
        let export = self.export.as_deref().unwrap_or("ALL");
        let mut all = false;
        let mut names: Vec<String> = Vec::new();
        let mut set: Vec<(String, String)> = Vec::new();
        for item in export.split(',') {
            match item {
                "ALL" => all = true,
                "NONE" | "NIL" => {}
                _ => match item.split_once('=') {
                    Some((n, v)) => set.push((n.to_owned(), v.to_owned())),
                    None => names.push(item.to_owned()),
                },
            }
        }
        let mut env: Vec<(String, String)> =
            current.into_iter().filter(|(n, _)| all || n.starts_with("SLURM_") || names.contains(n)).collect();
        let container =
            self.container.iter().map(|bundle| (drover_shared::job::CONTAINER_ENV.to_owned(), bundle.clone()));
        let distribution = self.distribution.iter().map(|d| ("SLURM_DISTRIBUTION".to_owned(), d.clone()));
        let arbitrary = self.arbitrary_nodelist.iter().map(|l| ("SLURM_ARBITRARY_NODELIST".to_owned(), l.clone()));
        let options = container.chain(distribution).chain(arbitrary);
        for (name, value) in set.into_iter().chain(self.plugin_env.iter().cloned()).chain(options) {
            env.retain(|(n, _)| *n != name);
            env.push((name, value));
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::{Command, Parsed, StepOptions, input_variables, parse};
    use drover_shared::job::MemRequest;
    use std::ffi::OsString;

    fn words(text: &str) -> Vec<OsString> {
        text.split_whitespace().map(Into::into).collect()
    }

    /// `-m` takes Slurm's grammar (node level, then socket and core levels, then Pack) and
    /// reaches the tasks' environment, which ctld lays the step out by; anything else is refused.
    #[test]
    fn distribution_is_checked_and_carried_in_the_environment() {
        let run = |text: &str| match parse(Command::Srun, &words(text)) {
            Ok(Parsed::Run(options)) => Ok(*options),
            Ok(Parsed::Answer(_)) => panic!("an answer for {text}"),
            Err(error) => Err(error.to_string()),
        };
        for good in ["-m cyclic", "-m plane=4", "--distribution=block:cyclic:fcyclic,Pack", "-m *:block"] {
            let options = run(&format!("{good} true")).unwrap_or_else(|e| panic!("{good}: {e}"));
            let value = good.split_once(['=', ' ']).unwrap().1;
            assert_eq!(options.distribution.as_deref(), Some(value));
            assert!(options.environment().contains(&("SLURM_DISTRIBUTION".to_owned(), value.to_owned())));
        }
        for bad in ["-m diagonal", "-m plane=0", "-m cyclic:round", "-m block,Tight", "-m a:b:c:d"] {
            let error = run(&format!("{bad} true")).unwrap_err();
            assert!(error.contains("distribution"), "{bad}: {error}");
        }
    }

    /// srun's and salloc's input variables become options ahead of the command line, which
    /// overrides them (the last value of an option wins).
    #[test]
    fn input_variables_yield_to_the_command_line() {
        let env: Vec<(String, String)> = [
            ("SLURM_ACCOUNT", "envacct"),
            ("SALLOC_ACCOUNT", "sallocacct"),
            ("SLURM_STDOUTMODE", "out.%j"),
            ("SLURM_QOS", ""),
            ("SLURM_NTASKS", "4"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(input_variables(Command::Srun, &env), ["--account=envacct", "--output=out.%j", "--ntasks=4"]);
        assert_eq!(input_variables(Command::Salloc, &env), ["--account=sallocacct"]);
        // Outside an allocation srun also reads the task and node counts; SLURM_OVERCOMMIT
        // everywhere (an `sbatch -O` job sets it).
        let outside: Vec<(String, String)> = [("SLURM_NPROCS", "5"), ("SLURM_NNODES", "1"), ("SLURM_OVERCOMMIT", "1")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(input_variables(Command::Srun, &outside), ["--nodes=1", "--ntasks=5", "--overcommit"]);
        let mut inside = outside.clone();
        inside.push(("SLURM_JOB_ID".to_owned(), "12".to_owned()));
        assert_eq!(input_variables(Command::Srun, &inside), ["--overcommit"], "a job's own counts are not the step's");
        assert_eq!(srun("--account=envacct true").allocation.account.as_deref(), Some("envacct"));
        assert_eq!(srun("--account=envacct -A cli true").allocation.account.as_deref(), Some("cli"));
    }

    /// srun's options for `text`, which must parse.
    fn srun(text: &str) -> StepOptions {
        match parse(Command::Srun, &words(text)) {
            Ok(Parsed::Run(options)) => *options,
            other => panic!("{text}: {other:?}"),
        }
    }

    /// The error srun gives for `args`.
    fn refused(command: Command, args: &[&str]) -> String {
        let args: Vec<OsString> = args.iter().map(Into::into).collect();
        match parse(command, &args) {
            Err(e) => format!("{e:#}"),
            Ok(other) => panic!("{args:?} parsed: {other:?}"),
        }
    }

    #[test]
    fn spellings() {
        let o = srun("-l -n4 -N 2 --ntasks-per-node=2 --overlap bash -c true");
        assert!(o.label && o.step.overlap);
        assert_eq!((o.step.ntasks, o.step.nodes, o.step.ntasks_per_node), (Some(4), Some(2), Some(2)));
        assert_eq!(o.command, vec!["bash", "-c", "true"]);
        let o = srun("--ntasks 3 -c2 -- env -n");
        assert_eq!((o.step.ntasks, o.step.cpus_per_task), (Some(3), Some(2)));
        assert_eq!(o.command, vec!["env", "-n"]);
        assert!(parse(Command::Srun, &words("--bogus x")).is_err());
    }

    #[test]
    fn attached_values_abbreviations_and_clusters() {
        let o = srun("-n4 -N2 -t10 -c=3 -Jname --cpus=5 --part=x --lab --overl -lv hostname");
        assert_eq!((o.step.ntasks, o.step.nodes, o.step.cpus_per_task), (Some(4), Some(2), Some(5)));
        assert_eq!(o.allocation.partitions, vec!["x"]);
        assert_eq!(o.allocation.time_limit, Some(drover_shared::grammar::time::parse_time_limit("10").unwrap()));
        assert_eq!((o.step.name.as_str(), o.allocation.name.as_str()), ("name", "name"));
        assert!(o.label && o.step.overlap && o.verbose);
        assert!(srun("-O -n8 true").step.overcommit);
        assert_eq!(o.command, vec!["hostname"]);
        // `-n=4` has always meant `-n 4` to srun.
        assert_eq!(srun("-n=4 true").step.ntasks, Some(4));
        let o = srun("--jobid=42 --pty -o out.%t -e err.%t --export=NIL,A=1 -D /tmp true");
        assert_eq!((o.job_id, o.pty), (Some(42), true));
        assert_eq!((o.output.as_deref(), o.error.as_deref()), (Some("out.%t"), Some("err.%t")));
        assert_eq!((o.export.as_deref(), o.chdir.as_deref()), (Some("NIL,A=1"), Some("/tmp")));
    }

    #[test]
    fn allocation_options() {
        let o = srun("-p a,b -A acct -q high --mem=2G -G 2 --gres=gpu:1 -w n[1-2] --exclusive -N 2-4 true");
        let spec = &o.allocation;
        assert_eq!(spec.partitions, vec!["a", "b"]);
        assert_eq!((spec.account.as_deref(), spec.qos.as_deref()), (Some("acct"), Some("high")));
        assert_eq!(spec.mem, Some(MemRequest::PerNode(2048)));
        assert_eq!((spec.gpus.len(), spec.gres_per_node.len()), (1, 1));
        assert_eq!((spec.nodelist.as_deref(), spec.exclusive), (Some("n[1-2]"), true));
        assert_eq!((spec.nodes_min, o.step.nodes), (Some(2), Some(2)));
        // Hints without effect are accepted silently.
        let o = srun("-u -Q --exact --cpu-bind=cores --mpi pmix --signal=USR1@10 -T4 true");
        assert_eq!(o.command, vec!["true"]);
        let o = srun("-K -W 5 true");
        assert_eq!((o.kill_on_bad_exit, o.wait), (true, Some(5)));
        assert!(!srun("--kill-on-bad-exit=0 true").kill_on_bad_exit);
    }

    #[test]
    fn refusals_are_getopt_words() {
        assert_eq!(refused(Command::Srun, &["--bogus", "x"]), "unrecognized option '--bogus'");
        assert_eq!(refused(Command::Srun, &["-z"]), "invalid option -- 'z'");
        assert_eq!(refused(Command::Srun, &["-n"]), "option requires an argument -- 'n'");
        assert_eq!(refused(Command::Srun, &["--ntasks"]), "option '--ntasks' requires an argument");
        // sbatch's options are not srun's.
        assert_eq!(refused(Command::Srun, &["--array=1-3", "true"]), "unrecognized option '--array=1-3'");
        assert!(refused(Command::Srun, &["--o", "x"]).contains("ambiguous"), "--output or --overlap");
        assert!(refused(Command::Srun, &["--ntask=2", "x"]).contains("ambiguous"), "--ntasks or --ntasks-per-node");
    }

    /// A short option that is not ASCII once panicked on a byte slice inside the character.
    #[test]
    fn multibyte_short_options_do_not_panic() {
        for command in [Command::Srun, Command::Salloc] {
            assert_eq!(refused(command, &["-é"]), "invalid option -- 'é'");
            assert_eq!(refused(command, &["-lé", "true"]), "invalid option -- 'é'");
            assert!(refused(command, &["-né", "true"]).contains("é"));
            assert!(parse(command, &words("-J é true")).is_ok());
        }
    }

    #[test]
    fn salloc_reads_what_srun_reads() {
        let Ok(Parsed::Run(o)) = parse(Command::Salloc, &words("-N 2 -n 2 -t 5 -l bash -c true")) else {
            panic!("salloc refused its command line")
        };
        assert_eq!((o.allocation.nodes_min, o.allocation.ntasks), (Some(2), Some(2)));
        assert_eq!(o.command, vec!["bash", "-c", "true"]);
        let Ok(Parsed::Run(o)) = parse(Command::Salloc, &words("-u")) else { panic!("salloc -u") };
        assert!(o.command.is_empty(), "-u is --unbuffered to salloc, as to srun");
    }

    #[test]
    fn help_usage_and_version_answer() {
        for command in [Command::Srun, Command::Salloc] {
            let answer = |args: &str| match parse(command, &words(args)) {
                Ok(Parsed::Answer(text)) => text,
                other => panic!("{args}: {other:?}"),
            };
            let help = answer("--help");
            assert!(help.starts_with(&format!("Usage: {} [OPTIONS...] ", command.name())), "{help}");
            assert_eq!(answer("-h"), help);
            assert!(help.contains("  -l, --label ") && help.contains("--jobid=id"), "{help}");
            assert!(!help.contains("--array"), "{help}");
            assert!(answer("--usage").starts_with(&format!("Usage: {} [-A name]", command.name())));
            assert_eq!(answer("-V"), "slurm 22.05.8\n");
            // A refused value does not stop --help, as in sbatch.
            assert_eq!(answer("-n x --help"), help);
        }
    }

    /// srun's `--help`, generated from its rows of the option table.
    #[test]
    fn srun_help_text() {
        let Ok(Parsed::Answer(text)) = parse(Command::Srun, &words("--help")) else { panic!("srun --help") };
        expect_test::expect![[r#"
            Usage: srun [OPTIONS...] executable [args...]

            Job options:
              -A, --account=name          account to charge the job to
              -b, --begin=time            do not start the job before this date/time
              -c, --cpus-per-task=ncpus   CPUs each task needs
              -D, --chdir=directory       working directory of the tasks
                  --gres=list             generic resources needed on each node
              -H, --hold                  submit the job held (scontrol release frees it)
              -J, --job-name=jobname      name of the job
              -n, --ntasks=ntasks         number of tasks to run
                  --ntasks-per-node=n     tasks to run on each node
              -N, --nodes=N               node count, N = min[-max]
              -p, --partition=partition   partition(s) the job may run in
              -q, --qos=qos               quality of service for the job
              -t, --time=minutes          time limit: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S
                  --test-only             validate the job and print where and when it would start; submit nothing
              -v, --verbose               say where the step was launched
                  --template=name         use this team job template's defaults and bounds (Drover; `drover templates` lists them)
              -e, --error=err             file pattern the tasks' stderr goes to
                  --export=names          environment variables passed to the tasks: ALL, NONE or a list
              -i, --input=in              the tasks' stdin: all, none, a task id, or a file srun reads
                  --jobid=id              run the step in this job (default: SLURM_JOB_ID)
                  --multi-prog            run a program per task, from the configuration file given as the command
              -l, --label                 prefix each output line with its task id
              -o, --output=out            file pattern the tasks' stdout goes to
              -Z, --no-allocate           run on the -w nodes without a job allocation (root and SlurmUser only)
                  --overlap               share CPUs with the job's other running steps
              -O, --overcommit            start more tasks than the job has CPUs on a node
                  --slurmd-debug=level    the nodes' step messages to the tasks' stderr, from this level above error
                  --debugger-test         start the tasks stopped before their exec and print each one's host and pid
                  --pty                   run task 0 on a pseudo-terminal
              -I, --immediate[=secs]      fail unless the allocation is granted within secs (default: at once)
              -K, --kill-on-bad-exit[=0|1]
                                          end the step when a task exits with a non-zero code
              -W, --wait=sec              kill the other tasks this long after the first one exits
                  --task-prolog=program   run this before each task (its export, unset and print lines shape the task)
                  --task-epilog=program   run this after each task
                  --quit-on-interrupt     kill the step at the first SIGINT (default: print its status; a second one within a second aborts)
              -E, --preserve-env          the tasks get srun's SLURM_NNODES and SLURM_NTASKS, not the step's
              -m, --distribution=type     how tasks are laid out over the nodes: block, cyclic or plane=N
                  --container=path        run the tasks in the OCI container bundle at this path

            Node and memory constraints:
                  --mem=MB                memory per node (MB, or a K, M, G or T suffix)
              -w, --nodelist=hosts        nodes the job must include
                  --mincpus=n             at least this many CPUs of each node
                  --tmp=MB                temporary disk per node (no Drover node declares any: only 0 fits)

            Consumable resources:
                  --exclusive             do not share the job's nodes with other jobs
                  --mem-per-cpu=MB        memory per allocated CPU

            GPUs:
              -G, --gpus=n                GPUs for the whole job, [type:]count
                  --gpus-per-node=n       GPUs on each node, [type:]count
                  --gpus-per-task=n       GPUs for each task, [type:]count

            Help:
              -h, --help                  print this help and exit
                  --usage                 print a short usage summary and exit
              -V, --version               print the version and exit

            Accepted and ignored (hints Drover has no use for):
              --cpu-bind --exact --mpi --quiet --signal --threads --unbuffered
        "#]]
        .assert_eq(&text);
    }
}
