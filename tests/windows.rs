//! Issue 6 in the library: filters, the pending prompt, tail and token
//! windows, cache-stable trimming, the live state's windows, and the XML
//! format.

mod common;

use proptest::prelude::*;
use serde_json::Value;
use wmreplay::__internals::request::render_messages;
use wmreplay::{
    CurrentRequest, Format, LiveReplay, ReplayOptions, Selection, Tokenizer, WindowStart, replay,
};

/// The replayed messages' texts (OpenAI shape).
fn texts(body: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(body).expect("messages are JSON");
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

/// Texts of the records `sel` selects from `log`.
fn selected(log: &[u8], sel: &Selection) -> (Vec<String>, wmreplay::SelectReport) {
    let mut r = replay(log, &ReplayOptions::default());
    let report = r.select(sel, None);
    (texts(&r.render_messages(Format::OpenAi)), report)
}

/// A hostile log without unpaired surrogate escapes (which serde_json, used
/// here to read the messages back, rejects).
fn hostile(seed: u64, lines: usize) -> Vec<u8> {
    let log = String::from_utf8_lossy(&common::hostile_log(seed, lines)).into_owned();
    log.replace(r"lone\ud800surrogate", "lone_surrogate")
        .replace(r"lone \udc00 low and \ud800 high", "lone low and high")
        .into_bytes()
}

fn all(log: &[u8]) -> Vec<String> {
    selected(log, &Selection::default()).0
}

fn lines(ls: &[&str]) -> Vec<u8> {
    let mut out = String::new();
    for l in ls {
        out.push_str(l);
        out.push('\n');
    }
    out.into_bytes()
}

#[test]
fn tail_keeps_the_last_n_records_in_replay_order() {
    for seed in 0..5 {
        let log = hostile(seed, 400);
        let everything = all(&log);
        for n in [0, 1, 7, everything.len(), everything.len() + 10] {
            let (got, report) = selected(&log, &{
                let mut o = Selection::default();
                o.tail = Some(n);
                o
            });
            let k = n.min(everything.len());
            assert_eq!(
                got,
                everything[everything.len() - k..],
                "seed {seed} tail {n}"
            );
            assert_eq!(report.selected as usize, k);
            assert_eq!(report.matched as usize, everything.len());
        }
    }
}

#[test]
fn max_tokens_keeps_the_newest_messages_that_fit_a_real_tokenizer() {
    let log = hostile(11, 600);
    let everything = all(&log);
    for tokenizer in [Tokenizer::O200k, Tokenizer::Cl100k, Tokenizer::Bytes] {
        for budget in [0u64, 5, 40, 300, 5_000, 10_000_000] {
            let (got, report) = selected(&log, &{
                let mut o = Selection::default();
                o.max_tokens = Some(budget);
                o.tokenizer = tokenizer;
                o
            });
            // Counted independently, from the rendered messages.
            let counts: Vec<u64> = everything.iter().map(|t| tokenizer.count(t)).collect();
            let k = got.len();
            assert_eq!(got, everything[everything.len() - k..]);
            let sum: u64 = counts[counts.len() - k..].iter().sum();
            assert!(sum <= budget, "{tokenizer:?} {budget}: {sum}");
            assert_eq!(report.tokens, Some(sum));
            if k < everything.len() {
                let next = counts[counts.len() - k - 1];
                assert!(sum + next > budget, "{tokenizer:?} {budget}: one more fits");
            }
        }
    }
}

#[test]
fn a_budget_smaller_than_one_message_replays_nothing_but_the_request() {
    let log = lines(&[r#"{"type":"text_input","ts_ms":1,"text":"a long enough message"}"#]);
    let mut r = replay(&log, &ReplayOptions::default());
    let report = r.select(
        &{
            let mut o = Selection::default();
            o.max_tokens = Some(3);
            o
        },
        None,
    );
    assert_eq!((report.matched, report.selected), (1, 0));
    assert_eq!(report.tokens, Some(0));
    let body = r.render_request(
        Format::Anthropic,
        "sys",
        &CurrentRequest {
            text: "hi",
            session_id: None,
        },
    );
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    assert_eq!(r.render_messages(Format::OpenAi), b"[]");
}

#[test]
fn filters_by_session_kind_and_time() {
    let log = lines(&[
        r#"{"type":"text_input","ts_ms":1,"session_id":"s1"}"#,
        r#"{"type":"text_input","ts_ms":2,"session_id":"s\u0031"}"#,
        r#"{"type":"text_input","ts_ms":3,"session_id":null}"#,
        r#"{"type":"wm_event","ts_ms":4}"#,
        r#"{"type":"text_input","ts_ms":5,"session_id":"s2"}"#,
        r#"{"type":"text_input","ts_ms":6,"session_id":5}"#,
        r#"{"type":"text_input","ts_ms":7,"session_id":"s2","session_id":"s1"}"#,
        r#"{"type":"text\u005foutput","ts_ms":8,"session_id":"s1"}"#,
        r#"{"type":"wm_insight","ts_ms":9,"meta":{"session_id":"s2"}}"#,
    ]);
    let ts = |sel: Selection| -> Vec<String> {
        selected(&log, &sel)
            .0
            .iter()
            .map(|t| {
                t.lines()
                    .nth(1)
                    .unwrap()
                    .trim_start_matches("ts_ms: ")
                    .to_string()
            })
            .collect()
    };
    assert_eq!(
        ts({
            let mut o = Selection::default();
            o.session = Some("s1".into());
            o
        }),
        ["1", "2", "3", "4", "7", "8", "9"]
    );
    assert_eq!(
        ts({
            let mut o = Selection::default();
            o.kinds = Some(vec!["text_output".into(), "wm_event".into()]);
            o
        }),
        ["4", "8"]
    );
    assert_eq!(
        ts({
            let mut o = Selection::default();
            o.since = Some(3.0);
            o.until = Some(5.0);
            o
        }),
        ["3", "4", "5"]
    );
    // Filters, then windows.
    assert_eq!(
        ts({
            let mut o = Selection::default();
            o.session = Some("s2".into());
            o.tail = Some(2);
            o
        }),
        ["5", "9"]
    );
    assert!(
        {
            let mut o = Selection::default();
            o.since = Some(5.0);
            o.until = Some(1.0);
            o
        }
        .validate()
        .is_err()
    );
}

fn pending_line(log: &[u8]) -> Option<u64> {
    let mut r = replay(log, &ReplayOptions::default());
    r.select(&Selection::default(), None)
        .pending
        .map(|p| p.line)
}

#[test]
fn the_pending_prompt_is_the_latest_unanswered_text_input() {
    // No text_input at all.
    assert_eq!(
        pending_line(&lines(&[r#"{"type":"wm_event","ts_ms":1}"#])),
        None
    );
    assert_eq!(pending_line(b""), None);
    // Answered.
    let answered = lines(&[
        r#"{"type":"text_input","ts_ms":1}"#,
        r#"{"type":"text_output","ts_ms":2}"#,
    ]);
    assert_eq!(pending_line(&answered), None);
    // Unanswered, with events after it, a BOM, CRLF and blank lines before.
    let mut log = b"\xEF\xBB\xBF".to_vec();
    log.extend_from_slice(b"{\"type\":\"text_output\",\"ts_ms\":1}\r\n\n   \nnot json\n");
    log.extend_from_slice(b"{\"type\":\"text_input\",\"ts_ms\":2,\"text\":\"q\"}\n");
    log.extend_from_slice(b"{\"type\":\"wm_event\",\"ts_ms\":3}");
    assert_eq!(pending_line(&log), Some(5));
    // Replay order, not file order: the answer was written first but is
    // later in time.
    let late = lines(&[
        r#"{"type":"text_output","ts_ms":10}"#,
        r#"{"type":"text_input","ts_ms":5}"#,
    ]);
    assert_eq!(pending_line(&late), None);
    let late = lines(&[
        r#"{"type":"text_input","ts_ms":10}"#,
        r#"{"type":"text_output","ts_ms":5}"#,
    ]);
    assert_eq!(pending_line(&late), Some(1));
    // An escaped kind is still text_input.
    assert_eq!(
        pending_line(&lines(&[r#"{"type":"text\u005finput","ts_ms":1}"#])),
        Some(1)
    );
}

#[test]
fn mark_pending_labels_only_that_message() {
    let log = lines(&[
        r#"{"type":"text_input","ts_ms":1,"text":"old"}"#,
        r#"{"type":"text_output","ts_ms":2}"#,
        r#"{"type":"text_input","ts_ms":3,"text":"new"}"#,
        r#"{"type":"wm_event","ts_ms":4}"#,
    ]);
    let sel = {
        let mut o = Selection::default();
        o.mark_pending = true;
        o
    };
    let (got, report) = selected(&log, &sel);
    assert_eq!(report.pending.unwrap().line, 3);
    let marked: Vec<usize> = got
        .iter()
        .enumerate()
        .filter(|(_, t)| t.starts_with("PENDING_USER_INPUT\nWM_KIND=text_input\n"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(marked, [2]);
    assert_eq!(got.iter().filter(|t| t.contains("PENDING")).count(), 1);
    // The window counts the mark too.
    let (got, report) = selected(&log, &{
        let mut o = sel;
        o.max_tokens = Some(1_000);
        o.tokenizer = Tokenizer::Bytes;
        o
    });
    let sum: u64 = got.iter().map(|t| Tokenizer::Bytes.count(t)).sum();
    assert_eq!(report.tokens, Some(sum));
}

/// One record of about `size` bytes of text.
fn record(ts: u64, size: usize) -> String {
    format!(
        "{{\"type\":\"{}\",\"ts_ms\":{ts},\"text\":\"{}\"}}\n",
        if ts.is_multiple_of(2) {
            "text_input"
        } else {
            "text_output"
        },
        "w ".repeat(size / 2)
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Cache-stable trimming: across appends the window's start stays put
    /// until the records from it overflow the budget; then it jumps forward
    /// so the window holds at most F x T, and the window never exceeds T.
    #[test]
    fn trimming_keeps_the_window_start_until_the_budget_overflows(
        sizes in prop::collection::vec(0usize..400, 1..60),
        late in prop::collection::vec(any::<bool>(), 60),
        budget in 50u64..2_000,
        share in 0.1f64..1.0,
    ) {
        let sel = { let mut o = Selection::default(); o.max_tokens = Some(budget); o.trim_to = Some(share); o.tokenizer = Tokenizer::Bytes; o };
        let mut log = String::new();
        let mut prev: Option<WindowStart> = None;
        let mut live = None;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        for (i, &size) in sizes.iter().enumerate() {
            // Some records arrive late, with an earlier ts_ms.
            let ts = if late[i] && i > 2 { (i as u64 - 2) * 10 + 1 } else { i as u64 * 10 };
            log.push_str(&record(ts, size));
            let mut r = replay(log.as_bytes(), &ReplayOptions::default());
            let everything = texts(&r.render_messages(Format::OpenAi));
            let report = r.select(&sel, prev);
            let got = texts(&r.render_messages(Format::OpenAi));
            let tokens: u64 = got.iter().map(|t| Tokenizer::Bytes.count(t)).sum();
            prop_assert!(tokens <= budget);
            prop_assert_eq!(report.tokens, Some(tokens));
            if report.trimmed {
                prop_assert!(tokens as f64 <= (budget as f64 * share).floor());
                // It overflowed: the records from the old start do not fit.
                if let Some(p) = prev {
                    let mut again = replay(log.as_bytes(), &ReplayOptions::default());
                    let keep = { let mut o = sel.clone(); o.max_tokens = Some(u64::MAX); o };
                    again.select(&keep, Some(p));
                    let from_old: u64 = texts(&again.render_messages(Format::OpenAi))
                        .iter()
                        .map(|t| Tokenizer::Bytes.count(t))
                        .sum();
                    prop_assert!(from_old > budget);
                }
            } else if prev.is_some() && report.window_start.is_some() {
                prop_assert_eq!(report.window_start, prev, "the start moved without an overflow");
            }
            // The window is the newest records.
            prop_assert_eq!(&got[..], &everything[everything.len() - got.len()..]);
            // The live state, fed the same appends, selects the same bytes.
            std::fs::write(&path, &log).unwrap();
            let l = live.get_or_insert_with(|| {
                LiveReplay::new(&path, Format::OpenAi, ReplayOptions::default())
            });
            l.refresh().unwrap();
            let (chunks, lreport) = l.select(&sel, prev).unwrap();
            prop_assert_eq!(lreport, report);
            let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            let mut body = b"[".to_vec();
            body.extend_from_slice(&joined[..joined.len().saturating_sub(1)]);
            body.push(b']');
            prop_assert_eq!(texts(&body), got);
            prev = report.window_start;
        }
    }
}

#[test]
fn live_windows_filters_and_marks_match_a_one_shot_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wm.log");
    let full = common::hostile_log(5, 1500);
    let cut = full.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let full = &full[..cut];
    let selections = [
        {
            let mut o = Selection::default();
            o.tail = Some(25);
            o.mark_pending = true;
            o
        },
        {
            let mut o = Selection::default();
            o.session = Some("s-1".into());
            o.kinds = Some(vec!["text_input".into(), "text_output".into()]);
            o.max_tokens = Some(700);
            o.tokenizer = Tokenizer::O200k;
            o.mark_pending = true;
            o
        },
        {
            let mut o = Selection::default();
            o.since = Some(1_763_700_100_000.0);
            o.max_tokens = Some(3000);
            o.tokenizer = Tokenizer::Cl100k;
            o
        },
        {
            let mut o = Selection::default();
            o.tail = Some(40);
            o.trim_to = Some(0.5);
            o.start_on = Some("text_input".into());
            o.mark_pending = true;
            o
        },
        {
            let mut o = Selection::default();
            o.max_tokens = Some(2000);
            o.tokenizer = Tokenizer::Bytes;
            o.start_on = Some("wm_event".into());
            o
        },
    ];
    for (k, sel) in selections.iter().enumerate() {
        for format in [Format::Anthropic, Format::OpenAi, Format::Ndjson] {
            std::fs::write(&path, b"").unwrap();
            let mut live = LiveReplay::new(&path, format, ReplayOptions::default())
                .with_selection(sel.clone());
            let mut at = 0;
            let mut step = 1;
            while at < full.len() {
                let end = (at + step * 997).min(full.len());
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .unwrap();
                std::io::Write::write_all(&mut f, &full[at..end]).unwrap();
                at = end;
                step += 1;
                live.refresh().unwrap();
                let (chunks, report) = live.select(sel, None).unwrap();
                let committed = &full[..full[..at]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1)];
                let mut one = replay(committed, &ReplayOptions::default());
                assert_eq!(
                    live.stats().already_ordered,
                    one.stats().already_ordered,
                    "selection {k} {format:?} at {at}"
                );
                let want = one.select(sel, None);
                assert_eq!(report, want, "selection {k} {format:?} at {at}");
                let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
                let expected = wmreplay::__internals::request::render_messages(
                    one.records(),
                    committed,
                    format,
                );
                let expected: &[u8] = match format {
                    Format::Ndjson => &expected,
                    // Drop the brackets; the live chunks keep every separator.
                    _ => &expected[1..expected.len() - 1],
                };
                let joined: &[u8] = if format != Format::Ndjson && !joined.is_empty() {
                    &joined[..joined.len() - 1]
                } else {
                    &joined
                };
                assert_eq!(
                    String::from_utf8_lossy(joined),
                    String::from_utf8_lossy(expected),
                    "selection {k} {format:?} at {at}"
                );
            }
        }
    }
}

#[test]
fn xml_is_well_formed_for_any_log_and_keeps_every_record() {
    for seed in 0..40 {
        let mut log = common::hostile_log(seed, 300);
        // Characters XML cannot hold raw, inside valid JSON strings.
        log.extend_from_slice(
            "{\"type\":\"a\u{FFFE}<&>\\\"\",\"ts_ms\":1,\"t\":\"\u{FFFF}]]>\u{0085}\"}\r\n"
                .as_bytes(),
        );
        let r = replay(&log, &ReplayOptions::default());
        let xml = r.render_messages(Format::Xml);
        let text = std::str::from_utf8(&xml).expect("UTF-8");
        let doc = roxmltree::Document::parse(text)
            .unwrap_or_else(|e| panic!("seed {seed}: not XML: {e}\n{text}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "memory_context");
        let elements: Vec<_> = root.children().filter(|n| n.is_element()).collect();
        assert_eq!(elements.len(), r.records().len(), "seed {seed}");
        for (e, rec) in elements.iter().zip(r.records()) {
            let line = String::from_utf8(rec.line(&log).to_vec()).unwrap();
            let expected = line
                .replace('\u{FFFE}', "\\ufffe")
                .replace('\u{FFFF}', "\\uffff");
            assert_eq!(e.text().unwrap_or(""), expected, "seed {seed}");
            // The text is still the record's JSON.
            let a: Value = serde_json::from_str(&expected).unwrap_or(Value::Null);
            let b: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            assert_eq!(a, b);
            assert_eq!(
                e.attribute("ts_ms").unwrap(),
                String::from_utf8_lossy(
                    wmreplay::__internals::escape::JsNumber::new(rec.ts_ms()).as_bytes()
                )
            );
            assert!(e.attribute("kind").is_some());
        }
    }
    // A delta document, and an empty one.
    let log = lines(&[r#"{"type":"k","ts_ms":1}"#]);
    let r = replay(&log, &ReplayOptions::default());
    let delta = wmreplay::__internals::request::render_xml(
        r.records(),
        &log,
        wmreplay::__internals::xml::Document::Delta { from: 10, to: 33 },
    );
    let text = String::from_utf8(delta).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "memory_delta");
    assert_eq!(doc.root_element().attribute("from"), Some("10"));
    assert_eq!(
        render_messages(&[], b"", Format::Xml),
        b"<memory_context>\n</memory_context>\n"
    );
}

#[test]
fn an_infinite_pending_ts_ms_is_reported_as_json_null() {
    let log = lines(&[r#"{"type":"text_input","ts_ms":1e400,"text":"later than anything"}"#]);
    let mut r = replay(&log, &ReplayOptions::default());
    let report = r.select(&Selection::default(), None);
    assert_eq!(report.pending.unwrap().line, 1);
    let v: Value = serde_json::from_str(&format!("{{{}}}", report.json_members()))
        .expect("the report is JSON");
    assert_eq!(v["pending_input"]["ts_ms"], Value::Null);
}

#[test]
fn a_remembered_start_that_no_longer_exists_starts_afresh() {
    let mut log = String::new();
    for i in 0..20u64 {
        log.push_str(&record(i, 100));
    }
    let sel = {
        let mut o = Selection::default();
        o.max_tokens = Some(200);
        o.trim_to = Some(0.5);
        o.tokenizer = Tokenizer::Bytes;
        o
    };
    let fresh = replay(log.as_bytes(), &ReplayOptions::default()).select(&sel, None);
    // A start from another log: a key and offset no record here has.
    let gone = WindowStart { key: 1, offset: 7 };
    let report = replay(log.as_bytes(), &ReplayOptions::default()).select(&sel, Some(gone));
    assert_eq!(report, fresh);
    assert!(report.trimmed);
}
