//! What one user can make other users read or use, as real unprivileged users against real
//! daemons: control characters in job names and comments are refused at submit (command line and
//! `#SBATCH`) and at `scontrol update`, and strings stored before that rule (written straight into
//! ctld's SQLite database while it was down) print as `?` in `squeue`, `sacct -P`, `scontrol show
//! job` and `sinfo -R`; a QOS outside the user's association is refused with Slurm's message; and
//! `private_data` hides other users' jobs and usage; a step named with an escape sequence (`srun -J`) is
//! refused too.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use drover_shared::job::JobInfo;
use std::process::Output;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

fn as_user(cluster: &Cluster, user: &str, command: &str, args: &[&str]) -> Output {
    cluster.run(Some(user), &cluster.workdir(Some(user)), command, args, None)
}

/// Writes `script` as `name` in `user`'s workdir and runs `sbatch --parsable ARGS name` as them.
fn sbatch(cluster: &Cluster, user: &str, name: &str, script: &str, args: &[&str]) -> Output {
    let path = cluster.workdir(Some(user)).join(name);
    std::fs::write(&path, script).expect("writing script");
    let path = path.to_string_lossy().into_owned();
    let mut all = vec!["--parsable"];
    all.extend_from_slice(args);
    all.push(&path);
    as_user(cluster, user, "sbatch", &all)
}

/// A refused submission: exit 1, the reason named, Slurm's failure line last.
fn refused_for_control_character(out: &Output, what: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: stdout {} stderr {stderr}", text(&out.stdout));
    assert!(text(&out.stdout).is_empty(), "{what}: {}", text(&out.stdout));
    assert!(stderr.contains("contains a control character"), "{what}: {stderr}");
    assert!(stderr.ends_with("sbatch: error: Batch job submission failed: Invalid job specification\n"), "{stderr}");
}

/// No byte of `output` is a control character other than the newlines ending its lines.
fn assert_no_controls(what: &str, output: &str) {
    let bad: Vec<char> = output.chars().filter(|&c| c != '\n' && drover_shared::text::is_forbidden(c)).collect();
    assert!(bad.is_empty(), "{what} printed control characters {bad:?}:\n{output:?}");
}

