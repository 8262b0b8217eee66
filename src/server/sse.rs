//! Server-sent events as the server relays them: one event's bytes, and the
//! headers of an event stream.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

/// A body of `parts`, sent as they are.
pub(crate) fn stream_body(parts: Vec<Bytes>) -> Body {
    Body::from_stream(futures_util::stream::iter(
        parts.into_iter().map(Ok::<_, Infallible>),
    ))
}

/// One event: `event: NAME` and its JSON data.
pub(crate) fn sse(event: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// Marks `r` as an event stream that is never cached.
pub(crate) fn sse_headers(r: &mut Response) {
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
}
