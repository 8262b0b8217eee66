//! The search as a plain scan of the log, scored as tantivy scores a
//! disjunction of terms with BM25 (k1 = 1.2, b = 0.75), each field with its
//! own statistics and identifiers at their weight; then the best records
//! scored again without their length and by the words they hold and a
//! question's dates; then the neighbours' shares: the oracle of the
//! index, and the brute-force baseline it is measured against.

use super::analysis::{Analyzer, Field, Language};
use super::prior::{DATED, Held, RERANK, coord};
use super::text::{self, Scratch};
use super::{SearchOptions, query_words};
use crate::parse::LineParser;

/// One record with terms: its offset, its length in each field, and the
/// frequency of each query term.
struct Doc {
    offset: u64,
    len: [u64; 2],
    freq: Vec<u64>,
    held: Held,
}

/// The best `options.limit` records of `log` for `query`, its words
/// analysed in `language`: (offset, score), best first, ties in log order.
pub fn search(
    log: &[u8],
    query: &str,
    options: &SearchOptions,
    language: Language,
) -> Vec<(u64, f64)> {
    if query_words(query).is_err() {
        return Vec::new();
    }
    let mut analyzer = Analyzer::new(language);
    let terms = analyzer.query(query);
    let weighted = terms.weighted();
    let slot = |f: Field| match f {
        Field::Prose => 0,
        Field::Ident => 1,
    };
    let mut parser = LineParser::new(crate::DEFAULT_MAX_DEPTH);
    let mut scratch = Scratch::default();
    let mut docs: Vec<Doc> = Vec::new();
    let mut total = [0u64; 2];
    let start = crate::input::lines::content_start(log);
    let end = memchr::memrchr(b'\n', log).map_or(0, |i| i + 1);
    let Ok(()) = text::each_record(log, start..end.max(start), &mut parser, |at, line| {
        let mut d = Doc {
            offset: at as u64,
            len: [0, 0],
            freq: vec![0; weighted.len()],
            held: Held::default(),
        };
        analyzer.record(line, &mut scratch, |f, t| {
            d.len[slot(f)] += 1;
            d.held.note(&terms, f, t);
            if let Some(i) = weighted.iter().position(|&(qf, q, _)| qf == f && q == t) {
                d.freq[i] += 1;
            }
        });
        if d.len != [0, 0] {
            total[0] += d.len[0];
            total[1] += d.len[1];
            docs.push(d);
        }
        Ok::<(), std::convert::Infallible>(())
    });
    // tantivy's BM25, in its f32 arithmetic: IDF = ln(1 + (N − n + 0.5) /
    // (n + 0.5)) over every document; a document's length in a field is its
    // field norm, stored in one byte (lengths over 40 rounded down to a
    // table's steps); a boost multiplies the term's weight.
    use tantivy::fieldnorm::FieldNormReader;
    let n = docs.len() as u64;
    let (k1, b) = (1.2f32, 0.75f32);
    let avg = [total[0] as f32 / n as f32, total[1] as f32 / n as f32];
    let weight: Vec<f32> = weighted
        .iter()
        .enumerate()
        .map(|(i, &(_, _, boost))| {
            let hits = docs.iter().filter(|d| d.freq[i] > 0).count() as u64;
            let x = ((n - hits) as f32 + 0.5) / (hits as f32 + 0.5);
            let w = (1.0 + x).ln() * (1.0 + k1);
            if boost == 1.0 { w } else { w * boost }
        })
        .collect();
    // The records holding a word that is not a stop word, then those
    // holding only stop words (a part of their own: `sort_by` puts the
    // first part first).
    let stops = terms.prose.len()..terms.prose.len() + terms.stop.len();
    let content = |d: &Doc| (d.freq.iter().enumerate()).any(|(i, &f)| f > 0 && !stops.contains(&i));
    let mut scored: Vec<(bool, u64, f64)> = docs
        .iter()
        .filter(|d| d.freq.iter().any(|&f| f > 0))
        .map(|d| {
            let part = content(d);
            let mut score = 0.0f32;
            for (i, &f) in d.freq.iter().enumerate() {
                if f > 0 && (part || stops.contains(&i)) {
                    let s = slot(weighted[i].0);
                    let id = FieldNormReader::fieldnorm_to_id(d.len[s] as u32);
                    let norm = FieldNormReader::id_to_fieldnorm(id) as f32;
                    let cache = k1 * (1.0 - b + b * norm / avg[s]);
                    let f = f as f32;
                    score += weight[i] * (f / (f + cache));
                }
            }
            (!part, d.offset, -f64::from(score))
        })
        .collect();
    scored.sort_by(|a, b| {
        (a.0.cmp(&b.0))
            .then(a.2.total_cmp(&b.2))
            .then(a.1.cmp(&b.1))
    });
    let filters = options.filters();
    let mut kept = |offset: u64| {
        let line = line_at(&log[..end], offset);
        parser.parse(line, 0).is_ok_and(|r| {
            filters.matches(&r, line) && !text::UNSEARCHED.iter().any(|k| r.kind_is(line, k))
        })
    };
    let ranked: Vec<(u64, f64)> = scored
        .into_iter()
        .filter(|&(_, offset, _)| kept(offset))
        .map(|(_, o, s)| (o, -s))
        .collect();
    // The best RERANK (less those tied with the first past them) scored
    // again: BM25 without lengths (b = 0), times the share of the query's
    // full words held, squared; for
    // a question about time, a share of the best score so made to those
    // naming a day. Then in that order, the rest after them.
    // (The documents are in log order.)
    let held = |offset: u64| {
        let i = docs.binary_search_by_key(&offset, |d| d.offset);
        &docs[i.expect("a scored document")].held
    };
    let cut = ranked.get(RERANK).map(|r| r.1);
    let size = ranked
        .iter()
        .take(RERANK)
        .take_while(|r| cut.is_none_or(|c| r.1 > c))
        .count();
    let mut again: Vec<(u64, f64)> = ranked[..size]
        .iter()
        .map(|&(o, _)| {
            let (h, n) = (held(o), terms.prose.len());
            (o, h.flat_bm25(&weight) * coord(h.words(n), n))
        })
        .collect();
    if terms.when {
        let best = again.iter().map(|r| r.1).fold(0.0, f64::max);
        for r in &mut again {
            if held(r.0).dated {
                r.1 += DATED * best;
            }
        }
    }
    again.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    again.extend_from_slice(&ranked[size..]);
    let ranked = again;
    // The first POOL records give their neighbours (the next and previous
    // lines that are not blank, when records of the same session that the
    // filters keep and that hold a word) a share of their scores; the rest
    // follow in order.
    use super::rank::{POOL, TO_NEXT, TO_PREV, session_of};
    let lines: Vec<u64> = line_starts(&log[..end]);
    let pool = ranked.len().min(POOL);
    let mut head: Vec<(u64, f64)> = ranked[..pool].to_vec();
    // Those tied with the first record past the pool give nothing.
    let cut = ranked.get(POOL).map(|r| r.1);
    let givers = ranked[..pool]
        .iter()
        .take_while(|r| cut.is_none_or(|c| r.1 > c));
    for &(offset, score) in givers {
        let session = session_of(line_at(log, offset)).map(<[u8]>::to_vec);
        let k = lines
            .binary_search(&offset)
            .expect("a record starts a line");
        let sides = [(k.checked_sub(1), TO_PREV), (Some(k + 1), TO_NEXT)];
        for (side, share) in sides {
            let Some(&o) = side.and_then(|j| lines.get(j)) else {
                continue;
            };
            if !kept(o) || session_of(line_at(log, o)) != session.as_deref() {
                continue;
            }
            match head.iter().position(|h| h.0 == o) {
                Some(j) => head[j].1 += share * score,
                // Ranked below the pool: its share alone.
                None if ranked.iter().any(|r| r.0 == o) => head.push((o, share * score)),
                None => {}
            }
        }
    }
    head.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let rest: Vec<(u64, f64)> = ranked[pool..]
        .iter()
        .filter(|r| !head.iter().any(|h| h.0 == r.0))
        .copied()
        .collect();
    head.extend(rest);
    head.truncate(options.limit);
    head
}

/// The line of `log` starting at `offset`, trimmed.
fn line_at(log: &[u8], offset: u64) -> &[u8] {
    let rest = &log[offset as usize..];
    let line = &rest[..memchr::memchr(b'\n', rest).unwrap_or(rest.len())];
    &line[crate::input::lines::trim(line)]
}

/// Where each line of `log` that is not blank starts (after its leading
/// whitespace and, first, a byte-order mark), whole lines only.
fn line_starts(log: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut pos = crate::input::lines::content_start(log);
    for line in log[pos..].split_inclusive(|&b| b == b'\n') {
        if line.last() == Some(&b'\n')
            && let Some(k) = line.iter().position(|b| !b.is_ascii_whitespace())
        {
            out.push((pos + k) as u64);
        }
        pos += line.len();
    }
    out
}
