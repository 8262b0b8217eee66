//! The line parser's unit tests.

use super::*;
use crate::escape::JsNumber;

/// Lines past [`SIMD_JSON_MAX_LINE`] are decided by the exact validator
/// alone: the same answers as the scanner's, valid or not.
#[test]
fn lines_too_long_for_simd_json_get_the_scanners_answer() {
    let pad = "x".repeat(SIMD_JSON_MAX_LINE);
    let lines = [
        format!("{{\"type\":\"k\",\"ts_ms\":5,\"pad\":\"{pad}\"}}"),
        format!("{{\"type\":\"k\",\"ts_ms\":5,\"pad\":\"{pad}\"}} trailing"),
        format!("{{\"ts_ms\":5,\"pad\":\"{pad}\"}}"),
        format!("[\"{pad}\", 1e400, \"\\ud800\"]"),
    ];
    let mut scan = LineParser::with_validator(64, Validator::Scan);
    let mut simd = LineParser::with_validator(64, Validator::SimdJson);
    for line in &lines {
        assert!(line.len() > SIMD_JSON_MAX_LINE);
        let a = scan.parse(line.as_bytes(), 7);
        let b = simd.parse(line.as_bytes(), 7);
        assert_eq!(a, b, "{}", &line[line.len() - 20..]);
    }
}

#[test]
fn a_timestamp_is_copied_only_when_javascript_prints_it_as_written() {
    let mut p = LineParser::new(64);
    // (text, whether it is copied as written)
    let cases: &[(&str, bool)] = &[
        ("0", true),
        ("7", true),
        ("-5", true),
        ("1763700001492", true),
        ("999999999999999", true),
        ("-999999999999999", true),
        ("1234567890123456", false),
        ("99999999999999999999", false),
        ("-0", false),
        ("1.0", false),
        ("1.5", false),
        ("1e3", false),
        ("1E+2", false),
        ("-0.0", false),
        ("1e400", false),
    ];
    for &(text, copied) in cases {
        let line = format!("{{\"type\":\"k\",\"ts_ms\":{text},\"x\":1}}");
        let r = p.parse(line.as_bytes(), 0).unwrap();
        let js = JsNumber::new(r.ts);
        assert_eq!(r.ts_text(line.as_bytes()).is_some(), copied, "{text}");
        if let Some(t) = r.ts_text(line.as_bytes()) {
            assert_eq!(t, js.as_bytes(), "{text}");
            assert_eq!(t, text.as_bytes());
        }
    }
}

const _: () = assert!(std::mem::size_of::<Record>() == 32);

#[test]
fn a_type_or_ts_ms_far_into_its_line_is_still_found() {
    let mut p = LineParser::new(64);
    let pad = |n: usize| "x".repeat(n);
    // (line, the raw type, whether the type is far, whether ts_ms is copied)
    let mut cases = Vec::new();
    for n in [0, 65_500, 65_519, 65_520, 70_000, 600_000] {
        // `{"p":"` is 6 bytes, then n, then `","type":"` (10 bytes) puts
        // the type's content at n + 16.
        let line = format!(
            "{{\"p\":\"{}\",\"type\":\"te\\u0078t_output\",\"ts_ms\":17}}",
            pad(n)
        );
        // The ts_ms text starts at n + 42.
        cases.push((
            line,
            "te\\u0078t_output".to_string(),
            n + 16 > 0xFFFF,
            n + 42 < 1 << 19,
        ));
    }
    for n in [65_535, 65_536, 100_000] {
        let kind = format!("k{}", pad(n - 1));
        let line = format!("{{\"type\":\"{kind}\",\"ts_ms\":17}}");
        cases.push((line, kind, n > 0xFFFF, true));
    }
    for n in [(1 << 19) - 28, (1 << 19) - 27, 1 << 20] {
        // The ts_ms text starts at n + 27.
        let line = format!(
            "{{\"type\":\"a\",\"p\":\"{}\",\"ts_ms\":1763700001492}}",
            pad(n)
        );
        cases.push((line, "a".to_string(), false, n + 27 < 1 << 19));
    }
    for (line, kind, far, copied) in cases {
        let log = line.as_bytes();
        let r = p.parse(log, 0).unwrap();
        let what = format!("line of {} bytes", log.len());
        assert_eq!(r.kind_raw(log), kind.as_bytes(), "{what}");
        assert_eq!(r.flags & Record::KIND_FAR != 0, far, "{what}");
        assert_eq!(r.ts_text(log).is_some(), copied, "{what}");
        // Formatting prints what a copy would have.
        let ts = r
            .ts_text(log)
            .map_or_else(|| JsNumber::new(r.ts).as_bytes().to_vec(), <[u8]>::to_vec);
        assert!(
            line.contains(&format!("\"ts_ms\":{}}}", String::from_utf8(ts).unwrap())),
            "{what}"
        );
        if kind.contains('\\') {
            assert!(r.is_output() && r.kind_escaped() && r.kind_is(log, "text_output"));
        } else {
            assert!(!r.is_output() && r.kind_is(log, &kind), "{what}");
        }
    }
}
