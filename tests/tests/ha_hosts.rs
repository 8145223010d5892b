//! Replicated controllers on real hosts, used by plain users (issue 27): three controller hosts
//! (network, host name and mount namespaces, `drover_e2e::hosts`), each running one replica as
//! the `drover` user from what `drover install --root` laid out, with no noded; one compute node
//! with noded and no replica, configless (`drover install --conf-server` with every replica's
//! address: its config comes from whichever replica leads). alice submits from the compute node (through noded's token), bob
//! from a controller host (through its replica's token socket, or its socket when that replica
//! leads), without pause, while the leader is killed with SIGKILL three times; meanwhile a
//! squatter (a plain user on every controller host) tries to take every replica's ports, and bob
//! floods every replica's Raft port with 700 idle connections from c1.
//! Every submission must succeed, none may be lost or doubled, a new leader must answer within
//! 5 s of each kill, and the squatter must never get a port. Work that waits meanwhile comes
//! through: a batch job's silent `srun sleep 25` and an `sbatch --wait` of a job as long.
//!
//! Each replica runs under `tests/src/replica_supervisor.py`, the stand-in for systemd that the
//! socket units `drover install` writes would be: it binds the replica's doors once and hands
//! them to ctld at every start (socket activation), so a crash leaves no moment in which someone
//! else could take them.

use drover_e2e::hosts::{Host, Hosts, ok};
use drover_e2e::{bin_dir, require_users, text};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);
/// A new leader answers a submission within this long after the old one was killed.
const FAILOVER_BOUND: Duration = Duration::from_secs(5);
/// Leader kills.
const ROUNDS: usize = 3;
const CONTROLLERS: [&str; 3] = ["c1", "c2", "c3"];

/// The cluster: three replicas (one per controller host) and the compute node n1. The hosts
/// are namespaces of this one machine: the nodes' declaration wins over its hardware
/// (`config_overrides`).
fn config(hosts: &Hosts) -> String {
    let mut config = format!(
        "cluster_name = \"hacluster\"\ndefault_account = \"shared\"\n\n[controller]\naddress = \"{}:6817\"\n\
         state_dir = \"/var/lib/drover\"\nnode_timeout = 8\nkill_wait = 2\nmin_job_age = 600\n\
         config_overrides = true\n",
        hosts.host("c1").ip
    );
    for (index, name) in CONTROLLERS.iter().enumerate() {
        let ip = &hosts.host(name).ip;
        config.push_str(&format!(
            "\n[[controller.replicas]]\nid = {}\naddress = \"{ip}:6817\"\nraft_address = \"{ip}:6827\"\n\
             state_dir = \"/var/lib/drover/r{}\"\n",
            index + 1,
            index + 1
        ));
    }
    config.push_str(
        "\n[[nodes]]\nnames = \"n1\"\ncpus = 4\nreal_memory = 8000\n\n[[partitions]]\nname = \"main\"\nnodes = \"n1\"\n\
         default = true\nmax_time = \"1-00:00:00\"\ndefault_mem_per_cpu = 100\n\n[[accounts]]\nname = \"shared\"\n\n\
         [[users]]\nname = \"alice\"\ndefault_account = \"shared\"\n\n[[users]]\nname = \"bob\"\ndefault_account = \"shared\"\n",
    );
    config
}

/// The users' work directory on every host (the scratch directory is shared, as a cluster
/// shares /home), owned by `user`.
fn workdir(hosts: &Hosts, user: &str) -> PathBuf {
    let dir = hosts.scratch().join(format!("work-{user}"));
    std::fs::create_dir_all(&dir).unwrap();
    let owner = nix::unistd::User::from_name(user).unwrap().expect("the user exists");
    nix::unistd::chown(&dir, Some(owner.uid), Some(owner.gid)).unwrap();
    dir
}

/// The pid of replica `id`'s drover-ctld (not its supervisor), if it runs.
fn replica_pid(id: usize) -> Option<i32> {
    let wanted = ["--replica".to_owned(), id.to_string()];
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        (args.first()?.ends_with("/drover-ctld") && args.windows(2).any(|w| w == wanted)).then_some(pid)
    })
}

