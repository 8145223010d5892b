//! The daemons' state directories. A state directory holds the database, the cluster's job
//! scripts or the node's job records, so whoever can write into it can change what runs as root:
//! a daemon creates it if it is missing and refuses to start when another user owns it or its
//! group or others may write to it. Parents are not checked (a state directory under `/var/lib`
//! or a private temporary directory are both fine).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("state directory {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("state directory {path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("state directory {path} is owned by uid {owner}, not by this daemon's uid {euid}; chown it")]
    Owner { path: PathBuf, owner: u32, euid: u32 },
    #[error("state directory {path} has mode {mode:o}; group and others must not write to it (chmod go-w)")]
    Writable { path: PathBuf, mode: u32 },
}

/// The effective uid of this process.
fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Creates `path` (and missing parents) with `mode` if it does not exist, then checks that this
/// process's user owns it and that neither group nor others may write to it. The directories it
/// creates get exactly `mode`, whatever the process's umask (ctld runs under 077 and still needs
/// its socket's directory open to every user).
pub fn prepare(path: &Path, mode: u32) -> Result<(), StateDirError> {
    let io = |source| StateDirError::Io { path: path.to_owned(), source };
    if !path.exists() {
        let missing: Vec<&Path> =
            path.ancestors().take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists()).collect();
        for dir in missing.into_iter().rev() {
            match std::fs::DirBuilder::new().mode(mode).create(dir) {
                Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(io)?,
                // Created meanwhile by someone else: checked below like any existing directory.
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(io(error)),
            }
        }
    }
    let metadata = std::fs::metadata(path).map_err(io)?;
    if !metadata.is_dir() {
        return Err(StateDirError::NotADirectory { path: path.to_owned() });
    }
    let euid = euid();
    if metadata.uid() != euid {
        return Err(StateDirError::Owner { path: path.to_owned(), owner: metadata.uid(), euid });
    }
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(StateDirError::Writable { path: path.to_owned(), mode });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_missing_directories_with_the_given_mode() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("a/b");
        prepare(&dir, 0o700).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        // A second start finds it fine.
        prepare(&dir, 0o700).unwrap();
    }

    /// ctld's umask (077) does not narrow the mode: the socket's directory stays reachable.
    #[test]
    fn the_umask_does_not_narrow_created_directories() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("r1/state");
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
        let prepared = prepare(&dir, 0o755);
        nix::sys::stat::umask(old);
        prepared.unwrap();
        for created in [&dir, &base.path().join("r1")] {
            assert_eq!(
                std::fs::metadata(created).unwrap().permissions().mode() & 0o777,
                0o755,
                "{}",
                created.display()
            );
        }
    }

    #[test]
    fn refuses_group_or_world_writable_directories() {
        let base = tempfile::tempdir().unwrap();
        for mode in [0o777, 0o775, 0o1777] {
            std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let error = prepare(base.path(), 0o700).unwrap_err();
            assert!(error.to_string().contains("chmod go-w"), "{error}");
        }
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare(base.path(), 0o700).unwrap();
    }

    #[test]
    fn refuses_a_file() {
        let base = tempfile::tempdir().unwrap();
        let file = base.path().join("f");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(prepare(&file, 0o700), Err(StateDirError::NotADirectory { .. })));
    }

    #[test]
    fn refuses_a_directory_owned_by_someone_else() {
        if euid() != 0 {
            return; // Only root can give a directory away; the CI runs as root.
        }
        let base = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(base.path(), Some(65534), None).unwrap();
        assert!(matches!(prepare(base.path(), 0o700), Err(StateDirError::Owner { owner: 65534, .. })));
    }
}
