//! The one-pass scanner (the fast path) against its naive oracles: the
//! simple validator in `json::validate`, `json::scan_fields`,
//! `escape::escaped_extra`, and serde_json for validity where serde_json
//! follows the grammar (it rejects unpaired surrogates, which the grammar
//! allows, so those inputs are left out of that comparison).

use proptest::prelude::*;
use wmreplay::__internals::{escape, json, scan};

/// JSON-ish text: tokens of the grammar, near-misses and odd bytes, joined
/// at random, so both valid and invalid lines come up often.
fn jsonish() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"[".to_vec()),
        Just(b"]".to_vec()),
        Just(b",".to_vec()),
        Just(b":".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\t".to_vec()),
        Just(b"\"type\"".to_vec()),
        Just(b"\"ts_ms\"".to_vec()),
        Just(b"\"t\\u0079pe\"".to_vec()),
        Just(b"\"a\\\"b\\\\c\\/\\n\\u00e9\"".to_vec()),
        Just(b"\"\\ud800\"".to_vec()),
        Just("\"日本語 é 🙂\"".as_bytes().to_vec()),
        Just(b"\"bad \\x\"".to_vec()),
        Just(b"\"ctl \x01\"".to_vec()),
        Just(b"\"\xff\"".to_vec()),
        Just(b"\"unterminated".to_vec()),
        Just(b"1".to_vec()),
        Just(b"-0".to_vec()),
        Just(b"1e400".to_vec()),
        Just(b"01".to_vec()),
        Just(b"1.".to_vec()),
        Just(b"-1.5E+3".to_vec()),
        Just(b"true".to_vec()),
        Just(b"nul".to_vec()),
        Just(b"null".to_vec()),
        "[a-z0-9 ]{0,12}".prop_map(|s| format!("\"{s}\"").into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..4),
    ];
    let object = (
        proptest::collection::vec(
            (
                prop_oneof![Just("type"), Just("ts_ms"), Just("x"), Just("t\\u0079pe")],
                prop_oneof![
                    Just("\"k\"".to_string()),
                    Just("12".to_string()),
                    Just("[1,{\"type\":2}]".to_string()),
                    Just("null".to_string()),
                    "[a-z ]{0,30}".prop_map(|s| format!("\"{s}\"")),
                ],
            ),
            0..5,
        ),
        any::<bool>(),
    )
        .prop_map(|(members, spaced)| {
            let sep = if spaced { ", " } else { "," };
            let body: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            format!("{{{}}}", body.join(sep)).into_bytes()
        });
    prop_oneof![
        proptest::collection::vec(token, 0..12).prop_map(|ts| ts.concat()),
        object,
        // A valid object with one byte changed.
        (
            "[a-z]{1,8}",
            0u32..1_000_000,
            any::<prop::sample::Index>(),
            any::<u8>()
        )
            .prop_map(|(k, t, at, b)| {
                let mut v =
                    format!("{{\"type\":\"{k}\",\"ts_ms\":{t},\"s\":\"x\\\"y\"}}").into_bytes();
                let i = at.index(v.len());
                v[i] = b;
                v
            }),
    ]
}

fn check(line: &[u8]) -> Result<(), TestCaseError> {
    let fast = scan::scan_line(line, 64, &mut Vec::new());
    let simple = json::validate(line, 64, &mut Vec::new());
    prop_assert_eq!(
        fast.is_ok(),
        simple.is_ok(),
        "{:?}: fast {:?} simple {:?}",
        String::from_utf8_lossy(line),
        fast,
        simple
    );
    if let Ok(scan) = fast {
        let fields = json::scan_fields(line);
        prop_assert_eq!(scan.is_object, fields.is_object);
        prop_assert_eq!(scan.kind, fields.kind);
        prop_assert_eq!(scan.ts_ms, fields.ts_ms);
        prop_assert_eq!(scan.escape_extra as usize, escape::escaped_extra(line));
    }
    // serde_json follows the grammar except on unpaired surrogates.
    if !line.windows(3).any(|w| w == b"\\ud" || w == b"\\uD") {
        let serde = serde_json::from_slice::<serde_json::Value>(line).is_ok();
        prop_assert_eq!(simple.is_ok(), serde, "{:?}", String::from_utf8_lossy(line));
    }
    Ok(())
}

/// The fused line splitter and scanner against splitting, trimming and the
/// line scanner (the check shared with the `line` fuzz target).
#[path = "../fuzz/checks.rs"]
mod checks;

/// What can end a line and follow it: nothing, a `\n`, CRLF, trailing
/// whitespace JSON allows or only trimming removes, and a next line.
fn line_ending() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b" \t \r\n".to_vec()),
        Just(b"\x0b\n".to_vec()),
        Just(b"\x0c \n".to_vec()),
        Just(b"\n{\"type\":\"k\",\"ts_ms\":1}\n".to_vec()),
        Just(b" 1\n".to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn fused_line_scan_agrees_with_split_and_scan(
        lead in prop_oneof![Just(b"".to_vec()), Just(b" ".to_vec()), Just(b"\t".to_vec())],
        line in jsonish(),
        ending in line_ending(),
    ) {
        let data = [lead, line, ending].concat();
        checks::check_next_line(&data);
    }

    #[test]
    fn scanner_agrees_with_the_simple_validator_and_serde_json(line in jsonish()) {
        check(&line)?;
    }

    #[test]
    fn scanner_agrees_on_arbitrary_bytes(line in proptest::collection::vec(any::<u8>(), 0..64)) {
        check(&line)?;
        checks::check_next_line(&line);
    }
}

#[test]
fn fused_line_scan_decides_common_lines_and_declines_others() {
    let max = 64;
    let scan = |s: &[u8]| scan::scan_next_line(s, max, &mut Vec::new());
    let line = b"{\"type\":\"k\",\"ts_ms\":1,\"t\":\"a\\tb\"}";
    for ending in [&b"\n"[..], b"\r\n", b" \t\r\n"] {
        let data = [&line[..], ending, b"{}\n"].concat();
        let n = scan(&data).expect("a plain line is decided");
        assert_eq!(n.end, line.len());
        assert_eq!(n.newline, line.len() + ending.len() - 1);
        // Escaping the content adds one byte per quote and backslash; the
        // trailing tabs and CRs are not content.
        assert_eq!(n.scan.escape_extra as usize, escape::escaped_extra(line));
    }
    // Declined: no newline, a value split across lines, a second value,
    // whitespace only trimming removes, not an object, invalid.
    for data in [
        &line[..],
        b"{\"a\":\n1}\n",
        b"{} {}\n",
        b"{}\x0b\n",
        b" {}\n",
        b"[1]\n",
        b"{\"a\":\"x\ny\"}\n",
        b"{\"a\" 1}\n",
    ] {
        assert!(scan(data).is_none(), "{:?}", String::from_utf8_lossy(data));
    }
}

#[test]
fn validity_is_not_trivially_one_sided() {
    // The generator must produce both outcomes often, or the property
    // above proves little.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = jsonish();
    let (mut valid, mut invalid) = (0, 0);
    for _ in 0..2000 {
        let line = strategy.new_tree(&mut runner).unwrap().current();
        if json::validate(&line, 64, &mut Vec::new()).is_ok() {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    assert!(
        valid > 300 && invalid > 300,
        "valid {valid}, invalid {invalid}"
    );
}
