//! `drover install`: puts Drover on a host as `docs/admin/install.md` describes, the same on the
//! controller and on every compute node, and safe to run again (an upgrade is the same command):
//!
//! ```text
//! PREFIX/bin/drover, PREFIX/bin/{sbatch,srun,…}   the commands (links to drover)
//! PREFIX/sbin/drover-ctld, PREFIX/sbin/drover-noded
//! /etc/systemd/system/drover-{ctld,noded}.service  the units (paths rewritten to PREFIX)
//! /etc/systemd/system/drover-ctld.service.d/replica.conf
//!                                                  when the config lists replicas: this host's
//!                                                  `--replica N` and `Restart=always`
//! /etc/systemd/system/drover-noded.service.d/configless.conf
//!                                                  with --conf-server or --login: noded's command
//!                                                  line for a configless node or a login host
//! /etc/drover/cluster.toml                         the config: --config FILE, else kept, else a starter
//! /etc/drover/cluster.key                          the key: --key FILE, else kept, else a new one
//! /var/lib/drover                                  ctld's state (owned by the `drover` user)
//! /var/spool/drover                                noded's state (root's)
//! ```
//!
//! Every path above is under `--root DIR` when given (a staging tree, a per-host directory in
//! the multi-host test); then no user is created. The binaries installed are the ones next to
//! the running `drover`. What the admin edited is never replaced unasked: an existing config or
//! key stays unless `--config`/`--key` names a new one.

use super::cluster::APPLETS;
use anyhow::{Context, bail};
use std::ffi::OsString;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The system user ctld runs as (its unit's `User=`), owner of `/var/lib/drover` and the key.
pub(crate) const SERVICE_USER: &str = "drover";

const CTLD_UNIT: &str = include_str!("../../../etc/systemd/drover-ctld.service");
const NODED_UNIT: &str = include_str!("../../../etc/systemd/drover-noded.service");
/// The prefix the unit files name; `--prefix` replaces it.
const UNIT_PREFIX: &str = "/usr/local/";
/// The commented example config, written where there is none yet.
const STARTER_CONFIG: &str = include_str!("../../../etc/cluster.toml");

pub(crate) const USAGE: &str = "\
usage: drover install [--root DIR] [--prefix DIR] [--config FILE] [--key FILE] [--replica N]
                      [--conf-server HOST:PORT[,...]] [--login]

Installs this build on this host: the commands and daemons under PREFIX (default /usr/local), the
systemd units drover-ctld and drover-noded, /etc/drover (config and key), /var/lib/drover (ctld's
state, owned by the `drover` system user, created if missing) and /var/spool/drover (noded's).
Run it on every host, as root; running it again upgrades the binaries and changes nothing else.

  --root DIR     install below DIR instead of / (a staging tree); creates no user
  --prefix DIR   where bin/ and sbin/ go (default /usr/local)
  --config FILE  install FILE as /etc/drover/cluster.toml (checked first; replaces the old one);
                 without it an existing config is kept, and a missing one becomes the commented
                 example, to edit
  --key FILE     install FILE as /etc/drover/cluster.key (the controller's key, on every node);
                 without it an existing key is kept, and a missing one is generated
  --replica N    when the config lists [[controller.replicas]]: this host runs replica N
                 (default: the one whose address is this host's). The drop-in
                 drover-ctld.service.d/replica.conf starts it with --replica N and
                 Restart=always; a host that runs none gets no drop-in (docs/admin/ha.md)
  --conf-server HOST:PORT[,...]
                 a configless host (compute node or login host): no cluster.toml here; noded
                 fetches it from the controller (every replica's address, for replicated
                 controllers) and keeps a copy that this host's commands read. Needs the
                 controller's key (--key FILE, or one already installed) (docs/admin/configless.md)
  --login        a login host: noded runs no jobs, only the token socket through which this
                 host's users reach ctld (name the host in the config's [controller] login_hosts)

Then: `systemctl daemon-reload`, and `systemctl enable --now drover-ctld` on the controller,
`systemctl enable --now drover-noded` on each compute node (see docs/admin/install.md).";

struct Options {
    root: PathBuf,
    prefix: PathBuf,
    config: Option<PathBuf>,
    key: Option<PathBuf>,
    replica: Option<u64>,
    conf_server: Option<String>,
    login: bool,
}

fn parse(args: Vec<OsString>) -> anyhow::Result<Option<Options>> {
    let mut options = Options {
        root: "/".into(),
        prefix: "/usr/local".into(),
        config: None,
        key: None,
        replica: None,
        conf_server: None,
        login: false,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let arg = arg.to_string_lossy().into_owned();
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
            None => (arg.clone(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| args.next().map(|v| v.to_string_lossy().into_owned()))
                .map(PathBuf::from)
                .with_context(|| format!("{key} needs {what}"))
        };
        match key.as_str() {
            "--root" => options.root = std::path::absolute(value("a directory")?)?,
            "--prefix" => options.prefix = value("a directory")?,
            "--config" => options.config = Some(std::path::absolute(value("a file")?)?),
            "--key" => options.key = Some(std::path::absolute(value("a file")?)?),
            "--replica" => {
                let id = value("a replica id")?;
                let id = id.to_string_lossy();
                options.replica = Some(id.parse().ok().filter(|id| *id > 0).with_context(|| {
                    format!("--replica {id}: give the id of one of the config's [[controller.replicas]]")
                })?);
            }
            "--conf-server" => {
                let servers = value("HOST:PORT[,...]")?.to_string_lossy().into_owned();
                let bad = |a: &str| {
                    a.rsplit_once(':').is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
                        || !a.chars().all(|c| c.is_ascii_alphanumeric() || ".:-_[]".contains(c))
                };
                if servers.split(',').any(bad) {
                    bail!("--conf-server {servers}: give the controller's HOST:PORT (comma-separated for replicas)");
                }
                options.conf_server = Some(servers);
            }
            "--login" if inline.is_none() => options.login = true,
            "-h" | "--help" => return Ok(None),
            _ => bail!("unknown option `{arg}`\n\n{USAGE}"),
        }
    }
    if !options.prefix.is_absolute() {
        bail!("--prefix must be an absolute path, not {}", options.prefix.display());
    }
    Ok(Some(options))
}

/// `path` (absolute, as on the installed system) below the install root.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// The `drover` user's uid and gid, if this host has one.
fn service_user() -> Option<(nix::unistd::Uid, nix::unistd::Gid)> {
    nix::unistd::User::from_name(SERVICE_USER).ok().flatten().map(|user| (user.uid, user.gid))
}

/// Writes `bytes` to `path` with `mode` unless it already holds them (through a new file renamed
/// over the old one, so that a running binary is replaced, not overwritten). Says what it did.
fn put(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let same = std::fs::read(path).is_ok_and(|old| old == bytes);
    if same {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
        println!("unchanged {}", path.display());
        return Ok(());
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".drover-new");
    let partial = PathBuf::from(partial);
    let _ = std::fs::remove_file(&partial);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&partial)
        .with_context(|| format!("writing {}", partial.display()))?;
    std::io::Write::write_all(&mut file, bytes).with_context(|| format!("writing {}", partial.display()))?;
    file.sync_all().with_context(|| format!("writing {}", partial.display()))?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))?;
    println!("installed {}", path.display());
    Ok(())
}

