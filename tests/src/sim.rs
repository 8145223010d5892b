//! Scheduling scenarios measured from outside: a real ctld with simulated nodes
//! (`drover-simnode`, one process speaking the real node protocol for every node), in a scratch
//! directory, driven and read back through the Slurm commands only (`sbatch`, `scontrol`,
//! `squeue`, `sinfo`, `sacct -D`, `drover audit`). [`SimCluster`] starts and stops both daemons;
//! [`Run`] is one run of a job as `sacct -D` shows it. `DROVER_SIM_CTLD=/path/to/drover-ctld`
//! runs a scenario against another build of ctld (say, the one before a change), for figures
//! before and after.

use crate::{bin_dir, text};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// ctld and the simulated nodes in a scratch directory, stopped on drop.
pub struct SimCluster {
    dir: tempfile::TempDir,
    ctld: Child,
    nodes: Child,
}

/// The simulator binary, built next to the others (same profile).
fn simnode() -> PathBuf {
    let bin = bin_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "--quiet", "-p", "drover-sim"]);
    if bin.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    assert!(build.status().expect("running cargo build").success(), "building drover-simnode failed");
    bin.join("drover-simnode")
}

impl SimCluster {
    /// Starts ctld and `count` simulated nodes and waits until all are idle. The config is the
    /// cluster name, the top-level keys `top`, the `[controller]` address, state directory and key,
    /// then `config` (which may go on with more `[controller]` keys, then declares nodes,
    /// partitions, accounts and users). With `ignore_term` a preempted job lives out its grace
    /// time.
    pub fn start(name: &str, count: usize, ignore_term: bool, top: &str, config: &str) -> SimCluster {
        let cluster = SimCluster::launch(name, count, ignore_term, top, config, None);
        let idle = format!("{count} idle");
        cluster.wait_for(&format!("{count} idle nodes"), || {
            let out = cluster.ok("sinfo", &["-h", "-o", "%D %t"]);
            out.lines().any(|l| l.trim() == idle).then_some(())
        });
        cluster
    }

    /// Starts ctld with its open-file limit (soft and hard) at `open_files` (through `prlimit`,
    /// as a site's too-low `LimitNOFILE` would leave it) and `count` simulated nodes, and returns
    /// at once: not every node may get in.
    pub fn start_limited(name: &str, count: usize, top: &str, config: &str, open_files: u64) -> SimCluster {
        SimCluster::launch(name, count, false, top, config, Some(open_files))
    }

    fn launch(
        name: &str,
        count: usize,
        ignore_term: bool,
        top: &str,
        config: &str,
        open_files: Option<u64>,
    ) -> SimCluster {
        let sim = simnode();
        let bin = bin_dir();
        let dir = tempfile::Builder::new().prefix(&format!("drover-{name}-")).tempdir_in("/tmp").expect("scratch dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let root = dir.path();
        let config = format!(
            "cluster_name = \"{name}\"\n{top}\n[controller]\naddress = \"127.0.0.1:{port}\"\nstate_dir = \"{state}\"\n\
             key_file = \"{root}/cluster.key\"\n{config}",
            state = root.join("state").display(),
            root = root.display(),
        );
        let conf = root.join("cluster.toml");
        std::fs::write(&conf, config).unwrap();
        std::fs::create_dir_all(root.join("state")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        for name in ["sbatch", "sacct", "scontrol", "squeue", "sinfo", "sshare", "scancel"] {
            std::os::unix::fs::symlink(bin.join("drover"), root.join("bin").join(name)).unwrap();
        }
        let keygen = Command::new(bin.join("drover")).arg("keygen").arg(root.join("cluster.key")).output().unwrap();
        assert!(keygen.status.success(), "{}", text(&keygen.stderr));
        let log = |name: &str| std::fs::File::create(root.join(name)).unwrap();
        // Another build of ctld (an earlier version, to compare a scenario's figures) if named.
        let ctld_bin = std::env::var_os("DROVER_SIM_CTLD").map_or_else(|| bin.join("drover-ctld"), PathBuf::from);
        let mut ctld = match open_files {
            Some(limit) => {
                let mut prlimit = Command::new("prlimit");
                prlimit.arg(format!("--nofile={limit}:{limit}")).arg(ctld_bin);
                prlimit
            }
            None => Command::new(ctld_bin),
        };
        let ctld = ctld
            .arg("--config")
            .arg(&conf)
            .env("RUST_LOG", "info")
            .stdout(log("ctld.out"))
            .stderr(log("ctld.log"))
            .spawn()
            .unwrap();
        let socket = root.join("state").join("ctld.sock");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "ctld did not open its socket");
            std::thread::sleep(Duration::from_millis(50));
        }
        let count_arg = count.to_string();
        let mut args = vec!["nodes", "--config", conf.to_str().unwrap(), "--count", &count_arg];
        args.extend(["--warp", "1", "--heartbeat", "5"]);
        if ignore_term {
            args.push("--ignore-term");
        }
        let nodes = Command::new(sim).args(&args).stdout(log("nodes.out")).stderr(log("nodes.log")).spawn().unwrap();
        SimCluster { dir, ctld, nodes }
    }

