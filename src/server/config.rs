//! The server's settings: [`Config`], with documented defaults, checked at
//! start-up by [`Config::validate`].

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::upstream::{ApiKey, Provider};
use crate::{CacheTtl, ReplayOptions, Selection};

/// Everything `serve` needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The working-memory log.
    pub log: PathBuf,
    /// The model API's base URL (or full endpoint); `None`: answer with the
    /// request instead of calling a model.
    pub upstream: Option<String>,
    /// The API the upstream speaks.
    pub provider: Provider,
    /// Model name sent upstream.
    pub model: String,
    /// `max_tokens` sent upstream (Anthropic requires it).
    pub max_tokens: u32,
    /// The API key, if any.
    pub api_key: Option<ApiKey>,
    /// Text placed before the system rule.
    pub system: Option<String>,
    /// Sync each append to disk before acknowledging it.
    pub fsync: bool,
    /// Largest request body accepted (413 beyond).
    pub body_limit: usize,
    /// Replays (and upstream calls) running at once; more get 503.
    pub max_concurrent: usize,
    /// Open connections at once; more wait to be accepted.
    pub max_connections: usize,
    /// Time allowed to send the request headers.
    pub header_timeout: Duration,
    /// Time allowed to send the request body.
    pub body_timeout: Duration,
    /// Time allowed for the upstream's answer, retries included (504
    /// beyond), and between two pieces of a streamed answer.
    pub upstream_timeout: Duration,
    /// Times a failed upstream call is tried again (rate limits, overload,
    /// connection failures), with exponential backoff and jitter.
    pub upstream_retries: u32,
    /// The first retry's wait (it doubles with each, up to 30 s), unless the
    /// upstream's `retry-after` says otherwise.
    pub retry_min_delay: Duration,
    /// Extra request fields sent upstream (`--upstream-field`), after the
    /// defaults and before a request's own `params`.
    pub upstream_fields: Vec<(String, Value)>,
    /// How long an idempotency key is remembered.
    pub idempotency_ttl: Duration,
    /// A client that reads nothing of a response for this long is let go
    /// (a streamed answer is still read to its end and appended).
    pub write_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub keep_alive_timeout: Duration,
    /// On shutdown, the time open requests get to finish before their
    /// connections are closed.
    pub shutdown_timeout: Duration,
    /// Engine options for the replay.
    pub replay: ReplayOptions,
    /// Filters, windows and the pending mark for every replay.
    pub selection: Selection,
    /// The state store (session positions, window starts) [default: the
    /// log's path with `.wmreplay.db` appended]; opened on first use.
    pub state: Option<PathBuf>,
    /// Prompt caching: with Anthropic, `cache_control` breakpoints placed
    /// for an append-only replay (see [`crate::CachePolicy`]); with OpenAI,
    /// a `prompt_cache_key` so that one log's requests reach one cache.
    /// Default on.
    pub cache: bool,
    /// Lifetime of the Anthropic cache entries written. Default 5 minutes.
    pub cache_ttl: CacheTtl,
    /// OpenAI's `prompt_cache_key` [default: derived from the log's
    /// identity and the selection].
    pub cache_key: Option<String>,
}

impl Config {
    /// Defaults for a log, without an upstream.
    pub fn new(log: impl Into<PathBuf>) -> Self {
        Config {
            log: log.into(),
            upstream: None,
            provider: Provider::Anthropic,
            model: Provider::Anthropic.default_model().to_string(),
            max_tokens: 1024,
            api_key: None,
            system: None,
            fsync: true,
            body_limit: 1 << 20,
            max_concurrent: 64,
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            upstream_timeout: Duration::from_secs(300),
            upstream_retries: 2,
            retry_min_delay: Duration::from_millis(500),
            upstream_fields: Vec::new(),
            idempotency_ttl: Duration::from_secs(24 * 3600),
            write_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(10),
            replay: ReplayOptions::default(),
            selection: Selection::default(),
            state: None,
            cache: true,
            cache_ttl: CacheTtl::FiveMinutes,
            cache_key: None,
        }
    }
}
