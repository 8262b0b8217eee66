//! The OpenAI Responses API (`POST /v1/responses`), the wire Codex and the
//! Agents SDKs' default model speak: the answer (its `output` items: a
//! `message`'s `output_text` and `refusal` parts, `function_call`s; other
//! items such as `reasoning` or a hosted tool's call are the client's, not
//! the log's), the streamed `response.*` events, errors as `error` events,
//! and a stored answer streamed again.
//!
//! Usage: `input_tokens` includes the cached ones
//! (`input_tokens_details.cached_tokens`); [`Usage::input_tokens`] is the
//! rest, as for Chat Completions.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{Answer, Step, StreamDecoder, ToolCall, UpstreamError, Usage};
use crate::server::errors::ApiError;

fn usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let cached = u
        .get("input_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Value::as_u64);
    Usage {
        input_tokens: n("input_tokens").map(|i| i.saturating_sub(cached.unwrap_or(0))),
        output_tokens: n("output_tokens"),
        cache_read_input_tokens: cached,
        ..Usage::default()
    }
}

/// The text of an output `message` item: its `output_text` parts, then its
/// refusal, a blank line apart.
fn message_text(item: &Value) -> (String, bool) {
    let mut text = String::new();
    let mut refused = false;
    for part in item["content"].as_array().into_iter().flatten() {
        let t = match part["type"].as_str() {
            Some("output_text") => part["text"].as_str(),
            Some("refusal") => {
                refused = true;
                part["refusal"].as_str()
            }
            _ => None,
        };
        if let Some(t) = t.filter(|t| !t.is_empty()) {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(t);
        }
    }
    (text, refused)
}

fn call_of(item: &Value) -> ToolCall {
    let s = |k: &str| item[k].as_str().unwrap_or("").to_string();
    ToolCall {
        id: s("call_id"),
        name: s("name"),
        input: s("arguments"),
    }
}

/// The answer of a whole `response` object.
pub(super) fn answer(body: &Value) -> Option<Answer> {
    let output = body.get("output")?.as_array()?;
    let mut a = Answer::default();
    let mut refused = false;
    for item in output {
        match item["type"].as_str() {
            Some("message") => {
                let (t, r) = message_text(item);
                refused |= r;
                if !t.is_empty() {
                    if !a.text.is_empty() {
                        a.text.push_str("\n\n");
                    }
                    a.text.push_str(&t);
                }
            }
            Some("function_call") => a.tool_calls.push(call_of(item)),
            _ => {}
        }
    }
    a.stop_reason = Some(stop_of(body, !a.tool_calls.is_empty(), refused));
    if let Some(u) = body.get("usage").filter(|u| u.is_object()) {
        a.usage = usage(u);
        a.provider_usage = Some(u.clone());
    }
    Some(a)
}

/// Why a response stopped, in Chat Completions' words: `tool_calls`,
/// `length` (`incomplete` for its output limit), `content_filter`,
/// `refusal`, else `stop`.
fn stop_of(body: &Value, calls: bool, refused: bool) -> String {
    let reason = body["incomplete_details"]["reason"].as_str();
    match (body["status"].as_str(), reason) {
        (Some("incomplete"), Some("max_output_tokens")) => "length",
        (Some("incomplete"), Some("content_filter")) => "content_filter",
        _ if refused => super::openai::REFUSAL,
        _ if calls => "tool_calls",
        _ => "stop",
    }
    .to_string()
}

