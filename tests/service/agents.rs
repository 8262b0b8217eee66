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

/// Sends `body` to `url` as a client of session `session` (Claude Code's
/// header); the status and the body.
async fn send_as(url: &str, session: &str, body: &Value) -> (u16, String) {
    let r = client()
        .post(url)
        .header("content-type", "application/json")
        .header("x-claude-code-session-id", session)
        .header("x-stainless-retry-count", "0")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The records of `session` after the example log: `(type, text or id)`.
fn records_of(log: &std::path::Path, session: &str) -> Vec<(String, String)> {
    let all = std::fs::read_to_string(log).unwrap();
    all.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["session_id"] == session)
        .map(|r| {
            let what = r["text"].as_str().or(r["id"].as_str()).unwrap_or("");
            (r["type"].as_str().unwrap().to_string(), what.to_string())
        })
        .collect()
}

fn rec(kind: &str, what: &str) -> (String, String) {
    (kind.to_string(), what.to_string())
}

/// Claude Code retries a 529 by itself, every attempt with
/// `x-stainless-retry-count: 0`: the same session and history with the
/// log's last input unanswered is the same turn, run again, never a second
/// `text_input`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_retry_is_the_same_turn_whatever_its_headers() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.upstream_retries = 0;
    let server = start(cfg.clone()).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    mock.then([Mode::fail(529), Mode::fail(529)]);
    let body = json!({"model": "m", "max_tokens": 50, "stream": true,
                      "messages": [{"role": "user", "content": "overloaded?"}]});
    for want in [529, 529, 200] {
        let (status, text) = send_as(&url, "cc-1", &body).await;
        assert_eq!(status, want, "{text}");
    }
    // Answered: the same request again is still that turn (its answer).
    let (status, _) = send_as(&url, "cc-1", &body).await;
    assert_eq!(status, 200);
    assert_eq!(mock.requests(), 3);
    // The turn's key was answered by the batch that closed it: the store
    // has it done, its input where the log has it, and so a restarted
    // server answers it too, calling no one.
    let db = rusqlite::Connection::open(wmreplay::state::Store::path_for(&log)).unwrap();
    let (status, offset): (String, i64) = db
        .query_row(
            "SELECT status, input_offset FROM turns WHERE response IS NOT NULL",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    drop(db);
    assert_eq!(status, "done");
    let all = std::fs::read(&log).unwrap();
    let line = all[offset as usize..]
        .split(|&b| b == b'\n')
        .next()
        .unwrap();
    let input: Value = serde_json::from_slice(line).unwrap();
    assert_eq!(input["text"], "overloaded?", "{input}");
    server.stop().await;
    let server = start(cfg).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    let (status, text) = send_as(&url, "cc-1", &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(mock.requests(), 3, "answered from the store");
    let inputs: Vec<_> = records_of(&log, "cc-1")
        .into_iter()
        .filter(|(k, _)| k == "text_input")
        .collect();
    assert_eq!(inputs, [rec("text_input", "overloaded?")]);
    // Another session's same words are its own turn.
    let (status, _) = send_as(&url, "cc-2", &body).await;
    assert_eq!(status, 200);
    assert_eq!(mock.requests(), 4);
    server.stop().await;
}

/// A turn whose words and answer are word for word the turn's before it
/// ("continue", "Done."), answered, then sent again (the client never got
/// the answer): the log's second answer lines up with the request's
/// history as well as the first does, yet the request is that answered
/// turn, not a third: its answer again, nothing written, no model call,
/// in this process and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_a_turn_that_repeats_the_one_before_it_is_that_turn() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let cfg = config(&log, Some(&up), Provider::Anthropic);
    let server = start(cfg.clone()).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    let said = answer_to("continue");
    let first = json!({"model": "m", "max_tokens": 50,
                       "messages": [{"role": "user", "content": "continue"}]});
    let (status, text) = send_as(&url, "cc-r", &first).await;
    assert_eq!(status, 200, "{text}");
    let second = json!({"model": "m", "max_tokens": 50, "messages": [
        {"role": "user", "content": "continue"},
        {"role": "assistant", "content": said},
        {"role": "user", "content": "continue"},
    ]});
    let (status, text) = send_as(&url, "cc-r", &second).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(mock.requests(), 2);
    let want = [
        rec("text_input", "continue"),
        rec("text_output", &said),
        rec("text_input", "continue"),
        rec("text_output", &said),
    ];
    assert_eq!(records_of(&log, "cc-r"), want);
    // Sent again: the same turn.
    let (status, again) = send_as(&url, "cc-r", &second).await;
    assert_eq!(status, 200, "{again}");
    assert!(again.contains("answer to"), "{again}");
    assert_eq!(mock.requests(), 2, "the model is not called again");
    assert_eq!(records_of(&log, "cc-r"), want);
    server.stop().await;
    let server = start(cfg).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    let (status, again) = send_as(&url, "cc-r", &second).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(mock.requests(), 2, "answered from the store");
    assert_eq!(records_of(&log, "cc-r"), want);
    server.stop().await;
}

