//! What several commands share: the selection and engine flags, their
//! value parsers, opening and replaying a log, and writing to stdout.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use crate::{Format, LogBytes, ReadMode, Replay, ReplayOptions, ReplayStats};
use clap::Args;

use super::Failure;

/// The log a command replays, and what a missing one means.
#[derive(Args, Debug, Clone)]
pub struct LogArgs {
    /// The working-memory log (JSONL); `-` reads it from standard input
    /// (e.g. `zcat wm.log.gz | wmreplay replay -`). A file that does not
    /// exist is replayed as an empty log, with a warning on stderr.
    pub log: PathBuf,
    /// Exit with status 1 when LOG does not exist, instead of warning and
    /// replaying it as an empty log (for scripts, where a typo in the path
    /// must not pass for an empty memory).
    #[arg(long)]
    pub require_log: bool,
}

/// What a log read from standard input is called in messages.
pub const STDIN_NAME: &str = "<stdin>";

/// Whether `log` is `-`: standard input.
pub fn is_stdin(log: &Path) -> bool {
    log.as_os_str() == "-"
}

/// Refuses `-` (standard input) as the log of a command that keeps `what`
/// in a file beside the log.
pub fn file_only(log: &Path, command: &str, what: &str) -> Result<(), Failure> {
    if is_stdin(log) {
        return Err(Failure::Usage(format!(
            "{command} keeps {what} beside the log, so its LOG must be a file, not - (standard input)"
        )));
    }
    Ok(())
}

impl LogArgs {
    /// Opens LOG (`-`: reads standard input whole); a missing one is a
    /// warning, or with --require-log an error (exit status 1).
    pub fn open(&self, engine: &EngineArgs) -> Result<LogBytes, Failure> {
        if is_stdin(&self.log) {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                warn("reading the log from standard input (end it with Ctrl-D)");
            }
            return Ok(LogBytes::from_reader(STDIN_NAME, stdin.lock())?);
        }
        let bytes = open(&self.log, engine)?;
        if bytes.is_missing() {
            self.missing()?;
        }
        Ok(bytes)
    }

    /// The same warning or error, for a command that opens LOG itself
    /// (`prepare`): called before anything is created beside it.
    pub fn check(&self) -> Result<(), Failure> {
        match std::fs::metadata(&self.log) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.missing(),
            // Any other failure is the replay's to report, naming the path.
            _ => Ok(()),
        }
    }

    fn missing(&self) -> Result<(), Failure> {
        let path = self.log.display();
        if self.require_log {
            return Err(Failure::Io(format!(
                "{path}: the log does not exist (--require-log)"
            )));
        }
        warn(&format!(
            "{path} does not exist; replaying it as an empty log (--require-log makes this an error)"
        ));
        Ok(())
    }
}

/// One line on stderr, `wmreplay: warning: …`. Best effort: a stderr that
/// cannot be written to does not fail the command.
pub fn warn(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "wmreplay: warning: {message}");
}

/// Warns (one line) when more than half of the log's lines were skipped as
/// not valid records: the file is most likely not a working-memory log (a
/// wrong path, a pretty-printed JSON file) or was written by a broken
/// writer. Names the count and the first skip's line, byte offset and
/// reason, which the replay keeps when asked for at least one skip
/// (`replay(…, 1)`); a log with a few bad lines replays silently, as ever.
pub fn warn_skipped(path: &Path, stats: &ReplayStats) {
    let skipped = stats.skipped_invalid_json + stats.skipped_invalid_shape;
    let total = stats.total_lines;
    if skipped == 0 || skipped * 2 <= total {
        return;
    }
    let lines = |n: u64| if n == 1 { "line" } else { "lines" };
    let what = if stats.parsed_entries == 0 {
        format!("none of its {total} {} is a valid record", lines(total))
    } else {
        format!(
            "{skipped} of its {total} {} are not valid records",
            lines(total)
        )
    };
    let first = stats.skips.first().map_or_else(String::new, |s| {
        format!(
            "; the first skipped is line {} (byte {}): {}",
            s.line, s.offset, s.reason
        )
    });
    warn(&format!(
        "{}: {what}{first} (`wmreplay stats LOG --skips N` lists the skipped lines)",
        path.display()
    ));
}

