//! The providers' APIs as the agents people run use them (issue "the
//! agents people run, end to end"): what a client of the API expects
//! beside its messages — its beta features forwarded, a body as large as
//! the API takes, the models list, the base URL, every error in the
//! provider's shape.

use crate::mock;

use mock::*;
use serde_json::{Value, json};
use wmreplay::server::Provider;

/// Claude Code sends `anthropic-beta` for the features its body uses
/// (`context_management` needs `context-management-2025-06-27`): the header
/// reaches the upstream, merged with the server's own
/// (`--upstream-header anthropic-beta=…`), each feature once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_beta_features_reach_the_upstream_with_the_servers() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.upstream_headers = vec![("anthropic-beta".into(), "server-feature-1".into())];
    let server = start(cfg).await;
    for (sent, want) in [
        (
            Some("context-management-2025-06-27, server-feature-1"),
            "server-feature-1,context-management-2025-06-27",
        ),
        (None, "server-feature-1"),
    ] {
        let mut r = client()
            .post(format!("{}/anthropic/v1/messages", server.url))
            .header("content-type", "application/json");
        if let Some(b) = sent {
            r = r.header("anthropic-beta", b);
        }
        let body = json!({"model": "m", "max_tokens": 5,
                          "messages": [{"role": "user", "content": format!("beta {sent:?}")}]});
        assert_eq!(r.body(body.to_string()).send().await.unwrap().status(), 200);
        let seen = mock.seen.lock().unwrap().last().unwrap().headers.clone();
        assert_eq!(seen["anthropic-beta"], want, "{sent:?}");
    }
    server.stop().await;
}

/// Claude Code's own requests reach 1.3 MB (its tools and system prompt):
/// the providers' routes take what the API takes (32 MB), `/respond` keeps
/// `--body-limit`, and the records written stay within
/// `--max-record-bytes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_as_large_as_the_api_takes_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let tools: Vec<Value> = (0..24)
        .map(|i| {
            json!({"name": format!("tool_{i}"), "description": "d".repeat(60_000),
                        "input_schema": {"type": "object"}})
        })
        .collect();
    let body = json!({"model": "m", "max_tokens": 5, "tools": tools,
                      "messages": [{"role": "user", "content": "a large request"}]})
    .to_string();
    assert!(body.len() > 1_300_000);
    let r = client()
        .post(format!("{}/anthropic/v1/messages", server.url))
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(mock.requests(), 1);
    let (status, _) = post(
        &format!("{}/respond", server.url),
        json!({"text": "x".repeat(1_300_000)}).to_string(),
    )
    .await;
    assert_eq!(status, 413, "/respond keeps --body-limit");
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        assert!(line.len() <= 1 << 20);
    }
    server.stop().await;
}

/// `GET …/v1/models` lists the upstream's models (with the server's key),
/// the base URL answers `HEAD` and `GET`, and any other path under a
/// provider's prefix is a 404 (or 405) in that provider's shape, which its
/// SDK raises as its own error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_the_base_url_and_every_error_are_the_providers() {
    for p in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, _mock) = start_mock(p, Mode::Ok).await;
        let server = start(config(&log, Some(&up), p)).await;
        let base = match p {
            Provider::Anthropic => format!("{}/anthropic", server.url),
            Provider::OpenAi => format!("{}/openai/v1", server.url),
        };
        let models = format!("{}/v1/models", base.trim_end_matches("/v1"));
        let r = client().get(&models).send().await.unwrap();
        assert_eq!(r.status(), 200, "{p:?}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["data"][0]["id"], "test-model", "{p:?}: {v}");
        assert_eq!(
            v["the_test_key"], true,
            "{p:?}: the server's key lists them"
        );
        assert!(
            !v.to_string().contains(KEY),
            "{p:?}: the key echoed is cut out: {v}"
        );
        for b in [base.clone(), format!("{base}/")] {
            assert_eq!(
                client().head(&b).send().await.unwrap().status(),
                200,
                "HEAD {b}"
            );
            assert_eq!(
                client().get(&b).send().await.unwrap().status(),
                200,
                "GET {b}"
            );
        }
        let shaped = |v: &Value| match p {
            Provider::Anthropic => v["type"] == "error" && v["error"]["type"].is_string(),
            Provider::OpenAi => v["error"]["message"].is_string() && v["error"]["type"].is_string(),
        };
        let r = client()
            .get(format!("{base}/v1/no-such-thing"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        let v: Value = r.json().await.unwrap();
        assert!(shaped(&v), "{p:?} 404: {v}");
        let messages = match p {
            Provider::Anthropic => format!("{base}/v1/messages"),
            Provider::OpenAi => format!("{base}/chat/completions"),
        };
        let r = client().get(&messages).send().await.unwrap();
        assert_eq!(r.status(), 405);
        let v: Value = r.json().await.unwrap();
        assert!(shaped(&v), "{p:?} 405: {v}");
        server.stop().await;
    }
}

/// `count_tokens` (Claude Code calls it for its context meter, and falls
/// back to guesses on a 404): the count is of the request the server would
/// send — the log's replay, then the turn — counted by the upstream's own
/// `count_tokens` with what that takes (no `max_tokens`); an upstream
/// without one gets a local estimate. Nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_counts_the_request_the_server_would_send() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let before = std::fs::read(&log).unwrap();
    let url = format!("{}/anthropic/v1/messages/count_tokens", server.url);
    let body = json!({"model": "m", "system": "be brief",
                      "messages": [{"role": "user", "content": "how many tokens is this?"}]});
    let r = client()
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let n = v["input_tokens"].as_u64().unwrap();
    let counted = mock.counted.lock().unwrap().last().cloned().unwrap();
    let text = counted.to_string();
    assert!(
        text.contains("WM_KIND="),
        "the log's replay is counted: {text}"
    );
    assert!(text.contains("how many tokens is this?"), "{text}");
    assert!(text.contains("be brief"), "{text}");
    assert!(counted.get("max_tokens").is_none());
    // The client's three lines are a small part of what the model is sent.
    assert!(n > 10 * body.to_string().len() as u64 / 4, "{n}");
    assert_eq!(std::fs::read(&log).unwrap(), before, "nothing written");
    assert_eq!(mock.requests(), 0, "no turn was run");
    server.stop().await;

    // An upstream without count_tokens: a local estimate.
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    // A full endpoint URL of a compatible server, not the API's path: its
    // count is not known.
    let server = start(config(
        &log,
        Some(&format!("{up}/compatible/chat")),
        Provider::Anthropic,
    ))
    .await;
    let v: Value = client()
        .post(format!("{}/anthropic/v1/messages/count_tokens", server.url))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["estimated"], true, "{v}");
    assert!(v["input_tokens"].as_u64().unwrap() > 100, "{v}");
    server.stop().await;
}

