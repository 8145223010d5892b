//! `scancel`: cancel or signal jobs named by id and/or picked by filters (user, account,
//! partition, name, state), all ANDed by ctld. The filters ctld's request does not carry (QOS,
//! nodes, reservation) and `--interactive` are applied here: scancel lists the jobs, keeps those
//! that match every filter (and that the user confirms), and names them by id.
//!
//! Slurm 22.05's reporting rules, which clients depend on, are kept in the pure [`report`]:
//! cancelling an unknown or finished job is silent and succeeds (only `-v` shows the error);
//! signalling one is an error; any other refusal (another user's job) is an error.

use super::common;
use clap::{ArgAction, Parser};
use drover_shared::job::{JobId, JobInfo, JobState};
use drover_shared::proto::client::{CancelRequest, ErrorCode, JobQuery, Request, Response};
use std::ffi::OsString;
use std::str::FromStr;

#[derive(Debug, Parser)]
#[command(name = "scancel", about = "Cancel or signal Drover jobs", disable_help_flag = true, infer_long_args = true)]
struct Args {
    /// Job ids.
    #[arg(value_name = "job_id[_array_id][.step_id]")]
    job_ids: Vec<String>,
    /// Only jobs of these accounts.
    #[arg(short = 'A', long = "account")]
    accounts: Vec<String>,
    /// Signal only the batch shell.
    #[arg(short = 'b', long = "batch")]
    batch: bool,
    /// Signal the batch shell and all steps.
    #[arg(short = 'f', long = "full")]
    full: bool,
    /// Print this help.
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
    /// Accepted for compatibility (Drover has no burst buffers to skip).
    #[arg(short = 'H', long = "hurry")]
    hurry: bool,
    /// Ask before each job.
    #[arg(short = 'i', long = "interactive")]
    interactive: bool,
    /// Cluster (accepted; Drover serves one cluster).
    #[arg(short = 'M', long = "clusters")]
    clusters: Option<String>,
    /// Only the caller's jobs.
    #[arg(long = "me")]
    me: bool,
    /// Only jobs with these names.
    #[arg(short = 'n', long = "name", alias = "jobname")]
    names: Vec<String>,
    /// Only jobs in these partitions.
    #[arg(short = 'p', long = "partition")]
    partitions: Vec<String>,
    /// Only jobs with this QOS.
    #[arg(short = 'q', long = "qos")]
    qos: Vec<String>,
    /// Do not report jobs that already ended.
    #[arg(short = 'Q', long = "quiet")]
    quiet: bool,
    /// Only jobs in this reservation (Drover has none, so no job matches).
    #[arg(short = 'R', long = "reservation")]
    reservation: Option<String>,
    /// Send this signal (name or number) instead of cancelling: to the job's steps only, unless -b or -f.
    #[arg(short = 's', long = "signal")]
    signal: Option<String>,
    /// Only jobs in these states (PENDING, RUNNING, SUSPENDED).
    #[arg(short = 't', long = "state")]
    states: Vec<String>,
    /// Only jobs of these users (names or uids).
    #[arg(short = 'u', long = "user")]
    users: Vec<String>,
    /// Report each job acted on.
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Only jobs on these nodes.
    #[arg(short = 'w', long = "nodelist")]
    nodelist: Vec<String>,
    /// Only jobs with this WCKey (not supported yet).
    #[arg(long = "wckey")]
    wckey: Option<String>,
}

/// Parses a signal given by number (`10`) or name, with or without `SIG` (`USR1`, `sigusr1`).
pub(crate) fn parse_signal(text: &str) -> anyhow::Result<i32> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return match trimmed.parse::<i32>() {
            Ok(number) if (1..=64).contains(&number) => Ok(number),
            _ => anyhow::bail!("Invalid job signal: {text}"),
        };
    }
    let upper = trimmed.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    nix::sys::signal::Signal::from_str(&name)
        .map(|signal| signal as i32)
        .map_err(|_| anyhow::anyhow!("Invalid job signal: {text}"))
}

/// Parses a job id argument: a job or array (`12`), array tasks (`12_3`, `12_[1-3]`).
fn parse_job_id(text: &str) -> anyhow::Result<common::JobTarget> {
    match common::parse_job_target(text) {
        Some(target) => Ok(target),
        None if text.contains(['.', '+']) => {
            anyhow::bail!("job steps and heterogeneous job components are not supported yet: {text}")
        }
        None => anyhow::bail!("Invalid job ID {text}"),
    }
}