/// Opens ctld's database (ctld must be stopped).
fn database(cluster: &Cluster) -> rusqlite::Connection {
    rusqlite::Connection::open(cluster.home().join("ctld").join("drover.db")).expect("opening ctld's database")
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn control_characters_are_refused_and_old_ones_print_safely() {
    require_users();
    let cluster = Cluster::start();
    let script = "#!/bin/sh\ntrue\n";

    // On the command line: a newline that would forge a squeue row, an escape sequence, a tab
    // in the wckey, a C1 control (CSI) in the comment.
    let forged = "x\n    99      main     root  R       0:01      1 n1";
    for (what, args) in [
        ("newline in -J", vec!["-H", "-J", forged]),
        ("ESC in -J", vec!["-H", "-J", "\u{1b}[2J\u{1b}]0;owned\u{7}"]),
        ("ESC in --comment", vec!["-H", "--comment=see \u{1b}[31mred"]),
        ("C1 in --comment", vec!["-H", "--comment=c1 \u{9b}2J"]),
        ("tab in --wckey", vec!["-H", "--wckey=a\tb"]),
    ] {
        refused_for_control_character(&sbatch(&cluster, "alice", "plain.sh", script, &args), what);
    }
    // In `#SBATCH` directives (the tokenizer passes a raw ESC or DEL through).
    for (what, directive) in [
        ("ESC in #SBATCH -J", "#SBATCH -J evil\u{1b}[2Jname"),
        ("DEL in #SBATCH --comment", "#SBATCH --comment=a\u{7f}b"),
    ] {
        let script = format!("#!/bin/sh\n{directive}\ntrue\n");
        refused_for_control_character(&sbatch(&cluster, "alice", "directive.sh", &script, &["-H"]), what);
    }
    // Nothing was stored and no job id was used: the first accepted job is job 1.
    assert_eq!(cluster.ok("squeue", &["-h", "-a"]), "");
    let out = sbatch(&cluster, "alice", "good.sh", script, &["-H", "-J", "good|name", "--comment=fine"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "1");

    // `scontrol update` refuses them too and changes nothing.
    for field in ["JobName=a\nb", "Comment=\u{1b}[2J", "Comment=x\u{85}y"] {
        let out = as_user(&cluster, "alice", "scontrol", &["update", "JobId=1", field]);
        assert!(!out.status.success(), "update {field:?} was accepted");
        assert!(text(&out.stderr).contains("Invalid job specification"), "{}", text(&out.stderr));
    }
    assert_eq!(cluster.ok("squeue", &["-h", "-j", "1", "-o", "%j|%k"]), "good|name|fine\n");

    // Strings stored before the rule: write them into the database while ctld is down.
    cluster.kill9("ctld");
    {
        let db = database(&cluster);
        let blob: Vec<u8> = db.query_row("SELECT info FROM jobs WHERE job_id = 1", [], |r| r.get(0)).unwrap();
        let mut info: JobInfo = postcard::from_bytes(&blob).expect("decoding the stored record");
        info.name = format!("old|bob|COMPLETED{forged}\u{1b}]0;owned\u{7}");
        info.comment = Some("line1\nComment=forged \u{1b}[2J\u{9b}".into());
        let blob = postcard::to_allocvec(&info).unwrap();
        db.execute("UPDATE jobs SET info = ?1, name = ?2 WHERE job_id = 1", rusqlite::params![blob, info.name])
            .unwrap();
        db.execute(
            "INSERT OR REPLACE INTO node_state (name, drain_reason, down_reason, uid, time)
             VALUES ('n2', ?1, NULL, 0, 1700000000)",
            ["fan\n n1 fake\u{1b}[31m"],
        )
        .unwrap();
    }
    let out = cluster.drover("up");
    assert!(out.status.success(), "restart failed: {}{}", text(&out.stdout), text(&out.stderr));

    // bob reads alice's job: one row, no control character, nothing forged.
    let squeue = text(&as_user(&cluster, "bob", "squeue", &["-h", "-o", "%i|%j|%u"]).stdout);
    assert_no_controls("squeue", &squeue);
    assert_eq!(squeue.lines().count(), 1, "{squeue}");
    assert!(squeue.starts_with("1|old|bob|COMPLETEDx?    99      main     root  R "), "{squeue}");
    assert!(squeue.ends_with("|alice\n"), "{squeue}");
    let listing = text(&as_user(&cluster, "bob", "squeue", &[]).stdout);
    assert_no_controls("squeue", &listing);
    assert_eq!(listing.lines().count(), 2, "{listing}");

    let sacct = text(
        &as_user(&cluster, "bob", "sacct", &["-a", "-X", "-P", "-n", "-o", "JobID,JobName,User,Comment,State"]).stdout,
    );
    assert_no_controls("sacct -P", &sacct);
    let rows: Vec<Vec<&str>> = sacct.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), 1, "{sacct}");
    assert_eq!(rows[0].len(), 5, "a value added a column: {sacct}");
    assert_eq!((rows[0][0], rows[0][2], rows[0][4]), ("1", "alice", "PENDING"), "{sacct}");
    assert!(rows[0][1].starts_with("old?bob?COMPLETEDx?"), "{sacct}");
    assert_eq!(rows[0][3], "line1?Comment=forged ?[2J?");

    let show = text(&as_user(&cluster, "bob", "scontrol", &["show", "job", "1"]).stdout);
    assert_no_controls("scontrol show job", &show);
    assert!(!show.lines().any(|l| l.trim_start().starts_with("Comment=forged")), "{show}");
    assert!(show.contains("Comment=line1?Comment=forged ?[2J?\n"), "{show}");
    let oneliner = text(&as_user(&cluster, "bob", "scontrol", &["-o", "show", "job", "1"]).stdout);
    assert_eq!(oneliner.lines().count(), 1, "{oneliner}");

    let reasons = text(&as_user(&cluster, "bob", "sinfo", &["-R", "-h", "-o", "%E|%N"]).stdout);
    assert_no_controls("sinfo -R", &reasons);
    assert_eq!(reasons, "fan? n1 fake?[31m|n2\n");
}