/// A message is held only by a record of the same session with the same
/// whole text, where the sequences line up: "thanks" said in another
/// session, or a first message sharing its first 310 characters (Claude
/// Code's reminder) with one the log holds, holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_held_by_its_own_sessions_record_of_the_same_whole_text() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    let reminder = format!(
        "<system-reminder>\n{}\n</system-reminder>\n\n",
        "r".repeat(290)
    );
    let user = |t: &str| json!({"role": "user", "content": t});
    let said = |t: &str| json!({"role": "assistant", "content": [{"type": "text", "text": t}]});
    // Session B says "thanks"; session A's first day starts with the
    // reminder.
    let (s, _) = send_as(
        &url,
        "B",
        &json!({"model": "m", "max_tokens": 9, "messages": [user("thanks")]}),
    )
    .await;
    assert_eq!(s, 200);
    let first_day = format!("{reminder}first day");
    let (s, _) = send_as(
        &url,
        "A",
        &json!({"model": "m", "max_tokens": 9, "messages": [user(&first_day)]}),
    )
    .await;
    assert_eq!(s, 200);
    let before = records_of(&log, "A");
    // Session A resends a conversation the log lacks, with both.
    let other_day = format!("{reminder}another day");
    let history = json!({"model": "m", "max_tokens": 9, "messages": [
        user(&other_day), said("an answer"), user("thanks"), said("welcome"), user("next"),
    ]});
    let (s, text) = send_as(&url, "A", &history).await;
    assert_eq!(s, 200, "{text}");
    let after = records_of(&log, "A");
    assert_eq!(
        after[before.len()..],
        [
            rec("text_input", &other_day),
            rec("text_output", "an answer"),
            rec("text_input", "thanks"),
            rec("text_output", "welcome"),
            rec("text_input", "next"),
            after.last().unwrap().clone(),
        ]
    );
    // And resent again with the answer: nothing of it written twice.
    let answer = after.last().unwrap().1.clone();
    let mut again = history.clone();
    let msgs = again["messages"].as_array_mut().unwrap();
    msgs.push(said(&answer));
    msgs.push(user("thanks"));
    let (s, _) = send_as(&url, "A", &again).await;
    assert_eq!(s, 200);
    let last = records_of(&log, "A");
    assert_eq!(last[after.len()], rec("text_input", "thanks"));
    assert_eq!(last.len(), after.len() + 2);
    server.stop().await;
}

/// An answer is written once however the provider splits it: Anthropic's
/// text blocks (a blank line apart in the record, as in the client's copy)
/// and OpenAI's `content` with a `refusal`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_written_once_however_the_provider_splits_it() {
    for p in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(p, Mode::Ok).await;
        let server = start(config(&log, Some(&up), p)).await;
        let (url, answer, copy) = match p {
            Provider::Anthropic => (
                format!("{}/anthropic/v1/messages", server.url),
                json!({"id": "msg_2", "type": "message", "role": "assistant", "model": "m",
                       "content": [{"type": "text", "text": "Part one."},
                                   {"type": "text", "text": "Part two."}],
                       "stop_reason": "end_turn", "stop_sequence": null,
                       "usage": {"input_tokens": 1, "output_tokens": 1}}),
                json!({"role": "assistant", "content": [{"type": "text", "text": "Part one."},
                                                        {"type": "text", "text": "Part two."}]}),
            ),
            Provider::OpenAi => (
                format!("{}/openai/v1/chat/completions", server.url),
                json!({"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop", "message":
                           {"role": "assistant", "content": "Part one.", "refusal": "Part two."}}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
                json!({"role": "assistant", "content": "Part one.", "refusal": "Part two."}),
            ),
        };
        mock.then([Mode::Error {
            status: 200,
            body: answer.to_string(),
            headers: vec![("content-type", "application/json")],
        }]);
        let mut body = json!({"model": "m", "max_tokens": 20,
                              "messages": [{"role": "user", "content": "split it"}]});
        let (s, text) = send_as(&url, "S", &body).await;
        assert_eq!(s, 200, "{p:?} {text}");
        let msgs = body["messages"].as_array_mut().unwrap();
        msgs.push(copy);
        msgs.push(json!({"role": "user", "content": "and then?"}));
        let (s, text) = send_as(&url, "S", &body).await;
        assert_eq!(s, 200, "{p:?} {text}");
        let recs = records_of(&log, "S");
        assert_eq!(
            recs[..3],
            [
                rec("text_input", "split it"),
                rec("text_output", "Part one.\n\nPart two."),
                rec("text_input", "and then?"),
            ],
            "{p:?}"
        );
        assert_eq!(recs.len(), 4, "{p:?} {recs:#?}");
        server.stop().await;
    }
}

