//! What a client's `/respond` or `/v1/context` asks: the user's text, the
//! session, streaming, request fields for the upstream, an idempotency key.

use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::CurrentRequest;
use crate::server::app::AppState;
use crate::server::errors::{ApiError, idempotency_key, string_field};

/// A client's `/respond` or `/v1/context` input.
pub(crate) struct Input {
    pub text: String,
    pub session_id: Option<String>,
    pub stream: bool,
    /// Request fields for the upstream (`"params"`), as the client gave them.
    pub params: Vec<(String, Value)>,
    /// The request's leading fields, `params` checked against the
    /// provider's rules ([`AppState::fields_for`]).
    pub fields: String,
    /// The idempotency key, from the header or `"request_id"`.
    pub key: Option<String>,
    /// Whether the answer's `stats` list the skipped lines (`"skips":
    /// true`); without it they carry the counts only.
    pub skips: bool,
    /// A request made to a provider-compatible endpoint: what differs from
    /// a `/respond` turn.
    pub compat: Option<Compat>,
}

impl Input {
    /// Whether the turn's key is the server's own ([`Compat::made_key`]).
    pub(crate) fn made_key(&self) -> bool {
        self.compat.as_ref().is_some_and(|c| c.made_key)
    }

    /// Whether no one but this process can claim the turn's key: the
    /// server's own key on a log it writes alone. Its row in the state
    /// store is written with the turn's input and answered by the batch
    /// that closes the turn, not by a step of its own.
    pub(crate) fn key_is_ours(&self, state: &AppState) -> bool {
        self.made_key() && state.writes_locally()
    }

    /// Whether the turn's key was answered in the state store by the batch
    /// that closed the turn (nothing left to record of it).
    pub(crate) fn key_answered(&self) -> bool {
        self.compat
            .as_ref()
            .is_some_and(|c| c.key_answered.load(std::sync::atomic::Ordering::Acquire))
    }
}

/// A turn asked for in a provider's own format
/// (`/anthropic/v1/messages`, `/openai/v1/chat/completions`): what differs
/// from a `/respond` turn.
pub(crate) struct Compat {
    /// The provider whose format the client speaks (the server's own).
    pub provider: crate::server::upstream::Provider,
    /// The client's model, which the answer names.
    pub model: String,
    /// The system prompt: the server's, then the client's.
    pub system: Option<String>,
    /// The messages after the turn's user message: the model's messages
    /// that called the client's tools and the client's results, each as
    /// JSON led by `,` (empty for a fresh turn).
    pub more: Vec<u8>,
    /// The offset of the turn's `text_input` when the log holds it already
    /// (the request continues the turn with tool results): nothing is
    /// appended for it, and the replay is the log before it.
    pub input: Option<u64>,
    /// Records of the client's messages the log lacks: before the turn's
    /// input, and after it (the turn's tool calls and results).
    pub before: Vec<crate::server::writer::Line>,
    pub after: Vec<crate::server::writer::Line>,
    /// The key the upstream is called with (`--forward-client-key`).
    pub key: Option<crate::server::upstream::ApiKey>,
    /// The request's hash (its key's request, for telling a repeat).
    pub hash: String,
    /// Whether the turn's key is the server's own (its conversation's), not
    /// the client's `Idempotency-Key`: its input is made durable with its
    /// answer, not before the model is called (docs/reliability.md).
    pub made_key: bool,
    /// Set once the batch that closed the turn answered its key.
    pub key_answered: std::sync::atomic::AtomicBool,
    /// The client asked for a stream's usage chunk
    /// (`stream_options.include_usage`), which the server asks for anyway.
    pub wants_usage: bool,
    /// The client's `anthropic-beta` features, sent upstream with the
    /// server's own.
    pub beta: Option<String>,
    /// The client speaks OpenAI's Responses API: the request's messages go
    /// as its `input`, to this, the upstream's Responses API.
    pub responses: Option<crate::server::upstream::call::Upstream>,
    /// The tokens the replay may take when the server's selection has no
    /// window: what the client's model takes, less the request's own.
    pub window: u64,
}

impl Input {
    /// The window of this turn's replay when the server's selection has
    /// none (a provider-format request's).
    pub(crate) fn window(&self) -> Option<u64> {
        self.compat.as_ref().map(|c| c.window)
    }

    /// What a key's request is, for telling a repeat from a reuse: the
    /// text, session and params (not `stream`: a repeat may ask either way).
    pub(crate) fn hash(&self) -> String {
        if let Some(c) = &self.compat {
            return c.hash.clone();
        }
        request_hash(&json!([self.text, self.session_id, self.params]).to_string())
    }
}

/// The hash a key's request is remembered by: stored, so a fixed algorithm
/// (FNV-1a) over a canonical form of the request.
pub(crate) fn request_hash(canonical: &str) -> String {
    let mut f: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in canonical.as_bytes() {
        f ^= b as u64;
        f = f.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{f:016x}")
}

/// The client's input, its `params` checked against the provider's rules
/// before anything is appended or sent.
pub(crate) fn parse_input(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Input, ApiError> {
    let bad = |code, msg: String| ApiError::new(StatusCode::BAD_REQUEST, code, msg);
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| bad("invalid_json", format!("the body is not valid JSON: {e}")))?;
    let Some(obj) = v.as_object() else {
        return Err(bad("invalid_json", "the body must be a JSON object".into()));
    };
    let text = match obj.get("text") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("invalid_text", "`text` must be a string".into())),
        None => return Err(bad("missing_text", "`text` is required".into())),
    };
    let session_id = string_field(obj, "session_id", "invalid_session_id")?.map(str::to_string);
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("invalid_stream", "`stream` must be a boolean".into())),
    };
    let params = match obj.get("params") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(p)) => p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Some(_) => return Err(bad("invalid_params", "`params` must be an object".into())),
    };
    let skips = match obj.get("skips") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("invalid_skips", "`skips` must be a boolean".into())),
    };
    input_fits(&text, session_id.as_deref(), state.cfg.max_record_bytes)?;
    let from_body = string_field(obj, "request_id", "invalid_request_id")?.map(str::to_string);
    let key = idempotency_key(headers, from_body)?;
    let fields = state.fields_for(&params, stream)?;
    Ok(Input {
        text,
        session_id,
        stream,
        params,
        fields,
        key,
        skips,
        compat: None,
    })
}

/// Refuses (413 `record_too_large`, before anything is written) a turn's
/// user text that, with its session id, would make a `text_input` longer
/// than a record may be (`--max-record-bytes`).
pub(crate) fn input_fits(text: &str, session: Option<&str>, max: usize) -> Result<(), ApiError> {
    use crate::server::writer::json_len;
    // `{"type":"text_input","ts_ms":…,"session_id":…,"text":…}`: 64 bytes
    // besides the two strings, a stamp of up to 16 digits included.
    let len = 64 + json_len(text) + session.map_or(0, json_len);
    if len <= max {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "record_too_large",
        format!(
            "the user's text, with its session id, makes a record of {len} bytes, more than the \
             limit of {max} (--max-record-bytes)"
        ),
    ))
}

impl Input {
    /// How many skipped lines the answer's `stats` list.
    pub(crate) fn max_skips(&self, state: &AppState) -> usize {
        if self.skips {
            state.cfg.replay.max_skips
        } else {
            0
        }
    }

    /// The `CURRENT_USER_REQUEST` of this input.
    pub(crate) fn current(&self) -> CurrentRequest<'_> {
        CurrentRequest {
            text: &self.text,
            session_id: self.session_id.as_deref(),
        }
    }
}