/// Creates `path` with `mode` (and missing parents) and sets its mode and, when given, owner.
fn directory(path: &Path, mode: u32, owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>) -> anyhow::Result<()> {
    std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    if let Some((uid, gid)) = owner {
        nix::unistd::chown(path, Some(uid), Some(gid)).with_context(|| format!("chown {}", path.display()))?;
    }
    Ok(())
}

/// A binary next to the running `drover`.
fn built(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the drover binary")?;
    let path = exe.with_file_name(name);
    if !path.is_file() {
        bail!(
            "{name} not found next to {}; build the whole workspace (cargo build --release --workspace)",
            exe.display()
        );
    }
    Ok(path)
}

/// Creates the `drover` system user (on `/` only; a staging tree's users are the image's).
fn create_user(root: &Path) -> anyhow::Result<()> {
    if service_user().is_some() {
        println!("unchanged user {SERVICE_USER}");
        return Ok(());
    }
    if root != Path::new("/") {
        println!(
            "note: no `{SERVICE_USER}` user on this host; create it on the installed system (see docs/admin/install.md)"
        );
        return Ok(());
    }
    let status = std::process::Command::new("useradd")
        .args(["--system", "--user-group", "--home-dir", "/var/lib/drover", "--no-create-home"])
        .args(["--shell", "/usr/sbin/nologin", "--comment", "Drover controller", SERVICE_USER])
        .status()
        .context("running useradd")?;
    if !status.success() {
        bail!("useradd could not create the `{SERVICE_USER}` user");
    }
    println!("created user {SERVICE_USER}");
    Ok(())
}

