//! A turn belongs to the server, not to the connection: whatever the client
//! does (leave before the answer's headers, leave mid-stream, retry at once)
//! and whatever the server does with the log's state (evict it, stop), a
//! key's turn runs once, to an outcome that is recorded, and a retry gets
//! that outcome or waits for it — never a hang, never a second upstream
//! call. Process-level faults (signals, stderr, limits) are in
//! `faults_process.rs`.

use crate::mock;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wmreplay::server::{Config, Provider};

use mock::*;

/// Sends a keyed turn; gives up after `timeout` (dropping the connection).
async fn keyed(
    url: &str,
    text: &str,
    key: &str,
    stream: bool,
    timeout: Duration,
) -> Result<(u16, bool, String), reqwest::Error> {
    let r = client()
        .post(format!("{url}/respond"))
        .header("idempotency-key", key)
        .timeout(timeout)
        .body(json!({ "text": text, "stream": stream }).to_string())
        .send()
        .await?;
    let replayed = r.headers().get("idempotent-replayed").is_some();
    let status = r.status().as_u16();
    Ok((status, replayed, r.text().await?))
}

/// Records of `kind` in the log.
fn of_kind(log: &Path, kind: &str) -> Vec<Value> {
    log_lines(log)
        .into_iter()
        .filter(|v| v["type"] == kind)
        .collect()
}

/// Records of `kind` whose text is `text`.
fn count(log: &Path, kind: &str, text: &str) -> usize {
    of_kind(log, kind)
        .iter()
        .filter(|v| v["text"] == text)
        .count()
}

/// The answer's text in a JSON body or an event stream's `done` event.
fn answer_text(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return v["text"].clone();
    }
    let done = body
        .split("event: done\ndata: ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .unwrap_or_else(|| panic!("no done event in {body:?}"));
    serde_json::from_str::<Value>(done).unwrap()["text"].clone()
}

/// 1. Clients that reset the connection at every moment of a keyed turn —
/// before its input is written, while the upstream thinks, as the answer
/// starts — then retry with the same key: every retry answers (no hang),
/// every turn has its input once and its answer once (no orphan), and the
/// upstream is called once per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_at_any_moment_then_a_retry_never_hangs_orphans_or_calls_twice() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Slow(120)).await;
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let n = 32;
    let mut leaving = Vec::new();
    for i in 0..n {
        let url = srv.url.clone();
        leaving.push(tokio::spawn(async move {
            // From 1 ms (the key not looked up yet) to 160 ms (the answer
            // arriving).
            let cut = Duration::from_millis(1 + (i * 5) % 160);
            let r = keyed(
                &url,
                &format!("turn {i}"),
                &format!("k{i}"),
                i % 2 == 1,
                cut,
            )
            .await;
            assert!(r.is_err() || r.unwrap().0 == 200);
        }));
    }
    for t in leaving {
        t.await.unwrap();
    }
    let mut retries = Vec::new();
    for i in 0..n {
        let url = srv.url.clone();
        retries.push(tokio::spawn(async move {
            let text = format!("turn {i}");
            let r = keyed(
                &url,
                &text,
                &format!("k{i}"),
                i % 3 == 0,
                Duration::from_secs(8),
            )
            .await
            .unwrap_or_else(|e| panic!("the retry of turn {i} hung or failed: {e}"));
            assert_eq!(r.0, 200, "turn {i}: {}", r.2);
            assert_eq!(answer_text(&r.2), answer_to(&text).as_str(), "turn {i}");
        }));
    }
    for t in retries {
        t.await.unwrap();
    }
    for i in 0..n {
        let text = format!("turn {i}");
        assert_eq!(count(&log, "text_input", &text), 1, "turn {i}'s input");
        assert_eq!(
            count(&log, "text_output", &answer_to(&text)),
            1,
            "turn {i}'s answer"
        );
    }
    assert_eq!(mock.requests(), n as usize, "one upstream call per key");
    srv.stop().await;
}

fn dir_config(dir: &Path, upstream: &str) -> Config {
    let mut c = config(&dir.join("unused.log"), Some(upstream), Provider::Anthropic);
    c.log_dir = Some(dir.to_path_buf());
    c
}

