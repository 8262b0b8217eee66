//! Hybrid search with a deterministic embeddings API served over HTTP
//! (`mock/embed.rs`): a record the words miss is found by meaning; the API
//! failing or slow leaves search lexical and the records are embedded once
//! it recovers; another model or a damaged vectors file embeds the log
//! again; the CLI, `POST /v1/search`, recall, `search_memory` and MCP give
//! the same hits; nothing is called without the flags.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wmreplay::search::{HybridOptions, SearchIndex, SearchOptions};
use wmreplay::server::{EmbedConfig, Provider};

use crate::mock;

use mock::embed::{self, Answer};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wmreplay"));
    for var in [
        "OPENAI_API_KEY",
        "WMREPLAY_EMBED_UPSTREAM",
        "WMREPLAY_EMBED_MODEL",
        "WMREPLAY_EMBED_KEY_ENV",
        "WMREPLAY_EMBED_DIMENSIONS",
        "WMREPLAY_EMBED_TIMEOUT",
        "WMREPLAY_EMBED_WEIGHT",
    ] {
        c.env_remove(var);
    }
    c
}

/// Where a log's planted records are.
struct Planted {
    /// "Maya parked the automobile…": found for `vehicle` or `car`.
    car: u64,
    /// "the physician moved…".
    doctor: u64,
    records: usize,
}

/// 200 records of eight words each (some with "invoice", once), three
/// planted ones, and an unrelated last one.
fn write_log(path: &Path) -> Planted {
    let words = [
        "deploy", "tests", "report", "meeting", "notes", "budget", "schedule", "review", "draft",
        "release",
    ];
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut at = 0u64;
    let mut line = |f: &mut std::io::BufWriter<std::fs::File>, l: String| {
        writeln!(f, "{l}").unwrap();
        let o = at;
        at += l.len() as u64 + 1;
        o
    };
    let (mut car, mut doctor) = (0, 0);
    for i in 0..200usize {
        let mut w: Vec<&str> = (0..8)
            .map(|k| words[(i * 7 + k * 3) % words.len()])
            .collect();
        if i % 9 == 4 {
            w[3] = "invoice";
        }
        line(
            &mut f,
            format!(
                r#"{{"type":"wm_event","ts_ms":{i},"text":"{}","n":{i}}}"#,
                w.join(" ")
            ),
        );
        match i {
            50 => {
                car = line(
                    &mut f,
                    r#"{"type":"wm_insight","ts_ms":50,"text":"Maya parked the automobile outside"}"#
                        .into(),
                )
            }
            120 => {
                doctor = line(
                    &mut f,
                    r#"{"type":"text_input","ts_ms":120,"session_id":"s2","text":"the physician moved my appointment"}"#
                        .into(),
                )
            }
            150 => {
                line(
                    &mut f,
                    r#"{"type":"wm_event","ts_ms":150,"text":"we went trekking above the lake"}"#
                        .into(),
                );
            }
            _ => {}
        }
    }
    line(
        &mut f,
        r#"{"type":"wm_event","ts_ms":999,"text":"zzz closing line"}"#.into(),
    );
    f.flush().unwrap();
    Planted {
        car,
        doctor,
        records: 204,
    }
}

fn vec_path(log: &Path) -> PathBuf {
    SearchIndex::vectors_path_for(&SearchIndex::path_for(log))
}

/// `wmreplay search LOG QUERY ARGS…`: its JSON, and its stderr.
fn cli_search(log: &Path, query: &str, args: &[&str]) -> (Value, String) {
    let out = bin()
        .arg("search")
        .arg(log)
        .arg(query)
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (serde_json::from_slice(&out.stdout).unwrap(), err)
}

fn offsets(hits: &Value) -> Vec<u64> {
    hits.as_array()
        .unwrap()
        .iter()
        .map(|h| h["offset"].as_u64().unwrap())
        .collect()
}

fn scores(hits: &Value) -> Vec<f64> {
    hits.as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect()
}

fn embed_args<'a>(url: &'a str, model: &'a str) -> Vec<&'a str> {
    vec!["--embed-upstream", url, "--embed-model", model]
}

