//! What the adversarial run on the front doors found (issue "the front
//! doors under attack"), each test named after its finding: what a web
//! page can make a browser send, streams recorded once, turns closed after
//! a crash in their door's shape.

use crate::mock;

use std::path::Path;

use mock::*;
use serde_json::{Value, json};
use wmreplay::server::Provider;

fn log_len(log: &Path) -> usize {
    std::fs::read(log).unwrap().len()
}

/// A request as a browser sends it for a page: `(method, path, headers,
/// body)`.
type Sent = (&'static str, String, Headers, String);

/// Headers to send: `(name, value)`.
type Headers = Vec<(&'static str, String)>;

async fn send(base: &str, (method, path, headers, body): &Sent) -> (u16, String) {
    let mut r = client().request(method.parse().unwrap(), format!("{base}{path}"));
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    let resp = r.body(body.clone()).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

/// Finding: "Any web page can write into the log". A page's `fetch(…,
/// {mode: "no-cors", method: "POST", body})` is sent as `text/plain` with
/// its `Origin`, a form as `application/x-www-form-urlencoded` with its
/// `Origin`, and a page that rebound its own name to 127.0.0.1 sends its
/// name as `Host`. Each door refuses each, in its own shape, before
/// anything is written or the model is called; the same requests from a
/// client that is not a page are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_web_page_writes_the_log_or_spends_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let port = server.url.rsplit(':').next().unwrap().to_string();
    let doors = [
        (
            "POST",
            "/respond".to_string(),
            json!({"text": "from a page"}),
        ),
        (
            "POST",
            "/v1/records".to_string(),
            json!({"type": "wm_insight", "insight": "from a page"}),
        ),
        ("PUT", "/v1/facts/k".to_string(), json!("from a page")),
        (
            "POST",
            "/anthropic/v1/messages".to_string(),
            json!({"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "from a page"}]}),
        ),
        (
            "POST",
            "/openai/v1/chat/completions".to_string(),
            json!({"model": "m", "messages": [{"role": "user", "content": "from a page"}]}),
        ),
        ("POST", "/v1/search".to_string(), json!({"query": "page"})),
    ];
    let before = log_len(&log);
    for (method, path, body) in &doors {
        let body = body.to_string();
        let attacks: Vec<(&str, Headers, u16, &str)> = vec![
            (
                "no-cors fetch from another site",
                vec![
                    ("content-type", "text/plain;charset=UTF-8".into()),
                    ("origin", "https://evil.example".into()),
                    ("sec-fetch-site", "cross-site".into()),
                    ("sec-fetch-mode", "no-cors".into()),
                ],
                403,
                "cross_origin_refused",
            ),
            (
                "a form on another site",
                vec![
                    ("content-type", "application/x-www-form-urlencoded".into()),
                    ("origin", "https://evil.example".into()),
                ],
                403,
                "cross_origin_refused",
            ),
            (
                "a page on another port of this machine",
                vec![
                    ("content-type", "application/json".into()),
                    ("origin", "http://localhost:3000".into()),
                    ("sec-fetch-site", "same-site".into()),
                ],
                403,
                "cross_origin_refused",
            ),
            (
                "a sandboxed page",
                vec![
                    ("content-type", "text/plain".into()),
                    ("origin", "null".into()),
                ],
                403,
                "cross_origin_refused",
            ),
            (
                "text/plain without an origin",
                vec![("content-type", "text/plain".into())],
                415,
                "unsupported_media_type",
            ),
            (
                "a rebound name",
                vec![
                    ("content-type", "application/json".into()),
                    ("host", format!("rebound.evil.example:{port}")),
                    ("origin", format!("http://rebound.evil.example:{port}")),
                ],
                403,
                "host_not_allowed",
            ),
        ];
        for (what, headers, status, code) in attacks {
            let sent: Sent = (method, path.clone(), headers, body.clone());
            let (got, text) = send(&server.url, &sent).await;
            assert_eq!(got, status, "{method} {path}, {what}: {text}");
            let e: Value = serde_json::from_str(&text).unwrap();
            if path.starts_with("/anthropic") {
                assert_eq!(e["type"], "error", "{path} {what}: {text}");
                let kind = if status == 415 {
                    "invalid_request_error"
                } else {
                    "permission_error"
                };
                assert_eq!(e["error"]["type"], kind, "{path} {what}: {text}");
                assert_eq!(e["error"]["details"]["error_code"], code, "{path} {what}");
            } else {
                // OpenAI's shape and the server's own carry the code alike.
                assert_eq!(e["error"]["code"], code, "{path} {what}: {text}");
            }
        }
    }
    // A rebound name cannot read either.
    let (got, _) = send(
        &server.url,
        &(
            "GET",
            "/v1/facts".into(),
            vec![("host", "rebound.evil.example".into())],
            String::new(),
        ),
    )
    .await;
    assert_eq!(got, 403);
    assert_eq!(log_len(&log), before, "a page wrote into the log");
    assert_eq!(mock.requests(), 0, "a page's request reached the model");
    // The same doors answer clients that are not pages, and the server's
    // own origin.
    for (method, path, body) in &doors {
        let sent: Sent = (
            method,
            path.clone(),
            vec![
                ("content-type", "application/json".into()),
                ("origin", server.url.clone()),
            ],
            body.to_string(),
        );
        let (got, text) = send(&server.url, &sent).await;
        // (This server calls the Anthropic API: its OpenAI door says so.)
        let want = if path.starts_with("/openai") {
            404
        } else {
            200
        };
        assert_eq!(got, want, "{method} {path}: {text}");
    }
    // curl's `-d` sends a form type with no origin: still read as JSON.
    let sent: Sent = (
        "POST",
        "/v1/records".into(),
        vec![("content-type", "application/x-www-form-urlencoded".into())],
        json!({"type": "wm_insight", "insight": "from curl"}).to_string(),
    );
    assert_eq!(send(&server.url, &sent).await.0, 200);
    assert!(log_len(&log) > before);
    server.stop().await;
}

/// `--allowed-origin` lets one page in, `--allowed-host` one name; nothing
/// else is let in with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_origins_and_hosts_let_in_only_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.browser = wmreplay::server::BrowserRules::new(
        &["memory.internal".into()],
        &["http://localhost:3000".into()],
    );
    let server = start(cfg).await;
    let record = json!({"type": "wm_insight", "insight": "x"}).to_string();
    let json = ("content-type", "application/json".to_string());
    for (headers, want) in [
        (
            vec![json.clone(), ("origin", "http://localhost:3000".into())],
            200,
        ),
        (
            vec![json.clone(), ("origin", "http://localhost:3001".into())],
            403,
        ),
        (vec![json.clone(), ("host", "memory.internal".into())], 200),
        (vec![json.clone(), ("host", "other.internal".into())], 403),
    ] {
        let sent: Sent = (
            "POST",
            "/v1/records".into(),
            headers.clone(),
            record.clone(),
        );
        assert_eq!(send(&server.url, &sent).await.0, want, "{headers:?}");
    }
    server.stop().await;
}

/// Whether `log` holds a `text_output` with `text`.
fn holds_answer(log: &Path, text: &str) -> bool {
    log_lines(log)
        .iter()
        .any(|r| r["type"] == "text_output" && r["text"] == text)
}

/// Finding: "Streamed answers are recorded twice". The stream's last
/// events reached the client before the turn's records were written, so a
/// client that sent its next request on them (as the SDKs' stream helpers
/// let it) found the answer missing and wrote it again. Now, whenever a
/// client sees how the answer stopped (Anthropic's `message_delta`,
/// OpenAI's `finish_reason`), the log holds the answer: checked at that
/// moment, 30 times per provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_only_once_its_answer_is_in_the_log() {
    use futures_util::StreamExt;
    for p in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, _mock) = start_mock(p, Mode::Ok).await;
        let server = start(config(&log, Some(&up), p)).await;
        let (path, end) = match p {
            Provider::Anthropic => ("/anthropic/v1/messages", "event: message_delta"),
            Provider::OpenAi => ("/openai/v1/chat/completions", "\"finish_reason\":\""),
        };
        for i in 0..30 {
            let question = format!("question {i}");
            let mut body = json!({"model": "m", "max_tokens": 50, "stream": true,
                                  "messages": [{"role": "user", "content": question}]});
            if p == Provider::OpenAi {
                body.as_object_mut().unwrap().remove("max_tokens");
            }
            let resp = client()
                .post(format!("{}{path}", server.url))
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            let mut seen = String::new();
            let mut stream = resp.bytes_stream();
            let mut checked = false;
            while let Some(piece) = stream.next().await {
                seen.push_str(std::str::from_utf8(&piece.unwrap()).unwrap());
                if !checked && seen.contains(end) {
                    checked = true;
                    assert!(
                        holds_answer(&log, &answer_to(&question)),
                        "{p:?} round {i}: the stream said the answer stopped before the log held it"
                    );
                }
            }
            assert!(checked, "{p:?}: no end in {seen}");
        }
        let outputs = turns(&log, "text_output");
        assert_eq!(outputs.len(), 30, "{p:?}");
        server.stop().await;
    }
}