/// The test cluster with QOS `high` and `low`, and alice's account `vision` limited to `normal`
/// and `low` with `low` as its default; nlp (bob's) has no list.
fn qos_config() -> String {
    let config = CONFIG.replace(
        "[[accounts]]\nname = \"vision\"\nshares = 60\n",
        "[[accounts]]\nname = \"vision\"\nshares = 60\nqos = [\"normal\", \"low\"]\ndefault_qos = \"low\"\n",
    );
    assert_ne!(config, CONFIG, "the vision account moved in CONFIG");
    format!("{config}\n[[qos]]\nname = \"high\"\npriority = 100\n\n[[qos]]\nname = \"low\"\n")
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_qos_outside_the_association_is_refused() {
    require_users();
    let cluster = Cluster::start_with(&qos_config());
    let script = "#!/bin/sh\ntrue\n";
    let refusal = "sbatch: error: Batch job submission failed: Invalid qos specification\n";
    for (what, script, args) in [
        ("--qos=high", script.to_owned(), vec!["-H", "--qos=high"]),
        ("-q high", script.to_owned(), vec!["-H", "-q", "high"]),
        ("#SBATCH --qos=high", "#!/bin/sh\n#SBATCH --qos=high\ntrue\n".to_owned(), vec!["-H"]),
    ] {
        let out = sbatch(&cluster, "alice", "q.sh", &script, &args);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", text(&out.stdout));
        assert_eq!(text(&out.stderr), refusal, "{what}");
    }
    assert_eq!(cluster.ok("squeue", &["-h", "-a"]), "", "a refused job was stored");

    // Her default is the association's default QOS; normal is in her list.
    let plain = sbatch(&cluster, "alice", "q.sh", script, &["-H"]);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let plain = text(&plain.stdout).trim().to_owned();
    let normal = sbatch(&cluster, "alice", "q.sh", script, &["-H", "--qos=normal"]);
    assert!(normal.status.success(), "{}", text(&normal.stderr));
    let normal = text(&normal.stdout).trim().to_owned();
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &plain, "-o", "%q"]), "low\n");
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &normal, "-o", "%q"]), "normal\n");
    // She cannot move a job into it afterwards either.
    let out = as_user(&cluster, "alice", "scontrol", &["update", &format!("JobId={plain}"), "QOS=high"]);
    assert!(!out.status.success(), "scontrol update QOS=high was accepted");
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &plain, "-o", "%q"]), "low\n");

    // Without a list on the chain any QOS is allowed, as before.
    let bob = sbatch(&cluster, "bob", "q.sh", script, &["-H", "--qos=high"]);
    assert!(bob.status.success(), "{}", text(&bob.stderr));
    let bob = text(&bob.stdout).trim().to_owned();
    assert_eq!(cluster.ok("squeue", &["-h", "-j", &bob, "-o", "%q"]), "high\n");

    // sacctmgr shows the association's list and default.
    let assoc = as_user(
        &cluster,
        "alice",
        "sacctmgr",
        &["-nP", "show", "assoc", "where", "user=alice", "format=account,user,qos,defaultqos"],
    );
    assert_eq!(text(&assoc.stdout), "vision|alice|normal,low|low\n", "{}", text(&assoc.stderr));
}

