//! What a client's `/respond` or `/v1/context` asks: the user's text, the
//! session, streaming, request fields for the upstream, an idempotency key.

use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::CurrentRequest;
use crate::server::errors::{ApiError, idempotency_key, string_field};
use crate::server::upstream::RESERVED_FIELDS;

/// A client's `/respond` or `/v1/context` input.
pub(crate) struct Input {
    pub text: String,
    pub session_id: Option<String>,
    pub stream: bool,
    /// Request fields for the upstream (`"params"`), checked.
    pub params: Vec<(String, Value)>,
    /// The idempotency key, from the header or `"request_id"`.
    pub key: Option<String>,
}

impl Input {
    /// What a key's request is, for telling a repeat from a reuse: the
    /// text, session and params (not `stream`: a repeat may ask either way).
    pub(crate) fn hash(&self) -> String {
        // Stored, so a fixed algorithm (FNV-1a) over a canonical form.
        let canonical = json!([self.text, self.session_id, self.params]).to_string();
        let mut f: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in canonical.as_bytes() {
            f ^= b as u64;
            f = f.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{f:016x}")
    }
}

pub(crate) fn parse_input(headers: &HeaderMap, body: &[u8]) -> Result<Input, ApiError> {
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
        Some(Value::Object(p)) => {
            let mut out = Vec::with_capacity(p.len());
            for (k, v) in p {
                if RESERVED_FIELDS.contains(&k.as_str()) {
                    return Err(bad(
                        "invalid_params",
                        format!("`params` may not set `{k}`: the server writes it"),
                    ));
                }
                out.push((k.clone(), v.clone()));
            }
            out
        }
        Some(_) => return Err(bad("invalid_params", "`params` must be an object".into())),
    };
    let from_body = string_field(obj, "request_id", "invalid_request_id")?.map(str::to_string);
    let key = idempotency_key(headers, from_body)?;
    Ok(Input {
        text,
        session_id,
        stream,
        params,
        key,
    })
}

impl Input {
    /// The `CURRENT_USER_REQUEST` of this input.
    pub(crate) fn current(&self) -> CurrentRequest<'_> {
        CurrentRequest {
            text: &self.text,
            session_id: self.session_id.as_deref(),
        }
    }
}
