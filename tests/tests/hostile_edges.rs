//! Edge inputs of issue 28, as plain users: bob's `scontrol update` of alice's job is refused for
//! whose job it is before anything about the request is said; a command whose output is closed
//! (`drover status | head -3`) ends quietly, as shell tools do, instead of panicking; a begin time
//! past year 9999 is refused and stores nothing.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn ownership_first_quiet_closed_pipes_and_bounded_times() {
    require_users();
    let cluster = Cluster::start_with(CONFIG);
    let alice = cluster.workdir(Some("alice"));
    let bob = cluster.workdir(Some("bob"));
    let job = cluster.submit(Some("alice"), "held.sh", "#!/bin/sh\ntrue\n", &["--hold"]);

    // bob, on alice's job, with a dependency that is itself wrong: the answer is about
    // ownership, and nothing changes.
    for dependency in ["afterok:999999", "afterok:1"] {
        let out = cluster.run(
            Some("bob"),
            &bob,
            "scontrol",
            &["update", &format!("JobId={job}"), &format!("Dependency={dependency}")],
            None,
        );
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("Access/permission denied"),
            "bob's update of alice's job with Dependency={dependency}: {}",
            text(&out.stderr)
        );
    }
    let shown = cluster.ok("squeue", &["-h", "-j", &job.to_string(), "-o", "%E"]);
    assert!(matches!(shown.trim(), "" | "(null)"), "alice's job's dependency changed: {shown}");

    // Output closed before the command writes: no panic, no message; the command ends by SIGPIPE
    // as `cat` or `ls` would.
    let drover = cluster.home().join("bin").join("drover");
    let home = cluster.home();
    let home = home.to_string_lossy();
    for (program, args) in [
        (drover.clone(), vec!["status", "--home", &*home]),
        (cluster.home().join("bin").join("squeue"), vec![]),
        (cluster.home().join("bin").join("sinfo"), vec![]),
        (cluster.home().join("bin").join("scontrol"), vec!["show", "config"]),
    ] {
        let (reader, writer) = nix::unistd::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(&program)
            .args(&args)
            .env("DROVER_CONF", cluster.home().join("cluster.toml"))
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert!(stderr.is_empty(), "{} {args:?} with its output closed said: {stderr}", program.display());
        assert_eq!(out.status.signal(), Some(libc_sigpipe()), "{} {args:?}: {:?}", program.display(), out.status);
    }

    // A begin time past year 9999: refused, and no job made.
    let before = cluster.ok("squeue", &["-h", "-a", "-o", "%i"]);
    let out = cluster.run(Some("alice"), &alice, "sbatch", &["--begin=now+999999999days", "--wrap", "true"], None);
    assert!(!out.status.success(), "a begin time in year 2739933 was accepted: {}", text(&out.stdout));
    assert!(text(&out.stderr).contains("9999-12-31"), "{}", text(&out.stderr));
    assert_eq!(cluster.ok("squeue", &["-h", "-a", "-o", "%i"]), before, "a job was made");
}

/// SIGPIPE's number.
fn libc_sigpipe() -> i32 {
    nix::sys::signal::Signal::SIGPIPE as i32
}
