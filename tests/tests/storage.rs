//! Torn writes: with the state database on a full file system, ctld refuses new work with a clear
//! error and changes nothing; acknowledged jobs stay; once space returns, work is accepted again.

use drover_e2e::{CONFIG, Cluster, text};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

#[test]
#[ignore = "needs root; .ci/run runs it"]
fn full_disk_refuses_new_work_and_recovers() {
    drover_e2e::require_root("mounting a tmpfs");
    let cluster = Cluster::start_prepared(CONFIG, |home| {
        let state = home.join("ctld");
        std::fs::create_dir_all(&state).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs"])
            .arg(&state)
            .status()
            .unwrap();
        assert!(status.success(), "mounting a tmpfs for the state directory");
        vec![state]
    });
    let dir = cluster.workdir(None);
    let mut acknowledged = Vec::new();
    for i in 0..5 {
        acknowledged.push(cluster.submit(None, &format!("before{i}.sh"), "#!/bin/sh\n#SBATCH -H\ntrue\n", &[]));
    }

    // Fill the file system to the last byte.
    let filler: PathBuf = cluster.home().join("ctld").join("filler");
    let status =
        Command::new("dd").args(["if=/dev/zero", "bs=4k"]).arg(format!("of={}", filler.display())).status().unwrap();
    assert!(!status.success(), "dd stops when the disk is full");

    let mut refused = 0;
    for _ in 0..3 {
        let out = cluster.run(None, &dir, "sbatch", &["-H", "--wrap", "true"], None);
        if !out.status.success() {
            refused += 1;
            let stderr = text(&out.stderr);
            assert!(stderr.starts_with("sbatch: error: Batch job submission failed: "), "{stderr}");
            assert!(stderr.contains("storage"), "the error says why: {stderr}");
        }
    }
    assert!(refused > 0, "a full disk must refuse new work");
    // Queries still answer, and nothing acknowledged is gone.
    let squeue = cluster.ok("squeue", &["-h", "-o", "%i"]);
    for job_id in &acknowledged {
        assert!(squeue.lines().any(|l| l == job_id.to_string()), "job {job_id} missing from squeue:\n{squeue}");
    }

    std::fs::remove_file(&filler).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let after = cluster.submit(None, "after.sh", "#!/bin/sh\n#SBATCH -H\ntrue\n", &[]);
    let sacct = cluster.ok("sacct", &["-X", "-P", "-n", "-o", "JobID", "-S", "2000-01-01", "-a"]);
    for job_id in acknowledged.iter().chain([&after]) {
        assert!(sacct.lines().any(|l| l == job_id.to_string()), "job {job_id} missing from sacct:\n{sacct}");
    }
    // A restart finds exactly what was acknowledged.
    cluster.kill9("ctld");
    assert!(cluster.drover("up").status.success());
    let sacct_again = cluster.ok("sacct", &["-X", "-P", "-n", "-o", "JobID", "-S", "2000-01-01", "-a"]);
    assert_eq!(sacct, sacct_again, "the database after a restart holds what was acknowledged");
}
