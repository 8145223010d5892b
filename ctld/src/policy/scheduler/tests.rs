//! The scheduling pass over an in-memory cluster (no daemons): request shapes, QOS and
//! association limits with Slurm's reasons, backfill that never delays a reservation, and fair
//! share ordering after decayed usage.

use super::*;
use crate::model::state::NodeAllocation;
use crate::policy::placement::could_ever_fit;
use crate::policy::{explain, limits, quota, will_run};
use drover_shared::config::Config;
use drover_shared::grammar::gres::parse_gres;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobInfo, JobSpec};
use drover_shared::proto::client::Response;
use std::path::Path;
use std::sync::Arc;

const NOW: UnixTime = 1_700_000_000;

const BASE: &str = r#"
cluster_name = "c"
default_account = "shared"
[controller]
address = "127.0.0.1:6817"
state_dir = "state"
preempt_exempt_time = 0
[[nodes]]
names = "n[1-2]"
cpus = 4
real_memory = 8000
gpus = { h100 = 2 }
[[partitions]]
name = "main"
nodes = "n[1-2]"
default = true
max_time = "1-00:00:00"
[[accounts]]
name = "vision"
shares = 60
[[accounts]]
name = "nlp"
shares = 40
[[accounts]]
name = "shared"
[[users]]
name = "alice"
default_account = "vision"
[[users]]
name = "bob"
default_account = "nlp"
"#;

/// A state whose nodes are all up (each with a connection).
fn cluster(extra: &str) -> State {
    cluster_of(&format!("{BASE}{extra}"))
}

fn cluster_of(text: &str) -> State {
    let config = Config::parse(Path::new("/etc/drover/cluster.toml"), text).unwrap();
    let mut state = State::new(Arc::new(config), 1);
    for (i, node) in state.nodes_mut().iter_mut().enumerate() {
        node.connection = Some(i as u64);
        node.responding = true;
        node.registered_once = true;
    }
    state
}

/// Adds a committed pending job; `args` is a small sbatch-like list: `c=2 g=1 N=2 t=30 q=gpu x w=n1 e=n2`.
fn submit(state: &mut State, user: &str, args: &str) -> JobId {
    let mut spec = JobSpec { script: "#!/bin/sh\n".into(), work_dir: "/".into(), ..JobSpec::default() };
    let mut qos = "normal".to_owned();
    for arg in args.split_whitespace() {
        let (key, value) = arg.split_once('=').unwrap_or((arg, ""));
        match key {
            "c" => spec.cpus_per_task = Some(value.parse().unwrap()),
            "g" => spec.gres_per_node = parse_gres(&format!("gpu:{value}")).unwrap(),
            "N" => spec.nodes_min = Some(value.parse().unwrap()),
            "t" => spec.time_limit = Some(TimeLimit::Minutes(value.parse().unwrap())),
            "q" => qos = value.to_owned(),
            "x" => spec.exclusive = true,
            "w" => spec.nodelist = Some(value.to_owned()),
            "e" => spec.exclude = Some(value.to_owned()),
            other => panic!("unknown test arg {other}"),
        }
    }
    let job_id = state.take_job_id();
    let account =
        state.config().users.iter().find(|u| u.name == user).map_or("shared".into(), |u| u.default_account.clone());
    state.usage.touch(&account, user);
    let info = JobInfo {
        job_id,
        user: user.into(),
        account,
        qos,
        partition: "main".into(),
        state: Some(JobState::Pending),
        reason: "None".into(),
        priority: 1,
        submit_time: NOW - 100 + i64::from(job_id),
        eligible_time: Some(NOW - 100 + i64::from(job_id)),
        time_limit: spec.time_limit,
        ..JobInfo::default()
    };
    let node_filter = crate::policy::validate::node_filter(state, &spec, crate::policy::validate::UnknownNodes::Skip)
        .expect("skipping unknown nodes never refuses");
    let job = Job {
        info: info.into(),
        spec: Arc::new(spec),
        candidates: Arc::from(["main".to_owned()]),
        node_filter,
        alloc: None,
        committed: true,
        launched_at: None,
        cancel_requested_by: None,
        started: false,
        reason_id: 0,
    };
    state.jobs.insert(job_id, job);
    job_id
}

thread_local! {
    /// The victims the passes of this test decided to preempt and [`victims`] has not taken yet
    /// (each test runs on its own thread).
    static PREEMPTED: std::cell::RefCell<Vec<JobId>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One pass, applied the way the core applies it; returns the started job ids and keeps the
/// preemptions it decided for [`victims`].
fn pass(state: &mut State, now: UnixTime) -> Vec<JobId> {
    let decisions = schedule(state, now);
    PREEMPTED.with_borrow_mut(|p| p.extend(decisions.preemptions.iter().map(|p| p.victim)));
    let mut started = Vec::new();
    for start in decisions.starts {
        let job = state.jobs.get_mut(&start.job_id).unwrap();
        job.info.state = Some(JobState::Running);
        job.info.start_time = Some(now);
        job.info.time_limit = job.info.time_limit.or(Some(TimeLimit::Minutes(24 * 60)));
        job.info.nodes = start.alloc.nodes.iter().map(|n| n.node.clone()).collect();
        job.alloc = Some(start.alloc);
        started.push(start.job_id);
    }
    started
}

fn reason(state: &State, job_id: JobId) -> &str {
    &state.jobs[&job_id].info.reason
}

#[test]
fn per_node_request_distributes_tasks_and_gpus() {
    let spec = JobSpec { nodes_min: Some(2), ntasks: Some(5), cpus_per_task: Some(2), ..JobSpec::default() };
    let r = PerNodeRequest::from_spec(&spec);
    assert_eq!(r.tasks, vec![3, 2]);
    assert_eq!((r.cpus(0), r.cpus(1)), (6, 4));
    let spec = JobSpec { gres_per_node: parse_gres("gpu:h100:2").unwrap(), ..JobSpec::default() };
    assert_eq!(PerNodeRequest::from_spec(&spec).gpus, vec![(Some("h100".into()), 2)]);
}

/// Data-driven: each case is a QOS/account config, jobs to submit in order, and the expected
/// outcome per job (`R` started, otherwise the pending reason).
#[test]
fn limits_give_slurms_reasons() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: &[Case] = &[
        (
            "[[qos]]\nname = \"gpu\"\ngrp_tres = \"gres/gpu=2\"\n",
            &[("alice", "g=2 q=gpu"), ("bob", "g=1 q=gpu"), ("bob", "g=1")],
            // The limited job does not hold back the one behind it.
            &["R", "QOSGrpGRES", "R"],
        ),
        (
            "[[qos]]\nname = \"gpu\"\ngrp_tres = \"cpu=2\"\n",
            &[("alice", "c=2 q=gpu"), ("bob", "q=gpu")],
            &["R", "QOSGrpCpuLimit"],
        ),
        ("[[qos]]\nname = \"gpu\"\ngrp_jobs = 1\n", &[("alice", "q=gpu"), ("bob", "q=gpu")], &["R", "QOSGrpJobsLimit"]),
        (
            "[[qos]]\nname = \"gpu\"\nmax_tres_per_user = \"gres/gpu=1\"\n",
            &[("alice", "g=1 q=gpu"), ("alice", "g=1 q=gpu"), ("bob", "g=1 q=gpu")],
            &["R", "QOSMaxGRESPerUser", "R"],
        ),
        (
            "[[qos]]\nname = \"gpu\"\nmax_jobs_per_user = 1\n",
            &[("alice", "q=gpu"), ("alice", "q=gpu"), ("bob", "q=gpu")],
            &["R", "QOSMaxJobsPerUserLimit", "R"],
        ),
        (
            "[[qos]]\nname = \"gpu\"\ngrp_tres = \"gres/gpu:h100=1\"\n",
            &[("alice", "g=h100:1 q=gpu"), ("bob", "g=h100:1 q=gpu")],
            &["R", "QOSGrpGRES"],
        ),
    ];
    for (extra, jobs, expected) in cases {
        let mut state = cluster(extra);
        let ids: Vec<JobId> = jobs.iter().map(|(user, args)| submit(&mut state, user, args)).collect();
        let started = pass(&mut state, NOW);
        let got: Vec<&str> =
            ids.iter().map(|id| if started.contains(id) { "R" } else { reason(&state, *id) }).collect();
        assert_eq!(&got, expected, "{extra}");
    }
}

#[test]
fn account_limits_cover_the_subtree() {
    let extra = "[[accounts]]\nname = \"team\"\ngrp_tres = \"gres/gpu=2\"\ngrp_jobs = 5\n[[accounts]]\nname = \"sub\"\nparent = \"team\"\n\
        [[users]]\nname = \"carol\"\ndefault_account = \"sub\"\n";
    let mut state = cluster(extra);
    let a = submit(&mut state, "carol", "g=2");
    let b = submit(&mut state, "carol", "g=1");
    let started = pass(&mut state, NOW);
    assert_eq!(started, vec![a]);
    assert_eq!(reason(&state, b), "AssocGrpGRES");
}

#[test]
fn submit_limits_refuse() {
    let mut state =
        cluster("[[qos]]\nname = \"gpu\"\nmax_submit_jobs_per_user = 1\nmax_tres_per_job = \"gres/gpu=2\"\n");
    let qos = state.config().qos.iter().find(|q| q.name == "gpu").unwrap().clone();
    let one_gpu: tres::Tres = [("gres/gpu".to_owned(), 1)].into();
    let three_gpus: tres::Tres = [("gres/gpu".to_owned(), 3)].into();
    assert!(limits::check_submit(&state, &qos, "alice", &three_gpus).unwrap_err().contains("MaxTRESPerJob"));
    assert_eq!(limits::check_submit(&state, &qos, "alice", &one_gpu), Ok(()));
    submit(&mut state, "alice", "q=gpu");
    assert!(limits::check_submit(&state, &qos, "alice", &one_gpu).unwrap_err().contains("MaxSubmitJobsPerUser=1"));
    assert_eq!(limits::check_submit(&state, &qos, "bob", &one_gpu), Ok(()));
}

