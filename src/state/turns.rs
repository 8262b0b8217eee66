//! Turns remembered by their idempotency key, for `/respond`'s retries.

use std::path::Path;

use rusqlite::{OptionalExtension, params};

use super::{LogId, Store, instance, log_id, now_ms, state_err};
use crate::error::Error;

/// Turns remembered by their idempotency key (`/respond`): what the key's
/// request was (a hash), how far the turn got, and its answer once done.
/// How far a remembered turn got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnStatus {
    /// Started and not finished, by this process: running now.
    Running,
    /// Started by a process that has since stopped (a crash or a restart)
    /// and never finished.
    Abandoned,
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
    /// Looks `key` up and, if it is new, records it as running. A key
    /// older than `ttl` is new again; such keys are deleted once a minute
    /// (or a `ttl`, if shorter), through an index of their age.
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
        let cutoff = expire(&tx, &mut self.expired_at, now, ttl).map_err(err)?;
        let begin = lookup(&tx, id, key, request_hash, cutoff).map_err(err)?;
        if begin == TurnBegin::New {
            upsert(&tx, id, key, request_hash, None, now).map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok(begin)
    }

    /// [`Self::begin_turn`] without recording a new key: for a key only
    /// this process can claim (the server's own, claimed in memory), whose
    /// row is written with its input ([`Self::note_turn_input`] with the
    /// request's hash): one write a turn fewer.
    pub fn peek_turn(
        &mut self,
        log: &Path,
        key: &str,
        request_hash: &str,
        ttl: std::time::Duration,
    ) -> Result<TurnBegin, Error> {
        let id = log_id(log)?.unwrap_or(LogId { dev: 0, inode: 0 });
        let cutoff =
            expire(&self.conn, &mut self.expired_at, now_ms(), ttl).map_err(|e| self.err(e))?;
        lookup(&self.conn, id, key, request_hash, cutoff).map_err(|e| self.err(e))
    }

    /// Records where `key`'s `text_input` was appended (and the log it is
    /// in, which a new key may have created). With `sync`, on disk (with
    /// every earlier change of the store) before this returns: from then on
    /// the key maps to its input, so a turn is never run twice, even after
    /// a power cut, once its model is called.
    pub fn set_turn_input(
        &self,
        log: &Path,
        key: &str,
        offset: u64,
        sync: bool,
    ) -> Result<(), Error> {
        let ticket = self.note_turn_input(log, key, offset, None)?;
        if sync {
            ticket.wait()?;
        }
        Ok(())
    }

    /// [`Self::set_turn_input`], made durable by waiting on the ticket
    /// returned, which a caller does after letting go of the store: the
    /// turns that wait together are synced together. With `new` (the
    /// request's hash), the key is recorded here, running, if
    /// [`Self::peek_turn`] found it new.
    pub fn note_turn_input(
        &self,
        log: &Path,
        key: &str,
        offset: u64,
        new: Option<&str>,
    ) -> Result<super::SyncTicket, Error> {
        let id = log_id(log)?.unwrap_or(LogId { dev: 0, inode: 0 });
        if let Some(hash) = new {
            upsert(&self.conn, id, key, hash, Some(offset), now_ms()).map_err(|e| self.err(e))?;
            return Ok(self.syncer.ticket());
        }
        self.conn
            .prepare_cached(
                "UPDATE turns SET input_offset = ?2, dev = ?3, inode = ?4
                 WHERE idempotency_key = ?1",
            )
            .and_then(|mut q| {
                q.execute(params![key, offset as i64, id.dev as i64, id.inode as i64])
            })
            .map_err(|e| self.err(e))?;
        Ok(self.syncer.ticket())
    }

    /// A ticket for every commit made so far: waited on, they are durable.
    pub fn sync_ticket(&self) -> super::SyncTicket {
        self.syncer.ticket()
    }

    /// Records how `key`'s turn ended: `Some(response)` answered, `None`
    /// failed.
    pub fn finish_turn(&self, key: &str, response: Option<&str>) -> Result<(), Error> {
        self.conn
            .prepare_cached(
                "UPDATE turns SET status = ?2, response = ?3 WHERE idempotency_key = ?1",
            )
            .and_then(|mut q| {
                q.execute(params![
                    key,
                    if response.is_some() { "done" } else { "failed" },
                    response
                ])
            })
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Forgets `key`: a request this store began for it was not its to
    /// write (another replica holds the key for another body), so the next
    /// request with it starts afresh.
    pub fn forget_turn(&self, key: &str) -> Result<(), Error> {
        forget(&self.conn, key).map_err(|e| self.err(e))
    }

    /// [`unrecord_input`] of `key`: its input's batch was not written.
    pub(crate) fn unrecord_turn_input(&self, key: &str) -> Result<(), Error> {
        unrecord_input(&self.conn, key).map_err(|e| self.err(e))
    }

    /// The key and request hash of the turn whose `text_input` is at
    /// `offset` of `log`, when one is remembered.
    pub fn turn_at(&self, log: &Path, offset: u64) -> Result<Option<(String, String)>, Error> {
        let id = log_id(log)?.unwrap_or(LogId { dev: 0, inode: 0 });
        self.conn
            .prepare_cached(
                "SELECT idempotency_key, request_hash FROM turns
                 WHERE input_offset = ?1 AND dev = ?2 AND inode = ?3",
            )
            .and_then(|mut q| {
                q.query_row(
                    params![offset as i64, id.dev as i64, id.inode as i64],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
            })
            .map_err(|e| self.err(e))
    }

    /// Whether a turn on `log` answered with the response `id` (its
    /// stored answer names it).
    pub fn answered_response(&self, log: &Path, id: &str) -> Result<bool, Error> {
        let ids = log_id(log)?.unwrap_or(LogId { dev: 0, inode: 0 });
        let needle = format!("\"id\":{}", serde_json::Value::String(id.to_string()));
        self.conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM turns WHERE dev = ?1 AND inode = ?2
                     AND status = 'done' AND instr(response, ?3) > 0)",
            )
            .and_then(|mut q| {
                q.query_row(params![ids.dev as i64, ids.inode as i64, needle], |r| {
                    r.get::<_, bool>(0)
                })
            })
            .map_err(|e| self.err(e))
    }

    /// Marks `key`'s turn running again, in this process (a retry of a
    /// failed or abandoned one).
    pub fn restart_turn(&self, key: &str) -> Result<(), Error> {
        self.conn
            .prepare_cached(
                "UPDATE turns SET status = 'running', response = NULL, owner = ?2
                 WHERE idempotency_key = ?1",
            )
            .and_then(|mut q| q.execute(params![key, instance()]))
            .map(|_| ())
            .map_err(|e| self.err(e))
    }
}

