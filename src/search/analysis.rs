//! How a record's text and a query become the terms they are matched by:
//! the index's language.
//!
//! Each searched string value of a record (see `text.rs`) is either
//!
//! - an **identifier**: one token with a digit in it and no whitespace
//!   (`"D4:12"`, `"call_8f2a"`, `"2026-11-28"`, a UUID), at most
//!   [`MAX_WORD`](super::text::MAX_WORD) bytes. It is kept whole,
//!   lowercased, in a field of its own that counts at [`IDENT_WEIGHT`], so
//!   that its digits never pass for words of prose (a question holding
//!   "13" does not rank every record numbered 13 first), and a query
//!   naming it still finds it;
//! - or **prose**: split into words (`text::words`), each lowercased,
//!   stemmed by the language's Snowball stemmer (English: `hiking`,
//!   `hiked` → `hike`; `pets` → `pet`; `maya's` → `maya`), then folded to
//!   its letters without diacritics (`café` → `cafe`).
//!
//! A query is split the same way. Its stop words (`what`, `did`, `the`, …)
//! count at [`STOP_WEIGHT`] when it has any other word, so that short
//! records sharing only those do not rise to the top; a query made only of
//! stop words counts them fully (the index holds every word).
//!
//! With [`Language::NONE`] words are only lowercased and folded: no
//! stemming, no stop words.

use rustc_hash::FxHashMap;
use tantivy::tokenizer::{RawTokenizer, StopWordFilter, TextAnalyzer};
use unicode_normalization::UnicodeNormalization;

use super::text::{self, MAX_WORD};
use crate::error::Error;

/// How much a match of an identifier counts next to a word of prose.
pub(crate) const IDENT_WEIGHT: f32 = 0.5;

/// How much a query's stop word counts next to its other words: enough to
/// order the records that share the query's content words and to fill the
/// ranks past them, never enough to outrank a content word (measured on
/// `bench/recall`: dropping them lost 3 points of recall at 50, counting
/// them fully lost 10 at 5).
pub(crate) const STOP_WEIGHT: f32 = 0.3;

/// The language an index analyses its words in: a Snowball stemmer and
/// its stop words, or none.
///
/// ```
/// use wmreplay::search::Language;
/// assert_eq!(Language::default(), Language::ENGLISH);
/// assert_eq!(Language::parse("de").unwrap().name(), "german");
/// assert_eq!(Language::parse("none").unwrap(), Language::NONE);
/// assert!(Language::parse("klingon").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Language(Option<frostem::Algorithm>);

impl Default for Language {
    fn default() -> Self {
        Language::ENGLISH
    }
}

impl Language {
    /// English: the Snowball English (Porter2) stemmer and stop words.
    pub const ENGLISH: Language = Language(Some(frostem::Algorithm::English));
    /// No stemming and no stop words: words are only lowercased and folded.
    pub const NONE: Language = Language(None);

    /// The names [`parse`](Self::parse) takes.
    pub const NAMES: &'static [&'static str] = &[
        "none",
        "arabic",
        "danish",
        "dutch",
        "english",
        "finnish",
        "french",
        "german",
        "greek",
        "hungarian",
        "italian",
        "norwegian",
        "portuguese",
        "romanian",
        "russian",
        "spanish",
        "swedish",
        "tamil",
        "turkish",
    ];

    /// A language by its name (`english`), or an ISO 639 code (`en`,
    /// `eng`); `none` for no stemming.
    pub fn parse(name: &str) -> Result<Language, Error> {
        let n = name.trim().to_ascii_lowercase();
        if n == "none" {
            return Ok(Language::NONE);
        }
        frostem::Algorithm::from_name(&n)
            .ok()
            .filter(|a| Language::NAMES.contains(&a.name()))
            .map(|a| Language(Some(a)))
            .ok_or_else(|| {
                Error::Query(format!(
                    "unknown language {name:?}: one of {}",
                    Language::NAMES.join(", ")
                ))
            })
    }

    /// Its name, as [`parse`](Self::parse) takes it.
    pub fn name(self) -> &'static str {
        self.0.map_or("none", |a| a.name())
    }

    /// Its stop words' filter, when it has a list.
    fn stop_words(self) -> Option<TextAnalyzer> {
        use tantivy::tokenizer::Language as L;
        let l = match self.0? {
            frostem::Algorithm::English => {
                return Some(
                    TextAnalyzer::builder(RawTokenizer::default())
                        .filter(StopWordFilter::remove(
                            super::stop_words::ENGLISH.iter().map(|w| w.to_string()),
                        ))
                        .build(),
                );
            }
            frostem::Algorithm::Danish => L::Danish,
            frostem::Algorithm::Dutch => L::Dutch,
            frostem::Algorithm::Finnish => L::Finnish,
            frostem::Algorithm::French => L::French,
            frostem::Algorithm::German => L::German,
            frostem::Algorithm::Hungarian => L::Hungarian,
            frostem::Algorithm::Italian => L::Italian,
            frostem::Algorithm::Norwegian => L::Norwegian,
            frostem::Algorithm::Portuguese => L::Portuguese,
            frostem::Algorithm::Russian => L::Russian,
            frostem::Algorithm::Spanish => L::Spanish,
            frostem::Algorithm::Swedish => L::Swedish,
            _ => return None,
        };
        Some(
            TextAnalyzer::builder(RawTokenizer::default())
                .filter(StopWordFilter::new(l)?)
                .build(),
        )
    }
}

