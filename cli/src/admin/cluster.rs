//! A complete cluster on one host, for newcomers, tests and benchmarks: one ctld and one noded per
//! node the config declares, on 127.0.0.1, all state in one directory:
//!
//! ```text
//! DIR/cluster.toml   the home's file: includes the admin's file, adds ctld's port, state dir, key
//! DIR/cluster.key    the cluster key (0600)
//! DIR/ctld/          ctld's database and client socket
//! DIR/ctld-<id>/     with `--replicas N`: each replica's database, Raft log and client socket
//! DIR/noded-<name>/  each node's job directories
//! DIR/run/*.pid      pids of what `up` started (ctld.port its node port);  DIR/log/*.log  their logs
//! DIR/bin/           sbatch, squeue, … as links to this binary;  DIR/env  the file to source
//! ```
//!
//! `up` starts only what is not running, so it is also the restart command. It writes the home's
//! file on every run (keeping the port of the running cluster) and, when ctld already runs, asks
//! it to reconfigure: the admin's file is the only source, and `up` or `scontrol reconfigure`
//! applies its edits. Commands run through `DIR/bin/` find the cluster from their own path.
//!
//! `up --replicas 3` runs replicated controllers instead (docs/admin/ha.md): three
//! `drover-ctld --replica N` on free loopback ports, listed in the home's file, which later `up`s
//! keep. A replica exits when it loses the lead (status 75) and expects a supervisor to start it
//! again; on one host, running `up` again is that supervisor. `up --replicas 3` on a home that
//! ran one controller converts it, and `up --replicas 1` converts back, keeping every job and
//! its id (`convert`; what it replaces goes into `DIR/old-<time>/`).

use super::ClusterArgs;
use crate::client;
use anyhow::{Context, bail};
use drover_shared::config::Config;
use drover_shared::proto::client::{Request, Response};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const APPLETS: [&str; 18] = [
    "sbatch", "squeue", "sacct", "scancel", "sinfo", "scontrol", "sshare", "sprio", "srun", "salloc", "sreport",
    "sacctmgr", "sdiag", "sstat", "sattach", "sbcast", "sgather", "strigger",
];

struct Layout {
    home: PathBuf,
}

impl Layout {
    fn config(&self) -> PathBuf {
        self.home.join("cluster.toml")
    }
    fn pid_file(&self, daemon: &str) -> PathBuf {
        self.home.join("run").join(format!("{daemon}.pid"))
    }
    fn log_file(&self, daemon: &str) -> PathBuf {
        self.home.join("log").join(format!("{daemon}.log"))
    }
    fn port_file(&self) -> PathBuf {
        self.home.join("run").join("ctld.port")
    }
    fn node_dir(&self, node: &str) -> PathBuf {
        self.home.join(format!("noded-{node}"))
    }
    fn replica_dir(&self, id: u64) -> PathBuf {
        self.home.join(format!("ctld-{id}"))
    }
}

/// Finds a sibling binary of this executable (`drover-ctld`, `drover-noded`).
fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the drover binary")?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!("{} not found next to {}; build the whole workspace (cargo build --workspace)", name, exe.display());
    }
    Ok(path)
}

/// The admin's file, absolute: `--config`, else `DROVER_CONF` (unless it names this home's own
/// file), else the file this home's file already includes, else `etc/cluster.toml`. A cluster
/// home's file given instead stands for the admin's file it includes. Validated.
fn admin_file(args: &ClusterArgs, layout: &Layout) -> anyhow::Result<PathBuf> {
    let given = args
        .config
        .clone()
        .or_else(|| std::env::var_os("DROVER_CONF").map(PathBuf::from).filter(|p| *p != layout.config()))
        .or_else(|| home_file_value(layout, &["include"]).map(|include| layout.home.join(include)))
        .unwrap_or_else(|| PathBuf::from("etc/cluster.toml"));
    let given = std::path::absolute(&given).with_context(|| format!("resolving {}", given.display()))?;
    Ok(Config::load(&given)?.source)
}

/// A string in the home's current file (`["controller", "address"]`), whatever its format
/// (older `drover up`s wrote a whole copy of the admin's file).
fn home_file_value(layout: &Layout, keys: &[&str]) -> Option<String> {
    let table: toml::Table = toml::from_str(&std::fs::read_to_string(layout.config()).ok()?).ok()?;
    let (last, tables) = keys.split_last()?;
    let mut table = &table;
    for key in tables {
        table = table.get(*key)?.as_table()?;
    }
    table.get(*last)?.as_str().map(str::to_owned)
}

