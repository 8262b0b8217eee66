//! Vectors kept in 8 bits: each is normalised to unit length, then stored
//! as `i8` values with one `f32` scale (`x ≈ q × scale`, `scale` =
//! max |x| / 127), so that a cosine similarity is an integer dot product
//! times two scales. Scoring is brute force over every vector kept: with
//! AVX2 when the processor has it (sign-extended to 16 bits, multiplied and
//! added in pairs, 16 values an instruction), else with portable code.

/// `v` normalised and quantised into `out` (cleared first): its scale, or
/// `None` when `v` has no direction (all zero, or a value not finite).
pub(crate) fn quantize(v: &[f32], out: &mut Vec<i8>) -> Option<f32> {
    out.clear();
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>();
    let norm = norm.sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return None;
    }
    let max = v
        .iter()
        .map(|x| (f64::from(*x) / norm).abs())
        .fold(0.0f64, f64::max);
    if max == 0.0 {
        return None;
    }
    let scale = max / 127.0;
    out.extend(
        v.iter()
            .map(|x| (f64::from(*x) / norm / scale).round().clamp(-127.0, 127.0) as i8),
    );
    Some(scale as f32)
}

/// The dot product of two quantised vectors of one length.
#[inline]
pub(crate) fn dot(a: &[i8], b: &[i8]) -> i32 {
    debug_assert_eq!(a.len(), b.len());
    // Thirty-two lanes of sums: the loop vectorises (widening multiplies)
    // on the baseline x86-64 as well as the others, with no `unsafe`; on a
    // million vectors the scan is bound by memory more than by arithmetic.
    let mut lanes = [0i32; 32];
    let mut ca = a.chunks_exact(32);
    let mut cb = b.chunks_exact(32);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for k in 0..32 {
            lanes[k] += i32::from(x[k]) * i32::from(y[k]);
        }
    }
    lanes.iter().sum::<i32>() + dot_plain(ca.remainder(), cb.remainder())
}

/// The dot product one pair at a time: the tails the lanes leave.
#[inline]
fn dot_plain(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum()
}

/// The `m` best of `count` vectors of `dims` values in `data` for `query`
/// (quantised, its scale left out: it ranks nothing), as (index, cosine
/// without the query's scale), best first, ties in index order. Vectors
/// whose scale is 0 (kept without one), and those with nothing in common
/// with the query (a cosine of 0 or less), are left out.
pub(crate) fn top(query: &[i8], data: &[i8], scales: &[f32], m: usize) -> Vec<(usize, f32)> {
    use rayon::prelude::*;
    let dims = query.len();
    if dims == 0 || m == 0 {
        return Vec::new();
    }
    // Pieces scored in parallel, each keeping its own best `m`.
    const PIECE: usize = 8192;
    let best = |i0: usize, piece: &[i8]| -> Vec<(usize, f32)> {
        let mut dots = Vec::with_capacity(PIECE);
        dots_of(query, piece, &mut dots);
        let mut out: Vec<(usize, f32)> = dots
            .iter()
            .enumerate()
            .filter_map(|(j, &d)| {
                let s = scales[i0 + j];
                (s != 0.0 && d > 0).then(|| (i0 + j, d as f32 * s))
            })
            .collect();
        keep_best(&mut out, m);
        out
    };
    let mut all: Vec<(usize, f32)> = data
        .par_chunks(PIECE * dims)
        .enumerate()
        .flat_map_iter(|(p, piece)| best(p * PIECE, piece))
        .collect();
    keep_best(&mut all, m);
    all
}

/// The dot products of `query` with each vector of `piece`, onto `out`.
fn dots_of(query: &[i8], piece: &[i8], out: &mut Vec<i32>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: `avx2::dots` requires AVX2 of the processor, and it was
        // detected just above; it needs nothing else.
        unsafe { avx2::dots(query, piece, out) };
        return;
    }
    out.extend(piece.chunks_exact(query.len()).map(|v| dot(query, v)));
}

