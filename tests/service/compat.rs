//! The provider-compatible endpoints (`/anthropic/v1/messages`,
//! `/openai/v1/chat/completions`) at the HTTP level: what the log keeps of
//! a client's messages, the events relayed, refusals in the provider's
//! shape before anything is written, keys, auth, and a client gone
//! mid-stream. The official SDKs as clients: tests/service/sdk_clients.rs.

use crate::mock;

use std::path::{Path, PathBuf};
use std::time::Duration;

use mock::*;
use serde_json::{Value, json};
use wmreplay::server::{ApiKey, Provider};

fn path(p: Provider) -> &'static str {
    match p {
        Provider::Anthropic => "/anthropic/v1/messages",
        Provider::OpenAi => "/openai/v1/chat/completions",
    }
}

fn ask(p: Provider, messages: Value) -> Value {
    match p {
        Provider::Anthropic => json!({"model": "m-client", "max_tokens": 50, "messages": messages}),
        Provider::OpenAi => json!({"model": "m-client", "messages": messages}),
    }
}

async fn send(
    url: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut r = client()
        .post(url)
        .header("content-type", "application/json");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let resp = r.body(body.to_string()).send().await.unwrap();
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    (status, h, resp.text().await.unwrap())
}

fn appended(log: &Path) -> Vec<Value> {
    let all = std::fs::read(log).unwrap();
    String::from_utf8_lossy(&all[example_bytes().len()..])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn kinds(log: &Path) -> Vec<String> {
    appended(log)
        .iter()
        .map(|r| r["type"].as_str().unwrap().to_string())
        .collect()
}

/// The example log served with a mock upstream of `p`: its folder (kept
/// while the test runs), the log, the mock, the server and `p`'s route.
async fn served(p: Provider) -> (tempfile::TempDir, PathBuf, Mock, Running, String) {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(p, Mode::Ok).await;
    let server = start(config(&log, Some(&up), p)).await;
    let url = format!("{}{}", server.url, path(p));
    (dir, log, mock, server, url)
}

const BOTH: [Provider; 2] = [Provider::Anthropic, Provider::OpenAi];

/// A client that resends its history: what the log holds is not written
/// or sent again; history the log never saw is written before the turn's
/// input, once.
#[tokio::test(flavor = "multi_thread")]
async fn the_log_keeps_each_message_once_whatever_history_the_client_resends() {
    for p in BOTH {
        let (_dir, log, mock, server, url) = served(p).await;
        // History from elsewhere: two messages the log never saw.
        let elsewhere = json!([
            {"role": "user", "content": "an old question"},
            {"role": "assistant", "content": "an old answer"},
            {"role": "user", "content": "question one"},
        ]);
        let (status, _, body) = send(&url, &ask(p, elsewhere.clone()), &[]).await;
        assert_eq!(status, 200, "{body}");
        let a1: Value = serde_json::from_str(&body).unwrap();
        let said = match p {
            Provider::Anthropic => a1["content"][0]["text"].as_str().unwrap().to_string(),
            Provider::OpenAi => a1["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string(),
        };
        assert_eq!(said, answer_to("question one"));
        // Then the whole conversation again, with a new question.
        let mut all = elsewhere.as_array().unwrap().clone();
        all.push(json!({"role": "assistant", "content": said}));
        all.push(json!({"role": "user", "content": "question two"}));
        let (status, _, body) = send(&url, &ask(p, Value::Array(all)), &[]).await;
        assert_eq!(status, 200, "{body}");
        let texts: Vec<(String, String)> = appended(&log)
            .iter()
            .map(|r| {
                (
                    r["type"].as_str().unwrap().into(),
                    r["text"].as_str().unwrap_or("").into(),
                )
            })
            .collect();
        let (one, two) = (answer_to("question one"), answer_to("question two"));
        let want = [
            ("text_input", "an old question"),
            ("text_output", "an old answer"),
            ("text_input", "question one"),
            ("text_output", one.as_str()),
            ("text_input", "question two"),
            ("text_output", two.as_str()),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(texts, want, "{p:?}");
        // The model was sent each message once: the replay, then the turn.
        let sent = mock.bodies().last().unwrap().to_string();
        assert_eq!(sent.matches("an old question").count(), 1, "{p:?}");
        // Its input once, and the answer that quotes it.
        assert_eq!(sent.matches("question one").count(), 2, "{p:?}");
        assert_eq!(sent.matches("question two").count(), 1, "{p:?}");
        // The client's model is the one called.
        assert_eq!(mock.bodies().last().unwrap()["model"], "m-client");
        server.stop().await;
    }
}

/// A streamed answer reaches the client as the upstream sent it, event by
/// event (Anthropic's named events to `message_stop`, OpenAI's chunks to
/// `[DONE]`), and is recorded once.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_is_relayed_in_the_providers_own_events() {
    for p in BOTH {
        let (_dir, log, _mock, server, url) = served(p).await;
        let mut body = ask(p, json!([{"role": "user", "content": "stream it"}]));
        body["stream"] = json!(true);
        let (status, h, text) = send(&url, &body, &[]).await;
        assert_eq!(status, 200);
        assert_eq!(h["content-type"], "text/event-stream");
        match p {
            Provider::Anthropic => {
                assert!(text.starts_with("event: message_start\ndata: "), "{text}");
                assert!(
                    text.trim_end()
                        .ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}"),
                    "{text}"
                );
                assert!(!text.contains("event: delta") && !text.contains("event: done"));
                assert!(h.contains_key("request-id"));
            }
            Provider::OpenAi => {
                assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
                assert!(!text.contains("event:"));
                assert!(h.contains_key("x-request-id"));
            }
        }
        let out = turns(&log, "text_output");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["text"], answer_to("stream it"));
        server.stop().await;
    }
}

