//! A network partition, not a crash: node n1 runs in a network namespace of its own, joined to the
//! host by a veth pair, with ctld listening on the host end. Cutting the link leaves n1 and its
//! jobs running but unheard; ctld declares it DOWN after `node_timeout`, requeues its `--requeue`
//! job (which then runs on n2) and ends its `--no-requeue` job `NODE_FAIL`. When the link comes
//! back, n1 registers again, its stale runs are killed (processes gone, cgroups removed, job
//! directories removed) and it returns IDLE.
//!
//! n1 is entered into the namespace with `nsenter --net=/run/netns/<ns>`, not `ip netns exec`:
//! the latter also makes a new mount namespace and remounts `/sys`, which hides the cgroup
//! hierarchies mounted below `/sys/fs/cgroup` from noded and its jobs.

use drover_e2e::{CONFIG, Cluster, cgroups_left, text};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// Runs `ip` with `args`; the error names the command and what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("running ip {args:?}: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(format!("ip {}: {}", args.join(" "), text(&out.stderr).trim())) }
}

/// A network namespace with a veth pair to the host namespace, removed on drop.
struct Partitionable {
    netns: String,
    host_if: String,
    host_ip: String,
    node_ip: String,
}

impl Partitionable {
    fn create() -> Result<Partitionable, String> {
        let pid = std::process::id();
        let net = Partitionable {
            netns: format!("drover-part-{pid}"),
            host_if: format!("dvh{}", pid % 1_000_000),
            host_ip: format!("10.{}.{}.1", 200 + pid % 50, (pid / 50) % 250),
            node_ip: format!("10.{}.{}.2", 200 + pid % 50, (pid / 50) % 250),
        };
        let node_if = format!("dvn{}", pid % 1_000_000);
        ip(&["netns", "add", &net.netns])?;
        ip(&["link", "add", &net.host_if, "type", "veth", "peer", "name", &node_if])?;
        ip(&["link", "set", &node_if, "netns", &net.netns])?;
        ip(&["addr", "add", &format!("{}/24", net.host_ip), "dev", &net.host_if])?;
        ip(&["link", "set", &net.host_if, "up"])?;
        ip(&["-n", &net.netns, "addr", "add", &format!("{}/24", net.node_ip), "dev", &node_if])?;
        ip(&["-n", &net.netns, "link", "set", &node_if, "up"])?;
        ip(&["-n", &net.netns, "link", "set", "lo", "up"])?;
        Ok(net)
    }

    /// Takes the host end of the link down (`up = false`) or up again.
    fn link(&self, up: bool) {
        ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }]).expect("setting the link");
    }
}

impl Drop for Partitionable {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.netns]);
    }
}

/// Whether a process is alive (not gone, not a zombie).
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
}

