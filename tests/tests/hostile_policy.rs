//! Attacks by an ordinary user through requests ctld accepts on their face: a step of four
//! billion tasks in a one-CPU job, a step or job whose launch would not fit a node frame, a few
//! hundred jobs with a thousand dependencies each, dependency cycles and oversized fields through
//! `scontrol update`, and a negative nice at submit. Each is refused (with Slurm's message where
//! Slurm has one) or bounded, changes nothing it should not, and leaves other users' commands
//! answered within a second.

use drover_e2e::{Cluster, require_users, text};
use drover_shared::job::{JobSpec, StepSpec};
use drover_shared::proto::client::{Request, Response};
use drover_shared::proto::frame::{MAX_ANSWER_FRAME, MAX_FRAME, encode, read_message};
use drover_shared::proto::{Hello, HelloReply, MAGIC, PROTOCOL_VERSION, Role};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(90);

/// The task count of the attack: four billion tasks in a job that has one CPU.
const TASKS: &str = "4000000000";

/// Runs `command args…` as `user` in the user's workdir.
fn run_as(cluster: &Cluster, user: &str, command: &str, args: &[&str]) -> Output {
    cluster.run(Some(user), &cluster.workdir(Some(user)), command, args, None)
}

/// `bob`'s `squeue`, timed; it must succeed.
fn timed_squeue(cluster: &Cluster) -> Duration {
    let started = Instant::now();
    let out = run_as(cluster, "bob", "squeue", &["-h"]);
    let took = started.elapsed();
    assert!(out.status.success(), "bob's squeue failed: {}", text(&out.stderr));
    took
}

/// ctld's resident memory in kB (`VmRSS` of /proc/<pid>/status).
fn ctld_rss_kb(cluster: &Cluster) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", cluster.pid("ctld"))).expect("ctld's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in ctld's status")
}

