//! The replayed log as the routes see it: a [`Snapshot`] (the selection
//! applied to the live replay, brought up to date), and the read-only
//! routes built on it, `GET /healthz` and `GET /v1/stats`.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use super::errors::{ApiError, json_response};
use super::{AppState, turn};
use crate::{LiveInfo, LiveReplay, ReplayStats, SelectReport};

/// The replayed log, brought up to date.
pub(super) struct Snapshot {
    pub(super) chunks: Vec<Bytes>,
    pub(super) stats: ReplayStats,
    pub(super) info: LiveInfo,
    pub(super) select: Option<SelectReport>,
    /// With Anthropic cache breakpoints: how many the messages carry.
    pub(super) cache_marks: Option<usize>,
}

/// The selection applied to `live` as it stands. `report`: also find the
/// pending prompt (and report the selection) when the selection does not
/// ask for it. With Anthropic cache breakpoints, `commit` keeps this
/// request's marks for the next one (a turn); without it (a preview) the
/// next request is placed as if this one had not been made.
pub(super) fn snapshot_of(
    st: &AppState,
    live: &mut LiveReplay,
    report: bool,
    commit: bool,
) -> Result<Snapshot, crate::Error> {
    let sel = &st.cfg.selection;
    let mut cache_marks = None;
    let (chunks, select) = if sel.is_everything() && !report && !st.marks_cache() {
        (live.chunks(), None)
    } else {
        let mut window = st.window.lock().unwrap_or_else(|p| p.into_inner());
        let (chunks, report) = if st.marks_cache() {
            let mut slot = st.cache.lock().unwrap_or_else(|p| p.into_inner());
            let mut memory = *slot;
            let (chunks, report, marks) =
                live.select_cached(sel, *window, &st.cache_policy(), &mut memory)?;
            if commit {
                *slot = memory;
            }
            cache_marks = Some(marks);
            (chunks, report)
        } else {
            live.select(sel, *window)?
        };
        if sel.trim_to.is_some() && report.window_start != *window {
            *window = report.window_start;
            let store = st.store()?;
            let store = store.lock().unwrap_or_else(|p| p.into_inner());
            store.set_window_start(&st.cfg.log, &sel.window_key(), report.window_start)?;
        }
        (chunks, Some(report))
    };
    Ok(Snapshot {
        chunks,
        stats: live.stats().clone(),
        info: live.info(),
        select,
        cache_marks,
    })
}

pub(super) fn replay_failed(e: crate::Error) -> ApiError {
    tracing::error!(error = %e, "replay failed");
    match e {
        // The server keeps serving; this log needs more memory than there is.
        crate::Error::OutOfMemory { .. } => ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_memory",
            e.to_string(),
        ),
        e => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "replay_failed",
            e.to_string(),
        ),
    }
}

/// The log replayed up to its end.
pub(super) async fn snapshot(state: &Arc<AppState>, report: bool) -> Result<Snapshot, ApiError> {
    let st = state.clone();
    let res = tokio::task::spawn_blocking(move || {
        let mut live = st.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.refresh()?.rebuilt {
            // Another file now: a remembered window start means nothing.
            *st.window.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        let snap = snapshot_of(&st, &mut live, report, false);
        st.note_held(&live);
        snap
    })
    .await;
    match res {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(replay_failed(e)),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "replay_failed",
            format!("the replay task failed: {e}"),
        )),
    }
}

pub(super) fn stats_json(stats: &ReplayStats, max_skips: usize) -> Value {
    serde_json::from_str(&stats.to_json(max_skips)).expect("stats are JSON")
}

pub(super) async fn healthz() -> Response {
    json_response(StatusCode::OK, json!({"status": "ok"}).to_string())
}

pub(super) async fn stats(state: Arc<AppState>, _req: Request) -> Result<Response, ApiError> {
    let _permit = state.permit()?;
    let snap = snapshot(&state, true).await?;
    let i = snap.info;
    let totals = {
        let t = state.totals.lock().unwrap_or_else(|p| p.into_inner());
        turn::Totals {
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
    });
    Ok(json_response(StatusCode::OK, body.to_string()))
}
