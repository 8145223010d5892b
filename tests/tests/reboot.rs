//! `scontrol reboot` and `cancel_reboot` end to end, with the real user alice: a node runs its
//! config's `reboot_program` (a script that only records that it ran) once its jobs end, shows
//! `@` and `^` in sinfo and `+REBOOT_REQUESTED` / `+REBOOT_ISSUED` in scontrol, and is back in
//! service (or `DOWN` with `nextstate=DOWN`) when a noded started after the reboot registers, as a
//! rebooted machine's would. A node not back within `resume_timeout` is set `DOWN`; a pending
//! reboot survives kill -9 of ctld; plain users, nodes without a `reboot_program` and bad words
//! are refused with Slurm's messages and change nothing.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

/// The test config with n1 rebooting through `program`, n2 without a reboot program, and a
/// resume timeout of 6 s.
fn config(program: &Path) -> String {
    let nodes = "names = \"n[1-2]\"\ncpus = 4\nreal_memory = 8000\ngpus = { tesla = 2 }\n";
    assert!(CONFIG.contains(nodes), "the test config's nodes changed");
    let split = format!(
        "names = \"n1\"\ncpus = 4\nreal_memory = 8000\ngpus = {{ tesla = 2 }}\nreboot_program = \"{} now\"\n\n\
         [[nodes]]\nnames = \"n2\"\ncpus = 4\nreal_memory = 8000\ngpus = {{ tesla = 2 }}\n",
        program.display()
    );
    CONFIG.replace(nodes, &split).replace("kill_wait = 2\n", "kill_wait = 2\nresume_timeout = 6\n")
}

fn as_user(cluster: &Cluster, user: &str, command: &str, args: &[&str]) -> Output {
    cluster.run(Some(user), &cluster.workdir(Some(user)), command, args, None)
}

fn scontrol(cluster: &Cluster, args: &[&str]) -> Output {
    cluster.run(None, &cluster.workdir(None), "scontrol", args, None)
}

fn sinfo_state(cluster: &Cluster, node: &str) -> String {
    cluster.ok("sinfo", &["-h", "-N", "-n", node, "-p", "main", "-o", "%t"]).trim().to_owned()
}

fn show_node(cluster: &Cluster, node: &str) -> String {
    cluster.ok("scontrol", &["show", "node", node])
}

/// The `Key=` value of `scontrol show node`.
fn field(show: &str, key: &str) -> String {
    let start = show.find(&format!(" {key}=")).or_else(|| show.find(&format!("{key}="))).unwrap_or_else(|| {
        panic!("no {key}= in {show}");
    });
    let rest = &show[start..].trim_start()[key.len() + 1..];
    rest.split([' ', '\n']).next().unwrap_or_default().to_owned()
}

fn wait_sinfo(cluster: &Cluster, node: &str, want: &str) {
    cluster.wait_for(&format!("{node} {want}"), LONG, || (sinfo_state(cluster, node) == want).then_some(()));
}

