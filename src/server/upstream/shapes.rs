//! Answers and errors in a provider's own shapes: a message (Anthropic) or
//! a chat completion (OpenAI) made from a streamed answer, the events that
//! stream one again (a repeated request), and errors as the SDKs parse them
//! (each raises its own typed exception by the status).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::server::errors::{ApiError, json_response, retry_after_secs};
use crate::server::upstream::{Answer, Provider};

/// A fresh id for a message or a request: `PREFIX` and 24 hex digits.
pub(crate) fn fresh_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let h = xxhash_rust::xxh3::xxh3_64(&[now.to_le_bytes(), n.to_le_bytes()].concat());
    format!("{prefix}{:08x}{h:016x}", (now >> 32) as u32)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The whole answer in the provider's non-streamed shape, for an answer
/// read from a stream (the upstream's own body is used when it has one).
pub(crate) fn message(p: Provider, model: &str, a: &Answer) -> Value {
    match p {
        Provider::Anthropic => {
            let content = if a.blocks.iter().any(|b| !b.is_null()) {
                a.blocks.iter().filter(|b| !b.is_null()).cloned().collect()
            } else {
                vec![json!({"type": "text", "text": a.text})]
            };
            let mut usage = a
                .provider_usage
                .clone()
                .filter(Value::is_object)
                .unwrap_or_else(|| a.usage.to_json());
            for k in ["input_tokens", "output_tokens"] {
                if usage.get(k).is_none() {
                    usage[k] = json!(0);
                }
            }
            json!({
                "id": fresh_id("msg_wm"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": a.stop_reason,
                "stop_sequence": null,
                "usage": usage,
            })
        }
        Provider::OpenAi => {
            let refused = a.stop_reason.as_deref() == Some("refusal");
            let calls: Vec<Value> = a
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.input}})
                })
                .collect();
            let mut msg = json!({
                "role": "assistant",
                "content": if refused || (a.text.is_empty() && !calls.is_empty()) {
                    Value::Null
                } else {
                    json!(a.text)
                },
                "refusal": if refused { json!(a.text) } else { Value::Null },
            });
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            let finish = match a.stop_reason.as_deref() {
                Some("refusal") | None => "stop",
                Some(s) => s,
            };
            let mut out = json!({
                "id": fresh_id("chatcmpl-wm"),
                "object": "chat.completion",
                "created": unix_now(),
                "model": model,
                "choices": [{"index": 0, "message": msg, "logprobs": null, "finish_reason": finish}],
            });
            if let Some(u) = a.provider_usage.clone().filter(Value::is_object) {
                out["usage"] = u;
            }
            out
        }
    }
}

