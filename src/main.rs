//! The `wmreplay` command line: replay a working-memory log into a request
//! body, the messages alone, or stats.
//!
//! Exit codes: 0 success (also when the reader of stdout goes away early),
//! 1 an I/O error (one line on stderr naming the path; also when the log was
//! truncated or replaced while it was read, or the state store failed),
//! 2 bad usage, 3 an unknown prepare_id given to `ack`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use wmreplay::{CurrentRequest, Format, LogBytes, ReadMode, Replay, ReplayOptions};

/// Replays an append-only JSONL working-memory log into the messages of an
/// LLM request: every record with a string `type` and a number `ts_ms`, in
/// `ts_ms` order, as a `WM_KIND=…` message, then the live request as
/// `CURRENT_USER_REQUEST`. Lines that are not valid records are skipped and
/// counted, never fatal. A missing log is an empty log.
///
/// Exit status: 0 success, 1 I/O error (the message names the file), 2 bad
/// usage, 3 `ack` of an unknown prepare_id.
#[derive(Parser, Debug)]
#[command(name = "wmreplay", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the request body (system rule, replayed log, CURRENT_USER_REQUEST) to stdout.
    Respond {
        /// The working-memory log (JSONL). A missing file is an empty log.
        log: PathBuf,
        /// The user's request text.
        #[arg(long)]
        text: String,
        /// The session id written in CURRENT_USER_REQUEST ("none" when absent).
        #[arg(long)]
        session: Option<String>,
        /// Replay only the records of --session (and records with no
        /// session_id).
        #[arg(long, requires = "session")]
        session_only: bool,
        /// Text placed before the system rule in the system prompt (persona, tone).
        #[arg(long, value_name = "TEXT")]
        system: Option<String>,
        /// Body format: anthropic (Messages API), openai (Chat Completions),
        /// ndjson (one message per line, system first, request last), or xml
        /// (a prompt: the <memory_context> document, then the
        /// CURRENT_USER_REQUEST text; no system rule).
        #[arg(long, default_value = "anthropic", value_parser = parse_format)]
        format: Format,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Print the replayed messages alone: a JSON array, NDJSON, or an XML
    /// <memory_context> document.
    Replay {
        /// The working-memory log (JSONL). A missing file is an empty log.
        log: PathBuf,
        /// Message shape: anthropic or openai (a JSON array), ndjson, or xml.
        #[arg(long, default_value = "anthropic", value_parser = parse_format)]
        format: Format,
        /// Keep only records whose session_id is ID, and records with none.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Prepare a turn for a session key (seed 003's delta injection): prints
    /// {"prepare_id","mode","from","to","records","body"}. The first prepare
    /// of a key (or after the log was replaced) is "full", the whole replay;
    /// later ones are "delta", only the records appended since the key's last
    /// acknowledged position, or "none" with an empty body. Acknowledge it
    /// with `wmreplay ack`; until then the same delta comes back.
    Prepare {
        /// The working-memory log (JSONL). A missing file is an empty log.
        log: PathBuf,
        /// The conversation whose position is used.
        #[arg(long, value_name = "K")]
        session_key: String,
        /// Body format: xml (<memory_context> or <memory_delta>), or the
        /// messages alone as anthropic, openai or ndjson.
        #[arg(long, default_value = "xml", value_parser = parse_format)]
        format: Format,
        /// Keep only records whose session_id is ID, and records with none.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Acknowledge a prepared turn: with --status success the session key's
    /// position moves past that prepare's records; with failed it stays, so
    /// the next prepare returns the same delta. Prints {"ok":true,...}. An
    /// unknown prepare_id exits with status 3.
    Ack {
        /// The working-memory log the prepare was made on.
        log: PathBuf,
        /// The id `wmreplay prepare` printed.
        prepare_id: String,
        /// How the turn went.
        #[arg(long, value_parser = ["success", "failed"])]
        status: String,
        /// The state store [default: LOG.wmreplay.db].
        #[arg(long, value_name = "PATH")]
        state: Option<PathBuf>,
    },
    /// Write a deterministic, realistic working-memory log (for benchmarks and tests).
    Gen {
        /// Where to write the log ("-" for stdout).
        out: PathBuf,
        /// How much to write, e.g. 100MiB, 1GiB, 64k (K/M/G/T with or without "iB"
        /// are powers of 1024; KB/MB/GB/TB powers of 1000).
        #[arg(long, value_parser = parse_size)]
        size: u64,
        /// RNG seed: the same seed and options give the same bytes.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Share of records arriving late, with an earlier ts_ms.
        #[arg(long, default_value_t = 0.03, value_parser = parse_share)]
        disorder: f64,
        /// Share of malformed lines (truncated, trailing garbage, wrong shape, blank, NUL padding).
        #[arg(long, default_value_t = 0.002, value_parser = parse_share)]
        bad: f64,
    },
    /// Run the respond server over one log (POST /respond, POST /v1/context,
    /// POST /v1/turn/prepare, POST /v1/turn/ack, GET /v1/stats, GET /healthz). Every flag can also be set through the
    /// environment variable shown. Stops cleanly on SIGINT or SIGTERM, after
    /// open requests and their appends finish. Logs go to stderr (RUST_LOG
    /// filters them, default "info").
    Serve(Box<ServeArgs>),
    /// Print the replay stats as one JSON object.
    Stats {
        /// The working-memory log (JSONL). A missing file is an empty log.
        log: PathBuf,
        /// Also list the first N skipped lines (line number, byte offset, reason).
        #[arg(long, value_name = "N")]
        skips: Option<usize>,
        /// Keep only records whose session_id is ID, and records with none.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        engine: EngineArgs,
    },
}

/// Which records to replay: filters, then windows (applied after ordering).
#[derive(Args, Debug, Clone)]
struct SelectArgs {
    /// Keep only records whose type is one of these (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    kinds: Option<Vec<String>>,
    /// Keep only records with ts_ms >= MS.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    since: Option<f64>,
    /// Keep only records with ts_ms <= MS.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    until: Option<f64>,
    /// Keep only the last N records (after the filters).
    #[arg(long, value_name = "N")]
    tail: Option<usize>,
    /// Keep the newest records whose message texts fit T tokens (the system
    /// prompt and the current request are not counted).
    #[arg(long, value_name = "T")]
    max_tokens: Option<u64>,
    /// How --max-tokens counts: o200k_base or cl100k_base (exact, built in,
    /// nothing downloaded) or bytes (bytes/4, fast).
    #[arg(long, default_value = "o200k_base", value_parser = parse_tokenizer)]
    tokenizer: wmreplay::Tokenizer,
    /// Cache-stable trimming: when the window overflows --max-tokens, move its
    /// start so it holds F x T tokens, and keep that start on later turns
    /// until it overflows again. The start is remembered in the state store.
    #[arg(long, value_name = "F", requires = "max_tokens")]
    trim_to: Option<f64>,
    /// Render the latest text_input that has no later text_output with a
    /// first line PENDING_USER_INPUT.
    #[arg(long)]
    mark_pending: bool,
    /// The state store for --trim-to and prepare/ack [default: LOG.wmreplay.db].
    #[arg(long, value_name = "PATH")]
    state: Option<PathBuf>,
}

impl SelectArgs {
    fn selection(&self, session: Option<String>) -> Result<wmreplay::Selection, Failure> {
        let sel = wmreplay::Selection {
            session,
            kinds: self.kinds.clone(),
            since: self.since,
            until: self.until,
            tail: self.tail,
            max_tokens: self.max_tokens,
            tokenizer: self.tokenizer,
            trim_to: self.trim_to,
            mark_pending: self.mark_pending,
        };
        sel.validate().map_err(Failure::Usage)?;
        if sel.max_tokens.is_some() {
            sel.tokenizer.warm_up();
        }
        Ok(sel)
    }

    fn store_path(&self, log: &std::path::Path) -> PathBuf {
        self.state
            .clone()
            .unwrap_or_else(|| wmreplay::state::Store::path_for(log))
    }
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// The working-memory log the server replays and appends to (created if missing).
    #[arg(long, env = "WMREPLAY_LOG")]
    log: PathBuf,
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
    /// --upstream-field temperature=0.2 --upstream-field 'stop=["END"]'.
    /// A request's own "params" object adds to and overrides these; neither
    /// may set messages, system, model or stream.
    #[arg(long = "upstream-field", value_name = "NAME=JSON", value_parser = parse_field)]
    upstream_fields: Vec<(String, serde_json::Value)>,
    /// Times a failed upstream call is tried again (429, 503, 529 and other
    /// overload or gateway errors, connection failures), with exponential
    /// backoff and jitter, honouring the upstream's retry-after, within
    /// --upstream-timeout.
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
    provider: wmreplay::server::Provider,
    /// Model name sent upstream [default: claude-sonnet-4-5, or gpt-4o-mini for openai].
    #[arg(long, env = "WMREPLAY_MODEL")]
    model: Option<String>,
    /// The answer's token limit sent upstream (max_tokens for Anthropic,
    /// max_completion_tokens for OpenAI).
    #[arg(long, env = "WMREPLAY_MAX_TOKENS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: u32,
    /// Name of the environment variable holding the API key [default:
    /// ANTHROPIC_API_KEY, or OPENAI_API_KEY for openai]. The key is never
    /// logged or echoed.
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
    /// Worker threads for replaying (0 = one per core).
    #[arg(long, env = "WMREPLAY_THREADS", default_value_t = 0, value_name = "N")]
    threads: usize,
    /// Deepest nesting accepted in a line; deeper lines are skipped.
    #[arg(long, env = "WMREPLAY_MAX_DEPTH", default_value_t = wmreplay::DEFAULT_MAX_DEPTH, value_name = "N")]
    max_depth: usize,
    /// What WM_JSON holds: raw (the line as written) or js (as Node.js's
    /// JSON.stringify writes the parsed record).
    #[arg(long, env = "WMREPLAY_RECORD", default_value = "raw", value_parser = parse_record)]
    record: wmreplay::RecordMode,
    /// Replay only records whose session_id is ID, and records with none.
    #[arg(long, env = "WMREPLAY_SESSION", value_name = "ID")]
    session: Option<String>,
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
    tokenizer: wmreplay::Tokenizer,
    /// Cache-stable trimming of the token window (see `respond --help`); the
    /// start is remembered per log, across restarts.
    #[arg(
        long,
        env = "WMREPLAY_TRIM_TO",
        value_name = "F",
        requires = "max_tokens_window"
    )]
    trim_to: Option<f64>,
    /// Mark the unanswered text_input with a first line PENDING_USER_INPUT.
    #[arg(long, env = "WMREPLAY_MARK_PENDING")]
    mark_pending: bool,
    /// The state store for session deltas and window starts [default:
    /// LOG.wmreplay.db].
    #[arg(long, env = "WMREPLAY_STATE", value_name = "PATH")]
    state: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct EngineArgs {
    /// Worker threads (0 = one per core).
    #[arg(long, default_value_t = 0, value_name = "N")]
    threads: usize,
    /// Read the log with read() instead of mapping it (safer if another
    /// process may truncate it during the replay).
    #[arg(long)]
    no_mmap: bool,
    /// Deepest nesting accepted in a line; deeper lines are skipped.
    #[arg(long, default_value_t = wmreplay::DEFAULT_MAX_DEPTH, value_name = "N")]
    max_depth: usize,
    /// How lines are validated: scan (one pass, the default) or simd-json.
    /// Both are exact; they differ in speed.
    #[arg(long, default_value = "scan", value_parser = parse_validator)]
    validator: wmreplay::Validator,
    /// What WM_JSON holds: raw (the line as written: byte-stable) or js
    /// (JSON.stringify(JSON.parse(line)) exactly as Node.js writes it, with
    /// the file decoded and lines trimmed as Node does).
    #[arg(long, default_value = "raw", value_parser = parse_record)]
    record: wmreplay::RecordMode,
    /// Print how long each stage took to stderr when done.
    #[arg(long)]
    timings: bool,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

fn parse_provider(s: &str) -> Result<wmreplay::server::Provider, String> {
    s.parse()
}

fn parse_upstream(s: &str) -> Result<String, String> {
    wmreplay::server::settings::parse_upstream(s).map(|_| s.to_string())
}

fn parse_field(s: &str) -> Result<(String, serde_json::Value), String> {
    wmreplay::server::settings::parse_field(s)
}

fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    wmreplay::server::settings::parse_timeout(s)
}

fn parse_ttl(s: &str) -> Result<std::time::Duration, String> {
    wmreplay::server::settings::parse_ttl(s)
}

fn parse_body_limit(s: &str) -> Result<u64, String> {
    wmreplay::server::settings::parse_size(s, wmreplay::server::settings::MAX_BODY_LIMIT)
}

fn parse_tokenizer(s: &str) -> Result<wmreplay::Tokenizer, String> {
    s.parse()
}

fn parse_record(s: &str) -> Result<wmreplay::RecordMode, String> {
    s.parse()
}

fn parse_validator(s: &str) -> Result<wmreplay::Validator, String> {
    s.parse()
}

fn parse_size(s: &str) -> Result<u64, String> {
    wmreplay::corpus::parse_size(s)
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?} is not a share between 0 and 1")),
    }
}

