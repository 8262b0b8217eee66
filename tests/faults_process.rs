//! Faults only a real process meets: its stderr broken (the reader gone, the
//! disk full), SIGTERM with a turn that hangs, clients that never read
//! their streamed answers. The server's promise for each: no request is
//! lost or slowed for it, and shutdown keeps its one deadline.

mod mock;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wmreplay::server::Provider;

use mock::process::*;
use mock::*;

/// One test at a time: each measures a server's memory, threads and
/// latency, which tests running beside it on the same cores would skew.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn sigterm(child: &Child) {
    // SAFETY: kill sends a signal to our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
}

/// A port free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn wait_up(url: &str) {
    for _ in 0..500 {
        if let Ok(r) = client().get(format!("{url}/healthz")).send().await
            && r.status() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the server did not come up");
}

/// Every kind of request a server answers, with stderr unusable: each one
/// answers 200 and the dropped log lines are counted.
async fn every_request_answers(url: &str, log: &std::path::Path) {
    for round in 0..5 {
        let (s, b) = get(&format!("{url}/healthz")).await;
        assert_eq!(s, 200, "round {round}: /healthz: {b}");
        let (s, b) = post(
            &format!("{url}/v1/records"),
            json!({"type": "note", "text": format!("n{round}")}).to_string(),
        )
        .await;
        assert_eq!(s, 200, "round {round}: /v1/records: {b}");
        let (s, b) = post(
            &format!("{url}/respond"),
            json!({"text": format!("q{round}")}).to_string(),
        )
        .await;
        assert_eq!(s, 200, "round {round}: /respond: {b}");
    }
    let (s, b) = get(&format!("{url}/v1/stats")).await;
    assert_eq!(s, 200);
    let v: Value = serde_json::from_str(&b).unwrap();
    let dropped = v["logging"]["dropped_lines"].as_u64().unwrap();
    assert!(
        dropped >= 5,
        "the lines stderr refused are counted: {dropped}"
    );
    let all = complete_records(log);
    assert!(
        all.iter().any(|v| v["text"] == "n4"),
        "the record was written"
    );
    assert!(all.iter().any(|v| v["text"] == answer_to("q4").as_str()));
}

/// The log's records, skipping a line still being written.
fn complete_records(log: &std::path::Path) -> Vec<Value> {
    std::fs::read(log)
        .unwrap()
        .split(|&b| b == b'\n')
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .collect()
}

async fn get(url: &str) -> (u16, String) {
    let r = client()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    (r.status().as_u16(), r.text().await.unwrap())
}

/// 3. stderr's reader goes away (a closed pipe) and stderr on a full disk
/// (`/dev/full`): every request still answers, and the process exits 0 on
/// SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_stderr_loses_log_lines_never_requests() {
    let _one = ONE_AT_A_TIME.lock().await;
    for full_disk in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, _mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
        let port = free_port();
        let mut cmd = wmreplay();
        cmd.args(["serve", "--log"])
            .arg(&log)
            .args(["--addr", &format!("127.0.0.1:{port}"), "--upstream", &up])
            .args(["--no-fsync"])
            .env("ANTHROPIC_API_KEY", "k")
            .env("WMREPLAY_MODEL", "test-model")
            .env("RUST_LOG", "debug")
            .stdout(Stdio::null());
        let mut child = if full_disk {
            let full = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap();
            cmd.stderr(full).spawn().unwrap()
        } else {
            let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
            let mut r = BufReader::new(child.stderr.take().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).unwrap() > 0 && !line.contains("listening") {
                line.clear();
            }
            // The reader goes away: from now on stderr is a broken pipe.
            drop(r);
            child
        };
        let url = format!("http://127.0.0.1:{port}");
        wait_up(&url).await;
        every_request_answers(&url, &log).await;
        sigterm(&child);
        let status = child.wait().unwrap();
        assert!(status.success(), "full_disk={full_disk}: {status:?}");
    }
}

