//! A `drover up` cluster as an admin and its users live with it: the admin's config file is the
//! only source (edits reach the running cluster through `scontrol reconfigure` or `drover up`,
//! which keep its port, key and jobs, also when the home's own file was deleted; what cannot
//! change live is named; relative paths resolve beside the admin's file), and commands find
//! their cluster with no variables at all: from the path of the `bin/` link they were run
//! through, or, on a node without ctld's socket, through the token socket the config names.
//! And an installed cluster of three hosts, set up as `docs/admin/install.md` says.

use drover_e2e::hosts::{Hosts, ok};
use drover_e2e::{CONFIG, Cluster, bin_dir, require_users, text};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

/// Runs `program` as `user` (root when `None`) in `cwd` with nothing in its environment but
/// `PATH` (as cron, sudo and batchspawner run commands).
fn bare(user: Option<&str>, cwd: &Path, path: &str, program: &Path, args: &[&str]) -> Output {
    let mut command = match user {
        Some(user) => {
            let mut c = Command::new("setpriv");
            c.args([&format!("--reuid={user}"), &format!("--regid={user}"), "--init-groups", "--", "env", "-i"]);
            c
        }
        None => {
            let mut c = Command::new("env");
            c.arg("-i");
            c
        }
    };
    command.arg(format!("PATH={path}")).arg(program).args(args).current_dir(cwd);
    command.output().expect("running the command")
}

/// Replaces `from` by `to` in the admin's file.
fn edit(cluster: &Cluster, from: &str, to: &str) {
    let file = cluster.config_file();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(from), "{from:?} is not in {}:\n{text}", file.display());
    std::fs::write(&file, text.replacen(from, to, 1)).unwrap();
}

fn time_limit(cluster: &Cluster) -> String {
    cluster.ok("sinfo", &["-h", "-p", "main", "-o", "%l"]).trim().to_owned()
}

