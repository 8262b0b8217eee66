//! What a record is searched by: the words of its string values.
//!
//! A record's text is every JSON string *value* of its line, at any depth,
//! except the top-level `type` (searched with `kinds` instead) and
//! `session_id` (with `session`). Object keys, numbers, booleans and
//! `null` are not searched. Escapes are decoded first (`\n`, `\u00e9`).
//!
//! A word is a maximal run of alphanumeric characters (Unicode letters and
//! digits, as `char::is_alphanumeric` says), lowercased; with `joins`, an
//! apostrophe (`'` or `’`) between two of them belongs to the word
//! (`maya's`, `don't`: the English stemmer and stop words know them).
//! Words longer than [`MAX_WORD`] bytes (hashes, base64) are left out. A
//! query is split into words the same way; what becomes of the words is
//! `analysis.rs`'s.

/// Longest word indexed, in bytes (lowercased UTF-8).
pub const MAX_WORD: usize = 64;

/// Calls `word` for every word of `text`, in order. `scratch` is reused.
pub(crate) fn words(text: &str, joins: bool, scratch: &mut String, mut word: impl FnMut(&str)) {
    let mut emit = |scratch: &mut String| {
        if !scratch.is_empty() && scratch.len() <= MAX_WORD {
            word(scratch);
        }
        scratch.clear();
    };
    scratch.clear();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() {
            if c.is_ascii() {
                scratch.push(c.to_ascii_lowercase());
            } else {
                scratch.extend(c.to_lowercase());
            }
        } else if joins
            && (c == '\'' || c == '\u{2019}')
            && !scratch.is_empty()
            && chars.peek().is_some_and(|n| n.is_alphanumeric())
        {
            scratch.push('\'');
        } else if !scratch.is_empty() {
            emit(scratch);
        }
    }
    emit(scratch);
}

/// Calls `value` for every searched string value of `line` (decoded), a
/// valid JSON object (a record's line as the replay parsed it). A line
/// that is not one gives what could be read of it.
pub(crate) fn record_values(line: &[u8], scratch: &mut Scratch, mut value: impl FnMut(&str)) {
    record_values_by(line, scratch, |_, v| value(v));
}

/// The top-level keys whose string value says who spoke a record.
pub(crate) const SPEAKER_KEYS: [&[u8]; 4] = [b"speaker", b"author", b"sender", b"role"];

/// [`record_values`], each value told with whether it is who spoke the
/// record (a top-level [`SPEAKER_KEYS`] member).
pub(crate) fn record_values_by(
    line: &[u8],
    scratch: &mut Scratch,
    mut value: impl FnMut(bool, &str),
) {
    let Scratch { text, bytes, stack } = scratch;
    stack.clear();
    let mut i = 0usize;
    // Whether the last top-level key read is `type` or `session_id`, or
    // one that names a speaker.
    let mut top_key_skipped = false;
    let mut top_key_speaker = false;
    while i < line.len() {
        match line[i] {
            b'{' => {
                stack.push((true, true));
                i += 1;
            }
            b'[' => {
                stack.push((false, false));
                i += 1;
            }
            b'}' | b']' => {
                stack.pop();
                i += 1;
            }
            b',' => {
                if let Some(top) = stack.last_mut() {
                    top.1 = top.0;
                }
                i += 1;
            }
            b':' => {
                if let Some(top) = stack.last_mut() {
                    top.1 = false;
                }
                i += 1;
            }
            b'"' => {
                let Some(end) = string_end(line, i + 1) else {
                    return;
                };
                let raw = &line[i + 1..end];
                i = end + 1;
                let is_key = stack.last().is_some_and(|&(obj, key)| obj && key);
                if is_key {
                    if stack.len() == 1 {
                        top_key_skipped = raw == b"type" || raw == b"session_id";
                        top_key_speaker = SPEAKER_KEYS.contains(&raw);
                    }
                    continue;
                }
                if stack.len() == 1 && top_key_skipped {
                    continue;
                }
                decode(raw, bytes, text);
                value(stack.len() == 1 && top_key_speaker, text);
            }
            _ => i += 1,
        }
    }
}

/// Record types left out of the index: the server's tool calls and their
/// results, which repeat what was searched for and what was found (a
/// search would otherwise find its own earlier answers).
pub const UNSEARCHED: [&str; 2] = ["tool_call", "tool_result"];

