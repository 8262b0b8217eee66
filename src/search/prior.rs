//! What the words' ranking weighs besides BM25, on its best records: how
//! many of the question's words a record holds, and, for a question about
//! time, whether the record speaks of a date.
//!
//! The best [`RERANK`] records by BM25 are scored again:
//!
//! - **without their length**: BM25 as the index scores it (k1 = 1.2,
//!   b = 0.75) lowers a long record's score, but in a conversation the
//!   turn that holds the answer is often the long one; the set is scored
//!   with b = 0 (`Σ weight × tf / (tf + k1)`, the index's weights);
//! - **by the share of the question's words held**: BM25 sums each word's
//!   weight, so one rare word can carry a record that holds nothing else
//!   the question asks about past one holding most of its words. Each
//!   score is multiplied by `((1 + c) / (1 + n))²`, where `n` is the
//!   number of the question's words counted fully (its words that are not
//!   stop words) and `c` how many of them the record holds (once each);
//! - **by its dates, for a question about time** ("When did…", "How
//!   long…", "Which came first…"): [`DATED`] of the best score so made is
//!   added to each record whose text names a day ("yesterday", "Friday",
//!   "the 12th", "June"): the turn that answers a "when" is the one that
//!   says when.
//!
//! (The index itself cannot score without lengths: with its field norms
//! off, its top-k pruning loses records.)
//!
//! The set rescored is fixed (the best [`RERANK`] by BM25, less those tied
//! with the first past it), so that a search is the first part of any
//! deeper one; the records past it follow in BM25 order. Measured on both
//! of `bench/recall`'s sets, never one alone (BENCHMARKS.md, "Recall").

use super::Hit;
use super::analysis::{Field, Terms};

/// The records by BM25 scored again.
pub(crate) const RERANK: usize = 200;
/// The share of the best score a dated record gains for a question about
/// time.
pub(crate) const DATED: f64 = 0.3;

/// BM25's k1, as the index has it.
const K1: f32 = 1.2;

/// What a record's terms hold of a query's: how often each of its
/// weighted terms (in [`Terms::weighted`] order), and whether one names a
/// day.
#[derive(Clone, Debug, Default)]
pub(crate) struct Held {
    tf: Vec<u32>,
    pub(crate) dated: bool,
}

impl Held {
    /// Notes a term of the record (`terms`: the query's).
    pub(crate) fn note(&mut self, terms: &Terms, field: Field, term: &str) {
        let at = match field {
            Field::Prose => (terms.prose.iter().chain(&terms.stop)).position(|p| p == term),
            Field::Ident => (terms.ident.iter().position(|p| p == term))
                .map(|i| terms.prose.len() + terms.stop.len() + i),
        };
        if let Some(i) = at {
            if self.tf.len() <= i {
                self.tf.resize(i + 1, 0);
            }
            self.tf[i] += 1;
        }
        if field == Field::Prose && terms.when && !self.dated {
            self.dated = terms.dates.iter().any(|d| d == term) || super::when::ordinal(term);
        }
    }

    /// The record's BM25 without its length (b = 0), by the terms'
    /// `weights`, in the index's f32 arithmetic.
    pub(crate) fn flat_bm25(&self, weights: &[f32]) -> f64 {
        let mut score = 0.0f32;
        for (&tf, &w) in self.tf.iter().zip(weights) {
            if tf > 0 {
                let tf = tf as f32;
                score += w * (tf / (tf + K1));
            }
        }
        f64::from(score)
    }

    /// Whether the record holds any of the query's terms.
    pub(crate) fn any(&self) -> bool {
        self.tf.iter().any(|&f| f > 0)
    }

    /// How many of the query's `n` full words (the first of the weighted
    /// terms) the record holds.
    pub(crate) fn words(&self, n: usize) -> u32 {
        self.tf.iter().take(n).filter(|&&f| f > 0).count() as u32
    }
}

/// A term's weight in BM25 as tantivy has it: IDF = ln(1 + (N − n + 0.5) /
/// (n + 0.5)) for a term in `n` of `docs` documents, × (1 + k1), × the
/// term's boost.
pub(crate) fn weight(n: u64, docs: u64, boost: f32) -> f32 {
    let x = ((docs.saturating_sub(n)) as f32 + 0.5) / (n as f32 + 0.5);
    let w = (1.0 + x).ln() * (1.0 + K1);
    if boost == 1.0 { w } else { w * boost }
}

/// The factor a record holding `held` of a query's `n` full words has its
/// score multiplied by.
pub(crate) fn coord(held: u32, n: usize) -> f64 {
    let r = (1.0 + f64::from(held)) / (1.0 + n as f64);
    r * r
}

/// `ranked` (by BM25, best first) with its best [`RERANK`] records scored
/// again and put in the order of those scores (ties in log order), then
/// the rest as they were.
pub(crate) fn rescore(ranked: Vec<(Hit, Held)>, terms: &Terms, weights: &[f32]) -> Vec<Hit> {
    let n = terms.prose.len();
    // Those tied with the first record past the set are left as they are:
    // which of a tie the index returns at the cut is its own affair.
    let cut = ranked.get(RERANK).map(|h| h.0.score);
    let size = ranked
        .iter()
        .take(RERANK)
        .take_while(|h| cut.is_none_or(|c| h.0.score > c))
        .count();
    let mut ranked = ranked.into_iter();
    let mut head: Vec<(Hit, Held)> = ranked.by_ref().take(size).collect();
    for (hit, held) in &mut head {
        hit.score = held.flat_bm25(weights) * coord(held.words(n), n);
    }
    if terms.when {
        let best = head.iter().map(|h| h.0.score).fold(0.0, f64::max);
        for (hit, held) in &mut head {
            if held.dated {
                hit.score += DATED * best;
            }
        }
    }
    let mut out: Vec<Hit> = head.into_iter().map(|h| h.0).collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.offset.cmp(&b.offset)));
    out.extend(ranked.map(|h| h.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_factor_rewards_the_share_of_words_held() {
        assert_eq!(coord(3, 3), 1.0);
        assert_eq!(coord(0, 0), 1.0);
        assert_eq!(coord(1, 3), 0.25);
        assert!(coord(2, 3) > coord(1, 3));
    }
}
