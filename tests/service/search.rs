//! Search over the whole log: `wmreplay search`, `POST /v1/search` (one log
//! and under `--log-dir`), and recall of planted phrases.

use std::io::Write;
use std::process::Command;

use serde_json::{Value, json};
use wmreplay::search::{SearchIndex, SearchOptions};
use wmreplay::server::Provider;

use crate::common::cli_json;
use crate::mock;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wmreplay"))
}

/// A log of `n` ordinary records with `planted` distinctive ones spread
/// through it; returns the planted phrases and their line offsets.
fn planted_log(path: &std::path::Path, n: usize, planted: usize) -> Vec<(String, u64)> {
    let common = [
        "the", "user", "asked", "about", "deploy", "tests", "invoice", "report", "meeting", "notes",
    ];
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut at = 0u64;
    let mut phrases = Vec::new();
    let every = n / planted.max(1);
    for i in 0..n {
        let words: Vec<&str> = (0..8)
            .map(|k| common[(i * 7 + k * 3) % common.len()])
            .collect();
        let line = format!(
            r#"{{"type":"wm_event","ts_ms":{},"text":"{}","n":{i}}}"#,
            1000 + i,
            words.join(" ")
        );
        writeln!(f, "{line}").unwrap();
        at += line.len() as u64 + 1;
        if planted > 0 && i % every == every / 2 && phrases.len() < planted {
            let k = phrases.len();
            let phrase = format!("vorlax{k} quendrit{k} lisbon invoice");
            let line = format!(
                r#"{{"type":"wm_insight","ts_ms":{},"text":"note about {phrase} for the user"}}"#,
                1000 + i
            );
            writeln!(f, "{line}").unwrap();
            phrases.push((phrase, at));
            at += line.len() as u64 + 1;
        }
    }
    f.flush().unwrap();
    phrases
}

/// Every planted phrase finds its record in the top 5 (the target is 99%;
/// on this log it is all of them).
#[test]
fn planted_phrases_are_recalled_in_the_top_five() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let phrases = planted_log(&log, 30_000, 1_000);
    assert_eq!(phrases.len(), 1_000);
    let mut index = SearchIndex::new(&log);
    let mut found = 0;
    for (phrase, offset) in &phrases {
        let hits = index.search(phrase, &SearchOptions::with_limit(5)).unwrap();
        if hits.iter().any(|h| h.offset == *offset) {
            found += 1;
        }
    }
    assert!(found >= 990, "{found} of 1000 in the top 5");
    assert_eq!(found, 1000);
}

