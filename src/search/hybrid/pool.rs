//! The process's background catch-ups: at most [`MAX_CATCH_UPS`] threads
//! embed at once, however many hybrid indexes there are; the others' logs
//! wait in the order they were started, and a thread that ends one takes
//! the next.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use super::Shared;

/// Background catch-ups embedding at once in this process, whatever the
/// number of hybrid indexes (a server of thousands of logs): each runs on a
/// thread of its own with up to [`HybridOptions::concurrency`] requests to
/// the model. The others wait their turn, in the order they were started.
pub(super) const MAX_CATCH_UPS: usize = 4;

/// The process's background catch-ups: how many threads run, and the
/// indexes waiting for one (gone when their index was dropped).
pub(super) struct Pool {
    pub(super) running: usize,
    pub(super) queue: VecDeque<Weak<Shared>>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    running: 0,
    queue: VecDeque::new(),
});

pub(super) fn catch_ups() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A pool thread: `first`'s catch-up, then each waiting index's in turn,
/// until none waits.
pub(super) fn embed_in_turn(first: Arc<Shared>) {
    let mut next = Some(first);
    while let Some(shared) = next {
        // Stopped; or the catch-up panicked (the model's own panics are
        // caught as failures where it is called: this is a bug of ours):
        // the index is free again and the thread goes on.
        if shared.stop.load(Ordering::Relaxed) {
            shared.end(None);
        } else if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = shared.catch_up(&mut |_, _| {});
        }))
        .is_err()
        {
            shared.end(Some("the embedding catch-up panicked".into()));
        }
        drop(shared);
        next = loop {
            let mut pool = catch_ups();
            let Some(w) = pool.queue.pop_front() else {
                pool.running -= 1;
                break None;
            };
            drop(pool);
            if let Some(s) = w.upgrade()
                && s.begin_queued()
            {
                break Some(s);
            }
        };
    }
}

impl Shared {
    /// Waits for a running catch-up to end, then marks one running. One
    /// still waiting for a thread is taken over instead (its thread, when
    /// it comes, finds nothing to do).
    pub(super) fn claim(&self) {
        let mut jobs = self.jobs();
        while jobs.running && !jobs.queued {
            jobs = self.finished.wait(jobs).unwrap_or_else(|p| p.into_inner());
        }
        jobs.running = true;
        jobs.queued = false;
    }

    /// Takes the catch-up that waited for a thread, unless a caller's
    /// [`claim`](Self::claim) took it over.
    fn begin_queued(&self) -> bool {
        let mut jobs = self.jobs();
        std::mem::replace(&mut jobs.queued, false)
    }
}
