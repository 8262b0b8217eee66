//! The respond path as a production service: appends never damage the log,
//! what is sent is what `/v1/context` shows, retries and idempotency keys
//! never double a turn, the providers' protocols are spoken in full, and a
//! client that leaves does not cut the answer.

use crate::mock;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wmreplay::server::Provider;
use wmreplay::{CurrentRequest, ReplayOptions, replay};

use mock::*;

/// The request body a one-shot replay of `log` gives, with the fields the
/// server puts first.
fn one_shot_body(log: &[u8], provider: Provider, fields: &str, text: &str) -> Vec<u8> {
    let r = replay(log, &ReplayOptions::default());
    let body = r.render_request(
        provider.format(),
        &wmreplay::system_prompt(None),
        &CurrentRequest {
            text,
            session_id: None,
        },
    );
    with_fields(&body, fields)
}

fn fields(provider: Provider, stream: bool) -> String {
    let mut f = match provider {
        Provider::Anthropic => r#""model":"test-model","max_tokens":1024"#.to_string(),
        Provider::OpenAi => r#""model":"test-model","max_completion_tokens":1024"#.to_string(),
    };
    if stream {
        f.push_str(r#","stream":true"#);
        if provider == Provider::OpenAi {
            f.push_str(r#","stream_options":{"include_usage":true}"#);
        }
    }
    f
}

/// Lines of the log that parse, as JSON.
fn records(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// Byte offset of the line holding the `text_input` record with `text`.
fn input_offset(log: &[u8], text: &str) -> usize {
    let mut at = 0;
    for line in log.split_inclusive(|&b| b == b'\n') {
        if let Ok(v) = serde_json::from_slice::<Value>(line)
            && v["type"] == "text_input"
            && v["text"] == text
        {
            return at;
        }
        at += line.len();
    }
    panic!("no text_input {text:?} in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unterminated_last_line_stays_a_record_and_turns_never_glue_to_it() {
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wm.log");
        let mut before = example_bytes();
        before
            .extend_from_slice(br#"{"type":"wm_event","ts_ms":1763700099000,"last":"no newline"}"#);
        std::fs::write(&log, &before).unwrap();
        let (up, mock) = start_mock(provider, Mode::Ok).await;
        let srv = start(config(&log, Some(&up), provider)).await;
        for t in ["first turn", "second turn"] {
            let (status, body) = post(
                &format!("{}/respond", srv.url),
                json!({ "text": t }).to_string(),
            )
            .await;
            assert_eq!(status, 200, "{body}");
        }
        srv.stop().await;
        every_line_parses_but_the_examples_bad_ones(&log);
        let after = std::fs::read(&log).unwrap();
        assert_eq!(&after[..before.len()], &before[..], "nothing rewritten");
        assert_eq!(after[before.len()], b'\n', "the unterminated line ended");
        let r = replay(&after, &ReplayOptions::default());
        assert_eq!(r.stats().parsed_entries, 9 + 1 + 4, "every record replays");
        let all = records(&log);
        assert!(all.iter().any(|v| v["last"] == "no newline"));
        // The first turn's request: the log as it stood, its last line
        // included (a one-shot replay reads an unterminated line too).
        let sent = without_cache_markers(&mock.seen.lock().unwrap()[0].raw);
        assert_eq!(
            String::from_utf8(sent).unwrap(),
            String::from_utf8(one_shot_body(
                &before,
                provider,
                &fields(provider, false),
                "first turn"
            ))
            .unwrap()
        );
    }
}

/// The example log has one invalid line and one of the wrong shape.
fn every_line_parses_but_the_examples_bad_ones(log: &Path) {
    let text = std::fs::read_to_string(log).unwrap();
    let bad = text
        .lines()
        .filter(|l| !l.trim().is_empty() && serde_json::from_str::<Value>(l).is_err())
        .count();
    assert_eq!(bad, 1, "only the example's own invalid line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_text_appears_once_and_context_equals_what_is_sent() {
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        for stream in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let log = example_log(dir.path());
            let (up, mock) = start_mock(provider, Mode::Ok).await;
            let srv = start(config(&log, Some(&up), provider)).await;
            let input =
                json!({"text": "What next? ✓", "stream": stream, "params": {"temperature": 0.5}});
            let (status, context) =
                post(&format!("{}/v1/context", srv.url), input.to_string()).await;
            assert_eq!(status, 200);
            let (status, body) = post(&format!("{}/respond", srv.url), input.to_string()).await;
            assert_eq!(status, 200, "{body}");
            let sent = String::from_utf8(mock.seen.lock().unwrap()[0].raw.clone()).unwrap();
            assert_eq!(
                sent, context,
                "/v1/context shows exactly what /respond sends"
            );
            assert_eq!(
                sent.matches("What next? ✓").count(),
                1,
                "the text appears once"
            );
            // The next turn replays both the input and the answer.
            let (_, body) = post(&format!("{}/respond", srv.url), r#"{"text":"and then?"}"#).await;
            assert!(body.contains("and then?"), "{body}");
            let second = String::from_utf8(mock.seen.lock().unwrap()[1].raw.clone()).unwrap();
            assert_eq!(
                second.matches("What next? ✓").count(),
                2,
                "input and answer replayed"
            );
            assert_eq!(second.matches("and then?").count(), 1);
            srv.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_the_same_idempotency_key_appends_one_text_input_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    mock.then([Mode::fail(500)]);
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.upstream_retries = 0;
    let srv = start(cfg).await;
    let url = format!("{}/respond", srv.url);
    let send = |body: Value, key: Option<&'static str>| {
        let url = url.clone();
        async move {
            let mut r = client().post(url).body(body.to_string());
            if let Some(k) = key {
                r = r.header("idempotency-key", k);
            }
            let r = r.send().await.unwrap();
            let replayed = r.headers().get("idempotent-replayed").is_some();
            (r.status().as_u16(), replayed, r.text().await.unwrap())
        }
    };
    let (status, _, body) = send(json!({"text": "keyed"}), Some("turn-1")).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("\"upstream_status\":500"), "{body}");
    let (status, replayed, first) = send(json!({"text": "keyed"}), Some("turn-1")).await;
    assert_eq!(status, 200, "{first}");
    assert!(!replayed);
    let (status, replayed, again) = send(json!({"text": "keyed"}), Some("turn-1")).await;
    assert_eq!(status, 200);
    assert!(replayed, "the third call is answered from the store");
    assert_eq!(
        serde_json::from_str::<Value>(&again).unwrap(),
        serde_json::from_str::<Value>(&first).unwrap()
    );
    assert_eq!(turns(&log, "text_input").len(), 1, "one text_input in all");
    // The failed attempt closed the turn with its error; the retry's answer
    // follows it.
    let outs = turns(&log, "text_output");
    assert_eq!(outs.len(), 2);
    assert_eq!(outs[0]["stop_reason"], "error");
    assert_eq!(outs[1]["text"], answer_to("keyed"));
    // Both attempts sent the same request: the log before the input.
    let seen = mock.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].raw, seen[1].raw);
    // The key in the body works the same; another request under a used
    // key is refused.
    let (status, _, _) = send(json!({"text": "other", "request_id": "turn-2"}), None).await;
    assert_eq!(status, 200);
    let (status, replayed, _) = send(json!({"text": "other", "request_id": "turn-2"}), None).await;
    assert_eq!((status, replayed), (200, true));
    let (status, _, body) = send(json!({"text": "not the same"}), Some("turn-1")).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("idempotency_key_reused"));
    assert_eq!(turns(&log, "text_input").len(), 2);
    srv.stop().await;

    // Remembered across a restart.
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let (status, replayed, body) = send_to(&srv.url, json!({"text": "keyed"}), "turn-1").await;
    assert_eq!((status, replayed), (200, true), "{body}");
    assert_eq!(turns(&log, "text_input").len(), 2);
    srv.stop().await;
}

async fn send_to(base: &str, body: Value, key: &str) -> (u16, bool, String) {
    let r = client()
        .post(format!("{base}/respond"))
        .header("idempotency-key", key)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let replayed = r.headers().get("idempotent-replayed").is_some();
    (r.status().as_u16(), replayed, r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_while_the_first_attempt_runs_waits_for_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Slow(600)).await;
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let a = send_to(&srv.url, json!({"text": "slow"}), "k");
    let b = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        send_to(&srv.url, json!({"text": "slow", "stream": true}), "k").await
    };
    let ((sa, _, ba), (sb, replayed, bb)) = tokio::join!(a, b);
    assert_eq!((sa, sb), (200, 200), "{ba} {bb}");
    assert!(replayed);
    assert!(
        bb.contains("event: done"),
        "a streamed repeat gets the answer as events"
    );
    assert_eq!(mock.requests(), 1, "one upstream call");
    assert_eq!(turns(&log, "text_input").len(), 1);
    assert_eq!(turns(&log, "text_output").len(), 1);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_is_retried_and_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    mock.then([Mode::Fail {
        status: 429,
        retry_after: Some("1"),
        echo_key: false,
    }]);
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let t = Instant::now();
    let (status, body) = post(&format!("{}/respond", srv.url), r#"{"text":"hi"}"#).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "retry-after was honoured"
    );
    assert_eq!(mock.requests(), 2);
    assert_eq!(turns(&log, "text_input").len(), 1);
    srv.stop().await;

    // Retries used up: the client gets the 429 with the upstream's wait.
    let (up, _) = start_mock(
        Provider::Anthropic,
        Mode::Fail {
            status: 429,
            retry_after: Some("7"),
            echo_key: false,
        },
    )
    .await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.upstream_retries = 0;
    let srv = start(cfg).await;
    let r = client()
        .post(format!("{}/respond", srv.url))
        .body(r#"{"text":"again"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["upstream_status"], 429);
    assert_eq!(v["error"]["upstream_code"], "rate_limit_error");
    assert_eq!(v["error"]["retry_after"], 7);
    srv.stop().await;

    // A wait longer than the deadline is not waited out.
    let (up, mock) = start_mock(
        Provider::Anthropic,
        Mode::Fail {
            status: 529,
            retry_after: Some("60"),
            echo_key: false,
        },
    )
    .await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.upstream_timeout = Duration::from_secs(5);
    let srv = start(cfg).await;
    let t = Instant::now();
    let (status, _) = post(&format!("{}/respond", srv.url), r#"{"text":"x"}"#).await;
    assert_eq!(status, 503);
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(mock.requests(), 1);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_tokens_stop_is_recorded_with_the_answer_and_its_usage() {
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        for stream in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let log = example_log(dir.path());
            let (up, mock) = start_mock(provider, Mode::Truncated).await;
            let srv = start(config(&log, Some(&up), provider)).await;
            let (status, body) = post(
                &format!("{}/respond", srv.url),
                json!({"text": "long", "stream": stream}).to_string(),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            let answer: Value = if stream {
                let done = body
                    .split("\n\n")
                    .find(|e| e.starts_with("event: done"))
                    .expect("a done event");
                serde_json::from_str(done.split_once("data: ").unwrap().1).unwrap()
            } else {
                serde_json::from_str(&body).unwrap()
            };
            let want = match provider {
                Provider::Anthropic => "max_tokens",
                Provider::OpenAi => "length",
            };
            assert_eq!(answer["stop_reason"], want, "{provider:?} {stream}");
            assert_eq!(answer["usage"]["output_tokens"], 7);
            // As the upstream reported them (OpenAI's prompt tokens less
            // those read from the cache).
            let reported = mock.seen.lock().unwrap()[0].usage;
            let input = match provider {
                Provider::Anthropic => reported.input,
                Provider::OpenAi => reported.input + reported.written,
            };
            assert_eq!(answer["usage"]["input_tokens"], input);
            assert_eq!(answer["usage"]["cache_read_input_tokens"], reported.read);
            let outs = turns(&log, "text_output");
            assert_eq!(outs[0]["stop_reason"], want);
            assert_eq!(outs[0]["text"], answer_to("long"));
            srv.stop().await;
        }
    }
    // A normal end is not written.
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    post(&format!("{}/respond", srv.url), r#"{"text":"short"}"#).await;
    assert!(turns(&log, "text_output")[0].get("stop_reason").is_none());
    let (_, stats) = get(&format!("{}/v1/stats", srv.url)).await;
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["turns"]["answered"], 1);
    assert_eq!(stats["turns"]["usage"]["output_tokens"], 7);
    srv.stop().await;
}

async fn get(url: &str) -> (u16, String) {
    let r = client().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Waits until the log holds a `text_output` for `text`.
async fn wait_for_answer(log: &Path, text: &str) -> Value {
    for _ in 0..300 {
        if let Some(v) = turns(log, "text_output")
            .into_iter()
            .find(|v| v["text"] == answer_to(text).as_str())
        {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no answer to {text:?} was appended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_before_the_answer_starts_still_gets_it_appended() {
    for stream in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, _) = start_mock(Provider::Anthropic, Mode::Slow(500)).await;
        let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
        let r = client()
            .post(format!("{}/respond", srv.url))
            .timeout(Duration::from_millis(100))
            .body(json!({"text": "leaving", "stream": stream}).to_string())
            .send()
            .await;
        assert!(r.is_err(), "the client gave up first");
        wait_for_answer(&log, "leaving").await;
        assert_eq!(turns(&log, "text_input").len(), 1);
        srv.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_stream_still_gets_the_whole_answer_appended() {
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, _) = start_mock(provider, Mode::SlowStream(30)).await;
        let srv = start(config(&log, Some(&up), provider)).await;
        let mut r = client()
            .post(format!("{}/respond", srv.url))
            .body(json!({"text": "stream and leave", "stream": true}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let first = r.chunk().await.unwrap().unwrap();
        assert!(first.starts_with(b"event: delta"));
        drop(r);
        let out = wait_for_answer(&log, "stream and leave").await;
        assert_eq!(out["text"], answer_to("stream and leave"));
        srv.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_carry_each_providers_fields_and_the_extra_ones() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::OpenAi, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::OpenAi);
    cfg.max_output_tokens = 50;
    cfg.upstream_fields = vec![
        ("temperature".into(), json!(0.2)),
        ("user".into(), json!("agent-7")),
    ];
    let srv = start(cfg).await;
    let (status, _) = post(
        &format!("{}/respond", srv.url),
        r#"{"text":"a","stream":true,"params":{"temperature":0.9,"top_p":0.5}}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = post(&format!("{}/respond", srv.url), r#"{"text":"b"}"#).await;
    assert_eq!(status, 200);
    let seen = mock.bodies();
    assert_eq!(seen[0]["max_completion_tokens"], 50);
    assert!(seen[0].get("max_tokens").is_none());
    assert_eq!(seen[0]["stream"], true);
    assert_eq!(seen[0]["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        seen[0]["temperature"], 0.9,
        "params override the server's fields"
    );
    assert_eq!(seen[0]["top_p"], 0.5);
    assert_eq!(seen[0]["user"], "agent-7");
    assert_eq!(seen[1]["temperature"], 0.2);
    assert!(seen[1].get("stream_options").is_none());
    for reserved in ["model", "messages", "system", "stream"] {
        let (status, body) = post(
            &format!("{}/respond", srv.url),
            json!({"text": "c", "params": {reserved: 1}}).to_string(),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("invalid_params"));
    }
    srv.stop().await;
}

/// A writer of `n` records that writes each line in two `write()` calls
/// (with a pause between them), under `flock` if `lock`.
fn outside_writer(log: &Path, n: usize, lock: bool) -> std::process::Child {
    let script = r#"
import fcntl, os, sys, time
path, n, lock = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
for i in range(n):
    line = ('{"type":"wm_event","ts_ms":%d,"source":"outside","i":%d,"pad":"%s"}\n' % (1763700100000 + i, i, "x" * 40)).encode()
    if lock:
        fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, line[:30])
    time.sleep(0.0005)
    os.write(fd, line[30:])
    if lock:
        fcntl.flock(fd, fcntl.LOCK_UN)
    time.sleep(0.0005)
"#;
    std::process::Command::new("python3")
        .args(["-c", script])
        .arg(log)
        .arg(n.to_string())
        .arg(if lock { "1" } else { "0" })
        .spawn()
        .expect("python3 runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_writer_and_200_concurrent_turns_never_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = config(&log, Some(&up), Provider::Anthropic);
    cfg.max_concurrent = 256;
    let srv = start(cfg).await;
    let mut writer = outside_writer(&log, 1000, true);
    let url = Arc::new(format!("{}/respond", srv.url));
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(i * 3)).await;
            post(&url, json!({ "text": format!("turn {i}") }).to_string()).await
        }));
    }
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    assert!(writer.wait().unwrap().success());
    srv.stop().await;
    every_line_parses_but_the_examples_bad_ones(&log);
    let all = records(&log);
    for i in 0..1000 {
        assert_eq!(
            all.iter()
                .filter(|v| v["source"] == "outside" && v["i"] == i)
                .count(),
            1,
            "outside record {i}"
        );
    }
    for i in 0..200 {
        let t = format!("turn {i}");
        assert_eq!(
            all.iter().filter(|v| v["text"] == t.as_str()).count(),
            1,
            "{t}"
        );
        assert_eq!(
            all.iter()
                .filter(|v| v["text"] == answer_to(&t).as_str())
                .count(),
            1,
            "answer to {t}"
        );
    }
    // Every request was the log as it stood before the turn's own line.
    let bytes = std::fs::read(&log).unwrap();
    let seen = mock.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 200);
    for s in &seen {
        let t = current_text(&s.json);
        let at = input_offset(&bytes, &t);
        let want = one_shot_body(
            &bytes[..at],
            Provider::Anthropic,
            &fields(Provider::Anthropic, false),
            &t,
        );
        assert!(
            without_cache_markers(&s.raw) == want,
            "the request of {t:?} is not the log before its input"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_ignores_the_lock_never_splits_an_acknowledged_turn() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let mut writer = outside_writer(&log, 1000, false);
    let url = Arc::new(format!("{}/respond", srv.url));
    let mut tasks = Vec::new();
    for i in 0..100u64 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(i * 5)).await;
            // A saturated server answers 503 with retry-after (nothing is
            // appended); a client tries again, as this one does.
            for _ in 0..100 {
                let r = post(&url, json!({ "text": format!("turn {i}") }).to_string()).await;
                if r.0 != 503 {
                    return r;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("still busy after 100 tries")
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().0, 200);
    }
    assert!(writer.wait().unwrap().success());
    srv.stop().await;
    // The server's records are whole, each once; the outside writer's may
    // have been split (skipped by replays, never glued to the server's).
    let all = records(&log);
    for i in 0..100 {
        let t = format!("turn {i}");
        assert_eq!(
            all.iter().filter(|v| v["text"] == t.as_str()).count(),
            1,
            "{t}"
        );
        assert_eq!(
            all.iter()
                .filter(|v| v["text"] == answer_to(&t).as_str())
                .count(),
            1,
            "answer to {t}"
        );
    }
    let bytes = std::fs::read(&log).unwrap();
    let r = replay(&bytes, &ReplayOptions::default());
    let outside = all.iter().filter(|v| v["source"] == "outside").count() as u64;
    assert_eq!(
        r.stats().parsed_entries,
        9 + 200 + outside,
        "every whole line replays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_turn_reads_the_first_turns_prefix_from_the_cache() {
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(provider, Mode::Ok).await;
        let srv = start(config(&log, Some(&up), provider)).await;
        let mut answers = Vec::new();
        for text in ["first?", "second?"] {
            let (status, body) = post(
                &format!("{}/respond", srv.url),
                json!({ "text": text }).to_string(),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            answers.push(serde_json::from_str::<Value>(&body).unwrap());
        }
        let seen = mock.seen.lock().unwrap().clone();
        let (first, second) = (&seen[0], &seen[1]);
        match provider {
            Provider::Anthropic => {
                // Breakpoints: at most 4, the last replayed record marked.
                let raw = String::from_utf8(first.raw.clone()).unwrap();
                let marks = raw
                    .matches(r#""cache_control":{"type":"ephemeral"}"#)
                    .count();
                assert!((1..=4).contains(&marks), "{marks} breakpoints");
                // The second request holds the first one's marked prefix,
                // byte for byte (markers aside).
                let cut = raw.rfind(r#","cache_control""#).unwrap();
                let prefix = without_cache_markers(&raw.as_bytes()[..cut]);
                let next = without_cache_markers(&second.raw);
                assert!(next.starts_with(&prefix), "the prefix changed");
            }
            Provider::OpenAi => {
                // One routing key for the log, on every request.
                let key = &first.json["prompt_cache_key"];
                assert!(key.as_str().is_some_and(|k| k.starts_with("wmreplay-")));
                assert_eq!(&second.json["prompt_cache_key"], key);
                let a = without_cache_markers(&first.raw);
                let b = without_cache_markers(&second.raw);
                // Everything but the current request is the next prefix.
                let cut = a
                    .windows(14)
                    .rposition(|w| w == br#"{"role":"user""#)
                    .unwrap();
                assert!(b.starts_with(&a[..cut]));
            }
        }
        // The first turn wrote the cache, the second read it; the answers
        // and the totals say so.
        assert_eq!(first.usage.read, 0);
        assert!(first.usage.written > 0, "{:?}", first.usage);
        // Anthropic: through the first request's last breakpoint; OpenAI:
        // all of the first request but its current-request message.
        let reread = match provider {
            Provider::Anthropic => first.usage.written,
            Provider::OpenAi => {
                let last = first.json["messages"]
                    .as_array()
                    .unwrap()
                    .last()
                    .unwrap()
                    .clone();
                first.usage.written - last["content"].as_str().unwrap().len().div_ceil(4) as u64
            }
        };
        assert!(
            second.usage.read >= reread,
            "{:?} {:?}",
            first.usage,
            second.usage
        );
        assert_eq!(
            answers[1]["usage"]["cache_read_input_tokens"],
            second.usage.read
        );
        let (_, stats) = get(&format!("{}/v1/stats", srv.url)).await;
        let stats: Value = serde_json::from_str(&stats).unwrap();
        assert_eq!(
            stats["turns"]["usage"]["cache_read_input_tokens"],
            second.usage.read
        );
        srv.stop().await;
    }
}