/// The events that stream `message` (a provider-shaped answer) whole: the
/// answer of a repeated request that asked for a stream. OpenAI's usage
/// chunk only with `usage_chunk` (the client asked for it).
pub(crate) fn events(p: Provider, message: &Value, usage_chunk: bool) -> Vec<Bytes> {
    let ev = |name: &str, data: Value| Bytes::from(format!("event: {name}\ndata: {data}\n\n"));
    let data = |data: Value| Bytes::from(format!("data: {data}\n\n"));
    let mut out = Vec::new();
    match p {
        Provider::Anthropic => {
            let mut start = message.clone();
            start["content"] = json!([]);
            start["stop_reason"] = Value::Null;
            out.push(ev(
                "message_start",
                json!({"type": "message_start", "message": start}),
            ));
            let blocks = message["content"].as_array().cloned().unwrap_or_default();
            for (i, b) in blocks.iter().enumerate() {
                let (empty, delta) = match b["type"].as_str() {
                    Some("text") => (
                        json!({"type": "text", "text": ""}),
                        Some(json!({"type": "text_delta", "text": b["text"]})),
                    ),
                    Some("tool_use") => {
                        let mut e = b.clone();
                        e["input"] = json!({});
                        (
                            e,
                            Some(json!({"type": "input_json_delta",
                                        "partial_json": b["input"].to_string()})),
                        )
                    }
                    Some("thinking") => (
                        json!({"type": "thinking", "thinking": "", "signature": ""}),
                        Some(json!({"type": "thinking_delta", "thinking": b["thinking"]})),
                    ),
                    _ => (b.clone(), None),
                };
                out.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": empty}),
                ));
                if let Some(d) = delta {
                    out.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i, "delta": d}),
                    ));
                }
                if b["type"] == "thinking" && b["signature"].is_string() {
                    out.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i,
                               "delta": {"type": "signature_delta", "signature": b["signature"]}}),
                    ));
                }
                out.push(ev(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": i}),
                ));
            }
            let mut usage = message["usage"].clone();
            if !usage.is_object() {
                usage = json!({"output_tokens": 0});
            }
            out.push(ev(
                "message_delta",
                json!({"type": "message_delta",
                       "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
                       "usage": usage}),
            ));
            out.push(ev("message_stop", json!({"type": "message_stop"})));
        }
        Provider::OpenAi => {
            let choice = &message["choices"][0];
            let msg = &choice["message"];
            let chunk = |delta: Value, finish: Value| {
                json!({"id": message["id"], "object": "chat.completion.chunk",
                       "created": message["created"], "model": message["model"],
                       "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
            };
            let mut first = json!({"role": "assistant", "content": msg["content"]});
            if !msg["refusal"].is_null() {
                first["refusal"] = msg["refusal"].clone();
            }
            out.push(data(chunk(first, Value::Null)));
            if let Some(calls) = msg["tool_calls"].as_array() {
                let calls: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let mut c = c.clone();
                        c["index"] = json!(i);
                        c
                    })
                    .collect();
                out.push(data(chunk(json!({"tool_calls": calls}), Value::Null)));
            }
            out.push(data(chunk(json!({}), choice["finish_reason"].clone())));
            if usage_chunk && message["usage"].is_object() {
                let mut last = chunk(json!({}), Value::Null);
                last["choices"] = json!([]);
                last["usage"] = message["usage"].clone();
                out.push(data(last));
            }
            out.push(Bytes::from_static(b"data: [DONE]\n\n"));
        }
    }
    out
}

/// The status a client of the provider's API gets for `e`: the upstream's
/// own when it answered an error (a 400 stays a 400, a 529 a 529), the
/// server's otherwise.
fn status_of(e: &ApiError) -> StatusCode {
    e.upstream_status
        .filter(|s| (400..600).contains(s))
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(e.status)
}

/// The provider's error type for a status.
fn kind_of(p: Provider, status: StatusCode, e: &ApiError) -> String {
    if let Some(c) = &e.upstream_code {
        return c.clone();
    }
    let anthropic = match status.as_u16() {
        400 | 405 | 409 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    };
    match (p, anthropic) {
        (Provider::Anthropic, k) => k.to_string(),
        (Provider::OpenAi, "api_error" | "overloaded_error" | "timeout_error") => {
            "server_error".into()
        }
        (Provider::OpenAi, "rate_limit_error") => "rate_limit_exceeded".into(),
        (Provider::OpenAi, "not_found_error") => "invalid_request_error".into(),
        (Provider::OpenAi, k) => k.to_string(),
    }
}

/// The error's body in the provider's shape.
pub(crate) fn error_body(p: Provider, e: &ApiError) -> Value {
    let status = status_of(e);
    let kind = kind_of(p, status, e);
    match p {
        Provider::Anthropic => {
            let mut inner = json!({"type": kind, "message": e.message});
            if e.upstream_code.is_none() {
                inner["details"] = json!({"error_code": e.code});
            }
            json!({"type": "error", "error": inner})
        }
        Provider::OpenAi => json!({"error": {
            "message": e.message,
            "type": kind,
            "param": null,
            "code": e.upstream_code.as_deref().unwrap_or(e.code),
        }}),
    }
}

