//! Access control: with `--auth-token-env VAR`, every route but `/healthz`
//! requires `Authorization: Bearer <token>`. The token is compared in
//! constant time and never logged; a missing or wrong one is a 401 JSON
//! error.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::errors::ApiError;
use super::upstream::ApiKey;

/// Whether `a` and `b` are equal, in time that depends only on their
/// lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Lets the request through if it carries the token.
pub(crate) async fn check(token: &ApiKey, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    match given {
        Some(g) if same(g, token.0.as_bytes()) => next.run(req).await,
        Some(_) => unauthorized("the bearer token is not valid"),
        None => unauthorized("this server needs `Authorization: Bearer <token>`"),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut r = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
