//! OCI containers (`--container=BUNDLE`, issue 32) end to end, with crun and with runc (Debian's
//! packages), rootless, on a real `drover up` cluster whose nodes declare four fake GPUs. The
//! bundle is made here as the plain user alice, the way a user makes one: a busybox-static root
//! file system and the runtime's own `spec --rootless`, which here also binds all four GPU device
//! files into the container. As alice:
//! - a batch job in the container sees its root file system, runs as root of its user namespace,
//!   opens only its own GPU (ENXIO; EPERM on the three others: the job's device filter holds
//!   inside the container), writes its output file and ends with its exit code in `sacct`;
//! - a container job over its memory ends `OUT_OF_MEMORY`, one forking past its pids limit gets
//!   `can't fork`; `scancel` ends a running one, and its time limit another;
//! - `srun --container` runs each task in the container, outside an allocation, as a step of a
//!   batch job (host script, container steps) and inside `salloc` (`SLURM_CONTAINER`);
//! - a node without `[oci]` refuses a container job with the reason.
//!
//! Needs root (fake device nodes, cgroups, the test user) and crun and runc: `.ci/run` installs
//! them; ignored by a plain `cargo test`.

use drover_e2e::{Cluster, fake_gpus, text};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);
const USER: &str = "alice";

/// A bundle in alice's workdir: busybox's applets in `rootfs/bin`, a marker file, and the
/// runtime's `spec --rootless` with the four fake GPUs bound in.
fn make_bundle(cluster: &Cluster, runtime: &str, dev: &Path) -> PathBuf {
    let bundle = cluster.workdir(Some(USER)).join(format!("bundle-{runtime}"));
    let bin = bundle.join("rootfs/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
    for applet in ["sh", "cat", "echo", "dd", "id", "sleep", "grep", "head", "true", "hostname"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
    std::fs::create_dir_all(bundle.join("rootfs/etc")).unwrap();
    std::fs::write(bundle.join("rootfs/etc/marker"), format!("inside the {runtime} bundle\n")).unwrap();
    let owner = nix::unistd::User::from_name(USER).unwrap().unwrap();
    let chown = Command::new("chown").arg("-R").arg(format!("{USER}:")).arg(&bundle).status().unwrap();
    assert!(chown.success());
    // The runtime's own template, written by alice.
    let spec = Command::new("setpriv")
        .args([&format!("--reuid={USER}"), &format!("--regid={USER}"), "--init-groups", runtime, "spec", "--rootless"])
        .current_dir(&bundle)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    assert!(spec.status.success(), "{runtime} spec --rootless: {}", text(&spec.stderr));
    let path = bundle.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mounts = config["mounts"].as_array_mut().unwrap();
    for minor in 0..4 {
        let file = dev.join(format!("nvidia{minor}")).to_string_lossy().into_owned();
        mounts.push(serde_json::json!({
            "destination": format!("/dev/nvidia{minor}"), "type": "bind", "source": file, "options": ["bind", "rw"]
        }));
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    nix::unistd::chown(&path, Some(owner.uid), Some(owner.gid)).unwrap();
    std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o755)).unwrap();
    bundle
}

fn runtime_installed(runtime: &str) {
    let found = Command::new(runtime).arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(found, "{runtime} is not installed (apt-get install {runtime}; .ci/run does)");
}

/// One `nvidia<N> <what opening it said>` line per fake GPU, probed from inside the container
/// (its root file system is read-only, so the message is kept in a variable).
const PROBE: &str = "for d in 0 1 2 3; do if said=$(dd if=/dev/nvidia$d of=/dev/null count=0 2>&1); then echo \"nvidia$d opened\"; \
                     else echo \"nvidia$d $said\"; fi; done";

fn container_jobs_run_with(runtime: &str) {
    drover_e2e::require_root("the container tests make device nodes and run jobs as alice");
    runtime_installed(runtime);
    let (dev, config) = fake_gpus();
    // A pids limit a container job can reach (the runtime and the shell need a few).
    let limited = config.replace("cpus = 4\n", "cpus = 4\njob_pids_max = 48\n");
    assert_ne!(limited, config, "the harness config changed its cpus line");
    let config = limited;
    // A minute of time limit lasts 6 s.
    let cluster = Cluster::start_with_env(
        &format!("{config}\n[oci]\nruntime = \"{runtime}\"\n"),
        &[("DROVER_TIME_SCALE", "0.1")],
    );
    let bundle = make_bundle(&cluster, runtime, dev.path());
    let bundle_arg = format!("--container={}", bundle.display());
    let workdir = cluster.workdir(Some(USER));

    // A batch job: its root file system, its one GPU, its output file and exit code.
    let script = format!(
        "#!/bin/sh\n#SBATCH --gres=gpu:1 -t 5\ncat /etc/marker\necho uid=$(id -u) gpus=$SLURM_JOB_GPUS\n{PROBE}\nexit 3\n"
    );
    let job = cluster.submit(Some(USER), "probe.sh", &script, &[&bundle_arg]);
    let exit = cluster.wait_state(job, "FAILED", LONG);
    let out = std::fs::read_to_string(workdir.join(format!("slurm-{job}.out"))).unwrap_or_default();
    assert_eq!(exit, "3:0", "the job's output:\n{out}\n{}", cluster.logs());
    assert!(out.contains(&format!("inside the {runtime} bundle")), "not in the bundle:\n{out}");
    assert!(out.contains("uid=0 "), "not root of a user namespace:\n{out}");
    let allowed: u32 = out
        .lines()
        .find_map(|l| l.split("gpus=").nth(1))
        .and_then(|g| g.trim().parse().ok())
        .unwrap_or_else(|| panic!("no single GPU:\n{out}"));
    for minor in 0..4 {
        let expected = if minor == allowed { "No such device or address" } else { "Operation not permitted" };
        let line = out.lines().find(|l| l.starts_with(&format!("nvidia{minor} "))).unwrap_or_else(|| panic!("{out}"));
        assert!(line.contains(expected), "nvidia{minor}: expected {expected}, got `{line}`\n{out}");
    }

    // The job's memory limit holds inside the container.
    let oom = cluster.submit(
        Some(USER),
        "oom.sh",
        "#!/bin/sh\n#SBATCH --mem=50M -t 5\ndd if=/dev/zero of=/dev/null bs=300M count=1\necho survived\n",
        &[&bundle_arg],
    );
    assert_eq!(cluster.wait_state(oom, "OUT_OF_MEMORY", LONG), "0:125", "{}", cluster.logs());

    // The job's pids limit holds inside the container: forks past it fail.
    let forks = cluster.submit(
        Some(USER),
        "forks.sh",
        "#!/bin/sh\n#SBATCH -t 5\ni=0; while [ $i -lt 80 ]; do sleep 60 & i=$((i+1)); done\necho forked\nkill $(jobs -p) 2>/dev/null\n",
        &[&bundle_arg],
    );
    cluster.wait_for("the fork job's end", LONG, || {
        cluster.sacct_state(forks).filter(|(s, _)| s != "RUNNING" && s != "PENDING")
    });
    let out = std::fs::read_to_string(workdir.join(format!("slurm-{forks}.out"))).unwrap_or_default();
    assert!(
        out.contains("can't fork") || out.contains("Resource temporarily unavailable"),
        "80 forks under pids.max 48:\n{out}"
    );

    // scancel ends a running container job.
    let long =
        cluster.submit(Some(USER), "long.sh", "#!/bin/sh\n#SBATCH -t 5\necho started\nsleep 300\n", &[&bundle_arg]);
    cluster.squeue_until(&long.to_string(), "%T", |state| state.trim() == "RUNNING");
    let started = workdir.join(format!("slurm-{long}.out"));
    cluster.wait_for("the long job's first line", LONG, || {
        std::fs::read_to_string(&started).ok().filter(|t| t.contains("started"))
    });
    let cancel = cluster.run(Some(USER), &workdir, "scancel", &[&long.to_string()], None);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    cluster.wait_state(long, "CANCELLED", LONG);

    // The time limit ends a container job.
    let late = cluster.submit(Some(USER), "late.sh", "#!/bin/sh\n#SBATCH -t 1\nsleep 300\n", &[&bundle_arg]);
    cluster.wait_state(late, "TIMEOUT", LONG);

    // srun: each task in the container, outside an allocation.
    let srun = cluster.run(
        Some(USER),
        &workdir,
        "srun",
        &["-n2", "-l", &bundle_arg, "sh", "-c", "echo task=$SLURM_PROCID $(cat /etc/marker)"],
        None,
    );
    let said = text(&srun.stdout);
    assert!(srun.status.success(), "srun --container: {said}{}", text(&srun.stderr));
    for task in 0..2 {
        assert!(said.contains(&format!("{task}: task={task} inside the {runtime} bundle")), "{said}");
    }

    // Steps of a batch job that runs on the host: srun --container from its script. The
    // cluster's commands must be reachable by alice from there, as a site's are.
    let home = cluster.home();
    for dir in [home.parent().unwrap().to_owned(), home.clone(), home.join("bin")] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let host = cluster.submit(
        Some(USER),
        "steps.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -n2 -t 5\n{srun} {bundle_arg} cat /etc/marker\n{srun} {bundle_arg} sh -c 'exit 4'\necho step2=$?\n",
            srun = home.join("bin/srun").display()
        ),
        &[],
    );
    assert_eq!(cluster.wait_state(host, "COMPLETED", LONG), "0:0");
    let out = std::fs::read_to_string(workdir.join(format!("slurm-{host}.out"))).unwrap();
    assert_eq!(out.matches(&format!("inside the {runtime} bundle")).count(), 2, "{out}");
    assert!(out.contains("step2=4"), "{out}");
    let steps = cluster.ok("sacct", &["-P", "-n", "-o", "JobID,State,ExitCode", "-j", &host.to_string()]);
    assert!(steps.contains(&format!("{host}.0|COMPLETED|0:0")), "{steps}");
    assert!(steps.contains(&format!("{host}.1|FAILED|4:0")), "{steps}");

    // salloc --container: srun inside reads SLURM_CONTAINER.
    let srun = home.join("bin/srun").display().to_string();
    let salloc = cluster.run(Some(USER), &workdir, "salloc", &["-N1", &bundle_arg, &srun, "cat", "/etc/marker"], None);
    assert!(salloc.status.success(), "salloc: {}{}", text(&salloc.stdout), text(&salloc.stderr));
    assert!(text(&salloc.stdout).contains(&format!("inside the {runtime} bundle")), "{}", text(&salloc.stdout));
    drop(dev);
}

