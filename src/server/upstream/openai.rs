//! OpenAI Chat Completions: headers, the answer, and the streamed chunks
//! (`choices[0].delta.content`, `finish_reason`, the usage chunk that
//! `stream_options.include_usage` adds before `data: [DONE]`), and the
//! tool calls an answer makes (`tool_calls`, streamed in pieces by index).
//!
//! OpenAI's `prompt_tokens` includes the cached ones
//! (`prompt_tokens_details.cached_tokens`); [`Usage::input_tokens`] is the
//! rest, so that the counts mean the same for both providers.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::Value;

use super::{Answer, ApiKey, Step, StreamDecoder, ToolCall, UpstreamError, Usage};

pub(super) fn headers(h: &mut HeaderMap, key: Option<&ApiKey>) {
    if let Some(k) = key
        && let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {}", k.0))
    {
        v.set_sensitive(true);
        h.insert(AUTHORIZATION, v);
    }
}

pub(super) fn usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let detail = |k: &str| {
        u.get("prompt_tokens_details")
            .and_then(|d| d.get(k))
            .and_then(Value::as_u64)
    };
    let cached = detail("cached_tokens");
    // Newer models bill writes to the cache (1.25× input) and report them.
    let written = detail("cache_write_tokens");
    Usage {
        input_tokens: n("prompt_tokens")
            .map(|p| p.saturating_sub(cached.unwrap_or(0) + written.unwrap_or(0))),
        output_tokens: n("completion_tokens"),
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: written,
        ..Usage::default()
    }
}

pub(super) fn answer(body: &Value) -> Option<Answer> {
    let choice = body.get("choices")?.get(0)?;
    let message = choice.get("message")?;
    let mut a = Answer {
        text: message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        stop_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        ..Answer::default()
    };
    // A refusal comes in its own member: it is the answer's text, and why
    // the model stopped.
    if let Some(r) = message.get("refusal").and_then(Value::as_str)
        && !r.is_empty()
    {
        if !a.text.is_empty() {
            a.text.push_str("\n\n");
        }
        a.text.push_str(r);
        a.stop_reason = Some(REFUSAL.to_string());
    }
    for c in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
        let f = c.get("function");
        a.tool_calls.push(ToolCall {
            id: s(c.get("id")),
            name: s(f.and_then(|f| f.get("name"))),
            input: s(f.and_then(|f| f.get("arguments"))),
        });
    }
    if let Some(u) = body.get("usage").filter(|u| u.is_object()) {
        a.usage = usage(u);
        a.provider_usage = Some(u.clone());
    }
    Some(a)
}