#[test]
fn edits_to_the_admins_file_reach_the_running_cluster() {
    let cluster = Cluster::start();
    let file = cluster.config_file();
    let address = cluster.node_address();
    let key = std::fs::read(cluster.home().join("cluster.key")).unwrap();
    let held = cluster.submit(None, "held.sh", "#!/bin/sh\ntrue\n", &["--hold"]).to_string();
    assert_eq!(time_limit(&cluster), "1-00:00:00");

    // scontrol reconfigure applies an edit.
    edit(&cluster, "max_time = \"1-00:00:00\"", "max_time = \"2-00:00:00\"");
    assert_eq!(cluster.ok("scontrol", &["reconfigure"]), "");
    assert_eq!(time_limit(&cluster), "2-00:00:00");

    // So does `drover up` again. sacctmgr shows what ctld runs: not the new account while only
    // the file has it, the new account once ctld runs with it.
    edit(&cluster, "max_time = \"2-00:00:00\"", "max_time = \"3-00:00:00\"");
    edit(
        &cluster,
        "[[accounts]]\nname = \"shared\"\n",
        "[[accounts]]\nname = \"shared\"\n\n[[accounts]]\nname = \"physics\"\n",
    );
    let accounts = cluster.ok("sacctmgr", &["-n", "-P", "show", "account", "format=Account"]);
    assert!(!accounts.lines().any(|l| l == "physics"), "sacctmgr shows the file, not what ctld runs:\n{accounts}");
    let up = cluster.drover("up");
    assert!(up.status.success(), "{}{}", text(&up.stdout), text(&up.stderr));
    assert!(text(&up.stdout).contains(&format!("ctld reconfigured from {}\n", file.display())), "{}", text(&up.stdout));
    assert_eq!(time_limit(&cluster), "3-00:00:00");
    assert!(cluster.ok("sacctmgr", &["-n", "-P", "show", "account", "format=Account"]).lines().any(|l| l == "physics"));
    // The running cluster's port, key and jobs stay.
    assert_eq!(cluster.node_address(), address);
    assert_eq!(std::fs::read(cluster.home().join("cluster.key")).unwrap(), key);
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &held, "-o", "%T"]).trim(), "PENDING");
    assert_eq!(cluster.ok("sinfo", &["-h", "-p", "main", "-o", "%D %t"]).trim(), "2 idle");

    // Without the home's own file, reconfigure still reads the admin's file, and `drover up`
    // writes the home's file again with the port ctld listens on.
    std::fs::remove_file(cluster.home().join("cluster.toml")).unwrap();
    edit(&cluster, "max_time = \"3-00:00:00\"", "max_time = \"4-00:00:00\"");
    assert_eq!(cluster.ok("scontrol", &["reconfigure"]), "");
    assert_eq!(time_limit(&cluster), "4-00:00:00");
    let up = Command::new(bin_dir().join("drover"))
        .args(["up", "--home"])
        .arg(cluster.home())
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}{}", text(&up.stdout), text(&up.stderr));
    assert_eq!(cluster.node_address(), address);

    // What cannot change while ctld runs is named, and nothing changes.
    edit(&cluster, "cluster_name = \"testcluster\"", "cluster_name = \"renamed\"");
    edit(&cluster, "max_time = \"4-00:00:00\"", "max_time = \"5-00:00:00\"");
    let out = cluster.run(None, &cluster.workdir(None), "scontrol", &["reconfigure"], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "slurm_reconfigure error: Invalid configuration file\n{}: cluster_name cannot change without restarting ctld\n",
            file.display()
        )
    );
    let up = cluster.drover("up");
    assert_eq!(up.status.code(), Some(1));
    assert!(
        text(&up.stderr).contains(&format!("{}: cluster_name cannot change without restarting ctld", file.display())),
        "{}",
        text(&up.stderr)
    );
    assert_eq!(time_limit(&cluster), "4-00:00:00");

    // A file that does not load: `drover up` and `drover status` say where, once; the cluster
    // runs on.
    std::fs::write(&file, "cluster_name =\n").unwrap();
    for verb in ["up", "status"] {
        let out = cluster.drover(verb);
        assert_eq!(out.status.code(), Some(1), "drover {verb}");
        let stderr = text(&out.stderr);
        assert!(stderr.starts_with(&format!("drover: error: {}:1:", file.display())), "drover {verb}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "drover {verb}: {stderr}");
    }
    assert_eq!(time_limit(&cluster), "4-00:00:00");
}

#[test]
fn relative_paths_resolve_beside_the_admins_file() {
    let node_settings = "gpus = { tesla = 2 }\nprolog = \"prolog.sh\"";
    let cluster = Cluster::start_prepared(&CONFIG.replace("gpus = { tesla = 2 }", node_settings), |home| {
        let beside = home.parent().unwrap();
        let prolog = beside.join("prolog.sh");
        let record = beside.join("prolog.ran");
        std::fs::write(&prolog, format!("#!/bin/sh\necho \"$SLURM_JOB_ID\" >> {}\n", record.display())).unwrap();
        std::fs::set_permissions(&prolog, std::fs::Permissions::from_mode(0o755)).unwrap();
        Vec::new()
    });
    let job = cluster.submit(None, "job.sh", "#!/bin/sh\ntrue\n", &[]);
    cluster.wait_state(job, "COMPLETED", LONG);
    let ran = std::fs::read_to_string(cluster.scratch().join("prolog.ran")).unwrap_or_default();
    assert_eq!(ran, format!("{job}\n"), "the prolog beside the admin's file did not run\n{}", cluster.logs());

    // `plugstack.conf` beside the admin's file is the plugin stack (here one that cannot load).
    let plugstack = cluster.scratch().join("plugstack.conf");
    std::fs::write(&plugstack, "required /nonexistent/e2e-plugin.so\n").unwrap();
    let out = cluster.run(None, &cluster.workdir(None), "sbatch", &["--wrap", "true"], None);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("/nonexistent/e2e-plugin.so"), "{}", text(&out.stderr));
}

