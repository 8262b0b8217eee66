//! Compaction (`serve --summaries --compact-at`, `wmreplay compact`): the
//! mock upstream answers a summary request with every `FACT-<n>` in its
//! input, so a summary that forgets a fact is seen at once.

use crate::mock;

use std::path::Path;
use std::time::{Duration, Instant};

use mock::{Mode, process::Serving};
use serde_json::{Value, json};
use wmreplay::server::{Compaction, Provider};
use wmreplay::{CurrentRequest, Format, ReplayOptions, Selection, Tokenizer, replay};

/// A log of `n` records with ts_ms 1000, 1001, …; the record `i` of
/// `facts` carries `FACT-<i>`.
fn write_log(path: &Path, n: usize, facts: &[usize]) {
    let mut s = String::new();
    for i in 0..n {
        let kind = if i % 2 == 0 {
            "text_input"
        } else {
            "text_output"
        };
        let fact = if facts.contains(&i) {
            format!(" FACT-{i}")
        } else {
            String::new()
        };
        s.push_str(
            &json!({"type": kind, "ts_ms": 1000 + i, "text": format!("record {i} of the session{fact}, with some words to fold")})
                .to_string(),
        );
        s.push('\n');
    }
    std::fs::write(path, s).unwrap();
}

fn summaries(path: &Path) -> Vec<Value> {
    mock::log_lines(path)
        .into_iter()
        .filter(|v| v["type"] == "wm_summary")
        .collect()
}

/// The FACT numbers in a text.
fn facts_in(text: &str) -> Vec<usize> {
    mock::summary_of(text)
        .split(' ')
        .filter_map(|w| w.strip_prefix("FACT-")?.parse().ok())
        .collect()
}

async fn stats(url: &str) -> Value {
    let r = mock::client()
        .get(format!("{url}/v1/stats"))
        .send()
        .await
        .unwrap();
    r.json().await.unwrap()
}

