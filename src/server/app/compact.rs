//! Compaction in the server (`--compact-at`): after each append to a log,
//! a background task per log checks the tokens replayed after the newest
//! summary, and past the threshold folds the oldest records into a new
//! `wm_summary` written by a model (see `crate::select::fold`).
//!
//! - **Never in a turn's way.** The task holds the log's live state only to
//!   read what is replayed (token counts are cached per record, and made
//!   outside the lock); the model is called with no lock held and no hold
//!   on the log's state (an evicted log simply drops the fold), and the
//!   summary goes through the log's one writer like any record.
//! - **At most one per log.** An append while a fold runs asks for one more
//!   check after it.
//! - **Exact.** The summary is appended under a [`Guard`]: a record written
//!   meanwhile that sorts into the folded range makes the fold start over.
//! - **Failures.** A failed or timed-out call writes nothing, is logged and
//!   counted, and is tried again after a backoff (doubling up to 5 minutes).
//!   A stop of the server (`kill -9` included) leaves no part of a summary:
//!   it is one record written whole, or not at all; the next start checks
//!   again.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use super::AppState;
use super::snapshot::with_live;
use crate::order::key_ts;
use crate::select::fold::{self, Cover, Guard};
use crate::server::upstream::call::Upstream;
use crate::server::upstream::{Answer, Provider};
use crate::server::writer::Line;

/// Checks the log soon, in the background, and folds if it is due (with
/// `--compact-at`; nothing otherwise).
pub(crate) fn compact_soon(state: &Arc<AppState>) {
    if state.cfg.compaction.is_none() {
        return;
    }
    let Some(upstream) = state.upstream.clone() else {
        return;
    };
    let c = &state.compactor;
    // Asked first, so a task finishing now sees it.
    c.again.store(true, Ordering::SeqCst);
    if c.running.swap(true, Ordering::SeqCst) {
        return;
    }
    let weak = Arc::downgrade(state);
    tokio::spawn(run(weak, upstream));
}

/// How one step of the task ended.
enum Step {
    /// A summary was appended (there may be more to fold).
    Folded,
    /// Nothing is due.
    Idle,
    /// The fold failed; tried again after a backoff.
    Failed(String),
    /// The log's state is gone (shutdown, eviction).
    Gone,
}

async fn run(weak: Weak<AppState>, upstream: Arc<Upstream>) {
    loop {
        if let Some(s) = weak.upgrade() {
            s.compactor.again.store(false, Ordering::SeqCst);
        }
        let step = step(&weak, &upstream).await;
        let Some(state) = weak.upgrade() else {
            return;
        };
        let c = &state.compactor;
        match step {
            Step::Folded => {
                c.stats.lock().unwrap_or_else(|p| p.into_inner()).failing = 0;
                continue;
            }
            Step::Idle | Step::Gone => {}
            Step::Failed(message) => {
                let wait = {
                    let mut s = c.stats.lock().unwrap_or_else(|p| p.into_inner());
                    s.failures += 1;
                    s.failing = s.failing.saturating_add(1);
                    s.last_error = Some(message.clone());
                    backoff(state.cfg.retry_min_delay, s.failing)
                };
                tracing::warn!(log = %state.cfg.log.display(), error = %message,
                    retry_in_ms = wait.as_millis() as u64, "compaction failed; nothing was written");
                c.running.store(false, Ordering::SeqCst);
                let weak = Arc::downgrade(&state);
                let mut cut = state.turns.cut_signal();
                drop(state);
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = cut.wait_for(|c| *c) => return,
                    }
                    if let Some(s) = weak.upgrade() {
                        compact_soon(&s);
                    }
                });
                return;
            }
        }
        c.running.store(false, Ordering::SeqCst);
        if c.again.load(Ordering::SeqCst) && !c.running.swap(true, Ordering::SeqCst) {
            continue;
        }
        return;
    }
}

