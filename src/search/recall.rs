//! Recall: the records best matching a request's text that the replay
//! does not already hold, as one `WM_KIND=recall` message, and the JSON a
//! search tool's result carries.

use super::{
    Hit, MAX_LIMIT, MAX_QUERY_BYTES, MAX_QUERY_WORDS, SearchIndex, SearchOptions, record_json,
};
use crate::error::Error;

impl SearchIndex {
    /// The recall message for the current request `text`: the `k` best
    /// records for its words (its first [`MAX_QUERY_WORDS`] distinct words,
    /// within [`MAX_QUERY_BYTES`]) whose offsets `replayed` does not name,
    /// as [`recall_text`] writes them; `None` when none is found or the
    /// text has no word. Brings the index up to date first.
    pub fn recall(
        &mut self,
        text: &str,
        k: usize,
        replayed: &dyn Fn(u64) -> bool,
    ) -> Result<Option<String>, Error> {
        let hits = self.recall_hits(text, k, replayed)?;
        Ok(recall_text(text, &hits))
    }

    /// The hits of [`recall`](Self::recall): the `k` best records for the
    /// words of `text` (its first [`MAX_QUERY_BYTES`], at most
    /// [`MAX_QUERY_WORDS`] words; no syntax) for which `replayed` is false.
    pub(crate) fn recall_hits(
        &mut self,
        text: &str,
        k: usize,
        replayed: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<Hit>, Error> {
        self.refresh()?;
        let text = query_text(text);
        let mut terms = self.analyzer.query(text);
        terms.prose.truncate(MAX_QUERY_WORDS);
        terms.ident.truncate(MAX_QUERY_WORDS);
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let options = SearchOptions::with_limit(k.min(MAX_LIMIT));
        if self.hybrid.is_some() {
            return self.hybrid_search(text, &terms, &options, replayed);
        }
        self.search_terms(&terms, &options, replayed)
    }
}

/// What of `text` a recall searches for: its first [`MAX_QUERY_BYTES`]
/// (a search's query is refused past them).
pub(crate) fn query_text(text: &str) -> &str {
    let mut cut = text.len().min(MAX_QUERY_BYTES);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// The `WM_KIND=recall` message text for `hits` found for `query`:
/// `WM_KIND=recall\nWM_JSON: {"type":"recall","query":Q,"records":[{"offset":O,"record":LINE},…]}`,
/// best first; `None` without hits.
pub fn recall_text(query: &str, hits: &[Hit]) -> Option<String> {
    if hits.is_empty() {
        return None;
    }
    let json = recall_json(Some("recall"), query, hits, usize::MAX);
    Some(format!("WM_KIND=recall\nWM_JSON: {json}"))
}

/// `{"type":KIND,"query":Q,"records":[{"offset":O,"record":LINE},…]}`
/// (no `type` without `kind`), best first. A record that would take the
/// whole past `budget` bytes is named without its line:
/// `{"offset":O,"bytes":N,"left_out":true}`.
pub(crate) fn recall_json(kind: Option<&str>, query: &str, hits: &[Hit], budget: usize) -> String {
    let mut json = String::from("{");
    if let Some(k) = kind {
        json.push_str(&format!(
            "\"type\":{},",
            serde_json::to_string(k).expect("a string serialises")
        ));
    }
    json.push_str(&format!(
        "\"query\":{},\"records\":[",
        serde_json::to_string(query).expect("a string serialises")
    ));
    for (i, h) in hits.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        let record = record_json(&h.line);
        if json.len() + record.len() + 40 > budget {
            json.push_str(&format!(
                "{{\"offset\":{},\"bytes\":{},\"left_out\":true}}",
                h.offset,
                h.line.len()
            ));
        } else {
            json.push_str(&format!("{{\"offset\":{},\"record\":{record}}}", h.offset));
        }
    }
    json.push_str("]}");
    json
}
