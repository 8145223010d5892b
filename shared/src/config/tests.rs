//! Config loading: the shipped example loads, and each class of mistake is reported with its
//! line, column and key path.

use super::*;

fn check(text: &str) -> String {
    match Config::parse(Path::new("/etc/drover/cluster.toml"), text) {
        Ok(c) => format!("ok: {} nodes, {} partitions", c.nodes.len(), c.partitions.len()),
        Err(e) => e.to_string(),
    }
}

const BASE: &str = r#"
cluster_name = "c"
[controller]
address = "127.0.0.1:6817"
state_dir = "state"
[[nodes]]
names = "n[1-2]"
cpus = 2
real_memory = 1000
[[partitions]]
name = "main"
nodes = "n[1-2]"
default = true
"#;

#[test]
fn example_config_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../etc/cluster.toml");
    let config = Config::load(&path).unwrap();
    assert_eq!(config.nodes.len(), 2);
    assert_eq!(config.nodes[0].gpus.len(), 4);
    assert_eq!(config.default_partition().name, "shared");
    assert!(config.partitions.len() >= 3);
    assert!(config.accounts.len() >= 3);
    assert_eq!(config.key_file, path.parent().unwrap().join("cluster.key"));
    assert_eq!(config.plugstack, path.parent().unwrap().join("plugstack.conf"));
}

#[test]
fn client_connection_limits_have_defaults_and_floors() {
    let path = Path::new("/etc/drover/cluster.toml");
    let config = Config::parse(path, BASE).unwrap();
    assert_eq!((config.max_connections_per_user, config.client_idle_timeout), (64, 60));
    let set = BASE.replace("[controller]\n", "[controller]\nmax_connections_per_user = 8\nclient_idle_timeout = 0\n");
    let config = Config::parse(path, &set).unwrap();
    assert_eq!((config.max_connections_per_user, config.client_idle_timeout), (8, 1), "a timeout of 0 means 1 s");
}

#[test]
fn plugstack_is_relative_to_the_config_file() {
    let path = Path::new("/etc/drover/cluster.toml");
    let config = Config::parse(path, &format!("plugstack = \"spank/stack.conf\"\n{BASE}")).unwrap();
    assert_eq!(config.plugstack, Path::new("/etc/drover/spank/stack.conf"));
    let config = Config::parse(path, &format!("plugstack = \"/opt/plugstack.conf\"\n{BASE}")).unwrap();
    assert_eq!(config.plugstack, Path::new("/opt/plugstack.conf"));
}

#[test]
fn base_loads() {
    assert_eq!(check(BASE), "ok: 2 nodes, 1 partitions");
}

#[test]
fn errors_have_place_and_key() {
    assert_eq!(
        check(&BASE.replace("cpus = 2", "cpus = 2\ncpu = 3")),
        "/etc/drover/cluster.toml:9:1: nodes[0].cpu: unknown field `cpu`, expected one of `names`, `cpus`, `real_memory`, `gpus`, `features`, `gpu_files`, `job_pids_max`, `prolog`, `epilog`, `prolog_epilog_timeout`, `health_check_program`, `health_check_interval`, `reboot_program`"
    );
    assert_eq!(
        check(&BASE.replace("cpus = 2", "cpus = \"two\"")),
        "/etc/drover/cluster.toml:8:8: nodes[0].cpus: invalid type: string \"two\", expected u32"
    );
    assert_eq!(
        check(&BASE.replace("nodes = \"n[1-2]\"", "nodes = \"n[1-3]\"")),
        "/etc/drover/cluster.toml:12:9: partitions[0].nodes: unknown node `n3`"
    );
    assert_eq!(
        check(&format!("{BASE}max_time = \"1:2:3:4\"\n")),
        "/etc/drover/cluster.toml:14:12: partitions[0].max_time: invalid time limit `1:2:3:4`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
    );
    assert_eq!(
        check(&format!("{BASE}[[users]]\nname = \"u\"\ndefault_account = \"nosuch\"\n")),
        "/etc/drover/cluster.toml:16:19: users[0].default_account: unknown account `nosuch`"
    );
    assert_eq!(
        check(&BASE.replace("default = true", "")),
        "/etc/drover/cluster.toml:11:8: partitions: exactly one partition needs `default = true`"
    );
    assert_eq!(
        check(&BASE.replace("address = \"127.0.0.1:6817\"", "address = \"localhost\"")),
        "/etc/drover/cluster.toml:4:11: controller.address: expected an IP address and port, e.g. 127.0.0.1:6817"
    );
    assert!(check("cluster_name = [").starts_with("/etc/drover/cluster.toml:1:"));
}

