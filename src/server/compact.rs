//! One compaction of a log from outside the server (`wmreplay compact`):
//! the same fold as the server's background task (`app/compact.rs`), run
//! to completion on a one-shot replay, the summary appended under the
//! log's append lock with the same guard.

use crate::order::ts_key;
use crate::select::fold::{self, Cover, Guard};
use crate::server::app::compact::{ask, summary_body};
use crate::server::config::Config;
use crate::server::upstream::Usage;
use crate::{LogBytes, ReadMode, replay};

/// What [`compact_once`] did.
#[derive(Debug, Default, Clone)]
#[non_exhaustive]
pub struct CompactReport {
    /// Summaries appended (a backlog is folded over several).
    pub summaries: u64,
    /// Records folded.
    pub folded_records: u64,
    /// Tokens of the records folded.
    pub folded_tokens: u64,
    /// Tokens of the records replayed after the newest summary, at the end.
    pub kept_tokens: u64,
    /// Offset of the last summary appended.
    pub last_offset: Option<u64>,
    /// The summary calls' tokens.
    pub usage: Usage,
    /// Summaries cut to what a summary may be (see `fold::held_summary`):
    /// the model wrote more than its token limit or a record allows.
    pub cut: usize,
}

/// Why [`compact_once`] stopped short.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// A setting is wrong.
    #[error("{0}")]
    Config(String),
    /// The log could not be read.
    #[error(transparent)]
    Log(#[from] crate::Error),
    /// The model did not give a summary; nothing more was written.
    #[error("the summary request failed: {0}")]
    Upstream(String),
    /// The summary could not be appended.
    #[error("cannot append the summary: {0}")]
    Append(#[from] crate::AppendError),
    /// Records kept arriving inside the fold's range.
    #[error("records written meanwhile keep sorting into the fold; try again")]
    Changing,
}

/// Folds the oldest records replayed after the newest summary of
/// `cfg.log` until at most about `keep` tokens of them remain, asking
/// `cfg`'s upstream (its model, or the compaction's) with the compaction's
/// instructions, at most `fold` tokens of records per summary. Each
/// summary is appended under the log's append lock, only if no record
/// written since the fold read the log sorts into it (else the fold is made
/// again). Nothing is written when nothing is due. `progress` is called
/// after each summary appended, with the report so far.
pub async fn compact_once(
    cfg: &Config,
    keep: u64,
    fold: u64,
    progress: &mut (dyn FnMut(&CompactReport) + Send),
) -> Result<CompactReport, CompactError> {
    super::install_crypto_provider();
    let Some(c) = cfg.compaction.clone() else {
        return Err(CompactError::Config("no compaction settings".into()));
    };
    let upstream = super::upstream_of(cfg)
        .map_err(|e| CompactError::Config(e.to_string()))?
        .ok_or_else(|| CompactError::Config("an upstream is needed".into()))?;
    let model = c
        .model
        .clone()
        .or_else(|| cfg.model.clone())
        .ok_or_else(|| CompactError::Config("a model is needed".into()))?;
    let mut report = CompactReport::default();
    let mut broken = 0;
    loop {
        let path = cfg.log.clone();
        let (sel, options) = (cfg.selection.clone(), cfg.replay.clone());
        let planned = tokio::task::spawn_blocking(move || plan(&path, &sel, &options, keep, fold))
            .await
            .map_err(|e| CompactError::Config(format!("the fold's task failed: {e}")))??;
        let (cover, guard, input) = match planned {
            Planned::Nothing(kept) => {
                report.kept_tokens = kept;
                return Ok(report);
            }
            Planned::Fold(p) => *p,
        };
        let body = summary_body(
            cfg.provider,
            &model,
            c.max_output_tokens,
            &c.instructions,
            &input,
        );
        let answer = ask(&upstream, body, cfg.upstream_timeout)
            .await
            .map_err(CompactError::Upstream)?;
        report.usage.add(&answer.usage);
        if answer.text.trim().is_empty() {
            return Err(CompactError::Upstream(
                "the model's summary is empty".into(),
            ));
        }
        let (record, was_cut) = fold::held_summary(
            &cover,
            &answer.text,
            &model,
            c.max_output_tokens,
            cfg.selection.tokenizer,
            cfg.max_record_bytes,
        );
        report.cut += usize::from(was_cut);
        let path = cfg.log.clone();
        let written = tokio::task::spawn_blocking(move || {
            crate::append::append_guarded(&path, &[record.as_bytes()], Some(&guard))
        })
        .await
        .map_err(|e| CompactError::Config(format!("the append's task failed: {e}")))??;
        match written {
            Ok(r) => {
                broken = 0;
                report.summaries += 1;
                report.folded_records += cover.records as u64;
                report.folded_tokens += cover.tokens;
                report.last_offset = r.records.first().map(|a| a.offset);
                progress(&report);
            }
            Err(_) => {
                broken += 1;
                if broken >= 4 {
                    return Err(CompactError::Changing);
                }
            }
        }
    }
}

/// A fold to make, or the tokens replayed when none is due.
enum Planned {
    Nothing(u64),
    Fold(Box<(Cover, Guard, String)>),
}

/// The next fold of the log at `path` ([`fold::plan_with`]: tokens counted
/// from the newest record back until `keep` is passed, then from the oldest
/// forward up to `fold`, never a whole backlog).
fn plan(
    path: &std::path::Path,
    sel: &crate::Selection,
    options: &crate::ReplayOptions,
    keep: u64,
    fold: u64,
) -> Result<Planned, CompactError> {
    let bytes = LogBytes::open(path, ReadMode::Auto)?;
    let mut r = replay(bytes.bytes(), options);
    r.select(sel, None);
    let records = r.records();
    let summary = records
        .first()
        .filter(|s| s.kind_is(r.data(), crate::select::memory::SUMMARY));
    let items = &records[usize::from(summary.is_some())..];
    // Each record counted once, and only as far as the plan asks.
    let mut counted: Vec<Option<u64>> = vec![None; items.len()];
    let mut text = String::new();
    let mut tokens = |i: usize| {
        *counted[i].get_or_insert_with(|| {
            text.clear();
            r.message_text(&items[i], &mut text);
            sel.tokenizer.count(&text)
        })
    };
    let Some(k) = fold::plan_with(items.len(), keep, keep, fold, &mut tokens) else {
        let kept = (0..items.len()).map(&mut tokens).sum();
        return Ok(Planned::Nothing(kept));
    };
    let folded = (0..k).map(&mut tokens).sum();
    let mut texts = String::new();
    for rec in &items[..k] {
        if !texts.is_empty() {
            texts.push_str("\n\n");
        }
        r.message_text(rec, &mut texts);
    }
    let previous = summary.and_then(|s| {
        let mut t = String::new();
        r.message_text(s, &mut t);
        fold::summary_text(&t)
    });
    let last = &items[k - 1];
    let cover = Cover {
        ts_ms: last.ts_ms(),
        offset: r.source_offset(last),
        records: k,
        tokens: folded,
    };
    let guard = Guard {
        since: bytes.bytes().len() as u64,
        below: ts_key(last.ts_ms()),
    };
    let input = fold::input(previous.as_deref(), &texts);
    Ok(Planned::Fold(Box::new((cover, guard, input))))
}
