//! State kept durably next to a log: session positions for prepare/ack
//! deltas, the starts of cache-stable windows, and turns remembered by
//! their idempotency key.
//!
//! The store is one SQLite file, by default the log's path with
//! `.wmreplay.db` appended, in WAL mode (`synchronous=NORMAL`: a crash of
//! the process loses nothing committed; a power cut may lose the last few
//! acks, which only means a delta is sent again).
//!
//! **Prepare/ack.** [`prepare`] answers a session key with
//! - `full`: the key has no acknowledged position, or the log's identity
//!   changed (another device or inode, shorter than the position, or the
//!   bytes before the position differ, by the prefix fingerprint of
//!   `input::fingerprint_bytes`: the whole prefix up to 64 KiB, its ends
//!   and 15 sampled blocks beyond): the whole log, replayed;
//! - `delta`: only the records whose lines were appended since the key's
//!   acknowledged position, ordered among themselves;
//! - `none`: nothing new, an empty body.
//!
//! Positions are byte offsets just past a `\n`: a line still being written
//! is never included, so it is sent whole once complete. Each prepare gets a
//! `prepare_id`; [`Store::ack`] with success moves the key's position to the end of
//! that prepare (never backwards), a failed ack leaves it, so the next
//! prepare returns the same delta again (plus anything newer).

// The journal of record batches is the server writer's.
#[cfg(feature = "server")]
mod batches;
mod sessions;
mod sync;
mod turns;

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Error;
use crate::select::WindowStart;
#[cfg(feature = "server")]
pub(crate) use batches::{BatchLine, InputRow, PendingBatch};
pub use sessions::{Acked, Mode, PrepareRequest, Prepared, prepare};
pub use sync::SyncTicket;
pub use turns::{TurnBegin, TurnStatus};

/// The durable state of one log.
///
/// ```
/// use std::sync::Mutex;
/// use wmreplay::state::{Mode, PrepareRequest, Store, prepare};
/// use wmreplay::{Format, ReplayOptions, Selection};
///
/// let dir = std::env::temp_dir().join(format!("wmreplay-doc-store-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let log = dir.join("working_memory.log");
/// std::fs::write(&log, "{\"type\":\"wm_event\",\"ts_ms\":1}\n")?;
/// let store = Mutex::new(Store::open(Store::path_for(&log))?);
/// let (selection, options) = (Selection::default(), ReplayOptions::default());
/// let req = PrepareRequest {
///     log: &log,
///     session_key: "tab-1",
///     format: Format::Xml,
///     selection: &selection,
///     options: &options,
/// };
///
/// // The first turn of a key gets the whole log; once acknowledged, the next
/// // gets only what was appended since.
/// let first = prepare(&store, &req)?;
/// assert_eq!(first.mode, Mode::Full);
/// store.lock().unwrap().ack(&first.prepare_id, true)?;
/// assert_eq!(prepare(&store, &req)?.mode, Mode::None);
/// std::fs::write(&log, "{\"type\":\"wm_event\",\"ts_ms\":1}\n{\"type\":\"wm_event\",\"ts_ms\":2}\n")?;
/// let next = prepare(&store, &req)?;
/// assert_eq!((next.mode, next.records), (Mode::Delta, 1));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Store {
    path: PathBuf,
    conn: Connection,
    syncer: std::sync::Arc<sync::Syncer>,
    /// When expired turns were last forgotten.
    expired_at: Option<std::time::Instant>,
    /// The connection commits at `synchronous=FULL` (else `NORMAL`).
    full_sync: bool,
}

/// Where a log is and what it is, at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogId {
    dev: u64,
    inode: u64,
}

