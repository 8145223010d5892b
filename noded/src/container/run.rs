//! `drover-noded container --plan JSON -- ARGV`: runs one task in its container. It is started
//! by the supervisor or the step runner as the job's user, inside the job's cgroups, with the
//! task's environment. It writes the task's bundle into the task's spool directory and runs the
//! runtime's patterns through `/bin/sh`: `run` in its place (exec), or `create`, `start`, then
//! `query` until the container stopped, with `kill` on a signal and `delete` at the end.

use super::ContainerPlan;
use super::bundle::{MAX_CONFIG_JSON, TaskInputs, rewrite};
use drover_shared::config::oci::{OciMode, expand};
use drover_shared::text::io_reason;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The runtime's own `PATH`.
const RUNTIME_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How often `query` is asked whether a created container stopped.
const QUERY_EVERY: Duration = Duration::from_millis(200);

/// Runs the task; returns its exit code (this process execs the runtime in `run` mode).
pub fn main(plan_json: &str, argv: Vec<String>) -> i32 {
    match run(plan_json, argv) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("slurmstepd: error: container: {message}");
            1
        }
    }
}

fn run(plan_json: &str, mut argv: Vec<String>) -> Result<i32, String> {
    let plan: ContainerPlan = serde_json::from_str(plan_json).map_err(|e| format!("unreadable plan: {e}"))?;
    let task: u32 = std::env::var("SLURM_PROCID").ok().and_then(|t| t.parse().ok()).unwrap_or(0);
    let task_dir = plan.spool.join(format!("task{task}"));
    let io = |what: &str, path: &Path| {
        let what = what.to_owned();
        let path = path.to_owned();
        move |e: std::io::Error| format!("{what} {}: {}", path.display(), io_reason(&e))
    };
    match std::fs::remove_dir_all(&task_dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io("could not clear", &task_dir)(e)),
        _ => {}
    }
    std::fs::DirBuilder::new().mode(0o700).create(&task_dir).map_err(io("could not create", &task_dir))?;
    if let Some(script) = &plan.script {
        let copy = task_dir.join("script");
        std::fs::copy(script, &copy).map_err(io("could not copy the batch script to", &copy))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o500))
            .map_err(io("could not make executable", &copy))?;
        if let Some(first) = argv.first_mut() {
            *first = format!("{}/script", plan.oci.mount_spool_dir.trim_end_matches('/'));
        }
    }

    let config_path = plan.bundle.join("config.json");
    let config = read_config(&config_path)?;
    let env: Vec<(String, String)> = std::env::vars().collect();
    let inputs = TaskInputs {
        bundle: &plan.bundle,
        args: &argv,
        env: &env,
        spool: &task_dir,
        mount_spool_dir: &plan.oci.mount_spool_dir,
        devices: &plan.devices,
        uid: plan.uid,
        gid: plan.gid,
    };
    let config = rewrite(config, &inputs).map_err(|e| format!("{}: {e}", config_path.display()))?;
    let rootfs = config["root"]["path"].as_str().map(PathBuf::from).unwrap_or_default();
    let generated = task_dir.join("config.json");
    write_private(&generated, &serde_json::to_vec_pretty(&config).unwrap_or_default())
        .map_err(io("could not write", &generated))?;
    let env_file = task_dir.join("environment");
    if plan.oci.create_env_file {
        let text: String = env.iter().map(|(name, value)| format!("{name}={value}\n")).collect();
        write_private(&env_file, text.as_bytes()).map_err(io("could not write", &env_file))?;
    }
    let state = task_dir.join("run");
    std::fs::DirBuilder::new().mode(0o700).create(&state).map_err(io("could not create", &state))?;

    let pid = std::process::id().to_string();
    let value = |token: char| -> String {
        match token {
            '@' => argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "),
            'b' | 'm' => quote(&task_dir.to_string_lossy()),
            'e' => quote(&env_file.to_string_lossy()),
            'j' => plan.job_id.to_string(),
            'n' => quote(&plan.node),
            'p' => pid.clone(),
            'r' => quote(&rootfs.to_string_lossy()),
            's' => quote(&plan.step),
            't' => task.to_string(),
            'u' => quote(&plan.user),
            'U' => plan.uid.to_string(),
            _ => String::new(),
        }
    };
    let shell = |pattern: &str| {
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg(expand(pattern, value)).env_clear();
        command
            .env("PATH", RUNTIME_PATH)
            .env("USER", &plan.user)
            .env("LOGNAME", &plan.user)
            .env("XDG_RUNTIME_DIR", &state)
            .env("HOME", std::env::var_os("HOME").unwrap_or_else(|| "/".into()));
        command
    };
    match &plan.oci.mode {
        OciMode::Run(pattern) => {
            let error = shell(pattern).exec();
            Err(format!("could not run /bin/sh: {}", io_reason(&error)))
        }
        OciMode::CreateStart { create, start, query } => {
            let status = |mut command: Command| command.status().map(|s| s.code().unwrap_or(1)).unwrap_or(127);
            let code = status(shell(create));
            if code != 0 {
                return Ok(code);
            }
            let kill = plan.oci.kill.clone().map(|pattern| shell(&pattern));
            forward_signals(kill);
            let code = status(shell(start));
            if code == 0 {
                loop {
                    let output = shell(query).stdin(Stdio::null()).stderr(Stdio::null()).output();
                    let stopped = match output {
                        Ok(output) if output.status.success() => {
                            container_status(&output.stdout).is_none_or(|status| status == "stopped")
                        }
                        _ => true,
                    };
                    if stopped {
                        break;
                    }
                    std::thread::sleep(QUERY_EVERY);
                }
            }
            if let Some(delete) = &plan.oci.delete {
                let _ = shell(delete).stdin(Stdio::null()).status();
            }
            Ok(code)
        }
    }
}