/// What the provider would refuse, or what has no place in a log of text,
/// is a 400 in the provider's shape, and nothing is written.
#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_are_refused_in_the_providers_shape_before_anything_is_written() {
    for p in BOTH {
        let (_dir, log, mock, server, url) = served(p).await;
        let user = json!([{"role": "user", "content": "hi"}]);
        let mut with_bad_param = ask(p, user.clone());
        with_bad_param["temperature"] = json!("hot");
        let mut unknown_param = ask(p, user.clone());
        unknown_param["not_a_param"] = json!(1);
        let mut no_model = ask(p, user.clone());
        no_model.as_object_mut().unwrap().remove("model");
        let image = match p {
            Provider::Anthropic => {
                json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}])
            }
            Provider::OpenAi => {
                json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}])
            }
        };
        let cases = [
            ("a parameter of the wrong type", with_bad_param),
            ("an unknown parameter", unknown_param),
            ("no model", no_model),
            ("no messages", ask(p, json!([]))),
            (
                "an answer last",
                ask(
                    p,
                    json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "pre"}]),
                ),
            ),
            (
                "an image",
                ask(p, json!([{"role": "user", "content": image}])),
            ),
            (
                "a role the provider lacks",
                ask(p, json!([{"role": "robot", "content": "hi"}])),
            ),
        ];
        for (what, body) in cases {
            let (status, _, text) = send(&url, &body, &[]).await;
            assert_eq!(status, 400, "{p:?} {what}: {text}");
            let e: Value = serde_json::from_str(&text).unwrap();
            match p {
                Provider::Anthropic => {
                    assert_eq!(e["type"], "error", "{what}");
                    assert_eq!(e["error"]["type"], "invalid_request_error", "{what}");
                }
                Provider::OpenAi => {
                    assert_eq!(e["error"]["type"], "invalid_request_error", "{what}");
                    assert!(e["error"]["message"].is_string(), "{what}");
                }
            }
        }
        let (status, _, text) = send(&url, &json!(["not", "an object"]), &[]).await;
        assert_eq!(status, 400, "{text}");
        assert!(appended(&log).is_empty(), "{p:?}: {:?}", appended(&log));
        assert_eq!(mock.requests(), 0);
        server.stop().await;
    }
}

/// Anthropic's tool runner first offers a message thread: refused with
/// the error code it recovers from.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_thread_is_refused_with_the_code_the_tool_runner_recovers_from() {
    let (_dir, log, _mock, server, url) = served(Provider::Anthropic).await;
    let mut body = ask(
        Provider::Anthropic,
        json!([{"role": "user", "content": "hi"}]),
    );
    body["thread"] = json!({"type": "create"});
    let (status, _, text) = send(&url, &body, &[]).await;
    assert_eq!(status, 400);
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        e["error"]["details"]["error_code"],
        "thread_unsupported_request"
    );
    assert!(appended(&log).is_empty());
    server.stop().await;
}

