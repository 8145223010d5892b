//! `--json` and `--yaml` of `squeue`, `sinfo` and `sacct`: the documents Slurm 22.05's commands
//! print there, which are the answers of its REST daemon's OpenAPI plugins (`openapi/v0.0.38`
//! for jobs and nodes, `openapi/dbv0.0.38` for accounting).
//!
//! Each document has its own file ([`jobs`], [`nodes`], [`accounting`]) that turns the records the
//! command already received into JSON values with exactly the keys of the schema's object, in
//! the schema's types; what Drover does not know is there with an empty or zero value of that
//! type. [`meta`] holds the `meta` block and the value helpers they share, [`yaml`] writes a
//! document as YAML. The commands apply their filters before building a document and ignore
//! their formatting options, as Slurm does.

pub(crate) mod accounting;
pub(crate) mod jobs;
mod meta;
pub(crate) mod nodes;
mod yaml;

use serde_json::Value;
use std::io::Write as _;

/// How a document is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    Json,
    Yaml,
}

impl Output {
    /// The output `--json`/`--yaml` ask for, `None` for the command's text; both at once is
    /// refused, as the later option would otherwise silently win.
    pub(crate) fn from_flags(json: bool, yaml: bool) -> anyhow::Result<Option<Output>> {
        match (json, yaml) {
            (true, true) => anyhow::bail!("--json and --yaml are mutually exclusive"),
            (true, false) => Ok(Some(Output::Json)),
            (false, true) => Ok(Some(Output::Yaml)),
            (false, false) => Ok(None),
        }
    }
}

/// `document` as text: pretty JSON (two-space indents, as Slurm's) or YAML, ending in a newline.
pub(crate) fn render(document: &Value, output: Output) -> String {
    match output {
        Output::Json => {
            let mut text = serde_json::to_string_pretty(document).unwrap_or_default();
            text.push('\n');
            text
        }
        Output::Yaml => yaml::to_yaml(document),
    }
}

/// Prints `document` on stdout.
pub(crate) fn print(document: &Value, output: Output) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(render(document, output).as_bytes())?;
    stdout.flush()?;
    Ok(())
}