/// Finding: "An OpenAI stream without `stream_options.include_usage` still
/// gets a usage chunk with empty `choices`" (which the server asks the
/// upstream for itself): `chunk.choices[0]` raised in clients. It is
/// relayed only to a client that asked for it, as a repeat's events are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_chunk_goes_only_to_clients_that_ask_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::OpenAi)).await;
    let url = format!("{}/openai/v1/chat/completions", server.url);
    for (asks, key) in [(false, "k-plain"), (true, "k-usage")] {
        let mut body = json!({"model": "m", "stream": true,
                              "messages": [{"role": "user", "content": format!("usage {asks}")}]});
        if asks {
            body["stream_options"] = json!({"include_usage": true});
        }
        // The turn, then its repeat (answered from the key).
        for attempt in 0..2 {
            let r = client()
                .post(&url)
                .header("content-type", "application/json")
                .header("idempotency-key", key)
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let text = r.text().await.unwrap();
            let chunks: Vec<Value> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter(|d| *d != "[DONE]")
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            let usage_chunks = chunks
                .iter()
                .filter(|c| c["choices"].as_array().is_some_and(Vec::is_empty))
                .count();
            assert_eq!(
                usage_chunks,
                usize::from(asks),
                "asks {asks}, attempt {attempt}: {text}"
            );
            assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        }
    }
    server.stop().await;
}