/// Runs `drover install`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let Some(options) = parse(args)? else {
        println!("{USAGE}");
        return Ok(0);
    };
    let is_root = nix::unistd::geteuid().is_root();
    if !is_root && options.root == Path::new("/") {
        bail!("installing on this host needs root (or --root DIR for a staging tree)");
    }
    // What is given is checked before anything is written.
    if options.conf_server.is_some() && (options.config.is_some() || options.replica.is_some()) {
        bail!(
            "--conf-server: a configless host takes its config from the controller; --config and --replica \
             belong to controller hosts"
        );
    }
    if let Some(config) = &options.config {
        drover_shared::config::Config::load(config)?;
    }
    if let Some(key) = &options.key {
        drover_shared::auth::ClusterKey::load(key)?;
    }
    let root = &options.root;
    if is_root {
        create_user(root)?;
    }
    let owner = if is_root { service_user() } else { None };

    // Commands and daemons.
    let bin = under(root, &options.prefix.join("bin"));
    let sbin = under(root, &options.prefix.join("sbin"));
    directory(&bin, 0o755, None)?;
    directory(&sbin, 0o755, None)?;
    let exe = std::env::current_exe().context("locating the drover binary")?;
    let read = |path: &Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    put(&bin.join("drover"), &read(&exe)?, 0o755)?;
    for daemon in ["drover-ctld", "drover-noded"] {
        put(&sbin.join(daemon), &read(&built(daemon)?)?, 0o755)?;
    }
    for applet in APPLETS {
        let link = bin.join(applet);
        if std::fs::read_link(&link).is_ok_and(|target| target == Path::new("drover")) {
            continue;
        }
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("drover", &link).with_context(|| format!("linking {}", link.display()))?;
    }
    println!("linked {} → drover in {}", APPLETS.join(" "), bin.display());

    // Units, naming the binaries where they were put.
    let units = under(root, Path::new("/etc/systemd/system"));
    directory(&units, 0o755, None)?;
    let prefix = format!("{}/", options.prefix.to_string_lossy().trim_end_matches('/'));
    for (name, text) in [("drover-ctld.service", CTLD_UNIT), ("drover-noded.service", NODED_UNIT)] {
        put(&units.join(name), text.replace(UNIT_PREFIX, &prefix).as_bytes(), 0o644)?;
    }

    if options.conf_server.is_some() || options.login {
        return configless_host(&options, &units, &prefix, is_root);
    }
    remove_configless_drop_in(&units)?;

    // Directories, config and key.
    let etc = under(root, Path::new("/etc/drover"));
    directory(&etc, 0o755, None)?;
    directory(&under(root, Path::new("/var/lib/drover")), 0o755, owner)?;
    directory(&under(root, Path::new("/var/spool/drover")), 0o755, None)?;
    let config = etc.join("cluster.toml");
    match &options.config {
        Some(given) => put(&config, &read(given)?, 0o644)?,
        None if config.exists() => println!("kept {}", config.display()),
        None => {
            put(&config, STARTER_CONFIG.as_bytes(), 0o644)?;
            println!("note: {} is the commented example; edit it for this cluster", config.display());
        }
    }
    let key = etc.join("cluster.key");
    let installed = drover_shared::config::Config::load(&config)?;
    // ctld reads the key as the `drover` user, so it is theirs where a controller runs: the
    // host that generated it, one whose controller or replica address is its own, one given
    // `--replica`. Everywhere else (compute nodes) only root (noded) reads it. A kept key keeps
    // its owner.
    let controller_here = is_controller_host(&options, &installed)?;
    let key_owner = match &options.key {
        Some(given) => {
            put(&key, &read(given)?, 0o600)?;
            Some(if controller_here { owner } else { root_owner(is_root) })
        }
        None if key.exists() => {
            println!("kept {}", key.display());
            None
        }
        None => {
            drover_shared::auth::ClusterKey::generate(&key)?;
            println!("generated {} (copy it to every host: drover install --key FILE)", key.display());
            Some(owner)
        }
    };
    if let Some(Some((uid, gid))) = key_owner {
        nix::unistd::chown(&key, Some(uid), Some(gid)).with_context(|| format!("chown {}", key.display()))?;
    }
    replica_drop_in(&options, &units, &prefix, &installed, owner)?;
    println!(
        "installed; next: systemctl daemon-reload, then systemctl enable --now drover-ctld (controller) \
         or drover-noded (compute nodes)"
    );
    Ok(0)
}