/// A job's state per `squeue` (empty once it left the queue).
fn queue_state(cluster: &Cluster, job_id: u32) -> String {
    cluster.ok("squeue", &["-h", "-j", &job_id.to_string(), "-o", "%T"]).trim().to_owned()
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_step_of_four_billion_tasks_is_refused_before_any_layout() {
    require_users();
    let cluster = Cluster::start();
    // The same numbers as a job: refused at submit, before anything per node or task is built.
    for shape in [["-N", TASKS], ["-n", TASKS], ["--ntasks-per-node", TASKS]] {
        let refused = sbatch(&cluster, "alice", &[shape[0], shape[1], "--wrap", "true"]).unwrap_err();
        let message = "sbatch: error: Batch job submission failed: Requested node configuration is not available";
        assert!(refused.contains(message), "{shape:?}: {refused}");
    }
    assert!(ctld_rss_kb(&cluster) < 500 * 1024, "ctld grew to {} kB", ctld_rss_kb(&cluster));
    let script = format!(
        "#!/bin/sh\n#SBATCH -n1\n#SBATCH -o out-%j.txt\nS=$DROVER_HOME/bin/srun\n\
         $S -n {TASKS} true; echo rc=$?\n\
         $S -n 2 true; echo rc2=$?\n\
         $S --overlap -n 5000000 true; echo rc3=$?\n\
         $S -O -n {TASKS} true; echo rc4=$?\n\
         $S -O -n 513 true; echo rc5=$?\n\
         $S -O -n 2 echo overcommitted; echo rc6=$?\n"
    );
    let job_id = cluster.submit(Some("alice"), "huge-step.sh", &script, &[]);
    // While the job's steps are asked for: ctld's memory and bob's squeue.
    let started = Instant::now();
    let (mut max_rss, mut max_squeue, mut samples) = (0, Duration::ZERO, 0);
    while !matches!(queue_state(&cluster, job_id).as_str(), "" | "COMPLETED" | "FAILED" | "COMPLETING") {
        assert!(started.elapsed() < LONG, "job {job_id} did not end within {LONG:?}\n{}", cluster.logs());
        max_rss = max_rss.max(ctld_rss_kb(&cluster));
        max_squeue = max_squeue.max(timed_squeue(&cluster));
        samples += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    max_rss = max_rss.max(ctld_rss_kb(&cluster));
    eprintln!(
        "huge step: job ended after {:?}; ctld VmRSS at most {max_rss} kB, bob's squeue at most {max_squeue:?} ({samples} samples)",
        started.elapsed()
    );
    assert!(max_rss < 500 * 1024, "ctld grew to {max_rss} kB");
    assert!(max_squeue < Duration::from_secs(1), "bob's squeue took {max_squeue:?}");
    cluster.wait_state(job_id, "COMPLETED", LONG);
    let out = std::fs::read_to_string(cluster.workdir(Some("alice")).join(format!("out-{job_id}.txt")))
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    let too_many =
        format!("srun: error: Unable to create step for job {job_id}: More processors requested than permitted");
    let bad_count = format!("srun: error: Unable to create step for job {job_id}: Task count specification invalid");
    let lines: Vec<&str> = out.lines().collect();
    let refusals: Vec<bool> =
        lines.iter().filter(|l| l.starts_with("srun: error:")).map(|l| l.starts_with(&too_many)).collect();
    // -n 4e9, -n 2 and --overlap -n 5e6 need more CPUs than the job has; -O -n 4e9 and -O -n 513
    // exceed MaxTasksPerNode (512).
    assert_eq!(refusals, [true, true, true, false, false], "{out}");
    assert_eq!(lines.iter().filter(|l| l.starts_with(&bad_count)).count(), 2, "{out}");
    for rc in ["rc=1", "rc2=1", "rc3=1", "rc4=1", "rc5=1", "rc6=0"] {
        assert!(lines.contains(&rc), "missing {rc} in:\n{out}");
    }
    // Overcommitted: two tasks on the job's one CPU.
    assert_eq!(lines.iter().filter(|l| **l == "overcommitted").count(), 2, "{out}");
    // Refused steps leave no step rows; the overcommitted one is step 0.
    let rows = cluster.ok("sacct", &["-j", &job_id.to_string(), "-P", "-n", "-o", "JobID,NTasks"]);
    let steps: Vec<&str> =
        rows.lines().filter(|r| r.starts_with(&format!("{job_id}.")) && !r.contains(".batch")).collect();
    assert_eq!(steps, [format!("{job_id}.0|2")], "{rows}");
}

/// Sends `frames` (a hello, then one request) on ctld's socket as `user` with python3 and
/// returns ctld's answers, in order: the request's is `None` when ctld closed the connection
/// instead (a request longer than a client's frame bound).
fn raw_exchange(cluster: &Cluster, user: &str, hello: &[u8], request: &[u8]) -> (HelloReply, Option<Response>) {
    let dir = cluster.workdir(Some(user));
    let (hello_path, request_path) = (dir.join("hello.bin"), dir.join("request.bin"));
    std::fs::write(&hello_path, hello).unwrap();
    std::fs::write(&request_path, request).unwrap();
    const SENDER: &str = "import socket, struct, sys\n\
        s = socket.socket(socket.AF_UNIX)\n\
        s.settimeout(60)\n\
        s.connect(sys.argv[1])\n\
        def frame():\n\
        \x20   head = b''\n\
        \x20   while len(head) < 4:\n\
        \x20       chunk = s.recv(4 - len(head))\n\
        \x20       if not chunk: sys.exit('closed')\n\
        \x20       head += chunk\n\
        \x20   body = b''\n\
        \x20   n = struct.unpack('>I', head)[0]\n\
        \x20   while len(body) < n:\n\
        \x20       chunk = s.recv(n - len(body))\n\
        \x20       if not chunk: sys.exit('closed')\n\
        \x20       body += chunk\n\
        \x20   sys.stdout.buffer.write(head + body)\n\
        s.sendall(open(sys.argv[2], 'rb').read())\n\
        frame()\n\
        try:\n\
        \x20   s.sendall(open(sys.argv[3], 'rb').read())\n\
        except (BrokenPipeError, ConnectionResetError):\n\
        \x20   sys.exit('closed')\n\
        frame()\n";
    let out = Command::new("setpriv")
        .args([&format!("--reuid={user}"), &format!("--regid={user}"), "--init-groups", "--"])
        .args(["/usr/bin/python3", "-c", SENDER])
        .arg(cluster.socket())
        .arg(&hello_path)
        .arg(&request_path)
        .current_dir(&dir)
        .output()
        .expect("running python3");
    let stderr = text(&out.stderr);
    assert!(out.status.success() || stderr.trim() == "closed", "the raw client failed: {stderr}\n{}", cluster.logs());
    let mut answers = std::io::Cursor::new(out.stdout);
    let reply: HelloReply = read_message(&mut answers, MAX_ANSWER_FRAME).expect("hello reply");
    let response: Option<Response> =
        out.status.success().then(|| read_message(&mut answers, MAX_ANSWER_FRAME).expect("response"));
    (reply, response)
}

/// Grows the one environment value of the request `build` makes until its frame is just under
/// the client frame bound, so ctld reads it but the launch it makes from it is larger.
fn just_under_the_bound(build: impl Fn(String) -> Request) -> Vec<u8> {
    let target = MAX_FRAME - 8;
    let base = encode(&build(String::new())).unwrap().len() - 4;
    // The value's length prefix grows from one byte (empty) to four.
    let value = "x".repeat(target - base - 3);
    let frame = encode(&build(value)).unwrap();
    assert_eq!(frame.len() - 4, target, "the request frame is just under the bound");
    frame
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_launch_larger_than_a_node_frame_is_refused_at_ctld() {
    require_users();
    let cluster = Cluster::start();
    let job_id = cluster.submit(Some("alice"), "holder.sh", "#!/bin/sh\n#SBATCH -n1 -w n1\nsleep 300\n", &[]);
    cluster.squeue_until(&job_id.to_string(), "%T", |s| s.trim() == "RUNNING");
    let closed = |cluster: &Cluster| cluster.logs().matches("node connection closed").count();
    let closed_before = closed(&cluster);
    let hello =
        encode(&Hello { magic: MAGIC, protocol_version: PROTOCOL_VERSION, role: Role::Client, nonce: vec![] }).unwrap();
    let workdir = cluster.workdir(Some("alice")).to_string_lossy().into_owned();

    // A step whose launch (its environment plus the job's launch request) exceeds the node frame.
    let step = just_under_the_bound(|value| Request::CreateStep {
        job_id,
        spec: Box::new(StepSpec {
            ntasks: Some(1),
            srun_address: "127.0.0.1:9".into(),
            argv: vec!["true".into()],
            environment: vec![("BIG".into(), value)],
            work_dir: workdir.clone(),
            ..StepSpec::default()
        }),
    });
    // ctld reads a client's request only up to its bound (11 MiB, below the node frame), so it
    // closes the connection on the frame's length; the launch-size checks at step creation and at
    // submit stay as a second line (unit tests in ctld).
    let (reply, response) = raw_exchange(&cluster, "alice", &hello, &step);
    assert!(matches!(reply, HelloReply::Accept { .. }), "{reply:?}");
    assert!(response.is_none(), "the oversized step was answered: {response:?}");

    // A job whose launch would exceed it: refused at submit, nothing queued.
    let submit = just_under_the_bound(|value| {
        Request::Submit(Box::new(JobSpec {
            name: "huge-launch".into(),
            work_dir: workdir.clone(),
            script: b"#!/bin/sh\ntrue\n".to_vec(),
            environment: vec![("BIG".into(), value)],
            ..JobSpec::default()
        }))
    });
    let (_, response) = raw_exchange(&cluster, "alice", &hello, &submit);
    assert!(response.is_none(), "the oversized job was answered: {response:?}");
    assert_eq!(cluster.ok("squeue", &["-h", "-n", "huge-launch"]).trim(), "", "no job was queued");

    // Neither reached a node: no node connection dropped, the job runs on, steps still work.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(closed(&cluster), closed_before, "a node connection closed:\n{}", cluster.logs());
    assert_eq!(queue_state(&cluster, job_id), "RUNNING");
    let out = run_as(&cluster, "alice", "srun", &["--jobid", &job_id.to_string(), "-n1", "echo", "still-fine"]);
    assert_eq!(text(&out.stdout).trim(), "still-fine", "{}\n{}", text(&out.stderr), cluster.logs());
}

/// `afterok:` naming `count` items, cycling over `targets`.
fn afterok(targets: &[u32], count: usize) -> String {
    let ids: Vec<String> = targets.iter().cycle().take(count).map(u32::to_string).collect();
    format!("afterok:{}", ids.join(":"))
}

/// sbatch as `user` with `args` and a one-line script; the job id, or the error output.
fn sbatch(cluster: &Cluster, user: &str, args: &[&str]) -> Result<u32, String> {
    let mut all = vec!["--parsable"];
    all.extend_from_slice(args);
    let out = run_as(cluster, user, "sbatch", &all);
    if out.status.success() {
        Ok(text(&out.stdout).trim().parse().expect("sbatch --parsable prints the id"))
    } else {
        Err(text(&out.stderr))
    }
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn long_dependency_lists_do_not_stall_the_controller() {
    require_users();
    let cluster = Cluster::start();
    // How long a job of bob's takes to start on the quiet cluster, for comparison.
    let bob_starts = |name: &str| {
        let submitted = Instant::now();
        let job = sbatch(&cluster, "bob", &["-J", name, "--wrap", "sleep 30"]).expect("bob's job");
        let answered = submitted.elapsed();
        cluster.wait_for("bob's job to start", LONG, || (queue_state(&cluster, job) == "RUNNING").then_some(()));
        let took = submitted.elapsed();
        eprintln!("bob's job {job}: sbatch answered in {answered:?}, running after {took:?}");
        took
    };
    let quiet = bob_starts("quiet");
    // 1,000 held jobs for the dependencies to name, each once: nothing to share between items.
    let held: Vec<u32> = std::thread::scope(|scope| {
        let submitters: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    (0..250)
                        .map(|_| sbatch(&cluster, "alice", &["-H", "--wrap", "true"]).expect("held target"))
                        .collect::<Vec<u32>>()
                })
            })
            .collect();
        submitters.into_iter().flat_map(|s| s.join().expect("submitter")).collect()
    });
    let list = afterok(&held, 1000);
    // One item over the bound is refused with Slurm's message, and queues nothing.
    let over = sbatch(&cluster, "alice", &["-d", &afterok(&held, 1001), "--wrap", "true"]).unwrap_err();
    assert!(over.contains("sbatch: error: Batch job submission failed: Job dependency problem"), "{over}");
    // 300 jobs at the bound, from four submitters at once.
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..75 {
                    sbatch(&cluster, "alice", &["-d", &list, "--wrap", "true"]).expect("dependent job");
                }
            });
        }
    });
    eprintln!("300 jobs of 1000 dependencies submitted in {:?}", started.elapsed());
    let pending = cluster.ok("squeue", &["-h", "-u", "alice", "-t", "PENDING", "-o", "%i"]);
    assert_eq!(pending.lines().count(), 1300, "{pending}");
    let mut worst_start = Duration::ZERO;
    // Each of bob's commands meanwhile: squeue answers within a second, and a new independent
    // job starts within a few passes.
    let mut worst_squeue = Duration::ZERO;
    for round in 0..5 {
        worst_squeue = worst_squeue.max(timed_squeue(&cluster));
        worst_start = worst_start.max(bob_starts(&format!("bob{round}")));
        worst_squeue = worst_squeue.max(timed_squeue(&cluster));
    }
    eprintln!(
        "with 300 dependent jobs: bob's squeue at most {worst_squeue:?}, his job started within {worst_start:?} \
         ({quiet:?} on the quiet cluster)"
    );
    assert!(worst_squeue < Duration::from_secs(1), "bob's squeue took {worst_squeue:?}");
    assert!(worst_start < Duration::from_secs(5), "bob's job took {worst_start:?} to start");
    // The dependencies are still worked out: the dependents wait on the held jobs.
    let reasons = cluster.ok("squeue", &["-h", "-u", "alice", "-t", "PENDING", "-o", "%r"]);
    assert_eq!(reasons.lines().filter(|r| r.trim() == "Dependency").count(), 300, "{reasons}");
}