/// Words the user sends beside tool results reach the log (after the
/// results), and a continuation is found in its own session only: another
/// session's turn with the same words is not it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn words_beside_tool_results_and_continuations_stay_in_their_session() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    let (s, _) = send_as(
        &url,
        "P",
        &json!({"model": "m", "max_tokens": 9,
        "messages": [{"role": "user", "content": "run it"}]}),
    )
    .await;
    assert_eq!(s, 200);
    let continued = json!({"model": "m", "max_tokens": 9,
        "tools": [{"name": "clock", "input_schema": {"type": "object"}}],
        "messages": [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_q1", "name": "clock", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_q1", "content": "12:00"},
            {"type": "text", "text": "also say the date"}]},
    ]});
    let (s, text) = send_as(&url, "Q", &continued).await;
    assert_eq!(s, 200, "{text}");
    let q = records_of(&log, "Q");
    assert_eq!(
        q[..4],
        [
            rec("text_input", "run it"),
            rec("tool_call", "toolu_q1"),
            rec("tool_result", "toolu_q1"),
            rec("text_input", "also say the date"),
        ],
        "{q:#?}"
    );
    assert_eq!(q.len(), 5);
    assert_eq!(records_of(&log, "P").len(), 2);
    server.stop().await;
}

/// Requests beside the conversation (a title, a classification, a probe)
/// are relayed as the client sent them: the log is not replayed into them
/// and nothing is written. `wmreplay-side` marks a request either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_requests_are_relayed_without_the_log_and_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let url = format!("{}/anthropic/v1/messages", server.url);
    let tools = json!([{"name": "Bash", "input_schema": {"type": "object"}}]);
    let user = |t: &str| json!([{"role": "user", "content": t}]);
    // The session's conversation: an agent's system prompt and tools.
    let (s, _) = send_as(
        &url,
        "S",
        &json!({"model": "m", "max_tokens": 50, "system": "You are an agent.",
        "tools": tools, "messages": user("fix the build")}),
    )
    .await;
    assert_eq!(s, 200);
    let written = std::fs::read(&log).unwrap();
    let calls = mock.requests();
    let sides = [
        // A probe of one token.
        json!({"model": "m", "max_tokens": 1, "messages": user("quota")}),
        // A title: another system prompt, no tools (streamed).
        json!({"model": "m", "max_tokens": 50, "stream": true, "system": "Write a title.",
               "messages": user("title side request")}),
        // An answer in a JSON schema without tools, in a fresh session.
        json!({"model": "m", "max_tokens": 50, "messages": user("classify side request"),
               "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}),
    ];
    for (i, body) in sides.iter().enumerate() {
        let session = if i == 2 { "fresh" } else { "S" };
        let r = client()
            .post(&url)
            .header("content-type", "application/json")
            .header("x-claude-code-session-id", session)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{i}");
        assert_eq!(r.headers()["wmreplay-side"], "true", "{i}");
        let text = r.text().await.unwrap();
        if i == 1 {
            assert!(text.contains("event: message_stop"), "{text}");
        }
        let sent = mock.bodies().last().cloned().unwrap();
        let mut want = body.clone();
        want.as_object_mut().unwrap().remove("__");
        assert_eq!(sent, want, "{i}: relayed as sent, no replay");
    }
    assert_eq!(mock.requests(), calls + 3);
    assert_eq!(std::fs::read(&log).unwrap(), written, "nothing written");
    // The header marks a request either way.
    let r = client()
        .post(&url)
        .header("content-type", "application/json")
        .header("wmreplay-side", "false")
        .body(
            json!({"model": "m", "max_tokens": 1, "messages": user("one token, kept")}).to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("wmreplay-side").is_none());
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("one token, kept")
    );
    let r = client()
        .post(&url)
        .header("content-type", "application/json")
        .header("wmreplay-side", "true")
        .body(json!({"model": "m", "max_tokens": 9, "messages": user("marked side")}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("marked side")
    );
    server.stop().await;
}

/// A request sent upstream never exceeds the client's model's context
/// window, however long the log: without a window of the server's, the
/// replay takes what the model takes less the request's own and its
/// answer's room; `--max-tokens-window` replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_fits_the_models_window_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("long.log");
    let mut text = String::new();
    for i in 0..20_000 {
        let said = format!(
            "record {i}: {}",
            "words of a long working memory ".repeat(6)
        );
        text.push_str(&json!({"type": "text_input", "ts_ms": 1_000 + i, "text": said}).to_string());
        text.push('\n');
    }
    std::fs::write(&log, &text).unwrap();
    assert!(text.len() > 4 << 20);
    for (provider, path, model, window) in [
        (
            Provider::OpenAi,
            "openai/v1/chat/completions",
            "gpt-4o",
            128_000usize,
        ),
        (
            Provider::Anthropic,
            "anthropic/v1/messages",
            "claude-sonnet-4-5",
            200_000,
        ),
    ] {
        let (up, mock) = start_mock(provider, Mode::Ok).await;
        let server = start(config(&log, Some(&up), provider)).await;
        let body = json!({"model": model, "max_tokens": 4000,
                          "messages": [{"role": "user", "content": format!("{model}: the newest record?")}]});
        let (s, t) = post(&format!("{}/{path}", server.url), body.to_string()).await;
        assert_eq!(s, 200, "{t}");
        let seen = mock.seen.lock().unwrap().last().unwrap().raw.clone();
        let sent = String::from_utf8_lossy(&seen);
        // Counted as the server counts (o200k); Claude's tokenizer counts
        // more, which the server's margin for Anthropic's models covers.
        let tokens = wmreplay::Tokenizer::O200k.count(&sent) as usize;
        let room = if provider == Provider::Anthropic {
            window * 4 / 5
        } else {
            window
        };
        assert!(tokens + 4000 <= room, "{model}: {tokens} tokens sent");
        assert!(
            sent.len() > 100_000,
            "{model}: a window's worth, {} bytes",
            sent.len()
        );
        assert!(
            sent.contains("record 19999:") && !sent.contains("record 0:"),
            "{model}: the newest"
        );
        server.stop().await;
    }
    // The server's own window replaces the model's.
    let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::OpenAi);
    cfg.selection.max_tokens = Some(5_000);
    let server = start(cfg).await;
    let body = json!({"model": "gpt-4.1", "messages": [{"role": "user", "content": "small"}]});
    let (s, t) = post(
        &format!("{}/openai/v1/chat/completions", server.url),
        body.to_string(),
    )
    .await;
    assert_eq!(s, 200, "{t}");
    let sent = mock.seen.lock().unwrap().last().unwrap().raw.len();
    assert!(sent < 40_000, "{sent}");
    server.stop().await;
}

/// `serve --sessions-apart`: each turn replays its own session's records
/// (and those without one), never another session's; without it every
/// turn replays every session, so a second client process sees the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_kept_apart_when_asked() {
    for apart in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
        let mut cfg = config(&log, Some(&up), Provider::Anthropic);
        cfg.sessions_apart = apart;
        let server = start(cfg).await;
        let url = format!("{}/anthropic/v1/messages", server.url);
        let ask = |t: &str| json!({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": t}]});
        assert_eq!(send_as(&url, "A", &ask("alpha secret")).await.0, 200);
        assert_eq!(send_as(&url, "B", &ask("beta question")).await.0, 200);
        let sent = mock.bodies().last().unwrap().to_string();
        assert_eq!(sent.contains("alpha secret"), !apart, "apart: {apart}");
        assert!(sent.contains("Stand-up"), "records without a session stay");
        assert_eq!(send_as(&url, "A", &ask("alpha again")).await.0, 200);
        let sent = mock.bodies().last().unwrap().to_string();
        assert!(sent.contains("alpha secret"), "its own session");
        assert_eq!(sent.contains("beta question"), !apart);
        server.stop().await;
    }
}
