//! A node's real hardware (issue 29): `drover-noded -C` prints this host's CPUs, topology and
//! memory as Slurm's `slurmd -C` does and as a `[[nodes]]` table; a node declared with more CPUs
//! or memory than its host has is drained at registration with Slurm's reason, and a job that
//! only it could hold waits instead of being placed there; with `config_overrides` the
//! declaration wins.

use drover_e2e::{Cluster, bin_dir, require_users, text};
use std::time::Duration;

/// One node declared far beyond any test machine (4,096 CPUs, 64 TiB), one well within.
const CONFIG: &str = r#"
cluster_name = "hardware"
default_account = "shared"

[controller]
address = "127.0.0.1:0"
state_dir = "state"
config_overrides = false

[[nodes]]
names = "big"
cpus = 4096
real_memory = 67108864

[[nodes]]
names = "small"
cpus = 1
real_memory = 100

[[partitions]]
name = "main"
nodes = "big,small"
default = true

[[accounts]]
name = "shared"

[[users]]
name = "alice"
default_account = "shared"
"#;

fn online_cpus() -> u32 {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    online
        .trim()
        .split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => b.parse::<u32>().unwrap() - a.parse::<u32>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_node_with_less_hardware_than_declared_is_drained_with_slurms_reason() {
    require_users();
    // `drover-noded -C`, as an admin runs it on a new node.
    let out = std::process::Command::new(bin_dir().join("drover-noded")).args(["-C", "--name", "n7"]).output().unwrap();
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}{}", text(&out.stderr));
    let cpus = online_cpus();
    assert!(shown.starts_with(&format!("NodeName=n7 CPUs={cpus} Boards=1 SocketsPerBoard=")), "{shown}");
    assert!(
        shown.contains(" RealMemory=") && shown.lines().nth(1).is_some_and(|l| l.starts_with("UpTime=")),
        "{shown}"
    );
    assert!(shown.contains(&format!("[[nodes]]\nnames = \"n7\"\ncpus = {cpus}\nreal_memory = ")), "{shown}");

    let cluster = Cluster::start_with(CONFIG);
    let reason = format!("Low socket*core*thread count, Low CPUs (reported:{cpus} < configured:4096)");
    let reasons = cluster.wait_for("the big node to be drained", Duration::from_secs(30), || {
        let out = cluster.ok("sinfo", &["-h", "-R", "-o", "%N|%E|%u"]);
        out.contains("big|").then_some(out)
    });
    assert_eq!(reasons.trim(), format!("big|{reason}|root"), "{reasons}");
    let nodes = cluster.ok("sinfo", &["-h", "-N", "-o", "%N %t"]);
    assert!(nodes.contains("big drain") && nodes.contains("small idle"), "{nodes}");
    // A job only the big node could hold waits; it is never placed there.
    let alice = cluster.workdir(Some("alice"));
    let out = cluster.run(
        Some("alice"),
        &alice,
        "sbatch",
        &["--parsable", "-c", "16", "--mem", "100G", "--wrap", "true"],
        None,
    );
    let job = text(&out.stdout).trim().to_owned();
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::thread::sleep(Duration::from_secs(3));
    let state = cluster.ok("squeue", &["-h", "-j", &job, "-o", "%T %N"]);
    assert_eq!(state.trim(), "PENDING", "the job was placed on a node without the hardware: {state}");

    // With the declaration winning, the same node registers without a word.
    drop(cluster);
    let cluster = Cluster::start_with(&CONFIG.replace("config_overrides = false", "config_overrides = true"));
    cluster.wait_for("both nodes idle", Duration::from_secs(30), || {
        let nodes = cluster.ok("sinfo", &["-h", "-N", "-o", "%N %t"]);
        (nodes.contains("big idle") && nodes.contains("small idle")).then_some(())
    });
    assert_eq!(cluster.ok("sinfo", &["-h", "-R"]).trim(), "", "a drain with config_overrides");
}
