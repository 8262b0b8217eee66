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
    /// Model name sent upstream: required with an upstream (there is no
    /// built-in default: a model name retires under its users). Without
    /// one, bodies carry no leading fields.
    pub model: Option<String>,
    /// The answer's token limit sent upstream (`max_tokens` for Anthropic,
    /// which requires it; `max_completion_tokens` for OpenAI).
    pub max_output_tokens: u32,
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
    /// Parameter names passed upstream although the provider's table does
    /// not list them (`--allow-param`): for a parameter newer than this
    /// version.
    pub allow_params: Vec<String>,
    /// Extra headers sent with every upstream call (`--upstream-header`),
    /// e.g. `anthropic-beta`; they replace the provider's own of the same
    /// name (`anthropic-version`).
    pub upstream_headers: Vec<(String, String)>,
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
    /// Each turn replays only its own session's records (and those without
    /// a session): `serve --sessions-apart`.
    pub sessions_apart: bool,
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
    /// file when asked for again). Default a quarter of the memory the
    /// process may use (the machine's, or its cgroup limit when lower).
    pub max_live_bytes: u64,
    /// Under `log_dir`: a live replay unused this long is dropped. Default
    /// 10 minutes.
    pub idle_timeout: Duration,
    /// Under `log_dir`: logs that may hold their files (state store, search
    /// index) open at once; the least recently used close theirs beyond it
    /// (and open them again at their next request). Default 200, or fewer
    /// when the open-files limit is low.
    pub max_open_logs: usize,
    /// Under `log_dir`: logs whose live state may be held at once, whatever
    /// their replays hold (a read of a log that does not exist makes a state
    /// that holds nothing); the least recently used unused ones are dropped
    /// beyond it. Default 16,384.
    pub max_live_logs: usize,
    /// Largest record `POST /v1/records` accepts. Default 1 MiB.
    pub max_record_bytes: usize,
    /// Every route but `/healthz` requires `Authorization: Bearer <token>`.
    pub auth_token: Option<ApiKey>,
    /// Tokens scoped to logs (`--token-file`): each opens the logs its line
    /// names, to read or to write (see `tokens.rs`); read again on SIGHUP.
    pub token_file: Option<PathBuf>,
    /// Memory the requests' work may hold at once (bodies being parsed,
    /// replays being brought up to date, deltas being prepared), estimated
    /// before each starts; past it a request is answered 503 with
    /// `retry-after`. Default as `max_live_bytes`.
    pub max_memory: u64,
    /// Compaction (`--compact-at`): summaries written by the server when the
    /// replay after the newest one grows too long. Needs `--summaries` and
    /// an upstream. Default off.
    pub compaction: Option<Compaction>,
    /// Recall (`--recall K`): the K records best matching a turn's text that
    /// the replay does not hold, as one `WM_KIND=recall` message before the
    /// current request. Default off.
    pub recall: Option<usize>,
    /// The language the search index analyses words in (`--language`):
    /// recall, `POST /v1/search`, `search_memory`. Default English.
    pub language: crate::search::Language,
    /// Hybrid search (`--embed-upstream`, `--embed-model`): records are
    /// also embedded by this model and found by meaning, for recall,
    /// `POST /v1/search` and `search_memory`. Default none: search is
    /// lexical and no embedding API is called.
    pub embed: Option<super::upstream::EmbedConfig>,
    /// Tools the server offers the model and runs itself (`--recall-tool`,
    /// `--memory-tool`). Default none.
    pub tools: Tools,
    /// Logs kept in a NATS JetStream stream (`--jetstream`), the files of
    /// `log_dir` their caches. Default none: the files are the logs.
    #[cfg(feature = "jetstream")]
    pub jetstream: Option<super::writer::jetstream::JetStreamConfig>,
    /// An MCP server at `/mcp` (and `/v1/logs/{id}/mcp` under `log_dir`),
    /// streamable HTTP (`--mcp`). Default off.
    pub mcp: bool,
    /// How the provider-compatible endpoints (`/anthropic/v1/messages`,
    /// `/openai/v1/chat/completions`) authenticate upstream: with the
    /// server's own key (the client's key is then its access token), or
    /// with the key the client sends (`--forward-client-key`). Default the
    /// server's.
    pub forward_client_key: bool,
    /// The `Host` names and page origins the server answers besides its
    /// own (`--allowed-host`, `--allowed-origin`); see `browser.rs`.
    /// Default none: on loopback, only this machine's names, and no page
    /// of another origin.
    pub browser: super::browser::BrowserRules,
    /// The memory inspector page at `/ui` (`--ui`). Default on.
    pub ui: bool,
}

/// The tools a turn offers the model; the server runs each call itself
/// and continues the turn with its result (see `docs/server.md`, "Tools").
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Tools {
    /// `search_memory` (`--recall-tool`): the model searches the whole log.
    pub search_memory: bool,
    /// The memory tool (`--memory-tool`): files under `/memories`, kept as
    /// keyed-memory records of the log.
    pub memory: bool,
    /// Most rounds of tool calls run in one turn (`--max-tool-rounds`);
    /// the call after the last round offers no tool. Default 4.
    pub max_rounds: u32,
}

impl Default for Tools {
    fn default() -> Tools {
        Tools {
            search_memory: false,
            memory: false,
            max_rounds: 4,
        }
    }
}

