//! Torn writes: with the state database on a full file system, ctld refuses new work with a clear
//! error and changes nothing; acknowledged jobs stay; once space returns, work is accepted again.
//! Old databases: a cluster started on a database written before the schema had versions
//! (`ctld/tests/fixtures/unversioned.db`) migrates it and shows the same `sacct` and audit records
//! the old code showed.

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

/// The fixture was written by a cluster with [`CONFIG`] (see `ctld/tests/fixtures/README.md`);
/// started on it, today's ctld migrates it to the latest schema version, keeps the held job 9
/// pending and node n2 drained, and `sacct -D` and `drover audit` print what they printed then.
#[test]
fn a_database_from_before_schema_versions_migrates_and_reads_the_same() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ctld/tests/fixtures");
    let cluster = Cluster::start_prepared(CONFIG, |home| {
        let state = home.join("ctld");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::copy(fixtures.join("unversioned.db"), state.join("drover.db")).unwrap();
        Vec::new()
    });
    let format = "JobID,JobName,User,Account,Partition,State,ExitCode,NodeList,AllocCPUS";
    // From a fixed start: sacct's default window begins at today's midnight, and the fixture's
    // jobs ended on the day it was written.
    let sacct = cluster.ok("sacct", &["-a", "-D", "-P", "-S", "2000-01-01", "-o", format]);
    assert_eq!(sacct, std::fs::read_to_string(fixtures.join("unversioned.sacct")).unwrap());
    // Times print in the client's zone (the fixture's text is UTC): compare all but the time, in
    // order; records this cluster added come after the old ones.
    let without_time = |text: &str| -> Vec<String> {
        text.lines().map(|l| l.split_once('|').map_or(l, |(_, rest)| rest).to_owned()).collect()
    };
    let old = without_time(&std::fs::read_to_string(fixtures.join("unversioned.audit")).unwrap());
    let now = without_time(&cluster.ok("drover", &["audit", "-P", "-S", "2000-01-01"]));
    assert_eq!(now[..old.len()], old[..]);
    assert!(cluster.ok("sinfo", &["-h", "-n", "n2", "-o", "%t"]).starts_with("drain"));
    let db = rusqlite::Connection::open(cluster.home().join("ctld").join("drover.db")).unwrap();
    let version: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert!(version >= 5, "schema version {version}");
}
