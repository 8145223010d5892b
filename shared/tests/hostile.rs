//! Hostile input: every Slurm value grammar, the hostlist expander, the config loader and the wire
//! frame decoder take arbitrary input without panicking, stay within their size bounds, and keep
//! their round-trip properties. Case counts are small by default so CI stays quick;
//! `PROPTEST_CASES=100000 cargo test -p drover-shared --test hostile` is the long run.

use drover_shared::config::Config;
use drover_shared::config::sched::{parse_tres_limits, parse_tres_weights};
use drover_shared::grammar::array::{format_ranges, parse_array};
use drover_shared::grammar::date::{Utc, parse_date_time};
use drover_shared::grammar::gres::{parse_gpus, parse_gres};
use drover_shared::grammar::mem::parse_mem_mb;
use drover_shared::grammar::pattern::{PatternContext, expand_pattern};
use drover_shared::grammar::time::{TimeLimit, parse_time_limit};
use drover_shared::hostlist::{MAX_HOSTS, compress, expand};
use drover_shared::proto::Hello;
use drover_shared::proto::client::Request;
use drover_shared::proto::frame::{FrameError, MAX_HANDSHAKE_FRAME, read_message};
use drover_shared::proto::node::NodeMessage;
use proptest::prelude::*;
use std::path::Path;

/// Text biased toward each grammar's own alphabet, plus anything at all.
fn grammar_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9:\\-]{0,24}",
        "[0-9a-zA-Z:,._\\-]{0,40}",
        "[a-z]{0,6}\\[[0-9,\\-]{0,20}\\][a-z0-9\\-]{0,6}(\\[[0-9\\-]{0,8}\\])?",
        "[%0-9a-zA-Z/\\\\]{0,40}",
        any::<String>(),
    ]
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn grammars_never_panic(text in grammar_text()) {
        let _ = parse_time_limit(&text);
        let _ = parse_mem_mb(&text);
        let _ = parse_gres(&text);
        let _ = parse_gpus(&text);
        let _ = parse_date_time(&text, 1_700_000_000, &Utc);
        let context = PatternContext { job_id: 7, array: Some((5, 2)), node_name: "n1", user: "u", job_name: "x" };
        let _ = expand_pattern(&text, &context);
        let _ = parse_tres_limits(&text);
        let _ = parse_tres_weights(&text);
        if let Ok(spec) = parse_array(&text, 1000) {
            prop_assert!(spec.indexes.iter().all(|i| *i <= 1000));
            prop_assert!(spec.indexes.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn array_ranges_round_trip(indexes in proptest::collection::btree_set(0u32..2000, 1..200)) {
        let indexes: Vec<u32> = indexes.into_iter().collect();
        let spec = parse_array(&format_ranges(&indexes), 1999).expect("format_ranges writes a valid array spec");
        prop_assert_eq!(spec.indexes, indexes);
    }

    #[test]
    fn hostlists_are_bounded_and_round_trip(text in grammar_text()) {
        if let Ok(hosts) = expand(&text) {
            prop_assert!(hosts.len() <= MAX_HOSTS);
            if !hosts.is_empty() && hosts.len() < 10_000 {
                // Compressing and expanding again gives the same hosts in the same order.
                let again = expand(&compress(&hosts)).expect("compress output is a valid hostlist");
                prop_assert_eq!(again, hosts);
            }
        }
    }

    #[test]
    fn time_limits_round_up_to_minutes(minutes in 1u32..100_000, seconds in 0u32..60) {
        let text = format!("{minutes}:{seconds:02}");
        let expected = if seconds == 0 { minutes } else { minutes + 1 };
        prop_assert_eq!(parse_time_limit(&text), Ok(TimeLimit::Minutes(expected)));
    }

    #[test]
    fn frames_never_panic_and_respect_bounds(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_message::<_, Hello>(&mut bytes.as_slice(), MAX_HANDSHAKE_FRAME);
        let _ = read_message::<_, Request>(&mut bytes.as_slice(), 1 << 20);
        let _ = read_message::<_, NodeMessage>(&mut bytes.as_slice(), 1 << 20);
        // The payload after a plausible length prefix, too.
        let mut framed = u32::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        let _ = read_message::<_, Request>(&mut framed.as_slice(), 1 << 20);
        let _ = read_message::<_, NodeMessage>(&mut framed.as_slice(), 1 << 20);
    }

    #[test]
    fn oversized_frames_are_refused_before_allocation(len in (u32::try_from(MAX_HANDSHAKE_FRAME).unwrap() + 1)..u32::MAX) {
        let header = len.to_be_bytes();
        let result = read_message::<_, Hello>(&mut header.as_slice(), MAX_HANDSHAKE_FRAME);
        let refused = matches!(result, Err(FrameError::TooLarge { .. }));
        prop_assert!(refused);
    }

    #[test]
    fn config_loader_never_panics(text in prop_oneof![any::<String>(), "[a-z_\\[\\]=\" 0-9.\n{}]{0,200}"]) {
        let _ = Config::parse(Path::new("fuzz.toml"), &text);
    }

    #[test]
    fn config_mutations_never_panic(cut in 0usize..600, insert in "[a-z_\\[\\]=\" 0-9.\n{}]{0,12}") {
        let base = include_str!("../../etc/cluster.toml");
        let mut at = cut.min(base.len());
        while !base.is_char_boundary(at) {
            at -= 1;
        }
        let text = format!("{}{insert}{}", &base[..at], &base[at..]);
        let _ = Config::parse(Path::new("fuzz.toml"), &text);
    }
}