pub(super) fn stream_event(d: &mut StreamDecoder, data: &str) -> Step {
    if data.trim() == "[DONE]" {
        return Step::Done;
    }
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        tracing::debug!("ignoring a chunk that is not JSON");
        return Step::Nothing;
    };
    if let Some(e) = v.get("error") {
        return Step::Error(UpstreamError::from_error_object(e));
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        d.answer.usage = usage(u);
        d.answer.provider_usage = Some(u.clone());
    }
    let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
        return Step::Nothing;
    };
    if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
        d.answer.stop_reason = Some(r.to_string());
    }
    if d.refused && d.answer.stop_reason.as_deref() != Some(REFUSAL) {
        d.answer.stop_reason = Some(REFUSAL.to_string());
    }
    for c in choice
        .get("delta")
        .and_then(|x| x.get("tool_calls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let index = c.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        let calls = &mut d.answer.tool_calls;
        if calls.len() <= index {
            calls.resize_with(index + 1, ToolCall::default);
        }
        let call = &mut calls[index];
        fn s(v: Option<&Value>) -> Option<&str> {
            v.and_then(Value::as_str)
        }
        if let Some(id) = s(c.get("id")) {
            call.id = id.to_string();
        }
        let f = c.get("function");
        if let Some(n) = s(f.and_then(|f| f.get("name"))) {
            call.name.push_str(n);
        }
        if let Some(a) = s(f.and_then(|f| f.get("arguments"))) {
            call.input.push_str(a);
        }
    }
    let delta = choice.get("delta");
    let text = delta
        .and_then(|x| x.get("content"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    let refusal = delta
        .and_then(|x| x.get("refusal"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    let mut out = String::new();
    if let Some(t) = text {
        out.push_str(t);
    }
    if let Some(r) = refusal {
        // The refusal's text follows any text before it, apart.
        let first_words = d.answer.text.is_empty() && out.is_empty();
        if !d.refused && !first_words {
            out.push_str("\n\n");
        }
        d.refused = true;
        d.answer.stop_reason = Some(REFUSAL.to_string());
        out.push_str(r);
    }
    if out.is_empty() {
        return Step::Nothing;
    }
    d.answer.text.push_str(&out);
    Step::Text(out)
}

/// The stop reason of an answer that is a refusal (`message.refusal`,
/// `delta.refusal`), as Anthropic names it.
pub(crate) const REFUSAL: &str = "refusal";

#[cfg(test)]
mod tests {
    use super::super::Provider;
    use super::*;

    #[test]
    fn a_whole_stream_with_usage_then_done() {
        let mut d = Provider::OpenAi.stream();
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Yo"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920}}}"#,
        ];
        let mut text = String::new();
        for c in chunks {
            if let Step::Text(t) = d.event("", c) {
                text.push_str(&t);
            }
        }
        assert_eq!(d.event("", "[DONE]"), Step::Done);
        assert_eq!(text, "Yo");
        let a = d.into_answer();
        assert_eq!(a.stop_reason.as_deref(), Some("length"));
        assert_eq!(
            a.usage,
            Usage {
                input_tokens: Some(86),
                output_tokens: Some(300),
                cache_read_input_tokens: Some(1920),
                cache_creation_input_tokens: None,
                ..Usage::default()
            }
        );
    }

    /// Two tool calls streamed in pieces by index, then `tool_calls`.
    #[test]
    fn streamed_tool_calls_are_put_together_by_index() {
        let mut d = Provider::OpenAi.stream();
        let chunks = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"search_memory","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"query\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"memory","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ];
        for c in chunks {
            assert_eq!(d.event("", c), Step::Nothing);
        }
        let a = d.into_answer();
        assert_eq!(a.stop_reason.as_deref(), Some("tool_calls"));
        let calls: Vec<(&str, &str, &str)> = a
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.input.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_a", "search_memory", r#"{"query":"x"}"#),
                ("call_b", "memory", "{}")
            ]
        );
    }

    #[test]
    fn a_non_streamed_answer_and_an_error_chunk() {
        let body: Value = serde_json::from_str(
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],
                "usage":{"prompt_tokens":10,"completion_tokens":2}}"#,
        )
        .unwrap();
        let a = answer(&body).unwrap();
        assert_eq!(
            (a.text.as_str(), a.stop_reason.as_deref()),
            ("hi", Some("stop"))
        );
        assert_eq!(a.usage.input_tokens, Some(10));
        let mut d = Provider::OpenAi.stream();
        assert!(matches!(
            d.event("", r#"{"error":{"message":"boom","type":"server_error"}}"#),
            Step::Error(_)
        ));
    }

    #[test]
    fn cache_reads_and_writes_are_normalised() {
        let u: Value = serde_json::from_str(
            r#"{"prompt_tokens":1000,"completion_tokens":5,
                "prompt_tokens_details":{"cached_tokens":600,"cache_write_tokens":300}}"#,
        )
        .unwrap();
        let u = usage(&u);
        assert_eq!(u.input_tokens, Some(100));
        assert_eq!(u.cache_read_input_tokens, Some(600));
        assert_eq!(u.cache_creation_input_tokens, Some(300));
    }
}
