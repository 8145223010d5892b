//! Team job templates at submission: a job that names a template (`--template`) gets the
//! template's defaults for what it left unset, is refused where it sets a field the template
//! locks or goes beyond the template's bounds, and gets the template's setup lines before its
//! script's own; a job charged to an account that requires a template and names none is refused.
//! Every refusal names the field and what the template allows. This runs in ctld, so a client
//! that does not use the CLI cannot skip it. A job whose output goes to `/dev/null` (the
//! allocations of salloc and srun) is outside the template's `output` and `error`.

use crate::model::refusal::Refusal;
use crate::policy::validate::account_allowed;
use drover_shared::config::Config;
use drover_shared::config::templates::{Bound, TemplateConfig, TemplateField};
use drover_shared::grammar::gres::GresRequest;
use drover_shared::grammar::mem::format_mem_mb;
use drover_shared::grammar::time::TimeLimit;
use drover_shared::job::{JobSpec, MemRequest};
use drover_shared::proto::client::ErrorCode;

/// What a job asks of one field, as a template compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Count(u64),
    Names(Vec<String>),
    Text(String),
    /// Set in a way the template's bound cannot compare (`--mem-per-cpu` against a bound on
    /// memory per node); shown as the option the job used.
    Other(&'static str),
}

/// Whether `account` may use `template`.
pub(crate) fn usable(config: &Config, template: &TemplateConfig, account: &str) -> bool {
    account_allowed(config, account, &template.accounts)
}

/// Whether jobs charged to `account` must name a template.
fn required(config: &Config, account: &str) -> bool {
    config.accounts.iter().any(|a| a.name == account && a.require_template)
}

/// Applies the job's template to `spec` (see the module text).
pub(crate) fn apply(config: &Config, account: &str, mut spec: JobSpec) -> Result<JobSpec, Refusal> {
    let Some(name) = spec.template.clone() else {
        if required(config, account) {
            let detail = format!(
                "account {account} requires a job template (--template=NAME); `drover templates` lists the ones you may use"
            );
            return Err(Refusal::new(ErrorCode::InvalidSpec, detail));
        }
        return Ok(spec);
    };
    // The name comes from the user: echoed in the refusal and the audit record, so bounded first.
    // (An empty name is refused below as no template's.)
    if !name.is_empty() && !drover_shared::config::templates::is_name(&name) {
        let detail = "a job template name is at most 64 letters, digits, '.', '_' or '-'";
        return Err(Refusal::new(ErrorCode::InvalidSpec, detail));
    }
    let Some(template) = config.templates.iter().find(|t| t.name == name) else {
        let detail = format!("there is no job template {name}; `drover templates` lists the ones you may use");
        return Err(Refusal::new(ErrorCode::InvalidSpec, detail));
    };
    if !usable(config, template, account) {
        // Invalid job specification (whose detail the commands print), not Slurm's account error,
        // whose fixed text would not say which template.
        return Err(Refusal::new(ErrorCode::InvalidSpec, format!("job template {name} is not for account {account}")));
    }
    // A job whose output goes nowhere (salloc's and srun's allocations) writes no file a
    // template's paths could govern.
    let discards_output = spec.stdout.as_deref() == Some("/dev/null");
    for field in TemplateField::ALL {
        if discards_output && matches!(field, TemplateField::Output | TemplateField::Error) {
            continue;
        }
        let asked = asked(&spec, field, template.overridable.get(&field));
        match (asked, template.overridable.get(&field)) {
            (None, _) => fill(&mut spec, template, field),
            (Some(value), Some(bound)) => {
                if !within(&value, bound) {
                    let detail = format!(
                        "{}={} is outside what job template {name} allows ({})",
                        field.option(),
                        show(field, &value),
                        show_bound(field, bound)
                    );
                    return Err(Refusal::new(ErrorCode::InvalidSpec, detail));
                }
            }
            (Some(_), None) if template.defaults.sets(field) => {
                let detail = format!(
                    "{} is locked by job template {name} (it sets {})",
                    field.option(),
                    default_text(template, field)
                );
                return Err(Refusal::new(ErrorCode::InvalidSpec, detail));
            }
            (Some(_), None) => {}
        }
    }
    exclusive_fits(&spec, template)?;
    add_setup(&mut spec, &template.setup);
    Ok(spec)
}

