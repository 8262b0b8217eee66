//! The files a log holds open between requests — its state store (three
//! descriptors: the database, its WAL, its shared memory), its search
//! index, its writer's log and journal — counted over every log, so that under `--log-dir` at most
//! `--max-open-logs` logs hold theirs (`logs.rs` closes the least recently
//! used past it). A log whose files are closed keeps its live replay and
//! opens them again at its next request that needs them: an SQLite open,
//! well under a millisecond.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Whether one log holds its files, and the count over every log.
#[derive(Default)]
pub(crate) struct Files {
    count: Arc<AtomicUsize>,
    open: AtomicBool,
}

impl Files {
    /// One log's, counted in `count`.
    pub(crate) fn counted_in(count: Arc<AtomicUsize>) -> Files {
        Files {
            count,
            open: AtomicBool::new(false),
        }
    }

    /// The log has opened a file it keeps.
    pub(crate) fn opened(&self) {
        if !self.open.swap(true, Ordering::AcqRel) {
            self.count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The log has closed every file it kept.
    pub(crate) fn closed(&self) {
        if self.open.swap(false, Ordering::AcqRel) {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        self.closed();
    }
}

/// Files taken from a log to be closed: dropped after the lock on the logs
/// is let go (an SQLite close may checkpoint its WAL).
pub(crate) struct Closed {
    pub(crate) _store: Option<Arc<std::sync::Mutex<crate::state::Store>>>,
    pub(crate) _search: Option<crate::search::SearchIndex>,
}