/// A step id argument, `12.0`: the job and the step number.
fn parse_step_id(text: &str) -> Option<(JobId, u32)> {
    let (job, step) = text.split_once('.')?;
    Some((job.parse().ok()?, step.parse().ok()?))
}

/// How outcomes are reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReportOptions {
    pub(crate) verbose: bool,
    pub(crate) quiet: bool,
    pub(crate) signal: Option<i32>,
}

/// What scancel writes to stderr for ctld's per-job outcomes, and its exit code.
pub(crate) fn report<I: std::fmt::Display>(
    results: &[(I, Result<(), ErrorCode>)],
    options: ReportOptions,
) -> (String, i32) {
    let mut stderr = String::new();
    let mut code = 0;
    for (job_id, result) in results {
        if options.verbose {
            match options.signal {
                Some(signal) => stderr.push_str(&format!("scancel: Signal {signal} to job {job_id}\n")),
                None => stderr.push_str(&format!("scancel: Terminating job {job_id}\n")),
            }
        }
        let Err(error) = result else { continue };
        let gone = matches!(error, ErrorCode::InvalidJobId | ErrorCode::AlreadyDone);
        let (show, fails) = match (gone, options.signal) {
            // Cancelling what no longer runs succeeds quietly (Slurm 22.05).
            (true, None) => (options.verbose, false),
            (true, Some(_)) => (!options.quiet, true),
            (false, _) => (true, true),
        };
        if show {
            stderr.push_str(&format!("scancel: error: Kill job error on job id {job_id}: {}\n", error.message()));
        }
        if fails {
            code = 1;
        }
    }
    (stderr, code)
}

/// The filters scancel applies itself, on top of the request's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LocalFilters {
    pub(crate) qos: Vec<String>,
    pub(crate) nodes: Vec<String>,
    pub(crate) reservation: Option<String>,
}

/// The jobs of `jobs` that `request` and `local` both select: every filter must hold, and with
/// ids, the job (or its array) must be named.
pub(crate) fn select_locally<'a>(
    jobs: &'a [JobInfo],
    request: &CancelRequest,
    local: &LocalFilters,
) -> Vec<&'a JobInfo> {
    jobs.iter()
        .filter(|j| !j.state().is_terminal())
        .filter(|j| {
            request.job_ids.is_empty()
                || request.job_ids.contains(&j.job_id)
                || j.array_job_id.is_some_and(|a| request.job_ids.contains(&a))
        })
        .filter(|j| request.users.is_empty() || request.users.contains(&j.uid))
        .filter(|j| request.accounts.is_empty() || request.accounts.contains(&j.account))
        .filter(|j| {
            request.partitions.is_empty() || j.partition.split(',').any(|p| request.partitions.iter().any(|q| q == p))
        })
        .filter(|j| request.names.is_empty() || request.names.contains(&j.name))
        .filter(|j| request.states.is_empty() || request.states.contains(&j.state()))
        .filter(|j| local.qos.is_empty() || local.qos.contains(&j.qos))
        .filter(|j| local.nodes.is_empty() || j.nodes.iter().any(|n| local.nodes.contains(n)))
        // No job has a reservation in Drover.
        .filter(|_| local.reservation.is_none())
        .collect()
}

/// `--interactive`: Slurm's question for one job.
pub(crate) fn question(job: &JobInfo, signal: Option<i32>) -> String {
    let verb = if signal.is_some() { "Signal" } else { "Cancel" };
    format!("{verb} job_id={} name={} partition={} [y/n]? ", job.display_id(), job.name, job.partition)
}

/// Lists the jobs, keeps those every filter selects (and the user confirms), and returns their ids.
fn resolve_locally(request: &CancelRequest, local: &LocalFilters, interactive: bool) -> anyhow::Result<Vec<JobId>> {
    let mut jobs = Vec::new();
    let query = |job_ids| Request::QueryJobs(JobQuery { job_ids, ..JobQuery::default() });
    for (_, answer) in crate::client::call_chunked(&request.job_ids, query)? {
        match answer {
            Response::Jobs { jobs: some, .. } => jobs.extend(some),
            Response::Error { code, detail } => anyhow::bail!("{}: {detail}", code.message()),
            other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        }
    }
    let mut ids = Vec::new();
    for job in select_locally(&jobs, request, local) {
        if interactive {
            use std::io::Write;
            print!("{}", question(job, request.signal));
            std::io::stdout().flush()?;
            let mut answer = String::new();
            std::io::stdin().read_line(&mut answer)?;
            if !answer.trim_start().starts_with(['y', 'Y']) {
                continue;
            }
        }
        ids.push(job.job_id);
    }
    Ok(ids)
}

