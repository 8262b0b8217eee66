//! The respond path against a mock upstream that enforces what each
//! provider documents as a 400 (`tests/mock/strict.rs`): request
//! parameters refused before anything is sent or appended, mapped to the
//! provider's names, a failed turn closed in the log, retries as the
//! providers' SDKs decide them, extra headers, and every example of the
//! documentation and `serve --help` run against it.

use crate::mock;

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use wmreplay::server::Provider;
use wmreplay::{CurrentRequest, Format, ReplayOptions, RequestSpec, SYSTEM_RULE, replay};

use mock::*;

fn model_config(
    log: &std::path::Path,
    up: &str,
    provider: Provider,
    model: &str,
) -> wmreplay::server::Config {
    let mut cfg = config(log, Some(up), provider);
    cfg.model = Some(model.into());
    cfg.retry_min_delay = Duration::from_millis(10);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_a_provider_refuses_are_refused_before_anything_is_sent_or_appended() {
    let cases = [
        (
            Provider::Anthropic,
            "claude-sonnet-4-5",
            json!({"temperature": 0.5, "top_p": 0.9}),
            false,
            "top_p",
        ),
        (
            Provider::Anthropic,
            "claude-sonnet-4-5",
            json!({"frequency_penalty": 1}),
            false,
            "frequency_penalty",
        ),
        (
            Provider::Anthropic,
            "claude-sonnet-4-5",
            json!({"stop_sequences": "END"}),
            false,
            "stop_sequences",
        ),
        (
            Provider::OpenAi,
            "gpt-5",
            json!({"stream_options": {"include_usage": true}}),
            false,
            "stream_options",
        ),
        (
            Provider::OpenAi,
            "gpt-5",
            json!({"stream_options": {"include_usage": false}}),
            true,
            "include_usage",
        ),
        (
            Provider::OpenAi,
            "gpt-5",
            json!({"max_tokens": 5, "max_completion_tokens": 6}),
            false,
            "max_tokens",
        ),
        (
            Provider::OpenAi,
            "gpt-5",
            json!({"top_k": 5}),
            false,
            "top_k",
        ),
        (
            Provider::OpenAi,
            "gpt-5",
            json!({"model": "other"}),
            false,
            "model",
        ),
    ];
    for (provider, model, params, stream, field) in cases {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(provider, Mode::Ok).await;
        let srv = start(model_config(&log, &up, provider, model)).await;
        let body = json!({"text": "hi", "params": params, "stream": stream}).to_string();
        let (status, answer) = post(&format!("{}/respond", srv.url), body.clone()).await;
        assert_eq!(status, 400, "{params}: {answer}");
        let e: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(e["error"]["code"], "invalid_params", "{answer}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(field),
            "{params}: {answer}"
        );
        // /v1/context refuses them the same way.
        let (status, _) = post(&format!("{}/v1/context", srv.url), body).await;
        assert_eq!(status, 400);
        assert_eq!(mock.requests(), 0, "{params}: nothing sent");
        assert!(
            turns(&log, "text_input").is_empty(),
            "{params}: nothing appended"
        );
        srv.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_providers_names_are_mapped_with_the_callers_values() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let srv = start(model_config(&log, &up, Provider::OpenAi, "gpt-5")).await;
    let (status, answer) = post(
        &format!("{}/respond", srv.url),
        r#"{"text":"a","params":{"max_tokens":50,"stop_sequences":["END"]}}"#,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let sent = &mock.bodies()[0];
    assert_eq!(sent["max_completion_tokens"], 50);
    assert_eq!(sent["stop"], json!(["END"]));
    assert!(sent.get("max_tokens").is_none() && sent.get("stop_sequences").is_none());
    // Streaming: usage stays asked for, whatever else stream_options says.
    let (status, _) = post(
        &format!("{}/respond", srv.url),
        r#"{"text":"b","stream":true,"params":{"stream_options":{"include_obfuscation":false}}}"#,
    )
    .await;
    assert_eq!(status, 200);
    let sent = &mock.bodies()[1];
    assert_eq!(
        sent["stream_options"],
        json!({"include_obfuscation": false, "include_usage": true})
    );
    assert!(mock.rejected.lock().unwrap().is_empty());
    srv.stop().await;
    // The operator's stream_options go with streamed requests only.
    let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let mut cfg = model_config(&log, &up, Provider::OpenAi, "gpt-5");
    cfg.upstream_fields = vec![(
        "stream_options".into(),
        json!({"include_obfuscation": false}),
    )];
    let srv = start(cfg).await;
    for stream in [false, true] {
        let body = json!({"text": "c", "stream": stream}).to_string();
        let (status, answer) = post(&format!("{}/respond", srv.url), body).await;
        assert_eq!(status, 200, "{answer}");
    }
    let sent = mock.bodies();
    assert!(sent[0].get("stream_options").is_none());
    assert_eq!(sent[1]["stream_options"]["include_obfuscation"], false);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_is_not_retried_and_leaves_no_unanswered_text_input() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    mock.then([Mode::Error {
        status: 400,
        body: json!({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 250000 tokens > 200000 maximum"}}).to_string(),
        headers: vec![],
    }]);
    let srv = start(model_config(
        &log,
        &up,
        Provider::Anthropic,
        "claude-sonnet-4-5",
    ))
    .await;
    let (status, answer) = post(
        &format!("{}/respond", srv.url),
        r#"{"text":"first","session_id":"s"}"#,
    )
    .await;
    assert_eq!(status, 502, "{answer}");
    assert_eq!(mock.requests(), 1, "a 400 is not retried");
    let lines = log_lines(&log);
    let n = lines.len();
    assert_eq!(lines[n - 2]["type"], "text_input");
    let closed = &lines[n - 1];
    assert_eq!(closed["type"], "text_output");
    assert_eq!(closed["text"], "");
    assert_eq!(closed["stop_reason"], "error");
    assert_eq!(closed["session_id"], "s");
    assert_eq!(closed["error"]["status"], 400);
    assert_eq!(closed["error"]["code"], "invalid_request_error");
    assert!(closed["ts_ms"].as_u64().unwrap() >= lines[n - 2]["ts_ms"].as_u64().unwrap());
    // The next turn's replay shows the failure, and nothing is pending.
    let (status, answer) = post(&format!("{}/respond", srv.url), r#"{"text":"second"}"#).await;
    assert_eq!(status, 200, "{answer}");
    let texts = message_texts(&mock.bodies()[1]);
    let failed = texts
        .iter()
        .position(|t| t.contains("\"stop_reason\":\"error\""))
        .expect("the error record is replayed");
    assert!(texts[failed - 1].contains("first"));
    assert!(!texts.iter().any(|t| t.starts_with("PENDING")));
    srv.stop().await;
}

fn error(status: u16, body: Value, headers: Vec<(&'static str, &'static str)>) -> Mode {
    Mode::Error {
        status,
        body: body.to_string(),
        headers,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_follow_the_sdks_and_a_used_up_quota_is_not_retried() {
    let quota = json!({"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}});
    let rate = json!({"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}});
    let busy = json!({"error":{"message":"busy","type":"server_error"}});
    let bad = json!({"error":{"message":"bad","type":"invalid_request_error"}});
    // (what the mock answers first, calls expected, final status)
    let cases: Vec<(Mode, usize, u16)> = vec![
        (error(429, quota.clone(), vec![]), 1, 429),
        (error(429, rate.clone(), vec![]), 2, 200),
        (error(409, busy.clone(), vec![]), 2, 200),
        (error(500, busy.clone(), vec![]), 2, 200),
        (
            error(503, busy.clone(), vec![("x-should-retry", "false")]),
            1,
            503,
        ),
        (
            error(400, bad.clone(), vec![("x-should-retry", "true")]),
            2,
            200,
        ),
        // retry-after-ms comes first: 10 ms, not the minute retry-after
        // says (which is past the deadline, so it would be answered now).
        (
            error(
                429,
                rate.clone(),
                vec![("retry-after", "60"), ("retry-after-ms", "10")],
            ),
            2,
            200,
        ),
        (
            error(429, rate.clone(), vec![("retry-after", "60")]),
            1,
            429,
        ),
    ];
    for (first, calls, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
        mock.then([first.clone()]);
        let mut cfg = model_config(&log, &up, Provider::OpenAi, "gpt-5");
        cfg.upstream_timeout = Duration::from_secs(10);
        let srv = start(cfg).await;
        let (status, answer) = post(&format!("{}/respond", srv.url), r#"{"text":"q"}"#).await;
        assert_eq!(
            (status, mock.requests()),
            (want, calls),
            "{first:?}: {answer}"
        );
        srv.stop().await;
    }
}

/// One streamed turn, "hello", whose first upstream answer is `first`:
/// the events the client read, the upstream calls made, the `text_input`s
/// appended and the `text_output`s.
async fn streamed_turn(provider: Provider, first: Mode) -> (String, usize, usize, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(provider, Mode::Ok).await;
    mock.then([first]);
    let srv = start(model_config(&log, &up, provider, "m")).await;
    let r = client()
        .post(format!("{}/respond", srv.url))
        .body(r#"{"text":"hello","stream":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let events = r.text().await.unwrap();
    srv.stop().await;
    let inputs = turns(&log, "text_input").len();
    (events, mock.requests(), inputs, turns(&log, "text_output"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_overloaded_before_any_text_is_called_again() {
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let (events, calls, inputs, outs) =
            streamed_turn(provider, Mode::StreamError("overloaded_error")).await;
        assert!(events.contains("event: done"), "{provider:?}: {events}");
        assert!(!events.contains("event: error"), "{events}");
        assert_eq!(calls, 2, "{provider:?}");
        assert_eq!(inputs, 1);
        assert_eq!(outs.len(), 1);
        assert_eq!(outs[0]["text"], answer_to("hello"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_fails_after_text_keeps_that_text_in_the_closing_record() {
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let (events, calls, _, outs) =
            streamed_turn(provider, Mode::StreamErrorAfterText("overloaded_error")).await;
        assert!(events.contains("event: error"), "{events}");
        // Not called again: text had been relayed.
        assert_eq!(calls, 1, "{provider:?}");
        assert_eq!(outs.len(), 1);
        assert_eq!(outs[0]["stop_reason"], "error");
        let kept = outs[0]["text"].as_str().unwrap();
        assert!(
            !kept.is_empty() && answer_to("hello").starts_with(kept),
            "{kept:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_headers_and_the_user_agent_reach_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = model_config(&log, &up, Provider::Anthropic, "claude-sonnet-4-5");
    cfg.upstream_headers = vec![
        ("anthropic-beta".into(), "context-1m-2025-08-07".into()),
        ("anthropic-version".into(), "2099-01-01".into()),
    ];
    let srv = start(cfg).await;
    let (status, _) = post(&format!("{}/respond", srv.url), r#"{"text":"q"}"#).await;
    assert_eq!(status, 200);
    let seen = mock.seen.lock().unwrap()[0].headers.clone();
    assert_eq!(seen["anthropic-beta"], "context-1m-2025-08-07");
    assert_eq!(
        seen["anthropic-version"], "2099-01-01",
        "replaces the built-in one"
    );
    assert_eq!(seen.get_all("anthropic-version").iter().count(), 1);
    assert!(
        seen["user-agent"]
            .to_str()
            .unwrap()
            .starts_with("wmreplay/"),
        "{seen:?}"
    );
    assert_eq!(seen["x-api-key"], KEY);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_list_skipped_lines_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(b"not json\n");
    std::fs::write(&log, bytes).unwrap();
    let (up, _mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let srv = start(model_config(&log, &up, Provider::Anthropic, "m")).await;
    let (_, plain) = post(&format!("{}/respond", srv.url), r#"{"text":"q"}"#).await;
    let plain: Value = serde_json::from_str(&plain).unwrap();
    assert!(
        plain["stats"]["skipped_invalid_json"].as_u64().unwrap() >= 1,
        "{plain}"
    );
    assert!(plain["stats"].get("skips").is_none(), "{plain}");
    let (_, asked) = post(
        &format!("{}/respond", srv.url),
        r#"{"text":"q","skips":true}"#,
    )
    .await;
    let asked: Value = serde_json::from_str(&asked).unwrap();
    assert_eq!(
        asked["stats"]["skips"][0]["category"], "invalid_json",
        "{asked}"
    );
    srv.stop().await;
}

/// Every `params` and `--upstream-field` example of the documentation and
/// of `serve --help`, sent through the server to the strict mock; each is
/// first looked for in the text it comes from, so an example changed
/// there without this test fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_example_is_accepted_by_the_strict_mock() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let help = String::from_utf8(
        std::process::Command::new(env!("CARGO_BIN_EXE_wmreplay"))
            .args(["serve", "--help"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let server_md = read("docs/server.md");
    for named in [
        "--log-dir",
        "/v1/records",
        "/v1/logs",
        "--model",
        "--max-output-tokens",
        "--upstream-header",
    ] {
        assert!(help.contains(named), "serve --help does not name {named}");
    }
    let readme = read("README.md");
    // (where it is shown, its text there, provider, fields, params)
    type Example = (
        &'static str,
        &'static str,
        Provider,
        Vec<(&'static str, Value)>,
        Value,
    );
    let examples: Vec<Example> = vec![
        (
            "serve --help",
            "--upstream-field temperature=0.2",
            Provider::Anthropic,
            vec![("temperature", json!(0.2))],
            json!({}),
        ),
        (
            "serve --help",
            "'stop_sequences=[\"END\"]'",
            Provider::Anthropic,
            vec![("stop_sequences", json!(["END"]))],
            json!({}),
        ),
        (
            "serve --help",
            "(OpenAI: 'stop=[\"END\"]'",
            Provider::OpenAi,
            vec![("stop", json!(["END"]))],
            json!({}),
        ),
        (
            "docs/server.md",
            "\"params\": {\"temperature\": 0.2}",
            Provider::Anthropic,
            vec![],
            json!({"temperature": 0.2}),
        ),
        (
            "docs/server.md",
            "\"params\": {\"temperature\": 0.2}",
            Provider::OpenAi,
            vec![],
            json!({"temperature": 0.2}),
        ),
        (
            "README.md",
            "\"session_id\": \"s-42\"",
            Provider::Anthropic,
            vec![],
            json!({}),
        ),
    ];
    for (place, text, provider, fields, params) in examples {
        let source = match place {
            "serve --help" => help
                .replace('\n', " ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            "docs/server.md" => server_md.clone(),
            _ => readme.clone(),
        };
        assert!(source.contains(text), "{place} no longer shows {text}");
        for stream in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let log = example_log(dir.path());
            let (up, mock) = start_mock(provider, Mode::Ok).await;
            let mut cfg = model_config(&log, &up, provider, "claude-sonnet-4-5");
            cfg.upstream_fields = fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            cfg.validate().unwrap();
            let srv = start(cfg).await;
            let body = json!({"text": "What next?", "session_id": "s-42", "params": params, "stream": stream});
            let (status, answer) = post(&format!("{}/respond", srv.url), body.to_string()).await;
            assert_eq!(status, 200, "{place}: {text} ({provider:?}): {answer}");
            assert!(mock.rejected.lock().unwrap().is_empty());
            srv.stop().await;
        }
    }
}

fn respond(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_wmreplay"))
        .arg("respond")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/working_memory.log"))
        .args(["--text", "What next?"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn respond_with_a_model_writes_a_request_the_provider_accepts() {
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("anthropic-version", "2023-06-01".parse().unwrap());
    headers.insert("authorization", "Bearer k".parse().unwrap());
    let out = respond(&[
        "--model",
        "claude-opus-4-5",
        "--max-output-tokens",
        "300",
        "--param",
        "temperature=0.2",
        "--param",
        "stop=[\"END\"]",
        "--cache",
        "auto",
        "--tail",
        "4",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(r#"{"model":"claude-opus-4-5","max_tokens":300,"temperature":0.2,"stop_sequences":["END"],"system":[{"#),
        "{text}"
    );
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["messages"].as_array().unwrap().len(), 5);
    strict::check(Provider::Anthropic, &body, &headers).unwrap();
    let out = respond(&[
        "--format",
        "openai",
        "--model",
        "gpt-5",
        "--param",
        "max_tokens=50",
    ]);
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["max_completion_tokens"], 50);
    strict::check(Provider::OpenAi, &body, &headers).unwrap();
    // Refused before anything is written, naming the field.
    let out = respond(&[
        "--model",
        "claude-sonnet-4-5",
        "--param",
        "temperature=0.5",
        "--param",
        "top_p=0.9",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("top_p"));
    let out = respond(&["--param", "temperature=0.5"]);
    assert_eq!(out.status.code(), Some(2), "--param needs --model");
    let out = respond(&["--format", "ndjson", "--model", "m"]);
    assert_eq!(out.status.code(), Some(2));
    // Without --model, the contract's body, as before.
    let out = respond(&[]);
    assert!(out.stdout.starts_with(br#"{"system":""#));
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0.0f64..2.5).prop_map(|f| json!(f)),
        (0u64..5000).prop_map(|n| json!(n)),
        "[a-z]{0,6}".prop_map(|s| json!(s)),
        prop::collection::vec("[A-Z]{1,4}", 0..6).prop_map(|v| json!(v)),
        any::<bool>().prop_map(|b| json!(b)),
        Just(json!({"include_usage": false})),
        Just(json!({"include_usage": true})),
        Just(json!({"type": "auto"})),
        Just(json!([{"name": "t", "description": "d", "input_schema": {"type": "object"}}])),
        Just(
            json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
        ),
        Just(json!([{"name": "bad name!", "input_schema": {"type": "object"}}])),
        Just(json!({"type": "tool", "name": "t"})),
        Just(json!({"type": "function", "function": {"name": "f"}})),
        Just(json!("required")),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "temperature",
            "top_p",
            "top_k",
            "stop",
            "stop_sequences",
            "max_tokens",
            "max_completion_tokens",
            "stream_options",
            "metadata",
            "user",
            "seed",
            "n",
            "tool_choice",
            "frequency_penalty",
            "presence_penalty",
            "service_tier",
            "reasoning_effort",
            "thinking",
            "tools",
            "logprobs",
            "model",
            "messages",
            "system",
            "stream",
            "store",
            "verbosity",
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// Whatever `params` a client sends, the server either refuses them
    /// (naming a field it was given) or sends a body the provider accepts.
    #[test]
    fn random_params_are_refused_or_accepted_by_the_provider(
        params in prop::collection::vec((name(), value()), 0..5),
        anthropic in any::<bool>(),
        stream in any::<bool>(),
        model in prop::sample::select(vec!["claude-sonnet-4-5", "claude-3-7-sonnet-20250219", "claude-opus-4-1", "gpt-5"]),
    ) {
        let (provider, format) = if anthropic {
            (Provider::Anthropic, Format::Anthropic)
        } else {
            (Provider::OpenAi, Format::OpenAi)
        };
        let log = b"{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"hi\"}\n";
        let replayed = replay(log, &ReplayOptions::default());
        match wmreplay::request_fields(format, model, 100, stream, &params, &[]) {
            Err(e) => prop_assert!(params.iter().any(|(k, _)| *k == e.field), "{e:?}"),
            Ok(fields) => {
                let spec = RequestSpec::new(format, SYSTEM_RULE, CurrentRequest { text: "q", session_id: None })
                    .with_fields(&fields);
                let body: Value = serde_json::from_slice(&replayed.render_request_with(&spec)).unwrap();
                let mut headers = axum::http::HeaderMap::new();
                headers.insert("anthropic-version", "2023-06-01".parse().unwrap());
                headers.insert("authorization", "Bearer k".parse().unwrap());
                // Value ranges are the provider's to judge per model; the
                // names, types and pairs are what the table answers for.
                match strict::check(provider, &body, &headers) {
                    Ok(()) => {}
                    Err(m) if m.contains("between") => {}
                    Err(m) => prop_assert!(false, "{params:?} {stream} {model}: sent, but the provider says {m}"),
                }
            }
        }
    }
}
