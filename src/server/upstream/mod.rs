//! Talking to the model, whatever the provider: the request's leading
//! fields, the answer (text, why it stopped, token usage), the streamed
//! events, and upstream errors (status, code, message, `retry-after`) with
//! the API key redacted from anything relayed or logged. Each provider's own
//! shapes are in `anthropic.rs` and `openai.rs`, which `provider.rs` picks
//! between, and OpenAI's Responses API in `responses.rs`; `call.rs` sends a request and reads its answer; `embed.rs`
//! calls the embedding model of hybrid search.

mod anthropic;
pub(crate) mod call;
pub mod embed;
mod openai;
mod provider;
pub(crate) mod relay;
pub(crate) mod responses;
pub(crate) mod shapes;
pub(crate) mod tools;

pub use embed::{EmbedConfig, HttpEmbedder};
pub use tools::ToolCall;

use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value, json};

/// The stop reason of an answer cut by shutdown.
pub(crate) const INTERRUPTED: &str = "interrupted";

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

    /// The environment variable holding the API key when none is named.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_API_KEY",
            Provider::OpenAi => "OPENAI_API_KEY",
        }
    }

    /// The endpoint: `base` itself when it already has a path, else
    /// `base` + the provider's path.
    pub fn endpoint(self, base: &reqwest::Url) -> reqwest::Url {
        let path = base.path().trim_end_matches('/');
        if !path.is_empty() {
            return base.clone();
        }
        let mut u = base.clone();
        u.set_path(match self {
            Provider::Anthropic => "/v1/messages",
            Provider::OpenAi => "/v1/chat/completions",
        });
        u
    }

    /// A fresh decoder of this provider's streamed events.
    pub fn stream(self) -> StreamDecoder {
        StreamDecoder {
            provider: self,
            answer: Answer::default(),
            blocks: Vec::new(),
            partial: Vec::new(),
            finished: false,
            refused: false,
            responses: false,
            part: None,
        }
    }

    /// Whether an answer that stopped for `stop_reason` asks for its tool
    /// calls to be run (`tool_use`, `tool_calls`): any other stop (the
    /// model's limit, a refusal, a filter, a full context window) ends the
    /// turn with the calls unrun, as the providers' SDKs' tool runners do.
    pub fn wants_tools(self, stop_reason: Option<&str>) -> bool {
        matches!(stop_reason, Some("tool_use" | "tool_calls"))
    }

    /// Whether an answer that stopped for `stop_reason` is to be continued
    /// as it is (Anthropic's `pause_turn`: a long turn of server tools
    /// paused), as the SDKs' runners continue it.
    pub fn paused(self, stop_reason: Option<&str>) -> bool {
        self == Provider::Anthropic && stop_reason == Some("pause_turn")
    }

    /// Whether `stop_reason` is the provider's ordinary end of an answer
    /// (the model finished, or hit a stop sequence it was given).
    pub fn normal_stop(self, stop_reason: &str) -> bool {
        matches!(stop_reason, "end_turn" | "stop" | "stop_sequence")
    }
}

/// Tokens of one exchange, as the provider reported them. `None`: the
/// provider did not report that count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens billed at the base rate: neither read from nor written
    /// to the cache (OpenAI: `prompt_tokens` less `cached_tokens`).
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Input tokens read from the prompt cache.
    pub cache_read_input_tokens: Option<u64>,
    /// Input tokens written to the prompt cache (Anthropic's
    /// `cache_creation_input_tokens`, OpenAI's `cache_write_tokens`).
    pub cache_creation_input_tokens: Option<u64>,
    /// Of those, written for 5 minutes (billed 1.25× input; Anthropic).
    pub cache_creation_5m_input_tokens: Option<u64>,
    /// Of those, written for 1 hour (billed 2× input; Anthropic).
    pub cache_creation_1h_input_tokens: Option<u64>,
}

impl Usage {
    /// Takes every count `other` has.
    pub fn merge(&mut self, other: Usage) {
        self.input_tokens = other.input_tokens.or(self.input_tokens);
        self.output_tokens = other.output_tokens.or(self.output_tokens);
        self.cache_read_input_tokens = other
            .cache_read_input_tokens
            .or(self.cache_read_input_tokens);
        self.cache_creation_input_tokens = other
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
        self.cache_creation_5m_input_tokens = other
            .cache_creation_5m_input_tokens
            .or(self.cache_creation_5m_input_tokens);
        self.cache_creation_1h_input_tokens = other
            .cache_creation_1h_input_tokens
            .or(self.cache_creation_1h_input_tokens);
    }

