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
    if memchr::memchr(b'\\', raw).is_none() {
        out.push_str(&String::from_utf8_lossy(raw));
        return;
    }
    out.extend(char::decode_utf16(StringUnits::new(raw)).map(|c| c.unwrap_or('\u{FFFD}')));
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
