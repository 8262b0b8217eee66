//! The mock model's OpenAI Responses API (`POST /v1/responses`), streamed
//! and not, as the API documents it: `input` items (messages with
//! `input_text`/`output_text` parts, `function_call`, `function_call_output`,
//! `reasoning`), `function_call` output items for the `TOOLS:` directive
//! (see `tools.rs`), the `response.*` events in order, and a 400 for what
//! the API refuses: Chat Completions' members (`messages`, `max_tokens`),
//! an output without its call, an item of no known shape.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{CacheUsage, Mock, Mode, Seen, answer_to, directive, tools};

fn refuse(param: &str, message: String) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error",
                                "param": param, "code": "invalid_value"}});
    (StatusCode::BAD_REQUEST, body.to_string()).into_response()
}

/// What the API refuses of a request.
fn check(v: &Value) -> Result<(), (String, String)> {
    for k in ["messages", "max_tokens", "stream_options", "n"] {
        if v.get(k).is_some() {
            return Err((k.into(), format!("Unsupported parameter: '{k}'.")));
        }
    }
    let Some(input) = v["input"].as_array() else {
        return Err(("input".into(), "input: an array of items".into()));
    };
    let mut calls = Vec::new();
    for (i, item) in input.iter().enumerate() {
        let kind = item["type"].as_str().unwrap_or("message");
        match kind {
            "message" => {
                if !matches!(
                    item["role"].as_str(),
                    Some("user" | "assistant" | "system" | "developer")
                ) {
                    return Err((format!("input[{i}].role"), "Invalid role".into()));
                }
                if !(item["content"].is_string() || item["content"].is_array()) {
                    return Err((format!("input[{i}].content"), "Invalid content".into()));
                }
            }
            "function_call" => calls.push(item["call_id"].as_str().unwrap_or("").to_string()),
            "function_call_output" => {
                let id = item["call_id"].as_str().unwrap_or("");
                if !calls.iter().any(|c| c == id) {
                    return Err((
                        format!("input[{i}]"),
                        format!("No tool call found for function call output with call_id {id}."),
                    ));
                }
            }
            "reasoning" => {}
            other => return Err((format!("input[{i}].type"), format!("Invalid type: {other}"))),
        }
    }
    Ok(())
}

/// The current text: the user_text of the `CURRENT_USER_REQUEST` item, else
/// the last user message's text (a request relayed as its client sent it).
fn current(v: &Value) -> String {
    let text = |m: &Value| -> Option<String> {
        match &m["content"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => parts[0]["text"].as_str().map(str::to_string),
            _ => None,
        }
    };
    let input = v["input"].as_array().cloned().unwrap_or_default();
    let t = input
        .iter()
        .rev()
        .filter_map(text)
        .find(|t| t.starts_with("CURRENT_USER_REQUEST"))
        .or_else(|| {
            input
                .iter()
                .rev()
                .filter(|m| m["role"] == "user")
                .find_map(text)
        })
        .unwrap_or_default();
    t.split_once("user_text: ")
        .map_or(t.clone(), |x| x.1.to_string())
}

