//! `scontrol`: the read side of Slurm's control command. `show job|node|partition [name]`
//! print `Key=Value` records (continuation lines indented three spaces, or one line each with
//! `-o`), `show hostnames|hostlist` convert hostlists, and `ping` asks ctld whether it is up.
//! `hold`, `uhold`, `release`, `requeue`, `requeuehold` and `update job` act on jobs, arrays and
//! array tasks (a task still pending in its array's range is split off into its own record
//! first); `update NodeName=` and `reconfigure` change nodes and the config; other commands that
//! change state are refused as
//! not supported yet.
//!
//! scontrol's grammar is a small command language rather than options, so it is parsed by hand;
//! the records are built by the pure `render_*` functions.

use super::common;
use super::format::{self, Tz};
use super::sinfo::{gres_string, node_alloc_tres, node_tres};
use drover_shared::UnixTime;
use drover_shared::grammar::mem::format_mem_mb;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::grammar::time::parse_time_limit;
use drover_shared::hostlist;
use drover_shared::job::{JobId, JobInfo};
use drover_shared::node::{NodeInfo, PartitionInfo};
use drover_shared::proto::client::{JobQuery, JobUpdate, NodeReason, ReplicaState, Request, Response};
use std::ffi::OsString;

const USAGE: &str = "Usage: scontrol [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -a or --all: show all partitions, including hidden ones
     -d or --details: show more details (DerivedExitCode, GresUsed)
     -h or --help: print this description of use
     -M or --clusters <name>: the cluster to talk to (Drover serves one)
     -o or --oneliner: print one record per line
     -Q or --quiet: print no warning or informational messages
     -v or --verbose: print more messages
     -V or --version: print the Slurm release Drover answers to

    Valid <COMMAND> values are:
     show <ENTITY> [<ID>]     display the state of the identified entity, by default all
                              records; <ENTITY> may be job, step, node, partition, config,
                              hostnames (one host name per line of <ID>, default
                              $SLURM_JOB_NODELIST) or hostlist (compress host names)
     ping                     report the state of the controller
     hold|uhold|release|requeue|requeuehold <job_list>
                              hold, release or requeue jobs
     update JobId=<ids> <Key=Value>...
                              change jobs
     update NodeName=<hostlist> State=<state> [Reason=<text>]
                              change nodes (operators, admins); <state> is DRAIN, DOWN,
                              RESUME, IDLE, UNDRAIN or CANCEL_REBOOT
     listpids [<job_id>[.<step_id>]] [<NodeName>]
                              the processes of running jobs on this node (or NodeName)
     reboot [ASAP] [nextstate=RESUME|DOWN] [reason=<text>] ALL|<NodeList>
                              reboot nodes once they run no job (operators, admins)
     cancel_reboot <NodeList> forget a reboot not yet under way (operators, admins)
     reconfigure              re-read the controller's config file (admins)
     version                  print the Slurm release Drover answers to";

/// Options common to every scontrol command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ShowOptions {
    /// `-o`: one line per record.
    pub(crate) oneliner: bool,
    /// `-d`: extra lines (`DerivedExitCode`, `GresUsed`).
    pub(crate) details: bool,
}

/// The separator between the lines of one record.
/// The `Key=Value` lines of a record with control characters as `?`: a stored job name, comment
/// or node reason cannot add a line to the record or send escapes to the reader's terminal.
fn printable_lines(lines: &[String]) -> Vec<std::borrow::Cow<'_, str>> {
    lines.iter().map(|line| drover_shared::text::printable(line)).collect()
}

fn separator(options: ShowOptions) -> &'static str {
    if options.oneliner { " " } else { "\n   " }
}

fn job_time_limit(limit: Option<TimeLimit>) -> String {
    match limit {
        Some(TimeLimit::Minutes(minutes)) => format::hms(i64::from(minutes) * 60),
        Some(TimeLimit::Unlimited) => "UNLIMITED".into(),
        None => "Partition_Limit".into(),
    }
}

