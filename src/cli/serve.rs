//! `wmreplay serve`: its flags, logging, binding and signals.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::ReplayOptions;
use clap::Args;

use super::Failure;
use super::args::*;
use super::signals::shutdown_signal;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The working-memory log the server replays and appends to (created if
    /// missing). Routes: /respond, /v1/context, /v1/records, /v1/stats, ….
    #[arg(
        long,
        env = "WMREPLAY_LOG",
        required_unless_present = "log_dir",
        conflicts_with = "log_dir"
    )]
    log: Option<PathBuf>,
    /// Serve every DIR/<id>.log instead of one log: the same routes under
    /// /v1/logs/{id}/… (respond, context, records, stats, turn/prepare,
    /// turn/ack), and GET /v1/logs. Ids are 1 to 128 of [A-Za-z0-9._-],
    /// starting with a letter or digit.
    #[arg(long, env = "WMREPLAY_LOG_DIR", value_name = "DIR")]
    log_dir: Option<PathBuf>,
    #[cfg(feature = "jetstream")]
    #[command(flatten)]
    jetstream: super::serve_more::JetStreamArgs,
    /// (In a build without the `jetstream` cargo feature: refused, saying so.)
    #[cfg(not(feature = "jetstream"))]
    #[arg(long, env = "WMREPLAY_JETSTREAM", value_name = "URL", hide = true)]
    jetstream: Option<String>,
    /// Under --log-dir: whether a log's first write creates it (otherwise
    /// writes to a missing log are 404s; reads are an empty replay either way).
    #[arg(long, env = "WMREPLAY_CREATE_LOGS", default_value = "true", value_name = "BOOL", action = clap::ArgAction::Set)]
    create_logs: bool,
    /// Under --log-dir: rendered bytes the live replays may hold together
    /// (the least recently used are dropped, and rebuilt from their file
    /// when asked for again) [default: a quarter of the memory the process may use: the machine's, or its container's cgroup limit when lower].
    #[arg(long, env = "WMREPLAY_MAX_LIVE_BYTES", value_name = "SIZE", value_parser = parse_live_bytes)]
    max_live_bytes: Option<u64>,
    /// Memory the requests' work may hold at once — bodies being parsed,
    /// replays being brought up to date, deltas being prepared — estimated
    /// before each starts; past it a request gets 503 with retry-after
    /// [default: a quarter of the memory the process may use: the machine's, or its container's cgroup limit when lower].
    #[arg(long, env = "WMREPLAY_MAX_MEMORY", value_name = "SIZE", value_parser = parse_live_bytes)]
    max_memory: Option<u64>,
    /// Under --log-dir: a live replay unused this long is dropped.
    #[arg(long, env = "WMREPLAY_IDLE_TIMEOUT", default_value = "10m", value_parser = parse_ttl)]
    idle_timeout: std::time::Duration,
    /// Under --log-dir: logs holding their files (store, index, writer) open
    /// at once; past it the least recently used close theirs (their live
    /// replay kept). Fewer when the open-files limit leaves no room.
    #[arg(long, env = "WMREPLAY_MAX_OPEN_LOGS", default_value_t = 200, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    max_open_logs: usize,
    /// Under --log-dir: logs whose live state is held at once, whatever
    /// their replays hold; past it the least recently used are dropped.
    #[arg(long, env = "WMREPLAY_MAX_LIVE_LOGS", default_value_t = 16_384, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000_000))]
    max_live_logs: usize,
    /// Largest record POST /v1/records accepts.
    #[arg(long, env = "WMREPLAY_MAX_RECORD_BYTES", default_value = "1MiB", value_name = "SIZE", value_parser = parse_body_limit)]
    max_record_bytes: u64,
    /// The environment variable holding the bearer token every route but
    /// /healthz then requires (Authorization: Bearer <token>). The token is
    /// never logged.
    #[arg(long, env = "WMREPLAY_AUTH_TOKEN_ENV", value_name = "VAR")]
    auth_token_env: Option<String>,
    /// Tokens scoped to logs: a file of lines `sha256:<hex> ACCESS LOGS`,
    /// ACCESS read, write or admin (every log, and /metrics), LOGS ids
    /// separated by commas, `prefix*` or `*` (under --log the log's id is
    /// its file name without .log). A token opens only its logs, on every
    /// route and door; another log is a 403. The file holds hashes, never
    /// tokens (`wmreplay token` makes one), and is read again on SIGHUP.
    /// Goes with --auth-token-env, whose token opens everything.
    #[arg(long, env = "WMREPLAY_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Listen on a non-loopback address without --auth-token-env (anyone who
    /// can reach the port can then read and append to the logs).
    #[arg(long, env = "WMREPLAY_ALLOW_UNAUTHENTICATED")]
    allow_unauthenticated: bool,
    /// A Host name the server answers besides this machine's own
    /// (repeatable, or comma-separated in the variable), e.g. the name a
    /// reverse proxy passes on: --allowed-host memory.example.com. On a
    /// loopback --addr only localhost and loopback addresses are answered
    /// otherwise (a web page that rebinds its own name to 127.0.0.1 is
    /// refused); elsewhere any name is, unless this is given. '*' answers
    /// every name.
    #[arg(
        long = "allowed-host",
        env = "WMREPLAY_ALLOWED_HOSTS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String>,
    /// The origin of a web page allowed to send requests (repeatable, or
    /// comma-separated in the variable), as scheme://host[:port]:
    /// --allowed-origin http://localhost:3000. A request from any other
    /// page (its Origin header, or Sec-Fetch-Site: cross-site) that is not
    /// a GET is refused with 403, and a text/plain or multipart body with
    /// 415, so that no web page can write into the log or spend the API key.
    #[arg(long = "allowed-origin", env = "WMREPLAY_ALLOWED_ORIGINS", value_name = "ORIGIN", value_delimiter = ',', value_parser = parse_origin)]
    allowed_origins: Vec<String>,
    /// The memory inspector, a read-only page at http://ADDR/ui (records,
    /// a turn as the model saw it, facts, summaries, search): on by default
    /// on a loopback address, off elsewhere.
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    ui: Option<String>,
    /// Address to listen on: HOST:PORT, where HOST is an IP address or a
    /// name (localhost:8787).
    #[arg(
        long,
        env = "WMREPLAY_ADDR",
        default_value = "127.0.0.1:8787",
        value_name = "HOST:PORT"
    )]
    addr: String,
    /// The model API: an http(s) base URL (https://api.anthropic.com; the
    /// provider's path is added) or a full endpoint URL. Without it, /respond
    /// answers with the request it would send and appends nothing.
    #[arg(long, env = "WMREPLAY_UPSTREAM", value_name = "URL", value_parser = parse_upstream)]
    upstream: Option<String>,
    /// An extra request field sent upstream, NAME=JSON (repeatable):
    /// --upstream-field temperature=0.2 --upstream-field
    /// 'stop_sequences=["END"]' (OpenAI: 'stop=["END"]'; either name is
    /// mapped to the provider's). A request's own "params" object adds to
    /// and overrides these. Both are checked against the provider's
    /// documented parameters at start-up and per request (400
    /// invalid_params naming the field); neither may set messages, system,
    /// model or stream.
    #[arg(long = "upstream-field", value_name = "NAME=JSON", value_parser = parse_field)]
    upstream_fields: Vec<(String, serde_json::Value)>,
    /// A request parameter passed upstream although this version's table of
    /// the provider's parameters does not list it (repeatable): for a
    /// parameter the provider added since.
    #[arg(long = "allow-param", value_name = "NAME")]
    allow_params: Vec<String>,
    /// An extra header sent with every upstream call, NAME=VALUE
    /// (repeatable), e.g. --upstream-header anthropic-beta=context-1m-2025-08-07
    /// or --upstream-header anthropic-version=2023-06-01 (replaces the
    /// built-in one). The API key's header is set from --api-key-env only.
    #[arg(long = "upstream-header", value_name = "NAME=VALUE", value_parser = parse_header)]
    upstream_headers: Vec<(String, String)>,
    /// Times a failed upstream call is tried again, as the providers' SDKs
    /// do: the upstream's x-should-retry first, else 408, 409, 429 and 5xx
    /// (and connection failures, and a stream overloaded before any text),
    /// with exponential backoff and jitter, honouring retry-after-ms, then
    /// retry-after, within --upstream-timeout. A 429 that says the quota or
    /// spend limit is used up (insufficient_quota) is not retried: waiting
    /// does not clear it.
    #[arg(long, env = "WMREPLAY_UPSTREAM_RETRIES", default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10))]
    upstream_retries: u32,
    /// How long an idempotency key (Idempotency-Key header or "request_id")
    /// is remembered, e.g. 24h, 7d (at most 365d).
    #[arg(long, env = "WMREPLAY_IDEMPOTENCY_TTL", default_value = "24h", value_parser = parse_ttl)]
    idempotency_ttl: std::time::Duration,
    /// How server logs are written: text (colour only on a terminal) or
    /// json (one object per line, for log shippers).
    #[arg(long, env = "WMREPLAY_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// The API the upstream speaks: anthropic (Messages) or openai (Chat Completions).
    #[arg(long, env = "WMREPLAY_PROVIDER", default_value = "anthropic", value_parser = parse_provider)]
    provider: crate::server::Provider,
    /// Model name sent upstream; required with --upstream (there is no
    /// built-in default), e.g. --model claude-sonnet-5-5.
    #[arg(long, env = "WMREPLAY_MODEL")]
    model: Option<String>,
    /// The answer's token limit sent upstream (max_tokens for Anthropic,
    /// max_completion_tokens for OpenAI). Not the replay window's budget,
    /// which is --max-tokens-window.
    #[arg(long, env = "WMREPLAY_MAX_OUTPUT_TOKENS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    max_output_tokens: u32,
    /// Renamed: the answer's limit is --max-output-tokens, the window's
    /// budget --max-tokens-window (`respond --max-tokens` is the window's).
    #[arg(long = "max-tokens", hide = true, value_name = "N")]
    old_max_tokens: Option<String>,
    /// Name of the environment variable holding the API key [default:
    /// ANTHROPIC_API_KEY, or OPENAI_API_KEY for openai]. With --upstream,
    /// a missing or empty key refuses to start; --api-key-env '' runs
    /// without one (an upstream that needs none). The key is never logged
    /// or echoed.
    #[arg(long, env = "WMREPLAY_API_KEY_ENV", value_name = "VAR")]
    api_key_env: Option<String>,
    /// Text placed before the system rule in the system prompt.
    #[arg(long, env = "WMREPLAY_SYSTEM", value_name = "TEXT")]
    system: Option<String>,
    /// Do not fsync each append (faster; a crash may lose the last turns).
    #[arg(long, env = "WMREPLAY_NO_FSYNC")]
    no_fsync: bool,
    /// Largest request body accepted, e.g. 1MiB (413 beyond).
    #[arg(long, env = "WMREPLAY_BODY_LIMIT", default_value = "1MiB", value_parser = parse_body_limit)]
    body_limit: u64,
    /// Replays and upstream calls running at once (at most 65536); more get 503.
    #[arg(long, env = "WMREPLAY_MAX_CONCURRENT", default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    max_concurrent: usize,
    /// Open connections at once (at most 1000000); a new one closes the
    /// longest-idle one, or waits when all are busy.
    #[arg(long, env = "WMREPLAY_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    max_connections: usize,
    /// Time allowed to send the request headers: seconds, or with a unit
    /// (500ms, 10s, 2m; at most 1d).
    #[arg(long, env = "WMREPLAY_HEADER_TIMEOUT", default_value = "10", value_parser = parse_timeout)]
    header_timeout: std::time::Duration,
    /// Time allowed to send the request body (408 beyond).
    #[arg(long, env = "WMREPLAY_BODY_TIMEOUT", default_value = "30", value_parser = parse_timeout)]
    body_timeout: std::time::Duration,
    /// Time allowed for the upstream's answer, retries included, or between
    /// two streamed pieces of it (504 beyond).
    #[arg(long, env = "WMREPLAY_UPSTREAM_TIMEOUT", default_value = "300", value_parser = parse_timeout)]
    upstream_timeout: std::time::Duration,
    /// A client that reads nothing of a streamed answer for this long is
    /// let go; the answer is still read to its end and appended.
    #[arg(long, env = "WMREPLAY_WRITE_TIMEOUT", default_value = "30", value_parser = parse_timeout)]
    write_timeout: std::time::Duration,
    /// A connection with no request in flight for this long is closed (a
    /// new connection closes the longest-idle one sooner when all
    /// --max-connections are open).
    #[arg(long, env = "WMREPLAY_KEEP_ALIVE_TIMEOUT", default_value = "60", value_parser = parse_timeout)]
    keep_alive_timeout: std::time::Duration,
    /// On SIGINT/SIGTERM, the time open requests get to finish (their
    /// appends included) before the server closes what is left and exits.
    #[arg(long, env = "WMREPLAY_SHUTDOWN_TIMEOUT", default_value = "10", value_parser = parse_timeout)]
    shutdown_timeout: std::time::Duration,
    /// Worker threads for replaying (0 = one per core; at most 4 per core
    /// are used).
    #[arg(long, env = "WMREPLAY_THREADS", default_value_t = 0, value_name = "N")]
    threads: usize,
    /// Deepest nesting accepted in a line; deeper lines are skipped.
    #[arg(long, env = "WMREPLAY_MAX_DEPTH", default_value_t = crate::DEFAULT_MAX_DEPTH, value_name = "N")]
    max_depth: usize,
    /// What WM_JSON holds: raw (the line as written) or js (as Node.js's
    /// JSON.stringify writes the parsed record).
    #[arg(long, env = "WMREPLAY_RECORD", default_value = "raw", value_parser = parse_record)]
    record: crate::RecordMode,
    /// Replay only records whose session_id is ID, and records with none.
    #[arg(
        long,
        env = "WMREPLAY_SESSION",
        value_name = "ID",
        conflicts_with = "sessions_apart"
    )]
    session: Option<String>,
    /// Keep sessions apart: each turn replays only its own session's records
    /// (the session a request names: `session_id`, the `wmreplay-session`
    /// header, or a client's own, such as Claude Code's) and records with
    /// none. Without it every turn replays every session.
    #[arg(long, env = "WMREPLAY_SESSIONS_APART")]
    sessions_apart: bool,
    /// Replay only records whose type is one of these (comma-separated).
    #[arg(
        long,
        env = "WMREPLAY_KINDS",
        value_delimiter = ',',
        value_name = "KIND,..."
    )]
    kinds: Option<Vec<String>>,
    /// Replay only records with ts_ms >= MS.
    #[arg(
        long,
        env = "WMREPLAY_SINCE",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    since: Option<f64>,
    /// Replay only records with ts_ms <= MS.
    #[arg(
        long,
        env = "WMREPLAY_UNTIL",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    until: Option<f64>,
    /// Replay only the last N records.
    #[arg(long, env = "WMREPLAY_TAIL", value_name = "N")]
    tail: Option<usize>,
    /// Replay the newest records whose message texts fit T tokens.
    #[arg(long, env = "WMREPLAY_MAX_TOKENS_WINDOW", value_name = "T")]
    max_tokens_window: Option<u64>,
    /// How the window counts tokens: o200k_base, cl100k_base or bytes.
    #[arg(long, env = "WMREPLAY_TOKENIZER", default_value = "o200k_base", value_parser = parse_tokenizer)]
    tokenizer: crate::Tokenizer,
    /// Cache-stable trimming of the token or tail window (see `respond
    /// --help`); the start is remembered per log, across restarts.
    #[arg(long, env = "WMREPLAY_TRIM_TO", value_name = "F")]
    trim_to: Option<f64>,
    /// Start the window on a record of this type (e.g. text_input), so it
    /// never opens with an answer whose question was cut off.
    #[arg(long, env = "WMREPLAY_START_ON", value_name = "TYPE")]
    start_on: Option<String>,
    /// Mark the unanswered text_input with a first line PENDING_USER_INPUT.
    #[arg(long, env = "WMREPLAY_MARK_PENDING")]
    mark_pending: bool,
    /// Replay the newest wm_summary record first, in place of the records
    /// it covers (records written after it always replay); see `wmreplay
    /// respond --help`.
    #[arg(long, env = "WMREPLAY_SUMMARIES")]
    summaries: bool,
    /// Replay the wm_fact records as one WM_KIND=wm_facts message of every
    /// live key's latest value, just before CURRENT_USER_REQUEST (set them
    /// with PUT /v1/facts/{key}).
    #[arg(long, env = "WMREPLAY_FACTS")]
    facts: bool,
    /// Compaction: when the records replayed after the newest summary pass
    /// T tokens (counted with --tokenizer), fold the oldest of them into a
    /// new wm_summary written by the upstream model, in the background
    /// (one at a time per log; a failure writes nothing and is retried).
    /// Needs --summaries and --upstream. Example: --summaries --compact-at
    /// 100000 keeps each request's replay under about 100k tokens.
    #[arg(long, env = "WMREPLAY_COMPACT_AT", value_name = "T")]
    compact_at: Option<u64>,
    /// The share of --compact-at left replayed after a fold: the next fold
    /// comes (1-F)×T tokens later, and the cached prefix holds until then.
    #[arg(
        long,
        env = "WMREPLAY_COMPACT_TO",
        value_name = "F",
        default_value_t = 0.5,
        requires = "compact_at"
    )]
    compact_to: f64,
    /// A file of instructions for the summary, instead of the built-in ones
    /// (`wmreplay compact --print-prompt` shows them).
    #[arg(
        long,
        env = "WMREPLAY_COMPACT_PROMPT",
        value_name = "FILE",
        requires = "compact_at"
    )]
    compact_prompt: Option<std::path::PathBuf>,
    /// The model that writes summaries [default: --model].
    #[arg(
        long,
        env = "WMREPLAY_COMPACT_MODEL",
        value_name = "NAME",
        requires = "compact_at"
    )]
    compact_model: Option<String>,
    /// A summary's token limit.
    #[arg(
        long,
        env = "WMREPLAY_COMPACT_MAX_OUTPUT_TOKENS",
        value_name = "N",
        default_value_t = 4096,
        requires = "compact_at"
    )]
    compact_max_output_tokens: u32,
    #[command(flatten)]
    memory: super::serve_more::MemoryArgs,
    /// Prompt caching. auto: with Anthropic, up to 4 cache_control
    /// breakpoints placed so that each turn reads the previous turn's prefix
    /// from the cache (the last replayed message, the previous turn's last
    /// mark after a burst of records, stable positions, the system block);
    /// with OpenAI, a prompt_cache_key so one log's requests share a cache.
    /// none: the requests carry neither.
    #[arg(long, env = "WMREPLAY_CACHE", value_name = "auto|none", default_value = "auto", value_parser = ["auto", "none"])]
    cache: String,
    /// Lifetime of the Anthropic cache entries: 5m (writes cost 1.25x input,
    /// each hit refreshes it) or 1h (2x).
    #[arg(long, env = "WMREPLAY_CACHE_TTL", value_name = "5m|1h", default_value = "5m", value_parser = parse_cache_ttl)]
    cache_ttl: crate::CacheTtl,
    /// OpenAI's prompt_cache_key [default: derived from the log's path and
    /// the selection].
    #[arg(long, env = "WMREPLAY_CACHE_KEY", value_name = "KEY")]
    cache_key: Option<String>,
    /// The state store for session deltas and window starts [default:
    /// LOG.wmreplay.db].
    #[arg(long, env = "WMREPLAY_STATE", value_name = "PATH")]
    state: Option<PathBuf>,
}

