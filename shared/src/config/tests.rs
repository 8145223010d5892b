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
}

#[test]
fn base_loads() {
    assert_eq!(check(BASE), "ok: 2 nodes, 1 partitions");
}

#[test]
fn errors_have_place_and_key() {
    assert_eq!(
        check(&BASE.replace("cpus = 2", "cpus = 2\ncpu = 3")),
        "/etc/drover/cluster.toml:9:1: nodes[0].cpu: unknown field `cpu`, expected one of `names`, `cpus`, `real_memory`, `gpus`, `features`"
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