/// One `scontrol show job` record.
pub(crate) fn render_job(job: &JobInfo, now: UnixTime, tz: Tz, options: ShowOptions) -> String {
    let ts = |time: Option<UnixTime>| format::timestamp_or(time, tz, "Unknown");
    let started = common::has_started(job);
    let end = job.end_time.or_else(|| match (job.start_time, job.time_limit) {
        (Some(start), Some(TimeLimit::Minutes(minutes))) => Some(start + i64::from(minutes) * 60),
        _ => None,
    });
    let (per_cpu, min_mem) = common::job_min_memory(job);
    let mut lines = vec![
        match job.array_job_id {
            Some(array) => {
                let throttle = if job.array_max_tasks > 0 && job.array_task_id.is_none() {
                    format!(" ArrayTaskThrottle={}", job.array_max_tasks)
                } else {
                    String::new()
                };
                let tasks = match job.array_task_id {
                    Some(task) => task.to_string(),
                    None => drover_shared::grammar::array::format_ranges(&job.array_tasks_pending),
                };
                format!("JobId={} ArrayJobId={array} ArrayTaskId={tasks}{throttle} JobName={}", job.job_id, job.name)
            }
            None => format!("JobId={} JobName={}", job.job_id, job.name),
        },
        format!("UserId={}({}) GroupId={}({}) MCS_label=N/A", job.user, job.uid, job.group, job.gid),
        format!("Priority={} Nice={} Account={} QOS={}", job.priority, job.nice, job.account, job.qos),
        format!(
            "JobState={} Reason={} Dependency={}",
            job.state().long_name(),
            job.reason,
            common::or_null(job.dependency.as_deref())
        ),
        format!(
            "Requeue={} Restarts={} BatchFlag=1 Reboot=0 ExitCode={}",
            u8::from(job.requeue),
            job.restarts,
            job.exit_status
        ),
    ];
    if options.details {
        let derived = job
            .steps
            .iter()
            .filter(|s| matches!(s.step_id, drover_shared::job::StepId::Numbered(_)))
            .map(|s| s.exit_status)
            .max_by_key(|s| s.parts())
            .unwrap_or_default();
        lines.push(format!("DerivedExitCode={derived}"));
    }
    lines.extend([
        format!("RunTime={} TimeLimit={} TimeMin=N/A", format::hms(job.elapsed(now)), job_time_limit(job.time_limit)),
        format!("SubmitTime={} EligibleTime={}", format::timestamp(job.submit_time, tz), ts(job.eligible_time)),
        format!("AccrueTime={}", ts(job.eligible_time)),
        format!("StartTime={} EndTime={} Deadline=N/A", ts(job.start_time), ts(end)),
        format!(
            "SuspendTime=None SecsPreSuspend=0 LastSchedEval={} Scheduler=Main",
            format::timestamp(job.start_time.unwrap_or(job.submit_time), tz)
        ),
        format!("Partition={} AllocNode:Sid={}:0", job.partition, job.submit_host),
        format!(
            "ReqNodeList={} ExcNodeList={}",
            common::or_null(job.nodelist_requested.as_deref()),
            common::or_null(job.exclude.as_deref())
        ),
        format!("NodeList={}", hostlist::compress(&job.nodes)),
    ]);
    if started {
        lines.push(format!("BatchHost={}", job.nodes[0]));
    }
    lines.extend([
        format!(
            "NumNodes={} NumCPUs={} NumTasks={} CPUs/Task={} ReqB:S:C:T=0:0:*:*",
            job.num_nodes,
            job.num_cpus,
            job.num_tasks,
            job.cpus_per_task.max(1)
        ),
        format!("TRES={}", common::tres_string(&common::job_tres(job))),
        "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*".to_owned(),
        format!(
            "MinCPUsNode={} {}={} MinTmpDiskNode=0",
            job.cpus_per_task.max(1),
            if per_cpu { "MinMemoryCPU" } else { "MinMemoryNode" },
            format_mem_mb(min_mem)
        ),
        format!("Features={} DelayBoot=00:00:00", common::or_null(job.constraint.as_deref())),
        format!(
            "OverSubscribe={} Contiguous=0 Licenses=(null) Network=(null)",
            if job.exclusive { "NO" } else { "OK" }
        ),
        format!("Command={}", common::or_null(job.command.as_deref())),
        format!("WorkDir={}", job.work_dir),
    ]);
    if let Some(comment) = job.comment.as_deref().filter(|c| !c.is_empty()) {
        lines.push(format!("Comment={comment}"));
    }
    let stdout = stdio_path(job, &job.stdout);
    let stderr = if job.stderr.is_empty() { stdout.clone() } else { stdio_path(job, &job.stderr) };
    let stdin = if job.stdin.is_empty() { "/dev/null".to_owned() } else { stdio_path(job, &job.stdin) };
    lines.extend([
        format!("StdErr={stderr}"),
        format!("StdIn={stdin}"),
        format!("StdOut={stdout}"),
        "Power=".to_owned(),
    ]);
    if !job.tres_per_node.is_empty() {
        lines.push(format!("TresPerNode={}", job.tres_per_node));
    }
    let sep = separator(options);
    let mut out = printable_lines(&lines).join(sep);
    out.push_str(sep);
    out.push('\n');
    if !options.oneliner {
        out.push('\n');
    }
    out
}

/// The node's `State=`: base state and `+FLAG`s.
fn node_state(node: &NodeInfo) -> String {
    let mut state = node.state.long_name().to_owned();
    if node.drain {
        state.push_str("+DRAIN");
    }
    if node.not_responding {
        state.push_str("+NOT_RESPONDING");
    }
    match node.reboot {
        Some(drover_shared::node::RebootState::Issued) => state.push_str("+REBOOT_ISSUED"),
        Some(drover_shared::node::RebootState::Requested) => state.push_str("+REBOOT_REQUESTED"),
        None => {}
    }
    state
}

/// One `scontrol show node` record. Hardware facts Drover does not collect print as Slurm
/// prints them for a node that never reported them (`(null)`, `N/A`); sockets and threads are
/// taken as 1, cores as the CPU count.
pub(crate) fn render_node(
    node: &NodeInfo,
    reason_by: Option<&NodeReason>,
    features: &[String],
    tz: Tz,
    options: ShowOptions,
) -> String {
    let ts = |time: Option<UnixTime>| format::timestamp_or(time, tz, "None");
    let (cfg_tres, alloc_tres) = (node_tres(node), node_alloc_tres(node));
    let mut lines = vec![
        format!("NodeName={} Arch=(null) CoresPerSocket={} ", node.name, node.cpus),
        format!("CPUAlloc={} CPUEfctv={} CPUTot={} CPULoad=N/A", node.cpus_alloc, node.cpus, node.cpus),
        format!("AvailableFeatures={}", super::sinfo::features_text(features)),
        format!("ActiveFeatures={}", super::sinfo::features_text(features)),
        format!("Gres={}", gres_string(node)),
    ];
    if options.details {
        lines.push(format!("GresUsed={}", super::sinfo::gres_used_string(node)));
    }
    lines.extend([
        format!("NodeAddr={} NodeHostName={} Version={}", node.address, node.name, node.version),
        "OS=(null) ".to_owned(),
        format!("RealMemory={} AllocMem={} FreeMem=N/A Sockets=1 Boards=1", node.real_memory_mb, node.mem_alloc_mb),
        format!("State={} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A", node_state(node)),
        format!("Partitions={} ", node.partitions.join(",")),
        format!("BootTime={} SlurmdStartTime={}", ts(node.boot_time), ts(node.noded_start_time)),
        format!("LastBusyTime={}", ts(node.last_busy_time)),
        format!("CfgTRES={}", common::tres_string(&cfg_tres)),
        format!("AllocTRES={}", common::tres_string(&alloc_tres)),
        "CapWatts=n/a".to_owned(),
        "CurrentWatts=0 AveWatts=0".to_owned(),
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s".to_owned(),
    ]);
    if let Some(reason) = node.reason.as_deref().filter(|r| !r.is_empty()) {
        match reason_by.filter(|r| r.node == node.name) {
            Some(by) => lines.push(format!("Reason={reason} [{}@{}]", by.user, format::timestamp(by.time, tz))),
            None => lines.push(format!("Reason={reason}")),
        }
    }
    record(&lines, options)
}

fn record(lines: &[String], options: ShowOptions) -> String {
    let mut out = printable_lines(lines).join(separator(options));
    out.push('\n');
    if !options.oneliner {
        out.push('\n');
    }
    out
}

fn list_or_all(items: &[String]) -> String {
    if items.is_empty() { "ALL".into() } else { items.join(",") }
}

