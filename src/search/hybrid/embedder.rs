//! What hybrid search asks of an embedding model ([`Embedder`]), how it
//! fails ([`EmbedError`]), and the limits it is used within
//! ([`HybridOptions`]). No HTTP here: the server feature's
//! `server::upstream::embed::HttpEmbedder` speaks the OpenAI-compatible
//! `/v1/embeddings` API behind this trait; a test or a package can bring
//! its own.

use std::time::{Duration, Instant};

/// A model that turns texts into vectors, for hybrid search
/// ([`SearchIndex::with_embedder`](crate::search::SearchIndex::with_embedder)).
///
/// `embed` is a blocking call, made off any async runtime's threads (the
/// search's own thread, or a background thread of the index's): one
/// request's worth of texts (a batch of at most
/// [`HybridOptions::batch`]), answered by `deadline`, retries included.
///
/// ```
/// use std::time::Instant;
/// use wmreplay::search::{EmbedError, Embedder};
///
/// /// Counts of three letters: a toy model.
/// struct Letters;
///
/// impl Embedder for Letters {
///     fn model(&self) -> &str {
///         "letters-3"
///     }
///     fn embed(&self, texts: &[String], _: Instant) -> Result<Vec<Vec<f32>>, EmbedError> {
///         Ok(texts
///             .iter()
///             .map(|t| "aeo".chars().map(|c| t.matches(c).count() as f32).collect())
///             .collect())
///     }
/// }
/// let v = Letters.embed(&["banana".into()], Instant::now()).unwrap();
/// assert_eq!(v, [vec![3.0, 0.0, 0.0]]);
/// ```
pub trait Embedder: Send + Sync {
    /// The model as the vectors kept record it: its name, and its
    /// dimensions when they were asked for (`text-embedding-3-small@256`).
    /// Vectors made by another model are made again.
    fn model(&self) -> &str;

    /// One vector per text, in order, all of one length (any scale: they
    /// are normalised), by `deadline`.
    fn embed(&self, texts: &[String], deadline: Instant) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Why an [`Embedder`] gave no vectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedError {
    refused: bool,
    message: String,
}

impl EmbedError {
    /// The model could not be asked, or failed (unreachable, timed out, a
    /// rate limit or a server error past its retries, a bad key): the
    /// texts are embedded by a later try.
    pub fn failed(message: impl Into<String>) -> EmbedError {
        EmbedError {
            refused: false,
            message: message.into(),
        }
    }

    /// The model refused these texts themselves (HTTP 400, 413, 422): they
    /// are tried in smaller batches, and a text refused alone is kept
    /// without a vector (found by its words only).
    pub fn refused(message: impl Into<String>) -> EmbedError {
        EmbedError {
            refused: true,
            message: message.into(),
        }
    }

    /// Whether the texts were refused (see [`EmbedError::refused`]).
    pub fn is_refused(&self) -> bool {
        self.refused
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for EmbedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EmbedError {}

/// The limits hybrid search embeds within.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HybridOptions {
    /// Texts per request. Default 64.
    pub batch: usize,
    /// A record's text is its prose (string values but identifiers) joined
    /// by newlines, cut to this many bytes. Default 2048.
    pub max_text_bytes: usize,
    /// Requests in flight at once while records are embedded. Default 4.
    pub concurrency: usize,
    /// How long one request may take, its retries included. Default 60 s.
    pub batch_timeout: Duration,
    /// How long the query's own embedding may take, retries included;
    /// past it the search is lexical. Default 2 s.
    pub query_timeout: Duration,
    /// How long a search waits for the records appended since the last to
    /// be embedded (they are embedded on a background thread meanwhile):
    /// `None` waits until they are, or their embedding failed (the
    /// command line's default); the server waits 250 ms, and not at all
    /// while more than 1 MiB of the log waits (a first embedding).
    pub wait: Option<Duration>,
    /// After an embedding that failed, the next is tried no sooner than
    /// this. Default 5 s.
    pub retry_pause: Duration,
    /// How much the vectors count against the words: a record's fused
    /// score is its lexical score over the best one plus `vector_weight`
    /// times its cosine placed between the lowest (0) and the highest (1)
    /// of the vectors' candidates. The vectors lift a record by this much
    /// at most, so a record the words score more than this above another
    /// (as a share of their best) stays above it. 0 keeps the words'
    /// order and only appends what the vectors alone found. Default
    /// 0.3, chosen on two benchmarks with a small model weaker than the
    /// words there; a model stronger than the words on your records wants
    /// more (the project's BENCHMARKS.md, "Recall on long conversations").
    pub vector_weight: f64,
}

/// The default [`HybridOptions::vector_weight`], chosen on the project's
/// long-conversation recall benchmark with a small general-purpose
/// embedding model, whose ranking alone is below the words' ranking:
/// equal weights lost recall there, a lower weight gained it.
pub(crate) const VECTOR_WEIGHT: f64 = 0.3;

impl Default for HybridOptions {
    fn default() -> Self {
        HybridOptions {
            batch: 64,
            max_text_bytes: 2048,
            concurrency: 4,
            batch_timeout: Duration::from_secs(60),
            query_timeout: Duration::from_secs(2),
            wait: None,
            retry_pause: Duration::from_secs(5),
            vector_weight: VECTOR_WEIGHT,
        }
    }
}
