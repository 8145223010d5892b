//! The step runner's own messages to srun (Slurm's slurmstepd under `srun --slurmd-debug`): each
//! message at or below the step's level ([`drover_shared::log_level::step_level`] of the
//! launch's increment, so never above `debug2`) goes to srun as a line of the node's first task's
//! stderr, `slurmstepd: debug:  …` as Slurm writes them. With no `--slurmd-debug` the level is
//! `error`, and the runner's errors reach srun as they always did (their own lines); nothing
//! here is sent.

use drover_shared::log_level::{self, DEBUG, DEBUG2, ERROR, VERBOSE};
use std::fmt::Display;

/// Where the lines go: the node's first task's stderr on srun's connection.
pub(super) type LineSink = Box<dyn Fn(&[u8])>;

/// The runner's log to srun.
pub(super) struct StepLog {
    level: u8,
    sink: Option<LineSink>,
}

impl StepLog {
    /// A log at the level `increment` above `error` gives (capped), writing to `sink`; `None`
    /// writes nowhere (a node with no task of the step).
    pub(super) fn new(increment: u8, sink: Option<LineSink>) -> StepLog {
        StepLog { level: log_level::step_level(increment), sink }
    }

    /// The line for a message at `level`, when the log's level lets it through.
    fn line(&self, level: u8, message: &dyn Display) -> Option<String> {
        (level > ERROR && level <= self.level)
            .then(|| format!("slurmstepd: {}{message}\n", log_level::level_prefix(level)))
    }

    fn log(&self, level: u8, message: &dyn Display) {
        if let (Some(line), Some(sink)) = (self.line(level, message), &self.sink) {
            sink(line.as_bytes());
        }
    }

    /// The first line Slurm's step daemon writes at `verbose`: where its messages go and from
    /// which level (the node's log keeps the runner's errors; it writes to no syslog).
    pub(super) fn levels(&self) {
        let stderr = log_level::level_name(self.level);
        self.verbose(format_args!("debug levels are stderr='{stderr}', logfile='error', syslog='quiet'"));
    }

    pub(super) fn verbose(&self, message: impl Display) {
        self.log(VERBOSE, &message);
    }

    pub(super) fn debug(&self, message: impl Display) {
        self.log(DEBUG, &message);
    }

    pub(super) fn debug2(&self, message: impl Display) {
        self.log(DEBUG2, &message);
    }
}

/// A task's wait status as the runner's messages say it.
pub(super) fn describe_status(status: i32) -> String {
    let (code, signal) = drover_shared::job::WaitStatus(status).parts();
    if signal != 0 { format!("killed by signal {signal}") } else { format!("exited with code {code}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn captured(increment: u8) -> (StepLog, Arc<Mutex<String>>) {
        let lines = Arc::new(Mutex::new(String::new()));
        let into = lines.clone();
        let sink: LineSink = Box::new(move |bytes| into.lock().unwrap().push_str(&String::from_utf8_lossy(bytes)));
        (StepLog::new(increment, Some(sink)), lines)
    }

    #[test]
    fn messages_reach_srun_up_to_the_step_s_level_with_slurm_s_prefixes() {
        // --slurmd-debug=error: the step logs at verbose.
        let (log, lines) = captured(2);
        log.levels();
        log.debug("hidden");
        assert_eq!(
            *lines.lock().unwrap(),
            "slurmstepd: debug levels are stderr='verbose', logfile='error', syslog='quiet'\n"
        );
        // =info: debug, and not debug2.
        let (log, lines) = captured(3);
        log.levels();
        log.debug(format_args!("task {} forked", 0));
        log.debug2("hidden");
        let text = lines.lock().unwrap().clone();
        assert!(text.contains("stderr='debug'") && text.ends_with("slurmstepd: debug:  task 0 forked\n"), "{text}");
        assert!(!text.contains("hidden"), "{text}");
        // =verbose: debug2; and nothing a launch carries goes beyond it.
        for increment in [4, 5, 200] {
            let (log, lines) = captured(increment);
            log.levels();
            log.debug2("gate open");
            let text = lines.lock().unwrap().clone();
            assert!(text.contains("stderr='debug2'") && text.ends_with("slurmstepd: debug2: gate open\n"), "{text}");
        }
        // No --slurmd-debug: nothing.
        let (log, lines) = captured(0);
        log.levels();
        log.debug("x");
        log.debug2("y");
        assert_eq!(*lines.lock().unwrap(), "");
    }

    #[test]
    fn statuses_in_words() {
        assert_eq!(describe_status(3 << 8), "exited with code 3");
        assert_eq!(describe_status(9), "killed by signal 9");
    }
}