/// `--exclusive` takes a whole node, whatever the job's CPUs, memory and GPUs say; under a
/// template that sizes the job (sets or bounds any of them) it would step around those bounds,
/// so it is refused there.
fn exclusive_fits(spec: &JobSpec, template: &TemplateConfig) -> Result<(), Refusal> {
    let sizes = [TemplateField::Gpus, TemplateField::Mem, TemplateField::CpusPerTask]
        .into_iter()
        .find(|f| template.defaults.sets(*f) || template.overridable.contains_key(f));
    match sizes {
        Some(field) if spec.exclusive => {
            let detail = format!(
                "--exclusive is not allowed by job template {} (it sizes the job's {})",
                template.name,
                field.option()
            );
            Err(Refusal::new(ErrorCode::InvalidSpec, detail))
        }
        _ => Ok(()),
    }
}

/// What the job asks of `field`, `None` when it leaves it unset. Memory asked per CPU or per
/// GPU cannot be compared with a bound on memory per node.
fn asked(spec: &JobSpec, field: TemplateField, bound: Option<&Bound>) -> Option<Value> {
    let gpus = |list: &[GresRequest]| list.iter().filter(|g| g.name == "gpu").map(|g| g.count).sum::<u64>();
    match field {
        TemplateField::Partition => (!spec.partitions.is_empty()).then(|| Value::Names(spec.partitions.clone())),
        TemplateField::Qos => spec.qos.clone().map(|q| Value::Names(vec![q])),
        TemplateField::Time => spec.time_limit.map(|t| {
            Value::Count(match t {
                TimeLimit::Minutes(m) => u64::from(m),
                TimeLimit::Unlimited => u64::MAX,
            })
        }),
        TemplateField::Gpus => {
            let nodes = u64::from(spec.nodes_min.unwrap_or(1).max(1));
            let tasks = u64::from(spec.ntasks.unwrap_or(1).max(1));
            let total = gpus(&spec.gpus) + gpus(&spec.gres_per_node) * nodes + gpus(&spec.gpus_per_task) * tasks;
            (total > 0).then_some(Value::Count(total))
        }
        TemplateField::Mem => spec.mem.map(|m| match (m, bound) {
            // `--mem=0` is all of a node's memory: beyond every finite bound.
            (MemRequest::PerNode(0), _) => Value::Count(u64::MAX),
            (MemRequest::PerNode(mb), _) => Value::Count(mb),
            (MemRequest::PerCpu(_), _) => Value::Other("--mem-per-cpu"),
            (MemRequest::PerGpu(_), _) => Value::Other("--mem-per-gpu"),
        }),
        TemplateField::CpusPerTask => spec.cpus_per_task.map(|c| Value::Count(u64::from(c))),
        TemplateField::Nodes => spec.nodes_min.map(|n| Value::Count(u64::from(spec.nodes_max.unwrap_or(n).max(n)))),
        TemplateField::Output => spec.stdout.clone().map(Value::Text),
        TemplateField::Error => spec.stderr.clone().map(Value::Text),
    }
}

fn within(value: &Value, bound: &Bound) -> bool {
    match (value, bound) {
        (_, Bound::Any) => true,
        (Value::Count(n), Bound::Range { min, max }) => min <= n && n <= max,
        (Value::Names(names), Bound::OneOf(allowed)) => names.iter().all(|n| allowed.contains(n)),
        _ => false,
    }
}

/// Sets the template's default for `field`, if it has one.
fn fill(spec: &mut JobSpec, template: &TemplateConfig, field: TemplateField) {
    let d = &template.defaults;
    // Output paths are relative to the job's working directory, as `sbatch -o` makes them.
    let path = |p: &String| if p.starts_with('/') { p.clone() } else { format!("{}/{p}", spec.work_dir) };
    match field {
        TemplateField::Partition => spec.partitions = d.partition.iter().cloned().collect(),
        TemplateField::Qos => spec.qos.clone_from(&d.qos),
        TemplateField::Time => spec.time_limit = d.time,
        TemplateField::Gpus => {
            if let Some(n) = d.gpus.filter(|n| *n > 0) {
                spec.gpus = vec![GresRequest { name: "gpu".into(), gres_type: None, count: u64::from(n) }];
            }
        }
        TemplateField::Mem => spec.mem = d.mem_mb.map(MemRequest::PerNode),
        TemplateField::CpusPerTask => spec.cpus_per_task = d.cpus_per_task,
        TemplateField::Nodes => {
            spec.nodes_min = d.nodes;
            spec.nodes_max = d.nodes;
        }
        TemplateField::Output => spec.stdout = d.output.as_ref().map(path),
        TemplateField::Error => spec.stderr = d.error.as_ref().map(path),
    }
}