/// The user's `config.json`, read as the user and bounded.
fn read_config(path: &Path) -> Result<serde_json::Value, String> {
    let file = std::fs::File::open(path)
        .map_err(|e| format!("could not read the bundle's {}: {}", path.display(), io_reason(&e)))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_JSON + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("could not read the bundle's {}: {}", path.display(), io_reason(&e)))?;
    if bytes.len() as u64 > MAX_CONFIG_JSON {
        return Err(format!("{} is larger than {MAX_CONFIG_JSON} bytes", path.display()));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("{} is not valid JSON: {e}", path.display()))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?.write_all(bytes)
}

/// `status` of an OCI runtime's `state` answer.
fn container_status(state: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(state).ok()?;
    value.get("status")?.as_str().map(str::to_owned)
}

/// A word for `/bin/sh`: as it is when it holds only safe characters, else single-quoted.
fn quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-./:=@,+%".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// In `create`/`start` mode the runtime's processes are not this process's children: a signal
/// sent to the task (scancel, the time limit's warning) runs the `kill` pattern.
fn forward_signals(kill: Option<Command>) {
    use nix::sys::signal::{SigSet, Signal};
    let Some(mut kill) = kill else { return };
    let mut set = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGUSR1, Signal::SIGUSR2] {
        set.add(signal);
    }
    if set.thread_block().is_err() {
        return;
    }
    let _ = std::thread::Builder::new().name("signals".into()).spawn(move || {
        while set.wait().is_ok() {
            let _ = kill.stdin(Stdio::null()).status();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_when_they_need_it() {
        assert_eq!(quote("/home/u/b"), "/home/u/b");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("$(x)"), "'$(x)'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn a_state_answer_gives_its_status() {
        assert_eq!(container_status(br#"{"ociVersion":"1.0","id":"x","status":"stopped"}"#), Some("stopped".into()));
        assert_eq!(container_status(b"not json"), None);
    }
}
