//! All-or-nothing record batches under `kill -9`: concurrent clients post
//! batches of 1–500 records to `serve --log-dir` while the server is killed
//! with SIGKILL and restarted, round after round. Every record carries its
//! batch's id, its index and the batch's size. Afterwards every batch is in
//! its log whole or not at all, no record appears twice, every acknowledged
//! batch is there, a retry with the same `Idempotency-Key` after a restart
//! answers (never a lasting `409`), and no log holds a torn line.
//!
//! `WMREPLAY_CRASH_ROUNDS` sets the number of rounds (default 6; the
//! closing figure of 50 rounds is run with `bash bench/crash_batches.sh`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use wmreplay::{ReplayOptions, replay};

const LOGS: [&str; 3] = ["alpha", "beta", "gamma"];
const CLIENTS: u64 = 6;

fn spawn(dir: &Path, port: u16) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_wmreplay"))
        .args(["serve", "--log-dir"])
        .arg(dir)
        .args(["--addr", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn client() -> reqwest::Client {
    wmreplay::server::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

async fn wait_up(url: &str) {
    for _ in 0..400 {
        if let Ok(r) = client().get(format!("{url}/healthz")).send().await
            && r.status() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the server did not come up");
}

/// One batch a client sent: its log, id and size.
#[derive(Debug, Clone)]
struct Batch {
    log: &'static str,
    id: String,
    n: usize,
}

impl Batch {
    fn body(&self) -> String {
        let records: Vec<Value> = (0..self.n)
            .map(|i| {
                json!({"type": "wm_event", "batch": self.id, "i": i, "n": self.n,
                       "pad": "x".repeat(i % 97)})
            })
            .collect();
        Value::Array(records).to_string()
    }

    /// Posts it; `Some(status)` if an answer came.
    async fn post(&self, url: &str) -> Option<u16> {
        let r = client()
            .post(format!("{url}/v1/logs/{}/records", self.log))
            .header("idempotency-key", &self.id)
            .header("content-type", "application/json")
            .body(self.body())
            .send()
            .await
            .ok()?;
        let status = r.status().as_u16();
        r.text().await.ok()?;
        Some(status)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_whole_or_absent_and_written_once_across_kill_9() {
    let rounds: u64 = std::env::var("WMREPLAY_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let acked: Arc<Mutex<Vec<Batch>>> = Arc::default();
    let mut unanswered: Vec<Batch> = Vec::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut retried = 0usize;
    for round in 0..rounds {
        let mut server = spawn(dir.path(), port);
        wait_up(&url).await;
        // The batches the last kill cut off, retried with the same key: each
        // is answered now (written once, or found written), never a 409.
        for b in std::mem::take(&mut unanswered) {
            let status = b.post(&url).await;
            assert_eq!(status, Some(200), "retry of {b:?} after the restart");
            retried += 1;
            acked.lock().unwrap().push(b);
        }
        let lost: Arc<Mutex<Vec<Batch>>> = Arc::default();
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let (acked, lost, url) = (acked.clone(), lost.clone(), url.clone());
            let picks: Vec<(usize, usize)> = (0..40)
                .map(|_| ((next() % 3) as usize, 1 + (next() % 500) as usize))
                .collect();
            tasks.push(tokio::spawn(async move {
                for (k, (log, n)) in picks.into_iter().enumerate() {
                    let b = Batch {
                        log: LOGS[log],
                        id: format!("r{round}-c{c}-{k}"),
                        n,
                    };
                    match b.post(&url).await {
                        Some(200) => acked.lock().unwrap().push(b),
                        Some(s) => panic!("{b:?} answered {s}"),
                        None => {
                            lost.lock().unwrap().push(b);
                            return;
                        }
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(150 + next() % 400)).await;
        server.kill().unwrap(); // SIGKILL
        server.wait().unwrap();
        for t in tasks {
            t.await.unwrap();
        }
        unanswered = std::mem::take(&mut *lost.lock().unwrap());
    }
    // A last start settles the last kill; its retries answer too.
    let mut server = spawn(dir.path(), port);
    wait_up(&url).await;
    for b in std::mem::take(&mut unanswered) {
        assert_eq!(b.post(&url).await, Some(200), "retry of {b:?}");
        retried += 1;
        acked.lock().unwrap().push(b);
    }
    server.kill().unwrap();
    server.wait().unwrap();

    let acked = acked.lock().unwrap().clone();
    let mut total_batches = 0;
    let mut torn = 0;
    for log in LOGS {
        let path = dir.path().join(format!("{log}.log"));
        let bytes = std::fs::read(&path).unwrap_or_default();
        let r = replay(&bytes, &ReplayOptions::default());
        torn += r.stats().skipped_invalid_json + r.stats().skipped_invalid_shape;
        // batch id → (size, indices seen)
        let mut seen: BTreeMap<String, (usize, Vec<usize>)> = BTreeMap::new();
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(v) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            let id = v["batch"].as_str().unwrap().to_string();
            let e = seen
                .entry(id)
                .or_insert((v["n"].as_u64().unwrap() as usize, Vec::new()));
            e.1.push(v["i"].as_u64().unwrap() as usize);
        }
        for (id, (n, mut is)) in seen {
            is.sort_unstable();
            assert_eq!(
                is,
                (0..n).collect::<Vec<_>>(),
                "{log}: batch {id} is whole, once"
            );
            total_batches += 1;
        }
        let present: BTreeSet<String> = bytes
            .split(|&b| b == b'\n')
            .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
            .map(|v| v["batch"].as_str().unwrap().to_string())
            .collect();
        for b in acked.iter().filter(|b| b.log == log) {
            assert!(
                present.contains(&b.id),
                "acknowledged batch {} is in {log}",
                b.id
            );
        }
    }
    assert_eq!(torn, 0, "no torn or invalid line in any log");
    eprintln!(
        "{rounds} rounds: {} batches acknowledged ({retried} of them retried after a kill), \
         {total_batches} in the logs, none torn or doubled",
        acked.len()
    );
    assert!(
        acked.len() > rounds as usize,
        "batches were written between the kills"
    );
}