/// The wait before the next try after `failing` failures in a row.
fn backoff(min: Duration, failing: u32) -> Duration {
    let base = (min * 2).max(Duration::from_millis(100));
    base.saturating_mul(1 << failing.saturating_sub(1).min(16))
        .min(Duration::from_secs(300))
}

/// Times a fold is planned again when the log changed under it.
const PLANS: usize = 4;

async fn step(weak: &Weak<AppState>, upstream: &Upstream) -> Step {
    for _ in 0..PLANS {
        let Some(state) = weak.upgrade() else {
            return Step::Gone;
        };
        let Some(cfg) = state.cfg.compaction.clone() else {
            return Step::Idle;
        };
        let (cover, guard, input) = match plan(&state, &cfg).await {
            Ok(Planned::Fold(cover, guard, input)) => (cover, guard, input),
            Ok(Planned::Changed) => continue,
            Ok(Planned::Nothing) => return Step::Idle,
            Err(m) => return Step::Failed(m),
        };
        let model = cfg
            .model
            .clone()
            .or_else(|| state.cfg.model.clone())
            .unwrap_or_default();
        let body = summary_body(
            state.cfg.provider,
            &model,
            cfg.max_output_tokens,
            &cfg.instructions,
            &input,
        );
        let mut cut = state.turns.cut_signal();
        let timeout = state.cfg.upstream_timeout;
        tracing::info!(
            log = %state.cfg.log.display(),
            records = cover.records,
            tokens = cover.tokens,
            "compacting: asking for a summary"
        );
        // No hold on the log's state while the model writes.
        drop(state);
        let answer = tokio::select! {
            a = ask(upstream, body, timeout) => a,
            _ = cut.wait_for(|c| *c) => return Step::Gone,
        };
        let answer = match answer {
            Ok(a) => a,
            Err(m) => return Step::Failed(m),
        };
        let Some(state) = weak.upgrade() else {
            tracing::info!(
                "the log was let go while its summary was written; dropping the summary"
            );
            return Step::Gone;
        };
        state
            .compactor
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .usage
            .add(&answer.usage);
        if answer.text.trim().is_empty() {
            return Step::Failed("the model's summary is empty".into());
        }
        if answer
            .stop_reason
            .as_deref()
            .is_some_and(|r| !state.cfg.provider.normal_stop(r))
        {
            tracing::warn!(
                stop_reason = answer.stop_reason.as_deref().unwrap_or(""),
                "the summary was cut short by its token limit (--compact-max-output-tokens); keeping it"
            );
        }
        let (record, was_cut) = fold::held_summary(
            &cover,
            &answer.text,
            &model,
            cfg.max_output_tokens,
            state.cfg.selection.tokenizer,
            state.cfg.max_record_bytes,
        );
        if was_cut {
            tracing::warn!(
                bytes = answer.text.len(),
                "the summary is longer than its token limit or a record allows; its start is kept"
            );
        }
        let line = Line::stamped_object(record.as_bytes());
        let written = match state.writer() {
            Ok(w) => w.append_guarded(vec![line], guard).await,
            Err(e) => Err(e),
        };
        match written {
            Ok(Ok(appended)) => {
                {
                    let mut s = state
                        .compactor
                        .stats
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    s.summaries += 1;
                    s.folded_records += cover.records as u64;
                    s.folded_tokens += cover.tokens;
                }
                tracing::info!(log = %state.cfg.log.display(), offset = appended[0].offset,
                    records = cover.records, tokens = cover.tokens,
                    summary_bytes = appended[0].len, "compacted: summary appended");
                return Step::Folded;
            }
            Ok(Err(at)) => {
                tracing::info!(
                    offset = at,
                    "a record written during the fold sorts into it; folding again"
                );
            }
            Err(e) => return Step::Failed(format!("cannot append the summary: {e}")),
        }
    }
    Step::Failed("the log kept changing under the fold".into())
}

