//! `wmreplay compact`: one compaction of a log, as the server's
//! `--compact-at` makes them, run once.

use std::io::Write;
use std::path::PathBuf;

use crate::server::{self, Compaction, Config};
use clap::Args;

use super::Failure;
use super::args::*;

#[derive(Args, Debug)]
pub struct CompactArgs {
    /// The working-memory log (its summaries are appended to it).
    #[arg(required_unless_present = "print_prompt")]
    log: Option<PathBuf>,
    /// The model API: an http(s) base URL (https://api.anthropic.com) or a
    /// full endpoint URL.
    #[arg(long, env = "WMREPLAY_UPSTREAM", value_name = "URL", value_parser = parse_upstream, required_unless_present = "print_prompt")]
    upstream: Option<String>,
    /// The API the upstream speaks: anthropic (Messages) or openai (Chat
    /// Completions).
    #[arg(long, env = "WMREPLAY_PROVIDER", default_value = "anthropic", value_parser = parse_provider)]
    provider: server::Provider,
    /// The model that writes the summary, e.g. claude-sonnet-5-5 (there is
    /// no built-in default).
    #[arg(long, env = "WMREPLAY_MODEL", required_unless_present = "print_prompt")]
    model: Option<String>,
    /// Name of the environment variable holding the API key [default:
    /// ANTHROPIC_API_KEY, or OPENAI_API_KEY for openai]; '' for an upstream
    /// that needs none.
    #[arg(long, env = "WMREPLAY_API_KEY_ENV", value_name = "VAR")]
    api_key_env: Option<String>,
    /// Fold until about this many tokens of records are replayed after the
    /// newest summary (the newest record always stays).
    #[arg(long, value_name = "TOKENS", default_value_t = 50_000)]
    to: u64,
    /// At most this many tokens of records go into one summary request; a
    /// larger backlog is folded over several summaries, each carrying the
    /// one before.
    #[arg(long, value_name = "TOKENS", default_value_t = 100_000)]
    fold_tokens: u64,
    /// How tokens are counted: o200k_base, cl100k_base or bytes.
    #[arg(long, env = "WMREPLAY_TOKENIZER", default_value = "o200k_base", value_parser = parse_tokenizer)]
    tokenizer: crate::Tokenizer,
    /// Leave the wm_fact records out of the fold, as `--facts` replays them
    /// (one message of every live key, whatever a summary covers).
    #[arg(long)]
    facts: bool,
    /// A file of instructions for the summary, instead of the built-in ones.
    #[arg(long, value_name = "FILE")]
    prompt: Option<PathBuf>,
    /// Print the built-in instructions and exit.
    #[arg(long)]
    print_prompt: bool,
    /// A summary's token limit. A summary the model makes longer than one
    /// and a half times this (counted with --tokenizer), or than
    /// --max-record-bytes, is cut there, and says so (`text_cut`).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    max_output_tokens: u32,
    /// Largest record written, as `serve --max-record-bytes`.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_record_bytes)]
    max_record_bytes: usize,
    /// An extra header sent with the call, NAME=VALUE (repeatable).
    #[arg(long = "upstream-header", value_name = "NAME=VALUE", value_parser = parse_header)]
    upstream_headers: Vec<(String, String)>,
    /// How long one summary request may take, retries included.
    #[arg(long, default_value = "300s", value_parser = parse_timeout)]
    upstream_timeout: std::time::Duration,
    /// Times a failed call is tried again (as `serve --upstream-retries`).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10))]
    upstream_retries: u32,
}

/// Runs one compaction; prints `{"summaries",…}` on stdout and a line per
/// summary on stderr.
pub fn compact(args: CompactArgs) -> Result<(), Failure> {
    if args.print_prompt {
        writeln!(std::io::stdout(), "{}", Compaction::INSTRUCTIONS)?;
        return Ok(());
    }
    let (Some(log), Some(upstream), Some(model)) = (args.log, args.upstream, args.model) else {
        return Err(Failure::Usage(
            "LOG, --upstream and --model are required".into(),
        ));
    };
    if args.to == 0 || args.fold_tokens == 0 {
        return Err(Failure::Usage(
            "--to and --fold-tokens must be at least 1".into(),
        ));
    }
    if !log.exists() {
        return Err(Failure::Io(format!("{}: no such log", log.display())));
    }
    let mut cfg = Config::new(&log);
    cfg.upstream = Some(upstream);
    cfg.provider = args.provider;
    cfg.model = Some(model);
    cfg.api_key = super::serve_more::api_key(args.provider, args.api_key_env, true)?;
    cfg.upstream_headers = args.upstream_headers;
    cfg.upstream_timeout = args.upstream_timeout;
    cfg.upstream_retries = args.upstream_retries;
    cfg.selection.summaries = true;
    cfg.selection.facts = args.facts;
    cfg.selection.tokenizer = args.tokenizer;
    cfg.max_record_bytes = args.max_record_bytes;
    let mut c = Compaction::new(args.fold_tokens);
    c.max_output_tokens = args.max_output_tokens;
    if let Some(file) = &args.prompt {
        c.instructions = std::fs::read_to_string(file)
            .map_err(|e| Failure::Usage(format!("--prompt {}: {e}", file.display())))?;
        if c.instructions.trim().is_empty() {
            return Err(Failure::Usage(format!(
                "--prompt {}: the file is empty",
                file.display()
            )));
        }
    }
    cfg.compaction = Some(c);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Io(format!("cannot start the runtime: {e}")))?;
    let mut progress = |r: &server::CompactReport| {
        eprintln!(
            "wmreplay: summary {} appended at offset {}: {} records ({} tokens) folded so far",
            r.summaries,
            r.last_offset.unwrap_or(0),
            r.folded_records,
            r.folded_tokens
        );
    };
    let report = runtime
        .block_on(server::compact_once(
            &cfg,
            args.to,
            args.fold_tokens,
            &mut progress,
        ))
        .map_err(|e| match e {
            server::CompactError::Config(m) => Failure::Usage(m),
            e => Failure::Io(format!("{}: {e}", log.display())),
        })?;
    let out = serde_json::json!({
        "summaries": report.summaries,
        "folded_records": report.folded_records,
        "folded_tokens": report.folded_tokens,
        "kept_tokens": report.kept_tokens,
        "cut": report.cut,
        "usage": report.usage.to_json(),
    });
    writeln!(std::io::stdout(), "{out}")?;
    Ok(())
}

fn parse_record_bytes(s: &str) -> Result<usize, String> {
    let n = parse_size::parse_size(s).map_err(|e| e.to_string())?;
    usize::try_from(n)
        .ok()
        .filter(|n| *n >= 1024)
        .ok_or_else(|| "at least 1KiB".to_string())
}
