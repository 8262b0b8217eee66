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
//! `prepare_id`; [`ack`] with success moves the key's position to the end of
//! that prepare (never backwards), a failed ack leaves it, so the next
//! prepare returns the same delta again (plus anything newer).

use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Error;
use crate::input::{LogBytes, ReadMode};
use crate::order;
use crate::render::Format;
use crate::render::xml::Document;
use crate::replay::{ReplayOptions, parse_range};
use crate::select::{self, Selection, WindowStart};

/// The durable state of one log.
pub struct Store {
    path: PathBuf,
    conn: Connection,
}

/// What a prepare returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The whole log.
    Full,
    /// The records appended since the last acknowledged position.
    Delta,
    /// Nothing new.
    None,
}

impl Mode {
    /// `full`, `delta` or `none`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Delta => "delta",
            Mode::None => "none",
        }
    }
}

/// A prepared turn.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The id to acknowledge.
    pub prepare_id: String,
    /// What the body holds.
    pub mode: Mode,
    /// Byte offset the body's records start at (0 for `full`).
    pub from: u64,
    /// Byte offset they end at: the position an ack with success records.
    pub to: u64,
    /// Records in the body.
    pub records: u64,
    /// The rendered records: an XML document, a JSON array of messages, or
    /// NDJSON, per the format asked for; empty for `none`.
    pub body: Vec<u8>,
}

impl Prepared {
    /// The JSON answer of `POST /v1/turn/prepare` (and `wmreplay prepare`):
    /// `{"prepare_id","mode","from","to","records","body"}`, the body as a
    /// JSON string.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = format!(
            "{{\"prepare_id\":\"{}\",\"mode\":\"{}\",\"from\":{},\"to\":{},\"records\":{},\"body\":\"",
            self.prepare_id,
            self.mode.name(),
            self.from,
            self.to,
            self.records
        )
        .into_bytes();
        let at = out.len();
        out.resize(
            at + self.body.len() + crate::escape::escaped_extra(&self.body),
            0,
        );
        let n = crate::escape::write_escaped(&self.body, &mut out[at..]);
        out.truncate(at + n);
        out.extend_from_slice(b"\"}");
        out
    }
}

