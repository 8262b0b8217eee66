//! One turn of the respond path (`POST /respond`).
//!
//! A turn appends the user's `text_input`, then replays the log **as it
//! stood before that line** (the replay is held while the line is written,
//! and brought up to the line's offset only), adds `CURRENT_USER_REQUEST`,
//! and sends that upstream: the user's text appears once, and
//! `/v1/context` with the same input shows byte for byte what is sent. The
//! upstream call runs in a task of its own, so a client that goes away —
//! before the answer starts or in the middle of a stream — does not cut the
//! turn: the answer is read to its end and appended as `text_output`, with
//! its `stop_reason` when the model did not end normally.
//!
//! **Retries.** Upstream rate limits, overload and connection failures are
//! retried with exponential backoff and jitter, honouring `retry-after`,
//! within the request's deadline. **Idempotency.** A turn with a key
//! (`Idempotency-Key` header or `"request_id"`) is remembered in the state
//! store: a repeat gets the first answer, waits for a turn still running,
//! or retries a failed one without appending a second `text_input`.

//!
//! Files: `input.rs` (what a client asks), `keys.rs` (idempotency keys: what
//! a repeat gets), `run.rs` (the upstream call and the answer appended).

mod input;
mod keys;
mod run;

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};

pub(crate) use input::{Input, parse_input};
use keys::{Plan, finish_key, forget_key, plan_for, wait_for};
use run::run_turn;

use crate::LiveReplay;
use crate::server::app::snapshot::{Snapshot, replay_failed, snapshot_of, stats_json};
use crate::server::app::{AppState, Outcome};
use crate::server::errors::{ApiError, internal, json_response};
use crate::server::sse::{sse, sse_headers};
use crate::server::writer::{self, Line};

/// Capacity of a streamed answer's queue towards the client.
const RELAY_QUEUE: usize = 64;

pub(crate) fn stream_body(parts: Vec<Bytes>) -> Body {
    Body::from_stream(futures_util::stream::iter(
        parts.into_iter().map(Ok::<_, Infallible>),
    ))
}

/// Runs the turn `input` asks for on a log with an upstream, or answers
/// what its key's earlier attempt did.
pub(crate) async fn respond(state: Arc<AppState>, input: Input) -> Result<Response, ApiError> {
    let plan = match &input.key {
        None => Plan::Fresh,
        Some(key) => plan_for(&state, key.clone(), input.hash()).await?,
    };
    match plan {
        Plan::Answered(v) => Ok(answered(v, input.stream, true)),
        Plan::Wait(rx) => {
            let outcome = wait_for(rx).await;
            outcome.map(|v| answered(v, input.stream, true))
        }
        Plan::Fresh | Plan::Retry(_) => {
            let permit = match state.permit() {
                Ok(p) => p,
                Err(e) => {
                    forget_key(&state, input.key.as_deref(), &e).await;
                    return Err(e);
                }
            };
            let retry = if let Plan::Retry(o) = plan {
                Some(o)
            } else {
                None
            };
            start_turn(state.clone(), input, retry, permit).await
        }
    }
}