/// The other provider's endpoint is a 404 that names the right base URL;
/// under `--log-dir` each log has its own.
#[tokio::test(flavor = "multi_thread")]
async fn the_other_providers_endpoint_names_the_right_one_and_logs_have_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::OpenAi)).await;
    let body = ask(
        Provider::Anthropic,
        json!([{"role": "user", "content": "hi"}]),
    );
    let (status, _, text) =
        send(&format!("{}/anthropic/v1/messages", server.url), &body, &[]).await;
    assert_eq!(status, 404, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error"]["type"], "not_found_error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/openai/v1"),
        "{e}"
    );
    server.stop().await;

    let logs = tempfile::tempdir().unwrap();
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(
        &logs.path().join("unused.log"),
        Some(&up),
        Provider::Anthropic,
    );
    cfg.log_dir = Some(logs.path().to_path_buf());
    cfg.create_logs = true;
    let server = start(cfg).await;
    for id in ["alice", "bob"] {
        let body = ask(
            Provider::Anthropic,
            json!([{"role": "user", "content": format!("hello from {id}")}]),
        );
        let (status, _, text) = send(
            &format!("{}/v1/logs/{id}/anthropic/v1/messages", server.url),
            &body,
            &[],
        )
        .await;
        assert_eq!(status, 200, "{text}");
    }
    let bob = std::fs::read_to_string(logs.path().join("bob.log")).unwrap();
    assert!(bob.contains("hello from bob") && !bob.contains("hello from alice"));
    // Bob's turn replayed Bob's log only.
    assert!(
        !mock
            .bodies()
            .last()
            .unwrap()
            .to_string()
            .contains("hello from alice")
    );
    server.stop().await;
}

/// Without an upstream either provider's endpoint is a 404 that says so and
/// names the route that answers (what the server would send), which does.
#[tokio::test(flavor = "multi_thread")]
async fn without_an_upstream_both_endpoints_point_at_the_context_route() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let server = start(config(&log, None, Provider::Anthropic)).await;
    for p in [Provider::Anthropic, Provider::OpenAi] {
        let body = ask(p, json!([{"role": "user", "content": "hi"}]));
        let (status, _, text) = send(&format!("{}{}", server.url, path(p)), &body, &[]).await;
        assert_eq!(status, 404, "{text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        let message = e["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("without an upstream") && message.contains("POST /v1/context"),
            "{message}"
        );
    }
    let r = reqwest::Client::new()
        .post(format!("{}/v1/context", server.url))
        .body(json!({"text": "hi"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    server.stop().await;
}

/// The client's key is the server's access token (either header an SDK
/// sends), or with `--forward-client-key` the upstream's key; it is never
/// written, logged or echoed.
#[tokio::test(flavor = "multi_thread")]
async fn the_clients_key_is_the_access_token_or_forwarded_and_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.auth_token = Some(ApiKey("tok-server".into()));
    let server = start(cfg).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    let body = ask(
        Provider::Anthropic,
        json!([{"role": "user", "content": "hi"}]),
    );
    for (h, v, want) in [
        ("x-api-key", "tok-server", 200),
        ("authorization", "Bearer tok-server", 200),
        ("x-api-key", "sk-wrong", 401),
    ] {
        let (status, _, text) = send(&url, &body, &[(h, v)]).await;
        assert_eq!(status, want, "{h}: {text}");
        if want == 401 {
            let e: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(e["error"]["type"], "authentication_error");
            assert!(!text.contains("sk-wrong"));
        }
    }
    // The server's own key went upstream.
    assert!(mock.keys().iter().all(|k| k == KEY));
    server.stop().await;

    // Forwarded: the client's key goes upstream, and an error that quotes
    // it comes back without it.
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.api_key = None;
    cfg.forward_client_key = true;
    cfg.upstream_retries = 0;
    let server = start(cfg).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    // Another question: the same one is the turn answered above.
    let body = ask(
        Provider::Anthropic,
        json!([{"role": "user", "content": "hi, forwarded"}]),
    );
    let (status, _, _) = send(&url, &body, &[("x-api-key", "sk-client-secret-1")]).await;
    assert_eq!(status, 200);
    assert_eq!(mock.keys().last().unwrap(), "sk-client-secret-1");
    mock.then([Mode::Fail {
        status: 401,
        retry_after: None,
        echo_key: true,
    }]);
    // Another question (the same one again would be the same turn).
    let body = ask(
        Provider::Anthropic,
        json!([{"role": "user", "content": "hi again"}]),
    );
    let (status, _, text) = send(&url, &body, &[("x-api-key", "sk-client-secret-1")]).await;
    assert_eq!(status, 401, "{text}");
    assert!(!text.contains("sk-client-secret-1"), "{text}");
    let (status, _, _) = send(&url, &body, &[]).await;
    assert_eq!(status, 401, "no key to forward");
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("sk-client-secret")
    );
    server.stop().await;

    let mut both = config(&log, Some("http://127.0.0.1:9"), Provider::Anthropic);
    both.forward_client_key = true;
    both.auth_token = Some(ApiKey("t".into()));
    assert!(
        both.validate()
            .unwrap_err()
            .contains("--forward-client-key")
    );
}