/// 2. A log's live state evicted (by the memory bound or the idle timeout)
/// while a keyed turn runs on it: the retry waits for that turn and gets
/// its answer; the upstream is called once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_during_a_keyed_turn_never_runs_it_twice() {
    for by_idle in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (up, mock) = start_mock(Provider::Anthropic, Mode::Slow(700)).await;
        let mut cfg = dir_config(dir.path(), &up);
        if by_idle {
            cfg.idle_timeout = Duration::from_millis(50);
        } else {
            cfg.max_live_bytes = 1;
        }
        let srv = start(cfg).await;
        let a = format!("{}/v1/logs/a", srv.url);
        let first = keyed(&a, "evicted", "k", false, Duration::from_millis(150)).await;
        assert!(first.is_err(), "the first client left");
        // Other logs push `a` out of memory (or time does).
        for i in 0..6 {
            let (s, b) = post(
                &format!("{}/v1/logs/other{i}/records", srv.url),
                r#"{"type":"note","text":"x"}"#,
            )
            .await;
            assert_eq!(s, 200, "{b}");
            let (s, _) = post(
                &format!("{}/v1/logs/other{i}/context", srv.url),
                r#"{"text":"q"}"#,
            )
            .await;
            assert_eq!(s, 200);
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        let (status, replayed, body) = keyed(&a, "evicted", "k", false, Duration::from_secs(8))
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(replayed, "the retry got the first attempt's answer");
        let log = dir.path().join("a.log");
        assert_eq!(count(&log, "text_input", "evicted"), 1);
        assert_eq!(count(&log, "text_output", &answer_to("evicted")), 1);
        assert_eq!(mock.requests(), 1, "by_idle={by_idle}: one upstream call");
        srv.stop().await;
    }
}

/// 4. Shutdown with a turn whose upstream never answers: the server stops
/// within `--shutdown-timeout` (one deadline for the connections and the
/// turns), the cut turn is closed by a `text_output` with the stop reason
/// `interrupted`, and after a restart its key answers that outcome without
/// calling the upstream again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_a_hanging_turn_within_its_deadline_and_closes_it() {
    for stream in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(Provider::Anthropic, Mode::Slow(60_000)).await;
        let mut cfg = config(&log, Some(&up), Provider::Anthropic);
        cfg.shutdown_timeout = Duration::from_secs(2);
        let srv = start(cfg.clone()).await;
        let url = srv.url.clone();
        let waiting = tokio::spawn(async move {
            keyed(&url, "hangs", "k", stream, Duration::from_secs(30)).await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t = Instant::now();
        srv.stop().await;
        let took = t.elapsed();
        assert!(
            took < Duration::from_millis(2300),
            "stopped in {took:?} for a 2 s shutdown timeout"
        );
        let _ = waiting.await;
        let out = of_kind(&log, "text_output");
        let closing = out.last().expect("a closing record");
        assert_eq!(closing["stop_reason"], "interrupted", "{closing}");
        assert_eq!(closing["text"], "");
        assert_eq!(count(&log, "text_input", "hangs"), 1);
        // Restarted: the key answers the recorded outcome.
        let srv = start(cfg).await;
        let (status, replayed, body) = keyed(&srv.url, "hangs", "k", false, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(replayed);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["stop_reason"], "interrupted");
        assert_eq!(mock.requests(), 1, "the upstream was called once");
        let closed = of_kind(&log, "text_output")
            .into_iter()
            .filter(|v| v["stop_reason"] == "interrupted")
            .count();
        assert_eq!(closed, 1, "closed once");
        srv.stop().await;
    }
}

