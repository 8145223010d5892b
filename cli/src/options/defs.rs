//! The option table of sbatch, srun and salloc: one [`OptionDef`] per option — its names, the
//! commands that accept it ([`Commands`]), its `SBATCH_*` variable, its help line (per command
//! where the commands differ) and the function that checks a value and stores it in a
//! [`LowArgs`]. sbatch's command line, environment and `#SBATCH` directives, and srun's and salloc's
//! command lines, all go through these definitions, and every command's `--help` is printed from
//! them. Each command sees only its own rows ([`table`]): getopt's abbreviations are unique
//! prefixes among those. Where srun and salloc read an option differently from sbatch (`-u` is
//! `--unbuffered`, `-o` a step pattern kept as given, `--export` passed to the tasks as given),
//! the option has a row per reading, with disjoint commands.
//!
//! Options that Slurm's sbatch has but Drover does not implement yet are in sbatch's rows too, as
//! [`Apply::NotYet`]: they take part in abbreviation matching exactly as in Slurm (so `--ti` stays
//! ambiguous between `--time` and `--time-min`), and using one is a clear error rather than
//! "unrecognized option" or, worse, a silently ignored request. Hints that change nothing Drover
//! decides (CPU and GPU frequencies, bindings, task distribution, profiling) are
//! [`Apply::Ignored`]: accepted (sbatch warns), so that scripts written for Slurm run unchanged.

use super::lowargs::{Action, LowArgs, NodeCount};
use drover_shared::UnixTime;
use drover_shared::grammar::ValueError;
use drover_shared::grammar::date::{Calendar, parse_date_time};
use drover_shared::grammar::gres::{parse_gpus, parse_gres};
use drover_shared::grammar::mem::parse_mem_mb;
use drover_shared::grammar::time::parse_time_limit;
use drover_shared::job::MemRequest;

/// What the value-checking functions may consult besides the value itself.
pub(crate) struct Ctx<'a> {
    /// The submission time, for `--begin`/`--deadline`.
    pub(crate) now: UnixTime,
    /// The local time zone, for `--begin`/`--deadline`.
    pub(crate) calendar: &'a dyn Calendar,
}

/// A command the option table serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    Sbatch,
    Srun,
    Salloc,
}

impl Command {
    /// Every command, in [`Commands`] bit order.
    #[cfg(test)]
    pub(crate) const ALL: [Command; 3] = [Command::Sbatch, Command::Srun, Command::Salloc];

    /// The command's name, as messages and `--help` show it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Command::Sbatch => "sbatch",
            Command::Srun => "srun",
            Command::Salloc => "salloc",
        }
    }

    /// Its position in [`Commands`] and in an option's help texts.
    const fn idx(self) -> usize {
        match self {
            Command::Sbatch => 0,
            Command::Srun => 1,
            Command::Salloc => 2,
        }
    }
}

/// The commands that accept an option: a mask over [`Command`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Commands(u8);

impl Commands {
    /// sbatch alone (the default of a row).
    pub(crate) const SBATCH: Commands = Commands(1);
    /// srun and salloc, which read the same command line today.
    pub(crate) const STEP: Commands = Commands(2 | 4);
    /// salloc alone.
    pub(crate) const SALLOC: Commands = Commands(4);
    /// All three.
    pub(crate) const ALL: Commands = Commands(1 | 2 | 4);

    /// Whether `command` is in the set.
    pub(crate) const fn has(self, command: Command) -> bool {
        self.0 & (1 << command.idx()) != 0
    }
}

/// Whether an option takes a value, as getopt_long knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgKind {
    /// `--hold`.
    None,
    /// `--time=10` or `--time 10`.
    Required,
    /// `--nice` or `--nice=10`, never `--nice 10`.
    Optional,
}

/// How an option updates a [`LowArgs`].
#[derive(Clone, Copy)]
pub(crate) enum Apply {
    /// A flag.
    Flag(fn(&mut LowArgs)),
    /// An option with a required value.
    Value(fn(&mut LowArgs, &str, &Ctx<'_>) -> Result<(), OptionError>),
    /// An option whose value may be left out.
    OptionalValue(fn(&mut LowArgs, Option<&str>, &Ctx<'_>) -> Result<(), OptionError>),
    /// A Slurm option Drover does not implement yet.
    NotYet(ArgKind),
    /// A Slurm hint Drover has no use for (frequencies, bindings, layout preferences, profiling):
    /// accepted so that scripts and clients written for Slurm submit unchanged, with a warning
    /// on stderr saying it was ignored.
    Ignored(ArgKind),
}

impl Apply {
    /// Whether the option takes a value.
    pub(crate) fn arg_kind(&self) -> ArgKind {
        match self {
            Apply::Flag(_) => ArgKind::None,
            Apply::Value(_) => ArgKind::Required,
            Apply::OptionalValue(_) => ArgKind::Optional,
            Apply::NotYet(kind) | Apply::Ignored(kind) => *kind,
        }
    }
}

/// Why one occurrence of an option was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OptionError {
    /// The value does not follow the option's grammar.
    Value(ValueError),
    /// The option contradicts another one given in the same layer.
    Conflict(String),
    /// The option exists in Slurm but not in Drover yet.
    NotSupported,
}

impl From<ValueError> for OptionError {
    fn from(error: ValueError) -> Self {
        OptionError::Value(error)
    }
}

/// Where an option may appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Command line, environment and directives.
    Anywhere,
    /// Only on the command line (`--help`, `--wrap`, …).
    CommandLine,
}

/// The `--help` heading an option is listed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Run,
    Constraint,
    Resources,
    Gpu,
    Help,
}

impl Section {
    /// Every section, in `--help` order.
    pub(crate) const ALL: [Section; 5] =
        [Section::Run, Section::Constraint, Section::Resources, Section::Gpu, Section::Help];

    /// The heading line.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Section::Run => "Job options:",
            Section::Constraint => "Node and memory constraints:",
            Section::Resources => "Consumable resources:",
            Section::Gpu => "GPUs:",
            Section::Help => "Help:",
        }
    }
}

