//! Data-driven tests of sbatch, one `check_*` helper per boundary: script checks and the directive
//! tokenizer, each layer read through the option table, and the whole path from arguments,
//! environment and script to the `JobSpec` — all without a daemon, a terminal or a real clock.

use super::directives::{check_script, parse_header};
use super::environment::job_environment;
use super::hiargs::absolute;
use super::{Failure, Prepared, World, layers, prepare};
use crate::options::defs::{Command, Ctx, OPTIONS, table};
use crate::options::export::ExportSpec;
use crate::options::help;
use drover_shared::UnixTime;
use drover_shared::grammar::date::Utc;
use drover_shared::job::JobSpec;
use expect_test::{Expect, expect};

/// 2026-03-15T10:30:00Z.
const NOW: UnixTime = 1_773_570_600;

const CWD: &str = "/home/alice/work";

fn ctx() -> Ctx<'static> {
    Ctx { now: NOW, calendar: &Utc }
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// Script checks and header tokenizing: every directive word with the column it starts at.
fn check_header(script: &str, expect: Expect) {
    let shown = match check_script(script.as_bytes()) {
        Err(e) => format!("script error: {e}"),
        Ok(()) => match parse_header(script.as_bytes()) {
            Err(e) => format!("error: {e}"),
            Ok(header) => {
                let mut out = String::new();
                for directive in &header.directives {
                    out.push_str(&format!("line {}:", directive.line));
                    for word in &directive.words {
                        out.push_str(&format!(" {}:{:?}", word.start, word.text));
                    }
                    out.push('\n');
                }
                if let Some(line) = header.legacy_line {
                    out.push_str(&format!("legacy #SLURM on line {line}\n"));
                }
                out
            }
        },
    };
    expect.assert_eq(&shown);
}

/// The directive layer of a script named `job.sh`.
fn check_directives(script: &str, expect: Expect) {
    let shown = match parse_header(script.as_bytes()) {
        Err(e) => format!("error: job.sh:{e}"),
        Ok(header) => match layers::directives(&header, "job.sh", &ctx()) {
            Ok(layer) => layer.args.render(),
            Err(message) => format!("error: {message}"),
        },
    };
    expect.assert_eq(&shown);
}

/// The command-line layer.
fn check_cli(args: &[&str], expect: Expect) {
    let shown = match crate::options::layers::command_line(&strings(args), &ctx(), Command::Sbatch) {
        Err(crate::options::layers::UsageError(message)) => format!("usage error: {message}"),
        Ok(command_line) => {
            let mut out = command_line.layer.args.render();
            out.push_str(&format!("operands: {:?}\n", command_line.operands));
            if let Some(error) = command_line.error {
                out.push_str(&format!("deferred error: {error}\n"));
            }
            out
        }
    };
    expect.assert_eq(&shown);
}

/// The environment layer.
fn check_env_layer(env: &[(&str, &str)], expect: Expect) {
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let shown = match layers::environment(&env, &ctx()) {
        Ok(layer) => layer.args.render(),
        Err(message) => format!("error: {message}"),
    };
    expect.assert_eq(&shown);
}

/// A `JobSpec` without its empty fields, its environment as `NAME=value` lines and its script as text.
fn render_spec(spec: &JobSpec) -> String {
    let mut shown = spec.clone();
    shown.script = Vec::new();
    shown.environment = Vec::new();
    let debug = format!("{shown:#?}");
    let empty = [": None,", ": [],", ": false,", ": 0,", ": \"\","];
    let mut out: Vec<String> =
        debug.lines().filter(|line| !empty.iter().any(|e| line.ends_with(e))).map(str::to_owned).collect();
    out.push("script:".to_owned());
    out.extend(String::from_utf8_lossy(&spec.script).lines().map(|line| format!("  | {line}").trim_end().to_owned()));
    out.push("environment:".to_owned());
    out.extend(spec.environment.iter().map(|(k, v)| format!("  {k}={v}")));
    out.join("\n") + "\n"
}

/// The base environment of the fake submitter.
const BASE_ENV: [(&str, &str); 4] =
    [("HOME", "/home/alice"), ("LANG", "C.UTF-8"), ("PATH", "/usr/bin:/bin"), ("SLURM_CONF", "/etc/slurm/slurm.conf")];

/// Runs [`prepare`] in a fake world: cwd `/home/alice/work` on host `login1`, umask 022, the base
/// environment plus `env`, and `script` as the content of any script file or of stdin.
pub(super) fn run_prepare(args: &[&str], env: &[(&str, &str)], script: &str) -> Result<Prepared, Failure> {
    let script = script.to_owned();
    let read = move |name: Option<&str>| -> Result<(String, Vec<u8>), String> {
        match name {
            Some(name) if name.starts_with("missing") => {
                Err(format!("Unable to open file {name}: No such file or directory"))
            }
            Some(name) => Ok((absolute(CWD, name), script.clone().into_bytes())),
            None => Ok((String::new(), script.clone().into_bytes())),
        }
    };
    let environment = BASE_ENV.iter().chain(env).map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let world = World {
        now: NOW,
        calendar: &Utc,
        cwd: CWD.to_owned(),
        hostname: "login1".to_owned(),
        environment,
        umask: 0o022,
        prio_process: 0,
        rlimits: vec![("NOFILE".to_owned(), 77), ("CORE".to_owned(), 0)],
        read_script: &read,
        plugin_directives: &|_, _| Ok(()),
    };
    prepare(&strings(args), &world)
}

/// The whole path: arguments, `SBATCH_*` environment and script to the `JobSpec` (or the failure).
fn check_submit(args: &[&str], env: &[(&str, &str)], script: &str, expect: Expect) {
    let shown = match run_prepare(args, env, script) {
        Ok(Prepared::Answer(text)) => format!("answer:\n{text}"),
        Ok(Prepared::Submit { hi, notes, warnings, .. }) => {
            let mut out = String::new();
            for note in notes {
                out.push_str(&format!("note: {note}\n"));
            }
            for warning in warnings {
                out.push_str(&format!("warning: {warning}\n"));
            }
            if hi.parsable || hi.quiet || hi.verbose > 0 {
                out.push_str(&format!("parsable={} quiet={} verbose={}\n", hi.parsable, hi.quiet, hi.verbose));
            }
            out + &render_spec(&hi.job_spec)
        }
        Err(Failure::Usage(message)) => format!("usage error: {message}\n"),
        Err(Failure::Error(message)) => format!("error: {message}\n"),
    };
    expect.assert_eq(&shown);
}