/// 4. SIGTERM with a turn whose upstream never answers: the process exits
/// within `--shutdown-timeout`, and the turn is closed in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_hanging_upstream_stops_within_the_timeout() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, _mock) = start_mock(Provider::Anthropic, Mode::Slow(60_000)).await;
    let mut srv = Serving::start(
        &log,
        &["--upstream", &up, "--no-fsync", "--shutdown-timeout", "3"],
        &[("ANTHROPIC_API_KEY", "k")],
        None,
    );
    let url = srv.url.clone();
    let hanging = tokio::spawn(async move {
        client()
            .post(format!("{url}/respond"))
            .body(r#"{"text":"hangs","stream":true}"#)
            .send()
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    sigterm(&srv.child);
    let status = srv.child.wait().unwrap();
    let took = t.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_millis(3300),
        "stopped in {took:?} for a 3 s shutdown timeout"
    );
    let _ = hanging.await;
    let out = turns(&log, "text_output");
    assert_eq!(out.last().unwrap()["stop_reason"], "interrupted");
}

/// Complete `text_output` records in the log longer than `min` bytes,
/// counted without parsing (the log grows by hundreds of MB here).
fn long_outputs(log: &std::path::Path, min: usize) -> usize {
    let bytes = std::fs::read(log).unwrap();
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| l.len() > min && l.ends_with(b"}"))
        .filter(|l| l.windows(20).any(|w| w == b"\"type\":\"text_output\""))
        .count()
}

/// Asks `/healthz` of `addr` over and over from a thread of its own (so
/// that this process's runtime, busy with the mock upstream, does not slow
/// the probe) until `stop`; returns the slowest answer.
fn probe_healthz(
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut slowest = Duration::ZERO;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let t = Instant::now();
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
                .unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            assert!(out.starts_with("HTTP/1.1 200"), "{out}");
            slowest = slowest.max(t.elapsed());
            std::thread::sleep(Duration::from_millis(100));
        }
        slowest
    })
}