/// One streamed event: text deltas, finished items, and the response's
/// end (`response.completed` or `.incomplete`, whose `response` is kept as
/// the answer's body) or failure (`response.failed`, `error`).
pub(super) fn stream_event(d: &mut StreamDecoder, event: &str, data: &str) -> Step {
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        return Step::Nothing;
    };
    let kind = v["type"].as_str().unwrap_or(event);
    match kind {
        "response.output_text.delta" | "response.refusal.delta" => {
            let t = v["delta"].as_str().unwrap_or("");
            if t.is_empty() {
                return Step::Nothing;
            }
            // A new part or item after text: a blank line apart.
            let key = format!(
                "{}:{}",
                v["item_id"].as_str().unwrap_or(""),
                v["content_index"]
            );
            if d.part.as_deref() != Some(key.as_str()) {
                if !d.answer.text.is_empty() {
                    d.answer.text.push_str("\n\n");
                }
                d.part = Some(key);
            }
            if kind == "response.refusal.delta" {
                d.refused = true;
            }
            d.answer.text.push_str(t);
            Step::Text(t.to_string())
        }
        "response.output_item.done" => {
            if v["item"]["type"] == "function_call" {
                d.answer.tool_calls.push(call_of(&v["item"]));
            }
            Step::Nothing
        }
        "response.completed" | "response.incomplete" => {
            let r = &v["response"];
            let calls = !d.answer.tool_calls.is_empty();
            d.answer.stop_reason = Some(stop_of(r, calls, d.refused));
            if let Some(u) = r.get("usage").filter(|u| u.is_object()) {
                d.answer.usage = usage(u);
                d.answer.provider_usage = Some(u.clone());
            }
            d.answer.raw = Some(Bytes::from(r.to_string()));
            Step::Done
        }
        "response.failed" => {
            let e = &v["response"]["error"];
            Step::Error(UpstreamError::from_error_object(&json!({
                "type": "server_error",
                "code": e["code"],
                "message": e["message"].as_str().unwrap_or("the response failed"),
            })))
        }
        "error" => Step::Error(UpstreamError::from_error_object(&json!({
            "type": v["code"].as_str().unwrap_or("server_error"),
            "code": v["code"],
            "message": v["message"].as_str().unwrap_or("the upstream reported an error"),
        }))),
        _ => Step::Nothing,
    }
}

/// A response object for an answer read from a stream without one (cut
/// by shutdown): its text as one message, its calls.
pub(crate) fn whole(model: &str, a: &Answer) -> Value {
    let mut output = Vec::new();
    if !a.text.is_empty() {
        output.push(
            json!({"type": "message", "id": super::shapes::fresh_id("msg_wm"),
            "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": a.text, "annotations": []}]}),
        );
    }
    for c in &a.tool_calls {
        output.push(
            json!({"type": "function_call", "id": super::shapes::fresh_id("fc_wm"),
            "call_id": c.id, "name": c.name, "arguments": c.input, "status": "completed"}),
        );
    }
    let interrupted = a.stop_reason.as_deref() == Some(super::INTERRUPTED);
    json!({
        "id": super::shapes::fresh_id("resp_wm"),
        "object": "response",
        "created_at": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        "status": if interrupted { "incomplete" } else { "completed" },
        "incomplete_details": if interrupted { json!({"reason": "interrupted"}) } else { Value::Null },
        "model": model,
        "output": output,
        "usage": a.provider_usage.clone().unwrap_or(Value::Null),
    })
}

