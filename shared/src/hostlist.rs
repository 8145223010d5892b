//! Slurm hostlist expressions: `node[01-04,07]`, `rack[1-2]-n[1-3]`, plain comma lists.
//!
//! [`expand`] turns an expression into host names in written order; [`compress`] turns a list of
//! names back into the shortest form Slurm prints, walking the list in its given order (node-table
//! order in every caller) and never reordering.

use thiserror::Error;

/// Why a hostlist expression was rejected.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HostlistError {
    /// An opening bracket without its closing one, or the reverse.
    #[error("unbalanced brackets in hostlist `{0}`")]
    Unbalanced(String),
    /// A range such as `5-2`, or one that is not decimal digits.
    #[error("invalid range `{range}` in hostlist `{expr}`")]
    BadRange { expr: String, range: String },
    /// More than two bracket groups, or text after the last bracket (rejected by Slurm 22.05).
    #[error("unsupported hostlist form `{0}`")]
    Unsupported(String),
    /// An expansion that would produce more hosts than any cluster has.
    #[error("hostlist `{0}` expands to more than {MAX_HOSTS} hosts")]
    TooLarge(String),
    /// An expression naming more hosts than the caller allows (ctld: the cluster's nodes).
    #[error("hostlist names more than {limit} hosts")]
    MoreThan { expr: String, limit: usize },
    /// An empty name between commas.
    #[error("empty host name in hostlist `{0}`")]
    Empty(String),
}

/// Upper bound on one expansion, so that a hostile `n[0-4000000000]` cannot exhaust memory.
pub const MAX_HOSTS: usize = 1 << 20;

/// Expands a hostlist expression into host names, in written order, keeping duplicates. The
/// names are counted first ([`count`]): an expression naming more than [`MAX_HOSTS`] is refused
/// before any name is built.
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    expand_at_most(expr, MAX_HOSTS)
}

/// [`expand`], refusing (with [`HostlistError::MoreThan`]) an expression that names more than
/// `limit` hosts before building any: ctld passes the cluster's node count, so that a list of a
/// million names costs it no more than counting them.
pub fn expand_at_most(expr: &str, limit: usize) -> Result<Vec<String>, HostlistError> {
    let tokens = parse(expr)?;
    let total = tokens.iter().map(Token::count).fold(0u64, u64::saturating_add);
    if total > MAX_HOSTS as u64 {
        return Err(HostlistError::TooLarge(expr.to_owned()));
    }
    if total > limit as u64 {
        return Err(HostlistError::MoreThan { expr: expr.to_owned(), limit });
    }
    let mut hosts = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for token in &tokens {
        token.expand(&mut hosts);
    }
    Ok(hosts)
}

/// How many host names `expr` stands for, duplicates included, without building any.
pub fn count(expr: &str) -> Result<u64, HostlistError> {
    Ok(parse(expr)?.iter().map(Token::count).fold(0u64, u64::saturating_add))
}

/// One comma-separated part of an expression: a prefix, up to two bracket groups of ranges
/// `(lo, hi, width)`, or a plain name (no groups).
struct Token {
    prefix: String,
    groups: Vec<Vec<(u64, u64, usize)>>,
    /// The text between the first group and the second (`-n` in `rack[1-2]-n[1-3]`).
    middle: String,
}

impl Token {
    fn count(&self) -> u64 {
        self.groups.iter().fold(1u64, |total, ranges| {
            let n = ranges.iter().fold(0u64, |sum, (lo, hi, _)| sum.saturating_add(hi - lo + 1));
            total.saturating_mul(n)
        })
    }

    fn expand(&self, out: &mut Vec<String>) {
        let numbers = |ranges: &[(u64, u64, usize)]| -> Vec<String> {
            ranges.iter().flat_map(|&(lo, hi, width)| (lo..=hi).map(move |n| format!("{n:0width$}"))).collect()
        };
        match self.groups.as_slice() {
            [] => out.push(self.prefix.clone()),
            [first] => {
                for (lo, hi, width) in first.iter().copied() {
                    out.extend((lo..=hi).map(|n| format!("{}{n:0width$}", self.prefix)));
                }
            }
            [first, second, ..] => {
                let tails = numbers(second);
                for n in numbers(first) {
                    out.extend(tails.iter().map(|tail| format!("{}{n}{}{tail}", self.prefix, self.middle)));
                }
            }
        }
    }
}

/// Parses every part of `expr` into its ranges (work proportional to the text, never to the
/// names it stands for).
fn parse(expr: &str) -> Result<Vec<Token>, HostlistError> {
    split_top_level(expr)?
        .into_iter()
        .map(|token| {
            if token.is_empty() {
                return Err(HostlistError::Empty(expr.to_owned()));
            }
            parse_token(expr, &token)
        })
        .collect()
}