/// The `[[controller.replicas]]` the home's current file lists, as written.
fn home_replicas(layout: &Layout) -> Vec<toml::Table> {
    let table = std::fs::read_to_string(layout.config()).ok().and_then(|t| toml::from_str::<toml::Table>(&t).ok());
    let replicas = table.as_ref().and_then(|t| t.get("controller")?.get("replicas")?.as_array().cloned());
    replicas.unwrap_or_default().into_iter().filter_map(|r| r.as_table().cloned()).collect()
}

/// The replicas this home runs (none for one controller): the ones its file lists, addresses
/// and all, unless `--replicas` asks for another number. Going from one controller to replicas
/// or back is a conversion (see [`convert`]); another number of replicas is refused (add or
/// remove one at a time instead). New replicas get free loopback ports.
fn plan_replicas(layout: &Layout, wanted: Option<usize>, source: &Config) -> anyhow::Result<Vec<toml::Table>> {
    if !source.replicas.is_empty() {
        bail!(
            "{} lists [[controller.replicas]] (replicas on hosts of their own, started with \
             `drover-ctld --replica N`); `drover up` runs its replicas on this host: remove them \
             from the file and run `drover up --replicas 3`",
            source.source.display()
        );
    }
    let existing = home_replicas(layout);
    let count = wanted.unwrap_or(existing.len());
    if count == existing.len() || (count <= 1 && existing.is_empty()) {
        return Ok(existing);
    }
    if count <= 1 {
        return Ok(Vec::new());
    }
    if !existing.is_empty() {
        bail!(
            "the cluster in {} runs {} replicas; `drover up` converts between one controller and replicas, \
             not between numbers of replicas: run it without --replicas (or with --replicas 1 to go back \
             to one controller)",
            layout.home.display(),
            existing.len()
        );
    }
    // All the ports are held at once, so that no two are the same.
    let listeners = (0..count * 2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("finding free ports on 127.0.0.1")?;
    let mut ports = Vec::new();
    for listener in &listeners {
        ports.push(listener.local_addr()?.port());
    }
    let mut replicas = Vec::new();
    for (id, pair) in (1u64..).zip(ports.chunks(2)) {
        let mut replica = toml::Table::new();
        replica.insert("id".into(), toml::Value::Integer(i64::try_from(id)?));
        replica.insert("address".into(), format!("127.0.0.1:{}", pair[0]).into());
        replica.insert("raft_address".into(), format!("127.0.0.1:{}", pair[1]).into());
        replica.insert("state_dir".into(), layout.replica_dir(id).to_string_lossy().into_owned().into());
        replicas.push(replica);
    }
    Ok(replicas)
}

/// Writes the home's file: an `include` of the admin's file and what belongs to this home. The
/// port stays the running cluster's: the one in the current file, else the one ctld reported
/// (`run/ctld.port`) while it runs, else a free one. `replicas` (see [`plan_replicas`]) go
/// under `[controller]`.
fn write_home_file(
    layout: &Layout,
    source: &Path,
    ctld_running: bool,
    replicas: Vec<toml::Table>,
) -> anyhow::Result<()> {
    let address = home_file_value(layout, &["controller", "address"]).or_else(|| {
        let port = std::fs::read_to_string(layout.port_file()).ok().filter(|_| ctld_running)?;
        Some(format!("127.0.0.1:{}", port.trim()))
    });
    let address = match address {
        Some(address) => address,
        None => format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()),
    };
    let path = |p: PathBuf| toml::Value::String(p.to_string_lossy().into_owned());
    let mut controller = toml::Table::new();
    controller.insert("address".into(), address.into());
    controller.insert("state_dir".into(), path(layout.home.join("ctld")));
    controller.insert("key_file".into(), path(layout.home.join("cluster.key")));
    // The user who runs the cluster administers it (root always does).
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid()).ok().flatten().map(|u| u.name);
    if let Some(me) = me.filter(|_| !nix::unistd::geteuid().is_root()) {
        controller.insert("admins".into(), vec![me].into());
    }
    if !replicas.is_empty() {
        controller
            .insert("replicas".into(), toml::Value::Array(replicas.into_iter().map(toml::Value::Table).collect()));
    }
    let mut table = toml::Table::new();
    table.insert("include".into(), path(source.to_owned()));
    table.insert("controller".into(), controller.into());
    let text = format!(
        "# Written by `drover up` for the cluster in {home}. Its configuration is the file included\n\
         # below: edit that one, then run `scontrol reconfigure` (or `drover up`). This file adds only\n\
         # what belongs to this cluster's home; `drover up` rewrites it.\n{body}",
        home = layout.home.display(),
        body = toml::to_string(&table)?
    );
    let target = layout.config();
    let partial = layout.home.join("cluster.toml.new");
    std::fs::write(&partial, text).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &target).with_context(|| format!("writing {}", target.display()))?;
    Ok(())
}

