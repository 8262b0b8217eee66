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
//! a repeat gets), `run.rs` (the upstream calls and the answer appended),
//! `tools.rs` (the tool calls run and recorded), `memory.rs` (the memory
//! tool's commands), `compat.rs` (a turn asked for in the provider's own
//! format).

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

pub(crate) use compat::{client_call, client_result};
pub(crate) use input::{Compat, Input, input_fits, parse_input, request_hash};
use keys::{Plan, finish_key, plan_for, wait_for};
pub(crate) use run::continued;
use run::{close_from_elsewhere, close_turn, run_turn};

use crate::server::app::snapshot::{
    Snapshot, add_recall, replay_failed, snapshot_within, stats_json,
};
use crate::server::app::{AppState, Claim};
use crate::server::errors::{ApiError, internal, json_response};
use crate::server::sse::{sse, sse_headers, stream_body};
use crate::server::upstream::relay::relay;
use crate::server::writer::{self, Line};

/// Most bytes of a streamed answer held for a client that has not read
/// them; a client further behind is let go (the turn goes on).
const RELAY_LIMIT: usize = 256 << 10;

/// The work a route does on a blocking thread before its turn, in the
/// turn's own task: the turn's input, and its key looked up and claimed
/// ([`plan_key`]).
pub(crate) type Prepare =
    Box<dyn FnOnce(&Arc<AppState>) -> Result<(Input, KeyPlan), ApiError> + Send>;

/// What a keyed turn's key was found to be, looked up and claimed on a
/// blocking thread by the route ([`plan_key`]).
pub(crate) struct KeyPlan(Result<Plan, ApiError>);

/// Looks `key` up and claims it as [`respond`] would, on the calling
/// (blocking) thread; `ours` as [`Input::key_is_ours`].
pub(crate) fn plan_key(st: &Arc<AppState>, key: &str, hash: &str, ours: bool) -> KeyPlan {
    KeyPlan(keys::plan_blocking(st, key, hash, ours))
}

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

