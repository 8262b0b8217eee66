//! Property tests: every non-empty line is counted exactly once, the order is
//! a naive stable sort's, the result does not depend on threads, chunk
//! sizes, or whether the log was mapped or read, and the one-pass replay
//! (messages rendered by the parse workers, late records merged in after)
//! gives the two-pass replay's bytes.

mod common;

use proptest::prelude::*;
use wmreplay::__internals::json::{self, Member};
use wmreplay::__internals::lines::{content_start, trim};
use wmreplay::{
    CurrentRequest, Format, LiveReplay, LogBytes, ReadMode, RecordMode, ReplayOptions, SYSTEM_RULE,
    Selection, Validator, replay, request_envelope,
};

fn contract(s: &wmreplay::ReplayStats) -> [u64; 4] {
    [
        s.total_lines,
        s.parsed_entries,
        s.skipped_invalid_json,
        s.skipped_invalid_shape,
    ]
}

/// One generated line: a record, JSON of another shape, or arbitrary bytes.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let ts = prop_oneof![
        (0i64..50).prop_map(|t| t.to_string()),
        Just("-0".to_string()),
        Just("1e3".to_string()),
        Just("1e400".to_string()),
        Just("-1e400".to_string()),
        Just("12345678901234567890".to_string()),
        (-1000.0f64..1000.0).prop_map(|f| format!("{f}")),
    ];
    let kind = prop_oneof![
        Just("text_input"),
        Just("text_output"),
        Just(r"text\u005foutput"),
        Just(r"x\ud800"),
        Just("ké"),
    ];
    let text = "[ -~é\u{1F600}]{0,40}".prop_map(|s| s.replace('\\', "\\\\").replace('"', "\\\""));
    prop_oneof![
        6 => (kind, ts, text).prop_map(|(k, t, x)| format!(r#"{{"type":"{k}","ts_ms":{t},"text":"{x}"}}"#).into_bytes()),
        1 => (any::<u8>(), "[ \t\r]{0,3}").prop_map(|(b, ws)| format!(r#"{{"ts_ms":{b}}}{ws}"#).into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => "[ \t\r\x0b\x0c]{0,4}".prop_map(String::into_bytes),
        1 => (0u8..30).prop_map(|n| format!(r#"{{"type":"t","ts_ms":{n},"x":"a\{}"}}"#, n as char).into_bytes()),
    ]
}

fn log() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec((line(), any::<bool>()), 0..60),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(lines, bom, terminated)| {
            let mut out = Vec::new();
            if bom {
                out.extend_from_slice(b"\xEF\xBB\xBF");
            }
            let n = lines.len();
            for (i, (l, crlf)) in lines.into_iter().enumerate() {
                // A generated line may itself contain '\n': it then is several lines.
                out.extend_from_slice(&l);
                if i + 1 < n || terminated {
                    out.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
                }
            }
            out
        })
}

/// The naive replay: `split`, the exact validator alone, and a stable
/// `sort_by` on `partial_cmp`. Returns (ts, offset) in replay order and the
/// number of non-empty lines.
fn naive(log: &[u8]) -> (Vec<(f64, u64)>, u64) {
    let start = content_start(log);
    let mut recs = Vec::new();
    let mut nonempty = 0;
    let mut offset = start;
    for raw in log[start..].split(|b| *b == b'\n') {
        let t = trim(raw);
        let line = &raw[t.clone()];
        if !line.is_empty() {
            nonempty += 1;
            if json::validate(line, wmreplay::DEFAULT_MAX_DEPTH, &mut Vec::new()).is_ok() {
                let f = json::scan_fields(line);
                if let (Member::String { .. }, Member::Number { start, len }) = (f.kind, f.ts_ms) {
                    let ts = json::number_value(&line[start as usize..(start + len) as usize]);
                    recs.push((ts, (offset + t.start) as u64));
                }
            }
        }
        offset += raw.len() + 1;
    }
    recs.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    (recs, nonempty)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_nonempty_line_is_counted_once_and_order_is_a_stable_sort(log in log()) {
        let r = replay(&log, &{ let mut o = ReplayOptions::default(); o.chunk_size = 16; o });
        let s = r.stats();
        let (want, nonempty) = naive(&log);
        prop_assert_eq!(s.total_lines, nonempty);
        prop_assert_eq!(s.total_lines, s.parsed_entries + s.skipped_invalid_json + s.skipped_invalid_shape);
        let got: Vec<(f64, u64)> = r.records().iter().map(|x| (x.ts_ms(), x.offset())).collect();
        prop_assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            prop_assert!(g.1 == w.1 && (g.0 == w.0), "{:?} != {:?}", g, w);
        }
    }

    #[test]
    fn result_is_the_same_for_threads_chunks_and_read_paths(log in log(), seed in 0u64..1000) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        let mut log = log;
        log.extend_from_slice(&common::hostile_log(seed, 30));
        std::fs::write(&path, &log).unwrap();
        let cur = CurrentRequest { text: "q", session_id: None };
        let mut first: Option<(Vec<u8>, wmreplay::ReplayStats)> = None;
        for mode in [ReadMode::Auto, ReadMode::Read] {
            let bytes = LogBytes::open(&path, mode).unwrap();
            for (threads, chunk_size, validator) in [
                (1, 1, Validator::Scan),
                (1, 1 << 20, Validator::SimdJson),
                (2, 7, Validator::Scan),
                (2, 300, Validator::SimdJson),
                (0, 64, Validator::Scan),
            ] {
                let opts = { let mut o = ReplayOptions::default(); o.threads = threads; o.chunk_size = chunk_size; o.validator = validator; o.max_skips = 1000; o };
                let r = replay(bytes.bytes(), &opts);
                let body = r.render_request(Format::Anthropic, SYSTEM_RULE, &cur);
                match &first {
                    None => first = Some((body, r.stats().clone())),
                    Some((b, s)) => {
                        prop_assert!(b == &body, "body differs for {:?} threads={} chunk={} {:?}", mode, threads, chunk_size, validator);
                        // Skip reasons may word the same error differently
                        // per validator; counts and locations must agree.
                        prop_assert_eq!(contract(s), contract(r.stats()));
                        let at = |s: &wmreplay::ReplayStats| s.skips.iter().map(|k| (k.line, k.offset, k.reason.category())).collect::<Vec<_>>();
                        prop_assert_eq!(at(s), at(r.stats()));
                    }
                }
            }
        }
    }

    /// The live state is built by the one-pass replay: each worker renders
    /// its chunk's records sorted among themselves, the chunks' records that
    /// are older than a chunk before them are merged in at the end. With
    /// tiny chunks, every record is its own chunk or shares one with late
    /// records and ties, across every format, both record modes, one or two
    /// threads and with a filter; the body must be the two-pass replay's
    /// (replay, then select, then render) byte for byte.
    #[test]
    fn one_pass_gives_the_two_pass_bytes(
        log in log(),
        seed in 0u64..1000,
        chunk_size in prop_oneof![Just(1usize), 2usize..200, Just(4096)],
        threads in 1usize..3,
        js in any::<bool>(),
        filter in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        let mut log = log;
        // Records far out of order (whole runs older than what came
        // before), as well as the generator's ties and small disorder.
        let mut rng = seed;
        for i in 0..40u64 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let ts = if rng >> 60 < 4 { (rng >> 33) % 5 } else { 100 + i * (rng >> 62) };
            let kind = ["text_input", "text_output", "wm_event"][(rng >> 40) as usize % 3];
            let session = if rng >> 63 == 0 { r#","session_id":"s1""# } else { "" };
            log.extend_from_slice(format!("{{\"type\":\"{kind}\",\"ts_ms\":{ts}{session},\"i\":{i}}}\n").as_bytes());
        }
        log.extend_from_slice(&common::hostile_log(seed, 20));
        // The live state commits whole lines only.
        let end = log.iter().rposition(|&b| b == b'\n').map_or(0, |k| k + 1);
        log.truncate(end);
        std::fs::write(&path, &log).unwrap();
        let mut options = ReplayOptions::default();
        options.threads = threads;
        options.chunk_size = chunk_size;
        options.record = if js { RecordMode::Js } else { RecordMode::Raw };
        let mut selection = Selection::default();
        if filter {
            selection.session = Some("s1".to_string());
        }
        let cur = CurrentRequest { text: "q", session_id: Some("s1") };
        for format in [Format::Anthropic, Format::OpenAi, Format::Ndjson, Format::Xml] {
            let mut two = replay(&log, &options);
            two.select(&selection, None);
            let want = two.render_request(format, SYSTEM_RULE, &cur);
            let mut live = LiveReplay::new(&path, format, options.clone()).with_selection(selection.clone());
            live.refresh().unwrap();
            let (head, tail) = request_envelope(format, "", SYSTEM_RULE, &cur);
            let mut got = head;
            for c in live.chunks() {
                got.extend_from_slice(&c);
            }
            got.extend_from_slice(&tail);
            prop_assert!(got == want, "{:?}: one-pass body differs ({} vs {} bytes)", format, got.len(), want.len());
            prop_assert_eq!(contract(live.stats()), contract(two.stats()));
            prop_assert_eq!(live.stats().already_ordered, two.stats().already_ordered);
        }
    }
}