#[test]
fn gpu_files_follow_gpu_index_order() {
    let gpus = "real_memory = 1000\ngpus = { h100 = 2, a100 = 1 }\ngpu_files = { a100 = \"/dev/nvidia0\", h100 = \"/dev/nvidia[1-2]\" }\njob_pids_max = 64";
    let config =
        Config::parse(Path::new("/etc/drover/cluster.toml"), &BASE.replace("real_memory = 1000", gpus)).unwrap();
    let node = &config.nodes[0];
    let types: Vec<&str> = node.gpus.iter().map(|gpu| gpu.gpu_type.as_str()).collect();
    assert_eq!(types, ["a100", "h100", "h100"]);
    assert_eq!(
        node.gpu_files,
        [PathBuf::from("/dev/nvidia0"), PathBuf::from("/dev/nvidia1"), PathBuf::from("/dev/nvidia2")]
    );
    assert_eq!(node.job_pids_max, 64);
    assert_eq!((node.prolog.as_ref(), node.prolog_epilog_timeout, node.health_check_interval), (None, 60, 300));
    assert_eq!(Config::parse(Path::new("/x.toml"), BASE).unwrap().nodes[0].job_pids_max, DEFAULT_JOB_PIDS_MAX);

    let wrong_count = "real_memory = 1000\ngpus = { h100 = 2 }\ngpu_files = { h100 = \"/dev/nvidia[0-2]\" }";
    assert_eq!(
        check(&BASE.replace("real_memory = 1000", wrong_count)),
        "/etc/drover/cluster.toml:11:22: nodes[0].gpu_files.h100: names 3 files for 2 GPUs of type `h100`"
    );
    let unknown_type =
        "real_memory = 1000\ngpus = { h100 = 1 }\ngpu_files = { h100 = \"/dev/nvidia0\", a100 = \"/dev/nvidia1\" }";
    assert_eq!(
        check(&BASE.replace("real_memory = 1000", unknown_type)),
        "/etc/drover/cluster.toml:11:45: nodes[0].gpu_files.a100: no GPUs of type `a100` are declared"
    );
    let missing_type = "real_memory = 1000\ngpus = { h100 = 1, a100 = 1 }\ngpu_files = { h100 = \"/dev/nvidia0\" }";
    assert!(
        check(&BASE.replace("real_memory = 1000", missing_type))
            .ends_with("names no files for the GPUs of type `a100`")
    );
}

#[test]
fn scheduling_keys_load_and_are_checked() {
    let text = format!(
        "{BASE}[priority]\nfairshare = \"classic\"\nweight_age = 10\nweight_tres = \"GRES/gpu=3000\"\ndecay_half_life = \"1-0\"\n\
         [[qos]]\nname = \"gpu\"\ngrp_tres = \"gres/gpu=4\"\nmax_jobs_per_user = 2\nmax_submit_jobs_per_user = 10\n\
         [[accounts]]\nname = \"team\"\ngrp_tres = \"gres/gpu:h100=2\"\n"
    );
    let config = Config::parse(Path::new("/etc/drover/cluster.toml"), &text).unwrap();
    assert_eq!(config.priority.fairshare, FairShareAlgorithm::Classic);
    assert_eq!((config.priority.weight_age, config.priority.decay_half_life), (10, 86400));
    assert_eq!(config.priority.weight_tres.get("gres/gpu"), 3000.0);
    let qos = config.qos.iter().find(|q| q.name == "gpu").unwrap();
    assert_eq!((qos.grp_tres["gres/gpu"], qos.max_jobs_per_user, qos.max_submit_jobs_per_user), (4, Some(2), Some(10)));
    assert_eq!(config.accounts.iter().find(|a| a.name == "team").unwrap().grp_tres["gres/gpu:h100"], 2);
    // Unknown keys and bad TRES lists are errors with their place.
    assert!(check(&format!("{BASE}[priority]\nweight_luck = 1\n")).contains("priority.weight_luck: unknown field"));
    assert_eq!(
        check(&format!("{BASE}[[qos]]\nname = \"q\"\ngrp_tres = \"licenses=1\"\n")),
        "/etc/drover/cluster.toml:16:12: qos[0].grp_tres: unknown TRES `licenses` (cpu, mem, node, billing, gres/gpu, gres/gpu:<type>)"
    );
    assert!(
        check(&BASE.replace("default = true", "default = true\ntres_billing_weights = \"CPU=x\""))
            .contains("tres_billing_weights")
    );
}

