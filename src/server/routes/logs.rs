//! `GET /v1/logs` under `--log-dir`: the logs of the directory.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use crate::server::app::logs::{Logs, Server, valid_id};
use crate::server::errors::{ApiError, internal, json_response};

/// `GET /v1/logs`: every `<id>.log` in the directory (with `--jetstream`,
/// every log of the stream), its size and whether its replay is live; to a
/// scoped token, the logs it opens.
pub(crate) async fn list(
    State(server): State<Arc<Server>>,
    granted: Option<axum::Extension<crate::server::auth::Granted>>,
) -> Result<Response, ApiError> {
    let Logs::Dir(dir) = &server.logs else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such endpoint",
        ));
    };
    let live: std::collections::HashMap<String, u64> = {
        let states = dir.states.lock().unwrap_or_else(|p| p.into_inner());
        states
            .iter()
            .map(|(k, s)| (k.clone(), s.live_bytes.load(Ordering::Relaxed)))
            .collect()
    };
    let held: u64 = live.values().sum();
    let root = dir.root.clone();
    type Entry = (String, u64, Option<u64>);
    let entries = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<Entry>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&root)? {
            let e = e?;
            let name = e.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".log")) else {
                continue;
            };
            if !valid_id(id) {
                continue;
            }
            let meta = std::fs::metadata(e.path()).ok();
            let size = meta.as_ref().map_or(0, |m| m.len());
            // When it was last written, in ms since the epoch.
            let modified = meta
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as u64);
            out.push((id.to_string(), size, modified));
        }
        out.sort();
        Ok(out)
    })
    .await
    .map_err(|e| internal("list_failed", e))?
    .map_err(|e| internal("list_failed", e))?;
    let mut logs: Vec<_> = entries
        .into_iter()
        .map(|(id, size, modified)| {
            let held = live.get(&id);
            json!({"id": id, "bytes": size, "modified_ms": modified, "live": held.is_some(), "live_bytes": held.copied().unwrap_or(0)})
        })
        .collect();
    // With --jetstream the stream says which logs there are (the files are
    // only the caches this replica has made): each with its messages.
    #[cfg(feature = "jetstream")]
    if let Some(f) = &server.shared.fleet {
        let cached: std::collections::HashMap<String, serde_json::Value> = logs
            .into_iter()
            .filter_map(|l| Some((l["id"].as_str()?.to_string(), l)))
            .collect();
        let mut all = Vec::new();
        for (id, messages) in f.logs().await.map_err(|e| {
            let mut a = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", e);
            a.retry_after = Some(std::time::Duration::from_secs(1));
            a
        })? {
            let mut l = cached
                .get(&id)
                .cloned()
                .unwrap_or_else(|| json!({"id": id, "bytes": 0, "live": false, "live_bytes": 0}));
            l["messages"] = json!(messages);
            all.push(l);
        }
        logs = all;
    }
    if let Some(axum::Extension(g)) = &granted {
        logs.retain(|l| {
            l["id"]
                .as_str()
                .is_some_and(|id| g.0.opens(id, crate::server::tokens::Access::Read))
        });
    }
    let body = json!({
        "logs": logs,
        "live_logs": live.len(),
        "live_bytes": held,
        "max_live_bytes": server.shared.cfg.max_live_bytes,
    });
    Ok(json_response(StatusCode::OK, body.to_string()))
}
