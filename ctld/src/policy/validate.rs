//! Submit-time checks: who the caller is, which account, partitions and QOS the job gets, whether
//! its time limit and GRES can ever be met. A rejected submission changes nothing; the error carries
//! Slurm's code and a detail for the log.

use crate::model::identity::{Caller, user_name};
use crate::model::node_filter::{NodeFilter, NodeSet};
use crate::model::state::{Job, State};
use crate::policy::placement::could_ever_fit;
use drover_shared::UnixTime;
use drover_shared::config::{Config, PartitionConfig};
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobInfo, JobSpec, JobState};
use drover_shared::proto::client::ErrorCode;
use std::sync::Arc;

use crate::model::refusal::Refusal;

/// Largest script accepted (Slurm's default `max_script_size` is 4 MB).
const MAX_SCRIPT: usize = 4 * 1024 * 1024;
/// Largest exported environment, in entries.
const MAX_ENV_ENTRIES: usize = 10_000;
/// Longest name, comment or path accepted.
const MAX_STRING: usize = 4096;
/// Most GRES requests (`--gres`, `--gpus`, `--gpus-per-task` together) a job may make.
const MAX_GRES_ITEMS: usize = 64;
/// Most partitions a job may name.
const MAX_PARTITIONS: usize = 256;
/// Slurm's bound on `--nice`: ±(2³¹ − 3).
pub(crate) const MAX_NICE: i64 = 2_147_483_645;

/// `--nice`, at submit and on update: within ±[`MAX_NICE`], and below 0 only for operators and
/// admins (`privileged`), as in Slurm.
pub(crate) fn check_nice(nice: i32, privileged: bool) -> Result<(), Refusal> {
    if i64::from(nice).abs() > MAX_NICE {
        return Err(Refusal::new(ErrorCode::InvalidSpec, format!("nice {nice} is outside -{MAX_NICE}..{MAX_NICE}")));
    }
    if nice < 0 && !privileged {
        return Err(Refusal::new(
            ErrorCode::AccessDenied,
            format!("only operators and admins may set a negative nice ({nice})"),
        ));
    }
    Ok(())
}

/// A name or comment set after submission (`scontrol update`, a step's `srun -J`): the bound a
/// submission's has, and no control character.
pub(crate) fn check_string(what: &str, value: &str) -> Result<(), Refusal> {
    if value.len() > MAX_STRING {
        return Err(Refusal::new(
            ErrorCode::InvalidSpec,
            format!("{what} exceeds its size limit of {MAX_STRING} bytes"),
        ));
    }
    forbidden_text(what, value)
}

fn group_name(gid: u32) -> String {
    crate::model::identity::group_name(gid).unwrap_or_else(|| gid.to_string())
}

/// Whether `account` or one of its ancestors is in `allowed` (empty = everyone).
pub(crate) fn account_allowed(config: &Config, account: &str, allowed: &[String]) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let mut current = Some(account.to_owned());
    while let Some(name) = current {
        if allowed.contains(&name) {
            return true;
        }
        current = config.accounts.iter().find(|a| a.name == name).and_then(|a| a.parent.clone());
    }
    false
}

fn check_sizes(spec: &JobSpec) -> Result<(), Refusal> {
    let too_big = |what: &str| Refusal::new(ErrorCode::InvalidSpec, format!("{what} exceeds its size limit"));
    if spec.script.len() > MAX_SCRIPT {
        return Err(too_big("batch script"));
    }
    if spec.script.is_empty() {
        return Err(Refusal::new(ErrorCode::InvalidSpec, "empty batch script"));
    }
    if spec.environment.len() > MAX_ENV_ENTRIES {
        return Err(too_big("environment"));
    }
    let strings = [
        Some(&spec.name),
        Some(&spec.work_dir),
        spec.comment.as_ref(),
        spec.stdout.as_ref(),
        spec.stderr.as_ref(),
        spec.nodelist.as_ref(),
        spec.exclude.as_ref(),
        spec.constraint.as_ref(),
    ];
    if strings.into_iter().flatten().chain(&spec.partitions).any(|s| s.len() > MAX_STRING) {
        return Err(too_big("a string field"));
    }
    // The pass reads each GRES request and tries each partition for every pending job.
    if spec.gres_per_node.len() + spec.gpus.len() + spec.gpus_per_task.len() > MAX_GRES_ITEMS {
        return Err(too_big("the GRES list"));
    }
    if spec.partitions.len() > MAX_PARTITIONS {
        return Err(too_big("the partition list"));
    }
    if !spec.work_dir.starts_with('/') {
        return Err(Refusal::new(ErrorCode::InvalidSpec, "working directory must be an absolute path"));
    }
    check_text(spec)
}

