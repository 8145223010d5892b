//! srun's and salloc's command line: Slurm's spellings (`-n4`, `-n 4`, `--ntasks=4`,
//! `--ntasks 4`), options up to the first word that is not one, then the command.
//!
//! Accepted and applied: `-n`, `-N`, `--ntasks-per-node`, `-c`, `-l/--label`, `-J`, `-D`,
//! `--export`, `--overlap`, `-O/--overcommit`, `--jobid`, `-v`, `-o/-e` (step patterns), `--pty`; for a new allocation also `-p`, `-t`, `-A`, `-q`,
//! `--mem`, `--gpus`/`-G`, `--gres`. Accepted without effect (documented in docs/compat.md):
//! `-u/--unbuffered` (output is always relayed as it comes), `--exact`, `--cpu-bind`, `--mpi`,
//! `-K/--kill-on-bad-exit`, `--quiet`.

use anyhow::{Context, bail};
use drover_shared::job::{JobSpec, MemRequest, StepSpec};
use std::ffi::OsString;

/// What srun (or salloc) was asked.
#[derive(Debug, Default, Clone)]
pub(crate) struct StepOptions {
    pub(crate) step: StepSpec,
    pub(crate) command: Vec<String>,
    pub(crate) label: bool,
    pub(crate) job_id: Option<u32>,
    pub(crate) chdir: Option<String>,
    pub(crate) export: Option<String>,
    pub(crate) verbose: bool,
    /// `--pty`: task 0 on a pseudo-terminal, srun's terminal in raw mode.
    pub(crate) pty: bool,
    /// `-o`, `-e`: step output patterns ([`super::output`]).
    pub(crate) output: Option<String>,
    pub(crate) error: Option<String>,
    /// The job to request when there is no allocation yet.
    pub(crate) allocation: JobSpec,
}

/// Options that take a value; everything else is a flag.
const WITH_VALUE: &[(&str, &str)] = &[
    ("n", "ntasks"),
    ("N", "nodes"),
    ("", "ntasks-per-node"),
    ("c", "cpus-per-task"),
    ("J", "job-name"),
    ("D", "chdir"),
    ("", "export"),
    ("", "jobid"),
    ("p", "partition"),
    ("t", "time"),
    ("A", "account"),
    ("q", "qos"),
    ("", "mem"),
    ("", "mem-per-cpu"),
    ("G", "gpus"),
    ("", "gres"),
    ("", "gpus-per-node"),
    ("", "gpus-per-task"),
    ("", "cpu-bind"),
    ("", "mpi"),
    ("o", "output"),
    ("e", "error"),
    ("w", "nodelist"),
    ("", "signal"),
];

const FLAGS: &[(&str, &str)] = &[
    ("l", "label"),
    ("u", "unbuffered"),
    ("", "overlap"),
    ("", "exact"),
    ("K", "kill-on-bad-exit"),
    ("v", "verbose"),
    ("Q", "quiet"),
    ("", "pty"),
    ("", "exclusive"),
    ("O", "overcommit"),
];

fn number(name: &str, value: &str) -> anyhow::Result<u32> {
    value.trim().parse().with_context(|| format!("invalid --{name} value: {value}"))
}

