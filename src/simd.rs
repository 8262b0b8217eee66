//! The SIMD code of the engine, in one place.
//!
//! One primitive is shared by the scanner and the escaper: a bitmask of the
//! bytes in a 32-byte block that stop a JSON string scan or need escaping
//! (`"`, `\`, and control characters below 0x20). On x86-64 it uses SSE2,
//! which every x86-64 CPU has (no runtime detection, no `target-feature`
//! flags), two 16-byte halves per block. Elsewhere, and when the `portable`
//! feature asks for it (so the fallback is tested), it is a plain loop the
//! compiler may vectorise by itself.
//!
//! The escaper's fast path, [`escape_quotes`], needs a byte shuffle and
//! POPCNT, so it checks the CPU at run time: AVX-512 with VBMI2 and BMI2
//! (64 bytes per step, `vpexpandb`: Intel since Ice Lake, AMD since Zen 4),
//! else AVX2 (32 bytes per step, most x86-64 CPUs since 2013), else SSSE3
//! (16 bytes per step, every x86-64 CPU since about 2008); where none is
//! there it declines, and the escaper uses its SSE2 block path.

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

/// The escaper's fast paths, narrowest first: [`escape_quotes`] uses the
/// widest one it is allowed that the CPU has (the tests force each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shuffle {
    /// No fast path: the caller's SSE2 block path does everything.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "only the tests turn the fast paths off")
    )]
    Off,
    /// SSSE3 `pshufb`, 16 bytes per step.
    #[cfg_attr(
        all(not(test), any(not(target_arch = "x86_64"), feature = "portable")),
        expect(dead_code, reason = "only x86-64 has this path outside the tests")
    )]
    Ssse3,
    /// AVX2 `vpshufb`, 32 bytes per step (then 16 for what is left).
    #[cfg_attr(
        all(not(test), any(not(target_arch = "x86_64"), feature = "portable")),
        expect(dead_code, reason = "only x86-64 has this path outside the tests")
    )]
    Avx2,
    /// AVX-512 VBMI2 `vpexpandb`, 64 bytes per step (then AVX2's paths).
    Avx512,
}

