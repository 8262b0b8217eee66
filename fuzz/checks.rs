//! The properties the fuzz targets check, shared with `tests/fuzz_corpus.rs`,
//! which replays every committed corpus input through them on `cargo test`.
//! Each function panics (with the input in the message) when a property
//! fails; none may panic otherwise, on any input.
//!
//! serde_json (with `arbitrary_precision` and `unbounded_depth`) is the
//! grammar oracle for single lines. Its known differences from RFC 8259 as
//! the contract reads it, which these checks allow for:
//! - it rejects unpaired surrogate escapes (`"\ud800"`), which JSON.parse and
//!   the grammar accept;
//! - it recurses per nesting level, so it is only asked about lines nested
//!   less than `SERDE_DEPTH` deep (deeper lines are checked against the simple
//!   validator alone);
//! - it has no depth limit, while the engine skips lines nested deeper than its
//!   limit (`DEFAULT_MAX_DEPTH`, 10,000), as documented.

#![allow(dead_code)]

use std::io::Write;

use wmreplay::lines::{Lines, chunks};
use wmreplay::parse::LineParser;
use wmreplay::{
    CurrentRequest, DEFAULT_MAX_DEPTH, Format, LiveReplay, ReplayOptions, SkipReason, json, replay,
    scan,
};

/// Lines nested at least this deep are not given to serde_json.
const SERDE_DEPTH: usize = 400;

fn show(data: &[u8]) -> String {
    let s = String::from_utf8_lossy(&data[..data.len().min(300)]);
    format!("{s:?} ({} bytes)", data.len())
}

fn nesting(data: &[u8]) -> usize {
    data.iter().filter(|&&b| b == b'[' || b == b'{').count()
}

/// One line: the scanner agrees with the simple validator, and with
/// serde_json where serde_json follows the grammar; the members it finds
/// agree with the simple field scan; the line parser's record or skip reason
/// agrees with serde_json's view of the value.
pub fn check_line(data: &[u8]) {
    let max = DEFAULT_MAX_DEPTH;
    let fast = scan::scan_line(data, max, &mut Vec::new());
    let simple = json::validate(data, max, &mut Vec::new());
    assert_eq!(
        fast.is_ok(),
        simple.is_ok(),
        "scan {fast:?} vs simple {simple:?}: {}",
        show(data)
    );
    if let Ok(s) = &fast {
        let fields = json::scan_fields(data);
        assert_eq!(s.is_object, fields.is_object, "{}", show(data));
        assert_eq!(s.kind, fields.kind, "{}", show(data));
        assert_eq!(s.ts_ms, fields.ts_ms, "{}", show(data));
        assert_eq!(
            s.escape_extra as usize,
            wmreplay::escape::escaped_extra(data),
            "{}",
            show(data)
        );
    }
    let surrogate = data.windows(3).any(|w| w.eq_ignore_ascii_case(b"\\ud"));
    if surrogate || nesting(data) >= SERDE_DEPTH {
        return;
    }
    let serde = serde_json::from_slice::<serde_json::Value>(data);
    assert_eq!(
        simple.is_ok(),
        serde.is_ok(),
        "simple {simple:?} vs serde {serde:?}: {}",
        show(data)
    );
    let Ok(value) = serde else {
        return;
    };
    // What the line parser decides (it trims JavaScript whitespace first, a
    // superset of JSON's, so only untrimmed-equal lines are compared).
    if wmreplay::lines::trim(data) != (0..data.len()) {
        return;
    }
    let parsed = LineParser::new(max).parse(data, 0);
    let want = match &value {
        serde_json::Value::Object(m) => match (m.get("type"), m.get("ts_ms")) {
            (None, _) => Err("missing type"),
            (Some(t), _) if !t.is_string() => Err("type not string"),
            (_, None) => Err("missing ts_ms"),
            (_, Some(ts)) if !ts.is_number() => Err("ts_ms not number"),
            _ => Ok(()),
        },
        _ => Err("not an object"),
    };
    match (&parsed, want) {
        (Ok(_), Ok(())) => {}
        (Err(SkipReason::NotAnObject), Err("not an object"))
        | (Err(SkipReason::MissingType), Err("missing type"))
        | (Err(SkipReason::TypeNotString), Err("type not string"))
        | (Err(SkipReason::MissingTsMs), Err("missing ts_ms"))
        | (Err(SkipReason::TsMsNotNumber), Err("ts_ms not number")) => {}
        (got, want) => panic!("parser {got:?} vs serde {want:?}: {}", show(data)),
    }
}