/// Only the job's time limit, for precedence tests.
fn check_time_limit(args: &[&str], env: &[(&str, &str)], script: &str, expect: Expect) {
    let shown = match run_prepare(args, env, script) {
        Ok(Prepared::Submit { hi, .. }) => format!("{:?}", hi.job_spec.time_limit),
        Ok(Prepared::Answer(text)) => text,
        Err(e) => format!("{e:?}"),
    };
    expect.assert_eq(&shown);
}

/// `--export` filtering on its own.
fn check_export(export: Option<&str>, expect: Expect) {
    let submit_env: Vec<(String, String)> =
        [("HOME", "/home/alice"), ("PATH", "/usr/bin"), ("SLURM_CONF", "/etc/slurm/slurm.conf"), ("TERM", "xterm")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
    let sbatch_vars = vec![("SLURM_SUBMIT_DIR".to_owned(), CWD.to_owned())];
    let shown = match export.map(ExportSpec::parse).transpose() {
        Err(e) => format!("error: {e}\n"),
        Ok(spec) => job_environment(spec.as_ref(), &submit_env, &sbatch_vars)
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect(),
    };
    expect.assert_eq(&shown);
}

// ---------------------------------------------------------------------------------------------
// Script checks.

#[test]
fn script_checks() {
    check_header("", expect!["script error: Batch script is empty!"]);
    check_header(" \n\t\n", expect!["script error: Batch script contains only whitespace!"]);
    check_header(
        "echo hello\n",
        expect![[r#"
            script error: This does not look like a batch script.  The first line must start with #! followed by the path to an interpreter.
            For instance: #!/bin/sh"#]],
    );
    check_header(
        "#!/bin/sh\necho a\0b\n",
        expect!["script error: Batch script contains a NUL character (line 2); a script must be text"],
    );
    check_header(
        "#!/bin/sh\necho a\r\necho b\r\n",
        expect![
            r"script error: Batch script contains DOS line breaks (\r\n) instead of UNIX line breaks (\n), first on line 2"
        ],
    );
    check_header("#!/bin/sh\n", expect![""]);
}

// ---------------------------------------------------------------------------------------------
// The directive tokenizer.

#[test]
fn directive_words() {
    check_header(
        "#!/bin/sh\n#SBATCH -N 2 --time=10\n",
        expect![[r#"
        line 2: 9:"-N" 12:"2" 14:"--time=10"
    "#]],
    );
    check_header(
        "#!/bin/sh\n#SBATCH\t-N\t2  \n#SBATCH\n",
        expect![[r#"
        line 2: 9:"-N" 12:"2"
        line 3:
    "#]],
    );
    check_header(
        "#!/bin/sh\n#SBATCH-N2\n",
        expect![[r#"
        line 2: 8:"-N2"
    "#]],
    );
}

#[test]
fn directive_quotes_and_escapes() {
    check_header(
        r#"#!/bin/sh
#SBATCH --job-name="my job" -o 'out file.txt'
#SBATCH --comment=a"b c"d'e f'g
#SBATCH --comment=a\ b\#c \"q\"
#SBATCH --comment="say \"hi\" \\ it's"
#SBATCH --comment 'He said "no"'
#SBATCH --comment "" x
"#,
        expect![[r#"
    line 2: 9:"--job-name=my job" 29:"-o" 32:"out file.txt"
    line 3: 9:"--comment=ab cde fg"
    line 4: 9:"--comment=a b#c" 27:"\"q\""
    line 5: 9:"--comment=say \"hi\" \\ it's"
    line 6: 9:"--comment" 19:"He said \"no\""
    line 7: 9:"--comment" 19:"" 22:"x"
"#]],
    );
}

#[test]
fn directive_trailing_comments() {
    check_header(
        r#"#!/bin/sh
#SBATCH -N 2 # two nodes
#SBATCH --comment=a#b c
#SBATCH --comment="a # b" # real comment
#SBATCH # nothing but a comment
#SBATCH -J x\
"#,
        expect![[r#"
        line 2: 9:"-N" 12:"2"
        line 3: 9:"--comment=a"
        line 4: 9:"--comment=a # b"
        line 5:
        line 6: 9:"-J" 12:"x"
    "#]],
    );
}

#[test]
fn directive_stop_rule() {
    check_header(
        "#!/bin/bash\n\n# a comment\n   # an indented comment\n  #SBATCH -N 3\n# SBATCH -N 4\n#sbatch -N 5\n#SBATCH -N 1\n\necho start\n#SBATCH -N 2\n",
        expect![[r#"
            line 8: 9:"-N" 12:"1"
        "#]],
    );
    check_header("#!/bin/sh\n   true\n#SBATCH -N 2\n", expect![""]);
    check_header(
        "#!/bin/sh\n#SLURM -N 2\n#SBATCH -n 4\n#SLURM -c 2\n",
        expect![[r#"
        line 2: 8:"-N" 11:"2"
        line 3: 9:"-n" 12:"4"
        line 4: 8:"-c" 11:"2"
        legacy #SLURM on line 2
    "#]],
    );
}

#[test]
fn directive_token_errors() {
    check_header(
        "#!/bin/sh\n#SBATCH -N 2\n#SBATCH -J \"my job\n",
        expect![r#"error: 3:12: unterminated double quote: expected a closing ""#],
    );
    check_header(
        "#!/bin/sh\n#SBATCH --comment='it\n",
        expect!["error: 2:19: unterminated single quote: expected a closing '"],
    );
    check_header(
        "#!/bin/sh\n#SBATCH --comment=\"h\u{e9}llo\" -J '\u{e9}t\u{e9}\n",
        expect!["error: 2:30: unterminated single quote: expected a closing '"],
    );
    check_header(
        "#!/bin/sh\n#SBATCH -N 1\n#SBATCH hetjob\n#SBATCH -N 2\n",
        expect![
            "error: 3:9: heterogeneous job separator `hetjob` found: Drover runs no heterogeneous jobs; submit each component as a job of its own (--dependency orders them) or use srun --multi-prog"
        ],
    );
    check_header(
        "#!/bin/sh\n#SBATCH : -N 2\n",
        expect![
            "error: 2:9: heterogeneous job separator `:` found: Drover runs no heterogeneous jobs; submit each component as a job of its own (--dependency orders them) or use srun --multi-prog"
        ],
    );
    let mut bad = b"#!/bin/sh\n#SBATCH -J ab".to_vec();
    bad.extend([0xff, b'\n']);
    let shown = parse_header(&bad).map(|_| ()).map_err(|e| e.to_string());
    assert_eq!(shown, Err("2:14: invalid UTF-8 in directive: expected text".to_owned()));
}

// ---------------------------------------------------------------------------------------------
// Directives read through the option table.

#[test]
fn directive_options() {
    check_directives(
        "#!/bin/sh\n#SBATCH -J train -p gpu,cpu --accoun=vision -q high\n#SBATCH -t 1-00:00 -N 2-4 -n 8 -c 4\n#SBATCH --mem=32G --gres=gpu:a100:2 -o logs/%x-%j.out --open-mode=append\n#SBATCH --export=ALL,FOO=bar --requeue -H --nice\n",
        expect![[r#"
            job_name: "train"
            partitions: ["gpu", "cpu"]
            account: "vision"
            qos: "high"
            time_limit: Minutes(1440)
            nodes: NodeCount { min: 2, max: Some(4) }
            ntasks: 8
            cpus_per_task: 4
            mem: PerNode(32768)
            gres: [GresRequest { name: "gpu", gres_type: Some("a100"), count: 2 }]
            output: "logs/%x-%j.out"
            export: "ALL,FOO=bar"
            hold: true
            nice: 100
            requeue: true
            open_append: true
        "#]],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --array=0-15%4 -d afterok:12:13,singleton --signal=B:USR1@120\n#SBATCH --mail-type=END,FAIL --mail-user=a@b -w node[01-04] -x node07 -C a100\n#SBATCH --begin=now+1hour --deadline=2026-04-01T12:00 -o none\n",
        expect![[r#"
            output: "/dev/null"
            begin: 1773574200
            deadline: 1775044800
            nodelist: "node[01-04]"
            exclude: "node07"
            constraint: "a100"
            dependency: "afterok:12:13,singleton"
            array: "0-15%4"
            signal: "B:USR1@120"
            mail_type: "END,FAIL"
            mail_user: "a@b"
        "#]],
    );
    // The last occurrence in a layer wins; --requeue and --no-requeue share one slot.
    check_directives(
        "#!/bin/sh\n#SBATCH -p a -p b\n#SBATCH --requeue\n#SBATCH --no-requeue\n",
        expect![[r#"
        partitions: ["b"]
        requeue: false
    "#]],
    );
}

#[test]
fn directive_errors_name_file_line_and_column() {
    check_directives(
        "#!/bin/sh\n#SBATCH -N 2\n#SBATCH --foo=1\n",
        expect!["error: job.sh:3:9: unrecognized option '--foo=1': expected an sbatch option (see sbatch --help)"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH -N 2 -z\n",
        expect!["error: job.sh:2:15: invalid option -- 'z': expected an sbatch option (see sbatch --help)"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH -t 1:2:3:4\n",
        expect![
            "error: job.sh:2:12: invalid time limit `1:2:3:4`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --time=1:2:3:4\n",
        expect![
            "error: job.sh:2:16: invalid time limit `1:2:3:4`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH -HQt1:2:3:4\n",
        expect![
            "error: job.sh:2:13: invalid time limit `1:2:3:4`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --time \"1:2:3:4\"\n",
        expect![
            "error: job.sh:2:17: invalid time limit `1:2:3:4`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --mem=lots\n",
        expect![
            "error: job.sh:2:15: invalid memory size `lots`: expected a number with an optional K, M, G or T suffix"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH -N 4-2\n",
        expect![
            "error: job.sh:2:12: invalid node count `4-2`: expected min[-max], each a positive integer with an optional k or m suffix"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH -J\n#SBATCH -N 2\n",
        expect!["error: job.sh:2:10: option requires an argument -- 'J': expected its value on the same line"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --time\n",
        expect!["error: job.sh:2:9: option '--time' requires an argument: expected its value on the same line"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --ti=5\n",
        expect!["error: job.sh:2:9: option '--ti' is ambiguous; possibilities: '--time' '--time-min'"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --hold=yes\n",
        expect!["error: job.sh:2:9: option '--hold' doesn't allow an argument"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH -N 2 nodes\n",
        expect!["error: job.sh:2:14: invalid directive `nodes`: expected an option such as --time=10 or -N 2"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --wrap=hostname\n",
        expect!["error: job.sh:2:9: --wrap is only valid on the command line"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH -W\n",
        expect![[r#"
        wait: true
    "#]],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --test-only\n",
        expect![[r#"
        test_only: true
    "#]],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --mem=1G\n#SBATCH --mem-per-cpu=100\n",
        expect!["error: job.sh:3:9: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --begin=someday\n",
        expect![
            "error: job.sh:2:17: invalid date/time `someday`: expected HH:MM[:SS][AM|PM], MMDD[YY], MM/DD[/YY], MM.DD[.YY], YYYY-MM-DD[THH:MM[:SS]], midnight, noon, fika, teatime, today, tomorrow or now[+count[seconds|minutes|hours|days|weeks]]"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --array=5-1\n",
        expect![
            "error: job.sh:2:17: invalid job array specification `5-1`: expected indexes such as 0-15, 0,6,16-32, 0-15:4 or 0-15%4"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH -d afterwards:12\n",
        expect![
            "error: job.sh:2:12: invalid dependency `afterwards:12`: expected type:jobid[:jobid...] items joined by , or ?, with type after, afterany, afterok, afternotok, aftercorr, afterburstbuffer, or singleton"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --signal=USR3\n",
        expect![
            "error: job.sh:2:18: invalid signal specification `USR3`: expected [{R|B}:]signal[@seconds], e.g. USR1@120 or B:10"
        ],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --export=NONE,=x\n",
        expect!["error: job.sh:2:18: invalid --export value `NONE,=x`: expected ALL, NONE or [ALL,]VAR[=value][,...]"],
    );
    check_directives(
        "#!/bin/sh\n#SBATCH --gres=gpu:a:b:c\n",
        expect![
            "error: job.sh:2:16: invalid generic resource (gres) specification `gpu:a:b:c`: expected name[[:type]:count][,...]"
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// The command line.

#[test]
fn command_line_options() {
    // sbatch stops at the script: later words belong to the script.
    check_cli(
        &["-N2", "-p", "debug", "job.sh", "-p", "x"],
        expect![[r#"
        partitions: ["debug"]
        nodes: NodeCount { min: 2, max: None }
        operands: ["job.sh", "-p", "x"]
    "#]],
    );
    // `-N-3`: at most three nodes, at least one.
    check_cli(
        &["-N-3", "job.sh"],
        expect![[r#"
        nodes: NodeCount { min: 1, max: Some(3) }
        operands: ["job.sh"]
    "#]],
    );
    // Abbreviations, clustered flags, last occurrence wins, `--` ends the options.
    check_cli(
        &["--part=a", "--nodes", "2-4", "-HQ", "-p", "b", "--parsable", "-vv", "--", "-job.sh"],
        expect![[r#"
        partitions: ["b"]
        nodes: NodeCount { min: 2, max: Some(4) }
        parsable: true
        hold: true
        quiet: true
        verbose: 2
        operands: ["-job.sh"]
    "#]],
    );
    check_cli(
        &["--exclusive", "--nice=-5", "--get-user-env", "--mem-per-gpu=10G", "-G", "h100:2"],
        expect![[r#"
        mem: PerGpu(10240)
        gpus: [GresRequest { name: "gpu", gres_type: Some("h100"), count: 2 }]
        nice: -5
        exclusive: true
        get_user_env: ""
        operands: []
    "#]],
    );
    check_cli(
        &["--wrap", "echo hi", "-o", "out.txt"],
        expect![[r#"
        output: "out.txt"
        wrap: "echo hi"
        operands: []
    "#]],
    );
}

#[test]
fn command_line_errors() {
    check_cli(&["--foo", "job.sh"], expect!["usage error: unrecognized option '--foo'"]);
    check_cli(&["--foo=bar"], expect!["usage error: unrecognized option '--foo=bar'"]);
    check_cli(&["-z"], expect!["usage error: invalid option -- 'z'"]);
    check_cli(&["--ti=5"], expect!["usage error: option '--ti' is ambiguous; possibilities: '--time' '--time-min'"]);
    check_cli(&["--time"], expect!["usage error: option '--time' requires an argument"]);
    check_cli(&["-t"], expect!["usage error: option requires an argument -- 't'"]);
    check_cli(&["--hold=1"], expect!["usage error: option '--hold' doesn't allow an argument"]);
    // A bad value is reported after scanning, so `--help` still answers.
    check_cli(
        &["-t", "soon", "--help"],
        expect![[r#"
        action: Help
        operands: []
        deferred error: --time: invalid time limit `soon`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED
    "#]],
    );
    check_cli(
        &["--wait", "job.sh"],
        expect![[r#"
            wait: true
            operands: ["job.sh"]
        "#]],
    );
    check_cli(
        &["--mem=1G", "--mem-per-cpu=1G"],
        expect![[r#"
        mem: PerNode(1024)
        operands: []
        deferred error: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive
    "#]],
    );
}

#[test]
fn environment_layer() {
    check_env_layer(
        &[
            ("SBATCH_PARTITION", "gpu"),
            ("SBATCH_TIMELIMIT", "30"),
            ("SBATCH_REQUEUE", "yes"),
            ("SBATCH_EXCLUSIVE", ""),
            ("SBATCH_DEBUG", "1"),
            ("SBATCH_ACCOUNT", ""),
            ("SBATCH_NO_REQUEUE", "0"),
            ("SBATCH_MEM_PER_CPU", "2G"),
        ],
        expect![[r#"
            partitions: ["gpu"]
            time_limit: Minutes(30)
            mem: PerCpu(2048)
            requeue: true
            exclusive: true
            verbose: 1
        "#]],
    );
    check_env_layer(
        &[("SBATCH_TIMELIMIT", "soon")],
        expect![
            "error: SBATCH_TIMELIMIT: invalid time limit `soon`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED"
        ],
    );
    check_env_layer(
        &[("SBATCH_WAIT", "1")],
        expect![[r#"
        wait: true
    "#]],
    );
    check_env_layer(&[("SBATCH_WAIT", "no")], expect![""]);
}

// ---------------------------------------------------------------------------------------------
// Precedence: command line over environment over directives.

#[test]
fn precedence_of_the_three_layers() {
    let script = "#!/bin/sh\n#SBATCH --time=30\nsrun hostname\n";
    let env = [("SBATCH_TIMELIMIT", "20")];
    check_time_limit(&["-t", "10", "job.sh"], &env, script, expect!["Some(Minutes(10))"]);
    check_time_limit(&["job.sh"], &env, script, expect!["Some(Minutes(20))"]);
    check_time_limit(&["job.sh"], &[], script, expect!["Some(Minutes(30))"]);
    check_time_limit(&["job.sh"], &[], "#!/bin/sh\n", expect!["None"]);
    // A lower layer's bad value is still an error, even when a higher one overrides it.
    check_time_limit(
        &["-t", "10", "job.sh"],
        &[],
        "#!/bin/sh\n#SBATCH --time=soon\n",
        expect![[
            r#"Error("job.sh:2:16: invalid time limit `soon`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED")"#
        ]],
    );
}

#[test]
fn precedence_of_shared_slots() {
    // --mem in the script, --mem-per-cpu on the command line: the command line's kind wins.
    check_submit(
        &["--mem-per-cpu=100", "--no-requeue", "job.sh"],
        &[("SBATCH_PARTITION", "env"), ("SBATCH_REQUEUE", "1")],
        "#!/bin/sh\n#SBATCH --mem=1G -p script -J fromscript\n",
        expect![[r#"
            JobSpec {
                name: "fromscript",
                partitions: [
                    "env",
                ],
                mem: Some(
                    PerCpu(
                        100,
                    ),
                ),
                work_dir: "/home/alice/work",
                submit_dir: "/home/alice/work",
                submit_host: "login1",
                command: Some(
                    "/home/alice/work/job.sh",
                ),
                requeue: Some(
                    false,
                ),
                umask: 18,
                submit_line: "sbatch --mem-per-cpu=100 --no-requeue job.sh",
            }
            script:
              | #!/bin/sh
              | #SBATCH --mem=1G -p script -J fromscript
            environment:
              HOME=/home/alice
              LANG=C.UTF-8
              PATH=/usr/bin:/bin
              SBATCH_PARTITION=env
              SBATCH_REQUEUE=1
              SLURM_CONF=/etc/slurm/slurm.conf
              SLURM_JOB_NAME=fromscript
              SLURM_PRIO_PROCESS=0
              SLURM_RLIMIT_CORE=0
              SLURM_RLIMIT_NOFILE=77
              SLURM_SUBMIT_DIR=/home/alice/work
              SLURM_SUBMIT_HOST=login1
              SLURM_UMASK=0022
        "#]],
    );
}

// ---------------------------------------------------------------------------------------------
// Defaults, --wrap, stdin, paths.

#[test]
fn defaults_for_a_script_file() {
    check_submit(
        &["./job.sh", "arg 1", "-x"],
        &[],
        "#!/bin/bash\necho hi\n",
        expect![[r#"
            JobSpec {
                name: "job.sh",
                work_dir: "/home/alice/work",
                submit_dir: "/home/alice/work",
                submit_host: "login1",
                script_args: [
                    "arg 1",
                    "-x",
                ],
                command: Some(
                    "/home/alice/work/job.sh",
                ),
                umask: 18,
                submit_line: "sbatch ./job.sh arg 1 -x",
            }
            script:
              | #!/bin/bash
              | echo hi
            environment:
              HOME=/home/alice
              LANG=C.UTF-8
              PATH=/usr/bin:/bin
              SLURM_CONF=/etc/slurm/slurm.conf
              SLURM_JOB_NAME=job.sh
              SLURM_PRIO_PROCESS=0
              SLURM_RLIMIT_CORE=0
              SLURM_RLIMIT_NOFILE=77
              SLURM_SUBMIT_DIR=/home/alice/work
              SLURM_SUBMIT_HOST=login1
              SLURM_UMASK=0022
        "#]],
    );
}

#[test]
fn stdin_script_is_named_sbatch_and_exports_no_name() {
    check_submit(
        &["-n", "4", "-c", "2", "--ntasks-per-node=2"],
        &[],
        "#!/bin/sh\n#SBATCH -o run.log\nhostname\n",
        expect![[r#"
            JobSpec {
                name: "sbatch",
                ntasks: Some(
                    4,
                ),
                cpus_per_task: Some(
                    2,
                ),
                ntasks_per_node: Some(
                    2,
                ),
                stdout: Some(
                    "/home/alice/work/run.log",
                ),
                work_dir: "/home/alice/work",
                submit_dir: "/home/alice/work",
                submit_host: "login1",
                umask: 18,
                submit_line: "sbatch -n 4 -c 2 --ntasks-per-node=2",
            }
            script:
              | #!/bin/sh
              | #SBATCH -o run.log
              | hostname
            environment:
              HOME=/home/alice
              LANG=C.UTF-8
              PATH=/usr/bin:/bin
              SLURM_CONF=/etc/slurm/slurm.conf
              SLURM_CPUS_PER_TASK=2
              SLURM_NPROCS=4
              SLURM_NTASKS=4
              SLURM_NTASKS_PER_NODE=2
              SLURM_PRIO_PROCESS=0
              SLURM_RLIMIT_CORE=0
              SLURM_RLIMIT_NOFILE=77
              SLURM_SUBMIT_DIR=/home/alice/work
              SLURM_SUBMIT_HOST=login1
              SLURM_UMASK=0022
        "#]],
    );
    check_submit(
        &[],
        &[],
        "",
        expect![[r#"
        error: Batch script is empty!
    "#]],
    );
    check_submit(
        &["-J", "named"],
        &[],
        "#!/bin/sh\n",
        expect![[r#"
            JobSpec {
                name: "named",
                work_dir: "/home/alice/work",
                submit_dir: "/home/alice/work",
                submit_host: "login1",
                umask: 18,
                submit_line: "sbatch -J named",
            }
            script:
              | #!/bin/sh
            environment:
              HOME=/home/alice
              LANG=C.UTF-8
              PATH=/usr/bin:/bin
              SLURM_CONF=/etc/slurm/slurm.conf
              SLURM_JOB_NAME=named
              SLURM_PRIO_PROCESS=0
              SLURM_RLIMIT_CORE=0
              SLURM_RLIMIT_NOFILE=77
              SLURM_SUBMIT_DIR=/home/alice/work
              SLURM_SUBMIT_HOST=login1
              SLURM_UMASK=0022
        "#]],
    );
}

#[test]
fn wrap() {
    check_submit(
        &["--parsable", "--wrap", "srun hostname"],
        &[],
        "unused",
        expect![[r#"
            parsable=true quiet=false verbose=0
            JobSpec {
                name: "wrap",
                work_dir: "/home/alice/work",
                submit_dir: "/home/alice/work",
                submit_host: "login1",
                umask: 18,
                submit_line: "sbatch --parsable --wrap srun hostname",
            }
            script:
              | #!/bin/sh
              | # This script was created by sbatch --wrap.
              |
              | srun hostname
            environment:
              HOME=/home/alice
              LANG=C.UTF-8
              PATH=/usr/bin:/bin
              SLURM_CONF=/etc/slurm/slurm.conf
              SLURM_JOB_NAME=wrap
              SLURM_PRIO_PROCESS=0
              SLURM_RLIMIT_CORE=0
              SLURM_RLIMIT_NOFILE=77
              SLURM_SUBMIT_DIR=/home/alice/work
              SLURM_SUBMIT_HOST=login1
              SLURM_UMASK=0022
        "#]],
    );
    check_submit(
        &["--wrap=true", "job.sh"],
        &[],
        "",
        expect![[r#"
        error: script arguments not permitted with --wrap option
    "#]],
    );
}

#[test]
fn work_dir_and_output_paths() {
    check_submit(
        &["-D", "runs/./a", "-o", "out/%x-%j.log", "-e", "/scratch/err.%A_%a", "-i", "none", "-Q", "job.sh"],
        &[],
        "#!/bin/sh\n",
        expect![[r#"
            parsable=false quiet=true verbose=0
            JobSpec {
                name: "job.sh",
                stdout: Some(
                    "/home/alice/work/runs/a/out/%x-%j.log",
                ),
                stderr: Some(
                    "/scratch/err.%A_%a",
                ),
                stdin: Some(
                    "/dev/null",
                ),
                work_dir: "/home/alice/work/runs/a",
                submit_dir: "/home/alice/work",
                submit_host: "login1",
                command: Some(
                    "/home/alice/work/job.sh",
                ),
                umask: 18,
                submit_line: "sbatch -D runs/./a -o out/%x-%j.log -e /scratch/err.%A_%a -i none -Q job.sh",
            }
            script:
              | #!/bin/sh
            environment:
              HOME=/home/alice
              LANG=C.UTF-8
              PATH=/usr/bin:/bin
              SLURM_CONF=/etc/slurm/slurm.conf
              SLURM_JOB_NAME=job.sh
              SLURM_PRIO_PROCESS=0
              SLURM_RLIMIT_CORE=0
              SLURM_RLIMIT_NOFILE=77
              SLURM_SUBMIT_DIR=/home/alice/work
              SLURM_SUBMIT_HOST=login1
              SLURM_UMASK=0022
        "#]],
    );
}

#[test]
fn gpus_and_export() {
    check_submit(
        &[
            "--gpus-per-node=a100:2",
            "--gres=shard:1",
            "-G",
            "4",
            "--gpus-per-task=1",
            "-n",
            "4",
            "--export=NONE,OMP_NUM_THREADS=4,HOME",
            "/abs/train.sh",
        ],
        &[("SLURM_UMASK", "0077")],
        "#!/bin/sh\n#SBATCH --mem-per-gpu=8G --open-mode=truncate -d afterany:7\n",
        expect![[r#"
            JobSpec {
                name: "train.sh",
                ntasks: Some(
                    4,
                ),
                mem: Some(
                    PerGpu(
                        8192,
                    ),
                ),
                gres_per_node: [
                    GresRequest {
                        name: "shard",
                        count: 1,
                    },
                    GresRequest {
                        name: "gpu",
                        gres_type: Some(
                            "a100",
                        ),
                        count: 2,
                    },
                ],
                gpus: [
                    GresRequest {
                        name: "gpu",
                        count: 4,
                    },
                ],
                gpus_per_task: [
                    GresRequest {
                        name: "gpu",
                        count: 1,
                    },
                ],
                open_append: Some(
                    false,
                ),
                work_dir: "/home/alice/work",
                submit_dir: "/home/alice/work",
                submit_host: "login1",
                export: Some(
                    "NONE,OMP_NUM_THREADS=4,HOME",
                ),
                command: Some(
                    "/abs/train.sh",
                ),
                dependency: Some(
                    "afterany:7",
                ),
                umask: 63,
                submit_line: "sbatch --gpus-per-node=a100:2 --gres=shard:1 -G 4 --gpus-per-task=1 -n 4 --export=NONE,OMP_NUM_THREADS=4,HOME /abs/train.sh",
            }
            script:
              | #!/bin/sh
              | #SBATCH --mem-per-gpu=8G --open-mode=truncate -d afterany:7
            environment:
              HOME=/home/alice
              OMP_NUM_THREADS=4
              SLURM_CONF=/etc/slurm/slurm.conf
              SLURM_EXPORT_ENV=NONE,OMP_NUM_THREADS=4,HOME
              SLURM_GPUS=4
              SLURM_GPUS_PER_NODE=a100:2
              SLURM_GPUS_PER_TASK=1
              SLURM_JOB_DEPENDENCY=afterany:7
              SLURM_JOB_NAME=train.sh
              SLURM_MEM_PER_GPU=8192
              SLURM_NPROCS=4
              SLURM_NTASKS=4
              SLURM_OPEN_MODE=t
              SLURM_PRIO_PROCESS=0
              SLURM_RLIMIT_CORE=0
              SLURM_RLIMIT_NOFILE=77
              SLURM_SUBMIT_DIR=/home/alice/work
              SLURM_SUBMIT_HOST=login1
              SLURM_UMASK=0077
        "#]],
    );
}

#[test]
fn whole_job_errors() {
    check_submit(
        &["--reservation", "maint", "--wrap=true"],
        &[],
        "",
        expect![[r#"
        error: Batch job submission failed: Requested reservation is invalid
    "#]],
    );
    check_submit(
        &["--wrap=true"],
        &[("SBATCH_RESERVATION", "maint")],
        "",
        expect![[r#"
        error: Batch job submission failed: Requested reservation is invalid
    "#]],
    );
    check_submit(
        &["--gres=gpu:1", "--gpus-per-node=2", "--wrap=true"],
        &[],
        "",
        expect![[r#"
        error: --gpus-per-node and --gres=gpu are mutually exclusive: request GPUs per node with one of them
    "#]],
    );
    check_submit(
        &["--gpus-per-task=1", "--wrap=true"],
        &[],
        "",
        expect![[r#"
        error: --gpus-per-task requires a task count: add -n/--ntasks or --ntasks-per-node
    "#]],
    );
    check_submit(
        &["--begin=tomorrow", "--deadline=today", "--wrap=true"],
        &[],
        "",
        expect![[r#"
        error: incompatible --begin and --deadline: the deadline is before the begin time
    "#]],
    );
    check_submit(
        &["missing.sh"],
        &[],
        "",
        expect![[r#"
        error: Unable to open file missing.sh: No such file or directory
    "#]],
    );
    check_submit(
        &[":", "job.sh"],
        &[],
        "",
        expect![[r#"
        error: heterogeneous jobs (`:` on the command line) are not supported yet
    "#]],
    );
    check_submit(
        &["job.sh"],
        &[],
        "#!/bin/sh\n#SBATCH --time=1:2:3:4\n",
        expect![[r#"
        error: job.sh:2:16: invalid time limit `1:2:3:4`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED
    "#]],
    );
    check_submit(
        &[],
        &[],
        "#!/bin/sh\n#SBATCH --comment=\"open\n",
        expect![[r#"
        error: (stdin):2:19: unterminated double quote: expected a closing "
    "#]],
    );
    check_submit(
        &["-t", "x", "job.sh"],
        &[],
        "#!/bin/sh\n",
        expect![[r#"
        error: --time: invalid time limit `x`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED
    "#]],
    );
    check_submit(
        &["--bogus", "job.sh"],
        &[],
        "#!/bin/sh\n",
        expect![[r#"
        usage error: unrecognized option '--bogus'
    "#]],
    );
    check_submit(
        &["job.sh"],
        &[],
        "#!/bin/sh\n#SLURM -N 2\n",
        expect![[r#"
            note: job.sh:2: change #SLURM to #SBATCH in your script and check that the options are valid for sbatch
            JobSpec {
                name: "job.sh",
                nodes_min: Some(
                    2,
                ),
                work_dir: "/home/alice/work",
                submit_dir: "/home/alice/work",
                submit_host: "login1",
                command: Some(
                    "/home/alice/work/job.sh",
                ),
                umask: 18,
                submit_line: "sbatch job.sh",
            }
            script:
              | #!/bin/sh
              | #SLURM -N 2
            environment:
              HOME=/home/alice
              LANG=C.UTF-8
              PATH=/usr/bin:/bin
              SLURM_CONF=/etc/slurm/slurm.conf
              SLURM_JOB_NAME=job.sh
              SLURM_PRIO_PROCESS=0
              SLURM_RLIMIT_CORE=0
              SLURM_RLIMIT_NOFILE=77
              SLURM_SUBMIT_DIR=/home/alice/work
              SLURM_SUBMIT_HOST=login1
              SLURM_UMASK=0022
        "#]],
    );
}

#[test]
fn help_version_and_usage_answer_without_a_script() {
    check_submit(
        &["-V"],
        &[],
        "",
        expect![[r#"
        answer:
        slurm 22.05.8
    "#]],
    );
    let shown = match run_prepare(&["--usage"], &[], "") {
        Ok(Prepared::Answer(text)) => text,
        other => format!("{other:?}"),
    };
    assert!(shown.starts_with("Usage: sbatch [-a indexes] [-A name]"), "{shown}");
    assert!(shown.trim_end().ends_with("executable [args...]"), "{shown}");
}

// ---------------------------------------------------------------------------------------------
// --export.

#[test]
fn export_filtering() {
    check_export(
        None,
        expect![[r#"
        HOME=/home/alice
        PATH=/usr/bin
        SLURM_CONF=/etc/slurm/slurm.conf
        SLURM_SUBMIT_DIR=/home/alice/work
        TERM=xterm
    "#]],
    );
    check_export(
        Some("ALL"),
        expect![[r#"
        HOME=/home/alice
        PATH=/usr/bin
        SLURM_CONF=/etc/slurm/slurm.conf
        SLURM_SUBMIT_DIR=/home/alice/work
        TERM=xterm
    "#]],
    );
    check_export(
        Some("NONE"),
        expect![[r#"
        SLURM_CONF=/etc/slurm/slurm.conf
        SLURM_SUBMIT_DIR=/home/alice/work
    "#]],
    );
    check_export(
        Some("PATH,FOO=bar,NOT_SET"),
        expect![[r#"
        FOO=bar
        PATH=/usr/bin
        SLURM_CONF=/etc/slurm/slurm.conf
        SLURM_SUBMIT_DIR=/home/alice/work
    "#]],
    );
    check_export(
        Some("ALL,TERM=dumb,DIRS=/a,/b"),
        expect![[r#"
        DIRS=/a,/b
        HOME=/home/alice
        PATH=/usr/bin
        SLURM_CONF=/etc/slurm/slurm.conf
        SLURM_SUBMIT_DIR=/home/alice/work
        TERM=dumb
    "#]],
    );
    check_export(
        Some("1BAD"),
        expect![[r#"
        error: invalid --export value `1BAD`: expected ALL, NONE or [ALL,]VAR[=value][,...]
    "#]],
    );
}

// ---------------------------------------------------------------------------------------------
// The option table itself.

#[test]
fn option_table_is_consistent() {
    for command in Command::ALL {
        let rows: Vec<_> = table(command).collect();
        for (i, def) in rows.iter().enumerate() {
            let name = command.name();
            assert!(rows[..i].iter().all(|other| other.long != def.long), "{name}: --{} is defined twice", def.long);
            if let Some(short) = def.short {
                assert!(rows[..i].iter().all(|other| other.short != Some(short)), "{name}: -{short} is defined twice");
            }
            let help = def.help_in(command);
            assert_eq!(def.is_supported(), !help.is_empty(), "{name}: --{}: help text iff supported", def.long);
        }
    }
    for def in OPTIONS {
        assert!(Command::ALL.iter().any(|c| def.accepts(*c)), "--{} serves no command", def.long);
        if let Some(env) = def.env {
            assert!(env.starts_with("SBATCH_"), "--{}: {env}", def.long);
            assert!(def.accepts(Command::Sbatch), "--{}: only sbatch reads input variables", def.long);
        }
    }
}

#[test]
fn help_lists_supported_options() {
    let text = help::help(Command::Sbatch);
    for def in table(Command::Sbatch).filter(|d| d.is_supported()) {
        assert!(text.contains(&format!("--{}", def.long)), "--{} missing from --help", def.long);
    }
    expect![[r#"
        Usage: sbatch [OPTIONS...] script [args...]
               sbatch [OPTIONS...] --wrap="command string"

        Job options:
    "#]]
    .assert_eq(&text.lines().take(4).map(|l| format!("{l}\n")).collect::<String>());
}

// ---------------------------------------------------------------------------------------------
// What sbatch prints for ctld's answer.

fn check_outcome(args: &[&str], answer: anyhow::Result<drover_shared::proto::client::Response>, expect: Expect) {
    let Ok(Prepared::Submit { hi, .. }) = run_prepare(args, &[], "") else {
        panic!("{args:?} should prepare a submission");
    };
    let outcome = super::outcome(answer, &hi);
    let mut shown = format!("ok={}\n", outcome.ok);
    shown.push_str(&outcome.stdout);
    outcome.stderr.iter().for_each(|line| shown.push_str(&format!("stderr: {line}\n")));
    expect.assert_eq(&shown);
}

#[test]
fn submission_outcomes() {
    use drover_shared::proto::client::{ErrorCode, Response};
    check_outcome(
        &["--wrap=hostname"],
        Ok(Response::Submitted { job_id: 20 }),
        expect![[r#"
        ok=true
        Submitted batch job 20
    "#]],
    );
    check_outcome(
        &["--parsable", "--wrap=hostname"],
        Ok(Response::Submitted { job_id: 21 }),
        expect![[r#"
        ok=true
        21
    "#]],
    );
    check_outcome(
        &["-Q", "--wrap=hostname"],
        Ok(Response::Submitted { job_id: 22 }),
        expect![[r#"
        ok=true
    "#]],
    );
    check_outcome(
        &["-p", "nosuch", "--wrap=true"],
        Ok(Response::Error { code: ErrorCode::InvalidPartition, detail: "no partition nosuch".into() }),
        expect![[r#"
            ok=false
            stderr: sbatch: error: invalid partition specified: nosuch
            stderr: sbatch: error: Batch job submission failed: Invalid partition name specified
        "#]],
    );
    check_outcome(
        &["-A", "nosuch", "--wrap=true"],
        Ok(Response::Error { code: ErrorCode::InvalidAccount, detail: String::new() }),
        expect![[r#"
            ok=false
            stderr: sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified
        "#]],
    );
    check_outcome(
        &["--wrap=true"],
        Err(anyhow::anyhow!("connection refused")),
        expect![[r#"
        ok=false
        stderr: sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)
    "#]],
    );
    check_outcome(
        &["-v", "--wrap=true"],
        Err(anyhow::anyhow!("connection refused")),
        expect![[r#"
        ok=false
        stderr: sbatch: connection refused
        stderr: sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)
    "#]],
    );
}

#[test]
fn test_only_outcomes() {
    use drover_shared::proto::client::{ErrorCode, Response};
    let nodes = vec!["n1".to_owned(), "n2".to_owned(), "n3".to_owned()];
    expect!["sbatch: Job 41 to start at 2026-11-30T04:00:00 using 4 processors on nodes n[1-3] in partition main"]
        .assert_eq(&super::will_run_line(
            "sbatch",
            41,
            1_796_011_200,
            4,
            &nodes,
            "main",
            crate::query::format::Tz::Fixed(0),
        ));
    let answer =
        Response::WillRun { job_id: 41, start: 0, cpus: 1, nodes: vec!["n1".into()], partition: "main".into() };
    let outcome = super::outcome(Ok(answer), &prepared(&["--test-only", "--wrap=true"]));
    assert!(outcome.ok && outcome.stdout.is_empty(), "{outcome:?}");
    assert!(
        outcome.stderr[0].starts_with("sbatch: Job 41 to start at ") && outcome.stderr[0].ends_with(" partition main")
    );
    check_outcome(
        &["--test-only", "-p", "nosuch", "--wrap=true"],
        Ok(Response::Error { code: ErrorCode::InvalidPartition, detail: "no partition nosuch".into() }),
        expect![[r#"
            ok=false
            stderr: allocation failure: Invalid partition name specified
        "#]],
    );
}

fn prepared(args: &[&str]) -> super::hiargs::HiArgs {
    let Ok(Prepared::Submit { hi, .. }) = run_prepare(args, &[], "") else {
        panic!("{args:?} should prepare a submission");
    };
    *hi
}

#[test]
fn wrap_command_lines_are_read_as_directives_too() {
    check_submit(
        &["--wrap=#SBATCH --time=soon"],
        &[],
        "",
        expect![[r#"
            error: (--wrap):4:16: invalid time limit `soon`: expected minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S or UNLIMITED
        "#]],
    );
}

#[test]
fn slurm_hints_are_accepted_and_ignored_with_a_warning() {
    // What Nextflow's clusterOptions or OOD's native options often carry: the job is the same as
    // without them, and each hint is named once on stderr.
    let with = run_prepare(
        &["--hint=nomultithread", "--cpu-freq=high", "-m", "block:cyclic", "--hint=compute_bound", "job.sh"],
        &[],
        "#!/bin/sh\n#SBATCH --gpu-bind=closest\n#SBATCH --gres-flags=enforce-binding\ntrue\n",
    );
    let without = run_prepare(
        &["job.sh"],
        &[],
        "#!/bin/sh\n#SBATCH --gpu-bind=closest\n#SBATCH --gres-flags=enforce-binding\ntrue\n",
    );
    let (Ok(Prepared::Submit { hi, warnings, .. }), Ok(Prepared::Submit { hi: plain, .. })) = (with, without) else {
        panic!("both must submit");
    };
    let mut same = hi.job_spec.clone();
    same.submit_line.clone_from(&plain.job_spec.submit_line);
    assert_eq!(format!("{same:?}"), format!("{:?}", plain.job_spec));
    expect![[r#"
        --hint is accepted and ignored: Drover has no use for this hint
        --cpu-freq is accepted and ignored: Drover has no use for this hint
        --distribution is accepted and ignored: Drover has no use for this hint
        --gpu-bind is accepted and ignored: Drover has no use for this hint
        --gres-flags is accepted and ignored: Drover has no use for this hint
    "#]]
    .assert_eq(&warnings.iter().map(|w| format!("{w}\n")).collect::<String>());
    // Options that would change what the job gets are still refused, naming the option.
    let Err(Failure::Error(message)) = run_prepare(&["--cpus-per-gpu=4", "job.sh"], &[], "#!/bin/sh\n") else {
        panic!("--cpus-per-gpu must be refused");
    };
    assert!(message.contains("--cpus-per-gpu is not supported yet"), "{message}");
}

/// The submitter's soft limits travel to the batch script as `SLURM_RLIMIT_*` (Slurm's
/// PropagateResourceLimits, ALL by default); `--propagate` picks some, none or all, and refuses
/// a name it does not know.
#[test]
fn resource_limits_propagate_as_slurm_rlimit_variables() {
    let rlimit_vars = |args: &[&str]| -> Result<Vec<String>, String> {
        match run_prepare(args, &[], "#!/bin/sh\n") {
            Ok(Prepared::Submit { hi, .. }) => Ok(hi
                .job_spec
                .environment
                .iter()
                .filter(|(name, _)| name.starts_with("SLURM_RLIMIT_"))
                .map(|(name, value)| format!("{name}={value}"))
                .collect()),
            Err(Failure::Error(message) | Failure::Usage(message)) => Err(message),
            Ok(Prepared::Answer(text)) => Err(text),
        }
    };
    let all = ["SLURM_RLIMIT_CORE=0", "SLURM_RLIMIT_NOFILE=77"];
    assert_eq!(rlimit_vars(&["job.sh"]).unwrap(), all);
    assert_eq!(rlimit_vars(&["--propagate", "job.sh"]).unwrap(), all);
    assert_eq!(rlimit_vars(&["--propagate=NONE", "job.sh"]).unwrap(), Vec::<String>::new());
    assert_eq!(rlimit_vars(&["--propagate=rlimit_nofile", "job.sh"]).unwrap(), ["SLURM_RLIMIT_NOFILE=77"]);
    // `--export=NONE` keeps them: they are SLURM_ variables.
    assert_eq!(rlimit_vars(&["--export=NONE", "job.sh"]).unwrap(), all);
    let refused = rlimit_vars(&["--propagate=NOFILE,BOGUS", "job.sh"]).unwrap_err();
    assert!(refused.contains("Invalid --propagate specification: BOGUS"), "{refused}");
}
