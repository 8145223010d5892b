//! Usage visibility on a real cluster: per-run usage records rolled up per hour (allocated
//! GPU-seconds checked against `sacct`'s elapsed times, borrowed vs guaranteed from the quotas),
//! surviving a ctld crash; `sreport` and `drover report` over them; `/metrics` and the status
//! page; and, in a test ignored by a plain `cargo test` (`.ci/run` installs the tools and runs
//! it), `/metrics` parsed by the Prometheus client library's own parser and the status page
//! rendered by headless Chromium.

use drover_e2e::{CONFIG, Cluster, text};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// `CONFIG` with quotas on `main` (vision owns 2 GPUs, nlp 1), the HTTP listener and prices.
fn config() -> String {
    // `localhost`, not `127.0.0.1:0`: the harness rewrites that spelling.
    format!(
        "{CONFIG}
[[quotas]]
account = \"vision\"
partition = \"main\"
guarantee = \"gres/gpu=2\"
[[quotas]]
account = \"nlp\"
partition = \"main\"
guarantee = \"gres/gpu=1\"

[metrics]
listen = \"localhost:0\"

[accounting]
gpu_hour_price = {{ tesla = 2.5 }}
"
    )
}

fn elapsed(cluster: &Cluster, job_id: u32) -> u64 {
    cluster
        .ok("sacct", &["-j", &job_id.to_string(), "-X", "-P", "-n", "-o", "ElapsedRaw"])
        .trim()
        .parse()
        .expect("ElapsedRaw")
}

/// GET `path` from ctld's HTTP listener: (status line, body).
fn get(cluster: &Cluster, path: &str) -> (String, String) {
    cluster.http_get(path)
}

/// Runs Python's `prometheus_client` text parser over `text`; prints `name type n_samples` per
/// family. Fails the test where the library is missing.
fn parse_with_prometheus_client(text: &str) -> String {
    let script = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as parse\n\
                  for f in parse(sys.stdin.read()):\n    print(f.name, f.type, len(f.samples))\n";
    let check = std::process::Command::new("python3").args(["-c", "import prometheus_client"]).output();
    assert!(check.is_ok_and(|o| o.status.success()), "python3's prometheus_client is missing (.ci/run installs it)");
    // A family the parser refuses fails the test with its error.
    drover_e2e::python(text, script)
}

