//! A turn asked for in the provider's own format: one exchange with the
//! upstream, its request the log's replay with the client's system, model,
//! tools and parameters, and after the turn's user message the client's own
//! messages that continue it (its tools' calls and results); the answer
//! relayed as the upstream sent it (a stream, event by event) or given
//! whole, and recorded: its `text_output` (with the stop reason when the
//! model stopped for another reason than its end, `tool_use` among them),
//! then a `tool_call` record (`"by":"client"`) for each call of the
//! client's tools. The client runs them, and its next request brings their
//! results.

use std::sync::Arc;

use axum::http::HeaderValue;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use super::input::{Compat, Input};
use super::run::{append_close, continued, error_event, exchange, fail, mark_room};
use super::tools::bounded_input;
use crate::server::app::compact::compact_soon;
use crate::server::app::{AppState, Outcome};
use crate::server::errors::{ApiError, json_response};
use crate::server::sse::{sse_headers, stream_body};
use crate::server::upstream::relay::Relay;
use crate::server::upstream::shapes;
use crate::server::writer::Line;

/// Calls the upstream once and records its answer; the outcome is the
/// answer in the provider's shape (the upstream's own body when it was not
/// streamed).
pub(super) async fn run_compat(
    state: &Arc<AppState>,
    input: &Input,
    parts: Vec<Bytes>,
    mut relay: Option<Relay>,
    started: oneshot::Sender<Result<(), ApiError>>,
) -> Outcome {
    let c = input
        .compat
        .as_ref()
        .expect("a turn in the provider's format");
    let mut cut = state.turns.cut_signal();
    let began = std::time::Instant::now();
    let mut started = Some(started);
    let body = if c.more.is_empty() {
        parts
    } else {
        let mark = mark_room(state, &parts, &c.more);
        continued(&parts, &c.more, mark, None)
    };
    let upstream = match &c.responses {
        Some(r) => r,
        None => state.upstream.as_ref().expect("a turn has an upstream"),
    };
    let body = match c.responses {
        Some(_) => as_input(body),
        None => body,
    };
    let answer = match exchange(
        upstream,
        &body,
        &mut relay,
        &mut started,
        &mut cut,
        c.key.as_ref(),
        c.beta.as_deref(),
    )
    .await
    {
        Ok(a) => a,
        Err((e, partial)) => return fail(state, input, e, &partial, started, &relay).await,
    };
    let provider = state.cfg.provider;
    let unusual = answer
        .stop_reason
        .as_deref()
        .filter(|r| !provider.normal_stop(r));
    let session = input.session_id.as_deref();
    let max = state.cfg.max_record_bytes;
    let (line, text_cut) = Line::turn_within("text_output", session, &answer.text, unusual, max);
    if let Some(bytes) = text_cut {
        tracing::warn!(
            bytes,
            limit = max,
            "the answer is longer than a record may be (--max-record-bytes); the log keeps its start"
        );
    }
    let mut lines = vec![line];
    lines.extend(answer.tool_calls.iter().map(|c| {
        let input = serde_json::from_str::<Value>(&c.input)
            .unwrap_or_else(|_| Value::String(c.input.clone()));
        client_call(&c.id, &c.name, input, session, max)
    }));
    let out = match answer.raw.as_deref().map(serde_json::from_slice::<Value>) {
        Some(Ok(v)) => v,
        _ if c.responses.is_some() => crate::server::upstream::responses::whole(&c.model, &answer),
        _ => shapes::message(provider, &c.model, &answer),
    };
    let recorded = append_close(state, input, lines, &out).await;
    // The answer's last events, held until now: a client that sends its
    // next request on them finds this answer in the log.
    if recorded.is_ok()
        && let Some(tx) = relay.as_mut()
    {
        tx.release().await;
    }
    match recorded {
        Ok(None) => {}
        Ok(Some(first)) => {
            tracing::warn!("another replica answered this turn first; answering with its record");
            return Ok(first);
        }
        Err(e) => {
            let e = state.append_failed(&e);
            if let Some(tx) = &relay {
                tx.send(error_event(tx, &e));
            }
            return Err(e);
        }
    }
    state.count_usage(&answer.usage);
    compact_soon(state);
    tracing::info!(
        input_tokens = answer.usage.input_tokens,
        cache_read_input_tokens = answer.usage.cache_read_input_tokens,
        cache_creation_input_tokens = answer.usage.cache_creation_input_tokens,
        output_tokens = answer.usage.output_tokens,
        stop_reason = answer.stop_reason.as_deref().unwrap_or(""),
        client_tool_calls = answer.tool_calls.len(),
        ms = began.elapsed().as_millis() as u64,
        "turn answered (provider format)"
    );
    Ok(out)
}