/// sacctmgr's limits of one user's association (MaxJobs, MaxTRES, MaxSubmitJobs) and an
/// ancestor account's GrpSubmitJobs, counted over its subtree.
#[test]
fn association_limits_and_grp_submit_jobs() {
    let extra = "[[accounts]]\nname = \"team\"\ngrp_submit_jobs = 3\n[[accounts]]\nname = \"sub\"\nparent = \"team\"\n\
        [[users]]\nname = \"carol\"\ndefault_account = \"sub\"\n[[users]]\nname = \"dave\"\ndefault_account = \"sub\"\n";
    let mut state = cluster(extra);
    let mut config = Config::clone(state.config());
    let carol = config.users.iter_mut().find(|u| u.name == "carol").unwrap();
    let limits = drover_shared::config::AssocLimits {
        max_jobs: Some(1),
        max_submit_jobs: Some(2),
        max_tres_per_job: [("gres/gpu".to_owned(), 1)].into(),
        ..Default::default()
    };
    carol.limits.insert("sub".into(), limits);
    state.install(Arc::new(config), None);
    let one_gpu: tres::Tres = [("gres/gpu".to_owned(), 1)].into();
    let two_gpus: tres::Tres = [("gres/gpu".to_owned(), 2)].into();
    let check =
        |state: &State, user: &str, asked: &tres::Tres| limits::check_association_submit(state, user, "sub", asked);
    assert!(check(&state, "carol", &two_gpus).unwrap_err().contains("MaxTRES gres/gpu=1"));
    let a = submit(&mut state, "carol", "g=1");
    let b = submit(&mut state, "carol", "g=1");
    assert!(check(&state, "carol", &one_gpu).unwrap_err().contains("MaxSubmitJobs=2"));
    assert_eq!(check(&state, "dave", &one_gpu), Ok(()));
    submit(&mut state, "dave", "g=1");
    // team's subtree holds three jobs now.
    assert!(check(&state, "dave", &one_gpu).unwrap_err().contains("account team GrpSubmitJobs=3"));
    let started = pass(&mut state, NOW);
    assert!(started.contains(&a) && !started.contains(&b), "{started:?}");
    assert_eq!(reason(&state, b), "AssocMaxJobsLimit");
}

/// n1 is busy for an hour; a 2-node exclusive job waits for it and reserves both nodes from
/// then. A 30-minute job fits on n2 and ends before the reservation: it backfills. A 2-hour job
/// would still run when the big job should start: it waits (Priority).
#[test]
fn backfill_never_delays_the_reserved_job() {
    let mut state = cluster("");
    let running = submit(&mut state, "alice", "c=4 t=60");
    assert_eq!(pass(&mut state, NOW), vec![running]);
    let big = submit(&mut state, "bob", "N=2 x t=60");
    let long = submit(&mut state, "alice", "c=1 t=120");
    let short = submit(&mut state, "alice", "c=1 t=30");
    // Make sure the big job comes first whatever the factors say.
    state.jobs.get_mut(&big).unwrap().info.nice = -100_000;
    let started = pass(&mut state, NOW + 60);
    assert_eq!(started, vec![short]);
    assert_eq!(reason(&state, big), "Resources");
    assert_eq!(reason(&state, long), "Priority");
    // Without backfill reservations (depth 0) the long job would have been started.
    let mut state = cluster("[priority]\nbackfill_reservations = 0\n");
    let running = submit(&mut state, "alice", "c=4 t=60");
    assert_eq!(pass(&mut state, NOW), vec![running]);
    let big = submit(&mut state, "bob", "N=2 x t=60");
    state.jobs.get_mut(&big).unwrap().info.nice = -100_000;
    let long = submit(&mut state, "alice", "c=1 t=120");
    assert_eq!(pass(&mut state, NOW + 60), vec![long]);
}

/// After alice's account used a lot, bob's job (submitted later, same shape) goes first.
#[test]
fn fair_share_orders_after_decayed_usage() {
    let mut state = cluster("[priority]\nweight_age = 0\nweight_job_size = 0\n");
    state.usage.touch("vision", "alice");
    state.usage.touch("nlp", "bob");
    state.usage.by_assoc.insert(("vision".into(), "alice".into()), 36_000.0);
    state.usage.by_assoc.insert(("nlp".into(), "bob".into()), 3_600.0);
    let blocker = submit(&mut state, "alice", "c=4 N=2 x");
    assert_eq!(pass(&mut state, NOW), vec![blocker]);
    let first = submit(&mut state, "alice", "c=1");
    let second = submit(&mut state, "bob", "c=1");
    pass(&mut state, NOW);
    // Fair Tree: vision LF = 0.6/(36000/39600) = 0.66, nlp LF = 0.4/(3600/39600) = 4.4, so nlp's
    // users rank first: two user associations (alice, bob) → bob 2/2 = 1.0, alice 1/2.
    let p = |id: JobId| state.jobs[&id].info.priority;
    assert!(p(second) > p(first), "bob {} alice {}", p(second), p(first));
    assert_eq!(reason(&state, second), "Resources");
    assert_eq!(reason(&state, first), "Priority");
}

const QUOTAS: &str = "[[quotas]]\naccount = \"vision\"\npartition = \"main\"\nguarantee = \"gres/gpu=2\"\n\
    [[quotas]]\naccount = \"nlp\"\npartition = \"main\"\nguarantee = \"gres/gpu=2\"\nburst = \"gres/gpu=4\"\n";

/// Marks a job ended and frees what it held (what the core does when the node reports it).
fn end(state: &mut State, job_id: JobId) {
    state.release_job(job_id, NOW);
    state.jobs.get_mut(&job_id).unwrap().info.state = Some(JobState::Cancelled);
}

/// bob (nlp) fills the idle GPUs of vision; alice (vision) submits inside her guarantee: exactly
/// one borrowed job is preempted (the oldest of the least fair-share ones), and once it ended
/// alice's job starts. Nothing else takes the freed GPU meanwhile.
#[test]
fn borrowed_gpus_are_reclaimed_exactly() {
    let mut state = cluster(QUOTAS);
    let bobs: Vec<JobId> = (0..4).map(|_| submit(&mut state, "bob", "g=1 t=60")).collect();
    assert_eq!(pass(&mut state, NOW), bobs);
    let quotas = quota::Quotas::new(&state);
    let mut borrowed: Vec<JobId> = quotas.borrowed.iter().copied().collect();
    borrowed.sort_unstable();
    assert_eq!(borrowed, bobs[2..].to_vec(), "the first two are inside nlp's guarantee");

    let alice = submit(&mut state, "alice", "g=1 t=60");
    let other = submit(&mut state, "bob", "g=1 t=5");
    assert_eq!(pass(&mut state, NOW + 10), Vec::<JobId>::new());
    let preempted = victims();
    assert_eq!(preempted, vec![bobs[2]]);
    assert_eq!(reason(&state, alice), "Resources");
    // A second pass while the victim is still dying preempts nothing more.
    assert_eq!(pass(&mut state, NOW + 11), Vec::<JobId>::new());
    assert!(victims().is_empty());
    // The victim comes back requeued, older (so higher priority) than alice's job: it must not
    // take the reclaimed GPU back, or the two would preempt each other forever.
    state.release_job(bobs[2], NOW + 20);
    let victim = state.jobs.get_mut(&bobs[2]).unwrap();
    victim.info.state = Some(JobState::Pending);
    victim.info.nodes.clear();
    assert_eq!(pass(&mut state, NOW + 20), vec![alice]);
    assert_eq!(reason(&state, bobs[2]), "Resources");
    assert_ne!(reason(&state, other), "None");
    assert!(victims().is_empty());
}

/// vision has a GPU guarantee and no CPU guarantee; nlp has no quota, so all its jobs borrow.
/// Alice's 2-GPU job reclaims both GPUs of one node: two victims on the same node, no more.
#[test]
fn gpu_guarantee_is_reclaimed_without_a_cpu_guarantee() {
    let mut state = cluster("[[quotas]]\naccount = \"vision\"\npartition = \"main\"\nguarantee = \"gres/gpu=2\"\n");
    let bobs: Vec<JobId> = (0..4).map(|_| submit(&mut state, "bob", "g=1 t=60")).collect();
    assert_eq!(pass(&mut state, NOW), bobs);
    let alice = submit(&mut state, "alice", "g=2 t=60");
    pass(&mut state, NOW + 10);
    let preempted = victims();
    assert_eq!(preempted.len(), 2, "{preempted:?}");
    let nodes: HashSet<String> = preempted.iter().map(|v| state.jobs[v].info.nodes[0].clone()).collect();
    assert_eq!(nodes.len(), 1, "both victims free the same node");
    for victim in preempted {
        end(&mut state, victim);
    }
    assert_eq!(pass(&mut state, NOW + 20), vec![alice]);
}

/// Jobs inside their team's guarantee are never preempted; a job beyond its own guarantee
/// does not reclaim.
#[test]
fn owned_jobs_are_never_preempted() {
    let mut state = cluster(QUOTAS);
    let bobs: Vec<JobId> = (0..2).map(|_| submit(&mut state, "bob", "g=1 t=60")).collect();
    let alices: Vec<JobId> = (0..2).map(|_| submit(&mut state, "alice", "g=1 t=60")).collect();
    assert_eq!(pass(&mut state, NOW).len(), 4);
    let extra = submit(&mut state, "alice", "g=1 t=60");
    assert!(pass(&mut state, NOW + 10).is_empty());
    assert!(victims().is_empty());
    assert_eq!(reason(&state, extra), "Resources");
    assert!(quota::Quotas::new(&state).borrowed.is_empty(), "{bobs:?} {alices:?}");
}