/// One option.
pub(crate) struct OptionDef {
    /// Long name without the dashes.
    pub(crate) long: &'static str,
    /// Short name, if any.
    pub(crate) short: Option<char>,
    /// Name of the value in `--help` (`--time=minutes`).
    pub(crate) value_name: &'static str,
    /// The `SBATCH_*` input variable, if any.
    pub(crate) env: Option<&'static str>,
    /// Heading in `--help`.
    pub(crate) section: Section,
    /// Help line per command ([`Command::idx`]); empty for options not implemented yet, which
    /// `--help` does not list.
    helps: [&'static str; 3],
    /// Where the option may appear.
    pub(crate) scope: Scope,
    /// The commands that accept it.
    pub(crate) commands: Commands,
    /// What it does.
    pub(crate) apply: Apply,
}

impl std::fmt::Debug for OptionDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--{}", self.long)
    }
}

/// Options are equal when they are the same row: a long name is unique among one command's rows.
impl PartialEq for OptionDef {
    fn eq(&self, other: &Self) -> bool {
        self.long == other.long && self.commands == other.commands
    }
}

impl Eq for OptionDef {}

impl OptionDef {
    const fn new(long: &'static str, apply: Apply) -> OptionDef {
        OptionDef {
            long,
            short: None,
            value_name: "",
            env: None,
            section: Section::Run,
            helps: ["", "", ""],
            scope: Scope::Anywhere,
            commands: Commands::SBATCH,
            apply,
        }
    }

    const fn short(mut self, short: char) -> Self {
        self.short = Some(short);
        self
    }

    const fn value(mut self, value_name: &'static str) -> Self {
        self.value_name = value_name;
        self
    }

    const fn env(mut self, env: &'static str) -> Self {
        self.env = Some(env);
        self
    }

    const fn section(mut self, section: Section) -> Self {
        self.section = section;
        self
    }

    /// The help line, the same for every command.
    const fn help(mut self, help: &'static str) -> Self {
        self.helps = [help, help, help];
        self
    }

    /// The help line `command` shows instead.
    const fn help_for(mut self, command: Command, help: &'static str) -> Self {
        self.helps[command.idx()] = help;
        self
    }

    /// An option of srun's steps, with its help line: salloc accepts it too, because it reads
    /// srun's command line, but to salloc it means nothing.
    const fn srun_only(mut self, help: &'static str) -> Self {
        self.commands = Commands::STEP;
        self.helps = ["", help, SALLOC_UNUSED];
        self
    }

    /// The commands that accept the option.
    const fn commands(mut self, commands: Commands) -> Self {
        self.commands = commands;
        self
    }

    /// The help line `command` shows.
    pub(crate) fn help_in(&self, command: Command) -> &'static str {
        self.helps[command.idx()]
    }

    /// Whether `command` accepts the option.
    pub(crate) fn accepts(&self, command: Command) -> bool {
        self.commands.has(command)
    }

    const fn command_line_only(mut self) -> Self {
        self.scope = Scope::CommandLine;
        self
    }

    /// Whether Drover implements the option.
    pub(crate) fn is_supported(&self) -> bool {
        !matches!(self.apply, Apply::NotYet(_) | Apply::Ignored(_))
    }

    /// Whether Drover accepts the option and ignores it.
    pub(crate) fn is_ignored(&self) -> bool {
        matches!(self.apply, Apply::Ignored(_))
    }

    /// `--time`.
    pub(crate) fn display_name(&self) -> String {
        format!("--{}", self.long)
    }
}

/// The rows `command` accepts, in table order.
pub(crate) fn table(command: Command) -> impl Iterator<Item = &'static OptionDef> {
    OPTIONS.iter().filter(move |def| def.accepts(command))
}

/// Stores a checked value in its slot.
fn set<T, E: Into<OptionError>>(slot: &mut Option<T>, value: Result<T, E>) -> Result<(), OptionError> {
    *slot = Some(value.map_err(Into::into)?);
    Ok(())
}

/// `--immediate[=secs]`: how long to wait for the allocation; no value is 0 (at once).
fn immediate(value: Option<&str>) -> Result<u32, OptionError> {
    match value {
        None => Ok(0),
        Some(text) => text.trim().parse().map_err(|_| invalid("--immediate", text, "a number of seconds")),
    }
}

/// `-K[0|1]`: no value is 1.
fn one_zero(value: Option<&str>) -> Result<bool, OptionError> {
    match value.map(str::trim) {
        None | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(text) => Err(invalid("--kill-on-bad-exit", text, "0 or 1")),
    }
}

/// A count of seconds.
fn seconds(what: &'static str, value: &str) -> Result<u32, OptionError> {
    value.trim().parse().map_err(|_| invalid(what, value, "a number of seconds"))
}

/// A value error in the shared grammar's words.
fn invalid(what: &'static str, value: &str, expected: &'static str) -> OptionError {
    OptionError::Value(ValueError { what, value: value.to_owned(), expected })
}

/// A positive decimal integer that fits in u32.
fn positive(what: &'static str, value: &str) -> Result<u32, OptionError> {
    match value.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(invalid(what, value, "a positive integer")),
    }
}

