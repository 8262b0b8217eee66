//! `wmreplay::append`, the packages' writer: concurrent appends and the
//! server's own writer on one log lose and tear nothing; a torn last line is
//! never glued to; a write that fails part-way is cut back; stamps never go
//! below the log's last record.

mod mock;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use mock::process::Serving;
use serde_json::Value;

/// `POST /v1/records` with `body`, over a plain connection; the status.
fn post_records(url: &str, body: &str) -> u16 {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/records HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[test]
fn appends_and_the_servers_writer_interleave_without_losing_or_tearing_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    // A torn last line from a writer that crashed: it stays a line of its own.
    std::fs::write(
        &log,
        "{\"type\":\"wm_event\",\"ts_ms\":1}\n{\"type\":\"torn",
    )
    .unwrap();
    let srv = Serving::start(&log, &["--no-fsync"], &[], None);
    const ROUNDS: usize = 40;
    std::thread::scope(|s| {
        for t in 0..3 {
            let log = &log;
            s.spawn(move || {
                for i in 0..ROUNDS {
                    let a = format!(r#"{{"type":"wm_event","who":"append-{t}","n":{i},"k":0}}"#);
                    let b = format!(
                        "{{ \"type\": \"wm_event\", \"who\": \"append-{t}\", \"n\": {i}, \"k\": 1,\n \"text\": \"a b\\n\" }}"
                    );
                    let r = wmreplay::append(log, &[a.as_bytes(), b.as_bytes()]).unwrap();
                    assert_eq!(r.records.len(), 2);
                    assert!(r.records.iter().all(|x| x.stamped));
                    assert!(r.records[1].offset == r.records[0].offset + r.records[0].len);
                }
            });
        }
        for t in 0..2 {
            let url = &srv.url;
            s.spawn(move || {
                for i in 0..ROUNDS {
                    let body = format!(
                        r#"[{{"type":"wm_event","who":"serve-{t}","n":{i},"k":0}},{{"type":"wm_event","who":"serve-{t}","n":{i},"k":1}}]"#
                    );
                    assert_eq!(post_records(url, &body), 200);
                }
            });
        }
    });
    srv.stop();
    let all = lines_after_torn(&log);
    let mut seen: BTreeMap<(String, u64, u64), usize> = BTreeMap::new();
    for v in &all {
        if let Some(who) = v["who"].as_str() {
            *seen
                .entry((
                    who.into(),
                    v["n"].as_u64().unwrap(),
                    v["k"].as_u64().unwrap(),
                ))
                .or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 5 * ROUNDS * 2, "every record is there");
    assert!(seen.values().all(|&n| n == 1), "and there once");
    // A batch's two records are adjacent, whoever wrote it.
    for w in all.windows(2) {
        if w[0]["k"] == 0 && w[0]["who"].is_string() {
            assert_eq!(
                (&w[1]["who"], &w[1]["n"], &w[1]["k"]),
                (&w[0]["who"], &w[0]["n"], &Value::from(1))
            );
        }
    }
    // The packages' stamps never go below a record before them.
    let mut last = 0.0f64;
    for v in &all {
        let ts = v["ts_ms"].as_f64().unwrap();
        if v["who"].as_str().is_some_and(|w| w.starts_with("append")) {
            assert!(ts >= last, "{ts} below {last}");
        }
        last = last.max(ts);
    }
    let bytes = std::fs::read(&log).unwrap();
    let replayed = wmreplay::replay(&bytes, &wmreplay::ReplayOptions::default());
    assert_eq!(replayed.stats().parsed_entries as usize, 1 + 5 * ROUNDS * 2);
    assert_eq!(
        replayed.stats().skipped_invalid_json,
        1,
        "only the torn line"
    );
}

/// The log's lines, the first two (a record and the torn line, which stays
/// a line of its own) checked and left out.
fn lines_after_torn(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut it = text.splitn(3, '\n');
    assert_eq!(it.next(), Some("{\"type\":\"wm_event\",\"ts_ms\":1}"));
    assert_eq!(it.next(), Some("{\"type\":\"torn"));
    let rest = it.next().unwrap_or("");
    assert!(
        rest.is_empty() || rest.ends_with('\n'),
        "the log ends a line"
    );
    rest.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: a torn line {l:?}")))
        .collect()
}

#[test]
fn stamps_never_go_below_the_last_record_and_given_ones_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let future = 9_000_000_000_000u64;
    std::fs::write(
        &log,
        format!("{{\"type\":\"x\",\"ts_ms\":{future}.5}}\nnot json\n"),
    )
    .unwrap();
    let r = wmreplay::append(
        &log,
        &[br#"{"type":"a"}"#.as_slice(), br#"{"type":"b","ts_ms":3}"#],
    )
    .unwrap();
    assert_eq!(r.records[0].ts_ms, (future + 1) as f64);
    assert!(r.records[0].stamped && !r.records[1].stamped);
    assert_eq!(r.records[1].ts_ms, 3.0);
    // The next batch reads its floor from the log again: the last record is
    // now the one with ts_ms 3, so the clock is the stamp.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let next = wmreplay::append(&log, &[br#"{"type":"c"}"#]).unwrap();
    assert!(next.records[0].ts_ms >= now && next.records[0].ts_ms < future as f64);
    let text = std::fs::read_to_string(&log).unwrap();
    let written: Vec<&str> = text.lines().skip(2).collect();
    assert_eq!(written.len(), 3);
    assert_eq!(
        written[0],
        format!("{{\"ts_ms\":{},\"type\":\"a\"}}", future + 1)
    );
    assert_eq!(written[1], r#"{"type":"b","ts_ms":3}"#);
    assert_eq!(std::fs::metadata(&log).unwrap().len(), next.log_len);
}

#[test]
fn invalid_records_and_special_files_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    std::fs::write(&log, "{\"type\":\"a\",\"ts_ms\":1}\n").unwrap();
    for (batch, says) in [
        (
            vec![&br#"{"type":"ok"}"#[..], b"{\"type\":\"a\",\"ts_ms\":null}"],
            "record 1: \"ts_ms\" is not a number",
        ),
        (vec![b"{\"type\":\"a\"} {}"], "record 0: invalid JSON"),
        (vec![b"\"text\""], "record 0: not a JSON object"),
        (vec![], "no records"),
    ] {
        let e = wmreplay::append(&log, &batch).unwrap_err();
        assert!(matches!(
            e,
            wmreplay::AppendError::InvalidRecord { .. } | wmreplay::AppendError::Empty
        ));
        assert!(e.to_string().contains(says), "{e}");
    }
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "{\"type\":\"a\",\"ts_ms\":1}\n"
    );
    // A FIFO is refused at once, not written into (or waited on).
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = wmreplay::append(&fifo, &[br#"{"type":"a"}"#]).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    // A missing log is created.
    let fresh = dir.path().join("new.log");
    wmreplay::append(&fresh, &[br#"{"type":"a","ts_ms":1}"#]).unwrap();
    assert_eq!(
        std::fs::read_to_string(&fresh).unwrap(),
        "{\"type\":\"a\",\"ts_ms\":1}\n"
    );
}

/// The child half of the next test: appends under a file size limit.
fn under_a_file_size_limit(log: &Path) {
    // SAFETY: ignoring SIGXFSZ makes a write past the limit fail with EFBIG
    // instead of killing the process; setrlimit changes only this process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let len = std::fs::metadata(log).unwrap().len();
        let l = libc::rlimit {
            rlim_cur: len + 100,
            rlim_max: len + 100,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &l), 0);
    }
    let before = std::fs::read(log).unwrap();
    let big = format!(r#"{{"type":"a","text":"{}"}}"#, "y".repeat(400));
    let e =
        wmreplay::append(log, &[br#"{"type":"small"}"#.as_slice(), big.as_bytes()]).unwrap_err();
    assert!(e.to_string().contains("cannot append"), "{e}");
    assert_eq!(
        std::fs::read(log).unwrap(),
        before,
        "the failed write was cut back"
    );
    wmreplay::append(log, &[br#"{"type":"small"}"#]).unwrap();
}

#[test]
fn a_write_that_fails_part_way_is_cut_back_and_the_next_succeeds() {
    if let Some(log) = std::env::var_os("WMREPLAY_APPEND_CHILD") {
        return under_a_file_size_limit(Path::new(&log));
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    // Torn: the failed batch starts with a `\n`, which is cut back too.
    std::fs::write(&log, "{\"type\":\"a\",\"ts_ms\":1}\n{\"type\":").unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_write_that_fails_part_way_is_cut_back_and_the_next_succeeds",
            "--nocapture",
        ])
        .env("WMREPLAY_APPEND_CHILD", &log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let (head, last) = text.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(head, "{\"type\":\"a\",\"ts_ms\":1}\n{\"type\":");
    assert!(
        last.starts_with("{\"ts_ms\":") && last.ends_with(",\"type\":\"small\"}"),
        "{last}"
    );
}