/// Refuses control characters (and bidirectional overrides) in the strings a submitter sets that
/// others see or that name things: a newline or escape sequence in a job name would forge rows in
/// other users' `squeue` and `sacct -P` and reach their terminals. The script, its arguments and
/// the environment (`--export` values included) are the job's own data and may hold anything
/// (listings print control characters as `?`).
fn check_text(spec: &JobSpec) -> Result<(), Refusal> {
    let one = |what: &str, value: &str| forbidden_text(what, value);
    one("job name", &spec.name)?;
    for (what, value) in [
        ("comment", &spec.comment),
        ("account", &spec.account),
        ("QOS", &spec.qos),
        ("wckey", &spec.wckey),
        ("mail user", &spec.mail_user),
        ("mail type", &spec.mail_type),
        ("dependency", &spec.dependency),
        ("constraint", &spec.constraint),
        ("node list", &spec.nodelist),
        ("excluded node list", &spec.exclude),
        ("signal", &spec.signal),
        ("array", &spec.array),
        ("output file", &spec.stdout),
        ("error file", &spec.stderr),
        ("input file", &spec.stdin),
        ("command", &spec.command),
    ] {
        if let Some(value) = value {
            one(what, value)?;
        }
    }
    one("working directory", &spec.work_dir)?;
    spec.partitions.iter().try_for_each(|p| one("partition", p))
}

/// The same rules for the strings `scontrol update job` sets: names and comments as
/// [`check_string`], a dependency without control characters (its items are bounded where it is
/// parsed).
pub(crate) fn check_update_text(update: &drover_shared::proto::client::JobUpdate) -> Result<(), Refusal> {
    let strings = [("job name", &update.name), ("comment", &update.comment)];
    strings.into_iter().try_for_each(|(what, value)| value.as_deref().map_or(Ok(()), |v| check_string(what, v)))?;
    update.dependency.as_deref().map_or(Ok(()), |dependency| forbidden_text("dependency", dependency))
}

/// `Err` naming `what` when `value` holds a character [`drover_shared::text::forbidden`] refuses.
pub(crate) fn forbidden_text(what: &str, value: &str) -> Result<(), Refusal> {
    match drover_shared::text::forbidden(value) {
        None => Ok(()),
        Some(c) => Err(Refusal::new(
            ErrorCode::InvalidSpec,
            format!("{what} contains a control character (U+{:04X}), which is not allowed", u32::from(c)),
        )),
    }
}

/// A job whose launch message could not reach its node: the spec (script, environment, options)
/// plus what the launch adds, at most every node's name and counts, must fit a node frame. A
/// launch that did not fit would drop the node's connection (and, requeued, drop it again).
fn check_launch_size(config: &Config, spec: &JobSpec) -> Result<(), Refusal> {
    let nodes: usize = config.nodes.iter().map(|n| n.name.len() + 32).sum();
    let size = postcard::experimental::serialized_size(spec).unwrap_or(usize::MAX).saturating_add(64 * 1024 + nodes);
    if size > drover_shared::proto::frame::MAX_FRAME {
        let max = drover_shared::proto::frame::MAX_FRAME;
        let detail = format!("the job's launch message (script, environment and options) would exceed {max} bytes");
        return Err(Refusal::new(ErrorCode::InvalidSpec, detail));
    }
    Ok(())
}