/// Finishes a conversion between one controller and replicas that the home's file asks for and
/// its state directories do not show yet (so an interrupted one is finished by the next `up`):
///
/// - The file lists replicas and the single controller's database is still in `DIR/ctld/`: the
///   single controller is stopped, the first replica is seeded from its database
///   (`drover-ctld --replica 1 --seed`), and the database is moved into `DIR/old-<time>/`.
/// - The file lists none and `DIR/ctld-<id>/` directories remain: the replicas are stopped, the
///   single controller is seeded from their databases (the one that applied the furthest) and
///   the replicas' directories are moved into `DIR/old-<time>/`.
///
/// Nodes keep running: they find the new controller from the file at their next connection.
fn convert(layout: &Layout, config: &Config, ctld: &Path) -> anyhow::Result<()> {
    let single_db = layout.home.join("ctld").join("drover.db");
    let conf = layout.config();
    let mut seed = Command::new(ctld);
    seed.arg("--config").arg(&conf).env("DROVER_CONF", &conf).stdin(Stdio::null());
    let replaced: Vec<PathBuf> = if let Some(first) = config.replicas.iter().map(|r| r.id).min() {
        if !single_db.exists() {
            return Ok(());
        }
        println!(
            "converting the cluster in {} from one controller to {} replicas",
            layout.home.display(),
            config.replicas.len()
        );
        stop_recorded(layout, "ctld");
        seed.arg("--replica").arg(first.to_string()).arg("--seed").arg(&single_db);
        ["", "-wal", "-shm"]
            .iter()
            .map(|suffix| layout.home.join("ctld").join(format!("drover.db{suffix}")))
            .filter(|p| p.exists())
            .collect()
    } else {
        let mut dirs: Vec<(u64, PathBuf)> = std::fs::read_dir(&layout.home)
            .with_context(|| format!("reading {}", layout.home.display()))?
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| Some((e.file_name().to_str()?.strip_prefix("ctld-")?.parse().ok()?, e.path())))
            .collect();
        if dirs.is_empty() {
            return Ok(());
        }
        dirs.sort();
        println!("converting the cluster in {} from {} replicas to one controller", layout.home.display(), dirs.len());
        for (id, _) in &dirs {
            stop_recorded(layout, &format!("ctld-{id}"));
        }
        for (_, dir) in &dirs {
            if dir.join("drover.db").exists() {
                seed.arg("--seed").arg(dir.join("drover.db"));
            }
        }
        dirs.into_iter().map(|(_, dir)| dir).collect()
    };
    let out = seed.output().with_context(|| format!("starting {}", ctld.display()))?;
    if !out.status.success() {
        bail!(
            "seeding the new controller failed; nothing was moved and `drover up` tries again:\n{}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    print!("{}", String::from_utf8_lossy(&out.stdout));
    let old = layout.home.join(format!("old-{}", drover_shared::now()));
    std::fs::create_dir_all(&old).with_context(|| format!("creating {}", old.display()))?;
    for path in replaced {
        let name = path.file_name().context("a state path has a name")?;
        std::fs::rename(&path, old.join(name))
            .with_context(|| format!("moving {} into {}", path.display(), old.display()))?;
    }
    println!("the replaced state is in {} (remove it once the cluster is as it should be)", old.display());
    Ok(())
}

/// Stops the daemon a pid file names (a controller being converted), if it runs, and forgets it.
fn stop_recorded(layout: &Layout, daemon: &str) {
    let pid_file = layout.pid_file(daemon);
    if let Some(pid) = running(&pid_file, "drover-ctld") {
        terminate(pid);
        wait_stopped(vec![(daemon.to_owned(), pid)], STOP_GRACE, &mut std::io::stdout());
    }
    let _ = std::fs::remove_file(pid_file);
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether the pid file names a live process running `binary` (a recycled pid does not count).
fn running(path: &Path, binary: &str) -> Option<i32> {
    let pid = read_pid(path)?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv0 = cmdline.split(|b| *b == 0).next()?;
    let argv0 = String::from_utf8_lossy(argv0);
    (argv0.ends_with(binary) && alive(pid)).then_some(pid)
}

/// Whether a process exists and is not a zombie.
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
}

fn start(layout: &Layout, daemon: &str, program: &Path, args: &[String]) -> anyhow::Result<i32> {
    // Logs name users, jobs and paths: the owner's only, also when an older `up` left them
    // readable.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(layout.log_file(daemon))
        .with_context(|| format!("opening {}", layout.log_file(daemon).display()))?;
    log.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private", layout.log_file(daemon).display()))?;
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    command.env("DROVER_CONF", layout.config());
    command.process_group(0);
    let child = command.spawn().with_context(|| format!("starting {}", program.display()))?;
    let pid = i32::try_from(child.id()).context("pid out of range")?;
    std::fs::write(layout.pid_file(daemon), format!("{pid}\n"))?;
    // The daemon outlives this command; its exit status is not ours to collect.
    std::mem::forget(child);
    Ok(pid)
}

/// Writes `bin/` and `env`; `socket` is the one controller's (replicas' commands find the leader
/// from the config).
fn write_env(layout: &Layout, socket: Option<&Path>) -> anyhow::Result<()> {
    let bin = layout.home.join("bin");
    std::fs::create_dir_all(&bin)?;
    let exe = std::env::current_exe()?;
    for applet in APPLETS {
        let link = bin.join(applet);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&exe, &link).with_context(|| format!("linking {}", link.display()))?;
    }
    let _ = std::fs::remove_file(bin.join("drover"));
    std::os::unix::fs::symlink(&exe, bin.join("drover"))?;
    let socket = match socket {
        Some(socket) => format!("export DROVER_SOCKET='{}'", socket.display()),
        None => "unset DROVER_SOCKET".into(),
    };
    let env = format!(
        "# Source this file to use the cluster in {home}\nexport DROVER_HOME='{home}'\nexport DROVER_CONF='{conf}'\n{socket}\nexport PATH='{bin}':\"$PATH\"\n",
        home = layout.home.display(),
        conf = layout.config().display(),
        bin = bin.display(),
    );
    std::fs::write(layout.home.join("env"), env)?;
    Ok(())
}

