//! Compaction: folding the oldest replayed records into a new summary.
//!
//! With summaries on, the records replayed after the newest summary grow
//! turn after turn. Past `at` tokens, the oldest of them are *folded*: the
//! previous summary and those records go to a model with [`INSTRUCTIONS`],
//! and its answer is appended as a new `wm_summary` whose `covers` names
//! the last record folded. About `keep` tokens of records stay replayed, so
//! the next fold comes after `at - keep` tokens more: between two folds the
//! replayed prefix only grows at its end, and the prompt cache keeps
//! hitting.
//!
//! One rule keeps a fold exact when records arrive while the model writes:
//! the summary is appended only if no record written since the fold read
//! the log sorts at or before its cover ([`Guard`]); otherwise that record
//! would be left out unread, and the fold is made again.

#![cfg_attr(not(feature = "server"), allow(dead_code))]

use crate::escape::JsNumber;
use crate::order::ts_key;
use crate::parse::{DEFAULT_MAX_DEPTH, LineParser};

/// What the model is asked to do with a fold, unless the operator gives
/// instructions of their own.
pub const INSTRUCTIONS: &str = "\
You maintain the long-term memory of an agent whose working-memory log has \
grown past what its context holds. You are given the previous summary (if \
any) and the oldest records of the log that are about to be dropped from \
the context, in the order they happened. Write the new summary that will \
replace both: the agent will continue its work with only this summary and \
the newer records, so anything you leave out is forgotten.

Keep, in this order, under these headings:
1. Task and constraints: what the agent is working on, for whom, and the \
rules, limits and requirements it was given.
2. Current state: where the work stands, what exists now (files, results, \
decisions in force), and what is in progress.
3. Learned and decided: facts discovered, decisions taken and their \
reasons, approaches that failed and why.
4. Next steps: what remains to be done, in order, with any open questions.
5. Promises and preferences: commitments made to the user or others, and \
the user's stated preferences, names, identifiers and exact values that \
must not change.

Carry forward everything from the previous summary that is still true; \
update what changed. Quote identifiers, numbers, paths, names and codes \
exactly. Be complete but concise: no preamble, no commentary, only the \
summary.";

/// How many of `tokens` (the replayed messages' token counts, in replay
/// order, the summary apart) to fold: `None` while they total at most
/// `at`. Otherwise the oldest messages until about `keep` tokens remain,
/// at most `max_fold` tokens of them (a backlog is folded over several
/// summaries), and never the newest message.
pub fn plan(tokens: &[u64], at: u64, keep: u64, max_fold: u64) -> Option<usize> {
    plan_with(tokens.len(), at, keep, max_fold, |i| tokens[i])
}

/// [`plan`] over `n` messages whose tokens `tokens_of(i)` gives, asked
/// only as far as the answer needs: from the newest back until the total
/// passes `at`, and from the oldest forward over what is folded (a huge
/// backlog is never counted whole).
pub fn plan_with(
    n: usize,
    at: u64,
    keep: u64,
    max_fold: u64,
    mut tokens_of: impl FnMut(usize) -> u64,
) -> Option<usize> {
    if n < 2 {
        return None;
    }
    // From the newest back: where the newest `keep` tokens start, and
    // whether the whole passes `at`.
    let (mut sum, mut start, mut over) = (0u64, n, false);
    for i in (0..n).rev() {
        sum += tokens_of(i);
        if sum <= keep {
            start = i;
        }
        if sum > at {
            over = true;
            break;
        }
    }
    // The newest message always stays.
    let start = start.min(n - 1);
    if !over || start == 0 {
        return None;
    }
    let (mut k, mut folded) = (0, 0u64);
    while k < start {
        let t = tokens_of(k);
        if k > 0 && folded + t > max_fold {
            break;
        }
        folded += t;
        k += 1;
    }
    Some(k)
}

