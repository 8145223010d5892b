//! `drover simulate` end to end: a real ctld with simulated nodes runs a three-team workload
//! (team B floods the GPUs with 2-GPU jobs, teams A and C arrive behind it with 1- and 4-GPU
//! jobs), then `drover simulate` replays what accounting recorded under the running config and
//! under a candidate that caps team B at 2 GPUs (`grp_tres`). The replay of the running config must reproduce the recorded waits closely (the
//! figures are printed), the candidate must make B wait longer on its limit and A wait less, the
//! JSON answer must parse, and bad input (a missing file, invalid TOML, `--from` after `--to`,
//! a window over the job cap) must get a clear error.

use drover_e2e::sim::SimCluster;
use drover_e2e::{python, text};
use std::process::Command;

const TEAMS: &str = "[[accounts]]\nname = \"teama\"\nshares = 40\n[[accounts]]\nname = \"teamb\"\nshares = 40\n\
    [[accounts]]\nname = \"teamc\"\nshares = 20\n\
    [[users]]\nname = \"root\"\ndefault_account = \"teama\"\naccounts = [\"teama\", \"teamb\", \"teamc\"]\n";

/// A field of one team's figures in one run of the JSON answer (`run` is `current` or
/// `candidate`), read with python3's JSON parser (which also proves the answer parses).
fn figure(json: &str, run: &str, team: &str, field: &str) -> f64 {
    let script = format!(
        "import json,sys\nr=json.load(sys.stdin)\nprint([t for t in r['{run}']['teams'] if t['account']=='{team}'][0]['{field}'])"
    );
    let out = python(json, &script);
    out.trim().parse().unwrap_or_else(|_| panic!("{run}.{team}.{field}: {out}\n{json}"))
}

