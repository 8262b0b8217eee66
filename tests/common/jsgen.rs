//! A generator of lines that exercise `JSON.stringify(JSON.parse(line))`:
//! lossy UTF-8, JavaScript's trim set, key order and duplicates, every number
//! form, escapes and surrogates, deep nesting, and broken lines. Shared by
//! the js differential tests.

/// A small deterministic generator (splitmix64): no dependency, the same
/// lines on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
    pub fn pick<'a, T: ?Sized>(&mut self, xs: &[&'a T]) -> &'a T {
        xs[self.below(xs.len())]
    }
}

/// Numbers written as is: zeros, limits, halfway cases, overflow.
const SPECIAL_NUMBERS: &[&str] = &[
    "0",
    "-0",
    "-0.0",
    "0e0",
    "-0e-0",
    "0.0e+5",
    "1e400",
    "-1e400",
    "1e-400",
    "-1e-400",
    "5e-324",
    "2.4703282292062327e-324",
    "2.4703282292062328e-324",
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "1.7976931348623159e308",
    "9007199254740992",
    "9007199254740993",
    "-9007199254740993",
    "0.1",
    "0.30000000000000004",
    "1e21",
    "1e20",
    "999999999999999999999",
    "1e-7",
    "1e-6",
    "0.000001",
    "0.0000001",
    "123e-20",
    "1E+2",
    "1e+0",
    "4294967295",
    "4294967296",
    "12345678901234567890",
    "123456789012345678901234567890",
    "1e100000000000000000000",
    "0e100000000000000000000",
    "0.1000000000000000055511151231257827021181583404541015625",
    "1.00000000000000011102230246251565404236316680908203125",
    "1.00000000000000011102230246251565404236316680908203124",
    "1.00000000000000011102230246251565404236316680908203126",
];

fn digits(r: &mut Rng, out: &mut Vec<u8>, n: usize) {
    for _ in 0..n {
        out.push(b'0' + r.below(10) as u8);
    }
}

pub fn number(r: &mut Rng, out: &mut Vec<u8>) {
    if r.one_in(3) {
        out.extend_from_slice(r.pick(SPECIAL_NUMBERS).as_bytes());
        return;
    }
    let lens = [1, 1, 2, 3, 5, 10, 15, 16, 17, 20, 25, 40, 400];
    if r.one_in(2) {
        out.push(b'-');
    }
    if r.one_in(5) {
        out.push(b'0');
    } else {
        out.push(b'1' + r.below(9) as u8);
        let n = lens[r.below(lens.len())] - 1;
        digits(r, out, n);
    }
    if r.one_in(3) {
        out.push(b'.');
        let n = lens[r.below(lens.len())];
        digits(r, out, n);
    }
    if r.one_in(3) {
        out.push(if r.one_in(2) { b'e' } else { b'E' });
        match r.below(3) {
            0 => out.push(b'+'),
            1 => out.push(b'-'),
            _ => {}
        }
        match r.below(5) {
            0 => digits(r, out, 1),
            1 => digits(r, out, 2),
            2 => out.extend_from_slice(format!("{}", 290 + r.below(50)).as_bytes()),
            3 => out.extend_from_slice(b"0000000000000000000021"),
            _ => {
                let n = 1 + r.below(6);
                digits(r, out, n)
            }
        }
    }
}

/// Raw characters: multi-byte UTF-8, JavaScript whitespace (inside a string
/// it is kept), DEL, U+FFFD.
const RAW_CHARS: &[&str] = &[
    "é",
    "😀",
    "中",
    "\u{2028}",
    "\u{2029}",
    "\u{feff}",
    "\u{a0}",
    "\u{3000}",
    "\u{7f}",
    "\u{fffd}",
    "\u{10ffff}",
    "/",
    " ",
    "'",
];

/// Bytes that are not UTF-8: lone continuation and lead bytes, overlongs,
/// surrogates encoded in UTF-8 (alone and as a CESU-8 pair), truncated
/// sequences, code points above U+10FFFF.
const BAD_BYTES: &[&[u8]] = &[
    b"\xff",
    b"\xfe",
    b"\x80",
    b"\xbf\xbf",
    b"\xc2",
    b"\xc0\x80",
    b"\xc1\xbf",
    b"\xe0\x80\x80",
    b"\xe0\x9f\xbf",
    b"\xed\xa0\x80",
    b"\xed\xb0\x80",
    b"\xed\xa0\xbd\xed\xb8\x80",
    b"\xf0\x9f\x98",
    b"\xf0\x9f",
    b"\xe2\x82",
    b"\xe2",
    b"\xf4\x90\x80\x80",
    b"\xf5\x80\x80\x80",
    b"\xf8\x88\x80\x80\x80",
    b"\xef\xbb",
    b"\xc2\xa0\xa0",
];

