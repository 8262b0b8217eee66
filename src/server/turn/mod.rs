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
//! a repeat gets), `begin.rs` (the input appended and the replay before it), `run.rs` (the upstream calls and the answer appended),
//! `tools.rs` (the tool calls run and recorded), `memory.rs` (the memory
//! tool's commands), `compat.rs` (a turn asked for in the provider's own
//! format).

mod begin;
mod compat;
mod input;
mod keys;
mod memory;
mod run;
mod tools;

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use begin::{Begun, Failed, Prebegun, begin, begun, prebegin};
pub(crate) use compat::{client_call, client_result};
pub(crate) use input::{Compat, Input, input_fits, parse_input, request_hash};
pub(crate) use keys::{KeyPlan, plan_key};
use keys::{Plan, finish_key, plan_for, wait_for};
pub(crate) use run::continued;
use run::{close_failed, close_from_elsewhere, close_turn, run_turn};

use crate::server::app::snapshot::stats_json;
use crate::server::app::{AppState, Claim};
use crate::server::errors::{ApiError, internal, json_response};
use crate::server::sse::{sse, sse_headers, stream_body};
use crate::server::upstream::relay::relay;
use crate::server::writer;

/// Most bytes of a streamed answer held for a client that has not read
/// them; a client further behind is let go (the turn goes on).
const RELAY_LIMIT: usize = 256 << 10;

/// The work a route does on a blocking thread before its turn, in the
/// turn's own task: the turn's input, and its key looked up and claimed
/// ([`plan_key`]).
pub(crate) type Prepare =
    Box<dyn FnOnce(&Arc<AppState>) -> Result<(Input, KeyPlan), ApiError> + Send>;

/// Where a turn's task sends the client's response, once it has one.
type Reply = oneshot::Sender<Result<Response, ApiError>>;

/// Runs the turn `input` asks for on a log with an upstream, or answers
/// what its key's earlier attempt did. The turn is the server's, not the
/// connection's: it runs in a task of its own, from the key's lookup to the
/// answer recorded, and a client that goes away at any point cuts nothing.
pub(crate) async fn respond(state: Arc<AppState>, input: Input) -> Result<Response, ApiError> {
    in_own_task(|reply| own_turn(state, input, None, None, reply)).await
}

/// Runs `turn` in a task of its own and waits for the response it replies.
async fn in_own_task<F>(turn: impl FnOnce(Reply) -> F) -> Result<Response, ApiError>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (reply, response) = oneshot::channel();
    // The request's arrival goes with it: its writes share one deadline.
    tokio::spawn(writer::ARRIVED.scope(writer::arrived(), turn(reply)));
    response
        .await
        .unwrap_or_else(|_| Err(internal("turn_failed", "the turn's task stopped")))
}

/// [`respond`] for a route whose own blocking work comes first
/// (`prepare`: reading what the log holds of the request, making the
/// turn's input, claiming its key): that work, the key's claim and the
/// turn's beginning (its input appended, the replay before it) share one
/// hop to a blocking thread, in the turn's own task, so a client that goes
/// away meanwhile cuts nothing.
pub(crate) async fn respond_prepared(
    state: Arc<AppState>,
    prepare: Prepare,
) -> Result<Response, ApiError> {
    in_own_task(|reply| prepared_turn(state, prepare, reply)).await
}

async fn prepared_turn(state: Arc<AppState>, prepare: Prepare, reply: Reply) {
    let st = state.clone();
    let r = tokio::task::spawn_blocking(move || {
        let (input, planned) = prepare(&st)?;
        let pre = prebegin(&st, &input, &planned);
        Ok::<_, ApiError>((input, planned, pre))
    })
    .await
    .map_err(|e| internal("turn_failed", e));
    match r.and_then(|r| r) {
        Ok((input, planned, pre)) => own_turn(state, input, Some(planned), pre, reply).await,
        Err(e) => {
            let _ = reply.send(Err(e));
        }
    }
}

async fn own_turn(
    state: Arc<AppState>,
    input: Input,
    planned: Option<KeyPlan>,
    mut pre: Option<Prebegun>,
    reply: Reply,
) {
    // A repeat waits on the attempt running with its key; one that ended
    // without a word sends it back to the store, a few times at most.
    let mut looks = 0;
    let mut planned = planned.map(|p| p.0);
    let plan = loop {
        let plan = match (&input.key, planned.take()) {
            (_, Some(p)) => p,
            (None, None) => Ok(Plan::Fresh(None)),
            (Some(key), None) => {
                let ours = input.key_is_ours(&state);
                plan_for(&state, key.clone(), input.hash(), ours).await
            }
        };
        looks += 1;
        match plan {
            Ok(Plan::Wait(rx)) => match wait_for(rx).await {
                Some(outcome) => {
                    let _ = reply.send(outcome.map(|v| input.answered(v, true)));
                    return;
                }
                None if looks < 3 => continue,
                None => {
                    let _ = reply.send(Err(keys::abandoned()));
                    return;
                }
            },
            Ok(p) => break p,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        }
    };
    match plan {
        Plan::Answered(v) => {
            let _ = reply.send(Ok(input.answered(v, true)));
        }
        Plan::Wait(_) => unreachable!("waited on above"),
        Plan::Close(claim) => {
            let outcome = close_turn(&state, &input).await;
            finish_key(&state, &input, Some(claim), &outcome).await;
            let _ = reply.send(outcome.map(|v| input.answered(v, true)));
        }
        Plan::Fresh(claim) => run_owned(state, input, None, claim, pre.take(), reply).await,
        Plan::Retry(offset, claim) => {
            run_owned(state, input, Some(offset), Some(claim), None, reply).await
        }
    }
}

