//! `GET /metrics`: the Prometheus text a fleet is watched by, behind the
//! same token as the other routes.

use serde_json::json;
use wmreplay::server::{ApiKey, Provider};

use crate::mock;

/// The value of the first sample of `name` whose labels hold every one of
/// `labels` (`k="v"`), if there is one.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.split(['{', ' ']).next() == Some(name) && labels.iter().all(|k| l.contains(k))
        })
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_calls_tokens_and_records_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = mock::example_log(dir.path());
    let (upstream, m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let mut cfg = mock::config(&log, Some(&upstream), Provider::Anthropic);
    cfg.auth_token = Some(ApiKey("metrics-token-123".into()));
    cfg.upstream_retries = 0;
    let srv = mock::start(cfg).await;
    let c = mock::client();
    let auth = ("authorization", "Bearer metrics-token-123");
    let r = c
        .post(format!("{}/respond", srv.url))
        .header(auth.0, auth.1)
        .json(&json!({"text": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    m.then([mock::Mode::fail(500)]);
    let r = c
        .post(format!("{}/respond", srv.url))
        .header(auth.0, auth.1)
        .json(&json!({"text": "this one fails"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let r = c
        .post(format!("{}/v1/records", srv.url))
        .header(auth.0, auth.1)
        .header("content-type", "application/x-ndjson")
        .body("{\"type\":\"wm_event\"}\n{\"type\":\"wm_event\"}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Without the token, nothing.
    let r = c.get(format!("{}/metrics", srv.url)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .get(format!("{}/metrics", srv.url))
        .header(auth.0, auth.1)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = r.text().await.unwrap();
    let at_least = |name: &str, labels: &[&str], n: f64| {
        let v =
            sample(&text, name, labels).unwrap_or_else(|| panic!("no {name} {labels:?}\n{text}"));
        assert!(v >= n, "{name} {labels:?} = {v}, expected at least {n}");
    };
    at_least("wmreplay_turns_total", &[r#"outcome="answered""#], 1.0);
    at_least("wmreplay_turns_total", &[r#"outcome="failed""#], 1.0);
    at_least("wmreplay_turn_duration_seconds_count", &[], 2.0);
    assert!(
        text.contains("wmreplay_turn_duration_seconds_bucket{le=\"0.1\"}"),
        "a histogram"
    );
    at_least(
        "wmreplay_upstream_requests_total",
        &[r#"status="200""#],
        1.0,
    );
    at_least(
        "wmreplay_upstream_requests_total",
        &[r#"status="500""#],
        1.0,
    );
    at_least("wmreplay_tokens_total", &[r#"kind="output""#], 7.0);
    // text_input ×2, text_output ×2 (one closing the failed turn), 2 records.
    at_least("wmreplay_records_written_total", &[], 6.0);
    at_least("wmreplay_logs_open", &[], 1.0);
    at_least("wmreplay_live_bytes", &[], 1.0);
    assert!(text.contains("# HELP wmreplay_turns_total"), "described");
    srv.stop().await;
}
