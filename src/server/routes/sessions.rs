//! `POST /v1/turn/prepare` and `POST /v1/turn/ack`: session deltas over
//! the state store (see [`crate::state`]).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use crate::Format;
use crate::server::app::AppState;
use crate::server::app::snapshot::replay_failed;
use crate::server::errors::{ApiError, internal, json_object, json_response, string_field};
use crate::state;

pub(crate) async fn turn_prepare(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let (body, _held) = state.read_body(req).await?;
    let obj = json_object(&body)?;
    let key = string_field(&obj, "session_key", "invalid_session_key")?
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_session_key",
                "`session_key` is required (a non-empty string)",
            )
        })?
        .to_string();
    let format = match string_field(&obj, "format", "invalid_format")? {
        None => Format::Xml,
        Some(f) => f
            .parse::<Format>()
            .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "invalid_format", m))?,
    };
    if format == Format::Xml && state.cfg.selection.facts {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_format",
            "the server replays facts (--facts), which have no place in the XML document: \
             ask for \"format\": \"anthropic\", \"openai\" or \"ndjson\"",
        ));
    }
    state.refuse_missing()?;
    let _permit = state.permit()?;
    let _work = state.admit_prepare()?;
    let st = state.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        let store = st.store()?;
        state::prepare(
            &store,
            &state::PrepareRequest {
                log: &st.cfg.log,
                session_key: &key,
                format,
                selection: &st.cfg.selection,
                options: &st.cfg.replay,
            },
        )
    })
    .await
    .map_err(|e| internal("prepare_failed", e))?
    .map_err(|e| match e {
        e @ crate::Error::OutOfMemory { .. } => replay_failed(e),
        e => {
            tracing::error!(error = %e, "prepare failed");
            internal("prepare_failed", e)
        }
    })?;
    Ok(json_response(StatusCode::OK, prepared.to_json()))
}

pub(crate) async fn turn_ack(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let (body, _held) = state.read_body(req).await?;
    let obj = json_object(&body)?;
    let id = string_field(&obj, "prepare_id", "invalid_prepare_id")?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_prepare_id",
                "`prepare_id` is required",
            )
        })?
        .to_string();
    let success = match string_field(&obj, "status", "invalid_status")? {
        Some("success") => true,
        Some("failed") => false,
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_status",
                "`status` must be \"success\" or \"failed\"",
            ));
        }
    };
    state.refuse_missing()?;
    let st = state.clone();
    let acked = tokio::task::spawn_blocking(move || {
        let store = st.store()?;
        let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
        store.ack(&id, success)
    })
    .await
    .map_err(|e| internal("ack_failed", e))?;
    match acked {
        Ok(a) => Ok(json_response(
            StatusCode::OK,
            json!({"ok": true, "status": if success {"success"} else {"failed"}, "position": a.position, "repeated": a.repeated}).to_string(),
        )),
        Err(e @ crate::Error::UnknownPrepare(_)) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_prepare_id",
            e.to_string(),
        )),
        Err(e) => Err(internal("ack_failed", e)),
    }
}
