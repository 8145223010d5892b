//! squeue's job lines: the fields a column can show, each field's text for a job, column padding
//! and the byte sort keys. `squeue` renders with it, and so does ctld for the formats it can
//! render alone ([`Field::needs_client`] is false for every column): a poller then receives
//! finished lines, cached per snapshot chunk, instead of records to decode and format.
//!
//! Rule: [`Field`] and [`LineFormat`] travel in `Request::QueryJobLines`, so they change
//! append-only like every protocol type.

pub mod order;
mod value;

pub use value::{expected_end, value};

use serde::{Deserialize, Serialize};

/// What a squeue column shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Field {
    JobId,
    JobIdRaw,
    ArrayJobId,
    ArrayTaskId,
    Name,
    User,
    Uid,
    Account,
    Partition,
    Qos,
    StateCompact,
    State,
    TimeUsed,
    TimeLimit,
    TimeLeft,
    NumNodes,
    NumCpus,
    NumTasks,
    TresPerNode,
    TresAlloc,
    MinMemory,
    NodeList,
    ReasonList,
    Reason,
    Priority,
    PriorityLong,
    SubmitTime,
    StartTime,
    EndTime,
    EligibleTime,
    Dependency,
    Comment,
    Command,
    WorkDir,
    Stdout,
    Stderr,
    Stdin,
    Nice,
    MinCpus,
    CpusPerTask,
    MinTmpDisk,
    Features,
    Group,
    Gid,
    OverSubscribe,
    ReqNodes,
    ExcNodes,
    Reservation,
    BatchHost,
    Sct,
    SchedNodes,
    Wildcard,
    Contiguous,
    Null,
    Requeue,
    RestartCount,
    ExitCode,
    BatchFlag,
    NotAvailable,
    /// A letter or name Drover does not know: an empty column.
    Unknown,
}

impl Field {
    /// Node lists and `%R` are padded but never cut.
    pub fn cuts(self) -> bool {
        !matches!(self, Field::NodeList | Field::ReasonList)
    }

    /// Whether only the client can render this field: timestamps (in the client's time zone) and
    /// the TRES and memory figures the client derives.
    pub fn needs_client(self) -> bool {
        matches!(
            self,
            Field::SubmitTime
                | Field::StartTime
                | Field::EndTime
                | Field::EligibleTime
                | Field::TresAlloc
                | Field::MinMemory
        )
    }

    /// Whether the field's text moves with the clock (for a job that has started).
    pub fn uses_clock(self) -> bool {
        matches!(self, Field::TimeUsed | Field::TimeLeft)
    }
}

/// A sort key: a squeue format letter and its direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SortKey {
    pub letter: char,
    pub descending: bool,
}

/// One column as ctld renders it: the literal text around the field, the field, its width.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LineColumn {
    pub prefix: String,
    pub field: Field,
    /// `None`: the value's own width.
    pub width: Option<u32>,
    pub right: bool,
    pub suffix: String,
}

impl LineColumn {
    /// Appends `value` padded to the column's width; `cut` truncates a longer value.
    pub fn push(&self, out: &mut String, value: &str) {
        if !self.prefix.is_empty() {
            out.push_str(&self.prefix);
        }
        push_cell(out, value, self.width.map(|w| w as usize), self.right, self.field.cuts());
        if !self.suffix.is_empty() {
            out.push_str(&self.suffix);
        }
    }
}

/// A whole line format with its sort keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LineFormat {
    pub columns: Vec<LineColumn>,
    pub sort: Vec<SortKey>,
}

impl LineFormat {
    /// Refuses a format beyond what any squeue command line needs (ctld renders it for every
    /// job, so its size is bounded like every other request's).
    pub fn check(&self) -> Result<(), String> {
        let text_ok = |c: &LineColumn| c.prefix.len() <= 1024 && c.suffix.len() <= 1024;
        if self.columns.len() > 256 || self.sort.len() > 64 {
            Err(format!("a format of {} columns and {} sort keys is too large", self.columns.len(), self.sort.len()))
        } else if !self.columns.iter().all(|c| text_ok(c) && c.width.is_none_or(|w| w <= 4096)) {
            Err("a format column is too wide".into())
        } else if !self.server_renders() {
            Err("this format has fields only the client renders".into())
        } else {
            Ok(())
        }
    }