/// Copies `text[i..end]` to `out` from offset `w` with a backslash before
/// every `"` and `\`, 64, 32 or 16 bytes at a time (the widest path up to
/// `widest` that this CPU has), and returns where it stopped in both; `None`
/// when this CPU (or build) has no such fast path.
///
/// A chunk (64, 32 or 16 bytes) that holds a control character (rare in a log
/// line: a raw tab or newline between tokens) is written a byte at a time with
/// `unit`, which writes one escaped byte into the slice it is given and
/// returns its length. The run stops at `end`, or when fewer than 16 bytes
/// of `text` or 32 of `out` are left: the caller finishes the range. Like
/// the escaper's block path, it reads past `end` and may store bytes past
/// the returned offset in `out` (never past `out`'s end).
#[inline]
pub fn escape_quotes(
    text: &[u8],
    i: usize,
    end: usize,
    out: &mut [u8],
    w: usize,
    unit: fn(u8, &mut [u8]) -> usize,
    widest: Shuffle,
) -> Option<(usize, usize)> {
    #[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
    if std::arch::is_x86_feature_detected!("popcnt") {
        if widest >= Shuffle::Avx512
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vbmi2")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("bmi2")
            && std::arch::is_x86_feature_detected!("avx2")
        {
            // SAFETY: the CPU has every feature the function enables,
            // checked just above.
            return Some(unsafe { imp::escape_quotes_avx512(text, (i, w), end, out, unit) });
        }
        if widest >= Shuffle::Avx2 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 and POPCNT, checked just above.
            return Some(unsafe { imp::escape_quotes_avx2(text, (i, w), end, out, unit) });
        }
        if widest >= Shuffle::Ssse3 && std::arch::is_x86_feature_detected!("ssse3") {
            // SAFETY: the CPU has SSSE3 and POPCNT, checked just above.
            return Some(unsafe { imp::escape_quotes_ssse3(text, (i, w), end, out, unit) });
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), feature = "portable"))]
    let _ = (text, i, end, out, w, unit, widest);
    None
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

    /// For each 8-bit mask of the bytes to escape in 8 bytes of text, the
    /// `pshufb` pattern that spreads them over 8 + popcount(mask) bytes,
    /// taking a backslash (index 8: the shuffled register holds backslashes
    /// in its upper half) before each byte whose bit is set.
    #[repr(align(16))]
    struct Patterns([[u8; 16]; 256]);

    static EXPAND: Patterns = {
        let mut t = [[0x80u8; 16]; 256];
        let mut m = 0;
        while m < 256 {
            let mut o = 0;
            let mut j = 0;
            while j < 8 {
                if (m >> j) & 1 == 1 {
                    t[m][o] = 8;
                    o += 1;
                }
                t[m][o] = j as u8;
                o += 1;
                j += 1;
            }
            m += 1;
        }
        Patterns(t)
    };

    /// [`super::escape_quotes`] on a CPU with SSSE3 and POPCNT, from
    /// `(i, w)`.
    #[target_feature(enable = "ssse3,popcnt")]
    pub fn escape_quotes_ssse3(
        text: &[u8],
        (i, w): (usize, usize),
        end: usize,
        out: &mut [u8],
        unit: fn(u8, &mut [u8]) -> usize,
    ) -> (usize, usize) {
        use std::arch::x86_64::{
            _mm_load_si128, _mm_shuffle_epi8, _mm_storeu_si128, _mm_unpackhi_epi64,
            _mm_unpacklo_epi64,
        };
        // One chunk of `len` (at most 16) bytes at `i`, `w`; returns the new
        // `w`. The caller checked that 16 bytes of `text` and 32 of `out`
        // are there.
        let step = |i: usize, w: usize, len: usize, out: &mut [u8]| -> usize {
            let chunk: &[u8; 16] = text[i..i + 16].try_into().expect("16 bytes");
            let valid = if len == 16 { 0xFFFF } else { (1u32 << len) - 1 };
            let (stop, control) = half_masks(chunk);
            if control & valid != 0 {
                return one_at_a_time(&chunk[..len], w, out, unit);
            }
            // Only quotes and backslashes are left among the stop bytes.
            let m = stop & valid;
            let (lo, hi) = ((m & 0xFF) as usize, (m >> 8) as usize);
            let mid = w + 8 + lo.count_ones() as usize;
            // SAFETY: SSE2 is baseline and SSSE3 is enabled on the enclosing
            // function (its one caller checked the CPU). Each load reads the
            // 16 bytes of a 16-byte array (the pattern rows are 16-byte
            // aligned, as `_mm_load_si128` needs); each store writes the 16
            // bytes of a bounds-checked 16-byte slice of `out` (the second
            // store overwrites the first's unused tail).
            unsafe {
                let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
                let backslashes = _mm_set1_epi8(b'\\' as i8);
                let p = _mm_load_si128(EXPAND.0[lo].as_ptr().cast::<__m128i>());
                let a = _mm_shuffle_epi8(_mm_unpacklo_epi64(v, backslashes), p);
                let first = &mut out[w..w + 16];
                _mm_storeu_si128(first.as_mut_ptr().cast::<__m128i>(), a);
                let p = _mm_load_si128(EXPAND.0[hi].as_ptr().cast::<__m128i>());
                let b = _mm_shuffle_epi8(_mm_unpackhi_epi64(v, backslashes), p);
                let second = &mut out[mid..mid + 16];
                _mm_storeu_si128(second.as_mut_ptr().cast::<__m128i>(), b);
            }
            // Both halves were written whole; bytes past `end` count for nothing.
            mid + 8 + hi.count_ones() as usize - (16 - len)
        };
        chunks::<16>(text.len(), (i, w), end, out, step)
    }

    /// [`super::escape_quotes`] on a CPU with AVX2 and POPCNT, from
    /// `(i, w)`: 32 bytes per step, each 8-byte quarter spread by its own
    /// pattern row as in [`escape_quotes_ssse3`] (two quarters per
    /// `vpshufb`, one in each 128-bit lane), then that function for what is
    /// left.
    #[target_feature(enable = "avx2,popcnt")]
    pub fn escape_quotes_avx2(
        text: &[u8],
        (i, w): (usize, usize),
        end: usize,
        out: &mut [u8],
        unit: fn(u8, &mut [u8]) -> usize,
    ) -> (usize, usize) {
        use std::arch::x86_64::{
            __m256i, _mm_load_si128, _mm_storeu_si128, _mm256_blend_epi32, _mm256_castsi128_si256,
            _mm256_castsi256_si128, _mm256_cmpeq_epi8, _mm256_extracti128_si256,
            _mm256_inserti128_si256, _mm256_loadu_si256, _mm256_min_epu8, _mm256_movemask_epi8,
            _mm256_or_si256, _mm256_permute4x64_epi64, _mm256_set1_epi8, _mm256_shuffle_epi8,
        };
        // One chunk of `len` (at most 32) bytes at `i`, `w`; returns the new
        // `w`. The caller checked that 32 bytes of `text` and 64 of `out`
        // are there.
        let step = |i: usize, w: usize, len: usize, out: &mut [u8]| -> usize {
            let chunk: &[u8; 32] = text[i..i + 32].try_into().expect("32 bytes");
            let valid = if len == 32 {
                u32::MAX
            } else {
                (1u32 << len) - 1
            };
            // The worst case, 32 bytes to escape, writes 64 bytes.
            let room: &mut [u8; 64] = (&mut out[w..w + 64]).try_into().expect("64 bytes");
            // SAFETY: AVX2 is enabled on the enclosing function (its one
            // caller checked the CPU). The load reads the 32 bytes of
            // `chunk`; each pattern load reads a 16-byte row of `EXPAND`,
            // whose rows are 16-byte aligned as `_mm_load_si128` needs. The
            // four 16-byte stores go to `room` at offsets 0, `p1`, `p2` and
            // `p3`, each at most 24 + 8 bytes past the one before and `p3`
            // at most 48, so all of them lie inside its 64 bytes.
            let m = unsafe {
                let v = _mm256_loadu_si256(chunk.as_ptr().cast::<__m256i>());
                let backslashes = _mm256_set1_epi8(b'\\' as i8);
                let quote = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8));
                let backslash = _mm256_cmpeq_epi8(v, backslashes);
                // Unsigned v <= 0x1F exactly when min(v, 0x1F) == v.
                let control = _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1F)), v);
                if _mm256_movemask_epi8(control) as u32 & valid != 0 {
                    return one_at_a_time(&chunk[..len], w, out, unit);
                }
                let m = _mm256_movemask_epi8(_mm256_or_si256(quote, backslash)) as u32 & valid;
                // Quarters 0 and 1, then 2 and 3, each in a lane's low half
                // with backslashes in its high half (index 8 of a pattern).
                let a = _mm256_blend_epi32::<0b1100_1100>(
                    _mm256_permute4x64_epi64::<0b01_01_00_00>(v),
                    backslashes,
                );
                let b = _mm256_blend_epi32::<0b1100_1100>(
                    _mm256_permute4x64_epi64::<0b11_11_10_10>(v),
                    backslashes,
                );
                let row = |q: u32| {
                    _mm_load_si128(EXPAND.0[(m >> (8 * q) & 0xFF) as usize].as_ptr().cast())
                };
                let pa = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(row(0)), row(1));
                let pb = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(row(2)), row(3));
                let ra = _mm256_shuffle_epi8(a, pa);
                let rb = _mm256_shuffle_epi8(b, pb);
                let p1 = 8 + (m & 0xFF).count_ones() as usize;
                let p2 = 16 + (m & 0xFFFF).count_ones() as usize;
                let p3 = 24 + (m & 0xFF_FFFF).count_ones() as usize;
                let at = room.as_mut_ptr();
                _mm_storeu_si128(at.cast(), _mm256_castsi256_si128(ra));
                _mm_storeu_si128(at.add(p1).cast(), _mm256_extracti128_si256::<1>(ra));
                _mm_storeu_si128(at.add(p2).cast(), _mm256_castsi256_si128(rb));
                _mm_storeu_si128(at.add(p3).cast(), _mm256_extracti128_si256::<1>(rb));
                m
            };
            // Bytes past `end` were stored but count for nothing.
            w + len + m.count_ones() as usize
        };
        let (i, w) = chunks::<32>(text.len(), (i, w), end, out, step);
        escape_quotes_ssse3(text, (i, w), end, out, unit)
    }

    /// [`super::escape_quotes`] on a CPU with AVX-512 VBMI2 and BMI2, from
    /// `(i, w)`: 64 bytes per step, as two 32-byte halves. Where a half's
    /// bytes go is worked out in a 64-bit mask: each input byte gets two
    /// slots, a backslash slot (kept only if the byte is escaped: `pdep`
    /// spreads the escape mask to the even bits) and its own (the odd
    /// bits); `pext` of the odd bits at the kept slots gives the output
    /// positions of the input's bytes, which `vpexpandb` fills in order,
    /// with backslashes everywhere else. No table, one store per half.
    /// Then [`escape_quotes_avx2`] for what is left.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2,bmi2,avx2,popcnt")]
    pub fn escape_quotes_avx512(
        text: &[u8],
        (i, w): (usize, usize),
        end: usize,
        out: &mut [u8],
        unit: fn(u8, &mut [u8]) -> usize,
    ) -> (usize, usize) {
        use std::arch::x86_64::{
            __m512i, _mm512_castsi512_si256, _mm512_cmpeq_epi8_mask, _mm512_cmple_epu8_mask,
            _mm512_extracti64x4_epi64, _mm512_loadu_si512, _mm512_mask_expand_epi8,
            _mm512_set1_epi8, _mm512_storeu_si512, _mm512_zextsi256_si512, _pdep_u64, _pext_u64,
        };
        const EVEN: u64 = 0x5555_5555_5555_5555;
        const ODD: u64 = 0xAAAA_AAAA_AAAA_AAAA;
        let step = |i: usize, w: usize, len: usize, out: &mut [u8]| -> usize {
            let chunk: &[u8; 64] = text[i..i + 64].try_into().expect("64 bytes");
            let valid = if len == 64 {
                u64::MAX
            } else {
                (1u64 << len) - 1
            };
            // The worst case, 64 bytes to escape, writes 128 bytes.
            let room: &mut [u8; 128] = (&mut out[w..w + 128]).try_into().expect("128 bytes");
            // SAFETY: the enclosing function enables every feature used
            // (its one caller checked the CPU). The load reads the 64 bytes
            // of `chunk`; the two stores write 64 bytes of `room` each, at 0
            // and at `32 + popcount(lo) <= 64`.
            let m = unsafe {
                let v = _mm512_loadu_si512(chunk.as_ptr().cast::<__m512i>());
                let backslashes = _mm512_set1_epi8(b'\\' as i8);
                if _mm512_cmple_epu8_mask(v, _mm512_set1_epi8(0x1F)) & valid != 0 {
                    return one_at_a_time(&chunk[..len], w, out, unit);
                }
                let m = (_mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(b'"' as i8))
                    | _mm512_cmpeq_epi8_mask(v, backslashes))
                    & valid;
                // Slot 2k holds byte k's backslash (kept if escaped), slot
                // 2k + 1 the byte itself (always kept); per 32-byte half.
                let spread = |half: u64| _pext_u64(ODD, _pdep_u64(half, EVEN) | ODD);
                let lo = m & 0xFFFF_FFFF;
                let at = room.as_mut_ptr();
                _mm512_storeu_si512(
                    at.cast(),
                    _mm512_mask_expand_epi8(
                        backslashes,
                        spread(lo),
                        _mm512_zextsi256_si512(_mm512_castsi512_si256(v)),
                    ),
                );
                _mm512_storeu_si512(
                    at.add(32 + lo.count_ones() as usize).cast(),
                    _mm512_mask_expand_epi8(
                        backslashes,
                        spread(m >> 32),
                        _mm512_zextsi256_si512(_mm512_extracti64x4_epi64::<1>(v)),
                    ),
                );
                m
            };
            // Bytes past `end` were stored but count for nothing.
            w + len + m.count_ones() as usize
        };
        let (i, w) = chunks::<64>(text.len(), (i, w), end, out, step);
        escape_quotes_avx2(text, (i, w), end, out, unit)
    }

    /// Runs an escaper's `step(i, w, len, out)` (escape the `len` bytes of
    /// `text` at `i` to `out` at `w`, return the new `w`) over `text[i..end]`
    /// in chunks of `N` bytes while `N` bytes of `text` and the worst case,
    /// `2 * N`, of `out` are there: whole chunks, then the range's last,
    /// partial one if it can be read. Returns where it stopped in both.
    #[inline(always)]
    fn chunks<const N: usize>(
        text_len: usize,
        (mut i, mut w): (usize, usize),
        end: usize,
        out: &mut [u8],
        step: impl Fn(usize, usize, usize, &mut [u8]) -> usize,
    ) -> (usize, usize) {
        let end = end.min(text_len);
        while i + N <= end && w + 2 * N <= out.len() {
            w = step(i, w, N, out);
            i += N;
        }
        if i < end && i + N <= text_len && w + 2 * N <= out.len() {
            w = step(i, w, end - i, out);
            i = end;
        }
        (i, w)
    }

    /// Escapes `bytes` one at a time with `unit` into `out` at `w` (a chunk
    /// with a control character); returns the new `w`.
    #[inline(always)]
    fn one_at_a_time(
        bytes: &[u8],
        mut w: usize,
        out: &mut [u8],
        unit: fn(u8, &mut [u8]) -> usize,
    ) -> usize {
        for &b in bytes {
            w += unit(b, &mut out[w..]);
        }
        w
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
