//! Fusing the words' ranking with the vectors': each score brought to a
//! common scale within its own ranking, then added, the vectors' weighted.
//!
//! A record's lexical part is its score over the best lexical score (1
//! for the first, between 0 and 1 for the rest; never more than the part
//! of a record the words rank above it); its vector part is its
//! cosine placed between the lowest and the highest cosine of the
//! vectors' [`DEPTH`] candidates (1 for the nearest, 0 for the last; the
//! lowest is 0 when fewer records than that have a positive cosine),
//! times the weight. So the vectors can lift a record by at most the weight: a
//! record the words score more than `weight` above another's share of
//! the top stays above it whatever the model says, and the words'
//! confident top is kept. Where the words are unsure (scores close
//! together, or none), the vectors decide. Rank fusion (1/(60 + rank))
//! gave no such guarantee: there, lexical ranks 1 and 10 differ by less
//! than a weak model's spread, and a model weaker than the words pushed
//! their first hits down.
//!
//! Both rankings are taken [`DEPTH`] deep whatever the limit, so that
//! the first k hits of a deeper search are those of a search for k.

/// Candidates taken from each ranking and fused; a search for more adds
/// the rest after them, the lexical ones first.
pub(crate) const DEPTH: usize = 100;

/// The records of the `lexical` and `vector` rankings (offset and score,
/// best first, each once), the first [`DEPTH`] of each fused, best
/// first, ties in log order, with their fused scores; then the rest of
/// `lexical`, then the rest of `vector`, with theirs (the lexical part
/// alone, then the vector part alone).
pub(crate) fn fuse(lexical: &[(u64, f64)], vector: &[(u64, f64)], weight: f64) -> Vec<(u64, f64)> {
    let (lex_head, lex_tail) = lexical.split_at(lexical.len().min(DEPTH));
    let (vec_head, vec_tail) = vector.split_at(vector.len().min(DEPTH));
    let lex_part = scale(lex_head.first().map_or(0.0, |h| h.1), 0.0);
    // The lowest cosine is the 100th; with fewer candidates every record
    // of a positive cosine is among them, and the floor is 0.
    let floor = match vec_head.last() {
        Some(last) if vec_head.len() == DEPTH => last.1,
        _ => 0.0,
    };
    let vec_part = scale(vec_head.first().map_or(0.0, |h| h.1), floor);
    let mut fused: Vec<(u64, f64)> = Vec::new();
    let mut at: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut add = |fused: &mut Vec<(u64, f64)>, offset: u64, s: f64| match at.get(&offset) {
        Some(&j) => fused[j].1 += s,
        None => {
            at.insert(offset, fused.len());
            fused.push((offset, s));
        }
    };
    // The words' parts never rise down their ranking: a record that the
    // ranking puts below another (a neighbour given its share alone, above
    // records of a higher BM25 further down) keeps its place.
    let mut lowest = 1.0f64;
    for &(offset, score) in lex_head {
        lowest = lowest.min(lex_part(score));
        add(&mut fused, offset, lowest);
    }
    for &(offset, cosine) in vec_head {
        add(&mut fused, offset, weight * vec_part(cosine));
    }
    // Stable: ties keep the words' order, then the vectors'.
    fused.sort_by(|a, b| b.1.total_cmp(&a.1));
    // The rest after the head, each record once.
    let mut seen: std::collections::HashSet<u64> = fused.iter().map(|f| f.0).collect();
    let tails = lex_tail
        .iter()
        .map(|&(offset, score)| (offset, lex_part(score).min(lowest)))
        .chain(
            vec_tail
                .iter()
                .map(|&(offset, cosine)| (offset, weight * vec_part(cosine))),
        );
    for (offset, s) in tails {
        if seen.insert(offset) {
            fused.push((offset, s));
        }
    }
    fused
}