/// What an ack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    /// The session key's acknowledged position afterwards.
    pub position: Option<u64>,
    /// Whether this prepare had already been acknowledged the same way.
    pub repeated: bool,
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
        let path = path.into();
        let conn = Connection::open(&path).map_err(|e| state_err(&path, e))?;
        let store = Store { path, conn };
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
            .execute_batch(TURNS_TABLE)
            .map_err(|e| state_err(&store.path, e))?;
        Ok(store)
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        state_err(&self.path, e)
    }

    /// The window start remembered for `spec` (see
    /// [`Selection::window_key`]) on the log at `log`, if the log is still the
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

    /// The acknowledged position of `key`: (identity, position, fingerprint).
    fn session(&self, key: &str) -> Result<Option<(LogId, u64, u64)>, Error> {
        self.conn
            .query_row(
                "SELECT dev, inode, position, fingerprint FROM sessions WHERE session_key = ?1",
                params![key],
                |r| {
                    Ok((
                        LogId {
                            dev: r.get::<_, i64>(0)? as u64,
                            inode: r.get::<_, i64>(1)? as u64,
                        },
                        r.get::<_, i64>(2)? as u64,
                        r.get::<_, i64>(3)? as u64,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    fn record_prepare(&self, key: &str, p: &Prepared, id: LogId, fp: u64) -> Result<(), Error> {
        self.conn
            .execute(
                "INSERT INTO prepares(prepare_id, session_key, mode, dev, inode, from_pos, to_pos,
                     fingerprint, status, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9)",
                params![
                    p.prepare_id,
                    key,
                    p.mode.name(),
                    id.dev as i64,
                    id.inode as i64,
                    p.from as i64,
                    p.to as i64,
                    fp as i64,
                    now_ms()
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Acknowledges a prepare: with `success`, its session key's position
    /// moves to the prepare's end (never backwards on the same log); without,
    /// nothing moves. An id never issued is [`Error::UnknownPrepare`].
    pub fn ack(&mut self, prepare_id: &str, success: bool) -> Result<Acked, Error> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| state_err(&path, e))?;
        type Row = (String, i64, i64, i64, i64, String, i64, String);
        let row: Option<Row> = tx
            .query_row(
                "SELECT session_key, dev, inode, to_pos, fingerprint, status, rowid, mode
                 FROM prepares WHERE prepare_id = ?1",
                params![prepare_id],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| state_err(&path, e))?;
        let Some((key, dev, inode, to, fp, status, seq, mode)) = row else {
            return Err(Error::UnknownPrepare(prepare_id.to_string()));
        };
        let new_status = if success { "success" } else { "failed" };
        let repeated = status == new_status;
        if success {
            let current: Option<(i64, i64, i64, i64)> = tx
                .query_row(
                    "SELECT dev, inode, position, seq FROM sessions WHERE session_key = ?1",
                    params![key],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()
                .map_err(|e| state_err(&path, e))?;
            // On the same file a position only moves forward; on another file
            // (a rotation) only a prepare made after the one that set the
            // position may move it, so a late ack from the old file cannot.
            // A full prepare sent the whole log as it then was: its ack
            // replaces the position and fingerprint (if no later prepare's
            // ack did), even at the same length (a log rewritten in place).
            let advance = match current {
                Some((_, _, _, set_by)) if mode == "full" => seq > set_by,
                Some((d, i, pos, _)) if d == dev && i == inode => (to as u64) > (pos as u64),
                Some((_, _, _, set_by)) => seq > set_by,
                None => true,
            };
            if advance {
                tx.execute(
                    "INSERT INTO sessions(session_key, dev, inode, position, fingerprint, seq,
                         updated_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT(session_key) DO UPDATE SET dev = ?2, inode = ?3, position = ?4,
                         fingerprint = ?5, seq = MAX(seq, ?6), updated_ms = ?7",
                    params![key, dev, inode, to, fp, seq, now_ms()],
                )
                .map_err(|e| state_err(&path, e))?;
            }
        }
        // A success is final: a late failure report does not undo it.
        if status != "success" {
            tx.execute(
                "UPDATE prepares SET status = ?2 WHERE prepare_id = ?1",
                params![prepare_id, new_status],
            )
            .map_err(|e| state_err(&path, e))?;
        }
        let position: Option<i64> = tx
            .query_row(
                "SELECT position FROM sessions WHERE session_key = ?1",
                params![key],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| state_err(&path, e))?;
        tx.commit().map_err(|e| state_err(&path, e))?;
        Ok(Acked {
            position: position.map(|p| p as u64),
            repeated,
        })
    }
}

fn state_err(path: &Path, e: rusqlite::Error) -> Error {
    Error::State {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A fresh, unguessable prepare id (128 bits, hex).
fn new_prepare_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let a = RandomState::new().hash_one((t, n, std::process::id()));
    let b = RandomState::new().hash_one((n, t, a));
    format!("{a:016x}{b:016x}")
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

/// What to prepare.
#[derive(Debug, Clone)]
pub struct PrepareRequest<'a> {
    /// The log.
    pub log: &'a Path,
    /// The session key whose position is used.
    pub session_key: &'a str,
    /// How the body is rendered: `xml` gives `<memory_context>` (full) or
    /// `<memory_delta>` documents; the others the messages alone.
    pub format: Format,
    /// Filters apply to every mode; windows and the pending mark only to
    /// `full` (a delta is everything new that passes the filters).
    pub selection: &'a Selection,
    /// How lines are parsed.
    pub options: &'a ReplayOptions,
}

/// Prepares a turn for a session key (see the module documentation). The
/// store is locked only to read the key's position and to record the
/// prepare, not while the log is replayed.
pub fn prepare(store: &Mutex<Store>, req: &PrepareRequest<'_>) -> Result<Prepared, Error> {
    let lock = || store.lock().unwrap_or_else(|p| p.into_inner());
    let path = req.log;
    let opened = crate::input::open_regular(path)?;
    let (id, len) = match &opened {
        Some((_, m)) => (crate::input::identity_of(m).into(), m.len()),
        None => (LogId { dev: 0, inode: 0 }, 0),
    };
    let file = opened.map(|(f, _)| f);
    let known = lock().session(req.session_key)?;
    let filters = Selection {
        session: req.selection.session.clone(),
        kinds: req.selection.kinds.clone(),
        since: req.selection.since,
        until: req.selection.until,
        tokenizer: req.selection.tokenizer,
        ..Selection::default()
    };
    // A delta reads the fingerprinted bytes before the position and
    // everything after it in one read, so the check, the records and the
    // new fingerprint all come from the same bytes, whatever a writer does
    // meanwhile.
    let delta = match (known, &file) {
        (Some((kid, pos, fp)), Some(f)) if kid == id && pos <= len && pos > 0 => {
            let same = crate::input::fingerprint_file(f, pos)
                .map_err(|e| Error::io(path, "cannot read", e))?
                == Some(fp);
            if same {
                let mut buf = Vec::new();
                crate::live::read_from(f, pos, len - pos, &mut buf)
                    .map_err(|e| Error::io(path, "cannot read", e))?;
                Some((pos, buf))
            } else {
                None
            }
        }
        _ => None,
    };
    let (prepared, fp, id) = match delta {
        Some((from, buf)) => {
            let tail = &buf[..];
            let commit = memchr::memrchr(b'\n', tail).map_or(0, |k| k + 1);
            let parsed = parse_range(tail, 0..commit, 1, req.options, &|_| {});
            let mut records = parsed.records;
            let data: &[u8] = parsed.arena.as_deref().unwrap_or(tail);
            let parallel = records.len() + parsed.late.len() > 4096;
            order::merge_late(&mut records, parsed.late, parallel);
            select::apply(&mut records, data, &filters, None, |o| o, |_| 0);
            let to = from + commit as u64;
            let (mode, body) = if records.is_empty() {
                (Mode::None, Vec::new())
            } else {
                (
                    Mode::Delta,
                    render_body(&records, data, req.format, Document::Delta { from, to }),
                )
            };
            let fp = match &file {
                Some(f) => crate::input::fingerprint_file(f, to)
                    .map_err(|e| Error::io(path, "cannot read", e))?
                    .unwrap_or(0),
                None => 0,
            };
            let prepared = Prepared {
                prepare_id: new_prepare_id(),
                mode,
                from,
                to,
                records: records.len() as u64,
                body,
            };
            (prepared, fp, id)
        }
        None => {
            // The whole log (a position of 0 too: the file's start is where a
            // byte-order mark is dropped, which only a full replay does).
            let log = LogBytes::open(path, ReadMode::Auto)?;
            let all = log.bytes();
            let commit = memchr::memrchr(b'\n', all).map_or(0, |k| k + 1);
            let mut r = crate::replay::replay(&all[..commit], req.options);
            r.select(req.selection, None);
            let body = render_body(r.records(), r.data(), req.format, Document::Context);
            let fp = crate::input::fingerprint_bytes(&all[..commit]);
            log.verify()?;
            let prepared = Prepared {
                prepare_id: new_prepare_id(),
                mode: Mode::Full,
                from: 0,
                to: commit as u64,
                records: r.records().len() as u64,
                body,
            };
            // The identity of the file actually read.
            let id = log.identity().map_or(id, LogId::from);
            (prepared, fp, id)
        }
    };
    lock().record_prepare(req.session_key, &prepared, id, fp)?;
    Ok(prepared)
}

fn render_body(
    records: &[crate::parse::Record],
    log: &[u8],
    format: Format,
    doc: Document,
) -> Vec<u8> {
    match format {
        Format::Xml => crate::render::request::render_xml(records, log, doc),
        f => crate::render::request::render_messages(records, log, f),
    }
}

/// Turns remembered by their idempotency key (`/respond`): what the key's
/// request was (a hash), how far the turn got, and its answer once done.
const TURNS_TABLE: &str = "CREATE TABLE IF NOT EXISTS turns(
    idempotency_key TEXT PRIMARY KEY,
    request_hash TEXT NOT NULL,
    dev INTEGER NOT NULL, inode INTEGER NOT NULL,
    status TEXT NOT NULL,
    input_offset INTEGER,
    response TEXT,
    created_ms INTEGER NOT NULL);";

/// How far a remembered turn got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnStatus {
    /// Started and not finished: running now, or cut off by a restart.
    Running,
    /// Answered: the answer was appended; `response` is what was answered.
    Done(String),
    /// Failed after its `text_input` was (or was not) appended.
    Failed,
}

/// A key's turn, as [`Store::begin_turn`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnBegin {
    /// A key not seen before (or expired, or from a log since replaced):
    /// now recorded as running.
    New,
    /// The key was seen with another request: a client error.
    Conflict,
    /// The key's turn, on this log.
    Seen {
        /// How far it got.
        status: TurnStatus,
        /// Offset of its `text_input` line, once appended.
        input_offset: Option<u64>,
    },
}

impl Store {
    /// Looks `key` up and, if it is new, records it as running. Keys older
    /// than `ttl` are forgotten first.
    pub fn begin_turn(
        &mut self,
        log: &Path,
        key: &str,
        request_hash: &str,
        ttl: std::time::Duration,
    ) -> Result<TurnBegin, Error> {
        let id = log_id(log)?.unwrap_or(LogId { dev: 0, inode: 0 });
        let path = self.path.clone();
        let err = |e| state_err(&path, e);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        let now = now_ms();
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        tx.execute(
            "DELETE FROM turns WHERE created_ms < ?1",
            params![now.saturating_sub(ttl_ms)],
        )
        .map_err(err)?;
        type Row = (String, i64, i64, String, Option<i64>, Option<String>);
        let row: Option<Row> = tx
            .query_row(
                "SELECT request_hash, dev, inode, status, input_offset, response FROM turns
                 WHERE idempotency_key = ?1",
                params![key],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .optional()
            .map_err(err)?;
        let begin = match row {
            Some((hash, ..)) if hash != request_hash => TurnBegin::Conflict,
            Some((_, dev, inode, status, offset, response))
                if dev as u64 == id.dev && inode as u64 == id.inode =>
            {
                let status = match (status.as_str(), response) {
                    ("done", Some(r)) => TurnStatus::Done(r),
                    ("running", _) => TurnStatus::Running,
                    _ => TurnStatus::Failed,
                };
                TurnBegin::Seen {
                    status,
                    input_offset: offset.map(|o| o as u64),
                }
            }
            _ => {
                tx.execute(
                    "INSERT INTO turns(idempotency_key, request_hash, dev, inode, status,
                         input_offset, response, created_ms)
                     VALUES (?1, ?2, ?3, ?4, 'running', NULL, NULL, ?5)
                     ON CONFLICT(idempotency_key) DO UPDATE SET request_hash = ?2, dev = ?3,
                         inode = ?4, status = 'running', input_offset = NULL, response = NULL,
                         created_ms = ?5",
                    params![key, request_hash, id.dev as i64, id.inode as i64, now],
                )
                .map_err(err)?;
                TurnBegin::New
            }
        };
        tx.commit().map_err(err)?;
        Ok(begin)
    }

    /// Records where `key`'s `text_input` was appended (and the log it is
    /// in, which a new key may have created).
    pub fn set_turn_input(&self, log: &Path, key: &str, offset: u64) -> Result<(), Error> {
        let id = log_id(log)?.unwrap_or(LogId { dev: 0, inode: 0 });
        self.conn
            .execute(
                "UPDATE turns SET input_offset = ?2, dev = ?3, inode = ?4
                 WHERE idempotency_key = ?1",
                params![key, offset as i64, id.dev as i64, id.inode as i64],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Records how `key`'s turn ended: `Some(response)` answered, `None`
    /// failed.
    pub fn finish_turn(&self, key: &str, response: Option<&str>) -> Result<(), Error> {
        self.conn
            .execute(
                "UPDATE turns SET status = ?2, response = ?3 WHERE idempotency_key = ?1",
                params![
                    key,
                    if response.is_some() { "done" } else { "failed" },
                    response
                ],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Marks `key`'s turn running again (a retry of a failed one).
    pub fn restart_turn(&self, key: &str) -> Result<(), Error> {
        self.conn
            .execute(
                "UPDATE turns SET status = 'running', response = NULL WHERE idempotency_key = ?1",
                params![key],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod turn_tests {
    use super::*;

    #[test]
    fn a_key_is_new_once_then_seen_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wm.log");
        std::fs::write(&log, b"").unwrap();
        let mut s = Store::open(Store::path_for(&log)).unwrap();
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(s.begin_turn(&log, "k", "h", day).unwrap(), TurnBegin::New);
        assert_eq!(
            s.begin_turn(&log, "k", "h", day).unwrap(),
            TurnBegin::Seen {
                status: TurnStatus::Running,
                input_offset: None
            }
        );
        assert_eq!(
            s.begin_turn(&log, "k", "other", day).unwrap(),
            TurnBegin::Conflict
        );
        s.set_turn_input(&log, "k", 42).unwrap();
        s.finish_turn("k", None).unwrap();
        assert_eq!(
            s.begin_turn(&log, "k", "h", day).unwrap(),
            TurnBegin::Seen {
                status: TurnStatus::Failed,
                input_offset: Some(42)
            }
        );
        s.restart_turn("k").unwrap();
        s.finish_turn("k", Some("{\"text\":\"a\"}")).unwrap();
        drop(s);
        // Durable: a new connection sees it.
        let mut s = Store::open(Store::path_for(&log)).unwrap();
        assert_eq!(
            s.begin_turn(&log, "k", "h", day).unwrap(),
            TurnBegin::Seen {
                status: TurnStatus::Done("{\"text\":\"a\"}".into()),
                input_offset: Some(42)
            }
        );
        // Expired: new again.
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(
            s.begin_turn(&log, "k", "h", std::time::Duration::from_millis(1))
                .unwrap(),
            TurnBegin::New
        );
    }
}