/// Calls `record(at, line)` for each line of `buf[range]` (whole lines)
/// that is a record, but for the [`UNSEARCHED`] types: the line trimmed,
/// `at` its offset in `buf`. The lines the index holds, and the scan that
/// checks it reads.
pub(crate) fn each_record<E>(
    buf: &[u8],
    range: std::ops::Range<usize>,
    parser: &mut crate::parse::LineParser,
    mut record: impl FnMut(usize, &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let mut pos = range.start;
    for line in buf[range].split_inclusive(|&b| b == b'\n') {
        let trimmed = crate::input::lines::trim(line);
        let at = pos + trimmed.start;
        pos += line.len();
        let line = &line[trimmed];
        if line.is_empty() {
            continue;
        }
        if let Ok(r) = parser.parse(line, 0)
            && !UNSEARCHED.iter().any(|k| r.kind_is(line, k))
        {
            record(at, line)?;
        }
    }
    Ok(())
}

/// Reusable buffers of [`record_words`].
#[derive(Default)]
pub struct Scratch {
    text: String,
    bytes: Vec<u8>,
    /// One frame per open container: is it an object, and does a key come
    /// next.
    stack: Vec<(bool, bool)>,
}

/// Index of the `"` closing the string whose content starts at `from`.
fn string_end(line: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    loop {
        let at = i + memchr::memchr2(b'"', b'\\', &line[i..])?;
        if line[at] == b'"' {
            return Some(at);
        }
        i = at + 2;
        if i > line.len() {
            return None;
        }
    }
}

/// Decodes a JSON string's raw content into `out` (lone surrogates and
/// invalid bytes become U+FFFD).
fn decode(raw: &[u8], bytes: &mut Vec<u8>, out: &mut String) {
    out.clear();
    if memchr::memchr(b'\\', raw).is_none() {
        out.push_str(&String::from_utf8_lossy(raw));
        return;
    }
    bytes.clear();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'\\' || i + 1 >= raw.len() {
            bytes.push(raw[i]);
            i += 1;
            continue;
        }
        let c = raw[i + 1];
        i += 2;
        let simple = match c {
            b'n' => Some(b'\n'),
            b't' => Some(b'\t'),
            b'r' => Some(b'\r'),
            b'b' => Some(8),
            b'f' => Some(12),
            b'u' => None,
            other => Some(other),
        };
        if let Some(b) = simple {
            bytes.push(b);
            continue;
        }
        let hex = |at: usize| {
            raw.get(at..at + 4)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u32::from_str_radix(h, 16).ok())
        };
        let Some(u) = hex(i) else {
            bytes.extend_from_slice("\u{fffd}".as_bytes());
            continue;
        };
        i += 4;
        let ch = if (0xD800..0xDC00).contains(&u)
            && raw.get(i..i + 2) == Some(b"\\u")
            && let Some(lo) = hex(i + 2).filter(|lo| (0xDC00..0xE000).contains(lo))
        {
            i += 6;
            char::from_u32(0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00))
        } else {
            char::from_u32(u)
        };
        let mut buf = [0u8; 4];
        bytes.extend_from_slice(ch.unwrap_or('\u{fffd}').encode_utf8(&mut buf).as_bytes());
    }
    out.push_str(&String::from_utf8_lossy(bytes));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(line: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut w = String::new();
        record_values(line.as_bytes(), &mut Scratch::default(), |v| {
            words(v, false, &mut w, |x| out.push(x.to_string()))
        });
        out
    }

    #[test]
    fn string_values_at_any_depth_but_not_keys_type_session_or_numbers() {
        assert_eq!(
            all(
                r#"{"type":"wm_event","ts_ms":12,"session_id":"chat one","text":"The Lisbon invoice, №42!","data":{"city":"Lisbon","n":7,"tags":["Paid","due soon"],"ok":true},"x":null}"#
            ),
            [
                "the", "lisbon", "invoice", "42", "lisbon", "paid", "due", "soon"
            ]
        );
        // A nested "type" or "session_id" is an ordinary value.
        assert_eq!(
            all(r#"{"type":"a","meta":{"type":"Inner","session_id":"S"}}"#),
            ["inner", "s"]
        );
        // Keys after the skipped ones are read again.
        assert_eq!(
            all(r#"{"session_id":"s","type":"t","text":"kept"}"#),
            ["kept"]
        );
    }

    #[test]
    fn escapes_are_decoded_and_case_and_long_words_handled() {
        assert_eq!(
            all(r#"{"type":"a","text":"caf\u00e9\nNEXT \"Quoted\" \ud83d\ude00 smile"}"#),
            ["café", "next", "quoted", "smile"]
        );
        let long = "x".repeat(MAX_WORD + 1);
        assert_eq!(
            all(&format!(r#"{{"type":"a","text":"short {long} ÉCOLE"}}"#)),
            ["short", "école"]
        );
        let mut got = Vec::new();
        words(
            "Straße ΣΊΣΥΦΟΣ 東京",
            false,
            &mut String::new(),
            |w| got.push(w.to_string()),
        );
        assert_eq!(got, ["straße", "σίσυφοσ", "東京"]);
        let mut got = Vec::new();
        words(
            "Maya's ’quoted’ don’t x'",
            true,
            &mut String::new(),
            |w| got.push(w.to_string()),
        );
        assert_eq!(got, ["maya's", "quoted", "don't", "x"]);
    }
}
