//! squeue's job lines, built one record at a time. Each record that passes the filters is
//! rendered straight into one text buffer and its sort key encoded next to it (see
//! [`super::order`]); sorting then moves only positions. The records themselves need not be
//! kept: squeue over 100,000 jobs holds their lines and keys, a few megabytes, instead of
//! 100,000 decoded records.

use super::{RenderOptions, push_header, write_value};
use crate::query::format;
use drover_shared::UnixTime;
use drover_shared::job::JobInfo;
use drover_shared::proto::client::JobLine;
use drover_shared::queue_lines::order;
use std::io::Write as _;
use std::ops::Range;

/// One listed job: where its sort key and its line are.
struct Row {
    key: Range<usize>,
    line: Range<usize>,
}

/// The lines of a listing in the making.
pub(crate) struct Listing<'o> {
    options: &'o RenderOptions,
    now: UnixTime,
    lines: String,
    keys: Vec<u8>,
    rows: Vec<Row>,
    /// One cell's text before it is padded into its column.
    cell: String,
}

impl<'o> Listing<'o> {
    /// An empty listing with room for about `rows` lines.
    pub(crate) fn new(options: &'o RenderOptions, now: UnixTime, rows: usize) -> Listing<'o> {
        Listing {
            options,
            now,
            lines: String::with_capacity(rows.saturating_mul(64)),
            keys: Vec::new(),
            rows: Vec::with_capacity(rows),
            cell: String::new(),
        }
    }

    /// Adds `job`'s line (the caller has applied the filters).
    pub(crate) fn push(&mut self, job: &JobInfo) {
        let line_start = self.lines.len();
        for column in &self.options.columns {
            self.cell.clear();
            write_value(&mut self.cell, column.field, job, self.now, self.options.tz);
            column.push(&mut self.lines, &self.cell, column.field.cuts());
        }
        self.lines.push('\n');
        let key_start = self.keys.len();
        order::encode(&self.options.sort, job, self.now, &mut self.keys);
        self.rows.push(Row { key: key_start..self.keys.len(), line: line_start..self.lines.len() });
    }

    /// The whole text, as [`Listing::write_to`] writes it.
    #[cfg(test)]
    pub(crate) fn finish(self) -> String {
        let mut out = Vec::new();
        self.write_to(&mut out).expect("writing to memory cannot fail");
        String::from_utf8(out).expect("the listing is text")
    }

    /// Writes the whole text to `out`: the date line and header when asked for, then the lines
    /// in sort order (ties keep the order the records came in).
    pub(crate) fn write_to(mut self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        write_head(self.options, self.now, out)?;
        if self.options.sort.is_empty() {
            return out.write_all(self.lines.as_bytes());
        }
        let keys = &self.keys;
        self.rows.sort_by(|a, b| keys[a.key.clone()].cmp(&keys[b.key.clone()]));
        let lines = self.lines.as_bytes();
        write_rows(self.rows.iter().map(|row| &lines[row.line.clone()]), out)
    }
}

/// The date line and header, when the options ask for them.
fn write_head(options: &RenderOptions, now: UnixTime, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut head = String::new();
    if options.date_line {
        head.push_str(&format::date_line(now, options.tz));
        head.push('\n');
    }
    if options.header {
        push_header(&mut head, &options.columns);
    }
    out.write_all(head.as_bytes())
}

fn write_rows<'a>(lines: impl Iterator<Item = &'a [u8]>, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
    for line in lines {
        out.write_all(line)?;
    }
    out.flush()
}

/// Writes a listing ctld rendered (`Response::JobLines` rows): the date line and header, then
/// the lines sorted by their keys (ties keep ctld's order, job id order).
pub(crate) fn write_rendered(
    options: &RenderOptions,
    now: UnixTime,
    mut rows: Vec<JobLine<'_>>,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    write_head(options, now, out)?;
    if !options.sort.is_empty() {
        rows.sort_by(|a, b| a.key.cmp(b.key));
    }
    write_rows(rows.iter().map(|row| row.line), out)
}
