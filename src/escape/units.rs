//! Reading a JSON string's escapes back: the UTF-16 code units of its raw
//! content, as `JSON.parse` decodes them (the reverse of the escaping the
//! rest of this module writes).

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