/// A key whose turn was left running by a process that stopped without a
/// word (a crash, `kill -9`): its input is in the log and its outcome is
/// unknown, so the retry closes it as `interrupted` instead of calling the
/// upstream a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_left_running_by_a_crash_is_closed_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let (s, _, _) = keyed(&srv.url, "crashed", "k", false, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(s, 200);
    // Make the store say what a crash mid-turn leaves: the key running, in
    // a process that is gone, its input written, no answer.
    let db = rusqlite::Connection::open(wmreplay::state::Store::path_for(&log)).unwrap();
    let changed = db
        .execute(
            "UPDATE turns SET status = 'running', response = NULL, owner = 'gone-1'
             WHERE idempotency_key = 'k'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    let calls = mock.requests();
    let (status, replayed, body) = keyed(&srv.url, "crashed", "k", false, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(replayed);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["stop_reason"], "interrupted", "{v}");
    assert_eq!(mock.requests(), calls, "no second upstream call");
    let last = of_kind(&log, "text_output").pop().unwrap();
    assert_eq!(last["stop_reason"], "interrupted");
    assert_eq!(count(&log, "text_input", "crashed"), 1);
    // And from now on the key answers that outcome.
    let again = keyed(&srv.url, "crashed", "k", false, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(again.2, body);
    assert_eq!(mock.requests(), calls);
    srv.stop().await;
}

/// 11. A body over the limit is answered with a readable 413: a client
/// that writes its whole body before it reads (as most do) is not cut off
/// with a reset connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_gets_a_readable_413() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.body_limit = 64 << 10;
    let srv = start(cfg).await;
    let addr = srv.url.trim_start_matches("http://").to_string();
    for (path, size) in [
        ("/v1/records", 8 << 20),
        ("/respond", 3 << 20),
        ("/v1/context", 200 << 10),
    ] {
        let body = format!(r#"{{"type":"note","text":"{}"}}"#, "x".repeat(size));
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(body.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{path}: the body could not be sent: {e}"));
        let mut out = String::new();
        s.read_to_string(&mut out)
            .await
            .unwrap_or_else(|e| panic!("{path}: no response to read: {e}"));
        assert!(out.starts_with("HTTP/1.1 413"), "{path}: {out}");
        assert!(out.contains("body_too_large"), "{out}");
    }
    let (s, _) = post(&format!("{}/v1/context", srv.url), r#"{"text":"q"}"#).await;
    assert_eq!(s, 200);
    srv.stop().await;
}

/// 8. Under `--log-dir`, a state store that is a link out of the directory
/// is refused (403) and never created or written there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_store_linked_out_of_the_directory_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("logs");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(outside.join("stolen.db"), dir.join("a.log.wmreplay.db")).unwrap();
    let (up, _mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let srv = start(dir_config(&dir, &up)).await;
    for (path, body) in [
        ("records", r#"{"type":"note","text":"x"}"#),
        ("respond", r#"{"text":"q","session_id":"s"}"#),
        ("turn/prepare", r#"{"text":"q","session_id":"s"}"#),
    ] {
        let (s, b) = post(&format!("{}/v1/logs/a/{path}", srv.url), body).await;
        assert_eq!(s, 403, "{path}: {b}");
    }
    assert!(
        std::fs::read_dir(&outside).unwrap().next().is_none(),
        "nothing was created outside the directory"
    );
    srv.stop().await;
}

/// 8. A log swapped for a link out of the directory while clients write to
/// it and read it: no record ever lands in the file outside (each write
/// either goes to the log or fails), and nothing of the file outside is
/// ever read into an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_swapped_for_a_link_mid_write_never_writes_outside() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("logs");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let secret = outside.join("secret.log");
    std::fs::write(&secret, "{\"type\":\"secret\",\"ts_ms\":1}\n").unwrap();
    let before = std::fs::read(&secret).unwrap();
    std::fs::write(dir.join("s.log"), "").unwrap();
    let srv = start(dir_config(&dir, "http://127.0.0.1:9")).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (dir, secret, stop) = (dir.clone(), secret.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let link = dir.join(".swap-link");
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&secret, &link).unwrap();
                std::fs::rename(&link, dir.join("s.log")).unwrap();
                std::thread::sleep(Duration::from_micros(300));
                let file = dir.join(".swap-file");
                std::fs::write(&file, "").unwrap();
                std::fs::rename(&file, dir.join("s.log")).unwrap();
                std::thread::sleep(Duration::from_micros(300));
                swaps += 1;
            }
            swaps
        })
    };
    let mut clients = Vec::new();
    for c in 0..4 {
        let url = format!("{}/v1/logs/s/records", srv.url);
        clients.push(tokio::spawn(async move {
            let mut ok = 0;
            for i in 0..150 {
                let (s, _) = post(&url, format!(r#"{{"type":"note","text":"c{c} r{i}"}}"#)).await;
                ok += usize::from(s == 200);
            }
            ok
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2 {
        let url = srv.url.clone();
        readers.push(tokio::spawn(async move {
            let mut answered = 0;
            for i in 0..150 {
                let (s, body) = if (i + r) % 2 == 0 {
                    post(&format!("{url}/v1/logs/s/context"), r#"{"text":"q"}"#).await
                } else {
                    post(
                        &format!("{url}/v1/logs/s/turn/prepare"),
                        format!(r#"{{"session_key":"k{r}-{i}"}}"#),
                    )
                    .await
                };
                assert!(
                    !body.contains("secret"),
                    "the file outside was read: {body}"
                );
                answered += usize::from(s == 200);
            }
            answered
        }));
    }
    let mut ok = 0;
    for c in clients {
        ok += c.await.unwrap();
    }
    for r in readers {
        assert!(r.await.unwrap() > 0, "some reads went through");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 50, "{swaps} swaps");
    assert!(ok > 0, "some writes went through");
    assert_eq!(
        std::fs::read(&secret).unwrap(),
        before,
        "a record was written through the link ({ok} writes acknowledged)"
    );
    srv.stop().await;
}

/// 9. A turn whose replay fails after its input is written (a read of the
/// log failing, injected at the `turn-replay` fault point) is closed in the
/// log as a turn whose upstream call failed is: its `text_input`, then a
/// `text_output` with the stop reason `error` and the error, and the client
/// a 500. Unkeyed, nothing is left unanswered; keyed, a retry once the
/// fault is gone answers it with one upstream call and no second input;
/// through the Anthropic door (an SDK's retry header keys it), the
/// client's history is written once, before the input, and the retry
/// answers too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_fails_after_the_input_is_written_closes_the_turn() {
    let scenario = fail::FailScenario::setup();
    fail::cfg("turn-replay", "return(REPLAY-FAULT)").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let closed_after = |text: &str| {
        let lines = log_lines(&log);
        let at = lines
            .iter()
            .rposition(|v| v["type"] == "text_input" && v["text"] == text)
            .unwrap_or_else(|| panic!("no input {text:?}"));
        let close = &lines[at + 1];
        assert_eq!(close["type"], "text_output", "{close}");
        assert_eq!(close["stop_reason"], "error", "{close}");
        assert_eq!(close["error"]["code"], "replay_failed", "{close}");
        assert_eq!(close["error"]["status"], 500, "{close}");
    };

    // Unkeyed: the client hears the error, the log closes the turn.
    let r = client()
        .post(format!("{}/respond", srv.url))
        .body(json!({ "text": "unkeyed REPLAY-FAULT" }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "replay_failed", "{e}");
    closed_after("unkeyed REPLAY-FAULT");
    assert_eq!(mock.requests(), 0, "no request made of a failed replay");

    // Keyed: the same, then a retry without the fault answers, once.
    let t = Duration::from_secs(20);
    let text = "keyed REPLAY-FAULT";
    let (status, _, body) = keyed(&srv.url, text, "replay-k", false, t).await.unwrap();
    assert_eq!(status, 500, "{body}");
    closed_after(text);
    // A retry that fails the same way wrote nothing: nothing more to close.
    let (status, _, body) = keyed(&srv.url, text, "replay-k", false, t).await.unwrap();
    assert_eq!(status, 500, "{body}");
    let closes = |log: &Path| {
        of_kind(log, "text_output")
            .iter()
            .filter(|v| v["error"]["code"] == "replay_failed")
            .count()
    };
    assert_eq!(
        closes(&log),
        2,
        "the unkeyed turn's close and the keyed one's"
    );
    fail::remove("turn-replay");
    let (status, _, body) = keyed(&srv.url, text, "replay-k", false, t).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(count(&log, "text_input", text), 1);
    assert_eq!(mock.requests(), 1);
    let (status, replayed, again) = keyed(&srv.url, text, "replay-k", false, t).await.unwrap();
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(answer_text(&again), answer_text(&body));
    assert_eq!(mock.requests(), 1, "the answer recorded, not asked again");

    // The Anthropic door: history before the input, the SDK's retry.
    fail::cfg("turn-replay", "return(REPLAY-FAULT)").unwrap();
    let ask = json!({
        "model": "m-client",
        "max_tokens": 50,
        "messages": [
            {"role": "user", "content": "door history question"},
            {"role": "assistant", "content": "door history answer"},
            {"role": "user", "content": "door REPLAY-FAULT"},
        ],
    });
    let send = |retry: &'static str| {
        client()
            .post(format!("{}/anthropic/v1/messages", srv.url))
            .header("content-type", "application/json")
            .header("x-stainless-retry-count", retry)
            .body(ask.to_string())
            .send()
    };
    let r = send("0").await.unwrap();
    assert_eq!(r.status(), 500);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error", "the provider's shape: {e}");
    closed_after("door REPLAY-FAULT");
    fail::remove("turn-replay");
    let r = send("1").await.unwrap();
    assert_eq!(r.status(), 200);
    let _: Value = r.json().await.unwrap();
    assert_eq!(count(&log, "text_input", "door history question"), 1);
    assert_eq!(count(&log, "text_output", "door history answer"), 1);
    assert_eq!(count(&log, "text_input", "door REPLAY-FAULT"), 1);
    assert_eq!(mock.requests(), 2);
    scenario.teardown();
    srv.stop().await;
}