#[test]
fn hybrid_finds_by_meaning_what_the_words_miss() {
    let (url, api, _rt) = embed::start_blocking();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let p = write_log(&log);
    // By words: no record says "vehicle".
    let (v, _) = cli_search(&log, "vehicle", &[]);
    assert_eq!(v["hits"], json!([]));
    assert!(api.requests().is_empty());
    assert!(!vec_path(&log).exists());
    // Hybrid: the automobile, the vectors' nearest, absent by words, so
    // its score is the vectors' weight times 1.
    let (v, err) = cli_search(&log, "vehicle", &embed_args(&url, "mock-embed"));
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(offsets(&v["hits"])[0], p.car, "{v}");
    let w = HybridOptions::default().vector_weight;
    assert!((scores(&v["hits"])[0] - w).abs() < 1e-9, "{v}");
    assert!(vec_path(&log).exists());
    let reqs = api.requests();
    assert!(
        reqs.iter()
            .all(|r| r.model == "mock-embed" && r.input.len() <= 64)
    );
    assert!(reqs.iter().all(|r| r.authorization.is_none()));
    assert_eq!(
        api.texts(),
        p.records + 1,
        "each record once, and the query"
    );
    // Filters hold for the vectors' ranking too.
    let mut args = embed_args(&url, "mock-embed");
    args.extend(["--kinds", "wm_event"]);
    let (v, _) = cli_search(&log, "vehicle", &args);
    assert!(!offsets(&v["hits"]).contains(&p.car));
    // Words and meaning together: the physician's record is in both
    // rankings for "doctor appointment", so first.
    let (v, _) = cli_search(&log, "doctor appointment", &embed_args(&url, "mock-embed"));
    assert_eq!(offsets(&v["hits"])[0], p.doctor, "{v}");
    // More than the vectors alone can give: the words count too.
    assert!(scores(&v["hits"])[0] > w, "{v}");
    assert_eq!(api.texts(), p.records + 3, "queries only");
}