impl Tools {
    /// Whether any tool is offered.
    pub fn any(&self) -> bool {
        self.search_memory || self.memory
    }
}

impl Config {
    /// A live replay of the log as this server keeps it.
    pub(crate) fn live(&self) -> crate::LiveReplay {
        let live = crate::LiveReplay::new(&self.log, self.provider.format(), self.replay.clone())
            .with_selection(self.selection.clone());
        if self.recall.is_some() || self.tools.search_memory {
            live.tracking_selected()
        } else {
            live
        }
    }
}

/// When and how the server folds the oldest replayed records into a new
/// `wm_summary` (see `docs/server.md`, "Compaction").
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Compaction {
    /// Fold once the records replayed after the newest summary pass this
    /// many tokens (counted with the selection's tokenizer).
    pub at: u64,
    /// Keep about `to × at` tokens of records replayed after a fold, in
    /// (0, 1). Default 0.5.
    pub to: f64,
    /// What the model is told to do with a fold [default:
    /// [`Compaction::INSTRUCTIONS`]].
    pub instructions: String,
    /// The model that writes summaries [default: the server's model].
    pub model: Option<String>,
    /// A summary's token limit. Default 4096.
    pub max_output_tokens: u32,
}

impl Compaction {
    /// The default instructions of a fold.
    pub const INSTRUCTIONS: &'static str = crate::select::fold::INSTRUCTIONS;

    /// Folds past `at` tokens, the other settings by default.
    pub fn new(at: u64) -> Compaction {
        Compaction {
            at,
            to: 0.5,
            instructions: Self::INSTRUCTIONS.to_string(),
            model: None,
            max_output_tokens: 4096,
        }
    }

    /// The tokens kept after a fold.
    pub(crate) fn keep(&self) -> u64 {
        (self.at as f64 * self.to).floor() as u64
    }
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
            model: None,
            max_output_tokens: 1024,
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
            allow_params: Vec::new(),
            upstream_headers: Vec::new(),
            idempotency_ttl: Duration::from_secs(24 * 3600),
            write_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(10),
            replay: ReplayOptions::default(),
            selection: Selection::default(),
            sessions_apart: false,
            state: None,
            cache: true,
            cache_ttl: CacheTtl::FiveMinutes,
            cache_key: None,
            log_dir: None,
            create_logs: true,
            max_live_bytes: default_max_live_bytes(),
            max_memory: default_max_live_bytes(),
            idle_timeout: Duration::from_secs(600),
            max_open_logs: 200,
            max_live_logs: 16_384,
            max_record_bytes: 1 << 20,
            auth_token: None,
            token_file: None,
            compaction: None,
            recall: None,
            language: crate::search::Language::default(),
            embed: None,
            tools: Tools::default(),
            #[cfg(feature = "jetstream")]
            jetstream: None,
            mcp: false,
            forward_client_key: false,
            browser: super::browser::BrowserRules::default(),
            ui: true,
        }
    }
}

/// A quarter of the memory this process may use: the machine's
/// (`/proc/meminfo`), or its container's limit when lower (cgroup v2
/// `memory.max`, v1 `memory.limit_in_bytes`); 1 GiB where neither can be
/// read.
fn default_max_live_bytes() -> u64 {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| kb * 1024);
    let limit = match (machine, cgroup_memory_limit()) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    };
    limit.map_or(1 << 30, |b| b / 4)
}

/// The memory limit of this process's cgroup, if it has one.
fn cgroup_memory_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_limit_in(&cgroups, |p| std::fs::read_to_string(p).ok())
}

/// The limit named by `/proc/self/cgroup`'s text, reading files through
/// `read` (v2's unified hierarchy first, then v1's memory controller). A
/// limit of `max`, or v1's "unlimited" (a page-rounded `i64::MAX`), is none.
fn cgroup_limit_in(cgroups: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let parse = |s: String| {
        let s = s.trim();
        s.parse::<u64>().ok().filter(|&b| b < 1 << 60)
    };
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_end_matches('/');
        if controllers.is_empty() {
            if let Some(b) = read(&format!("/sys/fs/cgroup{path}/memory.max")).and_then(parse) {
                return Some(b);
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            let file = format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes");
            if let Some(b) = read(&file).and_then(parse) {
                return Some(b);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::cgroup_limit_in;

    #[test]
    fn a_containers_memory_limit_is_read_from_its_cgroup() {
        let files = |p: &str| match p {
            "/sys/fs/cgroup/kubepods/pod1/memory.max" => Some("536870912\n".to_string()),
            "/sys/fs/cgroup/unlimited/memory.max" => Some("max\n".to_string()),
            "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes" => {
                Some("268435456\n".to_string())
            }
            "/sys/fs/cgroup/memory/free/memory.limit_in_bytes" => {
                Some("9223372036854771712\n".to_string())
            }
            _ => None,
        };
        assert_eq!(
            cgroup_limit_in("0::/kubepods/pod1\n", files),
            Some(512 << 20)
        );
        assert_eq!(cgroup_limit_in("0::/unlimited\n", files), None);
        assert_eq!(
            cgroup_limit_in("12:cpu:/x\n4:memory:/docker/abc\n", files),
            Some(256 << 20)
        );
        assert_eq!(cgroup_limit_in("4:memory:/free\n", files), None);
        assert_eq!(cgroup_limit_in("", files), None);
    }
}
