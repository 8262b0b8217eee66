//! The read-only routes: `GET /healthz` and `GET /v1/stats`.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::server::app::snapshot::{snapshot, stats_json};
use crate::server::app::{AppState, Totals};
use crate::server::errors::{ApiError, json_response};

pub(crate) async fn healthz() -> Response {
    json_response(StatusCode::OK, json!({"status": "ok"}).to_string())
}

/// `GET /readyz`: 200 once the log is replayed (under `--log-dir`, at
/// once: each log is replayed at its first request); 503 before, or with
/// the error if the first replay failed. A turn that comes before is not
/// refused: it waits for the replay.
pub(crate) fn readyz(ready: &std::sync::OnceLock<Result<(), String>>) -> Response {
    match ready.get() {
        Some(Ok(())) => json_response(StatusCode::OK, json!({"status": "ready"}).to_string()),
        None => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "starting", "message": "the log is being replayed"}).to_string(),
        ),
        // Why is in the server's log: a client is not told its paths.
        Some(Err(_)) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "failed", "message": "the first replay failed; the server's log says why"})
                .to_string(),
        ),
    }
}

pub(crate) async fn stats(state: Arc<AppState>, _req: Request) -> Result<Response, ApiError> {
    let _permit = state.permit()?;
    let snap = snapshot(&state, true).await?;
    let i = snap.info;
    let totals = {
        let t = state.totals.lock().unwrap_or_else(|p| p.into_inner());
        Totals {
            turns: t.turns,
            usage: t.usage,
        }
    };
    let selection = match &snap.select {
        Some(r) => serde_json::from_str::<Value>(&format!("{{{}}}", r.json_members()))
            .unwrap_or(Value::Null),
        None => Value::Null,
    };
    let body = json!({
        "log": state.cfg.log.display().to_string(),
        "id": state.id,
        "log_bytes": i.file_len,
        "stats": stats_json(&snap.stats, state.cfg.replay.max_skips),
        "selection": selection,
        "live": {
            "committed_bytes": i.committed_bytes,
            "pending_bytes": i.pending_bytes,
            "records": i.records,
            "rendered_bytes": i.rendered_bytes,
            "segments": i.segments,
            "rebuilds": i.rebuilds,
            "late_records": i.late_records,
        },
        "turns": {
            "answered": totals.turns,
            "usage": totals.usage.to_json(),
        },
        "compaction": state.cfg.compaction.as_ref().map(|c| state.compactor.json(c)),
        "logging": { "dropped_lines": crate::server::logging::dropped_log_lines() },
        "memory": {
            "budget_bytes": state.budget.total(),
            "reserved_bytes": state.budget.in_use(),
        },
    });
    #[cfg(feature = "jetstream")]
    let body = {
        let mut body = body;
        if let (Some(f), Some(id)) = (&state.fleet, &state.id) {
            body["jetstream"] = json!({
                "subject": f.subject(id),
                "synced_at_ms": state.writer().ok().and_then(|w| w.synced_at()),
                "conflicts": f.conflicts.load(std::sync::atomic::Ordering::Relaxed),
            });
        }
        body
    };
    Ok(json_response(StatusCode::OK, body.to_string()))
}