/// Which records to replay: filters, then windows (applied after ordering).
#[derive(Args, Debug, Clone)]
pub struct SelectArgs {
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
    tokenizer: crate::Tokenizer,
    /// Cache-stable trimming: when the window overflows --max-tokens T (or
    /// --tail N), move its start so it holds F x T tokens (F x N records),
    /// and keep that start on later turns until it overflows again, so the
    /// replayed prefix, and the provider's prompt cache, survive many turns.
    /// The start is remembered in the state store.
    #[arg(long, value_name = "F")]
    trim_to: Option<f64>,
    /// Start the window (--tail or --max-tokens) on a record of this type,
    /// e.g. text_input: when the window cuts the log, its start moves forward
    /// to the first such record, so it never opens with an answer whose
    /// question was cut off.
    #[arg(long, value_name = "TYPE")]
    start_on: Option<String>,
    /// Render the latest text_input that has no later text_output with a
    /// first line PENDING_USER_INPUT.
    #[arg(long)]
    mark_pending: bool,
    /// Replay the newest wm_summary record first, in place of the records it
    /// covers ({"type":"wm_summary","covers":{"ts_ms":X,"offset":O},"text":…}):
    /// those written before it up to (X, O) in replay order are left out;
    /// records written after it always stay. Other summaries are not
    /// replayed. Filters and windows apply to the records left.
    #[arg(long)]
    summaries: bool,
    /// Replay the wm_fact records ({"type":"wm_fact","key":K,"value":V};
    /// null deletes K) as one WM_KIND=wm_facts message of the latest value
    /// of every live key, in byte order of the keys, just before
    /// CURRENT_USER_REQUEST.
    #[arg(long)]
    facts: bool,
    /// The state store for --trim-to and prepare/ack [default: LOG.wmreplay.db].
    #[arg(long, value_name = "PATH")]
    state: Option<PathBuf>,
}

impl SelectArgs {
    pub fn selection(&self, session: Option<String>) -> Result<crate::Selection, Failure> {
        let sel = {
            let mut o = crate::Selection::default();
            o.session = session;
            o.kinds = self.kinds.clone();
            o.since = self.since;
            o.until = self.until;
            o.tail = self.tail;
            o.max_tokens = self.max_tokens;
            o.tokenizer = self.tokenizer;
            o.trim_to = self.trim_to;
            o.start_on = self.start_on.clone();
            o.mark_pending = self.mark_pending;
            o.summaries = self.summaries;
            o.facts = self.facts;
            o
        };
        sel.validate().map_err(Failure::Usage)?;
        if sel.max_tokens.is_some() {
            sel.tokenizer.warm_up();
        }
        Ok(sel)
    }

    pub fn store_path(&self, log: &std::path::Path) -> PathBuf {
        self.state
            .clone()
            .unwrap_or_else(|| crate::state::Store::path_for(log))
    }
}

#[derive(Args, Debug)]
pub struct EngineArgs {
    /// Worker threads (0 = one per core; at most 4 per core are used).
    #[arg(long, default_value_t = 0, value_name = "N")]
    threads: usize,
    /// Read the log with read() instead of mapping it (safer if another
    /// process may truncate it during the replay).
    #[arg(long)]
    no_mmap: bool,
    /// Deepest nesting accepted in a line; deeper lines are skipped.
    #[arg(long, default_value_t = crate::DEFAULT_MAX_DEPTH, value_name = "N")]
    max_depth: usize,
    /// How lines are validated: scan (one pass, the default) or simd-json.
    /// Both are exact; they differ in speed.
    #[arg(long, default_value = "scan", value_parser = parse_validator)]
    validator: crate::Validator,
    /// What WM_JSON holds: raw (the line as written: byte-stable) or js
    /// (JSON.stringify(JSON.parse(line)) exactly as Node.js writes it, with
    /// the file decoded and lines trimmed as Node does).
    #[arg(long, default_value = "raw", value_parser = parse_record)]
    record: crate::RecordMode,
    /// Print how long each stage took to stderr when done.
    #[arg(long)]
    timings: bool,
}

/// The search index's language (`--language`).
pub fn parse_language(s: &str) -> Result<crate::search::Language, String> {
    crate::search::Language::parse(s).map_err(|e| e.to_string())
}

/// The help of every `--language` flag.
pub const LANGUAGE_HELP: &str = "The language the search index analyses words in: english (the default: Snowball stemming, so hiking finds hike; stop words like what/did count little in queries that have other words), none (words only lowercased), or arabic, danish, dutch, finnish, french, german, greek, hungarian, italian, norwegian, portuguese, romanian, russian, spanish, swedish, tamil, turkish. Recorded in the index: another language builds it again";