/// `-n N` without `-N` (nor `--ntasks-per-node`): as in Slurm, the tasks spread over as many
/// nodes as they need rather than all asking for one node. The job asks for the fewest nodes
/// that hold its tasks when each holds as many as the candidate partitions' largest node has
/// CPUs for; a job whose tasks fit one such node keeps asking for one. More nodes than the
/// cluster has are refused here, before any per-node shape is built. Under `-O/--overcommit` the
/// tasks share one node's CPUs: nothing spreads.
fn spread_tasks(config: &Config, partitions: &[&PartitionConfig], mut spec: JobSpec) -> Result<JobSpec, Refusal> {
    let (Some(ntasks), None, None, false) = (spec.ntasks, spec.nodes_min, spec.ntasks_per_node, spec.overcommit) else {
        return Ok(spec);
    };
    let names: std::collections::HashSet<&str> =
        partitions.iter().flat_map(|p| p.nodes.iter().map(String::as_str)).collect();
    let most_cpus = config.nodes.iter().filter(|n| names.contains(n.name.as_str())).map(|n| n.cpus).max();
    let per_node = most_cpus.unwrap_or(0) / spec.cpus_per_task.unwrap_or(1).max(1);
    if per_node > 0 && ntasks > per_node {
        let nodes = ntasks.div_ceil(per_node);
        if usize::try_from(nodes).map_or(true, |n| n > names.len()) {
            let detail = format!("{ntasks} tasks need {nodes} nodes, the partitions have {}", names.len());
            return Err(Refusal::new(ErrorCode::NodeConfigUnavailable, detail));
        }
        spec.nodes_min = Some(nodes);
    }
    Ok(spec)
}

/// `--container` (Slurm's `SLURM_CONTAINER` in the job's or step's environment) needs the
/// cluster's `[oci]` runtime: without one it is refused at submit, before anything runs.
pub(crate) fn check_container(config: &Config, environment: &[(String, String)]) -> Result<(), Refusal> {
    if drover_shared::job::container_bundle(environment).is_some() && config.oci.is_none() {
        let detail = "--container: this cluster has no OCI runtime configured ([oci] in cluster.toml)";
        return Err(Refusal::new(ErrorCode::InvalidSpec, detail.to_owned()));
    }
    Ok(())
}

