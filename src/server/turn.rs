//! `POST /respond` and `POST /v1/context`: one turn of the respond path.
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

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot, watch};

use super::call::run_turn;
use super::upstream::Usage;
use super::writer::{self, Line};

use super::errors::idempotency_key;
use super::{ApiError, AppState, Snapshot, json_response, read_body, snapshot, stats_json};
use crate::state::{TurnBegin, TurnStatus};
use crate::{CurrentRequest, LiveReplay};

/// Most of an upstream error body read.
pub(super) const MAX_ERROR_BODY: usize = 64 << 10;
/// Capacity of a streamed answer's queue towards the client.
const RELAY_QUEUE: usize = 64;

/// A client's `/respond` or `/v1/context` input.
pub(super) struct Input {
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
    fn hash(&self) -> String {
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

pub(super) fn parse_input(headers: &HeaderMap, body: &[u8]) -> Result<Input, ApiError> {
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
    let session_id = match obj.get("session_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(bad(
                "invalid_session_id",
                "`session_id` must be a string".into(),
            ));
        }
    };
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
                if super::upstream::RESERVED_FIELDS.contains(&k.as_str()) {
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
    let from_body = match obj.get("request_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(bad(
                "invalid_request_id",
                "`request_id` must be a string".into(),
            ));
        }
    };
    let key = idempotency_key(headers, from_body)?;
    Ok(Input {
        text,
        session_id,
        stream,
        params,
        key,
    })
}

impl AppState {
    /// The request body's pieces: head, the rendered messages, tail.
    pub(super) fn body_parts(&self, snap: &Snapshot, input: &Input, stream: bool) -> Vec<Bytes> {
        let p = self.cfg.provider;
        let mut extra = self.cfg.upstream_fields.clone();
        extra.extend(input.params.iter().cloned());
        if let Some(key) = &self.cache_key
            && !extra.iter().any(|(k, _)| k == "prompt_cache_key")
        {
            extra.push(("prompt_cache_key".into(), Value::String(key.clone())));
        }
        let fields = p.fields(&self.cfg.model, self.cfg.max_tokens, stream, &extra);
        let current = CurrentRequest {
            text: &input.text,
            session_id: input.session_id.as_deref(),
        };
        let (head, tail) = match snap.cache_marks {
            // The system prompt as a block, marked when a breakpoint is left.
            Some(marks) => {
                let policy = self.cache_policy();
                let member: &[u8] = if marks < policy.max_breakpoints {
                    policy.ttl.member()
                } else {
                    b""
                };
                crate::render::request::cached_envelope(&fields, &self.system, &current, member)
            }
            None => crate::request_envelope(p.format(), &fields, &self.system, &current),
        };
        let mut parts = Vec::with_capacity(snap.chunks.len() + 2);
        parts.push(Bytes::from(head));
        parts.extend(snap.chunks.iter().cloned());
        parts.push(Bytes::from(tail));
        parts
    }
}

fn stream_body(parts: Vec<Bytes>) -> Body {
    Body::from_stream(futures_util::stream::iter(
        parts.into_iter().map(Ok::<_, Infallible>),
    ))
}

/// `POST /v1/context`: the request body `/respond` would send now.
pub(super) async fn context(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    let body = read_body(&state, req).await?;
    let input = parse_input(&headers, &body)?;
    let _permit = state.permit()?;
    let snap = snapshot(&state, false).await?;
    let parts = state.body_parts(&snap, &input, input.stream);
    Ok(json_response(StatusCode::OK, stream_body(parts)))
}

/// How a turn ended: the answer's JSON, or the error answered.
pub(super) type Outcome = Result<Value, ApiError>;

/// Turns running now, by idempotency key: repeats wait on them.
#[derive(Default)]
pub(super) struct InFlight {
    turns: std::sync::Mutex<HashMap<String, watch::Sender<Option<Outcome>>>>,
}

/// What to do with a request, given its key.
enum Plan {
    /// Append the `text_input` and run the turn.
    Fresh,
    /// Run the turn again on the log before its `text_input` at this offset.
    Retry(u64),
    /// Answer what the first attempt answered.
    Answered(Value),
    /// Wait for the attempt running now.
    Wait(watch::Receiver<Option<Outcome>>),
}

