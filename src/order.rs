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

/// The `ts_ms` whose [`ts_key`] is `key` (`-0` comes back as `0`).
#[inline]
pub fn key_ts(key: u64) -> f64 {
    let bits = if key >> 63 == 1 {
        key & !(1 << 63)
    } else {
        !key
    };
    f64::from_bits(bits)
}

/// Whether `records` is already in non-decreasing `ts_ms` order.
pub fn is_ordered(records: &[Record]) -> bool {
    records
        .windows(2)
        .all(|w| ts_key(w[0].ts) <= ts_key(w[1].ts))
}

/// Sorts `records` (in file order) by `ts_ms`, stably. Returns whether the
/// input was already in order.
///
/// An append-only log is nearly ordered: most records come after all earlier
/// ones, and a few arrive late. So the records that keep the running
/// maximum stay where they are (compacted in place), the late ones are taken
/// out and sorted on their own, and the two ordered lists are merged from
/// the back into the same buffer: O(n + k log k) for k late records, and no
/// second buffer of n records. Ties between the lists compare file offsets,
/// which are in file order, so the result is the stable sort's.
pub fn sort_records(records: &mut [Record], parallel: bool) -> bool {
    if is_ordered(records) {
        return true;
    }
    let mut late = Vec::new();
    let mut kept = 0;
    let mut max = 0u64;
    for i in 0..records.len() {
        let r = records[i];
        let k = ts_key(r.ts);
        if k >= max {
            max = k;
            records[kept] = r;
            kept += 1;
        } else {
            late.push(r);
        }
    }
    // Late records are in file order, so a stable sort by key keeps ties in
    // file order.
    if parallel {
        late.par_sort_by_key(|r| ts_key(r.ts));
    } else {
        late.sort_by_key(|r| ts_key(r.ts));
    }
    let order = |r: &Record| (ts_key(r.ts), r.offset);
    let (mut i, mut j, mut k) = (kept, late.len(), records.len());
    while j > 0 {
        k -= 1;
        if i > 0 && order(&records[i - 1]) > order(&late[j - 1]) {
            records[k] = records[i - 1];
            i -= 1;
        } else {
            records[k] = late[j - 1];
            j -= 1;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts: f64, offset: u64) -> Record {
        Record {
            ts,
            offset,
            len: 0,
            kind_start: 0,
            kind_len: 0,
            escape_extra: 0,
            flags: 0,
        }
    }

    #[test]
    fn late_record_sort_matches_a_stable_sort() {
        // Deterministic pseudo-random logs with late arrivals and ties.
        let mut x = 12345u64;
        for n in [0, 1, 2, 5, 50, 1000] {
            for late_share in [0, 3, 30, 100] {
                let mut v: Vec<Record> = (0..n)
                    .map(|i| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let base = (i / 3) as f64;
                        let ts = if (x % 100) < late_share {
                            base - (x % 40) as f64
                        } else {
                            base
                        };
                        rec(
                            if ts == 0.0 && x.is_multiple_of(2) {
                                -0.0
                            } else {
                                ts
                            },
                            i as u64,
                        )
                    })
                    .collect();
                let mut want = v.clone();
                want.sort_by_key(|r| ts_key(r.ts));
                for parallel in [false, true] {
                    let mut got = v.clone();
                    sort_records(&mut got, parallel);
                    assert_eq!(
                        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
                        want.iter().map(|r| r.offset).collect::<Vec<_>>(),
                        "n={n} late={late_share}%"
                    );
                }
                v.reverse();
            }
        }
    }

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
