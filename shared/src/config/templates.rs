//! The `[[templates]]` part of `cluster.toml`: team job templates. A template gives a job its
//! defaults (partition, QOS, time, GPUs, memory, CPUs per task, nodes, output paths, setup lines
//! run before the script's own), says which of them a user may change and within what bounds
//! (`[templates.overridable]`), and which accounts may use it. A field the template sets and
//! does not list as overridable is locked. An account with `require_template = true` takes only
//! jobs submitted with a template. ctld applies and enforces templates, so a client that skips
//! the CLI cannot bypass them.

use crate::grammar::mem::parse_mem_mb;
use crate::grammar::time::{TimeLimit, parse_time_limit};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The most templates a config may define, and setup lines one template may hold.
pub const MAX_TEMPLATES: usize = 256;
pub const MAX_SETUP_LINES: usize = 64;

/// Whether `name` can name a template: 1 to 64 letters, digits, `.`, `_` or `-`. ctld checks a
/// name a job gives against it before looking it up, echoing or auditing it.
pub fn is_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// A raw `[[templates]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTemplate {
    pub name: String,
    pub description: Option<String>,
    /// Accounts whose jobs may use it (sub-accounts included); absent or empty = every account.
    #[serde(default)]
    pub accounts: Vec<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
    /// A Slurm time (`"12:00:00"`, `"1-0"`).
    pub time: Option<String>,
    /// GPUs of the job (`--gpus`).
    pub gpus: Option<u32>,
    /// Memory per node (`--mem`), `"32G"`.
    pub mem: Option<String>,
    pub cpus_per_task: Option<u32>,
    pub nodes: Option<u32>,
    pub output: Option<String>,
    pub error: Option<String>,
    /// Shell lines run before the script's own lines (module loads, environment activation).
    #[serde(default)]
    pub setup: Vec<String>,
    /// Field name → what a user may set it to: `{ min = 1, max = 8 }` for counts, `{ max = "1-0" }`
    /// for time, `{ max = "256G" }` for memory, `{ values = ["a", "b"] }` for partition and QOS,
    /// `{}` for anything.
    #[serde(default)]
    pub overridable: BTreeMap<String, RawBound>,
}

/// A raw bound of an overridable field.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBound {
    pub min: Option<toml::Value>,
    pub max: Option<toml::Value>,
    pub values: Option<Vec<String>>,
}

/// A field a template can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TemplateField {
    Partition,
    Qos,
    Time,
    Gpus,
    Mem,
    CpusPerTask,
    Nodes,
    Output,
    Error,
}

impl TemplateField {
    pub const ALL: [TemplateField; 9] = [
        TemplateField::Partition,
        TemplateField::Qos,
        TemplateField::Time,
        TemplateField::Gpus,
        TemplateField::Mem,
        TemplateField::CpusPerTask,
        TemplateField::Nodes,
        TemplateField::Output,
        TemplateField::Error,
    ];

    /// The field's name in the TOML file.
    pub fn key(self) -> &'static str {
        match self {
            TemplateField::Partition => "partition",
            TemplateField::Qos => "qos",
            TemplateField::Time => "time",
            TemplateField::Gpus => "gpus",
            TemplateField::Mem => "mem",
            TemplateField::CpusPerTask => "cpus_per_task",
            TemplateField::Nodes => "nodes",
            TemplateField::Output => "output",
            TemplateField::Error => "error",
        }
    }

    /// The option a user sets it with, for messages.
    pub fn option(self) -> &'static str {
        match self {
            TemplateField::Partition => "--partition",
            TemplateField::Qos => "--qos",
            TemplateField::Time => "--time",
            TemplateField::Gpus => "--gpus",
            TemplateField::Mem => "--mem",
            TemplateField::CpusPerTask => "--cpus-per-task",
            TemplateField::Nodes => "--nodes",
            TemplateField::Output => "--output",
            TemplateField::Error => "--error",
        }
    }

    fn from_key(key: &str) -> Option<TemplateField> {
        TemplateField::ALL.into_iter().find(|f| f.key() == key)
    }
}

/// What a user may set an overridable field to. Times are in minutes, memory in MB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    Any,
    Range { min: u64, max: u64 },
    OneOf(Vec<String>),
}

/// A template's defaults; `None`: the template leaves the field to the user and the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateDefaults {
    pub partition: Option<String>,
    pub qos: Option<String>,
    pub time: Option<TimeLimit>,
    pub gpus: Option<u32>,
    pub mem_mb: Option<u64>,
    pub cpus_per_task: Option<u32>,
    pub nodes: Option<u32>,
    pub output: Option<String>,
    pub error: Option<String>,
}

impl TemplateDefaults {
    /// Whether the template sets `field`.
    pub fn sets(&self, field: TemplateField) -> bool {
        match field {
            TemplateField::Partition => self.partition.is_some(),
            TemplateField::Qos => self.qos.is_some(),
            TemplateField::Time => self.time.is_some(),
            TemplateField::Gpus => self.gpus.is_some(),
            TemplateField::Mem => self.mem_mb.is_some(),
            TemplateField::CpusPerTask => self.cpus_per_task.is_some(),
            TemplateField::Nodes => self.nodes.is_some(),
            TemplateField::Output => self.output.is_some(),
            TemplateField::Error => self.error.is_some(),
        }
    }
}

