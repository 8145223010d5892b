//! Team job templates, end to end with the real users alice (account vision) and bob (nlp):
//! `--template` (command line, `#SBATCH`, srun) gives a job the template's defaults and setup
//! lines; ctld refuses an override beyond the template's bounds or of a locked field, a template
//! of another team, and a job without a template where the account requires one, each naming the
//! field and what is allowed, without using a job id; `drover templates` lists what the caller
//! may use; `scontrol reconfigure` applies an edit and audits it; `drover report templates`
//! counts the runs per template.

use drover_e2e::{CONFIG, Cluster, require_users, text};
use std::process::Output;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

const TEMPLATES: &str = r#"
[[templates]]
name = "train"
description = "GPU training"
accounts = ["vision"]
partition = "main"
time = "10:00"
gpus = 1
mem = "500M"
output = "train-%j.out"
setup = ["echo SETUP-RAN"]

[templates.overridable]
time = { max = "30:00" }
gpus = { min = 1, max = 2 }
mem = { max = "1G" }
"#;

fn config() -> String {
    let base =
        CONFIG.replace("name = \"vision\"\nshares = 60\n", "name = \"vision\"\nshares = 60\nrequire_template = true\n");
    format!("{base}{TEMPLATES}")
}

fn sbatch(cluster: &Cluster, user: &str, args: &[&str]) -> Output {
    let mut all = vec!["--parsable"];
    all.extend_from_slice(args);
    cluster.run(Some(user), &cluster.workdir(Some(user)), "sbatch", &all, None)
}

