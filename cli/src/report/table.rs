//! A report table and its three renderings: aligned text, CSV (RFC 4180 quoting) and JSON (an
//! array of objects; numeric columns as numbers, empty numeric cells as `null`).

use std::fmt::Write as _;

/// Column headers, which columns are numeric, and the rows (already formatted).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Table {
    pub(crate) headers: Vec<String>,
    pub(crate) numeric: Vec<bool>,
    pub(crate) rows: Vec<Vec<String>>,
}

/// How to print a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    Text,
    Csv,
    Json,
}

impl Table {
    /// A table with these `(header, numeric)` columns.
    pub(crate) fn new(columns: &[(&str, bool)]) -> Table {
        Table {
            headers: columns.iter().map(|(h, _)| (*h).to_owned()).collect(),
            numeric: columns.iter().map(|(_, n)| *n).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn render(&self, output: Output) -> String {
        match output {
            Output::Text => self.text(),
            Output::Csv => self.csv(),
            Output::Json => self.json(),
        }
    }

    fn text(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.headers[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if self.numeric[i] { format!("{c:>w$}", w = widths[i]) } else { format!("{c:<w$}", w = widths[i]) }
                })
                .collect();
            let _ = writeln!(out, "{}", parts.join("  ").trim_end());
        };
        line(&mut out, &self.headers);
        line(&mut out, &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>());
        for row in &self.rows {
            line(&mut out, row);
        }
        out
    }

    fn csv(&self) -> String {
        let field = |f: &str| {
            if f.contains([',', '"', '\n', '\r']) { format!("\"{}\"", f.replace('"', "\"\"")) } else { f.to_owned() }
        };
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let _ = writeln!(out, "{}", row.iter().map(|c| field(c)).collect::<Vec<_>>().join(","));
        }
        out
    }

    fn json(&self) -> String {
        let mut out = String::from("[");
        for (n, row) in self.rows.iter().enumerate() {
            out.push_str(if n == 0 { "\n  {" } else { ",\n  {" });
            for (i, cell) in row.iter().enumerate() {
                let value = if self.numeric[i] {
                    if cell.is_empty() || cell == "-" {
                        "null".to_owned()
                    } else {
                        cell.trim_end_matches('%').to_owned()
                    }
                } else {
                    json_string(cell)
                };
                let _ = write!(out, "{}{}: {value}", if i == 0 { "" } else { ", " }, json_string(&self.headers[i]));
            }
            out.push('}');
        }
        out.push_str(if self.rows.is_empty() { "]\n" } else { "\n]\n" });
        out
    }
}

/// A JSON string literal.
pub(crate) fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_renderings() {
        let mut t = Table::new(&[("Team", false), ("GPUHours", true)]);
        t.rows.push(vec!["vision".into(), "1.50".into()]);
        t.rows.push(vec!["a,\"b\"".into(), "-".into()]);
        assert_eq!(
            t.render(Output::Text),
            "Team    GPUHours\n------  --------\nvision      1.50\na,\"b\"          -\n"
        );
        assert_eq!(t.render(Output::Csv), "Team,GPUHours\nvision,1.50\n\"a,\"\"b\"\"\",-\n");
        assert_eq!(
            t.render(Output::Json),
            "[\n  {\"Team\": \"vision\", \"GPUHours\": 1.50},\n  {\"Team\": \"a,\\\"b\\\"\", \"GPUHours\": null}\n]\n"
        );
    }
}