fn ping(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
        && client::call_at(socket, &Request::Ping).is_ok_and(|r| matches!(r, Response::Pong { .. }))
}

/// Starts whatever part of the cluster is not running.
pub(crate) fn up(args: &ClusterArgs) -> anyhow::Result<i32> {
    let layout = Layout { home: args.home.clone() };
    // Before anything is created: a file that does not load leaves no home behind.
    let source = admin_file(args, &layout)?;
    let replicas = plan_replicas(&layout, args.replicas, &Config::load(&source)?)?;
    for dir in ["run", "log", "ctld"] {
        std::fs::create_dir_all(layout.home.join(dir))
            .with_context(|| format!("creating {}", layout.home.join(dir).display()))?;
    }
    // Local users other than the owner must reach the client socket; the directory holds no secrets
    // except the key, which is 0600.
    for dir in [layout.home.clone(), layout.home.join("ctld")] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    }
    std::fs::set_permissions(layout.home.join("log"), std::fs::Permissions::from_mode(0o700))?;
    let ctld_running = running(&layout.pid_file("ctld"), "drover-ctld");
    write_home_file(&layout, &source, ctld_running.is_some(), replicas)?;
    let config = Config::load(&layout.config())?;
    if !config.key_file.exists() {
        drover_shared::auth::ClusterKey::generate(&config.key_file)?;
    }
    let sockets = config.client_sockets();
    write_env(&layout, config.replicas.is_empty().then(|| config.client_socket()).as_deref())?;

    let ctld = sibling("drover-ctld")?;
    let noded = sibling("drover-noded")?;
    convert(&layout, &config, &ctld)?;
    let conf = layout.config().to_string_lossy().into_owned();
    if !nix::unistd::geteuid().is_root() {
        println!(
            "not running as root: jobs will run without cgroups (no memory, CPU, process or GPU device limits), \
             and only as this user; run `drover up` as root for both"
        );
    }
    // Each controller: its name (pid and log files), its arguments, and whether it already ran.
    let controllers: Vec<(String, Vec<String>)> = if config.replicas.is_empty() {
        let port_file = layout.port_file().to_string_lossy().into_owned();
        vec![("ctld".into(), vec!["--config".into(), conf.clone(), "--port-file".into(), port_file])]
    } else {
        config
            .replicas
            .iter()
            .map(|r| {
                (format!("ctld-{}", r.id), vec!["--config".into(), conf.clone(), "--replica".into(), r.id.to_string()])
            })
            .collect()
    };
    let mut pids = Vec::new();
    let mut any_running = false;
    for (daemon, args) in &controllers {
        match running(&layout.pid_file(daemon), "drover-ctld") {
            Some(pid) => {
                println!("{daemon} already running (pid {pid})");
                any_running = true;
                pids.push(pid);
            }
            None => {
                let pid = start(&layout, daemon, &ctld, args)?;
                println!("started {daemon} (pid {pid})");
                pids.push(pid);
            }
        }
    }
    let log = if config.replicas.is_empty() { layout.log_file("ctld") } else { layout.home.join("log") };
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        if let Some(socket) = sockets.iter().find(|socket| ping(socket)) {
            break socket.clone();
        }
        // The pids, not the pid files' command lines: right after the fork they still read `drover`.
        if Instant::now() > deadline || !pids.iter().any(|pid| alive(*pid)) {
            bail!("ctld did not come up; see {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if any_running {
        reconfigure(&leader, &source)?;
    }
    let names: Vec<String> = config.nodes.iter().map(|n| n.name.clone()).collect();
    for name in &names {
        let daemon = format!("noded-{name}");
        match running(&layout.pid_file(&daemon), "drover-noded") {
            Some(pid) => println!("{daemon} already running (pid {pid})"),
            None => {
                let state_dir = layout.node_dir(name);
                std::fs::create_dir_all(&state_dir)?;
                let args = [
                    "--config".into(),
                    conf.clone(),
                    "--name".into(),
                    name.clone(),
                    "--state-dir".into(),
                    state_dir.to_string_lossy().into_owned(),
                ];
                let pid = start(&layout, &daemon, &noded, &args)?;
                println!("started {daemon} (pid {pid})");
            }
        }
    }
    wait_for_nodes(&layout, &sockets, &names)?;
    println!("cluster `{}` is up; run:  source {}", config.cluster_name, layout.home.join("env").display());
    Ok(0)
}

