//! `POST /respond` and `POST /v1/context`: the turn (see the `turn`
//! module), and the request body it would send now.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;

use crate::server::app::AppState;
use crate::server::app::snapshot::{Snapshot, add_recall, snapshot, stats_json};
use crate::server::errors::{ApiError, json_response};
use crate::server::sse::stream_body;
use crate::server::turn::{self, parse_input};

/// `POST /respond`: a turn, or without an upstream the request it would
/// send (nothing appended).
pub(crate) async fn respond(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    let (body, _held) = state.read_body(req).await?;
    let input = parse_input(&state, &headers, &body)?;
    if state.upstream.is_some() {
        return turn::respond(state, input).await;
    }
    let _permit = state.permit()?;
    let snap = recalled(&state, snapshot(&state, false).await?, &input.text).await?;
    let mut parts = vec![Bytes::from_static(b"{\"request\":")];
    parts.extend(state.body_parts(&snap, &input.current(), &input.fields));
    let stats = stats_json(&snap.stats, input.max_skips(&state));
    parts.push(Bytes::from(format!(",\"stats\":{stats}}}")));
    Ok(json_response(StatusCode::OK, stream_body(parts)))
}

/// The snapshot with its recall message, if the server recalls.
async fn recalled(
    state: &Arc<AppState>,
    mut snap: Snapshot,
    text: &str,
) -> Result<Snapshot, ApiError> {
    if state.cfg.recall.is_none() {
        return Ok(snap);
    }
    let (st, text) = (state.clone(), text.to_string());
    tokio::task::spawn_blocking(move || {
        add_recall(&st, &mut snap, &text, u64::MAX);
        snap
    })
    .await
    .map_err(|e| crate::server::errors::internal("replay_failed", e))
}

/// `POST /v1/context`: the request body `/respond` would send now.
pub(crate) async fn context(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    let (body, _held) = state.read_body(req).await?;
    let input = parse_input(&state, &headers, &body)?;
    let _permit = state.permit()?;
    let snap = recalled(&state, snapshot(&state, false).await?, &input.text).await?;
    let parts = state.body_parts(&snap, &input.current(), &input.fields);
    Ok(json_response(StatusCode::OK, stream_body(parts)))
}
