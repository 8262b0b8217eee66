//! The memory inspector's routes (`GET …/timeline`, `…/timeline/record`,
//! `…/timeline/tail`, `…/memory`, `…/inspect/turn`) and the page itself
//! (`/ui`), held to the engine: the timeline is a one-shot replay's order,
//! a turn's view is what `wmreplay respond` writes for the log as it stood
//! before that turn. The page in a real browser: `tests/browser/inspector.py`.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wmreplay::server::Provider;
use wmreplay::{ReplayOptions, replay};

use crate::common::{cli_json, respond_request as respond};
use crate::mock::*;

/// A log with late records, bad lines (one not UTF-8), two sessions,
/// facts, a memory file and a summary.
fn inspector_log(path: &Path, n: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        let ts = 1_000 + i as u64 * 10;
        // Every 7th record arrives late.
        let ts = if i % 7 == 6 { ts - 35 } else { ts };
        let session = if i % 3 == 0 { "a" } else { "b" };
        let line = match i % 5 {
            0 => {
                json!({"type": "text_input", "ts_ms": ts, "session_id": session, "text": format!("question {i} about the deploy")})
            }
            1 => {
                json!({"type": "text_output", "ts_ms": ts, "session_id": session, "text": format!("answer {i}: run the tests first")})
            }
            2 => json!({"type": "wm_event", "ts_ms": ts, "event": {"kind": "focus", "n": i}}),
            3 => json!({"type": "wm_fact", "ts_ms": ts, "key": format!("k{}", i % 4), "value": i}),
            _ => json!({"type": "tool_call", "ts_ms": ts, "tool": "read", "args": {"i": i}}),
        };
        writeln!(f, "{line}").unwrap();
        if i == n / 2 {
            f.write_all(b"{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"\xff\xfe not utf-8\"}\n")
                .unwrap();
            f.write_all(b"not json at all\n").unwrap();
        }
    }
    writeln!(f, "{}", json!({"type": "wm_fact", "ts_ms": 900_000, "key": "/memories/notes.md", "value": "# Notes\n- tea"})).unwrap();
    writeln!(
        f,
        "{}",
        json!({"type": "wm_fact", "ts_ms": 900_001, "key": "k1", "value": null})
    )
    .unwrap();
    f.flush().unwrap();
}

/// The status of `GET url`, with one header if given.
async fn status_of(url: impl AsRef<str>, header: Option<(&str, &str)>) -> u16 {
    let mut req = client().get(url.as_ref());
    if let Some((name, value)) = header {
        req = req.header(name, value);
    }
    req.send().await.unwrap().status().as_u16()
}

/// The offsets of a one-shot replay's records, in replay order.
fn replay_order(bytes: &[u8]) -> Vec<u64> {
    let r = replay(bytes, &ReplayOptions::default());
    r.records().iter().map(|x| r.source_offset(x)).collect()
}