/// Parses the arguments after the command name.
pub(crate) fn parse(args: &[OsString]) -> anyhow::Result<StepOptions> {
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut options = StepOptions::default();
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        if word == "--" {
            i += 1;
            break;
        }
        if !word.starts_with('-') || word == "-" {
            break;
        }
        let (name, inline): (String, Option<String>) = if let Some(long) = word.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
                None => (long.to_owned(), None),
            }
        } else {
            let short = &word[1..2];
            let rest = &word[2..];
            let long = WITH_VALUE
                .iter()
                .chain(FLAGS)
                .find(|(s, _)| *s == short)
                .map(|(_, l)| (*l).to_owned())
                .with_context(|| format!("invalid option -- '{short}'"))?;
            if FLAGS.iter().any(|(s, _)| *s == short) && !rest.is_empty() {
                bail!("invalid option combination: {word}");
            }
            (long, (!rest.is_empty()).then(|| rest.trim_start_matches('=').to_owned()))
        };
        i += 1;
        if FLAGS.iter().any(|(_, l)| *l == name) {
            match name.as_str() {
                "label" => options.label = true,
                "overlap" => options.step.overlap = true,
                "overcommit" => options.step.overcommit = true,
                "verbose" => options.verbose = true,
                "pty" => options.pty = true,
                "exclusive" => options.allocation.exclusive = true,
                _ => {}
            }
            continue;
        }
        if !WITH_VALUE.iter().any(|(_, l)| *l == name) {
            bail!("unrecognized option '--{name}'");
        }
        let value = match inline {
            Some(v) => v,
            None => {
                let v = words.get(i).cloned().with_context(|| format!("option '--{name}' requires an argument"))?;
                i += 1;
                v
            }
        };
        let spec = &mut options.allocation;
        match name.as_str() {
            "ntasks" => {
                options.step.ntasks = Some(number(&name, &value)?);
                spec.ntasks = options.step.ntasks;
            }
            "nodes" => {
                let first = value.split('-').next().unwrap_or_default();
                options.step.nodes = Some(number(&name, first)?);
                spec.nodes_min = options.step.nodes;
            }
            "ntasks-per-node" => {
                options.step.ntasks_per_node = Some(number(&name, &value)?);
                spec.ntasks_per_node = options.step.ntasks_per_node;
            }
            "cpus-per-task" => {
                options.step.cpus_per_task = Some(number(&name, &value)?);
                spec.cpus_per_task = options.step.cpus_per_task;
            }
            "job-name" => {
                options.step.name = value.clone();
                spec.name = value;
            }
            "chdir" => options.chdir = Some(value),
            "export" => options.export = Some(value),
            "jobid" => options.job_id = Some(number(&name, &value)?),
            "partition" => spec.partitions = value.split(',').map(str::to_owned).collect(),
            "time" => {
                spec.time_limit =
                    Some(drover_shared::grammar::time::parse_time_limit(&value).map_err(|e| anyhow::anyhow!("{e}"))?)
            }
            "account" => spec.account = Some(value),
            "qos" => spec.qos = Some(value),
            "mem" => {
                spec.mem = Some(MemRequest::PerNode(
                    drover_shared::grammar::mem::parse_mem_mb(&value).map_err(|e| anyhow::anyhow!("{e}"))?,
                ))
            }
            "mem-per-cpu" => {
                spec.mem = Some(MemRequest::PerCpu(
                    drover_shared::grammar::mem::parse_mem_mb(&value).map_err(|e| anyhow::anyhow!("{e}"))?,
                ))
            }
            "gpus" => {
                spec.gpus = drover_shared::grammar::gres::parse_gpus(&value).map_err(|e| anyhow::anyhow!("{e}"))?
            }
            "gres" => {
                spec.gres_per_node =
                    drover_shared::grammar::gres::parse_gres(&value).map_err(|e| anyhow::anyhow!("{e}"))?
            }
            "gpus-per-node" => {
                spec.gres_per_node =
                    drover_shared::grammar::gres::parse_gpus(&value).map_err(|e| anyhow::anyhow!("{e}"))?
            }
            "gpus-per-task" => {
                spec.gpus_per_task =
                    drover_shared::grammar::gres::parse_gpus(&value).map_err(|e| anyhow::anyhow!("{e}"))?
            }
            "nodelist" => spec.nodelist = Some(value),
            "output" => options.output = Some(value),
            "error" => options.error = Some(value),
            _ => {}
        }
    }
    options.command = words[i..].to_vec();
    Ok(options)
}

impl StepOptions {
    /// The tasks' environment under `--export` (default `ALL`): `NONE` passes only `SLURM_*`
    /// variables; a list passes those named (plus all with `ALL,…`) and sets `NAME=value` ones.
    pub(crate) fn environment(&self) -> Vec<(String, String)> {
        let current: Vec<(String, String)> = std::env::vars().collect();
        let Some(export) = &self.export else { return current };
        let mut all = false;
        let mut names: Vec<String> = Vec::new();
        let mut set: Vec<(String, String)> = Vec::new();
        for item in export.split(',') {
            match item {
                "ALL" => all = true,
                "NONE" | "NIL" => {}
                _ => match item.split_once('=') {
                    Some((n, v)) => set.push((n.to_owned(), v.to_owned())),
                    None => names.push(item.to_owned()),
                },
            }
        }
        let mut env: Vec<(String, String)> =
            current.into_iter().filter(|(n, _)| all || n.starts_with("SLURM_") || names.contains(n)).collect();
        for (name, value) in set {
            env.retain(|(n, _)| *n != name);
            env.push((name, value));
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn words(text: &str) -> Vec<std::ffi::OsString> {
        text.split_whitespace().map(Into::into).collect()
    }

    #[test]
    fn spellings() {
        let o = parse(&words("-l -n4 -N 2 --ntasks-per-node=2 --overlap bash -c true")).unwrap();
        assert!(o.label && o.step.overlap);
        assert!(parse(&words("-O -n8 true")).unwrap().step.overcommit);
        assert_eq!((o.step.ntasks, o.step.nodes, o.step.ntasks_per_node), (Some(4), Some(2), Some(2)));
        assert_eq!(o.command, vec!["bash", "-c", "true"]);
        let o = parse(&words("--ntasks 3 -c2 -- env -n")).unwrap();
        assert_eq!((o.step.ntasks, o.step.cpus_per_task), (Some(3), Some(2)));
        assert_eq!(o.command, vec!["env", "-n"]);
        assert!(parse(&words("--bogus x")).is_err());
    }
}
