//! Errors answered as JSON (`{"error": {"code", "message", …}}`) with their
//! status, and the request-reading helpers that produce them: the body read
//! within its limit and timeout, JSON objects and string fields.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};

/// An error answered as JSON with its status.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    pub(crate) upstream_status: Option<u16>,
    pub(crate) upstream_code: Option<String>,
    pub(crate) retry_after: Option<Duration>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            upstream_status: None,
            upstream_code: None,
            retry_after: None,
        }
    }

    pub(crate) fn json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(s) = self.upstream_status {
            e["upstream_status"] = json!(s);
        }
        if let Some(c) = &self.upstream_code {
            e["upstream_code"] = json!(c);
        }
        if let Some(r) = self.retry_after {
            e["retry_after"] = json!(retry_after_secs(r));
        }
        json!({ "error": e })
    }
}

/// Whole seconds to wait, rounded up (a `retry-after` header's unit).
pub(crate) fn retry_after_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.json().to_string();
        let mut r = (self.status, body).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(d) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(d)));
        }
        r
    }
}

/// Reads a request body up to `limit` bytes, within `timeout`
/// ([`Config::body_limits`](super::config::Config::body_limits)).
///
/// A body over the limit is answered 413 *after* the rest of it is read and
/// dropped (up to [`DRAIN_MAX`], within the timeout), so that a client still
/// sending reads a 413 instead of a reset connection.
pub(crate) async fn read_body(
    (limit, timeout): (usize, Duration),
    req: Request,
) -> Result<Bytes, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > DRAIN_MAX.max(limit) as u64) {
        // Too big to even drain: answer now, the connection closes.
        return Err(too_large(limit));
    }
    let mut stream = req.into_body().into_data_stream();
    let read = async {
        let mut buf = Vec::new();
        let mut seen = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_body",
                    format!("reading the body: {e}"),
                )
            })?;
            seen = seen.saturating_add(chunk.len());
            if seen > limit {
                buf = Vec::new();
                if seen > DRAIN_MAX.max(limit) {
                    break;
                }
                continue;
            }
            buf.extend_from_slice(&chunk);
        }
        if seen > limit {
            return Err(too_large(limit));
        }
        Ok(Bytes::from(buf))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request body did not arrive in time",
        )),
    }
}

/// Most of a body over the limit read (and dropped) so that its client can
/// read the 413; past it the connection is closed.
pub(crate) const DRAIN_MAX: usize = 64 << 20;

pub(crate) fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the request body is larger than {limit} bytes"),
    )
}

pub(crate) fn internal(code: &'static str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, code, e.to_string())
}

pub(crate) fn json_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    let bad = |msg: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", msg);
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(bad("the body must be a JSON object".into())),
        Err(e) => Err(bad(format!("the body is not valid JSON: {e}"))),
    }
}

pub(crate) fn string_field<'a>(
    obj: &'a serde_json::Map<String, Value>,
    name: &str,
    code: &'static str,
) -> Result<Option<&'a str>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            code,
            format!("`{name}` must be a string"),
        )),
    }
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method",
    )
}

/// A response with a JSON body.
pub(crate) fn json_response(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Longest idempotency key accepted.
pub(crate) const MAX_KEY: usize = 255;

/// A request's idempotency key: the `Idempotency-Key` header, else
/// `from_body` (a field of the body, where the route has one), checked to be
/// 1 to [`MAX_KEY`] printable ASCII characters.
pub(crate) fn idempotency_key(
    headers: &axum::http::HeaderMap,
    from_body: Option<String>,
) -> Result<Option<String>, ApiError> {
    let bad = |message: String| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_idempotency_key", message)
    };
    let from_header = match headers.get("idempotency-key") {
        None => None,
        Some(h) => Some(
            h.to_str()
                .map_err(|_| bad("the Idempotency-Key header must be printable ASCII".into()))?
                .to_string(),
        ),
    };
    let key = from_header.or(from_body);
    if let Some(k) = &key
        && (k.is_empty() || k.len() > MAX_KEY || k.bytes().any(|b| !(0x20..0x7f).contains(&b)))
    {
        return Err(bad(format!(
            "an idempotency key must be 1 to {MAX_KEY} printable ASCII characters"
        )));
    }
    Ok(key)
}
