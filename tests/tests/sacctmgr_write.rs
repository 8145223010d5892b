//! sacctmgr changes at run time, as ColdFront's Slurm plugin makes them: its command lines run
//! as written (as root, `-Q -i`), their effects read back through `sacctmgr list`/`show`, a
//! dump, `sshare` and job admission (alice's job under a new account is accepted after `create
//! user` and refused after `delete user`), an admin's hand commands (QOS added and taken from an
//! association, a confirmation prompt answered, the dump loaded back), a plain user refused,
//! every change audited, and the changes kept through `scontrol reconfigure`, a controller
//! killed and restarted, and a failover between replicas.

use drover_e2e::{CONFIG, Cluster, text};
use std::process::Output;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);
const CLUSTER: &str = "testcluster";

/// Runs a command line as ColdFront does (split on spaces; `sacctmgr` first), as root.
fn coldfront(cluster: &Cluster, line: &str) -> Output {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[0], "sacctmgr");
    cluster.run(None, &cluster.workdir(None), "sacctmgr", &words[1..], None)
}

/// As [`coldfront`], asserting success; returns stdout.
fn ok(cluster: &Cluster, line: &str) -> String {
    let out = coldfront(cluster, line);
    assert!(out.status.success(), "{line}:\n{}{}\n{}", text(&out.stdout), text(&out.stderr), cluster.logs());
    text(&out.stdout)
}

/// alice's `sbatch --parsable -A account --hold`: the job id, or sbatch's error.
fn alice_submits(cluster: &Cluster, account: &str, more: &[&str]) -> Result<u32, String> {
    let mut args = vec!["--hold"];
    args.extend_from_slice(more);
    args.extend_from_slice(&["--wrap", "true"]);
    alice_sbatch(cluster, account, &args)
}

/// alice's `sbatch --parsable -A account ARGS`.
fn alice_sbatch(cluster: &Cluster, account: &str, more: &[&str]) -> Result<u32, String> {
    let dir = cluster.workdir(Some("alice"));
    let mut args = vec!["--parsable", "-A", account];
    args.extend_from_slice(more);
    let out = cluster.run(Some("alice"), &dir, "sbatch", &args, None);
    if out.status.success() { Ok(text(&out.stdout).trim().parse().expect("a job id")) } else { Err(text(&out.stderr)) }
}

fn accounts_of(cluster: &Cluster, user: &str) -> String {
    ok(cluster, &format!("sacctmgr list associations User={user} Cluster={CLUSTER} Format=Account -Pn"))
}

fn default_account(cluster: &Cluster, user: &str) -> String {
    ok(cluster, &format!("sacctmgr show user User={user} Cluster={CLUSTER} Format=DefaultAccount -Pn"))
}

