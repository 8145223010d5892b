//! SPANK end to end: a real C plugin (`spank-compat/tests/plugins/e2e.c`, compiled here with gcc)
//! in the cluster's plugstack.conf, loaded by sbatch and by the job's supervisor. Its option is a
//! real sbatch option (in `--help`, refused values fail the submission), its value travels in the
//! job's environment to the supervisor, its `spank_setenv`s reach the script, `task_init_privileged` runs as root
//! and `task_init` as the job's user; a plugin failing or segfaulting in `init` fails only that
//! job (reason in ctld's log) while noded and the next job carry on.
//!
//! Every launch path runs the remote hooks: the batch step, srun steps inside a batch job
//! (`--overlap` ones too), srun outside an allocation, salloc's steps. On each, `task_init` runs
//! inside the task before exec (the pid it saw is the command's own), plugin options come from
//! the command line, the environment and `#SBATCH` lines, a failing `task_init` fails the step
//! with the plugin's message on its stderr (and in the node's log) and never runs the command,
//! and `slurm_info` lines stay out of the output.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A cluster whose plugstack holds the e2e plugin (the plugin's directory stays with it).
fn cluster_with_plugin() -> (Cluster, tempfile::TempDir) {
    let plugins = tempfile::tempdir().unwrap();
    // sbatch, srun and salloc load the plugins as the submitting user.
    std::fs::set_permissions(plugins.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let so = compile_plugin(plugins.path());
    let plugstack = plugins.path().join("plugstack.conf");
    std::fs::write(&plugstack, format!("# e2e\nrequired {}\n", so.display())).unwrap();
    let config = format!("plugstack = \"{}\"\n{CONFIG}", plugstack.display());
    (Cluster::start_with(&config), plugins)
}

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
    let (cluster, _plugins) = cluster_with_plugin();
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

/// What a task prints: the plugin's word, and whether `task_init` ran in the task's own process
/// (`same`) as the job's user (`user`).
const SHOW: &str = r#"[ "$E2E_TASK_PID" = "$$" ] && same=same || same="other($E2E_TASK_PID/$$)"; [ "$E2E_TASK_EUID" = "$(id -u)" ] && user=user || user=notuser; echo "$E2E_FROM_PLUGIN $same $user""#;

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn every_launch_path_runs_the_remote_hooks_and_a_failing_task_init_fails_the_step() {
    require_users();
    let (cluster, _plugins) = cluster_with_plugin();
    let user = Some("alice");
    let dir = cluster.workdir(user);
    for command in ["srun", "salloc"] {
        let help = text(&cluster.run(user, &dir, command, &["--help"], None).stdout);
        assert!(help.contains("Options provided by plugins:\n      --e2e-word=word"), "{command}: {help}");
        assert!(help.contains("      --e2e-fail-task "), "{command}: {help}");
    }

    // The batch step and the steps inside its job: options from #SBATCH and srun's command line.
    let srun = cluster.home().join("bin").join("srun");
    let srun = srun.display();
    let script = format!(
        "#!/bin/sh\n#SBATCH --e2e-word=script\n#SBATCH -N1\n{SHOW}\n{srun} --e2e-word=step sh -c '{SHOW}'\n\
         {srun} --overlap sh -c '{SHOW}'\n{srun} --e2e-fail-task touch batch-ran\necho \"failed step rc=$?\"\n"
    );
    let batch = cluster.submit(user, "paths.sh", &script, &["-o", "paths.out"]);
    // The command line wins over #SBATCH; a failing task_init fails the batch step itself.
    let over = cluster.submit(user, "over.sh", &script, &["--e2e-word=cmdline", "-o", "over.out"]);
    let failing =
        cluster.submit(user, "fail.sh", "#!/bin/sh\ntouch batch-fail-ran\n", &["--e2e-fail-task", "-o", "fail.out"]);

    // srun outside an allocation, with its option on the command line and in the environment.
    let out = cluster.run(user, &dir, "srun", &["-N1", "--e2e-word=outside", "sh", "-c", SHOW], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "word=outside same user\n");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("e2e: local_user_init in srun for step ") && stderr.contains(" word=outside"), "{stderr}");
    assert!(!stderr.contains("informational"), "{stderr}");
    let mut with_env = cluster.command(user, &dir, "srun", &["-N1", "sh", "-c", SHOW]);
    with_env.env("SLURM_SPANK__SLURM_SPANK_OPTION_e2e_e2e_word", "env");
    let out = with_env.output().unwrap();
    assert_eq!(text(&out.stdout), "word=env same user\n", "{}", text(&out.stderr));

    // A failing task_init: the step fails with the plugin's message, the command never runs.
    let out = cluster.run(user, &dir, "srun", &["-N1", "--e2e-fail-task", "touch", "srun-ran"], None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("slurmstepd: error: e2e: task_init refuses this task\n"), "{stderr}");
    assert!(
        stderr.contains("slurmstepd: error: SPANK plugin e2e: slurm_spank_task_init failed (returned -1)\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("informational"), "{stderr}");
    assert!(!dir.join("srun-ran").exists());

    // A plugin failing before the tasks (init): every task fails with the reason, nothing runs;
    // the allocation's holder runs no plugins, so the job itself completes.
    let mut failing_init = cluster.command(user, &dir, "srun", &["-N1", "touch", "init-ran"]);
    failing_init.env("E2E_FAIL", "1");
    let out = failing_init.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("slurmstepd: error: e2e: failing on purpose\n"), "{stderr}");
    assert!(stderr.contains(": SPANK plugin e2e: slurm_spank_init failed (returned -1)\n"), "{stderr}");
    assert!(!dir.join("init-ran").exists());
    let jobs = cluster.ok("sacct", &["-X", "-n", "-P", "-o", "JobName,State"]);
    assert!(jobs.contains("touch|COMPLETED") && !jobs.contains("touch|FAILED"), "{jobs}");

    // salloc: its option reaches the steps of the command it runs.
    let command = format!("{srun} sh -c '{SHOW}'; {srun} --e2e-fail-task touch salloc-ran; echo \"rc=$?\"");
    let out = cluster.run(user, &dir, "salloc", &["-N1", "--e2e-word=alloc", "sh", "-c", &command], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "word=alloc same user\nrc=1\n", "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("slurmstepd: error: e2e: task_init refuses this task"), "{}", text(&out.stderr));
    assert!(!dir.join("salloc-ran").exists());

    for (job, name, word) in [(batch, "paths.out", "script"), (over, "over.out", "cmdline")] {
        assert_eq!(cluster.wait_state(job, "COMPLETED", Duration::from_secs(30)), "0:0");
        let output = std::fs::read_to_string(dir.join(name)).unwrap();
        let expected = format!(
            "word={word} same user\nsrun: e2e: local_user_init in srun for step {job}.0 word=step\nword=step same user\n\
             srun: e2e: local_user_init in srun for step {job}.1 word=none\nword=none same user\n"
        );
        assert!(output.starts_with(&expected), "{name}:\n{output}");
        assert!(output.contains("slurmstepd: error: e2e: task_init refuses this task\n"), "{output}");
        assert!(output.ends_with("failed step rc=1\n"), "{output}");
        assert!(!output.contains("informational"), "{output}");
    }
    assert!(!dir.join("batch-ran").exists());
    cluster.wait_state(failing, "FAILED", Duration::from_secs(30));
    let output = std::fs::read_to_string(dir.join("fail.out")).unwrap();
    assert!(output.contains("slurmstepd: error: e2e: task_init refuses this task\n"), "{output}");
    assert!(!dir.join("batch-fail-ran").exists());
    let logs = cluster.logs();
    assert!(logs.contains("spank: e2e: informational line from task_init"), "{logs}");
    assert!(logs.contains("spank: error: e2e: task_init refuses this task"), "{logs}");
}
