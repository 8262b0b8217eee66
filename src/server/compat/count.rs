//! `POST …/anthropic/v1/messages/count_tokens`: how many input tokens the
//! request the server *would send* for these messages takes — the log's
//! replay, the messages the log lacks, the turn's — not the client's own
//! (which the replay replaces). A client that reads its context from this
//! (Claude Code's meter and its compaction) sees what the model is sent.
//!
//! The upstream's own `count_tokens` counts it; an upstream without one (a
//! 404 or 405: a compatible server) is answered with a local estimate, a
//! token for every four bytes of the request's text, marked
//! `"estimated": true`. Nothing is written.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::history;
use super::request::Asked;
use super::{PROVIDER_BODY_LIMIT, client_key};
use crate::CurrentRequest;
use crate::server::app::logs::Server;
use crate::server::app::snapshot::{snapshot_within, with_live};
use crate::server::errors::{ApiError, json_response};
use crate::server::upstream::{Provider, shapes};

/// The members of a request `count_tokens` takes.
const COUNTED: [&str; 7] = [
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "mcp_servers",
];

/// The route's handler: the count, or the error in Anthropic's shape.
pub(crate) async fn count_tokens(
    server: Arc<Server>,
    id: Option<String>,
    req: Request,
) -> Response {
    match count(&server, id.as_deref(), req).await {
        Ok(r) => r,
        Err(e) => shapes::error_response(Provider::Anthropic, &e),
    }
}

async fn count(server: &Server, id: Option<&str>, req: Request) -> Result<Response, ApiError> {
    let (state, upstream) = super::called(server, id, Provider::Anthropic)?;
    let headers = req.headers().clone();
    let limit = state.cfg.body_limit.max(PROVIDER_BODY_LIMIT);
    let (body, _held) = state.read_body_up_to(req, limit).await?;
    let asked = Asked::parse_counted(Provider::Anthropic, &body)?;
    let fields = state
        .client_fields(&asked.params, false, &asked.model)
        .map_err(|mut e| {
            e.code = "invalid_request";
            e
        })?;
    let forwarded = match state.cfg.forward_client_key {
        true => client_key(&headers, Provider::Anthropic),
        false => None,
    };
    let beta = super::beta_of(&headers, Provider::Anthropic);
    let _permit = state.permit()?;
    // The messages the log lacks before the turn's (a turn would write them
    // and replay them; here they go as the client sent them), then what
    // continues the turn.
    let session = super::session_of(&headers, Some(&asked.params))?;
    let asked = Arc::new(asked);
    let a = asked.clone();
    let st = state.clone();
    let sid = session.clone();
    let from = tokio::task::spawn_blocking(move || {
        history::lacking_from(
            &super::log_end(&st),
            Some(&st.history_floors),
            &a,
            sid.as_deref(),
        )
    })
    .await
    .map_err(|e| crate::server::errors::internal("count_failed", e))?;
    let mut more = Vec::new();
    for m in &asked.messages[from..asked.start] {
        more.push(b',');
        more.extend_from_slice(m.to_string().as_bytes());
    }
    more.extend_from_slice(&asked.more());
    // Within the window a turn of this request would be replayed into.
    let window = super::window::budget(&asked, &fields, &more, beta.as_deref());
    let sid = session.clone();
    let snap = with_live(&state, move |st, live| {
        snapshot_within(st, live, false, false, Some(window), sid.as_deref())
    })
    .await?;
    let system = super::system_of(&state, &asked).unwrap_or_else(|| state.system.clone());
    let current = CurrentRequest {
        text: &asked.text,
        session_id: session.as_deref(),
    };
    let parts = state.body_parts_with(&snap, &current, &fields, &system);
    let parts = crate::server::turn::continued(&parts, &more, None, None);
    let whole: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    let sent: Map<String, Value> = serde_json::from_slice(&whole)
        .map_err(|e| crate::server::errors::internal("count_failed", e))?;
    let counted: Map<String, Value> = sent
        .into_iter()
        .filter(|(k, _)| COUNTED.contains(&k.as_str()))
        .collect();
    let body = Bytes::from(Value::Object(counted).to_string());
    match upstream
        .count_tokens(body.clone(), forwarded.as_ref(), beta.as_deref())
        .await?
    {
        Some(r) => Ok(r),
        None => Ok(json_response(
            StatusCode::OK,
            json!({"input_tokens": estimate(&body), "estimated": true}).to_string(),
        )),
    }
}

/// A token for every four bytes of the request's text (its strings).
fn estimate(body: &[u8]) -> u64 {
    fn text(v: &Value) -> u64 {
        match v {
            Value::String(s) => s.len() as u64,
            Value::Array(a) => a.iter().map(text).sum(),
            Value::Object(o) => o.iter().map(|(k, v)| k.len() as u64 + text(v)).sum(),
            _ => 1,
        }
    }
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    text(&v).div_ceil(4)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_estimate_is_a_token_for_four_bytes_of_text() {
        assert_eq!(
            super::estimate(br#"{"messages":[{"role":"user","content":"abcdefgh"}]}"#),
            8
        );
    }
}
