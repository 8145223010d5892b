//! Several hosts on one machine, for the multi-host test: each host is a network namespace
//! (a veth pair to a bridge in the machine's namespace, so every host reaches every other), a
//! UTS namespace (its own host name, so noded takes its node name from it as on a real host)
//! and a mount namespace in which the host's own install tree — what `drover install --root
//! <tree>` wrote — is bind-mounted on `/etc/drover`, `/var/lib/drover`, `/var/spool/drover`,
//! `/usr/local/bin` and `/usr/local/sbin`. Daemons and commands then run there with the paths
//! of an installed system, unchanged (the units' `ExecStart=` lines, `/etc/drover/cluster.toml`,
//! the default token socket).
//!
//! A host's namespaces are held by a `sleep` process; everything else enters them with
//! `nsenter -t <holder> -m -u -n` (not `ip netns exec`, which remounts `/sys` and hides the
//! cgroup hierarchies). Everything is removed on drop: the daemons, what their jobs left, the
//! holders, the links and namespaces, and the mount points this made on the machine.

use crate::text;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where a host's install tree is mounted, as on an installed system.
const MOUNTED: [&str; 5] = ["/etc/drover", "/var/lib/drover", "/var/spool/drover", "/usr/local/bin", "/usr/local/sbin"];

/// Runs `ip` with `args`; the error names the command and what it printed.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("running ip {args:?}: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(format!("ip {}: {}", args.join(" "), text(&out.stderr).trim())) }
}

/// One host: its name, address and install tree, and the process holding its namespaces.
pub struct Host {
    pub name: String,
    pub ip: String,
    /// The host's install tree (`drover install --root`).
    pub root: PathBuf,
    netns: String,
    link: String,
    holder: Option<Child>,
    /// Daemons started on this host (unit name, process), stopped on drop.
    daemons: Vec<(String, Child)>,
}

impl Host {
    /// `nsenter` into only this host's network namespace (the machine's file system, host name
    /// and mounts stay): put it before a command line to run it on this host's network. Works
    /// before `boot` too.
    pub fn net_prefix(&self) -> Vec<String> {
        vec!["nsenter".into(), format!("--net=/run/netns/{}", self.netns), "--".into()]
    }

    /// Cuts this host off the network (its link to the bridge goes down): a network partition.
    pub fn cut(&self) {
        ip(&["link", "set", &self.link, "down"]).expect("cutting a host off");
    }

    /// Joins this host to the network again.
    pub fn heal(&self) {
        ip(&["link", "set", &self.link, "up"]).expect("joining a host again");
    }

    /// A command run on this host (in its namespaces), as root, in `/`.
    pub fn command(&self, program: &str) -> Command {
        self.command_in(Path::new("/"), program)
    }

    /// A command run on this host as root in `cwd` (entering a mount namespace moves to its
    /// root unless told otherwise).
    pub fn command_in(&self, cwd: &Path, program: &str) -> Command {
        let holder = self.holder.as_ref().expect("the host's namespaces").id().to_string();
        let mut command = Command::new("nsenter");
        command.args(["-t", &holder, "-m", "-u", "-n"]).arg(format!("--wd={}", cwd.display())).arg("--").arg(program);
        command
    }

    /// A command run on this host as `user` in `cwd` with nothing in its environment but `PATH`
    /// and `HOME` (as ssh, cron and batchspawner run commands), the installed commands first on
    /// `PATH`.
    pub fn as_user(&self, user: &str, cwd: &Path, program: &str) -> Command {
        let mut command = self.command_in(cwd, "setpriv");
        command.args([&format!("--reuid={user}"), &format!("--regid={user}"), "--init-groups", "--", "env", "-i"]);
        command.args(["PATH=/usr/local/bin:/usr/bin:/bin", &format!("HOME=/home/{user}"), program]);
        command
    }

    /// Starts the command line of the installed unit `unit` (its `ExecStart=`, as its `User=`)
    /// on this host, logging to `<root>/<unit>.log`; `extra` is appended to the command line
    /// (`--replica 2`).
    pub fn start_unit(&mut self, unit: &str) {
        self.start_unit_with(unit, &[]);
    }

