//! `PUT /v1/facts/{key}`, `DELETE /v1/facts/{key}` and `GET /v1/facts`:
//! keyed memory kept as `wm_fact` records of the log. A write is one record
//! appended through the log's one writer (`{"ts_ms":…,"type":"wm_fact",
//! "key":K,"value":V}`, `"value": null` for a delete); the current facts are
//! what `--facts` renders: the latest value of every live key, in byte
//! order of the keys, read from the whole log.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;
use serde_json::value::RawValue;

use crate::server::app::AppState;
use crate::server::app::compact::compact_soon;
use crate::server::app::facts::{current, fact_record, newest_ts, unreadable};
use crate::server::errors::{ApiError, internal, json_response};
use crate::server::writer::Line;

/// Longest key accepted, in bytes.
const MAX_KEY: usize = 256;

fn bad(code: &'static str, message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, message)
}

fn check_key(key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_KEY || key.chars().any(char::is_control) {
        return Err(bad(
            "invalid_key",
            format!("a fact's key is 1 to {MAX_KEY} bytes without control characters"),
        ));
    }
    Ok(())
}

/// `PUT …/facts/{key}` (the body: the value, any JSON) or, with `value`
/// `None`, `DELETE …/facts/{key}`.
pub(crate) async fn write(
    state: Arc<AppState>,
    key: String,
    req: Option<Request>,
) -> Result<Response, ApiError> {
    check_key(&key)?;
    let value = match req {
        None => "null".to_string(),
        Some(req) => {
            let (body, _held) = state.read_body(req).await?;
            let raw: &RawValue = serde_json::from_slice(&body).map_err(|e| {
                bad(
                    "invalid_json",
                    format!("the body is the fact's value, which must be JSON: {e}"),
                )
            })?;
            // Only ASCII whitespace goes: still UTF-8.
            String::from_utf8(crate::append::compact(raw.get().as_bytes()))
                .map_err(|e| internal("invalid_json", e))?
        }
    };
    let record = fact_record(&key, &value);
    // Acknowledged only if a replay reads it, as /v1/records checks.
    if let Some(why) = unreadable(&record, state.cfg.replay.max_depth) {
        return Err(bad(
            "invalid_record",
            format!("the fact would not replay: {why}"),
        ));
    }
    if record.len() > state.cfg.max_record_bytes {
        return Err(bad(
            "record_too_large",
            format!(
                "the fact is {} bytes, more than the limit of {} (--max-record-bytes)",
                record.len(),
                state.cfg.max_record_bytes
            ),
        ));
    }
    let _permit = state.permit()?;
    // Stamped no lower than the key's newest fact, so it wins whatever
    // `ts_ms` an earlier record of the key was given. One at a time with
    // the memory tool's edits (its files are keys too).
    let _one = state.memory.lock().await;
    let floor = newest_ts(&state, vec![key.clone()]).await?;
    let written = match state.writer() {
        Ok(w) => {
            w.append(vec![Line::stamped_object(&record).at_least(floor)])
                .await
        }
        Err(e) => Err(e),
    };
    let appended = written.map_err(|e| state.append_failed(&e))?;
    compact_soon(&state);
    let a = appended
        .first()
        .ok_or_else(|| internal("append_failed", "no line written"))?;
    let body = json!({
        "key": key,
        "deleted": value == "null",
        "ts_ms": a.ts_ms,
        "offset": a.offset,
        "bytes": a.len,
    });
    Ok(json_response(StatusCode::OK, body.to_string()))
}

/// `GET …/facts`: `{"facts":{…}}` (see `app::facts::current`).
pub(crate) async fn read(state: Arc<AppState>, _req: Request) -> Result<Response, ApiError> {
    let _permit = state.permit()?;
    let facts = current(&state).await?;
    Ok(json_response(
        StatusCode::OK,
        format!("{{\"facts\":{facts}}}"),
    ))
}