pub fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

pub fn parse_provider(s: &str) -> Result<crate::server::Provider, String> {
    s.parse()
}

pub fn parse_upstream(s: &str) -> Result<String, String> {
    crate::server::settings::parse_upstream(s).map(|_| s.to_string())
}

pub fn parse_field(s: &str) -> Result<(String, serde_json::Value), String> {
    crate::server::settings::parse_field(s)
}

pub fn parse_header(s: &str) -> Result<(String, String), String> {
    crate::server::settings::parse_header(s)
}

pub fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    crate::server::settings::parse_timeout(s)
}

pub fn parse_ttl(s: &str) -> Result<std::time::Duration, String> {
    crate::server::settings::parse_ttl(s)
}

pub fn parse_cache_ttl(s: &str) -> Result<crate::CacheTtl, String> {
    s.parse()
}

pub fn parse_live_bytes(s: &str) -> Result<u64, String> {
    crate::server::settings::parse_size(s, u64::MAX)
}

pub fn parse_body_limit(s: &str) -> Result<u64, String> {
    crate::server::settings::parse_size(s, crate::server::settings::MAX_BODY_LIMIT)
}

pub fn parse_tokenizer(s: &str) -> Result<crate::Tokenizer, String> {
    s.parse()
}

pub fn parse_record(s: &str) -> Result<crate::RecordMode, String> {
    s.parse()
}

pub fn parse_validator(s: &str) -> Result<crate::Validator, String> {
    s.parse()
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    crate::__internals::corpus::parse_size(s)
}

pub fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?} is not a share between 0 and 1")),
    }
}

/// Logs at least this large get a progress bar (when stderr is a terminal).
pub const PROGRESS_MIN_BYTES: u64 = 64 << 20;

/// With `--timings`, one line on stderr: each stage's time and the rate.
pub fn report_timings(
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

pub fn open(path: &std::path::Path, engine: &EngineArgs) -> Result<LogBytes, Failure> {
    let mode = if engine.no_mmap {
        ReadMode::Read
    } else {
        ReadMode::Auto
    };
    Ok(LogBytes::open(path, mode)?)
}

/// Applies the selection (when it changes anything).
pub fn apply_selection(
    replayed: &mut Replay<'_>,
    sel: &crate::Selection,
    args: &SelectArgs,
    bytes: &LogBytes,
) -> Result<(), Failure> {
    if !sel.is_everything() {
        select_with_state(replayed, sel, args, bytes)?;
    }
    Ok(())
}

/// Applies the selection; with --trim-to, the window start comes from and
/// goes back to the state store. A log that does not exist gets no store
/// made for it (an empty replay has no window start to remember).
pub fn select_with_state(
    replayed: &mut Replay<'_>,
    sel: &crate::Selection,
    args: &SelectArgs,
    bytes: &LogBytes,
) -> Result<crate::SelectReport, Failure> {
    let log = bytes.path();
    if sel.trim_to.is_none() {
        return Ok(replayed.select(sel, None));
    }
    if log == Path::new(STDIN_NAME) {
        return Err(Failure::Usage(
            "--trim-to keeps the window's start in a store beside the log, so the log must be \
             a file, not - (standard input)"
                .into(),
        ));
    }
    let store = if bytes.is_missing() {
        match crate::state::Store::open_existing(args.store_path(log))? {
            Some(store) => store,
            None => return Ok(replayed.select(sel, None)),
        }
    } else {
        crate::state::Store::open(args.store_path(log))?
    };
    let spec = sel.window_key();
    let prev = store.window_start(log, &spec)?;
    let report = replayed.select(sel, prev);
    if report.window_start != prev {
        store.set_window_start(log, &spec, report.window_start)?;
    }
    Ok(report)
}

pub fn replay_options(engine: &EngineArgs, max_skips: usize) -> ReplayOptions {
    {
        let mut o = ReplayOptions::default();
        o.threads = engine.threads;
        o.max_depth = engine.max_depth.max(1);
        o.max_skips = max_skips;
        o.validator = engine.validator;
        o.record = engine.record;
        // The commands stream the replay (or only count it): the late
        // records are read merged as they render, never moved into place
        // unless a selection asks for one list.
        o.defer_merge = true;
        o
    }
}

/// Replays the log; records that do not fit in memory are an error naming
/// the log (exit status 1), not an abort.
pub fn replay<'a>(
    bytes: &'a LogBytes,
    engine: &EngineArgs,
    max_skips: usize,
) -> Result<Replay<'a>, Failure> {
    let options = replay_options(engine, max_skips);
    let data = bytes.bytes();
    let message = format!("replaying {}", bytes.path().display());
    let replayed = if let Some(bar) = progress_bar(data.len() as u64, message) {
        let replayed = crate::try_replay_with_progress(data, &options, &|n| bar.inc(n));
        bar.finish_and_clear();
        replayed
    } else {
        crate::try_replay(data, &options)
    };
    Ok(replayed.map_err(|e| e.for_log(bytes.path()))?)
}