/// `-N min[-max]`, each with an optional `k` (×1024) or `m` (×1048576) suffix.
fn node_count(value: &str) -> Result<NodeCount, OptionError> {
    let err = || invalid("node count", value, "min[-max], each a positive integer with an optional k or m suffix");
    let one = |text: &str| -> Option<u32> {
        let (digits, factor) = match text.chars().last()? {
            'k' | 'K' => (&text[..text.len() - 1], 1024u64),
            'm' | 'M' => (&text[..text.len() - 1], 1024 * 1024),
            _ => (text, 1),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n = digits.parse::<u64>().ok()?.checked_mul(factor)?;
        u32::try_from(n).ok().filter(|n| *n > 0)
    };
    let value = value.trim();
    let count = match value.split_once('-') {
        // `-N-3`: at most three nodes, at least one (Slurm reads a missing minimum as 1).
        Some(("", max)) => NodeCount { min: 1, max: Some(one(max).ok_or_else(err)?) },
        Some((min, max)) => NodeCount { min: one(min).ok_or_else(err)?, max: Some(one(max).ok_or_else(err)?) },
        None => NodeCount { min: one(value).ok_or_else(err)?, max: None },
    };
    if count.max.is_some_and(|max| max < count.min) {
        return Err(err());
    }
    Ok(count)
}

/// `p1[,p2…]`.
fn partitions(value: &str) -> Result<Vec<String>, OptionError> {
    let names: Vec<String> = value.split(',').map(|p| p.trim().to_owned()).collect();
    if names.iter().any(String::is_empty) {
        return Err(invalid("partition list", value, "partition names separated by commas"));
    }
    Ok(names)
}

/// Sets the memory slot, refusing a different `--mem*` kind already given in the same layer.
fn set_mem(low: &mut LowArgs, request: MemRequest) -> Result<(), OptionError> {
    let same_kind = |a: &MemRequest, b: &MemRequest| std::mem::discriminant(a) == std::mem::discriminant(b);
    if low.mem.as_ref().is_some_and(|earlier| !same_kind(earlier, &request)) {
        return Err(OptionError::Conflict("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive".into()));
    }
    low.mem = Some(request);
    Ok(())
}

/// A free-form string value, kept as given.
fn text(value: &str) -> Result<String, OptionError> {
    Ok(value.to_owned())
}

/// `-m/--distribution`: `block`, `cyclic`, `plane=N` or `arbitrary` over the nodes, then
/// optional socket and core levels (`:block|cyclic|fcyclic|*`) and `,Pack`/`,NoPack`, as Slurm
/// accepts them. ctld lays out only block, cyclic and plane and refuses arbitrary.
fn distribution(value: &str) -> Result<String, OptionError> {
    const EXPECTED: &str = "block, cyclic, plane=N or arbitrary[:block|cyclic|fcyclic[:…]][,Pack|NoPack]";
    let bad = || invalid("distribution", value, EXPECTED);
    let (levels, pack) = value.split_once(',').unwrap_or((value, ""));
    if !matches!(pack, "" | "Pack" | "NoPack") || value.len() > 64 {
        return Err(bad());
    }
    let mut parts = levels.split(':');
    let first = parts.next().unwrap_or("");
    let node_level = matches!(first, "block" | "cyclic" | "arbitrary" | "*")
        || first.strip_prefix("plane=").is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n > 0));
    let inner_levels = parts.all(|level| matches!(level, "block" | "cyclic" | "fcyclic" | "*"));
    if !node_level || !inner_levels || levels.split(':').count() > 3 {
        return Err(bad());
    }
    Ok(value.to_owned())
}

/// `--container`: a bundle directory, made absolute against the current directory.
fn bundle_path(value: &str) -> Result<String, OptionError> {
    const EXPECTED: &str = "the path of an OCI bundle directory";
    if value.is_empty() || value.len() > 4096 {
        return Err(invalid("container bundle", value, EXPECTED));
    }
    if value.starts_with('/') {
        return Ok(value.to_owned());
    }
    let here = std::env::current_dir().map_err(|_| invalid("container bundle", value, EXPECTED))?;
    Ok(here.join(value).to_string_lossy().into_owned())
}

/// `-o/-e/-i`: `none` means `/dev/null`; anything else is a pattern kept as given.
fn io_pattern(value: &str) -> Result<String, OptionError> {
    Ok(if value.eq_ignore_ascii_case("none") { "/dev/null".to_owned() } else { value.to_owned() })
}

/// A hostlist expression (`node[01-04],gpu7`), checked (parsed and counted, never expanded: ctld
/// refuses a list naming more hosts than the cluster has) and kept as given.
fn hostlist(value: &str) -> Result<String, OptionError> {
    if value.contains('/') {
        return Err(invalid(
            "node list",
            value,
            "a hostlist expression (reading node names from a file is not supported yet)",
        ));
    }
    drover_shared::hostlist::count(value)
        .map_err(|_| invalid("node list", value, "a hostlist expression such as node[01-04,07]"))?;
    Ok(value.to_owned())
}

/// `--export`: `ALL`, `NONE`, or `[ALL,]VAR[=value][,…]`.
fn export(value: &str) -> Result<String, OptionError> {
    super::export::ExportSpec::parse(value)?;
    Ok(value.to_owned())
}

/// `--nice[=adjustment]`, default 100, at most ±2147483645.
fn nice(value: Option<&str>) -> Result<i32, OptionError> {
    const LIMIT: i64 = 2_147_483_645;
    let Some(value) = value else { return Ok(100) };
    match value.trim().parse::<i64>() {
        Ok(n) if n.abs() <= LIMIT => Ok(i32::try_from(n).unwrap_or(0)),
        _ => Err(invalid("nice value", value, "an integer between -2147483645 and 2147483645")),
    }
}

/// `--open-mode`: a word starting with `a` (append) or `t` (truncate).
fn open_mode(value: &str) -> Result<bool, OptionError> {
    match value.trim().as_bytes().first() {
        Some(b'a' | b'A') => Ok(true),
        Some(b't' | b'T') => Ok(false),
        _ => Err(invalid("open mode", value, "append or truncate")),
    }
}

/// `--exclusive[=user|mcs]`: only whole-node exclusivity is implemented.
fn exclusive(value: Option<&str>) -> Result<bool, OptionError> {
    match value {
        None => Ok(true),
        Some(v) => {
            Err(invalid("exclusive mode", v, "no value (--exclusive=user and --exclusive=mcs are not supported yet)"))
        }
    }
}

/// `--gres`: `name[[:type]:count][,…]`; `help` is not available.
fn gres(value: &str) -> Result<Vec<drover_shared::grammar::gres::GresRequest>, OptionError> {
    if value.trim().eq_ignore_ascii_case("help") {
        return Err(invalid(
            "generic resource (gres) specification",
            value,
            "name[[:type]:count][,...] (--gres=help is not supported yet)",
        ));
    }
    Ok(parse_gres(value)?)
}

/// `--get-user-env[=timeout][S|L]`.
fn get_user_env(value: Option<&str>) -> Result<String, OptionError> {
    let Some(value) = value else { return Ok(String::new()) };
    let digits = value.trim_end_matches(['S', 's', 'L', 'l']);
    if value.len() - digits.len() > 1 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("--get-user-env value", value, "[timeout][S|L]"));
    }
    Ok(value.to_owned())
}

/// `yes` or `no`, as `--kill-on-invalid-dep` takes it.
fn yes_no(value: &str) -> Result<bool, OptionError> {
    match value.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(invalid("--kill-on-invalid-dep value", value, "yes or no")),
    }
}