/// Runs the server until SIGINT or SIGTERM.
pub fn serve(args: ServeArgs) -> Result<(), Failure> {
    use crate::server::{self, ApiKey, Config};
    init_logs(&args.log_format);
    crate::server::failpoint::from_env();
    let provider = args.provider;
    if args.old_max_tokens.is_some() || std::env::var_os("WMREPLAY_MAX_TOKENS").is_some() {
        return Err(Failure::Usage(
            "serve's --max-tokens (WMREPLAY_MAX_TOKENS) was renamed: the answer's token limit \
             is --max-output-tokens (WMREPLAY_MAX_OUTPUT_TOKENS), the replay window's budget \
             --max-tokens-window"
                .into(),
        ));
    }
    // With --forward-client-key the clients' own keys call the model on the
    // provider's routes: the server's is then needed only by /respond and
    // compaction, whose calls the upstream refuses without one.
    let api_key = super::serve_more::api_key(
        provider,
        args.api_key_env.clone(),
        args.upstream.is_some() && !args.memory.forward_client_key,
    )?;
    let auth_token = match &args.auth_token_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(t) if !t.trim().is_empty() => Some(ApiKey(t)),
            _ => {
                return Err(Failure::Usage(format!(
                    "--auth-token-env {var}: the variable is not set or empty"
                )));
            }
        },
    };
    let mut cfg = match (&args.log, &args.log_dir) {
        (Some(log), _) => Config::new(log),
        (None, Some(dir)) => {
            let mut c = Config::new(dir.join("unused.log"));
            c.log_dir = Some(dir.clone());
            c
        }
        (None, None) => return Err(Failure::Usage("--log or --log-dir is required".into())),
    };
    cfg.create_logs = args.create_logs;
    if let Some(b) = args.max_memory {
        cfg.max_memory = b;
    }
    if let Some(b) = args.max_live_bytes {
        cfg.max_live_bytes = b;
    }
    cfg.idle_timeout = args.idle_timeout;
    cfg.max_open_logs = args.max_open_logs;
    cfg.max_live_logs = args.max_live_logs;
    cfg.max_record_bytes = usize::try_from(args.max_record_bytes).unwrap_or(usize::MAX);
    cfg.auth_token = auth_token;
    cfg.token_file = args.token_file;
    cfg.browser = server::BrowserRules::new(&args.allowed_hosts, &args.allowed_origins);
    cfg.upstream = args.upstream;
    cfg.provider = provider;
    cfg.model = args.model.filter(|m| !m.trim().is_empty());
    cfg.max_output_tokens = args.max_output_tokens;
    cfg.api_key = api_key;
    cfg.system = args.system;
    cfg.fsync = !args.no_fsync;
    cfg.body_limit = usize::try_from(args.body_limit).unwrap_or(usize::MAX);
    cfg.max_concurrent = args.max_concurrent;
    cfg.max_connections = args.max_connections;
    cfg.header_timeout = args.header_timeout;
    cfg.body_timeout = args.body_timeout;
    cfg.upstream_timeout = args.upstream_timeout;
    cfg.write_timeout = args.write_timeout;
    cfg.keep_alive_timeout = args.keep_alive_timeout;
    cfg.shutdown_timeout = args.shutdown_timeout;
    cfg.upstream_retries = args.upstream_retries;
    cfg.upstream_fields = args.upstream_fields;
    cfg.allow_params = args.allow_params;
    cfg.upstream_headers = args.upstream_headers;
    cfg.idempotency_ttl = args.idempotency_ttl;
    cfg.replay = {
        let mut o = ReplayOptions::default();
        o.threads = args.threads;
        o.max_depth = args.max_depth;
        o.record = args.record;
        o
    };
    cfg.selection = {
        let mut o = crate::Selection::default();
        o.session = args.session;
        o.kinds = args.kinds;
        cfg.sessions_apart = args.sessions_apart;
        o.since = args.since;
        o.until = args.until;
        o.tail = args.tail;
        o.max_tokens = args.max_tokens_window;
        o.tokenizer = args.tokenizer;
        o.trim_to = args.trim_to;
        o.start_on = args.start_on;
        o.mark_pending = args.mark_pending;
        o.summaries = args.summaries;
        o.facts = args.facts;
        o
    };
    cfg.state = args.state;
    cfg.compaction = match args.compact_at {
        None => None,
        Some(at) => {
            let mut c = server::Compaction::new(at);
            c.to = args.compact_to;
            c.model = args.compact_model;
            c.max_output_tokens = args.compact_max_output_tokens;
            if let Some(file) = &args.compact_prompt {
                c.instructions = std::fs::read_to_string(file).map_err(|e| {
                    Failure::Usage(format!("--compact-prompt {}: {e}", file.display()))
                })?;
            }
            Some(c)
        }
    };
    args.memory.apply(&mut cfg)?;
    #[cfg(feature = "jetstream")]
    args.jetstream.apply(&mut cfg);
    #[cfg(not(feature = "jetstream"))]
    if args.jetstream.is_some() {
        return Err(Failure::Usage(
            "--jetstream: this wmreplay was built without the `jetstream` cargo feature; \
             build it with the default features (cargo build --release) or add \
             --features jetstream"
                .into(),
        ));
    }
    cfg.cache = args.cache == "auto";
    cfg.cache_ttl = args.cache_ttl;
    cfg.cache_key = args.cache_key;
    // Every setting checked before anything is bound or logged as listening.
    cfg.validate().map_err(Failure::Usage)?;
    if cfg.selection.max_tokens.is_some() || cfg.compaction.is_some() {
        cfg.selection.tokenizer.warm_up();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Io(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let stop = shutdown_signal();
        let listener = listen(&args.addr).await?;
        if let Ok(local) = listener.local_addr()
            && !local.ip().is_loopback()
            && cfg.auth_token.is_none()
            && cfg.token_file.is_none()
            && !args.allow_unauthenticated
        {
            return Err(Failure::Usage(format!(
                "--addr {}: not a loopback address, and no --auth-token-env or --token-file: \
                 anyone who can reach it could read and append to the logs; set a token, or \
                 pass --allow-unauthenticated",
                args.addr
            )));
        }
        let addr = listener
            .local_addr()
            .map_or_else(|_| args.addr.clone(), |a| a.to_string());
        let mut cfg = cfg;
        let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
        cfg.ui = args.ui.as_deref().map_or(loopback, |v| v == "on");
        let what = cfg.log_dir.as_ref().unwrap_or(&cfg.log).display().to_string();
        tracing::info!(addr = %addr, log = %what, upstream = cfg.upstream.is_some(), auth = cfg.auth_token.is_some(), "listening");
        if cfg.ui {
            tracing::info!(url = %format!("http://{addr}/ui"), "memory inspector");
        }
        server::serve(cfg, listener, async {
            stop.await;
            tracing::info!("signal received");
        })
            .await
            .map_err(|e| match e {
                server::ServeError::Config(m) => Failure::Usage(m),
                e => Failure::Io(e.to_string()),
            })
    })
}

/// Server logs on stderr: text (coloured only on a terminal) or JSON lines,
/// best effort (a line stderr cannot take is dropped and counted, never a
/// request lost for it).
fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(crate::server::StderrLog)
        .log_internal_errors(false)
        .with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
}

/// Binds `addr` (HOST:PORT, HOST a name or an address): the first of its
/// addresses that binds.
async fn listen(addr: &str) -> Result<tokio::net::TcpListener, Failure> {
    let resolved: Vec<std::net::SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| {
            Failure::Usage(format!(
                "--addr {addr:?}: not HOST:PORT or not resolvable: {e}"
            ))
        })?
        .collect();
    let mut last = None;
    for a in &resolved {
        match crate::server::bind(*a).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(Failure::Io(match last {
        Some(e) => format!("cannot listen on {addr}: {e}"),
        None => format!("--addr {addr:?} resolves to no address"),
    }))
}