/// A progress bar on stderr for `total` bytes, when stderr is a terminal and
/// the work is large.
pub fn progress_bar(total: u64, message: String) -> Option<indicatif::ProgressBar> {
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

/// When `out` is a pipe narrower than 1 MiB (Linux gives 64 KiB), widens it:
/// the body then goes through in 16 times fewer wake-ups of its reader
/// (`respond` on 100 MiB read by `cat`: 0.18 s with 64 KiB, 0.12 s with
/// 1 MiB; 0.08 s with rendering and writing overlapped too). Refused (a
/// limit on pipe memory) or not a pipe: nothing changes.
#[cfg(target_os = "linux")]
fn widen_pipe(out: &std::fs::File) {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileTypeExt;
    const WIDE: libc::c_int = 1 << 20;
    if out.metadata().is_ok_and(|m| m.file_type().is_fifo()) {
        // SAFETY: F_GETPIPE_SZ takes no argument and F_SETPIPE_SZ an int;
        // they only read and resize the pipe's buffer (its contents are
        // kept; a size the kernel refuses is an error return, ignored); the
        // descriptor is open for both calls. A pipe already wider (its
        // reader's choice) is left as it is.
        unsafe {
            let fd = out.as_raw_fd();
            let now = libc::fcntl(fd, libc::F_GETPIPE_SZ);
            if (0..WIDE).contains(&now) {
                libc::fcntl(fd, libc::F_SETPIPE_SZ, WIDE);
            }
        }
    }
}

#[cfg(all(unix, not(target_os = "linux")))]
fn widen_pipe(_: &std::fs::File) {}

/// Runs `f` with a buffered writer on stdout. On Unix it writes to the file
/// descriptor directly: Rust's stdout is line-buffered, which would scan
/// every multi-megabyte batch for its last newline.
pub fn write_stdout(f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<(), Failure> {
    let stdout = std::io::stdout();
    let lock = stdout.lock();
    #[cfg(unix)]
    let raw = {
        use std::os::fd::AsFd;
        let out = std::fs::File::from(lock.as_fd().try_clone_to_owned()?);
        widen_pipe(&out);
        out
    };
    #[cfg(not(unix))]
    let raw = lock;
    let terminal = std::io::stdout().is_terminal();
    let mut w = LastByte {
        inner: std::io::BufWriter::with_capacity(1 << 16, raw),
        last: None,
    };
    f(&mut w)?;
    // On a terminal the output ends its line, so that the prompt (or a
    // warning) starts on a line of its own; piped, the bytes are exact.
    if terminal && w.last.is_some_and(|b| b != b'\n') {
        w.inner.write_all(b"\n")?;
    }
    w.inner.flush()?;
    Ok(())
}

/// A writer that remembers the last byte written through it.
struct LastByte<W> {
    inner: W,
    last: Option<u8>,
}

impl<W: Write> Write for LastByte<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        if n > 0 {
            self.last = Some(buf[n - 1]);
        }
        Ok(n)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_all(buf)?;
        if let Some(&b) = buf.last() {
            self.last = Some(b);
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// An `--allowed-origin`: `*`, or `http(s)://host[:port]` as a browser
/// sends it in `Origin` (no path, query or user).
pub fn parse_origin(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s == "*" {
        return Ok(s.to_string());
    }
    let bad = || {
        format!(
            "{s:?} is not an origin: write scheme://host[:port], e.g. http://localhost:3000 \
             (no path), or * for any"
        )
    };
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or_else(bad)?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad());
    }
    Ok(s.strip_suffix('/').unwrap_or(s).to_string())
}
