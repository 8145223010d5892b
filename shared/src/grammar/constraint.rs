//! `--constraint` (`-C`): node features a job needs. The forms Drover evaluates are a feature
//! name, `a&b` (both), `a|b` (either), and parentheses; `&` binds tighter than `|`. Each node is
//! checked on its own, so `a|b` may mix nodes with `a` and nodes with `b`. Slurm's matching OR
//! (`[a|b]`: every node of the job has the same alternative) parses as a whole constraint; the
//! caller decides where it can honour it (one node: it is a plain OR). Counts (`a*2`) are refused.

use super::ValueError;

const EXPECTED: &str = "feature names joined by & (and) or | (or), with parentheses";

/// A parsed constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constraint {
    Feature(String),
    All(Vec<Constraint>),
    Any(Vec<Constraint>),
    /// `[a|b]`: one alternative for every node of the job.
    Matching(Vec<Constraint>),
}

impl Constraint {
    /// Whether a node with `features` satisfies the constraint.
    pub fn matches<S: AsRef<str>>(&self, features: &[S]) -> bool {
        match self {
            Constraint::Feature(name) => features.iter().any(|f| f.as_ref() == name),
            Constraint::All(items) => items.iter().all(|c| c.matches(features)),
            Constraint::Any(items) | Constraint::Matching(items) => items.iter().any(|c| c.matches(features)),
        }
    }

    /// Every feature name the constraint mentions.
    pub fn features(&self) -> Vec<&str> {
        match self {
            Constraint::Feature(name) => vec![name.as_str()],
            Constraint::All(items) | Constraint::Any(items) | Constraint::Matching(items) => {
                items.iter().flat_map(Constraint::features).collect()
            }
        }
    }
}

/// Parses a `--constraint` value.
pub fn parse_constraint(text: &str) -> Result<Constraint, ValueError> {
    let error = || ValueError::new("constraint", text, EXPECTED);
    let tokens: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    // `[a|b|…]` as the whole value: a matching OR of plain expressions.
    if let [b'[', inner @ .., b']'] = text.trim().as_bytes() {
        let inner = std::str::from_utf8(inner).map_err(|_| error())?;
        return match parse_constraint(inner)? {
            Constraint::Any(items) => Ok(Constraint::Matching(items)),
            _ => Err(error()),
        };
    }
    let mut position = 0;
    let parsed = any(&tokens, &mut position).ok_or_else(error)?;
    if position == tokens.len() { Ok(parsed) } else { Err(error()) }
}

fn any(tokens: &[char], position: &mut usize) -> Option<Constraint> {
    let mut items = vec![all(tokens, position)?];
    while tokens.get(*position) == Some(&'|') {
        *position += 1;
        items.push(all(tokens, position)?);
    }
    Some(if items.len() == 1 { items.remove(0) } else { Constraint::Any(items) })
}

fn all(tokens: &[char], position: &mut usize) -> Option<Constraint> {
    let mut items = vec![atom(tokens, position)?];
    while tokens.get(*position) == Some(&'&') {
        *position += 1;
        items.push(atom(tokens, position)?);
    }
    Some(if items.len() == 1 { items.remove(0) } else { Constraint::All(items) })
}

fn atom(tokens: &[char], position: &mut usize) -> Option<Constraint> {
    if tokens.get(*position) == Some(&'(') {
        *position += 1;
        let inner = any(tokens, position)?;
        if tokens.get(*position) != Some(&')') {
            return None;
        }
        *position += 1;
        return Some(inner);
    }
    let start = *position;
    while tokens.get(*position).is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/')) {
        *position += 1;
    }
    (*position > start).then(|| Constraint::Feature(tokens[start..*position].iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, features: &[&str]) -> Result<bool, String> {
        parse_constraint(text).map(|c| c.matches(features)).map_err(|e| e.to_string())
    }

    #[test]
    fn grammar_and_matching() {
        assert_eq!(check("ib", &["ib", "gpu"]), Ok(true));
        assert_eq!(check("ib", &["gpu"]), Ok(false));
        assert_eq!(check("ib&gpu", &["ib", "gpu"]), Ok(true));
        assert_eq!(check("ib&gpu", &["ib"]), Ok(false));
        assert_eq!(check("ib|gpu", &["gpu"]), Ok(true));
        assert_eq!(check("a|b&c", &["b"]), Ok(false));
        assert_eq!(check("a|b&c", &["a"]), Ok(true));
        assert_eq!(check("(a|b)&c", &["a"]), Ok(false));
        assert_eq!(check("(a|b)&c", &["b", "c"]), Ok(true));
        assert_eq!(check(" a & b ", &["a", "b"]), Ok(true));
        assert_eq!(check("[a|b]", &["b"]), Ok(true));
        assert_eq!(check("[a|b]", &["c"]), Ok(false));
        assert_eq!(
            parse_constraint("[a|b]").unwrap(),
            Constraint::Matching(vec![Constraint::Feature("a".into()), Constraint::Feature("b".into())])
        );
        for bad in ["", "a&", "|a", "(a", "a)", "[a]", "[a|[b|c]]", "[a|b]&c", "a*2", "a,b"] {
            assert!(check(bad, &[]).is_err(), "{bad:?} should be refused");
        }
        let parsed = parse_constraint("(a|b)&c").unwrap();
        assert_eq!(parsed.features(), ["a", "b", "c"]);
    }
}
