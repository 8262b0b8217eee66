//! A fleet under faults: a three-node JetStream cluster (stream replicas
//! 3), two `wmreplay serve` replicas as processes, 20 clients sending turns
//! (through the mock model) and record batches over 50 logs through both,
//! with one NATS node and one replica killed with SIGKILL mid-run and
//! started again. Afterwards every acknowledged record is in the stream
//! exactly once, no log holds a torn or repeated line, both replicas'
//! caches are the stream's bytes, and their `/v1/context` bodies are the
//! same as each other's and as a one-shot `respond` over the stream.
//!
//! Runs for `WMREPLAY_FLEET_SECS` seconds (default 45). Needs `nats-server`
//! (see `tests/mock/nats.rs`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wmreplay::server::Provider;

use crate::mock;

use mock::nats::Nats;
use mock::process::Serving;

const LOGS: usize = 50;
const CLIENTS: usize = 20;

fn replica(dir: &Path, nats: &str, upstream: &str) -> Serving {
    std::fs::create_dir_all(dir).unwrap();
    let args: Vec<String> = [
        "--log-dir",
        dir.to_str().unwrap(),
        "--jetstream",
        nats,
        "--replicas",
        "3",
        "--jetstream-timeout",
        "20",
        // A retry waits for a dead replica's close at most this long.
        "--upstream-timeout",
        "10",
        "--upstream",
        upstream,
        "--cache",
        "none",
        "--no-fsync",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Serving::launch(&args, &[("ANTHROPIC_API_KEY", mock::KEY)], None)
}

/// What the clients were told was written.
#[derive(Default)]
struct Acked {
    /// Record ids, by log.
    records: Vec<(usize, String)>,
    /// Turns answered, by log: the user's text and the answer's.
    turns: Vec<(usize, String, String)>,
}

/// Sends `body` to `path` on a live replica until one answers 200 (the
/// same idempotency key every time), for at most 60 s; the answer.
async fn send(
    urls: &Mutex<Vec<String>>,
    path: &str,
    body: String,
    key: &str,
    ndjson: bool,
    pick: usize,
) -> Option<Value> {
    let client = mock::client();
    let began = Instant::now();
    let mut attempt = pick;
    let mut last = String::new();
    while began.elapsed() < Duration::from_secs(60) {
        let url = {
            let u = urls.lock().unwrap();
            u[attempt % u.len()].clone()
        };
        attempt += 1;
        let r = client
            .post(format!("{url}{path}"))
            .header(
                "content-type",
                if ndjson {
                    "application/x-ndjson"
                } else {
                    "application/json"
                },
            )
            .header("idempotency-key", key)
            .timeout(Duration::from_secs(30))
            .body(body.clone())
            .send()
            .await;
        match r {
            Ok(r) if r.status() == 200 => return r.json().await.ok(),
            Ok(r) => {
                let status = r.status();
                last = format!("{url}: {status} {}", r.text().await.unwrap_or_default());
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => {
                last = format!("{url}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await
            }
        }
    }
    // Shown when the test fails: what kept this one from an answer.
    eprintln!(
        "{path} {key}: no answer in {:?}, {} attempts; the last: {last}",
        began.elapsed(),
        attempt - pick
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs nats-server: bash .ci/nats-server.sh, then run with --ignored (CI does)"]
async fn a_fleet_loses_nothing_acknowledged_through_node_and_replica_kills() {
    let secs: u64 = std::env::var("WMREPLAY_FLEET_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(45);
    let root = tempfile::tempdir().unwrap();
    let mut nodes = Nats::cluster(&root.path().join("nats"));
    let nats_urls = nodes.iter().map(Nats::url).collect::<Vec<_>>().join(",");
    let (upstream, _m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let dirs: Vec<PathBuf> = ["a", "b"].iter().map(|d| root.path().join(d)).collect();
    let (n, u) = (nats_urls.clone(), upstream.clone());
    let (d0, d1) = (dirs[0].clone(), dirs[1].clone());
    let mut replicas: Vec<Serving> =
        tokio::task::spawn_blocking(move || vec![replica(&d0, &n, &u), replica(&d1, &n, &u)])
            .await
            .unwrap();
    let urls = Arc::new(Mutex::new(
        replicas.iter().map(|r| r.url.clone()).collect::<Vec<_>>(),
    ));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let stop_at = Instant::now() + Duration::from_secs(secs);
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (urls, acked) = (urls.clone(), acked.clone());
        clients.push(tokio::spawn(async move {
            let mut n = 0usize;
            while Instant::now() < stop_at {
                let log = (c * 7 + n * 13) % LOGS;
                n += 1;
                if n.is_multiple_of(3) {
                    let text = format!("turn c{c} n{n}");
                    let ok = send(
                        &urls,
                        &format!("/v1/logs/log-{log}/respond"),
                        json!({"text": text}).to_string(),
                        &format!("t-c{c}-n{n}"),
                        false,
                        c + n,
                    )
                    .await;
                    if let Some(a) = ok {
                        let answer = a["text"].as_str().unwrap_or_default().to_string();
                        acked.lock().unwrap().turns.push((log, text, answer));
                    }
                } else {
                    let ids: Vec<String> = (0..2).map(|i| format!("c{c}-n{n}-{i}")).collect();
                    let body: String = ids
                        .iter()
                        .map(|id| format!("{}\n", json!({"type": "wm_event", "id": id})))
                        .collect();
                    let ok = send(
                        &urls,
                        &format!("/v1/logs/log-{log}/records"),
                        body,
                        &format!("r-c{c}-n{n}"),
                        true,
                        c + n,
                    )
                    .await;
                    if ok.is_some() {
                        let mut a = acked.lock().unwrap();
                        a.records.extend(ids.into_iter().map(|id| (log, id)));
                    }
                }
            }
        }));
    }
    // The faults: a NATS node, then a replica, killed; both back later.
    let third = Duration::from_secs(secs) / 3;
    tokio::time::sleep(third).await;
    nodes[1].stop();
    tokio::time::sleep(third / 2).await;
    let dead = replicas.remove(0);
    urls.lock().unwrap().retain(|u| *u != dead.url);
    drop(dead); // SIGKILL
    tokio::time::sleep(third / 2).await;
    nodes[1].restart();
    let (n, u, d0) = (nats_urls.clone(), upstream.clone(), dirs[0].clone());
    let back = tokio::task::spawn_blocking(move || replica(&d0, &n, &u))
        .await
        .unwrap();
    urls.lock().unwrap().push(back.url.clone());
    replicas.insert(0, back);
    for c in clients {
        c.await.unwrap();
    }

    // Every log through both replicas: the same body from each.
    let client = mock::client();
    let mut bodies: Vec<Vec<String>> = vec![Vec::new(); 2];
    for (r, srv) in replicas.iter_mut().enumerate() {
        for log in 0..LOGS {
            let resp = client
                .post(format!("{}/v1/logs/log-{log}/context", srv.url))
                .header("content-type", "application/json")
                .body(json!({"text": "q"}).to_string())
                .send()
                .await
                .unwrap_or_else(|e| {
                    panic!("replica {r}, log-{log}: {e}; its stderr:\n{}", srv.stderr())
                });
            assert_eq!(resp.status(), 200);
            bodies[r].push(resp.text().await.unwrap());
        }
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    assert!(
        acked.records.len() > 100 && acked.turns.len() > 20,
        "too little got through: {} records, {} turns",
        acked.records.len(),
        acked.turns.len()
    );
    eprintln!(
        "acknowledged: {} records, {} turns",
        acked.records.len(),
        acked.turns.len()
    );
    let stream = read_stream(&nodes, LOGS).await;
    let mut seen_ids: HashMap<String, usize> = HashMap::new();
    let mut answers: HashMap<String, usize> = HashMap::new();
    let mut inputs: HashMap<String, usize> = HashMap::new();
    for log in 0..LOGS {
        let bytes = &stream[log];
        for d in &dirs {
            let cache = std::fs::read(d.join(format!("log-{log}.log"))).unwrap_or_default();
            assert!(
                cache == *bytes,
                "replica {d:?}'s cache of log-{log} is the stream"
            );
        }
        assert!(
            bodies[0][log] == bodies[1][log],
            "log-{log}: the replicas disagree"
        );
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "log-{log}: a torn line"
        );
        let mut lines = HashSet::new();
        for line in text.lines() {
            assert!(lines.insert(line), "log-{log}: a repeated line {line}");
            let v: Value = serde_json::from_str(line).expect("whole JSON lines");
            if let Some(id) = v["id"].as_str() {
                *seen_ids.entry(format!("{log}/{id}")).or_default() += 1;
            }
            if v["type"] == "text_input" {
                *inputs
                    .entry(format!("{log}/{}", v["text"].as_str().unwrap()))
                    .or_default() += 1;
            }
            if v["type"] == "text_output" {
                *answers
                    .entry(format!("{log}/{}", v["text"].as_str().unwrap()))
                    .or_default() += 1;
            }
        }
        // A one-shot replay of the stream's bytes is what the replicas send.
        let file = root.path().join(format!("oneshot-{log}.log"));
        std::fs::write(&file, bytes).unwrap();
        let out = mock::process::wmreplay()
            .args([
                "respond",
                file.to_str().unwrap(),
                "--text",
                "q",
                "--model",
                "test-model",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            bodies[0][log],
            "log-{log}: one-shot respond over the stream"
        );
    }
    for (log, id) in &acked.records {
        assert_eq!(
            seen_ids.get(&format!("{log}/{id}")),
            Some(&1),
            "record {id} of log-{log}"
        );
    }
    let mut interrupted = 0;
    for (log, text, answer) in &acked.turns {
        // One input a turn, whichever replicas its retries went through.
        assert_eq!(
            inputs.get(&format!("{log}/{text}")),
            Some(&1),
            "the input of {text:?}, log-{log}"
        );
        if answer.is_empty() {
            // Closed as interrupted: its first attempt died with a replica.
            interrupted += 1;
            continue;
        }
        assert_eq!(answer, &mock::answer_to(text), "the answer of {text:?}");
        assert_eq!(
            answers.get(&format!("{log}/{answer}")),
            Some(&1),
            "turn {text:?} of log-{log}"
        );
    }
    eprintln!("{interrupted} acknowledged turns were closed as interrupted");
    for r in replicas {
        r.stop();
    }
    drop(nodes);
}

/// Each log's subject, read from the stream message by message.
async fn read_stream(nodes: &[Nats], logs: usize) -> Vec<Vec<u8>> {
    let servers: Vec<async_nats::ServerAddr> =
        nodes.iter().map(|n| n.url().parse().unwrap()).collect();
    let client = async_nats::connect(servers).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let stream = js.get_stream("WMREPLAY").await.unwrap();
    let mut out = Vec::new();
    for log in 0..logs {
        let subject = format!("wmreplay.logs.log-{log}");
        let mut bytes = Vec::new();
        let mut seq = 1;
        loop {
            match stream
                .raw_message_builder()
                .sequence(seq)
                .next_by_subject(subject.clone())
                .send()
                .await
            {
                Ok(m) => {
                    bytes.extend_from_slice(&m.payload);
                    seq = m.sequence + 1;
                }
                Err(e)
                    if e.kind()
                        == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
                {
                    break;
                }
                Err(e) => panic!("reading {subject}: {e}"),
            }
        }
        out.push(bytes);
    }
    out
}