/// The text the model is given: the previous summary, then the records
/// folded (their message texts, as a turn shows them).
pub fn input(previous: Option<&str>, records: &str) -> String {
    let mut s = String::with_capacity(records.len() + previous.map_or(0, str::len) + 96);
    match previous {
        Some(p) => {
            s.push_str("<previous_summary>\n");
            s.push_str(p);
            s.push_str("\n</previous_summary>\n\n");
        }
        None => s.push_str("<previous_summary>(none: this is the first)</previous_summary>\n\n"),
    }
    s.push_str("<records>\n");
    s.push_str(records);
    s.push_str("\n</records>");
    s
}

/// The `text` of a summary from its message text (`WM_KIND=wm_summary`,
/// `ts_ms`, `WM_JSON: {…}`).
pub fn summary_text(message: &str) -> Option<String> {
    let json = &message[message.find("WM_JSON: ")? + "WM_JSON: ".len()..];
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get("text")?.as_str().map(str::to_string)
}

/// What one fold is about, for its record.
#[derive(Debug, Clone, PartialEq)]
pub struct Cover {
    /// The `ts_ms` of the last record folded.
    pub ts_ms: f64,
    /// The byte offset of its line.
    pub offset: u64,
    /// How many records were folded.
    pub records: usize,
    /// Their tokens.
    pub tokens: u64,
}

/// The summary record for `cover`, without a `ts_ms` (the writer stamps
/// it): `{"type":"wm_summary","covers":{"ts_ms":X,"offset":O},"text":…,
/// "folded":{"records":N,"tokens":T},"model":M}`.
pub fn record(cover: &Cover, text: &str, model: &str) -> String {
    record_cut(cover, text, model, None)
}

/// [`record`], with `"text_cut":{"bytes":N}` when the model's text (`N`
/// bytes) was cut to `text` (see [`held_summary`]).
pub(crate) fn record_cut(cover: &Cover, text: &str, model: &str, cut: Option<usize>) -> String {
    let ts = JsNumber::new(cover.ts_ms);
    let ts = std::str::from_utf8(ts.as_bytes()).unwrap_or("0");
    let s = |v: &str| serde_json::to_string(v).expect("a string serialises");
    let cut = cut.map_or(String::new(), |n| {
        format!(",\"text_cut\":{{\"bytes\":{n}}}")
    });
    format!(
        "{{\"type\":\"{}\",\"covers\":{{\"ts_ms\":{ts},\"offset\":{}}},\"text\":{}{cut},\
         \"folded\":{{\"records\":{},\"tokens\":{}}},\"model\":{}}}",
        super::memory::SUMMARY,
        cover.offset,
        s(text),
        cover.records,
        cover.tokens,
        s(model),
    )
}