/// Finding: "A turn closed after a crash comes back in the wrong shape":
/// the same key retried after `kill -9` got `/respond`'s JSON on the
/// provider's door (the SDKs saw `content=None`, `choices=None`, a stream
/// with no `finish_reason`). It is the provider's message now, whole or
/// streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_closed_after_a_crash_answers_in_its_doors_shape() {
    for p in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(p, Mode::Ok).await;
        let server = start(config(&log, Some(&up), p)).await;
        let path = match p {
            Provider::Anthropic => "/anthropic/v1/messages",
            Provider::OpenAi => "/openai/v1/chat/completions",
        };
        let body = json!({"model": "m", "max_tokens": 50,
                          "messages": [{"role": "user", "content": "crashed"}]});
        let send = |stream: bool| {
            let mut body = body.clone();
            if p == Provider::OpenAi {
                body.as_object_mut().unwrap().remove("max_tokens");
            }
            body["stream"] = json!(stream);
            client()
                .post(format!("{}{path}", server.url))
                .header("content-type", "application/json")
                .header("idempotency-key", "k-crash")
                .body(body.to_string())
                .send()
        };
        assert_eq!(send(false).await.unwrap().status(), 200);
        // What a crash mid-turn leaves: the key running in a process that is
        // gone, its input written, no answer.
        let db = rusqlite::Connection::open(wmreplay::state::Store::path_for(&log)).unwrap();
        let changed = db
            .execute(
                "UPDATE turns SET status = 'running', response = NULL, owner = 'gone-1'
                 WHERE idempotency_key LIKE '%k-crash%'",
                [],
            )
            .unwrap();
        assert_eq!(changed, 1);
        drop(db);
        let calls = mock.requests();
        let whole: Value =
            serde_json::from_str(&send(false).await.unwrap().text().await.unwrap()).unwrap();
        let streamed = send(true).await.unwrap().text().await.unwrap();
        match p {
            Provider::Anthropic => {
                assert_eq!(whole["type"], "message", "{whole}");
                assert!(whole["content"].is_array(), "{whole}");
                assert_eq!(whole["stop_reason"], "interrupted", "{whole}");
                assert!(streamed.contains("event: message_delta"), "{streamed}");
                assert!(
                    streamed.trim_end().ends_with("{\"type\":\"message_stop\"}"),
                    "{streamed}"
                );
            }
            Provider::OpenAi => {
                assert_eq!(whole["object"], "chat.completion", "{whole}");
                assert_eq!(
                    whole["choices"][0]["message"]["role"], "assistant",
                    "{whole}"
                );
                assert_eq!(
                    whole["choices"][0]["finish_reason"], "interrupted",
                    "{whole}"
                );
                assert!(
                    streamed.contains("\"finish_reason\":\"interrupted\""),
                    "{streamed}"
                );
                assert!(streamed.trim_end().ends_with("data: [DONE]"), "{streamed}");
            }
        }
        assert_eq!(mock.requests(), calls, "no second upstream call");
        server.stop().await;
    }
}

