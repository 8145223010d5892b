//! The few facts the supervisor reads from `/proc`: a process's parent, state and start time
//! (`/proc/<pid>/stat`), and the set of its descendants, which is what "the job's processes" means
//! until job cgroups exist.

use std::collections::HashMap;

/// The fields of `/proc/<pid>/stat` the supervisor uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z`, ….
    pub(super) state: char,
    /// Field 4.
    pub(super) ppid: i32,
    /// Field 22: clock ticks after boot; with the pid it names one process, even after pid reuse.
    pub(super) start_time: u64,
    /// Field 20.
    pub(super) n_threads: u64,
}

impl ProcStat {
    /// Whether the process still runs (a zombie has ended and waits to be reaped).
    pub(super) fn is_running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Reads `/proc/<pid>/stat`; `None` when the process does not exist (or the file is unreadable).
pub(super) fn stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses a `stat` line. The command name (field 2) is parenthesised and may itself hold spaces
/// and parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<ProcStat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_ascii_whitespace().collect();
    // `fields[0]` is field 3.
    let field = |n: usize| fields.get(n - 3).copied();
    Some(ProcStat {
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        n_threads: field(20)?.parse().ok()?,
        start_time: field(22)?.parse().ok()?,
    })
}

/// Every living process below `root` in the process tree (not `root` itself), parents before
/// children. A snapshot: a process forked after the scan is missed, so callers that must leave
/// nothing behind scan again.
pub(super) fn descendants(root: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        if let Some(proc_stat) = stat(pid).filter(ProcStat::is_running) {
            children.entry(proc_stat.ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut next_idx = 0;
    found.extend(children.remove(&root).unwrap_or_default());
    while next_idx < found.len() {
        let pid = found[next_idx];
        next_idx += 1;
        found.extend(children.remove(&pid).unwrap_or_default());
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let line = "4242 (my (odd) cmd) S 17 4242 4242 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 987654 \
                    2260992 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_stat(line), Some(ProcStat { state: 'S', ppid: 17, start_time: 987654, n_threads: 1 }));
        assert_eq!(parse_stat("12 (zombie) Z 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn reads_this_process() {
        let me = stat(i32::try_from(std::process::id()).unwrap()).unwrap();
        assert!(me.is_running());
        assert_eq!(me.ppid, nix::unistd::getppid().as_raw());
        assert!(me.n_threads >= 1);
    }

    #[test]
    fn finds_grandchildren() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        let child_pid = i32::try_from(child.id()).unwrap();
        let below_me = descendants(me);
        assert!(below_me.contains(&child_pid) && below_me.contains(&grandchild), "{below_me:?}");
        assert_eq!(descendants(child_pid), vec![grandchild]);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(grandchild), nix::sys::signal::Signal::SIGKILL).unwrap();
        child.wait().unwrap();
    }
}