/// Burst and lending limits: nlp may hold at most 3 GPUs; vision lends none of its idle guarantee.
#[test]
fn burst_and_lend_limits() {
    let config = QUOTAS.replace("burst = \"gres/gpu=4\"", "burst = \"gres/gpu=3\"");
    let mut state = cluster(&config);
    let bobs: Vec<JobId> = (0..4).map(|_| submit(&mut state, "bob", "g=1 t=60")).collect();
    assert_eq!(pass(&mut state, NOW), bobs[..3].to_vec());
    assert_eq!(reason(&state, bobs[3]), "QuotaBurstLimit");

    let config = QUOTAS.replace(
        "guarantee = \"gres/gpu=2\"\n[[quotas]]",
        "guarantee = \"gres/gpu=2\"\nlend = \"gres/gpu=0\"\n[[quotas]]",
    );
    let mut state = cluster(&config);
    let bobs: Vec<JobId> = (0..3).map(|_| submit(&mut state, "bob", "g=1 t=60")).collect();
    assert_eq!(pass(&mut state, NOW), bobs[..2].to_vec());
    assert_eq!(reason(&state, bobs[2]), "QuotaLendLimit");
}

fn explanation(state: &State, job_id: JobId) -> String {
    match explain::explain(state, job_id, NOW + 60) {
        drover_shared::proto::client::Response::Explanation { lines, .. } => lines.join("\n"),
        other => panic!("{other:?}"),
    }
}

/// `drover why` names the limit with its numbers, what each node lacks, and the planned start.
#[test]
fn explanations_name_every_blocker() {
    let mut state = cluster("[[qos]]\nname = \"gpu\"\ngrp_tres = \"gres/gpu=2\"\n");
    let first = submit(&mut state, "alice", "g=2 q=gpu t=60");
    let limited = submit(&mut state, "bob", "g=1 q=gpu");
    pass(&mut state, NOW);
    let text = explanation(&state, limited);
    assert!(text.starts_with(&format!("job {limited} is PENDING, Reason=QOSGrpGRES\n")), "{text}");
    assert!(text.contains("QOSGrpGRES: QOS gpu GrpTRES gres/gpu=2: 2 in use, job asks 1"), "{text}");
    assert!(text.contains("  node n1: GPUs 0 free, job needs 1"), "{text}");
    assert!(!text.contains("node n2"), "n2 has room:\n{text}");
    let text = explanation(&state, first);
    assert_eq!(text, format!("job {first} is RUNNING, Reason=None"));

    let mut state = cluster("");
    let running = submit(&mut state, "alice", "c=4 N=2 t=60");
    assert_eq!(pass(&mut state, NOW), vec![running]);
    let big = submit(&mut state, "bob", "N=2 x t=60");
    pass(&mut state, NOW + 60);
    let text = explanation(&state, big);
    assert!(text.contains("estimated start: in 0h59m (unix time 1700003600) (backfill reservation)"), "{text}");
    assert!(text.contains("  node n1: CPUs 0 free of 4, job needs 4"), "{text}");
}

