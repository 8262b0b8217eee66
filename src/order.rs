//! Stable ordering of records by `ts_ms`.
//!
//! Records compare by the numeric value of `ts_ms` as a double, `-0` equal to
//! `0`, ties in file order — what `entries.sort((a, b) => a.ts_ms - b.ts_ms)`
//! does in JavaScript. A log that is already in order (the common case for an
//! append-only log) is detected in one pass and left alone.

use rayon::slice::ParallelSliceMut;

use crate::parse::Record;

/// A `u64` whose unsigned order is the numeric order of `ts` (with `-0`
/// equal to `0`). `ts` is never NaN: JSON cannot express it.
#[inline]
pub fn ts_key(ts: f64) -> u64 {
    let ts = if ts == 0.0 { 0.0 } else { ts };
    let bits = ts.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// Whether `records` is already in non-decreasing `ts_ms` order.
pub fn is_ordered(records: &[Record]) -> bool {
    records
        .windows(2)
        .all(|w| ts_key(w[0].ts) <= ts_key(w[1].ts))
}

/// Sorts `records` by `ts_ms`, stably; `parallel` uses rayon's stable merge
/// sort. Returns whether the input was already in order.
pub fn sort_records(records: &mut [Record], parallel: bool) -> bool {
    if is_ordered(records) {
        return true;
    }
    if parallel {
        records.par_sort_by_key(|r| ts_key(r.ts));
    } else {
        records.sort_by_key(|r| ts_key(r.ts));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_orders_like_numbers() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -1.5,
            -0.0,
            0.0,
            5e-324,
            1.0,
            1e21,
            f64::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(ts_key(w[0]) <= ts_key(w[1]), "{w:?}");
        }
        assert_eq!(ts_key(-0.0), ts_key(0.0));
        assert!(ts_key(-1.5) < ts_key(-0.0));
    }
}