/// `-a/--array`: `spec[,spec…][%max]`, spec = `n`, `a-b` or `a-b:step`.
fn array(value: &str) -> Result<String, OptionError> {
    let err = || invalid("job array specification", value, "indexes such as 0-15, 0,6,16-32, 0-15:4 or 0-15%4");
    let number = |s: &str| -> Option<u32> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
    };
    let (specs, throttle) = match value.split_once('%') {
        Some((specs, max)) => (specs, Some(max)),
        None => (value, None),
    };
    if throttle.is_some_and(|max| number(max).is_none()) {
        return Err(err());
    }
    for spec in specs.split(',') {
        let (range, step) = match spec.split_once(':') {
            Some((range, step)) => (range, Some(step)),
            None => (spec, None),
        };
        match range.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo).ok_or_else(err)?, number(hi).ok_or_else(err)?);
                if hi < lo || step.is_some_and(|s| number(s).is_none_or(|s| s == 0)) {
                    return Err(err());
                }
            }
            None if step.is_none() => {
                number(range).ok_or_else(err)?;
            }
            None => return Err(err()),
        }
    }
    Ok(value.to_owned())
}

/// Signal names `--signal` accepts, without the `SIG` prefix, with their Linux numbers.
const SIGNALS: [(&str, u32); 31] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
    ("SYS", 31),
];

/// `--signal=[{R|B}:]sig[@secs]`.
fn signal(value: &str) -> Result<String, OptionError> {
    let err = || invalid("signal specification", value, "[{R|B}:]signal[@seconds], e.g. USR1@120 or B:10");
    let rest = match value.split_once(':') {
        Some((flags, rest)) if !flags.is_empty() && flags.chars().all(|c| matches!(c, 'R' | 'B' | 'r' | 'b')) => rest,
        Some(_) => return Err(err()),
        None => value,
    };
    let (sig, secs) = match rest.split_once('@') {
        Some((sig, secs)) => (sig, Some(secs)),
        None => (rest, None),
    };
    let numeric = sig.parse::<u32>().ok().filter(|n| (1..=64).contains(n));
    let upper = sig.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if numeric.is_none() && !SIGNALS.iter().any(|(n, _)| *n == name) {
        return Err(err());
    }
    if secs.is_some_and(|s| s.is_empty() || s.parse::<u16>().is_err()) {
        return Err(err());
    }
    Ok(value.to_owned())
}

/// `--mail-type`: a comma list of Slurm's event names.
fn mail_type(value: &str) -> Result<String, OptionError> {
    const TYPES: [&str; 13] = [
        "NONE",
        "BEGIN",
        "END",
        "FAIL",
        "REQUEUE",
        "ALL",
        "INVALID_DEPEND",
        "STAGE_OUT",
        "TIME_LIMIT",
        "TIME_LIMIT_90",
        "TIME_LIMIT_80",
        "TIME_LIMIT_50",
        "ARRAY_TASKS",
    ];
    if value.split(',').all(|t| TYPES.iter().any(|known| known.eq_ignore_ascii_case(t.trim()))) {
        Ok(value.to_owned())
    } else {
        Err(invalid(
            "mail type",
            value,
            "a comma list of NONE, BEGIN, END, FAIL, REQUEUE, ALL, INVALID_DEPEND, STAGE_OUT, TIME_LIMIT, TIME_LIMIT_90, TIME_LIMIT_80, TIME_LIMIT_50, ARRAY_TASKS",
        ))
    }
}