/// The events that stream `response` (a whole response object) again: the
/// answer of a repeated request that asked for a stream.
pub(crate) fn events(response: &Value) -> Vec<Bytes> {
    let mut n = 0u64;
    let mut out = Vec::new();
    let mut ev = |mut data: Value| {
        data["sequence_number"] = json!(n);
        n += 1;
        out.push(Bytes::from(format!(
            "event: {}\ndata: {data}\n\n",
            data["type"].as_str().unwrap_or("")
        )));
    };
    let mut begun = response.clone();
    begun["status"] = json!("in_progress");
    begun["output"] = json!([]);
    begun["usage"] = Value::Null;
    ev(json!({"type": "response.created", "response": begun}));
    ev(json!({"type": "response.in_progress", "response": begun}));
    let items = response["output"].as_array().cloned().unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        let mut empty = item.clone();
        empty["status"] = json!("in_progress");
        if item["type"] == "message" {
            empty["content"] = json!([]);
        }
        if item["type"] == "function_call" {
            empty["arguments"] = json!("");
        }
        ev(json!({"type": "response.output_item.added", "output_index": i, "item": empty}));
        let id = item["id"].clone();
        if item["type"] == "message" {
            for (j, part) in item["content"].as_array().into_iter().flatten().enumerate() {
                let (kind, key) = match part["type"].as_str() {
                    Some("refusal") => ("refusal", "refusal"),
                    _ => ("output_text", "text"),
                };
                let mut blank = part.clone();
                blank[key] = json!("");
                ev(json!({"type": "response.content_part.added", "item_id": id,
                          "output_index": i, "content_index": j, "part": blank}));
                ev(
                    json!({"type": format!("response.{kind}.delta"), "item_id": id,
                          "output_index": i, "content_index": j, "delta": part[key]}),
                );
                let mut done = json!({"type": format!("response.{kind}.done"), "item_id": id,
                                      "output_index": i, "content_index": j});
                done[key] = part[key].clone();
                ev(done);
                ev(json!({"type": "response.content_part.done", "item_id": id,
                          "output_index": i, "content_index": j, "part": part}));
            }
        }
        if item["type"] == "function_call" {
            ev(
                json!({"type": "response.function_call_arguments.delta", "item_id": id,
                      "output_index": i, "delta": item["arguments"]}),
            );
            ev(
                json!({"type": "response.function_call_arguments.done", "item_id": id,
                      "output_index": i, "arguments": item["arguments"]}),
            );
        }
        ev(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    let end = match response["status"].as_str() {
        Some("incomplete") => "response.incomplete",
        _ => "response.completed",
    };
    ev(json!({"type": end, "response": response}));
    out
}

/// `e` as the event that ends a stream already begun.
pub(crate) fn error_event(e: &ApiError) -> Bytes {
    let data = json!({"type": "error", "code": e.code, "message": e.message, "param": null,
                      "sequence_number": 0});
    Bytes::from(format!("event: error\ndata: {data}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_response_gives_its_text_calls_and_usage() {
        let body = json!({"status": "completed", "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "m1", "role": "assistant", "content": [
                {"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"}],
            "usage": {"input_tokens": 10, "output_tokens": 3,
                      "input_tokens_details": {"cached_tokens": 4}}});
        let a = answer(&body).unwrap();
        assert_eq!(a.text, "a\n\nb");
        assert_eq!(a.tool_calls[0].id, "call_1");
        assert_eq!(a.stop_reason.as_deref(), Some("tool_calls"));
        assert_eq!(a.usage.input_tokens, Some(6));
        assert_eq!(a.usage.cache_read_input_tokens, Some(4));
    }

    #[test]
    fn a_stored_response_streams_again_and_decodes_to_itself() {
        let body = json!({"id": "resp_1", "status": "completed", "model": "m", "output": [
            {"type": "message", "id": "m1", "role": "assistant", "status": "completed", "content": [
                {"type": "output_text", "text": "hello", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
             "arguments": "{\"x\":1}", "status": "completed"}],
            "usage": {"input_tokens": 1, "output_tokens": 1}});
        let mut d = super::super::Provider::OpenAi.stream();
        d.responses = true;
        let mut done = false;
        for e in events(&body) {
            let s = std::str::from_utf8(&e).unwrap();
            let (name, data) = s.trim_end().split_once('\n').unwrap();
            done |= d.event(&name[7..], &data[6..]) == Step::Done;
        }
        assert!(done);
        let a = d.into_answer();
        assert_eq!(a.text, "hello");
        assert_eq!(a.tool_calls[0].input, "{\"x\":1}");
        assert_eq!(
            serde_json::from_slice::<Value>(a.raw.as_ref().unwrap()).unwrap(),
            body
        );
    }
}
