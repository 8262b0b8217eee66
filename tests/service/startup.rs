//! A server ready at once: it answers `/healthz` before the log's first
//! replay has ended, says on `/readyz` when it has, and a request that
//! comes before waits for the replay instead of failing.

use crate::mock;

use mock::*;
use serde_json::Value;
use wmreplay::__internals::corpus::{GenOptions, generate};
use wmreplay::server::Provider;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_at_once_readyz_after_the_replay_and_an_early_request_waits() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    // Large enough that its replay is not instant.
    let mut body = Vec::new();
    let options = GenOptions {
        size: 48 << 20,
        seed: 3,
        ..GenOptions::default()
    };
    generate(&options, &mut body, &|_| {}).unwrap();
    body.extend_from_slice(
        b"{\"type\":\"text_input\",\"ts_ms\":9999999999999,\"text\":\"the last record\"}\n",
    );
    std::fs::write(&log, &body).unwrap();
    let server = start(config(&log, None, Provider::Anthropic)).await;
    let c = client();
    // Right away: the process is up, and the log is being replayed or is.
    let ready = c
        .get(format!("{}/readyz", server.url))
        .send()
        .await
        .unwrap();
    let status = ready.status().as_u16();
    let v: Value = ready.json().await.unwrap();
    match status {
        503 => assert_eq!(v["status"], "starting", "{v}"),
        200 => assert_eq!(v["status"], "ready", "{v}"),
        other => panic!("/readyz answered {other}: {v}"),
    }
    // A request now waits for the replay: it sees the whole log.
    let (s, text) = post(&format!("{}/v1/context", server.url), r#"{"text":"q"}"#).await;
    assert_eq!(s, 200, "{text}");
    assert!(
        text.contains("the last record"),
        "the context lacks the log's end"
    );
    let ready = c
        .get(format!("{}/readyz", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let health = c
        .get(format!("{}/healthz", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    server.stop().await;
}
