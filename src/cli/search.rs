//! `wmreplay search`: the records of a log best matching a query.

use std::path::PathBuf;

use crate::search::{SearchIndex, SearchOptions};
use clap::Args;

use super::Failure;
use super::args::*;

#[derive(Args, Debug)]
pub struct SearchArgs {
    /// The working-memory log (JSONL).
    pub log: PathBuf,
    /// What to look for: its words (letters and digits; case is ignored)
    /// are matched against the words of each record's string values.
    pub query: String,
    /// How many records to print, best first (1 to 1000).
    #[arg(long, short = 'k', default_value_t = 10, value_name = "K")]
    limit: usize,
    /// Only records whose type is one of these (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    kinds: Option<Vec<String>>,
    /// Only records of this session_id, and records with none.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Only records with ts_ms >= MS.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    since: Option<f64>,
    /// Only records with ts_ms <= MS.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    until: Option<f64>,
    /// json: one object {"query","hits":[...]}; ndjson: one hit per line.
    #[arg(long, default_value = "json", value_parser = ["json", "ndjson"])]
    format: String,
    /// Where the index is kept [default: LOG.wmreplay.idx].
    #[arg(long, value_name = "PATH")]
    index: Option<PathBuf>,
    /// Exit with status 1 when LOG does not exist, instead of warning and
    /// finding nothing.
    #[arg(long)]
    require_log: bool,
    /// Deepest nesting accepted in a line; deeper lines are not searched.
    #[arg(long, default_value_t = crate::DEFAULT_MAX_DEPTH, value_name = "N")]
    max_depth: usize,
    #[arg(long, env = "WMREPLAY_LANGUAGE", default_value = "english", value_name = "LANG", value_parser = parse_language, help = LANGUAGE_HELP)]
    language: crate::search::Language,
    #[command(flatten)]
    embed: super::embed::EmbedArgs,
}

/// `wmreplay search`.
pub fn search(args: SearchArgs) -> Result<(), Failure> {
    let SearchArgs {
        log,
        query,
        limit,
        kinds,
        session,
        since,
        until,
        format,
        index,
        require_log,
        max_depth,
        language,
        embed,
    } = args;
    super::args::file_only(&log, "search", "its index")?;
    // The query is checked before anything is read or made.
    crate::search::query_words(&query).map_err(|e| Failure::Usage(e.to_string()))?;
    if limit == 0 || limit > crate::search::MAX_LIMIT {
        return Err(Failure::Usage(format!(
            "--limit must be 1 to {}, not {limit}",
            crate::search::MAX_LIMIT
        )));
    }
    if !log.exists() {
        let path = log.display();
        if require_log {
            return Err(Failure::Io(format!(
                "{path}: the log does not exist (--require-log)"
            )));
        }
        warn(&format!(
            "{path} does not exist; nothing to search (--require-log makes this an error)"
        ));
    }
    let mut options = crate::ReplayOptions::default();
    options.max_depth = max_depth.max(1);
    let path = index.unwrap_or_else(|| SearchIndex::path_for(&log));
    let mut idx = embed.hybrid(SearchIndex::in_language(&log, &path, &options, language))?;
    let total = std::fs::metadata(&log).map_or(0, |m| m.len());
    let bar = progress_bar(total, format!("indexing {}", log.display()));
    let refreshed = idx
        .refresh_with_progress(&mut |done, total| {
            if let Some(b) = &bar {
                b.set_length(total);
                b.set_position(done);
            }
        })
        .map_err(Failure::from);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    refreshed?;
    super::embed::embed_pending(&mut idx)?;
    let mut o = SearchOptions::with_limit(limit);
    o.kinds = kinds;
    o.session = session;
    o.since = since;
    o.until = until;
    let hits = idx.search(&query, &o).map_err(|e| match e {
        crate::Error::Query(m) => Failure::Usage(m),
        e => Failure::from(e),
    })?;
    write_stdout(|w| {
        if format == "ndjson" {
            for h in &hits {
                writeln!(w, "{}", h.to_json())?;
            }
            return Ok(());
        }
        let q = serde_json::to_string(&query).expect("a string serialises");
        write!(w, "{{\"query\":{q},\"hits\":[")?;
        for (i, h) in hits.iter().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            w.write_all(h.to_json().as_bytes())?;
        }
        w.write_all(b"]}\n")
    })
}