/// One `scontrol show partition` record.
pub(crate) fn render_partition(partition: &PartitionInfo, options: ShowOptions) -> String {
    let time = |limit: TimeLimit| match limit {
        TimeLimit::Minutes(minutes) => format::hms(i64::from(minutes) * 60),
        TimeLimit::Unlimited => "UNLIMITED".into(),
    };
    let mut tres = vec![
        ("cpu", partition.total_cpus.to_string()),
        ("mem", format_mem_mb(partition.total_mem_mb)),
        ("node", partition.nodes.len().to_string()),
        ("billing", partition.total_cpus.to_string()),
    ];
    if partition.total_gpus > 0 {
        tres.push(("gres/gpu", partition.total_gpus.to_string()));
    }
    let yes_no = |flag: bool| if flag { "YES" } else { "NO" };
    let nodes = if partition.nodes.is_empty() { "(null)".to_owned() } else { hostlist::compress(&partition.nodes) };
    let lines = [
        format!("PartitionName={}", partition.name),
        format!(
            "AllowGroups=ALL AllowAccounts={} AllowQos={}",
            list_or_all(&partition.allow_accounts),
            list_or_all(&partition.allow_qos)
        ),
        format!("AllocNodes=ALL Default={} QoS=N/A", yes_no(partition.default)),
        format!(
            "DefaultTime={} DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden={}",
            partition.default_time.map_or_else(|| "NONE".to_owned(), time),
            yes_no(partition.hidden)
        ),
        format!(
            "MaxNodes={} MaxTime={} MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED",
            partition.max_nodes.map_or_else(|| "UNLIMITED".to_owned(), |n| n.to_string()),
            time(partition.max_time)
        ),
        format!("Nodes={nodes}"),
        format!(
            "PriorityJobFactor={} PriorityTier={} RootOnly=NO ReqResv=NO OverSubscribe=NO",
            partition.priority_job_factor, partition.priority_tier
        ),
        "OverTimeLimit=NONE PreemptMode=OFF".to_owned(),
        format!(
            "State={} TotalCPUs={} TotalNodes={} SelectTypeParameters=NONE",
            if partition.up { "UP" } else { "DOWN" },
            partition.total_cpus,
            partition.nodes.len()
        ),
        "JobDefaults=(null)".to_owned(),
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED".to_owned(),
        format!("TRES={}", common::tres_string(&tres)),
    ];
    record(&lines, options)
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Invocation {
    options: ShowOptions,
    quiet: bool,
    words: Vec<String>,
}

/// Splits options from command words; options may come anywhere (`show job -o 25`).
fn parse_invocation(args: &[String]) -> Result<Option<Invocation>, String> {
    let mut invocation = Invocation { options: ShowOptions::default(), quiet: false, words: Vec::new() };
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            let known = ["oneliner", "details", "all", "quiet", "verbose", "clusters", "help", "version"];
            let matches: Vec<&&str> = known.iter().filter(|k| !name.is_empty() && k.starts_with(name)).collect();
            let [full] = matches.as_slice() else { return Err(format!("unrecognized option '{arg}'")) };
            match **full {
                "oneliner" => invocation.options.oneliner = true,
                "details" => invocation.options.details = true,
                "quiet" => invocation.quiet = true,
                "clusters" if value.is_none() && iter.next().is_none() => {
                    return Err(format!("option '{arg}' requires an argument"));
                }
                "help" => return Ok(None),
                "version" => invocation.words = vec!["version".into()],
                _ => {}
            }
        } else if arg.len() > 1 && arg.starts_with('-') {
            let mut flags = arg[1..].chars();
            while let Some(flag) = flags.next() {
                match flag {
                    'o' => invocation.options.oneliner = true,
                    'd' => invocation.options.details = true,
                    'Q' => invocation.quiet = true,
                    'a' | 'v' => {}
                    'h' => return Ok(None),
                    'V' => invocation.words = vec!["version".into()],
                    'M' => {
                        if flags.as_str().is_empty() && iter.next().is_none() {
                            return Err("option requires an argument -- 'M'".into());
                        }
                        break;
                    }
                    other => return Err(format!("invalid option -- '{other}'")),
                }
            }
        } else {
            invocation.words.push(arg.clone());
        }
    }
    Ok(Some(invocation))
}

/// Whether `word` names `full` (case-insensitive, abbreviations of at least `min` letters).
fn names(word: &str, full: &str, min: usize) -> bool {
    let word = word.to_ascii_lowercase();
    word.len() >= min.min(full.len()) && full.starts_with(&word)
}

/// Runs `scontrol`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args: Vec<String> = args.into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let invocation = match parse_invocation(&args) {
        Ok(Some(invocation)) => invocation,
        Ok(None) => {
            println!("{USAGE}");
            return Ok(0);
        }
        Err(message) => {
            eprintln!("scontrol: {message}\nTry \"scontrol --help\" for more information");
            return Ok(1);
        }
    };
    let words = &invocation.words;
    let Some(command) = words.first() else {
        eprintln!("scontrol: error: no command given (interactive mode is not supported)\n{USAGE}");
        return Ok(1);
    };
    let options = invocation.options;
    if names(command, "ping", 2) {
        return ping(options.details);
    }
    if names(command, "version", 4) {
        println!("{}", crate::options::help::VERSION);
        return Ok(0);
    }
    let lower = command.to_ascii_lowercase();
    if matches!(lower.as_str(), "hold" | "uhold" | "release" | "requeue" | "requeuehold") {
        return job_command(&lower, &words[1..]);
    }
    if names(command, "update", 2) {
        if super::scontrol_admin::is_node_update(&words[1..]) {
            return super::scontrol_admin::update_node(&words[1..]);
        }
        return update(&words[1..]);
    }
    if names(command, "reconfigure", 7) {
        return super::scontrol_admin::reconfigure();
    }
    if names(command, "reboot_nodes", 3) {
        return super::scontrol_admin::reboot(&words[1..]);
    }
    if names(command, "cancel_reboot", 3) {
        return super::scontrol_admin::cancel_reboot(&words[1..]);
    }
    if names(command, "listpids", 5) {
        return super::listpids::run(&words[1..]);
    }
    if !names(command, "show", 3) {
        anyhow::bail!("{command} is not supported yet");
    }
    let Some(entity) = words.get(1) else { anyhow::bail!("no entity specified for show") };
    let name = words.get(2).map(String::as_str);
    if names(entity, "jobs", 3) {
        show_jobs(name, options)
    } else if names(entity, "steps", 4) {
        show_steps(name, options)
    } else if names(entity, "nodes", 4) {
        show_nodes(name, options)
    } else if names(entity, "partitions", 4) {
        show_partitions(name, options)
    } else if names(entity, "config", 1) {
        show_config()
    } else if names(entity, "hostnames", 5) {
        let expr = match name {
            Some(expr) => expr.to_owned(),
            None => std::env::var("SLURM_JOB_NODELIST").map_err(|_| anyhow::anyhow!("no hostlist given"))?,
        };
        // As Slurm: a malformed list is reported, and the exit status stays 0.
        match hostlist::expand(&expr) {
            Ok(hosts) => hosts.iter().for_each(|host| println!("{host}")),
            Err(_) => eprintln!("Invalid hostlist: {expr}"),
        }
        Ok(0)
    } else if names(entity, "hostlist", 5) {
        let Some(expr) = name else { anyhow::bail!("no host names given") };
        println!("{}", hostlist::compress(&hostlist::expand(expr)?));
        Ok(0)
    } else {
        anyhow::bail!("show {entity} is not supported yet")
    }
}