#[test]
fn association_qos_is_inherited_and_checked() {
    let text = format!(
        "{BASE}[[qos]]\nname = \"high\"\n[[qos]]\nname = \"low\"\n\
         [[accounts]]\nname = \"org\"\nqos = [\"normal\", \"low\"]\ndefault_qos = \"low\"\n\
         [[accounts]]\nname = \"team\"\nparent = \"org\"\n\
         [[accounts]]\nname = \"open\"\n\
         [[users]]\nname = \"ann\"\ndefault_account = \"team\"\naccounts = [\"open\"]\nqos = [\"high\"]\n\
         [[users]]\nname = \"ben\"\ndefault_account = \"team\"\n"
    );
    let config = Config::parse(Path::new("/etc/drover/cluster.toml"), &text).unwrap();
    let names = |list: Option<&[String]>| list.map(|l| l.join(","));
    // A sub-account inherits its parent's list and default; a user's own list wins everywhere.
    assert_eq!(names(config.allowed_qos(Some("ben"), "team")), Some("normal,low".into()));
    assert_eq!(config.default_qos(Some("ben"), "team"), "low");
    assert_eq!(names(config.allowed_qos(Some("ann"), "open")), Some("high".into()));
    assert_eq!(config.default_qos(Some("ann"), "team"), "high", "the inherited default is not in her list");
    // Nothing on the chain: any QOS, `normal` by default (Drover's behaviour before the lists).
    assert_eq!(config.allowed_qos(Some("ben"), "open"), None);
    assert_eq!(config.default_qos(None, "open"), "normal");
    assert_eq!(config.private_data, PrivateData::default());

    let bad = text.replace("default_qos = \"low\"", "default_qos = \"high\"");
    assert!(check(&bad).contains("accounts[0].default_qos: `high` is not in the `qos` list"), "{}", check(&bad));
    let unknown = text.replace("qos = [\"high\"]", "qos = [\"gold\"]");
    assert!(check(&unknown).contains("users[0].qos[0]: unknown QOS `gold`"), "{}", check(&unknown));
}

#[test]
fn private_data_values() {
    let text = BASE.replace("state_dir = \"state\"", "state_dir = \"state\"\nprivate_data = [\"jobs\", \"Usage\"]");
    let config = Config::parse(Path::new("/etc/drover/cluster.toml"), &text).unwrap();
    assert_eq!(config.private_data, PrivateData { jobs: true, usage: true, accounts: false, users: false });
    let bad = BASE.replace("state_dir = \"state\"", "state_dir = \"state\"\nprivate_data = [\"jobs\", \"secrets\"]");
    assert_eq!(
        check(&bad),
        "/etc/drover/cluster.toml:6:25: controller.private_data[1]: unknown value `secrets` (expected jobs, usage, accounts, users)"
    );
}

#[test]
fn max_tasks_per_node_defaults_to_slurms_and_is_bounded() {
    let path = Path::new("/etc/drover/cluster.toml");
    assert_eq!(Config::parse(path, BASE).unwrap().max_tasks_per_node, 512);
    let set = |value: &str| {
        BASE.replace("state_dir = \"state\"", &format!("state_dir = \"state\"\nmax_tasks_per_node = {value}"))
    };
    assert_eq!(Config::parse(path, &set("64")).unwrap().max_tasks_per_node, 64);
    assert_eq!(
        check(&set("0")),
        "/etc/drover/cluster.toml:6:22: controller.max_tasks_per_node: must be between 1 and 65533"
    );
    assert!(check(&set("65534")).contains("must be between 1 and 65533"));
}