#[test]
fn commands_run_through_the_homes_links_need_no_environment() {
    let cluster = Cluster::start();
    let bin = cluster.home().join("bin");
    let work = cluster.workdir(None);
    let out = bare(None, &work, "/usr/bin:/bin", &bin.join("sbatch"), &["--parsable", "--wrap", "echo hello"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let job: u32 = text(&out.stdout).trim().parse().unwrap();
    cluster.wait_state(job, "COMPLETED", LONG);
    assert_eq!(std::fs::read_to_string(work.join(format!("slurm-{job}.out"))).unwrap(), "hello\n");
    let out = bare(
        None,
        &work,
        "/usr/bin:/bin",
        &bin.join("sacct"),
        &["-X", "-n", "-P", "-o", "State", "-j", &job.to_string()],
    );
    assert_eq!(text(&out.stdout), "COMPLETED\n", "{}", text(&out.stderr));
    // Found on PATH, as a shell finds it.
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = bare(None, &work, &path, Path::new("squeue"), &["-h", "-o", "%i", "-t", "all", "-j", &job.to_string()]);
    assert_eq!(text(&out.stdout).trim(), job.to_string(), "{}", text(&out.stderr));
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_users_commands_find_the_cluster_without_environment() {
    require_users();
    let cluster = Cluster::start();
    let bin = cluster.home().join("bin");
    let work = cluster.workdir(Some("alice"));
    let out = bare(Some("alice"), &work, "/usr/bin:/bin", &bin.join("sbatch"), &["--parsable", "--wrap", "id -un"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let job: u32 = text(&out.stdout).trim().parse().unwrap();
    cluster.wait_state(job, "COMPLETED", LONG);
    assert_eq!(std::fs::read_to_string(work.join(format!("slurm-{job}.out"))).unwrap(), "alice\n");
    let out = bare(Some("alice"), &work, "/usr/bin:/bin", &bin.join("squeue"), &["-h", "-t", "all", "-o", "%i %u"]);
    assert_eq!(text(&out.stdout).trim(), format!("{job} alice"), "{}", text(&out.stderr));
}

/// A host without ctld's socket (a compute node): the config's `token_socket` names noded's
/// token socket, and commands use it with no variable naming it.
#[test]
fn a_node_without_ctlds_socket_finds_the_token_socket_in_its_config() {
    let cluster = Cluster::start();
    let token_socket = cluster.home().join("noded-n1").join("token.sock");
    let node_config = format!("token_socket = \"{}\"\n{CONFIG}", token_socket.display())
        .replace("127.0.0.1:0", &cluster.node_address())
        .replace("state_dir = \"state\"", "state_dir = \"/nonexistent/drover-state\"");
    let conf = cluster.scratch().join("node.toml");
    std::fs::write(&conf, node_config).unwrap();
    let work = cluster.workdir(None);
    let drover = bin_dir().join("drover");
    let out = Command::new("env")
        .args(["-i", "PATH=/usr/bin:/bin"])
        .arg(format!("DROVER_CONF={}", conf.display()))
        .arg(&drover)
        .args(["sbatch", "--parsable", "--hold", "--wrap", "true"])
        .current_dir(&work)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let job = text(&out.stdout).trim().to_owned();
    let audit = cluster.ok("drover", &["audit", "-P", "-n", "--job", &job, "--action", "submit"]);
    assert!(audit.lines().any(|l| l.split('|').nth(3) == Some("host:n1")), "{audit}");
}

/// `drover up` where there is no config (outside the repository): one line naming the file, and
/// no half-made home left behind.
#[test]
fn up_without_a_config_says_so_once_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin_dir().join("drover"))
        .arg("up")
        .current_dir(dir.path())
        .env_remove("DROVER_HOME")
        .env_remove("DROVER_CONF")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let file = dir.path().canonicalize().unwrap().join("etc/cluster.toml");
    assert_eq!(text(&out.stderr), format!("drover: error: {}: No such file or directory\n", file.display()));
    assert!(!dir.path().join(".drover").exists());
}

/// A user who is not root runs a cluster: `drover up` says its jobs run without cgroups, and the
/// user administers it (reconfigure) with the commands in its `bin/`, no variables needed.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn an_unprivileged_up_warns_about_cgroups_and_its_user_administers_it() {
    require_users();
    let dir = tempfile::Builder::new().prefix("drover-e2e-user-").tempdir_in("/tmp").unwrap();
    let alice = nix::unistd::User::from_name("alice").unwrap().unwrap();
    nix::unistd::chown(dir.path(), Some(alice.uid), Some(alice.gid)).unwrap();
    let source = dir.path().join("cluster.toml");
    std::fs::write(&source, CONFIG.replace("127.0.0.1:0", "127.0.0.1:1")).unwrap();
    let home = dir.path().join("home");
    let as_alice = |program: &Path, args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=alice", "--regid=alice", "--init-groups", "--", "env", "-i", "PATH=/usr/bin:/bin"])
            .arg(program)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    /// Stops alice's cluster however the test ends.
    struct Down<'a>(&'a dyn Fn(&Path, &[&str]) -> Output, std::path::PathBuf);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = (self.0)(&self.1.join("bin").join("drover"), &["down", "--home", &self.1.to_string_lossy()]);
        }
    }
    let home_arg = home.to_string_lossy().into_owned();
    let source_arg = source.to_string_lossy().into_owned();
    let up = as_alice(&bin_dir().join("drover"), &["up", "--home", &home_arg, "--config", &source_arg]);
    let _down = Down(&as_alice, home.clone());
    assert!(up.status.success(), "{}{}", text(&up.stdout), text(&up.stderr));
    assert!(text(&up.stdout).contains("not running as root: jobs will run without cgroups"), "{}", text(&up.stdout));
    let out = as_alice(&home.join("bin").join("scontrol"), &["reconfigure"]);
    assert!(out.status.success(), "alice administers her cluster: {}", text(&out.stderr));
}