/// The answer of a finished turn, as JSON or as a short event stream.
pub(crate) fn answered(v: Value, stream: bool, repeated: bool) -> Response {
    if !stream {
        let mut r = json_response(StatusCode::OK, v.to_string());
        if repeated {
            r.headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
        }
        return r;
    }
    let text = v.get("text").cloned().unwrap_or(Value::Null);
    let events = vec![sse("delta", &json!({ "text": text })), sse("done", &v)];
    let mut r = Response::new(stream_body(events));
    sse_headers(&mut r);
    if repeated {
        r.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    r
}

/// Appends the turn's `text_input` (unless it is a retry) and replays the
/// log as it stood before it, then runs the rest of the turn in a task of
/// its own and answers as the client asked.
async fn start_turn(
    state: Arc<AppState>,
    input: Input,
    retry: Option<u64>,
    permit: OwnedSemaphorePermit,
) -> Result<Response, ApiError> {
    let begun = begin(&state, &input, retry).await;
    let snap = match begun {
        Ok(s) => s,
        Err(e) => {
            finish_key(&state, input.key.as_deref(), &Err(e.clone())).await;
            return Err(e);
        }
    };
    let parts = state.body_parts(&snap, &input.current(), &input.params, input.stream);
    let stats = stats_json(&snap.stats, state.cfg.replay.max_skips);
    let (started_tx, started_rx) = oneshot::channel::<Result<(), ApiError>>();
    let (done_tx, done_rx) = oneshot::channel::<Outcome>();
    let (events_tx, events_rx) = mpsc::channel::<Bytes>(RELAY_QUEUE);
    let stream = input.stream;
    let st = state.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let relay = stream.then_some(events_tx);
        let outcome = run_turn(&st, &input, parts, stats, relay, started_tx).await;
        finish_key(&st, input.key.as_deref(), &outcome).await;
        let _ = done_tx.send(outcome);
    });
    if !stream {
        return match done_rx.await {
            Ok(o) => o.map(|v| answered(v, false, false)),
            Err(_) => Err(internal("turn_failed", "the turn's task stopped")),
        };
    }
    match started_rx.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return match done_rx.await {
                Ok(o) => o.map(|v| answered(v, true, false)),
                Err(_) => Err(internal("turn_failed", "the turn's task stopped")),
            };
        }
    }
    let body = futures_util::stream::unfold(events_rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut r = Response::new(Body::from_stream(body));
    sse_headers(&mut r);
    Ok(r)
}

/// The replay the turn's request is made of: the log before the turn's
/// `text_input`, which is appended here unless this is a retry of a turn
/// whose input is already at `retry`.
async fn begin(
    state: &Arc<AppState>,
    input: &Input,
    retry: Option<u64>,
) -> Result<Snapshot, ApiError> {
    let st = state.clone();
    let key = input.key.clone();
    let line = Line::turn("text_input", input.session_id.as_deref(), &input.text, None);
    let r = tokio::task::spawn_blocking(
        move || -> Result<(Snapshot, Option<writer::Durable>), ApiError> {
            if let Some(offset) = retry {
                // The live state has moved on: replay the log's prefix afresh.
                let mut fresh =
                    LiveReplay::new(&st.cfg.log, st.cfg.provider.format(), st.cfg.replay.clone())
                        .with_selection(st.cfg.selection.clone());
                fresh.refresh_to(offset).map_err(replay_failed)?;
                let snap = snapshot_of(&st, &mut fresh, false, true).map_err(replay_failed)?;
                return Ok((snap, None));
            }
            // Hold the replay while the line is written: nothing else brings
            // it past the line before this turn's snapshot is taken.
            let mut live = st.live.lock().unwrap_or_else(|p| p.into_inner());
            let (appended, durable) = st
                .writer()
                .and_then(|w| w.append_blocking(vec![line]))
                .map_err(|e| st.append_failed(&e))?;
            let offset = appended[0].offset;
            if let Some(k) = &key {
                let recorded = st.store().and_then(|s| {
                    s.lock().unwrap_or_else(|p| p.into_inner()).set_turn_input(
                        &st.cfg.log,
                        k,
                        offset,
                    )
                });
                if let Err(e) = recorded {
                    tracing::error!(error = %e, "cannot record a turn's input offset");
                }
            }
            if live.refresh_to(offset).map_err(replay_failed)?.rebuilt {
                *st.window.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
            let snap = if live.info().committed_bytes > offset {
                // Only if the file changed identity under us: build afresh.
                drop(live);
                let mut fresh =
                    LiveReplay::new(&st.cfg.log, st.cfg.provider.format(), st.cfg.replay.clone())
                        .with_selection(st.cfg.selection.clone());
                fresh.refresh_to(offset).map_err(replay_failed)?;
                snapshot_of(&st, &mut fresh, false, true).map_err(replay_failed)?
            } else {
                let s = snapshot_of(&st, &mut live, false, true).map_err(replay_failed)?;
                st.note_held(&live);
                drop(live);
                s
            };
            Ok((snap, Some(durable)))
        },
    )
    .await
    .map_err(|e| internal("turn_failed", e))??;
    let (snap, durable) = r;
    if let Some(d) = durable {
        writer::durable(d)
            .await
            .map_err(|e| state.append_failed(&e))?;
    }
    Ok(snap)
}
