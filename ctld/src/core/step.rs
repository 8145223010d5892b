//! Job steps (`srun` inside an allocation): ctld checks that the caller owns the running job,
//! lays the step's tasks out over the job's nodes (block, cyclic or plane distribution, srun's `-m`), records the step row
//! `N.k` and answers srun only once that row is committed; then it sends each node its share
//! ([`CtldMessage::LaunchStep`]). srun reports the step's end ([`Request::StepDone`]); a step
//! still running when its job ends is recorded `CANCELLED` and its tasks on every node are
//! killed. `scancel N.S` signals or cancels one step only.
//!
//! This file is a child module of `core` (declared there), so it extends [`Core`] directly.
//!
//! [`Request::StepDone`]: drover_shared::proto::client::Request::StepDone

use super::Core;
use crate::model::identity::Caller;
use crate::model::refusal::Refusal;
use crate::policy::authz::{Operation, Who};
use crate::store::db::AfterCommit;
use drover_shared::job::{JobId, JobState, StepId, StepInfo, StepLayout, StepSpec, WaitStatus};
use drover_shared::proto::client::{ErrorCode, Response};
use drover_shared::proto::frame::MAX_FRAME;
use drover_shared::proto::node::{CtldMessage, StepLaunch};
use drover_shared::{UnixTime, now};
use std::collections::HashMap;
use tokio::sync::oneshot;

/// The encoded size of a step's launch on one node (what the node's frame bound applies to).
fn launch_size(launch: &StepLaunch) -> usize {
    // The message as the node link sends it: `CtldMessage::LaunchStep` adds its variant tag.
    postcard::experimental::serialized_size(launch).map_or(usize::MAX, |size| size + 8)
}

/// The most resource limits a step may carry (srun sends ten).
const MAX_RLIMITS: usize = 16;

fn refuse(code: ErrorCode, detail: impl Into<String>) -> Response {
    Response::Error { code, detail: detail.into() }
}

/// How many tasks each of a step's nodes runs: `per_node` each when given (the last ones may get
/// fewer), else as evenly as possible with the first nodes taking one more (Slurm's block
/// distribution). One entry per node of the step; nothing proportional to `ntasks`.
fn block_counts(ntasks: u32, nodes: u32, per_node: Option<u32>) -> Vec<u32> {
    let mut left = ntasks;
    (0..nodes)
        .map(|i| {
            let count = match per_node {
                Some(k) => k.min(left),
                None => ntasks / nodes + u32::from(i < ntasks % nodes),
            };
            left -= count;
            count
        })
        .collect()
}

/// Task ids on each node for the per-node `counts` ([`block_counts`]), numbered in node order.
pub(crate) fn block_layout(counts: &[u32]) -> Vec<Vec<u32>> {
    spread_layout(counts, u32::MAX)
}

/// srun's `-m/--distribution` of tasks over the step's nodes (its first level; the socket and
/// core levels after `:` and `,Pack` are binding hints Drover does not act on). srun carries it
/// to ctld, as Slurm passes it to the tasks, in the step's `SLURM_DISTRIBUTION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Distribution {
    /// Consecutive tasks on a node (the default, also `*`).
    Block,
    /// Task `i` on the `i mod nodes`-th node with room.
    Cyclic,
    /// Blocks of this many consecutive tasks, dealt to the nodes in turn.
    Plane(u32),
    /// Task `i` on the `i`-th host of srun's list (`-w` or `SLURM_HOSTFILE`), which srun passes
    /// in the step's `SLURM_ARBITRARY_NODELIST` ([`arbitrary_hosts`]).
    Arbitrary,
}

/// The variable srun names an arbitrary distribution's hosts in, one per task, in task order.
pub(crate) const ARBITRARY_NODELIST: &str = "SLURM_ARBITRARY_NODELIST";

/// The distribution a step's environment asks for; refused when it is not one Drover lays out.
pub(crate) fn distribution(environment: &[(String, String)]) -> Result<Distribution, Refusal> {
    let Some((_, value)) = environment.iter().rev().find(|(name, _)| name == "SLURM_DISTRIBUTION") else {
        return Ok(Distribution::Block);
    };
    let first = value.split([':', ',']).next().unwrap_or("");
    let refused = |why: &str| Refusal::new(ErrorCode::InvalidSpec, format!("--distribution={value}: {why}"));
    match first {
        "" | "*" | "block" => Ok(Distribution::Block),
        "cyclic" => Ok(Distribution::Cyclic),
        "arbitrary" => Ok(Distribution::Arbitrary),
        plane => match plane.strip_prefix("plane=").map(str::parse::<u32>) {
            Some(Ok(size)) if size > 0 => Ok(Distribution::Plane(size)),
            _ => Err(refused("expected block, cyclic, plane=N or arbitrary")),
        },
    }
}

