//! A keyed turn's process killed (`SIGKILL`, at a fault point: the tests'
//! build has them, `src/server/failpoint.rs`) at each moment its state is
//! between two writes, then started again and the key retried: the retry
//! gets the turn's one outcome — its answer if the answer reached the log,
//! else the turn closed as `interrupted` — with the input in the log once,
//! one record closing it, and the model never called a second time.

use crate::mock;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use mock::process::Serving;
use mock::*;
use serde_json::{Value, json};
use wmreplay::server::Provider;

/// The records of kind `kind` whose text holds `words`.
fn holding(log: &Path, kind: &str, words: &str) -> Vec<Value> {
    log_lines(log)
        .into_iter()
        .filter(|v| v["type"] == kind && v["text"].as_str().is_some_and(|t| t.contains(words)))
        .collect()
}

async fn keyed(url: &str, key: &str, text: &str) -> reqwest::Result<reqwest::Response> {
    client()
        .post(format!("{url}/respond"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(json!({ "text": text }).to_string())
        .send()
        .await
}

/// `serve` on `log` with the mock model at `up`; with `point`, killed where
/// that point fires for a text holding the turn's `words` (for the batch
/// point, the answer's line: the mock's answer quotes the words).
fn serving(log: &Path, up: &str, point: Option<(&str, &str)>) -> Serving {
    let failpoints = point.map(|(p, words)| match p {
        "log-crash-written" => format!("{p}=return(answer to «{words})"),
        _ => format!("{p}=return({words})"),
    });
    let mut envs = vec![("ANTHROPIC_API_KEY", KEY)];
    if let Some(f) = &failpoints {
        envs.push(("FAILPOINTS", f));
    }
    Serving::start(log, &["--upstream", up], &envs, None)
}

/// Through `/respond` with an `Idempotency-Key`: killed once the input (and
/// the key's row) is written, once the model has answered, once the
/// answer's bytes are in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_turn_killed_between_any_two_writes_ends_once_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    // (the point, the turn's words, whether the model had answered, whether
    // the answer reached the log)
    let windows = [
        ("turn-crash-input", "crash-input", false, false),
        ("turn-crash-answered", "crash-answered", true, false),
        ("log-crash-written", "crash-written", true, true),
    ];
    for (point, words, called, kept) in windows {
        let mut srv = serving(&log, &up, Some((point, words)));
        let calls = mock.requests();
        let cut = keyed(&srv.url, words, words).await;
        assert!(
            cut.is_err(),
            "{point}: answered {:?}",
            cut.map(|r| r.status())
        );
        let status = srv.child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{point}: {status:?}");
        assert_eq!(mock.requests(), calls + usize::from(called), "{point}");

        let srv = serving(&log, &up, None);
        let r = keyed(&srv.url, words, words).await.unwrap();
        assert_eq!(r.status(), 200, "{point}");
        assert!(
            r.headers().get("idempotent-replayed").is_some(),
            "{point}: the turn's outcome, not a new turn"
        );
        let v: Value = r.json().await.unwrap();
        let closes: Vec<Value> = log_lines(&log)
            .into_iter()
            .skip_while(|l| !(l["type"] == "text_input" && l["text"] == words))
            .skip(1)
            .take_while(|l| l["type"] != "text_input")
            .collect();
        assert_eq!(
            closes.len(),
            1,
            "{point}: one record closes it: {closes:#?}"
        );
        if kept {
            assert!(
                v["text"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("answer to «{words}")),
                "{point}: {v}"
            );
            assert_eq!(closes[0]["text"], v["text"], "{point}");
            assert!(
                closes[0].get("stop_reason").is_none(),
                "{point}: {closes:#?}"
            );
        } else {
            assert_eq!(v["stop_reason"], "interrupted", "{point}: {v}");
            assert_eq!(closes[0]["stop_reason"], "interrupted", "{point}");
        }
        assert_eq!(holding(&log, "text_input", words).len(), 1, "{point}");
        assert_eq!(
            mock.requests(),
            calls + usize::from(called),
            "{point}: no second call"
        );
        // The key answers the same from now on.
        let again: Value = keyed(&srv.url, words, words)
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(again, v, "{point}");
        drop(srv);
    }
}

/// The same through the Anthropic door, as an SDK retries (its retry
/// count makes the key): killed once the input is written, or once the
/// answer is in the log, then started again and retried. The input and
/// the client's history once, one record closing the turn, the model
/// called at most once; the retry answered in the provider's shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_turn_killed_between_two_writes_ends_once_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    for (point, words, called, kept) in [
        ("turn-crash-input", "door crash-input", false, false),
        ("log-crash-written", "door crash-written", true, true),
    ] {
        let ask = json!({
            "model": "m-client",
            "max_tokens": 50,
            "messages": [
                {"role": "user", "content": format!("history of {words}")},
                {"role": "assistant", "content": format!("history answer of {words}")},
                {"role": "user", "content": words},
            ],
        })
        .to_string();
        let send = |url: String, retry: &'static str| {
            client()
                .post(format!("{url}/anthropic/v1/messages"))
                .header("content-type", "application/json")
                .header("x-stainless-retry-count", retry)
                .body(ask.clone())
                .send()
        };
        let mut srv = serving(&log, &up, Some((point, words)));
        let calls = mock.requests();
        assert!(send(srv.url.clone(), "0").await.is_err(), "{point}");
        let status = srv.child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{point}: {status:?}");

        let srv = serving(&log, &up, None);
        let r = send(srv.url.clone(), "1").await.unwrap();
        assert_eq!(r.status(), 200, "{point}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "message", "{point}: {v}");
        let of = |kind: &str, text: String| {
            log_lines(&log)
                .iter()
                .filter(|l| l["type"] == kind && l["text"] == text.as_str())
                .count()
        };
        assert_eq!(
            of("text_input", format!("history of {words}")),
            1,
            "{point}"
        );
        assert_eq!(
            of("text_output", format!("history answer of {words}")),
            1,
            "{point}"
        );
        assert_eq!(
            holding(&log, "text_input", words).len(),
            2,
            "{point}: its words once, and the history's"
        );
        let closes: Vec<Value> = log_lines(&log)
            .into_iter()
            .skip_while(|l| !(l["type"] == "text_input" && l["text"] == words))
            .skip(1)
            .collect();
        assert_eq!(
            closes.len(),
            1,
            "{point}: one record closes it: {closes:#?}"
        );
        if kept {
            let text = v["content"][0]["text"].as_str().unwrap_or_default();
            assert!(
                text.contains(&format!("answer to «{words}")),
                "{point}: {v}"
            );
            assert_eq!(closes[0]["text"], text, "{point}");
        } else {
            assert_eq!(
                closes[0]["stop_reason"], "interrupted",
                "{point}: {closes:#?}"
            );
        }
        assert!(
            mock.requests() <= calls + 1,
            "{point}: the model called at most once"
        );
        assert_eq!(mock.requests(), calls + usize::from(called), "{point}");
        drop(srv);
    }
}