    /// Adds `other`'s counts (for totals).
    pub fn add(&mut self, other: &Usage) {
        fn sum(a: &mut Option<u64>, b: Option<u64>) {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0) + b);
            }
        }
        sum(&mut self.input_tokens, other.input_tokens);
        sum(&mut self.output_tokens, other.output_tokens);
        sum(
            &mut self.cache_read_input_tokens,
            other.cache_read_input_tokens,
        );
        sum(
            &mut self.cache_creation_input_tokens,
            other.cache_creation_input_tokens,
        );
        sum(
            &mut self.cache_creation_5m_input_tokens,
            other.cache_creation_5m_input_tokens,
        );
        sum(
            &mut self.cache_creation_1h_input_tokens,
            other.cache_creation_1h_input_tokens,
        );
    }

    /// The counts reported, as a JSON object.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<u64>| {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        };
        put("input_tokens", self.input_tokens);
        put("output_tokens", self.output_tokens);
        put("cache_read_input_tokens", self.cache_read_input_tokens);
        put(
            "cache_creation_input_tokens",
            self.cache_creation_input_tokens,
        );
        put(
            "cache_creation_5m_input_tokens",
            self.cache_creation_5m_input_tokens,
        );
        put(
            "cache_creation_1h_input_tokens",
            self.cache_creation_1h_input_tokens,
        );
        Value::Object(m)
    }
}

/// What the model answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The text of every text block, in order.
    pub text: String,
    /// Why the model stopped, as the provider says it (`end_turn`,
    /// `max_tokens`, `stop`, `length`, …).
    pub stop_reason: Option<String>,
    /// Token counts.
    pub usage: Usage,
    /// The provider's own usage object(s), as sent.
    pub provider_usage: Option<Value>,
    /// The tools the model asked to call, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Anthropic: the answer's content blocks (text, thinking, tool use, …)
    /// as they go back to the model when a turn continues after its tool
    /// calls.
    pub blocks: Vec<Value>,
    /// The upstream's response body as it came (a non-streamed answer),
    /// for a client that asked in the provider's own format.
    pub raw: Option<bytes::Bytes>,
}

/// Decodes one streamed answer, event by event.
pub struct StreamDecoder {
    pub(super) provider: Provider,
    pub(super) answer: Answer,
    /// Anthropic: the content blocks so far, by index.
    pub(super) blocks: Vec<Value>,
    /// Anthropic: each tool-use block's input JSON so far, by index.
    pub(super) partial: Vec<String>,
    pub(super) finished: bool,
    /// OpenAI: a refusal's text has begun.
    pub(super) refused: bool,
    /// The Responses API's events (an OpenAI upstream's other wire).
    pub(crate) responses: bool,
    /// Responses: the item and part the text so far belongs to.
    pub(super) part: Option<String>,
}

/// What one streamed event means.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// More answer text.
    Text(String),
    /// The answer is complete.
    Done,
    /// The upstream reported an error mid-stream.
    Error(UpstreamError),
    /// Nothing to relay (pings, metadata, usage, non-text blocks).
    Nothing,
}

impl StreamDecoder {
    /// Whether the stream said the answer is complete.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The answer so far.
    pub fn answer(&self) -> &Answer {
        &self.answer
    }

    /// The answer, once complete.
    pub fn into_answer(mut self) -> Answer {
        self.answer.blocks = self.blocks.into_iter().filter(|b| !b.is_null()).collect();
        self.answer
    }
}

/// An error from the upstream: its HTTP status (none for a connection
/// failure or a mid-stream error event), the provider's error type or code,
/// its message (redacted and bounded), and how long it asked us to wait.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamError {
    /// The HTTP status, if the upstream answered.
    pub status: Option<u16>,
    /// The provider's error type or code (`rate_limit_error`,
    /// `overloaded_error`, `insufficient_quota`, …).
    pub code: Option<String>,
    /// What went wrong.
    pub message: String,
    /// The upstream's `retry-after`.
    pub retry_after: Option<Duration>,
    /// Whether trying again may succeed.
    pub retryable: bool,
}

/// Statuses worth trying again, as the providers' SDKs decide: request
/// timeouts (408), lock conflicts (409), rate limits (429) and every server
/// error (5xx, Anthropic's 529 overload among them).
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..600).contains(&status)
}

