//! Access control: with `--auth-token-env VAR`, every route but `/healthz`
//! requires `Authorization: Bearer <token>` (the scheme's name in any case,
//! `bearer` or `BEARER` too, as RFC 7235 has it). The token is compared in
//! constant time (by `subtle`) and never logged; a missing or wrong one is
//! a 401 JSON error. On the provider-compatible endpoints the token is the
//! client's API key as its SDK sends it: `Authorization: Bearer`, or
//! `x-api-key` (Anthropic's), and the 401 is in the provider's shape.
//!
//! With `--token-file`, a token of the file opens only the logs its line
//! names (`tokens.rs`), to read or to write: a request for another log, a
//! write with a read token, or `/metrics` without an admin token is a 403
//! that names nothing but the refusal. The route says which log a request
//! is for (`/v1/logs/{id}/…`, or the one `--log`) and whether it writes
//! (every method but `GET`, except `search` and `context`, which only
//! read; MCP writes). `GET /v1/logs` lists the logs the token opens.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use std::sync::Arc;

use axum::http::Method;

use super::errors::ApiError;
use super::tokens::{Access, Grant, Tokens};
use super::upstream::ApiKey;

/// Who may use the server: the one token of `--auth-token-env` (every log),
/// and the scoped tokens of `--token-file`.
#[derive(Clone)]
pub(crate) struct Auth {
    pub(crate) token: Option<ApiKey>,
    pub(crate) tokens: Option<Arc<Tokens>>,
    /// Under `--log`: the log's id for the scoped tokens (its file name
    /// without `.log`).
    pub(crate) one_log: Option<String>,
}

/// The grant a scoped token brought (a request extension, for the routes
/// that answer by it: `GET /v1/logs`).
#[derive(Clone)]
pub(crate) struct Granted(pub(crate) Arc<Grant>);

/// The log a request is for (`None`: none, e.g. `GET /v1/logs`) and the
/// access it needs.
fn wants<'p>(
    method: &Method,
    path: &'p str,
    one_log: Option<&'p str>,
) -> (Option<&'p str>, Access) {
    if path == "/metrics" {
        return (None, Access::Admin);
    }
    let access = if matches!(*method, Method::GET | Method::HEAD)
        || path.ends_with("/search")
        || path.ends_with("/context")
    {
        Access::Read
    } else {
        Access::Write
    };
    match path.strip_prefix("/v1/logs/") {
        Some(rest) => (Some(rest.split('/').next().unwrap_or("")), access),
        None if path == "/v1/logs" => (None, Access::Read),
        None => (Some(one_log.unwrap_or("")), access),
    }
}

/// The credentials of an `Authorization` value in the Bearer scheme:
/// `Bearer <token>`, the scheme's name matched whatever its case (`bearer`,
/// `BEARER`: RFC 7235 §2.1) and followed by one or more spaces.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(b"Bearer".len())?;
    if !scheme.eq_ignore_ascii_case(b"Bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ')?;
    Some(&rest[start..])
}

/// Whether `given` is the token, compared by `subtle` in time that depends
/// only on the lengths.
fn is_token(given: &[u8], token: &ApiKey) -> bool {
    given.ct_eq(token.0.as_bytes()).into()
}

/// Lets the request through if it carries a token that opens what it asks.
pub(crate) async fn check(auth: &Auth, mut req: Request, next: Next) -> Response {
    let provider = crate::server::compat::provider_prefix(req.uri().path());
    let headers = req.headers();
    let given = headers
        .get("x-api-key")
        .filter(|_| provider == Some(super::upstream::Provider::Anthropic))
        .map(|v| v.as_bytes())
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| bearer_token(v.as_bytes()))
        });
    let Some(g) = given else {
        return unauthorized(
            "this server needs `Authorization: Bearer <token>`",
            provider,
        );
    };
    if auth.token.as_ref().is_some_and(|t| is_token(g, t)) {
        return next.run(req).await;
    }
    let file = auth.tokens.as_ref().map(|t| t.current());
    let Some(grant) = file.as_ref().and_then(|f| f.grant(g)) else {
        return unauthorized("the bearer token is not valid", provider);
    };
    let (log, access) = wants(req.method(), req.uri().path(), auth.one_log.as_deref());
    let allowed = match log {
        Some(id) => grant.opens(id, access),
        None => grant.access() >= access,
    };
    if !allowed {
        let e = ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this token does not open this for that",
        );
        return match provider {
            Some(p) => super::upstream::shapes::error_response(p, &e),
            None => e.into_response(),
        };
    }
    let grant = grant.clone();
    req.extensions_mut().insert(Granted(grant));
    next.run(req).await
}

