//! srun's `--task-prolog` and `--task-epilog`: programs the user names, run by the step runner
//! as the job's user, in the step's working directory and cgroups, with the task's environment.
//! The prolog runs before each task; each line it prints may shape the task: `export NAME=VALUE`
//! sets a variable, `unset NAME` removes one, `print TEXT` becomes a line of the task's output.
//! The epilog runs after the tasks end. Both are meant to be short: a prolog is killed after
//! [`PROLOG_LIMIT`], the epilogs after [`EPILOG_LIMIT`], and whatever they left running in their
//! process group is killed when they end.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a task prolog may run.
pub(super) const PROLOG_LIMIT: Duration = Duration::from_secs(60);

/// The longest the task epilogs may run, together.
pub(super) const EPILOG_LIMIT: Duration = Duration::from_secs(5);

/// The most of a prolog's output that is read (the rest is ignored).
const MAX_PROLOG_OUTPUT: usize = 64 * 1024;

/// Who runs the scripts and where.
pub(super) struct ScriptUser<'a> {
    /// The job's user and group (`None`: the runner's own, when it is not root).
    pub(super) ids: Option<(u32, u32)>,
    pub(super) work_dir: &'a str,
}

/// What a prolog asked of its task.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct PrologOutcome {
    /// Lines for the task's stdout (`print`), each ending in a newline.
    pub(super) print: Vec<u8>,
}

fn command(program: &str, env: &[(String, String)], user: &ScriptUser<'_>) -> Command {
    let mut command = Command::new(program);
    command.env_clear().envs(env.iter().cloned()).current_dir(user.work_dir).process_group(0).stdin(Stdio::null());
    if let Some((uid, gid)) = user.ids {
        command.uid(uid).gid(gid);
    }
    command
}

/// Whether `child` has ended, without reaping it: while it is a zombie its pid, and so its
/// process group id, cannot be reused, so killing that group reaches only what it left.
fn ended(child: &Child) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let Ok(pid) = i32::try_from(child.id()) else { return true };
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    !matches!(waitid(Id::Pid(nix::unistd::Pid::from_raw(pid)), flags), Ok(WaitStatus::StillAlive))
}

/// Waits for `child` until `deadline`; then kills its process group (the script, if still
/// running, and whatever it left behind) before reaping it.
fn wait_until(child: &mut Child, deadline: Instant) {
    while !ended(child) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    let _ = child.wait();
}

/// Runs the prolog for one task and applies its lines to `env`. A prolog that cannot be started
/// is an error (the task does not run, as in Slurm).
pub(super) fn run_prolog(
    program: &str,
    env: &mut Vec<(String, String)>,
    user: &ScriptUser<'_>,
) -> std::io::Result<PrologOutcome> {
    let mut child = command(program, env, user).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    // Read without a thread (tasks are forked after this, and the runner forks them only while
    // it has a single thread): poll the pipe until it ends or the limit passes.
    let deadline = Instant::now() + PROLOG_LIMIT;
    let mut output = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        let mut stdout = std::fs::File::from(std::os::fd::OwnedFd::from(stdout));
        let mut buf = [0u8; 4096];
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let ready = drover_shared::proto::stepio::poll_readable(&[stdout.as_fd()], Some(left));
            if !ready.is_ok_and(|r| r.first().copied().unwrap_or(false)) {
                continue;
            }
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) if output.len() < MAX_PROLOG_OUTPUT => output.extend_from_slice(&buf[..n]),
                Ok(_) => {}
            }
        }
    }
    wait_until(&mut child, deadline.max(Instant::now() + Duration::from_secs(1)));
    Ok(apply_prolog_lines(&String::from_utf8_lossy(&output), env))
}

/// Applies a prolog's `export`, `unset` and `print` lines to `env`; other lines are ignored.
pub(super) fn apply_prolog_lines(output: &str, env: &mut Vec<(String, String)>) -> PrologOutcome {
    let mut outcome = PrologOutcome::default();
    for line in output.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("export ") {
            if let Some((name, value)) = rest.trim_start().split_once('=')
                && !name.is_empty()
            {
                env.retain(|(n, _)| n != name);
                env.push((name.to_owned(), value.to_owned()));
            }
        } else if let Some(name) = line.strip_prefix("unset ") {
            let name = name.trim();
            env.retain(|(n, _)| n != name);
        } else if let Some(text) = line.strip_prefix("print ") {
            outcome.print.extend_from_slice(text.as_bytes());
            outcome.print.push(b'\n');
        }
    }
    outcome
}

/// Runs the epilog once per ended task (all at once), each with its task's environment; waits
/// for them at most [`EPILOG_LIMIT`], then kills what is left.
pub(super) fn run_epilogs(program: &str, envs: &[Vec<(String, String)>], user: &ScriptUser<'_>) {
    let mut children: Vec<Child> = envs
        .iter()
        .filter_map(|env| command(program, env, user).stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok())
        .collect();
    let deadline = Instant::now() + EPILOG_LIMIT;
    for child in &mut children {
        wait_until(child, deadline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prolog_lines_shape_the_task() {
        let mut env = vec![("DISPLAY".to_owned(), ":0".to_owned()), ("KEEP".to_owned(), "1".to_owned())];
        let outcome =
            apply_prolog_lines("print HEADER\nexport TEST=prolog_qa\nunset DISPLAY\nnoise\nexport BAD\n", &mut env);
        assert_eq!(outcome.print, b"HEADER\n");
        assert_eq!(
            env,
            [("KEEP".to_owned(), "1".to_owned()), ("TEST".to_owned(), "prolog_qa".to_owned())],
            "export sets, unset removes, other lines change nothing"
        );
    }
}