/// The replica `scontrol ping` (as root on c1) calls primary, once all three are up and in step.
fn leader_in_step(hosts: &Hosts) -> Option<usize> {
    let out = hosts.host("c1").command("scontrol").args(["-d", "ping"]).output().ok()?;
    let shown = text(&out.stdout);
    let lines: Vec<&str> = shown.lines().collect();
    let in_step = lines.len() == 3 && lines.iter().all(|l| l.contains(" is UP") && l.ends_with("behind: 0)"));
    let primary = lines.iter().find(|l| l.starts_with("Slurmctld(primary)"))?;
    let id = primary.split("(replica ").nth(1)?.split(',').next()?.parse().ok()?;
    in_step.then_some(id)
}

/// One submission: when it started and ended, and its job id or what sbatch printed.
type Submission = (Instant, Instant, Result<u32, String>);

/// One user's submissions, without pause, until `stop`.
fn submitter(host: &Host, user: &str, dir: &Path, stop: Arc<AtomicBool>) -> Vec<Submission> {
    let mut results = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let out = host
            .as_user(user, dir, "sbatch")
            .args(["--parsable", "-o", "/dev/null", "-t", "5", "--wrap", "true"])
            .output()
            .unwrap();
        let answer = text(&out.stdout).trim().parse::<u32>();
        results.push((
            started,
            Instant::now(),
            match answer {
                Ok(id) if out.status.success() => Ok(id),
                _ => Err(format!("{:?}: {}{}", out.status, text(&out.stdout), text(&out.stderr))),
            },
        ));
    }
    results
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn plain_users_submit_through_three_leader_kills_on_three_controller_hosts() {
    require_users();
    nix::unistd::User::from_name("drover").unwrap().expect("ctld runs as the `drover` user (.ci/run creates it)");
    let mut hosts = Hosts::create(&["c1", "c2", "c3", "n1"]).unwrap_or_else(|e| panic!("cannot create the hosts: {e}"));
    let admin_file = hosts.scratch().join("cluster.toml");
    std::fs::write(&admin_file, config(&hosts)).unwrap();
    // Each controller host is told which replica it runs (its drop-in, and the key readable by
    // the `drover` user); the compute node gets the key for root alone.
    let install = |root: &Path, key: Option<&Path>, replica: Option<&str>| {
        let mut command = Command::new(bin_dir().join("drover"));
        command.arg("install").arg("--root").arg(root).arg("--config").arg(&admin_file);
        if let Some(key) = key {
            command.arg("--key").arg(key);
        }
        if let Some(replica) = replica {
            command.args(["--replica", replica]);
        }
        ok(&mut command)
    };
    install(&hosts.host("c1").root.clone(), None, Some("1"));
    let key = hosts.host("c1").root.join("etc/drover/cluster.key");
    for (name, replica) in [("c2", Some("2")), ("c3", Some("3"))] {
        install(&hosts.host(name).root.clone(), Some(&key), replica);
    }
    // The compute node is configless: only the key; noded fetches the config from whichever
    // replica leads (docs/admin/configless.md), and alice's commands there read its copy.
    let servers: Vec<String> = CONTROLLERS.iter().map(|name| format!("{}:6817", hosts.host(name).ip)).collect();
    let n1_root = hosts.host("n1").root.clone();
    ok(Command::new(bin_dir().join("drover"))
        .arg("install")
        .arg("--root")
        .arg(&n1_root)
        .arg("--key")
        .arg(&key)
        .args(["--conf-server", &servers.join(",")]));
    assert!(!n1_root.join("etc/drover/cluster.toml").exists(), "a configless node has no config of its own");
    let drover_uid = nix::unistd::User::from_name("drover").unwrap().unwrap().uid.as_raw();
    for (name, owner) in [("c2", drover_uid), ("n1", 0)] {
        let meta = std::fs::metadata(hosts.host(name).root.join("etc/drover/cluster.key")).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (owner, 0o600), "{name}'s key");
    }
    hosts.boot();
    let supervisor = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/replica_supervisor.py");
    for (index, name) in CONTROLLERS.iter().enumerate() {
        let id = (index + 1).to_string();
        let host = hosts.host_mut(name);
        let ip = host.ip.clone();
        let (nodes, raft) = (format!("{ip}:6817"), format!("{ip}:6827"));
        let socket = format!("/var/lib/drover/r{id}/ctld.sock");
        let supervisor = supervisor.to_string_lossy().into_owned();
        let argv = [
            "python3",
            &supervisor,
            &nodes,
            &raft,
            &socket,
            "--",
            "/usr/local/sbin/drover-ctld",
            "--config",
            "/etc/drover/cluster.toml",
            "--replica",
            &id,
        ];
        host.start_daemon("drover-ctld", &argv, Some("drover"));
    }
    hosts.host_mut("n1").start_unit("drover-noded");

    // bob on a controller host without a noded, alice on the compute node, as plain users.
    let (alice, bob) = (workdir(&hosts, "alice"), workdir(&hosts, "bob"));
    hosts.wait_for("n1 to register, as bob sees it from c1", LONG, || {
        let out = hosts.host("c1").as_user("bob", &bob, "sinfo").args(["-h", "-N", "-o", "%N %t"]).output().unwrap();
        (text(&out.stdout) == "n1 idle\n").then_some(())
    });

    // The squatter: bob, on every controller host, tries to take every replica's ports for as
    // long as the test runs (bounded), and says which it ever got.
    let script =
        |name: &str| Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(name).to_string_lossy().into_owned();
    let ports: Vec<String> = CONTROLLERS
        .iter()
        .flat_map(|name| {
            let ip = hosts.host(name).ip.clone();
            [format!("{ip}:6817"), format!("{ip}:6827")]
        })
        .collect();
    let squatters: Vec<std::process::Child> = CONTROLLERS
        .iter()
        .map(|name| {
            let mut command = hosts.host(name).as_user("bob", &bob, "python3");
            command.args([script("squat.py"), "120".into()]).args(&ports);
            command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();

    // The flood: bob, on c1, holds up to 700 idle connections to every replica's Raft port,
    // opening again (at most every 20 ms) those a replica closes, for as long as the test runs
    // (bounded), and says how many it opened.
    let raft_ports: Vec<String> = CONTROLLERS.iter().map(|name| format!("{}:6827", hosts.host(name).ip)).collect();
    let flooder = {
        let mut command = hosts.host("c1").as_user("bob", &bob, "python3");
        command.args([script("raft_flood.py"), "120".into(), "700".into()]).args(&raft_ports);
        command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
    };
    std::thread::sleep(Duration::from_secs(3));

    // Work that waits across the failovers (issue 36): alice's batch job whose step sleeps
    // silently through all three kills, and bob's `sbatch --wait` of a job as long.
    std::fs::write(alice.join("across.sh"), "#!/bin/sh\n#SBATCH -o across.out\nsrun sleep 25\necho rc=$?\n").unwrap();
    let across = ok(hosts.host("n1").as_user("alice", &alice, "sbatch").args(["--parsable", "across.sh"]));
    let across = across.trim().to_owned();
    let waiting = hosts
        .host("c1")
        .as_user("bob", &bob, "sbatch")
        .args(["--wait", "-o", "/dev/null", "--wrap", "sleep 25; exit 4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let results: Arc<Mutex<Vec<(String, Vec<Submission>)>>> = Arc::default();
    let kills = std::thread::scope(|scope| {
        for (host, user, dir) in [("n1", "alice", &alice), ("c1", "bob", &bob)] {
            let (stop, results, hosts) = (stop.clone(), results.clone(), &hosts);
            scope.spawn(move || {
                let mine = submitter(hosts.host(host), user, dir, stop);
                results.lock().unwrap().push((format!("{user} on {host}"), mine));
            });
        }
        let mut kills = Vec::new();
        for round in 0..ROUNDS {
            let leader = hosts.wait_for("three replicas in step", LONG, || leader_in_step(&hosts));
            std::thread::sleep(Duration::from_millis(700));
            let pid = replica_pid(leader).expect("the leader's process");
            let killed_at = Instant::now();
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
            eprintln!("round {round}: killed replica {leader} (pid {pid})");
            kills.push(killed_at);
            // Let the submitters run through the failover and past it.
            std::thread::sleep(Duration::from_secs(6));
        }
        // The submitters end their current submission and are joined with the scope.
        stop.store(true, Ordering::Relaxed);
        kills
    });
    let results = results.lock().unwrap();

    // The waiting work came through: the step ended as its task did, sbatch --wait with its
    // job's exit code.
    let waited = waiting.wait_with_output().unwrap();
    assert_eq!(waited.status.code(), Some(4), "bob's sbatch --wait: {}{}", text(&waited.stdout), text(&waited.stderr));
    let steps = hosts.wait_for("alice's job across the failovers to end", LONG, || {
        let out = ok(hosts.host("c1").command("sacct").args(["-n", "-P", "-o", "JobID,State,ExitCode", "-j", &across]));
        (!out.contains("RUNNING") && !out.contains("PENDING") && !out.is_empty()).then_some(out)
    });
    let output = std::fs::read_to_string(alice.join("across.out")).unwrap_or_default();
    assert!(output.contains("rc=0"), "the silent step across the failovers: {output:?}\n{steps}");
    assert!(steps.contains(&format!("{across}.0|COMPLETED|0:0")), "{steps}");

    // None failed, none doubled.
    let mut acked: Vec<u32> = Vec::new();
    for (who, mine) in results.iter() {
        let failed: Vec<&String> = mine.iter().filter_map(|(_, _, r)| r.as_ref().err()).collect();
        assert!(
            failed.is_empty(),
            "{who}: {} of {} submissions failed: {failed:?}\n{}",
            failed.len(),
            mine.len(),
            hosts.logs()
        );
        acked.extend(mine.iter().filter_map(|(_, _, r)| r.as_ref().ok().copied()));
        eprintln!("{who}: {} submissions, all acknowledged", mine.len());
    }
    let unique: BTreeSet<u32> = acked.iter().copied().collect();
    assert_eq!(unique.len(), acked.len(), "a job id was acknowledged twice");
    // A new leader answered within the bound after each kill: the first submission started
    // after the kill was acknowledged within it.
    for (round, killed_at) in kills.iter().enumerate() {
        let next = results
            .iter()
            .flat_map(|(_, mine)| mine.iter())
            .filter(|(started, _, r)| *started > *killed_at && r.is_ok())
            .map(|(_, ended, _)| *ended)
            .min()
            .expect("a submission after the kill");
        let failover = next.duration_since(*killed_at);
        eprintln!("round {round}: a submission was acknowledged {failover:?} after the kill");
        assert!(failover < FAILOVER_BOUND, "round {round}: failover took {failover:?}\n{}", hosts.logs());
    }
    // Every acknowledged job is in the accounting, once.
    let list = unique.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let listed = ok(hosts.host("c1").command("sacct").args(["-X", "-n", "-P", "-o", "JobID", "-j", &list]));
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    for line in listed.lines() {
        *seen.entry(line.parse().unwrap()).or_default() += 1;
    }
    for id in &unique {
        assert_eq!(seen.get(id), Some(&1), "job {id} in sacct:\n{listed}");
    }
    // The flood held its connections throughout.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(flooder.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    );
    let flooded = flooder.wait_with_output().unwrap();
    let opened: usize = text(&flooded.stdout).trim().parse().unwrap_or(0);
    eprintln!("the flood opened {opened} connections to the Raft ports{}", text(&flooded.stderr));
    assert!(opened >= 3 * 700, "the flood never held its connections: {opened}");
    // The squatter never got a port.
    for squatter in squatters {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(squatter.id()).unwrap()),
            nix::sys::signal::Signal::SIGINT,
        );
        let out = squatter.wait_with_output().unwrap();
        let said = text(&out.stdout);
        assert!(!said.contains("got"), "a squatter took a port:\n{said}");
        let tried: usize = said.trim().strip_prefix("tried ").and_then(|n| n.parse().ok()).unwrap_or(0);
        assert!(tried > 1000, "the squatter did not run: {said}{}", text(&out.stderr));
    }
}
