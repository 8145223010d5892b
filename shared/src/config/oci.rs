//! The `[oci]` part of `cluster.toml`: the OCI runtime that runs jobs and steps submitted with
//! `--container=BUNDLE`, configured the way Slurm's `oci.conf` configures it. Either one
//! `run` pattern (`RunTimeRun`), or `create` + `start` with `query`, `kill` and `delete`
//! (`RunTimeCreate`/`Start`/`Query`/`Kill`/`Delete`). Patterns are shell command lines whose
//! `%` tokens noded fills in per task (see [`PATTERN_TOKENS`]). `runtime = "crun"` or `"runc"`
//! fills in rootless patterns for that runtime; patterns written out replace them.

use serde::Deserialize;

/// The raw `[oci]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOci {
    /// `crun` or `runc`: rootless patterns for that runtime.
    pub runtime: Option<String>,
    /// `RunTimeRun`.
    pub run: Option<String>,
    /// `RunTimeCreate`.
    pub create: Option<String>,
    /// `RunTimeStart`.
    pub start: Option<String>,
    /// `RunTimeQuery`.
    pub query: Option<String>,
    /// `RunTimeKill`.
    pub kill: Option<String>,
    /// `RunTimeDelete`.
    pub delete: Option<String>,
    /// `CreateEnvFile`: write the task's environment to `%e`, one `NAME=value` per line.
    pub create_env_file: Option<bool>,
    /// `MountSpoolDir`: where the task's spool directory (which holds the batch script) is
    /// mounted inside the container.
    pub mount_spool_dir: Option<String>,
}

/// Validated `[oci]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OciConfig {
    /// How the runtime is driven.
    pub mode: OciMode,
    /// Sends a signal to the container's processes (`%s`… as the other patterns).
    pub kill: Option<String>,
    /// Removes the container's state once it stopped.
    pub delete: Option<String>,
    pub create_env_file: bool,
    pub mount_spool_dir: String,
}

/// One command that runs the container to its end, or the create/start/query sequence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OciMode {
    Run(String),
    CreateStart { create: String, start: String, query: String },
}

/// The `%` tokens a pattern may hold: `%%` a percent sign, `%@` the task's command line, `%b`
/// the bundle noded generated for the task, `%e` the environment file, `%j` the job id, `%m`
/// the task's spool directory, `%n` the node name, `%p` the pid of the process that runs the
/// runtime, `%r` the bundle's root file system, `%s` the step id (`batch` for the batch
/// script), `%t` the task id, `%u` the user name, `%U` the user id.
pub const PATTERN_TOKENS: &str = "%@bejmnprstuU";

/// The longest pattern accepted.
pub const MAX_PATTERN: usize = 4096;

/// The default mount point of the task's spool directory inside the container.
pub const DEFAULT_MOUNT_SPOOL_DIR: &str = "/var/run/drover";

/// Rootless patterns for a runtime Debian packages. Containers stay in the job's cgroups:
/// crun is told not to manage cgroups; runc, rootless without delegated cgroups, leaves them.
/// The runtimes keep their state under `$XDG_RUNTIME_DIR`, which noded points at the task's
/// spool directory.
fn preset(runtime: &str) -> Option<(OciMode, &'static str, &'static str)> {
    let id = "%n.%u.%j.%s.%t";
    match runtime {
        "crun" => Some((
            OciMode::Run(format!("crun --rootless=true --cgroup-manager=disabled run --bundle %b {id}")),
            "crun --rootless=true kill -a %n.%u.%j.%s.%t",
            "crun --rootless=true delete --force %n.%u.%j.%s.%t",
        )),
        "runc" => Some((
            OciMode::Run(format!("runc --rootless=true run --bundle %b {id}")),
            "runc --rootless=true kill -a %n.%u.%j.%s.%t",
            "runc --rootless=true delete --force %n.%u.%j.%s.%t",
        )),
        _ => None,
    }
}