    /// The scratch directory (config, state, logs).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `drover` or one of the Slurm commands against this cluster, as root.
    pub fn command(&self, program: &str, args: &[&str]) -> std::process::Output {
        let path = if program == "drover" { bin_dir().join("drover") } else { self.root().join("bin").join(program) };
        Command::new(path)
            .args(args)
            .current_dir(self.root())
            .env("DROVER_CONF", self.root().join("cluster.toml"))
            .env("DROVER_SOCKET", self.root().join("state").join("ctld.sock"))
            .env("TZ", "UTC")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs a command and returns its stdout, asserting success.
    pub fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.command(program, args);
        assert!(out.status.success(), "{program} {args:?} failed:\n{}{}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout)
    }

    /// Polls `probe` until it answers, for at most 30 seconds.
    pub fn wait_for<T>(&self, what: &str, probe: impl FnMut() -> Option<T>) -> T {
        self.wait_up_to(what, Duration::from_secs(30), probe)
    }

    /// Polls `probe` until it answers, for at most `timeout`.
    pub fn wait_up_to<T>(&self, what: &str, timeout: Duration, probe: impl FnMut() -> Option<T>) -> T {
        crate::poll(what, timeout, || self.logs(), probe)
    }

    /// The last lines of ctld's and the simulator's logs.
    pub fn logs(&self) -> String {
        let tail = |name: &str| {
            let all = std::fs::read_to_string(self.root().join(name)).unwrap_or_default();
            let lines: Vec<&str> = all.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        format!("==> ctld.log <==\n{}\n==> nodes.log <==\n{}", tail("ctld.log") + &tail("ctld.out"), tail("nodes.log"))
    }

    /// The state of each job per `squeue`.
    pub fn states(&self) -> HashMap<u32, String> {
        let out = self.ok("squeue", &["-h", "-o", "%i %T"]);
        out.lines()
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(id, state)| Some((id.parse().ok()?, state.to_owned())))
            .collect()
    }

    /// Waits until every job of `jobs` runs.
    pub fn wait_running(&self, jobs: &[u32], what: &str) {
        self.wait_for(what, || {
            let states = self.states();
            jobs.iter().all(|j| states.get(j).is_some_and(|s| s == "RUNNING")).then_some(())
        });
    }

    /// Every run of every job (`sacct -D`).
    pub fn runs(&self) -> Vec<Run> {
        let fields = "JobID,Account,State,Submit,Start,End,AllocTRES,NodeList";
        let out = self.ok("sacct", &["-D", "-X", "-P", "-n", "-a", "-o", fields]);
        out.lines().filter_map(Run::parse).collect()
    }
}

impl SimCluster {
    /// Every preemption per `drover audit`: (time, victim, the job it was for).
    pub fn preemptions(&self) -> Vec<(i64, u32, u32)> {
        let out = self.ok("drover", &["audit", "-a", "preempt", "-P", "-n"]);
        out.lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split('|').collect();
                let time = parse_time(fields.first()?)?;
                let victim = fields.get(5)?.parse().ok()?;
                let detail = fields.get(7)?;
                let for_job = detail.strip_prefix("reclaimed for job ")?.split(' ').next()?.parse().ok()?;
                Some((time, victim, for_job))
            })
            .collect()
    }
}

