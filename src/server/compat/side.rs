//! Side requests: what a client asks beside its conversation (a title for
//! it, a classification, a probe) is relayed to the upstream as the client
//! sent it, without the log replayed into it and without a record written.
//!
//! A request is a side request when
//!
//! 1. its `wmreplay-side` header says so (`true`); `false` makes any
//!    request the conversation's, whatever the rules below say;
//! 2. it asks for at most one token (`max_tokens` / `max_completion_tokens`
//!    / `max_output_tokens` of 1: a probe);
//! 3. it asks for an answer in a JSON schema and offers no tools (Claude
//!    Code's titles; OpenAI's `response_format` or `text.format`,
//!    Anthropic's `output_format` or `output_config.format`); or
//! 4. its session has had a conversation request, and this one's system
//!    prompt and its tools both differ from that one's.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use lru::LruCache;
use serde_json::Value;

use super::request::Asked;
use crate::server::app::AppState;
use crate::server::errors::ApiError;
use crate::server::upstream::ApiKey;
use crate::server::upstream::call::Upstream;

/// Sessions whose conversation's system prompt and tools are remembered.
const SESSIONS: usize = 4096;

/// The header that marks a request either way.
pub(crate) const HEADER: &str = "wmreplay-side";

/// Whether `asked` (of `session` on `state`'s log) is a side request; a
/// conversation request's system prompt and tools are remembered for its
/// session.
pub(crate) fn is_side(
    state: &AppState,
    headers: &HeaderMap,
    asked: &Asked,
    session: Option<&str>,
) -> Result<bool, ApiError> {
    if let Some(v) = headers.get(HEADER) {
        return match v.to_str().map(|s| s.trim().to_ascii_lowercase()).as_deref() {
            Ok("true" | "1") => Ok(true),
            Ok("false" | "0") => Ok(false),
            _ => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("the {HEADER} header must be true or false"),
            )),
        };
    }
    let param = |k: &str| asked.param(k);
    let probe = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .any(|k| param(k).and_then(Value::as_u64).is_some_and(|n| n <= 1));
    if probe {
        return Ok(true);
    }
    // The tools' skeleton: their types and names (see `Asked::param`).
    let tools = param("tools")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty());
    let schema = |v: Option<&Value>| {
        v.and_then(|f| f.get("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| t == "json_schema")
    };
    let structured = schema(param("response_format"))
        || schema(param("output_format"))
        || schema(param("output_config").and_then(|c| c.get("format")))
        || schema(param("text").and_then(|t| t.get("format")));
    if structured && tools.is_none() {
        return Ok(true);
    }
    // The session's conversation: its system prompt and its tools' names.
    let system = asked.system.as_deref().unwrap_or("");
    let names: Vec<&str> = tools
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t.get("name")
                .or_else(|| t.get("function").and_then(|f| f.get("name")))
                .or_else(|| t.get("type"))
                .and_then(Value::as_str)
        })
        .collect();
    let print = (
        crate::server::turn::request_hash(system),
        crate::server::turn::request_hash(&names.join("\u{0}")),
    );
    let Some(session) = session else {
        return Ok(false);
    };
    static SEEN: Mutex<Option<LruCache<String, (String, String)>>> = Mutex::new(None);
    let slot = format!("{}\u{0}{session}", state.cfg.log.display());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let seen =
        seen.get_or_insert_with(|| LruCache::new(NonZeroUsize::new(SESSIONS).expect("nonzero")));
    // Only a conversation with tools is remembered: a request beside it
    // without any never stands for the session.
    match seen.get(&slot) {
        Some((s, t)) if *s != print.0 && *t != print.1 => Ok(true),
        _ => {
            if !names.is_empty() {
                seen.put(slot, print);
            }
            Ok(false)
        }
    }
}

/// Relays a side request's body to the upstream as the client sent it
/// and its answer back as the upstream gave it (a stream event by event).
pub(crate) async fn relay(
    upstream: &Upstream,
    body: Bytes,
    key: Option<&ApiKey>,
    beta: Option<&str>,
) -> Result<Response, ApiError> {
    let deadline = tokio::time::Instant::now() + upstream.timeout;
    let resp = upstream
        .call_as(&[body], deadline, key, beta)
        .await
        .map_err(|e| upstream.call_error(e))?;
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let kind = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
        .unwrap_or(HeaderValue::from_static("application/json"));
    let stream = resp
        .bytes_stream()
        .map(|r| r.map_err(|e| std::io::Error::other(e.without_url().to_string())));
    let mut r = Response::new(Body::from_stream(stream));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, kind);
    r.headers_mut()
        .insert("wmreplay-side", HeaderValue::from_static("true"));
    Ok(r)
}
