//! Anthropic Messages: headers, the answer, and the streamed events
//! (`message_start`, `content_block_start`/`_delta`/`_stop`,
//! `message_delta`, `message_stop`, `ping`, `error`).
//!
//! Text blocks make the answer's text; tool-use blocks its tool calls.
//! Every block (thinking included, with its signature) is kept as it must
//! go back to the model when the turn continues after a tool call. Usage
//! comes in
//! `message_start` (input and cache counts) and `message_delta` (the output
//! count so far, and sometimes the input counts again); the last value of
//! each count wins. Event types this module does not know are ignored, as
//! the API's versioning policy asks of clients.

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::Value;

use super::{Answer, ApiKey, Step, StreamDecoder, ToolCall, UpstreamError, Usage};

/// The API version this server speaks.
pub const VERSION: &str = "2023-06-01";

pub(super) fn headers(h: &mut HeaderMap, key: Option<&ApiKey>) {
    h.insert("anthropic-version", HeaderValue::from_static(VERSION));
    if let Some(k) = key
        && let Ok(mut v) = HeaderValue::from_str(&k.0)
    {
        v.set_sensitive(true);
        h.insert("x-api-key", v);
    }
}

pub(super) fn usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    // The write split by lifetime: `cache_creation.ephemeral_5m_…`/`_1h_…`.
    let split = |k: &str| {
        u.get("cache_creation")
            .and_then(|c| c.get(k))
            .and_then(Value::as_u64)
    };
    Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read_input_tokens: n("cache_read_input_tokens"),
        cache_creation_input_tokens: n("cache_creation_input_tokens"),
        cache_creation_5m_input_tokens: split("ephemeral_5m_input_tokens"),
        cache_creation_1h_input_tokens: split("ephemeral_1h_input_tokens"),
    }
}

pub(super) fn answer(body: &Value) -> Option<Answer> {
    let parts = body.get("content")?.as_array()?;
    let mut a = Answer::default();
    for p in parts {
        match p.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    // Text blocks a blank line apart, as a client's copy of
                    // the message reads.
                    if !a.text.is_empty() && !t.is_empty() {
                        a.text.push_str("\n\n");
                    }
                    a.text.push_str(t);
                }
            }
            Some("tool_use") => a.tool_calls.push(tool_call(p, None)),
            _ => {}
        }
    }
    a.blocks = parts.clone();
    a.stop_reason = body
        .get("stop_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(u) = body.get("usage") {
        a.usage = usage(u);
        a.provider_usage = Some(u.clone());
    }
    Some(a)
}