/// `scontrol show job`'s `Key=` value for `job_id`.
fn show_field(cluster: &Cluster, job_id: u32, key: &str) -> String {
    let out = cluster.ok("scontrol", &["show", "job", &job_id.to_string()]);
    let needle = format!("{key}=");
    let start = out.find(&needle).unwrap_or_else(|| panic!("no {key}= in:\n{out}")) + needle.len();
    out[start..].split_whitespace().next().unwrap_or_default().to_owned()
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn dependency_updates_get_submit_bounds_and_no_cycles() {
    require_users();
    let cluster = Cluster::start();
    let a = sbatch(&cluster, "alice", &["-H", "-J", "first", "--wrap", "true"]).unwrap();
    let b = sbatch(&cluster, "alice", &["-H", "-d", &format!("afterok:{a}"), "--wrap", "true"]).unwrap();
    let c = sbatch(&cluster, "alice", &["-H", "-d", &format!("afterany:{b}"), "--wrap", "true"]).unwrap();
    let other = sbatch(&cluster, "alice", &["-H", "--wrap", "true"]).unwrap();
    let update = |job: u32, field: &str| {
        let out = run_as(&cluster, "alice", "scontrol", &["update", &format!("jobid={job}"), field]);
        (out.status.code(), text(&out.stderr))
    };
    let refused = |job: u32, field: &str, message: &str| {
        let (code, stderr) = update(job, field);
        assert_eq!(code, Some(1), "{field:.80} on {job} was accepted");
        assert!(stderr.contains(&format!("{message} for job {job}")), "{field:.80}: {stderr}");
    };
    // On itself, and around a loop of two and of three jobs.
    refused(a, &format!("dependency=afterok:{a}"), "Job dependency problem");
    refused(a, &format!("dependency=afterok:{b}"), "Job dependency problem");
    refused(a, &format!("dependency=afternotok:{other}:{c}"), "Job dependency problem");
    // Longer than a submission may be.
    refused(a, &format!("dependency={}", afterok(&[other], 1001)), "Job dependency problem");
    refused(a, &format!("JobName={}", "n".repeat(5000)), "Invalid job specification");
    refused(a, &format!("Comment={}", "c".repeat(5000)), "Invalid job specification");
    // The refusals are audited, each with a bounded part of the request.
    let audited = cluster.wait_for("the refused updates in the audit log", LONG, || {
        let log = cluster.ok("drover", &["audit", "-P", "-n", "-a", "update", "-j", &a.to_string()]);
        (log.lines().count() >= 6).then_some(log)
    });
    assert!(audited.lines().all(|l| l.len() < 1500), "an audit record keeps the whole request:\n{audited:.3000}");
    // Nothing changed.
    assert_eq!(show_field(&cluster, a, "Dependency"), "(null)");
    assert_eq!(show_field(&cluster, a, "JobName"), "first");
    assert!(!cluster.ok("scontrol", &["show", "job", &a.to_string()]).contains("Comment=ccc"));
    // What is not a cycle and fits is still accepted.
    assert_eq!(update(a, &format!("dependency={}", afterok(&[other], 1000))).0, Some(0));
    assert_eq!(update(a, "JobName=renamed").0, Some(0));
    assert_eq!(show_field(&cluster, a, "JobName"), "renamed");
    assert!(show_field(&cluster, a, "Dependency").starts_with(&format!("afterok:{other}(unfulfilled)")));
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_negative_nice_needs_an_operator() {
    require_users();
    let cluster = Cluster::start();
    let before = cluster.ok("sacct", &["-X", "-n", "-P", "-a", "-o", "JobID"]);
    let refused = sbatch(&cluster, "alice", &["--nice=-100000", "--wrap", "true"]).unwrap_err();
    assert!(
        refused.contains("sbatch: error: Batch job submission failed: Access/permission denied"),
        "alice's negative nice: {refused}"
    );
    assert_eq!(cluster.ok("squeue", &["-h", "-u", "alice"]).trim(), "", "no job was queued");
    assert_eq!(cluster.ok("sacct", &["-X", "-n", "-P", "-a", "-o", "JobID"]), before, "no job was recorded");
    // A positive nice is anyone's; a negative one an admin's (root), and squeue shows it.
    let nice = sbatch(&cluster, "alice", &["-H", "--nice=50", "--wrap", "true"]).expect("alice's positive nice");
    let root = sbatch(&cluster, "root", &["-H", "--nice=-100000", "--wrap", "true"]).expect("root's negative nice");
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &nice.to_string(), "-o", "%y"]).trim(), "50");
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &root.to_string(), "-o", "%y"]).trim(), "-100000");
    // The first job id went to alice's accepted job: the refusal used none.
    let first = before.lines().filter_map(|l| l.trim().parse::<u32>().ok()).max().map_or(1, |m| m + 1);
    assert_eq!(nice, first, "the refused submission used no job id");
}