async fn all_pages(url: &str, query: &str, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut from = None::<u64>;
    loop {
        let at = from.map_or(String::new(), |f| format!("&from={f}"));
        let page = get_json(&format!("{url}/v1/timeline?limit={limit}{query}{at}")).await;
        let recs = page["records"].as_array().unwrap();
        assert!(recs.len() <= 200, "a page holds at most 200 records");
        out.extend(recs.iter().cloned());
        match page["next"].as_u64() {
            Some(n) => from = Some(n),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_is_the_replay_order_a_page_at_a_time_with_filters() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    inspector_log(&log, 1_000);
    let bytes = std::fs::read(&log).unwrap();
    let srv = start(config(&log, None, Provider::Anthropic)).await;
    // 500 asked, 200 given.
    let page = get_json(&format!("{}/v1/timeline?limit=500", srv.url)).await;
    assert_eq!(page["records"].as_array().unwrap().len(), 200);
    assert_eq!(page["total"], 1_002);
    assert_eq!(page["kinds"]["wm_fact"], 202);
    let rows = all_pages(&srv.url, "", 150).await;
    let offsets: Vec<u64> = rows.iter().map(|r| r["offset"].as_u64().unwrap()).collect();
    assert_eq!(
        offsets,
        replay_order(&bytes),
        "the timeline is the replay order"
    );
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["i"], i);
    }
    // Filters: kinds, a session (records without one stay, as --session
    // keeps them), a time range; each the same as the engine's selection.
    let r = replay(&bytes, &ReplayOptions::default());
    for (query, sel) in [
        ("&kinds=text_input,wm_fact", {
            let mut s = wmreplay::Selection::default();
            s.kinds = Some(vec!["text_input".into(), "wm_fact".into()]);
            s
        }),
        ("&session=a", {
            let mut s = wmreplay::Selection::default();
            s.session = Some("a".into());
            s
        }),
        ("&since=3000&until=5005", {
            let mut s = wmreplay::Selection::default();
            s.since = Some(3000.0);
            s.until = Some(5005.0);
            s
        }),
    ] {
        let want: Vec<u64> = r
            .records()
            .iter()
            .filter(|x| sel.matches(x, r.data()))
            .map(|x| r.source_offset(x))
            .collect();
        let got: Vec<u64> = all_pages(&srv.url, query, 200)
            .await
            .iter()
            .map(|r| r["offset"].as_u64().unwrap())
            .collect();
        assert_eq!(got, want, "{query}");
    }
    // Around a record: the page holds it, and says which row it is.
    let hit = &rows[600];
    let page = get_json(&format!(
        "{}/v1/timeline?around={}&ts_ms={}&limit=20",
        srv.url, hit["offset"], hit["ts_ms"]
    ))
    .await;
    assert_eq!(page["focus"], 600);
    assert!(
        page["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["i"] == 600)
    );
    // Bad parameters are 400s that name them.
    let r = client()
        .get(format!("{}/v1/timeline?limit=ten", srv.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("limit"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_is_shown_as_written_even_when_it_was_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    inspector_log(&log, 100);
    let bytes = std::fs::read(&log).unwrap();
    let srv = start(config(&log, None, Provider::Anthropic)).await;
    let stats = get_json(&format!("{}/v1/stats", srv.url)).await;
    let skips = stats["stats"]["skips"].as_array().unwrap();
    assert_eq!(skips.len(), 2, "{stats}");
    let bad = skips[0]["offset"].as_u64().unwrap();
    let line = get_json(&format!("{}/v1/timeline/record?offset={bad}", srv.url)).await;
    assert_eq!(line["valid_utf8"], false);
    assert!(
        line["text"]
            .as_str()
            .unwrap()
            .contains("\u{fffd}\u{fffd} not utf-8")
    );
    assert_eq!(line["json"], Value::Null);
    // A record: its JSON too.
    let first = get_json(&format!("{}/v1/timeline/record?offset=0", srv.url)).await;
    assert_eq!(first["json"]["text"], "question 0 about the deploy");
    assert_eq!(
        first["text"].as_str().unwrap().as_bytes(),
        &bytes[..bytes.iter().position(|&b| b == b'\n').unwrap()]
    );
    // Not the start of a line, or past the end: 404.
    for at in [1, bytes.len() as u64 + 10] {
        assert_eq!(
            status_of(format!("{}/v1/timeline/record?offset={at}", srv.url), None).await,
            404,
            "offset {at}"
        );
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_lists_every_key_with_its_versions_the_files_and_summaries() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    inspector_log(&log, 40);
    let bytes = std::fs::read(&log).unwrap();
    // A summary covering the first ten records in replay order.
    let order = replay_order(&bytes);
    let r = replay(&bytes, &ReplayOptions::default());
    let tenth = &r.records()[9];
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(
        f,
        "{}",
        json!({"type": "wm_summary", "ts_ms": 950_000, "covers": {"ts_ms": tenth.ts_ms(), "offset": order[9]}, "text": "they talked of deploys"})
    )
    .unwrap();
    let srv = start(config(&log, None, Provider::Anthropic)).await;
    let m = get_json(&format!("{}/v1/memory", srv.url)).await;
    let facts = m["facts"].as_array().unwrap();
    let keys: Vec<&str> = facts.iter().map(|f| f["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["k0", "k1", "k2", "k3"]);
    // k1: deleted last, its versions newest first.
    let k1 = &facts[1];
    assert_eq!(k1["live"], false);
    assert_eq!(k1["history"][0]["value"], Value::Null);
    assert_eq!(k1["versions"], 3);
    // The current facts are what GET /v1/facts says.
    let current = get_json(&format!("{}/v1/facts", srv.url)).await;
    for f in facts.iter().filter(|f| f["live"] == true) {
        assert_eq!(current["facts"][f["key"].as_str().unwrap()], f["value"]);
    }
    assert_eq!(m["files"][0]["key"], "/memories/notes.md");
    assert_eq!(m["files"][0]["value"], "# Notes\n- tea");
    let s = &m["summaries"][0];
    assert_eq!(s["covers_rows"], 10);
    assert_eq!(s["text"], "they talked of deploys");
    srv.stop().await;
}

/// The view of a turn is what `wmreplay respond` writes for the log as it
/// stood before the turn's `text_input`, with the server's flags; its
/// window's count and tokens are `wmreplay stats`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_view_is_what_respond_writes_for_the_log_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    inspector_log(&log, 600);
    let bytes = std::fs::read(&log).unwrap();
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.selection.max_tokens = Some(1_500);
    cfg.selection.facts = true;
    let srv = start(cfg).await;
    let inputs = all_pages(&srv.url, "&kinds=text_input", 200).await;
    let point = &inputs[inputs.len() * 2 / 3];
    let offset = point["offset"].as_u64().unwrap();
    let view = get_json(&format!("{}/v1/inspect/turn?offset={offset}", srv.url)).await;
    assert_eq!(view["point"]["offset"], offset, "{view}");
    let text = point["text"].as_str().unwrap();
    let session = point["session_id"].as_str().unwrap();
    let prefix = dir.path().join("prefix.log");
    std::fs::write(&prefix, &bytes[..offset as usize]).unwrap();
    let flags = ["--max-tokens", "1500", "--facts"];
    let want = respond(
        &prefix,
        text,
        &[&["--session", session][..], &flags].concat(),
    );
    assert_eq!(view["request"], want, "the view's request is respond's");
    let stats = cli_json("stats", &prefix, &flags);
    let w = &view["window"];
    let sel = &stats;
    assert_eq!(w["selected_records"], sel["selected_records"], "{stats}");
    assert_eq!(w["window_tokens"], sel["window_tokens"]);
    assert_eq!(w["window_start"]["offset"], sel["window_start"]["offset"]);
    // Each replayed record's tokens, added, are the window's.
    let history: u64 = view["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            !["system", "CURRENT_USER_REQUEST", "wm_facts"].contains(&p["kind"].as_str().unwrap())
        })
        .map(|p| p["tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(Some(history), w["window_tokens"].as_u64());
    assert!(
        view["parts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "wm_facts")
    );
    // The answer that came back: the session's next text_output.
    let answer = &view["answer"];
    assert!(
        answer["text"].as_str().unwrap().starts_with("answer "),
        "{answer}"
    );
    // Not a record's start: 404.
    assert_eq!(
        status_of(
            format!("{}/v1/inspect/turn?offset={}", srv.url, offset + 1),
            None
        )
        .await,
        404
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tail_tells_of_an_appended_record_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    inspector_log(&log, 50);
    let srv = start(config(&log, None, Provider::Anthropic)).await;
    let mut resp = client()
        .get(format!("{}/v1/timeline/tail", srv.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    async fn next_event(resp: &mut reqwest::Response, seen: &mut String) -> Value {
        loop {
            if let Some(end) = seen.find("\n\n") {
                let ev: String = seen.drain(..end + 2).collect();
                if let Some(data) = ev.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return serde_json::from_str(data).unwrap();
                }
                continue;
            }
            let chunk = resp.chunk().await.unwrap().expect("the stream goes on");
            seen.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
    let first = next_event(&mut resp, &mut seen).await;
    assert_eq!(first["total"], 52);
    let t0 = Instant::now();
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(
        f,
        "{}",
        json!({"type": "wm_event", "ts_ms": 5, "late": true})
    )
    .unwrap();
    let grew = tokio::time::timeout(Duration::from_secs(1), next_event(&mut resp, &mut seen))
        .await
        .expect("an event within a second");
    assert_eq!(grew["total"], 53);
    assert!(t0.elapsed() < Duration::from_secs(1));
    // The late record is in its place.
    let page = get_json(&format!("{}/v1/timeline?limit=1", srv.url)).await;
    assert_eq!(page["records"][0]["type"], "wm_event");
    assert_eq!(page["records"][0]["ts_ms"], 5.0);
    // Shutdown ends the stream: the server stops at once.
    let stopped = Instant::now();
    srv.stop().await;
    assert!(stopped.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_with_a_strict_policy_behind_the_same_token() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.auth_token = Some(wmreplay::server::ApiKey("s3cret-token".into()));
    let srv = start(cfg).await;
    let page = client()
        .get(format!("{}/ui", srv.url))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"));
    assert!(!policy.contains("unsafe-inline"));
    let html = page.text().await.unwrap();
    assert!(html.contains("/ui/app.js"));
    // Nothing from another host.
    for asset in ["/ui", "/ui/app.js", "/ui/app.css"] {
        let body = get_text(&format!("{}{asset}", srv.url)).await;
        assert!(
            !body.contains("http://") && !body.contains("https://"),
            "{asset}"
        );
    }
    // The browser rules hold for the page too: a rebound name is refused.
    assert_eq!(
        status_of(format!("{}/ui", srv.url), Some(("host", "evil.example"))).await,
        403
    );
    let info = get_json(&format!("{}/ui/info", srv.url)).await;
    assert_eq!(info["auth"], true);
    assert_eq!(info["logs"], "one");
    // The data needs the token.
    for path in [
        "/v1/timeline",
        "/v1/memory",
        "/v1/timeline/tail",
        "/v1/inspect/turn?offset=0",
    ] {
        assert_eq!(
            status_of(format!("{}{path}", srv.url), None).await,
            401,
            "{path}"
        );
    }
    let r = client()
        .get(format!("{}/v1/timeline", srv.url))
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    srv.stop().await;
    // --ui off: no page.
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.ui = false;
    let srv = start(cfg).await;
    assert_eq!(status_of(format!("{}/ui", srv.url), None).await, 404);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_log_dir_each_log_has_its_own_views() {
    let dir = tempfile::tempdir().unwrap();
    inspector_log(&dir.path().join("alice.log"), 30);
    inspector_log(&dir.path().join("bob.log"), 60);
    let mut cfg = config(&dir.path().join("unused.log"), None, Provider::Anthropic);
    cfg.log_dir = Some(dir.path().to_path_buf());
    let srv = start(cfg).await;
    let logs = get_json(&format!("{}/v1/logs", srv.url)).await;
    assert!(logs["logs"][0]["modified_ms"].as_u64().is_some(), "{logs}");
    let info = get_json(&format!("{}/ui/info", srv.url)).await;
    assert_eq!(info["logs"], "dir");
    for (id, n) in [("alice", 32), ("bob", 62)] {
        let page = get_json(&format!("{}/v1/logs/{id}/timeline?limit=5", srv.url)).await;
        assert_eq!(page["total"], n, "{id}");
        let m = get_json(&format!("{}/v1/logs/{id}/memory", srv.url)).await;
        assert_eq!(m["files"][0]["key"], "/memories/notes.md");
    }
    // A log not written yet reads as empty, and looking does not make it.
    let page = get_json(&format!("{}/v1/logs/carol/timeline", srv.url)).await;
    assert_eq!(page["total"], 0);
    assert!(!dir.path().join("carol.log").exists());
    srv.stop().await;
}

/// What the red team found: a record's kind is the engine's (escapes
/// decoded), a session filter reads a record past 64 KiB whole, a fact past
/// 1 MiB is its latest version, a line that starts mid-line is no line, a
/// NaN is a 400, a page of another site is refused, and a large request is
/// left out of the view but served raw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_logs_and_requests_get_the_engines_answers() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let big = "z".repeat(2 << 20);
    let lines = [
        r#"{"type":"text\u005finput","ts_ms":1,"session_id":"s","text":"escaped kind"}"#.to_string(),
        json!({"type": "wm_fact", "ts_ms": 2, "key": "k", "value": "old small"}).to_string(),
        json!({"type": "wm_fact", "ts_ms": 3, "key": "k", "value": big}).to_string(),
        json!({"type": "tool_result", "ts_ms": 4, "session_id": "s", "text": "y".repeat(100 << 10)}).to_string(),
        json!({"type": "text_input", "ts_ms": 5, "session_id": "s", "text": "last"}).to_string(),
    ];
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let srv = start(config(&log, None, Provider::Anthropic)).await;
    let page = get_json(&format!("{}/v1/timeline?kinds=text_input", srv.url)).await;
    assert_eq!(page["records"].as_array().unwrap().len(), 2, "{page}");
    assert_eq!(page["records"][0]["type"], "text_input");
    let page = get_json(&format!("{}/v1/timeline?session=s", srv.url)).await;
    let kinds: Vec<&str> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "text_input",
            "wm_fact",
            "wm_fact",
            "tool_result",
            "text_input"
        ]
    );
    let m = get_json(&format!("{}/v1/memory", srv.url)).await;
    assert_eq!(m["facts"][0]["versions"], 2);
    assert!(m["facts"][0]["value"].as_str().unwrap().starts_with("zzzz"));
    // The escaped text_input's view asks its text, as respond would.
    let view = get_json(&format!("{}/v1/inspect/turn?offset=0", srv.url)).await;
    assert_eq!(view["point"]["text"], "escaped kind");
    // Inside a line, after a space: not a line's start.
    let after_space = lines[0].find("kind\"").unwrap() as u64;
    assert_eq!(lines[0].as_bytes()[after_space as usize - 1], b' ');
    let inside_next = lines[0].len() as u64 + 1 + 9;
    for offset in [after_space, inside_next] {
        assert_eq!(
            status_of(
                format!("{}/v1/timeline/record?offset={offset}", srv.url),
                None
            )
            .await,
            404,
            "offset {offset}"
        );
    }
    for bad in ["since=NaN", "until=nan", "around=1&ts_ms=NaN"] {
        assert_eq!(
            status_of(format!("{}/v1/timeline?{bad}", srv.url), None).await,
            400,
            "{bad}"
        );
    }
    for path in [
        "/v1/timeline",
        "/v1/memory",
        "/v1/inspect/turn?offset=0",
        "/v1/timeline/tail",
    ] {
        for site in ["cross-site", "same-site"] {
            assert_eq!(
                status_of(format!("{}{path}", srv.url), Some(("sec-fetch-site", site))).await,
                403,
                "{path} from {site}"
            );
        }
    }
    // A turn after a 4 MiB fact: its request (the facts message holds it)
    // is over 4 MiB, left out of the view and served raw.
    let mut cfg_big = config(&log, None, Provider::Anthropic);
    cfg_big.selection.facts = true;
    srv.stop().await;
    let last = std::fs::metadata(&log).unwrap().len()
        + json!({"type": "wm_fact", "ts_ms": 6, "key": "k2", "value": big.repeat(2)})
            .to_string()
            .len() as u64
        + 1;
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(
        f,
        "{}",
        json!({"type": "wm_fact", "ts_ms": 6, "key": "k2", "value": big.repeat(2)})
    )
    .unwrap();
    writeln!(
        f,
        "{}",
        json!({"type": "text_input", "ts_ms": 7, "session_id": "s", "text": "after"})
    )
    .unwrap();
    drop(f);
    let srv = start(cfg_big).await;
    let view = get_json(&format!("{}/v1/inspect/turn?offset={last}", srv.url)).await;
    assert_eq!(view["point"]["text"], "after");
    assert!(view["request"].is_null(), "{}", view["request_bytes"]);
    let bytes = view["request_bytes"].as_u64().unwrap();
    assert!(bytes > 4 << 20);
    let raw = client()
        .get(format!("{}/v1/inspect/turn?offset={last}&raw=1", srv.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(raw.len() as u64, bytes);
    let raw: Value = serde_json::from_slice(&raw).unwrap();
    let messages = raw["messages"].as_array().unwrap().len();
    assert_eq!(messages, view["parts"].as_array().unwrap().len() - 1);
    srv.stop().await;
}

/// What the second red-team pass found: a BOM before the first record, a
/// point whose `ts_ms` is past what a double holds, and a line rewritten in
/// place (same length) after the index read it: each view is still what
/// `wmreplay respond` writes for the bytes before the point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_follows_the_bytes_after_a_bom_an_infinite_ts_and_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    // A BOM, and a text_input whose ts_ms is Infinity to the engine.
    let log = dir.path().join("bom.log");
    let body = "\u{feff}{\"type\":\"note\",\"ts_ms\":1,\"n\":\"first\"}\n{\"type\":\"note\",\"ts_ms\":2}\n";
    let point = body.len() as u64;
    std::fs::write(
        &log,
        format!("{body}{{\"type\":\"text_input\",\"ts_ms\":2e308,\"text\":\"t32\"}}\n"),
    )
    .unwrap();
    let srv = start(config(&log, None, Provider::Anthropic)).await;
    let page = get_json(&format!("{}/v1/timeline", srv.url)).await;
    assert_eq!(page["total"], 3, "{page}");
    let view = get_json(&format!("{}/v1/inspect/turn?offset={point}", srv.url)).await;
    assert_eq!(view["point"]["text"], "t32");
    let prefix = dir.path().join("bom.prefix");
    std::fs::write(&prefix, &std::fs::read(&log).unwrap()[..point as usize]).unwrap();
    assert_eq!(view["request"], respond(&prefix, "t32", &[]));
    srv.stop().await;

    // A line rewritten in place, the same length, after the index read it.
    let log = dir.path().join("gen.log");
    let out = Command::new(env!("CARGO_BIN_EXE_wmreplay"))
        .args(["gen", "--size", "2MiB", "--seed", "3"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.selection.tail = Some(50);
    let srv = start(cfg).await;
    let page = get_json(&format!(
        "{}/v1/timeline?kinds=text_input&from=4000&limit=200",
        srv.url
    ))
    .await;
    let input = page["records"].as_array().unwrap().last().unwrap().clone();
    let at = input["offset"].as_u64().unwrap();
    let before = get_json(&format!("{}/v1/inspect/turn?offset={at}", srv.url)).await;
    assert!(before["request"].is_object());
    // A record ten lines before the point moves to the log's start.
    let mut bytes = std::fs::read(&log).unwrap();
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            bytes[..at as usize]
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect();
    let line = starts[starts.len() - 10];
    let ts = line
        + bytes[line..]
            .windows(8)
            .position(|w| w == b"\"ts_ms\":")
            .unwrap()
        + 8;
    let ts = ts + bytes[ts..].iter().position(|b| b.is_ascii_digit()).unwrap();
    assert_eq!(
        &bytes[ts..ts + 2],
        b"17",
        "{}",
        String::from_utf8_lossy(&bytes[line..line + 80])
    );
    bytes[ts + 1] = b'0';
    std::fs::write(&log, &bytes).unwrap();
    let after = get_json(&format!("{}/v1/inspect/turn?offset={at}", srv.url)).await;
    let prefix = dir.path().join("gen.prefix");
    std::fs::write(&prefix, &bytes[..at as usize]).unwrap();
    let whole = get_json(&format!("{}/v1/timeline/record?offset={at}", srv.url)).await;
    let text = whole["json"]["text"].as_str().unwrap();
    let flags = [
        "--tail",
        "50",
        "--session",
        input["session_id"].as_str().unwrap_or(""),
    ];
    let flags = if input["session_id"].is_null() {
        &flags[..2]
    } else {
        &flags[..]
    };
    assert_eq!(
        after["request"],
        respond(&prefix, text, flags),
        "the view is the bytes' own"
    );
    srv.stop().await;
}
