//! The official SDKs as clients of the provider-compatible endpoints: the
//! Python `anthropic` and `openai` packages (tests/sdk/python_sdks.py) and
//! the TypeScript ones (tests/sdk/node_sdks.mjs), installed from their
//! registries by `.ci/sdk-clients.sh` into `target/sdk-clients`. Each test
//! runs the server with the mock model behind it, lets the SDK script use
//! it as its users do, then checks the log and what the model was sent.
//!
//! Ignored without the SDKs: `bash .ci/sdk-clients.sh`, then
//! `cargo test --test service -- --ignored sdk_clients::` (CI does both).

use crate::mock;

use std::path::{Path, PathBuf};
use std::process::Command;

use mock::*;
use serde_json::Value;
use wmreplay::server::Provider;

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/sdk-clients")
}

/// Runs `program args…` to its end; its stdout as JSON.
async fn run(program: PathBuf, args: Vec<String>) -> Value {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&program)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e} (run .ci/sdk-clients.sh)", program.display()))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the SDK script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the SDK script's output is not JSON ({e}):\n{stdout}"))
}

fn texts_of(log: &Path, kind: &str) -> Vec<String> {
    turns(log, kind)
        .iter()
        .map(|r| r["text"].as_str().unwrap_or("").to_string())
        .collect()
}

/// What one SDK script did, checked against the log and the model's
/// requests (the same checks for either language).
fn check(provider: Provider, log: &Path, mock: &Mock, seen: &Value) {
    let inputs = texts_of(log, "text_input");
    let count = |t: &str| inputs.iter().filter(|i| i.as_str() == t).count();
    // Each turn's input once, the resent history never again.
    assert_eq!(count("first question"), 1, "{inputs:#?}");
    assert_eq!(count("second question"), 1, "{inputs:#?}");
    // A 400 wrote nothing.
    assert_eq!(count("never sent"), 0, "{inputs:#?}");
    // The SDK's retries made one turn of each request.
    assert_eq!(count("retried\nMOCK_FAIL_ONCE: 503"), 1, "{inputs:#?}");
    assert_eq!(count("slow\nMOCK_SLOW: 1800"), 1, "{inputs:#?}");
    let slow_calls = mock
        .bodies()
        .iter()
        .filter(|b| current_text_of(b).as_deref() == Some("slow\nMOCK_SLOW: 1800"))
        .count();
    assert_eq!(
        slow_calls, 1,
        "a retry while the first attempt ran waits for it"
    );
    assert!(seen["retried_timeout"].as_str().unwrap().contains("slow"));
    // Beside the messages: nothing of them was written.
    assert_eq!(seen["models"], serde_json::json!(["test-model"]));
    assert_eq!(count("count me"), 0, "count_tokens writes nothing");
    // The turn answered after the client's tool ran: its input once, the
    // call and the result recorded.
    assert_eq!(
        count(
            "What is the weather?\nTOOLS: [[{\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]]"
        ),
        1
    );
    let id = seen["tool_call_id"].as_str().unwrap();
    let calls = turns(log, "tool_call");
    let call = calls
        .iter()
        .find(|c| c["id"] == id)
        .expect("the call recorded");
    assert_eq!(call["by"], "client");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["input"]["city"], "Paris");
    let results = turns(log, "tool_result");
    let result = results
        .iter()
        .find(|r| r["id"] == id)
        .expect("the result recorded");
    assert_eq!(result["content"], "Sunny in Paris");
    assert_eq!(result["name"], "get_weather");
    let outputs = turns(log, "text_output");
    assert!(
        outputs.iter().any(|o| o["stop_reason"]
            == if provider == Provider::Anthropic {
                "tool_use"
            } else {
                "tool_calls"
            }),
        "the answer that called the tool, with its stop reason"
    );
    assert!(
        outputs
            .iter()
            .any(|o| o["text"].as_str().unwrap().contains("Sunny in Paris"))
    );
    // The second session's request replays the first's turns.
    let last = mock
        .bodies()
        .into_iter()
        .rev()
        .find(|b| current_text_of(b).as_deref() == Some("what did I ask before?"))
        .expect("the second session's request");
    let sent = last.to_string();
    assert!(sent.contains("first question") && sent.contains("second question"));
    // The client's system prompt follows the server's.
    let first = mock
        .bodies()
        .into_iter()
        .find(|b| current_text_of(b).as_deref() == Some("first question"))
        .unwrap();
    assert!(first.to_string().contains("Answer briefly."));
    // The client's key was never sent upstream or written.
    let raw = std::fs::read_to_string(log).unwrap();
    assert!(!raw.contains("sk-client"));
    for s in mock.seen.lock().unwrap().iter() {
        assert_ne!(s.key, "sk-client");
    }
}