/// Finding: "A failed turn is answered without `x-should-retry: false`":
/// with default settings an outage cost 9 upstream calls per SDK request
/// and wrote 3 error records for one turn. The server has retried its
/// calls already, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_tells_the_sdk_not_to_retry_it() {
    for p in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(p, Mode::fail(500)).await;
        let mut cfg = config(&log, Some(&up), p);
        cfg.retry_min_delay = std::time::Duration::from_millis(1);
        let server = start(cfg).await;
        let (path, body) = match p {
            Provider::Anthropic => (
                "/anthropic/v1/messages",
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "down"}]}),
            ),
            Provider::OpenAi => (
                "/openai/v1/chat/completions",
                json!({"model": "m", "messages": [{"role": "user", "content": "down"}]}),
            ),
        };
        let r = client()
            .post(format!("{}{path}", server.url))
            .header("content-type", "application/json")
            .header("x-stainless-retry-count", "0")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 500, "{p:?}");
        assert_eq!(r.headers()["x-should-retry"], "false", "{p:?}");
        assert_eq!(
            mock.requests(),
            3,
            "{p:?}: one call and the server's 2 retries"
        );
        let closes = turns(&log, "text_output");
        assert_eq!(closes.len(), 1, "{p:?}: {closes:?}");
        server.stop().await;
        // A server that does not retry leaves the retries to the SDK.
        let mut cfg = config(&log, Some(&up), p);
        cfg.upstream_retries = 0;
        let server = start(cfg).await;
        let r = client()
            .post(format!("{}{path}", server.url))
            .header("content-type", "application/json")
            .header("x-stainless-retry-count", "0")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 500, "{p:?}");
        assert!(r.headers().get("x-should-retry").is_none(), "{p:?}");
        server.stop().await;
    }
}

/// Finding: "The session header and the turn's own user text are not held
/// to `--max-record-bytes`" (a 50 KB line under an 8 KB limit). Both are
/// refused with 413 before anything is written, on every door.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_input_is_held_to_a_records_limit() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.max_record_bytes = 8 << 10;
    let server = start(cfg).await;
    let long = "x".repeat(50_000);
    let before = log_len(&log);
    let cases: Vec<Sent> = vec![
        (
            "POST",
            "/respond".into(),
            vec![("content-type", "application/json".into())],
            json!({"text": long}).to_string(),
        ),
        (
            "POST",
            "/respond".into(),
            vec![("content-type", "application/json".into())],
            json!({"text": "hi", "session_id": long}).to_string(),
        ),
        (
            "POST",
            "/anthropic/v1/messages".into(),
            vec![("content-type", "application/json".into())],
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": long}]})
                .to_string(),
        ),
        (
            "POST",
            "/anthropic/v1/messages".into(),
            vec![
                ("content-type", "application/json".into()),
                ("wmreplay-session", long.clone()),
            ],
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        ),
    ];
    for sent in &cases {
        let (status, text) = send(&server.url, sent).await;
        assert_eq!(
            status,
            413,
            "{} {}: {text}",
            sent.1,
            &sent.3[..60.min(sent.3.len())]
        );
        assert!(text.contains("record_too_large"), "{text}");
    }
    assert_eq!(log_len(&log), before);
    assert_eq!(mock.requests(), 0);
    server.stop().await;
}

