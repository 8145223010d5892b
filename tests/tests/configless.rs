//! Configless hosts (issue 29, docs/admin/configless.md): three hosts (network, host name and
//! mount namespaces, `drover_e2e::hosts`) where only the controller has `cluster.toml`. The
//! compute node and the login host are set up with `drover install --conf-server … --key …`
//! (the key is the one file placed by hand); their noded fetches the config from ctld, keeps a
//! copy, and the hosts' commands, run by plain users with nothing in their environment, read
//! it. A reconfigure reaches both copies without a restart; a compute node whose noded
//! restarts while the controller is down runs on its copy and registers when ctld is back.

use drover_e2e::hosts::{Hosts, ok};
use drover_e2e::{CONFIG, bin_dir, require_users, text};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// The users' work directory, shared by every host as /home would be.
fn workdir(hosts: &Hosts, user: &str) -> PathBuf {
    let dir = hosts.scratch().join(format!("work-{user}"));
    std::fs::create_dir_all(&dir).unwrap();
    let owner = nix::unistd::User::from_name(user).unwrap().expect("the user exists");
    nix::unistd::chown(&dir, Some(owner.uid), Some(owner.gid)).unwrap();
    dir
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn nodes_and_login_hosts_take_the_config_from_the_controller_and_follow_its_changes() {
    require_users();
    nix::unistd::User::from_name("drover").unwrap().expect("ctld runs as the `drover` user (.ci/run creates it)");
    let mut hosts = Hosts::create(&["ctl", "n1", "login"]).unwrap_or_else(|e| panic!("cannot create the hosts: {e}"));
    let controller = format!("{}:6817", hosts.host("ctl").ip);
    // One compute node (n2 stays declared and never comes); the hosts share one machine, so the
    // node's declaration wins over its real hardware.
    let config = CONFIG
        .replace("127.0.0.1:0", &controller)
        .replace("state_dir = \"state\"", "state_dir = \"/var/lib/drover\"")
        .replace("[controller]\n", "[controller]\nconfig_overrides = true\nlogin_hosts = [\"login\"]\n");
    let admin_file = hosts.scratch().join("cluster.toml");
    std::fs::write(&admin_file, &config).unwrap();
    let drover = || Command::new(bin_dir().join("drover"));
    let ctl_root = hosts.host("ctl").root.clone();
    ok(drover().arg("install").arg("--root").arg(&ctl_root).arg("--config").arg(&admin_file));
    let key = ctl_root.join("etc/drover/cluster.key");

    // A configless host refuses what would shadow the controller's config, and needs the key.
    let n1_root = hosts.host("n1").root.clone();
    let out =
        drover().arg("install").arg("--root").arg(&n1_root).args(["--conf-server", &controller]).output().unwrap();
    assert!(!out.status.success() && text(&out.stderr).contains("--key FILE"), "{}", text(&out.stderr));
    let out = drover()
        .arg("install")
        .arg("--root")
        .arg(&n1_root)
        .args(["--conf-server", &controller, "--config"])
        .arg(&admin_file)
        .output()
        .unwrap();
    assert!(!out.status.success() && text(&out.stderr).contains("configless"), "{}", text(&out.stderr));
    for (name, extra) in [("n1", None), ("login", Some("--login"))] {
        let root = hosts.host(name).root.clone();
        let mut command = drover();
        command.arg("install").arg("--root").arg(&root).arg("--key").arg(&key).args(["--conf-server", &controller]);
        command.args(extra);
        ok(&mut command);
        assert!(!root.join("etc/drover/cluster.toml").exists(), "{name} has no config of its own");
        let drop_in = std::fs::read_to_string(root.join("etc/systemd/system/drover-noded.service.d/configless.conf"));
        let drop_in = drop_in.unwrap();
        assert!(drop_in.contains(&format!("--conf-server {controller}")), "{drop_in}");
        assert_eq!(drop_in.contains("--login"), extra.is_some(), "{drop_in}");
    }
    hosts.boot();
    hosts.host_mut("ctl").start_unit("drover-ctld");
    hosts.host_mut("n1").start_unit("drover-noded");
    hosts.host_mut("login").start_unit("drover-noded");

    let (alice, bob) = (workdir(&hosts, "alice"), workdir(&hosts, "bob"));
    // bob, on the login host: his commands read the login host's copy and reach ctld through
    // its token socket.
    hosts.wait_for("n1 to register, as bob sees it from the login host", LONG, || {
        let out = hosts.host("login").as_user("bob", &bob, "sinfo").args(["-h", "-N", "-o", "%N %t"]).output();
        text(&out.unwrap().stdout).lines().any(|l| l == "n1 idle").then_some(())
    });
    let copy =
        |host: &str| std::fs::read_to_string(hosts.host(host).root.join("var/spool/drover/conf-cache/cluster.toml"));
    for host in ["n1", "login"] {
        assert_eq!(copy(host).unwrap(), config, "{host}'s copy is the controller's file");
    }

    // alice submits on the login host a job that runs on n1; on n1 she follows it with sacct.
    let out = ok(hosts.host("login").as_user("alice", &alice, "sbatch").args([
        "--parsable",
        "-w",
        "n1",
        "-o",
        "out-%j.txt",
        "--wrap",
        "hostname",
    ]));
    let job = out.trim().to_owned();
    let ended = hosts.wait_for("alice's job to end", LONG, || {
        let out = hosts
            .host("n1")
            .as_user("alice", &alice, "sacct")
            .args(["-X", "-n", "-P", "-o", "State", "-j", &job])
            .output()
            .unwrap();
        let shown = text(&out.stdout).trim().to_owned();
        (!shown.is_empty() && shown != "PENDING" && shown != "RUNNING").then_some(shown)
    });
    assert_eq!(ended, "COMPLETED", "{}", hosts.logs());
    assert_eq!(std::fs::read_to_string(alice.join(format!("out-{job}.txt"))).unwrap(), "n1\n");

    // A reconfigure on the controller reaches both copies without a restart: the node's at once
    // (ctld tells it), the login host's within its refresh period.
    let changed = config.replace("max_time = \"1-00:00:00\"", "max_time = \"12:00:00\"");
    assert_ne!(changed, config);
    std::fs::write(ctl_root.join("etc/drover/cluster.toml"), &changed).unwrap();
    let reconfigured = Instant::now();
    ok(hosts.host("ctl").command("scontrol").arg("reconfigure"));
    hosts.wait_for("n1's copy to follow the reconfigure", Duration::from_secs(10), || {
        copy("n1").is_ok_and(|text| text == changed).then_some(())
    });
    let node_delay = reconfigured.elapsed();
    hosts.wait_for("the login host's copy to follow the reconfigure", Duration::from_secs(30), || {
        copy("login").is_ok_and(|text| text == changed).then_some(())
    });
    eprintln!("copies updated after {node_delay:?} (node) and {:?} (login host)", reconfigured.elapsed());
    assert!(node_delay < Duration::from_secs(5), "the node's copy took {node_delay:?}");
    let limit = ok(hosts.host("login").as_user("bob", &bob, "sinfo").args(["-h", "-p", "main", "-o", "%l"]));
    assert_eq!(limit.trim(), "12:00:00");

    // The controller goes down; n1's noded restarts meanwhile and runs on its copy.
    hosts.host_mut("ctl").stop_daemon("drover-ctld");
    hosts.host_mut("n1").stop_daemon("drover-noded");
    hosts.host_mut("n1").start_unit("drover-noded");
    let log = hosts.host("n1").log("drover-noded");
    hosts.wait_for("n1's noded to start on its copy", LONG, || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("running with the copy")).then_some(())
    });
    hosts.host_mut("ctl").start_unit("drover-ctld");
    hosts.wait_for("n1 to register again", LONG, || {
        let out = hosts.host("ctl").command("sinfo").args(["-h", "-N", "-o", "%N %t"]).output().unwrap();
        text(&out.stdout).lines().any(|l| l == "n1 idle").then_some(())
    });
    let out =
        ok(hosts.host("n1").as_user("alice", &alice, "srun").args(["-w", "n1", "-t", "1", "cat", "/proc/self/cgroup"]));
    assert!(!out.is_empty());

    // A plain user cannot pass for the node: the key is root's alone on a configless host.
    let meta = std::fs::metadata(hosts.host("n1").root.join("etc/drover/cluster.key")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::mode(&meta) & 0o077, 0);
}
