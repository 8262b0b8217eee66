//! Idempotency keys of turns: a repeat gets the first answer, waits for
//! the attempt running now, or retries one that failed, never appending a
//! second `text_input` and never calling the upstream twice for a turn
//! whose outcome is unknown.
//!
//! The key's state lives in two places: the state store (a key, its
//! request's hash, where its `text_input` is, and its answer once known:
//! durable before the model is called for a client's key; for one the
//! server made from the conversation, written in the journal steps of the
//! turn's records and durable with the store's next sync:
//! `BatchKey::made`) and
//! the server's map of running turns (which outlives a log state evicted
//! from memory). A key found running in the store but in no running task —
//! its process stopped, or its task died — is *interrupted*: the upstream
//! may have been called, so it is not called again; the turn is closed with
//! an `interrupted` answer instead (see [`Plan::Close`]).

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::Value;
use tokio::sync::watch;

use crate::server::app::{AppState, Claim, Claimed, Outcome};
use crate::server::errors::{ApiError, internal};
use crate::state::{TurnBegin, TurnStatus};

/// What to do with a request, given its key.
pub(crate) enum Plan {
    /// Append the `text_input` and run the turn.
    Fresh(Option<Claim>),
    /// Run the turn again on the log before its `text_input` at this offset
    /// (its last attempt failed: the upstream gave no answer).
    Retry(u64, Claim),
    /// Close the turn whose `text_input` is in the log: its attempt was cut
    /// (a crash, a `kill -9`) with its outcome unknown.
    Close(Claim),
    /// Answer what the first attempt answered.
    Answered(Value),
    /// Wait for the attempt running now.
    Wait(watch::Receiver<Option<Outcome>>),
}

/// What a keyed turn's key was found to be, looked up and claimed on a
/// blocking thread by the route ([`plan_key`]).
pub(crate) struct KeyPlan(pub(super) Result<Plan, ApiError>);

/// Looks `key` up and claims it as a turn would, on the calling (blocking)
/// thread; `ours` as [`Input::key_is_ours`](super::Input::key_is_ours).
pub(crate) fn plan_key(st: &Arc<AppState>, key: &str, hash: &str, ours: bool) -> KeyPlan {
    KeyPlan(plan_blocking(st, key, hash, ours))
}

/// Looks the key up (among the running turns, then in the store) and claims
/// it if no attempt is running. A key that is `ours` (only this process
/// claims it: [`Input::key_is_ours`](super::input::Input::key_is_ours)) is
/// claimed in memory alone; its row is written with the turn's input.
pub(super) async fn plan_for(
    state: &Arc<AppState>,
    key: String,
    hash: String,
    ours: bool,
) -> Result<Plan, ApiError> {
    let st = state.clone();
    tokio::task::spawn_blocking(move || plan_blocking(&st, &key, &hash, ours))
        .await
        .map_err(|e| internal("state_failed", e))?
}