async fn serve_for(provider: Provider, dir: &Path) -> (Running, Mock, PathBuf) {
    let log = example_log(dir);
    let (url, mock) = start_mock(provider, Mode::Ok).await;
    let mut cfg = config(&log, Some(&url), provider);
    cfg.upstream_retries = 0;
    cfg.system = Some("You are the test's assistant.".into());
    (start(cfg).await, mock, log)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the SDKs: bash .ci/sdk-clients.sh"]
async fn the_official_python_sdks_use_the_server_as_their_api() {
    let python = clients().join("venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/python_sdks.py");
    for (provider, name) in [
        (Provider::Anthropic, "anthropic"),
        (Provider::OpenAi, "openai"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (server, mock, log) = serve_for(provider, dir.path()).await;
        let seen = run(
            python.clone(),
            vec![
                script.display().to_string(),
                name.into(),
                server.url.clone(),
            ],
        )
        .await;
        if provider == Provider::Anthropic {
            assert!(seen["runner"].as_str().unwrap().contains("Rainy in Oslo"));
        }
        check(provider, &log, &mock, &seen);
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the SDKs: bash .ci/sdk-clients.sh"]
async fn the_official_typescript_sdks_use_the_server_as_their_api() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/node_sdks.mjs");
    for (provider, name) in [
        (Provider::Anthropic, "anthropic"),
        (Provider::OpenAi, "openai"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (server, mock, log) = serve_for(provider, dir.path()).await;
        let seen = run(
            PathBuf::from("node"),
            vec![
                script.display().to_string(),
                name.into(),
                server.url.clone(),
                clients().join("node").display().to_string(),
            ],
        )
        .await;
        check(provider, &log, &mock, &seen);
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the SDKs: bash .ci/sdk-clients.sh"]
async fn sdk_turns_and_mcp_writes_on_one_log_at_once_lose_nothing() {
    const TURNS: usize = 12;
    const WRITES: usize = 24;
    let python = clients().join("venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/sdk_and_mcp.py");
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let before = std::fs::read(&log).unwrap();
    let (url, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(&log, Some(&url), Provider::Anthropic);
    cfg.upstream_retries = 0;
    cfg.mcp = true;
    let server = start(cfg).await;
    let seen = run(
        python,
        vec![
            script.display().to_string(),
            server.url.clone(),
            TURNS.to_string(),
            WRITES.to_string(),
        ],
    )
    .await;
    server.stop().await;
    assert_eq!(seen["answered"], TURNS);
    // The log is what it was, then whole lines only: every one a record.
    let after = std::fs::read(&log).unwrap();
    assert_eq!(after[..before.len()], before[..]);
    let added: Vec<Value> = after[before.len()..]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice(l).unwrap_or_else(|e| {
                panic!(
                    "a torn or interleaved line ({e}): {}",
                    String::from_utf8_lossy(l)
                )
            })
        })
        .collect();
    let of = |kind: &'static str| added.iter().filter(move |r| r["type"] == kind);
    // Each SDK turn once, with its answer.
    let mut inputs: Vec<&str> = of("text_input")
        .map(|r| r["text"].as_str().unwrap())
        .collect();
    inputs.sort();
    let mut want: Vec<String> = (0..TURNS).map(|i| format!("sdk turn {i}")).collect();
    want.sort();
    assert_eq!(inputs, want);
    assert_eq!(of("text_output").count(), TURNS);
    assert_eq!(mock.bodies().len(), TURNS);
    // Each MCP write once, at the offset it was acknowledged with.
    let acked: Vec<u64> = seen["acked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap())
        .collect();
    assert_eq!(acked.len(), WRITES);
    let mut notes: Vec<u64> = of("mcp_note").map(|r| r["n"].as_u64().unwrap()).collect();
    notes.sort();
    assert_eq!(notes, (0..WRITES as u64).step_by(2).collect::<Vec<_>>());
    let mut facts: Vec<String> = of("wm_fact")
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect();
    facts.sort();
    let mut want: Vec<String> = (1..WRITES)
        .step_by(2)
        .map(|i| format!("fact-{i}"))
        .collect();
    want.sort();
    assert_eq!(facts, want);
    for o in acked {
        let line = &after[o as usize..];
        let line = &line[..line.iter().position(|&b| b == b'\n').unwrap()];
        let r: Value = serde_json::from_slice(line).unwrap();
        assert!(r["type"] == "mcp_note" || r["type"] == "wm_fact", "{r}");
    }
}
