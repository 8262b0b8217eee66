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
use serde_json::value::RawValue;

use crate::server::app::AppState;
use crate::server::app::facts::current;
use crate::server::app::writes::{check_key, write_fact};
use crate::server::errors::{ApiError, internal, json_response};

/// `PUT …/facts/{key}` (the body: the value, any JSON) or, with `value`
/// `None`, `DELETE …/facts/{key}` (see `app::writes::write_fact`).
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
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_json",
                    format!("the body is the fact's value, which must be JSON: {e}"),
                )
            })?;
            // Only ASCII whitespace goes: still UTF-8.
            String::from_utf8(crate::append::compact(raw.get().as_bytes()))
                .map_err(|e| internal("invalid_json", e))?
        }
    };
    let body = write_fact(&state, &key, &value).await?;
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
