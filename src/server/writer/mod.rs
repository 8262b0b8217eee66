//! Where a log's lines are written. The routes and the turn append through
//! [`LogWriter`], a batch at a time, and never know which writer is behind
//! it: the local single writer ([`Writer`], one thread owning the file),
//! or, with the `jetstream` feature, the JetStream publisher
//! (`jetstream.rs`), whose local file is a cache of the log's stream.
//!
//! The promise every implementation keeps: a batch is appended whole or not
//! at all (after any crash), batches never interleave, and an append is
//! acknowledged only once it is durable.

mod file;
mod handle;
#[cfg(feature = "jetstream")]
pub(crate) mod jetstream;
mod journal;
mod line;
mod local;
mod pool;

use std::io;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

pub use crate::select::fold::Guard;
pub use handle::{Writer, WriterThread, durable};
pub use line::Line;
pub(crate) use line::{fit_json, json_len};

tokio::task_local! {
    /// When the request being served arrived (set by the router for each
    /// request, and carried into the task of a turn): a replicated store's
    /// waits for that request share one deadline from it.
    pub(crate) static ARRIVED: tokio::time::Instant;
}

/// When the request being served arrived; now, outside of one.
pub(crate) fn arrived() -> tokio::time::Instant {
    ARRIVED
        .try_with(|a| *a)
        .unwrap_or_else(|_| tokio::time::Instant::now())
}

/// Why a guarded append wrote nothing: the record at this offset breaks
/// its [`Guard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the record at offset {0} sorts before the summary's cover")]
pub(crate) struct GuardBroken(pub(crate) u64);

impl GuardBroken {
    /// The offset, if `e` is a [`GuardBroken`].
    pub(crate) fn of(e: &io::Error) -> Option<u64> {
        e.get_ref()
            .and_then(|i| i.downcast_ref::<GuardBroken>())
            .map(|g| g.0)
    }
}

/// Where one appended line went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The `ts_ms` written (the writer's clock), if the line was stamped.
    pub ts_ms: Option<u64>,
    /// Byte offset of the line in the file.
    pub offset: u64,
    /// Bytes of the line, its `\n` included.
    pub len: u64,
}

/// Resolves once the job's lines are on disk (`fsync`ed, when asked).
pub type Durable = oneshot::Receiver<std::io::Result<()>>;

/// A [`Durable`] for lines durable already (acknowledged by a replicated
/// store before the append returned).
pub(crate) fn durable_already() -> Durable {
    let (tx, rx) = oneshot::channel();
    let _ = tx.send(Ok(()));
    rx
}

/// Which log a writer writes: the file's device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogIdentity {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub inode: u64,
}

/// Makes a key's answer from where its batch's lines went.
pub type AnswerFn = Box<dyn Fn(&[Appended]) -> String + Send + Sync>;

/// An idempotency key a batch answers, with the answer made from where its
/// lines went: recorded with the batch, so that after a crash a batch found
/// whole in the log still answers its key (and a retry writes nothing).
pub struct BatchKey {
    /// The key, as the state store knows it.
    pub key: String,
    /// The answer, given where the batch's lines went.
    pub answer: AnswerFn,
    /// What the request carried (its body's hash): a writer whose log lives
    /// elsewhere keeps it with the batch, so the same key with another body,
    /// through any replica, is refused (a key-reused error).
    pub body: String,
    /// A turn's answer (its key the server's own, or a client's whose row
    /// was made durable before the model was called): the turn is marked
    /// answered in the batch's own journal step, and the entry is neither
    /// synced before the batch's bytes nor ended in a step of its own. It
    /// survives a crash of the process (the store's writes are in the page
    /// cache), and a power cut once the store has synced since (a client's
    /// key, a checkpoint). Otherwise (`false`: a batch of records under a
    /// client's key) the entry is on disk before the batch's bytes can be.
    pub made: bool,
}

/// A turn's key whose row the writer records with the batch holding the
/// turn's `text_input` (in the journal's own step: one commit fewer).
#[derive(Debug, Clone)]
pub struct InputKey {
    /// The key, as the state store knows it.
    pub key: String,
    /// The hash of its request.
    pub hash: String,
    /// Which of the batch's lines is the `text_input`.
    pub line: usize,
}

/// A key already used, by another replica, for a batch of another body:
/// nothing was written (a 422 `idempotency_key_reused`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this idempotency key was used with another body")]
pub(crate) struct KeyReused;

impl KeyReused {
    /// Whether `e` is a [`KeyReused`].
    pub(crate) fn of(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|i| i.is::<KeyReused>())
    }
}

impl std::fmt::Debug for BatchKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchKey").field("key", &self.key).finish()
    }
}

/// Appends batches of lines to one log.
pub trait LogWriter: Send + Sync {
    /// Appends `lines` as one batch, whole or not at all; resolves once they
    /// are durable, with where each line went. With `key`, the key is
    /// answered in the state store in the same step that makes the batch
    /// durable.
    fn append_batch(
        &self,
        lines: Vec<Line>,
        key: Option<BatchKey>,
    ) -> BoxFuture<'_, io::Result<Vec<Appended>>>;