pub async fn handler(
    State(m): State<Mock>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let v: Value = serde_json::from_slice(&body).expect("the server sends valid JSON");
    if let Err((param, message)) = check(&v) {
        m.rejected.lock().unwrap().push(message.clone());
        return refuse(&param, message);
    }
    let key = headers
        .get("authorization")
        .map(|h| {
            h.to_str()
                .unwrap()
                .trim_start_matches("Bearer ")
                .to_string()
        })
        .unwrap_or_default();
    m.seen.lock().unwrap().push(Seen {
        raw: body.to_vec(),
        json: v.clone(),
        key,
        headers: headers.clone(),
        usage: CacheUsage::default(),
    });
    let text = current(&v);
    let mode = m.script.lock().unwrap().pop_front().or_else(|| {
        directive(
            &m,
            &json!({"messages": [{"role": "user", "content":
            format!("CURRENT_USER_REQUEST\nsession_id: none\nuser_text: {text}")}]}),
        )
    });
    if let Some(Mode::Slow(ms)) = mode {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    if let Some(Mode::Fail { status, .. }) = mode {
        let body = json!({"error": {"message": "mock failure", "type": "server_error",
                                    "param": null, "code": null}});
        return (StatusCode::from_u16(status).unwrap(), body.to_string()).into_response();
    }
    let n = m.requests();
    let input = v["input"].as_array().cloned().unwrap_or_default();
    // Rounds done: the function_call_outputs after the current request.
    let at = input
        .iter()
        .rposition(|i| i["content"].to_string().contains("CURRENT_USER_REQUEST"))
        .unwrap_or(0);
    let outputs: Vec<&Value> = input[at..]
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    let done = input[at..]
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| {
            i["call_id"]
                .as_str()
                .unwrap_or("")
                .split('_')
                .nth(2)
                .unwrap_or("")
                .to_string()
        })
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let offered = v["tools"].as_array().is_some_and(|t| !t.is_empty());
    let round = offered
        .then(|| tools::script(&text).into_iter().nth(done))
        .flatten();
    let mut output = Vec::new();
    if let Some(r) = &round {
        output.push(
            json!({"type": "reasoning", "id": format!("rs_{n}"), "summary": [],
                           "encrypted_content": format!("ENC{n}")}),
        );
        for (i, (name, input)) in r.calls.iter().enumerate() {
            output.push(json!({"type": "function_call", "id": format!("fc_{n}_{i}"),
                "call_id": format!("call_{n}_{done}_{i}"), "name": name,
                "arguments": input.to_string(), "status": "completed"}));
        }
    } else {
        let mut a = answer_to(&text);
        if !outputs.is_empty() {
            a.push_str("\nTOOL RESULTS:\n");
            let o: Vec<String> = outputs
                .iter()
                .map(|o| {
                    o["output"]
                        .as_str()
                        .map_or(o["output"].to_string(), str::to_string)
                })
                .collect();
            a.push_str(&o.join("\n---\n"));
        }
        output.push(json!({"type": "message", "id": format!("msg_{n}"), "status": "completed",
            "role": "assistant", "content": [{"type": "output_text", "text": a, "annotations": []}]}));
    }
    let response = json!({"id": format!("resp_mock_{n}"), "object": "response", "created_at": 1,
        "status": "completed", "model": v["model"], "output": output,
        "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": 107}});
    if v["stream"] != true {
        return ([("content-type", "application/json")], response.to_string()).into_response();
    }
    let mut events = Vec::new();
    let mut begun = response.clone();
    begun["status"] = json!("in_progress");
    begun["output"] = json!([]);
    begun["usage"] = Value::Null;
    events.push(json!({"type": "response.created", "response": begun}));
    events.push(json!({"type": "response.in_progress", "response": begun}));
    for (i, item) in response["output"].as_array().unwrap().iter().enumerate() {
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        if item["type"] == "message" {
            added["content"] = json!([]);
            events.push(
                json!({"type": "response.output_item.added", "output_index": i, "item": added}),
            );
            let t = item["content"][0]["text"].as_str().unwrap();
            events.push(
                json!({"type": "response.content_part.added", "item_id": item["id"],
                "output_index": i, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []}}),
            );
            let chars: Vec<char> = t.chars().collect();
            for piece in chars.chunks(4) {
                events.push(json!({"type": "response.output_text.delta", "item_id": item["id"],
                    "output_index": i, "content_index": 0, "delta": piece.iter().collect::<String>()}));
            }
            events.push(
                json!({"type": "response.output_text.done", "item_id": item["id"],
                "output_index": i, "content_index": 0, "text": t}),
            );
            events.push(
                json!({"type": "response.content_part.done", "item_id": item["id"],
                "output_index": i, "content_index": 0, "part": item["content"][0]}),
            );
        } else {
            if item["type"] == "function_call" {
                added["arguments"] = json!("");
            }
            events.push(
                json!({"type": "response.output_item.added", "output_index": i, "item": added}),
            );
            if item["type"] == "function_call" {
                events.push(json!({"type": "response.function_call_arguments.delta",
                    "item_id": item["id"], "output_index": i, "delta": item["arguments"]}));
                events.push(json!({"type": "response.function_call_arguments.done",
                    "item_id": item["id"], "output_index": i, "arguments": item["arguments"]}));
            }
        }
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    events.push(json!({"type": "response.completed", "response": response}));
    let sse: Vec<String> = events
        .iter_mut()
        .enumerate()
        .map(|(i, e)| {
            e["sequence_number"] = json!(i);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())
        })
        .collect();
    // At a model's pace (`Mode::SlowStream`): an event at a time, the time
    // the last left kept; otherwise all at once.
    let Mode::SlowStream(pause) = m.mode else {
        return ([("content-type", "text/event-stream")], sse.concat()).into_response();
    };
    super::paced(sse, pause, &m.stream_ends)
}