    /// [`Host::start_unit`] with `extra` appended to the unit's command line. Drop-ins
    /// (`<unit>.service.d/*.conf`, in name order) count as systemd reads them: an empty
    /// `ExecStart=` clears the command line, a later one sets it.
    pub fn start_unit_with(&mut self, unit: &str, extra: &[&str]) {
        let units = self.root.join("etc/systemd/system");
        let file = units.join(format!("{unit}.service"));
        let mut texts =
            vec![std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))];
        let mut drop_ins: Vec<PathBuf> = std::fs::read_dir(units.join(format!("{unit}.service.d")))
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                    .collect()
            })
            .unwrap_or_default();
        drop_ins.sort();
        texts.extend(drop_ins.iter().map(|p| std::fs::read_to_string(p).unwrap()));
        let values = |key: &str| -> Vec<String> {
            texts.iter().flat_map(|t| t.lines().filter_map(|line| line.strip_prefix(key)).map(str::to_owned)).collect()
        };
        let exec = values("ExecStart=").into_iter().rfind(|v| !v.is_empty());
        let exec = exec.unwrap_or_else(|| panic!("{} has no ExecStart=", file.display()));
        let mut argv: Vec<&str> = exec.split_whitespace().collect();
        argv.extend_from_slice(extra);
        let user = values("User=").into_iter().last();
        self.start_daemon(unit, &argv, user.as_deref());
    }

    /// Stops the daemon `name` started here (SIGTERM, SIGKILL after 5 s), as systemd stops a
    /// unit with `KillMode=process`.
    pub fn stop_daemon(&mut self, name: &str) {
        let at = self.daemons.iter().position(|(n, _)| n == name).expect("a started daemon");
        let (_, mut child) = self.daemons.remove(at);
        let pid = nix::unistd::Pid::from_raw(child.id().cast_signed());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts `argv` on this host as the daemon `name` (as `user` where given, else root),
    /// logging to `<root>/<name>.log`, with nothing in its environment but `PATH`; stopped on
    /// drop.
    pub fn start_daemon(&mut self, name: &str, argv: &[&str], user: Option<&str>) {
        let mut command = match user {
            Some(user) => {
                let mut command = self.command("setpriv");
                command.args([&format!("--reuid={user}"), &format!("--regid={user}"), "--init-groups", "--"]);
                command.args(argv);
                command
            }
            None => {
                let (program, args) = argv.split_first().expect("a program");
                let mut command = self.command(program);
                command.args(args);
                command
            }
        };
        let log = std::fs::File::create(self.log(name)).expect("creating the log");
        command.env_clear().env("PATH", "/usr/local/bin:/usr/bin:/bin").stdin(Stdio::null());
        command.stdout(log.try_clone().expect("log")).stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().unwrap_or_else(|e| panic!("starting {name} on {}: {e}", self.name));
        self.daemons.push((name.to_owned(), child));
    }

    /// The pid of a unit started with [`Host::start_unit`] (`nsenter` and `setpriv` exec it).
    pub fn pid(&self, unit: &str) -> u32 {
        self.daemons.iter().find(|(name, _)| name == unit).map(|(_, child)| child.id()).expect("a started unit")
    }

    /// The log of a unit started with [`Host::start_unit`].
    pub fn log(&self, unit: &str) -> PathBuf {
        self.root.join(format!("{unit}.log"))
    }
}

/// Hosts joined by a bridge, each with its install tree below one scratch directory.
pub struct Hosts {
    pub hosts: Vec<Host>,
    bridge: String,
    /// Mount points this created on the machine (removed again on drop when empty).
    made: Vec<PathBuf>,
    dir: tempfile::TempDir,
}