fn hex4(r: &mut Rng, out: &mut Vec<u8>, u: u32) {
    let s = format!("\\u{u:04x}");
    if r.one_in(2) {
        out.extend_from_slice(s.to_uppercase().replace("\\U", "\\u").as_bytes());
    } else {
        out.extend_from_slice(s.as_bytes());
    }
}

fn string_content(r: &mut Rng, out: &mut Vec<u8>, pieces: usize) {
    for _ in 0..pieces {
        match r.below(9) {
            0 | 1 => {
                for _ in 0..1 + r.below(8) {
                    let c = b' ' + r.below(95) as u8;
                    if c != b'"' && c != b'\\' {
                        out.push(c);
                    }
                }
            }
            2 => {
                let e = [
                    "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0000",
                ];
                out.extend_from_slice(e[r.below(e.len())].as_bytes());
            }
            3 | 4 => {
                let u = match r.below(8) {
                    0 => r.below(0x20) as u32,
                    1 => 0x20 + r.below(0x60) as u32,
                    2 => 0x80 + r.below(0x780) as u32,
                    3 => r.below(0x10000) as u32,
                    4 => 0xD800 + r.below(0x400) as u32,
                    5 => 0xDC00 + r.below(0x400) as u32,
                    6 => {
                        // A valid pair.
                        let h = 0xD800 + r.below(0x400) as u32;
                        hex4(r, out, h);
                        0xDC00 + r.below(0x400) as u32
                    }
                    _ => [0x2028, 0xFEFF, 0xFFFD, 0x7F, 0x22, 0x5C, 0x2F][r.below(7)],
                };
                hex4(r, out, u);
            }
            5 | 6 => out.extend_from_slice(r.pick(RAW_CHARS).as_bytes()),
            7 => out.extend_from_slice(r.pick(BAD_BYTES)),
            _ => out.push(0x80 + r.below(0x80) as u8),
        }
    }
}

pub fn string(r: &mut Rng, out: &mut Vec<u8>) {
    out.push(b'"');
    let n = r.below(6);
    string_content(r, out, n);
    out.push(b'"');
}

/// Keys that JavaScript orders specially, or that look as if it might.
const KEYS: &[&str] = &[
    "a",
    "b",
    "c",
    "type",
    "ts_ms",
    "__proto__",
    "constructor",
    "0",
    "1",
    "2",
    "7",
    "10",
    "01",
    "00",
    "-1",
    "-0",
    "1.0",
    "1e3",
    " 1",
    "4294967294",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "",
    "é",
    "\\u0031",
    "\\u0030",
    "\\u0061",
    "\\ud800",
    "\\ud83d\\ude00",
    "😀",
    "length",
];

pub fn key(r: &mut Rng, out: &mut Vec<u8>) {
    out.push(b'"');
    if r.one_in(8) {
        let n = 1 + r.below(3);
        string_content(r, out, n);
    } else if r.one_in(6) {
        out.extend_from_slice(format!("{}", r.below(30)).as_bytes());
    } else {
        out.extend_from_slice(r.pick(KEYS).as_bytes());
    }
    out.push(b'"');
}

/// JSON whitespace between tokens (never `\n`, which would end the line).
fn ws(r: &mut Rng, out: &mut Vec<u8>) {
    if r.one_in(4) {
        for _ in 0..1 + r.below(3) {
            out.push([b' ', b'\t', b'\r'][r.below(3)]);
        }
    }
}

