//! Access control: with `--auth-token-env VAR`, every route but `/healthz`
//! requires `Authorization: Bearer <token>` (the scheme's name in any case,
//! `bearer` or `BEARER` too, as RFC 7235 has it). The token is compared in
//! constant time (by `subtle`) and never logged; a missing or wrong one is
//! a 401 JSON error. On the provider-compatible endpoints the token is the
//! client's API key as its SDK sends it: `Authorization: Bearer`, or
//! `x-api-key` (Anthropic's), and the 401 is in the provider's shape.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::errors::ApiError;
use super::upstream::ApiKey;

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

/// Lets the request through if it carries the token.
pub(crate) async fn check(token: &ApiKey, req: Request, next: Next) -> Response {
    let provider = crate::server::compat::provider_of(req.uri().path());
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
    match given {
        Some(g) if is_token(g, token) => next.run(req).await,
        Some(_) => unauthorized("the bearer token is not valid", provider),
        None => unauthorized(
            "this server needs `Authorization: Bearer <token>`",
            provider,
        ),
    }
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
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::{ApiKey, bearer_token, check, is_token};

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
                    check(&ApiKey("tok-1".into()), req, next).await
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
