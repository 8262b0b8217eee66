//! tiktoken's pre-tokenizer: a text cut into the pieces byte-pair merging
//! counts, on the `regex` crate's engine (`regex-automata`'s meta regex).
//! The pieces cover the text end to end, so each is found by a search
//! anchored where the last ended: forward only, about half the time of an
//! unanchored search (which also scans back for the match's start).
//!
//! tiktoken's patterns end in `\s+(?!\S)|\s+` (o200k) or `\s+(?!\S)|\s`
//! (cl100k): a run of spaces before a word leaves its last space to the
//! word. The `regex` crate has no look-ahead, so [`Splitter`] matches the
//! pattern with those alternatives as one `\s+` and gives the run's last
//! character back by hand. cl100k's possessive repetitions are written
//! greedy: none of them can backtrack into another match (each is followed
//! by what it cannot match, or by the end of the text). `tests/tokens.rs`
//! holds the counts to tiktoken-rs's own, whose engine is a backtracker.
//!
//! Why not fancy-regex, as tiktoken-rs: its matches take a cache from a
//! pool whose fast path belongs to one thread, and a server counts on many
//! (a cold log's first turn took ~45 ms against ~31 ms with this).

/// tiktoken's `pattern` as the `regex` crate runs it: its `\s+(?!\S)`
/// alternative folded into the last one (`\s+`, or cl100k's `\s`, made
/// `\s+`), which [`Splitter::split`] answers for by hand, and cl100k's
/// possessive repetitions made greedy.
pub(super) fn without_look_ahead(pattern: &str) -> String {
    pattern
        .replace(r"|\s+(?!\S)|\s+", r"|\s+")
        .replace(r"|\s+(?!\S)|\s", r"|\s+")
        .replace("?+", "?")
        .replace("++", "+")
        .replace("*+", "*")
        .replace("{1,3}+", "{1,3}")
}

/// A compiled pre-tokenizer.
pub(super) struct Splitter {
    regex: regex_automata::meta::Regex,
}

impl Splitter {
    /// tiktoken's `pattern` ([`without_look_ahead`]).
    pub(super) fn new(pattern: &str) -> Splitter {
        let pattern = without_look_ahead(pattern);
        Splitter {
            regex: regex_automata::meta::Regex::new(&pattern)
                .expect("the pre-tokenizer pattern compiles"),
        }
    }

    /// Calls `piece` with each piece of `text`, in order; together they
    /// are `text`.
    pub(super) fn split(&self, text: &str, mut piece: impl FnMut(&str)) {
        use regex_automata::{Anchored, Input};
        let mut at = 0;
        while at < text.len() {
            let here = Input::new(text).range(at..).anchored(Anchored::Yes);
            // Every character starts a match of some alternative (letters,
            // numbers, spaces, anything else), so the anchored search finds
            // each piece; the unanchored one only keeps a pattern that left
            // a gap cutting as tiktoken's engine would.
            let Some(m) = self
                .regex
                .search(&here)
                .or_else(|| self.regex.search(&Input::new(text).range(at..)))
            else {
                break;
            };
            let mut end = m.end();
            let found = &text[m.start()..end];
            // A run of spaces that ends in neither a newline nor the text
            // came from the last `\s+`, and a word follows it: tiktoken's
            // `\s+(?!\S)` leaves the run's last character to that word
            // (a run of one is its own piece, by the last alternative).
            if end < text.len()
                && let Some(last) = found.chars().next_back()
                && last.is_whitespace()
                && last != '\n'
                && last != '\r'
                && found.len() > last.len_utf8()
            {
                end -= last.len_utf8();
            }
            piece(&text[m.start()..end]);
            if end == at {
                // Never: every pattern's match is at least a character.
                break;
            }
            at = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the splitter runs has no look-around and no possessive
    /// repetition left (the `regex` crate would refuse it), and each
    /// pattern lost exactly its look-ahead alternative.
    #[test]
    fn the_patterns_lose_their_look_ahead_and_nothing_else() {
        for p in [super::super::O200K_PATTERN, super::super::CL100K_PATTERN] {
            let run = without_look_ahead(p);
            assert!(!run.contains("(?!") && !run.contains("++"), "{run}");
            assert_eq!(p.matches('|').count(), run.matches('|').count() + 1);
            regex_automata::meta::Regex::new(&run).unwrap();
        }
    }

    #[test]
    fn a_run_of_spaces_leaves_its_last_to_the_word() {
        let s = Splitter::new(super::super::O200K_PATTERN);
        let mut pieces = Vec::new();
        s.split("a   b  \n c   ", |p| pieces.push(p.to_string()));
        assert_eq!(pieces, ["a", "  ", " b", "  \n", " c", "   "]);
    }
}
