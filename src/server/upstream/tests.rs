//! Unit tests of the upstream's shared types: endpoints, fields, errors,
//! redaction, retries.
#![cfg(test)]

use super::*;

fn url(s: &str) -> reqwest::Url {
    super::super::settings::parse_upstream(s).unwrap()
}

#[test]
fn endpoints() {
    let a = Provider::Anthropic;
    assert_eq!(
        a.endpoint(&url("https://api.anthropic.com")).as_str(),
        "https://api.anthropic.com/v1/messages"
    );
    assert_eq!(
        a.endpoint(&url("http://127.0.0.1:9/")).as_str(),
        "http://127.0.0.1:9/v1/messages"
    );
    assert_eq!(
        a.endpoint(&url("http://h:1/custom/path")).as_str(),
        "http://h:1/custom/path"
    );
    assert_eq!(
        Provider::OpenAi
            .endpoint(&url("https://api.openai.com"))
            .as_str(),
        "https://api.openai.com/v1/chat/completions"
    );
}

#[test]
fn fields_of_each_provider() {
    let f = |p: Provider, stream, extra: &[(String, Value)]| {
        crate::request_fields(p.format(), "m", 50, stream, extra, &[]).unwrap()
    };
    assert_eq!(
        f(Provider::Anthropic, true, &[]),
        r#""model":"m","max_tokens":50,"stream":true"#
    );
    assert_eq!(
        f(Provider::OpenAi, false, &[]),
        r#""model":"m","max_completion_tokens":50"#
    );
    assert_eq!(
        f(Provider::OpenAi, true, &[]),
        r#""model":"m","max_completion_tokens":50,"stream":true,"stream_options":{"include_usage":true}"#
    );
    let extra = vec![
        ("temperature".to_string(), json!(0.2)),
        ("max_tokens".to_string(), json!(7)),
    ];
    assert_eq!(
        f(Provider::Anthropic, false, &extra),
        r#""model":"m","max_tokens":7,"temperature":0.2"#
    );
}

#[test]
fn error_bodies_of_both_providers() {
    let h = reqwest::header::HeaderMap::new();
    let e = UpstreamError::from_response(
        429,
        &h,
        br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        None,
    );
    assert_eq!(e.code.as_deref(), Some("rate_limit_error"));
    assert_eq!(e.message, "slow down");
    assert!(e.retryable);
    let e = UpstreamError::from_response(
        400,
        &h,
        br#"{"error":{"message":"bad","type":"invalid_request_error","code":"x"}}"#,
        None,
    );
    assert_eq!(e.code.as_deref(), Some("invalid_request_error"));
    assert!(!e.retryable);
    let e = UpstreamError::from_response(502, &h, b"<html>bad gateway</html>", None);
    assert_eq!(e.message, "<html>bad gateway</html>");
}

#[test]
fn the_key_is_redacted_whole_or_in_part_and_messages_are_bounded() {
    let k = ApiKey("sk-ant-0123456789abcdefghijklmnop".into());
    let h = reqwest::header::HeaderMap::new();
    let body = format!(
        r#"{{"error":{{"type":"authentication_error","message":"invalid x-api-key {} (prefix {})"}}}}"#,
        k.0,
        &k.0[..20]
    );
    let e = UpstreamError::from_response(401, &h, body.as_bytes(), Some(&k));
    assert!(!e.message.contains(&k.0[..12]), "{}", e.message);
    assert!(e.message.contains("<redacted>"));
    let long = "x".repeat(10_000);
    assert!(redact(&long, None).len() < 1100);
    assert!(!format!("{k:?} {k}").contains("sk-ant"));
}

#[test]
fn a_very_short_key_does_not_mangle_messages() {
    let k = ApiKey("k".into());
    assert_eq!(
        redact("max_tokens: 1024 is too many", Some(&k)),
        "max_tokens: 1024 is too many"
    );
    let k = ApiKey("sk-12345678".into());
    assert_eq!(
        redact("bad key sk-12345678", Some(&k)),
        "bad key <redacted>"
    );
}

#[test]
fn retries_follow_the_sdks_and_a_used_up_quota_is_final() {
    let mut h = reqwest::header::HeaderMap::new();
    let err = |status, h: &reqwest::header::HeaderMap, body: &str| {
        UpstreamError::from_response(status, h, body.as_bytes(), None)
    };
    for s in [408, 409, 429, 500, 502, 503, 504, 529, 520] {
        assert!(err(s, &h, "{}").retryable, "{s}");
    }
    for s in [400, 401, 403, 404, 413, 422] {
        assert!(!err(s, &h, "{}").retryable, "{s}");
    }
    let quota = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}"#;
    assert!(!err(429, &h, quota).retryable);
    let spend = r#"{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your specified workspace API spend limit"}}"#;
    assert!(!err(429, &h, spend).retryable);
    let rate = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
    assert!(err(429, &h, rate).retryable);
    // The upstream's own word comes first.
    h.insert("x-should-retry", "false".parse().unwrap());
    assert!(!err(503, &h, "{}").retryable);
    h.insert("x-should-retry", "true".parse().unwrap());
    assert!(err(400, &h, "{}").retryable);
    assert!(err(429, &h, quota).retryable);
}

#[test]
fn retry_after_ms_comes_before_retry_after() {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert("retry-after", "7".parse().unwrap());
    assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
    h.insert("retry-after-ms", "250".parse().unwrap());
    assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
    h.insert("retry-after-ms", "soon".parse().unwrap());
    assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
}

#[test]
fn a_key_echoed_in_the_error_type_is_redacted_too() {
    let k = ApiKey("sk-ant-0123456789abcdefghijklmnop".into());
    let h = reqwest::header::HeaderMap::new();
    let body = format!(r#"{{"error":{{"type":"bad_key_{}","message":"no"}}}}"#, k.0);
    let e = UpstreamError::from_response(401, &h, body.as_bytes(), Some(&k));
    let code = e.code.unwrap();
    assert!(!code.contains(&k.0[..12]), "{code}");
    assert_eq!(code, "bad_key_<redacted>");
    // A stream's error event (Anthropic's type, OpenAI's code).
    for field in ["type", "code"] {
        let ev = serde_json::json!({ field: format!("x{}", k.0), "message": "m" });
        let e = UpstreamError::from_error_object(&ev).redacted(Some(&k));
        assert_eq!(e.code.as_deref(), Some("x<redacted>"));
    }
}

#[test]
fn retry_after_in_seconds_or_a_date() {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert("retry-after", "2".parse().unwrap());
    assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
    h.insert("retry-after", "0.5".parse().unwrap());
    assert_eq!(retry_after(&h), Some(Duration::from_millis(500)));
    let later = std::time::SystemTime::now() + Duration::from_secs(30);
    h.insert(
        "retry-after",
        httpdate::fmt_http_date(later).parse().unwrap(),
    );
    let d = retry_after(&h).unwrap();
    assert!(d > Duration::from_secs(25) && d <= Duration::from_secs(30));
    h.insert("retry-after", "soon".parse().unwrap());
    assert_eq!(retry_after(&h), None);
}
