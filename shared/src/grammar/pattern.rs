//! Output filename patterns (`sbatch -o/-e/-i`): Slurm's `%` tokens expanded for the batch script,
//! as `src/slurmd/common/fname.c` does it. `%%` `%A` `%a` `%j` `%J` `%s` `%N` `%n` `%t` `%u` `%x`
//! are known; a decimal width between `%` and the letter zero-pads numeric tokens (capped at 10,
//! ignored for text tokens); any other `%X` stays as written. A pattern containing a backslash is
//! not expanded at all: each backslash escapes the character after it and is dropped.

use crate::job::JobId;

/// `%a` of a job that is not an array task: Slurm's `NO_VAL`.
pub const NO_ARRAY_TASK: u32 = 0xffff_fffe;

/// Widest zero-padding a `%<width><token>` may ask for.
const MAX_WIDTH: usize = 10;

/// What the tokens of a pattern stand for, for one batch script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternContext<'a> {
    /// `%j`, `%J`, and `%A` when the job is not an array task.
    pub job_id: JobId,
    /// `(array job id, array task index)` of an array task: `%A` and `%a`.
    pub array: Option<(JobId, u32)>,
    /// `%N`: the node running the batch script.
    pub node_name: &'a str,
    /// `%u`.
    pub user: &'a str,
    /// `%x`.
    pub job_name: &'a str,
}

/// Expands `pattern` for the batch script of the job `context` describes.
pub fn expand_pattern(pattern: &str, context: &PatternContext<'_>) -> String {
    if pattern.contains('\\') {
        return unescape(pattern);
    }
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut rest = pattern;
    while let Some(percent) = rest.find('%') {
        out.push_str(&rest[..percent]);
        let after_percent = &rest[percent + 1..];
        let n_digits = after_percent.bytes().take_while(u8::is_ascii_digit).count();
        let (digits, token_and_rest) = after_percent.split_at(n_digits);
        let Some(token) = token_and_rest.chars().next() else {
            // A trailing `%` or `%4` has no token: keep it as written.
            out.push_str(&rest[percent..]);
            return out;
        };
        let width = if digits.is_empty() { 0 } else { digits.parse().map_or(MAX_WIDTH, |w: usize| w.min(MAX_WIDTH)) };
        let number = |n: u32| format!("{n:0width$}");
        let expansion = match token {
            '%' => Some("%".to_owned()),
            'A' => Some(number(context.array.map_or(context.job_id, |(array_job_id, _)| array_job_id))),
            'a' => Some(number(context.array.map_or(NO_ARRAY_TASK, |(_, task_idx)| task_idx))),
            // The batch script is not a numbered step, so `%J` has no `.step` part.
            'j' | 'J' => Some(number(context.job_id)),
            's' => Some("batch".to_owned()),
            'N' => Some(context.node_name.to_owned()),
            // The batch script is task 0 on node 0 of its allocation.
            'n' | 't' => Some(number(0)),
            'u' => Some(context.user.to_owned()),
            'x' => Some(context.job_name.to_owned()),
            _ => None,
        };
        match expansion {
            Some(text) => {
                out.push_str(&text);
                rest = &token_and_rest[token.len_utf8()..];
            }
            None => {
                // Unknown token: keep the `%` and carry on with what follows it, literally.
                out.push('%');
                rest = after_percent;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Slurm's `is_path_escaped`: drops every backslash that is not itself escaped.
fn unescape(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut escaped = false;
    for c in pattern.chars() {
        if c == '\\' && !escaped {
            escaped = true;
            continue;
        }
        escaped = false;
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    const JOB: PatternContext<'static> =
        PatternContext { job_id: 128, array: None, node_name: "gpu01", user: "alice", job_name: "train" };
    const ARRAY_TASK: PatternContext<'static> =
        PatternContext { job_id: 135, array: Some((128, 7)), node_name: "gpu01", user: "alice", job_name: "sweep" };

    fn check(context: &PatternContext<'_>, pattern: &str, expect: Expect) {
        expect.assert_eq(&expand_pattern(pattern, context));
    }

    #[test]
    fn every_token() {
        check(&JOB, "%%", expect!["%"]);
        check(&JOB, "%A", expect!["128"]);
        check(&JOB, "%a", expect!["4294967294"]);
        check(&JOB, "%j", expect!["128"]);
        check(&JOB, "%J", expect!["128"]);
        check(&JOB, "%s", expect!["batch"]);
        check(&JOB, "%N", expect!["gpu01"]);
        check(&JOB, "%n", expect!["0"]);
        check(&JOB, "%t", expect!["0"]);
        check(&JOB, "%u", expect!["alice"]);
        check(&JOB, "%x", expect!["train"]);
        check(&JOB, "slurm-%j.out", expect!["slurm-128.out"]);
        check(&JOB, "/scratch/%u/%x-%j.%N.log", expect!["/scratch/alice/train-128.gpu01.log"]);
    }

    #[test]
    fn array_tokens() {
        check(&ARRAY_TASK, "%A_%a", expect!["128_7"]);
        check(&ARRAY_TASK, "%j", expect!["135"]);
        check(&ARRAY_TASK, "slurm-%A_%3a.out", expect!["slurm-128_007.out"]);
    }

    #[test]
    fn width_pads_numbers_only() {
        check(&JOB, "%4j", expect!["0128"]);
        check(&JOB, "%2j", expect!["128"]);
        check(&JOB, "%0j", expect!["128"]);
        check(&JOB, "%3n.%3t", expect!["000.000"]);
        check(&JOB, "%12j", expect!["0000000128"]);
        check(&JOB, "%99999999999999999999999j", expect!["0000000128"]);
        check(&JOB, "%8x-%5u-%3N-%4s", expect!["train-alice-gpu01-batch"]);
        check(&JOB, "%4%", expect!["%"]);
    }

    #[test]
    fn unknown_and_incomplete_tokens_stay_literal() {
        check(&JOB, "%q-%j", expect!["%q-128"]);
        check(&JOB, "%4q", expect!["%4q"]);
        check(&JOB, "%b", expect!["%b"]);
        check(&JOB, "out%", expect!["out%"]);
        check(&JOB, "out%12", expect!["out%12"]);
        check(&JOB, "%%j", expect!["%j"]);
        check(&JOB, "%é%j", expect!["%é128"]);
        check(&JOB, "plain.txt", expect!["plain.txt"]);
        check(&JOB, "", expect![""]);
    }

    #[test]
    fn backslash_disables_expansion() {
        check(&JOB, r"job\%j.out", expect!["job%j.out"]);
        check(&JOB, r"\%x-%j", expect!["%x-%j"]);
        check(&JOB, r"a\\b-%j", expect![[r#"a\b-%j"#]]);
        check(&JOB, r"trailing\", expect!["trailing"]);
    }
}