fn unauthorized(message: &str, provider: Option<super::upstream::Provider>) -> Response {
    let e = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message);
    let mut r = match provider {
        Some(p) => super::upstream::shapes::error_response(p, &e),
        None => e.into_response(),
    };
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::extract::Request;
    use axum::http::{Method, StatusCode};
    use axum::routing::get;
    use tower::ServiceExt;

    use super::{ApiKey, Auth, bearer_token, check, is_token};

    #[test]
    fn the_route_names_the_log_and_the_access() {
        use super::{Access, wants};
        let get = Method::GET;
        let post = Method::POST;
        for (m, path, want) in [
            (&get, "/v1/logs/alpha/stats", (Some("alpha"), Access::Read)),
            (
                &post,
                "/v1/logs/alpha/search",
                (Some("alpha"), Access::Read),
            ),
            (
                &post,
                "/v1/logs/alpha/context",
                (Some("alpha"), Access::Read),
            ),
            (
                &post,
                "/v1/logs/alpha/respond",
                (Some("alpha"), Access::Write),
            ),
            (
                &Method::PUT,
                "/v1/logs/alpha/facts/k",
                (Some("alpha"), Access::Write),
            ),
            (
                &post,
                "/v1/logs/alpha/anthropic/v1/messages",
                (Some("alpha"), Access::Write),
            ),
            (&post, "/v1/logs/alpha/mcp", (Some("alpha"), Access::Write)),
            (&get, "/v1/logs", (None, Access::Read)),
            (&get, "/metrics", (None, Access::Admin)),
            (&post, "/respond", (Some("one"), Access::Write)),
            (&get, "/v1/facts", (Some("one"), Access::Read)),
        ] {
            assert_eq!(wants(m, path, Some("one")), want, "{m} {path}");
        }
    }

    #[test]
    fn tokens_compare_whole() {
        let key = ApiKey("secret".into());
        assert!(is_token(b"secret", &key));
        assert!(!is_token(b"secreT", &key));
        assert!(!is_token(b"secret2", &key));
        assert!(!is_token(b"secre", &key));
        assert!(!is_token(b"", &key));
    }

    #[test]
    fn the_scheme_is_matched_whatever_its_case() {
        for v in [
            "Bearer tok",
            "bearer tok",
            "BEARER tok",
            "bEaReR tok",
            "Bearer   tok",
        ] {
            assert_eq!(bearer_token(v.as_bytes()), Some(&b"tok"[..]), "{v}");
        }
        // The token itself is compared exactly.
        assert_eq!(bearer_token(b"bearer TOK"), Some(&b"TOK"[..]));
        for v in [
            "Bearer",
            "Bearer ",
            "Bearertok",
            "Basic tok",
            "Bear tok",
            "",
            "xBearer tok",
        ] {
            assert_eq!(bearer_token(v.as_bytes()), None, "{v:?}");
        }
    }

    /// Through the middleware, as the server runs it.
    #[tokio::test]
    async fn any_case_of_bearer_with_the_token_gets_through() {
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .route_layer(axum::middleware::from_fn(
                |req: Request, next: axum::middleware::Next| async move {
                    let auth = Auth {
                        token: Some(ApiKey("tok-1".into())),
                        tokens: None,
                        one_log: None,
                    };
                    check(&auth, req, next).await
                },
            ));
        let cases = [
            (Some("Bearer tok-1"), StatusCode::OK),
            (Some("bearer tok-1"), StatusCode::OK),
            (Some("BEARER tok-1"), StatusCode::OK),
            (Some("bearer TOK-1"), StatusCode::UNAUTHORIZED),
            (Some("bearer tok-2"), StatusCode::UNAUTHORIZED),
            (Some("Basic tok-1"), StatusCode::UNAUTHORIZED),
            (None, StatusCode::UNAUTHORIZED),
        ];
        for (auth, want) in cases {
            let mut req = Request::builder().uri("/");
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            let res = app
                .clone()
                .oneshot(req.body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert_eq!(res.status(), want, "{auth:?}");
        }
    }
}
