//! The `wmreplay` command line: replay a working-memory log into a request
//! body, the messages alone, or stats.
//!
//! Exit codes: 0 success (also when the reader of stdout goes away early),
//! 1 an I/O error (one line on stderr naming the path; also when the log was
//! truncated or replaced while it was read, the state store failed, or the
//! log does not exist and `--require-log` was given), 2 bad usage, 3 an
//! unknown prepare_id given to `ack`. Warnings (a missing log, a log most of
//! whose lines are not records) are one line on stderr each, and exit 0.
//!
//! It uses the crate as an embedder would, through its public API, and sets
//! the `#[non_exhaustive]` option structs field by field as an embedder
//! must (hence the lint allowed below). Its doc comments are the
//! commands' `--help` text (clap), written for a terminal: bare URLs and
//! `<id>`-style placeholders are meant as they read, not as rustdoc markup.
#![allow(clippy::field_reassign_with_default)]
#![allow(rustdoc::bare_urls, rustdoc::invalid_html_tags)]

mod args;
mod compact;
mod embed;
mod generate;
mod mcp;
mod replay;
mod search;
mod serve;
mod serve_more;
mod session;
mod signals;
mod token;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Replays an append-only JSONL working-memory log into the messages of an
/// LLM request: every record with a string `type` and a number `ts_ms`, in
/// `ts_ms` order, as a `WM_KIND=…` message, then the live request as
/// `CURRENT_USER_REQUEST`. Lines that are not valid records are skipped and
/// counted, never fatal. A missing log is replayed as an empty log, with a
/// warning on stderr (--require-log makes it an error); a log most of whose
/// lines are skipped is replayed with a warning naming the first of them.
///
/// Exit status: 0 success (also after a warning), 1 I/O error (the message
/// names the file; also a missing log with --require-log), 2 bad usage, 3
/// `ack` of an unknown prepare_id.
#[derive(Parser, Debug)]
#[command(name = "wmreplay", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the request body (system rule, replayed log, CURRENT_USER_REQUEST) to stdout.
    ///
    /// A LOG that does not exist is replayed as an empty log, with one
    /// warning line on stderr and exit status 0; --require-log makes it exit
    /// 1 instead. When more than half of LOG's lines are not valid records
    /// (e.g. LOG is not a working-memory log at all), one warning line gives
    /// their count and the first one's line number and reason; the body is
    /// still printed and the exit status is 0.
    ///
    /// Example: wmreplay respond wm.log --text "What next?" --require-log
    Respond(Box<replay::RespondArgs>),
    /// Print the replayed messages alone: a JSON array, NDJSON, or an XML
    /// <memory_context> document.
    ///
    /// A missing LOG and a log of mostly invalid lines are warned about on
    /// stderr as in `respond` (exit status 0); --require-log makes a missing
    /// LOG exit 1.
    ///
    /// Example: wmreplay replay wm.log --format ndjson --tail 200 --require-log
    Replay(replay::ReplayArgs),
    /// Prepare a turn for a session key (full or delta injection): prints
    /// {"prepare_id","mode","from","to","records","body"}. The first prepare
    /// of a key (or after the log was replaced) is "full", the whole replay;
    /// later ones are "delta", only the records appended since the key's last
    /// acknowledged position, or "none" with an empty body. Acknowledge it
    /// with `wmreplay ack`; until then the same delta comes back.
    ///
    /// A LOG that does not exist is prepared as an empty log ("full", no
    /// records), with a warning on stderr; its state store is still made,
    /// so that the prepare can be acknowledged. With --require-log a missing
    /// LOG exits 1 and nothing is created.
    ///
    /// Example: wmreplay prepare wm.log --session-key chat-1 --require-log
    Prepare(session::PrepareArgs),
    /// Acknowledge a prepared turn: with --status success the session key's
    /// position moves past that prepare's records; with failed it stays, so
    /// the next prepare returns the same delta. Prints {"ok":true,...}. An
    /// unknown prepare_id exits with status 3.
    ///
    /// It never creates a state store: where there is none (a log never
    /// prepared, a mistyped path), every prepare_id is unknown (status 3).
    ///
    /// Example: wmreplay ack wm.log df41... --status success
    Ack(session::AckArgs),
    /// Write a deterministic, realistic working-memory log (for benchmarks and tests).
    Gen(generate::GenArgs),
    /// Run the respond server over one log (--log) or every DIR/<id>.log
    /// (--log-dir). Routes: POST /respond (a turn), POST /v1/context (the
    /// request a turn would send), POST /v1/records (append events,
    /// insights, tool results), POST /v1/turn/prepare and /v1/turn/ack,
    /// GET /v1/stats, GET /healthz; the provider's own API for its SDKs
    /// (POST /anthropic/v1/messages, POST /openai/v1/chat/completions: a
    /// base URL of http://HOST:PORT/anthropic or …/openai/v1); /mcp with
    /// --mcp; under --log-dir the same under /v1/logs/{id}/…, and GET
    /// /v1/logs. Every flag can also be set
    /// through the environment variable shown. Stops on SIGINT or SIGTERM
    /// once open requests and their appends finish (at most
    /// --shutdown-timeout). Logs go to stderr (RUST_LOG filters them,
    /// default "info").
    ///
    /// Example: ANTHROPIC_API_KEY=... wmreplay serve --log wm.log --upstream
    /// https://api.anthropic.com --model claude-sonnet-5-5, then curl -d
    /// '{"text":"hi"}' localhost:8787/respond, or from the Python SDK
    /// anthropic.Anthropic(base_url="http://localhost:8787/anthropic")
    Serve(Box<serve::ServeArgs>),
    /// Fold the oldest records replayed after the newest wm_summary into a
    /// new summary written by a model, until about --to tokens of records
    /// remain (as `serve --summaries --compact-at` does in the background).
    /// The summary is appended under the log's append lock, and only if no
    /// record written meanwhile sorts into what it folds. Prints
    /// {"summaries","folded_records","folded_tokens","kept_tokens","usage"};
    /// nothing is written when nothing is due. `--print-prompt` shows the
    /// built-in instructions.
    ///
    /// Example: ANTHROPIC_API_KEY=... wmreplay compact wm.log --upstream
    /// https://api.anthropic.com --model claude-sonnet-5-5 --to 50000
    Compact(compact::CompactArgs),
    /// Serve the log as an MCP server (the Model Context Protocol) on stdin
    /// and stdout, for a client that starts it: Claude Code, Claude
    /// Desktop, Cursor, VS Code. Its tools: search_memory (the whole log,
    /// as --recall-tool), memory (files under /memories, as
    /// --memory-tool), get_facts, set_fact and delete_fact (as /v1/facts),
    /// append_record (as POST /v1/records) and recent_context (the newest
    /// summary and the newest records after it). Every write goes through
    /// one writer holding the log's lock, so a `serve` writing the same log
    /// never interleaves with it. Stdout carries only the protocol; logs go
    /// to stderr (RUST_LOG filters them). Exits when stdin closes. `serve
    /// --mcp` serves the same over HTTP; see docs/mcp.md for the clients'
    /// settings.
    ///
    /// Example: claude mcp add wmreplay -- wmreplay mcp /home/me/memory.log
    Mcp(mcp::McpArgs),
    /// Print the records best matching a query, ranked by BM25 over the
    /// words of their string values (keys, numbers, and the top-level type
    /// and session_id are not searched; filter on those with --kinds and
    /// --session). Each hit is {"offset","ts_ms","type","score","record"}.
    /// The index is kept next to the log (LOG.wmreplay.idx), built on first
    /// use (with a progress bar on a terminal), brought up to date with the
    /// lines appended since before each search, and built again when the log
    /// was replaced, truncated or rewritten.
    ///
    /// With --embed-upstream and --embed-model the search is hybrid: records
    /// are also embedded by that model (an OpenAI-compatible /v1/embeddings
    /// API) and found by meaning; the two rankings are fused (reciprocal rank
    /// fusion, k = 60) and each hit's score is the fused score. Records not
    /// embedded yet are embedded first (a progress bar on a terminal); when
    /// the model fails, the search is by words only, with a warning.
    ///
    /// A LOG that does not exist finds nothing, with a warning (exit status
    /// 0); --require-log makes it exit 1. A query without a word, or longer
    /// than 4096 bytes or 64 words, exits 2.
    ///
    /// Example: wmreplay search wm.log "what was I refactoring?" --limit 5 --kinds text_output
    ///
    /// Example (hybrid, Ollama): wmreplay search wm.log "where did we go hiking"
    /// --embed-upstream http://localhost:11434 --embed-model nomic-embed-text
    Search(search::SearchArgs),
    /// Print the replay stats as one JSON object.
    ///
    /// A LOG that does not exist gives all-zero stats, with a warning on
    /// stderr (exit status 0); --require-log makes it exit 1. Skipped lines
    /// are counted in the output (and listed with --skips N), not warned
    /// about.
    ///
    /// Example: wmreplay stats wm.log --skips 5 --require-log
    Stats(replay::StatsArgs),
    /// Make a token scoped to logs for `serve --token-file`: prints a new
    /// random token, then the line that grants it (its SHA-256, the access,
    /// the logs) to add to the file. The file holds only hashes; `serve`
    /// reads it again on SIGHUP. --stdin takes a token you already have.
    ///
    /// Example: wmreplay token --access write --logs alice,alice-*
    Token(token::TokenArgs),
}

