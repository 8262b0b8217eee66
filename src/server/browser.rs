//! What a web page can make a browser send, refused before any route runs.
//!
//! A page on any site can make the browser of someone running `serve` send
//! a `POST` to `http://127.0.0.1:8787/…` without asking first (a "simple"
//! request: a form, or `fetch` with a `text/plain` body), and a page whose
//! name is made to resolve to this machine (DNS rebinding) can even read
//! the answers. Neither is a client of this server. Three rules keep them
//! out, on every route but `/healthz`:
//!
//! - **Host** — while the server listens on a loopback address, a
//!   request's `Host` must name this machine: `localhost` (or a name under
//!   `.localhost`), a loopback address, or a name given with
//!   `--allowed-host`. A page that rebound its own name to 127.0.0.1 sends
//!   that name, and is refused. On any other address the clients' names
//!   cannot be known, so `Host` is checked only against `--allowed-host`
//!   when it is given (the bearer token, which `serve` requires there,
//!   guards the rest).
//! - **Origin** — a request that changes or asks anything (any method but
//!   `GET`, `HEAD` and `OPTIONS`) and carries `Origin` (every browser adds
//!   it to such a request from a page) must come from the server's own
//!   origin or one given with `--allowed-origin`; `Sec-Fetch-Site:
//!   cross-site` or `same-site` (a page on another port of `localhost` is
//!   the same site) is refused the same way.
//! - **Content type** — a body sent as `text/plain` or
//!   `multipart/form-data`, the types a page may send anywhere without the
//!   browser asking the server first, is refused (415): every route takes
//!   JSON (`/v1/records` NDJSON too). `application/x-www-form-urlencoded`,
//!   curl's default for `-d`, is read as JSON: a page sending it also sends
//!   `Origin`, which the rule above refuses.
//!
//! Refusals are 403 (415 for the type) JSON errors, in the provider's shape
//! on the provider-compatible routes (the router's guard answers them),
//! and name nothing but the rule.

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, Method, StatusCode, header};

use super::errors::ApiError;

/// The names and origins this server answers, as `serve` was told.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrowserRules {
    /// Host names accepted besides this machine's own (`--allowed-host`),
    /// lowercased; `*` accepts any.
    pub hosts: Vec<String>,
    /// Origins whose pages may send requests (`--allowed-origin`), as
    /// `scheme://host[:port]`, lowercased; `*` accepts any.
    pub origins: Vec<String>,
}

impl BrowserRules {
    /// Rules with the names and origins given (each trimmed, lowercased,
    /// an origin's trailing `/` dropped).
    pub fn new(hosts: &[String], origins: &[String]) -> BrowserRules {
        BrowserRules {
            hosts: hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
            origins: origins
                .iter()
                .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }
}

/// The rule a request breaks, if any.
pub(crate) fn check(
    rules: &BrowserRules,
    listening: Option<SocketAddr>,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let host = headers.get(header::HOST).map(|h| h.as_bytes());
    if let Some(h) = host
        && !host_allowed(rules, listening, h)
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            "this server does not answer to the name in the request's Host header \
             (serve --allowed-host NAME adds one)",
        ));
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let origin = headers.get(header::ORIGIN).map(|o| o.as_bytes());
    let origin_ok = origin.map(|o| origin_allowed(rules, o, host));
    let site = headers.get("sec-fetch-site").map(|s| s.as_bytes());
    let cross_site = site.is_some_and(|s| {
        s.eq_ignore_ascii_case(b"cross-site") || s.eq_ignore_ascii_case(b"same-site")
    });
    if origin_ok == Some(false) || (cross_site && origin_ok != Some(true)) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin_refused",
            "requests from web pages of other origins are refused \
             (serve --allowed-origin ORIGIN lets one in)",
        ));
    }
    let simple = headers.get(header::CONTENT_TYPE).is_some_and(|t| {
        let t = t.as_bytes();
        let essence = t.split(|&b| b == b';').next().unwrap_or(t).trim_ascii();
        essence.eq_ignore_ascii_case(b"text/plain")
            || essence.eq_ignore_ascii_case(b"multipart/form-data")
    });
    if simple {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "this server takes JSON: send Content-Type: application/json \
             (text/plain and multipart bodies are refused, as a web page can send them anywhere)",
        ));
    }
    Ok(())
}

