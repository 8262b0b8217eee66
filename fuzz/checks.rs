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

use wmreplay::__internals::lines::{Lines, chunks};
use wmreplay::__internals::parse::LineParser;
use wmreplay::__internals::{json, scan};
use wmreplay::{
    CurrentRequest, DEFAULT_MAX_DEPTH, Format, LiveReplay, ReplayOptions, SkipReason, replay,
};

/// Lines nested at least this deep are not given to serde_json: its
/// `from_slice` stops at 128 levels (`unbounded_depth` only lifts that for a
/// deserializer told to), which would look like a disagreement.
const SERDE_DEPTH: usize = 120;

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
    check_next_line(data);
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
            wmreplay::__internals::escape::escaped_extra(data),
            "{}",
            show(data)
        );
    }
    let surrogate = data.windows(3).any(|w| w.eq_ignore_ascii_case(b"\\ud"));
    if surrogate || nesting(data) >= SERDE_DEPTH {
        return;
    }
    let serde = serde_json::from_slice::<serde_json::Value>(data);
    if serde_private_number(data, &serde) {
        return;
    }
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
    if wmreplay::__internals::lines::trim(data) != (0..data.len()) {
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
    let one = replay(data, &{
        let mut o = ReplayOptions::default();
        o.threads = 1;
        o
    });
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
    let many = replay(data, &{
        let mut o = ReplayOptions::default();
        o.threads = 2;
        o.chunk_size = 7;
        o
    });
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

/// Lines nested at least this deep are not given to serde_json by
/// `check_js` (its default recursion limit is 128).
const SERDE_JS_DEPTH: usize = 120;

/// JavaScript's `String.prototype.trim` whitespace, written out again here
/// so the check does not trust the code it checks.
const JS_WHITESPACE: &[char] = &[
    '\t', '\n', '\u{b}', '\u{c}', '\r', ' ', '\u{a0}', '\u{1680}', '\u{2000}', '\u{2001}',
    '\u{2002}', '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}',
    '\u{200a}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}', '\u{feff}',
];

/// The js record mode (`wmreplay::__internals::js`): never panics; nothing is written
/// unless a value is; a value is written exactly when the simple validator
/// accepts the decoded, trimmed line; what is written is well-formed JSON
/// that serde_json reads, equal under JavaScript's semantics to what
/// serde_json reads from the line (numbers as doubles, ±Infinity written
/// `null`, the last duplicate winning, keys in V8's order), and writing it
/// again gives the same bytes.
pub fn check_js(data: &[u8]) {
    use wmreplay::__internals::js::{JsStringifier, JsValueKind};
    let mut js = JsStringifier::new(DEFAULT_MAX_DEPTH);
    let mut out = b"#".to_vec();
    let result = js.stringify(data, &mut out);
    let decoded = String::from_utf8_lossy(data);
    let trimmed = decoded.trim_matches(|c| JS_WHITESPACE.contains(&c));
    let simple = json::validate(trimmed.as_bytes(), DEFAULT_MAX_DEPTH, &mut Vec::new());
    match result {
        Ok(true) => assert!(simple.is_ok(), "written, but {simple:?}: {}", show(data)),
        Ok(false) => {
            assert!(trimmed.is_empty(), "blank, but not empty: {}", show(data));
            assert_eq!(out, b"#", "wrote a blank line: {}", show(data));
            return;
        }
        Err(e) => {
            assert!(
                simple.is_err(),
                "{e:?}, but the validator accepts: {}",
                show(data)
            );
            assert!(!trimmed.is_empty(), "{e:?} on a blank line: {}", show(data));
            assert_eq!(out, b"#", "{e:?} left output behind: {}", show(data));
            return;
        }
    }
    let out = &out[1..];
    let text = std::str::from_utf8(out)
        .unwrap_or_else(|e| panic!("output not UTF-8 ({e}): {}", show(data)));
    let kind = js.top_level_kind();
    let want_kind = match out[0] {
        b'{' => JsValueKind::Object,
        b'[' => JsValueKind::Array,
        b'"' => JsValueKind::String,
        b't' | b'f' => JsValueKind::Boolean,
        b'n' => kind
            .filter(|&k| k == JsValueKind::Number)
            .unwrap_or(JsValueKind::Null),
        _ => JsValueKind::Number,
    };
    assert_eq!(kind, Some(want_kind), "{}", show(data));

    // Idempotent: the output is its own JSON.stringify(JSON.parse(...)).
    let mut again = Vec::new();
    assert_eq!(js.stringify(out, &mut again), Ok(true), "{}", show(data));
    assert!(
        again == out,
        "not idempotent: {} -> {}",
        show(out),
        show(&again)
    );

    if nesting(data) >= SERDE_JS_DEPTH {
        return;
    }
    // serde_json reads the output (lone surrogates, which it refuses, made
    // U+FFFD first)...
    let ours = serde_json::from_slice(&defuse_lone_surrogates(out));
    if serde_private_number(data, &ours) {
        return;
    }
    let ours: serde_json::Value =
        ours.unwrap_or_else(|e| panic!("output is not JSON ({e}): {text:?} from {}", show(data)));
    // ...and, where it follows the grammar, the input; both agree.
    if trimmed.contains("\\ud") || trimmed.contains("\\uD") {
        return;
    }
    let theirs: serde_json::Value = serde_json::from_str(trimmed)
        .unwrap_or_else(|e| panic!("serde_json rejects ({e}) what was written: {}", show(data)));
    if let Err(why) = js_equal(&ours, &theirs) {
        panic!("{why}: {text:?} from {}", show(data));
    }
}

/// `out` (valid JSON as `JSON.stringify` writes it) with each `\udxxx`
/// escape, always a lone surrogate there, replaced by `\ufffd`.
fn defuse_lone_surrogates(out: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(out.len());
    let mut i = 0;
    while i < out.len() {
        if out[i] != b'\\' {
            v.push(out[i]);
            i += 1;
            continue;
        }
        let width = if out.get(i + 1) == Some(&b'u') { 6 } else { 2 };
        let esc = &out[i..(i + width).min(out.len())];
        if esc.len() == 6 && esc[2] == b'd' && matches!(esc[3], b'8'..=b'9' | b'a'..=b'f') {
            v.extend_from_slice(b"\\ufffd");
        } else {
            v.extend_from_slice(esc);
        }
        i += width;
    }
    v
}

/// Whether serde_json, built with `arbitrary_precision` as these checks
/// need it, may have read `data` as no JSON reader does: it takes an object
/// whose one key is `$serde_json::private::Number` for its own private
/// encoding of a number (a fuzzer found `{"$serde_json::private::Number":-0}`,
/// which it rejects). So it is no oracle for such input: the key written
/// out, or what its reading of it leaves behind (a data error, where only
/// syntax errors are possible otherwise, or a number read from an object).
fn serde_private_number(data: &[u8], serde: &serde_json::Result<serde_json::Value>) -> bool {
    const KEY: &[u8] = b"$serde_json::private::Number";
    data.windows(KEY.len()).any(|w| w == KEY)
        || matches!(serde, Err(e) if e.classify() == serde_json::error::Category::Data)
        || matches!(serde, Ok(serde_json::Value::Number(_))
            if data.trim_ascii_start().first() == Some(&b'{'))
}

/// The double a JSON number text stands for (±Infinity on overflow).
fn double(n: &serde_json::Number) -> f64 {
    n.to_string().parse::<f64>().expect("a JSON number")
}

/// Whether `key` is a canonical array index (0 ..= 2^32 − 2), which V8
/// lists first, in ascending order.
fn index_key(key: &str) -> Option<u32> {
    let n: u32 = key.parse().ok()?;
    (n != u32::MAX && n.to_string() == key).then_some(n)
}

/// Whether `ours` (read from the output) is what JavaScript makes of
/// `theirs` (read from the line; serde_json keeps a duplicate key's first
/// place and its last value, as `JSON.parse` does).
fn js_equal(ours: &serde_json::Value, theirs: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value as V;
    match (ours, theirs) {
        (V::Null, V::Number(n)) if double(n).is_infinite() => Ok(()),
        (V::Number(a), V::Number(b)) if double(a) == double(b) && double(a).is_finite() => Ok(()),
        (V::Null, V::Null) => Ok(()),
        (V::Bool(a), V::Bool(b)) if a == b => Ok(()),
        (V::String(a), V::String(b)) if a == b => Ok(()),
        (V::Array(a), V::Array(b)) if a.len() == b.len() => {
            a.iter().zip(b).try_for_each(|(x, y)| js_equal(x, y))
        }
        (V::Object(a), V::Object(b)) => {
            let mut want: Vec<&String> = b.keys().collect();
            // Stable: the other keys keep their order.
            want.sort_by_key(|k| index_key(k).map_or((1, 0), |n| (0, n)));
            let got: Vec<&String> = a.keys().collect();
            if got != want {
                return Err(format!("keys {got:?}, want {want:?}"));
            }
            a.iter().try_for_each(|(k, x)| js_equal(x, &b[k]))
        }
        _ => Err(format!("{ours} is not JavaScript's {theirs}")),
    }
}

/// Selections (issue 6): the first three bytes choose a tail, a token budget,
/// trimming, a kind filter and the pending mark; the rest is the log. The
/// window is a suffix of the filtered records and fits its budget; asking
/// again with the start it reported keeps it; the XML of the selection is
/// well-formed with one element per record; the live state selects the same.
pub fn check_select(data: &[u8]) {
    use wmreplay::{Selection, Tokenizer};
    if data.len() < 3 {
        return;
    }
    let (knobs, log) = data.split_at(3);
    let sel = {
        let mut o = Selection::default();
        o.tail = (knobs[0] & 1 == 1).then_some((knobs[0] >> 1) as usize);
        o.max_tokens = (knobs[1] != 0).then_some(knobs[1] as u64 * 4);
        o.tokenizer = Tokenizer::Bytes;
        o.trim_to = (knobs[1] != 0 && knobs[2] & 1 == 1).then_some(0.5);
        o.kinds = (knobs[2] & 2 == 2).then(|| vec!["text_input".into(), "text_output".into()]);
        o.mark_pending = knobs[2] & 4 == 4;
        o
    };
    let end = log.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let log = &log[..end];
    let filters_only = {
        let mut o = Selection::default();
        o.kinds = sel.kinds.clone();
        o
    };
    let mut filtered = replay(log, &ReplayOptions::default());
    filtered.select(&filters_only, None);
    let mut r = replay(log, &ReplayOptions::default());
    let report = r.select(&sel, None);
    assert_eq!(
        report.matched as usize,
        filtered.records().len(),
        "{}",
        show(data)
    );
    assert_eq!(
        report.selected as usize,
        r.records().len(),
        "{}",
        show(data)
    );
    let offsets = |rs: &[wmreplay::Record]| rs.iter().map(|x| x.offset()).collect::<Vec<_>>();
    let all = offsets(filtered.records());
    let kept = offsets(r.records());
    assert!(all.ends_with(&kept), "not a suffix: {}", show(data));
    if let (Some(t), Some(sum)) = (sel.max_tokens, report.tokens) {
        assert!(sum <= t, "{sum} > {t}: {}", show(data));
    }
    // Stable: the start it reported holds on the same log.
    if sel.trim_to.is_some() {
        let again = replay(log, &ReplayOptions::default()).select(&sel, report.window_start);
        assert!(
            !again.trimmed || report.window_start.is_none(),
            "{}",
            show(data)
        );
        assert_eq!(again.selected, report.selected, "{}", show(data));
    }
    let xml = r.render_messages(Format::Xml);
    let text = std::str::from_utf8(&xml).expect("XML is UTF-8");
    let doc = roxmltree::Document::parse(text)
        .unwrap_or_else(|e| panic!("not XML ({e}): {}", show(data)));
    assert_eq!(
        doc.root_element()
            .children()
            .filter(|n| n.is_element())
            .count(),
        r.records().len(),
        "{}",
        show(data)
    );
    // The live state, fed the same bytes, selects the same.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("wm.log");
    std::fs::write(&path, log).expect("write the log");
    let mut live = LiveReplay::new(&path, Format::OpenAi, ReplayOptions::default())
        .with_selection(filters_only);
    live.refresh().expect("refresh");
    let (chunks, live_report) = live.select(&sel, None).expect("select");
    assert_eq!(live_report, report, "{}", show(data));
    let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let body = r.render_messages(Format::OpenAi);
    let inner = &body[1..body.len() - 1];
    let joined = &joined[..joined.len().saturating_sub(1)];
    assert!(joined == inner, "live selection differs: {}", show(data));
}

/// The fused splitter and scanner (`scan::scan_next_line`) on `data` as the
/// start of a log's remaining bytes: when it decides, it decides as
/// splitting at the first `\n`, trimming and `scan::scan_line` do; and it
/// does decide every line that is an object followed only by spaces, tabs
/// and CRs before its `\n` (the common line), so the fast path is taken.
pub fn check_next_line(data: &[u8]) {
    let max = DEFAULT_MAX_DEPTH;
    // The caller's contract: what it passes is valid UTF-8 (a window cut at
    // the first invalid byte).
    let data = match std::str::from_utf8(data) {
        Ok(_) => data,
        Err(e) => &data[..e.valid_up_to()],
    };
    let next = scan::scan_next_line(data, max, &mut Vec::new());
    let Some(newline) = data.iter().position(|&b| b == b'\n') else {
        assert!(
            next.is_none(),
            "decided a line without a newline: {}",
            show(data)
        );
        return;
    };
    let line = &data[..newline];
    let t = wmreplay::__internals::lines::trim(line);
    let slow = scan::scan_line(&line[t.clone()], max, &mut Vec::new());
    let content = line.trim_ascii_end();
    let common = line.first() == Some(&b'{')
        && slow.as_ref().is_ok_and(|s| s.is_object)
        && t.start == 0
        && line[t.end..]
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | b'\r'))
        && content.len() == t.end;
    match next {
        Some(n) => {
            let s = slow.as_ref().unwrap_or_else(|e| {
                panic!("fused path accepted, line path says {e:?}: {}", show(data))
            });
            assert_eq!((n.newline, n.end), (newline, t.end), "{}", show(data));
            assert_eq!(n.scan, *s, "{}", show(data));
        }
        None => assert!(!common, "fused path declined a plain line: {}", show(data)),
    }
}