/// Validates a submission and builds the job record it becomes (without a job id yet).
pub(crate) fn validate(state: &State, caller: Caller, spec: JobSpec, now: UnixTime) -> Result<Job, Refusal> {
    let config = &state.config();
    if spec.no_allocate && !crate::policy::authz::may_skip_allocation(caller) {
        let detail = format!("--no-allocate is for root and the SlurmUser, not uid {}", caller.uid);
        return Err(Refusal::new(ErrorCode::AccessDenied, detail));
    }
    check_sizes(&spec)?;
    check_launch_size(config, &spec)?;
    check_container(config, &spec.environment)?;
    // The per-node shape is built node by node: never for more nodes than the cluster has.
    if let Some(nodes) = spec.nodes_min.filter(|n| usize::try_from(*n).map_or(true, |n| n > config.nodes.len())) {
        let detail = format!("{nodes} nodes asked, the cluster has {}", config.nodes.len());
        return Err(Refusal::new(ErrorCode::NodeConfigUnavailable, detail));
    }
    let user = user_name(caller.uid)
        .ok_or_else(|| Refusal::new(ErrorCode::InvalidUser, format!("uid {} has no user name", caller.uid)))?;
    let admin = crate::policy::authz::Who::of(config, caller).may(crate::policy::authz::Operation::ChargeAnyAccount);
    let user_config = config.users.iter().find(|u| u.name == user);

    let account = match (&spec.account, user_config) {
        (Some(a), _) => a.clone(),
        (None, Some(u)) => u.default_account.clone(),
        (None, None) => config
            .default_account
            .clone()
            .ok_or_else(|| Refusal::new(ErrorCode::InvalidAccount, format!("user {user} has no association")))?,
    };
    let account_known = config.accounts.iter().any(|a| a.name == account);
    let may_charge = admin
        || user_config.map_or(config.default_account.as_deref() == Some(&account), |u| u.accounts.contains(&account));
    if !account_known || !may_charge {
        return Err(Refusal::new(ErrorCode::InvalidAccount, format!("user {user} may not charge account {account}")));
    }
    // The team's job template: its defaults, locks and bounds, before anything reads the spec.
    let spec = crate::policy::template::apply(config, &account, spec)?;

    let mut names: Vec<String> = if spec.partitions.is_empty() {
        vec![config.default_partition().name.clone()]
    } else {
        spec.partitions.clone()
    };
    // `-p main,main,…` tries `main` once.
    let mut seen = std::collections::HashSet::new();
    names.retain(|name| seen.insert(name.clone()));
    let mut partitions: Vec<&PartitionConfig> = Vec::new();
    for name in &names {
        let p = config
            .partitions
            .iter()
            .find(|p| &p.name == name)
            .ok_or_else(|| Refusal::new(ErrorCode::InvalidPartition, name.clone()))?;
        partitions.push(p);
    }
    partitions.retain(|p| account_allowed(config, &account, &p.allow_accounts));
    if partitions.is_empty() {
        return Err(Refusal::new(
            ErrorCode::InvalidAccount,
            format!("account {account} may not use partition {}", names.join(",")),
        ));
    }

    let qos_name = spec.qos.clone().unwrap_or_else(|| config.default_qos(Some(&user), &account).to_owned());
    let qos = config
        .qos
        .iter()
        .find(|q| q.name == qos_name)
        .ok_or_else(|| Refusal::new(ErrorCode::InvalidQos, qos_name.clone()))?;
    if let Some(allowed) = config.allowed_qos(Some(&user), &account)
        && !allowed.contains(&qos_name)
    {
        return Err(Refusal::new(
            ErrorCode::InvalidQos,
            format!("QOS {qos_name} is not in the association of {user} and {account}"),
        ));
    }
    partitions.retain(|p| p.allow_qos.is_empty() || p.allow_qos.contains(&qos_name));
    if partitions.is_empty() {
        return Err(Refusal::new(
            ErrorCode::InvalidQos,
            format!("QOS {qos_name} is not allowed in partition {}", names.join(",")),
        ));
    }

    if let Some(TimeLimit::Minutes(minutes)) = spec.time_limit {
        let over = |limit: TimeLimit| matches!(limit, TimeLimit::Minutes(max) if minutes > max);
        partitions.retain(|p| !over(p.max_time));
        if partitions.is_empty() || qos.max_wall.is_some_and(over) {
            return Err(Refusal::new(ErrorCode::InvalidTimeLimit, format!("{minutes} minutes exceeds the limit")));
        }
    }

    if let Some(g) = spec.gres_per_node.iter().chain(&spec.gpus).chain(&spec.gpus_per_task).find(|g| g.name != "gpu") {
        return Err(Refusal::new(ErrorCode::InvalidGres, format!("unknown generic resource `{}`", g.name)));
    }

    if let Some(text) = &spec.array {
        crate::policy::array::parse(text)?;
    }
    if let Some(text) = &spec.dependency {
        crate::policy::dependency::validate(state, text)?;
    }
    if let Some(text) = &spec.constraint {
        let constraint = drover_shared::grammar::constraint::parse_constraint(text)
            .map_err(|e| Refusal::new(ErrorCode::InvalidFeature, e.to_string()))?;
        let known = |feature: &str| state.nodes().iter().any(|n| n.config.features.iter().any(|f| f == feature));
        if let Some(unknown) = constraint.features().into_iter().find(|f| !known(f)) {
            return Err(Refusal::new(ErrorCode::InvalidFeature, format!("no node has feature `{unknown}`")));
        }
        let matching = matches!(constraint, drover_shared::grammar::constraint::Constraint::Matching(_));
        if matching && spec.nodes_min.unwrap_or(1) > 1 {
            let detail = "a matching OR ([a|b]) over several nodes is not supported yet".to_owned();
            return Err(Refusal::new(ErrorCode::InvalidFeature, detail));
        }
    }
    if spec.deadline.is_some_and(|deadline| deadline <= now) {
        return Err(Refusal::new(ErrorCode::InvalidTimeValue, "the deadline has passed"));
    }
    // The commands refuse these already; a request built without them gets the same bound.
    let latest = drover_shared::grammar::date::LATEST;
    if spec.begin_time.is_some_and(|t| t > latest) || spec.deadline.is_some_and(|t| t > latest) {
        return Err(Refusal::new(ErrorCode::InvalidTimeValue, "a begin time or deadline after 9999-12-31T23:59:59"));
    }
    let privileged = crate::policy::authz::Who::of(config, caller).may(crate::policy::authz::Operation::JobPrivileged);
    check_nice(spec.nice, privileged)?;

    let node_filter = node_filter(state, &spec, UnknownNodes::Refuse)?;
    let spec = Arc::new(spread_tasks(config, &partitions, spec)?);
    let mut job = Job {
        info: JobInfo::default().into(),
        spec: spec.clone(),
        candidates: partitions.iter().map(|p| p.name.clone()).collect(),
        node_filter,
        alloc: None,
        committed: false,
        launched_at: None,
        cancel_requested_by: None,
        started: false,
        reason_id: 0,
    };
    let candidates: Vec<&PartitionConfig> = partitions.clone();
    if !candidates.iter().any(|p| could_ever_fit(state, &job, p)) {
        return Err(Refusal::new(ErrorCode::NodeConfigUnavailable, "no node of the partition can ever hold the job"));
    }

    let request = crate::model::request::PerNodeRequest::from_spec(&spec);
    let requested = crate::model::tres::of_request(&request);
    crate::policy::limits::check_submit(state, qos, &user, &requested)
        .map_err(|detail| Refusal::new(ErrorCode::AccountingPolicy, detail))?;
    crate::policy::limits::check_association_submit(state, &user, &account, &requested)
        .map_err(|detail| Refusal::new(ErrorCode::AccountingPolicy, detail))?;
    // Until it starts, the job's billing is its request's under its first partition's weights.
    let weights = candidates.first().map(|p| &p.tres_billing_weights);
    let billing = crate::model::tres::billing(weights.unwrap_or(&Default::default()), &requested);
    // The multifactor priority is computed by the scheduling pass that follows the commit; 0
    // means held.
    let priority = if spec.hold { 0 } else { initial_priority(qos.priority, 1, spec.nice) };
    job.info = JobInfo {
        job_id: 0,
        name: spec.name.clone(),
        user,
        uid: caller.uid,
        group: group_name(caller.gid),
        gid: caller.gid,
        account,
        qos: qos_name,
        partition: job.candidates.join(","),
        state: Some(JobState::Pending),
        reason: if spec.hold { "JobHeldUser".into() } else { "None".into() },
        priority,
        nice: spec.nice,
        submit_time: now,
        eligible_time: Some(spec.begin_time.unwrap_or(now).max(now)),
        time_limit: spec.time_limit,
        num_nodes: request.n_nodes,
        num_cpus: request.total_cpus(),
        num_tasks: request.tasks.iter().sum(),
        cpus_per_task: request.cpus_per_task,
        mem: spec.mem,
        tres_per_node: spec.gres_per_node.iter().map(|g| format!("gres:{g}")).collect::<Vec<_>>().join(","),
        work_dir: spec.work_dir.clone(),
        command: spec.command.clone(),
        stdout: spec.stdout.clone().unwrap_or_default(),
        stderr: spec.stderr.clone().or_else(|| spec.stdout.clone()).unwrap_or_default(),
        stdin: spec.stdin.clone().unwrap_or_else(|| "/dev/null".into()),
        comment: spec.comment.clone(),
        requeue: spec.requeue.unwrap_or(true),
        dependency: spec.dependency.clone(),
        submit_host: spec.submit_host.clone(),
        submit_line: spec.submit_line.clone(),
        exclusive: spec.exclusive,
        nodelist_requested: spec.nodelist.clone(),
        exclude: spec.exclude.clone(),
        constraint: spec.constraint.clone(),
        template: spec.template.clone(),
        billing: Some(crate::model::tres::billing_count(billing)),
        ..JobInfo::default()
    }
    .into();
    Ok(job)
}