/// Whether an error says a quota or spend limit is used up: a 429 that
/// waiting does not clear (OpenAI's `insufficient_quota`; a workspace's
/// spend limit), so it is never retried.
fn quota_exhausted(code: Option<&str>, message: &str) -> bool {
    if code == Some("insufficient_quota") {
        return true;
    }
    let m = message.to_ascii_lowercase();
    [
        "exceeded your current quota",
        "spend limit",
        "credit balance",
        "billing",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// Whether to try again after an error answer: the upstream's
/// `x-should-retry` first (`true` or `false`, as the SDKs obey it), then a
/// quota used up (never), then the status.
fn should_retry(
    status: u16,
    headers: &reqwest::header::HeaderMap,
    code: Option<&str>,
    message: &str,
) -> bool {
    match headers
        .get("x-should-retry")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
    {
        Some("true") => return true,
        Some("false") => return false,
        _ => {}
    }
    if status == 429 && quota_exhausted(code, message) {
        return false;
    }
    retryable_status(status)
}

/// The longest upstream message relayed to a client or logged.
const MAX_MESSAGE: usize = 1000;

impl UpstreamError {
    /// An error answer: status, headers and body.
    pub fn from_response(
        status: u16,
        headers: &reqwest::header::HeaderMap,
        body: &[u8],
        key: Option<&ApiKey>,
    ) -> UpstreamError {
        let (code, message) = error_body(body);
        let retryable = should_retry(status, headers, code.as_deref(), &message);
        UpstreamError {
            status: Some(status),
            // Some gateways put the key in the error's type too.
            code: code.map(|c| redact(&c, key)),
            message: redact(&message, key),
            retry_after: retry_after(headers),
            retryable,
        }
    }

    /// An error event in a stream, or an error object in a 200 answer.
    pub fn from_error_object(e: &Value) -> UpstreamError {
        let code = e
            .get("type")
            .or_else(|| e.get("code"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let message = e
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| e.to_string(), str::to_string);
        UpstreamError {
            status: None,
            code,
            message: bound(&message),
            retry_after: None,
            retryable: false,
        }
    }

    /// The key removed from the message and the code (for errors built
    /// before it was known, such as stream events).
    pub fn redacted(mut self, key: Option<&ApiKey>) -> UpstreamError {
        self.message = redact(&self.message, key);
        self.code = self.code.map(|c| redact(&c, key));
        self
    }
}

/// The error type (or code) and message of an upstream error body, as
/// precise as the body allows.
fn error_body(body: &[u8]) -> (Option<String>, String) {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => match v.get("error") {
            Some(e) if e.is_object() => {
                let u = UpstreamError::from_error_object(e);
                (u.code, u.message)
            }
            Some(Value::String(s)) => (None, s.clone()),
            _ => (None, v.to_string()),
        },
        Err(_) => (None, String::from_utf8_lossy(body).trim().to_string()),
    }
}

/// How long the upstream asked to wait: `retry-after-ms` (milliseconds,
/// the SDKs' first choice), else `retry-after` as seconds or an HTTP date.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms.min(86_400_000.0) / 1000.0));
    }
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::from_secs_f64(secs.min(86_400.0)));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Keys shorter than this are not redacted (see [`redact`]).
const MIN_REDACTED_KEY: usize = 8;

/// `s` with the key (and any long piece of it) replaced, bounded in length.
pub fn redact(s: &str, key: Option<&ApiKey>) -> String {
    let mut out = s.to_string();
    // A key shorter than any real one (`k`) is not searched for: replacing
    // it would mangle ordinary words of the message.
    if let Some(k) = key
        && k.0.chars().count() >= MIN_REDACTED_KEY
    {
        out = out.replace(&k.0, "<redacted>");
        // A key cut short (an upstream that echoes a prefix of it) is still
        // the key: any 12-character piece of a long key is redacted too.
        let chars: Vec<char> = k.0.chars().collect();
        if chars.len() >= 24 {
            for w in chars.windows(12) {
                let piece: String = w.iter().collect();
                if out.contains(&piece) {
                    out = out.replace(&piece, "<redacted>");
                }
            }
        }
    }
    bound(&out)
}

fn bound(s: &str) -> String {
    if s.len() <= MAX_MESSAGE {
        return s.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// An API key; its `Debug` and `Display` never show it.
#[derive(Clone)]
pub struct ApiKey(pub String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests;
