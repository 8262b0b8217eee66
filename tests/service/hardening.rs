//! Regression tests for what an adversarial run of the server found (each
//! named after what broke), beyond the respond path's own rules.

use crate::mock;

use serde_json::Value;
use wmreplay::server::Provider;

use mock::*;

/// An upstream answering 301/302/303/307/308 with a `Location` on another
/// origin had the request replayed there as a GET **with the API key**, and
/// that origin's answer appended as `text_output`. A redirect is now an
/// upstream error, never followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_never_followed_so_the_key_never_leaves() {
    for status in [301, 302, 303, 307, 308] {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (up, mock) = start_mock(Provider::Anthropic, Mode::Ok).await;
        // Another origin: the mock's redirect target on another address.
        let (elsewhere, target) = start_mock(Provider::Anthropic, Mode::Ok).await;
        mock.then([Mode::Redirect(status, format!("{elsewhere}/elsewhere"))]);
        let mut cfg = config(&log, Some(&up), Provider::Anthropic);
        cfg.upstream_retries = 0;
        let srv = start(cfg).await;
        let (code, body) = post(&format!("{}/respond", srv.url), r#"{"text":"hi"}"#).await;
        assert_eq!(code, 502, "{status}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["upstream_status"], status);
        assert!(
            target.redirected.lock().unwrap().is_empty(),
            "{status} was followed"
        );
        assert_eq!(target.requests(), 0);
        // No answer: the turn is closed by an error record only.
        let out = turns(&log, "text_output");
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(
            (out[0]["text"].as_str(), out[0]["stop_reason"].as_str()),
            (Some(""), Some("error"))
        );
        assert_eq!(out[0]["error"]["status"], status);
        assert!(!body.contains(KEY));
        srv.stop().await;
    }
}

/// A 401 whose body echoed the key reached the client as it was. The key
/// (whole or a long piece of it) is now cut out of everything relayed, and
/// the relayed message is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_error_bodies_are_relayed_without_the_key_and_bounded() {
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
    let srv = start(config(&log, Some(&up), Provider::Anthropic)).await;
    let (code, body) = post(&format!("{}/respond", srv.url), r#"{"text":"hi"}"#).await;
    assert_eq!(code, 502, "{body}");
    assert!(!body.contains(KEY) && !body.contains(&KEY[..12]), "{body}");
    assert!(body.contains("<redacted>"), "{body}");
    mock.then([Mode::LongError(400, 200_000)]);
    let (code, body) = post(&format!("{}/respond", srv.url), r#"{"text":"again"}"#).await;
    assert_eq!(code, 502);
    let v: Value = serde_json::from_str(&body).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.len() < 1200, "{} bytes relayed", message.len());
    srv.stop().await;
}

fn wmreplay() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_wmreplay"))
}

