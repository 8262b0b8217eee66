//! JSON string tokens: decoding escapes (unpaired surrogates kept as
//! JavaScript keeps them), comparing without decoding.

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

/// The UTF-16 code units of the raw content of a valid JSON string, decoded
/// as `JSON.parse` decodes them (unpaired surrogate escapes kept as is).
pub struct StringUnits<'a> {
    raw: &'a [u8],
    pos: usize,
    pending_low: Option<u16>,
}

impl<'a> StringUnits<'a> {
    /// Decodes `raw`, the bytes between the quotes of a valid JSON string.
    pub fn new(raw: &'a [u8]) -> Self {
        StringUnits {
            raw,
            pos: 0,
            pending_low: None,
        }
    }
}

impl Iterator for StringUnits<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        if let Some(low) = self.pending_low.take() {
            return Some(low);
        }
        let raw = self.raw;
        let &b = raw.get(self.pos)?;
        if b == b'\\' {
            // Malformed input (a trailing backslash, a short \u escape)
            // decodes to something meaningless, never a panic.
            let Some(&e) = raw.get(self.pos + 1) else {
                self.pos += 1;
                return Some(b as u16);
            };
            self.pos += 2;
            return Some(match e {
                b'b' => 0x08,
                b'f' => 0x0C,
                b'n' => 0x0A,
                b'r' => 0x0D,
                b't' => 0x09,
                b'u' => {
                    let end = (self.pos + 4).min(raw.len());
                    let v = hex4(&raw[self.pos..end]);
                    self.pos = end;
                    v
                }
                other => other as u16,
            });
        }
        // One UTF-8 character (valid for valid JSON; a truncated sequence
        // decodes to U+FFFD).
        let width = match b {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => 4,
        };
        let bytes = &raw[self.pos..(self.pos + width).min(raw.len())];
        let width = bytes.len();
        self.pos += width;
        let c = std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.chars().next())
            .unwrap_or('\u{FFFD}');
        let mut buf = [0u16; 2];
        let enc = c.encode_utf16(&mut buf);
        if enc.len() == 2 {
            self.pending_low = Some(enc[1]);
        }
        Some(enc[0])
    }
}

fn hex4(h: &[u8]) -> u16 {
    h.iter().fold(0u16, |acc, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => 0,
        };
        (acc << 4) | v as u16
    })
}