/// Resolves job id arguments to the records to act on: jobs and arrays by their id, array
/// tasks (`12_3`, as jobs inside an array see themselves) by their records; a task still
/// pending in its array's base record is split off into a record of its own first.
fn resolve_records(targets: &[common::JobTarget]) -> anyhow::Result<Vec<JobId>> {
    let mut ids = Vec::new();
    for target in targets {
        let Some(tasks) = &target.tasks else {
            ids.push(target.job_id);
            continue;
        };
        let query = JobQuery { job_ids: vec![target.job_id], include_finished: true, ..JobQuery::default() };
        let jobs = match crate::client::call(&Request::QueryJobs(query))? {
            Response::Jobs { jobs, .. } => jobs,
            Response::Error { code, detail } => anyhow::bail!("{}: {detail}", code.message()),
            other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        };
        for &task in tasks {
            let record = jobs.iter().find(|j| j.array_job_id == Some(target.job_id) && j.array_task_id == Some(task));
            match record {
                Some(job) => ids.push(job.job_id),
                // Still pending in the array's base record: ctld splits it off into its own
                // record, as Slurm does, and the command acts on that.
                None if jobs.iter().any(|j| j.array_tasks_pending.contains(&task)) => {
                    let request = Request::SplitArrayTask { array_job_id: target.job_id, task };
                    match crate::client::call(&request)? {
                        Response::Submitted { job_id } => ids.push(job_id),
                        Response::Error { code, .. } => {
                            anyhow::bail!("{} for job {}_{task}", code.message(), target.job_id)
                        }
                        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
                    }
                }
                None => anyhow::bail!("Invalid job id specified for job {}_{task}", target.job_id),
            }
        }
    }
    Ok(ids)
}

/// Parses the `Key=Value` words of `scontrol update` for a job into the job ids and the change.
fn parse_update(words: &[String]) -> anyhow::Result<(Vec<common::JobTarget>, JobUpdate)> {
    let mut targets = Vec::new();
    let mut update = JobUpdate::default();
    for word in words {
        let Some((key, value)) = word.split_once('=') else { anyhow::bail!("Invalid input: {word}") };
        match key.to_ascii_lowercase().as_str() {
            "jobid" | "job" => targets.extend(common::parse_job_targets(&[value.to_owned()])?),
            "timelimit" => update.time_limit = Some(parse_time_limit(value)?),
            "jobname" | "name" => update.name = Some(value.to_owned()),
            "comment" => update.comment = Some(value.to_owned()),
            "nice" => update.nice = Some(value.parse().map_err(|_| anyhow::anyhow!("Invalid nice value: {value}"))?),
            "dependency" => update.dependency = Some(value.to_owned()),
            "arraytaskthrottle" => {
                update.array_max_tasks =
                    Some(value.parse().map_err(|_| anyhow::anyhow!("Invalid ArrayTaskThrottle value: {value}"))?);
            }
            "requeue" => {
                update.requeue = match value {
                    "0" => Some(false),
                    "1" => Some(true),
                    _ => anyhow::bail!("Invalid Requeue value: {value}"),
                }
            }
            "partitionname" | "reservationname" | "frontendname" | "stepid" => {
                anyhow::bail!("update of {key} is not supported yet")
            }
            _ => anyhow::bail!("Update of {key} is not supported yet"),
        }
    }
    if targets.is_empty() {
        anyhow::bail!("No job identification provided");
    }
    Ok((targets, update))
}

/// `scontrol update JobId=<ids> Key=Value …`.
fn update(words: &[String]) -> anyhow::Result<i32> {
    let (targets, update) = parse_update(words)?;
    let job_ids = resolve_records(&targets)?;
    per_job_request(&job_ids, |job_ids| Request::UpdateJob { job_ids, update: update.clone() })
}

/// `scontrol hold|uhold|release|requeue|requeuehold <job_list>`.
fn job_command(command: &str, words: &[String]) -> anyhow::Result<i32> {
    if command == "requeuehold"
        && let Some(word) =
            words.iter().find(|w| w.eq_ignore_ascii_case("specialexit") || w.to_ascii_lowercase().starts_with("state="))
    {
        anyhow::bail!("requeuehold {word}: the SPECIAL_EXIT state is not supported yet");
    }
    if words.is_empty() {
        anyhow::bail!("no job id given to {command}");
    }
    let job_ids = resolve_records(&common::parse_job_targets(words)?)?;
    let make = |job_ids| match command {
        "hold" => Request::Hold { job_ids, hold: Some(false) },
        "uhold" => Request::Hold { job_ids, hold: Some(true) },
        "release" => Request::Hold { job_ids, hold: None },
        "requeuehold" => Request::RequeueHold { job_ids },
        _ => Request::Requeue { job_ids },
    };
    per_job_request(&job_ids, make)
}

/// Sends requests that ctld answers job by job (`make` of each run of at most
/// `MAX_LIST_ITEMS` ids); prints each refusal and exits 1 if any.
fn per_job_request(job_ids: &[JobId], make: impl Fn(Vec<JobId>) -> Request) -> anyhow::Result<i32> {
    let mut code = 0;
    for (_, answer) in crate::client::call_chunked(job_ids, make)? {
        let results = match answer {
            Response::Cancelled { results } => results,
            Response::Error { code, detail } => anyhow::bail!("{}: {detail}", code.message()),
            other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        };
        for (job_id, result) in results {
            if let Err(error) = result {
                eprintln!("{} for job {job_id}", error.message());
                code = 1;
            }
        }
    }
    Ok(code)
}

/// `scontrol show config`: `Configuration data as of <time>`, then `Name = value` lines.
fn show_config() -> anyhow::Result<i32> {
    match crate::client::call(&Request::ShowConfig)? {
        Response::Config { now, entries } => {
            print!("{}", render_config(now, &entries, Tz::Local));
            Ok(0)
        }
        Response::Error { code, .. } => {
            eprintln!("slurm_load_ctl_conf error: {}", code.message());
            Ok(1)
        }
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    }
}

