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

/// The held entries a run of turns of the state's own selection looks at
/// on a log of `records` records: the log is written, the state built and
/// warmed up (its first selection lets go of what no window reaches), then
/// 20 turns each append a question, select, and append the answer, as the
/// server's turns do. Also checks each turn's body against the one-shot
/// replay now and then, so the counter counts a selection that is right.
fn visits_of_20_turns(sel: &Selection, records: u64) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut ts = 1_000u64;
    for i in 0..records {
        ts += 1;
        let line = match i % 11 {
            0 => format!(r#"{{"type":"text_input","ts_ms":{ts},"text":"question {i}"}}"#),
            1 => format!(
                r#"{{"type":"text_output","ts_ms":{ts},"text":"answer {i} {}"}}"#,
                "x".repeat((i % 97) as usize)
            ),
            // Now and then a record a little late.
            5 => format!(r#"{{"type":"wm_event","ts_ms":{},"n":{i}}}"#, ts - 3),
            7 => format!(
                r#"{{"type":"wm_fact","ts_ms":{ts},"key":"k{}","value":{i}}}"#,
                i % 13
            ),
            _ => format!(
                r#"{{"type":"wm_event","ts_ms":{ts},"note":"event {i} {}"}}"#,
                "y".repeat((i % 53) as usize)
            ),
        };
        writeln!(file, "{line}").unwrap();
    }
    file.flush().unwrap();
    drop(file);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default())
        .with_selection(sel.clone());
    let current = CurrentRequest {
        text: "now",
        session_id: None,
    };
    let mut spec = crate::RequestSpec::new(Format::Anthropic, crate::SYSTEM_RULE, current);
    spec.cache = Some(CachePolicy::default());
    let mut memory = CacheMemory::default();
    let mut prev = None;
    let mut one_prev = None;
    let mut one_memory = CacheMemory::default();
    let mut before = 0;
    for turn in 0..25u64 {
        if turn == 5 {
            before = live.visits;
        }
        ts += 1;
        writeln!(
            file,
            r#"{{"type":"text_input","ts_ms":{ts},"text":"q{turn}"}}"#
        )
        .unwrap();
        let (body, report) = live
            .request_body_with(&spec, sel, prev, &mut memory)
            .unwrap();
        if turn % 8 == 0 {
            let bytes = std::fs::read(&path).unwrap();
            let mut one = replay(&bytes, &ReplayOptions::default());
            let want_report = one.select(sel, one_prev);
            let want = one.render_spec(&spec, &mut one_memory).unwrap();
            assert!(
                body == want,
                "turn {turn}: the live body is not the one-shot body"
            );
            assert_eq!(report, want_report, "turn {turn}");
            one_prev = want_report.window_start;
        } else {
            one_prev = report.window_start;
            let _ = one_memory;
            one_memory = memory;
        }
        prev = report.window_start;
        ts += 1;
        writeln!(
            file,
            r#"{{"type":"text_output","ts_ms":{ts},"text":"a{turn}"}}"#
        )
        .unwrap();
    }
    live.visits - before
}

/// A turn costs what was appended and what is sent, not the log: on a log
/// ten times larger, the turns of each selection the server offers look at
/// about as many held entries. (A count, not a clock: a noisy machine cannot
/// fool it. Before the counts were kept as records arrive, each turn looked
/// at every held entry to let go of what no window reaches, and the
/// summaries' and facts' view walked them all.)
#[test]
fn a_turn_visits_what_was_appended_and_what_is_sent_not_the_log() {
    let base = Selection {
        tokenizer: crate::Tokenizer::Bytes,
        ..Selection::default()
    };
    let sels = [
        Selection {
            max_tokens: Some(3_000),
            start_on: Some("text_input".into()),
            mark_pending: true,
            ..base.clone()
        },
        Selection {
            tail: Some(200),
            ..base.clone()
        },
        Selection {
            tail: Some(120),
            trim_to: Some(0.5),
            mark_pending: true,
            ..base.clone()
        },
        Selection {
            max_tokens: Some(4_000),
            trim_to: Some(0.8),
            summaries: true,
            facts: true,
            ..base.clone()
        },
        Selection {
            mark_pending: true,
            facts: true,
            ..base.clone()
        },
    ];
    for (k, sel) in sels.iter().enumerate() {
        let small = visits_of_20_turns(sel, 4_000);
        let big = visits_of_20_turns(sel, 40_000);
        assert!(
            big <= small + small / 5 + 40,
            "selection {k}: 20 turns looked at {small} entries on 4,000 records, {big} on 40,000"
        );
    }
}
