//! The `--export` grammar that sbatch, srun and salloc check their values against: `ALL` (the
//! default), `NONE`, or a comma list `[ALL,]VAR[=value][,…]`. `VAR` alone takes the submitter's
//! value, `VAR=value` sets one. A list item that is not a variable name continues the value before
//! it, so `--export=PATHS=/a,/b` keeps the comma. What a parsed value lets through into a batch
//! job is sbatch's business (`crate::sbatch::environment`).

use drover_shared::grammar::ValueError;

/// A parsed `--export` value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExportSpec {
    /// Whether the whole submit environment travels.
    pub(crate) all: bool,
    /// Listed variables, with an explicit value or `None` for "the submitter's".
    pub(crate) vars: Vec<(String, Option<String>)>,
}

/// Whether `name` can be an environment variable name.
fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl ExportSpec {
    /// Parses an `--export` value.
    pub(crate) fn parse(text: &str) -> Result<ExportSpec, ValueError> {
        let err = || ValueError {
            what: "--export value",
            value: text.to_owned(),
            expected: "ALL, NONE or [ALL,]VAR[=value][,...]",
        };
        let trimmed = text.trim();
        if trimmed.eq_ignore_ascii_case("NONE") {
            return Ok(ExportSpec { all: false, vars: Vec::new() });
        }
        let mut spec = ExportSpec::default();
        for item in trimmed.split(',') {
            if item.eq_ignore_ascii_case("ALL") {
                spec.all = true;
            } else if let Some((name, value)) = item.split_once('=').filter(|(name, _)| is_var_name(name)) {
                spec.vars.push((name.to_owned(), Some(value.to_owned())));
            } else if is_var_name(item) {
                spec.vars.push((item.to_owned(), None));
            } else if let Some((_, Some(value))) = spec.vars.last_mut() {
                value.push(',');
                value.push_str(item);
            } else {
                return Err(err());
            }
        }
        Ok(spec)
    }
}
