//! Which cgroup hierarchies this host has and where noded sits in each, read from
//! `/proc/self/mounts` and `/proc/self/cgroup`: pure v2 (`/sys/fs/cgroup` is cgroup2), hybrid
//! (v1 controllers plus cgroup2 at `/sys/fs/cgroup/unified`), or v1 only. Parsing is kept apart
//! from reading so the unit tests feed it the files of each layout.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The controllers Drover limits jobs with.
pub const CONTROLLERS: [&str; 3] = ["memory", "cpuset", "pids"];

/// The host's cgroup layout as Slurm's `CgroupPlugin=autodetect` would name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Mode {
    /// cgroup2 only.
    Unified,
    /// v1 controllers and a cgroup2 hierarchy side by side.
    Hybrid,
    /// v1 only.
    Legacy,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Unified => "cgroup v2",
            Mode::Hybrid => "hybrid cgroup v1 + v2",
            Mode::Legacy => "cgroup v1",
        })
    }
}

/// Where a controller is, as noded's own cgroup in its hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Controller {
    /// In the v2 hierarchy (the same directory as [`Layout::unified`]).
    V2(PathBuf),
    /// In its own v1 hierarchy.
    V1(PathBuf),
}

/// The host's hierarchies, each as the directory of noded's own cgroup in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub mode: Mode,
    /// noded's own cgroup in the v2 hierarchy, if one is mounted.
    pub unified: Option<PathBuf>,
    /// Where that v2 hierarchy is mounted (its root cgroup).
    pub unified_root: Option<PathBuf>,
    /// noded's own cgroup in each v1 hierarchy, by controller name.
    pub v1: BTreeMap<String, PathBuf>,
}

/// One mount of `/proc/self/mounts`: (mount point, fstype, options).
fn mounts(text: &str) -> impl Iterator<Item = (&str, &str, &str)> {
    text.lines().filter_map(|line| {
        let mut fields = line.split_whitespace();
        let (_source, target, fstype, options) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        Some((target, fstype, options))
    })
}

impl Layout {
    /// The layout this process sees.
    pub fn detect() -> std::io::Result<Layout> {
        let mounts = std::fs::read_to_string("/proc/self/mounts")?;
        let cgroups = std::fs::read_to_string("/proc/self/cgroup")?;
        Ok(Layout::parse(&mounts, &cgroups))
    }

    /// The layout described by the text of `/proc/self/mounts` and `/proc/self/cgroup`.
    pub fn parse(mounts_text: &str, cgroup_text: &str) -> Layout {
        let mut own_v2 = None;
        let mut own_v1 = BTreeMap::new();
        for line in cgroup_text.lines() {
            let mut fields = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                own_v2 = Some(path.to_owned());
            } else {
                for controller in controllers.split(',') {
                    own_v1.insert(controller.to_owned(), path.to_owned());
                }
            }
        }
        let mut unified = None;
        let mut unified_root = None;
        let mut v1 = BTreeMap::new();
        let mut root_is_v2 = false;
        for (target, fstype, options) in mounts(mounts_text) {
            match fstype {
                "cgroup2" => {
                    // The first cgroup2 mount wins; /sys/fs/cgroup itself when it is one.
                    if let (None, Some(own)) = (&unified, &own_v2) {
                        unified = Some(join(target, own));
                        unified_root = Some(PathBuf::from(target));
                    }
                    root_is_v2 |= target == "/sys/fs/cgroup";
                }
                "cgroup" => {
                    for option in options.split(',') {
                        if let Some(own) = own_v1.get(option) {
                            v1.entry(option.to_owned()).or_insert_with(|| join(target, own));
                        }
                    }
                }
                _ => {}
            }
        }
        let mode = match (&unified, v1.is_empty()) {
            (Some(_), true) => Mode::Unified,
            (Some(_), false) if root_is_v2 => Mode::Unified,
            (Some(_), false) => Mode::Hybrid,
            (None, _) => Mode::Legacy,
        };
        Layout { mode, unified, unified_root, v1 }
    }

    /// Where `controller` can limit jobs: the v2 hierarchy when the kernel has the controller
    /// there (read from `cgroup.controllers` of the hierarchy's root: noded's own cgroup lists only
    /// what its parent enabled, as little as `memory pids` in a login session's scope, and noded
    /// enables the rest), else its v1 hierarchy.
    pub fn controller(&self, controller: &str) -> Option<Controller> {
        if let (Some(unified), Some(root)) = (&self.unified, &self.unified_root) {
            let available = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
            if available.split_whitespace().any(|name| name == controller) {
                return Some(Controller::V2(unified.clone()));
            }
        }
        self.v1.get(controller).map(|dir| Controller::V1(dir.clone()))
    }
}

/// `mount point` + a cgroup path from `/proc/self/cgroup` (which starts with `/`).
fn join(mount: &str, own: &str) -> PathBuf {
    Path::new(mount).join(own.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
";
    const HYBRID_CGROUP: &str = "\
8:pids:/
4:memory:/process_api/abc
3:cpuset:/
2:cpu,cpuacct:/
0::/
";

    #[test]
    fn hybrid_hosts_use_v1_controllers_and_the_unified_mount() {
        let layout = Layout::parse(HYBRID_MOUNTS, HYBRID_CGROUP);
        assert_eq!(layout.mode, Mode::Hybrid);
        assert_eq!(layout.unified.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert_eq!(layout.unified_root.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert_eq!(layout.v1["memory"], Path::new("/sys/fs/cgroup/memory/process_api/abc"));
        assert_eq!(layout.v1["cpuset"], Path::new("/sys/fs/cgroup/cpuset"));
        assert_eq!(layout.v1["cpuacct"], Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(layout.v1["pids"], Path::new("/sys/fs/cgroup/pids"));
    }

    #[test]
    fn pure_v2_hosts_have_one_hierarchy() {
        let layout = Layout::parse(
            "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n",
            "0::/system.slice/drover-noded.service\n",
        );
        assert_eq!(layout.mode, Mode::Unified);
        assert_eq!(layout.unified.as_deref(), Some(Path::new("/sys/fs/cgroup/system.slice/drover-noded.service")));
        assert_eq!(layout.unified_root.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert!(layout.v1.is_empty());
    }

    #[test]
    fn v1_only_hosts_have_no_unified_hierarchy() {
        let mounts = HYBRID_MOUNTS.lines().filter(|line| !line.contains("cgroup2")).collect::<Vec<_>>().join("\n");
        let layout = Layout::parse(&mounts, "4:memory:/a\n3:cpuset:/\n");
        assert_eq!(layout.mode, Mode::Legacy);
        assert_eq!(layout.unified, None);
        assert_eq!(layout.unified_root, None);
        assert_eq!(layout.v1.len(), 2);
    }
}