/// [`plan_for`] on the calling thread, which may block (a blocking task's:
/// a route that has one already running, as the provider routes' history
/// lookup, plans its key there rather than in another hop).
pub(crate) fn plan_blocking(
    st: &Arc<AppState>,
    key: &str,
    hash: &str,
    ours: bool,
) -> Result<Plan, ApiError> {
    // A missing log that may not be made gets no state store either.
    st.refuse_missing()?;
    let r = {
        st.turns.claim(&st.cfg.log, key, || {
            let store = st.store()?;
            let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
            let (log, ttl) = (&st.cfg.log, st.cfg.idempotency_ttl);
            let begin = match ours {
                true => store.peek_turn(log, key, hash, ttl)?,
                false => store.begin_turn(log, key, hash, ttl)?,
            };
            let step = match begin {
                TurnBegin::Conflict => Step::Conflict,
                TurnBegin::Seen {
                    status: TurnStatus::Done(response),
                    ..
                } => Step::Answered(serde_json::from_str(&response).unwrap_or(Value::Null)),
                TurnBegin::New => Step::Fresh,
                TurnBegin::Seen {
                    status,
                    input_offset: Some(o),
                } => {
                    store.restart_turn(key)?;
                    match status {
                        // Failed: the upstream answered an error, so no
                        // answer exists; another attempt is safe.
                        TurnStatus::Failed => Step::Retry(o),
                        // Running here but in no task, or in a process that
                        // has stopped: the upstream may have answered.
                        _ => Step::Close,
                    }
                }
                TurnBegin::Seen {
                    input_offset: None, ..
                } => {
                    // Nothing was appended, so the upstream was never called.
                    store.restart_turn(key)?;
                    Step::Fresh
                }
            };
            let claim = matches!(step, Step::Fresh | Step::Retry(_) | Step::Close);
            Ok((step, claim))
        })
    }
    .map_err(|e| internal("state_failed", e))?;
    Ok(match r {
        Claimed::Running(rx) => Plan::Wait(rx),
        Claimed::Not(Step::Answered(v)) => Plan::Answered(v),
        Claimed::Not(_) => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this idempotency key was used for a different request",
            ));
        }
        Claimed::Mine(Step::Fresh, c) => Plan::Fresh(Some(c)),
        Claimed::Mine(Step::Retry(o), c) => Plan::Retry(o, c),
        Claimed::Mine(Step::Close, c) => Plan::Close(c),
        Claimed::Mine(..) => unreachable!("only these steps claim"),
    })
}

/// What the store says of a key.
enum Step {
    Conflict,
    Answered(Value),
    Fresh,
    Retry(u64),
    Close,
}

/// The outcome of the attempt running with a key; `None` when it ended
/// without a word (its claim let go after a look at the store, or its task
/// died): the store says what became of it.
pub(super) async fn wait_for(mut rx: watch::Receiver<Option<Outcome>>) -> Option<Outcome> {
    loop {
        if let Some(o) = rx.borrow().clone() {
            return Some(o);
        }
        if rx.changed().await.is_err() {
            return rx.borrow().clone();
        }
    }
}

/// What a repeat is answered when the attempts it waited on kept ending
/// without a word.
pub(super) fn abandoned() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "turn_abandoned",
        "the attempt with this key stopped; retry with the same key to learn its outcome",
    )
}

/// Records how a keyed turn ended, then wakes whoever waits on it. A key
/// the server made (`made`) has its input recorded unsynced: it is made
/// durable here, with the turn's end, before anyone is told. A key the
/// closing batch `answered` (in the same step that made it durable) has
/// nothing left to record.
pub(super) async fn finish_key(
    state: &Arc<AppState>,
    input: &super::input::Input,
    claim: Option<Claim>,
    outcome: &Outcome,
) {
    let (made, answered) = (input.made_key(), input.key_answered());
    let key = input.key.as_deref();
    if let Some(key) = key.filter(|_| !(answered && outcome.is_ok())) {
        let st = state.clone();
        let key = key.to_string();
        let response = outcome.as_ref().ok().map(Value::to_string);
        // Another replica's key for another request: this store must not
        // keep this request's, or the key's own retries would be refused.
        let reused = matches!(outcome, Err(e) if e.code == "idempotency_key_reused");
        let _ = tokio::task::spawn_blocking(move || {
            let recorded = st.store().and_then(|store| {
                let store = store.lock().unwrap_or_else(|p| p.into_inner());
                if reused {
                    return store.forget_turn(&key);
                }
                store.finish_turn(&key, response.as_deref())?;
                let ticket = store.sync_ticket();
                drop(store);
                ticket.wait_if(made && st.cfg.fsync)
            });
            if let Err(e) = recorded {
                tracing::error!(error = %e, "cannot record how a turn ended");
            }
        })
        .await;
    }
    if let Some(c) = claim {
        c.release(outcome);
    }
}