impl Hosts {
    /// Creates hosts `names` (their namespaces and links; their install trees are empty until
    /// `drover install --root` fills them). Their addresses are `<net>.1`, `<net>.2`, … in order.
    pub fn create(names: &[&str]) -> Result<Hosts, String> {
        // Unique per set of hosts, also for tests of one process running side by side: the
        // names of links and namespaces, and the subnet, derive from it.
        static SETS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let set = SETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = (std::process::id() % 100_000) * 10 + set % 10;
        let dir = tempfile::Builder::new().prefix("drover-hosts-").tempdir_in("/tmp").map_err(|e| e.to_string())?;
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        let mut made = Vec::new();
        for mount in MOUNTED {
            if !Path::new(mount).exists() {
                std::fs::create_dir_all(mount).map_err(|e| format!("creating {mount}: {e}"))?;
                made.push(PathBuf::from(mount));
            }
        }
        let mut hosts = Hosts { hosts: Vec::new(), bridge: format!("dmb{}", pid % 1_000_000), made, dir };
        ip(&["link", "add", &hosts.bridge, "type", "bridge"])?;
        ip(&["link", "set", &hosts.bridge, "up"])?;
        let net = format!("10.{}.{}", 100 + pid % 50, (pid / 50) % 250);
        for (index, name) in names.iter().enumerate() {
            let host = Host {
                name: (*name).to_owned(),
                ip: format!("{net}.{}", index + 1),
                root: hosts.dir.path().join(name),
                netns: format!("drover-mh-{pid}-{name}"),
                link: format!("dmh{}x{index}", pid % 1_000_000),
                holder: None,
                daemons: Vec::new(),
            };
            std::fs::create_dir_all(&host.root).map_err(|e| e.to_string())?;
            let inner = format!("dmi{}x{index}", pid % 1_000_000);
            ip(&["netns", "add", &host.netns])?;
            hosts.hosts.push(host);
            let host = hosts.hosts.last().expect("just pushed");
            ip(&["link", "add", &host.link, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &host.netns])?;
            ip(&["link", "set", &host.link, "master", &hosts.bridge])?;
            ip(&["link", "set", &host.link, "up"])?;
            ip(&["-n", &host.netns, "addr", "add", &format!("{}/24", host.ip), "dev", &inner])?;
            ip(&["-n", &host.netns, "link", "set", &inner, "up"])?;
            ip(&["-n", &host.netns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    /// Enters every host's namespaces for good: names the host and mounts its install tree
    /// (call after `drover install --root` filled it).
    pub fn boot(&mut self) {
        for host in &mut self.hosts {
            let mut script = format!("hostname {} && ", host.name);
            for mount in MOUNTED {
                let source = host.root.join(mount.trim_start_matches('/'));
                // A host's install may leave one empty (a configless node has no ctld state):
                // an empty directory mounted over it hides the machine's own.
                std::fs::create_dir_all(&source).expect("creating a host's mount source");
                script.push_str(&format!("mount --bind '{}' {mount} && ", source.display()));
            }
            script.push_str("echo ready && exec sleep 100000");
            let mut holder = Command::new("nsenter")
                .arg(format!("--net=/run/netns/{}", host.netns))
                .args(["--", "unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c", &script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .stdin(Stdio::null())
                .spawn()
                .expect("starting a host's namespaces");
            let mut line = String::new();
            std::io::BufReader::new(holder.stdout.take().expect("stdout")).read_line(&mut line).expect("reading");
            if line.trim() != "ready" {
                let _ = holder.kill();
                let out = holder.wait_with_output().expect("waiting");
                panic!("host {} did not come up: {}", host.name, text(&out.stderr));
            }
            host.holder = Some(holder);
        }
    }

    /// The host called `name`.
    pub fn host(&self, name: &str) -> &Host {
        self.hosts.iter().find(|h| h.name == name).unwrap_or_else(|| panic!("no host {name}"))
    }

    /// The host called `name`, to start daemons on.
    pub fn host_mut(&mut self, name: &str) -> &mut Host {
        self.hosts.iter_mut().find(|h| h.name == name).unwrap_or_else(|| panic!("no host {name}"))
    }

    /// The scratch directory the install trees are in (mode 0755: users' work directories may
    /// go here).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Every daemon's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        for host in &self.hosts {
            for entry in std::fs::read_dir(&host.root).into_iter().flatten().flatten() {
                if entry.path().extension().is_some_and(|e| e == "log") {
                    all.push_str(&format!("==> {}: {} <==\n", host.name, entry.path().display()));
                    all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
                }
            }
        }
        all
    }

    /// Polls `probe` every 100 ms until it returns `Some`; fails naming `what`, with the logs.
    pub fn wait_for<T>(&self, what: &str, timeout: Duration, probe: impl FnMut() -> Option<T>) -> T {
        crate::poll(what, timeout, || self.logs(), probe)
    }
}

/// Runs `command`, failing with what it printed unless it succeeds; its stdout.
pub fn ok(command: &mut Command) -> String {
    let out: Output = command.output().unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(out.status.success(), "{command:?} failed:\n{}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Nodes first (their jobs keep running, as on a real node), then what the jobs left.
        for host in self.hosts.iter_mut().rev() {
            for (_, daemon) in host.daemons.iter_mut().rev() {
                let pid = nix::unistd::Pid::from_raw(daemon.id().cast_signed());
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                let deadline = Instant::now() + Duration::from_secs(5);
                while daemon.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = daemon.kill();
                let _ = daemon.wait();
            }
        }
        for host in &mut self.hosts {
            if let Some(mut holder) = host.holder.take() {
                // Whatever still runs on the host (a job of a failed test) dies with it.
                kill_mount_namespace_of(holder.id().cast_signed());
                let _ = holder.kill();
                let _ = holder.wait();
            }
            let _ = ip(&["link", "del", &host.link]);
            let _ = ip(&["netns", "del", &host.netns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
        for mount in &self.made {
            let _ = std::fs::remove_dir(mount);
        }
    }
}

/// Kills every process but `holder` in `holder`'s mount namespace.
fn kill_mount_namespace_of(holder: i32) {
    let namespace = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    let Some(theirs) = namespace(&holder.to_string()) else { return };
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i32>() else { continue };
        if pid != holder && namespace(&name).as_ref() == Some(&theirs) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}
