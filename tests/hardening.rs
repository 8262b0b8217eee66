//! Regression tests for what an adversarial run of the server found (each
//! named after what broke), beyond the respond path's own rules.

mod mock;

use serde_json::Value;
use wmreplay::server::Provider;

use mock::*;

/// An upstream answering 301/302/303/307/308 with a `Location` on another
/// origin had the request replayed there as a GET **with the API key**, and
/// that origin's answer appended as `text_output`. A redirect is now an
/// upstream error, never followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_never_followed_so_the_key_never_leaves() {
    for status in [301, 302, 303, 307, 308] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
        // Another origin: the mock's redirect target on another address.
        let (elsewhere, target) = start_mock(Provider::Anthropic, Mode::Ok).await;
        mock.then([Mode::Redirect(status, format!("{elsewhere}/elsewhere"))]);
        let mut cfg = config(&log, Some(&up), Provider::Anthropic);
        cfg.upstream_retries = 0;
        let srv = start(cfg).await;
        let (code, body) = post(&format!("{}/respond", srv.url), r#"{"text":"hi"}"#).await;
        assert_eq!(code, 502, "{status}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["upstream_status"], status);
        assert!(
            target.redirected.lock().unwrap().is_empty(),
            "{status} was followed"
        );
        assert_eq!(target.requests(), 0);
        assert!(turns(&log, "text_output").is_empty(), "nothing appended");
        assert!(!body.contains(KEY));
        srv.stop().await;
    }
}

/// A 401 whose body echoed the key reached the client as it was. The key
/// (whole or a long piece of it) is now cut out of everything relayed, and
/// the relayed message is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_error_bodies_are_relayed_without_the_key_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(
        Provider::Anthropic,
        Mode::Fail {
            status: 401,
            retry_after: None,
            echo_key: true,
        },
    )
    .await;
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let (code, body) = post(&format!("{}/respond", srv.url), r#"{"text":"hi"}"#).await;
    assert_eq!(code, 502, "{body}");
    assert!(!body.contains(KEY) && !body.contains(&KEY[..12]), "{body}");
    assert!(body.contains("<redacted>"), "{body}");
    mock.then([Mode::LongError(400, 200_000)]);
    let (code, body) = post(&format!("{}/respond", srv.url), r#"{"text":"again"}"#).await;
    assert_eq!(code, 502);
    let v: Value = serde_json::from_str(&body).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.len() < 1200, "{} bytes relayed", message.len());
    srv.stop().await;
}