/// What a look at the log found.
enum Planned {
    /// Nothing is due.
    Nothing,
    /// The log changed between the two looks a plan takes: plan again.
    Changed,
    /// A fold: its cover, its guard and the model's input.
    Fold(Cover, Guard, String),
}

async fn plan(
    state: &Arc<AppState>,
    cfg: &crate::server::config::Compaction,
) -> Result<Planned, String> {
    let sel = state.cfg.selection.clone();
    let at = cfg.at;
    let s = sel.clone();
    let seen = with_live(state, move |st, live| {
        let counts = st
            .compactor
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let fresh = counts.0 == live.info().rebuilds;
        Ok(live.replayed_after_summary(&s, at, |off| !fresh || !counts.1.contains_key(&off)))
    })
    .await
    .map_err(|e| e.message)?;
    if seen.bytes <= at {
        return Ok(Planned::Nothing);
    }
    // Counted off the lock, then cached.
    let st = state.clone();
    let tokenizer = sel.tokenizer;
    let seen = tokio::task::spawn_blocking(move || {
        let counted: Vec<(u64, u64)> = seen
            .texts
            .iter()
            .map(|(i, t)| (seen.items[*i].1, tokenizer.count(t)))
            .collect();
        let mut counts = st
            .compactor
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if counts.0 != seen.rebuilds {
            *counts = (seen.rebuilds, HashMap::new());
        }
        counts.1.extend(counted);
        let live: std::collections::HashSet<u64> = seen.items.iter().map(|i| i.1).collect();
        counts.1.retain(|o, _| live.contains(o));
        let tokens: Vec<u64> = seen
            .items
            .iter()
            .map(|(_, o)| counts.1.get(o).copied().unwrap_or(0))
            .collect();
        (seen, tokens)
    })
    .await
    .map_err(|e| format!("counting tokens failed: {e}"))?;
    let (seen, tokens) = seen;
    let Some(k) = fold::plan(&tokens, at, cfg.keep(), at) else {
        return Ok(Planned::Nothing);
    };
    let items: Vec<(u64, u64)> = seen.items[..k].to_vec();
    let rebuilds = seen.rebuilds;
    let s = sel.clone();
    let texts = with_live(state, move |_, live| {
        Ok(live.fold_texts(&s, &items, rebuilds))
    })
    .await
    .map_err(|e| e.message)?;
    let Some((previous, texts)) = texts else {
        return Ok(Planned::Changed);
    };
    let (key, offset) = seen.items[k - 1];
    let cover = Cover {
        ts_ms: key_ts(key),
        offset,
        records: k,
        tokens: tokens[..k].iter().sum(),
    };
    let guard = Guard {
        since: seen.read_end,
        below: key,
    };
    Ok(Planned::Fold(
        cover,
        guard,
        fold::input(previous.as_deref(), &texts),
    ))
}

/// The request asking `model` for a summary of `input`.
pub(crate) fn summary_body(
    provider: Provider,
    model: &str,
    max_tokens: u32,
    instructions: &str,
    input: &str,
) -> String {
    match provider {
        Provider::Anthropic => json!({
            "model": model,
            "max_tokens": max_tokens,
            "system": instructions,
            "messages": [{"role": "user", "content": input}],
        }),
        Provider::OpenAi => json!({
            "model": model,
            "max_completion_tokens": max_tokens,
            "messages": [
                {"role": "system", "content": instructions},
                {"role": "user", "content": input},
            ],
        }),
    }
    .to_string()
}

/// Sends a summary request (with the calls' retries), within `timeout`.
pub(crate) async fn ask(
    upstream: &Upstream,
    body: String,
    timeout: Duration,
) -> Result<Answer, String> {
    let deadline = tokio::time::Instant::now() + timeout;
    let resp = upstream
        .call(&[Bytes::from(body)], deadline)
        .await
        .map_err(|e| upstream.call_error(e).message)?;
    upstream
        .read_whole(resp, deadline)
        .await
        .map_err(|e| e.message)
}