/// Splits on commas that are not inside brackets.
fn split_top_level(expr: &str) -> Result<Vec<String>, HostlistError> {
    let mut tokens = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in expr.trim().chars() {
        match c {
            '[' => {
                depth += 1;
                current.push(c);
            }
            ']' => {
                depth = depth.checked_sub(1).ok_or_else(|| HostlistError::Unbalanced(expr.to_owned()))?;
                current.push(c);
            }
            ',' if depth == 0 => tokens.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if depth != 0 {
        return Err(HostlistError::Unbalanced(expr.to_owned()));
    }
    if !current.is_empty() || !tokens.is_empty() {
        tokens.push(current);
    }
    Ok(tokens)
}

fn parse_token(expr: &str, token: &str) -> Result<Token, HostlistError> {
    let Some(open) = token.find('[') else {
        return Ok(Token { prefix: token.to_owned(), groups: Vec::new(), middle: String::new() });
    };
    let close = token[open..].find(']').map(|i| i + open).ok_or_else(|| HostlistError::Unbalanced(expr.to_owned()))?;
    let prefix = token[..open].to_owned();
    let rest = &token[close + 1..];
    let first = parse_ranges(expr, &token[open + 1..close])?;
    if rest.is_empty() {
        return Ok(Token { prefix, groups: vec![first], middle: String::new() });
    }
    // One more bracket group is allowed after the first (`rack[1-2]-n[1-3]`); plain trailing text is not.
    if !rest.contains('[') || !rest.ends_with(']') {
        return Err(HostlistError::Unsupported(expr.to_owned()));
    }
    let tail = parse_token(expr, rest)?;
    if tail.groups.len() != 1 || tail.prefix.contains(']') {
        return Err(HostlistError::Unsupported(expr.to_owned()));
    }
    let second = tail.groups.into_iter().next().unwrap_or_default();
    Ok(Token { prefix, groups: vec![first, second], middle: tail.prefix })
}

/// Parses `01-04,07` into ranges `(lo, hi, width)`, the width being the first number's digits.
fn parse_ranges(expr: &str, ranges: &str) -> Result<Vec<(u64, u64, usize)>, HostlistError> {
    let bad = |range: &str| HostlistError::BadRange { expr: expr.to_owned(), range: range.to_owned() };
    let mut parsed = Vec::new();
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let digits = |s: &str| !s.is_empty() && s.len() <= MAX_RANGE_DIGITS && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(bad(range));
        }
        let lo_n: u64 = lo.parse().map_err(|_| bad(range))?;
        let hi_n: u64 = hi.parse().map_err(|_| bad(range))?;
        if lo_n > hi_n {
            return Err(bad(range));
        }
        parsed.push((lo_n, hi_n, lo.len()));
    }
    Ok(parsed)
}

/// The most digits a bracketed number may have ([`expand_ranges`] refuses more), so a name
/// ending in more is kept whole by [`compress`], never put in brackets expand would refuse.
const MAX_RANGE_DIGITS: usize = 9;

/// A host name split into a prefix and its trailing decimal digits (none when there are more
/// than [`MAX_RANGE_DIGITS`]).
fn split_host(host: &str) -> (&str, Option<(u64, usize)>) {
    let digits_at = host.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let digits = &host[digits_at..];
    match digits.parse::<u64>() {
        Ok(n) if !digits.is_empty() && digits.len() <= MAX_RANGE_DIGITS => {
            (&host[..digits_at], Some((n, digits.len())))
        }
        _ => (host, None),
    }
}

/// One run of hosts while compressing: the prefix, its ranges `(lo, hi, width)`, and whether the
/// hosts are numbered (a run of unnumbered names is one name).
type Group = (String, Vec<(u64, u64, usize)>, bool);