/// `--embed-weight`: how much the vectors count against the words. Every
/// hit's score is its lexical score over the best one plus `W` times its
/// cosine's place among the vectors' candidates; at 0 the words' order
/// stands, what only the vectors found after it.
#[test]
fn the_fusion_weight_says_how_far_meaning_counts_against_words() {
    let (url, _api, _rt) = embed::start_blocking();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let p = write_log(&log);
    // "vehicle invoice": the invoices by words, the automobile by meaning.
    let query = "vehicle invoice";
    let (lexical, _) = cli_search(&log, query, &[]);
    let lexical_scores = scores(&lexical["hits"]);
    let lexical = offsets(&lexical["hits"]);
    assert!(lexical.len() >= 5 && !lexical.contains(&p.car));
    let weighted = |w: &str, limit: &str| {
        let mut args = embed_args(&url, "mock-embed");
        args.extend(["--embed-weight", w, "--limit", limit]);
        cli_search(&log, query, &args).0["hits"].clone()
    };
    // Weight 0: the words' order exactly, then what only the vectors found.
    let zero = weighted("0", "10");
    assert_eq!(offsets(&zero)[..lexical.len()], lexical[..]);
    for (s, l) in scores(&zero).iter().zip(&lexical_scores) {
        assert!((s - l / lexical_scores[0]).abs() < 1e-9, "{zero}");
    }
    // The vectors' part of a score is proportional to the weight: for a
    // record hit at weights 0, 1 and 3, s3 - s0 = 3 (s1 - s0).
    let by_offset = |hits: &Value| -> std::collections::HashMap<u64, f64> {
        offsets(hits).into_iter().zip(scores(hits)).collect()
    };
    let (s0, s1, s3) = (
        by_offset(&weighted("0", "50")),
        by_offset(&weighted("1", "50")),
        by_offset(&weighted("3", "50")),
    );
    let mut both = 0;
    for (o, a) in &s0 {
        let (Some(b), Some(c)) = (s1.get(o), s3.get(o)) else {
            continue;
        };
        assert!(((c - a) - 3.0 * (b - a)).abs() < 1e-9, "{o}: {a} {b} {c}");
        both += usize::from(b > a);
    }
    assert!(both >= 3, "records in both rankings: {both}");
    // The automobile, found by meaning only, sinks below every record
    // the words found at a small weight, and rises with a large one.
    let at = |w: &str| {
        offsets(&weighted(w, "50"))
            .iter()
            .position(|&o| o == p.car)
            .expect("found by meaning")
    };
    let (light, heavy) = (at("0.01"), at("100"));
    let words = offsets(&weighted("0", "50"))
        .iter()
        .filter(|o| s0[o] > 0.0)
        .count();
    assert!(light >= words, "{light} < {words}");
    assert!(heavy < light, "{heavy} vs {light}");
    // Out of range or not a number: refused, naming the flag.
    for bad in ["-1", "101", "nan", "x"] {
        let out = bin()
            .args(["search"])
            .arg(&log)
            .arg(query)
            .args(embed_args(&url, "mock-embed"))
            .args(["--embed-weight", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--embed-weight"), "{err}");
    }
}

#[test]
fn a_failing_or_slow_model_leaves_search_lexical_and_records_are_embedded_once_it_recovers() {
    let (url, api, _rt) = embed::start_blocking();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let p = write_log(&log);
    api.set(Answer::Fail(500));
    let lexical = cli_search(&log, "invoice", &[]).0;
    let (v, err) = cli_search(&log, "invoice", &embed_args(&url, "mock-embed"));
    assert!(err.contains("embedding records failed"), "{err}");
    assert!(!err.contains("/tmp"), "{err}");
    // Exactly the lexical answer, BM25 scores and all.
    assert_eq!(v, lexical);
    let (v, _) = cli_search(&log, "vehicle", &embed_args(&url, "mock-embed"));
    assert_eq!(v["hits"], json!([]));
    // Each call tried 3 times, then given up: the batches in flight (at
    // most 4), then the query's; twice.
    let n = api.requests().len();
    assert!((2 * (3 + 3)..=2 * (4 * 3 + 3)).contains(&n), "{n} requests");
    // Rate limits are retried and succeed.
    api.set(Answer::Ok);
    api.script
        .lock()
        .unwrap()
        .extend([Answer::Fail(429), Answer::Fail(503)]);
    let before = api.texts();
    let (v, err) = cli_search(&log, "vehicle", &embed_args(&url, "mock-embed"));
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(offsets(&v["hits"])[0], p.car);
    assert_eq!(api.texts() - before, p.records + 1);
    // Appended while the model is down: found by words only, then by
    // meaning once it is back, embedded alone.
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(
        f,
        r#"{{"type":"wm_insight","ts_ms":1000,"text":"the couch arrives on friday"}}"#
    )
    .unwrap();
    drop(f);
    api.set(Answer::Fail(502));
    let (v, err) = cli_search(&log, "sofa", &embed_args(&url, "mock-embed"));
    assert!(err.contains("embedding records failed"), "{err}");
    assert_eq!(v["hits"], json!([]));
    api.set(Answer::Ok);
    let before = api.texts();
    let (v, _) = cli_search(&log, "sofa", &embed_args(&url, "mock-embed"));
    assert_eq!(
        v["hits"][0]["record"]["text"],
        "the couch arrives on friday"
    );
    assert_eq!(
        api.texts() - before,
        2,
        "the record appended, and the query"
    );
    // A query whose embedding is slower than --embed-timeout is lexical.
    api.set(Answer::Slow(1500));
    let t = Instant::now();
    let mut args = embed_args(&url, "mock-embed");
    args.extend(["--embed-timeout", "300ms"]);
    let (v, _) = cli_search(&log, "vehicle", &args);
    assert_eq!(v["hits"], json!([]));
    assert!(t.elapsed() < Duration::from_secs(10));
    // A key: OPENAI_API_KEY when set, --embed-key-env's variable, or none.
    api.set(Answer::Ok);
    let run = |env: Option<(&str, &str)>, extra: &[&str]| {
        let n = api.requests().len();
        let mut c = bin();
        c.arg("search").arg(&log).arg("vehicle");
        c.args(embed_args(&url, "mock-embed")).args(extra);
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        (out.status.code(), api.requests()[n..].to_vec())
    };
    let (code, reqs) = run(Some(("OPENAI_API_KEY", "sk-from-env-123456")), &[]);
    assert_eq!(code, Some(0));
    assert_eq!(
        reqs[0].authorization.as_deref(),
        Some("Bearer sk-from-env-123456")
    );
    let (_, reqs) = run(
        Some(("OPENAI_API_KEY", "sk-from-env-123456")),
        &["--embed-key-env", ""],
    );
    assert_eq!(reqs[0].authorization, None);
    let (_, reqs) = run(
        Some(("MY_EMBED_KEY", "k-mine-12345678")),
        &["--embed-key-env", "MY_EMBED_KEY"],
    );
    assert_eq!(
        reqs[0].authorization.as_deref(),
        Some("Bearer k-mine-12345678")
    );
    let (code, reqs) = run(None, &["--embed-key-env", "NOT_SET_ANYWHERE"]);
    assert_eq!((code, reqs.len()), (Some(2), 0));
}

#[test]
fn another_model_or_a_damaged_vectors_file_embeds_the_log_again() {
    let (url, api, _rt) = embed::start_blocking();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let p = write_log(&log);
    let search = |model: &str, extra: &[&str]| {
        let before = api.texts();
        let mut args = embed_args(&url, model);
        args.extend(extra);
        let (v, _) = cli_search(&log, "vehicle", &args);
        assert_eq!(offsets(&v["hits"])[0], p.car, "{model}: {v}");
        api.texts() - before
    };
    let all = p.records + 1;
    assert_eq!(search("model-a", &[]), all);
    assert_eq!(search("model-a", &[]), 1, "kept: the query alone");
    assert_eq!(search("model-b", &[]), all, "another model");
    assert!(api.requests().last().unwrap().model == "model-b");
    assert_eq!(search("model-b", &["--embed-dimensions", "64"]), all);
    assert_eq!(api.requests().last().unwrap().dimensions, Some(64));
    assert_eq!(search("model-b", &["--embed-dimensions", "64"]), 1);
    // An entry changed in place, the header, the file cut short.
    let vec = vec_path(&log);
    for at in [256 + 80 * 7 + 30, 40] {
        let mut bytes = std::fs::read(&vec).unwrap();
        bytes[at] ^= 0x40;
        std::fs::write(&vec, &bytes).unwrap();
        assert_eq!(
            search("model-b", &["--embed-dimensions", "64"]),
            all,
            "byte {at}"
        );
    }
    let len = std::fs::metadata(&vec).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&vec)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    assert_eq!(search("model-b", &["--embed-dimensions", "64"]), all);
    // The log replaced by another (the same length and records, one word
    // changed): its own vectors.
    let text = std::fs::read_to_string(&log)
        .unwrap()
        .replace("Maya", "Mara");
    std::fs::remove_file(&log).unwrap();
    std::fs::write(&log, text).unwrap();
    assert_eq!(search("model-b", &["--embed-dimensions", "64"]), all);
}

/// One MCP request over stdio: the JSON-RPC answer to `id`.
fn mcp_call(
    stdin: &mut std::process::ChildStdin,
    out: &mut impl BufRead,
    msg: Value,
) -> Option<Value> {
    writeln!(stdin, "{msg}").unwrap();
    stdin.flush().unwrap();
    let id = msg.get("id")?.clone();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the server closed");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == id {
            return Some(v);
        }
    }
}