/// The request body `/v1/context` answers for the text "now".
async fn context(url: &str) -> Vec<u8> {
    let r = mock::client()
        .post(format!("{url}/v1/context"))
        .body(r#"{"text":"now"}"#)
        .send()
        .await
        .unwrap();
    r.bytes().await.unwrap().to_vec()
}

/// Waits until no fold runs nor is due (the stats say so twice in a row).
async fn settled(url: &str, limit: Duration) -> Value {
    let t0 = Instant::now();
    let mut idle = 0;
    loop {
        let s = stats(url).await;
        if s["compaction"]["running"] == false {
            idle += 1;
            if idle == 3 {
                return s;
            }
        } else {
            idle = 0;
        }
        assert!(t0.elapsed() < limit, "compaction did not settle: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn compacting(log: &Path, upstream: &str, at: u64) -> wmreplay::server::Config {
    let mut cfg = mock::config(log, Some(upstream), Provider::Anthropic);
    cfg.selection.summaries = true;
    cfg.selection.tokenizer = Tokenizer::Bytes;
    cfg.retry_min_delay = Duration::from_millis(20);
    cfg.compaction = Some(Compaction::new(at));
    cfg
}

/// The request body a one-shot replay with summaries and facts makes.
fn one_shot(log: &Path, text: &str) -> Vec<u8> {
    let bytes = std::fs::read(log).unwrap();
    let mut one = replay(&bytes, &ReplayOptions::default());
    let mut sel = Selection::default();
    sel.summaries = true;
    sel.facts = true;
    one.select(&sel, None);
    one.render_request(
        Format::Anthropic,
        wmreplay::SYSTEM_RULE,
        &CurrentRequest {
            text,
            session_id: None,
        },
    )
}

/// 60 facts over 20,000 records, a small threshold: the backlog is folded
/// summary after summary, and every summary carries every fact of every
/// record it covers (the fold includes the previous summary); more turns
/// fold further until all 60 are in the newest summary. The summary
/// requests pass the strict mock, and the live replay equals a one-shot
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_facts_survive_every_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let facts: Vec<usize> = (0..60).map(|i| 17 + i * 331).collect();
    write_log(&log, 20_000, &facts);
    let (upstream, m) = mock::start_mock(Provider::Anthropic, Mode::Ok).await;
    let mut cfg = compacting(&log, &upstream, 100_000);
    cfg.selection.facts = true;
    let srv = mock::start(cfg).await;
    let s = settled(&srv.url, Duration::from_secs(120)).await;
    let first = summaries(&log);
    assert!(
        first.len() >= 5,
        "a backlog of ~700k tokens folds 100k at a time: {s}"
    );
    assert_eq!(s["compaction"]["summaries"], first.len());
    assert_eq!(s["compaction"]["failures"], 0);
    // More turns: the cover moves past every fact.
    for round in 0..3 {
        let mut batch = Vec::new();
        for i in 0..2_000 {
            batch.push(
                json!({"type": "wm_event", "text": format!("later {round}.{i}, a few words more")}),
            );
        }
        let (status, r) = mock::post(
            &format!("{}/v1/records", srv.url),
            serde_json::to_string(&batch).unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        settled(&srv.url, Duration::from_secs(60)).await;
    }
    // Every summary carries the facts of every record it covers.
    let lines = std::fs::read_to_string(&log).unwrap();
    let mut offset = 0u64;
    let mut at: Vec<(u64, f64, Option<usize>)> = Vec::new();
    for l in lines.split_inclusive('\n') {
        let v: Value = serde_json::from_str(l.trim_end()).unwrap();
        let fact = facts_in(v["text"].as_str().unwrap_or("")).first().copied();
        if v["type"] != "wm_summary" {
            at.push((offset, v["ts_ms"].as_f64().unwrap(), fact));
        }
        offset += l.len() as u64;
    }
    let all = summaries(&log);
    assert!(all.len() > first.len(), "the later turns were folded too");
    for s in &all {
        let cover = (
            s["covers"]["ts_ms"].as_f64().unwrap(),
            s["covers"]["offset"].as_u64().unwrap(),
        );
        let want: Vec<usize> = at
            .iter()
            .filter(|(o, ts, f)| f.is_some() && (*ts, *o) <= cover)
            .map(|(_, _, f)| f.unwrap())
            .collect();
        let got = facts_in(s["text"].as_str().unwrap());
        assert_eq!(got, want, "summary {s}");
        assert_eq!(s["model"], "test-model");
    }
    let newest = all.last().unwrap();
    assert_eq!(facts_in(newest["text"].as_str().unwrap()), facts);
    // What stays replayed is under the threshold; the live replay is the
    // one-shot's.
    let got = context(&srv.url).await;
    let want = one_shot(&log, "now");
    assert_eq!(
        String::from_utf8_lossy(&mock::without_cache_markers(&got)),
        String::from_utf8_lossy(&mock::with_fields(
            &want,
            r#""model":"test-model","max_tokens":1024"#
        )),
    );
    assert!(got.len() < 100_000 * 4 + 20_000, "{} bytes", got.len());
    assert!(m.rejected.lock().unwrap().is_empty(), "{:?}", m.rejected);
    // The live state holds the uncovered tail, not the log.
    let s = stats(&srv.url).await;
    let held = s["live"]["records"].as_u64().unwrap();
    assert!(held < 5_000, "{held} of 26,000 records held: {s}");
    srv.stop().await;
}

/// Posts records to a server; panics unless they are written.
async fn post_records(url: &str, records: &[Value]) {
    let (status, r) = mock::post(
        &format!("{url}/v1/records"),
        serde_json::to_string(records).unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{r}");
}

/// Waits until the log holds `n` summaries.
async fn summaries_reach(log: &Path, n: usize, limit: Duration) -> Vec<Value> {
    let t0 = Instant::now();
    loop {
        let s = summaries(log);
        if s.len() >= n {
            return s;
        }
        assert!(t0.elapsed() < limit, "{} summaries, not {n}", s.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A record written while the model writes a summary, whose ts_ms sorts
/// into the records being folded, would be covered unread: the summary is
/// not appended, and the fold is made again with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_sorting_into_a_fold_under_way_makes_it_fold_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    write_log(&log, 400, &[3]);
    let (upstream, m) = mock::start_mock(Provider::Anthropic, Mode::Ok).await;
    m.then([Mode::Slow(1_500)]);
    let srv = mock::start(compacting(&log, &upstream, 4_000)).await;
    let t0 = Instant::now();
    while m.requests() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "no fold started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    post_records(
        &srv.url,
        &[json!({"type": "wm_event", "ts_ms": 1010, "text": "late FACT-999"})],
    )
    .await;
    let s = settled(&srv.url, Duration::from_secs(30)).await;
    let all = summaries(&log);
    assert!(!all.is_empty(), "{s}");
    // The first summary written is the second try of the first fold.
    for summary in &all {
        assert_eq!(facts_in(summary["text"].as_str().unwrap()), vec![3, 999]);
    }
    assert_eq!(
        m.requests(),
        all.len() + 1,
        "one fold was made again, with the late record"
    );
    assert_eq!(s["compaction"]["failures"], 0);
    srv.stop().await;
}

/// A fold whose call fails writes nothing, is counted, and is tried again
/// after a backoff; records written after a summary are replayed even when
/// their ts_ms sorts into what it covers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fold_is_tried_again_and_late_records_after_a_summary_replay() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    write_log(&log, 400, &[5, 390]);
    let (upstream, m) = mock::start_mock(Provider::Anthropic, Mode::Ok).await;
    m.then([Mode::fail(400)]);
    let srv = mock::start(compacting(&log, &upstream, 4_000)).await;
    summaries_reach(&log, 1, Duration::from_secs(30)).await;
    let s = settled(&srv.url, Duration::from_secs(30)).await;
    let all = summaries(&log);
    assert_eq!(s["compaction"]["failures"], 1, "{s}");
    assert!(
        s["compaction"]["last_error"]
            .as_str()
            .unwrap()
            .contains("400"),
        "{s}"
    );
    assert_eq!(facts_in(all[0]["text"].as_str().unwrap()), vec![5]);
    // Late, but written after the summary: replayed.
    post_records(
        &srv.url,
        &[json!({"type": "wm_event", "ts_ms": 1001, "text": "late FACT-777"})],
    )
    .await;
    let body = String::from_utf8(context(&srv.url).await).unwrap();
    assert!(
        body.contains("late FACT-777"),
        "the late record is replayed"
    );
    assert!(body.contains("WM_KIND=wm_summary"));
    assert!(!body.contains("record 0 of"), "covered records are not");
    srv.stop().await;
}

/// `kill -9` while the model writes a summary leaves no part of it in the
/// log; the next start folds again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_fold_leaves_no_partial_summary_and_the_next_start_folds_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    write_log(&log, 400, &[7]);
    let before = std::fs::read(&log).unwrap();
    let (upstream, m) = mock::start_mock(Provider::Anthropic, Mode::Ok).await;
    m.then([Mode::Slow(30_000)]);
    let args = [
        "--summaries",
        "--compact-at",
        "4000",
        "--tokenizer",
        "bytes",
        "--upstream",
        upstream.as_str(),
    ];
    let envs = [("ANTHROPIC_API_KEY", mock::KEY)];
    let mut srv = Serving::start(&log, &args, &envs, None);
    let t0 = Instant::now();
    while m.requests() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "no fold started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();
    assert_eq!(
        std::fs::read(&log).unwrap(),
        before,
        "nothing of the summary"
    );
    let srv = Serving::start(&log, &args, &envs, None);
    let all = summaries_reach(&log, 1, Duration::from_secs(20)).await;
    assert_eq!(facts_in(all[0]["text"].as_str().unwrap()), vec![7]);
    for l in std::fs::read_to_string(&log).unwrap().lines() {
        serde_json::from_str::<Value>(l).expect("every line whole");
    }
    srv.stop();
}

/// `wmreplay compact`: folds a log once until about --to tokens remain,
/// then has nothing to do; every fact of the folded records is in the
/// summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compact_command_folds_once_then_finds_nothing_due() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    write_log(&log, 2_000, &[1, 500, 1_500]);
    let (upstream, m) = mock::start_mock(Provider::Anthropic, Mode::Ok).await;
    let run = |log: std::path::PathBuf, upstream: String| {
        tokio::task::spawn_blocking(move || {
            mock::process::wmreplay()
                .arg("compact")
                .arg(&log)
                .args(["--upstream", &upstream, "--model", "test-model"])
                .args([
                    "--to",
                    "5000",
                    "--fold-tokens",
                    "20000",
                    "--tokenizer",
                    "bytes",
                ])
                .env("ANTHROPIC_API_KEY", mock::KEY)
                .output()
                .unwrap()
        })
    };
    let out = run(log.clone(), upstream.clone()).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = report["summaries"].as_u64().unwrap() as usize;
    assert!(n >= 2, "a backlog over several summaries: {report}");
    assert_eq!(err.matches("wmreplay: summary ").count(), n, "{err}");
    assert!(report["kept_tokens"].as_u64().unwrap() <= 5_000, "{report}");
    let all = summaries(&log);
    assert_eq!(all.len(), n);
    let newest = all.last().unwrap();
    let cover = newest["covers"]["ts_ms"].as_f64().unwrap();
    let want: Vec<usize> = [1, 500, 1_500]
        .into_iter()
        .filter(|&i| (1000 + i) as f64 <= cover)
        .collect();
    assert_eq!(facts_in(newest["text"].as_str().unwrap()), want);
    assert_eq!(m.requests(), n);
    // Nothing due: nothing written, no call.
    let out = run(log.clone(), upstream).await.unwrap();
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["summaries"], 0);
    assert_eq!(summaries(&log).len(), n);
    assert_eq!(m.requests(), n);
    assert!(m.rejected.lock().unwrap().is_empty());
}

/// Compaction's settings are checked before the server starts.
#[test]
fn compaction_needs_summaries_and_an_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    std::fs::write(&log, "").unwrap();
    for (args, says) in [
        (vec!["--compact-at", "1000"], "--summaries"),
        (vec!["--summaries", "--compact-at", "1000"], "--upstream"),
        (
            vec![
                "--summaries",
                "--compact-at",
                "1000",
                "--compact-to",
                "1.5",
                "--upstream",
                "http://127.0.0.1:9",
            ],
            "--compact-to",
        ),
    ] {
        let out = mock::process::wmreplay()
            .args(["serve", "--log"])
            .arg(&log)
            .args(&args)
            .env("WMREPLAY_MODEL", "m")
            .env("ANTHROPIC_API_KEY", "k")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Under `--log-dir`, a log let go (idle) while the model writes its
/// summary drops that summary unwritten; the state opened next folds the
/// log again, once: the summaries' covers only move forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_let_go_mid_fold_drops_the_summary_and_the_next_state_folds_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("a.log");
    write_log(&log, 400, &[3]);
    let before = std::fs::read(&log).unwrap();
    let (upstream, m) = mock::start_mock(Provider::Anthropic, Mode::Ok).await;
    m.then([Mode::Slow(2_000)]);
    let mut cfg = compacting(&dir.path().join("unused.log"), &upstream, 4_000);
    cfg.log_dir = Some(dir.path().to_path_buf());
    cfg.idle_timeout = Duration::from_millis(300);
    let srv = mock::start(cfg).await;
    let stats_of_a = || {
        let url = format!("{}/v1/logs/a/stats", srv.url);
        async move {
            let r = mock::client().get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
        }
    };
    // Opening the log starts a fold; the state is let go while it runs.
    stats_of_a().await;
    let t0 = Instant::now();
    while m.requests() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "no fold started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(
        std::fs::read(&log).unwrap(),
        before,
        "the evicted fold wrote nothing"
    );
    // Asked for again (and kept in use): a new state folds the log.
    let t0 = Instant::now();
    let (mut last, mut same) = (0, 0);
    while same < 5 {
        stats_of_a().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let n = summaries(&log).len();
        same = if n == last && n > 0 { same + 1 } else { 0 };
        last = n;
        assert!(t0.elapsed() < Duration::from_secs(20), "{n} summaries");
    }
    let all = summaries(&log);
    assert_eq!(
        m.requests(),
        all.len() + 1,
        "one fold was dropped, none doubled"
    );
    let covers: Vec<f64> = all
        .iter()
        .map(|s| s["covers"]["ts_ms"].as_f64().unwrap())
        .collect();
    assert!(covers.windows(2).all(|w| w[0] < w[1]), "{covers:?}");
    for s in &all {
        assert_eq!(facts_in(s["text"].as_str().unwrap()), vec![3]);
    }
    srv.stop().await;
}
