//! `squeue`, `sinfo` and `sacct` with `--json` and `--yaml` on a running cluster, each document
//! validated with Python's `jsonschema` against the schema of Slurm 22.05.8's REST plugins, which
//! `tests/slurm-suite/openapi-schema.sh` builds from Slurm's source (Debian's source package,
//! cached in the git-ignored `.slurm-suite/`; nothing of it is committed). The schema is the
//! strict one the script prints (every key required, no other allowed), and copies broken on
//! purpose (an integer where a string belongs, a top-level key missing, a wrong type inside an
//! item) must fail it, so a passing check is not a validator that accepts anything. The
//! commands' filters are honoured: `-j`, `-u`, `-n`, `-p`, `-X`.

use drover_e2e::{Cluster, require_users, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Validates the document in `doc` (JSON or YAML) against `schema`, then checks that broken
/// copies fail; prints nothing on success, the errors on failure.
const VALIDATE: &str = r#"
import copy, json, sys
import jsonschema, yaml
schema_path, kind, doc_path = sys.argv[1:4]
schema = json.load(open(schema_path))
jsonschema.Draft7Validator.check_schema(schema)
validator = jsonschema.Draft7Validator(schema)
text = open(doc_path).read()
doc = json.loads(text) if kind == "json" else yaml.safe_load(text)
errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
if errors:
    sys.exit("does not validate:\n" + "\n".join(errors[:20]))
def must_fail(what, change):
    broken = copy.deepcopy(doc)
    change(broken)
    if validator.is_valid(broken):
        sys.exit(f"a broken copy validates ({what}): the check is not strict enough")
must_fail("integer version", lambda d: d["meta"]["Slurm"]["version"].__setitem__("major", 22))
must_fail("no errors key", lambda d: d.pop("errors"))
items = [k for k in doc if k not in ("meta", "errors")][0]
def retype(d):
    item = d[items][0]
    key = next(k for k, v in sorted(item.items()) if isinstance(v, str))
    item[key] = 1
if doc[items]:
    must_fail("an item's string as an integer", retype)
    must_fail("an item's extra key", lambda d: d[items][0].__setitem__("not_in_schema", 1))
"#;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository").to_path_buf()
}

/// The strict validator schema of `document` (`jobs`, `nodes`, `accounting`), written into `dir`.
fn schema(document: &str, dir: &Path) -> PathBuf {
    let script = repo().join("tests/slurm-suite/openapi-schema.sh");
    let out = std::process::Command::new(&script).arg(document).output().expect("running openapi-schema.sh");
    assert!(
        out.status.success(),
        "could not get Slurm 22.05.8's OpenAPI schema for {document} (tests/slurm-suite/openapi-schema.sh \
         needs root and Debian's source mirror):\n{}",
        text(&out.stderr)
    );
    let path = dir.join(format!("{document}.schema.json"));
    std::fs::write(&path, &out.stdout).expect("writing the schema");
    path
}

/// Validates `output` (`json` or `yaml`) against `schema`; fails the test with the errors.
fn validate(schema: &Path, kind: &str, output: &str, dir: &Path, what: &str) {
    let doc = dir.join(format!("doc.{kind}"));
    std::fs::write(&doc, output).expect("writing the document");
    let out = std::process::Command::new("python3")
        .args(["-c", VALIDATE])
        .arg(schema)
        .arg(kind)
        .arg(&doc)
        .output()
        .expect("python3 (with jsonschema and yaml; .ci/run installs them)");
    assert!(out.status.success(), "{what}: {}{}\n{output}", text(&out.stdout), text(&out.stderr));
}

/// Runs a command with `args` as root, validates its JSON against `schema` and returns it parsed;
/// the same with `--yaml` must validate too.
fn document(cluster: &Cluster, schema: &Path, command: &str, args: &[&str]) -> Value {
    let dir = cluster.scratch();
    let mut json_args = vec!["--json"];
    json_args.extend_from_slice(args);
    let out = cluster.ok(command, &json_args);
    validate(schema, "json", &out, dir, &format!("{command} {json_args:?}"));
    let mut yaml_args = vec!["--yaml"];
    yaml_args.extend_from_slice(args);
    let yaml = cluster.ok(command, &yaml_args);
    validate(schema, "yaml", &yaml, dir, &format!("{command} {yaml_args:?}"));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{command} --json printed no JSON ({e}):\n{out}"))
}