/// The host of each task of an arbitrary distribution: the comma-separated names in the step's
/// [`ARBITRARY_NODELIST`] (a host may repeat). Bounded by the launch's frame size, which the
/// environment travels in; at most one entry per task the job's nodes may run.
pub(crate) fn arbitrary_hosts(environment: &[(String, String)], most: usize) -> Result<Vec<String>, Refusal> {
    let refused = |why: String| Refusal::new(ErrorCode::InvalidSpec, format!("--distribution=arbitrary: {why}"));
    let Some((_, list)) = environment.iter().rev().find(|(name, _)| name == ARBITRARY_NODELIST) else {
        return Err(refused("no host list (give -w or SLURM_HOSTFILE)".into()));
    };
    let hosts: Vec<String> =
        list.split(',').map(str::trim).filter(|h| !h.is_empty()).map(str::to_owned).take(most + 1).collect();
    if hosts.is_empty() {
        return Err(refused("the host list is empty".into()));
    }
    if hosts.len() > most {
        return Err(refused(format!("more than {most} tasks listed")));
    }
    Ok(hosts)
}

/// An arbitrary distribution's step on the job's nodes (`shares`: name and CPUs, in the job's
/// order): the step's nodes (those listed, in the job's order) and each one's task ids. The
/// list decides the task count (`-n`, when given, must match it) and the nodes (`-N` is not
/// consulted); the CPU and MaxTasksPerNode rules of [`step_counts`] hold as for the others.
pub(crate) fn arbitrary_layout(
    spec: &StepSpec,
    hosts: &[String],
    shares: &[(String, u32)],
    max_per_node: u32,
) -> Result<(u32, u32, Vec<String>, Vec<Vec<u32>>), Refusal> {
    let ntasks = u32::try_from(hosts.len()).unwrap_or(u32::MAX);
    if let Some(asked) = spec.ntasks.filter(|n| *n != ntasks) {
        let detail = format!("-n {asked} with {ntasks} hosts listed for --distribution=arbitrary");
        return Err(Refusal::new(ErrorCode::BadTaskCount, detail));
    }
    if let Some(unknown) = hosts.iter().find(|h| !shares.iter().any(|(node, _)| node == *h)) {
        let detail = format!("{unknown} is not one of the job's nodes");
        return Err(Refusal::new(ErrorCode::NodeConfigUnavailable, detail));
    }
    let cpus_per_task = spec.cpus_per_task.unwrap_or(1).max(1);
    let mut by_host: HashMap<&str, Vec<u32>> = HashMap::new();
    for (task, host) in (0..ntasks).zip(hosts) {
        by_host.entry(host.as_str()).or_default().push(task);
    }
    let mut nodes = Vec::new();
    let mut tasks = Vec::new();
    for (node, cpus) in shares {
        let Some(mine) = by_host.remove(node.as_str()) else { continue };
        let count = u32::try_from(mine.len()).unwrap_or(u32::MAX);
        if !spec.overcommit && u64::from(count) * u64::from(cpus_per_task) > u64::from(*cpus) {
            let detail = format!("{} CPUs wanted on {node}, the job has {cpus} there", count * cpus_per_task);
            return Err(Refusal::new(ErrorCode::TooManyCpus, detail));
        }
        if count > max_per_node {
            let detail = format!("{count} tasks on one node, at most {max_per_node} allowed (MaxTasksPerNode)");
            return Err(Refusal::new(ErrorCode::BadTaskCount, detail));
        }
        nodes.push(node.clone());
        tasks.push(mine);
    }
    Ok((ntasks, cpus_per_task, nodes, tasks))
}

/// How many tasks each node runs under `plane=size`: blocks of `size` dealt to the nodes in turn.
fn plane_counts(ntasks: u32, nodes: u32, size: u32) -> Vec<u32> {
    let nodes = nodes.max(1);
    let blocks = ntasks.div_ceil(size);
    (0..nodes)
        .map(|node| {
            // Blocks node, node + nodes, …; the last block may be short.
            let mine = blocks / nodes + u32::from(node < blocks % nodes);
            let last_block = blocks - 1;
            let holds_last = last_block % nodes == node;
            let short = if holds_last && mine > 0 { size * blocks - ntasks } else { 0 };
            (mine * size).saturating_sub(short)
        })
        .collect()
}