/// The config of `count` simulated nodes `sim01`… (64 CPUs, 512,000 MB, `gpus` H100s each) in one
/// default partition `gpu`, with `partition_keys` (more TOML lines) added to the partition.
pub fn gpu_nodes(count: usize, gpus: u32, partition_keys: &str) -> String {
    format!(
        "[[nodes]]\nnames = \"sim[01-{count:02}]\"\ncpus = 64\nreal_memory = 512000\ngpus = {{ h100 = {gpus} }}\n\
         [[partitions]]\nname = \"gpu\"\nnodes = \"sim[01-{count:02}]\"\ndefault = true\n{partition_keys}"
    )
}

/// One account, `ml`, with root as its user: the rest of a single-team cluster's config.
pub const ONE_TEAM: &str = "[[accounts]]\nname = \"ml\"\n[[users]]\nname = \"root\"\ndefault_account = \"ml\"\n";

/// A single-team cluster (`ml`) of `count` simulated nodes of `gpus` GPUs ([`gpu_nodes`]: named
/// `sim01`, `sim02`, …, partition `gpu`), started under `name`.
pub fn one_team(name: &str, count: usize, gpus: u32) -> SimCluster {
    SimCluster::start(name, count, false, "default_account = \"ml\"", &(gpu_nodes(count, gpus, "") + ONE_TEAM))
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        let _ = self.nodes.kill();
        let _ = self.ctld.kill();
        let _ = self.nodes.wait();
        let _ = self.ctld.wait();
    }
}

/// One run of a job as `sacct -D` shows it.
#[derive(Debug, Clone)]
pub struct Run {
    pub job: u32,
    pub team: String,
    pub state: String,
    pub submit: Option<i64>,
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub gpus: u32,
    /// The nodes it ran on (empty for a run that never started).
    pub nodes: Vec<String>,
}

impl Run {
    /// Parses a line of `sacct -P -o JobID,Account,State,Submit,Start,End,AllocTRES[,NodeList]`.
    pub fn parse(line: &str) -> Option<Run> {
        let f: Vec<&str> = line.split('|').collect();
        let gpus =
            f.get(6)?.split(',').find_map(|t| t.strip_prefix("gres/gpu=")).and_then(|n| n.parse().ok()).unwrap_or(0);
        Some(Run {
            job: f.first()?.parse().ok()?,
            team: (*f.get(1)?).to_owned(),
            state: f.get(2)?.split(' ').next()?.to_owned(),
            submit: parse_time(f.get(3)?),
            start: parse_time(f.get(4)?),
            end: parse_time(f.get(5)?),
            gpus,
            nodes: f
                .get(7)
                .filter(|n| !n.is_empty() && **n != "None assigned")
                .and_then(|n| drover_shared::hostlist::expand(n).ok())
                .unwrap_or_default(),
        })
    }

    /// Whether the run ended by preemption.
    pub fn preempted(&self) -> bool {
        self.state == "REQUEUED" || self.state == "PREEMPTED"
    }

    /// Whether the run holds its GPUs right after time `t` (started by `t`, not ended by it).
    pub fn holds_after(&self, t: i64) -> bool {
        self.start.is_some_and(|s| s <= t) && self.end.is_none_or(|e| e > t)
    }
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) as unix seconds; `None` for `Unknown`, `None` and the like.
pub fn parse_time(text: &str) -> Option<i64> {
    let (date, time) = text.split_once('T')?;
    let d: Vec<i64> = date.split('-').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let t: Vec<i64> = time.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let (y, m, day) = (d[0], d[1], d[2]);
    // Days from the civil date (proleptic Gregorian).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86400 + t[0] * 3600 + t[1] * 60 + t[2])
}
