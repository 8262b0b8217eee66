//! tiktoken's pre-tokenizer: a text cut into the pieces byte-pair merging
//! counts, on the `regex` crate's automata.
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

/// `o200k_base`'s pattern without its look-ahead.
pub(super) const O200K_SPLIT: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"\p{N}{1,3}",
    "|",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    "|",
    r"\s*[\r\n]+",
    "|",
    r"\s+"
);

/// `cl100k_base`'s pattern without its look-ahead, its possessive
/// repetitions greedy.
pub(super) const CL100K_SPLIT: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+$|\s*[\r\n]|\s+";

/// A compiled pre-tokenizer.
pub(super) struct Splitter {
    regex: regex::Regex,
}

impl Splitter {
    /// `pattern`: [`O200K_SPLIT`] or [`CL100K_SPLIT`].
    pub(super) fn new(pattern: &str) -> Splitter {
        Splitter {
            regex: regex::Regex::new(pattern).expect("the pre-tokenizer pattern compiles"),
        }
    }

    /// Calls `piece` with each piece of `text`, in order; together they
    /// are `text`.
    pub(super) fn split(&self, text: &str, mut piece: impl FnMut(&str)) {
        let mut at = 0;
        while let Some(m) = self.regex.find_at(text, at) {
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

    /// The patterns here are tiktoken's, less what the splitter does by
    /// hand: the look-ahead, and cl100k's possessive marks.
    #[test]
    fn the_patterns_are_tiktokens_without_the_look_ahead() {
        assert_eq!(
            super::super::O200K_PATTERN.replace(r"|\s+(?!\S)|\s+", r"|\s+"),
            O200K_SPLIT
        );
        assert_eq!(
            super::super::CL100K_PATTERN
                .replace(r"|\s+(?!\S)|\s", r"|\s+")
                .replace("?+", "?")
                .replace("++", "+")
                .replace("*+", "*")
                .replace("{1,3}+", "{1,3}"),
            CL100K_SPLIT
        );
    }

    #[test]
    fn a_run_of_spaces_leaves_its_last_to_the_word() {
        let s = Splitter::new(O200K_SPLIT);
        let mut pieces = Vec::new();
        s.split("a   b  \n c   ", |p| pieces.push(p.to_string()));
        assert_eq!(pieces, ["a", "  ", " b", "  \n", " c", "   "]);
    }
}