/// The template's setup lines go after the script's `#!` line, before its own lines (the
/// `#SBATCH` lines were read at submission and mean nothing to the shell).
fn add_setup(spec: &mut JobSpec, setup: &[String]) {
    if setup.is_empty() || spec.script.is_empty() {
        return;
    }
    let split = if spec.script.starts_with(b"#!") {
        spec.script.iter().position(|b| *b == b'\n').map_or(spec.script.len(), |i| i + 1)
    } else {
        0
    };
    let mut script = spec.script[..split].to_vec();
    if split > 0 && !script.ends_with(b"\n") {
        script.push(b'\n');
    }
    for line in setup {
        script.extend_from_slice(line.as_bytes());
        script.push(b'\n');
    }
    script.extend_from_slice(&spec.script[split..]);
    spec.script = script;
}

/// What a reconfigure changed in the templates, for its audit record: `templates: added a,b;
/// changed c; removed d` (empty when nothing changed).
pub(crate) fn changes(old: &[TemplateConfig], new: &[TemplateConfig]) -> String {
    let names = |list: &[TemplateConfig], keep: &dyn Fn(&TemplateConfig) -> bool| -> Vec<String> {
        list.iter().filter(|t| keep(t)).map(|t| t.name.clone()).collect()
    };
    let find = |list: &[TemplateConfig], name: &str| list.iter().find(|t| t.name == name).cloned();
    let parts = [
        ("added", names(new, &|t| find(old, &t.name).is_none())),
        ("changed", names(new, &|t| find(old, &t.name).is_some_and(|o| o != *t))),
        ("removed", names(old, &|t| find(new, &t.name).is_none())),
    ];
    let parts: Vec<String> =
        parts.iter().filter(|(_, n)| !n.is_empty()).map(|(what, n)| format!("{what} {}", n.join(","))).collect();
    if parts.is_empty() { String::new() } else { format!("templates: {}", parts.join("; ")) }
}

/// `(field, default, what a user may set)` for each field the template sets or bounds.
pub(crate) fn describe(template: &TemplateConfig) -> Vec<(String, String, String)> {
    TemplateField::ALL
        .into_iter()
        .filter(|f| template.defaults.sets(*f) || template.overridable.contains_key(f))
        .map(|field| {
            let allowed = match template.overridable.get(&field) {
                Some(bound) => show_bound(field, bound),
                None => "locked".into(),
            };
            (field.key().to_owned(), default_text(template, field), allowed)
        })
        .collect()
}

fn show_count(field: TemplateField, n: u64) -> String {
    match field {
        TemplateField::Time if n == u64::MAX => "UNLIMITED".into(),
        TemplateField::Time => {
            let mut out = String::new();
            drover_shared::queue_lines::clock_into(&mut out, i64::try_from(n.saturating_mul(60)).unwrap_or(i64::MAX));
            out
        }
        TemplateField::Mem if n == u64::MAX => "0 (all of a node's memory)".into(),
        TemplateField::Mem => format_mem_mb(n),
        _ => n.to_string(),
    }
}

fn show(field: TemplateField, value: &Value) -> String {
    match value {
        Value::Count(n) => show_count(field, *n),
        Value::Names(names) => names.join(","),
        Value::Text(text) => text.clone(),
        Value::Other(option) => format!("(given as {option})"),
    }
}

fn show_bound(field: TemplateField, bound: &Bound) -> String {
    match bound {
        Bound::Any => "anything".into(),
        Bound::Range { min, max } if *max == u64::MAX => format!("at least {}", show_count(field, *min)),
        Bound::Range { min, max } => format!("{} to {}", show_count(field, *min), show_count(field, *max)),
        Bound::OneOf(values) => format!("one of {}", values.join(", ")),
    }
}

