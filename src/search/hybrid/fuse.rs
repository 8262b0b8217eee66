//! Reciprocal rank fusion: each ranking gives a record `1 / (k + rank)`
//! (rank 1 the best), a record's fused score is the sum over the rankings
//! that hold it, best first, ties in log order (by offset). It needs no
//! calibration between BM25 scores and cosines, which live on scales of
//! their own (Cormack, Clarke and Büttcher, SIGIR 2009, with k = 60).

/// The constant of reciprocal rank fusion.
pub(crate) const RRF_K: f64 = 60.0;

/// The records of `rankings` (offsets, best first, each once per ranking)
/// with their fused scores, best first, ties by offset.
pub(crate) fn rrf(rankings: &[&[u64]]) -> Vec<(u64, f64)> {
    let mut fused: Vec<(u64, f64)> = Vec::new();
    let mut at: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for ranking in rankings {
        for (i, &offset) in ranking.iter().enumerate() {
            let s = 1.0 / (RRF_K + (i + 1) as f64);
            match at.get(&offset) {
                Some(&j) => fused[j].1 += s,
                None => {
                    at.insert(offset, fused.len());
                    fused.push((offset, s));
                }
            }
        }
    }
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_sums_reciprocal_ranks_and_breaks_ties_in_log_order() {
        // Lexical: 10, 20, 30; vector: 30, 40, 10.
        let got = rrf(&[&[10, 20, 30], &[30, 40, 10]]);
        let s = |r: f64| 1.0 / (60.0 + r);
        let want = [
            // 10: 1st and 3rd; 30: 3rd and 1st — equal, log order.
            (10, s(1.0) + s(3.0)),
            (30, s(3.0) + s(1.0)),
            // 20 and 40: both 2nd once — equal, log order.
            (20, s(2.0)),
            (40, s(2.0)),
        ];
        assert_eq!(got.len(), want.len());
        for ((o, f), (wo, wf)) in got.iter().zip(want) {
            assert_eq!(*o, wo);
            assert!((f - wf).abs() < 1e-12, "{o}: {f} vs {wf}");
        }
        // One ranking alone keeps its order.
        let one: Vec<u64> = rrf(&[&[5, 3, 9]]).iter().map(|x| x.0).collect();
        assert_eq!(one, [5, 3, 9]);
        // A record in both beats one ranked first in only one.
        let both = rrf(&[&[1, 2], &[3, 2]]);
        assert_eq!(both[0].0, 2);
        assert!(rrf(&[]).is_empty());
    }
}