fn render_config(now: UnixTime, entries: &[(String, String)], tz: Tz) -> String {
    let mut out = format!("Configuration data as of {}\n", format::timestamp(now, tz));
    for (name, value) in entries {
        out.push_str(&format!("{name:<23} = {value}\n"));
    }
    out
}

fn show_jobs(name: Option<&str>, options: ShowOptions) -> anyhow::Result<i32> {
    let targets: Vec<common::JobTarget> = match name {
        None => Vec::new(),
        Some(text) => match common::parse_job_target(text) {
            Some(target) => vec![target],
            None => return Ok(common::load_jobs_failed("Invalid job id specified")),
        },
    };
    let job_ids: Vec<JobId> = targets.iter().map(|t| t.job_id).collect();
    let query = JobQuery { job_ids: job_ids.clone(), include_finished: true, ..JobQuery::default() };
    let (now, jobs) = match common::jobs_answer(crate::client::call(&Request::QueryJobs(query))) {
        Ok(Response::Jobs { now, jobs }) => (now, jobs),
        Ok(other) => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        Err(code) => return Ok(code),
    };
    let jobs: Vec<&JobInfo> =
        jobs.iter().filter(|j| targets.is_empty() || targets.iter().any(|t| t.matches(j))).collect();
    if jobs.is_empty() {
        if job_ids.is_empty() {
            println!("No jobs in the system");
            return Ok(0);
        }
        return Ok(common::load_jobs_failed("Invalid job id specified"));
    }
    for job in jobs {
        print!("{}", render_job(job, now, Tz::Local, options));
    }
    Ok(0)
}

/// One `scontrol show step` record: a running step of `job` (the batch step included).
pub(crate) fn render_step(job: &JobInfo, step: &drover_shared::job::StepInfo, tz: Tz, options: ShowOptions) -> String {
    let ts = |time: Option<UnixTime>| format::timestamp_or(time, tz, "Unknown");
    let nodes = hostlist::compress(&step.nodes);
    let lines = [
        format!(
            "StepId={}.{} UserId={} StartTime={} TimeLimit={}",
            job.job_id,
            step.step_id,
            job.uid,
            ts(step.start_time),
            job_time_limit(job.time_limit)
        ),
        format!("State={} Partition={} NodeList={nodes}", step.state.long_name(), job.partition),
        format!(
            "Nodes={} CPUs={} Tasks={} Name={} Network=(null)",
            step.nodes.len(),
            step.num_cpus,
            step.num_tasks,
            step.name
        ),
        format!("TRES=cpu={},node={}", step.num_cpus, step.nodes.len()),
        "ResvPorts=(null)".to_owned(),
        "CPUFreqReq=Default Dist=Block".to_owned(),
    ];
    let mut out = printable_lines(&lines).join(separator(options));
    out.push('\n');
    if !options.oneliner {
        out.push('\n');
    }
    out
}

/// `scontrol show step(s) [JOB[.STEP]]`: the running steps, of one job or step or of all jobs
/// the caller may see.
fn show_steps(name: Option<&str>, options: ShowOptions) -> anyhow::Result<i32> {
    let (job_text, step_text) = match name {
        Some(text) => match text.split_once('.') {
            Some((job, step)) => (Some(job), Some(step)),
            None => (Some(text), None),
        },
        None => (None, None),
    };
    let job_id = match job_text.map(str::parse::<JobId>) {
        None => None,
        Some(Ok(id)) if id > 0 => Some(id),
        Some(_) => return Ok(common::load_jobs_failed("Invalid job id specified")),
    };
    let query = JobQuery { job_ids: job_id.into_iter().collect(), ..JobQuery::default() };
    let jobs = match common::jobs_answer(crate::client::call(&Request::QueryJobs(query))) {
        Ok(Response::Jobs { jobs, .. }) => jobs,
        Ok(other) => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        Err(code) => return Ok(code),
    };
    let mut shown = 0;
    for job in jobs.iter().filter(|j| job_id.is_none_or(|id| j.job_id == id)) {
        let running = job.steps.iter().filter(|s| s.state == drover_shared::job::JobState::Running);
        for step in running.filter(|s| step_text.is_none_or(|t| s.step_id.to_string() == t)) {
            print!("{}", render_step(job, step, Tz::Local, options));
            shown += 1;
        }
    }
    if shown == 0 {
        match name {
            None => println!("No job steps in the system"),
            Some(name) => println!("Job step {name} not found"),
        }
    }
    Ok(0)
}

fn show_nodes(name: Option<&str>, options: ShowOptions) -> anyhow::Result<i32> {
    let wanted = name.map(hostlist::expand).transpose()?.unwrap_or_default();
    let mut client = match crate::client::Client::connect() {
        Ok(client) => client,
        Err(error) => {
            eprintln!("slurm_load_node error: {error}");
            return Ok(1);
        }
    };
    let nodes = match client.call(&Request::QueryNodes) {
        Ok(Response::Nodes { nodes, .. }) => nodes,
        Ok(Response::Error { code, .. }) => {
            eprintln!("slurm_load_node error: {}", code.message());
            return Ok(1);
        }
        Ok(other) => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        Err(error) => {
            eprintln!("slurm_load_node error: {error}");
            return Ok(1);
        }
    };
    let reasons = match client.call(&Request::QueryNodeReasons)? {
        Response::NodeReasons { reasons } => reasons,
        _ => Vec::new(),
    };
    let by = |node: &NodeInfo| reasons.iter().find(|r| r.node == node.name);
    let features = super::sinfo::fetch_features()?;
    let features_of = |name: &str| features.get(name).map_or(&[][..], Vec::as_slice);
    let mut code = 0;
    if wanted.is_empty() {
        for node in &nodes {
            print!("{}", render_node(node, by(node), features_of(&node.name), Tz::Local, options));
        }
    } else {
        for host in &wanted {
            match nodes.iter().find(|n| &n.name == host) {
                Some(node) => print!("{}", render_node(node, by(node), features_of(&node.name), Tz::Local, options)),
                None => {
                    eprintln!("Node {host} not found");
                    code = 1;
                }
            }
        }
    }
    Ok(code)
}