/// What ColdFront's plugin runs against one cluster, and what a site sees of it.
#[test]
fn coldfront_command_lines_as_written() {
    drover_e2e::require_users();
    let cluster = Cluster::start();
    let c = CLUSTER;

    // A project: its account, alice's association with it.
    assert_eq!(ok(&cluster, &format!("sacctmgr -Q -i create account name=proj1 cluster={c}")), "");
    let again = coldfront(&cluster, &format!("sacctmgr -Q -i create account name=proj1 cluster={c}"));
    assert_eq!((again.status.code(), text(&again.stdout).as_str()), (Some(1), " Nothing new added.\n"));
    assert_eq!(alice_submits(&cluster, "proj1", &[]).unwrap_err().contains("Invalid account"), true);
    ok(&cluster, &format!("sacctmgr -Q -i create user name=alice cluster={c} account=proj1"));
    assert_eq!(accounts_of(&cluster, "alice"), "vision\nproj1\n");
    assert_eq!(default_account(&cluster, "alice"), "vision\n");
    let listed = ok(
        &cluster,
        &format!("sacctmgr list associations User=alice Cluster={c} Account=proj1 Format=Cluster,Account,User,QOS -P"),
    );
    assert_eq!(listed, format!("Cluster|Account|User|QOS\n{c}|proj1|alice|normal\n"));
    // Admitted at once, and in sshare.
    let job = alice_submits(&cluster, "proj1", &[]).expect("alice may charge proj1");
    let shares = cluster.ok("sshare", &["-a", "-P", "-n"]);
    assert!(shares.lines().any(|l| l.trim_start().starts_with("proj1|alice|")), "{shares}");
    cluster.ok("scancel", &[&job.to_string()]);

    // Limits of alice's association with proj1: running jobs, submissions, shares.
    ok(
        &cluster,
        &format!(
            "sacctmgr -i modify user alice where account=proj1 cluster={c} set MaxJobs=1 MaxSubmitJobs=2 Fairshare=7"
        ),
    );
    let limits =
        ok(&cluster, "sacctmgr list assoc user=alice account=proj1 format=Account,Share,MaxJobs,MaxSubmit -Pn");
    assert_eq!(limits, "proj1|7|1|2\n");
    let shares = cluster.ok("sshare", &["-a", "-P", "-n"]);
    assert!(shares.lines().any(|l| l.trim_start().starts_with("proj1|alice|7|")), "{shares}");
    let first = alice_sbatch(&cluster, "proj1", &["--wrap", "sleep 30"]).unwrap();
    let second = alice_sbatch(&cluster, "proj1", &["--wrap", "sleep 30"]).unwrap();
    cluster.wait_state(first, "RUNNING", LONG);
    cluster.squeue_until(&second.to_string(), "%r", |r| r.trim() == "AssocMaxJobsLimit");
    assert!(alice_submits(&cluster, "proj1", &[]).unwrap_err().contains("accounting/QOS policy"));
    cluster.ok("scancel", &[&first.to_string(), &second.to_string()]);
    cluster.wait_state(first, "CANCELLED", LONG);
    cluster.wait_state(second, "CANCELLED", LONG);
    ok(&cluster, "sacctmgr -i modify user alice where account=proj1 set MaxJobs=-1 MaxSubmitJobs=-1");

    // The hand commands of an admin: a QOS, given to alice's associations, then taken (ColdFront).
    let out = cluster.run(None, &cluster.workdir(None), "sacctmgr", &["add", "qos", "low", "Priority=5"], Some("y\n"));
    let said = text(&out.stdout);
    assert!(out.status.success() && said.contains(" Adding QOS(s)\n  low\n"), "{said}{}", text(&out.stderr));
    assert!(said.contains("Would you like to commit changes? (You have 30 seconds to decide)\n(N/y): "), "{said}");
    let out = cluster.run(None, &cluster.workdir(None), "sacctmgr", &["add", "qos", "discarded"], Some("n\n"));
    assert!(text(&out.stdout).contains(" Changes Discarded"), "{}", text(&out.stdout));
    assert!(!cluster.ok("sacctmgr", &["-nP", "list", "qos", "format=name"]).contains("discarded"));
    ok(&cluster, "sacctmgr -i modify user alice set QOS=normal,low");
    let job = alice_submits(&cluster, "proj1", &["--qos=low"]).expect("low is alice's");
    cluster.ok("scancel", &[&job.to_string()]);
    ok(&cluster, &format!("sacctmgr -Q -i modify user where name=alice cluster={c} account=proj1 set QOS-=low"));
    assert!(alice_submits(&cluster, "proj1", &["--qos=low"]).unwrap_err().contains("Invalid qos"));

    // The project's account blocked: no more submissions to it.
    ok(&cluster, &format!("sacctmgr -Q -i modify account proj1 where Cluster={c} set GrpSubmitJobs=0"));
    assert!(alice_submits(&cluster, "proj1", &[]).unwrap_err().contains("accounting/QOS policy"));
    ok(&cluster, &format!("sacctmgr -Q -i modify account proj1 where Cluster={c} set GrpSubmitJobs=-1"));

    // The dump ColdFront's slurm_check reads back.
    let file = cluster.scratch().join("dump.cfg");
    ok(&cluster, &format!("sacctmgr dump {c} file={}", file.display()));
    let dump = std::fs::read_to_string(&file).unwrap();
    assert!(dump.contains(&format!("Cluster - '{c}':")), "{dump}");
    assert!(dump.contains("Account - 'proj1':"), "{dump}");
    let under_proj1 = dump.split("Parent - 'proj1'\n").nth(1).unwrap_or_else(|| panic!("{dump}"));
    assert!(under_proj1.starts_with("User - 'alice':DefaultAccount='vision':Fairshare=7:QOS='normal'"), "{dump}");

    // Kept through a reconfigure (the file still lists alice without proj1) and a restart.
    cluster.ok("scontrol", &["reconfigure"]);
    assert_eq!(accounts_of(&cluster, "alice"), "vision\nproj1\n");
    // The reconfigure says which of the file's entries sacctmgr's changes override.
    let audit = cluster.ok("drover", &["audit", "-P", "-n", "--action", "reconfigure"]);
    assert!(audit.contains("sacctmgr_holds=user:alice"), "{audit}");
    cluster.kill9("ctld");
    let out = cluster.drover("up");
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(accounts_of(&cluster, "alice"), "vision\nproj1\n");

    // ColdFront's removal when proj1 is alice's default: another account made default first.
    ok(&cluster, &format!("sacctmgr -Q -i modify user User=alice where Cluster={c} set DefaultAccount=proj1"));
    assert_eq!(default_account(&cluster, "alice"), "proj1\n");
    let refused =
        coldfront(&cluster, &format!("sacctmgr -Q -i delete user where name=alice cluster={c} account=proj1"));
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("default account"), "{}", text(&refused.stderr));
    ok(&cluster, &format!("sacctmgr -Q -i modify user User=alice where Cluster={c} set DefaultAccount=vision"));
    ok(&cluster, &format!("sacctmgr -Q -i delete user where name=alice cluster={c} account=proj1"));
    assert_eq!(accounts_of(&cluster, "alice"), "vision\n");
    assert!(alice_submits(&cluster, "proj1", &[]).unwrap_err().contains("Invalid account"));
    let nothing =
        coldfront(&cluster, &format!("sacctmgr -Q -i delete user where name=alice cluster={c} account=proj1"));
    assert_eq!((nothing.status.code(), text(&nothing.stdout).as_str()), (Some(1), " Nothing deleted\n"));
    ok(&cluster, &format!("sacctmgr -Q -i delete account where name=proj1 cluster={c}"));
    assert!(!cluster.ok("sacctmgr", &["-nP", "list", "account", "format=account"]).contains("proj1"));
    // The dump loaded back: what it held and the tree lacks is added again, once.
    ok(&cluster, &format!("sacctmgr -i load {}", file.display()));
    assert_eq!(accounts_of(&cluster, "alice"), "vision\nproj1\n");
    let again = coldfront(&cluster, &format!("sacctmgr -i load file={}", file.display()));
    assert_eq!((again.status.code(), text(&again.stdout).as_str()), (Some(1), " Nothing new added.\n"));

    // A plain user may read but not change; the refusal and every change are audited.
    let out =
        cluster.run(Some("bob"), &cluster.workdir(Some("bob")), "sacctmgr", &["-i", "add", "account", "mine"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("sacctmgr: error: Access/permission denied"), "{}", text(&out.stderr));
    assert!(!cluster.ok("sacctmgr", &["-nP", "list", "account", "format=account"]).contains("mine"));
    // Plain users keep read access.
    let bob = cluster.workdir(Some("bob"));
    let out =
        cluster.run(Some("bob"), &bob, "sacctmgr", &["-nP", "show", "user", "alice", "format=defaultaccount"], None);
    assert_eq!(text(&out.stdout), "vision\n");
    let audit = cluster.ok("drover", &["audit", "-P", "-n", "--action", "sacctmgr"]);
    assert!(audit.lines().count() >= 10, "{audit}");
    assert!(audit.contains("add account names=proj1"), "{audit}");
    assert!(audit.contains("bob") && audit.contains("add account names=mine"), "{audit}");
}