/// The server's settings parsers and range checks, fed random settings:
/// nothing panics, and whatever is accepted is within its documented range
/// and safe to use (a timer set from an accepted timeout cannot overflow).
pub fn check_settings(data: &[u8]) {
    use std::time::{Duration, Instant};
    use wmreplay::server::settings::{self, MAX_BODY_LIMIT, MAX_TIMEOUT, MAX_TTL};
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let word = |i: usize| -> u64 {
        let mut b = [0u8; 8];
        for (j, x) in rest.iter().skip(i * 8).take(8).enumerate() {
            b[j] = *x;
        }
        u64::from_le_bytes(b)
    };
    match kind % 7 {
        0 => {
            if let Ok(d) = settings::parse_timeout(&text) {
                assert!(!d.is_zero() && d <= MAX_TIMEOUT, "{text:?} gave {d:?}");
                assert!(Instant::now().checked_add(d).is_some());
            }
        }
        1 => {
            if let Ok(d) = settings::parse_ttl(&text) {
                assert!(!d.is_zero() && d <= MAX_TTL, "{text:?} gave {d:?}");
                assert!(u64::try_from(d.as_millis()).is_ok());
            }
        }
        2 => {
            if let Ok(n) = settings::parse_size(&text, MAX_BODY_LIMIT) {
                assert!(n <= MAX_BODY_LIMIT, "{text:?} gave {n}");
            }
        }
        3 => {
            if let Ok(u) = settings::parse_upstream(&text) {
                assert!(matches!(u.scheme(), "http" | "https"), "{text:?}");
                assert!(u.host_str().is_some_and(|h| !h.is_empty()), "{text:?}");
            }
        }
        4 => {
            if let Ok((k, v)) = settings::parse_field(&text) {
                assert!(!k.is_empty());
                assert!(!wmreplay::RESERVED_PARAMS.contains(&k.as_str()));
                let again: serde_json::Value = serde_json::from_str(&v.to_string()).unwrap();
                assert_eq!(again, v);
            }
        }
        5 => {
            // A configuration built in code, with arbitrary numbers.
            let mut c = wmreplay::server::Config::new("wm.log");
            let d = |w: u64| Duration::from_nanos(w);
            c.header_timeout = d(word(0));
            c.body_timeout = d(word(1));
            c.upstream_timeout = d(word(2));
            c.write_timeout = d(word(3));
            c.keep_alive_timeout = d(word(4));
            c.shutdown_timeout = d(word(5));
            c.max_concurrent = word(6) as usize % 200_000;
            c.max_connections = word(7) as usize;
            c.body_limit = word(8) as usize;
            c.upstream_retries = word(9) as u32;
            c.selection.since = Some(f64::from_bits(word(10)));
            c.selection.until = Some(f64::from_bits(word(11)));
            if c.validate().is_ok() {
                for t in [
                    c.header_timeout,
                    c.body_timeout,
                    c.upstream_timeout,
                    c.write_timeout,
                    c.keep_alive_timeout,
                    c.shutdown_timeout,
                ] {
                    assert!(!t.is_zero() && t <= MAX_TIMEOUT);
                    assert!(Instant::now().checked_add(t * 2).is_some());
                }
                assert!((1..=settings::MAX_CONCURRENT).contains(&c.max_concurrent));
                assert!((1..=settings::MAX_CONNECTIONS).contains(&c.max_connections));
                assert!(c.body_limit as u64 <= MAX_BODY_LIMIT && c.body_limit > 0);
                assert!(c.upstream_retries <= settings::MAX_RETRIES);
                assert!(c.selection.since.is_none_or(f64::is_finite));
                assert!(c.selection.until.is_none_or(f64::is_finite));
            }
        }
        _ => {
            let _ = settings::parse_duration(&text, Duration::from_nanos(word(0)));
        }
    }
}