/// How [`node_filter`] treats a name the node table does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnknownNodes {
    /// A submission: refused with Slurm's `Invalid node name specified`.
    Refuse,
    /// A job already accepted (restored, replayed, or after a reconfigure removed a node): the
    /// name allows nothing.
    Skip,
}

/// Resolves a job's `-w`, `-x` and `--constraint` against the node table, once: the pass then
/// asks the node indexes (`model/node_filter.rs`) and never reads the text again. A list naming
/// more hosts than the cluster has is refused by counting, before a name is built; so is (under
/// [`UnknownNodes::Refuse`]) a name no node has. A constraint is evaluated once per distinct
/// feature list of the nodes.
pub(crate) fn node_filter(
    state: &State,
    spec: &JobSpec,
    unknown: UnknownNodes,
) -> Result<Option<Arc<NodeFilter>>, Refusal> {
    if spec.nodelist.is_none() && spec.exclude.is_none() && spec.constraint.is_none() {
        return Ok(None);
    }
    let resolve = |list: &str| -> Result<NodeSet, Refusal> {
        let names = drover_shared::hostlist::expand_at_most(list, state.nodes().len()).map_err(|error| {
            let detail = match error {
                drover_shared::hostlist::HostlistError::MoreThan { limit, .. } => {
                    format!("the node list names more than the cluster's {limit} nodes")
                }
                other => shorten(&other.to_string()),
            };
            Refusal::new(ErrorCode::InvalidNodeName, detail)
        });
        let names = match (names, unknown) {
            (Ok(names), _) => names,
            (Err(refusal), UnknownNodes::Refuse) => return Err(refusal),
            (Err(_), UnknownNodes::Skip) => Vec::new(),
        };
        let mut indexes = Vec::with_capacity(names.len());
        for name in &names {
            match state.node_index().get(name) {
                Some(&i) => indexes.push(u32::try_from(i).unwrap_or(u32::MAX)),
                None if unknown == UnknownNodes::Skip => {}
                None => {
                    let detail = format!("node {} is not configured", shorten(name));
                    return Err(Refusal::new(ErrorCode::InvalidNodeName, detail));
                }
            }
        }
        Ok(NodeSet::from_indexes(indexes))
    };
    let required = spec.nodelist.as_deref().map(resolve).transpose()?;
    let excluded = spec.exclude.as_deref().map(resolve).transpose()?.unwrap_or_default();
    let features = match spec.constraint.as_deref() {
        None => None,
        Some(text) => {
            let constraint = drover_shared::grammar::constraint::parse_constraint(text).ok();
            let mut verdicts: std::collections::HashMap<&[String], bool> = std::collections::HashMap::new();
            let mut matching = Vec::new();
            for (i, node) in state.nodes().iter().enumerate() {
                let features = node.config.features.as_slice();
                // A constraint that no longer parses (checked at submit) restricts nothing.
                let matches = *verdicts
                    .entry(features)
                    .or_insert_with(|| constraint.as_ref().is_none_or(|c| c.matches(features)));
                if matches {
                    matching.push(u32::try_from(i).unwrap_or(u32::MAX));
                }
            }
            Some(NodeSet::from_indexes(matching))
        }
    };
    Ok(Some(Arc::new(NodeFilter { required, excluded, features })))
}