/// The host part of a `Host` value or an origin's authority: `[::1]` of
/// `[::1]:8787`, `localhost` of `localhost:8787`.
fn host_part(authority: &[u8]) -> &[u8] {
    if authority.first() == Some(&b'[') {
        return match authority.iter().position(|&b| b == b']') {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    match authority.iter().rposition(|&b| b == b':') {
        Some(i) if authority[i + 1..].iter().all(u8::is_ascii_digit) => &authority[..i],
        _ => authority,
    }
}

/// Whether `name` (a `Host`'s host part) names this machine: `localhost`,
/// a name under `.localhost` (browsers resolve those to loopback without
/// asking DNS), or a loopback address.
fn is_loopback_name(name: &[u8]) -> bool {
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    let literal = name.trim_start_matches('[').trim_end_matches(']');
    literal.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn host_allowed(rules: &BrowserRules, listening: Option<SocketAddr>, host: &[u8]) -> bool {
    if rules.hosts.iter().any(|h| h == "*") {
        return true;
    }
    let on_loopback = listening.is_none_or(|a| a.ip().is_loopback());
    if !on_loopback && rules.hosts.is_empty() {
        return true;
    }
    let name = host_part(host);
    is_loopback_name(name)
        || rules
            .hosts
            .iter()
            .any(|h| h.as_bytes().eq_ignore_ascii_case(name))
        // A listen address named as such (`Host: 192.168.1.10:8787`).
        || listening.is_some_and(|a| {
            std::str::from_utf8(name)
                .ok()
                .and_then(|n| n.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok())
                == Some(a.ip())
        })
}

/// Whether a page of `origin` may send a request: the server's own origin
/// (its authority is the request's `Host`), or one allowed.
fn origin_allowed(rules: &BrowserRules, origin: &[u8], host: Option<&[u8]>) -> bool {
    let origin = origin.trim_ascii();
    if rules
        .origins
        .iter()
        .any(|o| o == "*" || o.as_bytes().eq_ignore_ascii_case(origin))
    {
        return true;
    }
    // `null` (a sandboxed or file page) has no authority, and is no origin
    // of this server's.
    let authority = origin
        .windows(3)
        .position(|w| w == b"://")
        .map(|i| &origin[i + 3..]);
    match (authority, host) {
        (Some(a), Some(h)) => a.eq_ignore_ascii_case(h.trim_ascii()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn code(
        rules: &BrowserRules,
        at: &str,
        method: Method,
        pairs: &[(&'static str, &str)],
    ) -> Option<&'static str> {
        check(rules, Some(at.parse().unwrap()), &method, &headers(pairs))
            .err()
            .map(|e| e.code)
    }

    #[test]
    fn on_loopback_only_this_machines_names_are_answered() {
        let r = BrowserRules::default();
        let lo = "127.0.0.1:8787";
        for h in [
            "127.0.0.1:8787",
            "localhost:8787",
            "LOCALHOST",
            "localhost.",
            "app.localhost:8787",
            "[::1]:8787",
            "127.0.0.2",
        ] {
            assert_eq!(code(&r, lo, Method::GET, &[("host", h)]), None, "{h}");
        }
        for h in [
            "evil.example:8787",
            "evil.example",
            "localhost.evil.example",
            "192.168.1.10:8787",
            "[::2]:8787",
        ] {
            assert_eq!(
                code(&r, lo, Method::GET, &[("host", h)]),
                Some("host_not_allowed"),
                "{h}"
            );
        }
        let named = BrowserRules::new(&["Memory.Internal".into()], &[]);
        assert_eq!(
            code(&named, lo, Method::GET, &[("host", "memory.internal:80")]),
            None
        );
        let any = BrowserRules::new(&["*".into()], &[]);
        assert_eq!(
            code(&any, lo, Method::GET, &[("host", "evil.example")]),
            None
        );
    }

    #[test]
    fn off_loopback_the_host_is_checked_only_against_names_given() {
        let r = BrowserRules::default();
        assert_eq!(
            code(&r, "0.0.0.0:8787", Method::GET, &[("host", "anything:1")]),
            None
        );
        let named = BrowserRules::new(&["memory.example".into()], &[]);
        assert_eq!(
            code(
                &named,
                "0.0.0.0:8787",
                Method::GET,
                &[("host", "other.example")]
            ),
            Some("host_not_allowed")
        );
        assert_eq!(
            code(
                &named,
                "10.0.0.5:8787",
                Method::GET,
                &[("host", "10.0.0.5:8787")]
            ),
            None
        );
    }

    #[test]
    fn pages_of_other_origins_cannot_post() {
        let r = BrowserRules::default();
        let lo = "127.0.0.1:8787";
        let host = ("host", "127.0.0.1:8787");
        for (pairs, want) in [
            // Clients that are not browsers send neither.
            (vec![host], None),
            (
                vec![host, ("origin", "https://evil.example")],
                Some("cross_origin_refused"),
            ),
            (vec![host, ("origin", "null")], Some("cross_origin_refused")),
            (
                vec![host, ("origin", "http://localhost:3000")],
                Some("cross_origin_refused"),
            ),
            (
                vec![host, ("sec-fetch-site", "cross-site")],
                Some("cross_origin_refused"),
            ),
            (
                vec![host, ("sec-fetch-site", "same-site")],
                Some("cross_origin_refused"),
            ),
            // The server's own pages.
            (vec![host, ("origin", "http://127.0.0.1:8787")], None),
            (
                vec![
                    host,
                    ("origin", "http://127.0.0.1:8787"),
                    ("sec-fetch-site", "same-origin"),
                ],
                None,
            ),
            (vec![host, ("sec-fetch-site", "none")], None),
        ] {
            assert_eq!(code(&r, lo, Method::POST, &pairs), want, "{pairs:?}");
            // Reading is not refused for the origin (a page cannot read the
            // answer without CORS, which the server never grants).
            assert_eq!(code(&r, lo, Method::GET, &pairs), None, "{pairs:?}");
        }
        let allowed = BrowserRules::new(&[], &["http://localhost:3000/".into()]);
        assert_eq!(
            code(
                &allowed,
                lo,
                Method::POST,
                &[
                    host,
                    ("origin", "http://LOCALHOST:3000"),
                    ("sec-fetch-site", "same-site")
                ]
            ),
            None
        );
        assert_eq!(
            code(
                &allowed,
                lo,
                Method::DELETE,
                &[host, ("origin", "http://localhost:3001")]
            ),
            Some("cross_origin_refused")
        );
    }

    #[test]
    fn bodies_a_page_may_send_anywhere_are_refused() {
        let r = BrowserRules::default();
        let lo = "127.0.0.1:8787";
        for t in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "Multipart/Form-Data; boundary=x",
        ] {
            assert_eq!(
                code(&r, lo, Method::POST, &[("content-type", t)]),
                Some("unsupported_media_type"),
                "{t}"
            );
        }
        for t in [
            "application/json",
            "application/json; charset=utf-8",
            "application/x-ndjson",
            "application/x-www-form-urlencoded",
        ] {
            assert_eq!(
                code(&r, lo, Method::POST, &[("content-type", t)]),
                None,
                "{t}"
            );
        }
    }
}
