//! The `wmreplay` command line: replay a working-memory log into a request
//! body, the messages alone, or stats.
//!
//! Exit codes: 0 success (also when the reader of stdout goes away early),
//! 1 an I/O error (one line on stderr naming the path; also when the log was
//! truncated or replaced while it was read), 2 bad usage.

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
/// usage.
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
        /// Text placed before the system rule in the system prompt (persona, tone).
        #[arg(long, value_name = "TEXT")]
        system: Option<String>,
        /// Body format: anthropic (Messages API), openai (Chat Completions) or
        /// ndjson (one message per line, system first, request last).
        #[arg(long, default_value = "anthropic", value_parser = parse_format)]
        format: Format,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Print the replayed messages alone: a JSON array, or NDJSON.
    Replay {
        /// The working-memory log (JSONL). A missing file is an empty log.
        log: PathBuf,
        /// Message shape: anthropic or openai (a JSON array), or ndjson.
        #[arg(long, default_value = "anthropic", value_parser = parse_format)]
        format: Format,
        #[command(flatten)]
        engine: EngineArgs,
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
    /// GET /v1/stats, GET /healthz). Every flag can also be set through the
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
        #[command(flatten)]
        engine: EngineArgs,
    },
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// The working-memory log the server replays and appends to (created if missing).
    #[arg(long, env = "WMREPLAY_LOG")]
    log: PathBuf,
    /// Address to listen on.
    #[arg(long, env = "WMREPLAY_ADDR", default_value = "127.0.0.1:8787")]
    addr: std::net::SocketAddr,
    /// The model API: a base URL (https://api.anthropic.com; the provider's
    /// path is added) or a full endpoint URL. Without it, /respond answers with
    /// the request it would send and appends nothing.
    #[arg(long, env = "WMREPLAY_UPSTREAM", value_name = "URL")]
    upstream: Option<String>,
    /// The API the upstream speaks: anthropic (Messages) or openai (Chat Completions).
    #[arg(long, env = "WMREPLAY_PROVIDER", default_value = "anthropic", value_parser = parse_provider)]
    provider: wmreplay::server::Provider,
    /// Model name sent upstream [default: claude-sonnet-4-5, or gpt-4o-mini for openai].
    #[arg(long, env = "WMREPLAY_MODEL")]
    model: Option<String>,
    /// max_tokens sent upstream.
    #[arg(long, env = "WMREPLAY_MAX_TOKENS", default_value_t = 1024)]
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
    #[arg(long, env = "WMREPLAY_BODY_LIMIT", default_value = "1MiB", value_parser = parse_size)]
    body_limit: u64,
    /// Replays and upstream calls running at once; more get 503.
    #[arg(long, env = "WMREPLAY_MAX_CONCURRENT", default_value_t = 64)]
    max_concurrent: usize,
    /// Open connections at once; more wait to be accepted.
    #[arg(long, env = "WMREPLAY_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// Seconds allowed to send the request headers.
    #[arg(long, env = "WMREPLAY_HEADER_TIMEOUT", default_value_t = 10)]
    header_timeout: u64,
    /// Seconds allowed to send the request body (408 beyond).
    #[arg(long, env = "WMREPLAY_BODY_TIMEOUT", default_value_t = 30)]
    body_timeout: u64,
    /// Seconds allowed for the upstream's answer, or between two streamed
    /// pieces of it (504 beyond).
    #[arg(long, env = "WMREPLAY_UPSTREAM_TIMEOUT", default_value_t = 300)]
    upstream_timeout: u64,
    /// Worker threads for replaying (0 = one per core).
    #[arg(long, env = "WMREPLAY_THREADS", default_value_t = 0, value_name = "N")]
    threads: usize,
    /// Deepest nesting accepted in a line; deeper lines are skipped.
    #[arg(long, env = "WMREPLAY_MAX_DEPTH", default_value_t = wmreplay::DEFAULT_MAX_DEPTH, value_name = "N")]
    max_depth: usize,
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
    }
}

enum Failure {
    /// The reader of stdout went away: end quietly.
    BrokenPipe,
    /// An I/O error, already worded with its path.
    Io(String),
}

impl From<wmreplay::Error> for Failure {
    fn from(e: wmreplay::Error) -> Self {
        match e {
            wmreplay::Error::Write(io) => io.into(),
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
            system,
            format,
            engine,
        } => {
            let bytes = open(&log, &engine)?;
            let replayed = replay(&bytes, &engine, 0);
            bytes.verify()?;
            let system = wmreplay::system_prompt(system.as_deref());
            let current = CurrentRequest {
                text: &text,
                session_id: session.as_deref(),
            };
            let t = std::time::Instant::now();
            write_stdout(|w| replayed.write_request(format, &system, &current, w))?;
            bytes.verify()?;
            report_timings(&engine, &bytes, &replayed, t.elapsed());
            Ok(())
        }
        Command::Replay {
            log,
            format,
            engine,
        } => {
            let bytes = open(&log, &engine)?;
            let replayed = replay(&bytes, &engine, 0);
            bytes.verify()?;
            let t = std::time::Instant::now();
            write_stdout(|w| replayed.write_messages(format, w))?;
            bytes.verify()?;
            report_timings(&engine, &bytes, &replayed, t.elapsed());
            Ok(())
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
        Command::Stats { log, skips, engine } => {
            let bytes = open(&log, &engine)?;
            let n = skips.unwrap_or(0);
            let replayed = replay(&bytes, &engine, n);
            bytes.verify()?;
            let json = replayed.stats().to_json(n);
            write_stdout(|w| writeln!(w, "{json}"))?;
            report_timings(&engine, &bytes, &replayed, std::time::Duration::ZERO);
            Ok(())
        }
    }
}

fn serve(args: ServeArgs) -> Result<(), Failure> {
    use std::time::Duration;
    use wmreplay::server::{self, ApiKey, Config};
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
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
    cfg.header_timeout = Duration::from_secs(args.header_timeout);
    cfg.body_timeout = Duration::from_secs(args.body_timeout);
    cfg.upstream_timeout = Duration::from_secs(args.upstream_timeout);
    cfg.replay = ReplayOptions {
        threads: args.threads,
        max_depth: args.max_depth,
        ..ReplayOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Io(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let listener = server::bind(args.addr)
            .await
            .map_err(|e| Failure::Io(format!("cannot listen on {}: {e}", args.addr)))?;
        tracing::info!(addr = %args.addr, log = %cfg.log.display(), upstream = cfg.upstream.is_some(), "listening");
        server::serve(cfg, listener, shutdown_signal())
            .await
            .map_err(|e| Failure::Io(e.to_string()))
    })
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

fn replay<'a>(bytes: &'a LogBytes, engine: &EngineArgs, max_skips: usize) -> Replay<'a> {
    let options = ReplayOptions {
        threads: engine.threads,
        max_depth: engine.max_depth.max(1),
        max_skips,
        validator: engine.validator,
        ..ReplayOptions::default()
    };
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