fn show_partitions(name: Option<&str>, options: ShowOptions) -> anyhow::Result<i32> {
    let partitions = match crate::client::call(&Request::QueryPartitions) {
        Ok(Response::Partitions { partitions }) => partitions,
        Ok(Response::Error { code, .. }) => {
            eprintln!("slurm_load_partitions error: {}", code.message());
            return Ok(1);
        }
        Ok(other) => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        Err(error) => {
            eprintln!("slurm_load_partitions error: {error}");
            return Ok(1);
        }
    };
    let selected: Vec<&PartitionInfo> = partitions.iter().filter(|p| name.is_none_or(|n| p.name == n)).collect();
    if let (Some(name), true) = (name, selected.is_empty()) {
        eprintln!("Partition {name} not found");
        return Ok(1);
    }
    for partition in selected {
        print!("{}", render_partition(partition, options));
    }
    Ok(0)
}

/// Slurm's name for the `i`th controller `scontrol ping` lists.
fn controller_role(i: usize) -> String {
    match i {
        0 => "primary".to_owned(),
        1 => "backup".to_owned(),
        n => format!("backup{n}"),
    }
}

/// The lines of `scontrol ping` for a replicated controller: the leader as `primary`, the
/// others as `backup`, `backup2`, … in id order; `-d` adds each replica's id and how far its
/// log is behind the leader's.
pub(crate) fn replica_lines(replicas: &[ReplicaState], details: bool) -> String {
    let mut ordered: Vec<&ReplicaState> = replicas.iter().filter(|r| r.leader).collect();
    ordered.extend(replicas.iter().filter(|r| !r.leader));
    let mut text = String::new();
    for (i, replica) in ordered.iter().enumerate() {
        let role = controller_role(i);
        let state = if replica.up { "UP" } else { "DOWN" };
        text.push_str(&format!("Slurmctld({role}) at {} is {state}", replica.address));
        if details {
            let behind = replica.behind.map_or_else(|| "unknown".to_owned(), |n| n.to_string());
            text.push_str(&format!(" (replica {}, log entries behind: {behind})", replica.id));
        }
        text.push('\n');
    }
    text
}

fn ping(details: bool) -> anyhow::Result<i32> {
    let config = crate::client::config().ok().filter(|c| !c.replicas.is_empty());
    if let Some(config) = config {
        return match crate::client::call(&Request::QueryReplicas) {
            Ok(Response::Replicas { replicas }) if !replicas.is_empty() => {
                print!("{}", replica_lines(&replicas, details));
                Ok(0)
            }
            _ => {
                for (i, replica) in config.replicas.iter().enumerate() {
                    let role = controller_role(i);
                    println!("Slurmctld({role}) at {} is DOWN", replica.address);
                }
                Ok(1)
            }
        };
    }
    match crate::client::call(&Request::Ping) {
        Ok(Response::Pong { controller, .. }) => {
            println!("Slurmctld(primary) at {controller} is UP");
            Ok(0)
        }
        _ => {
            let host = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
            println!("Slurmctld(primary) at {host} is DOWN");
            Ok(1)
        }
    }
}

