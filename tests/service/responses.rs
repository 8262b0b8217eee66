//! OpenAI's Responses API as a memory endpoint (`POST /openai/v1/responses`):
//! the wire Codex and the Agents SDKs' default model speak, streamed and
//! not, with function calls, reasoning items passed back unchanged, and
//! `previous_response_id` resolved from what this server answered.

use crate::mock;

use mock::*;
use serde_json::{Value, json};
use wmreplay::server::Provider;

async fn send(url: &str, body: &Value) -> (u16, String, reqwest::header::HeaderMap) {
    let r = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let h = r.headers().clone();
    (r.status().as_u16(), r.text().await.unwrap(), h)
}

/// The `type`s of a stream's events, in order, and their data.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("");
            let data = e
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("null");
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_turn_streamed_and_not() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::OpenAi);
    cfg.system = Some("Server rules.".into());
    let server = start(cfg).await;
    let url = format!("{}/openai/v1/responses", server.url);
    let (s, text, _) = send(
        &url,
        &json!({"model": "gpt-x", "input": "hello there",
        "instructions": "Be brief.", "max_output_tokens": 50}),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        answer_to("hello there")
    );
    let sent = mock.bodies().last().cloned().unwrap();
    assert!(sent.get("messages").is_none() && sent.get("instructions").is_none());
    assert_eq!(sent["max_output_tokens"], 50);
    let input = sent["input"].as_array().unwrap();
    assert_eq!(input[0]["role"], "system");
    let system = input[0]["content"].as_str().unwrap();
    assert!(
        system.contains("Server rules.") && system.contains("Be brief."),
        "{system}"
    );
    assert!(sent.to_string().contains("WM_KIND="), "the log replayed");
    // Streamed: the events in order, and the log holds the answer.
    let (s, text, _) = send(&url, &json!({"model": "gpt-x", "stream": true, "input": [
        {"role": "user", "content": "hello there"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer_to("hello there")}]},
        {"role": "user", "content": [{"type": "input_text", "text": "and again"}]}]})).await;
    assert_eq!(s, 200, "{text}");
    let evs = events(&text);
    let names: Vec<&str> = evs.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names[0], "response.created");
    assert_eq!(*names.last().unwrap(), "response.completed");
    assert!(names.contains(&"response.output_text.delta"));
    let inputs: Vec<String> = turns(&log, "text_input")
        .iter()
        .map(|r| r["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(inputs, ["hello there", "and again"]);
    let outputs = turns(&log, "text_output");
    assert_eq!(outputs.len(), 2);
    assert_eq!(outputs[1]["text"], answer_to("and again"));
    // The same request again is that turn: its events again, no call.
    let calls = mock.requests();
    let (s, again, h) = send(&url, &json!({"model": "gpt-x", "stream": true, "input": [
        {"role": "user", "content": "hello there"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer_to("hello there")}]},
        {"role": "user", "content": [{"type": "input_text", "text": "and again"}]}]})).await;
    assert_eq!(s, 200);
    assert_eq!(h["idempotent-replayed"], "true");
    assert_eq!(mock.requests(), calls);
    let replayed = events(&again);
    assert_eq!(
        replayed.last().unwrap().1["response"],
        evs.last().unwrap().1["response"]
    );
    server.stop().await;
}

/// Codex's tool round: the model's function call (with a reasoning item)
/// recorded, the client's output and its reasoning passed back unchanged
/// after the turn's message, the output recorded, the answer quoting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_call_round_with_reasoning_passed_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::OpenAi)).await;
    let url = format!("{}/openai/v1/responses", server.url);
    let tools = json!([{"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
                       {"type": "web_search"}]);
    let ask = "list files\nTOOLS: [[{\"name\":\"exec_command\",\"input\":{\"cmd\":\"ls\"}}]]";
    let mut input = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": ask}]}),
    ];
    let body = |input: &Vec<Value>| {
        json!({"model": "gpt-x", "stream": true, "store": false,
        "include": ["reasoning.encrypted_content"], "tools": tools, "input": input})
    };
    let (s, text, _) = send(&url, &body(&input)).await;
    assert_eq!(s, 200, "{text}");
    let done = events(&text).last().cloned().unwrap().1;
    let output = done["response"]["output"].as_array().unwrap().clone();
    let call = output
        .iter()
        .find(|o| o["type"] == "function_call")
        .unwrap()
        .clone();
    let call_id = call["call_id"].as_str().unwrap().to_string();
    assert_eq!(turns(&log, "tool_call")[0]["id"], call_id.as_str());
    // The client runs it and continues: its reasoning item unchanged.
    input.extend(output.iter().cloned());
    input.push(
        json!({"type": "function_call_output", "call_id": call_id, "output": "a.txt\nb.txt"}),
    );
    let (s, text, _) = send(&url, &body(&input)).await;
    assert_eq!(s, 200, "{text}");
    let sent = mock.bodies().last().cloned().unwrap();
    let items = sent["input"].as_array().unwrap();
    let at = items
        .iter()
        .rposition(|i| i["content"].to_string().contains("CURRENT_USER_REQUEST"))
        .unwrap();
    assert_eq!(
        items[at + 1..].to_vec(),
        input[2..].to_vec(),
        "passed on unchanged, in order"
    );
    assert!(
        items.iter().all(|i| i["role"] != "developer"),
        "developer text is the system prompt"
    );
    let results = turns(&log, "tool_result");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["content"], "a.txt\nb.txt");
    assert_eq!(results[0]["name"], "exec_command");
    let last = turns(&log, "text_output").last().cloned().unwrap();
    assert!(last["text"].as_str().unwrap().contains("a.txt"));
    assert_eq!(turns(&log, "text_input").len(), 1, "the turn's input once");
    assert!(
        !std::fs::read_to_string(&log).unwrap().contains("ENC"),
        "reasoning is not the log's"
    );
    server.stop().await;
}