/// The users' work directory on every host (the scratch directory is shared, as a cluster
/// shares /home), owned by `user`.
fn shared_workdir(hosts: &Hosts, user: &str) -> std::path::PathBuf {
    let dir = hosts.scratch().join(format!("work-{user}"));
    std::fs::create_dir_all(&dir).unwrap();
    let owner = nix::unistd::User::from_name(user).unwrap().expect("the user exists");
    nix::unistd::chown(&dir, Some(owner.uid), Some(owner.gid)).unwrap();
    dir
}

/// docs/admin/install.md followed on three hosts (network, host name and mount namespaces, see
/// `drover_e2e::hosts`): `drover install --root` with the admin's config on the controller,
/// then with the same config and the controller's key on each compute node; the units'
/// command lines started as their `User=`; jobs and steps across both nodes, submitted from
/// the compute nodes by users whose environment holds only `PATH` and `HOME`, through the
/// nodes' token sockets.
#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn an_installed_three_host_cluster_runs_jobs_and_steps_across_its_nodes() {
    require_users();
    let service = nix::unistd::User::from_name("drover").unwrap();
    let service = service.expect("this test runs ctld as the `drover` system user (.ci/run creates it)");
    let mut hosts = Hosts::create(&["ctl", "n1", "n2"]).unwrap_or_else(|e| panic!("cannot create the hosts: {e}"));
    let controller = format!("{}:6817", hosts.host("ctl").ip);
    let config =
        CONFIG.replace("127.0.0.1:0", &controller).replace("state_dir = \"state\"", "state_dir = \"/var/lib/drover\"");
    // The hosts are namespaces of this one machine: the nodes' declaration (4 CPUs each) wins
    // over its real hardware (`config_overrides`, else they would drain as `Low CPUs`).
    let config = config.replace("[controller]\n", "[controller]\nconfig_overrides = true\n");
    let admin_file = hosts.scratch().join("cluster.toml");
    std::fs::write(&admin_file, &config).unwrap();
    let install = |root: &Path, extra: &[&Path]| {
        let mut command = Command::new(bin_dir().join("drover"));
        command.arg("install").arg("--root").arg(root).arg("--config").arg(&admin_file);
        if let [key] = extra {
            command.arg("--key").arg(key);
        }
        ok(&mut command)
    };

    // The controller: the admin's config; a key is generated, owned by the service user.
    let ctl_root = hosts.host("ctl").root.clone();
    let first = install(&ctl_root, &[]);
    assert!(first.contains("generated ") && first.contains("installed "), "{first}");
    let again = install(&ctl_root, &[]);
    assert!(!again.lines().any(|l| l.starts_with("installed /") || l.starts_with("generated")), "{again}");
    let key = ctl_root.join("etc/drover/cluster.key");
    let meta = std::fs::metadata(&key).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (service.uid.as_raw(), 0o600));
    assert_eq!(std::fs::metadata(ctl_root.join("var/lib/drover")).unwrap().uid(), service.uid.as_raw());
    // Each compute node: the same config and the controller's key.
    for node in ["n1", "n2"] {
        install(&hosts.host(node).root.clone(), &[&key]);
        let copy = hosts.host(node).root.join("etc/drover/cluster.key");
        assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(&key).unwrap());
        // A compute node runs no ctld: only root (noded) reads its key.
        let meta = std::fs::metadata(&copy).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600), "{node}'s key");
    }
    hosts.boot();

    // The installed units, checked where their binaries are installed.
    let units = ctl_root.join("etc/systemd/system");
    ok(hosts
        .host("ctl")
        .command("systemd-analyze")
        .arg("verify")
        .arg(units.join("drover-ctld.service"))
        .arg(units.join("drover-noded.service")));

    hosts.host_mut("ctl").start_unit("drover-ctld");
    hosts.host_mut("n1").start_unit("drover-noded");
    hosts.host_mut("n2").start_unit("drover-noded");
    let ctl = hosts.host("ctl");
    hosts.wait_for("both nodes to register with ctld", LONG, || {
        let out = ctl.command("sinfo").args(["-h", "-N", "-p", "main", "-o", "%N %t"]).output().unwrap();
        (text(&out.stdout) == "n1 idle\nn2 idle\n").then_some(())
    });
    // Once it answers, the unit's command line has become ctld, as its `User=`.
    let status = std::fs::read_to_string(format!("/proc/{}/status", ctl.pid("drover-ctld"))).unwrap();
    let uid =
        status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap().split_whitespace().nth(1).unwrap().to_owned();
    assert_eq!(uid, service.uid.to_string(), "ctld runs as the service user");
    for node in ["n1", "n2"] {
        let shown = ok(ctl.command("scontrol").args(["show", "node", node]));
        assert!(shown.contains(&format!("NodeAddr={}:", hosts.host(node).ip)), "{shown}");
    }

    // alice, logged in on n1: a two-node batch job whose step runs a task on each host.
    let n1 = hosts.host("n1");
    let n2 = hosts.host("n2");
    let alice = shared_workdir(&hosts, "alice");
    let script = "#!/bin/sh\n#SBATCH -N 2 -n 2 -o multi-%j.out\nsrun -l hostname\n";
    std::fs::write(alice.join("multi.sh"), script).unwrap();
    let out = ok(n1.as_user("alice", &alice, "sbatch").args(["--parsable", "multi.sh"]));
    let job = out.trim().to_owned();
    let sacct = |host: &drover_e2e::hosts::Host, user: Option<&str>, args: &[&str]| {
        let mut command = match user {
            Some(user) => host.as_user(user, &alice, "sacct"),
            None => host.command("sacct"),
        };
        text(&command.args(args).output().unwrap().stdout)
    };
    let ended = hosts.wait_for("the two-node job to end", LONG, || {
        let shown = sacct(ctl, None, &["-X", "-n", "-P", "-o", "State,ExitCode,NodeList", "-j", &job]);
        (!shown.is_empty() && !shown.starts_with("PENDING") && !shown.starts_with("RUNNING")).then_some(shown)
    });
    let output = std::fs::read_to_string(alice.join(format!("multi-{job}.out"))).unwrap_or_default();
    assert_eq!(ended, "COMPLETED|0:0|n[1-2]\n", "{output}\n{}", hosts.logs());
    let mut lines: Vec<&str> = output.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["0: n1", "1: n2"], "{output}");
    // Asked from n2, through its token socket: the job and its step, as alice sees them.
    let steps = sacct(n2, Some("alice"), &["-n", "-P", "-o", "JobID,User,State", "-j", &job]);
    assert!(steps.lines().any(|l| l == format!("{job}.0||COMPLETED")), "{steps}");
    assert!(steps.lines().any(|l| l == format!("{job}|alice|COMPLETED")), "{steps}");

    // bob, logged in on n2: srun allocates both nodes and runs there, interactively.
    let bob = shared_workdir(&hosts, "bob");
    let out = n2.as_user("bob", &bob, "srun").args(["-N", "2", "-n", "2", "-l", "hostname"]).output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}{}\n{}", text(&out.stdout), text(&out.stderr), hosts.logs());
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    lines.sort_unstable();
    assert_eq!(lines, ["0: n1", "1: n2"]);

    // sacctmgr on a compute node: what ctld runs, through the token socket.
    let alice_account = ok(n1
        .as_user("alice", &alice, "sacctmgr")
        .args(["-n", "-P", "show", "user", "alice"])
        .arg("format=DefaultAccount"));
    assert_eq!(alice_account, "vision\n");

    // ctld knows where each request came from: alice's submission from n1's token socket.
    let audit = ok(ctl.command("drover").args(["audit", "-P", "-n", "--job", &job, "--action", "submit"]));
    assert!(audit.lines().any(|l| l.split('|').nth(3) == Some("host:n1")), "{audit}");
}

