//! `wmreplay serve` end to end: the server runs in-process on a real socket,
//! and the upstream is a real local HTTP server (axum) speaking each
//! provider's protocol, streaming and not, started by each test.

use crate::common;
use crate::mock;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use wmreplay::server::Provider;
use wmreplay::{CurrentRequest, ReplayOptions, replay};

use mock::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_upstream_respond_shows_the_request_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let before = std::fs::read(&log).unwrap();
    let srv = start(config(&log, None, Provider::Anthropic)).await;
    let (status, body) = post(
        &format!("{}/respond", srv.url),
        r#"{"text":"hi","session_id":"s-1","extra":[1]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["stats"]["parsed_entries"], 9);
    assert_eq!(v["request"]["model"], "test-model");
    assert_eq!(v["request"]["max_tokens"], 1024);
    assert_eq!(std::fs::read(&log).unwrap(), before, "nothing appended");
    // /v1/context: exactly the one-shot body with the provider's fields.
    for session in [Some("s-1"), None] {
        let input = match session {
            Some(s) => json!({"text": "what \"now\"?\n", "session_id": s}),
            None => json!({"text": "what \"now\"?\n"}),
        };
        let (status, got) = post(&format!("{}/v1/context", srv.url), input.to_string()).await;
        assert_eq!(status, 200);
        let bytes = std::fs::read(&log).unwrap();
        let r = replay(&bytes, &ReplayOptions::default());
        let current = CurrentRequest {
            text: "what \"now\"?\n",
            session_id: session,
        };
        let fields = r#""model":"test-model","max_tokens":1024"#;
        let one_shot = r.render_request(
            wmreplay::Format::Anthropic,
            &wmreplay::system_prompt(None),
            &current,
        );
        let want = with_fields(&one_shot, fields);
        assert!(
            without_cache_markers(got.as_bytes()) == want,
            "context body differs from one-shot"
        );
    }
    srv.stop().await;
}

