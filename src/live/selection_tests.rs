//! The live selection held to the one-shot replay, turn after turn.
use std::io::Write;

use crate::render::cache::{CacheMemory, CachePolicy};
use crate::render::request::{CurrentRequest, cached_envelope};
use crate::select::Selection;
use crate::{Format, LiveReplay, ReplayOptions, replay};

#[test]
fn cached_chunks_are_the_one_shot_cached_body_turn_after_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let mut file = std::fs::File::create(&path).unwrap();
    let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default());
    let policy = CachePolicy {
        stride: 7,
        ..CachePolicy::default()
    };
    let sel = Selection {
        mark_pending: true,
        ..Selection::default()
    };
    let (mut live_memory, mut oneshot_memory) = (CacheMemory::default(), CacheMemory::default());
    let current = CurrentRequest {
        text: "now",
        session_id: None,
    };
    let mut ts = 100;
    for turn in 0..40u64 {
        // A burst of events (past the lookback now and then), a late
        // record every seventh turn, and a question left pending.
        for _ in 0..(turn * 13) % 45 {
            ts += 1;
            writeln!(file, r#"{{"type":"wm_event","ts_ms":{ts}}}"#).unwrap();
        }
        if turn % 7 == 3 {
            writeln!(file, r#"{{"type":"wm_event","ts_ms":{}}}"#, ts - 30).unwrap();
        }
        ts += 1;
        writeln!(
            file,
            r#"{{"type":"text_input","ts_ms":{ts},"text":"q{turn}"}}"#
        )
        .unwrap();
        live.refresh().unwrap();
        let (chunks, _, marks) = live
            .select_cached(&sel, None, &policy, &mut live_memory)
            .unwrap();
        let member = if marks < policy.max_breakpoints {
            policy.ttl.member()
        } else {
            b""
        };
        let (head, tail) = cached_envelope(
            crate::render::request::Lead::default(),
            crate::SYSTEM_RULE,
            &current,
            member,
        );
        let got = [head, chunks.concat(), tail].concat();

        let bytes = std::fs::read(&path).unwrap();
        let mut replayed = replay(&bytes, &ReplayOptions::default());
        replayed.select(&sel, None);
        let want = replayed.render_request_cached(
            crate::SYSTEM_RULE,
            &current,
            &policy,
            &mut oneshot_memory,
        );
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap(),
            "turn {turn}"
        );
        ts += 1;
        writeln!(
            file,
            r#"{{"type":"text_output","ts_ms":{ts},"text":"a{turn}"}}"#
        )
        .unwrap();
    }
}

#[test]
fn a_spec_body_from_the_live_state_is_the_one_shot_body() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let mut file = std::fs::File::create(&path).unwrap();
    let fields = r#""model":"m","max_tokens":9,"temperature":0.2"#;
    let current = CurrentRequest {
        text: "now",
        session_id: Some(""),
    };
    let sel = Selection {
        tail: Some(25),
        mark_pending: true,
        ..Selection::default()
    };
    for (format, cache) in [
        (Format::Anthropic, Some(CachePolicy::default())),
        (Format::Anthropic, None),
        (Format::OpenAi, None),
    ] {
        let mut live = LiveReplay::new(&path, format, ReplayOptions::default());
        let mut spec =
            crate::RequestSpec::new(format, crate::SYSTEM_RULE, current).with_fields(fields);
        spec.cache = cache;
        for turn in 0..12u64 {
            for k in 0..turn * 3 {
                writeln!(
                    file,
                    r#"{{"type":"wm_event","ts_ms":{},"k":{k}}}"#,
                    1000 + turn * 10 + k % 7
                )
                .unwrap();
            }
            writeln!(
                file,
                r#"{{"type":"text_input","ts_ms":{},"text":"q{turn}"}}"#,
                1000 + turn * 10
            )
            .unwrap();
            let (got, _) = live
                .request_body_with(&spec, &sel, None, &mut CacheMemory::default())
                .unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let mut replayed = replay(&bytes, &ReplayOptions::default());
            replayed.select(&sel, None);
            let want = replayed.render_request_with(&spec);
            assert_eq!(
                String::from_utf8(got).unwrap(),
                String::from_utf8(want).unwrap(),
                "{format:?} {cache:?} turn {turn}"
            );
        }
    }
}