fn default_text(template: &TemplateConfig, field: TemplateField) -> String {
    let d = &template.defaults;
    let count = |n: Option<u64>| n.map(|n| show_count(field, n)).unwrap_or_default();
    match field {
        TemplateField::Partition => d.partition.clone().unwrap_or_default(),
        TemplateField::Qos => d.qos.clone().unwrap_or_default(),
        TemplateField::Time => match d.time {
            Some(TimeLimit::Minutes(m)) => show_count(field, u64::from(m)),
            Some(TimeLimit::Unlimited) => "UNLIMITED".into(),
            None => String::new(),
        },
        TemplateField::Gpus => count(d.gpus.map(u64::from)),
        TemplateField::Mem => count(d.mem_mb),
        TemplateField::CpusPerTask => count(d.cpus_per_task.map(u64::from)),
        TemplateField::Nodes => count(d.nodes.map(u64::from)),
        TemplateField::Output => d.output.clone().unwrap_or_default(),
        TemplateField::Error => d.error.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
cluster_name = "c"
[controller]
address = "127.0.0.1:1"
state_dir = "s"
[[nodes]]
names = "n[1-2]"
cpus = 8
real_memory = 64000
gpus = { h100 = 8 }
[[partitions]]
name = "main"
nodes = "n[1-2]"
default = true
[[partitions]]
name = "debug"
nodes = "n1"
[[accounts]]
name = "vision"
require_template = true
[[accounts]]
name = "nlp"
[[qos]]
name = "long"
[[templates]]
name = "train"
accounts = ["vision"]
partition = "main"
time = "12:00:00"
gpus = 4
mem = "32G"
output = "train-%j.out"
setup = ["export NCCL_DEBUG=WARN"]
[templates.overridable]
time = { max = "1-00:00:00" }
gpus = { min = 1, max = 8 }
"#;

    fn config() -> Config {
        Config::parse(std::path::Path::new("/tmp/c.toml"), CONFIG).unwrap()
    }

    fn spec(template: Option<&str>) -> JobSpec {
        JobSpec {
            template: template.map(str::to_owned),
            work_dir: "/home/a".into(),
            script: b"#!/bin/sh\n#SBATCH -J x\npython train.py\n".to_vec(),
            ..JobSpec::default()
        }
    }

    #[test]
    fn defaults_fill_what_the_job_left_unset_and_setup_lines_go_after_the_shebang() {
        let out = apply(&config(), "vision", spec(Some("train"))).unwrap();
        assert_eq!(out.partitions, ["main"]);
        assert_eq!(out.time_limit, Some(TimeLimit::Minutes(720)));
        assert_eq!(out.gpus, [GresRequest { name: "gpu".into(), gres_type: None, count: 4 }]);
        assert_eq!(out.mem, Some(MemRequest::PerNode(32 * 1024)));
        assert_eq!(out.stdout.as_deref(), Some("/home/a/train-%j.out"));
        assert_eq!(out.script, b"#!/bin/sh\nexport NCCL_DEBUG=WARN\n#SBATCH -J x\npython train.py\n");
    }

    #[test]
    fn overrides_within_bounds_pass_and_beyond_them_name_the_range() {
        let mut s = spec(Some("train"));
        s.time_limit = Some(TimeLimit::Minutes(1440));
        s.gpus = vec![GresRequest { name: "gpu".into(), gres_type: None, count: 8 }];
        assert!(apply(&config(), "vision", s.clone()).is_ok());
        s.gpus[0].count = 16;
        let Refusal { code, detail } = apply(&config(), "vision", s.clone()).unwrap_err();
        assert_eq!(code, ErrorCode::InvalidSpec);
        assert_eq!(detail, "--gpus=16 is outside what job template train allows (1 to 8)");
        s.gpus[0].count = 8;
        s.time_limit = Some(TimeLimit::Unlimited);
        let Refusal { detail, .. } = apply(&config(), "vision", s).unwrap_err();
        assert_eq!(detail, "--time=UNLIMITED is outside what job template train allows (0:00 to 1-00:00:00)");
    }

    #[test]
    fn a_locked_field_is_refused_with_the_templates_value() {
        let mut s = spec(Some("train"));
        s.partitions = vec!["debug".into()];
        let Refusal { detail, .. } = apply(&config(), "vision", s).unwrap_err();
        assert_eq!(detail, "--partition is locked by job template train (it sets main)");
        let mut s = spec(Some("train"));
        s.mem = Some(MemRequest::PerCpu(100));
        let Refusal { detail, .. } = apply(&config(), "vision", s).unwrap_err();
        assert_eq!(detail, "--mem is locked by job template train (it sets 32G)");
    }

    #[test]
    fn a_whole_node_is_not_a_way_around_the_size_bounds() {
        // Found by trying: `--mem=0` (all of the node's memory) passed a bound of a few GB, and
        // `--exclusive` took every CPU of the node under a locked --cpus-per-task.
        let mut s = spec(Some("train"));
        s.mem = Some(MemRequest::PerNode(0));
        let mut bounded = config();
        bounded.templates[0].overridable.insert(TemplateField::Mem, Bound::Range { min: 0, max: 64 * 1024 });
        let Refusal { detail, .. } = apply(&bounded, "vision", s).unwrap_err();
        assert_eq!(detail, "--mem=0 (all of a node's memory) is outside what job template train allows (0M to 64G)");
        let mut s = spec(Some("train"));
        s.exclusive = true;
        let Refusal { detail, .. } = apply(&config(), "vision", s.clone()).unwrap_err();
        assert_eq!(detail, "--exclusive is not allowed by job template train (it sizes the job's --gpus)");
        // A template that sizes nothing leaves --exclusive to the user.
        let mut open = config();
        let t = &mut open.templates[0];
        (t.defaults.gpus, t.defaults.mem_mb) = (None, None);
        t.overridable.remove(&TemplateField::Gpus);
        assert!(apply(&open, "vision", s).is_ok());
    }

    #[test]
    fn accounts_that_require_a_template_and_templates_of_other_teams() {
        let Refusal { detail, .. } = apply(&config(), "vision", spec(None)).unwrap_err();
        assert!(detail.starts_with("account vision requires a job template (--template=NAME)"), "{detail}");
        assert!(apply(&config(), "nlp", spec(None)).is_ok());
        let Refusal { code, detail } = apply(&config(), "nlp", spec(Some("train"))).unwrap_err();
        assert_eq!((code, detail.as_str()), (ErrorCode::InvalidSpec, "job template train is not for account nlp"));
        let Refusal { detail, .. } = apply(&config(), "vision", spec(Some("nope"))).unwrap_err();
        assert!(detail.starts_with("there is no job template nope"), "{detail}");
        // A hostile name (megabytes, escape sequences) is refused without being echoed.
        let long = "x".repeat(1 << 20);
        for name in [long.as_str(), "a\u{1b}[2J"] {
            let Refusal { detail, .. } = apply(&config(), "vision", spec(Some(name))).unwrap_err();
            assert_eq!(detail, "a job template name is at most 64 letters, digits, '.', '_' or '-'");
        }
    }

    #[test]
    fn reconfigure_names_what_changed() {
        let old = config().templates;
        let mut new = old.clone();
        assert_eq!(changes(&old, &new), "");
        new[0].defaults.gpus = Some(2);
        new.push(TemplateConfig { name: "notebook".into(), ..new[0].clone() });
        assert_eq!(changes(&old, &new), "templates: added notebook; changed train");
        assert_eq!(changes(&new, &[]), "templates: removed train,notebook");
    }

    #[test]
    fn bad_template_config_is_refused_with_its_place() {
        let bad = CONFIG.replace("gpus = { min = 1, max = 8 }", "gpus = { min = 9, max = 8 }");
        let err = Config::parse(std::path::Path::new("/tmp/c.toml"), &bad).unwrap_err().to_string();
        assert!(err.contains("templates[0].overridable.gpus: min is above max"), "{err}");
        let bad = CONFIG.replace("partition = \"main\"\ntime", "partition = \"nope\"\ntime");
        let err = Config::parse(std::path::Path::new("/tmp/c.toml"), &bad).unwrap_err().to_string();
        assert!(err.contains("unknown partition `nope`"), "{err}");
        let bad = CONFIG.replace("time = { max", "color = { max");
        let err = Config::parse(std::path::Path::new("/tmp/c.toml"), &bad).unwrap_err().to_string();
        assert!(err.contains("overridable.color: unknown field"), "{err}");
    }
}
