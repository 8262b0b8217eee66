//! Summaries and keyed facts kept as records of the log (`--summaries`,
//! `--facts`): the engine's selection against a plain-Rust model of the
//! rules in docs/contract.md, on random logs, and the rules one by one.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};
use wmreplay::{CurrentRequest, Format, ReplayOptions, Selection, replay};

fn sel(summaries: bool, facts: bool) -> Selection {
    let mut s = Selection::default();
    s.summaries = summaries;
    s.facts = facts;
    s
}

/// The message texts the engine replays for `log` under `sel`, then its
/// facts message, if any.
fn engine(log: &str, sel: &Selection) -> Vec<String> {
    let mut r = replay(log.as_bytes(), &ReplayOptions::default());
    r.select(sel, None);
    let mut out: Vec<String> = r
        .records()
        .iter()
        .map(|rec| {
            let mut t = String::new();
            r.message_text(rec, &mut t);
            t
        })
        .collect();
    if let Some(f) = r.facts_text() {
        out.push(f.to_string());
    }
    out
}

/// The rules, written plainly over the log's lines (every line valid JSON).
fn model(log: &str, summaries: bool, facts: bool) -> Vec<String> {
    struct Rec {
        offset: u64,
        ts: f64,
        kind: String,
        line: String,
        v: Value,
    }
    let mut recs = Vec::new();
    let mut offset = 0u64;
    for line in log.split_inclusive('\n') {
        let text = line.trim_end_matches('\n');
        let v: Value = serde_json::from_str(text).unwrap();
        if let (Some(kind), Some(ts)) = (v["type"].as_str(), v["ts_ms"].as_f64()) {
            recs.push(Rec {
                offset,
                ts,
                kind: kind.to_string(),
                line: text.to_string(),
                v: v.clone(),
            });
        }
        offset += line.len() as u64;
    }
    // Replay order: ts_ms, then file position (a stable sort).
    recs.sort_by(|a, b| a.ts.partial_cmp(&b.ts).unwrap());
    let mut facts_msg = None;
    if facts {
        let mut live: BTreeMap<String, String> = BTreeMap::new();
        let mut newest = None;
        for r in recs.iter().filter(|r| r.kind == "wm_fact") {
            let (Some(key), Some(value)) = (r.v["key"].as_str(), r.v.get("value")) else {
                continue;
            };
            newest = Some(r.ts);
            if value.is_null() {
                live.remove(key);
            } else {
                live.insert(key.to_string(), value.to_string());
            }
        }
        recs.retain(|r| r.kind != "wm_fact");
        if !live.is_empty() {
            let ts = newest.unwrap() as i64;
            let body: Vec<String> = live
                .iter()
                .map(|(k, v)| format!("{}:{v}", json!(k)))
                .collect();
            facts_msg = Some(format!(
                "WM_KIND=wm_facts\nts_ms: {ts}\nWM_JSON: {{\"type\":\"wm_facts\",\"ts_ms\":{ts},\"facts\":{{{}}}}}",
                body.join(",")
            ));
        }
    }
    let text = |r: &Rec| {
        format!(
            "WM_KIND={}\nts_ms: {}\nWM_JSON: {}",
            r.kind, r.ts as i64, r.line
        )
    };
    let mut out = Vec::new();
    if summaries {
        let newest = recs
            .iter()
            .filter(|r| r.kind == "wm_summary")
            .filter(|r| {
                r.v["covers"]["ts_ms"].is_number()
                    && r.v["covers"]["offset"].is_u64()
                    && r.v["text"].is_string()
            })
            .max_by_key(|r| r.offset);
        if let Some(s) = newest {
            let at = s.offset;
            let x = s.v["covers"]["ts_ms"].as_f64().unwrap();
            let o = s.v["covers"]["offset"].as_u64().unwrap();
            out.push(text(s));
            recs.retain(|r| {
                r.kind != "wm_summary" && (r.offset > at || r.ts > x || (r.ts == x && r.offset > o))
            });
        }
    }
    out.extend(recs.iter().map(text));
    out.extend(facts_msg);
    out
}

