//! Guarantee reclaim measured from outside: a real ctld with 16 simulated 8-GPU nodes
//! (`drover-simnode`, whose jobs ignore SIGTERM so each victim stays in its grace time), three
//! teams with guarantees 40/24/24 GPUs and bursts 72/96/48. Teams A and B fill the cluster with
//! whole-node jobs; team C then reclaims its guarantee three ways: eight one-GPU jobs released at
//! once, eight more submitted one after another, and five eight-GPU jobs released at once (only
//! one of which is inside C's guarantee). Everything is read back through `sacct -D` (runs,
//! states, GPUs, times) and `drover audit` (each preemption and the job it was for), and checked
//! against the invariants of issue 16: the GPUs preempted for a reclaim are at most the need plus
//! the smallest victim that covers it, no team that held its guarantee is pushed below it, and no
//! run is preempted before the minimum run time (`preempt_exempt_time`).

use drover_e2e::{bin_dir, text};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GRACE: u32 = 2;
const EXEMPT: i64 = 6;
const GPUS_PER_NODE: u32 = 8;
/// Team, guarantee, burst (GPUs).
const TEAMS: [(&str, u32, u32); 3] = [("ta", 40, 72), ("tb", 24, 96), ("tc", 24, 48)];

/// ctld and the simulated nodes in a scratch directory, stopped on drop.
struct SimCluster {
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
    fn start() -> SimCluster {
        let sim = simnode();
        let bin = bin_dir();
        let dir = tempfile::Builder::new().prefix("drover-reclaim-").tempdir_in("/tmp").expect("scratch dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let root = dir.path();
        let mut config = format!(
            r#"
cluster_name = "reclaim"
default_account = "ta"
[controller]
address = "127.0.0.1:{port}"
state_dir = "{state}"
key_file = "{root}/cluster.key"
kill_wait = {GRACE}
preempt_exempt_time = {EXEMPT}
min_job_age = 600
[[nodes]]
names = "sim[01-16]"
cpus = 64
real_memory = 512000
gpus = {{ h100 = {GPUS_PER_NODE} }}
[[partitions]]
name = "gpu"
nodes = "sim[01-16]"
default = true
[[users]]
name = "root"
default_account = "ta"
accounts = ["ta", "tb", "tc"]
"#,
            state = root.join("state").display(),
            root = root.display(),
        );
        for (team, guarantee, burst) in TEAMS {
            config.push_str(&format!(
                "[[accounts]]\nname = \"{team}\"\n[[quotas]]\naccount = \"{team}\"\npartition = \"gpu\"\n\
                 guarantee = \"gres/gpu={guarantee}\"\nburst = \"gres/gpu={burst}\"\n"
            ));
        }
        let conf = root.join("cluster.toml");
        std::fs::write(&conf, config).unwrap();
        std::fs::create_dir_all(root.join("state")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        for name in ["sbatch", "sacct", "scontrol", "squeue", "sinfo"] {
            std::os::unix::fs::symlink(bin.join("drover"), root.join("bin").join(name)).unwrap();
        }
        let keygen = Command::new(bin.join("drover")).arg("keygen").arg(root.join("cluster.key")).output().unwrap();
        assert!(keygen.status.success(), "{}", text(&keygen.stderr));
        let log = |name: &str| std::fs::File::create(root.join(name)).unwrap();
        let ctld = Command::new(bin.join("drover-ctld"))
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
        let nodes = Command::new(sim)
            .args(["nodes", "--config"])
            .arg(&conf)
            .args(["--count", "16", "--warp", "1", "--heartbeat", "5", "--ignore-term"])
            .stdout(log("nodes.out"))
            .stderr(log("nodes.log"))
            .spawn()
            .unwrap();
        let cluster = SimCluster { dir, ctld, nodes };
        cluster.wait_for("16 idle nodes", || {
            let out = cluster.ok("sinfo", &["-h", "-o", "%D %t"]);
            out.lines().any(|l| l.trim() == "16 idle").then_some(())
        });
        cluster
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, program: &str, args: &[&str]) -> std::process::Output {
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
    fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.command(program, args);
        assert!(out.status.success(), "{program} {args:?} failed:\n{}{}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout)
    }

    fn wait_for<T>(&self, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(value) = probe() {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn logs(&self) -> String {
        let tail = |name: &str| {
            let all = std::fs::read_to_string(self.root().join(name)).unwrap_or_default();
            let lines: Vec<&str> = all.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        format!("==> ctld.log <==\n{}\n==> nodes.log <==\n{}", tail("ctld.log") + &tail("ctld.out"), tail("nodes.log"))
    }

    /// Submits one job; returns its id.
    fn submit(&self, team: &str, gpus: u32, held: bool) -> u32 {
        let script = self.root().join("job.sh");
        if !script.exists() {
            std::fs::write(&script, "#!/bin/sh\nsleep 3600\n").unwrap();
        }
        let gres = format!("--gres=gpu:{gpus}");
        let cpus = (gpus * 2).to_string();
        let mut args = vec!["--parsable", "-A", team, &gres, "-c", &cpus, "-t", "60", "-J", team];
        if held {
            args.push("--hold");
        }
        let script = script.to_string_lossy().into_owned();
        args.push(&script);
        self.ok("sbatch", &args).trim().parse().unwrap()
    }

    /// Submits `count` jobs held, then releases them with one `scontrol release`.
    fn release_at_once(&self, team: &str, gpus: u32, count: usize) -> Vec<u32> {
        let jobs: Vec<u32> = (0..count).map(|_| self.submit(team, gpus, true)).collect();
        let list: Vec<String> = jobs.iter().map(u32::to_string).collect();
        self.ok("scontrol", &["release", &list.join(",")]);
        jobs
    }

    /// The state of each job per `squeue`.
    fn states(&self) -> HashMap<u32, String> {
        let out = self.ok("squeue", &["-h", "-o", "%i %T"]);
        out.lines()
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(id, state)| Some((id.parse().ok()?, state.to_owned())))
            .collect()
    }

    fn wait_running(&self, jobs: &[u32], what: &str) {
        self.wait_for(what, || {
            let states = self.states();
            jobs.iter().all(|j| states.get(j).is_some_and(|s| s == "RUNNING")).then_some(())
        });
    }

    /// Every run of every job (`sacct -D`).
    fn runs(&self) -> Vec<Run> {
        let out = self.ok("sacct", &["-D", "-X", "-P", "-n", "-a", "-o", "JobID,Account,State,Start,End,AllocTRES"]);
        out.lines().filter_map(Run::parse).collect()
    }

    /// Every preemption per `drover audit`: (time, victim, the job it was for).
    fn preemptions(&self) -> Vec<(i64, u32, u32)> {
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
struct Run {
    job: u32,
    team: String,
    state: String,
    start: Option<i64>,
    end: Option<i64>,
    gpus: u32,
}

impl Run {
    fn parse(line: &str) -> Option<Run> {
        let f: Vec<&str> = line.split('|').collect();
        let gpus =
            f.get(5)?.split(',').find_map(|t| t.strip_prefix("gres/gpu=")).and_then(|n| n.parse().ok()).unwrap_or(0);
        Some(Run {
            job: f.first()?.parse().ok()?,
            team: (*f.get(1)?).to_owned(),
            state: f.get(2)?.split(' ').next()?.to_owned(),
            start: parse_time(f.get(3)?),
            end: parse_time(f.get(4)?),
            gpus,
        })
    }

    fn preempted(&self) -> bool {
        self.state == "REQUEUED" || self.state == "PREEMPTED"
    }

    /// Whether the run holds its GPUs right after time `t` (started by `t`, not ended by it).
    fn holds_after(&self, t: i64) -> bool {
        self.start.is_some_and(|s| s <= t) && self.end.is_none_or(|e| e > t)
    }
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) as unix seconds; `None` for `Unknown`, `None` and the like.
fn parse_time(text: &str) -> Option<i64> {
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

/// What one reclaim phase cost.
#[derive(Debug)]
struct Phase {
    name: &'static str,
    /// GPUs the reclaiming jobs were owed (what they asked, up to what is left of the guarantee).
    need: u32,
    victims: Vec<u32>,
    preempted_gpus: u32,
    smallest_victim: u32,
}

#[test]
fn reclaim_preempts_only_what_is_owed() {
    let cluster = SimCluster::start();
    // Timed from a running cluster (building the binaries is not part of the scenario).
    let started = Instant::now();
    let gpus_of_team = |team: &str| TEAMS.iter().find(|t| t.0 == team).unwrap().1;

    // Fill: A up to its burst, B the rest, all whole-node jobs.
    let (a_jobs, b_jobs) = (72 / GPUS_PER_NODE, (128 - 72) / GPUS_PER_NODE);
    let mut fill: Vec<u32> = (0..a_jobs).map(|_| cluster.submit("ta", GPUS_PER_NODE, false)).collect();
    fill.extend((0..b_jobs).map(|_| cluster.submit("tb", GPUS_PER_NODE, false)));
    cluster.wait_running(&fill, "the cluster to fill");
    eprintln!("cluster full after {:?}", started.elapsed());
    // Past the minimum run time, so the fill jobs may be preempted.
    std::thread::sleep(Duration::from_secs(EXEMPT as u64 + 1));

    let mut phases = Vec::new();
    let mut seen = 0;
    let mut phase = |name, need: u32, cluster: &SimCluster, seen: &mut usize| {
        eprintln!("{name}: all running after {:?}", started.elapsed());
        // Let any further (wrong) preemption show: two grace times and a few passes.
        std::thread::sleep(Duration::from_secs(u64::from(2 * GRACE) + 2));
        let all = cluster.preemptions();
        let new: Vec<(i64, u32, u32)> = all[*seen..].to_vec();
        *seen = all.len();
        let runs = cluster.runs();
        let size =
            |victim: u32| runs.iter().filter(|r| r.job == victim && r.preempted()).map(|r| r.gpus).max().unwrap_or(0);
        let victims: Vec<u32> = new.iter().map(|p| p.1).collect();
        let preempted_gpus = victims.iter().map(|v| size(*v)).sum();
        // The smallest borrowed job that alone covers the need: every fill job is whole-node.
        let smallest_victim = GPUS_PER_NODE;
        phases.push(Phase { name, need, victims, preempted_gpus, smallest_victim });
    };

    // 1. Eight one-GPU jobs of C, released at once.
    let c1 = cluster.release_at_once("tc", 1, 8);
    cluster.wait_running(&c1, "C's eight one-GPU jobs released at once");
    phase("8 x 1 GPU released at once", 8, &cluster, &mut seen);

    // 2. Eight more, one after another.
    let mut c2 = Vec::new();
    for _ in 0..8 {
        c2.push(cluster.submit("tc", 1, false));
        std::thread::sleep(Duration::from_millis(300));
    }
    cluster.wait_running(&c2, "C's eight one-GPU jobs submitted one after another");
    phase("8 x 1 GPU one after another", 8, &cluster, &mut seen);

    // 3. Five eight-GPU jobs at once: C holds 16 of its 24, so one of them is owed.
    let c3 = cluster.release_at_once("tc", GPUS_PER_NODE, 5);
    cluster.wait_for("one of C's eight-GPU jobs to run", || {
        let states = cluster.states();
        (c3.iter().filter(|j| states.get(j).is_some_and(|s| s == "RUNNING")).count() >= 1).then_some(())
    });
    phase("5 x 8 GPU released at once", gpus_of_team("tc") - 16, &cluster, &mut seen);

    let runs = cluster.runs();
    let preemptions = cluster.preemptions();
    eprintln!("{:<30} {:>5} {:>8} {:>14}", "reclaim", "need", "victims", "GPUs preempted");
    for p in &phases {
        eprintln!("{:<30} {:>5} {:>8} {:>14}", p.name, p.need, p.victims.len(), p.preempted_gpus);
    }
    let mut failures = Vec::new();

    // GPUs preempted for a reclaim ≤ the need plus the smallest victim that covers it.
    for p in &phases {
        if p.preempted_gpus > p.need + p.smallest_victim {
            failures.push(format!(
                "{}: {} GPUs preempted ({} jobs {:?}) for a need of {}",
                p.name,
                p.preempted_gpus,
                p.victims.len(),
                p.victims,
                p.need
            ));
        }
        // Whole-node victims: the fewest that cover the need.
        let fewest = p.need.div_ceil(GPUS_PER_NODE) as usize;
        if p.victims.len() != fewest {
            failures.push(format!("{}: {} victims, {fewest} cover the need", p.name, p.victims.len()));
        }
    }

    // No team that held its guarantee is pushed below it by a preemption.
    for victim in runs.iter().filter(|r| r.preempted()) {
        let Some(t) = victim.end else { continue };
        let guarantee = gpus_of_team(&victim.team);
        let team_runs = runs.iter().filter(|r| r.team == victim.team);
        let before: u32 = team_runs.clone().filter(|r| r.holds_after(t - 1)).map(|r| r.gpus).sum();
        let after: u32 = team_runs.filter(|r| r.holds_after(t)).map(|r| r.gpus).sum();
        if before >= guarantee && after < guarantee {
            failures.push(format!(
                "preempting job {} took team {} from {before} to {after} GPUs, below its guarantee of {guarantee}",
                victim.job, victim.team
            ));
        }
    }

    // No run is preempted before it ran the minimum run time.
    for (at, victim, for_job) in &preemptions {
        let run = runs
            .iter()
            .find(|r| r.job == *victim && r.start.is_some_and(|s| s <= *at) && r.end.is_none_or(|e| e >= *at));
        if let Some(start) = run.and_then(|r| r.start)
            && at - start < EXEMPT
        {
            failures.push(format!("job {victim} preempted for {for_job} {}s after its run started", at - start));
        }
    }
    let mut count: HashMap<u32, usize> = HashMap::new();
    for (_, victim, _) in &preemptions {
        *count.entry(*victim).or_default() += 1;
    }
    eprintln!(
        "preempted runs: {}, jobs preempted more than once: {}, elapsed {:?}",
        preemptions.len(),
        count.values().filter(|c| **c > 1).count(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), cluster.logs());
}