/// 5. Sixty clients ask for 4 MiB streamed answers and never read them:
/// every answer is recorded at the upstream's pace (within seconds, not
/// after the 30 s write timeout), `/healthz` answers within a second all
/// along, the server's memory stays within the documented bound (each
/// turn holds its answer while it runs, plus at most 256 KiB its client has
/// not read), and SIGTERM stops it within its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_clients_that_never_read_slow_nothing_and_hold_little() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let n = 60;
    let kib = 4096;
    mock.then((0..n).map(|_| Mode::Big(kib)));
    let srv = Serving::start(
        &log,
        &[
            "--upstream",
            &up,
            "--no-fsync",
            "--max-concurrent",
            "64",
            "--write-timeout",
            "30",
            "--shutdown-timeout",
            "2",
            "--max-tokens-window",
            "100000",
            "--tokenizer",
            "bytes",
            // The answers are recorded whole (a record's limit would cut
            // them; the memory held is what is measured here).
            "--max-record-bytes",
            "8MiB",
        ],
        &[("ANTHROPIC_API_KEY", "k")],
        None,
    );
    let addr: std::net::SocketAddr = srv.url.trim_start_matches("http://").parse().unwrap();
    let started = Instant::now();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = probe_healthz(addr, stop.clone());
    let mut stalled = Vec::new();
    for i in 0..n {
        stalled.push(non_reading_stream(addr, &format!("big {i}")).await);
    }
    loop {
        let done = long_outputs(&log, kib << 10);
        if done == n {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{done} of {n} answers recorded after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recorded_in = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let slowest = probe.join().unwrap();
    assert!(
        slowest < Duration::from_secs(1),
        "/healthz took {slowest:?} while the clients stalled"
    );
    let peak = peak_rss(srv.child.id());
    // The bound of docs/reliability.md: a base of 64 MB, and per turn
    // running three copies of its answer (decoded text, rendered line,
    // event pieces) and 256 KiB unread.
    let bound = (64 << 20) + n as u64 * (3 * ((kib as u64) << 10) + (256 << 10));
    assert!(
        peak < bound,
        "peak RSS {} MB over the bound {} MB",
        peak >> 20,
        bound >> 20
    );
    let t = Instant::now();
    let logs = srv.stop();
    assert!(
        t.elapsed() < Duration::from_millis(2300),
        "stopped in {:?} for a 2 s shutdown timeout",
        t.elapsed()
    );
    eprintln!(
        "{n} non-reading clients: answers recorded in {recorded_in:?}, slowest /healthz \
         {slowest:?}, peak RSS {} MB",
        peak >> 20
    );
    assert!(!logs.contains("panicked"));
    drop(stalled);
}

/// 11. A token a client puts in the query string is never logged, not even
/// at debug level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_the_query_string_is_never_logged() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let srv = Serving::start(&log, &["--no-fsync"], &[("RUST_LOG", "trace")], None);
    let secret = "qs-secret-0123456789abcdef";
    for path in ["/healthz", "/v1/stats", "/v1/context"] {
        let url = format!("{}{path}?token={secret}&access_token={secret}", srv.url);
        let _ = client().get(&url).send().await.unwrap();
        let _ = client()
            .post(&url)
            .body(r#"{"text":"q"}"#)
            .send()
            .await
            .unwrap();
    }
    let logs = srv.stop();
    assert!(logs.contains("/v1/stats"), "requests are logged: {logs}");
    assert!(!logs.contains(secret), "the query's token was logged");
    assert!(!logs.contains(&secret[..12]));
}

/// Resident memory of `pid` now, in bytes (VmRSS).
fn rss_now(pid: u32) -> u64 {
    proc_status(pid, "VmRSS") * 1024
}

/// A log of `wm_event` records of about 200 bytes, at least `bytes` long.
fn events_log(bytes: usize) -> Vec<u8> {
    let mut text = Vec::with_capacity(bytes + 256);
    let mut n = 0u64;
    while text.len() < bytes {
        text.extend_from_slice(
            format!(
                "{{\"type\":\"wm_event\",\"ts_ms\":{},\"text\":\"event {n} {}\"}}\n",
                1_763_700_000_000u64 + n,
                "z".repeat(150)
            )
            .as_bytes(),
        );
        n += 1;
    }
    text
}

/// Sends every `(url, body)` at once; their statuses, each a 200 or a 503
/// with `retry-after`.
async fn at_once(requests: Vec<(String, Vec<u8>)>) -> Vec<u16> {
    let mut all = Vec::new();
    for (url, body) in requests {
        all.push(tokio::spawn(async move {
            let r = client()
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            if status == 503 {
                assert!(
                    r.headers().get("retry-after").is_some(),
                    "503 without retry-after"
                );
            }
            let text = r.text().await.unwrap();
            assert!(
                matches!(status, 200 | 503),
                "{status}: {}",
                &text[..text.len().min(300)]
            );
            status
        }));
    }
    let mut out = Vec::new();
    for t in all {
        out.push(t.await.unwrap());
    }
    out
}

/// 7. Bounds that hold under concurrency: the work of requests running at
/// once — bodies of tiny records, replays of distinct logs, deltas of a
/// 100 MB log — is admitted against `--max-memory`; what is past it gets
/// 503 with `retry-after`, and the server's peak memory stays within the
/// budget (over what it held before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_work_stays_within_the_memory_budget() {
    let _one = ONE_AT_A_TIME.lock().await;
    let budget: u64 = 96 << 20;
    let slack: u64 = 48 << 20;
    // 16 bodies of 1 MiB of tiny records at once.
    {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let srv = Serving::start(
            &log,
            &[
                "--no-fsync",
                "--body-limit",
                "2MiB",
                "--max-memory",
                "96MiB",
            ],
            &[],
            None,
        );
        let before = rss_now(srv.child.id());
        let mut body = b"[".to_vec();
        let mut i = 0;
        while body.len() < (1 << 20) - 40 {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(format!(r#"{{"type":"t","n":{i}}}"#).as_bytes());
            i += 1;
        }
        body.push(b']');
        let url = format!("{}/v1/records", srv.url);
        let statuses = at_once((0..16).map(|_| (url.clone(), body.clone())).collect()).await;
        assert!(statuses.contains(&200));
        let peak = peak_rss(srv.child.id());
        eprintln!(
            "16 x 1 MiB of tiny records: {statuses:?}, peak {} MB over {} MB",
            peak >> 20,
            before >> 20
        );
        assert!(peak < before + budget + slack, "peak {} MB", peak >> 20);
        srv.stop();
    }
    // 40 distinct logs of 2 MB replayed at once under --log-dir.
    {
        let dir = tempfile::tempdir().unwrap();
        let text = events_log(2 << 20);
        for i in 0..40 {
            std::fs::write(dir.path().join(format!("l{i}.log")), &text).unwrap();
        }
        let args: Vec<String> = [
            "--log-dir",
            dir.path().to_str().unwrap(),
            "--no-fsync",
            "--max-live-bytes",
            "20MiB",
            "--max-memory",
            "64MiB",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let srv = Serving::launch(&args, &[], None);
        let before = rss_now(srv.child.id());
        let statuses = at_once(
            (0..40)
                .map(|i| {
                    let url = format!("{}/v1/logs/l{i}/context", srv.url);
                    (url, br#"{"text":"q"}"#.to_vec())
                })
                .collect(),
        )
        .await;
        assert!(statuses.contains(&200));
        let peak = peak_rss(srv.child.id());
        eprintln!(
            "40 logs of 2 MB: {} answered, peak {} MB over {} MB",
            statuses.iter().filter(|&&s| s == 200).count(),
            peak >> 20,
            before >> 20
        );
        assert!(
            peak < before + (64 << 20) + (20 << 20) + slack,
            "peak {} MB",
            peak >> 20
        );
        srv.stop();
    }
    // Eight deltas of a 100 MB log at once.
    {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wm.log");
        let text = events_log(100 << 20);
        std::fs::write(&log, &text).unwrap();
        drop(text);
        let srv = Serving::start(&log, &["--no-fsync", "--max-memory", "512MiB"], &[], None);
        let before = rss_now(srv.child.id());
        let url = format!("{}/v1/turn/prepare", srv.url);
        let statuses = at_once(
            (0..8)
                .map(|k| {
                    let body = json!({ "session_key": format!("s{k}") });
                    (url.clone(), body.to_string().into_bytes())
                })
                .collect(),
        )
        .await;
        assert!(statuses.contains(&200));
        let peak = peak_rss(srv.child.id());
        eprintln!(
            "8 deltas of 100 MB: {statuses:?}, peak {} MB over {} MB",
            peak >> 20,
            before >> 20
        );
        assert!(
            peak < before + (512 << 20) + slack,
            "peak {} MB",
            peak >> 20
        );
        srv.stop();
    }
}

/// Threads of `pid` now.
fn threads_of(pid: u32) -> u64 {
    proc_status(pid, "Threads")
}

/// 7. `--threads` is capped at a few per core: `stats --threads 100000`
/// finishes at once, and `serve --threads 100000` under 20 concurrent
/// replays keeps its thread count bounded and `/healthz` answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_thread_count_is_capped() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let t = Instant::now();
    let out = wmreplay()
        .args(["stats", "--threads", "100000"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "stats took {:?}",
        t.elapsed()
    );
    let srv = Serving::start(&log, &["--no-fsync", "--threads", "100000"], &[], None);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut peak_threads = 0;
    for round in 0..5 {
        let mut all = Vec::new();
        for i in 0..20 {
            // A record each, so each context replays something new.
            let url = srv.url.clone();
            all.push(tokio::spawn(async move {
                post(
                    &format!("{url}/v1/records"),
                    format!(r#"{{"type":"n","text":"{round} {i}"}}"#),
                )
                .await;
                post(&format!("{url}/v1/context"), r#"{"text":"q"}"#)
                    .await
                    .0
            }));
        }
        peak_threads = peak_threads.max(threads_of(srv.child.id()));
        for t in all {
            assert!(matches!(t.await.unwrap(), 200 | 503));
        }
        let (s, _) = get(&format!("{}/healthz", srv.url)).await;
        assert_eq!(s, 200);
        peak_threads = peak_threads.max(threads_of(srv.child.id()));
    }
    // The runtime's workers and blocking threads, the writer, and one pool
    // of at most 4 per core.
    assert!(
        peak_threads < 4 * cores + 600,
        "{peak_threads} threads for {cores} cores"
    );
    srv.stop();
}

/// 6. 1,500 logs written under an open-files limit of 1,024, each write
/// keyed (so each log opens its state store): every write succeeds (idle
/// logs are closed to make room; a log past the bound while all are busy
/// would get a 503 naming the limit, never an EMFILE 500), at most
/// `--max-open-logs` logs (and the ten in flight) hold their stores open,
/// and the process stays under the limit with a few threads, not one per
/// log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_hundred_logs_under_a_thousand_open_files() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> = [
        "--log-dir",
        dir.path().to_str().unwrap(),
        "--no-fsync",
        "--max-open-logs",
        "40",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let srv = Serving::launch_limited(&args, &[], Some(Limit::OpenFiles(1024)));
    let pid = srv.child.id();
    let mut peak_fds = 0;
    let mut peak_stores = 0;
    let mut peak_threads = 0;
    for wave in 0..(1500 / 10) {
        let mut all = Vec::new();
        for j in 0..10 {
            let i = wave * 10 + j;
            let url = format!("{}/v1/logs/log{i}/records", srv.url);
            all.push(tokio::spawn(async move {
                let r = client()
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("idempotency-key", format!("k{i}"))
                    .body(format!(r#"{{"type":"note","text":"n{i}"}}"#))
                    .send()
                    .await
                    .unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            }));
        }
        for t in all {
            let (s, b) = t.await.unwrap();
            assert_eq!(s, 200, "wave {wave}: {b}");
        }
        if wave % 10 == 0 {
            peak_fds = peak_fds.max(open_fds(pid));
            peak_threads = peak_threads.max(threads_of(pid));
        }
        peak_stores = peak_stores.max(open_stores(pid));
    }
    // A session delta and a turn preview on an early log: it reopens.
    let (s, b) = post(
        &format!("{}/v1/logs/log3/context", srv.url),
        r#"{"text":"q"}"#,
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let written = (0..1500)
        .filter(|i| dir.path().join(format!("log{i}.log")).exists())
        .count();
    assert_eq!(written, 1500);
    assert!(peak_fds < 1000, "{peak_fds} open files");
    assert!(
        peak_stores > 30 && peak_stores <= 50,
        "{peak_stores} logs' state stores open under --max-open-logs 40"
    );
    assert!(peak_threads < 100, "{peak_threads} threads for 1,500 logs");
    eprintln!(
        "1,500 logs: peak {peak_fds} open files, {peak_stores} stores, {peak_threads} threads"
    );
    srv.stop();
}

/// 7. The same limit with `--max-open-logs` left at its default, which the
/// limit lowers to what it allows (the bound the server refuses at): every
/// write and every inspector read of 300 logs succeeds (the least recently
/// used close their files to make room for the next; before, once the
/// bound was reached, every log without its files open got a 503 until
/// some went idle), and the inspector's handles on the logs are closed
/// with the rest (before, each log read kept one, outside the bound,
/// until the 1,024 ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_at_the_open_files_bound_make_room_for_the_next() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> = ["--log-dir", dir.path().to_str().unwrap(), "--no-fsync"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let srv = Serving::launch_limited(&args, &[], Some(Limit::OpenFiles(1024)));
    let pid = srv.child.id();
    let (mut peak_fds, mut peak_logs) = (0, 0);
    for (what, path) in [("write", "records"), ("timeline", "timeline?limit=5")] {
        for wave in 0..30 {
            let mut all = Vec::new();
            for j in 0..10 {
                let i = wave * 10 + j;
                let url = format!("{}/v1/logs/log{i}/{path}", srv.url);
                all.push(tokio::spawn(async move {
                    let r = if what == "write" {
                        client()
                            .post(&url)
                            .header("content-type", "application/json")
                            .header("idempotency-key", format!("k{i}"))
                            .body(format!(r#"{{"type":"note","text":"n{i}"}}"#))
                    } else {
                        client().get(&url)
                    };
                    let r = r.send().await.unwrap();
                    (r.status().as_u16(), r.text().await.unwrap())
                }));
            }
            for t in all {
                let (s, b) = t.await.unwrap();
                assert_eq!(s, 200, "{what}, wave {wave}: {b}");
            }
            peak_fds = peak_fds.max(open_fds(pid));
            peak_logs = peak_logs.max(open_logs(pid));
        }
    }
    // The limit leaves room for (1,024 - 512 - 64) / 8 = 56 logs.
    assert!(peak_fds < 700, "{peak_fds} open files");
    assert!(
        peak_logs <= 56 + 10,
        "{peak_logs} logs held open at once (bound 56, 10 in flight)"
    );
    eprintln!("300 logs at the bound: peak {peak_fds} open files, {peak_logs} logs open");
    srv.stop();
}

/// How many distinct logs (`*.log`) the process `pid` holds open.
fn open_logs(pid: u32) -> usize {
    open_files_named(pid, ".log")
}

/// How many logs' state stores the process `pid` holds open (a log's
/// writer and its requests have a connection each).
fn open_stores(pid: u32) -> usize {
    open_files_named(pid, ".wmreplay.db")
}

/// How many distinct files whose names end in `suffix` the process `pid`
/// holds open.
fn open_files_named(pid: u32, suffix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
        d.flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter(|t| t.to_string_lossy().ends_with(suffix))
            .collect::<std::collections::HashSet<_>>()
            .len()
    })
}
