//! What the three documents share: the `meta` block that names the plugin and the Slurm release
//! Drover answers as, the response wrapper (`meta`, `errors`, then the document's list), and the
//! small conversions from Drover's values to the schema's (times as Unix seconds with 0 for
//! unset, time limits in minutes).
//!
//! The schema types the version numbers as strings (`"22"`, `"05"`, `"8"`), while Slurm 22.05
//! itself prints integers there; Drover follows the schema, so that the documents validate.

use drover_shared::UnixTime;
use drover_shared::grammar::time::TimeLimit;
use serde_json::{Map, Value, json};

/// The Slurm release Drover answers as (what `-V` prints).
pub(super) const RELEASE: &str = "22.05.8";

/// The OpenAPI plugin a document comes from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Plugin {
    /// `openapi/v0.0.38`: jobs and nodes, as slurmctld knows them.
    Slurmctld,
    /// `openapi/dbv0.0.38`: the accounting records.
    Accounting,
}

impl Plugin {
    fn type_and_name(self) -> (&'static str, &'static str) {
        match self {
            Plugin::Slurmctld => ("openapi/v0.0.38", "Slurm OpenAPI v0.0.38"),
            Plugin::Accounting => ("openapi/dbv0.0.38", "Slurm OpenAPI DB v0.0.38"),
        }
    }
}

/// The `meta` block: plugin type and name, Slurm's version parts (strings) and release.
pub(super) fn meta(plugin: Plugin) -> Value {
    let (kind, name) = plugin.type_and_name();
    let mut parts = RELEASE.split('.');
    let mut part = || parts.next().unwrap_or_default().to_owned();
    let (major, minor, micro) = (part(), part(), part());
    json!({
        "plugin": { "type": kind, "name": name },
        "Slurm": {
            "version": { "major": major, "micro": micro, "minor": minor },
            "release": RELEASE,
        },
    })
}

/// A whole response: `meta`, no `errors`, and `items` under `key`.
pub(super) fn response(plugin: Plugin, key: &str, items: Vec<Value>) -> Value {
    let mut document = Map::new();
    document.insert("meta".into(), meta(plugin));
    document.insert("errors".into(), Value::Array(Vec::new()));
    document.insert(key.into(), Value::Array(items));
    Value::Object(document)
}

/// A timestamp as the schema has it: Unix seconds, 0 when unset.
pub(super) fn time(value: Option<UnixTime>) -> i64 {
    value.unwrap_or(0)
}

/// A time limit in minutes; unlimited (and unset) is 0 where the schema has no other way to say it.
pub(super) fn limit_minutes(limit: Option<TimeLimit>) -> u32 {
    match limit {
        Some(TimeLimit::Minutes(minutes)) => minutes,
        Some(TimeLimit::Unlimited) | None => 0,
    }
}

/// Merges the objects of `parts` into one (later keys win; the parts never share keys).
pub(super) fn merge(parts: impl IntoIterator<Item = Value>) -> Value {
    let mut out = Map::new();
    for part in parts {
        if let Value::Object(map) = part {
            out.extend(map);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_names_plugin_and_release_with_string_version_parts() {
        let meta = meta(Plugin::Accounting);
        assert_eq!(meta["plugin"]["type"], "openapi/dbv0.0.38");
        assert_eq!(meta["Slurm"]["release"], "22.05.8");
        assert_eq!(meta["Slurm"]["version"]["major"], "22");
        assert_eq!(meta["Slurm"]["version"]["minor"], "05");
        assert_eq!(meta["Slurm"]["version"]["micro"], "8");
    }

    #[test]
    fn merge_joins_objects() {
        let merged = merge([json!({"a": 1}), json!({"b": "x"})]);
        assert_eq!(merged, json!({"a": 1, "b": "x"}));
    }
}