/// Findings: OpenAI `n: 2` accepted (both choices could reach the log),
/// empty user text starting a turn, a missing `max_tokens` accepted,
/// `tool_choice` without `tools` not refused before writing, a tool result
/// for an unknown call id written before the provider refused it. Each is
/// a 400 in the provider's shape now, nothing written, no model called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_provider_refuses_is_refused_before_anything_is_written() {
    for p in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(p, Mode::Ok).await;
        let server = start(config(&log, Some(&up), p)).await;
        let path = match p {
            Provider::Anthropic => "/anthropic/v1/messages",
            Provider::OpenAi => "/openai/v1/chat/completions",
        };
        let base = |messages: Value| match p {
            Provider::Anthropic => json!({"model": "m", "max_tokens": 5, "messages": messages}),
            Provider::OpenAi => json!({"model": "m", "messages": messages}),
        };
        let mut cases: Vec<(&str, Value)> = vec![
            (
                "empty text",
                base(json!([{"role": "user", "content": "  "}])),
            ),
            ("tool_choice without tools", {
                let mut b = base(json!([{"role": "user", "content": "hi"}]));
                b["tool_choice"] = match p {
                    Provider::Anthropic => json!({"type": "auto"}),
                    Provider::OpenAi => json!("auto"),
                };
                b
            }),
        ];
        let (call, result) = match p {
            Provider::Anthropic => (
                json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_unknown", "content": "r"}]}),
            ),
            Provider::OpenAi => (
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
                json!({"role": "tool", "tool_call_id": "call_unknown", "content": "r"}),
            ),
        };
        cases.push((
            "a result for an unknown call",
            base(json!([{"role": "user", "content": "hi"}, call, result])),
        ));
        match p {
            Provider::Anthropic => {
                let mut b = base(json!([{"role": "user", "content": "hi"}]));
                b.as_object_mut().unwrap().remove("max_tokens");
                cases.push(("no max_tokens", b));
            }
            Provider::OpenAi => {
                let mut b = base(json!([{"role": "user", "content": "hi"}]));
                b["n"] = json!(2);
                cases.push(("n: 2", b));
            }
        }
        let before = log_len(&log);
        for (what, body) in cases {
            let sent: Sent = (
                "POST",
                path.into(),
                vec![("content-type", "application/json".into())],
                body.to_string(),
            );
            let (status, text) = send(&server.url, &sent).await;
            assert_eq!(status, 400, "{p:?} {what}: {text}");
            let e: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                e["error"]["type"], "invalid_request_error",
                "{p:?} {what}: {text}"
            );
        }
        assert_eq!(log_len(&log), before, "{p:?}");
        assert_eq!(mock.requests(), 0, "{p:?}");
        server.stop().await;
    }
}

/// Finding: "`set_fact` creates `/memories` files with bidi-control names
/// the memory tool itself refuses". A fact whose key is a memory file is
/// held to the memory tool's rules for paths, on `PUT /v1/facts` (which
/// MCP's `set_fact` shares).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_files_key_is_a_path_the_memory_tool_takes() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let server = start(config(&log, None, Provider::Anthropic)).await;
    let put = |key: &str| {
        let key = key.bytes().map(|b| format!("%{b:02X}")).collect::<String>();
        client()
            .put(format!("{}/v1/facts/{key}", server.url))
            .header("content-type", "application/json")
            .body("\"text\"")
            .send()
    };
    for bad in [
        "/memories/notes\u{202E}dm.exe",
        "/memories/a\u{200B}b.md",
        "/memories/../etc/passwd",
        "/memories//x",
        "/memories",
        "/memories/dir/",
    ] {
        let r = put(bad).await.unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
        assert!(r.text().await.unwrap().contains("invalid_key"));
    }
    for good in ["/memories/notes.md", "/memoriesque", "user.name"] {
        assert_eq!(put(good).await.unwrap().status(), 200, "{good:?}");
    }
    server.stop().await;
}