/// The `id` of a response's JSON.
fn response_id(text: &str) -> String {
    serde_json::from_str::<Value>(text).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `previous_response_id` names a response this server gave on this log
/// (the replay stands for it), or is a 400; bad input is a 400 in OpenAI's
/// shape, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_response_ids_and_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::OpenAi)).await;
    let url = format!("{}/openai/v1/responses", server.url);
    let (s, text, _) = send(&url, &json!({"model": "m", "input": "first"})).await;
    assert_eq!(s, 200);
    let id = response_id(&text);
    let (s, text, _) = send(
        &url,
        &json!({"model": "m", "input": "second", "previous_response_id": id}),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    // The same words again, after the response just given: a turn of its
    // own, not a repeat of the last.
    let id = response_id(&text);
    let (s, text, _) = send(
        &url,
        &json!({"model": "m", "input": "second", "previous_response_id": id}),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(mock.requests(), 3, "the model is called for each turn");
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(log_text.matches(r#""text":"second""#).count(), 2);
    let before = std::fs::read(&log).unwrap();
    for (body, code) in [
        (
            json!({"model": "m", "input": "third", "previous_response_id": "resp_unknown"}),
            "previous_response_not_found",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
            "invalid_request",
        ),
        (json!({"model": "m", "input": []}), "invalid_request"),
        (
            json!({"model": "m", "input": [{"role": "user", "content": "x"},
            {"type": "function_call_output", "call_id": "nope", "output": "y"}]}),
            "invalid_request",
        ),
        (json!({"input": "no model"}), "invalid_request"),
    ] {
        let (s, text, h) = send(&url, &body).await;
        assert_eq!(s, 400, "{body}: {text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["code"], code, "{text}");
        assert!(e["error"]["message"].is_string());
        assert!(h.contains_key("x-request-id"));
    }
    assert_eq!(std::fs::read(&log).unwrap(), before, "nothing written");
    // The route belongs to the OpenAI door: an Anthropic server's is a 404.
    server.stop().await;
    let (up, _mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let (s, text, _) = send(
        &format!("{}/openai/v1/responses", server.url),
        &json!({"model": "m", "input": "x"}),
    )
    .await;
    assert_eq!(s, 404, "{text}");
    assert!(serde_json::from_str::<Value>(&text).unwrap()["error"]["message"].is_string());
    server.stop().await;
}

/// A turn is the server's: a client that hangs up while its Responses turn
/// runs, then sends the same request again, gets that turn's answer; the
/// model is called once and the log holds the turn once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_and_retries_gets_the_one_turn() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let server = start(config(&log, Some(&up), Provider::OpenAi)).await;
    let url = format!("{}/openai/v1/responses", server.url);
    let body = json!({"model": "m", "stream": true, "input": "slow one\nMOCK_SLOW: 800"});
    let impatient = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(200))
        .build()
        .unwrap();
    let cut = impatient
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await;
    assert!(cut.is_err(), "the client gave up");
    let (s, text, h) = send(&url, &body).await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(h["idempotent-replayed"], "true");
    let evs = events(&text);
    assert_eq!(evs.last().unwrap().0, "response.completed");
    assert_eq!(mock.requests(), 1, "the model called once");
    assert_eq!(turns(&log, "text_input").len(), 1);
    let outputs = turns(&log, "text_output");
    assert_eq!(outputs.len(), 1);
    assert!(outputs[0]["text"].as_str().unwrap().contains("slow one"));
    server.stop().await;
}
