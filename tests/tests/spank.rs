//! SPANK end to end: a real C plugin (`spank-compat/tests/plugins/e2e.c`, compiled here with gcc)
//! in the cluster's plugstack.conf, loaded by sbatch and by the job's supervisor. Its option is a
//! real sbatch option (in `--help`, refused values fail the submission), its value travels in the
//! job's environment to the supervisor, its `spank_setenv`s reach the script, `task_init_privileged` runs as root
//! and `task_init` as the job's user; a plugin failing or segfaulting in `init` fails only that
//! job (reason in ctld's log) while noded and the next job carry on.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn compile_plugin(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../spank-compat/tests/plugins/e2e.c");
    let out = dir.join("e2e.so");
    let mut gcc = Command::new("gcc");
    gcc.args(["-shared", "-fPIC", "-Wall", "-Werror"]);
    if !Path::new("/usr/include/slurm/spank.h").exists() {
        gcc.arg("-I").arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../spank-compat/include"));
    }
    let output = gcc.arg("-o").arg(&out).arg(&src).output().expect("gcc runs");
    assert!(output.status.success(), "gcc e2e.c failed:\n{}", text(&output.stderr));
    out
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_plugin_runs_in_the_supervisor_and_a_crash_fails_only_its_job() {
    require_users();
    let plugins = tempfile::tempdir().unwrap();
    // sbatch loads the plugins as the submitting user.
    std::fs::set_permissions(plugins.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let so = compile_plugin(plugins.path());
    let plugstack = plugins.path().join("plugstack.conf");
    std::fs::write(&plugstack, format!("# e2e\nrequired {}\n", so.display())).unwrap();
    let config = format!("plugstack = \"{}\"\n{CONFIG}", plugstack.display());
    let cluster = Cluster::start_with(&config);
    let user = Some("alice");
    let uid = nix::unistd::User::from_name("alice").unwrap().unwrap().uid.as_raw();

    let script = "#!/bin/sh\necho \"$E2E_FROM_PLUGIN priv=$E2E_PRIV_EUID task=$E2E_TASK_EUID opt=${_SLURM_SPANK_OPTION_e2e_e2e_word-unset}\"\n";
    let dir = cluster.workdir(user);
    let help = cluster.run(user, &dir, "sbatch", &["--help"], None);
    let help = text(&help.stdout);
    assert!(help.contains("Options provided by plugins:\n      --e2e-word=word"), "{help}");
    let refused = cluster.run(user, &dir, "sbatch", &["--e2e-word=bad", "--wrap", "true"], None);
    assert!(!refused.status.success());
    assert_eq!(text(&refused.stderr), "sbatch: error: Invalid --e2e-word argument: bad\n");

    let job_id = cluster.submit(user, "spank.sh", script, &["--e2e-word", "hello", "-o", "spank.out"]);
    assert_eq!(cluster.wait_state(job_id, "COMPLETED", Duration::from_secs(30)), "0:0");
    let output = std::fs::read_to_string(cluster.workdir(user).join("spank.out")).unwrap();
    assert_eq!(output, format!("word=hello priv=0 task={uid} opt=unset\n"));

    let nodeds = [cluster.pid("noded-n1"), cluster.pid("noded-n2")];
    let crash = cluster.submit(user, "crash.sh", "#!/bin/sh\ntrue\n", &["--export=ALL,E2E_CRASH=1"]);
    cluster.wait_state(crash, "FAILED", Duration::from_secs(30));
    let fail = cluster.submit(user, "fail.sh", "#!/bin/sh\ntrue\n", &["--export=ALL,E2E_FAIL=1"]);
    cluster.wait_state(fail, "FAILED", Duration::from_secs(30));
    let logs = cluster.logs();
    assert!(logs.contains("SPANK plugin e2e crashed with SIGSEGV in slurm_spank_init"), "{logs}");
    assert!(logs.contains("SPANK plugin e2e: slurm_spank_init failed (returned -1)"), "{logs}");

    for (name, pid) in ["noded-n1", "noded-n2"].into_iter().zip(nodeds) {
        assert_eq!(cluster.pid(name), pid, "{name} was restarted");
        assert!(Path::new(&format!("/proc/{pid}")).exists(), "{name} died");
    }
    let after = cluster.submit(user, "after.sh", "#!/bin/sh\ntrue\n", &[]);
    assert_eq!(cluster.wait_state(after, "COMPLETED", Duration::from_secs(30)), "0:0");
}
