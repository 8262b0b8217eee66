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
    /// Serve every `DIR/<id>.log` under `/v1/logs/{id}/…` instead of the
    /// one [`log`](Self::log).
    pub log_dir: Option<PathBuf>,
    /// Under `log_dir`: a log that does not exist is created by its first
    /// write (otherwise a write to it is a 404). Default on.
    pub create_logs: bool,
    /// Under `log_dir`: rendered bytes the live replays may hold together;
    /// the least recently used are dropped beyond it (and rebuilt from their
    /// file when asked for again). Default a quarter of the machine's memory.
    pub max_live_bytes: u64,
    /// Under `log_dir`: a live replay unused this long is dropped. Default
    /// 10 minutes.
    pub idle_timeout: Duration,
    /// Largest record `POST /v1/records` accepts. Default 1 MiB.
    pub max_record_bytes: usize,
    /// Every route but `/healthz` requires `Authorization: Bearer <token>`.
    pub auth_token: Option<ApiKey>,
    /// Memory the requests' work may hold at once (bodies being parsed,
    /// replays being brought up to date, deltas being prepared), estimated
    /// before each starts; past it a request is answered 503 with
    /// `retry-after`. Default a quarter of the machine's memory.
    pub max_memory: u64,
}

impl Config {
    /// How much of a request body is read, and for how long.
    pub(crate) fn body_limits(&self) -> (usize, Duration) {
        (self.body_limit, self.body_timeout)
    }

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
            log_dir: None,
            create_logs: true,
            max_live_bytes: default_max_live_bytes(),
            max_memory: default_max_live_bytes(),
            idle_timeout: Duration::from_secs(600),
            max_record_bytes: 1 << 20,
            auth_token: None,
        }
    }
}

/// A quarter of the machine's memory (from `/proc/meminfo`), or 1 GiB where
/// that cannot be read.
fn default_max_live_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(1 << 30, |kb| kb * 1024 / 4)
}
