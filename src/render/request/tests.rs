//! Unit tests of the request's pieces.
#![cfg(test)]

use super::*;
use crate::{ReplayOptions, replay};

#[test]
fn a_deferred_merge_renders_the_merged_bytes() {
    // Many late records (some older than everything, some tied), spread
    // over several groups of 512.
    let mut log = String::new();
    let mut x = 7u64;
    for i in 0..3000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let ts = if x.is_multiple_of(4) {
            i - (x % 900).min(i)
        } else {
            i
        };
        log.push_str(&format!(
            "{{\"type\":\"{}\",\"ts_ms\":{ts},\"i\":{i}}}\n",
            if x.is_multiple_of(3) {
                "text_output"
            } else {
                "k"
            }
        ));
    }
    let merged = replay(log.as_bytes(), &ReplayOptions::default());
    let options = ReplayOptions {
        defer_merge: true,
        ..ReplayOptions::default()
    };
    let deferred = replay(log.as_bytes(), &options);
    assert!(!deferred.late.is_empty(), "the test log has late records");
    let current = CurrentRequest {
        text: "now",
        session_id: None,
    };
    for format in [
        Format::Anthropic,
        Format::OpenAi,
        Format::Ndjson,
        Format::Xml,
    ] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        merged
            .write_request(format, "sys", &current, &mut a)
            .unwrap();
        deferred
            .write_request(format, "sys", &current, &mut b)
            .unwrap();
        assert_eq!(a, b, "{format:?} request");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        merged.write_messages(format, &mut a).unwrap();
        deferred.write_messages(format, &mut b).unwrap();
        assert_eq!(a, b, "{format:?} messages");
        for batch in [1, 5000] {
            let mut c = Vec::new();
            render::stream_messages(
                deferred.sequence(),
                log.as_bytes(),
                format,
                true,
                batch,
                &mut c,
            )
            .unwrap();
            let mut d = Vec::new();
            render::stream_messages(
                merged.records(),
                log.as_bytes(),
                format,
                true,
                batch,
                &mut d,
            )
            .unwrap();
            assert_eq!(c, d, "{format:?} batch {batch}");
        }
    }
    // One list on demand, and in place once a selection asks.
    assert_eq!(merged.records(), deferred.records());
    let mut selected = replay(log.as_bytes(), &options);
    selected.select(&crate::Selection::default(), None);
    assert!(selected.late.is_empty());
    assert_eq!(merged.records(), selected.records());
}

#[test]
fn streaming_in_many_small_batches_gives_the_buffered_bytes() {
    let mut log = String::new();
    // Several groups of messages (512 each), of different sizes.
    for i in 0..2000 {
        log.push_str(&format!(
            "{{\"type\":\"k\",\"ts_ms\":{},\"t\":\"{}\"}}\n",
            (i * 37) % 50,
            "q\\\"".repeat(i % 9)
        ));
    }
    let r = replay(log.as_bytes(), &ReplayOptions::default());
    for format in [
        Format::Anthropic,
        Format::OpenAi,
        Format::Ndjson,
        Format::Xml,
    ] {
        let whole = render_messages(r.records(), log.as_bytes(), format);
        for batch in [1, 100, 5000, 40_000, 1 << 20] {
            let (open, close) = replay_brackets(format);
            let mut out = open.to_vec();
            render::stream_messages(r.records(), log.as_bytes(), format, true, batch, &mut out)
                .unwrap();
            out.extend_from_slice(close);
            assert_eq!(out, whole, "{format:?} batch {batch}");
        }
    }
}