pub fn value(r: &mut Rng, out: &mut Vec<u8>, depth: usize) {
    let kind = if depth >= 5 { r.below(4) } else { r.below(7) };
    match kind {
        0 => out.extend_from_slice(r.pick(&["true", "false", "null"]).as_bytes()),
        1 => number(r, out),
        2 | 3 => string(r, out),
        4 | 5 => {
            out.push(b'{');
            ws(r, out);
            let n = if r.one_in(10) {
                20 + r.below(30)
            } else {
                r.below(6)
            };
            for i in 0..n {
                if i > 0 {
                    out.push(b',');
                    ws(r, out);
                }
                key(r, out);
                ws(r, out);
                out.push(b':');
                ws(r, out);
                value(r, out, depth + 1);
                ws(r, out);
            }
            out.push(b'}');
        }
        _ => {
            out.push(b'[');
            ws(r, out);
            for i in 0..r.below(5) {
                if i > 0 {
                    out.push(b',');
                    ws(r, out);
                }
                value(r, out, depth + 1);
                ws(r, out);
            }
            out.push(b']');
        }
    }
}

/// What `String.prototype.trim` removes, and a few it does not.
const TRIM: &[&str] = &[
    " ", "\t", "\r", "\u{b}", "\u{c}", "\u{a0}", "\u{1680}", "\u{2000}", "\u{2007}", "\u{200a}",
    "\u{2028}", "\u{2029}", "\u{202f}", "\u{205f}", "\u{3000}", "\u{feff}",
];
const NOT_TRIM: &[&str] = &["\u{180e}", "\u{85}", "\u{200b}", "\u{2060}", "\u{fffe}"];

pub fn around(r: &mut Rng, out: &mut Vec<u8>) {
    if r.one_in(3) {
        for _ in 0..1 + r.below(3) {
            out.extend_from_slice(r.pick(TRIM).as_bytes());
        }
    }
    if r.one_in(50) {
        out.extend_from_slice(r.pick(NOT_TRIM).as_bytes());
    }
    if r.one_in(60) {
        out.extend_from_slice(r.pick(BAD_BYTES));
    }
}

/// Bytes inserted to break a line (or, inside a string, not to).
const BREAKERS: &[&[u8]] = &[
    b",",
    b"]",
    b"}",
    b"[",
    b"{",
    b":",
    b"\"",
    b"\\",
    b"\x01",
    b"\x0b",
    b"\x0c",
    b"\xff",
    b"\xc2\xa0",
    b"0",
    b"-",
    b"e",
    b".",
    b"+",
    b"NaN",
    b"x",
    b"\xe2\x80\xa8",
    b"\x7f",
    b"1",
];

/// A deep chain of objects and arrays, some of whose keys must move.
pub fn deep(r: &mut Rng, out: &mut Vec<u8>) {
    let n = 50 + r.below(600);
    let mut closers = Vec::new();
    for _ in 0..n {
        if r.one_in(2) {
            out.extend_from_slice(b"[");
            closers.push(&b"]"[..]);
        } else {
            out.extend_from_slice(if r.one_in(2) { b"{\"1\":" } else { b"{\"a\":" });
            closers.push(if r.one_in(2) { &b",\"0\":0}"[..] } else { b"}" });
        }
    }
    value(r, out, 5);
    for c in closers.into_iter().rev() {
        out.extend_from_slice(c);
    }
}

pub fn record(r: &mut Rng, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"type\":");
    string(r, out);
    out.extend_from_slice(b",\"ts_ms\":");
    number(r, out);
    for _ in 0..r.below(4) {
        out.push(b',');
        key(r, out);
        out.push(b':');
        value(r, out, 2);
    }
    out.push(b'}');
}

pub fn line(r: &mut Rng) -> Vec<u8> {
    let mut v = Vec::new();
    around(r, &mut v);
    match r.below(24) {
        0 => {} // blank, or only what `around` wrote
        1 => deep(r, &mut v),
        2..=5 => record(r, &mut v),
        _ => value(r, &mut v, 0),
    }
    around(r, &mut v);
    // Break a share of the lines: a byte inserted, removed, or the line cut.
    if r.one_in(5) && !v.is_empty() {
        let at = r.below(v.len() + 1);
        match r.below(4) {
            0 => {
                let b = r.pick(BREAKERS);
                v.splice(at..at, b.iter().copied());
            }
            1 if at < v.len() => {
                v.remove(at);
            }
            2 => v.truncate(at),
            _ => v
                .splice(at..at, r.pick(BAD_BYTES).iter().copied())
                .for_each(drop),
        }
    }
    debug_assert!(!v.contains(&b'\n'));
    v
}

pub fn lines(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut r = Rng(seed);
    (0..n).map(|_| line(&mut r)).collect()
}