/// A validated template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateConfig {
    pub name: String,
    pub description: String,
    pub accounts: Vec<String>,
    pub defaults: TemplateDefaults,
    pub setup: Vec<String>,
    /// Fields a user may set, with their bounds; any other field the template sets is locked.
    pub overridable: BTreeMap<TemplateField, Bound>,
}

fn count(value: &toml::Value) -> Option<u64> {
    value.as_integer().and_then(|n| u64::try_from(n).ok())
}

fn minutes(value: &toml::Value) -> Option<u64> {
    match parse_time_limit(value.as_str()?).ok()? {
        TimeLimit::Minutes(m) => Some(u64::from(m)),
        TimeLimit::Unlimited => Some(u64::MAX),
    }
}

fn megabytes(value: &toml::Value) -> Option<u64> {
    parse_mem_mb(value.as_str()?).ok()
}

fn bound(field: TemplateField, raw: &RawBound) -> Result<Bound, String> {
    let numeric: Option<(fn(&toml::Value) -> Option<u64>, &str)> = match field {
        TemplateField::Gpus | TemplateField::CpusPerTask | TemplateField::Nodes => Some((count, "a whole number")),
        TemplateField::Time => Some((minutes, "a time like \"1-00:00:00\"")),
        TemplateField::Mem => Some((megabytes, "a size like \"64G\"")),
        _ => None,
    };
    match (numeric, raw) {
        (_, RawBound { min: None, max: None, values: None }) => Ok(Bound::Any),
        (Some((parse, what)), RawBound { values: None, min, max }) => {
            let get = |v: &Option<toml::Value>, default: u64| match v {
                None => Ok(default),
                Some(v) => parse(v).ok_or_else(|| format!("`{v}` is not {what}")),
            };
            let (min, max) = (get(min, 0)?, get(max, u64::MAX)?);
            if min > max {
                return Err(format!("min is above max for {}", field.key()));
            }
            Ok(Bound::Range { min, max })
        }
        (None, RawBound { min: None, max: None, values: Some(values) })
            if matches!(field, TemplateField::Partition | TemplateField::Qos) =>
        {
            Ok(Bound::OneOf(values.clone()))
        }
        (None, _) if matches!(field, TemplateField::Partition | TemplateField::Qos) => {
            Err(format!("{} takes `values = [...]` or `{{}}`", field.key()))
        }
        (None, _) => Err(format!("{} takes only `{{}}` (any value)", field.key())),
        (Some(_), _) => Err(format!("{} takes `min`/`max` or `{{}}`", field.key())),
    }
}

impl RawTemplate {
    /// Checks the template's values and bounds; the caller checks that named accounts,
    /// partitions and QOS exist. An error is `(key, message)` with a key relative to the template.
    pub fn validate(self) -> Result<TemplateConfig, (String, String)> {
        if !is_name(&self.name) {
            return Err(("name".into(), "a name of at most 64 letters, digits, '.', '_' or '-'".into()));
        }
        if self.setup.len() > MAX_SETUP_LINES {
            return Err(("setup".into(), format!("at most {MAX_SETUP_LINES} lines")));
        }
        if let Some(line) = self.setup.iter().find(|l| l.contains('\n') || l.contains('\r')) {
            return Err(("setup".into(), format!("one line per entry: `{}`", line.escape_debug())));
        }
        let time = match &self.time {
            None => None,
            Some(t) => Some(parse_time_limit(t).map_err(|_| ("time".to_owned(), format!("`{t}` is not a time")))?),
        };
        let mem_mb = match &self.mem {
            None => None,
            Some(m) => Some(parse_mem_mb(m).map_err(|_| ("mem".to_owned(), format!("`{m}` is not a size")))?),
        };
        let mut overridable = BTreeMap::new();
        for (key, raw) in &self.overridable {
            let field = TemplateField::from_key(key).ok_or_else(|| {
                let known: Vec<_> = TemplateField::ALL.iter().map(|f| f.key()).collect();
                (format!("overridable.{key}"), format!("unknown field (expected one of {})", known.join(", ")))
            })?;
            let bound = bound(field, raw).map_err(|m| (format!("overridable.{key}"), m))?;
            overridable.insert(field, bound);
        }
        Ok(TemplateConfig {
            name: self.name,
            description: self.description.unwrap_or_default(),
            accounts: self.accounts,
            defaults: TemplateDefaults {
                partition: self.partition,
                qos: self.qos,
                time,
                gpus: self.gpus,
                mem_mb,
                cpus_per_task: self.cpus_per_task,
                nodes: self.nodes,
                output: self.output,
                error: self.error,
            },
            setup: self.setup,
            overridable,
        })
    }
}