/// The dot products with AVX2, without `unsafe` inside: the intrinsics
/// are safe where the feature is enabled, and the loads go through
/// `bytemuck`.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m128i, _mm256_add_epi32, _mm256_cvtepi8_epi16, _mm256_madd_epi16, _mm256_setzero_si256,
    };

    #[target_feature(enable = "avx2")]
    pub(super) fn dots(query: &[i8], piece: &[i8], out: &mut Vec<i32>) {
        for v in piece.chunks_exact(query.len()) {
            out.push(dot(query, v));
        }
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn dot(a: &[i8], b: &[i8]) -> i32 {
        let mut acc = _mm256_setzero_si256();
        let mut ca = a.chunks_exact(16);
        let mut cb = b.chunks_exact(16);
        for (x, y) in (&mut ca).zip(&mut cb) {
            let x: __m128i = bytemuck::pod_read_unaligned(bytemuck::cast_slice(x));
            let y: __m128i = bytemuck::pod_read_unaligned(bytemuck::cast_slice(y));
            let p = _mm256_madd_epi16(_mm256_cvtepi8_epi16(x), _mm256_cvtepi8_epi16(y));
            acc = _mm256_add_epi32(acc, p);
        }
        let lanes: [i32; 8] = bytemuck::cast(acc);
        lanes.iter().sum::<i32>() + super::dot_plain(ca.remainder(), cb.remainder())
    }
}

/// Keeps the best `m` of `v`, sorted best first, ties by index.
fn keep_best(v: &mut Vec<(usize, f32)>, m: usize) {
    let order = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if v.len() > m {
        v.select_nth_unstable_by(m - 1, order);
        v.truncate(m);
    }
    v.sort_unstable_by(order);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantised_cosines_are_close_to_the_exact_ones() {
        let a: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0)
            .collect();
        let b: Vec<f32> = (0..64)
            .map(|i| ((i * 53 % 13) as f32 - 6.0) / 2.0)
            .collect();
        let exact = {
            let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
            a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>() / (n(&a) * n(&b))
        };
        let (mut qa, mut qb) = (Vec::new(), Vec::new());
        let sa = quantize(&a, &mut qa).unwrap();
        let sb = quantize(&b, &mut qb).unwrap();
        let approx = dot(&qa, &qb) as f32 * sa * sb;
        assert!((approx - exact).abs() < 0.02, "{approx} vs {exact}");
        assert_eq!(quantize(&[0.0; 8], &mut qa), None);
        assert_eq!(quantize(&[f32::NAN, 1.0], &mut qa), None);
        // Unit length: a vector's cosine with itself is about 1.
        assert!((dot(&qa[..0], &qb[..0])) == 0);
        let self_cos = dot(&qb, &qb) as f32 * sb * sb;
        assert!((self_cos - 1.0).abs() < 0.01, "{self_cos}");
    }

    #[test]
    fn every_way_of_scanning_gives_the_portable_dot_products() {
        // 100 vectors of 37 values (a remainder past the 16- and 32-wide
        // loops), the extremes included.
        let dims = 37;
        let data: Vec<i8> = (0..100 * dims)
            .map(|i| match i % 11 {
                0 => 127,
                1 => -127,
                _ => ((i * 2_654_435_761usize) >> 7) as i8,
            })
            .collect();
        let query: Vec<i8> = (0..dims).map(|i| (i as i8).wrapping_mul(29)).collect();
        let naive: Vec<i32> = data
            .chunks_exact(dims)
            .map(|v| {
                v.iter()
                    .zip(&query)
                    .map(|(a, b)| i32::from(*a) * i32::from(*b))
                    .sum()
            })
            .collect();
        let portable: Vec<i32> = data.chunks_exact(dims).map(|v| dot(&query, v)).collect();
        assert_eq!(portable, naive);
        let mut scanned = Vec::new();
        dots_of(&query, &data, &mut scanned);
        assert_eq!(scanned, naive);
    }

    #[test]
    fn top_keeps_the_best_in_order_and_leaves_unscaled_ones_out() {
        // Four 2-dimensional vectors; the query points along the first axis.
        let data: Vec<i8> = vec![10, 0, 0, 10, 127, 0, 127, 0];
        let scales = [1.0, 1.0, 0.0, 0.5];
        let got = top(&[127, 0], &data, &scales, 3);
        let idx: Vec<usize> = got.iter().map(|g| g.0).collect();
        // Index 2 has no vector, 1 nothing in common; 3 (127 × 0.5) beats
        // 0 (10 × 1).
        assert_eq!(idx, [3, 0]);
        assert_eq!(top(&[127, 0], &data, &scales, 1)[0].0, 3);
    }
}
