//! `sstat` end to end: alice's running two-node job holds ~120 MB in its batch step and ~110 MB
//! in each task of a two-node srun step, all burning CPU; `sstat` shows each step's MaxRSS, AveCPU and NTasks from the
//! nodes' cgroups, picks the srun step for a bare job id and every step under `-a`, lists the
//! pids under `-i` and through `scontrol listpids`; under `PrivateData=jobs` bob cannot see the
//! job, root can; a job that ended and one that never existed are Slurm's errors.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

/// A size as sstat prints it (`123456K`, `120M`, `1G`, `0`) in KiB.
fn kib(text: &str) -> u64 {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let number: u64 = number.parse().unwrap_or_else(|_| panic!("not a size: {text:?}"));
    let shift = match unit {
        "" | "K" => 0,
        "M" => 10,
        "G" => 20,
        other => panic!("unexpected unit {other:?} in {text:?}"),
    };
    number << shift
}

/// `HH:MM:SS` (or `D-HH:MM:SS`) in seconds.
fn seconds(text: &str) -> u64 {
    let (days, clock) = text.split_once('-').map_or((0, text), |(d, c)| (d.parse().unwrap(), c));
    let parts: Vec<u64> =
        clock.split(':').map(|p| p.parse().unwrap_or_else(|_| panic!("not a time: {text:?}"))).collect();
    assert_eq!(parts.len(), 3, "{text:?}");
    days * 86_400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
}