/// A cluster home's file includes the admin's file: paths in the admin's file resolve beside it,
/// the home sets address, state directory, key file and an extra admin; the admin's file may not
/// itself be a home's file; with the home's file deleted, a reload keeps the home's settings.
#[test]
fn a_home_file_includes_the_admins_file() {
    let dir = tempfile::tempdir().unwrap();
    let etc = dir.path().join("etc");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let admin_file = etc.join("cluster.toml");
    let nodes = "cpus = 2\nprolog = \"p.sh\"\nepilog = \"e/e.sh\"\nhealth_check_program = \"/opt/h\"";
    std::fs::write(&admin_file, BASE.replace("cpus = 2", nodes)).unwrap();
    let home_file = home.join("cluster.toml");
    let home_text = format!(
        "include = \"{}\"\n[controller]\naddress = \"127.0.0.1:4000\"\nstate_dir = \"ctld\"\nkey_file = \"k\"\nadmins = [\"ann\"]\n",
        admin_file.display()
    );
    std::fs::write(&home_file, &home_text).unwrap();
    let config = Config::load(&home_file).unwrap();
    assert_eq!((config.path.as_path(), config.source.as_path()), (home_file.as_path(), admin_file.as_path()));
    assert_eq!(config.controller_address, "127.0.0.1:4000");
    assert_eq!((config.state_dir.clone(), config.key_file.clone()), (home.join("ctld"), home.join("k")));
    assert_eq!(config.plugstack, etc.join("plugstack.conf"));
    let node = &config.nodes[0];
    assert_eq!(node.prolog.as_deref(), Some(etc.join("p.sh").as_path()));
    assert_eq!(node.epilog.as_deref(), Some(etc.join("e/e.sh").as_path()));
    assert_eq!(node.health_check_program.as_deref(), Some(Path::new("/opt/h")));
    assert_eq!(config.role_of("ann"), Role::Admin);

    // An edit of the admin's file is what the next load (reconfigure) sees, also without the
    // home's file.
    std::fs::write(&admin_file, BASE.replace("cluster_name = \"c\"", "cluster_name = \"d\"")).unwrap();
    std::fs::remove_file(&home_file).unwrap();
    let reloaded = config.reload().unwrap();
    assert_eq!((reloaded.cluster_name.as_str(), reloaded.controller_address.as_str()), ("d", "127.0.0.1:4000"));
    assert_eq!((reloaded.state_dir.clone(), reloaded.path.clone()), (home.join("ctld"), home_file.clone()));
    assert_eq!(reloaded.role_of("ann"), Role::Admin);

    // Errors: a home's file including one, and a missing file (no Rust error codes shown).
    std::fs::write(&home_file, &home_text).unwrap();
    let nested = dir.path().join("nested.toml");
    std::fs::write(
        &nested,
        format!(
            "include = \"{}\"\n[controller]\naddress = \"a\"\nstate_dir = \"s\"\nkey_file = \"k\"\n",
            home_file.display()
        ),
    )
    .unwrap();
    let error = Config::load(&nested).unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "{}:1:1: include: {} is itself a cluster home's file; include the admin's file",
            nested.display(),
            home_file.display()
        )
    );
    let error = Config::load(&dir.path().join("missing.toml")).unwrap_err().to_string();
    assert_eq!(error, format!("{}: No such file or directory", dir.path().join("missing.toml").display()));
}

/// `[[controller.replicas]]`: none keeps one controller; three or more with their own ids,
/// addresses and state directories; each mistake named with its place.
#[test]
fn controller_replicas_are_checked() {
    let replica = |id: u32, port: u32, dir: &str| {
        format!(
            "[[controller.replicas]]\nid = {id}\naddress = \"127.0.0.1:{port}\"\nraft_address = \"127.0.0.1:{}\"\nstate_dir = \"{dir}\"\n",
            port + 100
        )
    };
    let with = |replicas: &str| BASE.replace("state_dir = \"state\"\n", &format!("state_dir = \"state\"\n{replicas}"));
    let path = Path::new("/etc/drover/cluster.toml");
    let plain = Config::parse(path, BASE).unwrap();
    assert!(plain.replicas.is_empty());
    assert_eq!(plain.client_sockets(), [Path::new("/etc/drover/state/ctld.sock")]);
    let three = format!("{}{}{}", replica(1, 7001, "r1"), replica(2, 7002, "r2"), replica(3, 7003, "/var/r3"));
    let mut config = Config::parse(path, &with(&three)).unwrap();
    assert_eq!(config.controller_addresses(), ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]);
    assert_eq!(config.client_sockets()[2], Path::new("/var/r3/ctld.sock"));
    config.select_replica(2).unwrap();
    assert_eq!(
        (config.controller_address.as_str(), config.state_dir.as_path()),
        ("127.0.0.1:7002", Path::new("/etc/drover/r2"))
    );
    assert_eq!(config.select_replica(9).unwrap_err(), "replica 9 is not in [[controller.replicas]] (ids: 1, 2, 3)");
    let two = format!("{}{}", replica(1, 7001, "r1"), replica(2, 7002, "r2"));
    assert_eq!(
        check(&with(&two)),
        "/etc/drover/cluster.toml:7:6: controller.replicas: list at least three replicas (fewer survive no failure), or none for one controller"
    );
    let twice = format!("{}{}{}", replica(1, 7001, "r1"), replica(1, 7002, "r2"), replica(3, 7003, "r3"));
    assert_eq!(
        check(&with(&twice)),
        "/etc/drover/cluster.toml:12:6: controller.replicas[1].id: replica id 1 is used twice"
    );
    let same_port = format!("{}{}{}", replica(1, 7001, "r1"), replica(2, 7001, "r2"), replica(3, 7003, "r3"));
    assert!(
        check(&with(&same_port)).ends_with("controller.replicas[1].address: every replica needs its own two addresses")
    );
    let same_dir = format!("{}{}{}", replica(1, 7001, "r1"), replica(2, 7002, "r1"), replica(3, 7003, "r3"));
    assert!(
        check(&with(&same_dir))
            .ends_with("controller.replicas[1].state_dir: every replica needs its own state directory")
    );
    let bad = with(&three).replace("address = \"127.0.0.1:7002\"", "address = \"ctl2\"");
    assert!(
        check(&bad).ends_with("controller.replicas[1].address: expected an IP address and port, e.g. 10.0.0.1:6817")
    );
    let zero = with(&three).replace("id = 3", "id = 0");
    assert!(check(&zero).ends_with("controller.replicas[2].id: replica ids start at 1"));
}