/// Logs at least this large get a progress bar (when stderr is a terminal).
const PROGRESS_MIN_BYTES: u64 = 64 << 20;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(Failure::Io(msg)) => {
            eprintln!("wmreplay: {msg}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(msg)) => {
            eprintln!("wmreplay: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::NotFound(msg)) => {
            eprintln!("wmreplay: {msg}");
            ExitCode::from(3)
        }
    }
}

enum Failure {
    /// The reader of stdout went away: end quietly.
    BrokenPipe,
    /// An I/O error, already worded with its path.
    Io(String),
    /// Settings that do not go together (exit 2, like clap's own errors).
    Usage(String),
    /// What was asked for does not exist (an unknown prepare_id).
    NotFound(String),
}

impl From<wmreplay::Error> for Failure {
    fn from(e: wmreplay::Error) -> Self {
        match e {
            wmreplay::Error::Write(io) => io.into(),
            e @ wmreplay::Error::UnknownPrepare(_) => Failure::NotFound(e.to_string()),
            other => Failure::Io(other.to_string()),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::BrokenPipe
        } else {
            Failure::Io(format!("cannot write output: {e}"))
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Respond {
            log,
            text,
            session,
            session_only,
            system,
            format,
            select,
            engine,
        } => {
            let filter = if session_only { session.clone() } else { None };
            let sel = select.selection(filter)?;
            let bytes = open(&log, &engine)?;
            let mut replayed = replay(&bytes, &engine, 0);
            bytes.verify()?;
            apply_selection(&mut replayed, &sel, &select, &log)?;
            let system = wmreplay::system_prompt(system.as_deref());
            let current = CurrentRequest {
                text: &text,
                session_id: session.as_deref(),
            };
            let t = std::time::Instant::now();
            write_stdout(|w| replayed.write_request(format, &system, &current, w))?;
            bytes.verify()?;
            report_timings(&engine, &bytes, &replayed, t.elapsed());
            // Done with the log: its pages go back in parallel, not in one
            // serial unmap at exit.
            bytes.release_pages();
            Ok(())
        }
        Command::Replay {
            log,
            format,
            session,
            select,
            engine,
        } => {
            let sel = select.selection(session)?;
            let bytes = open(&log, &engine)?;
            let mut replayed = replay(&bytes, &engine, 0);
            bytes.verify()?;
            apply_selection(&mut replayed, &sel, &select, &log)?;
            let t = std::time::Instant::now();
            write_stdout(|w| replayed.write_messages(format, w))?;
            bytes.verify()?;
            report_timings(&engine, &bytes, &replayed, t.elapsed());
            // Done with the log: its pages go back in parallel, not in one
            // serial unmap at exit.
            bytes.release_pages();
            Ok(())
        }
        Command::Prepare {
            log,
            session_key,
            format,
            session,
            select,
            engine,
        } => {
            let sel = select.selection(session)?;
            let store =
                std::sync::Mutex::new(wmreplay::state::Store::open(select.store_path(&log))?);
            let options = replay_options(&engine, 0);
            let prepared = wmreplay::state::prepare(
                &store,
                &wmreplay::state::PrepareRequest {
                    log: &log,
                    session_key: &session_key,
                    format,
                    selection: &sel,
                    options: &options,
                },
            )?;
            write_stdout(|w| {
                w.write_all(&prepared.to_json())?;
                w.write_all(b"\n")
            })
        }
        Command::Ack {
            log,
            prepare_id,
            status,
            state,
        } => {
            let path = state.unwrap_or_else(|| wmreplay::state::Store::path_for(&log));
            let mut store = wmreplay::state::Store::open(path)?;
            let acked = store.ack(&prepare_id, status == "success")?;
            let position = acked
                .position
                .map_or_else(|| "null".to_string(), |p| p.to_string());
            write_stdout(|w| {
                writeln!(
                    w,
                    "{{\"ok\":true,\"status\":\"{status}\",\"position\":{position},\"repeated\":{}}}",
                    acked.repeated
                )
            })
        }
        Command::Gen {
            out,
            size,
            seed,
            disorder,
            bad,
        } => {
            let options = wmreplay::corpus::GenOptions {
                size,
                seed,
                disorder,
                bad,
            };
            generate(&out, &options)
        }
        Command::Serve(args) => serve(*args),
        Command::Stats {
            log,
            skips,
            session,
            select,
            engine,
        } => {
            let sel = select.selection(session)?;
            let bytes = open(&log, &engine)?;
            let n = skips.unwrap_or(0);
            let mut replayed = replay(&bytes, &engine, n);
            bytes.verify()?;
            let report = select_with_state(&mut replayed, &sel, &select, &log)?;
            let mut json = replayed.stats().to_json(n);
            json.pop();
            json.push(',');
            json.push_str(&report.json_members());
            json.push('}');
            write_stdout(|w| writeln!(w, "{json}"))?;
            report_timings(&engine, &bytes, &replayed, std::time::Duration::ZERO);
            // Done with the log: its pages go back in parallel, not in one
            // serial unmap at exit.
            bytes.release_pages();
            Ok(())
        }
    }
}

fn serve(args: ServeArgs) -> Result<(), Failure> {
    use wmreplay::server::{self, ApiKey, Config};
    init_logs(&args.log_format);
    // A file size limit makes a write fail (EFBIG, and the append is rolled
    // back) instead of killing the server with SIGXFSZ.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to "ignore" has no
    // preconditions and installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let provider = args.provider;
    let key_env = args
        .api_key_env
        .unwrap_or_else(|| provider.default_key_env().to_string());
    let api_key = std::env::var(&key_env)
        .ok()
        .filter(|k| !k.is_empty())
        .map(ApiKey);
    if args.upstream.is_some() && api_key.is_none() {
        tracing::warn!(var = %key_env, "no API key in the environment; calling the upstream without one");
    }
    let mut cfg = Config::new(&args.log);
    cfg.upstream = args.upstream;
    cfg.provider = provider;
    cfg.model = args
        .model
        .unwrap_or_else(|| provider.default_model().to_string());
    cfg.max_tokens = args.max_tokens;
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
    cfg.idempotency_ttl = args.idempotency_ttl;
    cfg.replay = ReplayOptions {
        threads: args.threads,
        max_depth: args.max_depth,
        record: args.record,
        ..ReplayOptions::default()
    };
    cfg.selection = wmreplay::Selection {
        session: args.session,
        kinds: args.kinds,
        since: args.since,
        until: args.until,
        tail: args.tail,
        max_tokens: args.max_tokens_window,
        tokenizer: args.tokenizer,
        trim_to: args.trim_to,
        mark_pending: args.mark_pending,
    };
    cfg.selection.validate().map_err(Failure::Usage)?;
    if cfg.selection.max_tokens.is_some() {
        cfg.selection.tokenizer.warm_up();
    }
    cfg.state = args.state;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Io(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let listener = listen(&args.addr).await?;
        let addr = listener
            .local_addr()
            .map_or_else(|_| args.addr.clone(), |a| a.to_string());
        tracing::info!(addr = %addr, log = %cfg.log.display(), upstream = cfg.upstream.is_some(), "listening");
        server::serve(cfg, listener, shutdown_signal())
            .await
            .map_err(|e| match e {
                server::ServeError::Config(m) => Failure::Usage(m),
                e => Failure::Io(e.to_string()),
            })
    })
}