#[test]
fn simulate_replays_a_recorded_workload_and_shows_a_candidates_effect() {
    let config = format!("{}{TEAMS}", drover_e2e::sim::gpu_nodes(2, 4, ""));
    let cluster = SimCluster::start("simulate", 2, false, "", &config);
    let script = cluster.root().join("job.sh");
    std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    let script = script.to_string_lossy().into_owned();
    let submit = |account: &str, gpus: u32, seconds: u32| -> u32 {
        let (gres, comment) = (format!("--gres=gpu:{gpus}"), format!("sim:{seconds}"));
        let args = ["--parsable", "-A", account, &gres, "-c", "2", "-t", "2", "--comment", &comment, &script];
        cluster.ok("sbatch", &args).trim().parse().unwrap()
    };
    // Team B floods the 8 GPUs with 2-GPU jobs; team A (1- and 4-GPU jobs) arrives two seconds
    // later, team C (1-GPU jobs) a second after A.
    let mut jobs: Vec<u32> = (0..10).map(|i| submit("teamb", 2, 5 + i % 3)).collect();
    std::thread::sleep(std::time::Duration::from_secs(2));
    jobs.extend((0..4).map(|_| submit("teama", 1, 4)));
    jobs.extend((0..2).map(|_| submit("teama", 4, 6)));
    std::thread::sleep(std::time::Duration::from_secs(1));
    jobs.extend((0..4).map(|i| submit("teamc", 1, 3 + i % 3)));
    let ids = jobs.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    cluster.wait_up_to("every job's end", std::time::Duration::from_secs(120), || {
        let out = cluster.ok("sacct", &["-X", "-P", "-n", "-j", &ids, "-o", "State"]);
        (out.lines().count() == jobs.len() && out.lines().all(|l| l == "COMPLETED")).then_some(())
    });

    let candidate = cluster.root().join("candidate.toml");
    let current = std::fs::read_to_string(cluster.root().join("cluster.toml")).unwrap();
    let capped = current
        .replace("name = \"teamb\"\nshares = 40\n", "name = \"teamb\"\nshares = 40\ngrp_tres = \"gres/gpu=2\"\n");
    assert_ne!(capped, current, "the candidate changes team B");
    std::fs::write(&candidate, capped).unwrap();
    let candidate = candidate.to_string_lossy().into_owned();

    let table = cluster.ok("drover", &["simulate", "--config", &candidate]);
    eprintln!("{table}");
    assert!(table.contains("Replayed 20 jobs"), "{table}");
    let json = cluster.ok("drover", &["simulate", "--config", &candidate, "--json"]);
    let get = |run: &str, team: &str, field: &str| figure(&json, run, team, field);
    // Fidelity of the running config's replay.
    let fidelity = python(
        &json,
        "import json,sys\nf=json.load(sys.stdin)['fidelity']\nprint(f['jobs'], f['median_abs_error_s'], f['p95_abs_error_s'])",
    );
    let f: Vec<i64> = fidelity.split_whitespace().map(|v| v.parse().unwrap()).collect();
    eprintln!("fidelity: {} jobs, median |simulated - recorded wait| {} s, p95 {} s", f[0], f[1], f[2]);
    assert_eq!(f[0], 20, "every job ran once and is compared");
    assert!(f[1] <= 3 && f[2] <= 8, "the current config's replay strays from the recorded waits: {fidelity}\n{table}");
    // The candidate: B limited to 2 GPUs waits longer and hits its limit; A waits less.
    assert_eq!(get("current", "teamb", "limit_hits"), 0.0, "{json}");
    assert!(get("candidate", "teamb", "limit_hits") > 0.0, "{json}");
    assert!(get("candidate", "teamb", "wait_p95_s") > get("current", "teamb", "wait_p95_s"), "{json}");
    assert!(get("candidate", "teama", "wait_p50_s") < get("current", "teama", "wait_p50_s"), "{json}");
    assert!(get("candidate", "teamc", "wait_p50_s") <= get("current", "teamc", "wait_p50_s"), "{json}");
    assert_eq!(get("current", "teama", "jobs"), 6.0);

    // Bad input: a clear error each, nothing replayed.
    let fails = |args: &[&str], expect: &str| {
        let out = cluster.command("drover", args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(expect), "{args:?}: {err}");
        assert!(!err.contains("os error") && !err.contains("Error {"), "{args:?}: {err}");
    };
    let missing = cluster.root().join("nowhere.toml").to_string_lossy().into_owned();
    fails(&["simulate", "--config", &missing], "nowhere.toml");
    let broken = cluster.root().join("broken.toml");
    std::fs::write(&broken, "cluster_name = \"x\"\n[[nodes]\n").unwrap();
    fails(&["simulate", "--config", &broken.to_string_lossy()], "broken.toml:2:");
    fails(&["simulate", "--config", &candidate, "--from", "now", "--to", "now-1hour"], "--from must be before --to");
    fails(&["simulate", "--config", &candidate, "--max-jobs", "5"], "more than the cap of 5");
    fails(&["simulate"], "--config FILE is required");
    let huge = cluster.root().join("huge.toml");
    let nodes = "[[nodes]]\nnames = \"big[1-200000]\"\ncpus = 1\nreal_memory = 1\n[[partitions]]";
    std::fs::write(&huge, current.replacen("[[partitions]]", nodes, 1)).unwrap();
    fails(&["simulate", "--config", &huge.to_string_lossy()], "a simulation takes at most 100000");
}

/// A plain user may not make ctld spend minutes replaying: `drover simulate` as alice is refused
/// with the reason and replays nothing; root (an admin) is answered.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn simulate_is_for_operators_and_admins() {
    drover_e2e::require_users();
    let cluster = drover_e2e::Cluster::start();
    let dir = cluster.workdir(Some("alice"));
    let candidate = dir.join("candidate.toml");
    std::fs::copy(cluster.config_file(), &candidate).unwrap();
    let candidate = candidate.to_string_lossy().into_owned();
    let simulate = |user: Option<&str>| {
        let mut command = match user {
            Some(user) => {
                let mut c = Command::new("setpriv");
                c.args([&format!("--reuid={user}"), &format!("--regid={user}"), "--init-groups", "--"]);
                c.arg(drover_e2e::bin_dir().join("drover"));
                c
            }
            None => Command::new(drover_e2e::bin_dir().join("drover")),
        };
        command
            .args(["simulate", "--config", &candidate])
            .current_dir(&dir)
            .env("DROVER_CONF", cluster.home().join("cluster.toml"))
            .env("DROVER_SOCKET", cluster.home().join("ctld").join("ctld.sock"))
            .output()
            .unwrap()
    };
    let alice = simulate(Some("alice"));
    assert!(!alice.status.success(), "alice ran a simulation: {}", text(&alice.stdout));
    assert!(text(&alice.stderr).contains("drover simulate is for operators and admins"), "{}", text(&alice.stderr));
    let root = simulate(None);
    assert!(root.status.success(), "root: {}", text(&root.stderr));
    assert!(text(&root.stdout).contains("Replayed 0 jobs"), "{}", text(&root.stdout));
}