/// A non-empty environment variable, as a one-item list.
fn env_list(values: Vec<String>, var: &str) -> Vec<String> {
    if !values.is_empty() {
        return values;
    }
    std::env::var(var).ok().filter(|v| !v.is_empty()).into_iter().collect()
}

/// Runs `scancel`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("scancel", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    if args.wckey.is_some() {
        anyhow::bail!("--wckey is not supported yet");
    }
    let mut nodes = Vec::new();
    for expr in common::flat_list(&args.nodelist) {
        nodes.extend(drover_shared::hostlist::expand(&expr)?);
    }
    let local = LocalFilters {
        qos: common::flat_list(&env_list(args.qos.clone(), "SCANCEL_QOS")),
        nodes,
        reservation: args.reservation.clone(),
    };
    let words: Vec<String> = args.job_ids.iter().flat_map(|a| common::split_ids(a)).map(str::to_owned).collect();
    let (step_words, job_words): (Vec<String>, Vec<String>) =
        words.into_iter().partition(|w| parse_step_id(w).is_some());
    let steps: Vec<(JobId, u32)> = step_words.iter().filter_map(|w| parse_step_id(w)).collect();
    let targets = job_words.iter().map(|w| parse_job_id(w)).collect::<anyhow::Result<Vec<_>>>()?;
    let job_ids: Vec<JobId> = targets.iter().filter(|t| t.tasks.is_none()).map(|t| t.job_id).collect();
    let tasks: Vec<(JobId, u32)> =
        targets.iter().flat_map(|t| t.tasks.iter().flatten().map(move |task| (t.job_id, *task))).collect();
    let mut users = common::resolve_users(&env_list(args.users.clone(), "SCANCEL_USER"))?;
    if args.me {
        users.push(common::my_uid());
    }
    let mut states = Vec::new();
    for name in common::flat_list(&env_list(args.states.clone(), "SCANCEL_STATE")) {
        match JobState::parse(&name) {
            Some(state @ (JobState::Pending | JobState::Running | JobState::Suspended)) => states.push(state),
            _ => anyhow::bail!("Invalid job state specified: {name}"),
        }
    }
    let signal = args.signal.as_deref().map(parse_signal).transpose()?;
    let request = CancelRequest {
        job_ids,
        users,
        accounts: common::flat_list(&env_list(args.accounts.clone(), "SCANCEL_ACCOUNT")),
        partitions: common::flat_list(&env_list(args.partitions.clone(), "SCANCEL_PARTITION")),
        names: common::flat_list(&env_list(args.names.clone(), "SCANCEL_NAME")),
        states,
        signal,
        batch_only: args.batch || std::env::var_os("SCANCEL_BATCH").is_some(),
        full: args.full || std::env::var_os("SCANCEL_FULL").is_some(),
    };
    let mut has_filter = !request.users.is_empty()
        || !request.accounts.is_empty()
        || !request.partitions.is_empty()
        || !request.names.is_empty()
        || !request.states.is_empty();
    let local_filter = local != LocalFilters::default();
    if request.job_ids.is_empty() && tasks.is_empty() && steps.is_empty() && !has_filter && !local_filter {
        anyhow::bail!("No job identification provided");
    }
    let mut request = request;
    if (local_filter || args.interactive) && (!request.job_ids.is_empty() || has_filter || local_filter) {
        // The jobs are now named by id; the filters have been applied.
        let ids = resolve_locally(&request, &local, args.interactive)?;
        if ids.is_empty() && tasks.is_empty() && steps.is_empty() {
            return Ok(0);
        }
        request = CancelRequest {
            job_ids: ids,
            signal: request.signal,
            batch_only: request.batch_only,
            full: request.full,
            ..CancelRequest::default()
        };
        has_filter = false;
    }
    let mut results: Vec<(String, Result<(), ErrorCode>)> = Vec::new();
    for &(job_id, step_id) in &steps {
        let result = match crate::client::call(&Request::CancelStep { job_id, step_id, signal })? {
            Response::StepOk => Ok(()),
            Response::Error { code, .. } => Err(code),
            other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        };
        results.push((format!("{job_id}.{step_id}"), result));
    }
    if request.job_ids.is_empty() && tasks.is_empty() && !has_filter {
        let options = ReportOptions { verbose: args.verbose > 0, quiet: args.quiet, signal };
        let (stderr, code) = report(&results, options);
        eprint!("{stderr}");
        return Ok(code);
    }
    if !tasks.is_empty() {
        // The tasks' request carries the filters and signal; the plain ids go in their own requests.
        let make =
            |tasks| Request::CancelTasks { request: CancelRequest { job_ids: Vec::new(), ..request.clone() }, tasks };
        for (chunk, answer) in crate::client::call_chunked(&tasks, make)? {
            match answer {
                Response::Cancelled { results: answers } => {
                    results.extend(
                        chunk.iter().zip(answers).map(|((job, task), (_, result))| (format!("{job}_{task}"), result)),
                    );
                }
                Response::Error { code, detail } => {
                    let detail = if detail.is_empty() { String::new() } else { format!(": {detail}") };
                    anyhow::bail!("{}{detail}", code.message())
                }
                other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
            }
        }
        if request.job_ids.is_empty() {
            let options = ReportOptions { verbose: args.verbose > 0, quiet: args.quiet, signal };
            let (stderr, code) = report(&results, options);
            eprint!("{stderr}");
            return Ok(code);
        }
    }
    let mut answers = cancel_jobs(&request)?;
    // A job not running yet cannot be signalled: as Slurm's scancel, try again after 5, 6, …
    // seconds (the job is likely starting); ten tries at most.
    for attempt in 0..MAX_SIGNAL_RETRIES {
        let waiting: Vec<JobId> =
            answers.iter().filter(|(_, r)| *r == Err(ErrorCode::TransitionState)).map(|(id, _)| *id).collect();
        if waiting.is_empty() || request.signal.is_none() {
            break;
        }
        if args.verbose > 0 {
            eprintln!("scancel: Job is in transitional state, retrying");
        }
        std::thread::sleep(std::time::Duration::from_secs(5 + attempt));
        let again = cancel_jobs(&CancelRequest { job_ids: waiting, ..request.clone() })?;
        for (id, result) in again {
            if let Some(slot) = answers.iter_mut().find(|(known, _)| *known == id) {
                slot.1 = result;
            }
        }
    }
    results.extend(answers.into_iter().map(|(id, result)| (id.to_string(), result)));
    let options = ReportOptions { verbose: args.verbose > 0, quiet: args.quiet, signal };
    let (stderr, code) = report(&results, options);
    eprint!("{stderr}");
    Ok(code)
}