/// A repeated request with its `Idempotency-Key` gets the first answer,
/// streamed or not, and the log one turn.
#[tokio::test(flavor = "multi_thread")]
async fn a_repeated_key_gets_the_first_answer_in_either_form() {
    for p in BOTH {
        let (_dir, log, mock, server, url) = served(p).await;
        let mut body = ask(p, json!([{"role": "user", "content": "once only"}]));
        body["stream"] = json!(true);
        let key = [("idempotency-key", "k-1")];
        let (status, _, first) = send(&url, &body, &key).await;
        assert_eq!(status, 200);
        body["stream"] = json!(false);
        let (status, h, again) = send(&url, &body, &key).await;
        assert_eq!(status, 200);
        assert_eq!(h["idempotent-replayed"], "true");
        let v: Value = serde_json::from_str(&again).unwrap();
        let text = match p {
            Provider::Anthropic => v["content"][0]["text"].clone(),
            Provider::OpenAi => v["choices"][0]["message"]["content"].clone(),
        };
        assert_eq!(text, answer_to("once only"), "{again}");
        body["stream"] = json!(true);
        let (status, _, streamed) = send(&url, &body, &key).await;
        assert_eq!(status, 200);
        // The repeat's events carry the same text as the first stream's.
        let texts = |s: &str| -> String {
            s.lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .map(|d| {
                    d["delta"]["text"]
                        .as_str()
                        .or(d["choices"][0]["delta"]["content"].as_str())
                        .unwrap_or("")
                        .to_string()
                })
                .collect()
        };
        assert_eq!(texts(&streamed), texts(&first));
        assert_eq!(texts(&first), answer_to("once only"));
        assert_eq!(mock.requests(), 1);
        assert_eq!(kinds(&log), ["text_input", "text_output"]);
        server.stop().await;
    }
}

/// A client gone in the middle of a stream cuts nothing: the answer is
/// read to its end and recorded once, as on `/respond`.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_gone_mid_stream_leaves_one_whole_turn() {
    for p in BOTH {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, _mock) = start_mock(p, Mode::SlowStream(30)).await;
        let server = start(config(&log, Some(&up), p)).await;
        let mut body = ask(p, json!([{"role": "user", "content": "a long answer"}]));
        body["stream"] = json!(true);
        let resp = client()
            .post(format!("{}{}", server.url, path(p)))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let mut stream = resp.bytes_stream();
        use futures_util::StreamExt;
        let _ = stream.next().await;
        drop(stream);
        // The turn finishes without its client.
        let mut out = Vec::new();
        for _ in 0..200 {
            out = turns(&log, "text_output");
            if !out.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(out.len(), 1, "{p:?}");
        assert_eq!(out[0]["text"], answer_to("a long answer"));
        assert_eq!(turns(&log, "text_input").len(), 1);
        server.stop().await;
    }
}

