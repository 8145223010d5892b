//! The command lines real Slurm clients run (recorded in `clients.md`), replayed against a real
//! cluster with the same parsing those clients apply to the output: submitit (array script,
//! `sbatch` sentence, `sacct --parsable2` polling, `scancel <base>_<task>`), Snakemake
//! (`scontrol show config`, `sinfo -o %P`, `sbatch --parsable … --wrap`, `sacct … --name`,
//! `squeue … --name`, arrays read through `JobIdRaw`) and dask-jobqueue (a script deleted as soon
//! as `sbatch` returns).

use drover_e2e::{Cluster, text};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// Polls `probe` until it returns `Some`.
fn until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + LONG;
    while Instant::now() < deadline {
        if let Some(value) = probe() {
            return value;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out waiting for {what}");
}

/// submitit's parse of `sacct -o JobID,State,NodeList --parsable2 -j <id>`: rows by field name,
/// step rows skipped.
fn submitit_states(output: &str) -> Vec<(String, String)> {
    let mut lines = output.lines();
    let names: Vec<&str> = lines.next().unwrap_or_default().split('|').collect();
    let (id, state) =
        (names.iter().position(|n| *n == "JobID").unwrap(), names.iter().position(|n| *n == "State").unwrap());
    lines
        .map(|l| l.split('|').collect::<Vec<_>>())
        .filter(|row| !row[id].is_empty() && !row[id].contains('.'))
        .map(|row| (row[id].to_owned(), row[state].to_owned()))
        .collect()
}

#[test]
fn submitit_array() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let logs = dir.join("sub_logs");
    std::fs::create_dir_all(&logs).unwrap();
    let script = format!(
        "#!/bin/bash\n\n# Parameters\n#SBATCH --array=0-2%3\n#SBATCH --cpus-per-task=1\n\
         #SBATCH --error={logs}/%A_%a_0_log.err\n#SBATCH --job-name=submitit\n#SBATCH --mem=1GB\n\
         #SBATCH --nodes=1\n#SBATCH --ntasks-per-node=1\n#SBATCH --open-mode=append\n\
         #SBATCH --output={logs}/%A_%a_0_log.out\n#SBATCH --partition=main\n#SBATCH --signal=USR2@90\n\
         #SBATCH --time=5\n#SBATCH --wckey=submitit\n\n# command\nexport SUBMITIT_EXECUTOR=slurm\n\
         echo \"id=${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}} executor=$SUBMITIT_EXECUTOR\"\n\
         if [ \"$SLURM_ARRAY_TASK_ID\" = 2 ]; then sleep 60; fi\n",
        logs = logs.display()
    );
    let path = dir.join(".submission_file_0123.sh");
    std::fs::write(&path, script).unwrap();
    let out = cluster.run(None, &dir, "sbatch", &[path.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // re.search(r"job (?P<id>[0-9]+)", out)
    let stdout = text(&out.stdout);
    let base: u32 = stdout.split("job ").nth(1).and_then(|rest| rest.trim().parse().ok()).expect("job <id>");

    let sacct = |id: &str| cluster.ok("sacct", &["-o", "JobID,State,NodeList", "--parsable2", "-j", id]);
    until("tasks 0 and 1 to complete and 2 to run", || {
        let states = submitit_states(&sacct(&base.to_string()));
        let want = [(0, "COMPLETED"), (1, "COMPLETED"), (2, "RUNNING")];
        want.iter().all(|(task, state)| states.contains(&(format!("{base}_{task}"), (*state).to_owned()))).then_some(())
    });
    for task in [0, 1] {
        let log = std::fs::read_to_string(logs.join(format!("{base}_{task}_0_log.out"))).unwrap();
        assert_eq!(log, format!("id={base}_{task} executor=slurm\n"));
    }
    // scancel <base>_<task> on the running task, then the state submitit sees is terminal.
    let out = cluster.run(None, &dir, "scancel", &[&format!("{base}_2")], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    until("task 2 to be cancelled", || {
        submitit_states(&sacct(&base.to_string()))
            .contains(&(format!("{base}_2"), "CANCELLED by 0".into()))
            .then_some(())
    });
}

#[test]
fn snakemake_single_and_array() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    // MaxArraySize\s*=?\s*(\d+) and a line starting with MinJobAge.
    let config = cluster.ok("scontrol", &["show", "config"]);
    let max_array =
        config.lines().find_map(|l| l.strip_prefix("MaxArraySize")).map(|v| v.trim_start_matches([' ', '=']).trim());
    assert_eq!(max_array, Some("1001"), "{config}");
    assert!(config.lines().any(|l| l.starts_with("MinJobAge") && l.ends_with("= 600 sec")), "{config}");
    let partitions = cluster.ok("sinfo", &["-o", "%P"]);
    assert!(partitions.split_whitespace().any(|p| p == "main*"), "{partitions}");
    // Account validation: sacctmgr's accounts for the user, one padded line each, stripped and
    // lower-cased by the plugin.
    let accounts = cluster.ok("sacctmgr", &["-n", "-s", "list", "user", "root", "format=account%256"]);
    let accounts: Vec<String> = accounts.lines().map(|l| l.trim().to_lowercase()).collect();
    assert_eq!(accounts, ["shared", "vision", "nlp"]);

    let uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
    let log = format!("{}/rule_a/%j.log", dir.display());
    std::fs::create_dir_all(dir.join("rule_a")).unwrap();
    let workdir = dir.display().to_string();
    let args = [
        "--parsable",
        "--job-name",
        uuid,
        "--output",
        &log,
        "--export=ALL",
        "--comment",
        "rule_a",
        "-t",
        "5",
        "--mem",
        "100",
        "--cpus-per-task=1",
        "-D",
        &workdir,
        "--wrap=echo hello",
    ];
    let out = cluster.run(None, &dir, "sbatch", &args, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job: u32 = text(&out.stdout).trim().split(';').next().unwrap().parse().expect("^\\d+$");

    let since = text(
        &std::process::Command::new("date").args(["-d", "2 days ago", "+%Y-%m-%dT%H:00"]).output().unwrap().stdout,
    );
    let status = || {
        cluster.ok(
            "sacct",
            &[
                "-X",
                "--parsable2",
                "--clusters",
                "all",
                "--noheader",
                "--format=JobIdRaw,State",
                "--starttime",
                since.trim(),
                "--endtime",
                "now",
                "--name",
                uuid,
            ],
        )
    };
    until("the job to complete", || (status() == format!("{job}|COMPLETED\n")).then_some(()));
    let squeue = cluster.ok("squeue", &["--format=%i|%T", "--states=all", "--noheader", "--name", uuid]);
    assert_eq!(squeue, format!("{job}|COMPLETED\n"));
    assert_eq!(std::fs::read_to_string(dir.join(format!("rule_a/{job}.log"))).unwrap(), "hello\n");

    // Arrays: every task's status is read from the row whose raw id is the base, which must be
    // the last task to start.
    let array_uuid = "11111111-2222-3333-4444-555555555555";
    let log = format!("{}/rule_a/%A_%a.log", dir.display());
    let args = ["--parsable", "--array=1-3", "--job-name", array_uuid, "--output", &log, "--wrap=sleep 1"];
    let out = cluster.run(None, &dir, "sbatch", &args, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let base: u32 = text(&out.stdout).trim().parse().unwrap();
    let rows = until("all tasks to complete", || {
        let out = cluster.ok(
            "sacct",
            &["-X", "--parsable2", "--noheader", "--format=JobIdRaw,JobID,State,Start", "--name", array_uuid],
        );
        let rows: Vec<Vec<String>> = out.lines().map(|l| l.split('|').map(str::to_owned).collect()).collect();
        (rows.len() == 3 && rows.iter().all(|r| r[2] == "COMPLETED")).then_some(rows)
    });
    let base_row = rows.iter().find(|r| r[0] == base.to_string()).expect("a row with the base id");
    assert_eq!(base_row[1], format!("{base}_3"));
    assert!(rows.iter().all(|r| r[3] <= base_row[3]), "the base id must be the last task to start: {rows:?}");
}

#[test]
fn dask_jobqueue_deletes_its_script_at_once() {
    let cluster = Cluster::start();
    let dir = cluster.workdir(None);
    let path = dir.join("tmpab12cd34.sh");
    std::fs::write(&path, "#!/usr/bin/env bash\n#SBATCH -J dask-worker\n#SBATCH -n 1\n#SBATCH --cpus-per-task=1\n#SBATCH --mem=100M\n#SBATCH -t 00:30:00\nsleep 60\n").unwrap();
    let out = cluster.run(None, &dir, "sbatch", &[path.to_str().unwrap()], None);
    std::fs::remove_file(&path).unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // re.search(r"(?P<job_id>\d+)", stdout): the first run of digits.
    let stdout = text(&out.stdout);
    let digits: String = stdout.chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
    let job: u32 = digits.parse().unwrap();
    cluster.wait_state(job, "RUNNING", LONG);
    let out = cluster.run(None, &dir, "scancel", &[&job.to_string()], None);
    assert!(out.status.success());
    cluster.wait_state(job, "CANCELLED", LONG);
}
