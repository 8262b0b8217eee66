//! Hostile inputs, each on its own: the engine answers with counts and
//! located skips, never a crash, a stack overflow or a lost record.

use wmreplay::__internals::json::JsonErrorKind;
use wmreplay::{Format, ReplayOptions, SkipReason, replay};

fn counts(log: &[u8], threads: usize) -> [u64; 4] {
    let r = replay(log, &{
        let mut o = ReplayOptions::default();
        o.threads = threads;
        o
    });
    let s = r.stats();
    [
        s.total_lines,
        s.parsed_entries,
        s.skipped_invalid_json,
        s.skipped_invalid_shape,
    ]
}

fn good(ts: u64) -> String {
    format!("{{\"type\":\"k\",\"ts_ms\":{ts}}}\n")
}

#[test]
fn a_million_deep_nesting_is_a_clear_skip_on_every_thread() {
    for open in [b'[', b'{'] {
        let mut log = good(1).into_bytes();
        let mut line = Vec::new();
        for _ in 0..1_000_000 {
            if open == b'{' {
                line.extend_from_slice(b"{\"a\":");
            } else {
                line.push(b'[');
            }
        }
        log.extend_from_slice(&line);
        log.push(b'\n');
        log.extend_from_slice(good(2).as_bytes());
        // On the calling thread and on rayon's workers (smaller stacks).
        for threads in [1, 2] {
            let r = replay(&log, &{
                let mut o = ReplayOptions::default();
                o.threads = threads;
                o.chunk_size = 64;
                o
            });
            let s = r.stats();
            assert_eq!(
                [s.total_lines, s.parsed_entries, s.skipped_invalid_json],
                [3, 2, 1]
            );
            assert_eq!(s.skips[0].line, 2);
            assert!(
                matches!(
                    s.skips[0].reason,
                    SkipReason::InvalidJson {
                        kind: JsonErrorKind::TooDeep,
                        ..
                    }
                ),
                "{:?}",
                s.skips[0].reason
            );
            assert!(
                s.skips[0].reason.to_string().contains("deep"),
                "{}",
                s.skips[0].reason
            );
        }
    }
    // The limit is at least 1,000 and documented: 1,000 deep is a record.
    const { assert!(wmreplay::DEFAULT_MAX_DEPTH >= 1_000) };
    let deep = format!(
        "{{\"type\":\"k\",\"ts_ms\":1,\"x\":{}{}}}\n",
        "[".repeat(999),
        "]".repeat(999)
    );
    assert_eq!(counts(deep.as_bytes(), 2), [1, 1, 0, 0]);
}

#[test]
fn a_100_mb_line_is_replayed_byte_for_byte() {
    let filler = "ab\\\"c ".repeat((100 << 20) / 6 + 1);
    let line = format!("{{\"type\":\"big\",\"ts_ms\":5,\"x\":\"{filler}\"}}");
    assert!(line.len() > 100 << 20);
    let log = format!("{}{line}\n{}", good(1), good(9));
    let r = replay(log.as_bytes(), &ReplayOptions::default());
    assert_eq!(r.stats().parsed_entries, 3);
    let ndjson = r.render_messages(Format::Ndjson);
    let lines: Vec<&[u8]> = ndjson
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 3);
    // The line as written, escaped once, ends the message's content.
    let escaped = line.replace('\\', "\\\\").replace('"', "\\\"");
    let mut tail = escaped.into_bytes();
    tail.extend_from_slice(b"\"}");
    assert!(
        lines[1].ends_with(&tail),
        "the line is in the message as written"
    );
}

#[test]
fn a_file_of_nul_bytes() {
    let log = vec![0u8; 1 << 20];
    assert_eq!(counts(&log, 2), [1, 0, 1, 0]);
    let mut lines = Vec::new();
    for _ in 0..1000 {
        lines.extend_from_slice(&[0, 0, 0, b'\n']);
    }
    assert_eq!(counts(&lines, 2), [1000, 0, 1000, 0]);
}

#[test]
fn invalid_utf8_everywhere() {
    // Every kind of broken sequence, inside strings, keys, between tokens, and
    // a valid record next to each.
    let broken: [&[u8]; 8] = [
        b"\xff",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xe2\x82",
        b"\x80",
        b"\xf0\x9f\x98",
        b"\xc3",
    ];
    let mut log = Vec::new();
    let mut bad = 0;
    for (i, b) in broken.iter().enumerate() {
        for shape in 0..3 {
            let mut line = Vec::new();
            match shape {
                0 => {
                    line.extend_from_slice(b"{\"type\":\"k\",\"ts_ms\":1,\"t\":\"");
                    line.extend_from_slice(b);
                    line.extend_from_slice(b"\"}");
                }
                1 => {
                    line.extend_from_slice(b"{\"");
                    line.extend_from_slice(b);
                    line.extend_from_slice(b"\":1,\"type\":\"k\",\"ts_ms\":1}");
                }
                _ => {
                    line.extend_from_slice(b);
                    line.extend_from_slice(b"{\"type\":\"k\",\"ts_ms\":1}");
                }
            }
            log.extend_from_slice(&line);
            log.push(b'\n');
            log.extend_from_slice(good(i as u64).as_bytes());
            bad += 1;
        }
    }
    assert_eq!(counts(&log, 1), [bad * 2, bad, bad, 0]);
    assert_eq!(counts(&log, 2), [bad * 2, bad, bad, 0]);
    // And a whole file of random bytes with no valid UTF-8 structure.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..(1 << 20))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8 | 0x80
        })
        .collect();
    let [total, parsed, invalid, shape] = counts(&noise, 2);
    assert_eq!(total, parsed + invalid + shape);
    assert_eq!(parsed, 0);
}

#[test]
fn a_line_of_a_million_tiny_numbers() {
    let mut line = String::from("{\"type\":\"nums\",\"ts_ms\":3,\"n\":[");
    for i in 0..1_000_000 {
        if i > 0 {
            line.push(',');
        }
        line.push(char::from(b'0' + (i % 10) as u8));
    }
    line.push_str("]}\n");
    assert_eq!(counts(line.as_bytes(), 2), [1, 1, 0, 0]);
    let r = replay(line.as_bytes(), &ReplayOptions::default());
    let body = r.render_messages(Format::Anthropic);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
}

#[test]
fn a_file_with_no_newline_at_all() {
    let log = br#"{"type":"only","ts_ms":1}"#;
    let r = replay(log, &ReplayOptions::default());
    assert_eq!(r.stats().parsed_entries, 1);
    assert!(r.stats().unterminated_tail);
    let garbage = vec![b'x'; 5 << 20];
    assert_eq!(counts(&garbage, 2), [1, 0, 1, 0]);
}

#[test]
fn ten_million_empty_lines() {
    let mut log = vec![b'\n'; 10_000_000];
    log.extend_from_slice(good(1).as_bytes());
    log.extend(std::iter::repeat_n(b'\n', 1000));
    let r = replay(&log, &ReplayOptions::default());
    let s = r.stats();
    assert_eq!([s.total_lines, s.parsed_entries], [1, 1]);
    // Blank lines are not counted, but they are numbered.
    let mut with_bad = log.clone();
    with_bad.extend_from_slice(b"nope\n");
    let r = replay(&with_bad, &ReplayOptions::default());
    assert_eq!(r.stats().skips[0].line, 10_000_000 + 1 + 1000 + 1);
}
