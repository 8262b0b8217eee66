//! `wmreplay mcp`: an MCP server for one log over stdin and stdout, for a
//! client that starts it (Claude Code, Claude Desktop, Cursor, VS Code).

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::server::{self, Config};
use clap::Args;

use super::Failure;
use super::args::*;
use super::signals::shutdown_signal;

#[derive(Args, Debug)]
pub struct McpArgs {
    /// The working-memory log (created by the first write if missing).
    log: PathBuf,
    /// Exit with status 1 when LOG does not exist, instead of serving it as
    /// an empty log (its first write then creates it).
    #[arg(long)]
    require_log: bool,
    /// Largest record a write may make (append_record, set_fact, a memory
    /// file), as `serve --max-record-bytes`.
    #[arg(long, env = "WMREPLAY_MAX_RECORD_BYTES", default_value = "1MiB", value_name = "SIZE", value_parser = parse_body_limit)]
    max_record_bytes: u64,
    /// Leave wm_fact records out of recent_context (get_facts reads them),
    /// as `serve --facts` leaves them out of a replay.
    #[arg(long, env = "WMREPLAY_FACTS")]
    facts: bool,
    /// Acknowledge writes without syncing them to disk first (faster; a
    /// power cut may lose the last ones).
    #[arg(long, env = "WMREPLAY_NO_FSYNC")]
    no_fsync: bool,
    /// Deepest nesting accepted in a record; deeper ones are refused.
    #[arg(long, default_value_t = crate::DEFAULT_MAX_DEPTH, value_name = "N")]
    max_depth: usize,
    #[arg(long, env = "WMREPLAY_LANGUAGE", default_value = "english", value_name = "LANG", value_parser = parse_language, help = LANGUAGE_HELP)]
    language: crate::search::Language,
    /// Hybrid search for search_memory (see `wmreplay search`).
    #[command(flatten)]
    embed: super::embed::EmbedArgs,
}

/// Serves MCP on stdin and stdout until stdin closes (or SIGINT, SIGTERM).
pub fn mcp(args: McpArgs) -> Result<(), Failure> {
    init_logs();
    if args.require_log && !args.log.exists() {
        return Err(Failure::Io(format!(
            "{}: the log does not exist (--require-log)",
            args.log.display()
        )));
    }
    let mut cfg = Config::new(&args.log);
    cfg.max_record_bytes = usize::try_from(args.max_record_bytes).unwrap_or(usize::MAX);
    cfg.fsync = !args.no_fsync;
    cfg.replay.max_depth = args.max_depth.max(1);
    cfg.language = args.language;
    cfg.embed = args.embed.config()?;
    // The live state keeps what the newest summary does not cover, and
    // with --facts the facts as a table: what recent_context reads.
    cfg.selection.summaries = true;
    cfg.selection.facts = args.facts;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::Io(format!("cannot start the runtime: {e}")))?;
    let served = runtime.block_on(async { server::mcp_stdio(cfg, shutdown_signal()).await });
    // A read of stdin cannot be cancelled: do not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    served.map_err(|e| match e {
        server::McpStdioError::Config(m) => Failure::Usage(m),
        e => Failure::Io(e.to_string()),
    })
}

/// Logs on stderr (stdout carries the protocol): RUST_LOG filters them,
/// default "info" for wmreplay and "warn" for the MCP library.
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    tracing_subscriber::fmt()
        .with_writer(server::StderrLog)
        .log_internal_errors(false)
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