/// The field a term is matched in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Prose,
    Ident,
}

/// The terms a query is matched by: each once, in order of first
/// appearance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Terms {
    /// Words of prose.
    pub(crate) prose: Vec<String>,
    /// The query's stop words, when it has other words: prose words that
    /// count at [`STOP_WEIGHT`].
    pub(crate) stop: Vec<String>,
    /// Identifiers.
    pub(crate) ident: Vec<String>,
    /// Whether the query asks about time (`when::asks_when`, English).
    pub(crate) when: bool,
    /// For such a query, the words that name a day, analysed.
    pub(crate) dates: Vec<String>,
}

impl Terms {
    pub(crate) fn is_empty(&self) -> bool {
        self.prose.is_empty() && self.ident.is_empty()
    }

    /// Each term with its field and weight.
    pub(crate) fn weighted(&self) -> Vec<(Field, &str, f32)> {
        let prose = self.prose.iter().map(|t| (Field::Prose, t.as_str(), 1.0));
        let stop = self
            .stop
            .iter()
            .map(|t| (Field::Prose, t.as_str(), STOP_WEIGHT));
        let ident = self
            .ident
            .iter()
            .map(|t| (Field::Ident, t.as_str(), IDENT_WEIGHT));
        prose.chain(stop).chain(ident).collect()
    }
}

/// Stems kept per analyser before the cache starts afresh.
const STEMS_KEPT: usize = 1 << 16;

/// Turns text into terms in one language; reusable buffers and a cache of
/// stems (most words repeat), so that a record costs no allocation once
/// its words were seen.
pub(crate) struct Analyzer {
    language: Language,
    stemmer: Option<frostem::Stemmer>,
    stems: FxHashMap<Box<str>, Box<str>>,
    word: String,
    folded: String,
}

impl Analyzer {
    pub(crate) fn new(language: Language) -> Analyzer {
        Analyzer {
            language,
            stemmer: language.0.map(frostem::Stemmer::new),
            stems: FxHashMap::default(),
            word: String::new(),
            folded: String::new(),
        }
    }

    /// Calls `term(field, term)` for each term of the searched text of
    /// `line`, a record's line.
    pub(crate) fn record(
        &mut self,
        line: &[u8],
        scratch: &mut text::Scratch,
        mut term: impl FnMut(Field, &str),
    ) {
        text::record_values(line, scratch, |value| self.value(value, &mut term));
    }

    /// The terms of one string value.
    fn value(&mut self, value: &str, term: &mut impl FnMut(Field, &str)) {
        if let Some(id) = identifier(value) {
            self.folded.clear();
            lowercase_into(id, &mut self.folded);
            term(Field::Ident, &self.folded);
            return;
        }
        self.prose(value, &mut |w| term(Field::Prose, w));
    }

    /// Calls `term` for each word of prose `text`, stemmed and folded.
    fn prose(&mut self, text: &str, term: &mut dyn FnMut(&str)) {
        let joins = self.language == Language::ENGLISH;
        let mut word = std::mem::take(&mut self.word);
        text::words(text, joins, &mut word, |w| term(self.stem(w)));
        self.word = word;
    }

    /// `word` (lowercased) stemmed, then folded.
    fn stem(&mut self, word: &str) -> &str {
        let Some(stemmer) = &self.stemmer else {
            self.folded.clear();
            fold_into(word, &mut self.folded);
            return &self.folded;
        };
        if !self.stems.contains_key(word) {
            let stemmed = stemmer.stem(word);
            let mut out = String::with_capacity(stemmed.len());
            fold_into(&stemmed, &mut out);
            if self.stems.len() >= STEMS_KEPT {
                self.stems.clear();
            }
            self.stems.insert(word.into(), out.into_boxed_str());
        }
        &self.stems[word]
    }