/// A random log line: turns, events, summaries (valid or not) and facts.
fn line(offsets: Vec<u64>) -> impl Strategy<Value = String> {
    let offset = prop::sample::select(offsets);
    prop_oneof![
        (0i64..30, "[a-z]{0,5}").prop_map(|(ts, t)| json!({"type": "text_input", "ts_ms": ts, "text": t}).to_string()),
        (0i64..30).prop_map(|ts| json!({"type": "text_output", "ts_ms": ts, "text": "x"}).to_string()),
        (0i64..30).prop_map(|ts| json!({"type": "wm_event", "ts_ms": ts}).to_string()),
        (0i64..30, 0i64..30, offset, any::<bool>()).prop_map(|(ts, x, o, valid)| {
            if valid {
                json!({"type": "wm_summary", "ts_ms": ts, "covers": {"ts_ms": x, "offset": o}, "text": "s"}).to_string()
            } else {
                json!({"type": "wm_summary", "ts_ms": ts, "covers": {"ts_ms": x}, "text": "s"}).to_string()
            }
        }),
        (0i64..30, prop::sample::select(vec!["a", "b", "user.name", "é", "Z"]), prop_oneof![
            Just(Value::Null),
            (0i64..9).prop_map(|n| json!(n)),
            "[a-z]{0,3}".prop_map(|s| json!(s)),
            Just(json!({"z": 1, "a": [1, 2]})),
        ]).prop_map(|(ts, k, v)| json!({"type": "wm_fact", "ts_ms": ts, "key": k, "value": v}).to_string()),
        (0i64..30).prop_map(|ts| json!({"type": "wm_fact", "ts_ms": ts, "key": 5}).to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn summaries_and_facts_follow_the_rules(
        lines in prop::collection::vec(line((0..1200).step_by(37).collect()), 0..30),
        summaries in any::<bool>(),
        facts in any::<bool>(),
    ) {
        // Offsets that land on real line starts too, so covers hit records.
        let mut log = String::new();
        for l in &lines {
            log.push_str(l);
            log.push('\n');
        }
        prop_assert_eq!(engine(&log, &sel(summaries, facts)), model(&log, summaries, facts));
    }
}

fn log_of(lines: &[Value]) -> (String, Vec<u64>) {
    let mut log = String::new();
    let mut offsets = Vec::new();
    for l in lines {
        offsets.push(log.len() as u64);
        log.push_str(&l.to_string());
        log.push('\n');
    }
    (log, offsets)
}

#[test]
fn a_summary_stands_for_what_it_covers_and_late_records_written_after_it_stay() {
    let mut lines = vec![
        json!({"type": "text_input", "ts_ms": 1, "text": "a"}),
        json!({"type": "text_output", "ts_ms": 2, "text": "b"}),
        json!({"type": "text_input", "ts_ms": 3, "text": "c"}),
    ];
    let (_, offsets) = log_of(&lines);
    // Covers up to the output (ts 2 at its offset); an older summary too.
    lines.push(json!({"type": "wm_summary", "ts_ms": 4, "covers": {"ts_ms": 1, "offset": offsets[0]}, "text": "old"}));
    lines.push(json!({"type": "wm_summary", "ts_ms": 5, "covers": {"ts_ms": 2, "offset": offsets[1]}, "text": "new"}));
    // Written after the summary, sorted into the covered range: replayed.
    lines.push(json!({"type": "wm_event", "ts_ms": 1, "late": true}));
    let (log, _) = log_of(&lines);
    let got = engine(&log, &sel(true, false));
    let kinds: Vec<&str> = got.iter().map(|t| t.lines().next().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "WM_KIND=wm_summary",
            "WM_KIND=wm_event",
            "WM_KIND=text_input"
        ]
    );
    assert!(got[0].contains("\"text\":\"new\""));
    assert!(got[2].contains("\"text\":\"c\""));
    // Without the flag, every record replays, summaries included.
    assert_eq!(engine(&log, &sel(false, false)).len(), 6);
    // The report counts the summary among what is matched and selected.
    let mut r = replay(log.as_bytes(), &ReplayOptions::default());
    let report = r.select(&sel(true, false), None);
    assert_eq!((report.matched, report.selected), (3, 3));
}

#[test]
fn the_newest_summary_is_the_last_in_the_file_and_an_invalid_one_is_ignored() {
    let lines = vec![
        json!({"type": "text_input", "ts_ms": 10, "text": "a"}),
        // Last in the file but ts_ms earlier: still the newest.
        json!({"type": "wm_summary", "ts_ms": 50, "covers": {"ts_ms": 10, "offset": 0}, "text": "by ts"}),
        json!({"type": "wm_summary", "ts_ms": 20, "covers": {"ts_ms": 10, "offset": 0}, "text": "by file"}),
        json!({"type": "wm_summary", "ts_ms": 60, "covers": {"offset": 0}, "text": "invalid"}),
    ];
    let (log, _) = log_of(&lines);
    let got = engine(&log, &sel(true, false));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].contains("by file"));
}

