//! `--log-dir`'s bounds on what requests for many logs leave behind: the
//! states held (`--max-live-logs`), and no files made for a log that may
//! not be created.

use crate::mock;

use mock::*;
use serde_json::Value;
use wmreplay::server::Provider;

/// Requests for logs that do not exist (ids a client makes up) each make a
/// state that holds nothing; past `--max-live-logs` the least recently used
/// are let go, so their count (and memory) stays bounded, and a log that
/// does exist is served as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn states_of_logs_that_do_not_exist_stay_within_max_live_logs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("real.log"),
        "{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"hello\"}\n",
    )
    .unwrap();
    let mut cfg = config(&dir.path().join("unused.log"), None, Provider::Anthropic);
    cfg.log_dir = Some(dir.path().to_path_buf());
    cfg.max_live_logs = 50;
    let srv = start(cfg).await;
    let live = || async { get_json(&format!("{}/v1/logs", srv.url)).await["live_logs"].clone() };
    for i in 0..400 {
        let stats = get_json(&format!("{}/v1/logs/ghost-{i}/stats", srv.url)).await;
        assert_eq!(stats["stats"]["total_lines"], 0, "{stats}");
    }
    let held = live().await.as_u64().unwrap();
    assert!(
        held <= 50,
        "{held} logs' states held under --max-live-logs 50"
    );
    let stats = get_json(&format!("{}/v1/logs/real/stats", srv.url)).await;
    assert_eq!(stats["stats"]["total_lines"], 1, "{stats}");
    // Nothing was made for the logs that do not exist.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ghost-"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
    srv.stop().await;
}

/// With `--create-logs false`, a session delta, its acknowledgement or a
/// keyed turn for a log that does not exist is a 404, and leaves no file
/// behind (before, each made the log's state store: three files, kept
/// open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_create_logs_a_missing_log_gets_no_state_store() {
    let dir = tempfile::tempdir().unwrap();
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(
        &dir.path().join("unused.log"),
        Some(&up),
        Provider::Anthropic,
    );
    cfg.log_dir = Some(dir.path().to_path_buf());
    cfg.create_logs = false;
    let srv = start(cfg).await;
    for (path, body) in [
        ("turn/prepare", r#"{"session_key":"s"}"#),
        ("turn/ack", r#"{"prepare_id":"p","status":"success"}"#),
        ("records", r#"{"type":"note","text":"x"}"#),
        ("respond", r#"{"text":"hi","request_id":"r-1"}"#),
        ("respond", r#"{"text":"hi"}"#),
    ] {
        let (s, b) = post(&format!("{}/v1/logs/ghost/{path}", srv.url), body).await;
        assert_eq!(s, 404, "{path}: {b}");
        let v: Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["error"]["code"], "no_such_log", "{path}: {b}");
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.is_empty(), "{names:?}");
    assert_eq!(mock.requests(), 0);
    // Reads of it make nothing either.
    for path in ["context", "stats"] {
        let url = format!("{}/v1/logs/ghost/{path}", srv.url);
        let r = client().get(&url).send().await.unwrap();
        assert!(r.status().as_u16() < 500, "{path}: {}", r.status());
    }
    srv.stop().await;
    // The Responses API naming an earlier response of it: a 404.
    let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let mut cfg = config(&dir.path().join("unused.log"), Some(&up), Provider::OpenAi);
    cfg.log_dir = Some(dir.path().to_path_buf());
    cfg.create_logs = false;
    let srv = start(cfg).await;
    let (s, b) = post(
        &format!("{}/v1/logs/ghost/openai/v1/responses", srv.url),
        r#"{"model":"m","input":"hi","previous_response_id":"resp_1"}"#,
    )
    .await;
    assert_eq!(s, 404, "{b}");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert!(names.is_empty(), "{names:?}");
    assert_eq!(mock.requests(), 0);
    srv.stop().await;
}