/// A piece of a request quoted in a refusal: at most 64 characters.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The placeholder priority of a job that becomes eligible (submit, release): never 0, which
/// means held. The scheduling pass replaces it with the multifactor value (`priority.rs`) before
/// it orders the queue, so the arguments only break ties until then.
pub(crate) fn initial_priority(qos_priority: u32, partition_factor: u32, nice: i32) -> u32 {
    let base = 1i64 + i64::from(qos_priority.min(1000)) + i64::from(partition_factor.min(1000)) - i64::from(nice);
    u32::try_from(base.clamp(1, i64::from(u32::MAX - 1))).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's request is at most 11 MiB, so no launch built from one exceeds the node frame
    /// today; the check still refuses a spec whose launch would, whatever the client bound.
    #[test]
    fn a_job_whose_launch_would_not_fit_a_node_frame_is_refused() {
        let text = "cluster_name = \"c\"\n[controller]\naddress = \"127.0.0.1:1\"\nstate_dir = \"s\"\n\
                    [[nodes]]\nnames = \"n[1-2]\"\ncpus = 2\nreal_memory = 100\n[[partitions]]\nname = \"p\"\nnodes = \"n[1-2]\"\ndefault = true\n";
        let config = Config::parse(std::path::Path::new("/tmp/c.toml"), text).unwrap();
        let mut spec = JobSpec { script: b"#!/bin/sh\ntrue\n".to_vec(), ..JobSpec::default() };
        assert_eq!(check_launch_size(&config, &spec), Ok(()));
        spec.environment = vec![("BIG".into(), "x".repeat(drover_shared::proto::frame::MAX_FRAME))];
        let Refusal { code, detail } = check_launch_size(&config, &spec).unwrap_err();
        assert_eq!(code, ErrorCode::InvalidSpec);
        assert!(detail.contains("launch message"), "{detail}");
    }
}