#[test]
#[ignore = "needs root, alice and crun; .ci/run runs it"]
fn container_jobs_run_with_crun() {
    container_jobs_run_with("crun");
}

#[test]
#[ignore = "needs root, alice and runc; .ci/run runs it"]
fn container_jobs_run_with_runc() {
    container_jobs_run_with("runc");
}

#[test]
#[ignore = "needs root and alice; .ci/run runs it"]
fn a_cluster_without_a_runtime_refuses_a_container_job_with_the_reason() {
    drover_e2e::require_root("the commands run as alice");
    let cluster = Cluster::start();
    let workdir = cluster.workdir(Some(USER));
    std::fs::write(workdir.join("c.sh"), "#!/bin/sh\ntrue\n").unwrap();
    let reason = "--container: this cluster has no OCI runtime configured ([oci] in cluster.toml)";
    let sbatch = cluster.run(Some(USER), &workdir, "sbatch", &["--container=/nonexistent/bundle", "c.sh"], None);
    assert!(!sbatch.status.success() && text(&sbatch.stderr).contains(reason), "{}", text(&sbatch.stderr));
    let srun = cluster.run(Some(USER), &workdir, "srun", &["--container=/nonexistent/bundle", "true"], None);
    assert!(!srun.status.success() && text(&srun.stderr).contains(reason), "{}", text(&srun.stderr));
    // Nothing was queued.
    assert_eq!(cluster.ok("squeue", &["-h", "-u", USER]).trim(), "");
}