fn node_state(cluster: &Cluster, node: &str) -> String {
    let sinfo = cluster.ok("sinfo", &["-h", "-N", "-o", "%N %t"]);
    sinfo.lines().find_map(|l| l.strip_prefix(&format!("{node} "))).unwrap_or_default().trim().to_owned()
}

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn a_partitioned_node_fails_its_jobs_and_is_reconciled_when_it_returns() {
    drover_e2e::require_root("network namespaces");
    let net = Partitionable::create().unwrap_or_else(|e| panic!("cannot create a network namespace: {e}"));
    // ctld listens on the host end of the veth pair (n2, in the host namespace, reaches it there
    // too); short timeouts so the test waits seconds, not minutes.
    let port = std::net::TcpListener::bind(format!("{}:0", net.host_ip)).unwrap().local_addr().unwrap().port();
    let host_ip = net.host_ip.clone();
    let config = CONFIG.replace("node_timeout = 8", "node_timeout = 4");
    assert_ne!(config, CONFIG);
    let cluster = Cluster::start_prepared(&config, |home| {
        // `drover up` keeps the address of the home's file it finds (the port of a cluster that
        // already ran): here, the veth's.
        std::fs::create_dir_all(home).unwrap();
        std::fs::write(home.join("cluster.toml"), format!("[controller]\naddress = \"{host_ip}:{port}\"\n")).unwrap();
        Vec::new()
    });
    cluster.restart_node_with("n1", &["nsenter", &format!("--net=/run/netns/{}", net.netns)]);
    cluster.wait_for("n1 to register from its namespace", LONG, || {
        let shown = cluster.ok("scontrol", &["show", "node", "n1"]);
        (shown.contains(&format!("NodeAddr={}", net.node_ip)) && node_state(&cluster, "n1") == "idle").then_some(())
    });

    // Both jobs start on n1: n2 is held by a blocker until they run.
    let blocker = cluster.submit(None, "blocker.sh", "#!/bin/sh\nsleep 300\n", &["-w", "n2", "--exclusive"]);
    cluster.wait_state(blocker, "RUNNING", LONG);
    let script = "#!/bin/sh\n#SBATCH -o part-%j.out --open-mode=append\nrun=${SLURM_RESTART_COUNT:-0}\n\
                  echo run=$run host=$SLURMD_NODENAME\necho $$ > part-$SLURM_JOB_ID.$run.pid\n\
                  cat /proc/self/cgroup > part-$SLURM_JOB_ID.$run.cgroup\nexec sleep 300\n";
    let requeued = cluster.submit(None, "a.sh", script, &["--requeue"]);
    let fixed = cluster.submit(None, "b.sh", script, &["--no-requeue", "-w", "n1"]);
    let work = cluster.workdir(None);
    let file = |job: u32, run: u32, what: &str| -> PathBuf { work.join(format!("part-{job}.{run}.{what}")) };
    cluster.wait_for("both jobs running on n1", LONG, || {
        (file(requeued, 0, "cgroup").exists() && file(fixed, 0, "cgroup").exists()).then_some(())
    });
    for job in [requeued, fixed] {
        assert_eq!(cluster.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%N"]), "n1\n");
    }
    cluster.ok("scancel", &[&blocker.to_string()]);
    cluster.wait_state(blocker, "CANCELLED", LONG);
    let pid_of = |job: u32| -> i32 { std::fs::read_to_string(file(job, 0, "pid")).unwrap().trim().parse().unwrap() };
    let (stale_a, stale_b) = (pid_of(requeued), pid_of(fixed));

    // Cut the link: n1 keeps running both jobs, but ctld hears nothing.
    let cut_at = Instant::now();
    net.link(false);
    cluster.wait_state(fixed, "NODE_FAIL", Duration::from_secs(30));
    let detected = cut_at.elapsed();
    assert!(detected >= Duration::from_secs(4), "n1 declared down after {detected:?}, before node_timeout");
    assert!(node_state(&cluster, "n1").starts_with("down"), "{}", node_state(&cluster, "n1"));
    // The requeued job runs again on n2, as run 1, while its run 0 still runs on the cut-off n1.
    cluster.wait_for("the requeued job's run 1", LONG, || file(requeued, 1, "pid").exists().then_some(()));
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &requeued.to_string(), "-o", "%t %N"]), "R n2\n");
    let shown = cluster.ok("scontrol", &["show", "job", &requeued.to_string()]);
    assert!(shown.contains("Restarts=1 "), "{shown}");
    assert!(alive(stale_a) && alive(stale_b), "a partition must not kill the node's jobs");
    let output = std::fs::read_to_string(work.join(format!("part-{requeued}.out"))).unwrap();
    assert!(output.contains("run=0 host=n1\n") && output.contains("run=1 host=n2\n"), "{output}");

    // Restore the link: n1 registers again, its stale runs die, it comes back idle.
    net.link(true);
    let restored_at = Instant::now();
    cluster.wait_for("the stale runs to be killed", LONG, || (!alive(stale_a) && !alive(stale_b)).then_some(()));
    cluster.wait_for("n1 to return idle", LONG, || (node_state(&cluster, "n1") == "idle").then_some(()));
    eprintln!(
        "n1 declared down {detected:?} after the cut; stale runs killed and n1 idle {:?} after the link came back",
        restored_at.elapsed()
    );
    let jobs_dir = cluster.home().join("noded-n1").join("jobs");
    cluster.wait_for("n1's stale job directories to go", LONG, || {
        std::fs::read_dir(&jobs_dir).unwrap().next().is_none().then_some(())
    });
    for job in [requeued, fixed] {
        let recorded = std::fs::read_to_string(file(job, 0, "cgroup")).unwrap();
        if recorded.contains(&format!("/job_{job}/")) {
            let left = cgroups_left(&recorded, "step_batch");
            assert!(left.is_empty(), "job {job}'s stale cgroups are left: {left:?}");
        }
    }
    // The requeued job runs on, undisturbed; sacct -D shows its failed run.
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &requeued.to_string(), "-o", "%t %N"]), "R n2\n");
    let all = cluster
        .ok("sacct", &["-D", "-X", "-P", "-n", "-o", "JobID,State,NodeList", "-j", &format!("{requeued},{fixed}")]);
    assert_eq!(all, format!("{requeued}|NODE_FAIL|n1\n{requeued}|RUNNING|n2\n{fixed}|NODE_FAIL|n1\n"));
    // n1 takes work again.
    let next = cluster.submit(None, "after.sh", "#!/bin/sh\ntrue\n", &["-w", "n1"]);
    assert_eq!(cluster.wait_state(next, "COMPLETED", LONG), "0:0");
}