/// How many times the reboot program ran (one line each).
fn runs(marker: &Path) -> usize {
    std::fs::read_to_string(marker).map(|s| s.lines().count()).unwrap_or(0)
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_reboot_waits_for_jobs_runs_the_program_and_ends_when_the_node_registers_again() {
    require_users();
    let dir = tempfile::Builder::new().prefix("drover-reboot-").tempdir_in("/tmp").unwrap();
    let program = dir.path().join("reboot.sh");
    let marker = dir.path().join("rebooted");
    std::fs::write(&program, format!("#!/bin/sh\necho \"$(id -u) $*\" >> {}\n", marker.display())).unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cluster = Cluster::start_with(&config(&program));
    wait_sinfo(&cluster, "n1", "idle");

    // Refusals change nothing: a plain user, a node without a reboot program, bad words.
    let alice = as_user(&cluster, "alice", "scontrol", &["reboot", "n1"]);
    assert_eq!(alice.status.code(), Some(1), "alice rebooted a node");
    assert!(text(&alice.stderr).contains("scontrol_reboot_nodes error: "), "{}", text(&alice.stderr));
    let undefined = scontrol(&cluster, &["reboot", "n2"]);
    assert_eq!(undefined.status.code(), Some(1));
    assert_eq!(
        text(&undefined.stderr),
        "scontrol: error: RebootProgram isn't defined\nscontrol_reboot_nodes error: Unspecified error\n"
    );
    for (words, message) in [
        (&["reboot", "ASAP"][..], "Missing node list. Specify ALL|<NodeList>\n"),
        (&["reboot", "nextstate=IDLE", "n1"][..], "Invalid state: nextstate=IDLE\nValid states: DOWN, RESUME\n"),
        (&["reboot", "n1", "n2"][..], "too many arguments for keyword:reboot\n"),
        (&["cancel_reboot"][..], "Missing node list. Specify ALL|<NodeList>\n"),
    ] {
        let out = scontrol(&cluster, words);
        assert_eq!((out.status.code(), text(&out.stderr).as_str()), (Some(1), message), "{words:?}");
    }
    let unknown = scontrol(&cluster, &["reboot", "n9"]);
    assert_eq!(unknown.status.code(), Some(1), "an unknown node was accepted");
    assert_eq!(sinfo_state(&cluster, "n1"), "idle");
    assert_eq!(sinfo_state(&cluster, "n2"), "idle");
    assert_eq!(runs(&marker), 0);

    // ASAP with a job running: the node drains, the reboot waits for the job.
    let job = cluster.submit(None, "busy", "#!/bin/sh\nsleep 5\n", &["-w", "n1", "-n", "1"]);
    cluster.wait_state(job, "RUNNING", LONG);
    let out = scontrol(&cluster, &["reboot", "ASAP", "reason=kernel_update", "n1"]);
    assert!(out.status.success(), "reboot: {}", text(&out.stderr));
    assert_eq!(sinfo_state(&cluster, "n1"), "drng@");
    let show = show_node(&cluster, "n1");
    assert!(field(&show, "State").ends_with("+DRAIN+REBOOT_REQUESTED"), "{show}");
    assert_eq!(field(&show, "Reason"), "kernel_update", "{show}");
    let waiting = cluster.submit(Some("alice"), "after", "#!/bin/sh\ntrue\n", &["-w", "n1", "-n", "1"]);
    let listed = cluster.ok("sinfo", &["-h", "-N", "-p", "main", "-t", "reboot_requested", "-o", "%N"]);
    assert_eq!(listed.trim(), "n1");
    assert_eq!(runs(&marker), 0, "the reboot ran while the job did");

    // The job ends; the program runs as root (with its configured arguments only); the node is
    // out of service until a noded started after that registers.
    cluster.wait_for("the reboot program", LONG, || (runs(&marker) == 1).then_some(()));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "0 now\n");
    wait_sinfo(&cluster, "n1", "drain^");
    assert!(field(&show_node(&cluster, "n1"), "State").ends_with("+REBOOT_ISSUED"));
    let cancel = scontrol(&cluster, &["update", "NodeName=n1", "State=CANCEL_REBOOT"]);
    assert_eq!(text(&cancel.stderr), "slurm_update error: Reboot already in progress\n");
    assert_eq!(cluster.sacct_state(waiting).map(|s| s.0), Some("PENDING".into()), "a job started on a rebooting node");
    cluster.restart_node_with("n1", &["env"]);
    cluster.wait_state(waiting, "COMPLETED", LONG);
    wait_sinfo(&cluster, "n1", "idle");
    let show = show_node(&cluster, "n1");
    assert!(!show.contains("REBOOT") && !show.contains("DRAIN"), "{show}");

    // nextstate=DOWN: back from the reboot DOWN, with the reason given.
    let out = scontrol(&cluster, &["reboot", "nextstate=DOWN", "reason=firmware", "n1"]);
    assert!(out.status.success(), "reboot: {}", text(&out.stderr));
    cluster.wait_for("the second reboot", LONG, || (runs(&marker) == 2).then_some(()));
    wait_sinfo(&cluster, "n1", "boot^");
    cluster.restart_node_with("n1", &["env"]);
    wait_sinfo(&cluster, "n1", "down");
    assert_eq!(field(&show_node(&cluster, "n1"), "Reason"), "firmware");
    assert!(scontrol(&cluster, &["update", "NodeName=n1", "State=RESUME"]).status.success());
    wait_sinfo(&cluster, "n1", "idle");

    // A node that does not come back within resume_timeout is DOWN.
    assert!(scontrol(&cluster, &["reboot", "n1"]).status.success());
    cluster.wait_for("the third reboot", LONG, || (runs(&marker) == 3).then_some(()));
    wait_sinfo(&cluster, "n1", "down");
    let show = show_node(&cluster, "n1");
    assert!(show.contains("Reason=reboot timed out"), "{show}");
    assert!(scontrol(&cluster, &["update", "NodeName=n1", "State=RESUME"]).status.success());
    // The old noded never went away: it registers again as soon as it is resumed.
    wait_sinfo(&cluster, "n1", "idle");

    // A pending reboot survives kill -9 of ctld, and cancel_reboot forgets it (lifting its drain).
    let job = cluster.submit(None, "busy2", "#!/bin/sh\nsleep 30\n", &["-w", "n1", "-n", "1"]);
    cluster.wait_state(job, "RUNNING", LONG);
    assert!(scontrol(&cluster, &["reboot", "ASAP", "n1"]).status.success());
    cluster.kill9("ctld");
    let up = cluster.drover("up");
    assert!(up.status.success(), "restart failed: {}", text(&up.stderr));
    wait_sinfo(&cluster, "n1", "drng@");
    assert!(show_node(&cluster, "n1").contains("Reason=Reboot ASAP"));
    let cancel = scontrol(&cluster, &["cancel_reboot", "n1"]);
    assert!(cancel.status.success(), "cancel_reboot: {}", text(&cancel.stderr));
    wait_sinfo(&cluster, "n1", "mix");
    assert!(!show_node(&cluster, "n1").contains("REBOOT"));
    assert!(cluster.ok("scancel", &[&job.to_string()]).is_empty());
    assert_eq!(runs(&marker), 3, "a cancelled reboot ran");
}