/// Forgets the keys older than `ttl` (once a minute, or a `ttl` if
/// shorter); returns the age below which a key is expired.
fn expire(
    conn: &rusqlite::Connection,
    expired_at: &mut Option<std::time::Instant>,
    now: i64,
    ttl: std::time::Duration,
) -> rusqlite::Result<i64> {
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let cutoff = now.saturating_sub(ttl_ms);
    let every = ttl.min(std::time::Duration::from_secs(60));
    if expired_at.is_none_or(|t| t.elapsed() >= every) {
        conn.prepare_cached("DELETE FROM turns WHERE created_ms < ?1")?
            .execute(params![cutoff])?;
        *expired_at = Some(std::time::Instant::now());
    }
    Ok(cutoff)
}

/// What the store holds of `key` on the log `id`, unexpired.
fn lookup(
    conn: &rusqlite::Connection,
    id: LogId,
    key: &str,
    request_hash: &str,
    cutoff: i64,
) -> rusqlite::Result<TurnBegin> {
    type Row = (
        String,
        i64,
        i64,
        String,
        Option<i64>,
        Option<String>,
        Option<String>,
    );
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT request_hash, dev, inode, status, input_offset, response, owner
             FROM turns WHERE idempotency_key = ?1 AND created_ms >= ?2",
        )?
        .query_row(params![key, cutoff], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .optional()?;
    Ok(match row {
        Some((hash, ..)) if hash != request_hash => TurnBegin::Conflict,
        Some((_, dev, inode, status, offset, response, owner))
            if dev as u64 == id.dev && inode as u64 == id.inode =>
        {
            let status = match (status.as_str(), response) {
                ("done", Some(r)) => TurnStatus::Done(r),
                ("running", _) if owner.as_deref() == Some(instance()) => TurnStatus::Running,
                ("running", _) => TurnStatus::Abandoned,
                _ => TurnStatus::Failed,
            };
            TurnBegin::Seen {
                status,
                input_offset: offset.map(|o| o as u64),
            }
        }
        _ => TurnBegin::New,
    })
}