/// The test cluster with `private_data = ["jobs", "usage"]`.
fn private_config() -> String {
    let config = CONFIG.replace("min_job_age = 600\n", "min_job_age = 600\nprivate_data = [\"jobs\", \"usage\"]\n");
    assert_ne!(config, CONFIG, "min_job_age moved in CONFIG");
    config
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn private_data_hides_other_users_jobs_and_usage() {
    require_users();
    let cluster = Cluster::start_with(&private_config());
    // bob's finished job (usage) and his held job with a secret in its export and arguments.
    let done = sbatch(&cluster, "bob", "done.sh", "#!/bin/sh\nsleep 1\n", &[]);
    assert!(done.status.success(), "{}", text(&done.stderr));
    let done: u32 = text(&done.stdout).trim().parse().unwrap();
    cluster.wait_state(done, "COMPLETED", LONG);
    let path = cluster.workdir(Some("bob")).join("secret.sh");
    std::fs::write(&path, "#!/bin/sh\ntrue\n").unwrap();
    let path = path.to_string_lossy().into_owned();
    let out =
        as_user(&cluster, "bob", "sbatch", &["--parsable", "-H", "--export=ALL,TOKEN=hunter2", &path, "argsecret"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let held = text(&out.stdout).trim().to_owned();
    let mine = sbatch(&cluster, "alice", "mine.sh", "#!/bin/sh\ntrue\n", &["-H"]);
    assert!(mine.status.success(), "{}", text(&mine.stderr));
    let mine = text(&mine.stdout).trim().to_owned();

    let config = text(&as_user(&cluster, "alice", "scontrol", &["show", "config"]).stdout);
    assert!(config.lines().any(|l| l.starts_with("PrivateData") && l.ends_with("= jobs,usage")), "{config}");
    // bob and root see bob's job with its submit line.
    for user in [Some("bob"), None] {
        let args = ["-X", "-P", "-n", "-o", "SubmitLine", "-j", &held];
        let out = cluster.run(user, &cluster.workdir(user), "sacct", &args, None);
        assert!(text(&out.stdout).contains("argsecret"), "{user:?}: {}", text(&out.stdout));
    }
    assert_eq!(cluster.ok("squeue", &["-h", "-o", "%i", "-u", "bob"]), format!("{held}\n"));

    // alice sees only her own, whatever she asks.
    let squeue = |args: &[&str]| text(&as_user(&cluster, "alice", "squeue", args).stdout);
    assert_eq!(squeue(&["-h", "-o", "%i"]), format!("{mine}\n"));
    assert_eq!(squeue(&["-h", "-o", "%i", "-u", "bob"]), "");
    assert_eq!(squeue(&["-h", "-o", "%i|%u", "-j", &held]), "");
    assert_eq!(squeue(&["-h", "-o", "%i", "-a", "-t", "all"]), format!("{mine}\n"));
    let show = as_user(&cluster, "alice", "scontrol", &["show", "job", &held]);
    assert!(!show.status.success(), "{}", text(&show.stdout));
    assert!(!text(&show.stdout).contains("hunter2") && !text(&show.stdout).contains("argsecret"));
    let show_all = text(&as_user(&cluster, "alice", "scontrol", &["show", "job"]).stdout);
    assert!(show_all.contains(&format!("JobId={mine} ")) && !show_all.contains("bob"), "{show_all}");
    let sacct = |args: &[&str]| text(&as_user(&cluster, "alice", "sacct", args).stdout);
    assert_eq!(sacct(&["-a", "-X", "-P", "-n", "-o", "JobID"]), format!("{mine}\n"));
    assert_eq!(sacct(&["-X", "-P", "-n", "-o", "JobID,SubmitLine", "-j", &format!("{done},{held}")]), "");
    assert_eq!(sacct(&["-X", "-P", "-n", "-o", "JobID", "-u", "bob"]), "");
    // A pending (not held) job of bob's for sprio.
    let later = sbatch(&cluster, "bob", "later.sh", "#!/bin/sh\ntrue\n", &["--begin=now+1hour"]);
    assert!(later.status.success(), "{}", text(&later.stderr));
    let sprio = |user| text(&cluster.run(user, &cluster.workdir(user), "sprio", &["-h", "-l"], None).stdout);
    assert!(sprio(None).contains(" bob "), "{}", sprio(None));
    assert!(!sprio(Some("alice")).contains("bob"), "{}", sprio(Some("alice")));
    let why = as_user(&cluster, "alice", "drover", &["why", &held]);
    assert!(!why.status.success(), "{}", text(&why.stdout));

    // Usage: sshare keeps account rows and only alice's own user rows; root sees bob's.
    let bob_rows = |out: &str| out.lines().filter(|l| l.split('|').nth(1) == Some("bob")).count();
    assert_eq!(bob_rows(&cluster.ok("sshare", &["-a", "-P", "-n"])), 1);
    let shares = text(&as_user(&cluster, "alice", "sshare", &["-a", "-P", "-n"]).stdout);
    assert_eq!(bob_rows(&shares), 0, "{shares}");
    assert!(shares.lines().any(|l| l.trim_start().starts_with("vision|alice|")), "{shares}");
    let report =
        ["-P", "-n", "-t", "seconds", "cluster", "AccountUtilizationByUser", "start=now-1hours", "end=now+1hours"];
    let bob_report = |out: &str| out.lines().filter(|l| l.split('|').nth(2) == Some("bob")).count();
    assert_eq!(bob_report(&cluster.ok("sreport", &report)), 1);
    let alice_report = text(&as_user(&cluster, "alice", "sreport", &report).stdout);
    assert_eq!(bob_report(&alice_report), 0, "{alice_report}");
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn a_step_name_with_control_characters_is_refused() {
    require_users();
    let cluster = Cluster::start();
    // In alice's own job: a step named with an escape sequence (clears other users' screens
    // when printed raw), then a plain one, which must still run.
    let out = sbatch(
        &cluster,
        "alice",
        "steps.sh",
        "#!/bin/bash\n#SBATCH -t 5\nS=$DROVER_HOME/bin/srun\n$S -J $'x\\e[2Jy' true; echo \"escape=$?\"\n$S -J plain true; echo \"plain=$?\"\n",
        &["-o", "steps.out"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job_id: u32 = text(&out.stdout).trim().parse().unwrap();
    cluster.wait_state(job_id, "COMPLETED", LONG);
    let output = std::fs::read_to_string(cluster.workdir(Some("alice")).join("steps.out")).unwrap();
    assert!(output.contains("step name contains a control character"), "{output}");
    assert!(output.contains("escape=1") && output.contains("plain=0"), "{output}");
    let steps = cluster.ok("sacct", &["-P", "-n", "-j", &job_id.to_string(), "-o", "JobName"]);
    assert_no_controls("sacct", &steps);
    assert!(steps.lines().any(|line| line == "plain"), "{steps}");
}
