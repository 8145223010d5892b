//! Hostile input for sbatch, srun and salloc: scripts and command lines built from the option
//! table's own names, Slurm-looking values and arbitrary text go through the whole path from
//! arguments and script to the job (sbatch) or to the step and allocation asked for (srun, salloc),
//! without a daemon. Nothing may panic, every directive error must point inside the script (a line
//! that exists, a column within that line), and srun's command is always the tail of its
//! arguments. Case counts are small by default; `PROPTEST_CASES=50000 cargo test -p drover-cli
//! hostile` is the long run.

use super::directives::{check_script, parse_header};
use super::tests::run_prepare;
use crate::options::defs::{Command, OPTIONS, OptionDef, table};
use crate::srun::options::{Parsed, parse};
use proptest::prelude::*;
use std::ffi::OsString;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

/// One option word as a user might write it, naming one of `rows`: `--long=value`, `--long
/// value`, `-s value`, `-svalue`, a prefix of a long name, a dash before arbitrary text (non-ASCII
/// short options included), or junk.
fn option_word(rows: Vec<&'static OptionDef>) -> impl Strategy<Value = String> {
    let value = prop_oneof![
        "[0-9]{1,6}",
        "[0-9]{1,3}[:\\-][0-9]{1,2}(:[0-9]{1,2})?",
        "[0-9]{1,5}[KMGTkmgt]?",
        "gpu(:[a-z0-9]{1,4})?:[0-9]{1,2}",
        "(afterok|afterany|after|singleton|afternotok):[0-9]{1,4}([,?][0-9]{1,4})?",
        "[0-9]{1,3}(-[0-9]{1,3})?(:[0-9])?(%[0-9])?",
        "n\\[[0-9]{1,2}-[0-9]{1,2}\\]",
        "\"[a-z %_]{0,10}\"",
        "'[a-z =]{0,10}'",
        any::<String>(),
    ];
    let index = 0..rows.len();
    (index, value, 0u8..8).prop_map(move |(i, value, form)| {
        let def = rows[i];
        match (form, def.short) {
            (0, _) => format!("--{}={value}", def.long),
            (1, _) => format!("--{} {value}", def.long),
            (2, Some(short)) => format!("-{short} {value}"),
            (3, _) => format!("--{}", &def.long[..def.long.len().div_ceil(2)]),
            (4, _) => format!("--{}", def.long),
            (5, Some(short)) => format!("-{short}{value}"),
            (6, _) => format!("-{value}"),
            _ => value,
        }
    })
}

/// An option word of sbatch's.
fn sbatch_word() -> impl Strategy<Value = String> {
    option_word(table(Command::Sbatch).collect())
}

/// A script: a shebang (or not), directive lines made of option words with comments, blank
/// lines, CRLF endings, commands, and arbitrary lines, in any order.
fn script() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        4 => prop::collection::vec(sbatch_word(), 1..3).prop_map(|words| format!("#SBATCH {}", words.join(" "))),
        1 => sbatch_word().prop_map(|w| format!("#SBATCH {w} # a comment")),
        1 => sbatch_word().prop_map(|w| format!("#SLURM {w}")),
        1 => Just(String::new()),
        1 => Just("echo hello".to_owned()),
        1 => "#[A-Z ]{0,10}".prop_map(|s| s),
        1 => any::<String>(),
    ];
    (any::<bool>(), prop::collection::vec(line, 0..8), any::<bool>()).prop_map(|(shebang, lines, crlf)| {
        let end = if crlf { "\r\n" } else { "\n" };
        let mut text = if shebang { format!("#!/bin/bash{end}") } else { String::new() };
        for line in lines {
            text.push_str(&line);
            text.push_str(end);
        }
        text
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn directive_errors_point_inside_the_script(text in script()) {
        if check_script(text.as_bytes()).is_ok()
            && let Err(e) = parse_header(text.as_bytes()) {
                let lines: Vec<&str> = text.split('\n').collect();
                prop_assert!(e.line >= 1 && e.line <= lines.len(), "line {} of {}", e.line, lines.len());
                let width = lines[e.line - 1].chars().count();
                prop_assert!(e.column >= 1 && e.column <= width + 1, "column {} of {}", e.column, width);
                prop_assert!(!e.message.is_empty());
            }
    }

    #[test]
    fn whole_submissions_never_panic(args in prop::collection::vec(sbatch_word(), 0..4), text in script()) {
        let args: Vec<String> = args.iter().flat_map(|w| w.split(' ').map(str::to_owned)).collect();
        let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
        argv.push("job.sh");
        let _ = run_prepare(&argv, &[], &text);
    }

    #[test]
    fn environment_layer_never_panics(index in 0..OPTIONS.len(), value in any::<String>()) {
        if let Some(var) = OPTIONS[index].env.filter(|_| OPTIONS[index].accepts(Command::Sbatch)) {
            let _ = run_prepare(&["job.sh"], &[(var, value.as_str())], "#!/bin/sh\ntrue\n");
        }
    }

    /// srun's and salloc's command lines, with every command's option names (sbatch's too, which
    /// they refuse), then a command.
    #[test]
    fn srun_and_salloc_command_lines_never_panic(
        words in prop::collection::vec(option_word(OPTIONS.iter().collect()), 0..5),
        tail in prop::collection::vec(prop_oneof!["[a-z]{1,8}", "-[a-zé]{0,3}", any::<String>()], 0..3),
    ) {
        let mut args: Vec<String> = words.iter().flat_map(|w| w.split(' ').map(str::to_owned)).collect();
        args.extend(tail);
        let os_args: Vec<OsString> = args.iter().map(OsString::from).collect();
        for command in [Command::Srun, Command::Salloc] {
            if let Ok(Parsed::Run(options)) = parse(command, &os_args) {
                prop_assert!(args.ends_with(&options.command), "{args:?} ran {:?}", options.command);
            }
        }
    }
}