/// A whole buffer as a log: the counts add up, every body is valid JSON with
/// one message per record plus the current request (plus the system message
/// for OpenAI), and threads or chunk sizes change nothing.
pub fn check_buffer(data: &[u8]) {
    let one = replay(
        data,
        &ReplayOptions {
            threads: 1,
            ..ReplayOptions::default()
        },
    );
    let s = one.stats();
    assert_eq!(
        s.total_lines,
        s.parsed_entries + s.skipped_invalid_json + s.skipped_invalid_shape,
        "{}",
        show(data)
    );
    assert_eq!(s.parsed_entries as usize, one.records().len());
    let current = CurrentRequest {
        text: "t",
        session_id: None,
    };
    for format in [Format::Anthropic, Format::OpenAi] {
        let body = one.render_request(format, "sys", &current);
        let v: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{format:?} body is not JSON ({e}): {}", show(data)));
        let extra = if format == Format::OpenAi { 2 } else { 1 };
        assert_eq!(
            v["messages"].as_array().map(Vec::len),
            Some(one.records().len() + extra),
            "{}",
            show(data)
        );
    }
    let many = replay(
        data,
        &ReplayOptions {
            threads: 2,
            chunk_size: 7,
            ..ReplayOptions::default()
        },
    );
    assert_eq!(many.stats(), one.stats(), "{}", show(data));
    assert_eq!(
        many.render_request(Format::Ndjson, "sys", &current),
        one.render_request(Format::Ndjson, "sys", &current),
        "{}",
        show(data)
    );
}

/// Line splitting and chunking against a naive split on `\n`.
pub fn check_split(data: &[u8]) {
    let naive: Vec<&[u8]> = if data.is_empty() {
        Vec::new()
    } else {
        let mut v: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
        if data.ends_with(b"\n") {
            v.pop();
        }
        v
    };
    let got: Vec<&[u8]> = Lines::new(data, 0..data.len())
        .map(|l| &data[l.range])
        .collect();
    assert_eq!(got, naive, "{}", show(data));
    let target = 1 + data.first().copied().unwrap_or(0) as usize % 64;
    let cs = chunks(data, 0..data.len(), target);
    let mut at = 0;
    for c in &cs {
        assert_eq!(c.start, at, "chunks are contiguous: {}", show(data));
        assert!(
            c.end == data.len() || data[c.end - 1] == b'\n',
            "chunks end at line ends"
        );
        at = c.end;
    }
    assert_eq!(at, data.len(), "chunks cover the data");
}

/// The live state: `data` is split into appends (each chunk's length from
/// one byte of the input); after every append the live body equals a one-shot
/// replay of the committed bytes.
pub fn check_live(data: &[u8]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("wm.log");
    let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default());
    let mut file = std::fs::File::create(&path).expect("create the log");
    let mut rest = data;
    let current = CurrentRequest {
        text: "t",
        session_id: None,
    };
    while !rest.is_empty() {
        let n = (rest[0] as usize % 97).min(rest.len() - 1);
        let chunk = &rest[1..1 + n];
        rest = &rest[1 + n..];
        file.write_all(chunk).expect("append");
        live.refresh().expect("refresh");
        let all = std::fs::read(&path).expect("read back");
        let end = all.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let one = replay(&all[..end], &ReplayOptions::default());
        let (head, tail) = wmreplay::request_envelope(Format::Anthropic, "", "sys", &current);
        let mut body = head;
        for c in live.chunks() {
            body.extend_from_slice(&c);
        }
        body.extend_from_slice(&tail);
        assert!(
            body == one.render_request(Format::Anthropic, "sys", &current),
            "live body differs: {}",
            show(data)
        );
        assert_eq!(live.stats(), one.stats(), "{}", show(data));
    }
}
