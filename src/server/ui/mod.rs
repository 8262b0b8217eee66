//! The memory inspector: a read-only page served at `/ui` (`serve --ui`),
//! its HTML, script and style embedded in the binary (no build step, no
//! other host: it works offline). The page reads the routes of
//! `routes/inspect.rs` and `routes/turn_view.rs`, `…/stats`, `…/search`
//! and `/v1/logs`, with the bearer token the user types (kept in the tab's
//! session storage, never in a URL). A strict content security policy
//! allows only this server's own scripts, styles and requests, so a record
//! that holds HTML cannot run anything even if it were ever written as
//! markup (the script writes every record as text).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");
const ICON: &str = include_str!("icon.svg");

/// What the page is served with: nothing but this server's own.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

pub(crate) async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

pub(crate) async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

pub(crate) async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}

pub(crate) async fn icon() -> Response {
    asset(ICON, "image/svg+xml")
}

/// `GET /ui/info`: how the page reaches the logs (one log, or each under
/// `/v1/logs/{id}`) and whether it needs a token. Nothing about the logs.
pub(crate) fn info(dir: bool, auth: bool) -> Response {
    let body = json!({
        "logs": if dir { "dir" } else { "one" },
        "auth": auth,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let mut r = crate::server::errors::json_response(StatusCode::OK, body.to_string());
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