/// Runs the command line.
pub fn main() -> ExitCode {
    // A negative number is a value (`--tail -1` is then refused by the
    // flag's own check, naming it), never taken for an unknown flag.
    let cmd = Cli::command().mut_subcommands(|c| c.allow_negative_numbers(true));
    let cli = Cli::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit());
    // A file size limit makes a write fail (EFBIG: the append is rolled
    // back, the index write says why) instead of killing the process with
    // SIGXFSZ and no word.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to "ignore" has no
    // preconditions and installs no handler code.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
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

/// Why a command failed, and so its exit status.
pub enum Failure {
    /// The reader of stdout went away: end quietly.
    BrokenPipe,
    /// An I/O error, already worded with its path.
    Io(String),
    /// Settings that do not go together (exit 2, like clap's own errors).
    Usage(String),
    /// What was asked for does not exist (an unknown prepare_id).
    NotFound(String),
}

impl From<crate::Error> for Failure {
    fn from(e: crate::Error) -> Self {
        match e {
            crate::Error::Write(io) => io.into(),
            e @ crate::Error::UnknownPrepare(_) => Failure::NotFound(e.to_string()),
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
        Command::Respond(a) => replay::respond(*a),
        Command::Replay(a) => replay::replay_messages(a),
        Command::Prepare(a) => session::prepare(a),
        Command::Ack(a) => session::ack(a),
        Command::Gen(a) => generate::run(a),
        Command::Serve(a) => serve::serve(*a),
        Command::Stats(a) => replay::stats(a),
        Command::Compact(a) => compact::compact(a),
        Command::Mcp(a) => mcp::mcp(a),
        Command::Token(a) => token::token(a),
        Command::Search(a) => search::search(a),
    }
}