impl Input {
    /// The answer of a finished turn as this input's client reads it: the
    /// server's JSON or short event stream, or the provider's own shapes.
    pub(crate) fn answered(&self, v: Value, repeated: bool) -> Response {
        match &self.compat {
            None => answered(v, self.stream, repeated),
            Some(c) => compat::answered(c, v, self.stream, repeated),
        }
    }
}

/// The answer of a finished turn, as JSON or as a short event stream.
pub(crate) fn answered(mut v: Value, stream: bool, repeated: bool) -> Response {
    let repeated = run::take_replayed(&mut v) || repeated;
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
/// log as it stood before it, calls the upstream and records the answer;
/// the client's response goes to `reply` as soon as it is known (a stream:
/// once the upstream's answer begins).
async fn run_owned(
    state: Arc<AppState>,
    input: Input,
    retry: Option<u64>,
    claim: Option<Claim>,
    pre: Option<Prebegun>,
    reply: Reply,
) {
    let began = std::time::Instant::now();
    let (permit, begun) = match pre {
        Some(p) => (p.permit, self::begun(&state, p.begun).await),
        None => match state.permit() {
            Ok(p) => (p, begin(&state, &input, retry).await),
            Err(e) => {
                finish_key(&state, &input, claim, &Err(e.clone())).await;
                let _ = reply.send(Err(e));
                return;
            }
        },
    };
    let (mut snap, before) = match begun {
        Ok(Begun::Replayed(snap, offset)) => (*snap, offset),
        // Another replica wrote this key's input: its close (waited for
        // while that attempt may still run), or the turn closed as
        // interrupted (as a crashed attempt is).
        Ok(Begun::Elsewhere) => {
            drop(permit);
            let outcome = match close_from_elsewhere(&state, &input).await {
                Some(v) => Ok(v),
                None => close_turn(&state, &input).await,
            };
            finish_key(&state, &input, claim, &outcome).await;
            let _ = reply.send(outcome.map(|v| input.answered(v, true)));
            return;
        }
        Err(Failed { error: e, wrote }) => {
            // The turn's input (or what continues it) is in the log: closed
            // there, as a turn whose upstream call failed is.
            if wrote {
                close_failed(&state, &input, &e, "").await;
            }
            finish_key(&state, &input, claim, &Err(e.clone())).await;
            let _ = reply.send(Err(e));
            return;
        }
    };
    let parts = match &input.compat {
        Some(Compat {
            system: Some(system),
            ..
        }) => state.body_parts_with(&snap, &input.current(), &input.fields, system),
        _ => state.body_parts(&snap, &input.current(), &input.fields),
    };
    let stats = stats_json(&snap.stats, input.max_skips(&state));
    let scope = tools::ToolScope {
        before,
        held: Arc::new(std::mem::take(&mut snap.held)),
    };
    drop(snap);
    let stream = input.stream;
    let (relay, mut body) = match stream {
        true => {
            let (mut r, b) = relay(RELAY_LIMIT);
            r.raw = input.compat.as_ref().map(|c| c.provider);
            r.drop_usage_chunk = input.compat.as_ref().is_some_and(|c| !c.wants_usage);
            r.responses = input.compat.as_ref().is_some_and(|c| c.responses.is_some());
            (Some(r), Some(b))
        }
        false => (None, None),
    };
    let (started_tx, started_rx) = oneshot::channel();
    let mut reply = Some(reply);
    // The client's response as soon as the upstream's answer begins.
    let forward = async {
        match started_rx.await {
            Ok(Ok(())) => {
                if let (Some(r), Some(b)) = (reply.take(), body.take()) {
                    let mut resp = Response::new(b.into_body());
                    sse_headers(&mut resp);
                    let _ = r.send(Ok(resp));
                }
            }
            Ok(Err(e)) => {
                if let Some(r) = reply.take() {
                    let _ = r.send(Err(e));
                }
            }
            Err(_) => {}
        }
    };
    let run = async {
        match input.compat {
            Some(_) => compat::run_compat(&state, &input, parts, relay, started_tx).await,
            None => run_turn(&state, &input, parts, stats, relay, started_tx, scope).await,
        }
    };
    let (outcome, ()) = tokio::join!(run, forward);
    finish_key(&state, &input, claim, &outcome).await;
    metrics::counter!(
        "wmreplay_turns_total",
        "outcome" => if outcome.is_ok() { "answered" } else { "failed" }
    )
    .increment(1);
    metrics::histogram!("wmreplay_turn_duration_seconds").record(began.elapsed().as_secs_f64());
    drop(permit);
    if let Some(r) = reply.take() {
        let _ = r.send(outcome.map(|v| input.answered(v, false)));
    }
}
