//! Unit tests of the JavaScript-exact re-serialiser.
use super::*;

/// The output for `line`, `B` for a blank line or the error kind.
fn js(line: impl AsRef<[u8]>) -> Result<String, JsonErrorKind> {
    let mut out = b"prefix".to_vec();
    let r = JsStringifier::new(1000).stringify(line.as_ref(), &mut out);
    match r {
        Ok(true) => {}
        Ok(false) => {
            assert_eq!(out, b"prefix", "nothing written for a blank line");
            return Ok("B".into());
        }
        Err(e) => {
            assert_eq!(out, b"prefix", "nothing left behind by an error");
            return Err(e.kind);
        }
    }
    assert!(out.starts_with(b"prefix"));
    Ok(String::from_utf8(out[6..].to_vec()).expect("the output is UTF-8"))
}

fn ok(line: impl AsRef<[u8]>) -> String {
    let line = line.as_ref();
    js(line).unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(line)))
}

#[test]
fn keys_are_ordered_and_merged_as_v8_orders_them() {
    assert_eq!(
        ok(r#"{"b":1,"a":2,"1":3,"0":4,"b":5}"#),
        r#"{"0":4,"1":3,"b":5,"a":2}"#
    );
    assert_eq!(ok(r#"{"a":1,"b":2,"a":3}"#), r#"{"a":3,"b":2}"#);
    assert_eq!(
        ok(r#"{"4294967295":1,"4294967294":2,"01":3,"-1":4,"1.0":5,"0":6,"x":7,"10":8,"9":9}"#),
        r#"{"0":6,"9":9,"10":8,"4294967294":2,"4294967295":1,"01":3,"-1":4,"1.0":5,"x":7}"#
    );
    // An escaped key is the key it decodes to.
    assert_eq!(ok(r#"{"x":1,"\u0031":2,"1":3}"#), r#"{"1":3,"x":1}"#);
    assert_eq!(ok(r#"{"a\u0062":1,"ab":2}"#), r#"{"ab":2}"#);
    // __proto__ is an ordinary key for JSON.parse.
    assert_eq!(
        ok(r#"{"a":1,"__proto__":{"x":1},"a":{"b":2}}"#),
        r#"{"a":{"b":2},"__proto__":{"x":1}}"#
    );
    // A merged duplicate whose values hold objects to reorder.
    assert_eq!(
        ok(r#"{"a":{"1":1,"0":0},"b":[{"2":2,"1":1}],"a":{"c":{"9":9,"8":8}}}"#),
        r#"{"a":{"c":{"8":8,"9":9}},"b":[{"1":1,"2":2}]}"#
    );
    // Clean objects keep their order, inside and around rewritten ones.
    assert_eq!(
        ok(r#"[{"z":1,"y":{"b":1,"a":2}},{"1":{"z":[{"1":0,"0":1}]},"0":0},{}]"#),
        r#"[{"z":1,"y":{"b":1,"a":2}},{"0":0,"1":{"z":[{"0":1,"1":0}]}},{}]"#
    );
    assert_eq!(ok(r#"{"":1,"":2}"#), r#"{"":2}"#);
}

#[test]
fn many_keys_with_duplicates_are_merged_without_quadratic_work() {
    // 100,000 members, every key twice: the second value wins, in the
    // first one's place (what Node gives, checked by hand).
    let n = 100_000;
    let mut line = String::from("{");
    for i in 0..n {
        line += &format!("{}\"k{}\":{i}", if i > 0 { "," } else { "" }, i % (n / 2));
    }
    line.push('}');
    let mut want = String::from("{");
    for i in 0..n / 2 {
        want += &format!("{}\"k{i}\":{}", if i > 0 { "," } else { "" }, i + n / 2);
    }
    want.push('}');
    let t = std::time::Instant::now();
    assert_eq!(ok(&line), want);
    // Generous: a quadratic pass would take minutes.
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    // Many distinct keys, some of them indices, in a large object.
    let keys: Vec<String> = (0..40).map(|i| format!("\"{}\":{i}", 39 - i)).collect();
    let want: Vec<String> = (0..40).map(|i| format!("\"{i}\":{}", 39 - i)).collect();
    assert_eq!(
        ok(format!("{{{}}}", keys.join(","))),
        format!("{{{}}}", want.join(","))
    );
}

#[test]
fn numbers_are_written_as_javascript_writes_them() {
    for (input, want) in [
        ("1e21", "1e+21"),
        ("1e20", "100000000000000000000"),
        ("1e-7", "1e-7"),
        ("0.000001", "0.000001"),
        ("123456789012345678901234567890", "1.2345678901234568e+29"),
        ("12345678901234567890", "12345678901234567000"),
        ("9007199254740993", "9007199254740992"),
        ("999999999999999", "999999999999999"),
        ("-999999999999999", "-999999999999999"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("-0e5", "0"),
        ("0", "0"),
        ("1E2", "100"),
        ("1.0", "1"),
        ("1.50", "1.5"),
        ("0.1", "0.1"),
        ("-1.5e-10", "-1.5e-10"),
        ("5e-324", "5e-324"),
        ("2e-324", "0"),
        ("-1e-400", "0"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("1e400", "null"),
        ("-1e400", "null"),
        ("1e99999999999999999999", "null"),
        ("0e99999999999999999999", "0"),
        ("0.30000000000000004441", "0.30000000000000004"),
    ] {
        assert_eq!(ok(input), want, "{input}");
        assert_eq!(ok(format!("[{input}]")), format!("[{want}]"), "{input}");
    }
}

#[test]
fn strings_are_escaped_as_json_stringify_escapes_them() {
    for (input, want) in [
        (r#""\ud800""#, r#""\ud800""#),
        (r#""\uD800""#, r#""\ud800""#),
        (r#""\ud83d\ude00""#, "\"😀\""),
        (r#""\uD83D\uDE00""#, "\"😀\""),
        (r#""\udc00\ud800""#, r#""\udc00\ud800""#),
        (r#""\ud800\ud800\udc00""#, "\"\\ud800𐀀\""),
        (r#""\ud800A""#, r#""\ud800A""#),
        (r#""\ud800\u0041""#, r#""\ud800A""#),
        (r#""\ud800\n""#, r#""\ud800\n""#),
        (r#""x\ud83d""#, r#""x\ud83d""#),
        (r#""\ud83d😀""#, "\"\\ud83d😀\""),
        (r#""\/\"\\\b\f\n\r\t""#, r#""/\"\\\b\f\n\r\t""#),
        (
            r#""\u0000\u001F\u001f\u000b""#,
            r#""\u0000\u001f\u001f\u000b""#,
        ),
        (r#""\u0022\u005c\u0008\u002F""#, r#""\"\\\b/""#),
        (
            r#""\u007f\u0080\u00e9\u2028\u2029\uFFFD\uffff""#,
            "\"\u{7f}\u{80}é\u{2028}\u{2029}\u{fffd}\u{ffff}\"",
        ),
        (
            "\"raw é \u{2028} \u{7f} / 😀\"",
            "\"raw é \u{2028} \u{7f} / 😀\"",
        ),
        (r#""""#, r#""""#),
    ] {
        assert_eq!(ok(input), want, "{input}");
    }
}

#[test]
fn invalid_utf8_is_replaced_as_node_replaces_it() {
    // Each maximal ill-formed subsequence is one U+FFFD: a lone byte,
    // an overlong (every byte), a surrogate encoded in UTF-8 (every
    // byte), a truncated sequence (once).
    for (input, replaced) in [
        (&b"\"\xff\""[..], 1),
        (b"\"\x80\x80\"", 2),
        (b"\"\xc0\x80\"", 2),
        (b"\"\xe0\x80\x80\"", 3),
        (b"\"\xed\xa0\x80\"", 3),
        (b"\"\xed\xa0\x80\xed\xb0\x80\"", 6),
        (b"\"\xf0\x9f\x98\"", 1),
        (b"\"\xe2\x82\"", 1),
        (b"\"\xf4\x90\x80\x80\"", 4),
        (b"\"\xf8\x88\x80\x80\x80\"", 5),
        (b"\"\xe2\x82\\n\"", 1),
    ] {
        let got = ok(input);
        let want = String::from_utf8_lossy(input).replace('\n', "\\n");
        assert_eq!(got, want, "{input:?}");
        assert_eq!(got.matches('\u{FFFD}').count(), replaced, "{input:?}");
    }
    // In a key, too, where the replaced keys are equal.
    assert_eq!(ok(b"{\"\xff\":1,\"\xfe\":2}"), "{\"\u{FFFD}\":2}");
    assert_eq!(ok(b"{\"\\ufffd\":1,\"\xc0\":2}"), "{\"\u{FFFD}\":2}");
    // Outside a string it is a character JSON does not allow, even when
    // truncated at the end of the line.
    for input in [
        &b"\xff"[..],
        b"[1,\xff]",
        b"{\"a\":1}\xe2\x82",
        b"\xef\xbb{}",
        b"[\xc2\xa0]",
        b"\"a\"\xf0\x9f\x98",
    ] {
        assert!(js(input).is_err(), "{input:?}");
    }
    assert_eq!(js(b"[1,\xff]"), Err(JsonErrorKind::UnexpectedByte));
    assert_eq!(js(b"1\xe2\x82"), Err(JsonErrorKind::TrailingCharacters));
}

#[test]
fn lines_are_trimmed_as_string_trim_trims() {
    for ws in [
        "\t", "\n", "\u{b}", "\u{c}", "\r", " ", "\u{a0}", "\u{1680}", "\u{2000}", "\u{2005}",
        "\u{200a}", "\u{2028}", "\u{2029}", "\u{202f}", "\u{205f}", "\u{3000}", "\u{feff}",
    ] {
        assert_eq!(ok(format!("{ws}{{}}{ws}")), "{}", "{ws:?}");
        assert_eq!(ok(format!("{ws}{ws}1{ws}{ws}")), "1", "{ws:?}");
        assert_eq!(ok(ws), "B", "{ws:?}");
    }
    assert_eq!(ok("\u{feff}\u{a0} {\"a\":1}\u{3000}\r"), r#"{"a":1}"#);
    assert_eq!(ok("[1]\r"), "[1]");
    assert_eq!(ok(""), "B");
    assert_eq!(ok(" \r\u{feff}\u{2029}"), "B");
    // Not JavaScript whitespace: U+180E (no longer Zs), U+0085, U+200B.
    for not_ws in ["\u{180e}", "\u{85}", "\u{200b}"] {
        assert!(js(format!("{not_ws}1")).is_err(), "{not_ws:?}");
        assert!(js(format!("1{not_ws}")).is_err(), "{not_ws:?}");
    }
    // Invalid UTF-8 is U+FFFD, not whitespace; a partial U+00A0 is not
    // whitespace either.
    assert!(js(b"1\xc2").is_err());
    assert!(js(b"\xa01").is_err());
    assert!(js(b"1 \xa0").is_err());
    assert_eq!(js_trim(b"\xc2\xa0\xa0"), 2..3);
    // Inside the value only JSON whitespace separates tokens.
    assert_eq!(ok(" [ 1 ,\t2\r\n,\n3 ] "), "[1,2,3]");
    for inner in [
        "[1,\u{b}2]",
        "[1,\u{a0}2]",
        "[1,\u{feff}2]",
        "{\"a\"\u{c}:1}",
    ] {
        assert!(js(inner).is_err(), "{inner:?}");
    }
}

#[test]
fn what_json_parse_rejects_is_an_error_with_nothing_written() {
    use JsonErrorKind::*;
    for (input, kind) in [
        ("{\"a\":1} x", TrailingCharacters),
        ("{\"a\":1}{\"b\":2}", TrailingCharacters),
        ("1 2", TrailingCharacters),
        ("{\"a\":\"x\u{1}y\"}", ControlCharacterInString),
        ("\"\t\"", ControlCharacterInString),
        ("\"\u{1f}", ControlCharacterInString),
        ("{\"a\":\"\\x\"}", InvalidEscape),
        ("\"\\u12\"", InvalidEscape),
        ("\"\\u12", UnexpectedEnd),
        ("\"\\U0041\"", InvalidEscape),
        ("\"\\", UnexpectedEnd),
        ("{\"a\":01}", UnexpectedByte),
        ("-", InvalidNumber),
        ("-01", TrailingCharacters),
        ("1.", InvalidNumber),
        (".5", UnexpectedByte),
        ("1e", InvalidNumber),
        ("+1", UnexpectedByte),
        ("NaN", UnexpectedByte),
        ("Infinity", UnexpectedByte),
        ("[1,]", UnexpectedByte),
        ("{\"a\":1,}", UnexpectedByte),
        ("{,}", UnexpectedByte),
        ("{\"a\" 1}", UnexpectedByte),
        ("{\"a\"", UnexpectedEnd),
        ("{1:1}", UnexpectedByte),
        ("tru", UnexpectedEnd),
        ("nulL", UnexpectedByte),
        ("{\"a\":1]", UnexpectedByte),
        ("[\"a\"", UnexpectedEnd),
        ("[", UnexpectedEnd),
        ("'a'", UnexpectedByte),
        ("\"abc", UnexpectedEnd),
    ] {
        assert_eq!(js(input), Err(kind), "{input:?}");
    }
    // The column is the byte offset in the untrimmed line.
    let e = JsStringifier::new(10)
        .stringify(b"\xc2\xa0 [1,x]", &mut Vec::new())
        .unwrap_err();
    assert_eq!(e.column, 6);
}

#[test]
fn nesting_is_limited_exactly_and_never_by_the_call_stack() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let mut js = JsStringifier::new(1000);
    let mut out = Vec::new();
    assert_eq!(js.stringify(deep(1000).as_bytes(), &mut out), Ok(true));
    assert_eq!(out, deep(1000).as_bytes());
    let e = js.stringify(deep(1001).as_bytes(), &mut out).unwrap_err();
    assert_eq!(e.kind, JsonErrorKind::TooDeep);
    assert_eq!(e.column, 1000);
    // A million levels: an error under the usual limit, and written in
    // full (two passes, both with their own stack) without one.
    let million = format!("{}1{}", "{\"a\":[".repeat(500_000), "]}".repeat(500_000));
    let mut js = JsStringifier::new(crate::DEFAULT_MAX_DEPTH);
    let e = js.stringify(million.as_bytes(), &mut out).unwrap_err();
    assert_eq!(e.kind, JsonErrorKind::TooDeep);
    let mut js = JsStringifier::new(usize::MAX);
    out.clear();
    assert_eq!(js.stringify(million.as_bytes(), &mut out), Ok(true));
    assert_eq!(out, million.as_bytes());
    // Every level rewritten (index keys out of order), 100,000 deep.
    let n = 100_000;
    let line = format!("{}{{}}{}", "{\"1\":".repeat(n), ",\"0\":0}".repeat(n));
    let want = format!("{}{{}}{}", "{\"0\":0,\"1\":".repeat(n), "}".repeat(n));
    out.clear();
    assert_eq!(js.stringify(line.as_bytes(), &mut out), Ok(true));
    assert!(out == want.as_bytes());
}

#[test]
fn top_level_kind_and_numbers_for_the_record_shape() {
    let mut js = JsStringifier::new(100);
    let mut out = Vec::new();
    for (line, kind) in [
        ("{}", JsValueKind::Object),
        ("[]", JsValueKind::Array),
        ("\"x\"", JsValueKind::String),
        ("1e400", JsValueKind::Number),
        ("false", JsValueKind::Boolean),
        ("null", JsValueKind::Null),
    ] {
        assert_eq!(js.stringify(line.as_bytes(), &mut out), Ok(true));
        assert_eq!(js.top_level_kind(), Some(kind), "{line}");
    }
    assert!(js.stringify(b"  ", &mut out).is_ok());
    assert_eq!(js.top_level_kind(), None);
    assert!(js.stringify(b"{", &mut out).is_err());
    assert_eq!(js.top_level_kind(), None);

    let number = |js: &mut JsStringifier, line: &str, name: &str| {
        let mut out = Vec::new();
        assert_eq!(js.stringify(line.as_bytes(), &mut out), Ok(true), "{line}");
        js.top_level_number(name.as_bytes())
    };
    // Overflow is written null but is a number to JSON.parse.
    let line = r#"{"type":"x","ts_ms":1e400}"#;
    assert_eq!(number(&mut js, line, "ts_ms"), Some(f64::INFINITY));
    assert_eq!(
        number(&mut js, r#"{"ts_ms":-1e400}"#, "ts_ms"),
        Some(f64::NEG_INFINITY)
    );
    assert_eq!(number(&mut js, r#"{"ts_ms":12}"#, "ts_ms"), Some(12.0));
    assert_eq!(number(&mut js, r#"{"ts_ms":1.5e3}"#, "ts_ms"), Some(1500.0));
    let z = number(&mut js, r#"{"ts_ms":"x","ts_ms":-0}"#, "ts_ms").unwrap();
    assert!(z == 0.0 && z.is_sign_negative());
    // The last duplicate wins, whatever its type.
    assert_eq!(number(&mut js, r#"{"ts_ms":1,"ts_ms":"x"}"#, "ts_ms"), None);
    assert_eq!(
        number(&mut js, r#"{"ts_ms":1,"ts_ms":2}"#, "ts_ms"),
        Some(2.0)
    );
    assert_eq!(number(&mut js, r#"{"t\u0073_ms":3}"#, "ts_ms"), Some(3.0));
    assert_eq!(number(&mut js, r#"{"a":{"ts_ms":1}}"#, "ts_ms"), None);
    assert_eq!(number(&mut js, r#"[{"ts_ms":1}]"#, "ts_ms"), None);
    assert_eq!(number(&mut js, r#"{"1":5,"0":4}"#, "1"), Some(5.0));
    // In a large object (duplicates found by sorting).
    let mut big: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
    big.push("\"k3\":\"s\"".into());
    big.push("\"k5\":1e999".into());
    let line = format!("{{{}}}", big.join(","));
    assert_eq!(number(&mut js, &line, "k3"), None);
    assert_eq!(number(&mut js, &line, "k5"), Some(f64::INFINITY));
    assert_eq!(number(&mut js, &line, "k7"), Some(7.0));
}

#[test]
fn a_stringifier_is_reused_across_lines() {
    let mut js = JsStringifier::new(100);
    let mut out = Vec::new();
    let lines: [&[u8]; 5] = [
        br#"{"b":1,"a":{"1":1,"0":0},"b":2}"#,
        b"[1,",
        br#"{"x":[1,2,{"2":2,"1":1}]}"#,
        b"  ",
        br#"{"y":"\ud800"}"#,
    ];
    for line in lines {
        let _ = js.stringify(line, &mut out);
        out.push(b'\n');
    }
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"b\":2,\"a\":{\"0\":0,\"1\":1}}\n\n{\"x\":[1,2,{\"1\":1,\"2\":2}]}\n\n{\"y\":\"\\ud800\"}\n"
    );
}

#[test]
fn array_index_is_the_canonical_form_below_2_pow_32_minus_1() {
    assert_eq!(array_index(b"0"), Some(0));
    assert_eq!(array_index(b"4294967294"), Some(4_294_967_294));
    for no in [
        &b""[..],
        b"01",
        b"00",
        b"-1",
        b"1.0",
        b"4294967295",
        b"99999999999",
        b"1e3",
        b" 1",
    ] {
        assert_eq!(array_index(no), None, "{no:?}");
    }
}
