//! The words' ranking: BM25 from the index, then each record's
//! neighbours as its context.
//!
//! A conversation answers in the turn after the one that asks ("How did
//! the interview go?" / "Better than I expected, they want a second
//! round"), and a fact is often spread over a turn and the reply that
//! asks about it. So a record shares in the score of the records beside
//! it in its session: each of the best [`POOL`] (30) records by BM25 gives
//! [`TO_NEXT`] of its score to the record after it and [`TO_PREV`] to the
//! one before (the next or previous line that is a record of the same
//! `session_id` passing the filters), which may bring in a record that
//! holds none of the words.
//!
//! The pool is fixed, so that a search is the first part of any deeper
//! one: the first k hits of a search for more are the hits of a search
//! for k. Past the pool (a limit over [`POOL`]) the records follow in
//! BM25 order.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::Path;

use super::analysis::Terms;
use super::index::Top;
use super::prior::{Held, RERANK};
use super::query::Part;
use super::{Damaged, Hit, Read, SearchIndex, SearchOptions, TIE_MARGIN, judge_line, read_hit};
use crate::error::Error;
use crate::parse::LineParser;
use crate::select::Selection;

/// The records by BM25 whose neighbours share in their score; the first
/// `POOL` hits of a search do not depend on its limit.
pub(crate) const POOL: usize = 30;
/// The share of a record's score given to the record after it.
pub(crate) const TO_NEXT: f64 = 0.15;
/// The share of a record's score given to the record before it.
pub(crate) const TO_PREV: f64 = 0.15;
/// How far a neighbour's line start is looked for (a longer line has no
/// neighbour on that side).
const MAX_SCAN: u64 = 1 << 20;

