//! A log's writer as the server holds it: [`Writer`], a handle that sends
//! appends to the thread of the pool that owns the log (`pool.rs`), and
//! [`WriterThread`], which says when the log is closed. The appending
//! itself is `local.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use super::file::{identity, open_read};
use super::local::{Appender, Job, Spec};
use super::pool::{CloseOnDrop, Closer, Msg, pool};
use super::{
    Appended, BatchKey, Durable, Guard, GuardBroken, InputKey, Line, LogIdentity, LogWriter,
};

/// A handle to a log's writer; cloning it shares the one writer. The log
/// is closed (after its queued appends) when the last handle is dropped.
#[derive(Clone)]
pub struct Writer {
    tx: std::sync::mpsc::Sender<Msg>,
    id: u64,
    path: PathBuf,
    /// Whether the log may be a symbolic link (see [`Writer::start`]).
    follow: bool,
    _closer: Closer,
}

/// Says when a log's writer has finished, joined at shutdown so in-flight
/// appends finish.
pub struct WriterThread {
    done: std::sync::mpsc::Receiver<()>,
}

impl WriterThread {
    /// Waits until every queued append is done and the log is closed (once
    /// all [`Writer`] handles are dropped).
    pub fn join(self) {
        let _ = self.done.recv();
    }

    /// Whether the log's writer has finished (every handle dropped, queue
    /// done).
    pub fn is_finished(&self) -> bool {
        !matches!(
            self.done.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Empty)
        )
    }
}

fn stopped() -> std::io::Error {
    std::io::Error::other("the log writer has stopped")
}

impl Writer {
    /// Starts the writer for `path` (created if missing, with its directory
    /// entry synced). `fsync`: sync each append to disk before
    /// acknowledging it as durable. `journal`: the state store that keeps
    /// the batches begun (see the module docs); a batch a crash left in it
    /// is settled here, before this returns. `follow`: whether the log and
    /// the journal may be symbolic links (false: refused, with `ELOOP`, now
    /// and at every reopen).
    pub fn start(
        path: &Path,
        fsync: bool,
        journal: &Path,
        follow: bool,
    ) -> std::io::Result<(Writer, WriterThread)> {
        let spec = Spec {
            path: path.to_path_buf(),
            fsync,
            journal: journal.to_path_buf(),
            follow,
        };
        let appender = Appender::open(&spec)?;
        let (id, tx) = pool().place();
        let (done_tx, done) = std::sync::mpsc::channel();
        tx.send(Msg::Adopt {
            id,
            spec,
            appender: Box::new(appender),
        })
        .map_err(|_| stopped())?;
        let closer = Arc::new(CloseOnDrop {
            id,
            queue: tx.clone(),
            done: std::sync::Mutex::new(Some(done_tx)),
        });
        Ok((
            Writer {
                tx,
                id,
                path: path.to_path_buf(),
                follow,
                _closer: closer,
            },
            WriterThread { done },
        ))
    }

    fn send(&self, job: Job) -> std::io::Result<()> {
        self.tx
            .send(Msg::Job { id: self.id, job })
            .map_err(|_| stopped())
    }

    /// Appends `lines` as one batch; resolves once they are durable.
    pub async fn append(&self, lines: Vec<Line>) -> std::io::Result<Vec<Appended>> {
        self.append_keyed(lines, None, None).await
    }

    async fn append_keyed(
        &self,
        lines: Vec<Line>,
        key: Option<BatchKey>,
        guard: Option<Guard>,
    ) -> std::io::Result<Vec<Appended>> {
        let (written_tx, written) = oneshot::channel();
        let (durable_tx, durable) = oneshot::channel();
        self.send(Job {
            lines,
            key,
            input: None,
            guard,
            written: written_tx,
            durable: durable_tx,
            sync: true,
        })?;
        let appended = written.await.map_err(|_| stopped())??;
        durable.await.map_err(|_| stopped())??;
        Ok(appended)
    }

    /// Appends `lines` as one batch if the log keeps `guard` when they are
    /// written; `Ok(Err(offset))`, nothing written, when the record at
    /// `offset` breaks it.
    pub async fn append_guarded(
        &self,
        lines: Vec<Line>,
        guard: Guard,
    ) -> std::io::Result<Result<Vec<Appended>, u64>> {
        match self.append_keyed(lines, None, Some(guard)).await {
            Ok(appended) => Ok(Ok(appended)),
            Err(e) => match GuardBroken::of(&e) {
                Some(at) => Ok(Err(at)),
                None => Err(e),
            },
        }
    }

    /// Appends `lines` from a blocking thread; returns as soon as they are
    /// written, with a [`Durable`] to wait on before acknowledging them.
    pub fn append_blocking(&self, lines: Vec<Line>) -> std::io::Result<(Vec<Appended>, Durable)> {
        self.append_blocking_with(lines, true, None)
    }

    /// [`append_blocking`](Self::append_blocking) without an `fsync` of its
    /// own: the lines are on disk once the next synced append to the log is
    /// (it syncs the whole file), or when the log is closed. For a line
    /// whose loss in a power cut loses nothing acknowledged: a turn's
    /// `text_input`, acknowledged only with its answer, which is synced.
    /// After a crash of the process the lines are there whole (the page
    /// cache outlives it); after a power cut, a line cut short is never a
    /// record.
    pub fn append_unsynced(&self, lines: Vec<Line>) -> std::io::Result<Vec<Appended>> {
        self.append_blocking_with(lines, false, None)
            .map(|(a, _)| a)
    }