#[test]
fn usage_is_recorded_rolled_up_reported_and_scraped() {
    let cluster = Cluster::start_with(&config());
    // vision runs inside its guarantee; nlp asks for 2 GPUs with a guarantee of 1: it borrows.
    let vision = cluster.submit(
        None,
        "v.sh",
        "#!/bin/sh\nsleep 3\n",
        &["-A", "vision", "-p", "main", "--gres=gpu:2", "-c", "2"],
    );
    let nlp = cluster.submit(None, "n.sh", "#!/bin/sh\nsleep 2\n", &["-A", "nlp", "-p", "main", "--gres=gpu:2"]);
    // A CPU-only vision job stays inside vision's guarantee (which names only GPUs).
    let failed = cluster.submit(None, "f.sh", "#!/bin/sh\nexit 3\n", &["-A", "vision", "-p", "main"]);
    assert_eq!(cluster.wait_state(vision, "COMPLETED", LONG), "0:0");
    assert_eq!(cluster.wait_state(nlp, "COMPLETED", LONG), "0:0");
    assert_eq!(cluster.wait_state(failed, "FAILED", LONG), "3:0");
    let (ev, en) = (elapsed(&cluster, vision), elapsed(&cluster, nlp));
    assert!(ev >= 2 && en >= 1, "elapsed {ev} {en}");

    // GPU-seconds per account and user, exactly 2 GPUs × each job's elapsed time.
    let sreport = |cluster: &Cluster| {
        cluster.ok(
            "sreport",
            &[
                "-P",
                "-n",
                "-t",
                "seconds",
                "-T",
                "gres/gpu",
                "cluster",
                "AccountUtilizationByUser",
                "start=now-1hours",
                "end=now+1hours",
            ],
        )
    };
    let by_user = sreport(&cluster);
    let expected = format!(
        "testcluster|root|||{}|0\ntestcluster|nlp|||{}|0\ntestcluster|nlp|root|{}|{}|0\ntestcluster|vision|||{}|0\ntestcluster|vision|root|{}|{}|0\n",
        2 * (ev + en),
        2 * en,
        proper_name(),
        2 * en,
        2 * ev,
        proper_name(),
        2 * ev
    );
    assert_eq!(by_user, expected);
    // CPU utilization: vision 2 CPUs, nlp's and the failed job's 1 CPU each (default -c 1).
    let util = cluster
        .ok("sreport", &["-P", "-n", "-t", "seconds", "cluster", "utilization", "start=now-1hours", "end=now+1hours"]);
    let allocated: u64 = util.split('|').nth(1).unwrap().parse().unwrap();
    let ef = elapsed(&cluster, failed);
    assert_eq!(allocated, 2 * ev + en + ef, "{util}");
    let top = cluster.ok(
        "sreport",
        &["-P", "-n", "-T", "gres/gpu", "-t", "seconds", "user", "TopUsage", "start=now-1hours", "end=now+1hours"],
    );
    assert_eq!(top.lines().count(), 2, "{top}");

    // drover report: borrowed vs guaranteed, failures, queue, as CSV and JSON.
    let quota = cluster.ok("drover", &["report", "quota", "--csv"]);
    let nlp_row = quota.lines().find(|l| l.starts_with("nlp,")).unwrap_or_else(|| panic!("{quota}"));
    assert!(nlp_row.ends_with(",1,0"), "nlp borrowed once, never reclaimed: {quota}");
    assert!(quota.lines().any(|l| l == "vision,0.00,0,0"), "{quota}");
    let failures = cluster.ok("drover", &["report", "failures", "--csv"]);
    assert_eq!(failures, "State,Reason,Jobs,GPUHours,Accounts\nFAILED,NonZeroExitCode,1,0.00,vision\n");
    let queue = cluster.ok("drover", &["report", "queue", "--json"]);
    assert!(queue.contains("\"Partition\": \"main\", \"Account\": \"vision\", \"Jobs\": 2"), "{queue}");
    let gpu_csv = cluster.ok("drover", &["report", "gpu", "--csv"]);
    let nlp_gpu: Vec<&str> =
        gpu_csv.lines().find(|l| l.starts_with("nlp,")).unwrap_or_else(|| panic!("{gpu_csv}")).split(',').collect();
    assert_eq!(nlp_gpu[1], nlp_gpu[4], "all of nlp's GPU time is borrowed: {gpu_csv}");
    let gpu = cluster.ok("drover", &["report", "gpu", "--json"]);
    assert!(gpu.contains("\"Account\": \"vision\""), "{gpu}");
    assert!(gpu.contains("\"ActiveGPUHours\": null"), "{gpu}");

    // The records and rollups are in SQLite: a ctld crash changes nothing.
    cluster.kill9("ctld");
    let out = cluster.drover("up");
    assert!(out.status.success(), "restart failed: {}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(sreport(&cluster), expected);

    // Metrics while a vision job holds one GPU.
    let long = cluster.submit(None, "l.sh", "#!/bin/sh\nsleep 300\n", &["-A", "vision", "-p", "main", "--gres=gpu:1"]);
    let deadline = Instant::now() + LONG;
    let metrics = loop {
        let (status, body) = get(&cluster, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        if body.contains("drover_account_gpus_allocated{account=\"vision\",partition=\"main\"} 1\n") {
            break body;
        }
        assert!(Instant::now() < deadline, "vision's GPU never showed:\n{body}\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(metrics.contains("drover_jobs{state=\"RUNNING\",partition=\"main\"} 1\n"), "{metrics}");
    assert!(metrics.contains("drover_node_state{node=\"n1\",state="), "{metrics}");
    assert!(metrics.contains("drover_gpus 4\n"), "{metrics}");
    assert!(metrics.contains("drover_rpc_requests_total{request=\"submit\"} 1\n"), "{metrics}");
    let (status, page) = get(&cluster, "/");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(page.contains("<tr><td>vision</td><td>1</td><td>0</td><td>0</td>"), "{page}");
    assert!(
        page.contains("<td>nlp</td>") && page.contains("<td>n1</td>") && page.contains("id=\"gpu-chart\""),
        "{page}"
    );
    assert_eq!(get(&cluster, "/nothing").0, "HTTP/1.1 404 Not Found");
    cluster.ok("scancel", &[&long.to_string()]);
}

#[test]
#[ignore = "needs chromium and python3's prometheus_client; .ci/run installs them and runs it"]
fn metrics_pass_the_prometheus_parser_and_chromium_renders_the_status_page() {
    let cluster = Cluster::start_with(&config());
    let long = cluster.submit(None, "l.sh", "#!/bin/sh\nsleep 300\n", &["-A", "vision", "-p", "main", "--gres=gpu:1"]);
    let nlp = cluster.submit(None, "n.sh", "#!/bin/sh\nsleep 300\n", &["-A", "nlp", "-p", "main", "--gres=gpu:1"]);
    cluster.wait_state(long, "RUNNING", LONG);
    cluster.wait_state(nlp, "RUNNING", LONG);
    let (status, metrics) = get(&cluster, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let families = parse_with_prometheus_client(&metrics);
    for family in [
        "drover_jobs gauge",
        "drover_account_gpus_allocated gauge",
        "drover_node_state gauge",
        "drover_scheduler_pass_duration_seconds histogram",
        "drover_rpc_requests counter",
        "drover_rpc_request_duration_seconds histogram",
    ] {
        assert!(families.lines().any(|l| l.starts_with(&format!("{family} "))), "no {family}:\n{families}");
    }
    check_in_chromium(&cluster);
    cluster.ok("scancel", &[&long.to_string(), &nlp.to_string()]);
}

/// The first GECOS field of the user running the tests (`sreport`'s Proper Name).
fn proper_name() -> String {
    let me = nix::unistd::User::from_uid(nix::unistd::geteuid()).unwrap().unwrap();
    me.gecos.to_string_lossy().split(',').next().unwrap_or_default().to_owned()
}

/// Nodes see the fake NVML library's first two GPUs (utilization 0 % and 10 %): a job on both
/// has 10 % of its time × 1 GPU active; with an idle-GPU policy of 50 % for 4 s on `idle`, such a
/// job is cancelled with reason `IdleGPU`, and the audit table says why.
#[test]
fn nvml_samples_give_active_gpu_time_and_the_idle_policy_cancels() {
    let config = CONFIG.replace("gpus = { tesla = 2 }", "gpus = { h100 = 2 }")
        + "
[[partitions]]
name = \"idle\"
nodes = \"n2\"
default_mem_per_cpu = 100

[accounting]
[[accounting.idle_gpu]]
partition = \"idle\"
threshold_percent = 50
after = 4
action = \"cancel\"
";
    let cluster =
        Cluster::start_with_env(&config, &[("DROVER_NVML_LIB", drover_fake_nvml::LIB_PATH), ("FAKE_NVML_GPUS", "2")]);
    let busy = cluster.submit(None, "b.sh", "#!/bin/sh\nsleep 8\n", &["-A", "vision", "-p", "main", "--gres=gpu:2"]);
    let idle = cluster.submit(None, "i.sh", "#!/bin/sh\nsleep 120\n", &["-A", "nlp", "-p", "idle", "--gres=gpu:2"]);
    assert_eq!(cluster.wait_state(busy, "COMPLETED", LONG), "0:0");
    cluster.wait_state(idle, "CANCELLED", LONG);
    // sacct shows no reason for a job that started (as Slurm); scontrol and the usage record do.
    let shown = cluster.ok("scontrol", &["show", "job", &idle.to_string()]);
    assert!(shown.contains("Reason=IdleGPU"), "{shown}");
    let failures = cluster.ok("drover", &["report", "failures", "--csv"]);
    assert!(failures.contains("\nCANCELLED,IdleGPU,1,"), "{failures}");
    let ran = elapsed(&cluster, idle);
    // Cancelled once idle for 4 s, sampled every 2 s: after 4 to 8 s (and a heartbeat of slack).
    assert!((4..=11).contains(&ran), "the idle job ran {ran}s");

    // Active GPU-seconds: 10 % of the busy job's run, less up to one heartbeat not yet sampled.
    let eb = elapsed(&cluster, busy);
    let gpu = cluster.ok("drover", &["report", "gpu", "--json", "--seconds"]);
    let field = |account: &str, name: &str| -> u64 {
        let row =
            gpu.lines().find(|l| l.contains(&format!("\"Account\": \"{account}\""))).unwrap_or_else(|| panic!("{gpu}"));
        let value = row.split(&format!("\"{name}\": ")).nth(1).unwrap().split([',', '}']).next().unwrap();
        value.parse().unwrap_or_else(|_| panic!("{row}"))
    };
    assert_eq!(field("vision", "AllocGPUSeconds"), 2 * eb, "{gpu}");
    // Sampled every 2 s from the start; the stretch after the last sample is not counted.
    let active = field("vision", "ActiveGPUSeconds");
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (low, high) = ((0.1 * (eb as f64 - 3.0)).floor() as u64, (0.1 * eb as f64).ceil() as u64);
    assert!((low..=high).contains(&active), "active {active} GPU-s, expected {low}..={high}\n{gpu}");
    assert_eq!(field("vision", "IdleGPUSeconds"), 2 * eb - active, "{gpu}");
    let audit = std::process::Command::new("sqlite3")
        .arg(cluster.home().join("ctld").join("drover.db"))
        .arg("SELECT action FROM audit WHERE job_id = ".to_owned() + &idle.to_string())
        .output();
    if let Some(out) = audit.ok().filter(|o| o.status.success()) {
        assert!(text(&out.stdout).contains("idle-gpu-cancel"), "{}", text(&out.stdout));
    }
}

/// Loads the status page in headless Chromium (Debian's `chromium`): the DOM it built shows both
/// teams and the nodes, and its screenshot is a real rendering (PNG of the asked size, not blank).
/// The screenshot is kept as `<target tmp>/drover-status-page.png`. Fails the test where
/// Chromium is missing.
fn check_in_chromium(cluster: &Cluster) {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| std::process::Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("chromium is missing (.ci/run installs it)");
    let addr = std::fs::read_to_string(cluster.home().join("ctld").join("metrics.addr")).unwrap();
    let url = format!("http://{}/", addr.trim());
    let browser = |extra: &[&str]| {
        let profile = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1000,900"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(&url)
            .output()
            .expect("running chromium");
        assert!(out.status.success(), "chromium failed: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let dom = browser(&["--dump-dom"]);
    assert!(
        dom.contains("<table id=\"teams\">") && dom.contains("<td>vision</td>") && dom.contains("<td>nlp</td>"),
        "{dom}"
    );
    assert!(dom.contains("<td>n1</td>") && dom.contains("<svg id=\"gpu-chart\""), "{dom}");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("drover-status-page.png");
    let _ = std::fs::remove_file(&shot);
    browser(&[&format!("--screenshot={}", shot.display())]);
    let png = std::fs::read(&shot).expect("the screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let be32 = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    assert_eq!((be32(16), be32(20)), (1000, 900), "IHDR width and height");
    // A blank 1000×900 page compresses to a few KB; text, tables and bars make it much larger.
    assert!(png.len() > 12_000, "screenshot of {} bytes looks blank", png.len());
}

/// The GPU-hours chart as a person sees it, measured by Chromium's layout of the page ctld
/// serves: the tallest hour's bars and the chart's height in CSS pixels, the axis's top label and
/// the tallest hour's GPU-hours (from the bars' titles).
#[derive(Debug)]
struct Chart {
    tallest_px: f64,
    chart_px: f64,
    axis_top: f64,
    tallest_hours: f64,
}

/// Loads the status page into headless Chromium with a probe script added (from a file: the
/// page itself runs no script) and reads what its layout measured.
fn chart_in_chromium(cluster: &Cluster) -> Chart {
    let (status, page) = get(cluster, "/");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let probe = "<script>\n\
        const svg = document.getElementById('gpu-chart');\n\
        const chartTop = svg.getBoundingClientRect().y;\n\
        const stacks = {};\n\
        for (const r of svg.querySelectorAll('rect')) {\n\
          const box = r.getBoundingClientRect();\n\
          const s = stacks[box.x] || (stacks[box.x] = [0, 0]);\n\
          s[0] += box.height;\n\
          s[1] += parseFloat(r.querySelector('title').textContent.split(': ')[1]);\n\
        }\n\
        const tallest = Object.values(stacks).reduce((a, b) => (b[1] > a[1] ? b : a), [0, 0]);\n\
        const base = svg.querySelector('line').getBoundingClientRect();\n\
        const chart = base.y + base.height / 2 - chartTop - 10;\n\
        const label = svg.querySelector('text').textContent;\n\
        document.body.setAttribute('data-chart', [tallest[0], chart, label, tallest[1]].join(' '));\n\
        </script>";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("status.html");
    std::fs::write(&file, page.replace("</body>", &format!("{probe}</body>"))).unwrap();
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| std::process::Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("chromium is missing (.ci/run installs it)");
    let out = std::process::Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1000,900", "--dump-dom"])
        .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
        .arg(format!("file://{}", file.display()))
        .output()
        .expect("running chromium");
    assert!(out.status.success(), "chromium failed: {}", text(&out.stderr));
    let dom = text(&out.stdout);
    let measured = dom.split("data-chart=\"").nth(1).and_then(|rest| rest.split('"').next());
    let fields: Vec<f64> = measured
        .unwrap_or_else(|| panic!("the probe measured nothing:\n{dom}"))
        .split(' ')
        .map(|f| f.parse().unwrap_or_else(|_| panic!("{measured:?}")))
        .collect();
    let [tallest_px, chart_px, axis_top, tallest_hours] = fields[..] else { panic!("{measured:?}") };
    Chart { tallest_px, chart_px, axis_top, tallest_hours }
}

/// A chart a person can read: the tallest hour fills at least 40 % of the chart's height, and the
/// axis's top is at or just above it (within the 1-2-2.5-5 steps).
fn assert_readable(chart: &Chart, hours: std::ops::Range<f64>) {
    assert!(hours.contains(&chart.tallest_hours), "{chart:?}: the tallest hour is not in {hours:?}");
    assert!(chart.chart_px > 150.0, "{chart:?}");
    assert!(chart.tallest_px >= 0.4 * chart.chart_px, "{chart:?}: the tallest bar fills too little of the chart");
    assert!(
        chart.axis_top >= chart.tallest_hours && chart.axis_top <= 2.5 * chart.tallest_hours * 1.001,
        "{chart:?}: the axis does not follow the data"
    );
}

/// The chart: an axis to 8 (the cluster's GPUs) over hours of 0.03–0.06 GPU-hours drew
/// bars of a pixel or two. Checked in Chromium at tiny values (a real job, one GPU for about two
/// seconds) and at realistic ones (hours of 0.03–0.06 GPU-hours in the rollups the chart reads).
#[test]
#[ignore = "needs chromium; .ci/run installs it and runs it"]
fn the_gpu_hours_chart_follows_its_data_in_chromium() {
    let cluster = Cluster::start_with(&config());
    let job = cluster.submit(None, "t.sh", "#!/bin/sh\nsleep 2\n", &["-A", "vision", "-p", "main", "--gres=gpu:1"]);
    cluster.wait_state(job, "COMPLETED", LONG);
    let tiny = chart_in_chromium(&cluster);
    assert_readable(&tiny, 0.0003..0.003);

    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let hour = i64::try_from(now - now % 3600).unwrap();
    let db = rusqlite::Connection::open(cluster.home().join("ctld").join("drover.db")).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    for (ago, account, gpu_secs) in [(3, "vision", 108), (2, "vision", 144), (2, "nlp", 72), (1, "nlp", 180)] {
        db.execute(
            "INSERT OR REPLACE INTO usage_hourly VALUES (?1, 'root', ?2, 'main', '', 0, 0, ?3, 0, 0, 0)",
            rusqlite::params![hour - ago * 3600, account, gpu_secs],
        )
        .unwrap();
    }
    let realistic = chart_in_chromium(&cluster);
    assert_readable(&realistic, 0.059..0.061);
    assert_eq!(realistic.axis_top, 0.1, "{realistic:?}");
}