/// Begins a turn whose key was just claimed fresh, on the blocking thread
/// that claimed it. `None` (the turn begins later, in its own hop) for
/// any other plan, or without a permit (refused there, as usual).
fn prebegin(st: &Arc<AppState>, input: &Input, planned: &KeyPlan) -> Option<Prebegun> {
    if !matches!(planned.0, Ok(Plan::Fresh(_))) {
        return None;
    }
    let permit = st.permit().ok()?;
    let args = BeginArgs::of(st, input, None);
    let begun = args.admit(st).and_then(|held| {
        let _held = held;
        begin_blocking(st, args)
    });
    Some(Prebegun { permit, begun })
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
        Err(e) => {
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
/// What [`begin`] found.
enum Begun {
    /// The replay before the turn's input, and the input's offset.
    Replayed(Box<Snapshot>, u64),
    /// The key's input was written by another replica (a log kept in a
    /// stream): this attempt is a retry whose first attempt ran elsewhere.
    Elsewhere,
}

/// Records that `key`'s turn has its input at `offset`: durably (`wait`),
/// synced with the other turns recording theirs now, outside the store's
/// lock; or (a key the server made) committed, made durable with the
/// turn's end ([`finish_key`]). With `new` (the request's hash), the key
/// is recorded here (a key only this process claims, [`keys::plan_for`]).
fn record_input(st: &AppState, key: &str, offset: u64, wait: bool, new: Option<&str>) {
    let recorded = st.store().and_then(|s| {
        let ticket = (s.lock().unwrap_or_else(|p| p.into_inner())).note_turn_input(
            &st.cfg.log,
            key,
            offset,
            new,
        )?;
        match wait && st.cfg.fsync {
            true => ticket.wait(),
            false => Ok(()),
        }
    });
    if let Err(e) = recorded {
        tracing::error!(error = %e, "cannot record a turn's input offset");
    }
}

/// The message name of a keyed turn's input in a log kept in a stream.
pub(crate) fn input_name(key: &str) -> String {
    format!("turn:{key}:input")
}

/// What the blocking part of [`begin`] returns: the replay before the
/// turn's input, the input's offset and (when it was written now) the
/// acknowledgement to wait for; `None` when another replica wrote it.
type BegunBlocking = Option<(Snapshot, u64, Option<writer::Durable>)>;

/// A turn begun by the route's own blocking task ([`prepare_and_begin`]):
/// its permit and what [`begin_blocking`] returned.
pub(crate) struct Prebegun {
    permit: tokio::sync::OwnedSemaphorePermit,
    begun: Result<BegunBlocking, ApiError>,
}

/// What a turn needs to begin, taken from its input.
struct BeginArgs {
    retry: Option<u64>,
    continues: bool,
    before: Vec<Line>,
    after: Vec<Line>,
    key: Option<String>,
    made: bool,
    ours: bool,
    text: String,
    hash: String,
    budget: Option<u64>,
    sid: Option<String>,
    line: Line,
}

impl BeginArgs {
    fn of(state: &AppState, input: &Input, retry: Option<u64>) -> BeginArgs {
        // A request that continues a turn the log holds (a client's tool
        // results): the records it brings are appended, and the replay is
        // the log before the turn's input, as for a retry.
        let held_input = input.compat.as_ref().and_then(|c| c.input);
        let (retry, continues) = match (retry, held_input) {
            (None, Some(offset)) => (Some(offset), true),
            (r, _) => (r, false),
        };
        let (before, after) = match &input.compat {
            Some(c) => (c.before.clone(), c.after.clone()),
            None => (Vec::new(), Vec::new()),
        };
        BeginArgs {
            retry,
            continues,
            before,
            after,
            key: input.key.clone(),
            made: input.made_key(),
            ours: input.key_is_ours(state),
            text: input.text.clone(),
            hash: input.hash(),
            budget: input.window(),
            sid: input.session_id.clone(),
            line: Line::turn("text_input", input.session_id.as_deref(), &input.text, None),
        }
    }

    /// The memory the replay needs, from the budget.
    fn admit(&self, state: &AppState) -> Result<crate::server::app::budget::Reserved, ApiError> {
        match self.retry {
            Some(offset) => state.admit_fresh_replay(offset),
            None => state.admit_replay(),
        }
    }
}

/// The replay the turn's request is made of: the log before the turn's
/// `text_input`, which is appended here unless this is a retry of a turn
/// whose input is already at `retry`; and the input's offset.
async fn begin(
    state: &Arc<AppState>,
    input: &Input,
    retry: Option<u64>,
) -> Result<Begun, ApiError> {
    let args = BeginArgs::of(state, input, retry);
    let held = args.admit(state)?;
    let st = state.clone();
    let r = tokio::task::spawn_blocking(move || {
        let _held = held;
        begin_blocking(&st, args)
    })
    .await
    .map_err(|e| internal("turn_failed", e))?;
    begun(state, r).await
}

/// [`begin`]'s end: waits for the input's acknowledgement.
async fn begun(
    state: &Arc<AppState>,
    r: Result<BegunBlocking, ApiError>,
) -> Result<Begun, ApiError> {
    let Some((snap, offset, durable)) = r? else {
        return Ok(Begun::Elsewhere);
    };
    if let Some(d) = durable {
        writer::durable(d)
            .await
            .map_err(|e| state.append_failed(&e))?;
    }
    Ok(Begun::Replayed(Box::new(snap), offset))
}

/// [`begin`]'s work on a blocking thread.
fn begin_blocking(st: &Arc<AppState>, args: BeginArgs) -> Result<BegunBlocking, ApiError> {
    let BeginArgs {
        retry,
        continues,
        before,
        after,
        key,
        made,
        ours,
        text,
        hash,
        budget,
        sid,
        line,
    } = args;
    if let Some(offset) = retry {
        if continues {
            if !after.is_empty() {
                let w = st.writer().map_err(|e| st.append_failed(&e))?;
                w.append_blocking(after).map_err(|e| st.append_failed(&e))?;
            }
            if let Some(k) = &key {
                record_input(st, k, offset, !made, ours.then_some(hash.as_str()));
            }
        }
        // The live state has moved on: replay the log's prefix afresh.
        let mut fresh = st.cfg.live();
        fresh.refresh_to(offset).map_err(replay_failed)?;
        let mut snap = snapshot_within(st, &mut fresh, false, true, budget, sid.as_deref())
            .map_err(replay_failed)?;
        add_recall(st, &mut snap, &text, offset);
        return Ok(Some((snap, offset, None)));
    }
    // Hold the replay while the line is written: nothing else brings
    // it past the line before this turn's snapshot is taken.
    let mut live = st.live.lock().unwrap_or_else(|p| p.into_inner());
    let w = st.writer().map_err(|e| st.append_failed(&e))?;
    // In a log kept in a stream a keyed input is named, so that a
    // retry through another replica finds it instead of writing it
    // twice.
    // The client's history the log lacks, the input, and the
    // turn's tool calls and results the log lacks, in one batch.
    let at = before.len();
    let mut lines = before;
    lines.push(line);
    lines.extend(after);
    let mut recorded_input = false;
    let (appended, durable) = match key.as_deref().filter(|_| w.synced_at().is_some()) {
        Some(k) => {
            let named = tokio::runtime::Handle::current()
                .block_on(w.append_named(lines, input_name(k), Some(hash.clone()), None))
                .map_err(|e| {
                    if crate::server::writer::KeyReused::of(&e) {
                        ApiError::new(
                            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                            "idempotency_key_reused",
                            "this Idempotency-Key was used with another request",
                        )
                    } else {
                        st.append_failed(&e)
                    }
                })?;
            if named.existed {
                return Ok(None);
            }
            (named.appended, writer::durable_already())
        }
        // A turn keyed by its client has its input on disk before
        // its model is called (the key maps to it durably); an
        // unkeyed one, or one keyed by the server, is made durable
        // with its answer (or the record that closes the turn),
        // which is what acknowledges it.
        None if key.is_some() && !made => {
            w.append_blocking(lines).map_err(|e| st.append_failed(&e))?
        }
        // A key only this process claims has its row written with its
        // input, in the writer's own step.
        None => {
            let appended = match key.as_deref().filter(|_| ours) {
                Some(k) => {
                    let input = writer::InputKey {
                        key: k.to_string(),
                        hash: hash.clone(),
                        line: at,
                    };
                    let (appended, recorded) = w
                        .append_unsynced_recording(lines, input)
                        .map_err(|e| st.append_failed(&e))?;
                    recorded_input = recorded;
                    appended
                }
                None => w.append_unsynced(lines).map_err(|e| st.append_failed(&e))?,
            };
            (appended, writer::durable_already())
        }
    };
    let offset = appended[at].offset;
    if let Some(k) = key.as_deref().filter(|_| !recorded_input) {
        record_input(st, k, offset, !made, ours.then_some(hash.as_str()));
    }
    if live.refresh_to(offset).map_err(replay_failed)?.rebuilt {
        *st.window.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
    let mut snap = if live.info().committed_bytes > offset {
        // Only if the file changed identity under us: build afresh.
        drop(live);
        let mut fresh = st.cfg.live();
        fresh.refresh_to(offset).map_err(replay_failed)?;
        snapshot_within(st, &mut fresh, false, true, budget, sid.as_deref())
            .map_err(replay_failed)?
    } else {
        let s = snapshot_within(st, &mut live, false, true, budget, sid.as_deref())
            .map_err(replay_failed)?;
        st.note_held(&live);
        drop(live);
        s
    };
    add_recall(st, &mut snap, &text, offset);
    Ok(Some((snap, offset, Some(durable))))
}