/// `wmreplay mcp LOG ARGS…`'s search_memory for `query`: its records'
/// offsets.
fn mcp_stdio_search(log: &Path, args: &[&str], query: &str) -> Vec<u64> {
    let mut child = bin()
        .arg("mcp")
        .arg(log)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    mcp_call(
        &mut stdin,
        &mut out,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}),
    );
    mcp_call(
        &mut stdin,
        &mut out,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let v = mcp_call(
        &mut stdin,
        &mut out,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "search_memory", "arguments": {"query": query, "limit": 5}}}),
    )
    .unwrap();
    drop(stdin);
    let _ = child.wait();
    tool_offsets(&v["result"])
}

/// The offsets of a `search_memory` result's records.
fn tool_offsets(result: &Value) -> Vec<u64> {
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{result}"));
    let v: Value = serde_json::from_str(text).unwrap();
    v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["offset"].as_u64().unwrap())
        .collect()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_post_search_recall_search_memory_and_mcp_give_the_same_hits() {
    // One mock: the model, and the embeddings API at the same address.
    let (upstream, m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let p = write_log(&log);
    let query = "vehicle invoice";
    let (l, u) = (log.clone(), upstream.clone());
    let (cli, _) = blocking(move || {
        cli_search(
            &l,
            query,
            &[&embed_args(&u, "mock-embed")[..], &["--limit", "5"]].concat(),
        )
    })
    .await;
    let want = offsets(&cli["hits"]);
    assert_eq!(want.len(), 5);
    assert_eq!(m.embeddings.texts(), p.records + 1);

    // The server: POST /v1/search, /v1/context with recall, MCP.
    let mut cfg = mock::config(&log, None, Provider::Anthropic);
    cfg.cache = false;
    cfg.model = None;
    cfg.selection.tail = Some(1);
    cfg.recall = Some(5);
    cfg.mcp = true;
    cfg.embed = Some(EmbedConfig::new(&upstream, "mock-embed"));
    let srv = mock::start(cfg).await;
    let (s, b) = mock::post(
        &format!("{}/v1/search", srv.url),
        json!({"query": query, "limit": 5}).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(offsets(&v["hits"]), want);
    for (a, b) in scores(&v["hits"]).iter().zip(scores(&cli["hits"])) {
        assert!((a - b).abs() < 1e-12);
    }
    let (s, context) = mock::post(
        &format!("{}/v1/context", srv.url),
        json!({ "text": query }).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{context}");
    let (l, u) = (log.clone(), upstream.clone());
    let respond = blocking(move || {
        bin()
            .args(["respond", l.to_str().unwrap(), "--text", query])
            .args(["--tail", "1", "--recall", "5"])
            .args(embed_args(&u, "mock-embed"))
            .output()
            .unwrap()
    })
    .await;
    assert!(respond.status.success());
    assert_eq!(context, String::from_utf8(respond.stdout).unwrap());
    let body: Value = serde_json::from_str(&context).unwrap();
    let texts = mock::message_texts(&body);
    let recall = texts[texts.len() - 2]
        .strip_prefix("WM_KIND=recall\nWM_JSON: ")
        .unwrap();
    let recall: Value = serde_json::from_str(recall).unwrap();
    let got: Vec<u64> = recall["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(got, want);
    // MCP over streamable HTTP.
    let r = mock::client()
        .post(format!("{}/mcp", srv.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "search_memory", "arguments": {"query": query, "limit": 5}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(tool_offsets(&v["result"]), want, "{v}");
    srv.stop().await;
    // MCP over stdio (`wmreplay mcp --embed-…`).
    let (l, u) = (log.clone(), upstream.clone());
    let got = blocking(move || mcp_stdio_search(&l, &embed_args(&u, "mock-embed"), query)).await;
    assert_eq!(got, want);

    // The model's search_memory tool, in a turn.
    let mut cfg = mock::config(&log, Some(&upstream), Provider::Anthropic);
    cfg.selection.tail = Some(1);
    cfg.tools.search_memory = true;
    cfg.embed = Some(EmbedConfig::new(&upstream, "mock-embed"));
    let srv = mock::start(cfg).await;
    let (s, b) = mock::post(
        &format!("{}/respond", srv.url),
        json!({ "text": format!("search_memory: {query}") }).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let results = mock::tools::results(Provider::Anthropic, &m.bodies()[1]);
    let found: Value = serde_json::from_str(&results[0]).unwrap();
    let got: Vec<u64> = found["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(got, want, "{found}");
    srv.stop().await;
}

/// A server over `log` whose searches also ask the mock model at `url`,
/// with the embedding settings `tune` sets.
async fn hybrid_server(
    log: &Path,
    url: &str,
    tune: impl FnOnce(&mut EmbedConfig),
) -> mock::Running {
    let mut e = EmbedConfig::new(url, "mock-embed");
    tune(&mut e);
    let mut cfg = mock::config(log, None, Provider::Anthropic);
    cfg.embed = Some(e);
    mock::start(cfg).await
}

/// The hits of `POST /v1/search` for `q` (5 at most) on the server at `url`.
async fn post_search(url: &str, q: &str) -> Value {
    let (s, b) = mock::post(
        &format!("{url}/v1/search"),
        json!({"query": q, "limit": 5}).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    serde_json::from_str::<Value>(&b).unwrap()["hits"].clone()
}

/// A server's searches with the model failing, slow, then back: each
/// answers by words at once, and the records (appended ones too) are
/// embedded in the background once the model answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_searches_by_words_while_the_model_fails_and_embeds_in_the_background() {
    let (url, api) = embed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let p = write_log(&log);
    let srv = hybrid_server(&log, &url, |e| {
        e.retries = 1;
        e.retry_min_delay = Duration::from_millis(10);
        e.hybrid.query_timeout = Duration::from_millis(300);
        e.hybrid.batch_timeout = Duration::from_millis(500);
        e.hybrid.retry_pause = Duration::from_millis(50);
    })
    .await;
    let search = |q: &'static str| {
        let url = srv.url.clone();
        async move {
            let t = Instant::now();
            let hits = post_search(&url, q).await;
            (hits, t.elapsed())
        }
    };
    let lexical = |q: &str| -> Value {
        let hits = SearchIndex::new(&log)
            .search(q, &SearchOptions::with_limit(5))
            .unwrap();
        Value::Array(
            hits.iter()
                .map(|h| serde_json::from_str(&h.to_json()).unwrap())
                .collect(),
        )
    };
    for (answer, what) in [(Answer::Fail(503), "failing"), (Answer::Slow(3000), "slow")] {
        api.set(answer);
        let (hits, took) = search("invoice").await;
        assert_eq!(hits, lexical("invoice"), "{what}");
        assert!(took < Duration::from_secs(2), "{what}: {took:?}");
        let (hits, _) = search("vehicle").await;
        assert_eq!(hits, json!([]), "{what}");
    }
    api.set(Answer::Ok);
    let found = |hits: &Value, offset: u64| offsets(hits).first() == Some(&offset);
    let t = Instant::now();
    loop {
        let (hits, _) = search("vehicle").await;
        if found(&hits, p.car) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "never embedded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An append through the server is embedded alone, in the background.
    let before = api.texts();
    let (s, _) = mock::post(
        &format!("{}/v1/records", srv.url),
        r#"{"type":"wm_insight","text":"the settee is blue"}"#,
    )
    .await;
    assert_eq!(s, 200);
    let t = Instant::now();
    loop {
        let (hits, _) = search("sofa").await;
        if hits[0]["record"]["text"] == "the settee is blue" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "never embedded: {hits}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let records_embedded: usize = api.requests()[..]
        .iter()
        .filter(|r| r.input.iter().any(|t| t.contains("settee")))
        .map(|r| r.input.len())
        .sum();
    assert_eq!(records_embedded, 1);
    assert!(api.texts() - before < 10);
    srv.stop().await;
}

/// A query's embedding is made without holding the log's index: while the
/// model takes its time over one search's query, another search of the same
/// log is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_query_embedding_does_not_hold_up_other_searches_of_the_log() {
    let (url, api) = embed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let p = write_log(&log);
    let srv = hybrid_server(&log, &url, |e| {
        e.hybrid.query_timeout = Duration::from_secs(10);
    })
    .await;
    let search = |q: &'static str| {
        let url = srv.url.clone();
        async move { post_search(&url, q).await }
    };
    // Every record embedded.
    let t = Instant::now();
    while offsets(&search("vehicle").await).first() != Some(&p.car) {
        assert!(t.elapsed() < Duration::from_secs(20), "never embedded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The next request to the model (the slow search's query) takes 3 s.
    api.script.lock().unwrap().push_back(Answer::Slow(3000));
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let slow = {
        let (order, s) = (order.clone(), search("automobile"));
        tokio::spawn(async move {
            let hits = s.await;
            order.lock().unwrap().push("slow");
            hits
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let quick = search("doctor appointment").await;
    order.lock().unwrap().push("quick");
    assert_eq!(offsets(&quick)[0], p.doctor, "{quick}");
    let slow = slow.await.unwrap();
    assert_eq!(offsets(&slow)[0], p.car, "{slow}");
    assert_eq!(*order.lock().unwrap(), ["quick", "slow"]);
    srv.stop().await;
}

/// Without --embed-upstream nothing is embedded and nothing is called:
/// not by the CLI, nor by the server's recall, searches and tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_called_without_the_flags() {
    let (upstream, m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    write_log(&log);
    let l = log.clone();
    blocking(move || {
        let mut c = bin();
        c.env("OPENAI_API_KEY", "sk-set-but-unused-1234");
        let out = c
            .args(["respond", l.to_str().unwrap(), "--text", "vehicle invoice"])
            .args(["--tail", "1", "--recall", "3"])
            .output()
            .unwrap();
        assert!(out.status.success());
        cli_search(&l, "vehicle invoice", &[]);
    })
    .await;
    let mut cfg = mock::config(&log, Some(&upstream), Provider::Anthropic);
    cfg.selection.tail = Some(1);
    cfg.recall = Some(3);
    cfg.tools.search_memory = true;
    let srv = mock::start(cfg).await;
    let (s, _) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": "search_memory: vehicle invoice"}).to_string(),
    )
    .await;
    assert_eq!(s, 200);
    let (s, _) = mock::post(
        &format!("{}/v1/search", srv.url),
        json!({"query": "vehicle invoice"}).to_string(),
    )
    .await;
    assert_eq!(s, 200);
    srv.stop().await;
    assert!(m.embeddings.requests().is_empty());
    assert!(SearchIndex::path_for(&log).exists());
    assert!(!vec_path(&log).exists());
}
