//! squeue's sort order as bytes: each record's `-S` keys are encoded so that comparing the byte
//! strings gives the order the keys ask for (numbers big-endian with the sign bit flipped, text
//! escaped and terminated, a descending key's bytes inverted). Sorting then compares byte slices
//! and never needs the records themselves, which lets squeue drop each record once its line is
//! rendered. `matches_the_comparator` pins the encoding to the plain field-by-field comparison.

use super::{SortKey, expected_end, limit_seconds};
use drover_shared::UnixTime;
use drover_shared::job::JobInfo;

/// Appends `job`'s sort key for `keys` to `out`.
pub(crate) fn encode(keys: &[SortKey], job: &JobInfo, now: UnixTime, out: &mut Vec<u8>) {
    for key in keys {
        let start = out.len();
        match key.letter {
            'i' | 'A' | 'F' => out.extend_from_slice(&job.job_id.to_be_bytes()),
            'j' => text(out, &job.name),
            'u' => text(out, &job.user),
            'U' => out.extend_from_slice(&job.uid.to_be_bytes()),
            'a' => text(out, &job.account),
            'P' => text(out, &job.partition),
            'q' => text(out, &job.qos),
            't' => text(out, job.state().compact_name()),
            'T' => text(out, job.state().long_name()),
            'p' | 'Q' => out.extend_from_slice(&job.priority.to_be_bytes()),
            'M' => signed(out, job.elapsed(now)),
            'l' => out.extend_from_slice(&limit_seconds(job).to_be_bytes()),
            'D' => out.extend_from_slice(&job.num_nodes.to_be_bytes()),
            'C' => out.extend_from_slice(&job.num_cpus.to_be_bytes()),
            'V' => signed(out, job.submit_time),
            'S' => optional(out, job.start_time),
            'e' => optional(out, expected_end(job)),
            'r' => text(out, &job.reason),
            'N' => {
                for node in &job.nodes {
                    out.push(1);
                    text(out, node);
                }
                out.push(0);
            }
            'g' => text(out, &job.group),
            'y' => signed(out, i64::from(job.nice)),
            _ => {}
        }
        if key.descending {
            out[start..].iter_mut().for_each(|byte| *byte = !*byte);
        }
    }
}

/// Text in byte order, terminated so that a prefix sorts first: NUL escaped as `00 FF`, the end
/// as `00 00`.
fn text(out: &mut Vec<u8>, value: &str) {
    for &byte in value.as_bytes() {
        out.push(byte);
        if byte == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

fn signed(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(&(value.cast_unsigned() ^ (1 << 63)).to_be_bytes());
}

/// `None` before any value, as `Option`'s order has it.
fn optional(out: &mut Vec<u8>, value: Option<i64>) {
    match value {
        None => out.push(0),
        Some(value) => {
            out.push(1);
            signed(out, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{compare_jobs, parse_sort};
    use super::*;
    use drover_shared::grammar::time::TimeLimit;
    use drover_shared::job::JobState;
    use proptest::prelude::*;

    fn job() -> impl Strategy<Value = JobInfo> {
        let text = prop::sample::select(vec!["", "a", "a\0", "a\0b", "ab", "b", "\u{e9}", "main", "gpu"]);
        (
            (0u32..4, text.clone(), text.clone(), 0u32..3, text.clone(), text.clone()),
            (0usize..4, 0u32..3, -2i64..3, prop::option::of(-2i64..3), prop::option::of(-2i64..3)),
            (prop::option::of(0u32..3), prop::collection::vec(text.clone(), 0..3), -2i32..2, 0u32..3, text),
        )
            .prop_map(|(a, b, c)| {
                let states = [JobState::Pending, JobState::Running, JobState::Completed, JobState::Failed];
                JobInfo {
                    job_id: a.0,
                    name: a.1.into(),
                    user: a.2.into(),
                    uid: a.3,
                    account: a.4.into(),
                    partition: a.5.into(),
                    state: Some(states[b.0]),
                    priority: b.1,
                    submit_time: b.2,
                    start_time: b.3,
                    end_time: b.4,
                    time_limit: c.0.map(|m| if m == 2 { TimeLimit::Unlimited } else { TimeLimit::Minutes(m) }),
                    nodes: c.1.into_iter().map(String::from).collect(),
                    nice: c.2,
                    num_nodes: c.3,
                    num_cpus: c.3 * 2,
                    qos: c.4.into(),
                    reason: c.4.into(),
                    group: c.4.into(),
                    ..JobInfo::default()
                }
            })
    }

    proptest! {
        /// For every sort key, in both directions and in pairs, the bytes order two records as
        /// the field-by-field comparison does.
        #[test]
        fn matches_the_comparator(a in job(), b in job(), first in 0usize..24, second in 0usize..24, down in any::<(bool, bool)>()) {
            let letters = "iAFjuUaPqtTpQMlDCVSerNgy";
            let letter = |i: usize| letters.chars().nth(i % letters.len()).unwrap();
            let spec = format!(
                "{}{},{}{}",
                if down.0 { "-" } else { "" }, letter(first), if down.1 { "-" } else { "" }, letter(second)
            );
            let keys = parse_sort(&spec);
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            encode(&keys, &a, 7, &mut ka);
            encode(&keys, &b, 7, &mut kb);
            prop_assert_eq!(ka.cmp(&kb), compare_jobs(&a, &b, &keys, 7), "{}", spec);
        }
    }
}