/// Server logs on stderr: text (coloured only on a terminal) or JSON lines.
fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
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
        match wmreplay::server::bind(*a).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(Failure::Io(match last {
        Some(e) => format!("cannot listen on {addr}: {e}"),
        None => format!("--addr {addr:?} resolves to no address"),
    }))
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("signal received");
}

/// With `--timings`, one line on stderr: each stage's time and the rate.
fn report_timings(
    engine: &EngineArgs,
    bytes: &LogBytes,
    replayed: &Replay<'_>,
    output: std::time::Duration,
) {
    if !engine.timings {
        return;
    }
    let t = replayed.timings();
    let total = t.parse + t.sort + output;
    let mb = bytes.bytes().len() as f64 / 1e6;
    eprintln!(
        "timings: parse {:.3}s ({:.0} MB/s), sort {:.3}s, render+write {:.3}s, total {:.3}s ({:.0} MB/s)",
        t.parse.as_secs_f64(),
        mb / t.parse.as_secs_f64().max(1e-9),
        t.sort.as_secs_f64(),
        output.as_secs_f64(),
        total.as_secs_f64(),
        mb / total.as_secs_f64().max(1e-9),
    );
}

fn open(path: &std::path::Path, engine: &EngineArgs) -> Result<LogBytes, Failure> {
    let mode = if engine.no_mmap {
        ReadMode::Read
    } else {
        ReadMode::Auto
    };
    Ok(LogBytes::open(path, mode)?)
}

