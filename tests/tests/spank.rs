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
//!
//! A node's tasks are all forked before any runs `task_init` (`together.c`: each task's
//! `task_init` waits until all of the node's tasks have reached theirs), as under pyxis, whose
//! first task starts the container the node's other tasks join.
//!
//! The surface pyxis needs (`surface.c`, pyxis's calls in pyxis's callbacks, answers recorded to a
//! file) in all five contexts, as a plain user: the slurmd context's `init` when each noded starts
//! and `slurmd_exit` when it stops, sbatch's and srun's options, the remote items (uid, gid,
//! supplementary gids, job and step ids, argv, environment, local and total task counts),
//! `spank_getenv/setenv/unsetenv` (remote only), `slurm_spank_log` on the user's side, and
//! `job_prolog`/`job_epilog` as root around each job with the job's ids and options.

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
    compile(dir, "e2e")
}

/// Compiles `spank-compat/tests/plugins/<name>.c` into `dir/<name>.so`.
fn compile(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../spank-compat/tests/plugins/{name}.c"));
    let out = dir.join(format!("{name}.so"));
    let mut gcc = Command::new("gcc");
    gcc.args(["-shared", "-fPIC", "-Wall", "-Werror"]);
    if !Path::new("/usr/include/slurm/spank.h").exists() {
        gcc.arg("-I").arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../spank-compat/include"));
    }
    let output = gcc.arg("-o").arg(&out).arg(&src).output().expect("gcc runs");
    assert!(output.status.success(), "gcc {name}.c failed:\n{}", text(&output.stderr));
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

/// A surface line's `key=value` words.
fn words(line: &str) -> std::collections::BTreeMap<&str, &str> {
    line.split(' ').filter_map(|word| word.split_once('=')).collect()
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn the_surface_pyxis_uses_answers_in_every_context() {
    require_users();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::set_permissions(plugins.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let so = compile(plugins.path(), "surface");
    // Every context appends here: root (slurmd, job_script, remote) and alice (sbatch, srun, tasks).
    let record = plugins.path().join("surface.txt");
    std::fs::write(&record, "").unwrap();
    std::fs::set_permissions(&record, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let plugstack = plugins.path().join("plugstack.conf");
    std::fs::write(&plugstack, format!("required {} out={}\n", so.display(), record.display())).unwrap();
    let cluster = Cluster::start_with(&format!("plugstack = \"{}\"\n{CONFIG}", plugstack.display()));
    let lines = || std::fs::read_to_string(&record).unwrap().lines().map(str::to_owned).collect::<Vec<_>>();
    let not_remote = "3006";

    // slurmd: init in each node's helper, as root, before the node took jobs.
    let slurmd: Vec<String> = lines().into_iter().filter(|line| line.contains("ctx=4")).collect();
    let expected =
        format!("init ctx=4 register=-1 getenv={not_remote} setenv={not_remote} unsetenv={not_remote} euid=0");
    assert_eq!(slurmd, [expected.clone(), expected], "{}", cluster.logs());

    let user = Some("alice");
    let alice = nix::unistd::User::from_name("alice").unwrap().unwrap();
    let (uid, gid) = (alice.uid.as_raw(), alice.gid.as_raw());
    let id_groups = Command::new("id").args(["-G", "alice"]).output().unwrap();
    let mut groups: Vec<u32> = text(&id_groups.stdout).split_whitespace().map(|g| g.parse().unwrap()).collect();
    groups.sort_unstable();
    assert!(groups.len() >= 2, "alice needs a supplementary group: {groups:?}");
    let dir = cluster.workdir(user);
    let srun = cluster.home().join("bin").join("srun");
    let script = format!(
        "#!/bin/sh\n#SBATCH --surface-image=busybox\n#SBATCH -N1 -n3\n\
         echo \"batch lc=${{LC_ALL-unset}} from=$SURFACE_FROM_PLUGIN keep=$SURFACE_KEEP\"\n\
         LC_ALL=C SURFACE_FROM_PLUGIN=none {srun} -n3 --surface-image=step sh -c 'echo \"rank=$SLURM_PROCID lc=${{LC_ALL-unset}} from=$SURFACE_FROM_PLUGIN\"' | sort\n",
        srun = srun.display()
    );
    std::fs::write(dir.join("surface.sh"), &script).unwrap();
    let args =
        ["--parsable", "--export=ALL,SURFACE_MARK=m1,LC_ALL=C,SURFACE_KEEP=user", "-o", "surface.out", "surface.sh"];
    // As a shell submits it: PWD is the directory sbatch runs in.
    let submitted = cluster.command(user, &dir, "sbatch", &args).env("PWD", &dir).output().unwrap();
    assert!(submitted.status.success(), "{}", text(&submitted.stderr));
    let job: u32 = text(&submitted.stdout).trim().parse().unwrap();
    assert_eq!(cluster.wait_state(job, "COMPLETED", Duration::from_secs(30)), "0:0");
    let output = std::fs::read_to_string(dir.join("surface.out")).unwrap();
    // unsetenv and setenv (with and without overwrite) reached the batch task and the step's;
    // slurm_spank_log reached the user.
    assert!(output.contains("batch lc=unset from=container keep=user\n"), "{output}");
    for rank in 0..3 {
        assert!(output.contains(&format!("rank={rank} lc=unset from=container\n")), "{output}");
        assert!(output.contains(&format!("surface: task {rank} of job {job}\n")), "{output}");
    }
    assert!(output.contains(&format!("surface: task 0 of job {job}\n")), "{output}");

    let all = lines();
    let of_job: Vec<&String> = all.iter().filter(|line| line.contains(&format!("job={job} "))).collect();
    let find = |prefix: &str, step: &str| -> Vec<&String> {
        of_job.iter().copied().filter(|line| line.starts_with(prefix) && line.contains(step)).collect()
    };
    // sbatch (allocator) and srun (local) as alice: the option registered and given; the
    // environment calls refused as outside the remote context.
    let client_init =
        format!("init ctx={{}} register=0 getenv={not_remote} setenv={not_remote} unsetenv={not_remote} euid={uid}");
    for (ctx, image) in [("3", "busybox"), ("1", "step")] {
        assert!(all.contains(&client_init.replace("{}", ctx)), "ctx {ctx}: {all:#?}");
        assert!(all.contains(&format!("init_post_opt ctx={ctx} image={image}")), "{all:#?}");
        assert!(all.contains(&format!("exit ctx={ctx}")), "{all:#?}");
    }
    // The batch step (remote): items, argv (the script), the environment, the travelled option.
    let batch = find("init_post_opt ctx=2", "step=4294967291 ");
    assert_eq!(batch.len(), 1, "{all:#?}");
    let batch = words(batch[0]);
    assert_eq!((batch["uid"], batch["gid"]), (uid.to_string().as_str(), gid.to_string().as_str()));
    let mut got_groups: Vec<u32> = batch["gids"].split(',').map(|g| g.parse().unwrap()).collect();
    got_groups.sort_unstable();
    assert_eq!(got_groups, groups, "supplementary gids");
    assert_eq!((batch["local"], batch["total"], batch["pwd_rc"]), ("1", "1", "0"));
    assert_eq!((batch["pwd"], batch["mark"], batch["image"]), (dir.to_str().unwrap(), "m1", "busybox(remote)"));
    let user_init = find("user_init", "step=batch:");
    assert_eq!(user_init.len(), 1, "{all:#?}");
    let user_init = words(user_init[0]);
    assert_eq!((user_init["argc"], user_init["mark"], user_init["euid"]), ("1", "m1", uid.to_string().as_str()));
    assert!(user_init["argv"].ends_with("/script"), "{user_init:?}");
    // The step (remote): 3 tasks in all and here, its command as argv, each task's own rank.
    let step = find("init_post_opt ctx=2", "step=0 ");
    assert_eq!(step.len(), 1, "{all:#?}");
    let step = words(step[0]);
    assert_eq!((step["local"], step["total"], step["image"], step["mark"]), ("3", "3", "step(remote)", "m1"));
    let step_user_init = find("user_init", "step=0 ");
    assert_eq!(step_user_init.len(), 1, "{all:#?}");
    assert!(step_user_init[0].contains(" argc=3 argv=sh|-c|echo "), "{all:#?}");
    let keep_exists = "3003";
    let mut task_inits: Vec<String> = find("task_init", "").into_iter().cloned().collect();
    task_inits.sort();
    let expected: Vec<String> = [0, 0, 1, 2]
        .iter()
        .map(|rank| {
            format!("task_init job={job} rank={rank} procid={rank} unset=0 set=0 keep={keep_exists} euid={uid}")
        })
        .collect();
    assert_eq!(task_inits, expected, "the batch task and the step's three");
    assert_eq!(find("task_exit", "local=1").len(), 1, "{all:#?}");
    assert_eq!(find("task_exit", "local=3").len(), 3, "{all:#?}");
    assert!(find("task_exit", "").iter().all(|line| line.contains(" status=0 ")), "{all:#?}");
    // job_script: root, around the job, with its ids and its sbatch option.
    for hook in ["job_prolog", "job_epilog"] {
        let expected =
            format!("{hook} ctx=5 job={job} uid={uid} gid={gid} image=busybox getopt=0 getenv={not_remote} euid=0");
        assert_eq!(find(hook, ""), [&expected], "{all:#?}");
    }
    let prolog_at = all.iter().position(|line| line.starts_with("job_prolog")).unwrap();
    let epilog_at = all.iter().position(|line| line.starts_with("job_epilog")).unwrap();
    let remote_at: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, line)| line.contains("ctx=2") && line.contains(&format!("job={job} ")))
        .map(|(at, _)| at)
        .collect();
    assert!(remote_at.iter().all(|at| prolog_at < *at && *at < epilog_at), "prolog, remote, epilog: {all:#?}");

    // slurmd_exit when each noded stops.
    let down = cluster.drover("down");
    assert!(down.status.success(), "{}", text(&down.stderr));
    let exits = cluster.wait_for("slurmd_exit in both helpers", Duration::from_secs(20), || {
        let exits: Vec<String> = lines().into_iter().filter(|line| line.starts_with("slurmd_exit")).collect();
        (exits.len() == 2).then_some(exits)
    });
    assert_eq!(exits, ["slurmd_exit ctx=4 euid=0", "slurmd_exit ctx=4 euid=0"]);
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_nodes_tasks_all_exist_before_any_runs_task_init() {
    require_users();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::set_permissions(plugins.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let so = compile(plugins.path(), "together");
    // Each task's task_init (as alice) leaves its mark here and waits for its node's others.
    let marks = plugins.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    std::fs::set_permissions(&marks, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let plugstack = plugins.path().join("plugstack.conf");
    std::fs::write(&plugstack, format!("required {} dir={}\n", so.display(), marks.display())).unwrap();
    let cluster = Cluster::start_with(&format!("plugstack = \"{}\"\n{CONFIG}", plugstack.display()));
    let user = Some("alice");
    let dir = cluster.workdir(user);
    // `true` ends at once: with tasks forked one after another, task 0's task_init would wait
    // for task 1, which is forked only once task 0 exec'd, and fail after 10 seconds.
    let started = std::time::Instant::now();
    let out = cluster.run(user, &dir, "srun", &["-N1", "-n3", "true"], None);
    let took = started.elapsed();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", cluster.logs());
    assert!(!stderr.contains("together"), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let mut seen: Vec<String> =
        std::fs::read_dir(&marks).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    seen.sort();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (id, mark) in seen.iter().enumerate() {
        assert!(mark.ends_with(&format!(".{id}")), "{seen:?}");
    }
}

/// Waits until sinfo's reason column lists `reason`.
fn wait_reason(cluster: &Cluster, reason: &str) {
    cluster.wait_for(&format!("the drain reason `{reason}`"), Duration::from_secs(30), || {
        cluster.ok("sinfo", &["-h", "-o", "%N %E"]).contains(reason).then_some(())
    });
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn failing_job_script_hooks_drain_the_node_and_a_failing_slurmd_init_stops_noded() {
    require_users();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::set_permissions(plugins.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let so = compile(plugins.path(), "surface");
    let plugstack = plugins.path().join("plugstack.conf");
    let stack_failing =
        |hook: &str| std::fs::write(&plugstack, format!("required {} fail={hook}\n", so.display())).unwrap();
    stack_failing("job_epilog");
    let cluster = Cluster::start_with(&format!("plugstack = \"{}\"\n{CONFIG}", plugstack.display()));
    let user = Some("alice");
    let dir = cluster.workdir(user);

    // job_epilog fails: the job has completed, its node drains (Slurm's rule for a required plugin).
    let job = cluster.submit(user, "epi.sh", "#!/bin/sh\n#SBATCH -w n1\ntrue\n", &[]);
    assert_eq!(cluster.wait_state(job, "COMPLETED", Duration::from_secs(30)), "0:0");
    wait_reason(&cluster, "Epilog error: SPANK plugin surface: slurm_spank_job_epilog failed (returned -1)");

    // job_prolog fails: the job fails before it runs, and its node drains.
    stack_failing("job_prolog");
    let job = cluster.submit(user, "pro.sh", "#!/bin/sh\n#SBATCH -w n2\ntouch prolog-ran\n", &[]);
    cluster.wait_state(job, "FAILED", Duration::from_secs(30));
    assert!(!dir.join("prolog-ran").exists());
    wait_reason(&cluster, "Prolog error: SPANK plugin surface: slurm_spank_job_prolog failed (returned -1)");

    // slurmd init fails: noded does not start, and says why.
    stack_failing("slurmd_init");
    cluster.restart_node_with("n1", &["env"]);
    let pid = cluster.pid("noded-n1");
    cluster.wait_for("noded-n1 to give up", Duration::from_secs(20), || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        (stat.is_empty() || stat.contains(") Z")).then_some(())
    });
    let log = std::fs::read_to_string(cluster.home().join("log").join("noded-n1.log")).unwrap();
    assert!(log.contains("spank: error: surface: slurmd init fails on purpose"), "{log}");
    assert!(
        log.contains(
            "SPANK plugins in the slurmd context: SPANK plugin surface: slurm_spank_init failed (returned -1)"
        ),
        "{log}"
    );
}
