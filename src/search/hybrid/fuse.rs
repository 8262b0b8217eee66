//! Weighted reciprocal rank fusion: each ranking gives a record
//! `weight / (k + rank)` (rank 1 the best), a record's fused score is the
//! sum over the rankings that hold it, best first, ties in log order (by
//! offset). It needs no calibration between BM25 scores and cosines, which
//! live on scales of their own (Cormack, Clarke and Büttcher, SIGIR 2009,
//! with k = 60); the weight says how far one ranking is trusted against
//! the other.

/// The constant of reciprocal rank fusion.
pub(crate) const RRF_K: f64 = 60.0;

/// The records of `rankings` (offsets, best first, each once per ranking,
/// and the ranking's weight) with their fused scores, best first, ties by
/// offset.
pub(crate) fn rrf(rankings: &[(&[u64], f64)]) -> Vec<(u64, f64)> {
    let mut fused: Vec<(u64, f64)> = Vec::new();
    let mut at: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for (ranking, weight) in rankings {
        for (i, &offset) in ranking.iter().enumerate() {
            let s = weight / (RRF_K + (i + 1) as f64);
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
        let got = rrf(&[(&[10, 20, 30], 1.0), (&[30, 40, 10], 1.0)]);
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
        let one: Vec<u64> = rrf(&[(&[5, 3, 9], 1.0)]).iter().map(|x| x.0).collect();
        assert_eq!(one, [5, 3, 9]);
        // A record in both beats one ranked first in only one.
        let both = rrf(&[(&[1, 2], 1.0), (&[3, 2], 1.0)]);
        assert_eq!(both[0].0, 2);
        assert!(rrf(&[]).is_empty());
    }

    #[test]
    fn a_ranking_weighs_what_its_weight_says() {
        let s = |w: f64, r: f64| w / (60.0 + r);
        // Lexical 1, 2; vector (weight 0.3) 3, 1.
        let got = rrf(&[(&[1, 2], 1.0), (&[3, 1], 0.3)]);
        let order: Vec<u64> = got.iter().map(|x| x.0).collect();
        // The vector's first (3) falls below the lexical second (2):
        // 0.3/61 < 1/62. Equal weights would put 3 above 2.
        assert_eq!(order, [1, 2, 3]);
        assert!((got[0].1 - (s(1.0, 1.0) + s(0.3, 2.0))).abs() < 1e-12);
        assert!((got[2].1 - s(0.3, 1.0)).abs() < 1e-12);
        let equal: Vec<u64> = rrf(&[(&[1, 2], 1.0), (&[3, 1], 1.0)])
            .iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(equal, [1, 3, 2]);
        // Weight 0: the vector's records come after every lexical one, in
        // log order (all at 0), and do not reorder the lexical ranking.
        let zero: Vec<u64> = rrf(&[(&[7, 5], 1.0), (&[5, 2, 9], 0.0)])
            .iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(zero, [7, 5, 2, 9]);
    }
}