/// `POST /respond`.
pub(super) async fn respond(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    let body = read_body(&state, req).await?;
    let input = parse_input(&headers, &body)?;
    if state.upstream.is_none() {
        // No model to call: show the request, append nothing.
        let _permit = state.permit()?;
        let snap = snapshot(&state, false).await?;
        let mut parts = vec![Bytes::from_static(b"{\"request\":")];
        parts.extend(state.body_parts(&snap, &input, input.stream));
        let stats = stats_json(&snap.stats, state.cfg.replay.max_skips);
        parts.push(Bytes::from(format!(",\"stats\":{stats}}}")));
        return Ok(json_response(StatusCode::OK, stream_body(parts)));
    }
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

/// Looks the key up (in this process, then in the store) and claims it if
/// no attempt is running.
async fn plan_for(state: &Arc<AppState>, key: String, hash: String) -> Result<Plan, ApiError> {
    let st = state.clone();
    let r = tokio::task::spawn_blocking(move || {
        let mut turns = st.inflight.turns.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = turns.get(&key) {
            return Ok(Some(Plan::Wait(tx.subscribe())));
        }
        let store = st.store()?;
        let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
        let begin = store.begin_turn(&st.cfg.log, &key, &hash, st.cfg.idempotency_ttl)?;
        let plan = match begin {
            TurnBegin::Conflict => return Ok(None),
            TurnBegin::Seen {
                status: TurnStatus::Done(response),
                ..
            } => {
                return Ok(Some(Plan::Answered(
                    serde_json::from_str(&response).unwrap_or(Value::Null),
                )));
            }
            TurnBegin::New => Plan::Fresh,
            TurnBegin::Seen {
                input_offset: Some(o),
                ..
            } => {
                store.restart_turn(&key)?;
                Plan::Retry(o)
            }
            TurnBegin::Seen {
                input_offset: None, ..
            } => {
                store.restart_turn(&key)?;
                Plan::Fresh
            }
        };
        let (tx, _) = watch::channel(None);
        turns.insert(key, tx);
        Ok::<_, crate::Error>(Some(plan))
    })
    .await
    .map_err(|e| super::internal("state_failed", e))?;
    match r {
        Ok(None) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            "this idempotency key was used for a different request",
        )),
        Ok(Some(p)) => Ok(p),
        Err(e) => Err(super::internal("state_failed", e)),
    }
}

async fn wait_for(mut rx: watch::Receiver<Option<Outcome>>) -> Outcome {
    loop {
        if let Some(o) = rx.borrow().clone() {
            return o;
        }
        if rx.changed().await.is_err() {
            // The attempt ended without a word (its task was dropped).
            if let Some(o) = rx.borrow().clone() {
                return o;
            }
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "turn_abandoned",
                "the first attempt with this key stopped; retry",
            ));
        }
    }
}

/// The answer of a finished turn, as JSON or as a short event stream.
fn answered(v: Value, stream: bool, repeated: bool) -> Response {
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

fn sse_headers(r: &mut Response) {
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
}

pub(super) fn sse(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// Records how a keyed turn ended and wakes whoever waits on it.
async fn finish_key(state: &Arc<AppState>, key: Option<&str>, outcome: &Outcome) {
    let Some(key) = key else {
        return;
    };
    let st = state.clone();
    let key = key.to_string();
    let outcome = outcome.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let response = outcome.as_ref().ok().map(Value::to_string);
        match st.store() {
            Ok(store) => {
                let store = store.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = store.finish_turn(&key, response.as_deref()) {
                    tracing::error!(error = %e, "cannot record how a turn ended");
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot record how a turn ended"),
        }
        let mut turns = st.inflight.turns.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = turns.remove(&key) {
            let _ = tx.send(Some(outcome));
        }
    })
    .await;
}

/// A keyed turn that never started (busy): it failed before its input.
async fn forget_key(state: &Arc<AppState>, key: Option<&str>, e: &ApiError) {
    finish_key(state, key, &Err(e.clone())).await;
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
    let parts = state.body_parts(&snap, &input, input.stream);
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
            Err(_) => Err(super::internal("turn_failed", "the turn's task stopped")),
        };
    }
    match started_rx.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return match done_rx.await {
                Ok(o) => o.map(|v| answered(v, true, false)),
                Err(_) => Err(super::internal("turn_failed", "the turn's task stopped")),
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
                fresh.refresh_to(offset).map_err(super::replay_failed)?;
                let snap = super::snapshot_of(&st, &mut fresh, false, true)
                    .map_err(super::replay_failed)?;
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
            if live
                .refresh_to(offset)
                .map_err(super::replay_failed)?
                .rebuilt
            {
                *st.window.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
            let snap = if live.info().committed_bytes > offset {
                // Only if the file changed identity under us: build afresh.
                drop(live);
                let mut fresh =
                    LiveReplay::new(&st.cfg.log, st.cfg.provider.format(), st.cfg.replay.clone())
                        .with_selection(st.cfg.selection.clone());
                fresh.refresh_to(offset).map_err(super::replay_failed)?;
                super::snapshot_of(&st, &mut fresh, false, true).map_err(super::replay_failed)?
            } else {
                let s = super::snapshot_of(&st, &mut live, false, true)
                    .map_err(super::replay_failed)?;
                st.note_held(&live);
                drop(live);
                s
            };
            Ok((snap, Some(durable)))
        },
    )
    .await
    .map_err(|e| super::internal("turn_failed", e))??;
    let (snap, durable) = r;
    if let Some(d) = durable {
        writer::durable(d)
            .await
            .map_err(|e| state.append_failed(&e))?;
    }
    Ok(snap)
}

impl AppState {
    pub(super) fn count_usage(&self, u: &Usage) {
        let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        t.turns += 1;
        t.usage.add(u);
    }
}

/// Token counts summed over the turns answered since the server started.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub turns: u64,
    pub usage: Usage,
}
