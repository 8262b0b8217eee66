//! One SIMD primitive shared by the scanner and the escaper: a bitmask of the
//! bytes in a 32-byte block that stop a JSON string scan or need escaping
//! (`"`, `\`, and control characters below 0x20).
//!
//! On x86-64 it uses SSE2, which every x86-64 CPU has (no runtime detection,
//! no `target-feature` flags), two 16-byte halves per block. Elsewhere, and
//! when the `portable` feature asks for it (so the fallback is tested), it is
//! a plain loop the compiler may vectorise by itself.

/// Bytes per block.
pub const BLOCK: usize = 32;

/// Bit `k` is set when `block[k]` is `"`, `\` or below 0x20.
#[inline(always)]
pub fn stop_mask(block: &[u8; BLOCK]) -> u32 {
    imp::stop_mask(block)
}

/// Bit `k` is set when `block[k]` is below 0x20.
#[inline(always)]
pub fn control_mask(block: &[u8; BLOCK]) -> u32 {
    imp::control_mask(block)
}

#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
mod imp {
    use super::BLOCK;
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };

    /// The stop and control masks of 16 bytes.
    #[inline(always)]
    fn half_masks(bytes: &[u8; 16]) -> (u32, u32) {
        // SAFETY: SSE2 is part of the x86-64 baseline, so every intrinsic
        // here is available on any CPU this code runs on; the one load reads
        // exactly the 16 bytes of `bytes` and `loadu` needs no alignment.
        unsafe {
            let v = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
            let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
            // Unsigned v <= 0x1F exactly when min(v, 0x1F) == v.
            let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v);
            let stop = _mm_or_si128(_mm_or_si128(quote, backslash), control);
            (
                _mm_movemask_epi8(stop) as u32 & 0xFFFF,
                _mm_movemask_epi8(control) as u32 & 0xFFFF,
            )
        }
    }

    #[inline(always)]
    fn halves(block: &[u8; BLOCK]) -> (&[u8; 16], &[u8; 16]) {
        let (lo, hi) = block.split_at(16);
        (
            lo.try_into().expect("16 bytes"),
            hi.try_into().expect("16 bytes"),
        )
    }

    #[inline(always)]
    pub fn stop_mask(block: &[u8; BLOCK]) -> u32 {
        let (lo, hi) = halves(block);
        half_masks(lo).0 | half_masks(hi).0 << 16
    }

    #[inline(always)]
    pub fn control_mask(block: &[u8; BLOCK]) -> u32 {
        let (lo, hi) = halves(block);
        half_masks(lo).1 | half_masks(hi).1 << 16
    }
}

#[cfg(any(not(target_arch = "x86_64"), feature = "portable"))]
mod imp {
    use super::BLOCK;

    #[inline(always)]
    pub fn stop_mask(block: &[u8; BLOCK]) -> u32 {
        let mut m = 0u32;
        for (k, &b) in block.iter().enumerate() {
            m |= (((b == b'"') | (b == b'\\') | (b < 0x20)) as u32) << k;
        }
        m
    }

    #[inline(always)]
    pub fn control_mask(block: &[u8; BLOCK]) -> u32 {
        let mut m = 0u32;
        for (k, &b) in block.iter().enumerate() {
            m |= ((b < 0x20) as u32) << k;
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_match_a_byte_loop() {
        let mut block = [0u8; BLOCK];
        for seed in 0u32..2000 {
            let mut x = seed.wrapping_mul(2_654_435_761) | 1;
            for b in block.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                // Mostly the interesting bytes, and every byte value over the run.
                *b = match x % 8 {
                    0 => b'"',
                    1 => b'\\',
                    2 => (x >> 8) as u8 % 0x21,
                    3 => 0x80 | (x >> 8) as u8,
                    _ => (x >> 8) as u8,
                };
            }
            let mut stop = 0u32;
            let mut control = 0u32;
            for (k, &b) in block.iter().enumerate() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    stop |= 1 << k;
                }
                if b < 0x20 {
                    control |= 1 << k;
                }
            }
            assert_eq!(stop_mask(&block), stop, "{block:?}");
            assert_eq!(control_mask(&block), control, "{block:?}");
        }
    }
}
