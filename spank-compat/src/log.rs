//! Where plugin log lines (`slurm_info`, `slurm_error`, …, `slurm_spank_log`) and the host's own
//! SPANK messages go: a process-wide sink, stderr by default.

use std::sync::Mutex;

/// The logger a line came through, most important first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// `slurm_spank_log`: user-visible, no prefix.
    SpankLog = 0,
    /// `slurm_error`: prefixed `error: `.
    Error = 1,
    /// `slurm_info`
    Info = 2,
    /// `slurm_verbose`
    Verbose = 3,
    /// `slurm_debug`
    Debug = 4,
    /// `slurm_debug2`
    Debug2 = 5,
    /// `slurm_debug3`
    Debug3 = 6,
}

impl LogLevel {
    fn from_code(code: i32) -> LogLevel {
        match code {
            0 => LogLevel::SpankLog,
            1 => LogLevel::Error,
            2 => LogLevel::Info,
            3 => LogLevel::Verbose,
            4 => LogLevel::Debug,
            5 => LogLevel::Debug2,
            _ => LogLevel::Debug3,
        }
    }

    /// The line as Slurm prints it.
    pub fn format(self, message: &str) -> String {
        match self {
            LogLevel::Error => format!("error: {message}"),
            LogLevel::Debug | LogLevel::Debug2 | LogLevel::Debug3 => format!("debug: {message}"),
            _ => message.to_owned(),
        }
    }
}

type Sink = Box<dyn Fn(LogLevel, &str) + Send>;

/// `None`: stderr, levels up to `Info`.
static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// Sends every SPANK log line to `sink` instead of stderr (the supervisor's log, a test's buffer).
pub fn set_log_sink(sink: impl Fn(LogLevel, &str) + Send + 'static) {
    *SINK.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Box::new(sink));
}

fn emit(level: LogLevel, message: &str) {
    let sink = SINK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match sink.as_ref() {
        Some(sink) => sink(level, message),
        None if level <= LogLevel::Info => eprintln!("{}", level.format(message)),
        None => {}
    }
}

/// Sends one line through the sink, as a plugin's logger would (a host's message that belongs
/// with the plugins' own, such as the failure that ends a task).
pub fn log_line(level: LogLevel, message: &str) {
    emit(level, message);
}

/// A message of the host's own.
pub(crate) fn host_log(level: LogLevel, message: &str) {
    emit(level, message);
}

/// Called by the C shim's loggers with the formatted line.
///
/// # Safety
/// `message` is NULL or a valid C string.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn drover_spank_log(level: i32, message: *const std::ffi::c_char) {
    if message.is_null() {
        return;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's promise.
    let text = unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy();
    emit(LogLevel::from_code(level), &text);
}