/// Applies the selection (when it changes anything).
fn apply_selection(
    replayed: &mut Replay<'_>,
    sel: &wmreplay::Selection,
    args: &SelectArgs,
    log: &std::path::Path,
) -> Result<(), Failure> {
    if !sel.is_everything() {
        select_with_state(replayed, sel, args, log)?;
    }
    Ok(())
}

/// Applies the selection; with --trim-to, the window start comes from and
/// goes back to the state store.
fn select_with_state(
    replayed: &mut Replay<'_>,
    sel: &wmreplay::Selection,
    args: &SelectArgs,
    log: &std::path::Path,
) -> Result<wmreplay::SelectReport, Failure> {
    if sel.trim_to.is_none() {
        return Ok(replayed.select(sel, None));
    }
    let store = wmreplay::state::Store::open(args.store_path(log))?;
    let spec = sel.window_key();
    let prev = store.window_start(log, &spec)?;
    let report = replayed.select(sel, prev);
    if report.window_start != prev {
        store.set_window_start(log, &spec, report.window_start)?;
    }
    Ok(report)
}

fn replay_options(engine: &EngineArgs, max_skips: usize) -> ReplayOptions {
    ReplayOptions {
        threads: engine.threads,
        max_depth: engine.max_depth.max(1),
        max_skips,
        validator: engine.validator,
        record: engine.record,
        // The commands stream the replay (or only count it): the late
        // records are read merged as they render, never moved into place
        // unless a selection asks for one list.
        defer_merge: true,
        ..ReplayOptions::default()
    }
}