    /// The terms of `query`: its words (without stop words when it has
    /// others) and its identifiers, each once.
    pub(crate) fn query(&mut self, query: &str) -> Terms {
        let mut words: Vec<(String, bool)> = Vec::new();
        let mut stops = self.language.stop_words();
        let joins = self.language == Language::ENGLISH;
        let mut raw = Vec::new();
        text::words(query, joins, &mut String::new(), |w| {
            raw.push(w.to_string())
        });
        for w in raw {
            let stop = stops.as_mut().is_some_and(|s| {
                let mut ts = s.token_stream(&w);
                !ts.advance()
            });
            let t = self.stem(&w).to_string();
            if !words.iter().any(|(x, _)| *x == t) {
                words.push((t, stop));
            }
        }
        let mut stop = Vec::new();
        if words.iter().any(|(_, stop)| !stop) {
            stop = words.iter().filter(|w| w.1).map(|w| w.0.clone()).collect();
            words.retain(|(_, stop)| !stop);
        }
        let mut ident: Vec<String> = Vec::new();
        for token in query.split_whitespace() {
            let token = token.trim_matches(|c: char| !c.is_alphanumeric());
            if let Some(id) = identifier(token) {
                let mut lower = String::new();
                lowercase_into(id, &mut lower);
                if !ident.contains(&lower) {
                    ident.push(lower);
                }
            }
        }
        let when = self.language == Language::ENGLISH && super::when::asks_when(query);
        let dates = match when {
            true => (super::when::DATE_WORDS.iter())
                .map(|w| self.stem(w).to_string())
                .collect(),
            false => Vec::new(),
        };
        Terms {
            prose: words.into_iter().map(|(w, _)| w).collect(),
            stop,
            ident,
            when,
            dates,
        }
    }
}

/// `value` as an identifier: one token with a digit and no whitespace, at
/// most [`MAX_WORD`] bytes.
fn identifier(value: &str) -> Option<&str> {
    let v = value.trim();
    (!v.is_empty()
        && v.len() <= MAX_WORD
        && v.bytes().any(|b| b.is_ascii_digit())
        && !v.chars().any(char::is_whitespace))
    .then_some(v)
}

fn lowercase_into(s: &str, out: &mut String) {
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            out.extend(c.to_lowercase());
        }
    }
}

/// Appends `word` to `out` without diacritics (decomposed, combining
/// marks dropped); as is when it is ASCII or would lose every letter.
fn fold_into(word: &str, out: &mut String) {
    let start = out.len();
    if !word.is_ascii() {
        out.extend(
            word.nfkd()
                .filter(|&c| !unicode_normalization::char::is_combining_mark(c)),
        );
        if out.len() > start {
            return;
        }
    }
    out.push_str(word);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(language: Language, line: &str) -> Vec<(Field, String)> {
        let mut out = Vec::new();
        Analyzer::new(language).record(line.as_bytes(), &mut text::Scratch::default(), |f, t| {
            out.push((f, t.to_string()))
        });
        out
    }

    fn prose(language: Language, line: &str) -> Vec<String> {
        terms(language, line)
            .into_iter()
            .filter(|(f, _)| *f == Field::Prose)
            .map(|(_, t)| t)
            .collect()
    }

    #[test]
    fn english_words_are_stemmed_folded_and_possessives_dropped() {
        assert_eq!(
            prose(
                Language::ENGLISH,
                r#"{"type":"dialog","text":"Maya's pets went hiking; she researched Café prices"}"#
            ),
            [
                "maya", "pet", "went", "hike", "she", "research", "cafe", "price"
            ]
        );
        let q = Analyzer::new(Language::ENGLISH).query("When did Maya hike with her pet?");
        assert_eq!(q.prose, ["maya", "hike", "pet"]);
        // The stop words count, a little.
        assert_eq!(q.stop, ["when", "did", "with", "her"]);
        let w = q.weighted();
        assert_eq!(w[0], (Field::Prose, "maya", 1.0));
        assert_eq!(w[3], (Field::Prose, "when", STOP_WEIGHT));
    }

    #[test]
    fn identifiers_are_kept_whole_apart_from_prose() {
        assert_eq!(
            terms(
                Language::ENGLISH,
                r#"{"type":"dialog","dia_id":"D1:13","speaker":"Leo","text":"I have 13 cats"}"#
            ),
            [
                (Field::Ident, "d1:13".to_string()),
                (Field::Prose, "leo".to_string()),
                (Field::Prose, "i".to_string()),
                (Field::Prose, "have".to_string()),
                (Field::Prose, "13".to_string()),
                (Field::Prose, "cat".to_string()),
            ]
        );
        let q = Analyzer::new(Language::ENGLISH).query("what happened in D1:13?");
        assert_eq!(q.prose, ["happen", "d1", "13"]);
        assert_eq!(q.ident, ["d1:13"]);
    }

    #[test]
    fn a_query_of_stop_words_only_keeps_them() {
        let q = Analyzer::new(Language::ENGLISH).query("What is it?");
        assert_eq!(q.prose, ["what", "is", "it"]);
        assert!(q.stop.is_empty());
        let q = Analyzer::new(Language::NONE).query("What did they do?");
        assert_eq!(q.prose, ["what", "did", "they", "do"]);
    }

    #[test]
    fn no_language_only_lowercases_and_folds() {
        assert_eq!(
            prose(
                Language::NONE,
                r#"{"type":"a","text":"Hiking ÉCOLE Maya's"}"#
            ),
            ["hiking", "ecole", "maya", "s"]
        );
    }

    #[test]
    fn other_languages_stem_with_their_own_rules() {
        let de = Language::parse("german").unwrap();
        assert_eq!(prose(de, r#"{"type":"a","text":"Häuser"}"#), ["haus"]);
        assert!(Analyzer::new(de).query("die Häuser").prose == ["haus"]);
    }
}
