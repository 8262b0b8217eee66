//! Session deltas: `prepare` answers a session key with the whole log,
//! what was appended since its acknowledged position, or nothing; `ack`
//! moves the position (see the module docs of [`crate::state`]).

use std::hash::{BuildHasher, RandomState};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{OptionalExtension, params};

use super::{LogId, Store, now_ms, state_err};
use crate::error::Error;
use crate::input::{LogBytes, ReadMode};
use crate::order;
use crate::render::Format;
use crate::render::xml::Document;
use crate::replay::{ReplayOptions, parse_range};
use crate::select::{self, Selection, memory};

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
        let mut out = self.json_head().into_bytes();
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

    /// [`to_json`](Self::to_json) written to `w`, the body escaped a piece
    /// at a time instead of into a second buffer of its size (what
    /// `wmreplay prepare` prints: a body that fits in memory once is
    /// printed, never copied whole).
    pub fn write_json(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        /// Body bytes escaped per write.
        const PIECE: usize = 1 << 20;
        w.write_all(self.json_head().as_bytes())?;
        // Escaping makes a byte at most 6 (`\u001f`).
        let mut escaped = vec![0u8; PIECE.min(self.body.len()) * 6];
        for piece in self.body.chunks(PIECE) {
            let len = piece.len() + crate::escape::escaped_extra(piece);
            let n = crate::escape::write_escaped(piece, &mut escaped[..len]);
            w.write_all(&escaped[..n])?;
        }
        w.write_all(b"\"}")
    }

    /// The JSON answer up to the body's opening quote.
    fn json_head(&self) -> String {
        format!(
            "{{\"prepare_id\":\"{}\",\"mode\":\"{}\",\"from\":{},\"to\":{},\"records\":{},\"body\":\"",
            self.prepare_id,
            self.mode.name(),
            self.from,
            self.to,
            self.records
        )
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

impl Store {
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
    let opened = crate::input::open_regular(path, req.options.refuse_links)?;
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
                crate::input::read_from(f, pos, len - pos, &mut buf)
                    .map_err(|e| Error::io(path, "cannot read", e))?;
                Some((pos, buf))
            } else {
                None
            }
        }
        _ => None,
    };
    // With summaries or facts, what was appended since the position is a
    // delta only when it holds no summary and no fact: a new summary
    // replaces the start of what the client holds, and a changed fact the
    // facts message at its end, so either makes a full replay.
    let memory = |r: &crate::parse::Record, data: &[u8]| {
        (req.selection.summaries && r.kind_is(data, memory::SUMMARY))
            || (req.selection.facts && r.kind_is(data, memory::FACT))
    };
    let parsed = delta.as_ref().and_then(|(from, buf)| {
        let tail = &buf[..];
        let commit = memchr::memrchr(b'\n', tail).map_or(0, |k| k + 1);
        let parsed = parse_range(tail, 0..commit, 1, req.options, &|_| {});
        let data: &[u8] = parsed.arena.as_deref().unwrap_or(tail);
        let changed = parsed
            .records
            .iter()
            .chain(&parsed.late)
            .any(|r| memory(r, data));
        (!changed).then_some((*from, commit, parsed))
    });
    let (prepared, fp, id) = match (parsed, &delta) {
        (Some((from, commit, parsed)), Some((_, buf))) => {
            let tail = &buf[..];
            if let Some(e) = parsed.alloc_failed {
                return Err(e.for_log(path));
            }
            let mut records = parsed.records;
            let data: &[u8] = parsed.arena.as_deref().unwrap_or(tail);
            let parallel = records.len() + parsed.late.len() > 4096;
            // The merge grows the records by the late ones.
            crate::buffers::try_grow(&mut records, parsed.late.len())
                .map_err(|e| e.for_log(path))?;
            order::merge_late(&mut records, parsed.late, parallel);
            select::apply(&mut records, data, &filters, None, |o| o, |_| 0, &mut None);
            let to = from + commit as u64;
            let (mode, body) = if records.is_empty() {
                (Mode::None, Vec::new())
            } else {
                (
                    Mode::Delta,
                    render_body(&records, data, req.format, Document::Delta { from, to })
                        .map_err(|e| e.for_log(path))?,
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
        _ => {
            // The whole log (a position of 0 too: the file's start is where a
            // byte-order mark is dropped, which only a full replay does).
            let log = LogBytes::open_with(path, ReadMode::Auto, req.options.refuse_links)?;
            let all = log.bytes();
            let commit = memchr::memrchr(b'\n', all).map_or(0, |k| k + 1);
            let mut r = crate::replay::try_replay(&all[..commit], req.options)
                .map_err(|e| e.for_log(path))?;
            r.select(req.selection, None);
            let body = match req.format {
                Format::Xml => render_body(r.records(), r.data(), req.format, Document::Context),
                // The facts message, if any, comes last.
                f => r.try_render_messages(f),
            }
            .map_err(|e| e.for_log(path))?;
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

/// The body, in one buffer allocated fallibly: a log whose body does not fit
/// in memory is an [`Error::OutOfMemory`] for the caller, not an abort.
fn render_body(
    records: &[crate::parse::Record],
    log: &[u8],
    format: Format,
    doc: Document,
) -> Result<Vec<u8>, crate::AllocError> {
    match format {
        Format::Xml => crate::render::request::try_render_xml(records, log, doc),
        f => crate::render::request::try_render_messages(records, log, f),
    }
}
