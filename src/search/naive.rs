//! The search as a plain scan of the log, scored as tantivy scores a
//! disjunction of terms with BM25 (k1 = 1.2, b = 0.75): the oracle of the
//! index, and the brute-force baseline it is measured against.

use super::text::{self, Scratch};
use super::{SearchOptions, query_words};
use crate::parse::LineParser;

/// The best `options.limit` records of `log` for `query`: (offset, score),
/// best first, ties in log order.
pub fn search(log: &[u8], query: &str, options: &SearchOptions) -> Vec<(u64, f64)> {
    let Ok(words) = query_words(query) else {
        return Vec::new();
    };
    let mut parser = LineParser::new(crate::DEFAULT_MAX_DEPTH);
    let mut scratch = Scratch::default();
    // Per document with words: offset, length, frequency of each query word.
    let mut docs: Vec<(u64, u64, Vec<u64>)> = Vec::new();
    let mut total = 0u64;
    let start = crate::input::lines::content_start(log);
    let end = memchr::memrchr(b'\n', log).map_or(0, |i| i + 1);
    let Ok(()) = text::each_record(log, start..end.max(start), &mut parser, |at, line| {
        let mut len = 0u64;
        let mut freq = vec![0u64; words.len()];
        text::record_words(line, &mut scratch, |w| {
            len += 1;
            if let Some(i) = words.iter().position(|q| q == w) {
                freq[i] += 1;
            }
        });
        if len > 0 {
            total += len;
            docs.push((at as u64, len, freq));
        }
        Ok::<(), std::convert::Infallible>(())
    });
    // tantivy's BM25, in its f32 arithmetic: IDF = ln(1 + (N − n + 0.5) /
    // (n + 0.5)); a document's length is its field norm, stored in one byte
    // (lengths over 40 rounded down to a table's steps).
    use tantivy::fieldnorm::FieldNormReader;
    let n = docs.len() as u64;
    let avg = total as f32 / n as f32;
    let (k1, b) = (1.2f32, 0.75f32);
    let weight: Vec<f32> = (0..words.len())
        .map(|i| {
            let hits = docs.iter().filter(|d| d.2[i] > 0).count() as u64;
            let x = ((n - hits) as f32 + 0.5) / (hits as f32 + 0.5);
            (1.0 + x).ln() * (1.0 + k1)
        })
        .collect();
    let mut scored: Vec<(u64, f64)> = docs
        .iter()
        .filter(|d| d.2.iter().any(|&f| f > 0))
        .map(|(offset, len, freq)| {
            let id = FieldNormReader::fieldnorm_to_id(*len as u32);
            let norm = FieldNormReader::id_to_fieldnorm(id) as f32;
            let cache = k1 * (1.0 - b + b * norm / avg);
            let mut score = 0.0f32;
            for (i, &f) in freq.iter().enumerate() {
                if f > 0 {
                    let f = f as f32;
                    score += weight[i] * (f / (f + cache));
                }
            }
            (*offset, -f64::from(score))
        })
        .collect();
    scored.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let filters = options.filters();
    scored
        .into_iter()
        .filter(|&(offset, _)| {
            let rest = &log[offset as usize..];
            let line = &rest[..memchr::memchr(b'\n', rest).unwrap_or(rest.len())];
            let line = &line[crate::input::lines::trim(line)];
            parser
                .parse(line, 0)
                .is_ok_and(|r| filters.matches(&r, line))
        })
        .take(options.limit)
        .map(|(o, s)| (o, -s))
        .collect()
}
