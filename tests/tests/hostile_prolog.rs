//! A user attacks the node's root programs through their job's environment: alice submits with
//! `--export=ALL,LD_PRELOAD=<her library>,BASH_ENV=<her script>,PATH=<her bin>:…` (and `ENV`,
//! `PYTHONPATH`, a bash function) to a cluster whose prolog and epilog are bash scripts run as
//! root. Each of her programs records the uid it ran as; the `BASH_ENV` script also exits 3, which
//! would fail the prolog and drain the node. The test proves that none of them ran as root, that
//! no node drained, that the prolog and epilog saw the fixed environment (the job's `SLURM_*`
//! values and the admin `PATH`) and that alice's job itself still got the variables she exported.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

fn executable(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn the_job_environment_never_reaches_prolog_or_epilog() {
    require_users();
    let admin = tempfile::Builder::new().prefix("drover-admin-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(admin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = admin.path().display().to_string();
    // Bash scripts, as many sites write them: bash reads BASH_ENV, and `date` is looked up in PATH.
    for name in ["prolog", "epilog"] {
        executable(
            &admin.path().join(name),
            &format!(
                "#!/bin/bash\nstamp=$(date +%s)\nenv > {dir}/{name}.env.$SLURM_JOB_ID\n\
                 echo \"$SLURM_JOB_ID $SLURM_SCRIPT_CONTEXT $(id -u) $stamp\" >> {dir}/log\n"
            ),
        );
    }
    executable(&admin.path().join("health"), "#!/bin/bash\ntrue\n");
    let node_settings = format!(
        "gpus = {{ tesla = 2 }}\nprolog = \"{dir}/prolog\"\nepilog = \"{dir}/epilog\"\n\
         prolog_epilog_timeout = 10\nhealth_check_program = \"{dir}/health\"\nhealth_check_interval = 1"
    );
    let cluster = Cluster::start_with(&CONFIG.replace("gpus = { tesla = 2 }", &node_settings));

    let alice = nix::unistd::User::from_name("alice").unwrap().unwrap();
    // alice's tools, in her own directory.
    let work = cluster.workdir(Some("alice"));
    let marker = work.join("ran-as");
    let record = |what: &str| format!("echo \"{what} $(id -u)\" >> {}\n", marker.display());
    let evil_bin = work.join("bin");
    std::fs::create_dir_all(&evil_bin).unwrap();
    executable(&evil_bin.join("date"), &format!("#!/bin/sh\n{}echo 0\n", record("path")));
    executable(&work.join("bash_env.sh"), &format!("{}exit 3\n", record("bash_env")));
    executable(&work.join("env.sh"), &record("env"));
    let source = work.join("pre.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void pre(void) {{\n\
             FILE *f = fopen(\"{}\", \"a\"); if (f) {{ fprintf(f, \"preload %d\\n\", (int)getuid()); fclose(f); }}\n}}\n",
            marker.display()
        ),
    )
    .unwrap();
    let library = work.join("pre.so");
    let built = Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&library).arg(&source).output().unwrap();
    assert!(built.status.success(), "compiling the preload library: {}", text(&built.stderr));
    for path in [&evil_bin, &evil_bin.join("date"), &library, &work.join("bash_env.sh"), &work.join("env.sh")] {
        std::os::unix::fs::chown(path, Some(alice.uid.as_raw()), Some(alice.gid.as_raw())).unwrap();
    }

    let export = format!(
        "--export=ALL,LD_PRELOAD={},BASH_ENV={},ENV={},PATH={}:/usr/bin:/bin,PYTHONPATH={},SHELLOPTS=xtrace",
        library.display(),
        work.join("bash_env.sh").display(),
        work.join("env.sh").display(),
        evil_bin.display(),
        work.display(),
    );
    // The job itself runs with what alice exported (her own uid, her own business).
    let job = cluster.submit(
        Some("alice"),
        "job.sh",
        "#!/bin/sh\n#SBATCH -t 5\necho \"$LD_PRELOAD|$PATH\" > exported.$SLURM_JOB_ID\n",
        &[&export],
    );
    assert_eq!(cluster.wait_state(job, "COMPLETED", LONG), "0:0", "{}", cluster.logs());
    let log = cluster.wait_for("the epilog", LONG, || {
        let log = std::fs::read_to_string(admin.path().join("log")).unwrap_or_default();
        log.contains(&format!("{job} epilog_slurmd 0")).then_some(log)
    });
    assert!(log.contains(&format!("{job} prolog_slurmd 0 ")), "{log}");

    // None of alice's code ran as root; her job's own processes may have run it as alice.
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    for line in ran.lines() {
        assert!(!line.ends_with(" 0"), "alice's code ran as root: {line}\nall records:\n{ran}");
    }
    let exported = std::fs::read_to_string(work.join(format!("exported.{job}"))).unwrap();
    assert!(exported.starts_with(&format!("{}|{}", library.display(), evil_bin.display())), "{exported}");

    for context in ["prolog", "epilog"] {
        let env = std::fs::read_to_string(admin.path().join(format!("{context}.env.{job}"))).unwrap();
        for name in ["LD_PRELOAD=", "BASH_ENV=", "ENV=", "PYTHONPATH=", "SHELLOPTS=", "HOME=/home/alice"] {
            assert!(!env.lines().any(|line| line.starts_with(name)), "{context} got {name}\n{env}");
        }
        assert!(env.lines().any(|line| line == "PATH=/usr/sbin:/usr/bin:/sbin:/bin"), "{context}:\n{env}");
        for expected in [
            format!("SLURM_JOB_ID={job}"),
            "SLURM_JOB_USER=alice".to_owned(),
            format!("SLURM_JOB_UID={}", alice.uid),
            format!("SLURM_SCRIPT_CONTEXT={context}_slurmd"),
        ] {
            assert!(env.lines().any(|line| line == expected), "{context} lacks {expected}\n{env}");
        }
    }

    // BASH_ENV's `exit 3` never failed a root program: no node drained.
    std::thread::sleep(Duration::from_secs(2));
    let reasons = cluster.ok("sinfo", &["-h", "-R"]);
    assert!(reasons.trim().is_empty(), "a node drained:\n{reasons}");
}