/// A score's place between `low` (0) and `high` (1). When they are equal
/// (one candidate, or all alike), each is the best there is: 1, unless
/// that best is nothing (0 or less).
fn scale(high: f64, low: f64) -> impl Fn(f64) -> f64 {
    move |s| {
        if high > low {
            ((s - low) / (high - low)).clamp(0.0, 1.0)
        } else if high > 0.0 {
            1.0
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(f: &[(u64, f64)]) -> Vec<u64> {
        f.iter().map(|x| x.0).collect()
    }

    #[test]
    fn scores_are_scaled_in_their_ranking_and_added() {
        // Lexical 10 (8), 20 (4), 30 (2); vector 30 (0.9), 40 (0.7), 10 (0.5).
        let lex = [(10, 8.0), (20, 4.0), (30, 2.0)];
        let vec = [(30, 0.9), (40, 0.7), (10, 0.5)];
        let got = fuse(&lex, &vec, 0.5);
        let want = [
            (10, 1.0 + 0.5 * 0.5 / 0.9), // 8/8 + 0.5 × 0.5/0.9
            (30, 0.25 + 0.5),            // 2/8 + 0.5 × 1
            (20, 0.5),                   // 4/8
            (40, 0.5 * 0.7 / 0.9),       // 0.5 × 0.7/0.9
        ];
        // Fewer than DEPTH candidates: the floor is 0. With DEPTH of
        // them, the lowest cosine is the floor.
        assert_eq!(order(&got), order(&want));
        for ((o, f), (_, w)) in got.iter().zip(want) {
            assert!((f - w).abs() < 1e-12, "{o}: {f} vs {w}");
        }
        assert!(fuse(&[], &[], 0.3).is_empty());
        let full: Vec<(u64, f64)> = (0..DEPTH as u64)
            .map(|i| (i, 0.9 - i as f64 * 0.001))
            .collect();
        let got = fuse(&[], &full, 1.0);
        assert!((got[0].1 - 1.0).abs() < 1e-12 && got[DEPTH - 1].1.abs() < 1e-12);
    }

    #[test]
    fn the_vectors_lift_a_record_by_the_weight_at_most() {
        // The words' first is more than 0.3 above their second: no model
        // at weight 0.3 puts the second first, even the vectors' nearest.
        let lex = [(1, 10.0), (2, 6.9), (3, 6.0)];
        let vec = [(2, 0.99), (3, 0.5), (9, 0.1)];
        assert_eq!(order(&fuse(&lex, &vec, 0.3))[0], 1);
        // Closer together, the vectors decide.
        let lex = [(1, 10.0), (2, 9.0)];
        assert_eq!(order(&fuse(&lex, &vec, 0.3))[..2], [2, 1]);
        // Weight 0 keeps the words' order, the vectors' records after
        // theirs in the vectors' order.
        assert_eq!(
            order(&fuse(&[(7, 2.0), (5, 1.0)], &[(9, 0.8), (2, 0.4)], 0.0)),
            [7, 5, 9, 2]
        );
        // A record the words rank below another keeps its place, whatever
        // its score (a neighbour's share above a deeper record's BM25).
        assert_eq!(
            order(&fuse(&[(1, 10.0), (9, 2.0), (3, 5.0)], &[], 0.3)),
            [1, 9, 3]
        );
        // One ranking alone keeps its order.
        assert_eq!(
            order(&fuse(&[], &[(5, 0.9), (3, 0.8), (9, 0.1)], 0.3)),
            [5, 3, 9]
        );
    }

    #[test]
    fn a_deeper_search_begins_with_a_shallower_one() {
        // Rankings longer than DEPTH: the fused head depends on their
        // first DEPTH only, the rest follows it.
        let lex: Vec<(u64, f64)> = (0..250u64).map(|i| (i * 2, 1000.0 - i as f64)).collect();
        let vec: Vec<(u64, f64)> = (0..250u64)
            .map(|i| (i * 3 + 1, 0.9 - i as f64 / 1000.0))
            .collect();
        let deep = fuse(&lex, &vec, 0.3);
        let shallow = fuse(&lex[..DEPTH], &vec[..DEPTH], 0.3);
        assert_eq!(order(&deep[..shallow.len()]), order(&shallow));
        // Every record once.
        let mut all = order(&deep);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), deep.len());
    }
}