    fn append_blocking_with(
        &self,
        lines: Vec<Line>,
        sync: bool,
        input: Option<InputKey>,
    ) -> std::io::Result<(Vec<Appended>, Durable)> {
        let (written_tx, written) = oneshot::channel();
        let (durable_tx, durable) = oneshot::channel();
        self.send(Job {
            lines,
            key: None,
            input,
            guard: None,
            written: written_tx,
            durable: durable_tx,
            sync,
        })?;
        let appended = written.blocking_recv().map_err(|_| stopped())??;
        Ok((appended, durable))
    }
}

impl LogWriter for Writer {
    fn append_batch(
        &self,
        lines: Vec<Line>,
        key: Option<BatchKey>,
    ) -> BoxFuture<'_, std::io::Result<Vec<Appended>>> {
        Box::pin(self.append_keyed(lines, key, None))
    }

    fn append_guarded(
        &self,
        lines: Vec<Line>,
        guard: Guard,
    ) -> BoxFuture<'_, std::io::Result<Result<Vec<Appended>, u64>>> {
        Box::pin(Writer::append_guarded(self, lines, guard))
    }

    fn append_blocking(&self, lines: Vec<Line>) -> std::io::Result<(Vec<Appended>, Durable)> {
        Writer::append_blocking(self, lines)
    }

    fn append_unsynced(&self, lines: Vec<Line>) -> std::io::Result<Vec<Appended>> {
        Writer::append_unsynced(self, lines)
    }

    fn append_unsynced_recording(
        &self,
        lines: Vec<Line>,
        input: InputKey,
    ) -> std::io::Result<(Vec<Appended>, bool)> {
        let appended = self.append_blocking_with(lines, false, Some(input))?.0;
        Ok((appended, true))
    }

    fn append_blocking_recording(
        &self,
        lines: Vec<Line>,
        input: InputKey,
    ) -> std::io::Result<(Vec<Appended>, Durable, bool)> {
        let (appended, durable) = self.append_blocking_with(lines, true, Some(input))?;
        Ok((appended, durable, true))
    }

    fn read_back(&self, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let file = open_read(&self.path, self.follow)?;
        let mut buf = vec![0u8; usize::try_from(len).map_err(std::io::Error::other)?];
        crate::os::read_exact_at(&file, &mut buf, offset)?;
        Ok(buf)
    }

    fn rest(&self) {
        let _ = self.tx.send(Msg::Rest { id: self.id });
    }

    fn identity(&self) -> std::io::Result<LogIdentity> {
        let meta = match self.follow {
            true => std::fs::metadata(&self.path)?,
            false => std::fs::symlink_metadata(&self.path)?,
        };
        let (dev, inode) = identity(&meta);
        Ok(LogIdentity { dev, inode })
    }
}

/// Waits for a [`Durable`].
pub async fn durable(d: Durable) -> std::io::Result<()> {
    d.await.map_err(|_| stopped())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_appended_reads_back_from_the_log_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        std::fs::write(&path, b"{\"type\":\"a\",\"ts_ms\":1}").unwrap();
        let (w, thread) = Writer::start(&path, false, &dir.path().join("wm.db"), true).unwrap();
        let line = Line::verbatim(b"{\"type\":\"b\",\"ts_ms\":2}".to_vec());
        let (appended, _durable) = w.append_blocking(vec![line]).unwrap();
        let back = LogWriter::read_back(&w, appended[0].offset, appended[0].len).unwrap();
        assert_eq!(back, b"{\"type\":\"b\",\"ts_ms\":2}\n");
        let (dev, inode) = identity(&std::fs::metadata(&path).unwrap());
        assert_eq!(w.identity().unwrap(), LogIdentity { dev, inode });
        drop(w);
        thread.join();
    }

    #[test]
    fn a_guarded_append_writes_nothing_after_a_record_that_sorts_before_its_cover() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        let first = b"{\"type\":\"a\",\"ts_ms\":10}\n{\"type\":\"a\",\"ts_ms\":20}\n";
        std::fs::write(&path, first).unwrap();
        let (w, thread) = Writer::start(&path, false, &dir.path().join("wm.db"), true).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let since = first.len() as u64;
        // A cover at ts_ms 20: a record of ts_ms 15 written since breaks it.
        let guard = Guard {
            since,
            below: crate::order::ts_key(20.0),
        };
        let summary = || vec![Line::stamped_object(b"{\"type\":\"wm_summary\"}")];
        let late = Line::verbatim(b"{\"type\":\"a\",\"ts_ms\":25}".to_vec());
        rt.block_on(w.append(vec![late])).unwrap();
        let ok = rt.block_on(w.append_guarded(summary(), guard)).unwrap();
        assert!(
            ok.is_ok(),
            "a record sorting after the cover keeps the guard"
        );
        let late = Line::verbatim(b"{\"type\":\"a\",\"ts_ms\":15}".to_vec());
        let at = rt.block_on(w.append(vec![late])).unwrap()[0].offset;
        let before = std::fs::read(&path).unwrap();
        let broken = rt.block_on(w.append_guarded(summary(), guard)).unwrap();
        assert_eq!(broken, Err(at));
        assert_eq!(std::fs::read(&path).unwrap(), before, "nothing written");
        drop(w);
        thread.join();
    }
}