/// Whether this host runs a controller: `--replica N`, or the config's controller address or a
/// replica's address is one of this host's (it can bind it).
fn is_controller_host(options: &Options, config: &drover_shared::config::Config) -> anyhow::Result<bool> {
    if config.replicas.is_empty() {
        return Ok(is_local(&config.controller_address));
    }
    Ok(this_hosts_replica(options, config)?.is_some())
}

/// Whether `address` (`IP:port`) is one of this host's: it can bind its IP.
fn is_local(address: &str) -> bool {
    address.parse::<std::net::SocketAddr>().is_ok_and(|a| std::net::TcpListener::bind((a.ip(), 0)).is_ok())
}

/// root, as the owner of a compute node's copy of the key (`None` when not installing as root:
/// a staging tree keeps the installer's ownership).
fn root_owner(is_root: bool) -> Option<(nix::unistd::Uid, nix::unistd::Gid)> {
    is_root.then(|| (nix::unistd::Uid::from_raw(0), nix::unistd::Gid::from_raw(0)))
}

/// The replica of `config` this host runs: `--replica N`, else the one whose address (or Raft
/// address) this host holds (it can bind it); none when no replica's address is this host's.
fn this_hosts_replica(options: &Options, config: &drover_shared::config::Config) -> anyhow::Result<Option<u64>> {
    if let Some(id) = options.replica {
        let ids: Vec<String> = config.replicas.iter().map(|r| r.id.to_string()).collect();
        if !config.replicas.iter().any(|r| r.id == id) {
            bail!("--replica {id}: the config's [[controller.replicas]] are {}", ids.join(", "));
        }
        return Ok(Some(id));
    }
    let mine: Vec<u64> =
        config.replicas.iter().filter(|r| is_local(&r.address) || is_local(&r.raft_address)).map(|r| r.id).collect();
    match mine[..] {
        [] => Ok(None),
        [id] => Ok(Some(id)),
        _ => {
            let ids: Vec<String> = mine.iter().map(u64::to_string).collect();
            bail!("replicas {} all have addresses of this host: give --replica N for the one it runs", ids.join(", "))
        }
    }
}

/// The drop-in that makes noded configless or a login host.
fn configless_drop_in_path(units: &Path) -> PathBuf {
    units.join("drover-noded.service.d").join("configless.conf")
}

/// Removes a configless drop-in written before (the host has a config of its own now).
fn remove_configless_drop_in(units: &Path) -> anyhow::Result<()> {
    let path = configless_drop_in_path(units);
    if path.exists() {
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        println!("removed {} (this host reads /etc/drover/cluster.toml)", path.display());
    }
    Ok(())
}

/// The rest of installing a configless host or a login host: its key (given or kept, never
/// generated: it must be the controller's), no config of its own, and noded's drop-in.
fn configless_host(options: &Options, units: &Path, prefix: &str, is_root: bool) -> anyhow::Result<i32> {
    let root = &options.root;
    let etc = under(root, Path::new("/etc/drover"));
    directory(&etc, 0o755, None)?;
    directory(&under(root, Path::new("/var/spool/drover")), 0o755, None)?;
    let config = etc.join("cluster.toml");
    if options.conf_server.is_some() && config.exists() {
        bail!(
            "{} exists: this host's commands would read it instead of the controller's config; move it away \
             (a configless host keeps only the key)",
            config.display()
        );
    }
    if options.conf_server.is_none() && !config.exists() {
        bail!("--login without --conf-server needs {}; give --config FILE or --conf-server", config.display());
    }
    let key = etc.join("cluster.key");
    match &options.key {
        Some(given) => {
            let bytes = std::fs::read(given).with_context(|| format!("reading {}", given.display()))?;
            put(&key, &bytes, 0o600)?;
            if let Some((uid, gid)) = root_owner(is_root) {
                nix::unistd::chown(&key, Some(uid), Some(gid)).with_context(|| format!("chown {}", key.display()))?;
            }
        }
        None if key.exists() => println!("kept {}", key.display()),
        None => bail!("a configless host needs the controller's key: --key FILE (a copy of its cluster.key)"),
    }
    let exec = NODED_UNIT
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .expect("the noded unit has an ExecStart= line")
        .replace(UNIT_PREFIX, prefix);
    let mut exec = exec.replace(" --config /etc/drover/cluster.toml", "");
    if let Some(servers) = &options.conf_server {
        exec.push_str(&format!(" --conf-server {servers} --key /etc/drover/cluster.key"));
    }
    if options.login {
        exec.push_str(" --login");
    }
    let what = if options.login { "a login host" } else { "a configless compute node" };
    let text = format!(
        "# Written by `drover install`: this host is {what} (docs/admin/configless.md).\n\
         # `drover install` rewrites this file, and removes it when the host gets a config of its own.\n\
         [Service]\n\
         ExecStart=\n\
         {exec}\n"
    );
    let path = configless_drop_in_path(units);
    directory(path.parent().expect("a drop-in has a directory"), 0o755, None)?;
    put(&path, text.as_bytes(), 0o644)?;
    println!("installed; next: systemctl daemon-reload, then systemctl enable --now drover-noded");
    Ok(0)
}