impl Store {
    /// The default store of a log: its path with `.wmreplay.db` appended.
    pub fn path_for(log: &Path) -> PathBuf {
        let mut p = log.as_os_str().to_os_string();
        p.push(".wmreplay.db");
        PathBuf::from(p)
    }

    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: impl Into<PathBuf>) -> Result<Store, Error> {
        Store::open_with(path.into(), rusqlite::OpenFlags::default())
    }

    /// Opens the store at `path` if there is one, creating nothing: `None`
    /// when no file is there. For readers that have nothing to do with an
    /// empty store, such as an ack (a store never made holds no prepare),
    /// so that a mistyped log path leaves no `.wmreplay.db` behind.
    ///
    /// ```
    /// use wmreplay::state::Store;
    ///
    /// let dir = std::env::temp_dir().join(format!("wmreplay-doc-existing-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = Store::path_for(&dir.join("no-such.log"));
    /// assert!(Store::open_existing(&path)?.is_none());
    /// assert!(!path.exists());
    /// Store::open(&path)?;
    /// assert!(Store::open_existing(&path)?.is_some());
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_existing(path: impl Into<PathBuf>) -> Result<Option<Store>, Error> {
        let path = path.into();
        // A link to nowhere is no store either.
        if !path.try_exists().unwrap_or(true) {
            return Ok(None);
        }
        let mut flags = rusqlite::OpenFlags::default();
        flags.remove(rusqlite::OpenFlags::SQLITE_OPEN_CREATE);
        Store::open_with(path, flags).map(Some)
    }

    /// Opens the store at `path` like [`open`](Self::open); with
    /// `refuse_links`, a `path` that is a symbolic link is refused (its
    /// journal and shared-memory files are never followed either): for
    /// stores in a directory that others can write to.
    pub fn open_refusing_links(
        path: impl Into<PathBuf>,
        refuse_links: bool,
    ) -> Result<Store, Error> {
        let mut flags = rusqlite::OpenFlags::default();
        if refuse_links {
            flags |= rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW;
        }
        Store::open_with(path.into(), flags)
    }

    fn open_with(path: PathBuf, flags: rusqlite::OpenFlags) -> Result<Store, Error> {
        let conn = Connection::open_with_flags(&path, flags).map_err(|e| state_err(&path, e))?;
        let refuse_links = flags.contains(rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW);
        let syncer = std::sync::Arc::new(sync::Syncer::new(&path, refuse_links));
        let store = Store {
            path,
            conn,
            syncer,
            expired_at: None,
            full_sync: false,
        };
        store
            .conn
            .execute_batch(
                "PRAGMA journal_mode=WAL;
                 PRAGMA synchronous=NORMAL;
                 PRAGMA busy_timeout=10000;
                 CREATE TABLE IF NOT EXISTS sessions(
                     session_key TEXT PRIMARY KEY,
                     dev INTEGER NOT NULL, inode INTEGER NOT NULL,
                     position INTEGER NOT NULL, fingerprint INTEGER NOT NULL,
                     seq INTEGER NOT NULL, updated_ms INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS prepares(
                     prepare_id TEXT PRIMARY KEY,
                     session_key TEXT NOT NULL, mode TEXT NOT NULL,
                     dev INTEGER NOT NULL, inode INTEGER NOT NULL,
                     from_pos INTEGER NOT NULL, to_pos INTEGER NOT NULL,
                     fingerprint INTEGER NOT NULL,
                     status TEXT NOT NULL, created_ms INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS windows(
                     spec TEXT PRIMARY KEY,
                     dev INTEGER NOT NULL, inode INTEGER NOT NULL,
                     key INTEGER NOT NULL, offset INTEGER NOT NULL,
                     updated_ms INTEGER NOT NULL);",
            )
            .map_err(|e| state_err(&store.path, e))?;
        store
            .conn
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS turns(
                     idempotency_key TEXT PRIMARY KEY,
                     request_hash TEXT NOT NULL,
                     dev INTEGER NOT NULL, inode INTEGER NOT NULL,
                     status TEXT NOT NULL,
                     input_offset INTEGER,
                     response TEXT,
                     created_ms INTEGER NOT NULL);
                 CREATE INDEX IF NOT EXISTS turns_by_input ON turns(input_offset);
                 CREATE INDEX IF NOT EXISTS turns_by_age ON turns(created_ms);
                 CREATE TABLE IF NOT EXISTS batches(
                     id INTEGER PRIMARY KEY,
                     dev INTEGER NOT NULL, inode INTEGER NOT NULL,
                     start INTEGER NOT NULL, lines BLOB NOT NULL);
                 CREATE TABLE IF NOT EXISTS batch_keys(
                     batch INTEGER NOT NULL, idempotency_key TEXT NOT NULL,
                     response TEXT NOT NULL);",
            )
            .map_err(|e| state_err(&store.path, e))?;
        // Stores made before turns had an owner get the column.
        let has_owner = store
            .conn
            .prepare("SELECT owner FROM turns LIMIT 0")
            .is_ok();
        if !has_owner {
            store
                .conn
                .execute_batch("ALTER TABLE turns ADD COLUMN owner TEXT")
                .map_err(|e| state_err(&store.path, e))?;
        }
        Ok(store)
    }

    /// Commits at `synchronous=FULL` (each on disk as it is made) with
    /// `full`, else `NORMAL`; a no-op when already so.
    #[cfg(feature = "server")]
    fn full_sync(&mut self, full: bool) -> Result<(), Error> {
        if self.full_sync != full {
            self.conn
                .pragma_update(None, "synchronous", if full { "FULL" } else { "NORMAL" })
                .map_err(|e| state_err(&self.path, e))?;
            self.full_sync = full;
        }
        Ok(())
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        state_err(&self.path, e)
    }

    /// The window start remembered for `spec` (see
    /// [`Selection::window_key`](crate::Selection::window_key)) on the log at `log`, if the log is still the
    /// same file.
    pub fn window_start(&self, log: &Path, spec: &str) -> Result<Option<WindowStart>, Error> {
        let Some(id) = log_id(log)? else {
            return Ok(None);
        };
        let row: Option<(i64, i64, i64, i64)> = self
            .conn
            .query_row(
                "SELECT dev, inode, key, offset FROM windows WHERE spec = ?1",
                params![spec],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(row.and_then(|(dev, inode, key, offset)| {
            (dev as u64 == id.dev && inode as u64 == id.inode).then_some(WindowStart {
                key: key as u64,
                offset: offset as u64,
            })
        }))
    }

    /// Remembers (or, with `None`, forgets) the window start for `spec`.
    pub fn set_window_start(
        &self,
        log: &Path,
        spec: &str,
        start: Option<WindowStart>,
    ) -> Result<(), Error> {
        let id = log_id(log)?;
        match (start, id) {
            (Some(s), Some(id)) => self
                .conn
                .execute(
                    "INSERT INTO windows(spec, dev, inode, key, offset, updated_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT(spec) DO UPDATE SET dev = ?2, inode = ?3, key = ?4,
                         offset = ?5, updated_ms = ?6",
                    params![
                        spec,
                        id.dev as i64,
                        id.inode as i64,
                        s.key as i64,
                        s.offset as i64,
                        now_ms()
                    ],
                )
                .map(|_| ()),
            _ => self
                .conn
                .execute("DELETE FROM windows WHERE spec = ?1", params![spec])
                .map(|_| ()),
        }
        .map_err(|e| self.err(e))
    }
}

fn state_err(path: &Path, e: rusqlite::Error) -> Error {
    Error::State {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// This process, as the owner of the turns it starts: its id and start
/// time, so that a key left running by a process that stopped is told from
/// one running here.
fn instance() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{}-{nanos}", std::process::id())
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl From<crate::input::FileIdentity> for LogId {
    fn from(i: crate::input::FileIdentity) -> Self {
        LogId {
            dev: i.dev,
            inode: i.inode,
        }
    }
}

fn log_id(log: &Path) -> Result<Option<LogId>, Error> {
    match std::fs::metadata(log) {
        Ok(m) => Ok(Some(crate::input::identity_of(&m).into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(log, "cannot stat", e)),
    }
}