fn refused(out: &Output, expected: &str) {
    assert_eq!(out.status.code(), Some(1), "stdout {}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(expected), "expected {expected:?} in {stderr:?}");
}

fn show(cluster: &Cluster, job: u32) -> String {
    cluster.ok("scontrol", &["show", "job", &job.to_string()])
}

#[test]
#[ignore = "needs root and the test users; .ci/run runs them"]
fn templates_fill_bound_and_lock_what_a_team_submits() {
    require_users();
    let cluster = Cluster::start_with(&config());
    let workdir = cluster.workdir(Some("alice"));

    // Defaults and setup lines: the template's partition, time, GPU, output path; its setup line
    // runs before the script's own.
    let out = sbatch(&cluster, "alice", &["--template=train", "--wrap", "echo BODY"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first: u32 = text(&out.stdout).trim().parse().unwrap();
    cluster.wait_state(first, "COMPLETED", LONG);
    let job = show(&cluster, first);
    assert!(job.contains("TimeLimit=00:10:00"), "{job}");
    assert!(job.contains("Partition=main"), "{job}");
    let output =
        std::fs::read_to_string(workdir.join(format!("train-{first}.out"))).expect("the template's output path");
    assert_eq!(output, "SETUP-RAN\nBODY\n");
    let tres = cluster.ok("sacct", &["-j", &first.to_string(), "-X", "-n", "-P", "-o", "AllocTRES"]);
    assert!(tres.contains("gres/gpu=1"), "{tres}");

    // `#SBATCH --template` and an override within the bounds.
    let script = "#!/bin/sh\n#SBATCH --template=train\n#SBATCH -t 20:00 --gpus=2\necho SCRIPT\n";
    let second = cluster.submit(Some("alice"), "t.sh", script, &[]);
    assert!(show(&cluster, second).contains("TimeLimit=00:20:00"), "{}", show(&cluster, second));
    cluster.wait_state(second, "COMPLETED", LONG);

    // Refusals name the field and what the template allows, and use no job id.
    refused(
        &sbatch(&cluster, "alice", &["--template=train", "-t", "2:00:00", "--wrap", "true"]),
        "--time=2:00:00 is outside what job template train allows (0:00 to 30:00)",
    );
    refused(
        &sbatch(&cluster, "alice", &["--template=train", "--gpus=4", "--wrap", "true"]),
        "--gpus=4 is outside what job template train allows (1 to 2)",
    );
    refused(
        &sbatch(&cluster, "alice", &["--template=train", "-p", "vision", "--wrap", "true"]),
        "--partition is locked by job template train (it sets main)",
    );
    refused(
        &sbatch(&cluster, "alice", &["--wrap", "true"]),
        "account vision requires a job template (--template=NAME)",
    );
    refused(&sbatch(&cluster, "alice", &["--template=nope", "--wrap", "true"]), "there is no job template nope");
    // A whole node is no way around a template that sizes the job.
    refused(
        &sbatch(&cluster, "alice", &["--template=train", "--exclusive", "--wrap", "true"]),
        "--exclusive is not allowed by job template train (it sizes the job's --gpus)",
    );
    refused(
        &sbatch(&cluster, "alice", &["--template=train", "--mem=0", "--wrap", "true"]),
        "--mem=0 (all of a node's memory) is outside what job template train allows (0M to 1G)",
    );
    refused(
        &sbatch(&cluster, "bob", &["--template=train", "--wrap", "true"]),
        "job template train is not for account nlp",
    );
    // srun applies the same template in ctld.
    let out = cluster.run(Some("alice"), &workdir, "srun", &["--template=train", "-t", "1:00:00", "true"], None);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("--time=1:00:00 is outside what job template train allows"),
        "{}",
        text(&out.stderr)
    );
    let out = cluster.run(Some("alice"), &workdir, "srun", &["--template=train", "echo", "via-srun"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("via-srun"));
    // None of the refused submissions used a job id: the next one follows the srun's job.
    let out = sbatch(&cluster, "alice", &["--template=train", "--hold", "--wrap", "true"]);
    let held: u32 = text(&out.stdout).trim().parse().unwrap();
    assert_eq!(held, second + 2, "refused submissions used job ids");
    cluster.ok("scancel", &[&held.to_string()]);

    // What each user may use.
    let listed = cluster.run(Some("alice"), &workdir, "drover", &["templates", "-P"], None);
    assert_eq!(
        text(&listed.stdout),
        "train|partition|main|locked\ntrain|time|10:00|0:00 to 30:00\ntrain|gpus|1|1 to 2\ntrain|mem|500M|0M to 1G\ntrain|output|train-%j.out|locked\n"
    );
    let listed = cluster.run(Some("bob"), &cluster.workdir(Some("bob")), "drover", &["templates"], None);
    assert_eq!(text(&listed.stdout), "No job templates for your accounts.\n");

    // An edit takes effect through reconfigure and is audited.
    let file = cluster.config_file();
    let edited = std::fs::read_to_string(&file).unwrap().replace("time = \"10:00\"", "time = \"15:00\"");
    std::fs::write(&file, edited).unwrap();
    assert_eq!(cluster.ok("scontrol", &["reconfigure"]), "");
    // Audit records are committed with the writer's next batch, a moment after the answer.
    let audit = drover_e2e::poll(
        "the reconfigure's audit record",
        Duration::from_secs(10),
        || cluster.logs(),
        || {
            let audit = cluster.ok("drover", &["audit", "-P", "-n", "-a", "reconfigure"]);
            audit.contains("templates: changed train").then_some(audit)
        },
    );
    assert!(audit.contains("|root|0|local|reconfigure||ok|"), "{audit}");
    let out = sbatch(&cluster, "alice", &["--template=train", "--hold", "--wrap", "true"]);
    let job: u32 = text(&out.stdout).trim().parse().unwrap();
    assert!(show(&cluster, job).contains("TimeLimit=00:15:00"), "{}", show(&cluster, job));
    cluster.ok("scancel", &[&job.to_string()]);

    // Usage per template.
    let report = cluster.ok("drover", &["report", "templates", "--csv"]);
    let row = report.lines().find(|l| l.starts_with("train,vision,")).unwrap_or_else(|| panic!("{report}"));
    let runs: u32 = row.split(',').nth(2).unwrap().parse().unwrap();
    assert!(runs >= 2, "{report}");
}