/// `-d/--dependency`: `type:jobid[:jobid…]` items joined by `,` (all) or `?` (any), or `singleton`.
/// The grammar is checked here so a script gets a line and column; ctld decides what it means.
fn dependency(value: &str) -> Result<String, OptionError> {
    const TYPES: [&str; 6] = ["after", "afterany", "afterok", "afternotok", "aftercorr", "afterburstbuffer"];
    let err = || {
        invalid(
            "dependency",
            value,
            "type:jobid[:jobid...] items joined by , or ?, with type after, afterany, afterok, afternotok, aftercorr, afterburstbuffer, or singleton",
        )
    };
    if value.contains(',') && value.contains('?') {
        return Err(err());
    }
    let job_id = |text: &str, allow_delay: bool| -> bool {
        let (id, delay) = match text.split_once('+') {
            Some((id, delay)) if allow_delay => (id, Some(delay)),
            Some(_) => return false,
            None => (text, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let id_ok = match id.split_once('_') {
            Some((job, task)) => {
                digits(job)
                    && (task == "*"
                        || digits(task)
                        || task
                            .strip_prefix('[')
                            .and_then(|t| t.strip_suffix(']'))
                            .is_some_and(|r| r.split(',').all(|part| part.split('-').all(digits))))
            }
            None => digits(id),
        };
        id_ok && delay.is_none_or(digits)
    };
    for item in value.split([',', '?']) {
        if item.eq_ignore_ascii_case("singleton") {
            continue;
        }
        let mut parts = item.split(':');
        let first = parts.next().unwrap_or_default();
        if job_id(first, false) {
            // A bare job id list means afterany.
            if !parts.all(|id| job_id(id, false)) {
                return Err(err());
            }
            continue;
        }
        let kind = first.to_ascii_lowercase();
        if !TYPES.contains(&kind.as_str()) {
            return Err(err());
        }
        let ids: Vec<&str> = parts.collect();
        if ids.is_empty() || !ids.iter().all(|id| job_id(id, kind == "after")) {
            return Err(err());
        }
    }
    Ok(value.to_owned())
}

/// `--jobid`: the number as given (ctld answers for one that does not exist).
fn job_id(value: &str) -> Result<u32, OptionError> {
    value.trim().parse().map_err(|_| invalid("job id", value, "a job id such as 1234"))
}

/// The help line of an option salloc accepts only because it reads srun's command line.
const SALLOC_UNUSED: &str = "accepted as srun accepts it; no effect in salloc";

fn date(value: &str, ctx: &Ctx<'_>) -> Result<UnixTime, OptionError> {
    Ok(parse_date_time(value, ctx.now, ctx.calendar)?)
}

/// The option table, in `--help` order within each section; each command reads its own rows.
pub(crate) static OPTIONS: &[OptionDef] = &[
    // Parallel run options.
    OptionDef::new("array", Apply::Value(|low, v, _| set(&mut low.array, array(v))))
        .short('a')
        .value("indexes")
        .env("SBATCH_ARRAY_INX")
        .help("submit a job array with these task indexes"),
    OptionDef::new("account", Apply::Value(|low, v, _| set(&mut low.account, text(v))))
        .short('A')
        .value("name")
        .env("SBATCH_ACCOUNT")
        .help("account to charge the job to")
        .commands(Commands::ALL),
    OptionDef::new("begin", Apply::Value(|low, v, ctx| set(&mut low.begin, date(v, ctx))))
        .short('b')
        .value("time")
        .help("do not start the job before this date/time")
        .commands(Commands::ALL),
    OptionDef::new("comment", Apply::Value(|low, v, _| set(&mut low.comment, text(v))))
        .value("name")
        .help("free-form comment stored with the job"),
    OptionDef::new(
        "cpus-per-task",
        Apply::Value(|low, v, _| set(&mut low.cpus_per_task, positive("number of CPUs per task", v))),
    )
    .short('c')
    .value("ncpus")
    .help("CPUs each task needs")
    .commands(Commands::ALL),
    OptionDef::new("deadline", Apply::Value(|low, v, ctx| set(&mut low.deadline, date(v, ctx))))
        .value("time")
        .help("drop the job if it cannot end before this date/time"),
    OptionDef::new("dependency", Apply::Value(|low, v, _| set(&mut low.dependency, dependency(v))))
        .short('d')
        .value("type:jobid")
        .help("start only once the listed jobs reach the given state"),
    OptionDef::new("chdir", Apply::Value(|low, v, _| set(&mut low.chdir, text(v))))
        .short('D')
        .value("directory")
        .help("working directory of the batch script")
        .commands(Commands::ALL)
        .help_for(Command::Srun, "working directory of the tasks")
        .help_for(Command::Salloc, SALLOC_UNUSED),
    OptionDef::new("error", Apply::Value(|low, v, _| set(&mut low.error, io_pattern(v))))
        .short('e')
        .value("err")
        .env("SBATCH_ERROR")
        .help("file the batch script's stderr goes to"),
    OptionDef::new("export", Apply::Value(|low, v, _| set(&mut low.export, export(v))))
        .value("names")
        .env("SBATCH_EXPORT")
        .help("environment variables passed to the job: ALL, NONE or a list"),
    OptionDef::new("get-user-env", Apply::OptionalValue(|low, v, _| set(&mut low.get_user_env, get_user_env(v))))
        .value("timeout[mode]")
        .env("SBATCH_GET_USER_ENV")
        .help("ask for the user's login environment (sets SLURM_GET_USER_ENV)"),
    OptionDef::new("gres", Apply::Value(|low, v, _| set(&mut low.gres, gres(v))))
        .value("list")
        .env("SBATCH_GRES")
        .help("generic resources needed on each node")
        .commands(Commands::ALL),
    OptionDef::new("kill-on-invalid-dep", Apply::Value(|low, v, _| set(&mut low.kill_on_invalid_dep, yes_no(v))))
        .value("yes|no")
        .help("cancel the job if its dependency can never be satisfied"),
    OptionDef::new("hold", Apply::Flag(|low| low.hold = Some(true)))
        .short('H')
        .help("submit the job held (scontrol release frees it)")
        .commands(Commands::ALL),
    OptionDef::new("ignore-pbs", Apply::Flag(|_| {}))
        .env("SBATCH_IGNORE_PBS")
        .help("ignore #PBS and #BSUB lines (Drover never reads them)"),
    OptionDef::new("input", Apply::Value(|low, v, _| set(&mut low.input, io_pattern(v))))
        .short('i')
        .value("in")
        .env("SBATCH_INPUT")
        .help("file the batch script's stdin comes from"),
    OptionDef::new("job-name", Apply::Value(|low, v, _| set(&mut low.job_name, text(v))))
        .short('J')
        .value("jobname")
        .env("SBATCH_JOB_NAME")
        .help("name of the job")
        .commands(Commands::ALL),
    OptionDef::new("mail-type", Apply::Value(|low, v, _| set(&mut low.mail_type, mail_type(v))))
        .value("type")
        .help("events to mail about: BEGIN, END, FAIL, ALL, ..."),
    OptionDef::new("mail-user", Apply::Value(|low, v, _| set(&mut low.mail_user, text(v))))
        .value("user")
        .help("address for those mails"),
    OptionDef::new("ntasks", Apply::Value(|low, v, _| set(&mut low.ntasks, positive("number of tasks", v))))
        .short('n')
        .value("ntasks")
        .help("number of tasks the job's steps will run")
        .commands(Commands::ALL)
        .help_for(Command::Srun, "number of tasks to run")
        .help_for(Command::Salloc, "number of tasks the allocation is for"),
    OptionDef::new("nice", Apply::OptionalValue(|low, v, _| set(&mut low.nice, nice(v))))
        .value("value")
        .help("lower the job's priority by this much (default 100)"),
    OptionDef::new("no-requeue", Apply::Flag(|low| low.requeue = Some(false)))
        .env("SBATCH_NO_REQUEUE")
        .help("never requeue the job"),
    OptionDef::new(
        "ntasks-per-node",
        Apply::Value(|low, v, _| set(&mut low.ntasks_per_node, positive("number of tasks per node", v))),
    )
    .value("n")
    .help("tasks to run on each node")
    .commands(Commands::ALL),
    OptionDef::new("nodes", Apply::Value(|low, v, _| set(&mut low.nodes, node_count(v))))
        .short('N')
        .value("N")
        .help("node count, N = min[-max]")
        .commands(Commands::ALL),
    OptionDef::new("output", Apply::Value(|low, v, _| set(&mut low.output, io_pattern(v))))
        .short('o')
        .value("out")
        .env("SBATCH_OUTPUT")
        .help("file the batch script's stdout goes to"),
    OptionDef::new("open-mode", Apply::Value(|low, v, _| set(&mut low.open_append, open_mode(v))))
        .value("{append|truncate}")
        .env("SBATCH_OPEN_MODE")
        .help("append to or truncate the output and error files"),
    OptionDef::new("partition", Apply::Value(|low, v, _| set(&mut low.partitions, partitions(v))))
        .short('p')
        .value("partition")
        .env("SBATCH_PARTITION")
        .help("partition(s) the job may run in")
        .commands(Commands::ALL),
    OptionDef::new("parsable", Apply::Flag(|low| low.parsable = Some(true))).help("print only the job id"),
    OptionDef::new("qos", Apply::Value(|low, v, _| set(&mut low.qos, text(v))))
        .short('q')
        .value("qos")
        .env("SBATCH_QOS")
        .help("quality of service for the job")
        .commands(Commands::ALL),
    OptionDef::new("quiet", Apply::Flag(|low| low.quiet = Some(true))).short('Q').help("print nothing on success"),
    OptionDef::new("requeue", Apply::Flag(|low| low.requeue = Some(true)))
        .env("SBATCH_REQUEUE")
        .help("allow the job to be requeued"),
    OptionDef::new("signal", Apply::Value(|low, v, _| set(&mut low.signal, signal(v))))
        .value("[R|B:]num[@time]")
        .env("SBATCH_SIGNAL")
        .help("signal the job this many seconds before its time limit"),
    OptionDef::new("time", Apply::Value(|low, v, _| set(&mut low.time_limit, parse_time_limit(v))))
        .short('t')
        .value("minutes")
        .env("SBATCH_TIMELIMIT")
        .help("time limit: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S")
        .commands(Commands::ALL),
    OptionDef::new("test-only", Apply::Flag(|low| low.test_only = Some(true)))
        .help("validate the job and print where and when it would start; submit nothing")
        .commands(Commands::ALL),
    OptionDef::new("verbose", Apply::Flag(|low| low.verbose = Some(low.verbose.unwrap_or(0).saturating_add(1))))
        .short('v')
        .env("SBATCH_DEBUG")
        .help("report each option and where it came from")
        .commands(Commands::ALL)
        .help_for(Command::Srun, "say where the step was launched")
        .help_for(Command::Salloc, SALLOC_UNUSED),
    OptionDef::new("clusters", Apply::Value(|low, v, _| set(&mut low.clusters, text(v))))
        .short('M')
        .value("names")
        .env("SBATCH_CLUSTERS")
        .help("cluster to submit to (Drover serves one; its name must be in the list)"),
    OptionDef::new("reservation", Apply::Value(|low, v, _| set(&mut low.reservation, text(v))))
        .value("name")
        .env("SBATCH_RESERVATION")
        .help("run in this reservation (Drover has none, so every name is refused as Slurm refuses an unknown one)"),
    OptionDef::new("template", Apply::Value(|low, v, _| set(&mut low.template, text(v))))
        .value("name")
        .env("SBATCH_TEMPLATE")
        .help("use this team job template's defaults and bounds (Drover; `drover templates` lists them)")
        .commands(Commands::ALL),
    OptionDef::new("wckey", Apply::Value(|low, v, _| set(&mut low.wckey, text(v))))
        .value("key")
        .env("SBATCH_WCKEY")
        .help("workload characterization key (recorded only)"),
    OptionDef::new("wait", Apply::Flag(|low| low.wait = Some(true)))
        .short('W')
        .env("SBATCH_WAIT")
        .help("wait for the job (every task of an array) to end; exit with its exit code"),
    OptionDef::new("wrap", Apply::Value(|low, v, _| set(&mut low.wrap, text(v))))
        .value("command")
        .command_line_only()
        .help("submit this command line as a /bin/sh script"),
    // srun's and salloc's readings of options sbatch reads otherwise, and their own options.
    OptionDef::new("error", Apply::Value(|low, v, _| set(&mut low.error, text(v))))
        .short('e')
        .value("err")
        .srun_only("file pattern the tasks' stderr goes to"),
    OptionDef::new("export", Apply::Value(|low, v, _| set(&mut low.export, text(v))))
        .value("names")
        .srun_only("environment variables passed to the tasks: ALL, NONE or a list"),
    OptionDef::new("input", Apply::Value(|low, v, _| set(&mut low.input, text(v))))
        .short('i')
        .value("in")
        .srun_only("the tasks' stdin: all, none, a task id, or a file srun reads"),
    OptionDef::new("jobid", Apply::Value(|low, v, _| set(&mut low.job_id, job_id(v))))
        .value("id")
        .srun_only("run the step in this job (default: SLURM_JOB_ID)"),
    OptionDef::new("multi-prog", Apply::Flag(|low| low.multi_prog = Some(true)))
        .srun_only("run a program per task, from the configuration file given as the command"),
    OptionDef::new("label", Apply::Flag(|low| low.label = Some(true)))
        .short('l')
        .srun_only("prefix each output line with its task id"),
    OptionDef::new("output", Apply::Value(|low, v, _| set(&mut low.output, text(v))))
        .short('o')
        .value("out")
        .srun_only("file pattern the tasks' stdout goes to"),
    OptionDef::new("no-allocate", Apply::Flag(|low| low.no_allocate = Some(true)))
        .short('Z')
        .srun_only("run on the -w nodes without a job allocation (root and SlurmUser only)"),
    OptionDef::new("overlap", Apply::Flag(|low| low.overlap = Some(true)))
        .srun_only("share CPUs with the job's other running steps"),
    OptionDef::new("overcommit", Apply::Flag(|low| low.overcommit = Some(true)))
        .short('O')
        .srun_only("start more tasks than the job has CPUs on a node"),
    OptionDef::new("slurmd-debug", Apply::Value(|low, v, _| set(&mut low.slurmd_debug, text(v))))
        .value("level")
        .srun_only("the nodes' step messages to the tasks' stderr, from this level above error"),
    OptionDef::new("debugger-test", Apply::Flag(|low| low.debugger_test = Some(true)))
        .srun_only("start the tasks stopped before their exec and print each one's host and pid"),
    OptionDef::new("pty", Apply::Flag(|low| low.pty = Some(true))).srun_only("run task 0 on a pseudo-terminal"),
    OptionDef::new("immediate", Apply::OptionalValue(|low, v, _| set(&mut low.immediate, immediate(v))))
        .short('I')
        .value("secs")
        .help("fail unless the allocation is granted within secs (default: at once)")
        .commands(Commands::STEP),
    OptionDef::new("kill-on-bad-exit", Apply::OptionalValue(|low, v, _| set(&mut low.kill_on_bad_exit, one_zero(v))))
        .short('K')
        .value("0|1")
        .help("end the step when a task exits with a non-zero code")
        .commands(Commands::STEP),
    OptionDef::new("wait", Apply::Value(|low, v, _| set(&mut low.step_wait, seconds("--wait", v))))
        .short('W')
        .value("sec")
        .srun_only("kill the other tasks this long after the first one exits"),
    OptionDef::new("task-prolog", Apply::Value(|low, v, _| set(&mut low.task_prolog, text(v))))
        .value("program")
        .srun_only("run this before each task (its export, unset and print lines shape the task)"),
    OptionDef::new("task-epilog", Apply::Value(|low, v, _| set(&mut low.task_epilog, text(v))))
        .value("program")
        .srun_only("run this after each task"),
    OptionDef::new("quit-on-interrupt", Apply::Flag(|low| low.quit_on_interrupt = Some(true))).srun_only(
        "kill the step at the first SIGINT (default: print its status; a second one within a second aborts)",
    ),
    OptionDef::new("no-shell", Apply::Flag(|low| low.no_shell = Some(true)))
        .help("exit once the allocation is granted, leaving it to run")
        .commands(Commands::SALLOC),
    // Constraint options.
    OptionDef::new("constraint", Apply::Value(|low, v, _| set(&mut low.constraint, text(v))))
        .short('C')
        .value("list")
        .env("SBATCH_CONSTRAINT")
        .section(Section::Constraint)
        .help("node features the job needs"),
    OptionDef::new("mem", Apply::Value(|low, v, _| set_mem(low, MemRequest::PerNode(parse_mem_mb(v)?))))
        .value("MB")
        .env("SBATCH_MEM_PER_NODE")
        .section(Section::Constraint)
        .help("memory per node (MB, or a K, M, G or T suffix)")
        .commands(Commands::ALL),
    OptionDef::new("nodelist", Apply::Value(|low, v, _| set(&mut low.nodelist, hostlist(v))))
        .short('w')
        .value("hosts")
        .section(Section::Constraint)
        .help("nodes the job must include")
        .commands(Commands::ALL),
    OptionDef::new("mincpus", Apply::Value(|low, v, _| set(&mut low.mincpus, positive("number of CPUs", v))))
        .value("n")
        .section(Section::Constraint)
        .help("at least this many CPUs of each node")
        .commands(Commands::STEP),
    OptionDef::new("tmp", Apply::Value(|low, v, _| set(&mut low.tmp, parse_mem_mb(v))))
        .value("MB")
        .section(Section::Constraint)
        .help("temporary disk per node (no Drover node declares any: only 0 fits)")
        .commands(Commands::ALL),
    OptionDef::new("exclude", Apply::Value(|low, v, _| set(&mut low.exclude, hostlist(v))))
        .short('x')
        .value("hosts")
        .section(Section::Constraint)
        .help("nodes the job must not use"),
    // Consumable resources related options.
    OptionDef::new("exclusive", Apply::OptionalValue(|low, v, _| set(&mut low.exclusive, exclusive(v))))
        .env("SBATCH_EXCLUSIVE")
        .section(Section::Resources)
        .help("do not share the job's nodes with other jobs")
        .commands(Commands::ALL),
    OptionDef::new("mem-per-cpu", Apply::Value(|low, v, _| set_mem(low, MemRequest::PerCpu(parse_mem_mb(v)?))))
        .value("MB")
        .env("SBATCH_MEM_PER_CPU")
        .section(Section::Resources)
        .help("memory per allocated CPU")
        .commands(Commands::ALL),
    // GPU scheduling options.
    OptionDef::new("gpus", Apply::Value(|low, v, _| set(&mut low.gpus, parse_gpus(v))))
        .short('G')
        .value("n")
        .env("SBATCH_GPUS")
        .section(Section::Gpu)
        .help("GPUs for the whole job, [type:]count")
        .commands(Commands::ALL),
    OptionDef::new("gpus-per-node", Apply::Value(|low, v, _| set(&mut low.gpus_per_node, parse_gpus(v))))
        .value("n")
        .env("SBATCH_GPUS_PER_NODE")
        .section(Section::Gpu)
        .help("GPUs on each node, [type:]count")
        .commands(Commands::ALL),
    OptionDef::new("gpus-per-task", Apply::Value(|low, v, _| set(&mut low.gpus_per_task, parse_gpus(v))))
        .value("n")
        .env("SBATCH_GPUS_PER_TASK")
        .section(Section::Gpu)
        .help("GPUs for each task, [type:]count")
        .commands(Commands::ALL),
    OptionDef::new("mem-per-gpu", Apply::Value(|low, v, _| set_mem(low, MemRequest::PerGpu(parse_mem_mb(v)?))))
        .value("MB")
        .env("SBATCH_MEM_PER_GPU")
        .section(Section::Gpu)
        .help("memory per allocated GPU"),
    // Help options.
    OptionDef::new("help", Apply::Flag(|low| low.action = Some(Action::Help)))
        .short('h')
        .command_line_only()
        .section(Section::Help)
        .help("print this help and exit")
        .commands(Commands::ALL),
    OptionDef::new("usage", Apply::Flag(|low| low.action = Some(Action::Usage)))
        .short('u')
        .command_line_only()
        .section(Section::Help)
        .help("print a short usage summary and exit"),
    OptionDef::new("usage", Apply::Flag(|low| low.action = Some(Action::Usage)))
        .command_line_only()
        .commands(Commands::STEP)
        .section(Section::Help)
        .help("print a short usage summary and exit"),
    OptionDef::new("version", Apply::Flag(|low| low.action = Some(Action::Version)))
        .short('V')
        .command_line_only()
        .section(Section::Help)
        .help("print the version and exit")
        .commands(Commands::ALL),
    // Slurm options Drover does not implement yet.
    OptionDef::new("acctg-freq", Apply::Ignored(ArgKind::Required)).env("SBATCH_ACCTG_FREQ"),
    OptionDef::new("batch", Apply::NotYet(ArgKind::Required)).env("SBATCH_BATCH"),
    OptionDef::new("bb", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("bbf", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("cluster-constraint", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("contiguous", Apply::Ignored(ArgKind::None)),
    OptionDef::new("core-spec", Apply::NotYet(ArgKind::Required)).short('S').env("SBATCH_CORE_SPEC"),
    OptionDef::new("cores-per-socket", Apply::Ignored(ArgKind::Required)),
    OptionDef::new("cpu-freq", Apply::Ignored(ArgKind::Required)),
    OptionDef::new("cpus-per-gpu", Apply::NotYet(ArgKind::Required)).env("SBATCH_CPUS_PER_GPU"),
    OptionDef::new("delay-boot", Apply::Ignored(ArgKind::Required)).env("SBATCH_DELAY_BOOT"),
    OptionDef::new("distribution", Apply::Ignored(ArgKind::Required)).short('m').env("SBATCH_DISTRIBUTION"),
    OptionDef::new("preserve-env", Apply::Flag(|low| low.preserve_env = Some(true)))
        .short('E')
        .help("the tasks get srun's SLURM_NNODES and SLURM_NTASKS, not the step's")
        .commands(Commands::STEP)
        .help_for(Command::Salloc, SALLOC_UNUSED),
    OptionDef::new("distribution", Apply::Value(|low, v, _| set(&mut low.distribution, distribution(v))))
        .short('m')
        .value("type")
        .help("how tasks are laid out over the nodes: block, cyclic or plane=N")
        .commands(Commands::STEP)
        .help_for(Command::Salloc, SALLOC_UNUSED),
    OptionDef::new("export-file", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("extra-node-info", Apply::Ignored(ArgKind::Required)).short('B'),
    OptionDef::new("gid", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("gpu-bind", Apply::Ignored(ArgKind::Required)).env("SBATCH_GPU_BIND"),
    OptionDef::new("gpu-freq", Apply::Ignored(ArgKind::Required)).env("SBATCH_GPU_FREQ"),
    OptionDef::new("gpus-per-socket", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("gres-flags", Apply::Ignored(ArgKind::Required)).env("SBATCH_GRES_FLAGS"),
    OptionDef::new("hint", Apply::Ignored(ArgKind::Required)).env("SBATCH_HINT"),
    OptionDef::new("immediate", Apply::NotYet(ArgKind::Optional)).short('I'),
    OptionDef::new("jobid", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("licenses", Apply::NotYet(ArgKind::Required)).short('L'),
    OptionDef::new("mcs-label", Apply::Ignored(ArgKind::Required)),
    OptionDef::new("mem-bind", Apply::Ignored(ArgKind::Required)).env("SBATCH_MEM_BIND"),
    OptionDef::new("mincpus", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("network", Apply::Ignored(ArgKind::Required)).env("SBATCH_NETWORK"),
    OptionDef::new("no-kill", Apply::Ignored(ArgKind::Optional)).short('k').env("SBATCH_NO_KILL"),
    OptionDef::new("nodefile", Apply::NotYet(ArgKind::Required)).short('F'),
    OptionDef::new("ntasks-per-core", Apply::Ignored(ArgKind::Required)),
    OptionDef::new("ntasks-per-gpu", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("ntasks-per-socket", Apply::Ignored(ArgKind::Required)),
    OptionDef::new("overcommit", Apply::Flag(|low| low.overcommit = Some(true)))
        .short('O')
        .env("SBATCH_OVERCOMMIT")
        .help("overcommit resources: one task's CPUs per node, shared by all its tasks"),
    OptionDef::new("oversubscribe", Apply::Ignored(ArgKind::None)).short('s'),
    OptionDef::new("power", Apply::Ignored(ArgKind::Required)).env("SBATCH_POWER"),
    OptionDef::new("priority", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("profile", Apply::Ignored(ArgKind::Required)).env("SBATCH_PROFILE"),
    OptionDef::new("container", Apply::Value(|low, v, _| set(&mut low.container, bundle_path(v))))
        .value("path")
        .env("SBATCH_CONTAINER")
        .help("run the job in the OCI container bundle at this path")
        .commands(Commands::ALL)
        .help_for(Command::Srun, "run the tasks in the OCI container bundle at this path")
        .help_for(Command::Salloc, "the OCI container bundle srun runs steps in (SLURM_CONTAINER)"),
    OptionDef::new("propagate", Apply::OptionalValue(|low, v, _| set(&mut low.propagate, text(v.unwrap_or("")))))
        .value("rlimit[,rlimit...]")
        .help("resource limits passed to the job: ALL (the default), NONE or a list (NOFILE, CORE, ...)"),
    OptionDef::new("reboot", Apply::Ignored(ArgKind::None)),
    OptionDef::new("sockets-per-node", Apply::Ignored(ArgKind::Required)),
    OptionDef::new("spread-job", Apply::Ignored(ArgKind::None)).env("SBATCH_SPREAD_JOB"),
    OptionDef::new("switches", Apply::Ignored(ArgKind::Required)).env("SBATCH_REQ_SWITCH"),
    OptionDef::new("thread-spec", Apply::NotYet(ArgKind::Required)).env("SBATCH_THREAD_SPEC"),
    OptionDef::new("threads-per-core", Apply::Ignored(ArgKind::Required)),
    OptionDef::new("time-min", Apply::Ignored(ArgKind::Required)),
    OptionDef::new("uid", Apply::NotYet(ArgKind::Required)),
    OptionDef::new("use-min-nodes", Apply::Ignored(ArgKind::None)).env("SBATCH_USE_MIN_NODES"),
    OptionDef::new("wait-all-nodes", Apply::Ignored(ArgKind::Required)).env("SBATCH_WAIT_ALL_NODES"),
    // srun's and salloc's hints without effect (no warning: they never printed one).
    OptionDef::new("cpu-bind", Apply::Ignored(ArgKind::Required)).commands(Commands::STEP),
    OptionDef::new("exact", Apply::Ignored(ArgKind::None)).commands(Commands::STEP),
    OptionDef::new("mpi", Apply::Ignored(ArgKind::Required)).commands(Commands::STEP),
    OptionDef::new("quiet", Apply::Ignored(ArgKind::None)).short('Q').commands(Commands::STEP),
    OptionDef::new("signal", Apply::Ignored(ArgKind::Required)).commands(Commands::STEP),
    OptionDef::new("threads", Apply::Ignored(ArgKind::Required)).short('T').commands(Commands::STEP),
    OptionDef::new("unbuffered", Apply::Ignored(ArgKind::None)).short('u').commands(Commands::STEP),
];