/// Has the running ctld apply the admin's file (what `scontrol reconfigure` does).
fn reconfigure(socket: &Path, source: &Path) -> anyhow::Result<()> {
    match client::call_at(socket, &Request::Reconfigure)? {
        Response::Done => {
            println!("ctld reconfigured from {}", source.display());
            Ok(())
        }
        Response::Error { detail, .. } => {
            bail!(
                "the running cluster keeps its configuration: {detail}\n(restart it with `drover down` and `drover up`)"
            )
        }
        _ => bail!("unexpected answer from the controller to reconfigure"),
    }
}

/// Waits until every node is registered with the controller (the leading replica, whichever
/// of `sockets` answers: it may change meanwhile).
fn wait_for_nodes(layout: &Layout, sockets: &[PathBuf], names: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = sockets.iter().filter(|s| s.exists()).find_map(|s| client::call_at(s, &Request::QueryNodes).ok());
        if let Some(Response::Nodes { nodes, .. }) = answer {
            let ready = names.iter().all(|name| nodes.iter().any(|n| &n.name == name && !n.not_responding));
            if ready {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("nodes did not register with ctld; see the logs in {}", layout.home.join("log").display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops what `up` started: nodes first, then ctld (or its replicas). Jobs keep running under
/// their supervisors, as they do when Slurm's daemons stop.
pub(crate) fn down(args: &ClusterArgs) -> anyhow::Result<i32> {
    let layout = Layout { home: args.home.clone() };
    let mut recorded: Vec<String> = std::fs::read_dir(layout.home.join("run"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".pid").map(str::to_owned))
        .collect();
    recorded.sort();
    let of = |prefix: &str| recorded.iter().filter(|d| d.starts_with(prefix)).cloned().collect::<Vec<_>>();
    let mut daemons: Vec<(String, &str)> = of("noded-").into_iter().map(|d| (d, "drover-noded")).collect();
    daemons.extend(of("ctld-").into_iter().map(|d| (d, "drover-ctld")));
    daemons.push(("ctld".into(), "drover-ctld"));
    // Every daemon is asked to stop at once; then the waits are said as they happen, so a slow
    // stop (ctld committing, noded reporting its jobs) never looks like a hang.
    let mut stopping: Vec<(String, i32)> = Vec::new();
    for (daemon, binary) in daemons {
        let pid_file = layout.pid_file(&daemon);
        if let Some(pid) = running(&pid_file, binary) {
            terminate(pid);
            println!("stopping {daemon} (pid {pid})");
            stopping.push((daemon, pid));
        }
        let _ = std::fs::remove_file(&pid_file);
    }
    wait_stopped(stopping, STOP_GRACE, &mut std::io::stdout());
    Ok(0)
}

/// How long a daemon has after SIGTERM before `drover down` kills it.
const STOP_GRACE: Duration = Duration::from_secs(5);

fn terminate(pid: i32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
}

/// Waits for the daemons in `stopping` to exit, printing each as it stops and, every second,
/// which are still running, on `out`; kills with SIGKILL those still running after `grace`.
fn wait_stopped(mut stopping: Vec<(String, i32)>, grace: Duration, out: &mut dyn std::io::Write) {
    let started = Instant::now();
    let mut said = Instant::now();
    while !stopping.is_empty() {
        stopping.retain(|(daemon, pid)| {
            let alive = alive(*pid);
            if !alive {
                let _ = writeln!(out, "stopped {daemon} (pid {pid})");
            }
            alive
        });
        if stopping.is_empty() {
            break;
        }
        if started.elapsed() >= grace {
            for (daemon, pid) in &stopping {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
                let _ = writeln!(out, "killed {daemon} (pid {pid}): still running {}s after SIGTERM", grace.as_secs());
            }
            return;
        }
        if said.elapsed() >= Duration::from_secs(1) {
            let names: Vec<&str> = stopping.iter().map(|(daemon, _)| daemon.as_str()).collect();
            let _ = writeln!(out, "waiting for {} to stop ({}s)", names.join(", "), started.elapsed().as_secs());
            let _ = out.flush();
            said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Says what runs.
pub(crate) fn status(args: &ClusterArgs) -> anyhow::Result<i32> {
    let layout = Layout { home: args.home.clone() };
    if !layout.config().exists() {
        println!("no cluster in {}", layout.home.display());
        return Ok(1);
    }
    // The admin's file may have been edited into one that does not load: say so, not "no cluster".
    let config = Config::load(&layout.config())?;
    // Each daemon, and for a replica its socket (every replica holds one; only the leader
    // answers on it).
    let mut daemons: Vec<(String, &str, Option<PathBuf>)> = Vec::new();
    if config.replicas.is_empty() {
        daemons.push(("ctld".into(), "drover-ctld", None));
    }
    for replica in &config.replicas {
        daemons.push((format!("ctld-{}", replica.id), "drover-ctld", Some(replica.state_dir.join("ctld.sock"))));
    }
    for node in &config.nodes {
        daemons.push((format!("noded-{}", node.name), "drover-noded", None));
    }
    let mut all = true;
    for (daemon, binary, socket) in daemons {
        match (running(&layout.pid_file(&daemon), binary), socket) {
            (Some(pid), None) => println!("{daemon}: running (pid {pid})"),
            (Some(pid), Some(socket)) => {
                let role = if ping(&socket) { "leader" } else { "follower" };
                println!("{daemon}: running (pid {pid}), {role}");
            }
            (None, socket) => {
                all = false;
                let again = if socket.is_some() { " (`drover up` starts it again)" } else { "" };
                println!("{daemon}: stopped{again}");
            }
        }
    }
    Ok(if all { 0 } else { 3 })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// A daemon that ignores SIGTERM: `drover down` says every second that it waits for it, then
    /// kills it and says so; one that exits on SIGTERM is reported stopped.
    #[test]
    fn down_says_what_it_waits_for_and_kills_what_ignores_it() {
        let mut stubborn =
            std::process::Command::new("sh").args(["-c", "trap '' TERM; exec sleep 30"]).spawn().unwrap();
        let mut polite = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let (a, b) = (i32::try_from(stubborn.id()).unwrap(), i32::try_from(polite.id()).unwrap());
        super::terminate(a);
        super::terminate(b);
        let mut out = Vec::new();
        super::wait_stopped(vec![("ctld".into(), a), ("noded-n1".into(), b)], Duration::from_millis(2500), &mut out);
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains(&format!("stopped noded-n1 (pid {b})")), "{out}");
        assert!(out.contains("waiting for ctld to stop (1s)"), "{out}");
        assert!(out.contains("waiting for ctld to stop (2s)"), "{out}");
        assert!(out.contains(&format!("killed ctld (pid {a}): still running 2s after SIGTERM")), "{out}");
        assert!(stubborn.wait().unwrap().code().is_none(), "killed by a signal");
        let _ = polite.wait();
    }
}