/// Records `key` as running in this process, its input at `offset` when
/// known (replacing an expired row, or one of a log since replaced).
/// Deletes the row of `key`'s turn.
/// Takes back where `key`'s input was recorded to be (its batch was not
/// written): the key stays bound to its request, and its turn, once ended
/// failed, starts afresh at a retry.
pub(super) fn unrecord_input(conn: &rusqlite::Connection, key: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE turns SET input_offset = NULL WHERE idempotency_key = ?1")?
        .execute(params![key])
        .map(|_| ())
}

pub(super) fn forget(conn: &rusqlite::Connection, key: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM turns WHERE idempotency_key = ?1")?
        .execute(params![key])
        .map(|_| ())
}

pub(super) fn upsert(
    conn: &rusqlite::Connection,
    id: LogId,
    key: &str,
    request_hash: &str,
    offset: Option<u64>,
    now: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO turns(idempotency_key, request_hash, dev, inode, status,
             input_offset, response, created_ms, owner)
         VALUES (?1, ?2, ?3, ?4, 'running', ?5, NULL, ?6, ?7)
         ON CONFLICT(idempotency_key) DO UPDATE SET request_hash = ?2, dev = ?3,
             inode = ?4, status = 'running', input_offset = ?5, response = NULL,
             created_ms = ?6, owner = ?7",
    )?
    .execute(params![
        key,
        request_hash,
        id.dev as i64,
        id.inode as i64,
        offset.map(|o| o as i64),
        now,
        instance()
    ])
    .map(|_| ())
}

#[cfg(test)]
mod turn_tests {
    use super::*;

    /// An empty log in a scratch directory (kept while the first is), and
    /// its store.
    fn empty_log() -> (tempfile::TempDir, std::path::PathBuf, Store) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wm.log");
        std::fs::write(&log, b"").unwrap();
        let s = Store::open(Store::path_for(&log)).unwrap();
        (dir, log, s)
    }

    #[test]
    fn a_key_is_new_once_then_seen_until_it_expires() {
        let (_dir, log, mut s) = empty_log();
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
        s.set_turn_input(&log, "k", 42, true).unwrap();
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

    #[test]
    fn a_peeked_key_is_recorded_with_its_input_not_before() {
        let (_dir, log, mut s) = empty_log();
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(s.peek_turn(&log, "k", "h", day).unwrap(), TurnBegin::New);
        // Nothing written by the look: still new.
        assert_eq!(s.peek_turn(&log, "k", "h", day).unwrap(), TurnBegin::New);
        s.note_turn_input(&log, "k", 7, Some("h"))
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(
            s.peek_turn(&log, "k", "h", day).unwrap(),
            TurnBegin::Seen {
                status: TurnStatus::Running,
                input_offset: Some(7)
            }
        );
        assert_eq!(
            s.peek_turn(&log, "k", "x", day).unwrap(),
            TurnBegin::Conflict
        );
        assert_eq!(
            s.turn_at(&log, 7).unwrap(),
            Some(("k".to_string(), "h".to_string()))
        );
    }
}