/// Task ids on each node: chunks of `chunk` consecutive ids dealt to the nodes in turn, each
/// node taking no more than its count (`u32::MAX`: block; 1: cyclic; N: plane=N). Work is
/// proportional to the task count, which [`step_counts`] bounded.
fn spread_layout(counts: &[u32], chunk: u32) -> Vec<Vec<u32>> {
    let total: u32 = counts.iter().sum();
    let mut layout: Vec<Vec<u32>> = counts.iter().map(|_| Vec::new()).collect();
    let (mut next, mut node) = (0u32, 0usize);
    while next < total && !counts.is_empty() {
        let held = u32::try_from(layout[node].len()).unwrap_or(u32::MAX);
        let take = counts[node].saturating_sub(held).min(chunk).min(total - next);
        layout[node].extend(next..next + take);
        next += take;
        node = (node + 1) % counts.len();
    }
    layout
}

/// The step's task ids on each node under `distribution`.
pub(crate) fn step_layout(counts: &[u32], distribution: Distribution) -> Vec<Vec<u32>> {
    match distribution {
        Distribution::Block => block_layout(counts),
        Distribution::Cyclic => spread_layout(counts, 1),
        Distribution::Plane(size) => spread_layout(counts, size),
        // Laid out by `arbitrary_layout`; as block for any other caller.
        Distribution::Arbitrary => block_layout(counts),
    }
}

/// A step's task count, CPUs per task and tasks per node, checked against the job's allocation
/// (`shares`: each node's name and CPUs, in the job's node order) before anything is laid out:
/// at most `max_per_node` tasks on a node (Slurm's `MaxTasksPerNode`), and, unless
/// `--overcommit`, no more CPUs on a node than the job has there (`--overlap` shares CPUs with
/// other steps, it does not add any).
/// Without `-n`, `-N` or `--ntasks-per-node` the step runs the job's `job_tasks`.
pub(crate) fn step_counts(
    spec: &StepSpec,
    job_tasks: u32,
    shares: &[(String, u32)],
    max_per_node: u32,
    distribution: Distribution,
) -> Result<(u32, u32, Vec<u32>), Refusal> {
    let job_nodes = u32::try_from(shares.len()).unwrap_or(u32::MAX);
    let cpus_per_task = spec.cpus_per_task.unwrap_or(1).max(1);
    let ntasks = spec
        .ntasks
        .or_else(|| spec.ntasks_per_node.map(|k| k.saturating_mul(spec.nodes.unwrap_or(job_nodes))))
        .or(spec.nodes)
        .unwrap_or(job_tasks.max(1));
    let nodes = spec.nodes.unwrap_or_else(|| match spec.ntasks_per_node {
        Some(k) if k > 0 => ntasks.div_ceil(k).min(job_nodes),
        _ => ntasks.min(job_nodes),
    });
    if ntasks == 0 || spec.ntasks_per_node == Some(0) {
        return Err(Refusal::new(ErrorCode::BadTaskCount, "a step needs at least one task"));
    }
    if nodes == 0 || nodes > job_nodes || ntasks < nodes {
        let detail = format!("{ntasks} tasks on {nodes} nodes do not fit the job's {job_nodes} nodes");
        return Err(Refusal::new(ErrorCode::NodeConfigUnavailable, detail));
    }
    // One count per node of the step (at most the job's nodes), whatever `ntasks` is.
    let counts = match (distribution, spec.ntasks_per_node) {
        (Distribution::Plane(size), None) => plane_counts(ntasks, nodes, size),
        _ => block_counts(ntasks, nodes, spec.ntasks_per_node),
    };
    if counts.iter().map(|c| u64::from(*c)).sum::<u64>() != u64::from(ntasks) {
        return Err(Refusal::new(ErrorCode::NodeConfigUnavailable, "--ntasks-per-node leaves tasks without a node"));
    }
    // Slurm's order: the CPUs first, then the task count.
    if !spec.overcommit {
        for ((node, cpus), count) in shares.iter().zip(&counts) {
            let wanted = u64::from(*count) * u64::from(cpus_per_task);
            if wanted > u64::from(*cpus) {
                let detail = format!("{wanted} CPUs wanted on {node}, the job has {cpus} there");
                return Err(Refusal::new(ErrorCode::TooManyCpus, detail));
            }
        }
    }
    if let Some(most) = counts.iter().copied().max().filter(|most| *most > max_per_node) {
        let detail = format!("{most} tasks on one node, at most {max_per_node} allowed (MaxTasksPerNode)");
        return Err(Refusal::new(ErrorCode::BadTaskCount, detail));
    }
    Ok((ntasks, cpus_per_task, counts))
}

