//! The rest of a turn once its request is made: the upstream called (with
//! its retries), the answer read whole or relayed as it streams, appended
//! as `text_output`, and the turn's outcome.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::input::Input;
use crate::server::app::{AppState, Outcome};
use crate::server::errors::ApiError;
use crate::server::sse::sse;
use crate::server::writer::Line;

/// Calls the upstream, reads its whole answer (relaying a stream to the
/// client while the client keeps up), appends it, and says how it ended.
pub(super) async fn run_turn(
    state: &Arc<AppState>,
    input: &Input,
    parts: Vec<Bytes>,
    stats: Value,
    relay: Option<mpsc::Sender<Bytes>>,
    started: oneshot::Sender<Result<(), ApiError>>,
) -> Outcome {
    let upstream = state.upstream.as_ref().expect("a turn has an upstream");
    let deadline = tokio::time::Instant::now() + upstream.timeout;
    let began = Instant::now();
    let resp = match upstream.call(&parts, deadline).await {
        Ok(r) => r,
        Err(e) => {
            let e = upstream.call_error(e);
            tracing::warn!(code = e.code, status = e.status.as_u16(), message = %e.message, "turn failed");
            let _ = started.send(Err(e.clone()));
            return Err(e);
        }
    };
    let answer = if relay.is_some() {
        let _ = started.send(Ok(()));
        upstream.read_stream(resp, relay.clone()).await
    } else {
        upstream.read_whole(resp, deadline).await
    };
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(code = e.code, message = %e.message, "turn failed");
            if let Some(tx) = &relay {
                let _ = tx.try_send(sse("error", &e.json()));
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
            let _ = tx.try_send(sse("error", &e.json()));
        }
        return Err(e);
    }
    state.count_usage(&answer.usage);
    tracing::info!(
        input_tokens = answer.usage.input_tokens,
        cache_read_input_tokens = answer.usage.cache_read_input_tokens,
        cache_creation_input_tokens = answer.usage.cache_creation_input_tokens,
        output_tokens = answer.usage.output_tokens,
        stop_reason = answer.stop_reason.as_deref().unwrap_or(""),
        ms = began.elapsed().as_millis() as u64,
        "turn answered"
    );
    let mut out = json!({
        "text": answer.text,
        "stop_reason": answer.stop_reason,
        "usage": answer.usage.to_json(),
        "stats": stats,
    });
    if let Some(u) = &answer.provider_usage {
        out["provider_usage"] = u.clone();
    }
    if let Some(tx) = &relay {
        let _ = tx.try_send(sse("done", &out));
    }
    Ok(out)
}
