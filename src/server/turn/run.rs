//! The rest of a turn once its request is made: the upstream called (with
//! its retries), the answer read whole or relayed as it streams, appended
//! as `text_output`, and the turn's outcome. Shutdown can cut it at any
//! point: what had arrived is appended with the stop reason `interrupted`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::input::Input;
use crate::server::app::compact::compact_soon;
use crate::server::app::{AppState, Outcome};
use crate::server::errors::ApiError;
use crate::server::sse::sse;
use crate::server::upstream::Answer;
use crate::server::upstream::call::{Failure, INTERRUPTED};
use crate::server::upstream::relay::Relay;
use crate::server::writer::Line;

/// An answer that never came: the turn was cut before it.
fn interrupted() -> Answer {
    Answer {
        stop_reason: Some(INTERRUPTED.to_string()),
        ..Answer::default()
    }
}

/// Calls the upstream, reads its whole answer (relaying a stream to the
/// client while the client keeps up), appends it, and says how it ended.
/// `started` hears once the upstream's answer has begun (or failed).
pub(super) async fn run_turn(
    state: &Arc<AppState>,
    input: &Input,
    parts: Vec<Bytes>,
    stats: Value,
    mut relay: Option<Relay>,
    started: oneshot::Sender<Result<(), ApiError>>,
) -> Outcome {
    let upstream = state.upstream.as_ref().expect("a turn has an upstream");
    let mut cut = state.turns.cut_signal();
    let deadline = tokio::time::Instant::now() + upstream.timeout;
    let began = Instant::now();
    let mut started = Some(started);
    let mut stream_retries = 0;
    // Text a failed stream had relayed: kept in the record that closes it.
    let mut partial = String::new();
    let answer = loop {
        let called = tokio::select! {
            r = upstream.call(&parts, deadline) => Some(r),
            _ = cut.wait_for(|c| *c) => None,
        };
        match called {
            None => break Ok(interrupted()),
            Some(Err(e)) => break Err(upstream.call_error(e)),
            Some(Ok(resp)) if relay.is_some() => {
                if let Some(s) = started.take() {
                    let _ = s.send(Ok(()));
                }
                match upstream.read_stream(resp, &mut relay, &mut cut).await {
                    Ok(a) => break Ok(a),
                    // Overloaded before any text: nothing was relayed, so
                    // the call is made again, as a failed call would be.
                    Err(Failure::Early(e)) => {
                        let wait = upstream.backoff(stream_retries);
                        if stream_retries >= upstream.retries
                            || tokio::time::Instant::now() + wait >= deadline
                        {
                            break Err(e);
                        }
                        stream_retries += 1;
                        tracing::warn!(
                            code = e.code,
                            wait_ms = wait.as_millis() as u64,
                            "the upstream's stream failed before any text; retrying"
                        );
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = cut.wait_for(|c| *c) => break Ok(interrupted()),
                        }
                    }
                    Err(Failure::Late(e, text)) => {
                        partial = text;
                        break Err(e);
                    }
                }
            }
            Some(Ok(resp)) => {
                break tokio::select! {
                    r = upstream.read_whole(resp, deadline) => r,
                    _ = cut.wait_for(|c| *c) => Ok(interrupted()),
                };
            }
        }
    };
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(code = e.code, status = e.status.as_u16(), message = %e.message, "turn failed");
            // Closed in the log before the client hears of it.
            close_failed(state, input, &e, &partial).await;
            match started.take() {
                Some(s) => {
                    let _ = s.send(Err(e.clone()));
                }
                None => {
                    if let Some(tx) = &relay {
                        tx.send(sse("error", &e.json()));
                    }
                }
            }
            return Err(e);
        }
    };
    let provider = state.cfg.provider;
    let unusual = answer
        .stop_reason
        .as_deref()
        .filter(|r| !provider.normal_stop(r));
    let line = Line::turn(
        "text_output",
        input.session_id.as_deref(),
        &answer.text,
        unusual,
    );
    let appended = match state.writer() {
        Ok(w) => w.append(vec![line]).await,
        Err(e) => Err(e),
    };
    if let Err(e) = appended {
        let e = state.append_failed(&e);
        if let Some(tx) = &relay {
            tx.send(sse("error", &e.json()));
        }
        return Err(e);
    }
    state.count_usage(&answer.usage);
    compact_soon(state);
    tracing::info!(
        input_tokens = answer.usage.input_tokens,
        cache_read_input_tokens = answer.usage.cache_read_input_tokens,
        cache_creation_input_tokens = answer.usage.cache_creation_input_tokens,
        output_tokens = answer.usage.output_tokens,
        stop_reason = answer.stop_reason.as_deref().unwrap_or(""),
        ms = began.elapsed().as_millis() as u64,
        "turn answered"
    );
    let out = answer_json(&answer, stats);
    if let Some(tx) = &relay {
        tx.send(sse("done", &out));
    }
    Ok(out)
}

/// Closes a turn whose upstream call failed, so its `text_input` is not
/// left unanswered in the log: a `text_output` with the text a stream had
/// relayed before it failed (none otherwise), the stop
/// reason `error`, and the error (status, code, message) as the client got
/// it. Later replays show the model that the request failed. A keyed turn
/// may still be retried: its retry replays the log before its `text_input`,
/// which this record follows, and appends its answer after it.
async fn close_failed(state: &Arc<AppState>, input: &Input, e: &ApiError, text: &str) {
    let mut record = serde_json::Map::new();
    record.insert("type".into(), json!("text_output"));
    if let Some(id) = &input.session_id {
        record.insert("session_id".into(), json!(id));
    }
    record.insert("text".into(), json!(text));
    record.insert("stop_reason".into(), json!(ERROR_STOP));
    record.insert(
        "error".into(),
        json!({
            "status": e.upstream_status.unwrap_or(e.status.as_u16()),
            "code": e.upstream_code.as_deref().unwrap_or(e.code),
            "message": e.message,
        }),
    );
    let line = Line::stamped_object(Value::Object(record).to_string().as_bytes());
    let appended = match state.writer() {
        Ok(w) => w.append(vec![line]).await,
        Err(e) => Err(e),
    };
    if let Err(err) = appended {
        tracing::error!(error = %err, "could not close a failed turn in the log");
    }
}

/// The stop reason recorded for a turn whose upstream call failed.
pub(crate) const ERROR_STOP: &str = "error";

/// What a client is answered for `answer`.
pub(super) fn answer_json(answer: &Answer, stats: Value) -> Value {
    let mut out = json!({
        "text": answer.text,
        "stop_reason": answer.stop_reason,
        "usage": answer.usage.to_json(),
        "stats": stats,
    });
    if let Some(u) = &answer.provider_usage {
        out["provider_usage"] = u.clone();
    }
    out
}

/// Closes a turn whose attempt was cut with its outcome unknown (its
/// process stopped): a `text_output` with the stop reason `interrupted`,
/// and that is its outcome. The upstream is not called again.
pub(super) async fn close_turn(state: &Arc<AppState>, input: &Input) -> Outcome {
    let answer = interrupted();
    let line = Line::turn(
        "text_output",
        input.session_id.as_deref(),
        "",
        Some(INTERRUPTED),
    );
    let appended = match state.writer() {
        Ok(w) => w.append(vec![line]).await,
        Err(e) => Err(e),
    };
    appended.map_err(|e| state.append_failed(&e))?;
    tracing::info!("a turn cut by a stop was closed as interrupted");
    Ok(answer_json(&answer, Value::Null))
}
