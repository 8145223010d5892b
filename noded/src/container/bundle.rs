//! The task's bundle: the user's `config.json` rewritten for one task. The process becomes the
//! task (its command line, environment, no terminal); the root file system is made absolute, so
//! it is the user's own; a user namespace without mappings maps the user to root inside, as a
//! rootless runtime needs; the cgroup path, resource limits and cgroup mounts are removed, so the
//! runtime leaves the task in the job's cgroups and the job's limits are the ones that hold; the task's spool
//! directory (with the batch script) and the job's GPU device files are bound in.

use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// The largest `config.json` read.
pub const MAX_CONFIG_JSON: u64 = 1 << 20;

/// What the task brings to its bundle.
pub struct TaskInputs<'a> {
    /// The user's bundle directory (relative root paths resolve against it).
    pub bundle: &'a Path,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    /// The task's spool directory on the host, and where it is mounted inside.
    pub spool: &'a Path,
    pub mount_spool_dir: &'a str,
    pub devices: &'a [PathBuf],
    pub uid: u32,
    pub gid: u32,
}

/// Rewrites `config` for the task; an error says what in the user's `config.json` is wrong.
pub fn rewrite(mut config: Value, task: &TaskInputs<'_>) -> Result<Value, String> {
    let top = config.as_object_mut().ok_or("config.json is not a JSON object")?;
    let root = top.get_mut("root").and_then(Value::as_object_mut).ok_or("config.json has no \"root\" object")?;
    let path = root.get("path").and_then(Value::as_str).ok_or("config.json has no \"root\".\"path\"")?;
    let absolute = task.bundle.join(path);
    root.insert("path".into(), Value::String(absolute.to_string_lossy().into_owned()));

    let process =
        top.entry("process").or_insert_with(|| json!({})).as_object_mut().ok_or("\"process\" is not an object")?;
    process.insert("args".into(), json!(task.args));
    process.insert("terminal".into(), Value::Bool(false));
    process.insert("env".into(), json!(merged_environment(process.get("env"), task.env)));
    process.entry("cwd").or_insert_with(|| Value::String("/".into()));

    let linux = top.entry("linux").or_insert_with(|| json!({})).as_object_mut().ok_or("\"linux\" is not an object")?;
    linux.remove("cgroupsPath");
    linux.remove("resources");
    let user_namespace = linux
        .get("namespaces")
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|ns| ns.get("type").and_then(Value::as_str) == Some("user")));
    if user_namespace {
        for (key, host_id) in [("uidMappings", task.uid), ("gidMappings", task.gid)] {
            if linux.get(key).and_then(Value::as_array).is_none_or(Vec::is_empty) {
                linux.insert(key.into(), json!([{ "containerID": 0, "hostID": host_id, "size": 1 }]));
            }
        }
    }

    let mounts = top.entry("mounts").or_insert_with(|| json!([])).as_array_mut().ok_or("\"mounts\" is not a list")?;
    // A cgroup file system inside would be the job's cgroups, which a rootless runtime cannot
    // mount (they are root's); the container sees none.
    mounts.retain(|m| !matches!(m.get("type").and_then(Value::as_str), Some("cgroup" | "cgroup2")));
    let mut bind = |destination: &str, source: &Path, mode: &str| {
        if !mounts.iter().any(|m| m.get("destination").and_then(Value::as_str) == Some(destination)) {
            mounts.push(json!({
                "destination": destination,
                "type": "bind",
                "source": source.to_string_lossy(),
                "options": ["bind", "nosuid", mode],
            }));
        }
    };
    bind(task.mount_spool_dir, task.spool, "ro");
    for device in task.devices {
        bind(&device.to_string_lossy(), device, "rw");
    }
    Ok(config)
}

