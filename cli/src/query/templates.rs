//! `drover templates`: the team job templates the caller may use, with what each sets, what a
//! user may change and within what bounds (`locked` where nothing), and its setup lines. `-P`
//! prints one `|`-separated line per field: `template|field|value|allowed`.

use super::common;
use clap::{ArgAction, Parser};
use drover_shared::proto::client::{Request, Response, TemplateInfo};
use std::ffi::OsString;

#[derive(Debug, Parser)]
#[command(name = "drover templates", about = "List the job templates you may use", disable_help_flag = true)]
struct Args {
    /// `template|field|value|allowed` lines, no header.
    #[arg(short = 'P', long = "parsable")]
    parsable: bool,
    /// Print this help.
    #[arg(short = 'h', long = "help", action = ArgAction::Help)]
    help: Option<bool>,
}

/// Runs `drover templates`.
pub(crate) fn run(args: Vec<OsString>) -> anyhow::Result<i32> {
    let args = match common::parse_args::<Args>("drover templates", args) {
        Ok(args) => args,
        Err(code) => return Ok(code),
    };
    match crate::client::call(&Request::QueryTemplates)? {
        Response::Templates { templates } => {
            print!("{}", if args.parsable { parsable(&templates) } else { render(&templates) });
            Ok(0)
        }
        Response::Error { code, detail } => {
            eprintln!("drover templates: error: {}: {detail}", code.message());
            Ok(1)
        }
        other => anyhow::bail!("unexpected answer from the controller: {other:?}"),
    }
}

fn render(templates: &[TemplateInfo]) -> String {
    if templates.is_empty() {
        return "No job templates for your accounts.\n".into();
    }
    let mut out = String::new();
    for t in templates {
        let printable = drover_shared::text::printable;
        let accounts = if t.accounts.is_empty() { "all accounts".to_owned() } else { t.accounts.join(",") };
        out.push_str(&format!("{}  ({accounts})", printable(&t.name)));
        if !t.description.is_empty() {
            out.push_str(&format!("  {}", printable(&t.description)));
        }
        out.push('\n');
        let rows: Vec<Vec<String>> =
            t.fields.iter().map(|(f, v, a)| vec![String::new(), f.clone(), v.clone(), a.clone()]).collect();
        out.push_str(&common::render_table(&["", "FIELD", "VALUE", "ALLOWED"], &[1, 14, 24], &rows, false, true));
        for line in &t.setup {
            out.push_str(&format!("  setup: {}\n", printable(line)));
        }
    }
    out
}

fn parsable(templates: &[TemplateInfo]) -> String {
    let rows: Vec<Vec<String>> = templates
        .iter()
        .flat_map(|t| t.fields.iter().map(|(f, v, a)| vec![t.name.clone(), f.clone(), v.clone(), a.clone()]))
        .collect();
    common::render_table(&[], &[], &rows, true, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    #[test]
    fn templates_as_blocks_and_parsable_lines() {
        let t = TemplateInfo {
            name: "train".into(),
            description: "Multi-GPU training".into(),
            accounts: vec!["vision".into()],
            fields: vec![
                ("partition".into(), "main".into(), "locked".into()),
                ("gpus".into(), "4".into(), "1 to 8".into()),
            ],
            setup: vec!["module load cuda".into()],
        };
        expect![[r#"
            train  (vision)  Multi-GPU training
              FIELD          VALUE                    ALLOWED
              partition      main                     locked
              gpus           4                        1 to 8
              setup: module load cuda
        "#]]
        .assert_eq(&render(std::slice::from_ref(&t)));
        expect![[r#"
            train|partition|main|locked
            train|gpus|4|1 to 8
        "#]]
        .assert_eq(&parsable(&[t]));
    }
}