#[test]
fn facts_keep_the_latest_value_of_every_live_key_whatever_covers_them() {
    let lines = vec![
        json!({"type": "wm_fact", "ts_ms": 1, "key": "user.name", "value": "Ann"}),
        json!({"type": "wm_fact", "ts_ms": 2, "key": "b", "value": {"z": 1, "a": 2}}),
        json!({"type": "wm_fact", "ts_ms": 3, "key": "gone", "value": true}),
        json!({"type": "wm_fact", "ts_ms": 4, "key": "gone", "value": null}),
        json!({"type": "text_input", "ts_ms": 5, "text": "hi"}),
        json!({"type": "wm_summary", "ts_ms": 6, "covers": {"ts_ms": 5, "offset": 9999}, "text": "all"}),
    ];
    let (log, _) = log_of(&lines);
    let got = engine(&log, &sel(true, true));
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[1],
        "WM_KIND=wm_facts\nts_ms: 4\nWM_JSON: {\"type\":\"wm_facts\",\"ts_ms\":4,\"facts\":{\"b\":{\"z\":1,\"a\":2},\"user.name\":\"Ann\"}}"
    );
}

#[test]
fn the_facts_message_comes_just_before_the_current_request_and_default_bodies_are_unchanged() {
    let lines = vec![
        json!({"type": "text_input", "ts_ms": 1, "text": "a"}),
        json!({"type": "wm_fact", "ts_ms": 2, "key": "k", "value": 1}),
    ];
    let (log, _) = log_of(&lines);
    let current = CurrentRequest {
        text: "now",
        session_id: None,
    };
    let plain = replay(log.as_bytes(), &ReplayOptions::default());
    let contract = plain.render_request(Format::Anthropic, "sys", &current);
    // Flags off: the contract's body, byte for byte.
    let mut off = replay(log.as_bytes(), &ReplayOptions::default());
    off.select(&sel(false, false), None);
    assert_eq!(
        off.render_request(Format::Anthropic, "sys", &current),
        contract
    );
    let mut on = replay(log.as_bytes(), &ReplayOptions::default());
    on.select(&sel(true, true), None);
    for format in [Format::Anthropic, Format::OpenAi, Format::Ndjson] {
        let body = String::from_utf8(on.render_request(format, "sys", &current)).unwrap();
        let facts = body.find("WM_KIND=wm_facts").expect("facts rendered");
        let now = body.find("CURRENT_USER_REQUEST").unwrap();
        let last_record = body.find("WM_KIND=text_input").unwrap();
        assert!(last_record < facts && facts < now, "{body}");
        assert!(
            !body.contains("WM_KIND=wm_fact\\n"),
            "facts are not replayed one by one"
        );
        // The sized and streamed renders agree.
        let sized = on.sized_request(format, "sys", &current);
        let mut buf = vec![0; sized.len()];
        sized.write_into(&mut buf);
        assert_eq!(buf, body.as_bytes());
        let mut streamed = Vec::new();
        on.write_request(format, "sys", &current, &mut streamed)
            .unwrap();
        assert_eq!(streamed, body.as_bytes());
    }
}

use crate::mock;