    /// Whether ctld can render every column.
    pub fn server_renders(&self) -> bool {
        self.columns.iter().all(|c| !c.field.needs_client())
    }

    /// Whether a started job's line or key moves with the clock.
    pub fn uses_clock(&self) -> bool {
        self.columns.iter().any(|c| c.field.uses_clock()) || self.sort.iter().any(|k| k.letter == 'M')
    }
}

/// Appends `job`'s line (columns and newline) to `line` and its sort key to `key`; `cell` is
/// scratch space. Every column must be one ctld renders ([`LineFormat::server_renders`]); a
/// column that is not comes out empty.
pub fn render_line(
    format: &LineFormat,
    job: &crate::job::JobInfo,
    now: crate::UnixTime,
    line: &mut String,
    key: &mut Vec<u8>,
    cell: &mut String,
) {
    for column in &format.columns {
        cell.clear();
        value(cell, column.field, job, now);
        column.push(line, cell);
    }
    line.push('\n');
    order::encode(&format.sort, job, now, key);
}

/// Appends `value` to `out` in a column: padded to `width` (right-justified when `right`), and cut
/// to it when `cut` (squeue cuts every field but node lists; `-O` fields are cut too). Control
/// characters come out as `?` ([`crate::text::printable`]): a stored job name cannot forge a row.
pub fn push_cell(out: &mut String, value: &str, width: Option<usize>, right: bool, cut: bool) {
    let value = &*crate::text::printable(value);
    let Some(width) = width else {
        out.push_str(value);
        return;
    };
    let len = if value.is_ascii() { value.len() } else { value.chars().count() };
    if len >= width {
        if cut {
            out.extend(value.chars().take(width));
        } else {
            out.push_str(value);
        }
        return;
    }
    let pad = width - len;
    if right {
        push_spaces(out, pad);
        out.push_str(value);
    } else {
        out.push_str(value);
        push_spaces(out, pad);
    }
}

/// Appends `count` spaces (a slice at a time: padding is most of a wide listing's bytes).
fn push_spaces(out: &mut String, mut count: usize) {
    const SPACES: &str = "                                                                ";
    while count > 0 {
        let step = count.min(SPACES.len());
        out.push_str(&SPACES[..step]);
        count -= step;
    }
}

/// `M:SS`, `H:MM:SS` or `D-HH:MM:SS` (squeue's durations), appended to `out`; `INVALID` below 0.
pub fn clock_into(out: &mut String, secs: i64) {
    use std::fmt::Write as _;
    if secs < 0 {
        out.push_str("INVALID");
        return;
    }
    let (days, hours, minutes, seconds) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // `fmt::Write` for `String` cannot fail.
    let _ = if days > 0 {
        write!(out, "{days}-{hours:02}:{minutes:02}:{seconds:02}")
    } else if hours > 0 {
        write!(out, "{hours}:{minutes:02}:{seconds:02}")
    } else {
        write!(out, "{minutes}:{seconds:02}")
    };
}

/// A job's text or `(null)` when it has none, as squeue and scontrol print unset strings.
pub fn or_null(value: Option<&str>) -> &str {
    match value {
        Some(text) if !text.is_empty() => text,
        _ => "(null)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(field: Field, width: Option<u32>) -> LineColumn {
        LineColumn { prefix: String::new(), field, width, right: false, suffix: " ".into() }
    }

    /// ctld renders what a squeue command line can ask for and refuses the rest, saying why.
    #[test]
    fn formats_beyond_a_command_line_are_refused() {
        let fine = LineFormat { columns: vec![column(Field::JobId, Some(18))], sort: Vec::new() };
        assert_eq!(fine.check(), Ok(()));
        let wide = LineFormat { columns: vec![column(Field::Name, Some(1_000_000))], sort: Vec::new() };
        assert!(wide.check().unwrap_err().contains("too wide"));
        let many = LineFormat { columns: vec![column(Field::Name, None); 257], sort: Vec::new() };
        assert!(many.check().unwrap_err().contains("257 columns"));
        let long_text = LineColumn { prefix: "x".repeat(1025), ..column(Field::Name, None) };
        assert!(LineFormat { columns: vec![long_text], sort: Vec::new() }.check().is_err());
        let local_time = LineFormat { columns: vec![column(Field::SubmitTime, None)], sort: Vec::new() };
        assert!(local_time.check().unwrap_err().contains("only the client renders"));
    }
}