/// Fidelity over a larger workload: 120 jobs of three teams (1 to 8 GPUs, 2 to 12 s) arriving
/// every 0.4 s on 4 nodes of 8 GPUs, so a queue builds and waits reach tens of seconds; the
/// replay of the running config must reproduce the recorded waits closely. The figures are
/// printed (docs/admin/simulate.md keeps them).
#[test]
fn simulate_reproduces_the_waits_of_a_larger_workload() {
    let config = format!("{}{TEAMS}", drover_e2e::sim::gpu_nodes(4, 8, ""));
    let cluster = SimCluster::start("simfidelity", 4, false, "", &config);
    let script = cluster.root().join("job.sh");
    std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    let script = script.to_string_lossy().into_owned();
    let teams = ["teama", "teamb", "teamc"];
    let sizes = [1, 1, 2, 4, 8];
    let mut jobs = Vec::new();
    for i in 0..120u32 {
        let (gres, comment) =
            (format!("--gres=gpu:{}", sizes[(i * 7 % 5) as usize]), format!("sim:{}", 2 + i * 5 % 11));
        let account = teams[(i % 3) as usize];
        let args = ["--parsable", "-A", account, &gres, "-c", "2", "-t", "2", "--comment", &comment, &script];
        jobs.push(cluster.ok("sbatch", &args).trim().parse::<u32>().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(400));
    }
    let ids = jobs.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    cluster.wait_up_to("every job's end", std::time::Duration::from_secs(300), || {
        let out = cluster.ok("sacct", &["-X", "-P", "-n", "-j", &ids, "-o", "State"]);
        (out.lines().count() == jobs.len() && out.lines().all(|l| l == "COMPLETED")).then_some(())
    });
    let waits = cluster.ok("sacct", &["-X", "-P", "-n", "-j", &ids, "-o", "Submit,Start"]);
    let json = cluster
        .ok("drover", &["simulate", "--config", &cluster.root().join("cluster.toml").to_string_lossy(), "--json"]);
    let fidelity = python(
        &json,
        "import json,sys\nf=json.load(sys.stdin)['fidelity']\nprint(f['jobs'], f['median_abs_error_s'], f['p95_abs_error_s'])",
    );
    let f: Vec<i64> = fidelity.split_whitespace().map(|v| v.parse().unwrap()).collect();
    let recorded: Vec<i64> = {
        let seconds = |t: &str| {
            let out = Command::new("date").args(["-d", t, "+%s"]).output().unwrap();
            text(&out.stdout).trim().parse::<i64>().unwrap()
        };
        let mut w: Vec<i64> = waits
            .lines()
            .filter_map(|l| l.split_once('|'))
            .map(|(submit, start)| seconds(start) - seconds(submit))
            .collect();
        w.sort_unstable();
        w
    };
    eprintln!(
        "fidelity over {} jobs (recorded waits {} to {} s, median {} s): median |simulated - recorded wait| {} s, p95 {} s",
        f[0],
        recorded[0],
        recorded[recorded.len() - 1],
        recorded[recorded.len() / 2],
        f[1],
        f[2]
    );
    assert_eq!(f[0], 120, "every job ran once and is compared");
    assert!(recorded[recorded.len() - 1] >= 20, "the workload queued: {recorded:?}");
    assert!(f[1] <= 5 && f[2] <= 30, "the current config's replay strays from the recorded waits: {fidelity}\n{json}");
}