/// The respond path's manual checklist (labels, continuity, no derived
/// context), automated, for each provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_checklist_labels_continuity_and_no_derived_context() {
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(provider, Mode::Ok).await;
        let srv = start(config(&log, Some(&up), provider)).await;
        let (s1, b1) = post(
            &format!("{}/respond", srv.url),
            r#"{"text":"first turn","session_id":"s-9"}"#,
        )
        .await;
        assert_eq!(s1, 200, "{b1}");
        let a1: Value = serde_json::from_str(&b1).unwrap();
        assert_eq!(a1["text"], "answer to «first turn» \"quoted\"\nline two");
        let (s2, b2) = post(
            &format!("{}/respond", srv.url),
            r#"{"text":"second turn","session_id":"s-9"}"#,
        )
        .await;
        assert_eq!(s2, 200, "{b2}");
        let seen = mock.bodies();
        assert_eq!(seen.len(), 2);
        let second = &seen[1];
        let texts = message_texts(second);
        // Check A: labels. (OpenAI carries the system prompt as the first message.)
        let replayed: Vec<&String> = match provider {
            Provider::Anthropic => texts[..texts.len() - 1].iter().collect(),
            Provider::OpenAi => texts[1..texts.len() - 1].iter().collect(),
        };
        assert!(
            replayed.iter().all(|t| t.starts_with("WM_KIND=")),
            "{replayed:?}"
        );
        let current: Vec<usize> = (0..texts.len())
            .filter(|&i| texts[i].starts_with("CURRENT_USER_REQUEST"))
            .collect();
        assert_eq!(
            current,
            vec![texts.len() - 1],
            "exactly one CURRENT_USER_REQUEST, last"
        );
        // Check B: continuity — the first turn's input and output are replayed.
        let joined = replayed
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(joined.contains("WM_KIND=text_input") && joined.contains("first turn"));
        assert!(
            joined.contains("WM_KIND=text_output") && joined.contains("answer to «first turn»")
        );
        // Check C: no derived context; the rule is there.
        let system = match provider {
            // With cache breakpoints, the system prompt is one text block.
            Provider::Anthropic => second["system"][0]["text"].as_str().unwrap().to_string(),
            Provider::OpenAi => texts[0].clone(),
        };
        assert!(!system.contains("Retrieved memory context"));
        assert!(system.contains(wmreplay::SYSTEM_RULE));
        assert_eq!(second["model"], "test-model");
        if provider == Provider::Anthropic {
            assert_eq!(second["max_tokens"], 1024);
        }
        // The key reached the upstream and nowhere else.
        assert!(mock.keys().iter().all(|k| k == KEY));
        assert!(!b1.contains(KEY) && !b2.contains(KEY));
        // The log: two inputs and two outputs, the session kept, ts_ms rising.
        let ins = turns(&log, "text_input");
        let outs = turns(&log, "text_output");
        assert_eq!(ins.len(), 2);
        assert_eq!(outs.len(), 2);
        assert!(ins.iter().chain(&outs).all(|v| v["session_id"] == "s-9"));
        let ts: Vec<u64> = log_lines(&log)
            .iter()
            .skip(9)
            .filter_map(|v| v["ts_ms"].as_u64())
            .collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{ts:?}");
        srv.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_relays_events_and_appends_the_whole_answer() {
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(provider, Mode::Ok).await;
        let srv = start(config(&log, Some(&up), provider)).await;
        let r = client()
            .post(format!("{}/respond", srv.url))
            .body(r#"{"text":"stream please","stream":true}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        let body = r.text().await.unwrap();
        let mut deltas = String::new();
        let mut done = None;
        for event in body.split("\n\n").filter(|e| !e.is_empty()) {
            let (name, data) = event.split_once('\n').unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            match name {
                "event: delta" => deltas.push_str(data["text"].as_str().unwrap()),
                "event: done" => done = Some(data),
                other => panic!("unexpected event {other}: {data}"),
            }
        }
        let want = "answer to «stream please» \"quoted\"\nline two";
        assert_eq!(deltas, want);
        let done = done.expect("a done event");
        assert_eq!(done["text"], want);
        // The replay the request was made of: the log before the turn's
        // own text_input.
        let example = example_bytes();
        let before = replay(&example, &ReplayOptions::default());
        assert_eq!(
            done["stats"]["parsed_entries"].as_u64().unwrap(),
            before.stats().parsed_entries
        );
        assert_eq!(mock.bodies()[0]["stream"], true);
        let outs = turns(&log, "text_output");
        assert_eq!(outs.len(), 1);
        assert_eq!(outs[0]["text"], want);
        srv.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_map_to_503_502_and_504_and_close_the_turn_without_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _) = start_mock(Provider::Anthropic, Mode::fail(529)).await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.retry_min_delay = Duration::from_millis(20);
    let srv = start(cfg).await;
    let (status, body) = post(&format!("{}/respond", srv.url), r#"{"text":"x"}"#).await;
    // Overloaded (529) is answered as the 503 it means, after the retries.
    assert_eq!(status, 503, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "upstream_error");
    assert_eq!(v["error"]["upstream_status"], 529);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Overloaded, try later")
    );
    assert!(!body.contains(KEY));
    // Streaming asked, error before the stream: still a JSON error.
    let (status, _) = post(
        &format!("{}/respond", srv.url),
        r#"{"text":"y","stream":true}"#,
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(turns(&log, "text_input").len(), 2);
    // No answer: each turn is closed by a record of its error, so no
    // text_input is left unanswered.
    let outs = turns(&log, "text_output");
    assert_eq!(outs.len(), 2);
    for o in &outs {
        assert_eq!(
            (o["text"].as_str(), o["stop_reason"].as_str()),
            (Some(""), Some("error"))
        );
        assert_eq!(o["error"]["status"], 529);
        assert_eq!(o["error"]["code"], "overloaded_error");
    }
    srv.stop().await;

    let (up, _) = start_mock(Provider::OpenAi, Mode::Slow(2_000)).await;
    let mut cfg = config(&log, Some(&up), Provider::OpenAi);
    cfg.upstream_timeout = Duration::from_millis(300);
    let srv = start(cfg).await;
    let (status, body) = post(&format!("{}/respond", srv.url), r#"{"text":"z"}"#).await;
    assert_eq!(status, 504, "{body}");
    assert!(body.contains("upstream_timeout"));
    let outs = turns(&log, "text_output");
    assert_eq!(outs.len(), 3);
    assert_eq!(outs[2]["error"]["code"], "upstream_timeout");
    assert_eq!(outs[2]["stop_reason"], "error");
    srv.stop().await;

    // Nothing listening: 502.
    let mut cfg = config(&log, Some("http://127.0.0.1:9"), Provider::Anthropic);
    cfg.upstream_timeout = Duration::from_secs(5);
    let srv = start(cfg).await;
    let (status, body) = post(&format!("{}/respond", srv.url), r#"{"text":"z"}"#).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("upstream_unreachable"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_json_errors_with_the_right_status() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.body_limit = 4096;
    let srv = start(cfg).await;
    let url = format!("{}/respond", srv.url);
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{".to_vec(), 400, "invalid_json"),
        (b"[1,2]".to_vec(), 400, "invalid_json"),
        (b"{\"text\":\"a\xff\"}".to_vec(), 400, "invalid_json"),
        (b"{}".to_vec(), 400, "missing_text"),
        (b"{\"text\":5}".to_vec(), 400, "invalid_text"),
        (b"{\"text\":null}".to_vec(), 400, "invalid_text"),
        (
            b"{\"text\":\"a\",\"session_id\":7}".to_vec(),
            400,
            "invalid_session_id",
        ),
        (
            b"{\"text\":\"a\",\"stream\":\"yes\"}".to_vec(),
            400,
            "invalid_stream",
        ),
        (
            format!("{{\"text\":\"{}\"}}", "a".repeat(5000)).into_bytes(),
            413,
            "body_too_large",
        ),
    ];
    for (body, want_status, want_code) in cases {
        let (status, text) = post(&url, body.clone()).await;
        assert_eq!(
            status,
            want_status,
            "{}: {text}",
            String::from_utf8_lossy(&body)
        );
        let v: Value = serde_json::from_str(&text).expect("errors are JSON");
        assert_eq!(v["error"]["code"], want_code);
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // A chunked body (no Content-Length) over the limit is cut off too.
    let chunks =
        futures_util::stream::iter((0..10).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1000])));
    let (status, _) = post(&url, reqwest::Body::wrap_stream(chunks)).await;
    assert_eq!(status, 413);
    let c = client();
    let r = c.get(format!("{}/nope", srv.url)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("not_found"));
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert!(r.text().await.unwrap().contains("method_not_allowed"));
    let r = c.get(format!("{}/healthz", srv.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r: Value = c
        .get(format!("{}/v1/stats", srv.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["stats"]["parsed_entries"], 9);
    assert_eq!(r["live"]["records"], 9);
    // Still serving after all of that.
    let (status, _) = post(&url, r#"{"text":"ok"}"#).await;
    assert_eq!(status, 200);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_server_answers_503_instead_of_piling_up() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _) = start_mock(Provider::Anthropic, Mode::Slow(800)).await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.max_concurrent = 1;
    let srv = start(cfg).await;
    let url = format!("{}/respond", srv.url);
    let first = tokio::spawn({
        let url = url.clone();
        async move { post(&url, r#"{"text":"slow"}"#).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = post(&url, r#"{"text":"second"}"#).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"busy\""));
    assert_eq!(first.await.unwrap().0, 200);
    let (status, _) = post(&url, r#"{"text":"third"}"#).await;
    assert_eq!(status, 200, "a permit is given back");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_turns_each_appear_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.max_concurrent = 256;
    let srv = start(cfg).await;
    let url = format!("{}/respond", srv.url);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            post(
                &url,
                json!({"text": format!("turn {i}"), "session_id": format!("s-{}", i % 7)})
                    .to_string(),
            )
            .await
        }));
    }
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    srv.stop().await;
    let text = std::fs::read_to_string(&log).unwrap();
    let original = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/working_memory.log"),
    )
    .unwrap();
    let appended = &text[original.len()..];
    let lines: Vec<Value> = appended
        .lines()
        .map(|l| serde_json::from_str(l).expect("every appended line parses"))
        .collect();
    assert_eq!(lines.len(), 400);
    for i in 0..200 {
        let t = format!("turn {i}");
        let ins = lines
            .iter()
            .filter(|v| v["type"] == "text_input" && v["text"] == t.as_str())
            .count();
        let outs = lines
            .iter()
            .filter(|v| {
                v["type"] == "text_output"
                    && v["text"].as_str().unwrap().contains(&format!("«{t}»"))
            })
            .count();
        assert_eq!((ins, outs), (1, 1), "{t}");
    }
    let ts: Vec<u64> = lines.iter().map(|v| v["ts_ms"].as_u64().unwrap()).collect();
    assert!(
        ts.windows(2).all(|w| w[0] <= w[1]),
        "ts_ms never goes backwards"
    );
    // And the whole log still replays: every appended line is a record.
    let r = replay(text.as_bytes(), &ReplayOptions::default());
    assert_eq!(r.stats().parsed_entries, 9 + 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_state_follows_outside_appends_late_records_and_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let srv = start(config(&log, None, Provider::OpenAi)).await;
    let url = format!("{}/v1/context", srv.url);
    let input = r#"{"text":"q"}"#;
    let check = |what: &'static str, got: String, log: PathBuf| {
        let bytes = std::fs::read(&log).unwrap();
        let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let r = replay(&bytes[..end], &ReplayOptions::default());
        let current = CurrentRequest {
            text: "q",
            session_id: None,
        };
        let one_shot = r.render_request(
            wmreplay::Format::OpenAi,
            &wmreplay::system_prompt(None),
            &current,
        );
        let want = with_fields(
            &one_shot,
            r#""model":"test-model","max_completion_tokens":1024"#,
        );
        assert!(without_cache_markers(got.as_bytes()) == want, "{what}");
    };
    let append = |s: &str| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(s.as_bytes()).unwrap();
    };
    check("start", post(&url, input).await.1, log.clone());
    append(
        "{\"type\":\"wm_event\",\"ts_ms\":1,\"note\":\"late\"}\n{\"type\":\"wm_event\",\"ts_ms\":99999999999999,\"x\":1}\n{\"type\":\"torn",
    );
    check("late + torn", post(&url, input).await.1, log.clone());
    append("\",\"ts_ms\":5}\n");
    check("torn completed", post(&url, input).await.1, log.clone());
    let rotated = dir.path().join("new.log");
    std::fs::write(&rotated, common::hostile_log(3, 50)).unwrap();
    std::fs::rename(&rotated, &log).unwrap();
    check("rotated", post(&url, input).await.1, log.clone());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_a_turn_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _) = start_mock(Provider::Anthropic, Mode::Slow(500)).await;
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let url = format!("{}/respond", srv.url);
    let turn = tokio::spawn(async move { post(&url, r#"{"text":"in flight"}"#).await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    srv.stop().await;
    let (status, _) = turn.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        turns(&log, "text_output").len(),
        1,
        "the answer was appended before exit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off_and_the_server_keeps_serving() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.header_timeout = Duration::from_millis(300);
    let srv = start(cfg).await;
    let addr = srv.url.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    sock.write_all(b"POST /respond HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    // The rest of the headers never come: the server closes the connection.
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the connection was closed by the server");
    let (status, _) = post(&format!("{}/respond", srv.url), r#"{"text":"still here"}"#).await;
    assert_eq!(status, 200);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_finishes_gets_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.body_timeout = Duration::from_millis(300);
    let srv = start(cfg).await;
    let addr = srv.url.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    sock.write_all(
        b"POST /respond HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"text\":",
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
        .await
        .expect("an answer before the test's timeout")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_fault_is_a_json_500_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let ctx = format!("{}/v1/context", srv.url);
    // The log's path becomes a directory: reading it fails.
    let aside = dir.path().join("aside.log");
    std::fs::rename(&log, &aside).unwrap();
    std::fs::create_dir(&log).unwrap();
    let (status, body) = post(&ctx, r#"{"text":"x"}"#).await;
    assert_eq!(status, 500, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "replay_failed");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("wm.log"),
        "{body}"
    );
    let r = client()
        .get(format!("{}/healthz", srv.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "still serving");
    // Back in place: served again, and a turn goes to the file now there.
    std::fs::remove_dir(&log).unwrap();
    std::fs::rename(&aside, &log).unwrap();
    let (status, _) = post(&ctx, r#"{"text":"x"}"#).await;
    assert_eq!(status, 200);
    // Rotated: the writer follows the path to the new file.
    std::fs::rename(&log, dir.path().join("old.log")).unwrap();
    let (status, body) = post(
        &format!("{}/respond", srv.url),
        r#"{"text":"after rotation"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let now = std::fs::read_to_string(&log).unwrap();
    assert_eq!(now.lines().count(), 2, "the turn is in the new file: {now}");
    assert!(now.contains("after rotation"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_idle_connections_do_not_take_the_server_down() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.max_connections = 50;
    cfg.header_timeout = Duration::from_millis(500);
    let srv = start(cfg).await;
    let addr = srv.url.trim_start_matches("http://").to_string();
    // Three times the bound in idle connections that say nothing (within
    // the listen backlog, so the connects themselves complete).
    let mut idle = Vec::new();
    for _ in 0..150 {
        let c = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect(&addr),
        )
        .await;
        if let Ok(Ok(s)) = c {
            idle.push(s);
        }
    }
    assert!(idle.len() > 100, "{} idle connections opened", idle.len());
    // Idle ones are cut off by the header timeout; requests get through.
    let (status, _) = tokio::time::timeout(
        Duration::from_secs(20),
        post(&format!("{}/respond", srv.url), r#"{"text":"hi"}"#),
    )
    .await
    .expect("served despite the idle connections");
    assert_eq!(status, 200);
    drop(idle);
    let (status, _) = post(&format!("{}/respond", srv.url), r#"{"text":"hi"}"#).await;
    assert_eq!(status, 200);
    srv.stop().await;
}

/// `kill -9` of the server binary while turns are being appended, then a
/// restart: the log replays cleanly and every acknowledged turn is in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_appends_then_restart_loses_no_acknowledged_turn() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let spawn = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_wmreplay"))
            .args(["serve", "--log"])
            .arg(&log)
            .args([
                "--addr",
                &format!("127.0.0.1:{port}"),
                "--upstream",
                &up,
                "--max-concurrent",
                "512",
            ])
            .env("ANTHROPIC_API_KEY", KEY)
            .env("WMREPLAY_MODEL", "test-model")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let url = format!("http://127.0.0.1:{port}");
    let wait_up = || async {
        for _ in 0..200 {
            if let Ok(r) = client().get(format!("{url}/healthz")).send().await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the server did not come up");
    };
    let mut server = spawn();
    wait_up().await;
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..150u64 {
        let url = format!("{url}/respond");
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(i * 2)).await;
            let r = client()
                .post(url)
                .body(json!({"text": format!("turn {i}")}).to_string())
                .send()
                .await;
            match r {
                Ok(r) if r.status() == 200 => {
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Some(i)
                }
                _ => None,
            }
        }));
    }
    // Kill once some turns are acknowledged and others are still running.
    for _ in 0..500 {
        if done.load(std::sync::atomic::Ordering::SeqCst) >= 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill().unwrap(); // SIGKILL
    server.wait().unwrap();
    let mut acked = Vec::new();
    for t in tasks {
        if let Some(i) = t.await.unwrap() {
            acked.push(i);
        }
    }
    // Every line of the log parses, every acknowledged turn has its input
    // and its answer.
    let text = std::fs::read_to_string(&log).unwrap();
    let r = replay(text.as_bytes(), &ReplayOptions::default());
    assert_eq!(
        r.stats().skipped_invalid_json,
        1,
        "only the example's own bad line"
    );
    for i in &acked {
        let t = format!("turn {i}");
        assert!(
            turns(&log, "text_input")
                .iter()
                .any(|v| v["text"] == t.as_str()),
            "{t}"
        );
        assert!(
            turns(&log, "text_output")
                .iter()
                .any(|v| v["text"].as_str().unwrap().contains(&format!("«{t}»"))),
            "{t}"
        );
    }
    // Restarted on the same log, it serves, and its replay holds them all.
    let mut server = spawn();
    wait_up().await;
    let (status, body) = post(&format!("{url}/v1/context"), r#"{"text":"after"}"#).await;
    assert_eq!(status, 200);
    for i in &acked {
        assert!(body.contains(&format!("turn {i}")));
    }
    server.kill().unwrap();
    server.wait().unwrap();
    eprintln!("{} of 150 turns acknowledged before the kill", acked.len());
    assert!(
        acked.len() >= 20,
        "the kill came after some acknowledged turns"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_prepare_and_ack_give_full_then_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let srv = start(config(&log, None, Provider::Anthropic)).await;
    let prepare = |body: Value| {
        let url = format!("{}/v1/turn/prepare", srv.url);
        async move { post(&url, body.to_string()).await }
    };
    let ack = |body: Value| {
        let url = format!("{}/v1/turn/ack", srv.url);
        async move { post(&url, body.to_string()).await }
    };
    let (status, body) = prepare(json!({"session_key": "chat-1"})).await;
    assert_eq!(status, 200, "{body}");
    let p: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(p["mode"], "full");
    assert_eq!(p["records"], 9);
    let xml = p["body"].as_str().unwrap();
    assert!(roxmltree::Document::parse(xml).is_ok(), "{xml}");
    // Unknown id: 404 with a JSON error.
    let (status, body) = ack(json!({"prepare_id": "feed", "status": "success"})).await;
    assert_eq!(status, 404, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["error"]["code"], "unknown_prepare_id");
    let (status, _) = ack(json!({"prepare_id": p["prepare_id"], "status": "success"})).await;
    assert_eq!(status, 200);
    let (_, body) = prepare(json!({"session_key": "chat-1"})).await;
    let none: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (none["mode"].as_str(), none["body"].as_str()),
        (Some("none"), Some(""))
    );
    // Appended by someone else: a delta of just that, in the format asked.
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(
        &mut f,
        b"{\"type\":\"wm_event\",\"ts_ms\":1,\"e\":\"new\"}\n",
    )
    .unwrap();
    let (_, body) = prepare(json!({"session_key": "chat-1", "format": "openai"})).await;
    let d: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(d["mode"], "delta");
    assert_eq!(d["from"], p["to"]);
    let msgs: Value = serde_json::from_str(d["body"].as_str().unwrap()).unwrap();
    assert_eq!(msgs.as_array().unwrap().len(), 1);
    // A failed turn keeps the delta.
    let (status, _) = ack(json!({"prepare_id": d["prepare_id"], "status": "failed"})).await;
    assert_eq!(status, 200);
    let (_, body) = prepare(json!({"session_key": "chat-1", "format": "openai"})).await;
    let again: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((&again["from"], &again["body"]), (&d["from"], &d["body"]));
    // Bad requests.
    for (input, code) in [
        (json!({}), "missing_session_key"),
        (json!({"session_key": 5}), "invalid_session_key"),
        (
            json!({"session_key": "k", "format": "yaml"}),
            "invalid_format",
        ),
    ] {
        let (status, body) = prepare(input).await;
        assert_eq!(status, 400, "{body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["error"]["code"], code);
    }
    for (input, code) in [
        (json!({"status": "success"}), "missing_prepare_id"),
        (
            json!({"prepare_id": "x", "status": "maybe"}),
            "invalid_status",
        ),
    ] {
        let (status, body) = ack(input).await;
        assert_eq!(status, 400, "{body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["error"]["code"], code);
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_windows_and_the_trimmed_start_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let mut content = String::new();
    for i in 0..30 {
        content.push_str(&format!(
            "{{\"type\":\"{}\",\"ts_ms\":{i},\"text\":\"{}\"}}\n",
            if i % 2 == 0 {
                "text_input"
            } else {
                "text_output"
            },
            "w".repeat(60)
        ));
    }
    content.push_str("{\"type\":\"text_input\",\"ts_ms\":99,\"text\":\"unanswered\"}\n");
    std::fs::write(&log, &content).unwrap();
    let mut cfg = config(&log, None, Provider::OpenAi);
    cfg.selection = {
        let mut o = wmreplay::Selection::default();
        o.max_tokens = Some(400);
        o.tokenizer = wmreplay::Tokenizer::Bytes;
        o.trim_to = Some(0.5);
        o.mark_pending = true;
        o
    };
    let srv = start(cfg.clone()).await;
    let context = |url: String| async move {
        let (status, body) = post(&format!("{url}/v1/context"), r#"{"text":"q"}"#).await;
        assert_eq!(status, 200, "{body}");
        message_texts(&serde_json::from_str(&body).unwrap())
    };
    let texts = context(srv.url.clone()).await;
    // System, the window, the current request.
    let window = &texts[1..texts.len() - 1];
    let tokens: u64 = window
        .iter()
        .map(|t| wmreplay::Tokenizer::Bytes.count(t))
        .sum();
    assert!(tokens <= 200, "{tokens}");
    assert!(window.last().unwrap().starts_with("PENDING_USER_INPUT\n"));
    let stats = client()
        .get(format!("{}/v1/stats", srv.url))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let start_offset = stats["selection"]["window_start"]["offset"].clone();
    assert!(start_offset.as_u64().unwrap() > 0);
    assert_eq!(stats["selection"]["pending_input"]["line"], 31);
    srv.stop().await;
    // Appends that fit, then a restart: the window starts where it did.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut f| {
            std::io::Write::write_all(
                &mut f,
                b"{\"type\":\"text_output\",\"ts_ms\":100,\"text\":\"ok\"}\n",
            )
        })
        .unwrap();
    let srv = start(cfg).await;
    let after = context(srv.url.clone()).await;
    assert_eq!(
        after[1], window[0],
        "the window's first message is the same"
    );
    assert!(!after.iter().any(|t| t.contains("PENDING")), "answered now");
    srv.stop().await;
}
