//! JSON string tokens: decoding escapes (unpaired surrogates kept as
//! JavaScript keeps them), comparing without decoding.

pub use crate::escape::StringUnits;

/// Whether the raw content of a valid JSON string (escapes kept) decodes to
/// `target`, compared as `JSON.parse`'s strings are: by UTF-16 code units.
pub fn string_equals(raw: &[u8], target: &str) -> bool {
    if memchr::memchr(b'\\', raw).is_none() {
        return raw == target.as_bytes();
    }
    StringUnits::new(raw).eq(target.encode_utf16())
}

/// The decoded value of the raw content of a valid JSON string, with
/// unpaired surrogates replaced by U+FFFD.
pub fn decode_string(raw: &[u8], out: &mut String) {
    let Some(first) = memchr::memchr(b'\\', raw) else {
        out.push_str(&String::from_utf8_lossy(raw));
        return;
    };
    let before = out.len();
    if !decode_runs(raw, first, out) {
        out.truncate(before);
        decode_units(raw, out);
    }
}

/// The raw content decoded a UTF-16 unit at a time: what any content
/// decodes to, the oracle of [`decode_runs`].
fn decode_units(raw: &[u8], out: &mut String) {
    out.extend(char::decode_utf16(StringUnits::new(raw)).map(|c| c.unwrap_or('\u{FFFD}')));
}

/// [`decode_units`]' result for well-formed content (valid UTF-8, every
/// escape one JSON has): the text between escapes copied whole, each run
/// of escapes decoded (so that `\uD83D\uDE00` is one character). `false`
/// (with part written) for other content.
fn decode_runs(raw: &[u8], first: usize, out: &mut String) -> bool {
    let Ok(text) = std::str::from_utf8(raw) else {
        return false;
    };
    out.reserve(raw.len());
    let (mut pos, mut at) = (0, first);
    loop {
        // `at` is a `\`, ASCII: a character boundary.
        out.push_str(&text[pos..at]);
        let mut end = at;
        while raw.get(end) == Some(&b'\\') {
            end += match raw.get(end + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => 2,
                Some(b'u')
                    if raw
                        .get(end + 2..end + 6)
                        .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) =>
                {
                    6
                }
                _ => return false,
            };
        }
        decode_units(&raw[at..end], out);
        pos = end;
        match memchr::memchr(b'\\', &raw[pos..]) {
            Some(n) => at = pos + n,
            None => {
                out.push_str(&text[pos..]);
                return true;
            }
        }
    }
}

/// Compares a raw (possibly escaped) key with an ASCII target.
pub(crate) fn key_is(raw: &[u8], target: &[u8]) -> bool {
    if memchr::memchr(b'\\', raw).is_none() {
        return raw == target;
    }
    let mut units = StringUnits::new(raw);
    for &t in target {
        if units.next() != Some(t as u16) {
            return false;
        }
    }
    units.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn units(raw: &[u8]) -> String {
        let mut out = String::new();
        decode_units(raw, &mut out);
        out
    }

    fn decoded(raw: &[u8]) -> String {
        let mut out = String::from("kept:");
        decode_string(raw, &mut out);
        out.split_off(5)
    }

    #[test]
    fn escapes_and_the_text_between_them_decode_as_json_parse_does() {
        let cases: &[(&[u8], &str)] = &[
            (br#"a\nb"#, "a\nb"),
            (br#"\"quoted\" \\ \/"#, "\"quoted\" \\ /"),
            ("é\\tü".as_bytes(), "é\tü"),
            (br#"\uD83D\uDE00!"#, "\u{1F600}!"),
            (br#"\uD83Dx"#, "\u{FFFD}x"),
            (br#"\uDE00\uD83D"#, "\u{FFFD}\u{FFFD}"),
            (br#"end\"#, "end\\"),
            (br#"short\u12"#, "short\u{12}"),
        ];
        for (raw, want) in cases {
            assert_eq!(decoded(raw), *want, "{}", String::from_utf8_lossy(raw));
            assert_eq!(units(raw), *want, "{}", String::from_utf8_lossy(raw));
        }
    }

    fn pieces() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            "[a-z é😀\"]{0,6}".prop_map(String::into_bytes),
            Just(br"\n".to_vec()),
            Just(br"\\".to_vec()),
            Just(br"\uD83D".to_vec()),
            Just(br"\uDE00".to_vec()),
            Just(br"\u00e9".to_vec()),
            Just(br"\u12".to_vec()),
            Just(b"\\".to_vec()),
            Just(br"\x".to_vec()),
            Just(vec![b'\\', 0xC3]),
            Just(vec![0xFF]),
            Just(vec![0xE2, 0x82]),
        ];
        prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn runs_decode_as_units_do(raw in pieces()) {
            let mut fast = String::new();
            decode_string(&raw, &mut fast);
            if memchr::memchr(b'\\', &raw).is_some() {
                prop_assert_eq!(fast, units(&raw));
            }
        }

        #[test]
        fn any_bytes_decode_as_units_do(raw in prop::collection::vec(any::<u8>(), 0..40)) {
            let mut fast = String::new();
            decode_string(&raw, &mut fast);
            if memchr::memchr(b'\\', &raw).is_some() {
                prop_assert_eq!(fast, units(&raw));
            }
        }
    }
}
