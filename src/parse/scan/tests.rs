//! The scanner's unit tests (the property tests against the simple
//! validator are in `tests/scanner.rs`).

use super::*;
use crate::parse::json;

fn both(s: &[u8]) -> (bool, bool) {
    (
        scan_line(s, 100, &mut Vec::new()).is_ok(),
        json::validate(s, 100, &mut Vec::new()).is_ok(),
    )
}

#[test]
fn agrees_with_the_simple_validator_on_edge_cases() {
    let cases: &[&[u8]] = &[
        b"1",
        b"-0",
        b"0e0",
        b"1E+2",
        b"1e400",
        b"\"\\ud800\"",
        b"{\"a\":1,\"a\":2}",
        b" [ 1 , {\"x\" : [ ] } ] ",
        b"true",
        b"null",
        "\"é😀日本\"".as_bytes(),
        b"",
        b" ",
        b"{\"a\":1} x",
        b"1 2",
        b"{\"a\":\"x\x01\"}",
        b"{\"a\":\"\t\"}",
        b"\"\\x\"",
        b"\"\\u12\"",
        b"\"\\u12",
        b"01",
        b"-",
        b"1.",
        b".5",
        b"1e",
        b"NaN",
        b"[1,]",
        b"{\"a\":1,}",
        b"{,}",
        b"{\"a\" 1}",
        b"tru",
        b"{\"a\":1]",
        b"[\"a\"",
        b"\"\xff\"",
        b"\"\xc0\x80\"",
        b"\"\xed\xa0\x80\"",
        b"\"\xf4\x90\x80\x80\"",
        b"\"\xe0\x9f\xbf\"",
        b"\"\xf0\x8f\xbf\xbf\"",
        b"\"abc\xe6\x97\"",
        b"\xc3\xa9",
        b"[\"a\",\xc3\xa9]",
        b"\xef\xbb\xbf{}",
        b"{\"a\":\x0c1}",
        b"{}",
        b"[]",
        b"{\"a\":{}}",
        b"[[],[[]]]",
        b"\"12345678\"",
        b"\"1234567\\\"\"",
    ];
    for c in cases {
        let (a, b) = both(c);
        assert_eq!(a, b, "{:?}", String::from_utf8_lossy(c));
    }
}

#[test]
fn finds_fields_and_counts_escape_overhead() {
    let line = b"{\"t\\u0079pe\":\"a\\\"b\",\t\"x\":{\"type\":1},\"ts_ms\":-1.5e3,\"ts_ms\":7}";
    let got = scan_line(line, 100, &mut Vec::new()).unwrap();
    let want = json::scan_fields(line);
    assert_eq!(
        (got.is_object, got.kind, got.ts_ms),
        (want.is_object, want.kind, want.ts_ms)
    );
    assert_eq!(
        got.escape_extra as usize,
        crate::escape::escaped_extra(line)
    );
}

#[test]
fn depth_limit() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert!(scan_line(deep(50).as_bytes(), 50, &mut Vec::new()).is_ok());
    let e = scan_line(deep(51).as_bytes(), 50, &mut Vec::new()).unwrap_err();
    assert_eq!(e.kind, JsonErrorKind::TooDeep);
}
