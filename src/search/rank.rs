//! The words' ranking: BM25 from the index, then each record's
//! neighbours as its context.
//!
//! A conversation answers in the turn after the one that asks ("How did
//! the interview go?" / "Better than I expected, they want a second
//! round"), and a fact is often spread over a turn and the reply that
//! asks about it. So a record shares in the score of the records beside
//! it in its session: each of the best [`POOL`] records by BM25 gives
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
use std::path::Path;

use super::analysis::Terms;
use super::index::Top;
use super::{Damaged, Hit, Read, SearchIndex, SearchOptions, TIE_MARGIN, read_hit};
use crate::error::Error;
use crate::parse::LineParser;
use crate::select::Selection;

/// The records by BM25 whose neighbours share in their score; the first
/// `POOL` hits of a search do not depend on its limit.
pub(crate) const POOL: usize = 50;
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
        let depth = options.limit.max(POOL);
        let ranked = self.bm25_hits(&file, terms, depth, &filters, skip)?;
        let mut hits = self.with_neighbours(&file, terms, ranked, &filters, skip)?;
        hits.truncate(options.limit);
        Ok(hits)
    }

    /// The best `limit` records by BM25 that pass the filters and `skip`,
    /// best first, ties in log order. A damaged index is built again
    /// (once) and searched again.
    fn bm25_hits(
        &mut self,
        file: &File,
        terms: &Terms,
        limit: usize,
        filters: &Selection,
        skip: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<Hit>, Error> {
        let mut parser = LineParser::new(self.max_depth);
        let mut buf = Vec::new();
        // The best `limit` and some more, so that ties at the cut are put in
        // log order; more again when filters or `skip` leave too few.
        let mut want = limit + TIE_MARGIN;
        let mut rebuilt = false;
        loop {
            let top = match self.index.top(terms, want)? {
                Top::Hits(top) => top,
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
                    Read::Hit(hit) => hits.push(hit),
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
                return Ok(hits);
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
        for i in 0..head.len() {
            let (offset, score) = (head[i].offset, head[i].score);
            let session = session_of(&head[i].line).map(<[u8]>::to_vec);
            let (prev, next) = neighbours(file, &self.log, offset, &mut buf)?;
            for (side, share) in [(prev, TO_PREV), (next, TO_NEXT)] {
                let Some(o) = side else { continue };
                if skip(o) {
                    continue;
                }
                let j = match at.get(&o) {
                    Some(&j) => j,
                    None => {
                        let read = read_hit(
                            file,
                            &self.log,
                            o,
                            0.0,
                            filters,
                            Some(terms),
                            &mut self.analyzer,
                            &mut parser,
                            &mut buf,
                        )?;
                        let Read::Hit(h) = read else { continue };
                        if session_of(&h.line) != session.as_deref()
                            || super::text::UNSEARCHED.contains(&h.kind.as_str())
                        {
                            continue;
                        }
                        at.insert(o, head.len());
                        head.push(h);
                        gains.push(0.0);
                        head.len() - 1
                    }
                };
                if session_of(&head[j].line) == session.as_deref() {
                    gains[j] += share * score;
                }
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

/// The raw value of a line's top-level `session_id`, if it has one.
pub(crate) fn session_of(line: &str) -> Option<&[u8]> {
    crate::parse::json::top_level_value(line.as_bytes(), b"session_id")
}

/// Where the lines before and after the one starting at `offset` start
/// (blank lines passed over), when there are such lines within
/// [`MAX_SCAN`] bytes.
fn neighbours(
    file: &File,
    log: &Path,
    offset: u64,
    buf: &mut Vec<u8>,
) -> Result<(Option<u64>, Option<u64>), Error> {
    let read = |from: u64, len: u64, buf: &mut Vec<u8>| {
        buf.clear();
        crate::input::read_from(file, from, len, buf).map_err(|e| Error::io(log, "cannot read", e))
    };
    // The next: past this line's `\n` and any blank lines.
    let mut next = None;
    let mut want = 4096u64;
    while want <= MAX_SCAN {
        read(offset, want, buf)?;
        let after_nl = memchr::memchr(b'\n', buf).map(|i| i + 1);
        if let Some(start) = after_nl {
            let rest = &buf[start..];
            if let Some(k) = rest.iter().position(|b| !b.is_ascii_whitespace()) {
                next = Some(offset + (start + k) as u64);
                break;
            }
        }
        if (buf.len() as u64) < want {
            break;
        }
        want *= 4;
    }
    // The previous: the line before the `\n` that ends it, blank ones
    // passed over.
    let prev = if offset == 0 {
        None
    } else {
        previous_start(offset, buf, read)?
    };
    Ok((prev, next))
}

/// Where the line before the one starting at `offset` (> 0) starts, blank
/// lines passed over, reading back at most [`MAX_SCAN`] bytes with `read`.
fn previous_start(
    offset: u64,
    buf: &mut Vec<u8>,
    read: impl Fn(u64, u64, &mut Vec<u8>) -> Result<(), Error>,
) -> Result<Option<u64>, Error> {
    let mut want = 4096u64;
    loop {
        let from = offset.saturating_sub(want);
        read(from, offset - from, buf)?;
        let before = &buf[..];
        let first_text = |at: usize| {
            at + before[at..]
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .unwrap_or(0)
        };
        // The last byte that is not whitespace before `offset`, and the
        // `\n` before it.
        match before.iter().rposition(|b| !b.is_ascii_whitespace()) {
            Some(last) => match memchr::memrchr(b'\n', &before[..last]) {
                Some(nl) => return Ok(Some(from + first_text(nl + 1) as u64)),
                // The first line, after any byte-order mark.
                None if from == 0 => {
                    let start = crate::input::lines::content_start(before);
                    return Ok(Some(first_text(start) as u64));
                }
                None => {}
            },
            None if from == 0 => return Ok(None),
            None => {}
        }
        if want >= MAX_SCAN {
            return Ok(None);
        }
        want *= 4;
    }
}
