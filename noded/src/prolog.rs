//! Prolog, epilog and health check: admin programs noded runs as root. The supervisor runs a
//! job's prolog before the job and its epilog after it, with a fixed environment built from the
//! launch (`SLURM_*` job values, global GPU indices, `SLURM_SCRIPT_CONTEXT`, [`ADMIN_PATH`];
//! never the job's submitted variables) and the configured timeout; noded runs the health check
//! every `health_check_interval` seconds. Any failure drains the node: the supervisor leaves the
//! reason in the job directory (`drain`), noded sends it to ctld, and `sinfo -R` shows it. A
//! failed prolog also ends the job before it runs (`LaunchFailed`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The job-directory file carrying the node's prolog and epilog to the supervisor (postcard);
/// absent when the node has neither (every file a job directory holds costs an inode per job).
pub const SCRIPTS_FILE: &str = "prolog-epilog";
/// The job-directory file holding a drain reason (text).
pub const DRAIN_FILE: &str = "drain";
/// The `PATH` every program noded runs as root gets (prolog, epilog, health check): the system's
/// directories, never one a user or noded's own environment chose.
pub const ADMIN_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// How much of a failed program's output ends up in the reason.
const MAX_REASON: usize = 120;

/// The node's prolog and epilog, as noded hands them to a job's supervisor.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobScripts {
    pub prolog: Option<PathBuf>,
    pub epilog: Option<PathBuf>,
    pub timeout_seconds: u32,
}

impl JobScripts {
    /// Writes the file, unless there is neither a prolog nor an epilog: [`JobScripts::read`]
    /// then finds no file, which means the same.
    pub fn write(&self, job_dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        if self.prolog.is_none() && self.epilog.is_none() {
            return Ok(());
        }
        let bytes = postcard::to_stdvec(self).map_err(std::io::Error::other)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(job_dir.join(SCRIPTS_FILE))?;
        std::io::Write::write_all(&mut file, &bytes)
    }

    /// The job's scripts; none when noded wrote no file.
    pub fn read(job_dir: &Path) -> std::io::Result<JobScripts> {
        match std::fs::read(job_dir.join(SCRIPTS_FILE)) {
            Ok(bytes) => postcard::from_bytes(&bytes).map_err(std::io::Error::other),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(JobScripts::default()),
            Err(error) => Err(error),
        }
    }
}

/// Runs `program` with exactly `env` and no descriptor but its stdio, killing it after `timeout`; `Err` says how it failed,
/// with the start of what it printed.
pub fn run(program: &Path, env: &[(String, String)], timeout: Duration) -> Result<(), String> {
    let mut command = Command::new(program);
    crate::sys::exec::close_descriptors_at_exec(&mut command);
    let mut child = command
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("{} could not start: {error}", program.display()))?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} timed out after {}s", program.display(), timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => return Err(format!("{} could not be waited for: {error}", program.display())),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut output = String::new();
    for stream in [
        child.stderr.take().map(|s| Box::new(s) as Box<dyn Read>),
        child.stdout.take().map(|s| Box::new(s) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut text = String::new();
        let _ = stream.take(4096).read_to_string(&mut text);
        output.push_str(text.trim());
        if !output.is_empty() {
            break;
        }
    }
    let first_line = output.lines().next().unwrap_or("").chars().take(MAX_REASON).collect::<String>();
    let status = status.code().map_or_else(
        || format!("killed by signal {}", std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)),
        |code| format!("exit code {code}"),
    );
    Err(if first_line.is_empty() { status } else { format!("{status}: {first_line}") })
}

/// Leaves a drain reason for noded in the job directory.
pub fn write_drain(job_dir: &Path, reason: &str) {
    let _ = std::fs::write(job_dir.join(DRAIN_FILE), reason);
}

/// The drain reason a supervisor left, if any.
pub fn read_drain(job_dir: &Path) -> Option<String> {
    std::fs::read_to_string(job_dir.join(DRAIN_FILE))
        .ok()
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_say_how() {
        let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        assert_eq!(run(Path::new("/bin/true"), &env, Duration::from_secs(5)), Ok(()));
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("check");
        std::fs::write(&script, "#!/bin/sh\necho \"disk full on $DROVER_X\" >&2\nexit 3\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let mut env = env;
        env.push(("DROVER_X".into(), "/scratch".into()));
        assert_eq!(run(&script, &env, Duration::from_secs(5)), Err("exit code 3: disk full on /scratch".into()));
        let slow = dir.path().join("slow");
        std::fs::write(&slow, "#!/bin/sh\nsleep 5\n").unwrap();
        std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let error = run(&slow, &env, Duration::from_millis(200)).unwrap_err();
        assert!(error.ends_with("timed out after 0s"), "{error}");
    }
}
