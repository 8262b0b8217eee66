//! Stable ordering of records by `ts_ms`.
//!
//! Records compare by the numeric value of `ts_ms` as a double, `-0` equal to
//! `0`, ties in file order — what `entries.sort((a, b) => a.ts_ms - b.ts_ms)`
//! does in JavaScript. A log that is already in order (the common case for an
//! append-only log) is detected in one pass and left alone.

use rayon::iter::{IntoParallelIterator, ParallelIterator};
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
/// out, and [`merge_late`] puts them back in order: O(n + k log k) for k late
/// records, and no second buffer of n records. (The replay splits the
/// records this way while joining its chunks, so it calls [`merge_late`]
/// directly.)
pub fn sort_records(records: &mut Vec<Record>, parallel: bool) -> bool {
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
    records.truncate(kept);
    merge_late(records, late, parallel);
    false
}

/// Sorts `late` and merges it into `records`, in place, stably: `records`
/// are in `ts_ms` order (each at least as new as every one before it, in
/// file order), `late` are the log's other records, in file order. Ties
/// between the two lists compare file offsets, which are in file order, so
/// the result is what a stable sort of all records in file order gives.
///
/// With `parallel`, the merge is cut into one part per thread at equal
/// output positions (each part's split of the two lists found by binary
/// search) and the parts are merged at once.
pub fn merge_late(records: &mut Vec<Record>, mut late: Vec<Record>, parallel: bool) {
    if late.is_empty() {
        return;
    }
    sort_late(&mut late, parallel);
    merge_sorted_late(records, &late, parallel);
}

/// Sorts late records (in file order) by `ts_ms`, stably: ties stay in file
/// order, as [`merge_late`] needs them.
pub(crate) fn sort_late(late: &mut [Record], parallel: bool) {
    if parallel {
        late.par_sort_by_key(|r| ts_key(r.ts));
    } else {
        late.sort_by_key(|r| ts_key(r.ts));
    }
}

/// [`merge_late`] for late records already sorted by [`sort_late`].
pub(crate) fn merge_sorted_late(records: &mut Vec<Record>, late: &[Record], parallel: bool) {
    if late.is_empty() {
        return;
    }
    let parts = if parallel && records.len() + late.len() >= PARALLEL_MERGE_MIN {
        rayon::current_num_threads()
    } else {
        1
    };
    merge_in_parts(records, late, parts);
}

/// Below this many records a merge runs on one thread.
const PARALLEL_MERGE_MIN: usize = 1 << 16;

/// The merge order: `ts_ms`, then file offset (unique per record).
#[inline]
pub(crate) fn order(r: &Record) -> (u64, u64) {
    (ts_key(r.ts), r.offset)
}

/// Merges sorted `late` into sorted `records` in place, cut into `parts`
/// parts of equal output length that run in parallel.
///
/// Part `j` writes output positions `o[j]..o[j + 1]`, merging the kept
/// records `i[j]..i[j + 1]` with the late ones `l[j]..l[j + 1]` (so
/// `o[j] = i[j] + l[j]`), from the back like a serial in-place merge. Its
/// output range is all it touches: the kept records it reads lie before
/// `i[j + 1] <= o[j + 1]`, and those before `o[j]` (at most `l[j]` of them,
/// overwritten by part `j - 1`) are copied aside first.
fn merge_in_parts(records: &mut Vec<Record>, late: &[Record], parts: usize) {
    let kept = records.len();
    let n = kept + late.len();
    let parts = parts.clamp(1, n);
    // The output's boundaries, and how many kept records come before each.
    let o: Vec<usize> = (0..=parts).map(|j| j * n / parts).collect();
    let i: Vec<usize> = o.iter().map(|&o| co_rank(records, late, o)).collect();
    let heads: Vec<Vec<Record>> = (0..parts)
        .map(|j| records[i[j]..i[j + 1].min(o[j])].to_vec())
        .collect();
    // The length grows to n; what the extension holds is overwritten.
    records.extend_from_slice(late);
    let mut pieces = Vec::with_capacity(parts);
    let mut rest = &mut records[..];
    for j in 0..parts {
        let (piece, tail) = rest.split_at_mut(o[j + 1] - o[j]);
        pieces.push((j, piece));
        rest = tail;
    }
    let merge = |(j, out): (usize, &mut [Record])| {
        let (i0, i1) = (i[j], i[j + 1]);
        let (l0, l1) = (o[j] - i0, o[j + 1] - i1);
        let head = &heads[j];
        // Kept record `x` (absolute index): aside, or still in place in `out`.
        let kept_at = |out: &[Record], x: usize| {
            if x < i0 + head.len() {
                head[x - i0]
            } else {
                out[x - o[j]]
            }
        };
        let (mut x, mut y, mut k) = (i1, l1, out.len());
        while y > l0 {
            k -= 1;
            if x > i0 && order(&kept_at(out, x - 1)) > order(&late[y - 1]) {
                out[k] = kept_at(out, x - 1);
                x -= 1;
            } else {
                out[k] = late[y - 1];
                y -= 1;
            }
        }
        // The kept records left move up by `l0`.
        if l0 > 0 {
            while x > i0 {
                k -= 1;
                x -= 1;
                out[k] = kept_at(out, x);
            }
        }
    };
    if parts == 1 {
        pieces.into_iter().for_each(merge);
    } else {
        pieces.into_par_iter().for_each(merge);
    }
}

/// How many of the first `o` records of the merged output are kept records:
/// the `x` where `records[x - 1]` and `late[o - x - 1]` come before both
/// `records[x]` and `late[o - x]`.
pub(crate) fn co_rank(records: &[Record], late: &[Record], o: usize) -> usize {
    co_rank_within(
        records,
        late,
        o,
        o.saturating_sub(late.len()),
        o.min(records.len()),
    )
}

/// [`co_rank`], known to lie in `lo..=hi` (from the co-rank of a nearby
/// output position): the search reads only records in that range.
pub(crate) fn co_rank_within(
    records: &[Record],
    late: &[Record],
    o: usize,
    mut lo: usize,
    mut hi: usize,
) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if order(&records[mid]) < order(&late[o - mid - 1]) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts: f64, offset: u64) -> Record {
        Record {
            ts,
            offset,
            len: 0,
            escape_extra: 0,
            flags: 0,
            kind: 0,
        }
    }

    #[test]
    fn late_record_sort_matches_a_stable_sort() {
        // Deterministic pseudo-random logs with late arrivals and ties.
        let mut x = 12345u64;
        for n in [0, 1, 2, 5, 50, 1000, 20_000] {
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
                // The merge cut into any number of parts (more parts than
                // records too) gives the same order.
                for parts in [1, 2, 3, 7, 64, 2000] {
                    let mut kept = Vec::new();
                    let mut late = Vec::new();
                    let mut max = 0;
                    for r in &v {
                        if ts_key(r.ts) >= max {
                            max = ts_key(r.ts);
                            kept.push(*r);
                        } else {
                            late.push(*r);
                        }
                    }
                    late.sort_by_key(|r| ts_key(r.ts));
                    if late.is_empty() {
                        continue;
                    }
                    merge_in_parts(&mut kept, &late, parts);
                    assert_eq!(
                        kept.iter().map(|r| r.offset).collect::<Vec<_>>(),
                        want.iter().map(|r| r.offset).collect::<Vec<_>>(),
                        "n={n} late={late_share}% parts={parts}"
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