/// Tool results for a turn the log does not hold (a client that began it
/// elsewhere) write the whole turn as the client shows it: its input, the
/// model's call and the results, then the answer; the same request again
/// is that turn, answered as before.
#[tokio::test(flavor = "multi_thread")]
async fn tool_results_for_a_turn_the_log_lacks_write_that_turn_first() {
    for p in BOTH {
        let (_dir, log, mock, server, url) = served(p).await;
        let (call, result) = match p {
            Provider::Anthropic => (
                json!({"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_elsewhere", "name": "lookup", "input": {"q": "x"}}]}),
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_elsewhere", "content": "found x"}]}),
            ),
            Provider::OpenAi => (
                json!({"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_elsewhere", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}"}}]}),
                json!({"role": "tool", "tool_call_id": "call_elsewhere", "content": "found x"}),
            ),
        };
        let mut body = ask(
            p,
            json!([{"role": "user", "content": "look x up"}, call, result]),
        );
        body["tools"] = match p {
            Provider::Anthropic => json!([{"name": "lookup", "input_schema": {"type": "object"}}]),
            Provider::OpenAi => {
                json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}])
            }
        };
        let (status, _, text) = send(&url, &body, &[]).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(
            kinds(&log),
            [
                "text_input",
                "text_output",
                "tool_call",
                "tool_result",
                "text_output"
            ],
            "{p:?}"
        );
        let records = appended(&log);
        assert_eq!(records[2]["by"], "client");
        assert_eq!(records[3]["content"], "found x");
        assert_eq!(records[3]["name"], "lookup");
        assert!(records[4]["text"].as_str().unwrap().contains("found x"));
        // The model saw the turn's input once, then the call and result.
        let sent = mock.bodies().last().unwrap().to_string();
        assert_eq!(sent.matches("look x up").count(), 1);
        // The same request again (a client's retry, which now finds the
        // turn's input in the log) is the same turn: the first answer, no
        // second call, nothing written.
        let calls = mock.requests();
        let (status, _, again) = send(&url, &body, &[]).await;
        assert_eq!(status, 200, "{again}");
        let answer = |t: &str| {
            let v: Value = serde_json::from_str(t).unwrap();
            match p {
                Provider::Anthropic => v["content"][0]["text"].clone(),
                Provider::OpenAi => v["choices"][0]["message"]["content"].clone(),
            }
        };
        assert_eq!(answer(&again), answer(&text), "{p:?}");
        assert_eq!(mock.requests(), calls, "{p:?}: the model called again");
        assert_eq!(kinds(&log).len(), 5, "{p:?}: {:?}", kinds(&log));
        server.stop().await;
    }
}

/// A client's tools are its text: they reach the upstream byte for byte as
/// written (spacing, member order, escapes), and tools the provider would
/// refuse are refused before anything is written or sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_clients_tools_reach_the_upstream_as_written_or_are_refused_first() {
    for p in BOTH {
        let (_dir, log, mock, server, url) = served(p).await;
        let tools = match p {
            Provider::Anthropic => {
                r#"[ {"description" : "caf\u00e9 \/ lookup", "name":"lookup",
                     "input_schema":{"type":"object","properties":{"q":{"type":"string"}}} } ]"#
            }
            Provider::OpenAi => {
                r#"[ {"function":{"parameters":{"type":"object"}, "name":"lookup",
                     "description":"caf\u00e9 \/ lookup"}, "type":"function"} ]"#
            }
        };
        let body = ask(p, json!([{"role": "user", "content": "look it up"}])).to_string();
        let with = |tools: &str| format!("{},\"tools\":{tools}}}", &body[..body.len() - 1]);
        let post = |text: String| {
            client()
                .post(&url)
                .header("content-type", "application/json")
                .body(text)
                .send()
        };
        let r = post(with(tools)).await.unwrap();
        assert_eq!(r.status(), 200, "{p:?}: {}", r.text().await.unwrap());
        let seen = mock.seen.lock().unwrap().last().unwrap().raw.clone();
        let sent = String::from_utf8(seen).unwrap();
        assert!(
            sent.contains(&format!("\"tools\":{tools}")),
            "{p:?}: {sent}"
        );
        assert_eq!(kinds(&log), ["text_input", "text_output"]);

        let bad = [
            r#"[{"name":"bad name!","input_schema":{"type":"object"}}]"#,
            r#"{"name":"lookup","input_schema":{"type":"object"}}"#,
            r#"[{"type":"function","function":{"parameters":{}}}]"#,
            r#"["lookup"]"#,
        ];
        for tools in bad {
            let r = post(with(tools)).await.unwrap();
            let status = r.status();
            let text = r.text().await.unwrap();
            assert_eq!(status, 400, "{p:?} {tools}: {text}");
            assert!(text.contains("tools"), "{p:?} {tools}: {text}");
        }
        // `tool_choice` needs tools: an empty list is none.
        let none = format!(
            "{},\"tool_choice\":{{\"type\":\"auto\"}}}}",
            &with("[]")[..with("[]").len() - 1]
        );
        let r = post(none).await.unwrap();
        assert_eq!(r.status(), 400, "{p:?}");
        let text = r.text().await.unwrap();
        assert!(
            text.contains("may only be given with `tools`"),
            "{p:?}: {text}"
        );
        assert_eq!(mock.requests(), 1, "{p:?}: nothing refused was sent");
        assert_eq!(
            kinds(&log),
            ["text_input", "text_output"],
            "{p:?}: nor written"
        );
        server.stop().await;
    }
}
