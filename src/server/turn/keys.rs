//! Idempotency keys of turns: a repeat gets the first answer, waits for
//! the attempt running now, or retries one that failed, never appending a
//! second `text_input`.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::Value;
use tokio::sync::watch;

use crate::server::app::{AppState, Outcome};
use crate::server::errors::{ApiError, internal};
use crate::state::{TurnBegin, TurnStatus};

/// What to do with a request, given its key.
pub(super) enum Plan {
    /// Append the `text_input` and run the turn.
    Fresh,
    /// Run the turn again on the log before its `text_input` at this offset.
    Retry(u64),
    /// Answer what the first attempt answered.
    Answered(Value),
    /// Wait for the attempt running now.
    Wait(watch::Receiver<Option<Outcome>>),
}

/// Looks the key up (in this process, then in the store) and claims it if
/// no attempt is running.
pub(super) async fn plan_for(
    state: &Arc<AppState>,
    key: String,
    hash: String,
) -> Result<Plan, ApiError> {
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
    .map_err(|e| internal("state_failed", e))?;
    match r {
        Ok(None) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            "this idempotency key was used for a different request",
        )),
        Ok(Some(p)) => Ok(p),
        Err(e) => Err(internal("state_failed", e)),
    }
}

pub(super) async fn wait_for(mut rx: watch::Receiver<Option<Outcome>>) -> Outcome {
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

/// Records how a keyed turn ended and wakes whoever waits on it.
pub(super) async fn finish_key(state: &Arc<AppState>, key: Option<&str>, outcome: &Outcome) {
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
pub(super) async fn forget_key(state: &Arc<AppState>, key: Option<&str>, e: &ApiError) {
    finish_key(state, key, &Err(e.clone())).await;
}