async fn call(method: reqwest::Method, url: String, body: Option<&str>) -> (u16, Value) {
    let mut r = mock::client().request(method, url);
    if let Some(b) = body {
        r = r.body(b.to_string());
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facts_are_set_deleted_and_read_through_the_server_as_records_of_the_log() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    std::fs::write(
        &log,
        "{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"hi\"}\n",
    )
    .unwrap();
    let srv = mock::start(mock::config(
        &log,
        None,
        wmreplay::server::Provider::Anthropic,
    ))
    .await;
    let url = |p: &str| format!("{}{p}", srv.url);
    let (s, r) = call(Method::PUT, url("/v1/facts/user.name"), Some("\"Ann\"")).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(
        (r["key"].as_str(), r["deleted"].as_bool()),
        (Some("user.name"), Some(false))
    );
    let (s, _) = call(
        Method::PUT,
        url("/v1/facts/pref"),
        Some("{ \"tone\": \"short\", \"é\": [1, 2] }"),
    )
    .await;
    assert_eq!(s, 200);
    let (s, _) = call(Method::PUT, url("/v1/facts/gone"), Some("true")).await;
    assert_eq!(s, 200);
    let (s, r) = call(Method::DELETE, url("/v1/facts/gone"), None).await;
    assert_eq!((s, r["deleted"].as_bool()), (200, Some(true)));
    let (s, r) = call(Method::PUT, url("/v1/facts/x"), Some("not json")).await;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (400, Some("invalid_json"))
    );
    let (s, r) = call(Method::GET, url("/v1/facts"), None).await;
    assert_eq!(s, 200);
    assert_eq!(
        r,
        json!({"facts": {"pref": {"tone": "short", "é": [1, 2]}, "user.name": "Ann"}})
    );
    // Each write is a wm_fact record of the log, stamped, compact, and what
    // --facts renders from.
    let text = std::fs::read_to_string(&log).unwrap();
    let facts: Vec<Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(facts.len(), 4);
    assert!(
        facts
            .iter()
            .all(|f| f["type"] == "wm_fact" && f["ts_ms"].is_u64())
    );
    assert_eq!(facts[3]["value"], Value::Null);
    assert!(
        text.contains(r#""value":{"tone":"short","é":[1,2]}"#),
        "{text}"
    );
    let rendered = engine(&text, &sel(false, true));
    assert!(
        rendered
            .last()
            .unwrap()
            .contains(r#""facts":{"pref":{"tone":"short","é":[1,2]},"user.name":"Ann"}"#)
    );
    srv.stop().await;
    // The same routes for each log of a --log-dir.
    let agents = tempfile::tempdir().unwrap();
    let mut cfg = mock::config(
        &agents.path().join("unused.log"),
        None,
        wmreplay::server::Provider::Anthropic,
    );
    cfg.log_dir = Some(agents.path().to_path_buf());
    let srv = mock::start(cfg).await;
    let (s, r) = call(
        Method::PUT,
        format!("{}/v1/logs/agent-7/facts/city", srv.url),
        Some("\"Oslo\""),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    let (_, r) = call(
        Method::GET,
        format!("{}/v1/logs/agent-7/facts", srv.url),
        None,
    )
    .await;
    assert_eq!(r, json!({"facts": {"city": "Oslo"}}));
    let (_, r) = call(
        Method::GET,
        format!("{}/v1/logs/other/facts", srv.url),
        None,
    )
    .await;
    assert_eq!(r, json!({"facts": {}}));
    srv.stop().await;
}

/// `serve --summaries --facts`: after every append (records, facts, a
/// summary, a late record written after it), the request the server would
/// send is the one-shot replay's, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_places_summaries_and_facts_as_a_one_shot_replay_does() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    std::fs::write(&log, "").unwrap();
    let mut cfg = mock::config(&log, None, wmreplay::server::Provider::Anthropic);
    cfg.cache = false;
    cfg.model = None;
    cfg.selection.summaries = true;
    cfg.selection.facts = true;
    let srv = mock::start(cfg).await;
    let records = format!("{}/v1/records", srv.url);
    let check = |what: &'static str| {
        let url = format!("{}/v1/context", srv.url);
        let log = log.clone();
        async move {
            let r = mock::client()
                .post(url)
                .body(r#"{"text":"now","session_id":"s"}"#)
                .send()
                .await
                .unwrap();
            let got = r.bytes().await.unwrap();
            let bytes = std::fs::read(&log).unwrap();
            let mut one = replay(&bytes, &ReplayOptions::default());
            one.select(&sel(true, true), None);
            let current = CurrentRequest {
                text: "now",
                session_id: Some("s"),
            };
            let want = one.render_request(Format::Anthropic, wmreplay::SYSTEM_RULE, &current);
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "after {what}"
            );
        }
    };
    for i in 0..5 {
        let body = format!(
            r#"[{{"type":"text_input","ts_ms":{},"text":"q{i}"}},{{"type":"text_output","ts_ms":{},"text":"a{i}"}}]"#,
            100 + i * 10,
            101 + i * 10
        );
        let (s, r) = call(Method::POST, records.clone(), Some(&body)).await;
        assert_eq!(s, 200, "{r}");
        check("turns").await;
    }
    let (s, _) = call(
        Method::PUT,
        format!("{}/v1/facts/user.name", srv.url),
        Some("\"Ann\""),
    )
    .await;
    assert_eq!(s, 200);
    check("a fact").await;
    let covered = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .take(4)
        .map(|l| l.len() as u64 + 1)
        .sum::<u64>();
    let summary = format!(
        r#"{{"type":"wm_summary","ts_ms":200,"covers":{{"ts_ms":120,"offset":{covered}}},"text":"q0 to q2"}}"#
    );
    let (s, _) = call(Method::POST, records.clone(), Some(&summary)).await;
    assert_eq!(s, 200);
    check("a summary").await;
    let (s, _) = call(
        Method::POST,
        records.clone(),
        Some(r#"{"type":"wm_event","ts_ms":105,"late":true}"#),
    )
    .await;
    assert_eq!(s, 200);
    check("a late record written after the summary").await;
    let (s, _) = call(
        Method::DELETE,
        format!("{}/v1/facts/user.name", srv.url),
        None,
    )
    .await;
    assert_eq!(s, 200);
    check("a deleted fact").await;
    // What the server sends holds the summary, the late record, not what was covered.
    let body = String::from_utf8(
        mock::client()
            .post(format!("{}/v1/context", srv.url))
            .body(r#"{"text":"x"}"#)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    assert!(body.contains("WM_KIND=wm_summary") && body.contains("\\\"late\\\":true"));
    assert!(
        !body.contains("q1\\\""),
        "covered turns are left out: {body}"
    );
    // Session deltas take the same rules: XML has no place for the facts
    // message; a full prepare is the one-shot replay's messages.
    let prepare = format!("{}/v1/turn/prepare", srv.url);
    let (s, e) = call(
        Method::POST,
        prepare.clone(),
        Some(r#"{"session_key":"k"}"#),
    )
    .await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (400, Some("invalid_format"))
    );
    let (s, p) = call(
        Method::POST,
        prepare,
        Some(r#"{"session_key":"k","format":"anthropic"}"#),
    )
    .await;
    assert_eq!(s, 200, "{p}");
    let bytes = std::fs::read(&log).unwrap();
    let mut one = replay(&bytes, &ReplayOptions::default());
    one.select(&sel(true, true), None);
    assert_eq!(p["mode"], "full");
    assert_eq!(
        p["body"].as_str().unwrap(),
        String::from_utf8(one.render_messages(Format::Anthropic)).unwrap()
    );
    srv.stop().await;
}

#[test]
fn the_messages_alone_end_with_the_facts_message() {
    let lines = vec![
        json!({"type": "text_input", "ts_ms": 1, "text": "a"}),
        json!({"type": "wm_fact", "ts_ms": 2, "key": "k", "value": 1}),
    ];
    let (log, _) = log_of(&lines);
    let mut r = replay(log.as_bytes(), &ReplayOptions::default());
    r.select(&sel(false, true), None);
    for format in [Format::Anthropic, Format::OpenAi, Format::Ndjson] {
        let whole = r.render_messages(format);
        let mut streamed = Vec::new();
        r.write_messages(format, &mut streamed).unwrap();
        assert_eq!(streamed, whole, "{format:?}");
        let text = String::from_utf8(whole).unwrap();
        let messages: Vec<Value> = match format {
            Format::Ndjson => text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
            _ => serde_json::from_str(&text).unwrap(),
        };
        assert_eq!(messages.len(), 2, "{text}");
        assert!(
            messages[1].to_string().contains("WM_KIND=wm_facts"),
            "{text}"
        );
    }
    // No record left but the facts: the facts message alone.
    let (only, _) = log_of(&lines[1..]);
    let mut r = replay(only.as_bytes(), &ReplayOptions::default());
    r.select(&sel(false, true), None);
    let v: Value = serde_json::from_slice(&r.render_messages(Format::OpenAi)).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    // XML carries no facts message.
    let xml = String::from_utf8(r.render_messages(Format::Xml)).unwrap();
    assert!(!xml.contains("wm_facts"), "{xml}");
}
