//! The `-o`/`-O` column builder squeue and sinfo share. Each command has a table of
//! [`FieldDef`]s (its `%` letters, `-O` names and headers); the format text becomes
//! [`Column`]s of that command's field type, and the command only says what each field's value
//! is and whether it may be cut to its width.

use super::format;

/// One row of a command's field table: `-o` letter, `-O` name, header, field.
pub(crate) struct FieldDef<F> {
    pub(crate) letter: Option<char>,
    pub(crate) name: &'static str,
    pub(crate) header: &'static str,
    pub(crate) field: F,
}

pub(crate) const fn def<F>(letter: Option<char>, name: &'static str, header: &'static str, field: F) -> FieldDef<F> {
    FieldDef { letter, name, header, field }
}

/// One output column: the literal text around it, the field, its header and width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Column<F> {
    pub(crate) prefix: String,
    pub(crate) field: F,
    /// The `%` letter it came from (or its field's letter for `-O`), for sorting and step rows.
    pub(crate) letter: Option<char>,
    pub(crate) header: String,
    /// `None`: the value's own width.
    pub(crate) width: Option<usize>,
    pub(crate) right: bool,
    pub(crate) suffix: String,
}

impl<F> Column<F> {
    /// Appends `value` padded to the column's width; `cut` truncates a longer value.
    pub(crate) fn push(&self, out: &mut String, value: &str, cut: bool) {
        if !self.prefix.is_empty() {
            out.push_str(&self.prefix);
        }
        format::push_cell(out, value, self.width, self.right, cut);
        if !self.suffix.is_empty() {
            out.push_str(&self.suffix);
        }
    }

    /// Appends the column's header (headers are always cut to the width).
    pub(crate) fn push_header(&self, out: &mut String) {
        self.push(out, &self.header, true);
    }
}

/// Parses a `-o` format; letters the table does not have become `unknown` columns with an empty
/// header.
pub(crate) fn parse_percent<F: Copy>(text: &str, fields: &[FieldDef<F>], unknown: F) -> Vec<Column<F>> {
    format::parse_percent(text)
        .into_iter()
        .map(|item| {
            let found = fields.iter().find(|f| f.letter == Some(item.letter));
            Column {
                prefix: item.prefix,
                field: found.map_or(unknown, |f| f.field),
                letter: Some(item.letter),
                header: found.map_or("", |f| f.header).to_owned(),
                width: item.width,
                right: item.right,
                suffix: item.suffix,
            }
        })
        .collect()
}

/// Parses a `-O` format; returns the columns and the names the table does not have (kept as
/// `unknown` columns headed by the upper-cased name, so positions stay where a client expects).
pub(crate) fn parse_named<F: Copy>(text: &str, fields: &[FieldDef<F>], unknown: F) -> (Vec<Column<F>>, Vec<String>) {
    let mut missing = Vec::new();
    let columns = format::parse_named(text)
        .into_iter()
        .map(|item| {
            let found = fields.iter().find(|f| f.name.eq_ignore_ascii_case(&item.name));
            if found.is_none() {
                missing.push(item.name.clone());
            }
            Column {
                prefix: String::new(),
                field: found.map_or(unknown, |f| f.field),
                letter: found.and_then(|f| f.letter),
                header: found.map_or_else(|| item.name.to_ascii_uppercase(), |f| f.header.to_owned()),
                width: item.width,
                right: item.right,
                suffix: item.suffix,
            }
        })
        .collect();
    (columns, missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: &[FieldDef<u8>] = &[def(Some('a'), "Alpha", "ALPHA", 1), def(None, "Beta", "BETA", 2)];

    #[test]
    fn percent_and_named_formats() {
        let columns = parse_percent(">%5a|%.3z<", FIELDS, 0);
        let shown: Vec<_> =
            columns.iter().map(|c| (c.prefix.as_str(), c.field, c.header.as_str(), c.width, c.right)).collect();
        assert_eq!(shown, [(">", 1, "ALPHA", Some(5), false), ("", 0, "", Some(3), true)]);
        let mut out = String::new();
        columns[0].push(&mut out, "abcdefg", true);
        columns[1].push(&mut out, "x", false);
        assert_eq!(out, ">abcde|  x<");
        let (columns, missing) = parse_named("beta:.4,gamma", FIELDS, 0);
        let shown: Vec<_> = columns.iter().map(|c| (c.field, c.header.as_str(), c.width, c.right)).collect();
        assert_eq!(shown, [(2, "BETA", Some(4), true), (0, "GAMMA", Some(20), false)]);
        assert_eq!(missing, ["gamma"]);
    }
}
