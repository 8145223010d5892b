//! The write commands parsed and applied over `etc/cluster.toml`: ColdFront's command lines,
//! Slurm's `Nothing …` outcomes, refusals that leave the configuration as it was, a dump read
//! back, and stored edits put over a file that changed since.

use super::*;

fn config() -> Config {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../etc/cluster.toml");
    Config::load(std::path::Path::new(path)).expect("etc/cluster.toml loads")
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

fn no_jobs() -> (impl Fn(Option<&str>, &str) -> bool, impl Fn(&str) -> bool) {
    (|_: Option<&str>, _: &str| false, |_: &str| false)
}

/// Applies `line` (a command line's words after the options) as an admin with no jobs.
fn run(config: &Config, line: &str) -> Result<Applied, String> {
    let (active, active_qos) = no_jobs();
    let context = Context { active: &active, active_qos: &active_qos, admin: true };
    apply(config, &parse(&words(line))?, &context)
}

#[test]
fn coldfront_command_lines() {
    let c = config();
    let cluster = c.cluster_name.clone();
    let step = |config: &Config, line: &str| run(config, &line.replace("{C}", &cluster)).unwrap();

    let added = step(&c, "create account name=proj1 cluster={C}");
    assert!(added.changed && added.text.starts_with(" Adding Account(s)\n  proj1\n"), "{}", added.text);
    let c = added.config;
    let again = step(&c, "create account name=proj1 cluster={C}");
    assert_eq!((again.changed, again.text.as_str()), (false, " Nothing new added.\n"));

    let c = step(&c, "create user name=newuser cluster={C} account=proj1").config;
    let user = c.users.iter().find(|u| u.name == "newuser").unwrap();
    assert_eq!((user.default_account.as_str(), user.accounts.clone()), ("proj1", vec!["proj1".to_owned()]));
    assert!(!step(&c, "create user name=newuser cluster={C} account=proj1").changed);

    let c = step(&c, "create account name=proj2 cluster={C}").config;
    let c = step(&c, "create user name=newuser cluster={C} account=proj2").config;
    let c = step(&c, "modify user User=newuser where Cluster={C} set DefaultAccount=proj2").config;
    assert_eq!(c.users.iter().find(|u| u.name == "newuser").unwrap().default_account, "proj2");

    // QOS-= from the association's list (every QOS while nothing restricts it).
    let removed = c.qos.iter().find(|q| q.name != "normal").map(|q| q.name.clone()).unwrap();
    let c = step(&c, &format!("modify user where name=newuser cluster={{C}} account=proj1 set QOS-={removed}")).config;
    let list = c.allowed_qos(Some("newuser"), "proj1").unwrap();
    assert!(!list.contains(&removed) && list.contains(&"normal".to_owned()), "{list:?}");

    let c = step(&c, "modify account proj1 where Cluster={C} set GrpSubmitJobs=0").config;
    assert_eq!(c.accounts.iter().find(|a| a.name == "proj1").unwrap().grp_submit_jobs, Some(0));

    let deleted = step(&c, "delete user where name=newuser cluster={C} account=proj1");
    assert!(deleted.text.starts_with(" Deleting user associations...\n"), "{}", deleted.text);
    let c = deleted.config;
    assert_eq!(c.users.iter().find(|u| u.name == "newuser").unwrap().accounts, vec!["proj2".to_owned()]);
    let nothing = step(&c, "delete user where name=newuser cluster={C} account=proj1");
    assert_eq!((nothing.changed, nothing.text.as_str()), (false, " Nothing deleted\n"));
    let c = step(&c, "delete account where name=proj1 cluster={C}").config;
    assert!(!c.accounts.iter().any(|a| a.name == "proj1"));
    // The account's last user association goes with it, and so the user.
    let gone = step(&c, "delete account where name=proj2 cluster={C}");
    assert!(!gone.config.users.iter().any(|u| u.name == "newuser"));
    let edits: Vec<(Kind, &str, bool)> =
        gone.edits.iter().map(|e| (e.kind, e.name.as_str(), e.entity.is_some())).collect();
    assert_eq!(edits, vec![(Kind::User, "newuser", false), (Kind::Account, "proj2", false)]);
}

#[test]
fn refusals_change_nothing() {
    let c = config();
    let fails = |line: &str| run(&c, line).unwrap_err();
    assert!(fails("add user zed account=nosuch").contains("doesn't exist"));
    assert!(fails("add user zed").contains("Need name of account"));
    assert!(fails("add account x/y").contains("not a valid name"));
    assert!(fails("add account a1 cluster=elsewhere").contains("This cluster 'elsewhere' doesn't exist"));
    assert!(fails("add account a1 parent=nosuch").contains("Parent account"));
    assert!(fails("add account a1 Bogus=1").contains("Unknown option: bogus"));
    assert!(fails("modify qos normal set preempt=low").contains("a QOS's list of QOS it may preempt is not supported"));
    assert!(fails("delete qos normal").contains("cannot be deleted"));
    assert!(fails("modify account root set parent=root").contains("root has no parent"));
    // An account the file's partitions name cannot go while they do.
    let named = c.partitions.iter().flat_map(|p| p.allow_accounts.clone()).next();
    if let Some(account) = named {
        let users: Vec<String> =
            c.users.iter().filter(|u| u.accounts.contains(&account)).map(|u| u.name.clone()).collect();
        let mut without = c.clone();
        without.users.retain(|u| !users.contains(&u.name));
        let (active, active_qos) = no_jobs();
        let context = Context { active: &active, active_qos: &active_qos, admin: true };
        let change = parse(&words(&format!("delete account {account}"))).unwrap();
        assert!(apply(&without, &change, &context).unwrap_err().contains("edit the config file"));
    }
    // Jobs not ended hold their association.
    let busy = |_: Option<&str>, a: &str| a == "vision";
    let idle = |_: &str| false;
    let context = Context { active: &busy, active_qos: &idle, admin: true };
    let user = c.users.iter().find(|u| u.accounts.contains(&"vision".to_owned())).unwrap();
    let change = parse(&words(&format!("delete user {} account=vision", user.name))).unwrap();
    assert!(apply(&c, &change, &context).unwrap_err().contains("Job(s) active"));
    // Operators may not make admins.
    let context = Context { active: &|_, _| false, active_qos: &idle, admin: false };
    let change = parse(&words(&format!("modify user {} set AdminLevel=Administrator", user.name))).unwrap();
    assert!(apply(&c, &change, &context).unwrap_err().contains("Only administrators"));
    // Parse errors.
    assert!(parse(&words("modify user ann")).unwrap_err().contains("anything to set"));
    assert!(parse(&words("delete cluster x")).unwrap_err().contains("Unknown or unsupported entity"));
    assert!(parse(&words("modify user ann set bogus")).unwrap_err().contains("Unknown option"));
}

#[test]
fn qos_and_account_limits() {
    let c = config();
    let c = run(&c, "add qos fast Priority=50 MaxWall=1:00:00 GrpTRES=gres/gpu=4 MaxJobsPU=2 MaxSubmitJobsPU=3")
        .unwrap()
        .config;
    let q = c.qos.iter().find(|q| q.name == "fast").unwrap();
    assert_eq!((q.priority, q.max_jobs_per_user, q.max_submit_jobs_per_user), (50, Some(2), Some(3)));
    assert_eq!(q.grp_tres.get("gres/gpu"), Some(&4));
    let c = run(&c, "modify qos fast set GrpTRES=gres/gpu=-1 PreemptMode=cancel").unwrap().config;
    let q = c.qos.iter().find(|q| q.name == "fast").unwrap();
    assert!(q.grp_tres.is_empty() && !q.preempt_requeue);
    let c =
        run(&c, "add account lab Fairshare=7 GrpJobs=3 GrpTRES=cpu=16 QOS=normal,fast DefaultQOS=fast").unwrap().config;
    let a = c.accounts.iter().find(|a| a.name == "lab").unwrap();
    assert_eq!((a.shares, a.grp_jobs, a.default_qos.as_deref()), (7, Some(3), Some("fast")));
    // A QOS an association lists cannot go.
    assert!(run(&c, "delete qos fast").unwrap_err().contains("account lab"));
    let c = run(&c, "modify account lab set QOS=normal DefaultQOS=normal").unwrap().config;
    assert!(run(&c, "delete qos fast").unwrap().changed);
    assert!(
        run(&c, "modify account lab set GrpJobs=-1")
            .unwrap()
            .config
            .accounts
            .iter()
            .any(|a| a.name == "lab" && a.grp_jobs.is_none())
    );
    assert!(run(&c, "modify user nosuch set DefaultQOS=normal").unwrap().text.contains("Nothing modified"));
    // A user association's limits: set where the association is made, changed by account.
    let c = run(&c, "add account lab2").unwrap().config;
    let c = run(&c, "add user zed account=lab,lab2 MaxJobs=3 Fairshare=5").unwrap().config;
    let c = run(&c, "modify user zed where account=lab set MaxSubmitJobs=4 GrpTRES=cpu=8 MaxTRES=gres/gpu=1")
        .unwrap()
        .config;
    let zed = c.users.iter().find(|u| u.name == "zed").unwrap();
    let lab = zed.limits_in("lab").unwrap();
    assert_eq!((lab.max_jobs, lab.max_submit_jobs, lab.shares), (Some(3), Some(4), Some(5)));
    assert_eq!((lab.grp_tres.get("cpu"), lab.max_tres_per_job.get("gres/gpu")), (Some(&8), Some(&1)));
    assert_eq!(zed.limits_in("lab2").map(|l| (l.max_jobs, l.max_submit_jobs)), Some((Some(3), None)));
    assert!(run(&c, "modify user zed set MaxTRESPerUser=cpu=1").unwrap_err().contains("a QOS limit"));
    // Fairshare=1 and -1 clear back to no limits at all; a deleted association takes its limits.
    let cleared = run(&c, "modify user zed where account=lab2 set MaxJobs=-1 Fairshare=1").unwrap().config;
    assert!(cleared.users.iter().find(|u| u.name == "zed").unwrap().limits_in("lab2").is_none());
    let c = run(&c, "delete user zed account=lab2").unwrap().config;
    let zed = c.users.iter().find(|u| u.name == "zed").unwrap();
    assert_eq!(zed.limits.keys().collect::<Vec<_>>(), ["lab"]);
}

#[test]
fn a_dump_reads_back_and_loads_into_an_empty_tree() {
    let c = config();
    let c = run(&c, "add account proj1 parent=vision").unwrap().config;
    let c = run(&c, "add user zed account=proj1").unwrap().config;
    let c = run(&c, "add user zed account=vision MaxJobs=2 Fairshare=3").unwrap().config;
    let text = super::super::dump::render(&c, "test");
    assert!(text.contains("User - 'zed':DefaultAccount='proj1':Fairshare=3:MaxJobs=2\n"), "{text}");
    assert!(text.contains(&format!("Cluster - '{}':", c.cluster_name)), "{text}");
    assert!(text.contains("Parent - 'vision'\n"), "{text}");
    assert!(text.contains("Account - 'proj1':"), "{text}");
    assert!(text.contains("Parent - 'proj1'\nUser - 'zed':DefaultAccount='proj1'"), "{text}");
    // Read back: a load over the same tree adds nothing; over the file's, the additions.
    let load = super::super::dump::parse(&text).unwrap();
    let (active, active_qos) = no_jobs();
    let context = Context { active: &active, active_qos: &active_qos, admin: true };
    assert!(!apply(&c, &load, &context).unwrap().changed);
    let loaded = apply(&config(), &load, &context).unwrap();
    assert!(loaded.changed);
    assert_eq!(loaded.config.accounts, c.accounts);
    let zed = |config: &Config| {
        let mut zed = config.users.iter().find(|u| u.name == "zed").unwrap().clone();
        zed.accounts.sort();
        zed
    };
    assert_eq!(zed(&loaded.config), zed(&c));
    assert!(super::super::dump::parse("Parent - 'x'\n").unwrap_err().contains("sacctmgr dump"));
}

#[test]
fn stored_edits_win_over_the_file() {
    let file = config();
    let user = file.users[0].name.clone();
    let step1 = run(&file, "add account proj9").unwrap();
    let step2 = run(&step1.config, &format!("add user {user} account=proj9")).unwrap();
    let step3 = run(&step2.config, &format!("modify user {user} set DefaultAccount=proj9")).unwrap();
    let mut stored: Vec<Edit> = Vec::new();
    for e in step1.edits.iter().chain(&step2.edits).chain(&step3.edits) {
        match stored.iter_mut().find(|x| x.kind == e.kind && x.name == e.name) {
            Some(x) => *x = e.clone(),
            None => stored.push(e.clone()),
        }
    }
    // The file reloaded (unchanged): the changes are still there.
    let running = overlay(&file, &stored).unwrap();
    assert_eq!(running.users.iter().find(|u| u.name == user).unwrap().default_account, "proj9");
    // The file drops an account a stored user association needs: refused with a clear message.
    let mut edited = file.clone();
    let first_user_account = file.users[0].accounts[0].clone();
    edited.users.retain(|u| !u.accounts.contains(&first_user_account));
    edited.accounts.retain(|a| a.name != first_user_account);
    edited.partitions.iter_mut().for_each(|p| p.allow_accounts.retain(|a| *a != first_user_account));
    edited.quotas.retain(|q| q.account != first_user_account);
    edited.templates.iter_mut().for_each(|t| t.accounts.retain(|a| *a != first_user_account));
    if edited.default_account.as_deref() == Some(first_user_account.as_str()) {
        edited.default_account = None;
    }
    let err = overlay(&edited, &stored).unwrap_err();
    assert!(err.contains("does not exist") && err.contains("sacctmgr"), "{err}");
}