impl Core {
    /// `srun` asks for a step in `job_id`.
    pub(crate) fn create_step(
        &mut self,
        caller: Caller,
        job_id: JobId,
        spec: Box<StepSpec>,
        reply: oneshot::Sender<Response>,
    ) {
        let who = Who::of(&self.state.config(), caller);
        if let Err(refusal) = crate::policy::validate::check_container(self.state.config(), &spec.environment) {
            let _ = reply.send(refusal.into());
            return;
        }
        let Some(job) = self.state.jobs.get_mut(&job_id) else {
            let _ = reply.send(refuse(ErrorCode::InvalidJobId, format!("job {job_id} not found")));
            return;
        };
        if !who.may(Operation::RunAs { owner: job.info.uid }) {
            let detail = format!("create step, owner uid {}", job.info.uid);
            let _ = reply.send(refuse(ErrorCode::AccessDenied, format!("job {job_id} belongs to another user")));
            self.audit_request(caller, "step", Some(job_id), Err(ErrorCode::AccessDenied), detail);
            return;
        }
        let (Some(JobState::Running), Some(alloc)) = (job.info.state, &job.alloc) else {
            let code = if job.info.state().is_terminal() { ErrorCode::AlreadyDone } else { ErrorCode::JobPending };
            let _ = reply.send(refuse(code, format!("job {job_id} is not running")));
            return;
        };
        if spec.rlimits.len() > MAX_RLIMITS {
            let detail = format!("{} resource limits, at most {MAX_RLIMITS}", spec.rlimits.len());
            let _ = reply.send(refuse(ErrorCode::InvalidSpec, detail));
            return;
        }
        // A step's name is shown to other users (`squeue -s`, `sacct`): the bounds and the
        // control-character rule of a job's name.
        if let Err(Refusal { code, detail }) = crate::policy::validate::check_string("step name", &spec.name) {
            let _ = reply.send(refuse(code, detail.clone()));
            self.audit_request(caller, "step", Some(job_id), Err(code), format!("refused: {detail}"));
            return;
        }
        let shares: Vec<(String, u32)> = alloc.nodes.iter().map(|n| (n.node.clone(), n.cpus)).collect();
        let job_tasks = job.info.num_tasks;
        let max_per_node = self.state.config().max_tasks_per_node;
        // Everything is checked on counts first: nothing proportional to the request's numbers
        // is allocated before the tasks are known to fit.
        let distribution = match distribution(&spec.environment) {
            Ok(distribution) => distribution,
            Err(refusal) => {
                let _ = reply.send(refusal.into());
                return;
            }
        };
        let fit = if distribution == Distribution::Arbitrary {
            let most = usize::try_from(max_per_node).unwrap_or(usize::MAX).saturating_mul(shares.len());
            arbitrary_hosts(&spec.environment, most)
                .and_then(|hosts| arbitrary_layout(&spec, &hosts, &shares, max_per_node))
                .map(|(ntasks, cpus_per_task, nodes, tasks)| {
                    let counts = tasks.iter().map(|t| u32::try_from(t.len()).unwrap_or(u32::MAX)).collect();
                    (ntasks, cpus_per_task, counts, Some((nodes, tasks)))
                })
        } else {
            step_counts(&spec, job_tasks, &shares, max_per_node, distribution)
                .map(|(ntasks, cpus_per_task, counts)| (ntasks, cpus_per_task, counts, None))
        };
        let (ntasks, cpus_per_task, counts, fixed) = match fit {
            Ok(fit) => fit,
            Err(Refusal { code, detail }) => {
                let _ = reply.send(refuse(code, detail.clone()));
                self.audit_request(caller, "step", Some(job_id), Err(code), format!("refused: {detail}"));
                return;
            }
        };
        // The step's nodes: the job's nodes in order, skipping those whose CPUs the job's running
        // steps hold, so that steps started together spread over the allocation (Slurm's
        // placement); an `--overlap` step takes the first nodes. An arbitrary distribution's
        // nodes are those its list names, busy or not.
        let candidates: Vec<(String, u32)> = match &fixed {
            Some((nodes, _)) => shares.iter().filter(|(node, _)| nodes.contains(node)).cloned().collect(),
            None => shares,
        };
        let mut node_names: Vec<String> = Vec::with_capacity(counts.len());
        let mut held = Vec::new();
        for (node, cpus) in &candidates {
            let Some(count) = counts.get(node_names.len()) else { break };
            // An overcommitted step holds at most the job's CPUs on the node.
            let wanted = count.saturating_mul(cpus_per_task).min(*cpus);
            if !spec.overlap {
                if wanted + self.steps.held_on(job_id, node) > *cpus {
                    if fixed.is_some() {
                        break;
                    }
                    continue;
                }
                held.push((node.clone(), wanted));
            }
            node_names.push(node.clone());
        }
        if node_names.len() < counts.len() {
            let detail =
                format!("{} nodes with free CPUs wanted, the job's running steps hold the others", counts.len());
            let _ = reply.send(refuse(ErrorCode::StepsBusy, detail));
            return;
        }
        let tasks = match fixed {
            Some((_, tasks)) => tasks,
            None => step_layout(&counts, distribution),
        };
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        let step_id = job
            .info
            .steps
            .iter()
            .filter_map(|s| match s.step_id {
                StepId::Numbered(n) => Some(n + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let Ok(token) = drover_shared::auth::random_bytes::<16>() else {
            let _ = reply.send(refuse(ErrorCode::Internal, "no randomness for the step credential"));
            return;
        };
        let layout = StepLayout {
            job_id,
            step_id,
            nodes: node_names.clone(),
            tasks,
            ntasks,
            cpus_per_task,
            token: token.to_vec(),
        };
        let name = if spec.name.is_empty() {
            spec.argv.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_owned()).unwrap_or_default()
        } else {
            spec.name.clone()
        };
        // A launch the node could not read would drop the node's connection: refuse it here.
        // The nodes' launches differ only in their small per-node part (CPUs, memory, GPU
        // indexes): the first one, with room for that, stands for all.
        if let Some(size) = self.step_launches(&spec, &layout, 1).first().map(|(_, l)| launch_size(l) + 4096)
            && size > MAX_FRAME
        {
            let detail = format!(
                "the step's launch message ({size} bytes: command line and environment) exceeds the limit of {MAX_FRAME} bytes"
            );
            let _ = reply.send(refuse(ErrorCode::InvalidSpec, detail.clone()));
            self.audit_request(caller, "step", Some(job_id), Err(ErrorCode::InvalidSpec), format!("refused: {detail}"));
            return;
        }
        let Some(job) = self.state.jobs.get_mut(&job_id) else { return };
        job.info.steps.push(StepInfo {
            step_id: StepId::Numbered(step_id),
            name,
            state: JobState::Running,
            exit_status: WaitStatus::default(),
            start_time: Some(now()),
            end_time: None,
            num_cpus: ntasks.saturating_mul(cpus_per_task),
            num_tasks: ntasks,
            nodes: node_names,
        });
        self.store_job(job_id, false);
        self.audit_request(caller, "step", Some(job_id), Ok(()), format!("create step {step_id}, {ntasks} tasks"));
        self.after_commit(AfterCommit::StepCreated { job_id, step_id });
        self.steps.held.insert((job_id, step_id), held);
        self.steps.pending.insert((job_id, step_id), (reply, spec, layout));
    }

    /// The step row is durable (or, with `error`, was not stored): answer srun and launch.
    pub(crate) fn step_committed(&mut self, job_id: JobId, step_id: u32, error: Option<&str>) {
        let Some((reply, spec, layout)) = self.steps.pending.remove(&(job_id, step_id)) else { return };
        if let Some(error) = error {
            self.steps.held.remove(&(job_id, step_id));
            if let Some(job) = self.state.jobs.get_mut(&job_id) {
                job.info.steps.retain(|s| s.step_id != StepId::Numbered(step_id));
            }
            let _ = reply.send(refuse(ErrorCode::StorageUnavailable, error));
            return;
        }
        let launches = self.step_launches(&spec, &layout, usize::MAX);
        if launches.is_empty() {
            self.steps.held.remove(&(job_id, step_id));
            let _ = reply.send(refuse(ErrorCode::AlreadyDone, format!("job {job_id} ended")));
            return;
        }
        let _ = reply.send(Response::StepCreated(Box::new(layout)));
        for (node, launch) in launches {
            let link = self.links.get(&node).cloned();
            match link.map(|l| l.tx.send(CtldMessage::LaunchStep(Box::new(launch)))) {
                Some(Ok(())) => tracing::info!(job_id, step_id, node, "step launch sent"),
                _ => tracing::warn!(job_id, step_id, node, "node not connected; step tasks not sent"),
            }
        }
    }

    /// One launch per node of the step (of its first `most` nodes).
    fn step_launches(&self, spec: &StepSpec, layout: &StepLayout, most: usize) -> Vec<(String, StepLaunch)> {
        let Some(job) = self.state.jobs.get(&layout.job_id) else { return Vec::new() };
        let Some(alloc) = &job.alloc else { return Vec::new() };
        if job.info.state() != JobState::Running {
            return Vec::new();
        }
        let shares: HashMap<&str, _> = alloc.nodes.iter().map(|share| (share.node.as_str(), share)).collect();
        let mut launches = Vec::new();
        let step_nodes = layout.nodes.iter().filter_map(|name| shares.get(name.as_str()).copied());
        for (index, share) in step_nodes.take(most).enumerate() {
            let request = self.launch_request(job, (*job.spec).clone(), alloc, share);
            let launch = StepLaunch {
                job: request,
                step_id: layout.step_id,
                layout: layout.clone(),
                node_index: u32::try_from(index).unwrap_or(u32::MAX),
                srun_address: spec.srun_address.clone(),
                token: layout.token.clone(),
                argv: spec.argv.clone(),
                environment: spec.environment.clone(),
                work_dir: spec.work_dir.clone(),
                label: spec.label,
                pty: spec.pty,
                task_prolog: spec.task_prolog.clone(),
                task_epilog: spec.task_epilog.clone(),
                rlimits: spec.rlimits.clone(),
                preserve_env: spec.preserve_env,
                slurmd_debug: spec.slurmd_debug.min(drover_shared::log_level::MAX_INCREMENT),
                parallel_debug: spec.parallel_debug,
            };
            launches.push((share.node.clone(), launch));
        }
        launches
    }

    /// srun reports its step's end.
    pub(crate) fn step_done(
        &mut self,
        caller: Caller,
        job_id: JobId,
        step_id: u32,
        state: JobState,
        exit_status: WaitStatus,
    ) -> Response {
        let who = Who::of(&self.state.config(), caller);
        let Some(job) = self.state.jobs.get_mut(&job_id) else {
            return refuse(ErrorCode::InvalidJobId, format!("job {job_id} not found"));
        };
        if !who.may(Operation::RunAs { owner: job.info.uid }) {
            return refuse(ErrorCode::AccessDenied, format!("job {job_id} belongs to another user"));
        }
        let Some(step) = job.info.steps.iter_mut().find(|s| s.step_id == StepId::Numbered(step_id)) else {
            return refuse(ErrorCode::InvalidJobId, format!("step {job_id}.{step_id} not found"));
        };
        self.steps.held.remove(&(job_id, step_id));
        if step.end_time.is_none() {
            step.state = if state.is_terminal() { state } else { JobState::Completed };
            step.exit_status = exit_status;
            step.end_time = Some(now());
            self.store_job(job_id, false);
        } else if step.exit_status == WaitStatus::default() {
            // Cancelled earlier: keep the state, record how the tasks ended.
            step.exit_status = exit_status;
            self.store_job(job_id, false);
        }
        Response::StepOk
    }

    /// `scancel [--signal=S] N.S`.
    pub(crate) fn cancel_step(&mut self, caller: Caller, job_id: JobId, step_id: u32, signal: Option<i32>) -> Response {
        let who = Who::of(&self.state.config(), caller);
        let kill_wait = self.state.config().kill_wait;
        let Some(job) = self.state.jobs.get_mut(&job_id) else {
            return refuse(ErrorCode::InvalidJobId, format!("job {job_id} not found"));
        };
        if !who.may(Operation::Job { owner: job.info.uid }) {
            self.audit_request(caller, "cancel", Some(job_id), Err(ErrorCode::AccessDenied), format!("step {step_id}"));
            return refuse(ErrorCode::AccessDenied, format!("job {job_id} belongs to another user"));
        }
        let Some(step) = job.info.steps.iter_mut().find(|s| s.step_id == StepId::Numbered(step_id)) else {
            return refuse(ErrorCode::InvalidJobId, format!("step {job_id}.{step_id} not found"));
        };
        if step.end_time.is_some() {
            return refuse(ErrorCode::AlreadyDone, format!("step {job_id}.{step_id} already ended"));
        }
        let nodes = step.nodes.clone();
        if signal.is_none() {
            self.steps.held.remove(&(job_id, step_id));
            step.state = JobState::Cancelled;
            step.end_time = Some(now());
            self.store_job(job_id, false);
            self.audit_request(caller, "cancel", Some(job_id), Ok(()), format!("step {step_id}"));
        }
        self.signal_step_nodes(job_id, step_id, &nodes, signal, kill_wait);
        Response::StepOk
    }

    fn signal_step_nodes(
        &mut self,
        job_id: JobId,
        step_id: u32,
        nodes: &[String],
        signal: Option<i32>,
        kill_wait: u32,
    ) {
        for node in nodes {
            if let Some(link) = self.links.get(node).cloned() {
                let _ = link.tx.send(CtldMessage::SignalStep { job_id, step_id, signal, kill_wait });
            }
        }
    }

    /// `scancel --signal` without `-b`: the signal reaches every running step's tasks too (the
    /// job's supervisor only reaches the batch script and its descendants).
    pub(crate) fn signal_steps(&mut self, job_id: JobId, signal: i32) {
        let kill_wait = self.state.config().kill_wait;
        let Some(job) = self.state.jobs.get(&job_id) else { return };
        let running: Vec<(u32, Vec<String>)> = job
            .info
            .steps
            .iter()
            .filter(|s| s.end_time.is_none())
            .filter_map(|s| match s.step_id {
                StepId::Numbered(n) => Some((n, s.nodes.clone())),
                _ => None,
            })
            .collect();
        for (step_id, nodes) in running {
            self.signal_step_nodes(job_id, step_id, &nodes, Some(signal), kill_wait);
        }
    }

    /// The job ended: steps still running end `CANCELLED` and their tasks are killed everywhere.
    pub(crate) fn end_steps(&mut self, job_id: JobId, end_time: UnixTime) {
        let kill_wait = self.state.config().kill_wait;
        let Some(job) = self.state.jobs.get_mut(&job_id) else { return };
        let mut running = Vec::new();
        for step in
            job.info.steps.iter_mut().filter(|s| matches!(s.step_id, StepId::Numbered(_)) && s.end_time.is_none())
        {
            step.state = JobState::Cancelled;
            step.end_time = Some(end_time);
            if let StepId::Numbered(n) = step.step_id {
                running.push((n, step.nodes.clone()));
            }
        }
        self.steps.held.retain(|(job, _), _| *job != job_id);
        for (step_id, nodes) in running {
            self.signal_step_nodes(job_id, step_id, &nodes, None, kill_wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        ARBITRARY_NODELIST, Distribution, arbitrary_hosts, arbitrary_layout, block_counts, block_layout, distribution,
        plane_counts, step_counts, step_layout,
    };

    /// An arbitrary distribution puts task `i` on the `i`-th listed host, nodes in the job's
    /// order; the list must name the job's nodes, fit their CPUs, and match `-n`.
    #[test]
    fn arbitrary_lists_place_each_task() {
        let shares: Vec<(String, u32)> = ["a", "b", "c"].iter().map(|n| ((*n).to_owned(), 2)).collect();
        let env = |list: &str| vec![(ARBITRARY_NODELIST.to_owned(), list.to_owned())];
        let hosts = arbitrary_hosts(&env("c,a,c"), 6).unwrap();
        let spec = StepSpec::default();
        let (ntasks, cpus, nodes, tasks) = arbitrary_layout(&spec, &hosts, &shares, 8).unwrap();
        assert_eq!((ntasks, cpus), (3, 1));
        assert_eq!(nodes, ["a", "c"]);
        assert_eq!(tasks, [vec![1], vec![0, 2]]);
        let code = |list: &str, spec: &StepSpec| {
            let hosts = arbitrary_hosts(&env(list), 6).map_err(|r| r.code)?;
            arbitrary_layout(spec, &hosts, &shares, 8).map(|_| ()).map_err(|r| r.code)
        };
        use drover_shared::proto::client::ErrorCode;
        assert_eq!(code("a,z", &spec), Err(ErrorCode::NodeConfigUnavailable));
        assert_eq!(code("a,a,a", &spec), Err(ErrorCode::TooManyCpus));
        assert_eq!(code("a,b", &StepSpec { ntasks: Some(3), ..StepSpec::default() }), Err(ErrorCode::BadTaskCount));
        assert_eq!(code("a,b,c,a,b,c,a", &spec), Err(ErrorCode::InvalidSpec));
        assert_eq!(code(",,", &spec), Err(ErrorCode::InvalidSpec));
        assert!(arbitrary_hosts(&[], 6).unwrap_err().detail.contains("SLURM_HOSTFILE"));
    }
    use drover_shared::job::StepSpec;
    use drover_shared::proto::client::ErrorCode;

    #[test]
    fn cyclic_and_plane_deal_tasks_to_the_nodes_in_turn() {
        let env = |v: &str| vec![("SLURM_DISTRIBUTION".to_owned(), v.to_owned())];
        assert_eq!(distribution(&[]).unwrap(), Distribution::Block);
        assert_eq!(distribution(&env("cyclic:block,Pack")).unwrap(), Distribution::Cyclic);
        assert_eq!(distribution(&env("plane=2")).unwrap(), Distribution::Plane(2));
        assert_eq!(distribution(&env("arbitrary")).unwrap(), Distribution::Arbitrary);
        assert!(distribution(&env("diagonal")).unwrap_err().detail.contains("arbitrary"));
        assert!(distribution(&env("plane=0")).is_err() && distribution(&env("diagonal")).is_err());
        let counts = block_counts(5, 2, None);
        assert_eq!(step_layout(&counts, Distribution::Cyclic), [vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(step_layout(&counts, Distribution::Block), [vec![0, 1, 2], vec![3, 4]]);
        // plane=2, five tasks on two nodes: blocks {0,1} {2,3} {4}, dealt in turn.
        let plane = plane_counts(5, 2, 2);
        assert_eq!(plane, [3, 2]);
        assert_eq!(step_layout(&plane, Distribution::Plane(2)), [vec![0, 1, 4], vec![2, 3]]);
        assert_eq!(plane_counts(8, 3, 2), [4, 2, 2]);
        assert_eq!(plane_counts(7, 3, 2), [3, 2, 2]);
        // Uneven counts from --ntasks-per-node: cyclic skips a node that is full.
        assert_eq!(step_layout(&[3, 1], Distribution::Cyclic), [vec![0, 2, 3], vec![1]]);
    }

    #[test]
    fn block_distribution() {
        let layout = |n, nodes, per| block_layout(&block_counts(n, nodes, per));
        assert_eq!(layout(4, 2, None), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(layout(3, 2, None), vec![vec![0, 1], vec![2]]);
        assert_eq!(layout(4, 2, Some(1)), vec![vec![0], vec![1]]);
        assert_eq!(layout(3, 2, Some(2)), vec![vec![0, 1], vec![2]]);
    }

    #[test]
    fn steps_are_checked_against_the_allocation_before_layout() {
        let shares = [("n1".to_owned(), 1), ("n2".to_owned(), 4)];
        let spec = |ntasks, overcommit| StepSpec { ntasks: Some(ntasks), overcommit, ..StepSpec::default() };
        let code = |spec: &StepSpec| {
            step_counts(spec, 2, &shares, 512, Distribution::Block).map(|(n, _, c)| (n, c)).map_err(|e| e.code)
        };
        assert_eq!(code(&spec(2, false)), Ok((2, vec![1, 1])));
        assert_eq!(code(&spec(4, false)), Err(ErrorCode::TooManyCpus));
        assert_eq!(code(&spec(4, true)), Ok((4, vec![2, 2])));
        assert_eq!(code(&spec(1024, true)), Ok((1024, vec![512, 512])));
        assert_eq!(code(&spec(1025, true)), Err(ErrorCode::BadTaskCount));
        assert_eq!(code(&spec(4_000_000_000, false)), Err(ErrorCode::TooManyCpus));
        assert_eq!(code(&spec(4_000_000_000, true)), Err(ErrorCode::BadTaskCount));
        assert_eq!(code(&spec(0, false)), Err(ErrorCode::BadTaskCount));
        let per_node = StepSpec { ntasks_per_node: Some(u32::MAX), overcommit: true, ..StepSpec::default() };
        assert_eq!(code(&per_node), Err(ErrorCode::BadTaskCount));
        let wide = StepSpec { ntasks: Some(2), cpus_per_task: Some(u32::MAX), ..StepSpec::default() };
        assert_eq!(code(&wide), Err(ErrorCode::TooManyCpus));
    }
}
