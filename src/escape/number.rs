//! Numbers written as JavaScript's `String(x)` writes them: shortest
//! round-trip digits, `-0` as `0`, exponents from 1e21 and below 1e-6.

use super::copy_short;

/// A number formatted as JavaScript's `String(x)` formats it.
pub struct JsNumber {
    buf: [u8; 32],
    len: usize,
}

impl JsNumber {
    /// Formats `x` (never NaN: JSON cannot express it).
    pub fn new(x: f64) -> Self {
        let mut buf = [0u8; 32];
        let len = if x == 0.0 {
            buf[0] = b'0'; // also -0, as JavaScript prints it
            1
        } else if x.is_infinite() {
            let t: &[u8] = if x > 0.0 { b"Infinity" } else { b"-Infinity" };
            buf[..t.len()].copy_from_slice(t);
            t.len()
        } else if x.fract() == 0.0 && x.abs() < 9007199254740992.0 {
            // Exactly representable integers print as all their digits.
            let mut b = itoa::Buffer::new();
            let t = b.format(x as i64).as_bytes();
            copy_short(&mut buf[..t.len()], t);
            t.len()
        } else {
            let mut b = ryu_js::Buffer::new();
            let t = b.format(x).as_bytes();
            buf[..t.len()].copy_from_slice(t);
            t.len()
        };
        JsNumber { buf, len }
    }

    /// The formatted text (ASCII).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// `JsNumber::new(x).as_bytes().len()`, without formatting the common
    /// case (an integer, as timestamps are): renderers size every message
    /// before writing it.
    #[inline]
    pub fn len_of(x: f64) -> usize {
        if x != 0.0 && x.fract() == 0.0 && x.abs() < 9007199254740992.0 {
            let i = x as i64;
            let digits = i.unsigned_abs().ilog10() as usize + 1;
            digits + usize::from(i < 0)
        } else {
            JsNumber::new(x).len
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers_like_javascript() {
        let f = |x: f64| {
            let s = String::from_utf8(JsNumber::new(x).as_bytes().to_vec()).unwrap();
            assert_eq!(JsNumber::len_of(x), s.len(), "{x}");
            s
        };
        assert_eq!(f(-0.0), "0");
        assert_eq!(f(1000.0), "1000");
        assert_eq!(f(1.5), "1.5");
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1e20), "100000000000000000000");
        assert_eq!(f(12345678901234567890.0), "12345678901234567000");
        assert_eq!(f(f64::INFINITY), "Infinity");
        assert_eq!(f(-1e-7), "-1e-7");
        assert_eq!(f(1700000000123.0), "1700000000123");
        // Every digit count and sign at the edges `len_of` computes itself.
        let mut p = 1.0f64;
        for _ in 0..17 {
            for x in [p - 1.0, p, p + 1.0, 2.5 * p] {
                f(x);
                f(-x);
            }
            p *= 10.0;
        }
        for x in [
            9007199254740991.0,
            9007199254740992.0,
            9007199254740993.0,
            0.5,
            1e-7,
        ] {
            f(x);
            f(-x);
        }
    }
}
