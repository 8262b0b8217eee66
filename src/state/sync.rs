//! Group commit of the store: the writes whose durability a caller waits
//! for are made durable by one sync of the write-ahead log for all those
//! committed by then, not one each.
//!
//! The store commits at `synchronous=NORMAL` (a commit is written to the
//! WAL, not synced). A caller that needs its commit on disk takes a
//! [`SyncTicket`] after committing and waits on it outside the store's
//! lock: the first waiter syncs the WAL file, and every commit made before
//! that sync began is durable when it ends; waiters that came during it
//! are served by the next. Under eight clients that is a few syncs a
//! round instead of eight in a row.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::error::Error;

#[derive(Debug, Default)]
struct Synced {
    /// Every commit numbered up to this is on disk.
    upto: u64,
    /// A sync is running.
    running: bool,
}

/// The store's WAL syncs, shared by its tickets.
#[derive(Debug)]
pub(crate) struct Syncer {
    wal: PathBuf,
    /// The store refuses symbolic links (under `--log-dir`): so does its
    /// WAL's sync.
    refuse_links: bool,
    /// Commits numbered so far.
    committed: AtomicU64,
    synced: Mutex<Synced>,
    done: Condvar,
}

impl Syncer {
    /// The syncer of the store at `db`.
    pub(crate) fn new(db: &std::path::Path, refuse_links: bool) -> Syncer {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        Syncer {
            wal: wal.into(),
            refuse_links,
            committed: AtomicU64::new(0),
            synced: Mutex::default(),
            done: Condvar::new(),
        }
    }

    /// A ticket for a commit just made.
    pub(crate) fn ticket(self: &Arc<Self>) -> SyncTicket {
        SyncTicket {
            syncer: self.clone(),
            number: self.committed.fetch_add(1, Ordering::AcqRel) + 1,
        }
    }

    fn sync_wal(&self) -> Result<(), Error> {
        // Opened for writing: Windows flushes only a handle that may write.
        // Not through a link when the store refuses them, and at once
        // whatever is there (a FIFO put in its place fails the sync).
        let opened = crate::os::open(
            std::fs::OpenOptions::new().write(true),
            &self.wal,
            self.refuse_links,
            true,
        );
        match opened {
            Ok(f) => f
                .sync_data()
                .map_err(|e| Error::io(&self.wal, "cannot sync", e)),
            // No WAL: the store is in a rollback journal (a file system
            // without shared memory), whose commits are synced as made.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&self.wal, "cannot open", e)),
        }
    }
}

/// A commit to be made durable: [`SyncTicket::wait`].
#[must_use = "a ticket is durable once waited on"]
pub struct SyncTicket {
    syncer: Arc<Syncer>,
    number: u64,
}

impl SyncTicket {
    /// [`wait`](Self::wait) when `durable` (the caller syncs, `--fsync`),
    /// else returns at once: the commit is on disk at the next sync.
    #[cfg(feature = "server")]
    pub(crate) fn wait_if(self, durable: bool) -> Result<(), Error> {
        match durable {
            true => self.wait(),
            false => Ok(()),
        }
    }

    /// Returns once the commit is on disk (with every one before it).
    pub fn wait(self) -> Result<(), Error> {
        let s = &self.syncer;
        let mut g = s.synced.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if g.upto >= self.number {
                return Ok(());
            }
            if g.running {
                g = s.done.wait(g).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            g.running = true;
            // Every commit numbered by now is in the WAL already.
            let target = s.committed.load(Ordering::Acquire);
            drop(g);
            let r = s.sync_wal();
            g = s.synced.lock().unwrap_or_else(|p| p.into_inner());
            g.running = false;
            if r.is_ok() {
                g.upto = g.upto.max(target);
            }
            s.done.notify_all();
            r?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sync_serves_the_commits_made_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        std::fs::write(dir.path().join("s.db-wal"), b"").unwrap();
        let s = Arc::new(Syncer::new(&db, false));
        let (a, b) = (s.ticket(), s.ticket());
        a.wait().unwrap();
        // b was committed before a's sync began: already durable.
        assert!(s.synced.lock().unwrap().upto >= b.number);
        b.wait().unwrap();
        let c = s.ticket();
        assert_eq!(c.number, 3);
        c.wait().unwrap();
        // Without a WAL (a rollback journal): nothing to sync.
        let none = Arc::new(Syncer::new(&dir.path().join("other.db"), false));
        none.ticket().wait().unwrap();
    }

    /// A store that refuses links (under `--log-dir`) does not sync through
    /// a WAL that is one, nor wait on a FIFO put in its place.
    #[cfg(unix)]
    #[test]
    fn a_wal_swapped_for_a_link_or_a_fifo_fails_the_sync_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"").unwrap();
        let db = dir.path().join("s.db");
        std::os::unix::fs::symlink(&outside, dir.path().join("s.db-wal")).unwrap();
        assert!(Arc::new(Syncer::new(&db, true)).ticket().wait().is_err());
        Arc::new(Syncer::new(&db, false)).ticket().wait().unwrap();
        let fifo_db = dir.path().join("f.db");
        let fifo = std::ffi::CString::new(format!("{}-wal", fifo_db.display())).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path only.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(
            Arc::new(Syncer::new(&fifo_db, true))
                .ticket()
                .wait()
                .is_err()
        );
    }
}