/// Scoped tokens (`--token-file`): a token for log A opens A only, on every
/// door; for log B it gets a 403 that names nothing, on every door; a read
/// token does not write; `/metrics` wants an admin token; `GET /v1/logs`
/// lists what the token opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_opens_its_own_logs_and_no_other_through_any_door() {
    use wmreplay::server::token_line_hash;
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    for id in ["alpha", "beta"] {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/working_memory.log"),
            logs.join(format!("{id}.log")),
        )
        .unwrap();
    }
    let file = dir.path().join("tokens");
    std::fs::write(
        &file,
        format!(
            "# test tokens\n{} write alpha\n{} read alpha\n{} admin\n",
            token_line_hash("tok-alpha"),
            token_line_hash("tok-alpha-read"),
            token_line_hash("tok-admin"),
        ),
    )
    .unwrap();
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(&logs.join("unused.log"), Some(&up), Provider::Anthropic);
    cfg.log_dir = Some(logs.clone());
    cfg.token_file = Some(file);
    cfg.mcp = true;
    let server = start(cfg).await;
    let request = |method: &str, path: String, token: &str, body: String| {
        let mut r = client()
            .request(method.parse().unwrap(), format!("{}{path}", server.url))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if path.contains("/anthropic/") {
            r = r.header("x-api-key", token);
        } else {
            r = r.bearer_auth(token);
        }
        r.send()
    };
    // (method, path under /v1/logs/{id}, body, writes)
    let doors: Vec<(&str, &str, String, bool)> =
        vec![
        ("POST", "/respond", json!({"text": "hi"}).to_string(), true),
        ("POST", "/context", json!({"text": "hi"}).to_string(), false),
        (
            "POST",
            "/records",
            json!({"type": "wm_insight", "insight": "x"}).to_string(),
            true,
        ),
        ("GET", "/stats", String::new(), false),
        ("GET", "/facts", String::new(), false),
        ("PUT", "/facts/k", json!("v").to_string(), true),
        ("POST", "/search", json!({"query": "deploy"}).to_string(), false),
        (
            "POST",
            "/anthropic/v1/messages",
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
            true,
        ),
        (
            "POST",
            "/mcp",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
            true,
        ),
    ];
    let beta_before = std::fs::read(logs.join("beta.log")).unwrap();
    for (method, door, body, writes) in &doors {
        // Another log: 403, whatever the token may do with its own.
        for token in ["tok-alpha", "tok-alpha-read"] {
            let r = request(method, format!("/v1/logs/beta{door}"), token, body.clone())
                .await
                .unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            assert_eq!(status, 403, "{token} {method} beta{door}: {text}");
            assert!(!text.contains("beta") && !text.contains("alpha"), "{text}");
        }
        // Its own log: what its access allows.
        let r = request(
            method,
            format!("/v1/logs/alpha{door}"),
            "tok-alpha",
            body.clone(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 200, "tok-alpha {method} alpha{door}");
        let r = request(
            method,
            format!("/v1/logs/alpha{door}"),
            "tok-alpha-read",
            body.clone(),
        )
        .await
        .unwrap();
        let want = if *writes { 403 } else { 200 };
        assert_eq!(r.status(), want, "tok-alpha-read {method} alpha{door}");
        // The admin opens every log; an unknown token none.
        let r = request(
            method,
            format!("/v1/logs/beta{door}"),
            "tok-admin",
            body.clone(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 200, "tok-admin {method} beta{door}");
        let r = request(
            method,
            format!("/v1/logs/beta{door}"),
            "tok-nobody",
            body.clone(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 401, "tok-nobody {method} beta{door}");
    }
    let beta_after = std::fs::read(logs.join("beta.log")).unwrap();
    // Only the admin wrote to beta (its records, a turn, a fact).
    assert!(beta_after.len() > beta_before.len());
    let beta_new = String::from_utf8_lossy(&beta_after[beta_before.len()..]).to_string();
    assert_eq!(
        beta_new.matches("\"insight\":\"x\"").count(),
        1,
        "{beta_new}"
    );
    assert!(mock.requests() >= 2);
    // /metrics: the admin's.
    let metrics = |token: &'static str| request("GET", "/metrics".into(), token, String::new());
    assert_eq!(metrics("tok-alpha").await.unwrap().status(), 403);
    assert_eq!(metrics("tok-admin").await.unwrap().status(), 200);
    // The list shows what the token opens.
    let listed = |token: &'static str| async move {
        let v: Value = request("GET", "/v1/logs".into(), token, String::new())
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["logs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(listed("tok-alpha").await, ["alpha"]);
    assert_eq!(listed("tok-admin").await, ["alpha", "beta"]);
    server.stop().await;
}

/// Finding: "An upstream sending a 3 MiB answer in one burst, streamed: a
/// fast client gets 128–192 KiB (sometimes nothing) and then the
/// connection closes with no error event". A burst past the 256 KiB a
/// client may have unread now waits for a client that reads (a second at
/// most per piece): it gets every byte and the stream's proper end, on
/// every door that streams. (A client that does not read is let go with an
/// error event: `upstream::relay` tests.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_megabytes_reaches_a_client_that_reads_whole() {
    let kib = 3 << 10;
    for p in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(p, Mode::Ok).await;
        mock.then([Mode::Big(kib), Mode::Big(kib)]);
        let mut cfg = config(&log, Some(&up), p);
        cfg.max_record_bytes = 8 << 20;
        let server = start(cfg).await;
        let (path, body, end) = match p {
            Provider::Anthropic => (
                "/anthropic/v1/messages",
                json!({"model": "m", "max_tokens": 5, "stream": true,
                       "messages": [{"role": "user", "content": "burst"}]}),
                "event: message_stop",
            ),
            Provider::OpenAi => (
                "/openai/v1/chat/completions",
                json!({"model": "m", "stream": true,
                       "messages": [{"role": "user", "content": "burst"}]}),
                "data: [DONE]",
            ),
        };
        for (path, body, end) in [
            (path, body, end),
            (
                "/respond",
                json!({"text": "burst again", "stream": true}),
                "event: done",
            ),
        ] {
            let text = client()
                .post(format!("{}{path}", server.url))
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap_or_else(|e| panic!("{p:?} {path}: the stream was cut: {e}"));
            assert!(text.contains(end), "{p:?} {path}: no end");
            assert!(!text.contains("client_too_slow"), "{p:?} {path}: let go");
            let ys = text.matches('y').count();
            assert!(ys >= kib << 10, "{p:?} {path}: {ys} of {} bytes", kib << 10);
        }
        server.stop().await;
    }
}

/// Finding: "Client A's SDK retry can get client B's turn when both sent
/// the same body". A turn is its conversation's: two clients of their own
/// sessions (Claude Code's session id, `wmreplay-session`) sending the same
/// body have a turn each, and each one's retry (whatever its retry
/// headers say) gets its own first answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_retry_gets_its_own_turn_not_another_clients() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let body = json!({"model": "m", "max_tokens": 20,
                      "messages": [{"role": "user", "content": "the same question"}]})
    .to_string();
    let (a, b) = (client(), client());
    let send = |c: &reqwest::Client, session: &'static str, count: &'static str| {
        c.post(format!("{}/anthropic/v1/messages", server.url))
            .header("content-type", "application/json")
            .header("x-claude-code-session-id", session)
            .header("x-stainless-retry-count", count)
            .body(body.clone())
            .send()
    };
    let first_a: Value = send(&a, "sa", "0").await.unwrap().json().await.unwrap();
    let first_b: Value = send(&b, "sb", "0").await.unwrap().json().await.unwrap();
    assert_ne!(first_a["id"], first_b["id"], "two turns");
    for (c, s, first, who) in [(&a, "sa", &first_a, "a"), (&b, "sb", &first_b, "b")] {
        // Claude Code's own retries all say 0.
        let r = send(c, s, "0").await.unwrap();
        assert_eq!(r.headers()["idempotent-replayed"], "true", "{who}");
        let again: Value = r.json().await.unwrap();
        assert_eq!(
            again["id"], first["id"],
            "{who}'s retry got another client's turn"
        );
    }
    assert_eq!(mock.requests(), 2);
    assert_eq!(turns(&log, "text_input").len(), 2);
    server.stop().await;
}