impl SearchIndex {
    /// The search for `terms` (checked, with the limit, by the caller)
    /// without a refresh first, leaving out the records whose offsets `skip`
    /// names: BM25, each record given a share of its neighbours' scores.
    pub(super) fn search_terms(
        &mut self,
        terms: &Terms,
        options: &SearchOptions,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<Hit>, Error> {
        let Some((file, _)) = crate::input::open_regular(&self.log, self.refuse_links)? else {
            return Ok(Vec::new());
        };
        let filters = options.filters();
        // One past the set rescored: whether its last records tie with it.
        let depth = options.limit.max(RERANK + 1);
        let (ranked, weights) = self.bm25_hits(&file, terms, depth, &filters, skip)?;
        let ranked = super::prior::rescore(ranked, terms, &weights);
        let mut hits = self.with_neighbours(&file, terms, ranked, &filters, skip)?;
        hits.truncate(options.limit);
        Ok(hits)
    }

    /// The best `limit` records by BM25 that pass the filters and `skip`,
    /// best first, ties in log order, with what each holds of `terms`; and
    /// the terms' weights: those holding a word of the query that is not a
    /// stop word, by those words, then, if they are fewer, those holding
    /// only its stop words, by those.
    fn bm25_hits(
        &mut self,
        file: &File,
        terms: &Terms,
        limit: usize,
        filters: &Selection,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Ranked, Error> {
        let (mut hits, weights) =
            self.bm25_part(file, terms, Part::Content, limit, filters, skip)?;
        if hits.len() < limit && !terms.stop.is_empty() {
            let more = limit - hits.len();
            let (rest, _) = self.bm25_part(file, terms, Part::StopOnly, more, filters, skip)?;
            hits.extend(rest);
        }
        Ok((hits, weights))
    }

    /// [`Self::bm25_hits`] in one part of the records. A damaged index is
    /// built again (once) and searched again.
    fn bm25_part(
        &mut self,
        file: &File,
        terms: &Terms,
        part: Part,
        limit: usize,
        filters: &Selection,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Ranked, Error> {
        let mut parser = LineParser::new(self.max_depth);
        let mut buf = Vec::new();
        // The best `limit` and some more, so that ties at the cut are put in
        // log order; more again when filters or `skip` leave too few.
        let mut want = limit + TIE_MARGIN;
        let mut rebuilt = false;
        loop {
            let (top, weights) = match self.index.top(terms, part, want)? {
                Top::Hits(top, weights) => (top, weights),
                Top::Damaged(why) => {
                    // Built again from the log, and searched again: nothing
                    // read from the damaged index is used.
                    if rebuilt {
                        return Err(Error::Search {
                            path: self.index.path().to_path_buf(),
                            message: format!(
                                "the index was damaged again right after it was built ({})",
                                why.0
                            ),
                        });
                    }
                    rebuilt = true;
                    self.rebuild_damaged(&why)?;
                    continue;
                }
            };
            let mut hits = Vec::new();
            let mut wrong = None;
            for &(offset, score) in &top {
                if hits.len() == limit {
                    break;
                }
                if skip(offset) {
                    continue;
                }
                match read_hit(
                    file,
                    &self.log,
                    offset,
                    score,
                    filters,
                    Some(terms),
                    &mut self.analyzer,
                    &mut parser,
                    &mut buf,
                )? {
                    Read::Hit(hit, held) => hits.push((hit, held)),
                    Read::Filtered => {}
                    Read::Wrong(why) => {
                        wrong = Some(why);
                        break;
                    }
                }
            }
            if let Some(why) = wrong {
                if rebuilt {
                    return Err(Error::Search {
                        path: self.index.path().to_path_buf(),
                        message: format!("the index built again still points wrong: {why}"),
                    });
                }
                rebuilt = true;
                self.rebuild_damaged(&Damaged(why))?;
                continue;
            }
            if hits.len() == limit || top.len() < want {
                return Ok((hits, weights));
            }
            want = want.saturating_mul(4);
        }
    }

    /// `ranked` (by BM25) with the first [`POOL`] records' neighbours
    /// given their shares: those records and their neighbours in order of
    /// the scores so made (ties in log order), then the rest of `ranked`.
    fn with_neighbours(
        &mut self,
        file: &File,
        terms: &Terms,
        ranked: Vec<Hit>,
        filters: &Selection,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<Hit>, Error> {
        let mut parser = LineParser::new(self.max_depth);
        let mut buf = Vec::new();
        let mut ranked = ranked.into_iter();
        let mut head: Vec<Hit> = ranked.by_ref().take(POOL).collect();
        let mut at: HashMap<u64, usize> = head
            .iter()
            .enumerate()
            .map(|(i, h)| (h.offset, i))
            .collect();
        let mut gains: Vec<f64> = vec![0.0; head.len()];
        // Records tied with the first one past the pool give nothing: which
        // of a tie the index returns at the cut is its own affair, and the
        // shares must not depend on it.
        let cut = ranked.as_slice().first().map(|h| h.score);
        let givers = head
            .iter()
            .take_while(|h| cut.is_none_or(|c| h.score > c))
            .count();
        for i in 0..givers {
            let (offset, score) = (head[i].offset, head[i].score);
            let session = session_of(head[i].line.as_bytes()).map(<[u8]>::to_vec);
            let (from, sides) = neighbours(file, &self.log, offset, &mut buf)?;
            for (side, share) in sides.into_iter().zip([TO_PREV, TO_NEXT]) {
                let Some(range) = side else { continue };
                let o = from + range.start as u64;
                if skip(o) || session_of(&buf[range.clone()]) != session.as_deref() {
                    continue;
                }
                let j = match at.get(&o) {
                    Some(&j) => j,
                    None => {
                        let judged = judge_line(
                            o,
                            &buf[range],
                            0.0,
                            filters,
                            Some(terms),
                            &mut self.analyzer,
                            &mut parser,
                        );
                        let Read::Hit(h, _) = judged else { continue };
                        if super::text::UNSEARCHED.contains(&h.kind.as_str()) {
                            continue;
                        }
                        at.insert(o, head.len());
                        head.push(h);
                        gains.push(0.0);
                        head.len() - 1
                    }
                };
                gains[j] += share * score;
            }
        }
        for (h, g) in head.iter_mut().zip(&gains) {
            h.score += g;
        }
        head.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.offset.cmp(&b.offset)));
        head.extend(ranked.filter(|h| !at.contains_key(&h.offset)));
        Ok(head)
    }
}

/// Hits by BM25 with what each holds of the query's terms, and the terms'
/// weights.
type Ranked = (Vec<(Hit, Held)>, Vec<f32>);

/// The raw value of a line's top-level `session_id`, if it has one.
pub(crate) fn session_of(line: &[u8]) -> Option<&[u8]> {
    crate::parse::json::top_level_value(line, b"session_id")
}

/// The lines before and after a record's line: their ranges in a buffer.
type Sides = [Option<Range<usize>>; 2];

/// The lines before and after the one starting at `offset` (blank lines
/// passed over), read in one window of the log: where the window starts,
/// and each line's range in `buf` (trimmed), `None` on a side with no
/// whole line within [`MAX_SCAN`] bytes.
fn neighbours(
    file: &File,
    log: &Path,
    offset: u64,
    buf: &mut Vec<u8>,
) -> Result<(u64, Sides), Error> {
    let mut reach = 4096u64;
    loop {
        let from = offset.saturating_sub(reach);
        let want = offset - from + reach;
        buf.clear();
        crate::input::read_from(file, from, want, buf)
            .map_err(|e| Error::io(log, "cannot read", e))?;
        let at_end = (buf.len() as u64) < want;
        let here = (offset - from) as usize;
        let text_from = |at: usize| {
            at + buf[at..]
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .unwrap_or(buf.len() - at)
        };
        let trimmed = |r: Range<usize>| {
            let t = crate::input::lines::trim(&buf[r.clone()]);
            r.start + t.start..r.start + t.end
        };
        // After: past this line's `\n`, the next line that is not blank,
        // to its `\n` (a last line without one is not whole).
        let mut short = false;
        let next = match memchr::memchr(b'\n', &buf[here..]) {
            Some(e) => {
                let start = text_from(here + e + 1);
                match memchr::memchr(b'\n', &buf[start..]) {
                    Some(len) => Some(trimmed(start..start + len)),
                    None => {
                        short |= !at_end;
                        None
                    }
                }
            }
            None => {
                short |= !at_end;
                None
            }
        };
        // Before: the last byte that is not whitespace before `offset`,
        // back to the `\n` before it (or the log's start).
        let prev = match buf[..here].iter().rposition(|b| !b.is_ascii_whitespace()) {
            Some(last) => match memchr::memrchr(b'\n', &buf[..last]) {
                Some(nl) => Some(trimmed(text_from(nl + 1)..last + 1)),
                // The first line, after any byte-order mark (which may be
                // all there is before this line).
                None if from == 0 => {
                    let start = text_from(crate::input::lines::content_start(buf));
                    (start <= last).then(|| trimmed(start..last + 1))
                }
                None => {
                    short = true;
                    None
                }
            },
            None => {
                short |= from > 0;
                None
            }
        };
        if !short || reach >= MAX_SCAN {
            return Ok((from, [prev, next]));
        }
        reach *= 4;
    }
}
