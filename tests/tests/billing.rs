//! The billing TRES end to end: a partition whose `tres_billing_weights` charge one unit per GPU
//! (`GRES/gpu=1.0`, nothing for CPUs), one 1-GPU job with 8 CPUs on a simulated node. Fair share
//! charges it 1 per second it runs (`sshare` RawUsage ≈ its elapsed seconds); `scontrol show job`
//! while it runs and `sacct` AllocTRES after it ended show `billing=1`, the same value, not the
//! CPU count (8) they showed before ctld kept the billing in the job record.

use drover_e2e::sim::SimCluster;

#[test]
fn billing_tres_is_what_fair_share_charges() {
    let mut config = drover_e2e::sim::gpu_nodes(1, 8, "tres_billing_weights = \"GRES/gpu=1.0\"\n");
    config.push_str("[[accounts]]\nname = \"ml\"\n[[users]]\nname = \"root\"\ndefault_account = \"ml\"\n");
    let cluster = SimCluster::start("billing", 1, false, "default_account = \"ml\"", &config);
    let script = cluster.root().join("job.sh");
    std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    let script = script.to_string_lossy().into_owned();
    let args = ["--parsable", "--gres=gpu:1", "-c", "8", "-t", "1", "--comment", "sim:4", &script];
    let job: u32 = cluster.ok("sbatch", &args).trim().parse().unwrap();
    cluster.wait_running(&[job], "the 1-GPU job");

    let show = cluster.ok("scontrol", &["show", "job", &job.to_string()]);
    let tres = show.split_whitespace().find(|w| w.starts_with("TRES=")).unwrap_or_default().to_owned();
    assert!(tres.contains(",billing=1,") && tres.contains("cpu=8"), "scontrol show job: {tres}\n{show}");

    let line = cluster.wait_for("the job's end in sacct", || {
        let out = cluster.ok("sacct", &["-X", "-P", "-n", "-j", &job.to_string(), "-o", "State,ElapsedRaw,AllocTRES"]);
        out.lines().next().filter(|l| l.starts_with("COMPLETED")).map(str::to_owned)
    });
    let fields: Vec<&str> = line.split('|').collect();
    let alloc = fields.get(2).copied().unwrap_or_default();
    assert!(alloc.starts_with("billing=1,cpu=8,gres/gpu=1,"), "sacct AllocTRES: {line}");
    let elapsed: f64 = fields[1].parse().unwrap();

    // What fair share charged: RawUsage (decayed billing-seconds) of the user, about one per second.
    let share = cluster.ok("sshare", &["-a", "-P", "-n"]);
    let raw: f64 = share
        .lines()
        .map(|l| l.split('|').collect::<Vec<_>>())
        .find(|f| f.first().is_some_and(|a| a.trim() == "ml") && f.get(1) == Some(&"root"))
        .and_then(|f| f.get(4)?.parse().ok())
        .unwrap_or_else(|| panic!("no usage row for root in ml:\n{share}"));
    assert!(
        (raw - elapsed).abs() <= 1.5,
        "fair share charged {raw} billing-seconds for a 1-GPU job of {elapsed} s (1 per GPU-second)\n{share}"
    );
}