#[test]
fn test_only_estimates_now_or_when_running_jobs_end() {
    let mut state = cluster("");
    let probe = submit(&mut state, "alice", "c=2");
    let estimate = |state: &State, now| {
        let job = &state.jobs[&probe];
        will_run::estimate(state, job, 99, now)
    };
    match estimate(&state, NOW) {
        Response::WillRun { job_id: 99, start, cpus: 2, nodes, partition } => {
            assert_eq!((start, nodes, partition.as_str()), (NOW, vec!["n1".to_owned()], "main"));
        }
        other => panic!("{other:?}"),
    }
    state.jobs.remove(&probe);
    let whole = submit(&mut state, "bob", "x N=2 t=30");
    assert_eq!(pass(&mut state, NOW), [whole]);
    let probe = submit(&mut state, "alice", "c=2");
    let job = &state.jobs[&probe];
    match will_run::estimate(&state, job, 99, NOW + 60) {
        Response::WillRun { start, nodes, .. } => assert_eq!((start, nodes.len()), (NOW + 1800, 1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn constraints_restrict_eligible_nodes() {
    let mut state = cluster("");
    state.nodes_mut()[0].config.features = vec!["ib".into(), "a100".into()];
    state.nodes_mut()[1].config.features = vec!["eth".into()];
    let job = submit(&mut state, "alice", "");
    let partition = state.config().partitions[0].clone();
    let eligible = |state: &mut State, constraint: &str| {
        Arc::make_mut(&mut state.jobs.get_mut(&job).unwrap().spec).constraint = Some(constraint.into());
        // Resolved as a submission resolves it.
        let spec = state.jobs[&job].spec.clone();
        let filter = crate::policy::validate::node_filter(state, &spec, crate::policy::validate::UnknownNodes::Refuse);
        state.jobs.get_mut(&job).unwrap().node_filter = filter.unwrap();
        eligible_nodes(state, &state.jobs[&job], &partition)
    };
    assert_eq!(eligible(&mut state, "ib"), [0]);
    assert_eq!(eligible(&mut state, "eth|a100"), [0, 1]);
    assert_eq!(eligible(&mut state, "(ib|eth)&a100"), [0]);
    assert!(eligible(&mut state, "ib&eth").is_empty());
    assert!(!could_ever_fit(&state, &state.jobs[&job], &partition));
}

#[test]
fn after_with_delay_waits_minutes_after_the_start() {
    let mut state = cluster("");
    let target = submit(&mut state, "alice", "t=60");
    assert_eq!(pass(&mut state, NOW), [target]);
    let dependent = submit(&mut state, "alice", "");
    Arc::make_mut(&mut state.jobs.get_mut(&dependent).unwrap().spec).dependency = Some(format!("after:{target}+2"));
    let job = &state.jobs[&dependent];
    assert_eq!(
        dependency::eligibility(&state, &mut dependency::Lookup::new(&state), job, NOW + 119),
        Err("Dependency")
    );
    assert_eq!(dependency::eligibility(&state, &mut dependency::Lookup::new(&state), job, NOW + 120), Ok(()));
    let (_, shown) = dependency::evaluate(&state, &mut dependency::Lookup::new(&state), job, NOW + 60);
    assert_eq!(shown, Some(format!("after:{target}+2(unfulfilled)")));
}

#[test]
fn aftercorr_holds_per_task() {
    let mut state = cluster("");
    // Array A (id 1): task 0 completed, task 1 failed, task 2 still pending in its base record.
    let a = submit(&mut state, "alice", "");
    let done = submit(&mut state, "alice", "");
    let failed = submit(&mut state, "alice", "");
    for (id, task, job_state) in [(done, 0, JobState::Completed), (failed, 1, JobState::Failed)] {
        let info = &mut state.jobs.get_mut(&id).unwrap().info;
        (info.array_job_id, info.array_task_id, info.state) = (Some(a), Some(task), Some(job_state));
    }
    let info = &mut state.jobs.get_mut(&a).unwrap().info;
    (info.array_job_id, info.array_tasks_pending) = (Some(a), vec![2]);
    // Array B: tasks 0-3 pending, each waiting for its counterpart in A.
    let b = submit(&mut state, "alice", "");
    let job = state.jobs.get_mut(&b).unwrap();
    (job.info.array_job_id, job.info.array_tasks_pending) = (Some(b), vec![0, 1, 2, 3]);
    Arc::make_mut(&mut job.spec).dependency = Some(format!("aftercorr:{a}"));
    // Records made array tasks after their insert count once filed again (ctld sets a
    // record's array id before inserting it).
    state.jobs.refile(NOW);
    let ready = |state: &State| dependency::ready_task(state, b, NOW);
    assert_eq!(ready(&state), Some(0));
    assert_eq!(
        dependency::evaluate(&state, &mut dependency::Lookup::new(&state), &state.jobs[&b], NOW),
        (dependency::Status::Satisfied, None)
    );
    // Without task 0, task 3 (A has none) is next; task 1 failed and task 2 waits.
    state.jobs.get_mut(&b).unwrap().info.array_tasks_pending = vec![1, 2, 3];
    assert_eq!(ready(&state), Some(3));
    state.jobs.get_mut(&b).unwrap().info.array_tasks_pending = vec![1, 2];
    assert_eq!(ready(&state), None);
    let (status, shown) = dependency::evaluate(&state, &mut dependency::Lookup::new(&state), &state.jobs[&b], NOW);
    assert_eq!((status, shown), (dependency::Status::Waiting, Some(format!("aftercorr:{a}_*(unfulfilled)"))));
    state.jobs.get_mut(&b).unwrap().info.array_tasks_pending = vec![1];
    let (status, shown) = dependency::evaluate(&state, &mut dependency::Lookup::new(&state), &state.jobs[&b], NOW);
    assert_eq!((status, shown), (dependency::Status::Never, Some(format!("aftercorr:{a}_*(failed)"))));
}

/// A shape that found no room is skipped for the rest of the pass, but a smaller job behind it
/// still starts, and a same-shaped job gets the reason it would have got anyway.
#[test]
fn a_failed_shape_skips_only_its_own_shape() {
    let mut state = cluster("");
    let small = submit(&mut state, "alice", "c=1 t=60");
    assert_eq!(pass(&mut state, NOW), vec![small]);
    let big = submit(&mut state, "alice", "c=4 N=2 t=60");
    let big_again = submit(&mut state, "alice", "c=4 N=2 t=60");
    let smaller = submit(&mut state, "alice", "c=2 t=30");
    let started = pass(&mut state, NOW);
    assert_eq!(started, vec![smaller]);
    assert_eq!(state.last_pass.shape_skips, 1, "the second two-node job is not placed again");
    assert_eq!(reason(&state, big), "Resources");
    assert_eq!(reason(&state, big_again), "Priority");
}

/// A shape key includes the node list: a job limited to a full node fails, and the same request
/// without the limit (or excluding the full node) is still tried and starts.
#[test]
fn a_different_node_list_is_still_tried() {
    let mut state = cluster("");
    let first = submit(&mut state, "alice", "c=4 t=60 w=n1");
    let only_n1 = submit(&mut state, "alice", "c=2 t=60 w=n1");
    let anywhere = submit(&mut state, "alice", "c=2 t=60");
    let not_n2 = submit(&mut state, "alice", "c=2 t=60 e=n2");
    let not_n1 = submit(&mut state, "alice", "c=2 t=60 e=n1");
    let started = pass(&mut state, NOW);
    assert_eq!(started, vec![first, anywhere, not_n1]);
    assert_eq!(state.jobs[&anywhere].info.nodes, vec!["n2".to_owned()]);
    assert_eq!(reason(&state, only_n1), "Resources");
    assert_eq!(reason(&state, not_n2), "Priority");
}

/// What a pass decided, for comparing two runs: the started jobs' allocations, every job's
/// reason and the reservations, each in job order.
#[allow(clippy::type_complexity)]
fn decided(
    state: &State,
    started: &[JobId],
) -> (Vec<(JobId, Option<Allocation>)>, Vec<(JobId, String)>, Vec<(JobId, UnixTime, Allocation)>) {
    let mut allocations: Vec<_> = started.iter().map(|j| (*j, state.jobs[j].alloc.clone())).collect();
    allocations.sort_by_key(|(j, _)| *j);
    let reasons: Vec<_> = state.jobs.values().map(|j| (j.info.job_id, j.info.reason.clone())).collect();
    let mut planned: Vec<_> = state.reservations.values().map(|r| (r.job_id, r.start, r.alloc.clone())).collect();
    planned.sort_by_key(|p| p.0);
    (allocations, reasons, planned)
}

/// Makes the job share its resident spec with the jobs submitted alike, as ctld keeps them.
fn intern(state: &mut State, job_id: JobId) {
    let alike = (*state.jobs[&job_id].spec).clone();
    let spec = state.specs.intern(alike);
    state.jobs.get_mut(&job_id).unwrap().spec = spec;
}

/// Many passes over a random workload (sizes, GPU types, exclusive jobs, node lists, time
/// limits; jobs ending between passes) decide exactly the same with the pass's shortcuts (shape
/// cache, free-node index, gated backfill planning) as without them: starts, allocations,
/// pending reasons and backfill reservations.
#[test]
fn shortcuts_decide_the_same_as_a_full_scan() {
    let nodes = "[[nodes]]\nnames = \"m[1-6]\"\ncpus = 8\nreal_memory = 16000\ngpus = { a100 = 4 }\n\
        [[nodes]]\nnames = \"c[1-2]\"\ncpus = 8\nreal_memory = 16000\n\
        [[partitions]]\nname = \"mixed\"\nnodes = \"n[1-2],m[1-3],c[1-2],m[4-6]\"\nmax_time = \"1-00:00:00\"\n";
    let run = |shortcuts: bool| {
        let mut state = cluster(nodes);
        state.pass_shortcuts = shortcuts;
        // A loaded machine must not cut either run's planning short.
        state.planning_time = std::time::Duration::MAX;
        let mut seed = 11_u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let mut log = Vec::new();
        let mut now = NOW;
        for round in 0..40 {
            for _ in 0..6 {
                let mut args = format!("c={} t={}", 1 + next(4), 10 * (1 + next(12)));
                match next(8) {
                    0 => args.push_str(" g=1"),
                    1 => args.push_str(" g=a100:2"),
                    5 => args.push_str(" g=a100:1"),
                    2 => args.push_str(" g=h100:1"),
                    3 => args.push_str(" N=2"),
                    4 => args.push_str(" x"),
                    _ => {}
                }
                match next(6) {
                    0 => args.push_str(" w=n1"),
                    1 => args.push_str(" e=m[1-3]"),
                    _ => {}
                }
                let user = if next(2) == 0 { "alice" } else { "bob" };
                let job_id = submit(&mut state, user, &args);
                if next(3) > 0 {
                    state.jobs.get_mut(&job_id).unwrap().candidates =
                        Arc::from(["mixed".to_owned(), "main".to_owned()]);
                }
            }
            let started = pass(&mut state, now);
            let (allocations, reasons, planned) = decided(&state, &started);
            log.push((round, allocations, reasons, planned));
            now += 600;
            let running: Vec<JobId> =
                state.jobs.values().filter(|j| j.info.state() == JobState::Running).map(|j| j.info.job_id).collect();
            for job_id in running {
                if next(3) == 0 {
                    end(&mut state, job_id);
                }
            }
        }
        (log, state.last_pass.shape_skips)
    };
    let (fast, _) = run(true);
    let (full, skips) = run(false);
    assert_eq!(skips, 0);
    assert!(fast.iter().map(|r| r.1.len()).sum::<usize>() > 50, "the workload starts jobs");
    for (a, b) in fast.iter().zip(&full) {
        assert_eq!(a, b, "round {} differs", a.0);
    }
}

/// Jobs submitted alike (one interned spec, as ctld keeps them) in a full cluster with teams'
/// quotas, reclaims and a small backfill budget: the pass that gives a job of a class the reason
/// of the one before it when nothing changed in between (`Repeats`) decides exactly what taking
/// every turn decides: starts, allocations, preemptions, reasons and reservations, over many
/// passes with jobs ending and victims requeued between them.
#[test]
fn jobs_submitted_alike_decide_the_same_as_a_full_scan() {
    let shapes =
        ["g=1 t=60", "g=2 t=120 q=gpu", "g=8 t=600", "g=1 t=30 w=g1", "c=4 t=60", "g=4 N=2 t=90", "g=1 t=20 q=gpu"];
    let run = |shortcuts: bool| {
        // Limits that a start earlier in the pass makes bite: a user's GPUs in QOS gpu, nlp's burst.
        let quotas = quota("vision", 8)
            + &quota("nlp", 8).replace("gres/gpu=8\n", "gres/gpu=8\"\nburst = \"gres/gpu=10\n")
            + &quota("audio", 12)
            + "[[qos]]\nname = \"gpu\"\nmax_tres_per_user = \"gres/gpu=5\"\n[priority]\nbackfill_max_job_test = 3\n";
        let mut state = teams(&quotas);
        state.pass_shortcuts = shortcuts;
        state.planning_time = std::time::Duration::MAX;
        let mut seed = 7_u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let (mut log, mut skips) = (Vec::new(), 0);
        let mut now = NOW;
        for round in 0..30 {
            for _ in 0..(4 + next(30)) {
                let user = ["alice", "bob", "carol"][next(3) as usize];
                let job_id = submit(&mut state, user, shapes[next(shapes.len() as u64) as usize]);
                intern(&mut state, job_id);
            }
            let started = pass(&mut state, now);
            skips += state.last_pass.class_skips;
            let (allocations, reasons, planned) = decided(&state, &started);
            let mut preempted = victims();
            preempted.sort_unstable();
            now += 300;
            for victim in &preempted {
                requeued(&mut state, *victim, now);
            }
            log.push((round, allocations, reasons, planned, preempted));
            let running: Vec<JobId> =
                state.jobs.values().filter(|j| j.info.state() == JobState::Running).map(|j| j.info.job_id).collect();
            for job_id in running {
                if next(4) == 0 {
                    end(&mut state, job_id);
                }
            }
        }
        (log, skips)
    };
    let (fast, skips) = run(true);
    let (full, none) = run(false);
    assert_eq!(none, 0);
    assert!(skips > 100, "jobs alike are given their class's reason ({skips} were)");
    assert!(fast.iter().map(|r| r.1.len()).sum::<usize>() > 50, "the workload starts jobs");
    assert!(fast.iter().map(|r| r.4.len()).sum::<usize>() > 0, "the workload reclaims");
    for (a, b) in fast.iter().zip(&full) {
        assert_eq!(a, b, "round {} differs", a.0);
    }
}

/// The ranking works a class's factors out once and each job's age on its own: every job of a
/// class submitted at different times and with different nice values gets the priority its own
/// factors give, in either of its partitions.
#[test]
fn jobs_submitted_alike_get_their_own_priority() {
    let extra = "[[partitions]]\nname = \"high\"\nnodes = \"n[1-2]\"\npriority_job_factor = 10\n\
        [priority]\nweight_age = 5000\nweight_fairshare = 10000\nweight_job_size = 1000\nweight_partition = 3000\nmax_age = \"0-01:00:00\"\n";
    let mut state = cluster(extra);
    let mut jobs = Vec::new();
    for i in 0..40_i64 {
        let user = if i % 3 == 0 { "bob" } else { "alice" };
        let job_id = submit(&mut state, user, if i % 2 == 0 { "c=4 N=2 t=60" } else { "g=2 t=60" });
        let job = state.jobs.get_mut(&job_id).unwrap();
        job.info.submit_time = NOW - 90 * i;
        job.info.eligible_time = Some(NOW - 90 * i);
        job.info.nice = i32::try_from(i % 4).unwrap() * 700;
        if i % 5 == 0 {
            job.candidates = Arc::from(["high".to_owned(), "main".to_owned()]);
        }
        intern(&mut state, job_id);
        jobs.push(job_id);
    }
    pass(&mut state, NOW);
    let context = priority::Context::new(&state);
    let mut seen = std::collections::HashSet::new();
    for job_id in jobs {
        let job = &state.jobs[&job_id];
        let own = job
            .candidates
            .iter()
            .filter_map(|name| state.config().partitions.iter().find(|p| &p.name == name))
            .map(|p| priority::priority(&context.config, &context.factors(&state, job, p, NOW), job.info.nice))
            .max()
            .unwrap();
        assert_eq!(job.info.priority, own, "job {job_id}");
        seen.insert(own);
    }
    assert!(seen.len() > 20, "ages and nice values set the jobs apart ({} priorities)", seen.len());
}

/// A requeued job keeps, in `info.time_limit`, the default time of the partition it ran in,
/// while its resident spec (no time limit) stays shared with fresh jobs: its shorter limit lets
/// it backfill where they cannot, so it is of another class (found by a review of `Repeats`).
#[test]
fn a_requeued_jobs_own_time_limit_sets_it_apart_from_its_class() {
    let extra = "[[partitions]]\nname = \"short\"\nnodes = \"n1\"\nmax_time = \"1-00:00:00\"\ndefault_time = \"0:30:00\"\n\
        [priority]\nbackfill_max_job_test = 1\n";
    let run = |shortcuts: bool| {
        let mut state = cluster(extra);
        state.pass_shortcuts = shortcuts;
        state.planning_time = std::time::Duration::MAX;
        // x fills n1 for an hour.
        let x = submit(&mut state, "alice", "c=4 t=60");
        assert_eq!(pass(&mut state, NOW), vec![x]);
        assert_eq!(state.jobs[&x].info.nodes, vec!["n1".to_owned()]);
        // r ran once in `short` (it took that partition's DefaultTime, 30 min) and was requeued.
        let r = submit(&mut state, "alice", "c=1");
        let alloc = Allocation {
            nodes: vec![NodeAllocation { node: "n1".into(), cpus: 1, mem_mb: 100, gpus: vec![], tasks: 1 }],
        };
        state.hold(&alloc);
        assert!(state.start_job(r, "short", alloc, NOW - 2000));
        state.pend_job(r, NOW - 1000);
        state.next_run(r, NOW - 1);
        // b (both nodes, whole) plans a reservation at NOW+3600 and spends the backfill budget.
        let b = submit(&mut state, "alice", "N=2 c=4");
        let f0 = submit(&mut state, "alice", "c=1");
        let f1 = submit(&mut state, "alice", "c=1");
        for j in [f0, f1, r] {
            let job = state.jobs.get_mut(&j).unwrap();
            job.candidates = Arc::from(["main".to_owned(), "short".to_owned()]);
            intern(&mut state, j);
        }
        assert!(Arc::ptr_eq(&state.jobs[&f0].spec, &state.jobs[&r].spec));
        assert_eq!(state.jobs[&r].info.time_limit, Some(TimeLimit::Minutes(30)));
        assert_eq!(state.jobs[&f0].info.time_limit, None);
        let started = pass(&mut state, NOW + 10);
        let reasons: Vec<_> = [b, f0, f1, r].iter().map(|j| (*j, reason(&state, *j).to_owned())).collect();
        (started, reasons, state.last_pass.class_skips)
    };
    let fast = run(true);
    let full = run(false);
    assert_eq!(fast, (full.0.clone(), full.1.clone(), fast.2), "starts or reasons differ: {full:?}");
}

/// `scontrol update ArrayTaskThrottle` sets the throttle on the base record only, so a task
/// split off before keeps the old value in its record while sharing the base's spec: the
/// throttle is part of the class, and the array's (the base record's) throttle holds the split
/// task back too.
#[test]
fn an_array_records_own_throttle_sets_it_apart_from_its_class() {
    let run = |shortcuts: bool| {
        let mut state = cluster("");
        state.pass_shortcuts = shortcuts;
        state.planning_time = std::time::Duration::MAX;
        let base = submit(&mut state, "alice", "c=1 t=10");
        {
            let mut job = state.jobs.remove(&base).unwrap();
            Arc::make_mut(&mut job.spec).array = Some("0-3%2".into());
            crate::policy::array::init(&mut job);
            state.jobs.insert(base, job);
        }
        // Task 0 runs.
        let (t0, _) = crate::policy::array::claim(&mut state, base, None).unwrap();
        let alloc = Allocation {
            nodes: vec![NodeAllocation { node: "n1".into(), cpus: 1, mem_mb: 100, gpus: vec![], tasks: 1 }],
        };
        state.hold(&alloc);
        assert!(state.start_job(t0, "main", alloc, NOW - 100));
        // Task 1 split off (as `scontrol hold 1_1` then `scontrol release 1_1` do), pending.
        let (t1, split) = crate::policy::array::claim(&mut state, base, Some(1)).unwrap();
        assert!(split);
        // `scontrol update JobId=1 ArrayTaskThrottle=1`: the base record only.
        state.jobs.get_mut(&base).unwrap().info.array_max_tasks = 1;
        assert!(Arc::ptr_eq(&state.jobs[&base].spec, &state.jobs[&t1].spec));
        let started = pass(&mut state, NOW);
        let reasons: Vec<_> = [base, t1].iter().map(|j| (*j, reason(&state, *j).to_owned())).collect();
        (started, reasons, state.last_pass.class_skips)
    };
    let fast = run(true);
    let full = run(false);
    assert_eq!(fast, (full.0.clone(), full.1.clone(), fast.2), "starts or reasons differ: {full:?}");
    let (_, reasons, _) = fast;
    assert!(reasons.iter().all(|(_, reason)| reason == "JobArrayTaskLimit"), "{reasons:?}");
}

/// 300 jobs naming 1,000 distinct held jobs each (the most a dependency may name): showing
/// where each stands and a pass over them take time in proportion to the 300,000 items, not
/// items × jobs (which took minutes).
#[test]
fn a_pass_over_long_dependency_lists_is_quick() {
    let mut state = cluster("");
    let targets: Vec<JobId> = (0..1000).map(|_| submit(&mut state, "alice", "")).collect();
    for target in &targets {
        Arc::make_mut(&mut state.jobs.get_mut(target).unwrap().spec).hold = true;
        state.jobs.get_mut(target).unwrap().info.priority = 0;
    }
    let list: Vec<String> = targets.iter().map(JobId::to_string).collect();
    let dependency = format!("afterok:{}", list.join(":"));
    let dependents: Vec<JobId> = (0..300)
        .map(|_| {
            let job = submit(&mut state, "alice", "");
            Arc::make_mut(&mut state.jobs.get_mut(&job).unwrap().spec).dependency = Some(dependency.clone());
            job
        })
        .collect();
    let independent = submit(&mut state, "bob", "");
    let first = std::time::Instant::now();
    dependency::refresh(&mut state, NOW);
    let first = first.elapsed();
    // Later passes: nothing changed, so no text is rebuilt.
    let started = std::time::Instant::now();
    dependency::refresh(&mut state, NOW);
    let refreshed = started.elapsed();
    assert_eq!(pass(&mut state, NOW), [independent]);
    let took = started.elapsed();
    eprintln!(
        "300 × 1000 dependencies: first refresh {first:?}; then refresh {refreshed:?}, refresh and pass {took:?}"
    );
    assert_eq!(state.jobs[&dependents[0]].info.reason, "Dependency");
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
}

/// Four nodes of 8 GPUs in `main`; vision (alice), nlp (bob) and audio (carol) with `quotas`.
fn teams(quotas: &str) -> State {
    let text = BASE
        .replace(
            "names = \"n[1-2]\"\ncpus = 4\nreal_memory = 8000\ngpus = { h100 = 2 }",
            "names = \"g[1-4]\"\ncpus = 32\nreal_memory = 64000\ngpus = { h100 = 8 }",
        )
        .replace("nodes = \"n[1-2]\"", "nodes = \"g[1-4]\"");
    let text = format!(
        "{text}[[accounts]]\nname = \"audio\"\n[[users]]\nname = \"carol\"\ndefault_account = \"audio\"\n{quotas}"
    );
    cluster_of(&text)
}

fn quota(account: &str, guarantee: u32) -> String {
    format!("[[quotas]]\naccount = \"{account}\"\npartition = \"main\"\nguarantee = \"gres/gpu={guarantee}\"\n")
}

/// The preemptions the last passes decided (taken, so the next call sees only new ones).
fn victims() -> Vec<JobId> {
    PREEMPTED.with_borrow_mut(std::mem::take)
}

/// A preempted job's run ended: it frees its resources and pends again (requeued).
fn requeued(state: &mut State, job_id: JobId, now: UnixTime) {
    state.release_job(job_id, now);
    let job = state.jobs.get_mut(&job_id).unwrap();
    job.info.state = Some(JobState::Pending);
    job.info.nodes.clear();
    job.info.start_time = None;
    job.info.restarts += 1;
}

fn gpus_of(state: &State, job_id: JobId) -> usize {
    state.jobs[&job_id].alloc.as_ref().map_or(0, |a| a.nodes.iter().map(|n| n.gpus.len()).sum())
}

/// The cluster is full of vision's and nlp's 8-GPU jobs, half of them borrowed; audio releases
/// eight 1-GPU jobs at once. One 8-GPU job is preempted, not eight, and once it is gone all
/// eight start on the node it freed.
#[test]
fn eight_small_reclaims_at_once_preempt_one_big_job() {
    let mut state = teams(&(quota("vision", 8) + &quota("nlp", 8) + &quota("audio", 16)));
    let mut fill: Vec<JobId> = (0..2).map(|_| submit(&mut state, "alice", "g=8 t=600")).collect();
    fill.extend((0..2).map(|_| submit(&mut state, "bob", "g=8 t=600")));
    assert_eq!(pass(&mut state, NOW), fill);
    let small: Vec<JobId> = (0..8).map(|_| submit(&mut state, "carol", "g=1 t=60")).collect();
    assert!(pass(&mut state, NOW + 10).is_empty());
    let preempted = victims();
    assert_eq!(preempted.len(), 1, "{preempted:?}");
    assert_eq!(gpus_of(&state, preempted[0]), 8);
    assert!([fill[1], fill[3]].contains(&preempted[0]), "only a borrowed job: {preempted:?}");
    // While the victim dies, nothing more is preempted.
    assert!(pass(&mut state, NOW + 11).is_empty());
    assert!(victims().is_empty());
    let node = state.jobs[&preempted[0]].info.nodes.clone();
    requeued(&mut state, preempted[0], NOW + 15);
    let mut started = pass(&mut state, NOW + 15);
    started.sort_unstable();
    assert_eq!(started, small);
    assert!(small.iter().all(|j| state.jobs[j].info.nodes == node));
    assert!(victims().is_empty());
}

/// The same eight jobs submitted one after another, a pass each: the first preempts one 8-GPU
/// job, the next seven find room in what that victim frees (while it dies and after).
#[test]
fn small_reclaims_one_after_another_share_one_victim() {
    let mut state = teams(&(quota("vision", 8) + &quota("nlp", 8) + &quota("audio", 16)));
    let fill: Vec<JobId> =
        (0..4).map(|i| submit(&mut state, if i < 2 { "alice" } else { "bob" }, "g=8 t=600")).collect();
    assert_eq!(pass(&mut state, NOW), fill);
    let mut all = Vec::new();
    let mut small = Vec::new();
    for k in 0..8 {
        small.push(submit(&mut state, "carol", "g=1 t=60"));
        let now = NOW + 10 + k;
        if k == 4 {
            // The victim is gone halfway through.
            requeued(&mut state, all[0], now);
        }
        pass(&mut state, now);
        all.extend(victims());
    }
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(small.iter().all(|j| state.jobs[j].info.state() == JobState::Running));
}

/// vision holds 24 GPUs against a guarantee of 20: its third 8-GPU job is partly borrowed, but
/// preempting it would leave vision 16. audio (guarantee 16) releases five 8-GPU jobs: nlp's
/// job (no quota) is preempted for the first, and nothing for the second, though it is owed.
#[test]
fn reclaim_never_pushes_a_team_below_its_guarantee() {
    let mut state = teams(&(quota("vision", 20) + &quota("audio", 16)));
    let alices: Vec<JobId> = (0..3).map(|_| submit(&mut state, "alice", "g=8 t=600")).collect();
    let bobs = submit(&mut state, "bob", "g=8 t=600");
    pass(&mut state, NOW - 1000);
    let big: Vec<JobId> = (0..5).map(|_| submit(&mut state, "carol", "g=8 t=60")).collect();
    pass(&mut state, NOW);
    assert_eq!(victims(), vec![bobs]);
    for now in [NOW + 1, NOW + 2] {
        pass(&mut state, now);
        assert!(victims().is_empty(), "vision's jobs {alices:?} stay");
    }
    requeued(&mut state, bobs, NOW + 5);
    assert_eq!(pass(&mut state, NOW + 5), vec![big[0]]);
    assert!(victims().is_empty());
    assert!(alices.iter().all(|j| state.jobs[j].info.state() == JobState::Running));
}

/// A victim in its grace time counts as freed for its team: audio (owed 16) gets one victim per
/// 8-GPU job while the first victim still dies, and none for a third job.
#[test]
fn a_victim_in_its_grace_time_counts_as_freed() {
    let mut state = teams(&quota("audio", 16));
    let bobs: Vec<JobId> = (0..4).map(|_| submit(&mut state, "bob", "g=8 t=600")).collect();
    assert_eq!(pass(&mut state, NOW), bobs);
    submit(&mut state, "carol", "g=8 t=60");
    pass(&mut state, NOW + 10);
    assert_eq!(victims().len(), 1);
    submit(&mut state, "carol", "g=8 t=60");
    pass(&mut state, NOW + 11);
    assert_eq!(victims().len(), 1, "owed 16, 8 being freed: 8 more");
    submit(&mut state, "carol", "g=8 t=60");
    pass(&mut state, NOW + 12);
    assert!(victims().is_empty(), "16 being freed: nothing more is owed");
}

/// A run younger than `preempt_exempt_time` is not preempted, and a requeued victim that
/// started again is safe for that long too; the most recently started of the older ones goes.
#[test]
fn exempt_time_protects_young_runs() {
    let mut state = teams(&quota("audio", 16));
    state.config_mut().preempt_exempt_time = 300;
    let old = submit(&mut state, "bob", "g=8 t=600");
    pass(&mut state, NOW - 1000);
    let older = submit(&mut state, "bob", "g=8 t=600");
    pass(&mut state, NOW - 2000);
    let young: Vec<JobId> = (0..2).map(|_| submit(&mut state, "bob", "g=8 t=600")).collect();
    pass(&mut state, NOW);
    let first = submit(&mut state, "carol", "g=8 t=60");
    pass(&mut state, NOW + 10);
    assert_eq!(victims(), vec![old], "the most recently started of those past the exempt time");
    requeued(&mut state, old, NOW + 20);
    assert_eq!(pass(&mut state, NOW + 20), vec![first]);
    // nlp's requeued job runs again only when something ends; then it is young again.
    state.release_job(first, NOW + 30);
    state.jobs.get_mut(&first).unwrap().info.state = Some(JobState::Completed);
    assert_eq!(pass(&mut state, NOW + 30), vec![old]);
    submit(&mut state, "carol", "g=8 t=60");
    pass(&mut state, NOW + 40);
    assert_eq!(victims(), vec![older], "{young:?} and {old} are younger than 300 s");
    pass(&mut state, NOW + 41);
    assert!(victims().is_empty());
}

/// Of the borrowed jobs on the nodes, the set that frees enough with the fewest GPUs wins (a
/// 1-GPU job rather than an 8-GPU one), then the one that ran least.
#[test]
fn the_victim_set_wastes_least() {
    let mut state = teams(&quota("audio", 16));
    let big: Vec<JobId> = (0..3).map(|_| submit(&mut state, "bob", "g=8 t=600")).collect();
    assert_eq!(pass(&mut state, NOW - 3000), big);
    let mut small = Vec::new();
    for start in (0..8).map(|k| NOW - 2000 + 100 * k) {
        let job_id = submit(&mut state, "bob", "g=1 t=600");
        small.push(job_id);
        assert_eq!(pass(&mut state, start), vec![job_id]);
    }
    submit(&mut state, "carol", "g=1 t=60");
    pass(&mut state, NOW);
    assert_eq!(victims(), vec![small[7]], "the 1-GPU job started last");
    submit(&mut state, "carol", "g=2 t=60");
    pass(&mut state, NOW + 1);
    assert_eq!(victims(), vec![small[5], small[6]], "two 1-GPU jobs, the latest left");
}

/// What is freed for a reclaiming job is kept for it: when its victim is gone, a job of another
/// team that may reclaim too, with a higher priority and the same shape, does not take it (it
/// preempted its own victim), and the first job starts where its victim ran.
#[test]
fn freed_gpus_go_to_the_reclaimer() {
    let mut state = teams(&(quota("vision", 8) + &quota("audio", 8)));
    let bobs: Vec<JobId> = (0..4).map(|_| submit(&mut state, "bob", "g=8 t=600")).collect();
    assert_eq!(pass(&mut state, NOW - 1000), bobs);
    let carols = submit(&mut state, "carol", "g=8 t=60");
    pass(&mut state, NOW);
    let first = victims();
    assert_eq!(first.len(), 1);
    let node = state.jobs[&first[0]].info.nodes.clone();
    let alices = submit(&mut state, "alice", "g=8 t=60");
    state.jobs.get_mut(&alices).unwrap().info.nice = -100_000;
    pass(&mut state, NOW + 1);
    let second = victims();
    assert_eq!(second.len(), 1);
    assert_ne!(second, first);
    requeued(&mut state, first[0], NOW + 5);
    let started = pass(&mut state, NOW + 5);
    assert_eq!(started, vec![carols]);
    assert_eq!(state.jobs[&carols].info.nodes, node);
    assert_eq!(reason(&state, alices), "Resources");
    assert!(victims().is_empty());
}

fn nodes_of(state: &State, job_id: JobId) -> Vec<String> {
    state.jobs[&job_id].alloc.as_ref().map_or_else(Vec::new, |a| a.nodes.iter().map(|n| n.node.clone()).collect())
}

/// Best fit keeps whole nodes whole: with a 4-GPU job on the second of two 8-GPU nodes, a new
/// 4-GPU job goes next to it (first fit took the empty first node), so an 8-GPU job still
/// starts in the same pass on the node left whole.
#[test]
fn best_fit_packs_gpu_jobs_and_keeps_whole_nodes_whole() {
    let text = BASE
        .replace(
            "names = \"n[1-2]\"\ncpus = 4\nreal_memory = 8000\ngpus = { h100 = 2 }",
            "names = \"g[1-2]\"\ncpus = 32\nreal_memory = 64000\ngpus = { h100 = 8 }",
        )
        .replace("nodes = \"n[1-2]\"", "nodes = \"g[1-2]\"");
    let mut state = cluster_of(&text);
    let first = submit(&mut state, "alice", "g=4 c=4 w=g2");
    assert_eq!(pass(&mut state, NOW), vec![first]);
    let small = submit(&mut state, "alice", "g=4 c=4");
    assert_eq!(pass(&mut state, NOW + 1), vec![small]);
    assert_eq!(nodes_of(&state, small), ["g2"], "the 4-GPU job packs onto the node already in use");
    let whole = submit(&mut state, "bob", "g=8 c=8");
    assert_eq!(pass(&mut state, NOW + 2), vec![whole], "the 8-GPU job starts on the node left whole");
    assert_eq!(nodes_of(&state, whole), ["g1"]);
}

/// The fullest node that fits wins, by free GPUs first (then free CPUs); a job too big for the
/// fullest nodes goes to the next fullest, not the emptiest; a job without GPUs goes to the
/// node with the fewest CPUs free. The same order holds where the pass has no index (`-x`).
#[test]
fn best_fit_takes_the_fullest_node_that_fits() {
    for exclude in ["", " e=g9"] {
        let mut state = teams("");
        // Free GPUs after these: g1 8, g2 6, g3 3, g4 8 (free CPUs: 32, 30, 27, 32).
        let a = submit(&mut state, "alice", "g=2 c=2 w=g2");
        let b = submit(&mut state, "alice", "g=5 c=5 w=g3");
        let mut started = pass(&mut state, NOW);
        started.sort_unstable();
        assert_eq!(started, vec![a, b]);
        // One job a pass, so the order of the placements is the order of the submissions.
        let mut one = |args: &str, now: UnixTime| {
            let job_id = submit(&mut state, "bob", &format!("{args}{exclude}"));
            assert_eq!(pass(&mut state, now), vec![job_id]);
            nodes_of(&state, job_id)
        };
        assert_eq!(one("g=2 c=1", NOW + 1), ["g3"], "{exclude}: 3 free, the fewest that fit");
        assert_eq!(one("g=4 c=1", NOW + 2), ["g2"], "{exclude}: 6 free, the fewest that fit");
        assert_eq!(one("g=7 c=1", NOW + 3), ["g1"], "{exclude}: an empty node, the first of two");
        // Free CPUs now: g1 31, g2 29, g3 26, g4 32.
        assert_eq!(one("c=4", NOW + 4), ["g3"], "{exclude}: the fewest CPUs free");
    }
}

/// The pass's per-pool free counts, kept as it takes and gives back room on nodes, equal a fresh
/// count over the pool's nodes after every change (what the lending check read before it had
/// the counts); a partition no quota names has none, nor does any pool when no quota has a
/// lending limit (nothing reads the counts then).
#[test]
fn pool_free_counts_follow_the_nodes() {
    let lending = format!("{}lend = \"gres/gpu=4\"\n", quota("vision", 8));
    let mut state = teams(&format!("{lending}{}", quota("nlp", 8)));
    let job = submit(&mut state, "alice", "g=3 c=5");
    assert_eq!(pass(&mut state, NOW), vec![job]);
    let mut views: Vec<NodeView> = state.nodes().iter().map(NodeView::from).collect();
    let mut counts = quota::PoolFree::new(&state, &views);
    let fresh = |views: &[NodeView]| quota::PoolFree::new(&state, views).of("main").cloned();
    assert_eq!(counts.of("main").cloned(), fresh(&views));
    let gpus = |c: &quota::PoolFree| c.of("main").and_then(|t| t.get("gres/gpu:h100").copied());
    assert_eq!(gpus(&counts), Some(29));
    let share = NodeAllocation { node: "g4".into(), cpus: 7, mem_mb: 1000, gpus: vec![0, 5], tasks: 1 };
    views[3].take(&share);
    counts.update(3, &views[3]);
    assert_eq!(counts.of("main").cloned(), fresh(&views));
    assert_eq!(gpus(&counts), Some(27));
    views[3].up = false;
    counts.update(3, &views[3]);
    assert_eq!(counts.of("main").cloned(), fresh(&views));
    views[3].up = true;
    views[3].release(&share);
    counts.update(3, &views[3]);
    assert_eq!(counts.of("main").cloned(), fresh(&views));
    assert_eq!(gpus(&counts), Some(29));
    assert_eq!(quota::PoolFree::new(&cluster(""), &views).of("main"), None);
    let no_lending = teams(&format!("{}{}", quota("vision", 8), quota("nlp", 8)));
    assert_eq!(quota::PoolFree::new(&no_lending, &views).of("main"), None);
}

/// The pass considers only the pending jobs that may start: held jobs and jobs waiting for their
/// begin time are filed apart by the job table (a deep held queue costs a pass nothing) and join
/// the pass when released or when their begin time comes; the waiting ones show `BeginTime`.
#[test]
fn held_and_future_jobs_stay_out_of_the_pass_until_they_may_start() {
    let mut state = cluster("");
    let held: Vec<JobId> = (0..3).map(|_| submit(&mut state, "alice", "g=1 t=60")).collect();
    for job_id in &held {
        let job = state.jobs.get_mut(job_id).unwrap();
        Arc::make_mut(&mut job.spec).hold = true;
        job.info.priority = 0;
    }
    let later = submit(&mut state, "alice", "g=1 t=60");
    Arc::make_mut(&mut state.jobs.get_mut(&later).unwrap().spec).begin_time = Some(NOW + 60);
    let ready = submit(&mut state, "bob", "g=1 t=60");
    assert_eq!(pass(&mut state, NOW), vec![ready]);
    assert_eq!(state.last_pass.considered, 1, "only the job that may start");
    assert_eq!(reason(&state, later), "BeginTime");
    assert_eq!(pass(&mut state, NOW + 30), Vec::<JobId>::new());
    assert_eq!(state.last_pass.considered, 0);
    assert_eq!(pass(&mut state, NOW + 60), vec![later], "its begin time came");
    let job = state.jobs.get_mut(&held[0]).unwrap();
    Arc::make_mut(&mut job.spec).hold = false;
    job.info.priority = 1;
    assert_eq!(pass(&mut state, NOW + 61), vec![held[0]], "released");
    assert_eq!(state.last_pass.considered, 1);
}

/// `n` nodes of 4 CPUs and 2 GPUs in partition `main`, all up.
fn small_nodes(n: usize, extra: &str) -> State {
    let nodes = BASE.replace("names = \"n[1-2]\"", &format!("names = \"n[1-{n}]\""));
    let nodes = nodes.replace("nodes = \"n[1-2]\"", &format!("nodes = \"n[1-{n}]\""));
    cluster_of(&format!("{nodes}{extra}"))
}

/// Orders jobs: the first of `jobs` highest.
fn rank(state: &mut State, jobs: &[JobId]) {
    for (k, job_id) in jobs.iter().enumerate() {
        state.jobs.get_mut(job_id).unwrap().info.nice = -1_000_000 + 1000 * i32::try_from(k).unwrap();
    }
}

fn planned(state: &State, job_id: JobId, now: UnixTime) -> String {
    let text = match explain::explain(state, job_id, now) {
        Response::Explanation { lines, .. } => lines.join("\n"),
        other => panic!("{other:?}"),
    };
    text.lines().find(|l| l.starts_with("estimated start")).unwrap_or_default().to_owned()
}

/// A reservation outlives its pass: when a higher-priority job takes the pass's only
/// reservation test, the wide job keeps the reservation it got earlier, and a later long job does
/// not start on its nodes. (Rebuilt every pass, the reservation was lost and the long job
/// started, delaying the wide job by its whole time limit.) Also reads the key's earlier name.
#[test]
fn a_reservation_persists_across_passes() {
    let mut state = cluster("[priority]\nbackfill_reservations = 1\n");
    let a = submit(&mut state, "alice", "c=4 w=n1 t=60");
    let b = submit(&mut state, "alice", "c=2 w=n2 t=120");
    assert_eq!(pass(&mut state, NOW), vec![a, b]);
    let wide = submit(&mut state, "bob", "N=2 c=4 t=60");
    rank(&mut state, &[wide]);
    assert!(pass(&mut state, NOW).is_empty());
    assert_eq!(planned(&state, wide, NOW), "estimated start: in 2h00m (unix time 1700007200) (backfill reservation)");
    // A higher-priority job now takes the pass's one test; a long job comes behind both.
    let high = submit(&mut state, "alice", "c=4 w=n1 t=60");
    let long = submit(&mut state, "alice", "c=1 t=600");
    rank(&mut state, &[high, wide, long]);
    assert!(pass(&mut state, NOW + 60).is_empty(), "the long job would delay the wide job");
    assert_eq!(reason(&state, long), "Priority");
    assert_eq!(
        planned(&state, wide, NOW + 60),
        "estimated start: in 1h59m (unix time 1700007200) (backfill reservation)"
    );
    assert_eq!(
        planned(&state, high, NOW + 60),
        "estimated start: in 0h59m (unix time 1700003600) (backfill reservation)"
    );
    // It stays held pass after pass, and a short job that ends in time still backfills.
    let short = submit(&mut state, "alice", "c=1 t=30");
    rank(&mut state, &[high, wide, long, short]);
    assert_eq!(pass(&mut state, NOW + 120), vec![short]);
    let text = explanation(&state, wide);
    assert!(text.contains("backfill reservation: node(s) n[1-2] in partition main (8 CPUs) from unix time 1700007200 to 1700010800, held since unix time 1700000000"), "{text}");
}

/// More than ten blocked jobs hold reservations at once (there used to be ten slots): the
/// eleventh, a two-node job, still gets one, so a later job does not take its nodes.
#[test]
fn more_than_ten_jobs_hold_reservations() {
    let mut state = small_nodes(12, "");
    let mut running = Vec::new();
    for i in 1..=12 {
        let cpus = if i == 11 { 2 } else { 4 };
        running.push(submit(&mut state, "alice", &format!("c={cpus} w=n{i} t=60")));
    }
    let mut started = pass(&mut state, NOW);
    started.sort_unstable();
    assert_eq!(started, running);
    let mut ahead: Vec<JobId> = (1..=10).map(|i| submit(&mut state, "alice", &format!("c=4 w=n{i} t=60"))).collect();
    let wide = submit(&mut state, "bob", "N=2 c=4 t=60");
    let later = submit(&mut state, "alice", "c=1 t=120");
    ahead.extend([wide, later]);
    rank(&mut state, &ahead);
    assert!(pass(&mut state, NOW + 60).is_empty(), "the later job would delay the wide job");
    assert_eq!(
        planned(&state, wide, NOW + 60),
        "estimated start: in 0h59m (unix time 1700003600) (backfill reservation)"
    );
    assert_eq!(state.reservations.len(), 12);
}

/// A wide job is not delayed by later small jobs when a higher-priority small job reserves part
/// of a node: that reservation holds the GPUs it needs, not the whole node for ever (which left
/// the wide job no reservation at all, and let a later 1-GPU job start on its nodes).
#[test]
fn a_wide_job_is_not_delayed_by_later_one_gpu_jobs() {
    let mut state = small_nodes(4, "");
    let running: Vec<JobId> = (1..=4).map(|i| submit(&mut state, "alice", &format!("g=1 c=1 w=n{i} t=60"))).collect();
    assert_eq!(pass(&mut state, NOW), running);
    let small_ahead = submit(&mut state, "alice", "g=2 c=1 w=n1 t=60");
    let wide = submit(&mut state, "bob", "N=4 g=2 c=1 t=60");
    let later: Vec<JobId> = (0..4).map(|_| submit(&mut state, "alice", "g=1 c=1 t=120")).collect();
    let mut order = vec![small_ahead, wide];
    order.extend(&later);
    rank(&mut state, &order);
    assert!(pass(&mut state, NOW + 60).is_empty(), "later 1-GPU jobs would delay the wide job");
    assert_eq!(
        planned(&state, wide, NOW + 60),
        "estimated start: in 1h59m (unix time 1700007200) (backfill reservation)"
    );
    // 1-GPU jobs that end before the wide job starts still backfill.
    let short = submit(&mut state, "alice", "g=1 c=1 t=30");
    rank(&mut state, &[small_ahead, wide, later[0], later[1], later[2], later[3], short]);
    assert_eq!(pass(&mut state, NOW + 120).len(), 1);
}

/// Reservations are planned best fit: a blocked 1-GPU job reserves the GPU of the node that
/// will have the fewest free, so a 2-GPU job behind it gets the node that frees whole, an hour
/// earlier than first fit gave it.
#[test]
fn reservations_are_planned_best_fit() {
    let mut state = cluster("");
    let whole = submit(&mut state, "alice", "g=2 c=2 w=n1 t=60");
    let hour = submit(&mut state, "alice", "g=1 c=1 w=n2 t=60");
    let two_hours = submit(&mut state, "alice", "g=1 c=1 w=n2 t=120");
    assert_eq!(pass(&mut state, NOW), vec![whole, hour, two_hours]);
    let one = submit(&mut state, "bob", "g=1 c=1 t=60");
    let two = submit(&mut state, "bob", "g=2 c=1 t=60");
    rank(&mut state, &[one, two]);
    assert!(pass(&mut state, NOW + 60).is_empty());
    let text = explanation(&state, one);
    assert!(text.contains("backfill reservation: node(s) n2 "), "{text}");
    assert_eq!(
        planned(&state, two, NOW + 60),
        "estimated start: in 0h59m (unix time 1700003600) (backfill reservation)"
    );
}

/// Jobs waiting on other jobs' states are set aside by the refresh: the pass no longer considers
/// them (its `considered` count is the schedulable work), they keep Slurm's reasons, and a
/// change to a job they name (its end, a failure) brings them back at the next refresh.
#[test]
fn dependency_blocked_jobs_stay_out_of_the_pass_until_their_job_changes() {
    let mut state = cluster("");
    let target = submit(&mut state, "alice", "c=1");
    assert_eq!(pass(&mut state, NOW), [target]);
    let depend = |state: &mut State, text: String| {
        let job = submit(state, "alice", "c=1");
        Arc::make_mut(&mut state.jobs.get_mut(&job).unwrap().spec).dependency = Some(text);
        job
    };
    let waiting: Vec<JobId> = (0..50).map(|_| depend(&mut state, format!("afterok:{target}"))).collect();
    let not_ok = depend(&mut state, format!("afternotok:{target}"));
    // A `+minutes` item waits on the clock: never set aside.
    let delayed = depend(&mut state, format!("after:{target}+5"));
    let free = submit(&mut state, "bob", "c=1");
    dependency::refresh(&mut state, NOW);
    assert_eq!(pass(&mut state, NOW), [free]);
    assert_eq!(state.last_pass.considered, 2, "only the delayed job is considered, besides the free one");
    assert_eq!(reason(&state, waiting[0]), "Dependency");
    assert_eq!(state.jobs[&waiting[0]].info.dependency.as_deref(), Some(&*format!("afterok:{target}(unfulfilled)")));
    // Unrelated changes (another job's reason, the target's own pass) wake nothing.
    dependency::refresh(&mut state, NOW);
    assert!(pass(&mut state, NOW).is_empty());
    assert_eq!(state.last_pass.considered, 1);
    // The target completes: every job waiting on it is back in the pass (those that fit start,
    // the others wait for resources); `afternotok` can never be satisfied.
    end(&mut state, target);
    state.jobs.get_mut(&target).unwrap().info.state = Some(JobState::Completed);
    dependency::refresh(&mut state, NOW);
    let started = pass(&mut state, NOW);
    assert_eq!(state.last_pass.considered, 51);
    assert_eq!(started.first(), Some(&waiting[0]));
    assert!(waiting.iter().all(|j| started.contains(j) || reason(&state, *j) != "Dependency"), "{started:?}");
    assert!(!started.contains(&not_ok) && !started.contains(&delayed));
    assert_eq!(reason(&state, not_ok), "DependencyNeverSatisfied");
    dependency::refresh(&mut state, NOW);
    pass(&mut state, NOW);
    assert_eq!(reason(&state, not_ok), "DependencyNeverSatisfied");
    assert_eq!(state.jobs[&not_ok].info.dependency.as_deref(), Some(&*format!("afternotok:{target}(failed)")));
    // A changed dependency is worked out anew.
    Arc::make_mut(&mut state.jobs.get_mut(&not_ok).unwrap().spec).dependency = Some(format!("afterany:{target}"));
    dependency::refresh(&mut state, NOW);
    pass(&mut state, NOW);
    assert!(!reason(&state, not_ok).starts_with("Dependency"), "{}", reason(&state, not_ok));
}

/// A QOS's own `preempt_exempt_time` wins over the controller's: its runs are safe for that long
/// (longer or shorter), the others keep the controller's.
#[test]
fn a_qos_exempt_time_wins_over_the_controllers() {
    let mut state = teams(&quota("audio", 16));
    let config = state.config_mut();
    config.preempt_exempt_time = 300;
    let mut long = config.qos[0].clone();
    (long.name, long.preempt_exempt_time) = ("long".into(), Some(3000));
    let mut short = config.qos[0].clone();
    (short.name, short.preempt_exempt_time) = ("short".into(), Some(10));
    config.qos.extend([long, short]);
    let qos = |state: &mut State, job: JobId, name: &str| state.jobs.get_mut(&job).unwrap().info.qos = name.into();
    let protected = submit(&mut state, "bob", "g=8 t=600");
    qos(&mut state, protected, "long");
    pass(&mut state, NOW - 1000);
    let young = submit(&mut state, "bob", "g=8 t=600");
    qos(&mut state, young, "short");
    pass(&mut state, NOW - 100);
    // The other two nodes: runs younger than the controller's 300 s.
    (0..2).for_each(|_| {
        submit(&mut state, "bob", "g=8 t=600");
    });
    pass(&mut state, NOW);
    submit(&mut state, "carol", "g=8 t=60");
    pass(&mut state, NOW + 10);
    // Under the controller's 300 s the older run would go; its QOS protects it for 3000 s, and
    // the younger one's QOS lets it go after 10 s.
    assert_eq!(victims(), vec![young]);
}

/// A multi-node job's nodes are chosen best fit (the fuller node first) but held in node-table
/// order, so its node list reads `n[1-2]` as Slurm prints it and the batch host is the first.
#[test]
fn multi_node_allocations_are_in_node_table_order() {
    let mut state = cluster("");
    let pinned = submit(&mut state, "alice", "c=1 w=n2");
    assert_eq!(pass(&mut state, NOW), [pinned]);
    let wide = submit(&mut state, "alice", "c=1 N=2");
    assert_eq!(pass(&mut state, NOW), [wide]);
    assert_eq!(state.jobs[&wide].info.nodes, ["n1", "n2"]);
}

mod wide;

/// Issue 31: with two of four nodes DOWN and the other two allocated, `--test-only` predicts the
/// start when the running job's limit frees its nodes (not a day ahead, as it once did), and a job
/// that needs a DOWN node has no start.
#[test]
fn test_only_with_down_nodes_waits_for_the_running_job_only() {
    let mut state = cluster_of(&BASE.replace("n[1-2]", "n[1-4]"));
    // One set DOWN by an admin, one whose noded stopped answering.
    state.nodes_mut()[2].down_reason = Some("dead".into());
    state.nodes_mut()[3].responding = false;
    state.nodes_mut()[3].connection = None;
    let running = submit(&mut state, "alice", "x N=2 t=60");
    assert_eq!(pass(&mut state, NOW), [running]);
    for (args, want) in [("N=2 t=10", Some((NOW + 3600, 2))), ("c=1", Some((NOW + 3600, 1))), ("N=3", None)] {
        let probe = submit(&mut state, "bob", args);
        let got = match will_run::estimate(&state, &state.jobs[&probe], 99, NOW + 60) {
            Response::WillRun { start, nodes, .. } => {
                assert!(nodes.iter().all(|n| n == "n1" || n == "n2"), "{nodes:?}");
                Some((start, nodes.len()))
            }
            Response::Error { .. } => None,
            other => panic!("{other:?}"),
        };
        assert_eq!(got, want, "{args}");
        state.jobs.remove(&probe);
    }
}
