//! Counting tokens for `--max-tokens` windows.
//!
//! [`Tokenizer::Bytes`] approximates a token as four bytes of text and needs
//! nothing. With the `tiktoken` feature, [`Tokenizer::O200k`] and
//! [`Tokenizer::Cl100k`] count exactly with OpenAI's encodings: their
//! vocabularies are compiled into the binary as ready tables (`build.rs`,
//! from the `tiktoken-rs` crate; see `src/select/bpe/`), so nothing is
//! downloaded or parsed at run time. The first count in a process builds
//! only the pre-tokenizer regex (a few milliseconds); [`Tokenizer::warm_up`]
//! starts that on another thread while the log is parsed.

#[cfg(feature = "tiktoken")]
use crate::select::bpe;

/// A way to count tokens.
///
/// ```
/// use wmreplay::Tokenizer;
///
/// let text = "WM_KIND=text_input\nts_ms: 1\nWM_JSON: {\"text\":\"hello world\"}";
/// // A quarter of the bytes, rounded up: fast, approximate.
/// assert_eq!(Tokenizer::Bytes.count(text), text.len().div_ceil(4) as u64);
/// // An exact count with tiktoken's o200k_base (the default).
/// let o200k = Tokenizer::O200k.count(text);
/// assert!(o200k > 0 && o200k < text.len() as u64);
/// // A cheap lower bound, used to skip counting records that cannot fit.
/// assert!(Tokenizer::O200k.least_tokens(text.len() as u64) <= o200k);
/// let parsed: Tokenizer = "cl100k".parse()?;
/// assert_eq!(parsed, Tokenizer::Cl100k);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokenizer {
    /// `ceil(bytes / 4)`: fast, approximate.
    Bytes,
    /// tiktoken's `o200k_base` (GPT-4o and later).
    #[cfg(feature = "tiktoken")]
    O200k,
    /// tiktoken's `cl100k_base` (GPT-4, GPT-3.5).
    #[cfg(feature = "tiktoken")]
    Cl100k,
}

/// `o200k_base` with the `tiktoken` feature, else `bytes`.
impl Default for Tokenizer {
    fn default() -> Self {
        #[cfg(feature = "tiktoken")]
        return Tokenizer::O200k;
        #[cfg(not(feature = "tiktoken"))]
        Tokenizer::Bytes
    }
}

/// Bytes of text tokenized so far in this process (see [`tokenized_bytes`]).
static TOKENIZED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bytes of text [`Tokenizer::count`] has read in this process: what tests
/// hold a window's work to.
#[doc(hidden)]
pub fn tokenized_bytes() -> u64 {
    TOKENIZED.load(std::sync::atomic::Ordering::Relaxed)
}

impl Tokenizer {
    /// The name the CLI spells it with.
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Bytes => "bytes",
            #[cfg(feature = "tiktoken")]
            Tokenizer::O200k => "o200k_base",
            #[cfg(feature = "tiktoken")]
            Tokenizer::Cl100k => "cl100k_base",
        }
    }

    /// A lower bound of the tokens of any text of at least `bytes` bytes,
    /// without reading it: no token is longer than the vocabulary's longest
    /// (computed once per vocabulary).
    pub fn least_tokens(self, bytes: u64) -> u64 {
        match self {
            Tokenizer::Bytes => bytes.div_ceil(4),
            #[cfg(feature = "tiktoken")]
            _ => bytes / self.longest_token(),
        }
    }

    /// Bytes of the vocabulary's longest token.
    #[cfg(feature = "tiktoken")]
    fn longest_token(self) -> u64 {
        match self {
            Tokenizer::Bytes => 4,
            Tokenizer::O200k => bpe::O200K.longest(),
            Tokenizer::Cl100k => bpe::CL100K.longest(),
        }
    }

    /// Tokens in `text`.
    pub fn count(self, text: &str) -> u64 {
        TOKENIZED.fetch_add(text.len() as u64, std::sync::atomic::Ordering::Relaxed);
        match self {
            Tokenizer::Bytes => text.len().div_ceil(4) as u64,
            #[cfg(feature = "tiktoken")]
            Tokenizer::O200k => bpe::O200K.count(text) as u64,
            #[cfg(feature = "tiktoken")]
            Tokenizer::Cl100k => bpe::CL100K.count(text) as u64,
        }
    }

    /// Starts building the pre-tokenizer on another thread, so the first
    /// [`count`](Self::count) does not wait for it (no-op for `bytes`).
    pub fn warm_up(self) {
        match self {
            Tokenizer::Bytes => {}
            #[cfg(feature = "tiktoken")]
            _ => {
                std::thread::spawn(move || self.count(""));
            }
        }
    }
}

impl std::str::FromStr for Tokenizer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bytes" => Ok(Tokenizer::Bytes),
            #[cfg(feature = "tiktoken")]
            "o200k_base" | "o200k" => Ok(Tokenizer::O200k),
            #[cfg(feature = "tiktoken")]
            "cl100k_base" | "cl100k" => Ok(Tokenizer::Cl100k),
            _ => Err(format!(
                "unknown tokenizer {s:?} (expected {})",
                if cfg!(feature = "tiktoken") {
                    "o200k_base, cl100k_base or bytes"
                } else {
                    "bytes; build with the `tiktoken` feature for o200k_base and cl100k_base"
                }
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_rounds_up() {
        assert_eq!(Tokenizer::Bytes.count(""), 0);
        assert_eq!(Tokenizer::Bytes.count("abcd"), 1);
        assert_eq!(Tokenizer::Bytes.count("abcde"), 2);
    }

    #[cfg(feature = "tiktoken")]
    #[test]
    fn tiktoken_counts_known_strings() {
        // Reference counts from OpenAI's tiktoken.
        assert_eq!(Tokenizer::Cl100k.count("hello world"), 2);
        assert_eq!(Tokenizer::O200k.count("hello world"), 2);
        assert_eq!(Tokenizer::Cl100k.count("tiktoken is great!"), 6);
        assert!(Tokenizer::O200k.count(&"lorem ipsum ".repeat(100)) > 100);
    }
}