/// The file a job's output (or input) pattern names, as the batch script's node opens it and as
/// Slurm's `scontrol show job` prints it: the default `slurm-%j.out` (`slurm-%A_%a.out` for an
/// array task) when none was given, relative to the job's working directory, its `%` tokens
/// expanded (`%N` is the batch host, left as written while the job pends).
fn stdio_path(job: &JobInfo, pattern: &str) -> String {
    use drover_shared::grammar::pattern::{PatternContext, expand_pattern};
    let array = job.array_job_id.zip(job.array_task_id);
    let default = if array.is_some() { "slurm-%A_%a.out" } else { "slurm-%j.out" };
    let pattern = if pattern.is_empty() { default } else { pattern };
    let context = PatternContext {
        job_id: job.job_id,
        array,
        node_name: job.nodes.first().map_or("%N", String::as_str),
        user: &job.user,
        job_name: &job.name,
    };
    let expanded = expand_pattern(pattern, &context);
    if expanded.starts_with('/') || job.work_dir.is_empty() {
        expanded
    } else {
        format!("{}/{expanded}", job.work_dir.trim_end_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::super::scenario::{self, sample_stdout};
    use super::*;
    use expect_test::expect;

    const UTC: Tz = Tz::Fixed(0);
    const NORMAL: ShowOptions = ShowOptions { oneliner: false, details: false };

    /// Slurm's session id of sbatch, which Drover does not record (it prints 0).
    fn without_sid(text: &str) -> String {
        text.replace("AllocNode:Sid=localhost:2180", "AllocNode:Sid=localhost:0")
    }

    fn queued(job_id: JobId) -> JobInfo {
        scenario::queue().into_iter().find(|j| j.job_id == job_id).expect("job in the queue")
    }

    fn ended(job_id: JobId) -> JobInfo {
        scenario::finished().into_iter().find(|j| j.job_id == job_id).expect("finished job")
    }

    /// The leader first as `primary`, the others as `backup`, `backup2`; `-d` adds how far behind.
    #[test]
    fn replicas_ping_like_slurm_controllers() {
        let replica =
            |id, leader, up, behind| ReplicaState { id, address: format!("10.0.0.{id}:6817"), leader, up, behind };
        let replicas =
            [replica(1, false, true, Some(0)), replica(2, true, true, Some(0)), replica(3, false, false, None)];
        expect![[r#"
            Slurmctld(primary) at 10.0.0.2:6817 is UP
            Slurmctld(backup) at 10.0.0.1:6817 is UP
            Slurmctld(backup2) at 10.0.0.3:6817 is DOWN
        "#]]
        .assert_eq(&replica_lines(&replicas, false));
        expect![[r#"
            Slurmctld(primary) at 10.0.0.2:6817 is UP (replica 2, log entries behind: 0)
            Slurmctld(backup) at 10.0.0.1:6817 is UP (replica 1, log entries behind: 0)
            Slurmctld(backup2) at 10.0.0.3:6817 is DOWN (replica 3, log entries behind: unknown)
        "#]]
        .assert_eq(&replica_lines(&replicas, true));
    }

    #[test]
    fn jobs_match_slurm() {
        let cases = [
            ("scontrol_show_job_completed.txt", ended(20)),
            ("scontrol_show_job_timeout.txt", ended(23)),
            ("scontrol_show_job_failed.txt", ended(24)),
            ("scontrol_show_job_cancelled.txt", ended(25)),
            ("scontrol_show_job_running.txt", queued(26)),
            ("scontrol_show_job_gpu.txt", queued(27)),
            ("scontrol_show_job_held.txt", queued(35)),
            ("scontrol_show_job_dep_failed.txt", queued(36)),
            ("scontrol_show_job_dep_wait.txt", queued(37)),
        ];
        for (sample, job) in cases {
            let shown = render_job(&job, scenario::NOW, UTC, NORMAL);
            assert_eq!(shown, without_sid(&sample_stdout(sample)), "{sample}");
        }
    }

    #[test]
    fn pending_job_matches_slurm_but_for_unrecorded_fields() {
        // Slurm also prints the requested maximum node count (`4-4`) and the time of its last
        // scheduling pass (23:35:37); JobInfo carries neither, so the submit time stands in.
        let expected = without_sid(&sample_stdout("scontrol_show_job_pending.txt"))
            .replace("NumNodes=4-4", "NumNodes=4")
            .replace("LastSchedEval=2026-11-29T23:35:37", "LastSchedEval=2026-11-29T23:35:35");
        assert_eq!(render_job(&queued(33), scenario::NOW, UTC, NORMAL), expected);
    }

    #[test]
    fn arrays_match_slurm() {
        let shown: String =
            scenario::array_29().iter().map(|job| render_job(job, scenario::NOW, UTC, NORMAL)).collect();
        // As for any pending job, the time of the last scheduling pass is not recorded.
        let expected = without_sid(&sample_stdout("scontrol_show_job_array.txt"))
            .replace("LastSchedEval=2026-11-29T23:35:37", "LastSchedEval=2026-11-29T23:35:32");
        assert_eq!(shown, expected);
        let task = scenario::array_29().pop().expect("task 0");
        assert_eq!(
            render_job(&task, scenario::NOW, UTC, NORMAL),
            without_sid(&sample_stdout("scontrol_show_job_array_task.txt"))
        );
    }

    #[test]
    fn update_words() {
        let words = |text: &str| text.split(' ').map(str::to_owned).collect::<Vec<_>>();
        expect![[r#"
            Ok(
                (
                    [
                        JobTarget {
                            job_id: 12,
                            tasks: None,
                        },
                    ],
                    JobUpdate {
                        time_limit: Some(
                            Minutes(
                                90,
                            ),
                        ),
                        name: Some(
                            "x",
                        ),
                        comment: None,
                        nice: Some(
                            5,
                        ),
                        dependency: Some(
                            "",
                        ),
                        array_max_tasks: Some(
                            2,
                        ),
                        requeue: Some(
                            false,
                        ),
                    },
                ),
            )
        "#]]
        .assert_debug_eq(
            &parse_update(&words("JobId=12 TimeLimit=1:30:00 Name=x Nice=5 Dependency= ArrayTaskThrottle=2 Requeue=0"))
                .map_err(|e| e.to_string()),
        );
        expect![[r#"
            Err(
                "Update of Partition is not supported yet",
            )
        "#]]
        .assert_debug_eq(&parse_update(&words("JobId=12 Partition=x")).map_err(|e| e.to_string()));
    }

    #[test]
    fn config_layout() {
        let entries =
            vec![("MaxArraySize".to_owned(), "1001".to_owned()), ("MinJobAge".to_owned(), "300 sec".to_owned())];
        expect![[r#"
            Configuration data as of 2026-11-29T23:35:39
            MaxArraySize            = 1001
            MinJobAge               = 300 sec
        "#]]
        .assert_eq(&render_config(scenario::NOW, &entries, UTC));
    }

    #[test]
    fn oneliner_matches_slurm() {
        let options = ShowOptions { oneliner: true, details: false };
        assert_eq!(
            render_job(&queued(25), scenario::NOW, UTC, options),
            without_sid(&sample_stdout("scontrol_show_job_oneliner.txt"))
        );
    }

    #[test]
    fn partitions_match_slurm() {
        let shown: String = scenario::partitions().iter().map(|p| render_partition(p, NORMAL)).collect();
        assert_eq!(shown, sample_stdout("scontrol_show_partition.txt"));
    }

    #[test]
    fn node_matches_slurm_but_for_unreported_hardware() {
        // Drover's nodes do not report architecture, OS, load, free memory or a separate host
        // name; those print as for a node that never reported them.
        let expected = sample_stdout("scontrol_show_node.txt")
            .replace("Arch=x86_64", "Arch=(null)")
            .replace("CPULoad=0.23", "CPULoad=N/A")
            .replace("NodeHostName=localhost Port=17001", "NodeHostName=n1")
            .replace("OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0 ", "OS=(null) ")
            .replace("FreeMem=23350", "FreeMem=N/A");
        assert_eq!(render_node(&scenario::nodes()[0], None, &[], UTC, NORMAL), expected);
    }

    #[test]
    fn details_and_flags() {
        let mut node = scenario::nodes().remove(3);
        node.drain = true;
        node.not_responding = true;
        node.reason = Some("bad fan".into());
        node.gpus_alloc = vec![0];
        let reason_by = NodeReason {
            node: node.name.clone(),
            reason: "bad fan".into(),
            uid: 1001,
            user: "bob".into(),
            time: 1_764_460_800,
            owner: "bob".into(),
            ticket: None,
        };
        expect![[r#"
            NodeName=n4 Arch=(null) CoresPerSocket=2  CPUAlloc=2 CPUEfctv=2 CPUTot=2 CPULoad=N/A AvailableFeatures=gpu,ib ActiveFeatures=gpu,ib Gres=gpu:1 GresUsed=gpu:1(IDX:0) NodeAddr=127.0.0.1 NodeHostName=n4 Version=22.05.8 OS=(null)  RealMemory=4000 AllocMem=200 FreeMem=N/A Sockets=1 Boards=1 State=ALLOCATED+DRAIN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=main,teamA,teamB  BootTime=2026-11-29T23:14:48 SlurmdStartTime=2026-11-29T23:32:17 LastBusyTime=2026-11-29T23:35:28 CfgTRES=cpu=2,mem=4000M,billing=2,gres/gpu=1 AllocTRES=cpu=2,mem=200M,gres/gpu=1 CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=bad fan [bob@2025-11-30T00:00:00]
        "#]]
        .assert_eq(&render_node(&node, Some(&reason_by), &["gpu".into(), "ib".into()], UTC, ShowOptions { oneliner: true, details: true }));
        let mut partition = scenario::partitions().remove(1);
        partition.allow_accounts = vec!["teama".into()];
        partition.max_time = TimeLimit::Minutes(1440);
        partition.default_time = Some(TimeLimit::Minutes(30));
        partition.max_nodes = Some(2);
        partition.total_gpus = 0;
        partition.up = false;
        expect![[r#"
            PartitionName=teamA AllowGroups=ALL AllowAccounts=teama AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=00:30:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=2 MaxTime=1-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=n[1-4] PriorityJobFactor=10 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=DOWN TotalCPUs=8 TotalNodes=4 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=8,mem=16000M,node=4,billing=8
        "#]]
        .assert_eq(&render_partition(&partition, ShowOptions { oneliner: true, details: false }));
        let mut job = queued(26);
        job.time_limit = None;
        job.comment = Some("rule_a".into());
        let shown = render_job(&job, scenario::NOW, UTC, ShowOptions { oneliner: false, details: true });
        assert!(shown.contains("   DerivedExitCode=0:0\n   RunTime=00:00:08 TimeLimit=Partition_Limit"), "{shown}");
        assert!(shown.contains("\n   Comment=rule_a\n   StdErr="), "{shown}");
    }

    /// `scontrol show step` prints a running step in Slurm's layout.
    #[test]
    fn a_running_step_in_slurms_layout() {
        let mut job = queued(26);
        job.uid = 1000;
        job.partition = "main".into();
        job.time_limit = Some(TimeLimit::Minutes(5));
        let step = drover_shared::job::StepInfo {
            step_id: drover_shared::job::StepId::Numbered(0),
            name: "hostname".into(),
            state: drover_shared::job::JobState::Running,
            exit_status: Default::default(),
            start_time: Some(0),
            end_time: None,
            num_cpus: 2,
            num_tasks: 2,
            nodes: vec!["n1".into(), "n2".into()],
        };
        expect![[r#"
            StepId=26.0 UserId=1000 StartTime=1970-01-01T00:00:00 TimeLimit=00:05:00
               State=RUNNING Partition=main NodeList=n[1-2]
               Nodes=2 CPUs=2 Tasks=2 Name=hostname Network=(null)
               TRES=cpu=2,node=2
               ResvPorts=(null)
               CPUFreqReq=Default Dist=Block

        "#]]
        .assert_eq(&render_step(&job, &step, UTC, ShowOptions::default()));
    }

    /// `StdOut=`/`StdErr=` show the file the job writes, as Slurm prints them: the default
    /// `slurm-%j.out` in the working directory, patterns expanded (tools look for logs there).
    #[test]
    fn output_paths_are_shown_expanded() {
        let mut job = queued(26);
        job.work_dir = "/home/alice/run".into();
        job.name = "train".into();
        job.user = "alice".into();
        job.stdout = String::new();
        job.stderr = String::new();
        job.stdin = "/dev/null".into();
        let shown = render_job(&job, scenario::NOW, UTC, ShowOptions { oneliner: false, details: false });
        assert!(shown.contains("StdErr=/home/alice/run/slurm-26.out\n"), "{shown}");
        assert!(shown.contains("StdIn=/dev/null\n"), "{shown}");
        assert!(shown.contains("StdOut=/home/alice/run/slurm-26.out\n"), "{shown}");
        job.stdout = "logs/%x-%j.out".into();
        job.stderr = "/scratch/%u/%x.%N.err".into();
        job.nodes = vec!["n3".into()];
        let shown = render_job(&job, scenario::NOW, UTC, ShowOptions { oneliner: false, details: false });
        assert!(shown.contains("StdOut=/home/alice/run/logs/train-26.out\n"), "{shown}");
        assert!(shown.contains("StdErr=/scratch/alice/train.n3.err\n"), "{shown}");
        job.array_job_id = Some(20);
        job.array_task_id = Some(3);
        job.stdout = String::new();
        let shown = render_job(&job, scenario::NOW, UTC, ShowOptions { oneliner: false, details: false });
        assert!(shown.contains("StdOut=/home/alice/run/slurm-20_3.out\n"), "{shown}");
    }

    #[test]
    fn command_lines() {
        let parse = |args: &[&str]| {
            let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
            format!("{:?}", parse_invocation(&args))
        };
        expect![[r#"Ok(Some(Invocation { options: ShowOptions { oneliner: true, details: false }, quiet: false, words: ["show", "job", "25"] }))"#]]
            .assert_eq(&parse(&["show", "job", "-o", "25"]));
        expect![[r#"Ok(Some(Invocation { options: ShowOptions { oneliner: true, details: true }, quiet: true, words: ["show", "part"] }))"#]]
            .assert_eq(&parse(&["-odQ", "--clusters=x", "show", "part"]));
        expect![[r#"Ok(Some(Invocation { options: ShowOptions { oneliner: true, details: false }, quiet: false, words: ["ping"] }))"#]]
            .assert_eq(&parse(&["--one", "-M", "c", "ping"]));
        expect![[r#"Err("invalid option -- 'x'")"#]].assert_eq(&parse(&["-x", "ping"]));
        expect!["Ok(None)"].assert_eq(&parse(&["--help"]));
        for version in ["--version", "-V", "--vers"] {
            expect![[r#"Ok(Some(Invocation { options: ShowOptions { oneliner: false, details: false }, quiet: false, words: ["version"] }))"#]]
                .assert_eq(&parse(&[version]));
        }
        assert!(
            names("part", "partitions", 4)
                && names("JOB", "jobs", 3)
                && !names("jo", "jobs", 3)
                && !names("jobz", "jobs", 3)
        );
    }

    /// Slurm's `scontrol --help` names its commands under `Valid <COMMAND> values are:` with
    /// `show <ENTITY> [<ID>]`; scripts (and Slurm's own test suite) look for those words.
    #[test]
    fn help_and_version_in_slurms_layout() {
        for needle in ["Valid <COMMAND> values are:", "show <ENTITY> [<ID>]", "reconfigure", "version"] {
            assert!(USAGE.contains(needle), "{needle} missing from\n{USAGE}");
        }
        let run_words = |words: &[&str]| run(words.iter().map(OsString::from).collect()).expect("answered");
        assert_eq!(run_words(&["version"]), 0);
        assert_eq!(run_words(&["--version"]), 0);
    }

    /// A malformed host list is reported (`Invalid hostlist: []` on stderr) and, as in Slurm,
    /// does not change the exit status; a valid one still expands.
    #[test]
    fn show_hostnames_of_a_malformed_list_exits_zero() {
        let run_words = |words: &[&str]| run(words.iter().map(OsString::from).collect()).expect("answered");
        assert!(hostlist::expand("[]").is_err(), "the case this test is about must stay malformed");
        assert_eq!(run_words(&["show", "hostnames", "[]"]), 0);
        assert_eq!(run_words(&["show", "hostnames", "n[1-2]"]), 0);
    }
}