impl RawOci {
    /// Applies the preset and checks the patterns; an error is `(key, message)`.
    pub fn validate(self) -> Result<OciConfig, (String, String)> {
        let err = |key: &str, message: String| (format!("oci.{key}"), message);
        for (key, pattern) in [
            ("run", &self.run),
            ("create", &self.create),
            ("start", &self.start),
            ("query", &self.query),
            ("kill", &self.kill),
            ("delete", &self.delete),
            ("mount_spool_dir", &self.mount_spool_dir),
        ] {
            if let Some(pattern) = pattern {
                check_pattern(pattern).map_err(|message| err(key, message))?;
            }
        }
        let preset = match self.runtime.as_deref() {
            None => None,
            Some(name) => Some(
                preset(name)
                    .ok_or_else(|| err("runtime", format!("`{name}` is not a runtime Drover knows (crun, runc)")))?,
            ),
        };
        let mode = match (self.run, self.create, self.start, self.query.clone()) {
            (Some(_), Some(_), _, _) | (Some(_), _, Some(_), _) => {
                return Err(err("run", "`run` and `create`/`start` exclude each other".into()));
            }
            (Some(run), None, None, _) => OciMode::Run(run),
            (None, Some(create), Some(start), Some(query)) => OciMode::CreateStart { create, start, query },
            (None, Some(_), _, _) | (None, _, Some(_), _) => {
                return Err(err("create", "`create` needs `start` and `query` (and `kill` and `delete`)".into()));
            }
            (None, None, None, _) => match &preset {
                Some((mode, _, _)) => mode.clone(),
                None => return Err(err("run", "set `runtime = \"crun\"` (or \"runc\"), or the `run` pattern".into())),
            },
        };
        let kill = self.kill.or_else(|| preset.as_ref().map(|p| p.1.to_owned()));
        let delete = self.delete.or_else(|| preset.as_ref().map(|p| p.2.to_owned()));
        if matches!(mode, OciMode::CreateStart { .. }) && (kill.is_none() || delete.is_none()) {
            return Err(err("kill", "`create` and `start` need `kill` and `delete`".into()));
        }
        let mount_spool_dir = self.mount_spool_dir.unwrap_or_else(|| DEFAULT_MOUNT_SPOOL_DIR.to_owned());
        if !mount_spool_dir.starts_with('/') {
            return Err(err("mount_spool_dir", "an absolute path inside the container".into()));
        }
        Ok(OciConfig { mode, kill, delete, create_env_file: self.create_env_file.unwrap_or(false), mount_spool_dir })
    }
}

/// A pattern is bounded and uses only [`PATTERN_TOKENS`].
fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.len() > MAX_PATTERN {
        return Err(format!("longer than {MAX_PATTERN} bytes"));
    }
    if pattern.trim().is_empty() {
        return Err("empty".into());
    }
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        match chars.next() {
            Some(token) if token == '%' || PATTERN_TOKENS.contains(token) => {}
            Some(token) => {
                return Err(format!("unknown token %{token} (known: %% %@ %b %e %j %m %n %p %r %s %t %u %U)"));
            }
            None => return Err("ends with a lone %".into()),
        }
    }
    Ok(())
}

/// Fills in a pattern's tokens; `value(token)` gives each token's text, already quoted for the
/// shell where it needs it.
pub fn expand(pattern: &str, value: impl Fn(char) -> String) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(token) => out.push_str(&value(token)),
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(runtime: Option<&str>) -> RawOci {
        RawOci { runtime: runtime.map(str::to_owned), ..RawOci::default() }
    }

    #[test]
    fn a_preset_fills_in_rootless_patterns_and_patterns_written_out_win() {
        let crun = raw(Some("crun")).validate().unwrap();
        assert_eq!(
            crun.mode,
            OciMode::Run("crun --rootless=true --cgroup-manager=disabled run --bundle %b %n.%u.%j.%s.%t".into())
        );
        assert_eq!(crun.mount_spool_dir, DEFAULT_MOUNT_SPOOL_DIR);
        let runc = RawOci { run: Some("runc run -b %b x%t".into()), ..raw(Some("runc")) }.validate().unwrap();
        assert_eq!(runc.mode, OciMode::Run("runc run -b %b x%t".into()));
        assert_eq!(runc.delete.as_deref(), Some("runc --rootless=true delete --force %n.%u.%j.%s.%t"));
    }

    #[test]
    fn bad_sections_are_refused_with_the_key() {
        let refused = |raw: RawOci| raw.validate().unwrap_err();
        assert_eq!(refused(raw(Some("docker"))).0, "oci.runtime");
        assert_eq!(refused(raw(None)).0, "oci.run");
        let both = RawOci { run: Some("a".into()), create: Some("b".into()), ..RawOci::default() };
        assert!(refused(both).1.contains("exclude"));
        let half = RawOci { create: Some("c %b".into()), start: Some("s".into()), ..RawOci::default() };
        assert_eq!(refused(half).0, "oci.create");
        let unknown = RawOci { run: Some("crun run %q".into()), ..RawOci::default() };
        assert_eq!(
            refused(unknown),
            ("oci.run".into(), "unknown token %q (known: %% %@ %b %e %j %m %n %p %r %s %t %u %U)".into())
        );
        let long = RawOci { run: Some("x".repeat(MAX_PATTERN + 1)), ..RawOci::default() };
        assert!(refused(long).1.contains("longer"));
        let relative = RawOci { mount_spool_dir: Some("run".into()), ..raw(Some("crun")) };
        assert_eq!(refused(relative).0, "oci.mount_spool_dir");
        let full = RawOci {
            create: Some("c %b".into()),
            start: Some("s".into()),
            query: Some("q".into()),
            kill: Some("k".into()),
            delete: Some("d".into()),
            ..RawOci::default()
        };
        assert!(matches!(full.validate().unwrap().mode, OciMode::CreateStart { .. }));
    }

    #[test]
    fn tokens_expand_and_percent_stays() {
        let out = expand("run %b %j.%s %%x", |t| match t {
            'b' => "/b".into(),
            'j' => "7".into(),
            's' => "batch".into(),
            _ => "?".into(),
        });
        assert_eq!(out, "run /b 7.batch %x");
    }
}