/// Claude Code sends instructions as `role: "system"` messages inside
/// `messages` (its environment after the first user message, reminders
/// later): they are accepted, passed on (those of the resent history right
/// after the turn's user message, those after it where they stand), and
/// never written to the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_messages_inside_the_conversation_are_passed_on_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    let reminder = "<system-reminder>\nattribution\n</system-reminder>\n";
    let env =
        json!({"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /p"}]});
    let first = json!({"model": "m", "max_tokens": 50, "stream": true, "messages": [
        {"role": "user", "content": [{"type": "text", "text": reminder},
                                     {"type": "text", "text": "What is 2+2?"}]},
        env.clone(),
    ]});
    let (status, body) = post(&url, first.to_string()).await;
    assert_eq!(status, 200, "{body}");
    // The messages sent, without the cache breakpoint on the last block.
    let unmarked = |v: &Value| -> Vec<Value> {
        serde_json::from_str(
            &v["messages"]
                .to_string()
                .replace(r#","cache_control":{"type":"ephemeral"}"#, ""),
        )
        .unwrap()
    };
    let msgs = unmarked(&mock.bodies().last().cloned().unwrap());
    let at = msgs
        .iter()
        .position(|m| current_text_of(&json!({"messages": [m]})).is_some())
        .unwrap();
    assert_eq!(msgs[at + 1], env, "after the turn's user message");
    assert_eq!(at + 2, msgs.len());
    let answer = turns(&log, "text_output")[0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    // The next request resends the history, the environment at its place.
    let second = json!({"model": "m", "max_tokens": 50, "messages": [
        first["messages"][0].clone(), env.clone(),
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
        {"role": "user", "content": "and 3+3?"},
        {"role": "system", "content": "a reminder"},
    ]});
    let (status, body) = post(&url, second.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let msgs = unmarked(&mock.bodies().last().cloned().unwrap());
    let n = msgs.len();
    assert_eq!(
        current_text_of(&json!({"messages": [&msgs[n - 3]]})).as_deref(),
        Some("and 3+3?")
    );
    assert_eq!(msgs[n - 2], env);
    assert_eq!(
        msgs[n - 1],
        json!({"role": "system", "content": "a reminder"})
    );
    let inputs: Vec<String> = turns(&log, "text_input")
        .iter()
        .map(|r| r["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        inputs,
        [format!("{reminder}\n\nWhat is 2+2?"), "and 3+3?".into()]
    );
    let all = std::fs::read_to_string(&log).unwrap();
    assert!(!all.contains("# Environment") && !all.contains("a reminder"));
    // A system message that is not text is refused, nothing written.
    let bad = json!({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": [{"type": "image", "source": {}}]}]});
    let (status, body) = post(&url, bad.to_string()).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("invalid_request_error") && body.contains("messages[1].content"),
        "{body}"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), all);
    server.stop().await;
}