/// A finished turn's answer (`v`, in the provider's shape) as its client
/// `c` reads it: the JSON, or the events that stream it.
pub(super) fn answered(c: &Compat, v: Value, stream: bool, repeated: bool) -> Response {
    let p = c.provider;
    let mut v = v;
    let repeated = super::run::take_replayed(&mut v) || repeated;
    let mut r = if stream {
        let events = match c.responses {
            Some(_) => crate::server::upstream::responses::events(&v),
            None => shapes::events(p, &v, c.wants_usage),
        };
        let mut r = Response::new(stream_body(events));
        sse_headers(&mut r);
        r
    } else {
        json_response(axum::http::StatusCode::OK, v.to_string())
    };
    if repeated {
        r.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    r
}

/// A Chat Completions body as a Responses one: its `messages` are the
/// `input` (the same role-and-content items).
fn as_input(mut parts: Vec<Bytes>) -> Vec<Bytes> {
    const FROM: &[u8] = b"\"messages\":[";
    for p in parts.iter_mut() {
        if let Some(at) = memchr::memmem::find(p, FROM) {
            let mut v = Vec::with_capacity(p.len());
            v.extend_from_slice(&p[..at]);
            v.extend_from_slice(b"\"input\":[");
            v.extend_from_slice(&p[at + FROM.len()..]);
            *p = Bytes::from(v);
            break;
        }
    }
    parts
}

/// Bytes of a tool record besides its input or content, with room to spare.
const FRAME: usize = 512;

fn head(kind: &str, session: Option<&str>, id: &str, name: Option<&str>) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("type".into(), json!(kind));
    if let Some(s) = session {
        o.insert("session_id".into(), json!(s));
    }
    o.insert("id".into(), json!(id));
    if let Some(n) = name {
        o.insert("name".into(), json!(n));
    }
    o
}

fn room(max_record: usize, session: Option<&str>, id: &str, name: &str) -> usize {
    use crate::server::writer::json_len;
    max_record.saturating_sub(FRAME + session.map_or(0, json_len) + json_len(id) + json_len(name))
}

/// The `tool_call` record of a call of one of the client's tools
/// (`"by":"client"`), its input held to a record's limit.
pub(crate) fn client_call(
    id: &str,
    name: &str,
    input: Value,
    session: Option<&str>,
    max_record: usize,
) -> Line {
    let mut o = head("tool_call", session, id, Some(name));
    o.insert(
        "input".into(),
        bounded_input(input, room(max_record, session, id, name)),
    );
    o.insert("by".into(), json!("client"));
    Line::stamped_object(Value::Object(o).to_string().as_bytes())
}

/// The `tool_result` record of a result of one of the client's tools
/// (`"by":"client"`), its content cut to a record's limit.
pub(crate) fn client_result(
    id: &str,
    name: Option<&str>,
    content: &str,
    is_error: bool,
    session: Option<&str>,
    max_record: usize,
) -> Line {
    let mut o = head("tool_result", session, id, name);
    let kept =
        crate::server::writer::fit_json(content, room(max_record, session, id, name.unwrap_or("")));
    o.insert("content".into(), json!(kept));
    if kept.len() < content.len() {
        o.insert("content_cut".into(), json!({ "bytes": content.len() }));
    }
    o.insert("is_error".into(), json!(is_error));
    o.insert("by".into(), json!("client"));
    Line::stamped_object(Value::Object(o).to_string().as_bytes())
}
