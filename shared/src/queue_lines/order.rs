//! squeue's sort order (`-S`) as bytes: each record's `-S` keys are encoded so that comparing the byte
//! strings gives the order the keys ask for (numbers big-endian with the sign bit flipped, text
//! escaped and terminated, a descending key's bytes inverted). Sorting then compares byte slices
//! and never needs the records themselves, which lets squeue drop each record once its line is
//! rendered. `matches_the_comparator` pins the encoding to the plain field-by-field comparison.

use super::SortKey;
use super::value::{expected_end, limit_seconds};
use crate::UnixTime;
use crate::job::JobInfo;

/// Appends `job`'s sort key for `keys` to `out`.
pub fn encode(keys: &[SortKey], job: &JobInfo, now: UnixTime, out: &mut Vec<u8>) {
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
    use super::*;
    use crate::grammar::time::TimeLimit;
    use crate::job::JobState;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    /// The sort order field by field, as squeue's `-S` letters define it.
    fn compare_jobs(a: &JobInfo, b: &JobInfo, keys: &[SortKey], now: UnixTime) -> Ordering {
        for key in keys {
            let ordering = match key.letter {
                'i' | 'A' | 'F' => a.job_id.cmp(&b.job_id),
                'j' => a.name.cmp(&b.name),
                'u' => a.user.cmp(&b.user),
                'U' => a.uid.cmp(&b.uid),
                'a' => a.account.cmp(&b.account),
                'P' => a.partition.cmp(&b.partition),
                'q' => a.qos.cmp(&b.qos),
                't' => a.state().compact_name().cmp(b.state().compact_name()),
                'T' => a.state().long_name().cmp(b.state().long_name()),
                'p' | 'Q' => a.priority.cmp(&b.priority),
                'M' => a.elapsed(now).cmp(&b.elapsed(now)),
                'l' => limit_seconds(a).cmp(&limit_seconds(b)),
                'D' => a.num_nodes.cmp(&b.num_nodes),
                'C' => a.num_cpus.cmp(&b.num_cpus),
                'V' => a.submit_time.cmp(&b.submit_time),
                'S' => a.start_time.cmp(&b.start_time),
                'e' => expected_end(a).cmp(&expected_end(b)),
                'r' => a.reason.cmp(&b.reason),
                'N' => a.nodes.cmp(&b.nodes),
                'g' => a.group.cmp(&b.group),
                'y' => a.nice.cmp(&b.nice),
                _ => Ordering::Equal,
            };
            let ordering = if key.descending { ordering.reverse() } else { ordering };
            if ordering != Ordering::Equal {
                return ordering;
            }
        }
        Ordering::Equal
    }

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
            let keys = [
                SortKey { letter: letter(first), descending: down.0 },
                SortKey { letter: letter(second), descending: down.1 },
            ];
            let spec = format!("{keys:?}");
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            encode(&keys, &a, 7, &mut ka);
            encode(&keys, &b, 7, &mut kb);
            prop_assert_eq!(ka.cmp(&kb), compare_jobs(&a, &b, &keys, 7), "{}", spec);
        }
    }
}
