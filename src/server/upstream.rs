//! Talking to the model: each provider's request fields, headers, answer
//! shape and streaming events.

use std::fmt;

use serde_json::Value;

/// Which API the upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAi,
}

impl std::str::FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "anthropic" => Ok(Provider::Anthropic),
            "openai" => Ok(Provider::OpenAi),
            _ => Err(format!(
                "unknown provider {s:?} (expected anthropic or openai)"
            )),
        }
    }
}

impl Provider {
    /// The body format of this provider's requests.
    pub fn format(self) -> crate::Format {
        match self {
            Provider::Anthropic => crate::Format::Anthropic,
            Provider::OpenAi => crate::Format::OpenAi,
        }
    }

    /// The model used when none is given.
    pub fn default_model(self) -> &'static str {
        match self {
            Provider::Anthropic => "claude-sonnet-4-5",
            Provider::OpenAi => "gpt-4o-mini",
        }
    }

    /// The environment variable holding the API key when none is named.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_API_KEY",
            Provider::OpenAi => "OPENAI_API_KEY",
        }
    }

    /// The endpoint: `base` itself when it already has a path, else
    /// `base` + the provider's path.
    pub fn endpoint(self, base: &str) -> String {
        let trimmed = base.trim_end_matches('/');
        let has_path = trimmed
            .split_once("://")
            .is_some_and(|(_, rest)| rest.contains('/'));
        if has_path {
            return trimmed.to_string();
        }
        match self {
            Provider::Anthropic => format!("{trimmed}/v1/messages"),
            Provider::OpenAi => format!("{trimmed}/v1/chat/completions"),
        }
    }

    /// JSON members written first in the request body.
    pub fn fields(self, model: &str, max_tokens: u32, stream: bool) -> String {
        let model = serde_json::to_string(model).expect("a string serialises");
        let mut s = match self {
            Provider::Anthropic => format!("\"model\":{model},\"max_tokens\":{max_tokens}"),
            Provider::OpenAi => format!("\"model\":{model}"),
        };
        if stream {
            s.push_str(",\"stream\":true");
        }
        s
    }

    /// Adds the provider's headers (the key marked sensitive, so it is never
    /// printed by the HTTP stack's debug output).
    pub fn headers(self, key: Option<&ApiKey>) -> reqwest::header::HeaderMap {
        use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        match self {
            Provider::Anthropic => {
                h.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
                if let Some(k) = key
                    && let Ok(mut v) = HeaderValue::from_str(&k.0)
                {
                    v.set_sensitive(true);
                    h.insert("x-api-key", v);
                }
            }
            Provider::OpenAi => {
                if let Some(k) = key
                    && let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {}", k.0))
                {
                    v.set_sensitive(true);
                    h.insert(reqwest::header::AUTHORIZATION, v);
                }
            }
        }
        h
    }

    /// The answer's text in a non-streaming response.
    pub fn answer_text(self, body: &Value) -> Option<String> {
        match self {
            Provider::Anthropic => {
                let parts = body.get("content")?.as_array()?;
                let mut text = String::new();
                for p in parts {
                    if p.get("type").and_then(Value::as_str) == Some("text")
                        && let Some(t) = p.get("text").and_then(Value::as_str)
                    {
                        text.push_str(t);
                    }
                }
                Some(text)
            }
            Provider::OpenAi => body
                .get("choices")?
                .get(0)?
                .get("message")?
                .get("content")?
                .as_str()
                .map(str::to_string),
        }
    }

    /// What one streamed event means.
    pub fn stream_event(self, data: &str) -> StreamEvent {
        if self == Provider::OpenAi && data.trim() == "[DONE]" {
            return StreamEvent::Done;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return StreamEvent::Ignore;
        };
        if let Some(e) = v.get("error") {
            return StreamEvent::Error(error_message(e));
        }
        match self {
            Provider::Anthropic => match v.get("type").and_then(Value::as_str) {
                Some("content_block_delta") => v
                    .get("delta")
                    .filter(|d| d.get("type").and_then(Value::as_str) == Some("text_delta"))
                    .and_then(|d| d.get("text"))
                    .and_then(Value::as_str)
                    .map_or(StreamEvent::Ignore, |t| StreamEvent::Text(t.to_string())),
                Some("message_stop") => StreamEvent::Done,
                _ => StreamEvent::Ignore,
            },
            Provider::OpenAi => v
                .get("choices")
                .and_then(|c| c.get(0))
                .and_then(|c| c.get("delta"))
                .and_then(|d| d.get("content"))
                .and_then(Value::as_str)
                .map_or(StreamEvent::Ignore, |t| StreamEvent::Text(t.to_string())),
        }
    }
}