/// The bundle's `NAME=value` list with the task's environment laid over it (the task's value
/// wins, as in Slurm).
fn merged_environment(bundle_env: Option<&Value>, task_env: &[(String, String)]) -> Vec<String> {
    let mut merged: Map<String, Value> = Map::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |name: &str, value: &str| {
        if !merged.contains_key(name) {
            order.push(name.to_owned());
        }
        merged.insert(name.to_owned(), Value::String(value.to_owned()));
    };
    for entry in bundle_env.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if let Some((name, value)) = entry.split_once('=') {
            set(name, value);
        }
    }
    for (name, value) in task_env {
        set(name, value);
    }
    order.into_iter().map(|name| format!("{name}={}", merged[&name].as_str().unwrap_or(""))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(args: &'a [String], env: &'a [(String, String)], devices: &'a [PathBuf]) -> TaskInputs<'a> {
        TaskInputs {
            bundle: Path::new("/home/u/b"),
            args,
            env,
            spool: Path::new("/spool/oci/task0"),
            mount_spool_dir: "/var/run/drover",
            devices,
            uid: 1001,
            gid: 1002,
        }
    }

    #[test]
    fn the_bundle_becomes_the_tasks_and_keeps_the_job_in_its_cgroups() {
        let config = json!({
            "process": { "terminal": true, "args": ["sh"], "env": ["PATH=/bin", "TERM=xterm"] },
            "root": { "path": "rootfs", "readonly": true },
            "mounts": [
                { "destination": "/dev/nvidia1", "type": "bind", "source": "/dev/nvidia1" },
                { "destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup" }
            ],
            "linux": {
                "namespaces": [{ "type": "pid" }, { "type": "user" }, { "type": "mount" }],
                "cgroupsPath": "/elsewhere",
                "resources": { "devices": [{ "allow": true, "access": "rwm" }] }
            }
        });
        let args = vec!["/var/run/drover/script".to_owned(), "a b".to_owned()];
        let env = vec![("PATH".to_owned(), "/usr/bin".to_owned()), ("SLURM_JOB_ID".to_owned(), "7".to_owned())];
        let devices = vec![PathBuf::from("/dev/nvidia0"), PathBuf::from("/dev/nvidia1")];
        let out = rewrite(config, &inputs(&args, &env, &devices)).unwrap();
        assert_eq!(out["root"]["path"], "/home/u/b/rootfs");
        assert_eq!(out["process"]["args"], json!(["/var/run/drover/script", "a b"]));
        assert_eq!(out["process"]["terminal"], false);
        assert_eq!(out["process"]["env"], json!(["PATH=/usr/bin", "TERM=xterm", "SLURM_JOB_ID=7"]));
        assert_eq!(out["process"]["cwd"], "/");
        assert!(out["linux"].get("cgroupsPath").is_none() && out["linux"].get("resources").is_none());
        assert_eq!(out["linux"]["uidMappings"], json!([{ "containerID": 0, "hostID": 1001, "size": 1 }]));
        assert_eq!(out["linux"]["gidMappings"], json!([{ "containerID": 0, "hostID": 1002, "size": 1 }]));
        let destinations: Vec<&str> =
            out["mounts"].as_array().unwrap().iter().map(|m| m["destination"].as_str().unwrap()).collect();
        // The bundle's own mount of nvidia1 stays as it is; nvidia0 and the spool are added.
        assert_eq!(destinations, ["/dev/nvidia1", "/var/run/drover", "/dev/nvidia0"]);
        assert_eq!(out["mounts"][1]["source"], "/spool/oci/task0");
    }

    #[test]
    fn an_absolute_root_and_given_mappings_are_kept_and_bad_configs_are_named() {
        let config = json!({
            "root": { "path": "/srv/rootfs" },
            "linux": { "namespaces": [{ "type": "user" }], "uidMappings": [{ "containerID": 0, "hostID": 5, "size": 1 }] }
        });
        let out = rewrite(config, &inputs(&[], &[], &[])).unwrap();
        assert_eq!(out["root"]["path"], "/srv/rootfs");
        assert_eq!(out["linux"]["uidMappings"][0]["hostID"], 5);
        assert_eq!(out["linux"]["gidMappings"][0]["hostID"], 1002);
        assert_eq!(rewrite(json!([]), &inputs(&[], &[], &[])).unwrap_err(), "config.json is not a JSON object");
        assert_eq!(rewrite(json!({}), &inputs(&[], &[], &[])).unwrap_err(), "config.json has no \"root\" object");
    }
}
