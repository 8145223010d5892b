//! A JSON value written as block-style YAML (what `--yaml` prints): mappings as `key: value`
//! lines, sequences as `- ` items, empty ones as `{}` and `[]`. Strings are always double-quoted
//! with JSON's escapes, which YAML's double-quoted style reads the same, so no string can turn
//! into a number, a boolean, `null` or a comment; keys are quoted unless plain letters, digits
//! and `_`.

use serde_json::Value;

/// `value` as a YAML document (`---` first, as libyaml's emitter starts one).
pub(super) fn to_yaml(value: &Value) -> String {
    let mut out = String::from("---\n");
    match value {
        Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => write_list(&mut out, items, 0),
        scalar => {
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
    out
}

fn indent(out: &mut String, level: usize) {
    out.extend(std::iter::repeat_n("  ", level));
}

/// A scalar, or an empty mapping or sequence, on one line.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        Value::String(text) => Value::String(text.clone()).to_string(),
        other => other.to_string(),
    }
}

/// Whether `value` goes on its own lines below its key or dash.
fn is_block(value: &Value) -> bool {
    match value {
        Value::Object(map) => !map.is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => false,
    }
}

fn key_text(key: &str) -> String {
    let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain { key.to_owned() } else { Value::String(key.to_owned()).to_string() }
}

fn write_map(out: &mut String, map: &serde_json::Map<String, Value>, level: usize) {
    for (key, value) in map {
        indent(out, level);
        out.push_str(&key_text(key));
        out.push(':');
        write_child(out, value, level + 1);
    }
}

fn write_list(out: &mut String, items: &[Value], level: usize) {
    for item in items {
        indent(out, level);
        out.push('-');
        write_child(out, item, level + 1);
    }
}

/// What follows a key's colon or an item's dash: a scalar on the same line, or a block below.
fn write_child(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Object(map) if is_block(value) => {
            out.push('\n');
            write_map(out, map, level);
        }
        Value::Array(items) if is_block(value) => {
            out.push('\n');
            write_list(out, items, level);
        }
        scalar => {
            out.push(' ');
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_values() {
        let value = json!({
            "errors": [],
            "jobs": [{"id": 1, "name": "a: #b", "ok": true, "tags": ["x"], "empty": {}}],
            "odd key": "12",
        });
        let expected = "---\nerrors: []\njobs:\n  -\n    empty: {}\n    id: 1\n    name: \"a: #b\"\n    ok: true\n    \
                        tags:\n      - \"x\"\n\"odd key\": \"12\"\n";
        assert_eq!(to_yaml(&value), expected);
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(to_yaml(&json!({"s": "a\nb\u{1}"})), "---\ns: \"a\\nb\\u0001\"\n");
    }
}