    /// Appends `lines` as one batch only if the log keeps `guard` at the
    /// moment they are written (no record written since `guard.since`
    /// sorts before `guard.below`: a summary's cover stays exact);
    /// `Ok(Err(offset))`, and nothing written, when the record at `offset`
    /// breaks it.
    fn append_guarded(
        &self,
        lines: Vec<Line>,
        guard: Guard,
    ) -> BoxFuture<'_, io::Result<Result<Vec<Appended>, u64>>>;

    /// [`append_batch`](Self::append_batch) with a key, saying whether the
    /// batch was there already (written by an earlier attempt, through any
    /// replica, and found under its key: nothing written now). The local
    /// writer's keys are answered by the state store before it is called,
    /// so it never finds one.
    fn append_keyed(
        &self,
        lines: Vec<Line>,
        key: BatchKey,
    ) -> BoxFuture<'_, io::Result<(Vec<Appended>, bool)>> {
        Box::pin(async move { Ok((self.append_batch(lines, Some(key)).await?, false)) })
    }

    /// [`append_batch`](Self::append_batch) without a key.
    fn append(&self, lines: Vec<Line>) -> BoxFuture<'_, io::Result<Vec<Appended>>> {
        self.append_batch(lines, None)
    }

    /// Appends `lines` from a blocking thread; returns as soon as they are
    /// written, with a [`Durable`] to wait on before acknowledging them.
    fn append_blocking(&self, lines: Vec<Line>) -> io::Result<(Vec<Appended>, Durable)>;

    /// [`append_unsynced`](Self::append_unsynced), the row of `input`'s
    /// key (running, its input at the line's offset) recorded in the state
    /// store with the batch; `false` when this writer records no rows (the
    /// caller records it).
    fn append_unsynced_recording(
        &self,
        lines: Vec<Line>,
        input: InputKey,
    ) -> io::Result<(Vec<Appended>, bool)> {
        let _ = input;
        Ok((self.append_unsynced(lines)?, false))
    }

    /// [`append_blocking`](Self::append_blocking), the row of `input`'s
    /// key (running, its input at the line's offset) recorded in the state
    /// store in the batch's journal step, so that no crash leaves the input
    /// in the log and its key without it; `false` when this writer records
    /// no rows (the caller records it).
    fn append_blocking_recording(
        &self,
        lines: Vec<Line>,
        input: InputKey,
    ) -> io::Result<(Vec<Appended>, Durable, bool)> {
        let _ = input;
        let (appended, durable) = self.append_blocking(lines)?;
        Ok((appended, durable, false))
    }

    /// Appends `lines` from a blocking thread without waiting for them to
    /// be durable: they are once the next append that waits is (or when
    /// the log is closed). For a line whose loss in a power cut loses
    /// nothing acknowledged (a turn's `text_input`: the turn is acknowledged
    /// with its answer). By default, [`append_blocking`](Self::append_blocking)
    /// waited for.
    fn append_unsynced(&self, lines: Vec<Line>) -> io::Result<Vec<Appended>> {
        let (appended, durable) = self.append_blocking(lines)?;
        durable
            .blocking_recv()
            .map_err(|_| io::Error::other("the writer stopped"))??;
        Ok(appended)
    }

    /// The `len` bytes at `offset` of the log, as written.
    fn read_back(&self, offset: u64, len: u64) -> io::Result<Vec<u8>>;

    /// The log being written.
    fn identity(&self) -> io::Result<LogIdentity>;

    /// Closes the files the writer holds once its queued appends are
    /// written (the next append opens them again): a log left idle gives
    /// its descriptors back. Nothing for a writer that holds none.
    fn rest(&self) {}

    /// Brings the local file up to date with the log's home, when the log
    /// lives elsewhere (a replicated store); the local writer's file is the
    /// log itself, always current.
    fn catch_up(&self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// When the local file last matched the log's home (ms since the
    /// epoch); `None` for a writer whose file is the log.
    fn synced_at(&self) -> Option<u64> {
        None
    }

    /// Appends `lines` as one batch named `id`: where the log's home keeps
    /// names (JetStream's message ids), a batch of that name already
    /// written is not written again, and its place is answered with
    /// `existed`. Replicas use it to close a turn once whichever replica
    /// ran it. The local writer keeps no names.
    /// `body`: what the request carried (its hash), compared with the
    /// batch found under the name, if any (a key-reused error when it differs).
    ///
    /// `meta` travels with the batch and comes back with it to whoever finds
    /// it ([`Named::meta`]): what a turn's close says besides its record
    /// (the answer's usage, its stop reason), so any replica can give the
    /// first answer whole.
    fn append_named(
        &self,
        lines: Vec<Line>,
        id: String,
        body: Option<String>,
        meta: Option<String>,
    ) -> BoxFuture<'_, io::Result<Named>> {
        let _ = (id, body, meta);
        Box::pin(async move {
            Ok(Named {
                appended: self.append(lines).await?,
                existed: false,
                meta: None,
            })
        })
    }

    /// The batch named `id` (where it went, and its `meta`), if the log's
    /// home keeps names and remembers it.
    fn find_named(&self, id: &str) -> BoxFuture<'_, io::Result<Option<Named>>> {
        let _ = id;
        Box::pin(async { Ok(None) })
    }
}

/// A named batch written, or found written before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// Where its lines are.
    pub appended: Vec<Appended>,
    /// Whether it was there already (written by an earlier request).
    pub existed: bool,
    /// What the batch was written with besides its lines (see
    /// [`LogWriter::append_named`]), when it was found written.
    pub meta: Option<String>,
}
