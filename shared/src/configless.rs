//! Configless hosts (Slurm's configless mode): a compute node or login host keeps no
//! `cluster.toml` of its own. Its `drover-noded` (started with `--conf-server`) fetches the
//! admin's file from the leading controller over the node port, authenticated with the cluster
//! key (the one file placed by hand, as munge's key is), and keeps a copy in its state
//! directory's `conf-cache/`. The copy is what the daemon runs with when the controller cannot be
//! reached at start, and what commands on that host read when `/etc/drover/cluster.toml` does
//! not exist. ctld tells connected nodes when a reconfigure changed the file; login hosts ask
//! again every [`LOGIN_REFRESH`].
//!
//! This module holds what both sides agree on: where the copy lives, the digest that tells two
//! copies apart, how large a served file may be, and writing a copy so that a reader never sees
//! half of one.

use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The copy's directory inside noded's state directory.
pub const CACHE_DIR: &str = "conf-cache";

/// The copy's file name.
pub const CACHE_FILE: &str = "cluster.toml";

/// Where commands look for the copy when `/etc/drover/cluster.toml` does not exist: the copy of
/// a noded with the default state directory (`/var/spool/drover`).
pub const DEFAULT_CACHE: &str = "/var/spool/drover/conf-cache/cluster.toml";

/// The largest config text ctld serves or a host accepts (a real file is a few kilobytes).
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// How often a login host (which holds no connection ctld could tell) asks whether the config
/// changed.
pub const LOGIN_REFRESH: Duration = Duration::from_secs(10);

/// The copy's path under a noded state directory.
pub fn cache_path(state_dir: &Path) -> PathBuf {
    state_dir.join(CACHE_DIR).join(CACHE_FILE)
}

/// The digest that names one version of the config text (hex SHA-256).
pub fn digest(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `text` as the copy under `state_dir` (a new file renamed over the old one, readable by
/// every user as `/etc/drover/cluster.toml` is). Returns whether the copy changed.
pub fn store(state_dir: &Path, text: &str) -> std::io::Result<bool> {
    let path = cache_path(state_dir);
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    let dir = state_dir.join(CACHE_DIR);
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    let temporary = dir.join(format!(".{CACHE_FILE}.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&temporary)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, &path)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_replaced_whole_and_only_when_it_changed() {
        let dir = tempfile::tempdir().unwrap();
        assert!(store(dir.path(), "cluster_name = \"a\"\n").unwrap());
        assert!(!store(dir.path(), "cluster_name = \"a\"\n").unwrap());
        assert!(store(dir.path(), "cluster_name = \"b\"\n").unwrap());
        let path = cache_path(dir.path());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "cluster_name = \"b\"\n");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        let left: Vec<_> = std::fs::read_dir(dir.path().join(CACHE_DIR)).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file stays behind");
    }

    #[test]
    fn digests_tell_texts_apart() {
        assert_eq!(digest("a"), digest("a"));
        assert_ne!(digest("a"), digest("b"));
        assert_eq!(digest("").len(), 64);
    }
}
