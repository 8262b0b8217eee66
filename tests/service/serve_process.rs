//! `wmreplay serve` as a process: settings checked at start-up, a write that
//! fails part-way (a file size limit), and what its logs show (no colour
//! codes off a terminal, JSON lines on request, never the API key).

use crate::mock;

use std::time::Duration;

use serde_json::{Value, json};
use wmreplay::server::Provider;

use mock::process::*;
use mock::*;

/// Runs `serve` with `args` and expects it to refuse them: exit 2 with a
/// message containing `says`.
fn refused(args: &[&str], says: &str) {
    refused_with(args, &[], says);
}

/// [`refused`] with these environment variables set (and the key and model
/// variables cleared unless given).
fn refused_with(args: &[&str], envs: &[(&str, &str)], says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = wmreplay();
    cmd.args(["serve", "--log"])
        .arg(dir.path().join("wm.log"))
        .args(args)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("WMREPLAY_MODEL");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

#[test]
fn settings_are_checked_at_start_up() {
    refused(
        &["--upstream", "api.anthropic.com"],
        "https://api.anthropic.com",
    );
    refused(&["--upstream", "ftp://example.com"], "http or https");
    refused(&["--upstream", "http://"], "--upstream");
    refused(&["--provider", "gemini"], "unknown provider");
    refused(&["--header-timeout", "18446744073709551615"], "limit");
    refused(&["--upstream-timeout", "0"], "more than zero");
    refused(&["--write-timeout", "2d"], "limit");
    refused(&["--idempotency-ttl", "forever"], "not a duration");
    refused(&["--upstream-field", "temperature"], "NAME=JSON");
    refused(&["--upstream-field", "user=bob"], "quote");
    refused(&["--upstream-field", "messages=[]"], "messages");
    refused(&["--upstream-retries", "1000"], "1000");
    refused(&["--max-output-tokens", "0"], "0");
    // The old, ambiguous name is refused with both new ones named.
    refused(&["--max-tokens", "500"], "--max-output-tokens");
    refused_with(
        &[],
        &[("WMREPLAY_MAX_TOKENS", "500")],
        "--max-tokens-window",
    );
    // An upstream needs its key (named) and a model (no built-in default).
    let up = ["--upstream", "https://api.anthropic.com"];
    refused(&up, "ANTHROPIC_API_KEY");
    // A placeholder no API key looks like (it fails in every SDK too).
    refused_with(
        &[&up[..], &["--model", "m"]].concat(),
        &[("ANTHROPIC_API_KEY", "…")],
        "does not hold a usable API key",
    );
    refused(
        &[&up[..], &["--provider", "openai"]].concat(),
        "OPENAI_API_KEY",
    );
    refused_with(&up, &[("ANTHROPIC_API_KEY", "k")], "WMREPLAY_MODEL");
    refused_with(&[&up[..], &["--api-key-env", ""]].concat(), &[], "--model");
    // Fields are checked against the provider's table at start-up.
    let model = [
        ("ANTHROPIC_API_KEY", "k"),
        ("WMREPLAY_MODEL", "claude-sonnet-4-5"),
    ];
    refused_with(
        &[&up[..], &["--upstream-field", "frequency_penalty=1"]].concat(),
        &model,
        "frequency_penalty",
    );
    refused_with(
        &[
            &up[..],
            &[
                "--upstream-field",
                "temperature=0.5",
                "--upstream-field",
                "top_p=0.9",
            ],
        ]
        .concat(),
        &model,
        "top_p",
    );
    refused_with(
        &[&up[..], &["--upstream-header", "x-api-key=abc"]].concat(),
        &model,
        "x-api-key",
    );
    refused(&["--addr", "no-port"], "--addr");
    refused(&["--log-format", "xml"], "xml");
    // Beyond loopback, a token (or an explicit opt-out) is required.
    refused(&["--addr", "0.0.0.0:0"], "--allow-unauthenticated");
    refused(&["--auth-token-env", "WMREPLAY_TEST_UNSET_VAR"], "not set");
    refused(&["--max-record-bytes", "0"], "--max-record-bytes");
    // --log-dir must be a directory that exists; --log and --log-dir exclude each other.
    let dir = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            vec![
                "--log-dir".to_string(),
                dir.path().join("missing").display().to_string(),
            ],
            "--log-dir",
        ),
        (
            vec![
                "--log-dir".to_string(),
                dir.path().display().to_string(),
                "--log".into(),
                "x.log".into(),
            ],
            "cannot be used with",
        ),
    ] {
        let out = wmreplay().arg("serve").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_token_is_required_and_never_logged() {
    const TOKEN: &str = "wmr-token-very-secret-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let srv = Serving::start(
        &log,
        &["--auth-token-env", "WMREPLAY_TEST_TOKEN"],
        &[("WMREPLAY_TEST_TOKEN", TOKEN), ("RUST_LOG", "trace")],
        None,
    );
    let mut outputs = String::new();
    for (auth, want) in [
        (None, 401),
        (Some(format!("Bearer {}", &TOKEN[..10])), 401),
        (Some(format!("Bearer {TOKEN}")), 200),
    ] {
        let mut r = client()
            .post(format!("{}/v1/context", srv.url))
            .body(r#"{"text":"hi"}"#);
        if let Some(a) = &auth {
            r = r.header("authorization", a);
        }
        let resp = r.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), want, "{auth:?}");
        outputs.push_str(&resp.text().await.unwrap());
    }
    let health = client()
        .get(format!("{}/healthz", srv.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let logs = srv.stop();
    assert!(logs.contains("listening"), "{logs}");
    outputs.push_str(&logs);
    assert!(!outputs.contains(TOKEN), "the token leaked");
    assert!(!outputs.contains(&TOKEN[..12]), "part of the token leaked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_fails_part_way_leaves_no_torn_line_and_the_next_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    // The file size limit applies to the state store too (its batch journal
    // is written before every append): a log larger than the store's few
    // pages leaves it room.
    let mut padded = std::fs::read(&log).unwrap();
    for i in 0..2000 {
        padded.extend_from_slice(
            format!(
                "{{\"type\":\"wm_event\",\"ts_ms\":{i},\"pad\":\"{}\"}}\n",
                "p".repeat(100)
            )
            .as_bytes(),
        );
    }
    std::fs::write(&log, &padded).unwrap();
    let before = std::fs::read(&log).unwrap();
    let (up, _) = start_mock(Provider::Anthropic, Mode::Ok).await;
    // Room for a short turn and its answer, not for a long input.
    let limit = before.len() as u64 + 600;
    let srv = Serving::start(
        &log,
        &[
            "--upstream",
            &up,
            "--state",
            &dir.path().join("st.db").display().to_string(),
        ],
        &[("ANTHROPIC_API_KEY", "k")],
        Some(limit),
    );
    let long = "y".repeat(2000);
    let (status, body) = post(
        &format!("{}/respond", srv.url),
        json!({"text": long}).to_string(),
    )
    .await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("append_failed"), "{body}");
    // The log's path is the operator's, not the client's (finding: "a
    // failed append on the drop-in routes names the server's log path").
    let dir_name = dir.path().display().to_string();
    assert!(!body.contains(&dir_name), "{body}");
    let (status, body) = post(
        &format!("{}/anthropic/v1/messages", srv.url),
        json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": long}]})
            .to_string(),
    )
    .await;
    assert_eq!(status, 500, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        e["error"]["details"]["error_code"], "append_failed",
        "{body}"
    );
    assert!(!body.contains(&dir_name), "{body}");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        before,
        "the failed write was cut back"
    );
    let (status, body) = post(&format!("{}/respond", srv.url), r#"{"text":"short"}"#).await;
    assert_eq!(status, 200, "{body}");
    let after = std::fs::read(&log).unwrap();
    assert_eq!(&after[..before.len()], &before[..]);
    for l in String::from_utf8(after[before.len()..].to_vec())
        .unwrap()
        .lines()
    {
        serde_json::from_str::<Value>(l).expect("every appended line parses");
    }
    assert_eq!(turns(&log, "text_input").len(), 1);
    assert_eq!(turns(&log, "text_output").len(), 1);
    srv.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_off_a_terminal_have_no_colour_codes_and_never_the_key() {
    const SECRET: &str = "sk-ant-api03-verysecretkeymaterial-0123456789";
    for format in ["text", "json"] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(
            Provider::Anthropic,
            Mode::Fail {
                status: 401,
                retry_after: None,
                echo_key: true,
            },
        )
        .await;
        let srv = Serving::start(
            &log,
            &["--upstream", &up, "--log-format", format],
            &[("ANTHROPIC_API_KEY", SECRET), ("RUST_LOG", "trace")],
            None,
        );
        let mut outputs = String::new();
        let (status, body) = post(&format!("{}/respond", srv.url), r#"{"text":"hi"}"#).await;
        assert_eq!(status, 502, "{body}");
        assert!(body.contains("<redacted>"), "{body}");
        outputs.push_str(&body);
        // A redirect elsewhere is an error, not followed with the key.
        mock.then([Mode::Redirect(302, format!("{up}/elsewhere"))]);
        let (status, body) = post(&format!("{}/respond", srv.url), r#"{"text":"again"}"#).await;
        assert_eq!(status, 502, "{body}");
        assert!(body.contains("302"), "{body}");
        assert!(
            mock.redirected.lock().unwrap().is_empty(),
            "the redirect was not followed"
        );
        outputs.push_str(&body);
        for path in ["/v1/stats", "/healthz"] {
            let r = client()
                .get(format!("{}{path}", srv.url))
                .send()
                .await
                .unwrap();
            outputs.push_str(&r.text().await.unwrap());
        }
        let (_, ctx) = post(&format!("{}/v1/context", srv.url), r#"{"text":"x"}"#).await;
        outputs.push_str(&ctx);
        assert!(
            mock.keys().iter().all(|k| k == SECRET),
            "the key was sent upstream"
        );
        let logs = srv.stop();
        outputs.push_str(&logs);
        assert!(!logs.is_empty());
        assert!(!logs.contains('\u{1b}'), "no escape bytes in {format} logs");
        assert!(!outputs.contains(SECRET), "the key leaked");
        assert!(!outputs.contains(&SECRET[..16]), "part of the key leaked");
        if format == "json" {
            for l in logs.lines() {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
                assert!(v.get("level").is_some(), "{l}");
            }
        }
    }
}

/// Opens a connection that sends the HTTP/2 preface and an empty SETTINGS
/// frame, then nothing, and reads nothing.
async fn h2_preface_only(addr: &str) -> Option<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .ok()?;
    Some(s)
}

/// Hostile clients hold nothing for long: 1,100 HTTP/2 connections that
/// send only their preface (more than --max-connections) and 20 streaming
/// clients that never read, while /healthz and a normal turn keep
/// answering within a second; then SIGTERM stops the server within its
/// shutdown timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_and_non_reading_clients_hold_no_slot_and_sigterm_stops_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    mock.then((0..20).map(|_| Mode::Big(2048)));
    let srv = Serving::start(
        &log,
        &[
            "--upstream",
            &up,
            "--no-fsync",
            "--max-concurrent",
            "24",
            "--write-timeout",
            "1",
            "--shutdown-timeout",
            "2",
            // The big answers stay out of the normal turns' requests.
            "--max-tokens-window",
            "100000",
            "--tokenizer",
            "bytes",
        ],
        &[("ANTHROPIC_API_KEY", "k")],
        None,
    );
    let addr = srv.url.trim_start_matches("http://").to_string();
    let sock_addr: std::net::SocketAddr = addr.parse().unwrap();
    let mut idle = Vec::new();
    for _ in 0..1100 {
        if let Some(s) = h2_preface_only(&addr).await {
            idle.push(s);
        }
    }
    assert!(idle.len() >= 1050, "{} idle connections opened", idle.len());
    let mut stalled = Vec::new();
    for i in 0..20 {
        stalled.push(non_reading_stream(sock_addr, &format!("big {i}")).await);
    }
    // Give the streams time to fill their buffers and stall.
    tokio::time::sleep(Duration::from_millis(500)).await;
    wmreplay::server::install_crypto_provider();
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    for round in 0..3 {
        let r = quick.get(format!("{}/healthz", srv.url)).send().await;
        assert!(
            matches!(&r, Ok(r) if r.status() == 200),
            "round {round}: /healthz did not answer within a second: {r:?}"
        );
        let r = quick
            .post(format!("{}/respond", srv.url))
            .body(r#"{"text":"normal"}"#)
            .send()
            .await;
        assert!(
            matches!(&r, Ok(r) if r.status() == 200),
            "round {round}: /respond did not answer within a second: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    // Every stalled client's answer is appended whole all the same.
    for i in 0..20 {
        let want = answer_to(&format!("big {i}"));
        let mut found = false;
        for _ in 0..200 {
            // Whole: the answer's 2 MiB, the record cut to the record
            // limit and saying how long the answer was.
            if turns(&log, "text_output").iter().any(|v| {
                v["text"].as_str().is_some_and(|t| t.starts_with(&want))
                    && v["text_cut"]["bytes"].as_u64() > Some(2048 << 10)
            }) {
                found = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(found, "the answer to big {i} was appended");
    }
    // SIGTERM with the hostile connections still open.
    let t = std::time::Instant::now();
    let logs = srv.stop();
    assert!(
        t.elapsed() < Duration::from_millis(3500),
        "stopped in {:?}, past the 2 s shutdown timeout",
        t.elapsed()
    );
    assert!(
        !logs.contains("still running at the shutdown deadline"),
        "nothing was left running at the deadline: {logs}"
    );
    drop((idle, stalled));
}

/// `--token-file`: a bad file stops the start naming its line; SIGHUP
/// reads the file again (a token added works, a file made bad keeps the
/// tokens as they were); no token is ever printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_file_is_read_again_on_sighup_and_never_printed() {
    use wmreplay::server::token_line_hash;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, "sha256:nothex write alpha\n").unwrap();
    let file_arg = file.display().to_string();
    refused(
        &["--token-file", &file_arg],
        "tokens:1: \"sha256:nothex\" is not a token's hash",
    );
    let log = dir.path().join("alpha.log");
    std::fs::write(
        &file,
        format!("{} write alpha\n", token_line_hash("tok-first")),
    )
    .unwrap();
    let srv = Serving::start(&log, &["--token-file", &file_arg], &[], None);
    let record = json!({"type": "wm_insight", "insight": "x"}).to_string();
    let post_as = |token: &'static str| {
        client()
            .post(format!("{}/v1/records", srv.url))
            .header("content-type", "application/json")
            .bearer_auth(token)
            .body(record.clone())
            .send()
    };
    assert_eq!(post_as("tok-first").await.unwrap().status(), 200);
    assert_eq!(post_as("tok-second").await.unwrap().status(), 401);
    let hup = || {
        // SAFETY: kill sends a signal to our own child's pid.
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGHUP) };
    };
    std::fs::write(
        &file,
        format!(
            "{} write alpha\n{} read *\n",
            token_line_hash("tok-first"),
            token_line_hash("tok-second")
        ),
    )
    .unwrap();
    hup();
    let mut status = 0;
    for _ in 0..100 {
        let r = client()
            .get(format!("{}/v1/stats", srv.url))
            .bearer_auth("tok-second")
            .send()
            .await
            .unwrap();
        status = r.status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200, "the added token after SIGHUP");
    assert_eq!(
        post_as("tok-second").await.unwrap().status(),
        403,
        "a read token"
    );
    // A file made bad: the tokens stay as they were.
    std::fs::write(&file, "not a line\n").unwrap();
    hup();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(post_as("tok-first").await.unwrap().status(), 200);
    let logs = srv.stop();
    assert!(logs.contains("could not be read again"), "{logs}");
    assert!(logs.contains("tokens:1:"), "{logs}");
    for t in ["tok-first", "tok-second"] {
        assert!(!logs.contains(t), "a token was printed: {logs}");
    }
}

/// Finding: "`--forward-client-key` refuses to start without the server's
/// own key" (docs/compat.md says none is needed): it starts, and the
/// client's key calls the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_the_clients_key_needs_no_key_of_the_servers() {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
    let srv = Serving::start(
        &log,
        &[
            "--upstream",
            &up,
            "--forward-client-key",
            "--api-key-env",
            "WMREPLAY_TEST_NO_SUCH_KEY",
        ],
        &[],
        None,
    );
    let r = client()
        .post(format!("{}/anthropic/v1/messages", srv.url))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-the-clients-own")
        .body(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(mock.keys(), ["sk-the-clients-own"]);
    srv.stop();
}
