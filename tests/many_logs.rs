//! The write API (`POST /v1/records`), many logs in one server
//! (`--log-dir`), and access control.

mod mock;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mock::*;
use serde_json::{Value, json};
use wmreplay::server::{ApiKey, Provider};
use wmreplay::{CurrentRequest, Format, ReplayOptions, replay};

async fn send(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> (u16, String, reqwest::header::HeaderMap) {
    let mut r = client().request(method, url);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r.body(b);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    (status, resp.text().await.unwrap(), h)
}

async fn records(url: &str, body: &str, ndjson: bool) -> (u16, Value) {
    let ct = if ndjson {
        "application/x-ndjson"
    } else {
        "application/json"
    };
    let (status, text, _) = send(
        reqwest::Method::POST,
        url,
        &[("content-type", ct)],
        Some(body.to_string()),
    )
    .await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A restarted server (or one whose log another writer appended to with a
/// faster clock) never stamps a record below the log's last one: its clock
/// resumes from the log's tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stamps_resume_from_the_logs_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let ahead: u64 = 4_000_000_000_000; // the year 2096
    std::fs::write(&log, format!("{{\"type\":\"a\",\"ts_ms\":{ahead}}}\n")).unwrap();
    let srv = start(config(&log, None, Provider::Anthropic)).await;
    let url = format!("{}/v1/records", srv.url);
    let (status, r) = records(&url, r#"{"type":"wm_event"}"#, false).await;
    assert_eq!(status, 200, "{r}");
    assert!(r["records"][0]["ts_ms"].as_u64().unwrap() >= ahead, "{r}");
    srv.stop().await;
}

/// The lines of a log (its `\n`s kept out).
fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_checked_whole_and_written_at_the_offsets_answered() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let mut cfg = config(&log, None, Provider::Anthropic);
    cfg.max_record_bytes = 1000;
    let srv = start(cfg).await;
    let url = format!("{}/v1/records", srv.url);

    // One object, with its ts_ms kept and pretty-printed JSON made compact.
    let (status, a) = records(
        &url,
        "{ \"type\" : \"wm_event\",\n \"ts_ms\": 5, \"data\": {\"k\": \"v w\"} }",
        false,
    )
    .await;
    assert_eq!(status, 200, "{a}");
    assert_eq!(a["written"], 1);
    assert_eq!(a["records"][0]["ts_ms"], 5.0);
    // A batch without ts_ms: stamped from the clock, first in the object.
    let (status, b) = records(
        &url,
        r#"[{"type":"wm_insight","insight":"x"},{"type":"wm_event","ts_ms":7}]"#,
        false,
    )
    .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["written"], 2);
    let stamped = b["records"][0]["ts_ms"].as_u64().unwrap();
    assert!(stamped > 1_700_000_000_000, "a clock time: {stamped}");
    // NDJSON, blank lines ignored.
    let (status, c) = records(
        &url,
        "{\"type\":\"vision\",\"ts_ms\":9}\n\n{\"type\":\"tool\",\"ts_ms\":10}\n",
        true,
    )
    .await;
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["written"], 2);
    // A line is judged as sent: `1 2` is no number, though `12` would be.
    for body in [
        "{\"type\":\"a\",\"ts_ms\":1 2}",
        "{\"type\":\"a\",\"ts_ms\":1, \"x\":t rue}",
    ] {
        let (status, e) = records(&url, body, true).await;
        assert_eq!(status, 400, "{body}: {e}");
        assert_eq!(e["error"]["code"], "invalid_record", "{e}");
    }

    let written = std::fs::read(&log).unwrap();
    let want = [
        r#"{"type":"wm_event","ts_ms":5,"data":{"k":"v w"}}"#.to_string(),
        format!(r#"{{"ts_ms":{stamped},"type":"wm_insight","insight":"x"}}"#),
        r#"{"type":"wm_event","ts_ms":7}"#.into(),
        r#"{"type":"vision","ts_ms":9}"#.into(),
        r#"{"type":"tool","ts_ms":10}"#.into(),
    ];
    assert_eq!(lines(&log), want);
    // Each answer's offset and length point at its line.
    for (answer, range) in [(&a, 0..1), (&b, 1..3), (&c, 3..5)] {
        for (r, i) in answer["records"].as_array().unwrap().iter().zip(range) {
            let at = r["offset"].as_u64().unwrap() as usize;
            let len = r["bytes"].as_u64().unwrap() as usize;
            assert_eq!(&written[at..at + len], format!("{}\n", want[i]).as_bytes());
        }
    }

    // A bad record anywhere rejects the whole batch; nothing is written.
    let before = std::fs::read(&log).unwrap();
    for (body, ndjson, index, what) in [
        (
            r#"[{"type":"a","ts_ms":1},{"ts_ms":2},{"type":"c"}]"#,
            false,
            "record 1",
            "type",
        ),
        (
            r#"[{"type":"a"},{"type":"b","ts_ms":"soon"}]"#,
            false,
            "record 1",
            "number",
        ),
        (r#"[{"type":"a"},[1,2]]"#, false, "record 1", "object"),
        (
            "{\"type\":\"a\"}\n{\"type\":\"b\",}\n",
            true,
            "record 1",
            "JSON",
        ),
        (r#"[{"type":"a"}"#, false, "", "JSON"),
        ("[]", false, "", "no record"),
        ("42", false, "record 0", "object"),
    ] {
        let (status, e) = records(&url, body, ndjson).await;
        assert_eq!(status, 400, "{body}: {e}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(message.contains(index), "{body}: {message}");
        assert!(
            message.to_lowercase().contains(&what.to_lowercase()),
            "{body}: {message}"
        );
    }
    // An oversized record (the limit is set to 1,000 bytes here).
    let big = format!(
        r#"[{{"type":"a"}},{{"type":"b","x":"{}"}}]"#,
        "y".repeat(1000)
    );
    let (status, e) = records(&url, &big, false).await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["code"], "record_too_large");
    assert!(e["error"]["message"].as_str().unwrap().contains("record 1"));
    assert_eq!(std::fs::read(&log).unwrap(), before, "nothing written");

    // Every record written replays.
    let r = replay(&before, &ReplayOptions::default());
    assert_eq!(r.stats().parsed_entries, 5);
    assert_eq!(r.stats().total_lines, 5);

    // The same Idempotency-Key: the first answer again, nothing written twice.
    let body = r#"{"type":"once"}"#.to_string();
    let h = [
        ("content-type", "application/json"),
        ("idempotency-key", "k-1"),
    ];
    let (s1, a1, _) = send(reqwest::Method::POST, &url, &h, Some(body.clone())).await;
    let (s2, a2, h2) = send(reqwest::Method::POST, &url, &h, Some(body)).await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(a1, a2);
    assert_eq!(h2.get("idempotent-replayed").unwrap(), "true");
    let (s3, _, _) = send(
        reqwest::Method::POST,
        &url,
        &h,
        Some(r#"{"type":"other"}"#.into()),
    )
    .await;
    assert_eq!(s3, 422);
    assert_eq!(
        lines(&log)
            .iter()
            .filter(|l| l.contains("\"once\""))
            .count(),
        1
    );
    srv.stop().await;
}

/// Sends a request with its path exactly as given (an HTTP client would
/// resolve `..` and `%2e%2e` before sending); returns the status and body.
async fn raw(base: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn dir_config(dir: &Path, upstream: Option<&str>) -> wmreplay::server::Config {
    let mut c = config(&dir.join("unused.log"), upstream, Provider::Anthropic);
    c.log_dir = Some(dir.to_path_buf());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ids_never_touch_a_file_outside_the_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("logs");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(
        outside.join("secret.log"),
        "{\"type\":\"secret\",\"ts_ms\":1}\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.join("secret.log"), dir.join("link.log")).unwrap();
    let srv = start(dir_config(&dir, None)).await;
    let long = "a".repeat(200);
    for (id, want) in [
        ("..", 400),
        ("%2e%2e", 400),
        ("a%2Fb", 400),
        (".hidden", 400),
        (long.as_str(), 400),
        ("link", 403),
    ] {
        for route in ["records", "context", "stats"] {
            let method = if route == "stats" { "GET" } else { "POST" };
            let (status, body) = raw(
                &srv.url,
                method,
                &format!("/v1/logs/{id}/{route}"),
                r#"{"type":"x","text":"hi"}"#,
            )
            .await;
            assert_eq!(status, want, "{id} {route}: {body}");
            let e: Value = serde_json::from_str(&body).unwrap();
            assert!(e["error"]["code"].is_string(), "{body}");
        }
    }
    // `a/b` is not a route at all.
    let (status, _, _) = send(
        reqwest::Method::POST,
        &format!("{}/v1/logs/a/b/records", srv.url),
        &[],
        Some("{}".into()),
    )
    .await;
    assert_eq!(status, 404);
    // Nothing outside was read into an answer or written; nothing new inside.
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.log")).unwrap(),
        "{\"type\":\"secret\",\"ts_ms\":1}\n"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    let inside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(inside, ["link.log"]);
    // A good id: an empty replay before its first write, created by it.
    let (status, body, _) = send(
        reqwest::Method::GET,
        &format!("{}/v1/logs/agent-1/stats", srv.url),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(!dir.join("agent-1.log").exists(), "a read creates nothing");
    let (status, _) = records(
        &format!("{}/v1/logs/agent-1/records", srv.url),
        r#"{"type":"hello"}"#,
        false,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(lines(&dir.join("agent-1.log")).len(), 1);
    let (_, list, _) = send(
        reqwest::Method::GET,
        &format!("{}/v1/logs", srv.url),
        &[],
        None,
    )
    .await;
    let list: Value = serde_json::from_str(&list).unwrap();
    let ids: Vec<&str> = list["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["agent-1", "link"]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_every_route_but_healthz_and_is_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = dir_config(dir.path(), None);
    let token = "tok-very-secret-123";
    cfg.auth_token = Some(ApiKey(token.into()));
    let srv = start(cfg).await;
    let url = format!("{}/v1/logs/a/records", srv.url);
    let body = Some(r#"{"type":"x"}"#.to_string());
    let right = format!("Bearer {token}");
    for (auth, want) in [
        (None, 401),
        (Some("Bearer wrong"), 401),
        (Some("Bearer tok-very-secret-12"), 401),
        (Some("Basic dG9rOnRvaw=="), 401),
        (Some(right.as_str()), 200),
    ] {
        let mut h = vec![("content-type", "application/json")];
        if let Some(a) = auth {
            h.push(("authorization", a));
        }
        let (status, text, headers) = send(reqwest::Method::POST, &url, &h, body.clone()).await;
        assert_eq!(status, want, "{auth:?}: {text}");
        assert!(!text.contains(token), "the token is never echoed");
        if want == 401 {
            assert_eq!(headers.get("www-authenticate").unwrap(), "Bearer");
            let e: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(e["error"]["code"], "unauthorized");
        }
    }
    for path in ["/v1/logs", "/v1/logs/a/stats"] {
        let (status, _, _) = send(
            reqwest::Method::GET,
            &format!("{}{path}", srv.url),
            &[],
            None,
        )
        .await;
        assert_eq!(status, 401, "{path}");
    }
    let (status, _, _) = send(
        reqwest::Method::GET,
        &format!("{}/healthz", srv.url),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 200);
    srv.stop().await;
}

/// This process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Memory the server may use beyond its live-bytes bound under this load:
/// connections, the clients and the mock upstream in this same process,
/// allocator slack.
const OVERHEAD: u64 = 96 << 20;

/// The body a log's `/v1/context` must equal: a one-shot replay of its file.
fn one_shot(path: &Path, text: &str) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let r = replay(&bytes, &ReplayOptions::default());
    let body = r.render_request(
        Format::Anthropic,
        &wmreplay::system_prompt(None),
        &CurrentRequest {
            text,
            session_id: None,
        },
    );
    let fields = r#"{"model":"test-model","max_tokens":1024,"#;
    let mut out = fields.as_bytes().to_vec();
    out.extend_from_slice(&body[1..]);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_logs_and_twenty_clients_lose_nothing_and_stay_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (up, _mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = dir_config(dir.path(), Some(&up));
    // Small enough that states are dropped and rebuilt all along.
    let bound: u64 = 64 << 10;
    cfg.max_live_bytes = bound;
    let srv = start(cfg).await;
    let url = Arc::new(srv.url.clone());
    let acked: Arc<std::sync::Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let counter = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(4);
    let peak = Arc::new(AtomicU64::new(0));
    let rss_before = rss();
    let rss_peak = Arc::new(AtomicU64::new(rss_before));
    let mut tasks = Vec::new();
    for c in 0..20u64 {
        let (url, acked, counter, peak) =
            (url.clone(), acked.clone(), counter.clone(), peak.clone());
        let rss_peak = rss_peak.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = c.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            while Instant::now() < deadline {
                let id = format!("agent-{}", next() % 100);
                match next() % 4 {
                    0 | 1 => {
                        let n = counter.fetch_add(1, Ordering::Relaxed);
                        let marker = format!("m{n}");
                        let body = json!([
                            {"type": "wm_event", "marker": marker, "pad": "p".repeat((next() % 2000) as usize)},
                            {"type": "wm_insight", "marker": format!("{marker}b")},
                        ]);
                        let (status, _) = records(
                            &format!("{url}/v1/logs/{id}/records"),
                            &body.to_string(),
                            false,
                        )
                        .await;
                        if status == 200 {
                            let mut a = acked.lock().unwrap();
                            let e = a.entry(id).or_default();
                            e.push(marker.clone());
                            e.push(format!("{marker}b"));
                        } else {
                            assert_eq!(status, 503, "only a busy server may refuse");
                        }
                    }
                    2 => {
                        let (status, body) = post(
                            &format!("{url}/v1/logs/{id}/respond"),
                            json!({"text": format!("q{}", next() % 1000)}).to_string(),
                        )
                        .await;
                        assert!(status == 200 || status == 503, "{status} {body}");
                    }
                    _ => {
                        let (status, body) = post(
                            &format!("{url}/v1/logs/{id}/context"),
                            r#"{"text":"peek"}"#,
                        )
                        .await;
                        assert!(status == 200 || status == 503, "{status} {body}");
                    }
                }
                let (_, list, _) =
                    send(reqwest::Method::GET, &format!("{url}/v1/logs"), &[], None).await;
                let list: Value = serde_json::from_str(&list).unwrap();
                peak.fetch_max(list["live_bytes"].as_u64().unwrap(), Ordering::Relaxed);
                rss_peak.fetch_max(rss(), Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 50, "most logs were written: {}", acked.len());
    for (id, markers) in &acked {
        let path = dir.path().join(format!("{id}.log"));
        let all = lines(&path);
        // Every line parses, and every acknowledged record is there once.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for l in &all {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{id}: {e}: {l}"));
            if let Some(m) = v["marker"].as_str() {
                *seen.entry(m.to_string()).or_default() += 1;
            }
        }
        for m in markers {
            assert_eq!(seen.get(m), Some(&1), "{id}: {m}");
        }
        // The server's body for the log is a one-shot replay of its file.
        let (status, got) = post(
            &format!("{}/v1/logs/{id}/context", srv.url),
            r#"{"text":"final"}"#,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            String::from_utf8(without_cache_markers(got.as_bytes())).unwrap(),
            String::from_utf8(one_shot(&path, "final")).unwrap(),
            "{id}"
        );
    }
    // The live replays held stayed within the bound plus the one log in use
    // (a single log's state is never dropped while it is being served).
    let largest = acked
        .keys()
        .map(|id| {
            std::fs::metadata(dir.path().join(format!("{id}.log")))
                .unwrap()
                .len()
        })
        .max()
        .unwrap();
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak <= bound + 4 * largest,
        "peak live bytes {peak} over the bound {bound} (largest log {largest} B)"
    );
    let grown = rss_peak.load(Ordering::Relaxed).saturating_sub(rss_before);
    assert!(
        grown <= bound + OVERHEAD,
        "resident memory grew by {grown} B: more than the bound {bound} B + {OVERHEAD} B"
    );
    srv.stop().await;
}
