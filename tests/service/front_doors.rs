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
type Sent = (&'static str, String, Vec<(&'static str, String)>, String);

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
        let attacks: Vec<(&str, Vec<(&'static str, String)>, u16, &str)> = vec![
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
            } else if path.starts_with("/openai") {
                assert_eq!(e["error"]["code"], code, "{path} {what}: {text}");
            } else {
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
