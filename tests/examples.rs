//! The examples in `examples/` do what they say: each is included here and
//! its code run against the contract's own output.

#[allow(dead_code)]
#[path = "../examples/replay_file.rs"]
mod replay_file;

#[allow(dead_code)]
#[path = "../examples/axum_respond.rs"]
mod axum_respond;

use std::io::Write;
use std::path::Path;

use wmreplay::{CurrentRequest, Format, ReplayOptions, SYSTEM_RULE, replay};

#[test]
fn replay_file_prints_the_stats_and_the_first_messages() {
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/working_memory.log");
    let text = replay_file::summary(&log, 2).unwrap();
    let bytes = std::fs::read(&log).unwrap();
    let stats = replay(&bytes, &ReplayOptions::default()).stats().clone();
    let mut lines = text.lines();
    let first = lines.next().unwrap();
    assert!(
        first.ends_with(&format!(
            ": {} lines, {} records, {} invalid JSON, {} invalid shape",
            stats.total_lines,
            stats.parsed_entries,
            stats.skipped_invalid_json,
            stats.skipped_invalid_shape
        )),
        "{first}"
    );
    let messages: Vec<&str> = lines.filter(|l| l.starts_with('{')).collect();
    assert_eq!(messages.len(), 2, "{text}");
    for m in messages {
        let v: serde_json::Value = serde_json::from_str(m).unwrap();
        assert!(v["content"].as_str().unwrap().starts_with("WM_KIND="));
    }
    let missing = replay_file::summary(&log.with_file_name("no-such.log"), 2).unwrap();
    assert!(missing.contains(": 0 lines, 0 records"), "{missing}");
}

async fn post(addr: std::net::SocketAddr, body: &str) -> (u16, Vec<u8>) {
    wmreplay::server::install_crypto_provider();
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/respond"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_respond_answers_with_the_contract_body_and_follows_appends() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("working_memory.log");
    std::fs::write(
        &log,
        "{\"type\":\"text_input\",\"ts_ms\":2,\"text\":\"hi\"}\nnot json\n\
         {\"type\":\"wm_event\",\"ts_ms\":1}\n",
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, axum_respond::app(log.clone())).await });

    // The body is byte for byte what a one-shot replay of the log renders.
    let expected = |text: &str, session_id: Option<&str>| {
        let bytes = std::fs::read(dir.path().join("working_memory.log")).unwrap();
        replay(&bytes, &ReplayOptions::default()).render_request(
            Format::Anthropic,
            SYSTEM_RULE,
            &CurrentRequest { text, session_id },
        )
    };
    let (status, body) = post(addr, r#"{"text":"What next?","session_id":"s-1"}"#).await;
    assert_eq!(status, 200);
    assert_eq!(body, expected("What next?", Some("s-1")));

    // Another writer appends; the next answer holds the new record too.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("working_memory.log"))
        .unwrap();
    f.write_all(b"{\"type\":\"text_output\",\"ts_ms\":3,\"text\":\"hello\"}\n")
        .unwrap();
    let (status, body) = post(addr, r#"{"text":"and now?"}"#).await;
    assert_eq!(status, 200);
    assert_eq!(body, expected("and now?", None));
    assert!(
        String::from_utf8(body)
            .unwrap()
            .contains("WM_KIND=text_output")
    );

    // Bad requests are JSON errors.
    for bad in [
        "not json",
        r#"{"text":1}"#,
        r#"{"text":"x","session_id":2}"#,
    ] {
        let (status, body) = post(addr, bad).await;
        assert_eq!(status, 400, "{bad}");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(v["error"]["message"].is_string(), "{bad}");
    }
}