/// `e` answered in the provider's shape, with its status and wait.
pub(crate) fn error_response(p: Provider, e: &ApiError) -> Response {
    let status = status_of(e);
    let mut r = json_response(status, error_body(p, e).to_string());
    if let Some(d) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(d)));
    }
    // What a retry cannot mend is said so, whatever its status: the SDKs
    // retry every 5xx otherwise. (An upstream failure the server retried
    // already: `no_more_retries`.)
    if status.is_server_error() && matches!(e.code, "append_failed" | "turn_failed") {
        r.headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
    }
    r
}

/// Whether `e` is the upstream's failure (its status relayed, or the
/// server's word for not reaching it).
pub(crate) fn from_upstream(e: &ApiError) -> bool {
    e.upstream_status.is_some() || e.code.starts_with("upstream_")
}

/// Tells an SDK not to retry `r`: the server has retried the upstream
/// itself, and the turn is closed in the log with the error (the SDK's own
/// retries would each call the model `--upstream-retries` times again).
pub(crate) fn no_more_retries(r: &mut Response) {
    r.headers_mut()
        .insert("x-should-retry", HeaderValue::from_static("false"));
}

/// `e` as the event that ends a stream already begun (after its 200).
pub(crate) fn error_event(p: Provider, e: &ApiError) -> Bytes {
    let body = error_body(p, e);
    match p {
        Provider::Anthropic => Bytes::from(format!("event: error\ndata: {body}\n\n")),
        Provider::OpenAi => Bytes::from(format!("data: {body}\n\n")),
    }
}

/// The header a provider's SDK reads a request's id from.
pub(crate) fn request_id_header(p: Provider) -> &'static str {
    match p {
        Provider::Anthropic => "request-id",
        Provider::OpenAi => "x-request-id",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::upstream::ToolCall;

    fn answer() -> Answer {
        Answer {
            text: "Let me look.".into(),
            stop_reason: Some("tool_use".into()),
            tool_calls: vec![ToolCall {
                id: "toolu_1".into(),
                name: "get_weather".into(),
                input: "{\"city\":\"Paris\"}".into(),
            }],
            ..Answer::default()
        }
    }

    /// The events of a message, decoded as the server decodes an
    /// upstream's stream, give the message's text, calls and stop back.
    #[test]
    fn a_message_streamed_again_decodes_to_itself() {
        for p in [Provider::Anthropic, Provider::OpenAi] {
            let mut a = answer();
            if p == Provider::OpenAi {
                a.stop_reason = Some("tool_calls".into());
            } else {
                a.blocks = vec![
                    json!({"type": "text", "text": "Let me look."}),
                    json!({"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}),
                ];
            }
            let m = message(p, "m1", &a);
            let mut d = p.stream();
            for e in events(p, &m, true) {
                let s = String::from_utf8(e.to_vec()).unwrap();
                let mut name = "";
                let mut data = "";
                for line in s.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n;
                    } else if let Some(x) = line.strip_prefix("data: ") {
                        data = x;
                    }
                }
                let _ = d.event(name, data);
            }
            let got = d.into_answer();
            assert_eq!(got.text, "Let me look.", "{p:?}");
            assert_eq!(got.stop_reason, a.stop_reason, "{p:?}");
            assert_eq!(got.tool_calls.len(), 1, "{p:?}");
            assert_eq!(got.tool_calls[0].name, "get_weather");
            let input: Value = serde_json::from_str(&got.tool_calls[0].input).unwrap();
            assert_eq!(input, json!({"city": "Paris"}), "{p:?}");
        }
    }

    #[test]
    fn errors_keep_the_upstreams_status_and_type() {
        let mut e = ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", "bad");
        e.upstream_status = Some(400);
        e.upstream_code = Some("invalid_request_error".into());
        assert_eq!(status_of(&e), StatusCode::BAD_REQUEST);
        let b = error_body(Provider::Anthropic, &e);
        assert_eq!(b["type"], "error");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        let own = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "overloaded", "busy");
        assert_eq!(
            error_body(Provider::OpenAi, &own)["error"]["type"],
            "rate_limit_exceeded"
        );
        assert_eq!(
            error_body(Provider::Anthropic, &own)["error"]["details"]["error_code"],
            "overloaded"
        );
    }
}