/// How often scancel signals a job again that was not running yet (Drover's bound).
const MAX_SIGNAL_RETRIES: u64 = 10;

/// Sends `request` for its job ids (and filters), in chunks; one result per job.
fn cancel_jobs(request: &CancelRequest) -> anyhow::Result<Vec<(JobId, Result<(), ErrorCode>)>> {
    let mut results = Vec::new();
    let make = |job_ids| Request::Cancel(CancelRequest { job_ids, ..request.clone() });
    for (chunk, answer) in crate::client::call_chunked(&request.job_ids, make)? {
        let answer: Vec<(JobId, Result<(), ErrorCode>)> = match answer {
            Response::Cancelled { results } => results,
            // A whole-request "no such job" answer for named ids is reported per id, like Slurm does.
            Response::Error { code: ErrorCode::InvalidJobId, .. } if !chunk.is_empty() => {
                chunk.iter().map(|id| (*id, Err(ErrorCode::InvalidJobId))).collect()
            }
            Response::Error { code, detail } => {
                let detail = if detail.is_empty() { String::new() } else { format!(": {detail}") };
                anyhow::bail!("{}{detail}", code.message())
            }
            other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
        };
        results.extend(answer);
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    #[test]
    fn signals() {
        let parse = |text: &str| parse_signal(text).map_err(|e| e.to_string());
        assert_eq!(parse("USR1"), Ok(10));
        assert_eq!(parse("SIGUSR2"), Ok(12));
        assert_eq!(parse("sigterm"), Ok(15));
        assert_eq!(parse("KILL"), Ok(9));
        assert_eq!(parse("10"), Ok(10));
        assert_eq!(parse("0"), Err("Invalid job signal: 0".into()));
        assert_eq!(parse("BOGUS"), Err("Invalid job signal: BOGUS".into()));
    }

    #[test]
    fn local_filters() {
        let job = |job_id, qos: &str, nodes: &[&str], state| JobInfo {
            job_id,
            name: "j".into(),
            partition: "main".into(),
            qos: qos.into(),
            nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            state: Some(state),
            ..JobInfo::default()
        };
        let jobs = [
            job(1, "normal", &["n1"], JobState::Running),
            job(2, "high", &["n2"], JobState::Running),
            job(3, "normal", &[], JobState::Pending),
            job(4, "normal", &["n1"], JobState::Completed),
        ];
        let pick = |request: &CancelRequest, local: &LocalFilters| {
            select_locally(&jobs, request, local).iter().map(|j| j.job_id).collect::<Vec<_>>()
        };
        let any = CancelRequest::default();
        let nodes = LocalFilters { nodes: vec!["n1".into()], ..LocalFilters::default() };
        assert_eq!(pick(&any, &nodes), [1]);
        assert_eq!(pick(&any, &LocalFilters { qos: vec!["normal".into()], ..LocalFilters::default() }), [1, 3]);
        let named = CancelRequest { job_ids: vec![2, 3], ..CancelRequest::default() };
        assert_eq!(pick(&named, &LocalFilters { qos: vec!["normal".into()], ..LocalFilters::default() }), [3]);
        let pending = CancelRequest { states: vec![JobState::Pending], ..CancelRequest::default() };
        assert_eq!(pick(&pending, &LocalFilters::default()), [3]);
        assert!(pick(&any, &LocalFilters { reservation: Some("r".into()), ..LocalFilters::default() }).is_empty());
        assert_eq!(question(&jobs[0], None), "Cancel job_id=1 name=j partition=main [y/n]? ");
    }

    #[test]
    fn job_ids() {
        let target = |job_id, tasks: Option<Vec<u32>>| common::JobTarget { job_id, tasks };
        assert_eq!(parse_job_id("25").ok(), Some(target(25, None)));
        assert_eq!(parse_job_id("12x").map_err(|e| e.to_string()), Err("Invalid job ID 12x".into()));
        assert_eq!(parse_job_id("29_1").ok(), Some(target(29, Some(vec![1]))));
        assert_eq!(parse_job_id("29_[1-3,7]").ok(), Some(target(29, Some(vec![1, 2, 3, 7]))));
        assert!(parse_job_id("29.1").is_err());
        assert_eq!(common::split_ids("29_[1,3],30"), vec!["29_[1,3]", "30"]);
    }

    fn check(results: &[(JobId, Result<(), ErrorCode>)], options: ReportOptions, expect: expect_test::Expect) {
        let (stderr, code) = report(results, options);
        expect.assert_eq(&format!("{stderr}--- exit: {code} ---\n"));
    }

    #[test]
    fn reports_match_slurm() {
        let unknown = [(999_999, Err(ErrorCode::InvalidJobId))];
        // err_scancel_bad_id.txt and err_scancel_bad_id_v.txt.
        check(
            &unknown,
            ReportOptions::default(),
            expect![[r#"
            --- exit: 0 ---
        "#]],
        );
        check(
            &unknown,
            ReportOptions { verbose: true, ..ReportOptions::default() },
            expect![[r#"
            scancel: Terminating job 999999
            scancel: error: Kill job error on job id 999999: Invalid job id specified
            --- exit: 0 ---
        "#]],
        );
        check(
            &unknown,
            ReportOptions { signal: Some(12), ..ReportOptions::default() },
            expect![[r#"
            scancel: error: Kill job error on job id 999999: Invalid job id specified
            --- exit: 1 ---
        "#]],
        );
        check(
            &unknown,
            ReportOptions { signal: Some(12), quiet: true, ..ReportOptions::default() },
            expect![[r#"
            --- exit: 1 ---
        "#]],
        );
        let mixed = [(25, Ok(())), (28, Err(ErrorCode::AccessDenied)), (20, Err(ErrorCode::AlreadyDone))];
        check(
            &mixed,
            ReportOptions { quiet: true, ..ReportOptions::default() },
            expect![[r#"
            scancel: error: Kill job error on job id 28: Access/permission denied
            --- exit: 1 ---
        "#]],
        );
        check(
            &mixed[..1],
            ReportOptions { verbose: true, signal: Some(10), ..ReportOptions::default() },
            expect![[r#"
            scancel: Signal 10 to job 25
            --- exit: 0 ---
        "#]],
        );
    }

    #[test]
    fn options_after_ids_and_prefixes() {
        let args: Vec<OsString> = ["12", "--sig", "USR2", "-vQ", "13,14"].iter().map(OsString::from).collect();
        let parsed = common::parse_args::<Args>("scancel", args).map_err(|code| code.to_string());
        let parsed = parsed.map(|a| (a.job_ids, a.signal, a.verbose, a.quiet));
        assert_eq!(parsed, Ok((vec!["12".to_owned(), "13,14".to_owned()], Some("USR2".to_owned()), 1, true)));
    }
}