#[test]
fn cli_search_prints_hits_and_fails_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let phrases = planted_log(&log, 2_000, 10);
    let run = |args: &[&str]| bin().arg("search").args(args).output().unwrap();
    let v = cli_json("search", &log, &[&phrases[3].0, "--limit", "2"]);
    assert_eq!(v["query"], phrases[3].0.as_str());
    let hits = v["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0]["offset"], phrases[3].1);
    assert_eq!(hits[0]["type"], "wm_insight");
    assert!(
        hits[0]["record"]["text"]
            .as_str()
            .unwrap()
            .contains("vorlax3")
    );
    assert!(hits[0]["score"].as_f64().unwrap() > hits[1]["score"].as_f64().unwrap());
    assert!(SearchIndex::path_for(&log).exists());
    // NDJSON, filters.
    let out = run(&[
        log.to_str().unwrap(),
        "lisbon",
        "--format",
        "ndjson",
        "--kinds",
        "wm_insight",
        "-k",
        "20",
    ]);
    assert!(out.status.success());
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 10);
    assert!(lines.iter().all(|h| h["type"] == "wm_insight"));
    let out = run(&[log.to_str().unwrap(), "lisbon", "--kinds", "wm_event"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hits"], json!([]));
    // Bad queries and limits exit 2 and create nothing.
    let other = dir.path().join("other.log");
    std::fs::write(&other, "{\"type\":\"a\",\"ts_ms\":1,\"text\":\"x\"}\n").unwrap();
    for args in [
        vec!["?!"],
        vec![&"word ".repeat(1000)[..]],
        vec!["ok", "--limit", "0"],
    ] {
        let mut a = vec![other.to_str().unwrap()];
        a.extend(args.iter().copied());
        let out = run(&a);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    }
    assert!(!SearchIndex::path_for(&other).exists());
    // A missing log: a warning and nothing found, or exit 1.
    let missing = dir.path().join("missing.log");
    let out = run(&[missing.to_str().unwrap(), "lisbon"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hits"], json!([]));
    let out = run(&[missing.to_str().unwrap(), "lisbon", "--require-log"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!SearchIndex::path_for(&missing).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_searches_each_log_and_sees_appends() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let phrases = planted_log(&log, 500, 5);
    let srv = mock::start(mock::config(&log, None, Provider::Anthropic)).await;
    let search = |body: Value| {
        let url = format!("{}/v1/search", srv.url);
        async move {
            let (s, b) = mock::post(&url, body.to_string()).await;
            (s, serde_json::from_str::<Value>(&b).unwrap())
        }
    };
    let (s, v) = search(json!({"query": phrases[2].0, "limit": 1})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["hits"][0]["offset"], phrases[2].1);
    // Written through the server: found by the next search.
    let (s, _) = mock::post(
        &format!("{}/v1/records", srv.url),
        r#"{"type":"wm_insight","text":"the Porto contract renews in May"}"#,
    )
    .await;
    assert_eq!(s, 200);
    let (_, v) =
        search(json!({"query": "porto contract", "limit": 3, "kinds": ["wm_insight"], "since": 0}))
            .await;
    assert_eq!(v["hits"].as_array().unwrap().len(), 1);
    assert!(
        v["hits"][0]["record"]["text"]
            .as_str()
            .unwrap()
            .contains("Porto")
    );
    // Bad requests: JSON errors with their codes.
    for (body, code) in [
        (json!({}), "invalid_query"),
        (json!({"query": "?!"}), "invalid_query"),
        (json!({"query": "x", "limit": 0}), "invalid_query"),
        (json!({"query": "x", "kinds": "a"}), "invalid_query"),
        (json!({"query": "x", "since": "yesterday"}), "invalid_query"),
    ] {
        let (s, v) = search(body.clone()).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}"
        );
    }
    srv.stop().await;

    // Under --log-dir, each log has its own index.
    let mut cfg = mock::config(&dir.path().join("unused.log"), None, Provider::Anthropic);
    cfg.log_dir = Some(dir.path().to_path_buf());
    std::fs::write(
        dir.path().join("b.log"),
        "{\"type\":\"a\",\"ts_ms\":1,\"text\":\"only in b\"}\n",
    )
    .unwrap();
    let srv = mock::start(cfg).await;
    for (id, hits) in [("wm", 0), ("b", 1)] {
        let (s, b) = mock::post(
            &format!("{}/v1/logs/{id}/search", srv.url),
            json!({"query": "only"}).to_string(),
        )
        .await;
        assert_eq!(s, 200, "{b}");
        let v: Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["hits"].as_array().unwrap().len(), hits, "{id}: {v}");
    }
    srv.stop().await;
}

/// `--recall K`: the K best records for the turn's text that the window
/// does not hold, as one message just before the current request; the
/// server's body is `respond --recall`'s, byte for byte, and a turn never
/// recalls its own input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_adds_the_best_records_the_window_does_not_hold() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let phrases = planted_log(&log, 400, 4);
    // The newest record mentions the phrase too: held by the window, so
    // never recalled.
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(
        f,
        r#"{{"type":"wm_event","ts_ms":99999,"text":"{} again"}}"#,
        phrases[1].0
    )
    .unwrap();
    drop(f);
    let query = phrases[1].0.clone();
    let out = bin()
        .args(["respond", log.to_str().unwrap(), "--text", &query])
        .args(["--tail", "3", "--recall", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    let texts = mock::message_texts(&body);
    let n = texts.len();
    assert!(texts[n - 1].starts_with("CURRENT_USER_REQUEST"));
    let recall = &texts[n - 2];
    assert!(recall.starts_with("WM_KIND=recall\nWM_JSON: "), "{recall}");
    let v: Value =
        serde_json::from_str(recall.strip_prefix("WM_KIND=recall\nWM_JSON: ").unwrap()).unwrap();
    let records = v["records"].as_array().unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["offset"], phrases[1].1);
    assert_eq!(v["query"], query.as_str());
    assert!(records.iter().all(|r| r["record"]["ts_ms"] != 99999));
    // Without --recall, no such message.
    let plain = bin()
        .args([
            "respond",
            log.to_str().unwrap(),
            "--text",
            &query,
            "--tail",
            "3",
        ])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("WM_KIND=recall"));

    let mut cfg = mock::config(&log, None, Provider::Anthropic);
    cfg.cache = false;
    cfg.model = None;
    cfg.selection.tail = Some(3);
    cfg.recall = Some(2);
    let srv = mock::start(cfg).await;
    let (s, got) = mock::post(
        &format!("{}/v1/context", srv.url),
        json!({ "text": query }).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{got}");
    assert_eq!(got, String::from_utf8(out.stdout.clone()).unwrap());
    srv.stop().await;

    // A turn through the model: its own input is never recalled, and
    // the model sees the recall message.
    let (upstream, m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let mut cfg = mock::config(&log, Some(&upstream), Provider::Anthropic);
    cfg.selection.tail = Some(3);
    cfg.recall = Some(3);
    let srv = mock::start(cfg).await;
    let (s, b) = mock::post(
        &format!("{}/respond", srv.url),
        json!({ "text": query }).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let sent = m.bodies().pop().unwrap();
    let texts = mock::message_texts(&sent);
    let recall = texts
        .iter()
        .find(|t| t.starts_with("WM_KIND=recall"))
        .expect("a recall message");
    assert!(recall.contains(&phrases[1].0));
    assert!(
        !recall.contains(&format!("\"text\":\"{query}\"")),
        "{recall}"
    );
    srv.stop().await;
}

/// A damaged index under a running server: each of its files, of each
/// kind, cut short, emptied, garbled in place at the same length, or
/// removed, while the server holds it open. Before, a cut-short file killed
/// the server with SIGBUS at the next search, and a garbled one made every
/// search a 500 with a panic's message (and the model saw the index's
/// path). Now the server lives, notices, builds the index again, and every
/// search answers what a scan of the log answers; so it does for another
/// log's index put in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_index_is_built_again_under_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let phrases = planted_log(&log, 3000, 6);
    let srv = mock::start(mock::config(&log, None, Provider::Anthropic)).await;
    let index = SearchIndex::path_for(&log);
    let search = |query: String| {
        let url = format!("{}/v1/search", srv.url);
        async move {
            let (s, b) = mock::post(&url, json!({"query": query, "limit": 3}).to_string()).await;
            (s, b)
        }
    };
    // What each search must answer: a scan of the log.
    let want = |q: &str| -> Vec<u64> {
        let bytes = std::fs::read(&log).unwrap();
        wmreplay::__internals::search_scan::search(
            &bytes,
            q,
            &SearchOptions::with_limit(3),
            wmreplay::search::Language::ENGLISH,
        )
        .iter()
        .map(|h| h.0)
        .collect()
    };
    let check = |what: String| {
        let search = &search;
        let phrases = &phrases;
        let want = &want;
        let index = index.clone();
        async move {
            for (phrase, _) in phrases.iter().take(3) {
                let (s, b) = search(phrase.clone()).await;
                assert_eq!(s, 200, "{what}: {b}");
                assert!(
                    !b.contains(&*index.to_string_lossy()) && !b.contains("/tmp"),
                    "{what}: a path in {b}"
                );
                let v: Value = serde_json::from_str(&b).unwrap();
                let got: Vec<u64> = v["hits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h["offset"].as_u64().unwrap())
                    .collect();
                assert_eq!(got, want(phrase), "{what}: {phrase}");
            }
        }
    };
    check("intact".into()).await;
    let kinds = [
        "idx",
        "term",
        "fast",
        "fieldnorm",
        "store",
        "meta.json",
        "managed.json",
    ];
    let damages = ["cut to half", "emptied", "garbled", "removed"];
    for kind in kinds {
        for damage in damages {
            let files: Vec<std::path::PathBuf> = std::fs::read_dir(&index)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(kind))
                .collect();
            if files.is_empty() {
                continue;
            }
            for f in &files {
                let len = std::fs::metadata(f).unwrap().len();
                match damage {
                    "cut to half" => std::fs::OpenOptions::new()
                        .write(true)
                        .open(f)
                        .unwrap()
                        .set_len(len / 2)
                        .unwrap(),
                    "emptied" => std::fs::OpenOptions::new()
                        .write(true)
                        .open(f)
                        .unwrap()
                        .set_len(0)
                        .unwrap(),
                    "garbled" => {
                        let mut bytes = std::fs::read(f).unwrap();
                        let n = bytes.len();
                        for (i, b) in bytes.iter_mut().enumerate() {
                            if i % 7 == 3 || (i > n / 3 && i < n / 2) {
                                *b = b.wrapping_mul(31).wrapping_add(0x5b);
                            }
                        }
                        // In place: the same file, the same length.
                        let mut w = std::fs::OpenOptions::new().write(true).open(f).unwrap();
                        w.write_all(&bytes).unwrap();
                    }
                    _ => std::fs::remove_file(f).unwrap(),
                }
            }
            check(format!("{kind} {damage}")).await;
            // And after an append.
            let (s, _) = mock::post(
                &format!("{}/v1/records", srv.url),
                format!(r#"{{"type":"wm_insight","text":"after {kind} {damage}"}}"#),
            )
            .await;
            assert_eq!(s, 200);
            check(format!("{kind} {damage}, then an append")).await;
        }
    }
    // Another log's index in its place.
    let other = dir.path().join("other.log");
    planted_log(&other, 200, 2);
    SearchIndex::new(&other).refresh().unwrap();
    std::fs::remove_dir_all(&index).unwrap();
    std::fs::rename(SearchIndex::path_for(&other), &index).unwrap();
    check("another log's index".into()).await;
    let (s, _) = mock::post(&format!("{}/healthz", srv.url), "").await;
    assert!(s == 200 || s == 405);
    srv.stop().await;
}

/// A user who may read a log and its up-to-date index but not write the
/// index's directory can search it. (Before, the reader's lock file could
/// not be made, so the index was taken for unusable and rebuilt, which
/// failed: exit 1, "Permission denied" on a `.build-PID` directory.) Run
/// as `nobody` when the tests run as root.
#[test]
fn an_up_to_date_index_is_searched_without_write_access() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let phrases = planted_log(&log, 300, 2);
    SearchIndex::new(&log).refresh().unwrap();
    let index = SearchIndex::path_for(&log);
    let set = |p: &std::path::Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    for e in std::fs::read_dir(&index).unwrap().flatten() {
        set(&e.path(), 0o444);
    }
    set(&index, 0o555);
    set(&log, 0o444);
    set(dir.path(), 0o555);
    // Root reads anything: the search runs as nobody then.
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_wmreplay"));
        c
    } else {
        bin()
    };
    let out = cmd
        .arg("search")
        .arg(&log)
        .arg(&phrases[0].0)
        .args(["--limit", "1"])
        .output()
        .unwrap();
    set(dir.path(), 0o755);
    set(&index, 0o755);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hits"][0]["offset"], phrases[0].1);
}

/// An index write that fails names its cause: under a file size limit the
/// search exits 1 saying the file is too large (before, the process was
/// killed by SIGXFSZ without a word; a server said only "An index writer
/// was killed").
#[test]
fn an_index_write_that_fails_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    planted_log(&log, 20_000, 2);
    let out = Command::new("prlimit")
        .arg("--fsize=16000")
        .arg(env!("CARGO_BIN_EXE_wmreplay"))
        .arg("search")
        .arg(&log)
        .arg("lisbon")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("File too large"), "{err}");
}
