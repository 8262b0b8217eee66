//! `wmreplay respond`, `replay` and `stats`: one replay of a log, written
//! as a request body, as the messages alone, or as stats.

use crate::{CurrentRequest, Format};
use clap::Args;

use super::Failure;
use super::args::*;

/// Arguments of `wmreplay respond`.
#[derive(Args, Debug)]
pub struct RespondArgs {
    #[command(flatten)]
    pub log: LogArgs,
    /// The user's request text.
    #[arg(long)]
    pub text: String,
    /// The session id written in CURRENT_USER_REQUEST ("none" when absent).
    #[arg(long)]
    pub session: Option<String>,
    /// Replay only the records of --session (and records with no
    /// session_id).
    #[arg(long, requires = "session")]
    pub session_only: bool,
    /// Text placed before the system rule in the system prompt (persona, tone).
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Body format: anthropic (Messages API), openai (Chat Completions),
    /// ndjson (one message per line, system first, request last), or xml
    /// (a prompt: the <memory_context> document, then the
    /// CURRENT_USER_REQUEST text; no system rule).
    #[arg(long, default_value = "anthropic", value_parser = parse_format)]
    pub format: Format,
    /// Prompt-cache breakpoints (anthropic format only): `auto` marks up to
    /// 4 blocks (the last replayed message, stable positions every 64
    /// messages, and the system prompt, then a one-block array) so that the
    /// next turn's request reads this one's prefix from Anthropic's cache;
    /// `none` writes the contract's body exactly. OpenAI caches prefixes
    /// without markers.
    #[arg(long, value_name = "auto|none", default_value = "none", value_parser = ["auto", "none"])]
    pub cache: String,
    /// Lifetime of the cache entries the markers write: 5m (writes cost
    /// 1.25× input) or 1h (2×).
    #[arg(long, value_name = "5m|1h", default_value = "5m", value_parser = parse_cache_ttl)]
    pub cache_ttl: crate::CacheTtl,
    /// Write a request ready to POST: the model first, then the answer's
    /// token limit (--max-output-tokens) and the --param fields, checked
    /// against the provider's rules (anthropic and openai formats). Without
    /// it the body is the contract's, with no leading fields.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The answer's token limit written with --model (max_tokens for
    /// Anthropic, max_completion_tokens for OpenAI). Not the window's
    /// budget, which is --max-tokens.
    #[arg(long, value_name = "N", default_value_t = 1024, requires = "model", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_output_tokens: u32,
    /// An extra request field, NAME=JSON (repeatable), e.g. --param
    /// temperature=0.2 --param 'stop_sequences=["END"]'; the other
    /// provider's name is mapped (stop ↔ stop_sequences). Needs --model.
    #[arg(long = "param", value_name = "NAME=JSON", requires = "model", value_parser = parse_field)]
    pub params: Vec<(String, serde_json::Value)>,
    /// A --param name the provider's table does not list, let through
    /// (repeatable): for a parameter newer than this version.
    #[arg(long = "allow-param", value_name = "NAME")]
    pub allow_params: Vec<String>,
    /// Recall: the K records best matching --text that the replay does not
    /// already hold (records folded into a summary count as not held), as
    /// one WM_KIND=recall message just before CURRENT_USER_REQUEST. Found
    /// by `wmreplay search`'s index next to the log (built on first use).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub recall: Option<u64>,
    #[arg(long, env = "WMREPLAY_LANGUAGE", default_value = "english", value_name = "LANG", value_parser = parse_language, help = LANGUAGE_HELP)]
    pub language: crate::search::Language,
    /// Hybrid recall (--embed-upstream, --embed-model: see `wmreplay search`).
    #[command(flatten)]
    pub embed: super::embed::EmbedArgs,
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Arguments of `wmreplay replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub log: LogArgs,
    /// Message shape: anthropic or openai (a JSON array), ndjson, or xml.
    #[arg(long, default_value = "anthropic", value_parser = parse_format)]
    pub format: Format,
    /// Keep only records whose session_id is ID, and records with none.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Arguments of `wmreplay stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub log: LogArgs,
    /// Also list the first N skipped lines (line number, byte offset, reason).
    #[arg(long, value_name = "N")]
    pub skips: Option<usize>,
    /// Keep only records whose session_id is ID, and records with none.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// `wmreplay respond`.
pub fn respond(args: RespondArgs) -> Result<(), Failure> {
    let RespondArgs {
        log,
        text,
        session,
        session_only,
        system,
        format,
        cache,
        cache_ttl,
        model,
        max_output_tokens,
        params,
        allow_params,
        recall,
        language,
        embed,
        select,
        engine,
    } = args;
    let cached = cache == "auto";
    if model.is_some() && !matches!(format, Format::Anthropic | Format::OpenAi) {
        return Err(Failure::Usage(format!(
            "--model writes a provider's request: it needs --format anthropic or openai (got {})",
            format.name()
        )));
    }
    let fields = match &model {
        None => String::new(),
        Some(m) => {
            crate::request_fields(format, m, max_output_tokens, false, &params, &allow_params)
                .map_err(|e| Failure::Usage(format!("--param {}: {}", e.field, e.message)))?
        }
    };
    if cached && format != Format::Anthropic {
        return Err(Failure::Usage(format!(
            "--cache auto places Anthropic's cache_control markers: it needs --format anthropic \
             (got {}); OpenAI caches prefixes without markers",
            format.name()
        )));
    }
    let filter = if session_only { session.clone() } else { None };
    let sel = select.selection(filter)?;
    if recall.is_some() {
        super::args::file_only(&log.log, "--recall", "its search index")?;
    }
    let bytes = log.open(&engine)?;
    // One skip kept: the first bad line, for the warning.
    let mut replayed = replay(&bytes, &engine, 1)?;
    bytes.verify()?;
    warn_skipped(bytes.path(), replayed.stats());
    apply_selection(&mut replayed, &sel, &select, &bytes)?;
    let system = crate::system_prompt(system.as_deref());
    let current = CurrentRequest {
        text: &text,
        session_id: session.as_deref(),
    };
    let t = std::time::Instant::now();
    let recalled = match recall {
        Some(k) => recall_for(
            &log.log,
            &text,
            k as usize,
            &replayed,
            &engine,
            (language, &embed),
        )?,
        None => None,
    };
    let mut spec = crate::RequestSpec::new(format, &system, current)
        .with_fields(&fields)
        .with_recall(recalled.as_deref());
    if cached {
        let mut policy = crate::CachePolicy::default();
        policy.ttl = cache_ttl;
        spec = spec.with_cache(policy);
    }
    write_stdout(|w| replayed.write_request_with(&spec, w))?;
    bytes.verify()?;
    report_timings(&engine, &bytes, &replayed, t.elapsed());
    // Done with the log: its pages go back in parallel, not in one
    // serial unmap at exit.
    bytes.release_pages();
    Ok(())
}

/// The recall message for `text` (see `--recall`): the index is brought up
/// to date (with a progress bar on a long build), and the records
/// `replayed` holds are left out.
fn recall_for(
    log: &std::path::Path,
    text: &str,
    k: usize,
    replayed: &crate::Replay<'_>,
    engine: &EngineArgs,
    (language, embed): (crate::search::Language, &super::embed::EmbedArgs),
) -> Result<Option<String>, Failure> {
    let held: std::collections::HashSet<u64> = replayed
        .records()
        .iter()
        .map(|r| replayed.source_offset(r))
        .collect();
    let options = replay_options(engine, 0);
    let mut index = embed.hybrid(crate::search::SearchIndex::in_language(
        log,
        crate::search::SearchIndex::path_for(log),
        &options,
        language,
    ))?;
    let total = std::fs::metadata(log).map_or(0, |m| m.len());
    let bar = progress_bar(total, format!("indexing {}", log.display()));
    let refreshed = index.refresh_with_progress(&mut |done, total| {
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    refreshed?;
    super::embed::embed_pending(&mut index)?;
    Ok(index.recall(text, k, &|o| held.contains(&o))?)
}

/// `wmreplay replay`.
pub fn replay_messages(args: ReplayArgs) -> Result<(), Failure> {
    let ReplayArgs {
        log,
        format,
        session,
        select,
        engine,
    } = args;
    let sel = select.selection(session)?;
    if sel.facts && format == Format::Xml {
        return Err(Failure::Usage(
            "--facts has no place in the XML document: use --format anthropic, openai or ndjson \
             (the facts message comes last), or respond"
                .into(),
        ));
    }
    let bytes = log.open(&engine)?;
    // One skip kept: the first bad line, for the warning.
    let mut replayed = replay(&bytes, &engine, 1)?;
    bytes.verify()?;
    warn_skipped(bytes.path(), replayed.stats());
    apply_selection(&mut replayed, &sel, &select, &bytes)?;
    let t = std::time::Instant::now();
    write_stdout(|w| replayed.write_messages(format, w))?;
    bytes.verify()?;
    report_timings(&engine, &bytes, &replayed, t.elapsed());
    // Done with the log: its pages go back in parallel, not in one
    // serial unmap at exit.
    bytes.release_pages();
    Ok(())
}

/// `wmreplay stats`.
pub fn stats(args: StatsArgs) -> Result<(), Failure> {
    let StatsArgs {
        log,
        skips,
        session,
        select,
        engine,
    } = args;
    let sel = select.selection(session)?;
    let bytes = log.open(&engine)?;
    let n = skips.unwrap_or(0);
    // No warning about skipped lines: the stats are the report of them.
    let mut replayed = replay(&bytes, &engine, n)?;
    bytes.verify()?;
    let report = select_with_state(&mut replayed, &sel, &select, &bytes)?;
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