/// A row of `sstat -P -o JobID,MaxRSS,AveCPU,NTasks`: (job id, MaxRSS KiB, AveCPU seconds, tasks).
fn rows(out: &str) -> Vec<(String, u64, u64, u32)> {
    out.lines()
        .map(|line| {
            let cells: Vec<&str> = line.split('|').collect();
            assert_eq!(cells.len(), 4, "{out}");
            (cells[0].to_owned(), kib(cells[1]), seconds(cells[2]), cells[3].parse().unwrap())
        })
        .collect()
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn sstat_shows_what_running_steps_use() {
    require_users();
    let config = CONFIG.replace("min_job_age = 600\n", "min_job_age = 600\nprivate_data = [\"jobs\"]\n");
    let cluster = Cluster::start_with(&config);
    let script = "#!/bin/bash\n#SBATCH -t 5\n#SBATCH -N 2\n#SBATCH -n 2\n#SBATCH --mem=1G\n#SBATCH -o out-%j.txt\n\
        /usr/bin/perl -e '$| = 1; $x = \"a\" x (120 << 20); print \"batch-ready\\n\"; 1 while 1' &\n\
        $DROVER_HOME/bin/srun -N2 -n2 /usr/bin/perl -e '$| = 1; $x = \"a\" x (110 << 20); print \"step-ready\\n\"; 1 while 1' &\n\
        wait\n";
    let job = cluster.submit(Some("alice"), "hog.sh", script, &[]);
    let dir = cluster.workdir(Some("alice"));
    let sstat = |user: Option<&str>, args: &[&str]| {
        let out = cluster.run(user, &dir, "sstat", args, None);
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let id = job.to_string();
    let batch = format!("{job}.batch");
    let fields = "JobID,MaxRSS,AveCPU,NTasks";

    // Both steps up, each with its memory held and a second of CPU used.
    let all = cluster.wait_for("both steps' memory and CPU in sstat", LONG, || {
        let (code, out, err) = sstat(Some("alice"), &["-a", "-j", &id, "-P", "-n", "-o", fields]);
        assert_eq!(code, Some(0), "{out}{err}");
        let rows = rows(&out);
        let ready = rows.len() == 2 && rows.iter().all(|(_, rss, cpu, _)| *rss >= 100 << 10 && *cpu >= 1);
        ready.then_some(rows)
    });
    assert_eq!(all[0].0, batch, "{all:?}");
    assert_eq!(all[0].3, 1, "one batch task: {all:?}");
    assert!(all[0].1 >= 120 << 10 && all[0].1 < 600 << 10, "the batch step's ~120 MB: {all:?}");
    assert_eq!(all[1].0, format!("{job}.0"), "{all:?}");
    assert_eq!(all[1].3, 2, "a task on each node: {all:?}");
    assert!(all[1].1 >= 110 << 10 && all[1].1 < 600 << 10, "each srun task's ~110 MB: {all:?}");
    // Both nodes answered for the step: its node list, and one `-i` row each.
    let (_, out, _) = sstat(Some("alice"), &["-j", &format!("{job}.0"), "-P", "-n", "-o", "JobID,Nodelist,NTasks"]);
    assert_eq!(out, format!("{job}.0|n[1-2]|2\n"));
    let (_, out, _) = sstat(Some("alice"), &["-i", "-j", &format!("{job}.0"), "-P", "-n"]);
    let nodes: Vec<&str> = out.lines().filter_map(|l| l.split('|').nth(1)).collect();
    assert_eq!(nodes, ["n1", "n2"], "{out}");

    // A bare job id: the srun step only (Slurm skips the batch step when there is one); the
    // header names the fields.
    let (code, out, err) = sstat(Some("alice"), &["-j", &id, "-P", "-o", fields]);
    assert_eq!(code, Some(0), "{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("JobID|MaxRSS|AveCPU|NTasks"), "{out}");
    let rest: Vec<&str> = lines.collect();
    assert_eq!(rest.len(), 1, "{out}");
    assert!(rest[0].starts_with(&format!("{job}.0|")), "{out}");
    let (_, out, _) = sstat(Some("alice"), &["-j", &batch, "-p", "-n", "-o", "JobID,NTasks"]);
    assert_eq!(out, format!("{batch}|1|\n"));

    // The default fields, fixed width: Slurm's header and a dash line, then the step.
    let (code, out, err) = sstat(Some("alice"), &["-j", &batch]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("JobID         MaxVMSize  MaxVMSizeNode"), "{out}");
    assert!(lines[0].contains("TRESUsageInAve") && lines[0].trim_end().ends_with("TRESUsageOutTot"), "{out}");
    assert!(lines[2].starts_with(&format!("{batch:<12} ")), "{out}");
    assert!(lines[2].contains(" n1 "), "MaxRSSNode and the like name the node: {out}");

    // `-i`: the step's pids on its node, each a live process of alice's.
    let (_, out, _) = sstat(Some("alice"), &["-i", "-j", &batch, "-P", "-n"]);
    let cells: Vec<&str> = out.trim_end().split('|').collect();
    assert_eq!(cells[..2], [batch.as_str(), "n1"], "{out}");
    let pids: Vec<u32> = cells[2].split(',').map(|p| p.parse().unwrap()).collect();
    assert!(!pids.is_empty(), "{out}");
    for pid in pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap_or_default();
        assert_eq!(uid.split_whitespace().next(), Some("1001"), "pid {pid} is alice's: {status}");
    }

    // PrivateData=jobs: bob's sstat does not see alice's job; root sees it.
    let (code, out, err) = sstat(Some("bob"), &["-j", &id, "-P", "-n", "-o", fields]);
    assert_eq!((code, out.as_str()), (Some(0), ""), "{err}");
    assert_eq!(err, format!("sstat: error: couldn't get steps for job {job}\n"));
    let (_, out, err) = sstat(None, &["-a", "-j", &id, "-P", "-n", "-o", fields]);
    assert_eq!(rows(&out).len(), 2, "{out}{err}");

    // `scontrol listpids`: the job's processes on n1, the batch script as task 0 of the batch
    // step and the srun step's task 0; bob may not list them.
    let listpids = |user: Option<&str>, args: &[&str]| {
        let out = cluster.run(user, &dir, "scontrol", &[&["listpids"], args].concat(), None);
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, out, err) = listpids(Some("alice"), &[&id, "n1"]);
    assert_eq!(code, Some(0), "{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("PID      JOBID    STEPID   LOCALID GLOBALID"), "{out}");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 5 && r[1] == id), "{out}");
    assert!(rows.iter().any(|r| r[2] == "batch" && r[3..] == ["0", "0"]), "{out}");
    assert!(rows.iter().any(|r| r[2] == "batch" && r[3..] == ["-", "-"]), "the perl under the script: {out}");
    assert!(rows.iter().any(|r| r[2] == "0" && r[3..] == ["0", "0"]), "{out}");
    let (_, out, _) = listpids(Some("alice"), &[&format!("{job}.0"), "n2"]);
    let rows: Vec<Vec<&str>> = out.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.iter().all(|r| r[2] == "0"), "{out}");
    assert!(rows.iter().any(|r| r[3..] == ["0", "1"]), "n2 runs task 1 as its local task 0: {out}");
    let (_, every, _) = listpids(Some("alice"), &["*", "n1"]);
    assert!(every.lines().count() > 3 && every.contains(&format!(" {job} ")), "{every}");
    let (code, out, err) = listpids(Some("bob"), &[&id, "n1"]);
    assert_eq!((code, err.as_str()), (Some(1), "scontrol: error: Invalid job id specified\n"), "{out}");
    let (_, out, _) = listpids(Some("bob"), &["*", "n1"]);
    assert_eq!(out, "PID      JOBID    STEPID   LOCALID GLOBALID\n", "bob has no job there");

    // Steps that do not run, jobs that ended or never were: Slurm's messages.
    let (_, out, err) = sstat(Some("alice"), &["-j", &format!("{job}.7"), "-n"]);
    assert_eq!((out.as_str(), err), ("", format!("sstat: error: StepId={job}.7 not found running.\n")));
    let (_, _, err) = sstat(Some("alice"), &["-j", "999999", "-n"]);
    assert_eq!(err, "sstat: error: couldn't get steps for job 999999\n");
    let out = cluster.run(Some("alice"), &dir, "scancel", &[&id], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    cluster.wait_state(job, "CANCELLED", LONG);
    let (code, out, err) = sstat(Some("alice"), &["-j", &id, "-n"]);
    assert_eq!((code, out.as_str()), (Some(0), ""));
    assert_eq!(err, format!("sstat: error: No steps running for job {job}\n"));

    // Nothing to stat, an unknown field: usage errors.
    let (code, _, err) = sstat(Some("alice"), &[]);
    assert_eq!((code, err.as_str()), (Some(1), "sstat: error: You didn't give me any jobs to stat.\n"));
    let (code, _, err) = sstat(Some("alice"), &["-j", &id, "-o", "Bogus"]);
    assert_eq!((code, err.as_str()), (Some(1), "sstat: error: Invalid field requested: \"Bogus\"\n"));
    let (code, out, _) = sstat(Some("alice"), &["-e"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("MaxRSS") && out.contains("TRESUsageOutTot"), "{out}");
}