/// `drover install --root` lays out an installed system and is safe to run again: the second
/// run replaces nothing, the admin's edits to the config stay, `--config` replaces the config
/// only with a file that loads (a broken one changes nothing, naming file, line and column).
#[test]
fn install_lays_out_a_host_and_runs_again_without_changing_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let install = |args: &[&str]| {
        Command::new(bin_dir().join("drover")).arg("install").arg("--root").arg(&root).args(args).output().unwrap()
    };
    let out = install(&["--prefix", "/opt/drover"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let mode = |path: &str| std::fs::metadata(root.join(path)).unwrap().mode() & 0o7777;
    assert_eq!(mode("opt/drover/bin/drover"), 0o755);
    assert_eq!(mode("opt/drover/sbin/drover-ctld"), 0o755);
    assert_eq!(mode("opt/drover/sbin/drover-noded"), 0o755);
    assert_eq!(std::fs::read_link(root.join("opt/drover/bin/sbatch")).unwrap(), Path::new("drover"));
    assert_eq!(mode("etc/drover/cluster.key"), 0o600);
    assert_eq!(mode("etc/drover/cluster.toml"), 0o644);
    for state in ["var/lib/drover", "var/spool/drover"] {
        assert_eq!(mode(state), 0o755, "{state}");
    }
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/drover-noded.service")).unwrap();
    assert!(unit.contains("\nExecStart=/opt/drover/sbin/drover-noded --config /etc/drover/cluster.toml"), "{unit}");
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/drover-ctld.service")).unwrap();
    assert!(unit.contains("\nExecReload=+/opt/drover/bin/scontrol reconfigure\n"), "{unit}");
    // The starter config is the commented example, and it loads.
    let config = root.join("etc/drover/cluster.toml");
    drover_shared::config::Config::load(&config).unwrap();
    let key = std::fs::read(root.join("etc/drover/cluster.key")).unwrap();

    // Again, after the admin edited the config: nothing replaced, the edit kept.
    let edited =
        std::fs::read_to_string(&config).unwrap().replace("cluster_name = \"drover\"", "cluster_name = \"lab\"");
    std::fs::write(&config, &edited).unwrap();
    let out = install(&["--prefix", "/opt/drover"]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(!said.lines().any(|l| l.starts_with("installed /") || l.starts_with("generated")), "{said}");
    assert!(said.contains(&format!("kept {}", config.display())), "{said}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    assert_eq!(std::fs::read(root.join("etc/drover/cluster.key")).unwrap(), key);

    // A --config that does not load: refused before anything is written.
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "cluster_name =\n").unwrap();
    let out = install(&["--config", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with(&format!("drover: error: {}:1:", broken.display())), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    assert!(!root.join("usr").exists(), "the refused install wrote its binaries");
}

/// `drover install` on a host whose config lists `[[controller.replicas]]` (docs/admin/ha.md):
/// run on the host whose address replica 1 has, it writes the drop-in
/// `drover-ctld.service.d/replica.conf` (`--replica 1`, `Restart=always`), which
/// `systemd-analyze verify` reads with the unit; `--replica N` names another (a state directory
/// outside /var/lib/drover made writable), an id the config lacks is refused, and a config
/// without replicas removes the drop-in.
#[test]
#[ignore = "needs root (network namespaces); .ci/run runs it"]
fn install_writes_the_drop_in_of_the_replica_this_host_runs() {
    drover_e2e::require_root("this test makes a host in network and mount namespaces");
    let mut hosts = Hosts::create(&["ctl"]).unwrap_or_else(|e| panic!("cannot create the hosts: {e}"));
    let ip = hosts.host("ctl").ip.clone();
    let mut config = CONFIG
        .replace("127.0.0.1:0", &format!("{ip}:6817"))
        .replace("state_dir = \"state\"", "state_dir = \"/var/lib/drover\"");
    for (id, address, state_dir) in [
        (1, ip.as_str(), "/var/lib/drover/r1"),
        (2, "192.0.2.2", "/srv/drover/r2"),
        (3, "192.0.2.3", "/var/lib/drover/r3"),
    ] {
        config += &format!(
            "\n[[controller.replicas]]\nid = {id}\naddress = \"{address}:6817\"\nraft_address = \"{address}:6827\"\n\
             state_dir = \"{state_dir}\"\n"
        );
    }
    let admin_file = hosts.scratch().join("cluster.toml");
    std::fs::write(&admin_file, &config).unwrap();
    let root = hosts.host("ctl").root.clone();
    // On the host's network, as `drover install` runs on the host itself.
    let prefix = hosts.host("ctl").net_prefix();
    let install = |args: &[&str]| {
        let mut command = Command::new(&prefix[0]);
        command.args(&prefix[1..]).arg(bin_dir().join("drover")).arg("install").arg("--root").arg(&root).args(args);
        command.output().unwrap()
    };
    let out = install(&["--config", admin_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let drop_in = root.join("etc/systemd/system/drover-ctld.service.d/replica.conf");
    let written = std::fs::read_to_string(&drop_in).unwrap();
    assert!(
        written.contains(
            "\n[Service]\nExecStart=\nExecStart=/usr/local/sbin/drover-ctld --config /etc/drover/cluster.toml \
             --replica 1\nRestart=always\n"
        ),
        "{written}"
    );
    assert!(written.contains("\n[Unit]\n") && !written.contains("ReadWritePaths"), "{written}");
    assert!(root.join("var/lib/drover/r1").is_dir());
    hosts.boot();
    // The unit with its drop-in (systemd-analyze reads drop-in folders beside a unit it verifies).
    let verify = hosts
        .host("ctl")
        .command("systemd-analyze")
        .arg("verify")
        .arg(root.join("etc/systemd/system/drover-ctld.service"))
        .output()
        .unwrap();
    let said = format!("{}{}", text(&verify.stdout), text(&verify.stderr));
    assert!(verify.status.success() && !said.contains("replica.conf"), "{said}");

    // Another replica named explicitly: its state directory is outside the unit's.
    let out = install(&["--replica", "2"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let written = std::fs::read_to_string(&drop_in).unwrap();
    assert!(written.contains(" --replica 2\nRestart=always\nReadWritePaths=/srv/drover/r2\n"), "{written}");
    assert!(root.join("srv/drover/r2").is_dir());
    let out = install(&["--replica", "5"]);
    assert!(!out.status.success());
    assert_eq!(text(&out.stderr), "drover: error: --replica 5: the config's [[controller.replicas]] are 1, 2, 3\n");
    // Back to one controller: the drop-in goes.
    let single = hosts.scratch().join("single.toml");
    std::fs::write(&single, CONFIG.replace("127.0.0.1:0", &format!("{ip}:6817"))).unwrap();
    let out = install(&["--config", single.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("removed ") && !drop_in.exists(), "{}", text(&out.stdout));
}