/// The changes are in the replicated log: a new leader runs them.
#[test]
fn changes_survive_a_failover() {
    drover_e2e::require_users();
    let cluster = Cluster::start_with_args(CONFIG, &["--replicas", "3"]);
    let c = CLUSTER;
    ok(&cluster, &format!("sacctmgr -Q -i create account name=proj2 cluster={c}"));
    ok(&cluster, &format!("sacctmgr -Q -i create user name=alice cluster={c} account=proj2"));
    ok(&cluster, &format!("sacctmgr -Q -i modify user User=alice where Cluster={c} set DefaultAccount=proj2"));
    let leader = cluster.leader();
    cluster.kill9(&format!("ctld-{leader}"));
    // `up` starts the killed replica again and reconfigures the new leader.
    let out = cluster.drover("up");
    assert!(out.status.success(), "{}{}\n{}", text(&out.stdout), text(&out.stderr), cluster.logs());
    assert_eq!(accounts_of(&cluster, "alice"), "vision\nproj2\n");
    assert_eq!(default_account(&cluster, "alice"), "proj2\n");
    let job = alice_submits(&cluster, "proj2", &[]).expect("admitted by the new leader");
    cluster.ok("scancel", &[&job.to_string()]);
    cluster.wait_replicas_in_step(3, LONG);
}