/// Writes `drover-ctld.service.d/replica.conf` when the config lists replicas and this host runs
/// one (docs/admin/ha.md): its `--replica N`, `Restart=always` (a replica exits when it loses
/// the lead and expects to be started again, as a follower) and its state directory. Removes a
/// drop-in written before when the config lists none or this host runs none.
fn replica_drop_in(
    options: &Options,
    units: &Path,
    prefix: &str,
    config: &drover_shared::config::Config,
    owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>,
) -> anyhow::Result<()> {
    let dir = units.join("drover-ctld.service.d");
    let path = dir.join("replica.conf");
    let replica = if config.replicas.is_empty() {
        if options.replica.is_some() {
            bail!("--replica: {} lists no [[controller.replicas]]", config.source.display());
        }
        None
    } else {
        this_hosts_replica(options, config)?
    };
    let Some(id) = replica else {
        if path.exists() {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            println!("removed {} (this host runs no replica)", path.display());
        } else if !config.replicas.is_empty() {
            println!("note: no replica of the config has this host's address; no replica drop-in (give --replica N)");
        }
        return Ok(());
    };
    let replica = config.replicas.iter().find(|r| r.id == id).expect("chosen from the config");
    // ctld writes only its state directory: /var/lib/drover is the unit's; another needs
    // ReadWritePaths= (and to exist, owned by the service user, before the unit starts).
    // The config was loaded from below the root: a relative state_dir resolved there.
    let state_dir = match replica.state_dir.strip_prefix(&options.root) {
        Ok(inside) if options.root != Path::new("/") => Path::new("/").join(inside),
        _ => replica.state_dir.clone(),
    };
    let state_dir = &state_dir;
    directory(&under(&options.root, state_dir), 0o755, owner)?;
    let writable = if state_dir.starts_with("/var/lib/drover") {
        String::new()
    } else {
        format!("ReadWritePaths={}\n", state_dir.display())
    };
    let exec = CTLD_UNIT
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .expect("the ctld unit has an ExecStart= line")
        .replace(UNIT_PREFIX, prefix);
    let text = format!(
        "# Written by `drover install`: this host runs replica {id} of [[controller.replicas]]\n\
         # (docs/admin/ha.md). `drover install` rewrites this file; it removes it when the config\n\
         # lists no replicas.\n\
         [Unit]\n\
         # A replica exits (status 75) whenever it stops leading: it must always come back.\n\
         StartLimitIntervalSec=0\n\n\
         [Service]\n\
         ExecStart=\n\
         {exec} --replica {id}\n\
         Restart=always\n\
         {writable}"
    );
    directory(&dir, 0o755, None)?;
    put(&path, text.as_bytes(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_name_the_installed_binaries_under_the_prefix() {
        for unit in [CTLD_UNIT, NODED_UNIT] {
            let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
            assert!(exec.starts_with(&format!("ExecStart={UNIT_PREFIX}sbin/drover-")), "{exec}");
            assert!(unit.replace(UNIT_PREFIX, "/opt/drover/").contains("ExecStart=/opt/drover/sbin/drover-"));
        }
        assert!(NODED_UNIT.contains("\nDelegate=yes\n") && NODED_UNIT.contains("\nKillMode=process\n"));
        assert!(CTLD_UNIT.contains(&format!("\nUser={SERVICE_USER}\n")));
    }

    #[test]
    fn paths_go_below_the_root() {
        assert_eq!(under(Path::new("/tmp/r"), Path::new("/etc/drover")), PathBuf::from("/tmp/r/etc/drover"));
        assert_eq!(under(Path::new("/"), Path::new("/etc/drover")), PathBuf::from("/etc/drover"));
    }
}