fn merge_usage(d: &mut StreamDecoder, u: &Value) {
    d.answer.usage.merge(usage(u));
    let mut merged = d
        .answer
        .provider_usage
        .take()
        .unwrap_or_else(|| Value::Object(Default::default()));
    if let (Some(m), Some(new)) = (merged.as_object_mut(), u.as_object()) {
        for (k, v) in new {
            if !v.is_null() {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    d.answer.provider_usage = Some(merged);
}

pub(super) fn stream_event(d: &mut StreamDecoder, event: &str, data: &str) -> Step {
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        tracing::debug!(event, "ignoring an event whose data is not JSON");
        return Step::Nothing;
    };
    let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
    match kind {
        "message_start" => {
            if let Some(u) = v.get("message").and_then(|m| m.get("usage")) {
                merge_usage(d, u);
            }
            Step::Nothing
        }
        "content_block_start" => {
            let index = index_of(&v);
            let block = v.get("content_block").cloned().unwrap_or(Value::Null);
            let text = (block.get("type").and_then(Value::as_str) == Some("text"))
                .then(|| {
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .flatten();
            if d.blocks.len() <= index {
                d.blocks.resize(index + 1, Value::Null);
                d.partial.resize(index + 1, String::new());
            }
            d.blocks[index] = block;
            // Text blocks a blank line apart, as a client's copy of the
            // message reads.
            if text.is_some() && !d.answer.text.is_empty() {
                d.answer.text.push_str("\n\n");
            }
            match text {
                Some(t) if !t.is_empty() => {
                    d.answer.text.push_str(&t);
                    Step::Text(t)
                }
                _ => Step::Nothing,
            }
        }
        "content_block_delta" => {
            let index = index_of(&v);
            let Some(delta) = v.get("delta") else {
                return Step::Nothing;
            };
            let s = |k: &str| delta.get(k).and_then(Value::as_str);
            match delta.get("type").and_then(Value::as_str) {
                Some("text_delta") => {
                    let Some(t) = s("text") else {
                        return Step::Nothing;
                    };
                    extend(d, index, "text", t);
                    d.answer.text.push_str(t);
                    Step::Text(t.to_string())
                }
                Some("input_json_delta") => {
                    if let (Some(p), Some(j)) = (d.partial.get_mut(index), s("partial_json")) {
                        p.push_str(j);
                    }
                    Step::Nothing
                }
                Some("thinking_delta") => {
                    extend(d, index, "thinking", s("thinking").unwrap_or(""));
                    Step::Nothing
                }
                Some("signature_delta") => {
                    if let (Some(b), Some(sig)) = (d.blocks.get_mut(index), s("signature"))
                        && let Some(o) = b.as_object_mut()
                    {
                        o.insert("signature".into(), Value::String(sig.to_string()));
                    }
                    Step::Nothing
                }
                Some("citations_delta") => {
                    if let (Some(b), Some(c)) = (d.blocks.get_mut(index), delta.get("citation"))
                        && let Some(o) = b.as_object_mut()
                    {
                        let list = o
                            .entry("citations")
                            .or_insert_with(|| Value::Array(Vec::new()));
                        if let Some(a) = list.as_array_mut() {
                            a.push(c.clone());
                        } else {
                            *list = Value::Array(vec![c.clone()]);
                        }
                    }
                    Step::Nothing
                }
                _ => Step::Nothing,
            }
        }
        "content_block_stop" => {
            let index = index_of(&v);
            let is_tool = d
                .blocks
                .get(index)
                .and_then(|b| b.get("type"))
                .and_then(Value::as_str)
                == Some("tool_use");
            if is_tool {
                let input = std::mem::take(&mut d.partial[index]);
                let call = tool_call(&d.blocks[index], Some(&input));
                // The block goes back with its input whole.
                if let (Some(o), Ok(v)) = (
                    d.blocks[index].as_object_mut(),
                    serde_json::from_str::<Value>(&call.input),
                ) {
                    o.insert("input".into(), v);
                }
                d.answer.tool_calls.push(call);
            }
            Step::Nothing
        }
        "message_delta" => {
            if let Some(r) = v
                .get("delta")
                .and_then(|x| x.get("stop_reason"))
                .and_then(Value::as_str)
            {
                d.answer.stop_reason = Some(r.to_string());
            }
            if let Some(u) = v.get("usage") {
                merge_usage(d, u);
            }
            Step::Nothing
        }
        "message_stop" => Step::Done,
        "error" => Step::Error(UpstreamError::from_error_object(
            v.get("error").unwrap_or(&Value::Null),
        )),
        // ping, and anything newer.
        _ => Step::Nothing,
    }
}

fn index_of(v: &Value) -> usize {
    v.get("index").and_then(Value::as_u64).unwrap_or(0) as usize
}

/// Appends `more` to the string member `key` of block `index`.
fn extend(d: &mut StreamDecoder, index: usize, key: &str, more: &str) {
    if let Some(o) = d.blocks.get_mut(index).and_then(Value::as_object_mut) {
        match o.get_mut(key) {
            Some(Value::String(s)) => s.push_str(more),
            _ => {
                o.insert(key.into(), Value::String(more.to_string()));
            }
        }
    }
}

/// The call a `tool_use` block makes; `streamed`: its input as streamed
/// (`input_json_delta`s; none: an empty object).
fn tool_call(block: &Value, streamed: Option<&str>) -> ToolCall {
    let s = |k: &str| {
        block
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let input = match streamed {
        Some(j) if !j.trim().is_empty() => j.to_string(),
        Some(_) => "{}".to_string(),
        None => block
            .get("input")
            .map_or_else(|| "{}".to_string(), Value::to_string),
    };
    ToolCall {
        id: s("id"),
        name: s("name"),
        input,
    }
}

#[cfg(test)]
mod tests {
    use super::super::Provider;
    use super::*;

    /// A full stream as the API sends it: usage in `message_start` and
    /// `message_delta`, a ping, a thinking block that is skipped, a text
    /// block, and a `max_tokens` stop.
    #[test]
    fn a_whole_stream_gives_text_stop_reason_and_usage() {
        let mut d = Provider::Anthropic.stream();
        let events = [
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            ("ping", r#"{"type": "ping"}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hel"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"lo"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":15}}"#,
            ),
            ("future_event", r#"{"type":"future_event"}"#),
        ];
        let mut text = String::new();
        for (e, data) in events {
            match d.event(e, data) {
                Step::Text(t) => text.push_str(&t),
                Step::Nothing => {}
                other => panic!("{other:?}"),
            }
        }
        assert!(!d.finished());
        assert_eq!(
            d.event("message_stop", r#"{"type":"message_stop"}"#),
            Step::Done
        );
        assert_eq!(text, "Hello");
        let a = d.into_answer();
        assert_eq!(a.text, "Hello");
        assert_eq!(a.stop_reason.as_deref(), Some("max_tokens"));
        assert_eq!(
            a.usage,
            Usage {
                input_tokens: Some(25),
                output_tokens: Some(15),
                cache_read_input_tokens: Some(2000),
                cache_creation_input_tokens: Some(100),
                ..Usage::default()
            }
        );
        assert_eq!(a.provider_usage.unwrap()["output_tokens"], 15);
    }

    /// Thinking (with its signature), text and a tool call, streamed: the
    /// call's input is put together from its pieces, and every block is
    /// kept as it goes back to the model.
    #[test]
    fn a_streamed_tool_call_and_its_blocks() {
        let mut d = Provider::Anthropic.stream();
        let events = [
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"look it up"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig=="}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking."}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"search_memory","input":{}}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"Lis"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"bon\"}"}}"#,
            r#"{"type":"content_block_stop","index":2}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#,
        ];
        for e in events {
            d.event("", e);
        }
        let a = d.into_answer();
        assert_eq!(a.text, "Checking.");
        assert_eq!(a.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(a.tool_calls.len(), 1);
        assert_eq!(a.tool_calls[0].id, "toolu_1");
        assert_eq!(a.tool_calls[0].input, r#"{"query": "Lisbon"}"#);
        assert_eq!(
            a.blocks,
            vec![
                serde_json::json!({"type": "thinking", "thinking": "look it up", "signature": "sig=="}),
                serde_json::json!({"type": "text", "text": "Checking."}),
                serde_json::json!({"type": "tool_use", "id": "toolu_1", "name": "search_memory", "input": {"query": "Lisbon"}}),
            ]
        );
    }

    #[test]
    fn an_error_event_is_an_error() {
        let mut d = Provider::Anthropic.stream();
        match d.event(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ) {
            Step::Error(e) => {
                assert_eq!(e.code.as_deref(), Some("overloaded_error"));
                assert_eq!(e.message, "Overloaded");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_non_streamed_answer() {
        let body: Value = serde_json::from_str(
            r#"{"content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t","name":"x","input":{}},{"type":"text","text":"b"}],
                "stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}"#,
        )
        .unwrap();
        let a = answer(&body).unwrap();
        // Text blocks a blank line apart, as a client's copy reads.
        assert_eq!(a.text, "a\n\nb");
        assert_eq!(a.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(a.tool_calls[0].name, "x");
        assert_eq!(a.tool_calls[0].input, "{}");
        assert_eq!(a.blocks.len(), 3);
        assert_eq!(a.usage.input_tokens, Some(3));
        assert_eq!(a.usage.cache_read_input_tokens, None);
    }

    #[test]
    fn cache_writes_are_split_by_lifetime() {
        let u: Value = serde_json::from_str(
            r#"{"input_tokens":10,"output_tokens":3,"cache_read_input_tokens":100,
                "cache_creation_input_tokens":70,
                "cache_creation":{"ephemeral_5m_input_tokens":50,"ephemeral_1h_input_tokens":20}}"#,
        )
        .unwrap();
        let u = usage(&u);
        assert_eq!(u.cache_creation_input_tokens, Some(70));
        assert_eq!(u.cache_creation_5m_input_tokens, Some(50));
        assert_eq!(u.cache_creation_1h_input_tokens, Some(20));
        let j = u.to_json();
        assert_eq!(j["cache_creation_1h_input_tokens"], 20);
    }
}