fn replay<'a>(bytes: &'a LogBytes, engine: &EngineArgs, max_skips: usize) -> Replay<'a> {
    let options = replay_options(engine, max_skips);
    let data = bytes.bytes();
    let message = format!("replaying {}", bytes.path().display());
    if let Some(bar) = progress_bar(data.len() as u64, message) {
        let replayed = wmreplay::replay_with_progress(data, &options, &|n| bar.inc(n));
        bar.finish_and_clear();
        replayed
    } else {
        wmreplay::replay(data, &options)
    }
}

fn generate(out: &std::path::Path, options: &wmreplay::corpus::GenOptions) -> Result<(), Failure> {
    let bar = progress_bar(options.size, format!("writing {}", out.display()));
    let inc = |n: u64| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    };
    let result = if out.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut w = stdout.lock();
        wmreplay::corpus::generate(options, &mut w, &inc).map_err(Failure::from)
    } else {
        let file = std::fs::File::create(out)
            .map_err(|e| Failure::Io(format!("{}: cannot create: {e}", out.display())))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        wmreplay::corpus::generate(options, &mut w, &inc)
            .map_err(|e| Failure::Io(format!("{}: cannot write: {e}", out.display())))
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    result.map(|_| ())
}

/// A progress bar on stderr for `total` bytes, when stderr is a terminal and
/// the work is large.
fn progress_bar(total: u64, message: String) -> Option<indicatif::ProgressBar> {
    if total < PROGRESS_MIN_BYTES || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(message);
    Some(bar)
}

/// Runs `f` with a buffered writer on stdout. On Unix it writes to the file
/// descriptor directly: Rust's stdout is line-buffered, which would scan
/// every multi-megabyte batch for its last newline.
fn write_stdout(f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<(), Failure> {
    let stdout = std::io::stdout();
    let lock = stdout.lock();
    #[cfg(unix)]
    let raw = {
        use std::os::fd::AsFd;
        std::fs::File::from(lock.as_fd().try_clone_to_owned()?)
    };
    #[cfg(not(unix))]
    let raw = lock;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, raw);
    f(&mut w)?;
    w.flush()?;
    Ok(())
}