/// Compresses host names into Slurm's ranged form, walking the list in the given order.
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    // Each group: prefix and its ranges (lo, hi, width).
    let mut groups: Vec<Group> = Vec::new();
    for host in hosts {
        let host = host.as_ref();
        let (prefix, number) = split_host(host);
        let Some((n, width)) = number else {
            groups.push((host.to_owned(), Vec::new(), false));
            continue;
        };
        if let Some((last_prefix, ranges, true)) = groups.last_mut()
            && last_prefix == prefix
        {
            let (_, hi, last_width) = ranges.last_mut().expect("numbered group has a range");
            let continues =
                n == *hi + 1 && (width == *last_width || (*last_width < width && digits_of(*hi) == *last_width));
            if continues {
                *hi = n;
                continue;
            }
            ranges.push((n, n, width));
            continue;
        }
        groups.push((prefix.to_owned(), vec![(n, n, width)], true));
    }
    let mut parts = Vec::with_capacity(groups.len());
    for (prefix, ranges, numbered) in groups {
        if !numbered {
            parts.push(prefix);
            continue;
        }
        let single = ranges.len() == 1 && ranges[0].0 == ranges[0].1;
        let body: Vec<String> = ranges
            .iter()
            .map(
                |&(lo, hi, width)| {
                    if lo == hi { format!("{lo:0width$}") } else { format!("{lo:0width$}-{hi:0width$}") }
                },
            )
            .collect();
        if single {
            parts.push(format!("{prefix}{}", body[0]));
        } else {
            parts.push(format!("{prefix}[{}]", body.join(",")));
        }
    }
    parts.join(",")
}

fn digits_of(n: u64) -> usize {
    n.to_string().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_expand(expr: &str, expect: &str) {
        let got = match expand(expr) {
            Ok(hosts) => hosts.join(" "),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(got, expect, "expanding {expr}");
    }

    #[test]
    fn expands() {
        check_expand("node[01-04,07]", "node01 node02 node03 node04 node07");
        check_expand("n[8-10]", "n8 n9 n10");
        check_expand("rack[1-2]-n[1-3]", "rack1-n1 rack1-n2 rack1-n3 rack2-n1 rack2-n2 rack2-n3");
        check_expand("a,b,c[1-2]", "a b c1 c2");
        check_expand("gpu01", "gpu01");
        check_expand("node[1-3]-ib", "error: unsupported hostlist form `node[1-3]-ib`");
        check_expand("n[5-2]", "error: invalid range `5-2` in hostlist `n[5-2]`");
        check_expand("n[1-2", "error: unbalanced brackets in hostlist `n[1-2`");
        check_expand("n[0-99999999]", "error: hostlist `n[0-99999999]` expands to more than 1048576 hosts");
        check_expand("a,,b", "error: empty host name in hostlist `a,,b`");
        check_expand("n[1-2]-[5-6]", "n1-5 n1-6 n2-5 n2-6");
        check_expand("r[1-2]x[1-2]y", "error: unsupported hostlist form `r[1-2]x[1-2]y`");
        check_expand("r[1-2]x[1-2]y[1-2]", "error: unsupported hostlist form `r[1-2]x[1-2]y[1-2]`");
    }

    #[test]
    fn counts_without_expanding() {
        assert_eq!(count("node[01-04,07],a,rack[1-2]-n[1-3]"), Ok(12));
        assert_eq!(count("x[1-1048576]"), Ok(1 << 20));
        assert_eq!(count("x[0-999999999]-y[0-999999999]"), Ok(1_000_000_000 * 1_000_000_000));
        let refused = expand_at_most("x[1-1048576]", 2);
        assert_eq!(refused, Err(HostlistError::MoreThan { expr: "x[1-1048576]".into(), limit: 2 }));
        assert_eq!(expand_at_most("n[1-2]", 2).unwrap(), ["n1", "n2"]);
        // Beyond MAX_HOSTS in total over several parts, refused before anything is built.
        assert!(matches!(expand("a[1-1048576],b"), Err(HostlistError::TooLarge(_))));
    }

    #[test]
    fn compresses() {
        let c = |hosts: &str| compress(&hosts.split(' ').collect::<Vec<_>>());
        assert_eq!(c("node01 node02 node03 node04 node07"), "node[01-04,07]");
        assert_eq!(c("a1 b1 a2"), "a1,b1,a2");
        assert_eq!(c("node1-ib node2-ib"), "node1-ib,node2-ib");
        assert_eq!(c("n9 n10"), "n[9-10]");
        assert_eq!(c("n09 n10"), "n[09-10]");
        assert_eq!(c("n5"), "n5");
        assert_eq!(c("n2 n3"), "n[2-3]");
        assert_eq!(c("gpu01 gpu02"), "gpu[01-02]");
        // Numbers longer than a range may hold stay whole names, so the output expands again
        // (a property test found `ajl[8069763100701,…]`, which expand refused).
        assert_eq!(c("n8069763100701 n8069763100702"), "n8069763100701,n8069763100702");
        assert_eq!(c("n999999999 n1000000000"), "n999999999,n1000000000");
        assert_eq!(expand(&c("n999999998 n999999999 n1000000000")).unwrap().len(), 3);
    }
}