/// The values of `key` in the items of `list`.
fn values<'a>(doc: &'a Value, list: &str, key: &str) -> Vec<&'a Value> {
    doc[list].as_array().unwrap_or_else(|| panic!("no {list} list: {doc}")).iter().map(|item| &item[key]).collect()
}

#[test]
#[ignore = "needs root, the test users, python3 with jsonschema and yaml, and Debian's source mirror; .ci/run runs them"]
fn json_and_yaml_validate_against_slurms_schemas() {
    require_users();
    let cluster = Cluster::start();
    let dir = cluster.scratch().to_path_buf();
    let (jobs, nodes, accounting) = (schema("jobs", &dir), schema("nodes", &dir), schema("accounting", &dir));

    let running = cluster.submit(Some("alice"), "long.sh", "#!/bin/bash\nsleep 300\n", &["-t", "5", "-w", "n1"]);
    let done = cluster.submit(None, "short.sh", "#!/bin/bash\necho hi\n", &["-t", "5"]);
    cluster.wait_state(done, "COMPLETED", Duration::from_secs(60));
    cluster.squeue_until(&running.to_string(), "%T", |out| out.trim() == "RUNNING");
    let (running_id, done_id) = (running.to_string(), done.to_string());

    // squeue: the running job by default, both with -t all, one with -j, none of bob's.
    let queue = document(&cluster, &jobs, "squeue", &[]);
    assert_eq!(queue["meta"]["Slurm"]["release"], "22.05.8");
    assert_eq!(values(&queue, "jobs", "job_id"), [&Value::from(running)]);
    assert_eq!(values(&queue, "jobs", "job_state"), ["RUNNING"]);
    assert_eq!(values(&queue, "jobs", "user_name"), ["alice"]);
    assert_eq!(values(&queue, "jobs", "nodes"), ["n1"]);
    let all = document(&cluster, &jobs, "squeue", &["-t", "all", "-o", "%i"]);
    assert_eq!(values(&all, "jobs", "job_id").len(), 2, "{all}");
    let one = document(&cluster, &jobs, "squeue", &["-j", &done_id, "-t", "all"]);
    assert_eq!(values(&one, "jobs", "job_state"), ["COMPLETED"]);
    let one = document(&cluster, &jobs, "squeue", &["-j", &running_id, "-p", "main"]);
    assert_eq!(values(&one, "jobs", "job_id"), [&Value::from(running)]);
    let none = document(&cluster, &jobs, "squeue", &["-u", "bob"]);
    assert_eq!(values(&none, "jobs", "job_id").len(), 0);

    // sinfo: both nodes, or the one asked for.
    let both = document(&cluster, &nodes, "sinfo", &[]);
    assert_eq!(values(&both, "nodes", "name"), ["n1", "n2"]);
    assert_eq!(values(&both, "nodes", "cpus"), [4, 4]);
    let n2 = document(&cluster, &nodes, "sinfo", &["-n", "n2", "-p", "main"]);
    assert_eq!(values(&n2, "nodes", "name"), ["n2"]);

    // sacct: both jobs with their steps, none under -X.
    let ids = format!("{running_id},{done_id}");
    let records = document(&cluster, &accounting, "sacct", &["-j", &ids]);
    assert_eq!(values(&records, "jobs", "job_id"), [&Value::from(running), &Value::from(done)]);
    let states: Vec<_> = values(&records, "jobs", "state").into_iter().map(|s| s["current"].clone()).collect();
    assert_eq!(states, ["RUNNING", "COMPLETED"]);
    let done_record = &records["jobs"][1];
    assert_eq!(done_record["exit_code"]["status"], "SUCCESS");
    assert_eq!(done_record["steps"][0]["step"]["id"], "batch");
    let alone = document(&cluster, &accounting, "sacct", &["-X", "-j", &done_id, "-o", "JobID"]);
    assert_eq!(alone["jobs"][0]["steps"], Value::Array(Vec::new()));
}