/// Runs `cmd` with an address-space limit of `bytes` (RLIMIT_AS).
fn with_memory_limit(cmd: &mut std::process::Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only setrlimit, which is async-signal-safe, runs between fork
    // and exec.
    unsafe {
        cmd.pre_exec(move || {
            let l = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn mkfifo(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// `serve --log FIFO` hung, and `stats /dev/zero` read until memory ran
/// out and aborted. Special files are refused at once, by the CLI, the
/// library (mapped or read, one-shot or live) and the server.
#[test]
fn special_files_are_refused_at_once_not_read_forever() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("wm.fifo");
    mkfifo(&fifo);
    // A socket cannot even be opened (ENXIO, "No such device or address"):
    // it is named for what it is too.
    let socket = dir.path().join("wm.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    for path in [
        fifo.as_path(),
        std::path::Path::new("/dev/zero"),
        socket.as_path(),
    ] {
        for args in [
            vec!["stats"],
            vec!["stats", "--no-mmap"],
            vec!["respond", "--text", "x"],
        ] {
            let out = wmreplay()
                .args(&args[..1])
                .arg(path)
                .args(&args[1..])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{args:?} {}: {err}",
                path.display()
            );
            assert!(err.contains("not a regular file"), "{err}");
            assert!(err.contains(&path.display().to_string()), "{err}");
        }
        for mode in [wmreplay::ReadMode::Auto, wmreplay::ReadMode::Read] {
            assert!(wmreplay::LogBytes::open(path, mode).is_err());
        }
        let mut live =
            wmreplay::LiveReplay::new(path, wmreplay::Format::Anthropic, Default::default());
        assert!(live.refresh().is_err());
        let out = wmreplay()
            .args(["serve", "--log"])
            .arg(path)
            .args(["--addr", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"));
    }
}

/// `stats` on a sparse 40 GB file with `--no-mmap` died with "memory
/// allocation of … bytes failed" (SIGABRT). Memory sized from the input
/// is reserved fallibly: one line, exit 1.
#[test]
fn a_log_too_large_for_memory_is_an_error_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sparse.log");
    std::fs::File::create(&log)
        .unwrap()
        .set_len(40 << 30)
        .unwrap();
    let mut cmd = wmreplay();
    cmd.args(["stats", "--no-mmap"]).arg(&log);
    with_memory_limit(&mut cmd, 4 << 30);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot allocate"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A sparse 1 GiB log (one line of NULs) under a 2 GiB address-space
/// limit: `stats --record js` died reserving the js arena from the log's
/// length (a little more than the log), and `stats --validator simd-json`
/// copying the line for simd-json ("memory allocation of … bytes failed",
/// SIGABRT). Neither needs that memory: each path replays the log (one
/// invalid line), as the default path does.
#[test]
fn a_sparse_log_under_a_memory_limit_replays_on_every_path_without_aborting() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sparse.log");
    std::fs::File::create(&log)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    for args in [
        vec![],
        vec!["--record", "js"],
        vec!["--validator", "simd-json"],
        vec!["--no-mmap", "--validator", "simd-json"],
    ] {
        for limit in [2u64 << 30, 3 << 30] {
            let mut cmd = wmreplay();
            cmd.args(["stats", "--threads", "2"]).args(&args).arg(&log);
            with_memory_limit(&mut cmd, limit);
            let out = cmd.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            // Reading 1 GiB into memory may not fit beside the parse: then a
            // one-line error; never an abort.
            if args.contains(&"--no-mmap") && out.status.code() == Some(1) {
                assert!(err.contains("cannot allocate"), "{args:?}: {err}");
                continue;
            }
            assert_eq!(out.status.code(), Some(0), "{args:?} {limit}: {err}");
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["total_lines"], 1, "{args:?}");
            assert_eq!(v["skipped_invalid_json"], 1, "{args:?}");
            assert_eq!(v["bytes"], 1u64 << 30, "{args:?}");
        }
    }
}

/// A served log grown sparse to 40 GB killed the server (rc 134). It now
/// answers 507 for that log and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_log_grown_past_memory_is_a_507_and_the_server_lives() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let mut cmd = wmreplay();
    cmd.args(["serve", "--log"])
        .arg(&log)
        .args(["--addr", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped());
    with_memory_limit(&mut cmd, 4 << 30);
    let mut child = cmd.spawn().unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let l = lines.next().expect("the server starts").unwrap();
        if let Some(at) = l.find("addr=") {
            break l[at + 5..].split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let url = format!("http://{addr}");
    let (status, _) = post(&format!("{url}/v1/context"), r#"{"text":"x"}"#).await;
    assert_eq!(status, 200);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(40 << 30)
        .unwrap();
    let (status, body) = post(&format!("{url}/v1/context"), r#"{"text":"x"}"#).await;
    assert_eq!(status, 507, "{body}");
    assert!(body.contains("insufficient_memory"), "{body}");
    let r = client().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(child.try_wait().unwrap().is_none(), "the server is alive");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

/// `stats LOG --no-mmap` while the log was truncated to 0 exited 0 with a
/// replay of an arbitrary prefix; the map path exited 1 "file changed".
/// The read path checks the same: never an exit 0 with a partial replay.
#[test]
fn a_log_truncated_while_read_without_mmap_is_reported_changed() {
    use wmreplay::{Error, LogBytes, ReadMode};
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    // After the read: the library's verify says so.
    std::fs::write(&log, example_bytes()).unwrap();
    let read = LogBytes::open(&log, ReadMode::Read).unwrap();
    assert!(!read.is_mapped());
    assert!(read.verify().is_ok());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert!(matches!(read.verify(), Err(Error::Changed { .. })));
    // Replaced by another file: changed too.
    std::fs::write(&log, example_bytes()).unwrap();
    let read = LogBytes::open(&log, ReadMode::Read).unwrap();
    let other = dir.path().join("other.log");
    std::fs::write(&other, example_bytes()).unwrap();
    std::fs::rename(&other, &log).unwrap();
    assert!(matches!(read.verify(), Err(Error::Changed { .. })));
    // During the read, from the command line: a 64 MiB log truncated while
    // `stats --no-mmap` runs gives exit 1, or exit 0 with the whole log's
    // stats (or the empty log's, if it opened it after the truncation);
    // never exit 0 with a part of it.
    let line = "{\"type\":\"wm_event\",\"ts_ms\":1,\"pad\":\"0123456789012345678901234567890123456789\"}\n";
    let whole = line.repeat((64 << 20) / line.len());
    let n = (whole.len() / line.len()) as u64;
    for round in 0..5 {
        std::fs::write(&log, &whole).unwrap();
        let child = wmreplay()
            .args(["stats", "--no-mmap"])
            .arg(&log)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2 + round * 3));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(0)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        match out.status.code() {
            Some(1) => assert!(String::from_utf8_lossy(&out.stderr).contains("changed")),
            Some(0) => {
                // Read whole before the truncation, or opened after it.
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                let parsed = v["parsed_entries"].as_u64().unwrap();
                assert!(
                    parsed == n || parsed == 0,
                    "a partial replay was presented: {parsed} of {n}"
                );
            }
            other => panic!("exit {other:?}"),
        }
    }
}

/// A log read without mmap and then rewritten in place (truncated and
/// written again, the same length; within the file system's timestamp
/// granularity the modification time stays too) was still "verified": only
/// a shorter file or another inode was noticed. The bytes read are now
/// checked against the file's. A mapped log whose rewrite had its
/// modification time put back (`cp -p`, `rsync -t`) passed too: the
/// status-change time, which cannot be put back, is now compared as well.
/// An append is not a change.
#[test]
fn a_log_rewritten_in_place_after_a_read_is_reported_changed() {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    use wmreplay::{Error, LogBytes, ReadMode};
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let old = example_bytes();
    let mut new = old.clone();
    let k = new.iter().position(|&b| b.is_ascii_lowercase()).unwrap();
    new[k] = new[k].to_ascii_uppercase();
    let ctime = |p: &std::path::Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    for mode in [ReadMode::Read, ReadMode::Auto] {
        for keep_time in [true, false] {
            std::fs::write(&log, &old).unwrap();
            let read = LogBytes::open(&log, mode).unwrap();
            assert_eq!(read.is_mapped(), mode == ReadMode::Auto);
            let before = std::fs::metadata(&log).unwrap().modified().unwrap();
            let opened = ctime(&log);
            let mut f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
            // Until the clock has moved on: a rewrite within the same tick
            // cannot be told from no rewrite by its times.
            while ctime(&log) == opened {
                f.set_len(0).unwrap();
                f.write_all(&new).unwrap();
                if keep_time {
                    f.set_modified(before).unwrap();
                }
            }
            assert!(
                matches!(read.verify(), Err(Error::Changed { .. })),
                "{mode:?}, keep_time {keep_time}: {:?}",
                read.verify()
            );
        }
        std::fs::write(&log, &old).unwrap();
        let read = LogBytes::open(&log, mode).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"{\"type\":\"k\",\"ts_ms\":1}\n").unwrap();
        assert!(read.verify().is_ok(), "{mode:?}: an append is not a change");
    }
}

/// `--since NaN` / `--until NaN` were accepted and the filter dropped.
#[test]
fn non_finite_time_bounds_are_refused() {
    for (flag, v) in [
        ("--since", "NaN"),
        ("--until", "nan"),
        ("--since", "inf"),
        ("--until=-inf", ""),
    ] {
        let args: Vec<&str> = [flag, v].into_iter().filter(|a| !a.is_empty()).collect();
        let out = wmreplay()
            .args(["stats", "examples/working_memory.log"])
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {v}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("finite"));
    }
    let sel = {
        let mut o = wmreplay::Selection::default();
        o.since = Some(f64::NAN);
        o
    };
    assert!(sel.validate().is_err());
}

/// A 40 MB newest record under `--max-tokens 100` took 42 s and 2 GB: its
/// tokens were counted in full. A record whose size alone shows it cannot
/// fit is now left out uncounted, one-shot and live, with the same window.
#[test]
fn a_huge_record_under_a_small_token_budget_is_not_tokenized() {
    use wmreplay::{Format, LiveReplay, ReplayOptions, Selection, Tokenizer, replay};
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let mut text = String::new();
    for i in 0..5 {
        text.push_str(&format!(
            "{{\"type\":\"text_input\",\"ts_ms\":{i},\"text\":\"hello {i}\"}}\n"
        ));
    }
    text.push_str(&format!(
        "{{\"type\":\"wm_event\",\"ts_ms\":9,\"blob\":\"{}\"}}\n",
        "word ".repeat(8 << 20)
    ));
    std::fs::write(&log, &text).unwrap();
    let sel = {
        let mut o = Selection::default();
        o.max_tokens = Some(100);
        o.tokenizer = Tokenizer::O200k;
        o
    };
    let before = wmreplay::__internals::tokens::tokenized_bytes();
    let bytes = std::fs::read(&log).unwrap();
    let mut r = replay(&bytes, &ReplayOptions::default());
    let report = r.select(&sel, None);
    assert_eq!(report.selected, 0, "the newest record alone overflows");
    let mut live = LiveReplay::new(&log, Format::Anthropic, ReplayOptions::default());
    live.refresh().unwrap();
    let (_, report) = live.select(&sel, None).unwrap();
    assert_eq!(report.selected, 0);
    let work = wmreplay::__internals::tokens::tokenized_bytes() - before;
    assert!(
        work < 1 << 20,
        "{work} bytes tokenized for a 100-token window"
    );
}