/// A summary the model wrote, held to what a summary may be: at most one
/// and a half times `max_output_tokens` (the summary's token limit, counted
/// with `tokenizer`: providers count a little differently, so an answer
/// that kept to its limit is never cut) and a record of at most
/// `max_record_bytes`. An upstream or a gateway that ignores the token
/// limit then cannot make one summary, replayed first in every later
/// request, as long as it likes. Returns the record (see [`record`]) and
/// whether the text was cut (`"text_cut":{"bytes":N}` in it).
pub fn held_summary(
    cover: &Cover,
    text: &str,
    model: &str,
    max_output_tokens: u32,
    tokenizer: crate::Tokenizer,
    max_record_bytes: usize,
) -> (String, bool) {
    let whole = record(cover, text, model);
    let limit = u64::from(max_output_tokens) * 3 / 2;
    // Fewer bytes than the limit is fewer tokens too.
    let over_tokens = text.len() as u64 > limit && tokenizer.count(text) > limit;
    if whole.len() <= max_record_bytes && !over_tokens {
        return (whole, false);
    }
    let mut kept = text;
    if over_tokens {
        // The longest start, cut at a character, within the limit; looked
        // for among the first 32 bytes a token (more than any text has).
        let mut hi = text
            .len()
            .min(usize::try_from(limit.saturating_mul(32)).unwrap_or(usize::MAX));
        while !text.is_char_boundary(hi) {
            hi -= 1;
        }
        let mut lo = 0usize;
        while lo < hi {
            let mut mid = (lo + hi).div_ceil(2);
            while !text.is_char_boundary(mid) {
                mid -= 1;
            }
            if mid <= lo {
                // No boundary in (lo, hi]'s lower half: step past one char.
                let next = text[lo..]
                    .chars()
                    .next()
                    .map_or(text.len(), |c| lo + c.len_utf8());
                if next <= hi && tokenizer.count(&text[..next]) <= limit {
                    lo = next;
                } else {
                    hi = lo;
                }
                continue;
            }
            if tokenizer.count(&text[..mid]) <= limit {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        kept = &text[..lo];
    }
    let frame = record_cut(cover, "", model, Some(text.len())).len();
    kept = crate::escape::fit_json(kept, max_record_bytes.saturating_sub(frame) + 2);
    (record_cut(cover, kept, model, Some(text.len())), true)
}

/// The condition a summary is appended under: no record at or after byte
/// `since` of the log (written after the fold read it) sorts before
/// `below` (the cover's `ts_ms` key). Such a record was never folded but
/// would be covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    /// Where the log ended when the fold read it.
    pub since: u64,
    /// The `ts_ms` key (`order::ts_key`) of the cover.
    pub below: u64,
}

impl Guard {
    /// The offset (from `since`) of the first record in `bytes` (the log
    /// from `since` on) that breaks the guard.
    pub fn broken_by(&self, bytes: &[u8]) -> Option<u64> {
        let mut parser = LineParser::new(DEFAULT_MAX_DEPTH);
        let mut at = 0u64;
        for line in bytes.split(|&b| b == b'\n') {
            let here = at;
            at += line.len() as u64 + 1;
            let trimmed = line.trim_ascii();
            if trimmed.is_empty() {
                continue;
            }
            if let Ok(r) = parser.parse(trimmed, 0)
                && ts_key(r.ts_ms()) < self.below
            {
                return Some(self.since + here);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fold_keeps_about_keep_tokens_and_the_newest_message() {
        // Under `at`: nothing.
        assert_eq!(plan(&[10, 10, 10], 30, 15, 1000), None);
        // Over: the oldest until at most `keep` remain.
        assert_eq!(plan(&[10, 10, 10, 10], 30, 15, 1000), Some(3));
        assert_eq!(plan(&[10, 10, 10, 10], 30, 20, 1000), Some(2));
        // The newest stays, however big.
        assert_eq!(plan(&[1, 100], 30, 15, 1000), Some(1));
        assert_eq!(plan(&[100], 30, 15, 1000), None);
        // A backlog: at most `max_fold` tokens per fold (one message at least).
        assert_eq!(plan(&[10; 100], 30, 15, 25), Some(2));
        assert_eq!(plan(&[50, 10, 10], 30, 15, 25), Some(1));
    }

    #[test]
    fn the_record_names_its_cover_as_the_replay_reads_it() {
        let cover = Cover {
            ts_ms: 1.5e12,
            offset: 42,
            records: 3,
            tokens: 99,
        };
        let r = record(&cover, "line \"one\"\n", "m");
        assert_eq!(
            r,
            "{\"type\":\"wm_summary\",\"covers\":{\"ts_ms\":1500000000000,\"offset\":42},\
             \"text\":\"line \\\"one\\\"\\n\",\"folded\":{\"records\":3,\"tokens\":99},\"model\":\"m\"}"
        );
        let msg = format!("WM_KIND=wm_summary\nts_ms: 1\nWM_JSON: {r}");
        assert_eq!(summary_text(&msg).as_deref(), Some("line \"one\"\n"));
    }

    #[test]
    fn a_guard_is_broken_only_by_a_record_sorting_before_the_cover() {
        let g = Guard {
            since: 100,
            below: ts_key(50.0),
        };
        let ok = b"{\"type\":\"a\",\"ts_ms\":50}\n{\"type\":\"a\",\"ts_ms\":70}\nnot json\n";
        assert_eq!(g.broken_by(ok), None);
        let late = b"{\"type\":\"a\",\"ts_ms\":70}\n{\"type\":\"a\",\"ts_ms\":49}\n";
        assert_eq!(g.broken_by(late), Some(100 + 24));
        // A torn last line is not a record yet.
        assert_eq!(g.broken_by(b"{\"type\":\"a\",\"ts_ms\":4"), None);
    }
}
