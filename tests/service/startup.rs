//! A server ready at once: it answers `/healthz` before the log's first
//! replay has ended, says on `/readyz` when it has, and a request that
//! comes before waits for the replay instead of failing.

use crate::mock;

use std::time::{Duration, Instant};

use mock::*;
use serde_json::{Value, json};
use wmreplay::__internals::corpus::{GenOptions, generate};

use crate::common::respond_request;
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

/// A generated log of `size` bytes at `path`; the newest `ts_ms` in it.
fn long_log(path: &std::path::Path, size: u64) -> u64 {
    let mut body = Vec::new();
    let options = GenOptions {
        size,
        seed: 11,
        ..GenOptions::default()
    };
    generate(&options, &mut body, &|_| {}).unwrap();
    std::fs::write(path, &body).unwrap();
    body.split(|&b| b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .filter_map(|v| v["ts_ms"].as_u64())
        .max()
        .unwrap()
}

/// A turn at `url` (`{url}/respond`): the body the model got must be `wmreplay respond`'s
/// for the log as it stood before the turn (`before`, a copy of it).
async fn turn_as_respond(
    url: &str,
    log: &std::path::Path,
    before: &std::path::Path,
    text: &str,
    mock: &Mock,
) {
    std::fs::copy(log, before).unwrap();
    let (s, b) = post(
        &format!("{url}/respond"),
        json!({ "text": text }).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let got = mock.bodies().pop().unwrap();
    let want = respond_request(before, text, &["--max-tokens", "20000"]);
    assert_eq!(got, want, "{text}: the model got what respond writes");
}

/// The server's gauge of logs with a live state.
async fn logs_open(url: &str) -> u64 {
    let text = get_text(&format!("{url}/metrics")).await;
    text.lines()
        .find_map(|l| l.strip_prefix("wmreplay_logs_open "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no wmreplay_logs_open in {text}")) as u64
}

/// A log many times longer than its token window reaches (6 MiB, 20,000
/// tokens): its first build renders only the records the window can reach.
/// Evicted, written to (a record ordered before everything, one late inside
/// the window), and built again by its next turn, every turn still sends
/// the request `wmreplay respond` writes for the log as it stood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_long_log_evicted_and_built_again_sends_what_respond_writes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    let newest = long_log(&log, 6 << 20);
    let before = dir.path().join("before.copy");
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(
        &dir.path().join("unused.log"),
        Some(&up),
        Provider::Anthropic,
    );
    cfg.log_dir = Some(dir.path().to_path_buf());
    cfg.selection.max_tokens = Some(20_000);
    // Any other log's use evicts `a`'s state.
    cfg.max_live_bytes = 1;
    let srv = start(cfg).await;
    let a = format!("{}/v1/logs/a", srv.url);
    turn_as_respond(&a, &log, &before, "the first question", &mock).await;
    let (s, b) = post(
        &format!("{}/v1/logs/b/records", srv.url),
        r#"{"type":"note","text":"another log"}"#,
    )
    .await;
    assert_eq!(s, 200, "{b}");
    for (round, ts) in [(1, 5), (2, newest - 1)] {
        // Another log's request lets `a`'s state go.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (s, b) = post(&format!("{}/v1/logs/b/context", srv.url), r#"{"text":"q"}"#).await;
            assert_eq!(s, 200, "{b}");
            if logs_open(&srv.url).await == 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: `a` was never evicted"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let record =
            json!({"type": "text_input", "ts_ms": ts, "text": format!("late record {round}")});
        let (s, b) = post(&format!("{a}/records"), record.to_string()).await;
        assert_eq!(s, 200, "{b}");
        turn_as_respond(&a, &log, &before, &format!("question {round}"), &mock).await;
        // And once more on the state that turn built.
        turn_as_respond(
            &a,
            &log,
            &before,
            &format!("question {round}, again"),
            &mock,
        )
        .await;
    }
    srv.stop().await;
}

/// `kill -9` while the server builds a windowed long log's live state, and
/// while a keyed turn waits for that build: after a restart the retried key
/// runs once (or is closed, if its input had been written), and the next
/// turn sends what `wmreplay respond` writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_windowed_first_build_then_a_restart_answers_as_respond() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    long_log(&log, 12 << 20);
    let before = dir.path().join("before.copy");
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let args = [
        "--upstream",
        &up,
        "--max-tokens-window",
        "20000",
        "--no-fsync",
    ];
    let mut cut_in_flight = 0;
    for pause_ms in [0u64, 20, 80] {
        let mut srv = process::Serving::start(&log, &args, &[("ANTHROPIC_API_KEY", KEY)], None);
        let url = srv.url.clone();
        let key = format!("k{pause_ms}");
        let text = format!("asked during the build ({pause_ms} ms)");
        let body = json!({ "text": text }).to_string();
        let turn = tokio::spawn({
            let (url, key, body) = (url.clone(), key.clone(), body.clone());
            async move {
                client()
                    .post(format!("{url}/respond"))
                    .header("idempotency-key", key)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        srv.child.kill().unwrap(); // SIGKILL
        srv.child.wait().unwrap();
        // Cut after it reached the server (not refused before it listened).
        if let Err(e) = turn.await.unwrap()
            && !e.is_connect()
        {
            cut_in_flight += 1;
        }
        let calls = mock.requests();
        let srv = process::Serving::start(&log, &args, &[("ANTHROPIC_API_KEY", KEY)], None);
        let (s, b) = {
            let r = client()
                .post(format!("{}/respond", srv.url))
                .header("idempotency-key", &key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        };
        assert_eq!(s, 200, "{b}");
        let inputs = log_lines(&log)
            .into_iter()
            .filter(|v| v["type"] == "text_input" && v["text"] == text.as_str())
            .count();
        assert_eq!(inputs, 1, "the key's input is in the log once");
        assert!(
            mock.requests() <= calls + 1,
            "the key ran at most once more"
        );
        let next = format!("after the restart ({pause_ms} ms)");
        turn_as_respond(&srv.url, &log, &before, &next, &mock).await;
        drop(srv);
    }
    assert!(
        cut_in_flight > 0,
        "no turn was cut while the server held it"
    );
}
