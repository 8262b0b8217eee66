//! A log's compaction state (`--compact-at`): whether a fold runs, the
//! token counts it keeps, and what the folds did (the task is
//! `compact.rs`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::server::upstream::Usage;

/// A log's compaction: whether a fold runs, and what the folds did.
#[derive(Default)]
pub(crate) struct Compactor {
    pub(super) running: AtomicBool,
    /// A check asked for while one ran.
    pub(super) again: AtomicBool,
    /// Token counts of the records replayed after the newest summary, by
    /// offset, for the live state's rebuild count they were made in.
    pub(super) counts: Mutex<(u64, HashMap<u64, u64>)>,
    pub(crate) stats: Mutex<CompactStats>,
}

/// What the folds of a log did since the server started.
#[derive(Debug, Default, Clone)]
pub(crate) struct CompactStats {
    /// Summaries appended.
    pub(crate) summaries: u64,
    /// Folds that failed (each is tried again).
    pub(crate) failures: u64,
    /// Failures in a row (the backoff's exponent).
    pub(crate) failing: u32,
    /// Records and tokens folded.
    pub(crate) folded_records: u64,
    pub(crate) folded_tokens: u64,
    /// The last failure's message.
    pub(crate) last_error: Option<String>,
    /// The summary calls' tokens.
    pub(crate) usage: Usage,
}

impl Compactor {
    /// `/v1/stats`'s `compaction` object.
    pub(crate) fn json(&self, cfg: &crate::server::config::Compaction) -> Value {
        let s = self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone();
        json!({
            "at": cfg.at,
            "to": cfg.to,
            "running": self.running.load(Ordering::Relaxed),
            "summaries": s.summaries,
            "failures": s.failures,
            "folded_records": s.folded_records,
            "folded_tokens": s.folded_tokens,
            "last_error": s.last_error,
            "usage": s.usage.to_json(),
        })
    }
}