/// A cluster home's file may list the replicas (`drover up --replicas 3`): they replace the
/// admin's file's, resolve beside the home's file, are checked like the admin's, and a
/// replica's reload (`scontrol reconfigure`) stays that replica's, also once removed.
#[test]
fn a_home_file_lists_replicas_and_a_replica_reloads_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let admin_file = dir.path().join("admin.toml");
    std::fs::write(&admin_file, BASE).unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let replica = |id: u32| {
        format!(
            "[[controller.replicas]]\nid = {id}\naddress = \"127.0.0.1:{}\"\nraft_address = \"127.0.0.1:{}\"\nstate_dir = \"ctld-{id}\"\n",
            7000 + id,
            7100 + id
        )
    };
    let head = format!(
        "include = \"{}\"\n[controller]\naddress = \"127.0.0.1:4000\"\nstate_dir = \"ctld\"\nkey_file = \"k\"\n",
        admin_file.display()
    );
    let home_file = home.join("cluster.toml");
    std::fs::write(&home_file, format!("{head}{}{}{}", replica(1), replica(2), replica(3))).unwrap();
    let mut config = Config::load(&home_file).unwrap();
    assert_eq!(config.client_sockets()[1], home.join("ctld-2").join("ctld.sock"));
    config.select_replica(2).unwrap();
    let reloaded = config.reload().unwrap();
    assert_eq!(
        (reloaded.controller_address.as_str(), reloaded.state_dir.clone()),
        ("127.0.0.1:7002", home.join("ctld-2"))
    );
    // Replica 2 gone from the file (removed at run time): it runs on as itself.
    std::fs::write(&home_file, format!("{head}{}{}{}", replica(1), replica(3), replica(4))).unwrap();
    let reloaded = config.reload().unwrap();
    assert_eq!(
        (reloaded.controller_address.as_str(), reloaded.state_dir.clone(), reloaded.replicas.len()),
        ("127.0.0.1:7002", home.join("ctld-2"), 3)
    );
    std::fs::write(&home_file, format!("{head}{}{}", replica(1), replica(2))).unwrap();
    let error = Config::load(&home_file).unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("{}:7:6: controller.replicas: list at least three", home_file.display())),
        "{error}"
    );
}

/// Sizes in the config are bounded before anything proportional to them is built: a node's GPU
/// count (a record is made per GPU) and the nodes of all sets together.
#[test]
fn node_and_gpu_counts_are_bounded() {
    let gpus = BASE.replace("cpus = 2\n", "cpus = 2\ngpus = { h100 = 4000000000 }\n");
    let error = check(&gpus);
    assert!(error.contains("nodes[0].gpus: a node may have at most 4096 GPUs"), "{error}");
    let at_bound = BASE.replace("cpus = 2\n", "cpus = 2\ngpus = { h100 = 4000, a100 = 96 }\n");
    assert_eq!(check(&at_bound), "ok: 2 nodes, 1 partitions");
    let many = BASE
        .replace("[[partitions]]", "[[nodes]]\nnames = \"m[1-1048575]\"\ncpus = 1\nreal_memory = 1\n[[partitions]]");
    let error = check(&many);
    assert!(error.contains("nodes[1].names: the config declares more than 1048576 nodes"), "{error}");
}