/// A streamed event, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// More answer text.
    Text(String),
    /// The answer is complete.
    Done,
    /// The upstream reported an error mid-stream.
    Error(String),
    /// Anything else (pings, metadata).
    Ignore,
}

/// The message of an error object (`{"message": ...}`) or its JSON text.
pub fn error_message(e: &Value) -> String {
    e.get("message")
        .and_then(Value::as_str)
        .map_or_else(|| e.to_string(), str::to_string)
}

/// The message of an upstream error body, as precise as the body allows.
pub fn upstream_error_message(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => v
            .get("error")
            .map(error_message)
            .unwrap_or_else(|| v.to_string()),
        Err(_) => {
            let s = String::from_utf8_lossy(&body[..body.len().min(512)]);
            s.trim().to_string()
        }
    }
}

/// An API key; its `Debug` never shows it.
#[derive(Clone)]
pub struct ApiKey(pub String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Splits a server-sent event stream into the `data` of each event.
#[derive(Default)]
pub struct SseParser {
    buf: Vec<u8>,
}

impl SseParser {
    /// Feeds bytes; returns the data of every event they completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some((event_len, sep_len)) = find_event_end(&self.buf) {
            let event: Vec<u8> = self.buf.drain(..event_len + sep_len).collect();
            let text = String::from_utf8_lossy(&event[..event_len]);
            let mut data = Vec::new();
            for line in text.lines() {
                if let Some(d) = line.strip_prefix("data:") {
                    data.push(d.strip_prefix(' ').unwrap_or(d).to_string());
                }
            }
            if !data.is_empty() {
                out.push(data.join("\n"));
            }
        }
        out
    }
}

/// The end of the first complete event: its length and the separator's.
fn find_event_end(b: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'\n' && b[i + 1] == b'\n' {
            return Some((i, 2));
        }
        if b[i] == b'\r' && b[i + 1] == b'\n' && b.get(i + 2..i + 4) == Some(b"\r\n") {
            return Some((i, 4));
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let a = Provider::Anthropic;
        assert_eq!(
            a.endpoint("https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            a.endpoint("http://127.0.0.1:9/"),
            "http://127.0.0.1:9/v1/messages"
        );
        assert_eq!(
            a.endpoint("http://h:1/custom/path"),
            "http://h:1/custom/path"
        );
        assert_eq!(
            Provider::OpenAi.endpoint("https://api.openai.com"),
            "https://api.openai.com/v1/chat/completions"
        );
    }

    #[test]
    fn sse_events_split_across_reads() {
        let mut p = SseParser::default();
        assert!(p.feed(b"event: x\ndata: {\"a\"").is_empty());
        assert_eq!(
            p.feed(b":1}\n\ndata: two\r\n\r\n: comment\n\n"),
            vec!["{\"a\":1}", "two"]
        );
    }

    #[test]
    fn stream_events_of_each_provider() {
        let a = Provider::Anthropic;
        assert_eq!(
            a.stream_event(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#),
            StreamEvent::Text("Hi".into())
        );
        assert_eq!(
            a.stream_event(r#"{"type":"message_stop"}"#),
            StreamEvent::Done
        );
        assert_eq!(
            a.stream_event(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            StreamEvent::Error("Overloaded".into())
        );
        let o = Provider::OpenAi;
        assert_eq!(
            o.stream_event(r#"{"choices":[{"index":0,"delta":{"content":"Yo"}}]}"#),
            StreamEvent::Text("Yo".into())
        );
        assert_eq!(o.stream_event("[DONE]"), StreamEvent::Done);
    }

    #[test]
    fn the_key_is_never_in_debug_output() {
        let k = ApiKey("sk-secret".into());
        assert!(!format!("{k:?}").contains("secret"));
    }
}
