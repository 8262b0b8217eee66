//! The writer's journal: a batch of lines is recorded here (where it starts
//! in the log, each line's length and hash, and the idempotency keys it
//! answers) before any of its bytes are written, and removed once the log is
//! synced. After a crash, a batch still in the journal is found whole in the
//! log (its keys are then answered) or cut back out of it (its keys are
//! free to be retried): a batch is in the log whole or not at all.

use rusqlite::params;

use super::Store;
use crate::error::Error;

/// One line of a batch as the journal keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchLine {
    /// Bytes, its `\n` included.
    pub(crate) len: u64,
    /// xxh3 of those bytes.
    pub(crate) hash: u64,
}

/// A turn's key recorded with the batch that holds its `text_input` (a key
/// only this process claims: its row is written in the batch's own step).
#[derive(Debug, Clone, Copy)]
pub(crate) struct InputRow<'a> {
    pub(crate) key: &'a str,
    /// The hash of the key's request.
    pub(crate) hash: &'a str,
    /// Where the `text_input` goes in the log.
    pub(crate) offset: u64,
}

/// A batch begun and not ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingBatch {
    pub(crate) id: i64,
    /// The log it was written to.
    pub(crate) dev: u64,
    pub(crate) inode: u64,
    /// Where its first byte went.
    pub(crate) start: u64,
    pub(crate) lines: Vec<BatchLine>,
}

fn encode(lines: &[BatchLine]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.len() * 16);
    for l in lines {
        out.extend_from_slice(&l.len.to_le_bytes());
        out.extend_from_slice(&l.hash.to_le_bytes());
    }
    out
}

fn decode(blob: &[u8]) -> Vec<BatchLine> {
    blob.chunks_exact(16)
        .map(|c| BatchLine {
            len: u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
            hash: u64::from_le_bytes(c[8..].try_into().expect("8 bytes")),
        })
        .collect()
}

/// Deletes batch `id` and its keys' answers from the journal.
fn remove(tx: &rusqlite::Transaction<'_>, id: i64) -> rusqlite::Result<()> {
    tx.prepare_cached("DELETE FROM batch_keys WHERE batch = ?1")?
        .execute(params![id])?;
    tx.prepare_cached("DELETE FROM batches WHERE id = ?1")?
        .execute(params![id])?;
    Ok(())
}

impl Store {
    /// Records a batch about to be written at `start` of the log
    /// (`dev`, `inode`), with the answers of the idempotency keys it
    /// carries (`(key, answer, made)`: a key the server made is marked
    /// answered in this step, not when the batch ends), and the rows of
    /// the turns' keys whose inputs it holds (`inputs`); `sync`: on disk before this returns. The same step
    /// removes the `settled` batches (synced, with no key to answer), so a
    /// batch without keys costs one transaction.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn begin_batch(
        &mut self,
        (dev, inode): (u64, u64),
        start: u64,
        lines: &[BatchLine],
        keys: &[(String, String, bool)],
        inputs: &[InputRow<'_>],
        sync: bool,
        settled: &[i64],
    ) -> Result<i64, Error> {
        let path = self.path.clone();
        let err = |e| super::state_err(&path, e);
        self.full_sync(sync)?;
        let tx = self.conn.transaction().map_err(err)?;
        for &old in settled {
            remove(&tx, old).map_err(err)?;
        }
        tx.prepare_cached("INSERT INTO batches(dev, inode, start, lines) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut q| {
                q.execute(params![
                    dev as i64,
                    inode as i64,
                    start as i64,
                    encode(lines)
                ])
            })
            .map_err(err)?;
        let id = tx.last_insert_rowid();
        let now = super::now_ms();
        for i in inputs {
            let log = super::LogId { dev, inode };
            super::turns::upsert(&tx, log, i.key, i.hash, Some(i.offset), now).map_err(err)?;
        }
        for (key, response, made) in keys {
            tx.prepare_cached(
                "INSERT INTO batch_keys(batch, idempotency_key, response) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut q| q.execute(params![id, key, response]))
            .map_err(err)?;
            if *made {
                tx.prepare_cached(
                    "UPDATE turns SET status = 'done', response = ?2 WHERE idempotency_key = ?1",
                )
                .and_then(|mut q| q.execute(params![key, response]))
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
        Ok(id)
    }

    /// Ends batch `id`: `complete` (durable in the log) answers its keys,
    /// otherwise they are marked failed, free to be retried.
    pub(crate) fn end_batch(&mut self, id: i64, complete: bool) -> Result<(), Error> {
        self.settle_batch(
            id,
            if complete {
                "UPDATE turns SET status = 'done', response = (SELECT response FROM batch_keys
                     WHERE batch = ?1 AND batch_keys.idempotency_key = turns.idempotency_key)
                 WHERE idempotency_key IN (SELECT idempotency_key FROM batch_keys WHERE batch = ?1)"
            } else {
                // ('done': a key the server made, answered as the batch began.)
                "UPDATE turns SET status = 'failed', response = NULL
                 WHERE status IN ('running', 'done')
                   AND idempotency_key IN (SELECT idempotency_key FROM batch_keys WHERE batch = ?1)"
            },
        )
    }

    /// Ends batch `id` that a crash cut short or left out of the log (the
    /// writer's recovery): a turn's key whose input is in the log (the
    /// batch held its answer) goes back to running, in the process that
    /// stopped, so a retry closes the turn as interrupted rather than call
    /// the model again (it was called; its answer is lost); any other key
    /// (a batch of records) is failed, free to be retried.
    pub(crate) fn abandon_batch(&mut self, id: i64) -> Result<(), Error> {
        self.settle_batch(
            id,
            "UPDATE turns SET response = NULL,
                 status = CASE WHEN input_offset IS NULL THEN 'failed' ELSE 'running' END
             WHERE status IN ('running', 'done')
               AND idempotency_key IN (SELECT idempotency_key FROM batch_keys WHERE batch = ?1)",
        )
    }

    /// Settles batch `id`'s keys by `update` (of `turns`, the batch's id as
    /// `?1`) and takes it out of the journal, in one transaction.
    fn settle_batch(&mut self, id: i64, update: &str) -> Result<(), Error> {
        let path = self.path.clone();
        let err = |e| super::state_err(&path, e);
        // Losing this on a power cut only means it is done again at start.
        self.full_sync(false)?;
        let tx = self.conn.transaction().map_err(err)?;
        tx.prepare_cached(update)
            .and_then(|mut q| q.execute(params![id]))
            .map_err(err)?;
        remove(&tx, id).map_err(err)?;
        tx.commit().map_err(err)
    }

    /// Takes batch `id` out of the journal without settling its keys: the
    /// batch was withdrawn before anything of it was acknowledged (its write
    /// failed and was cut back, or it is journalled again where it went),
    /// and the request that holds the keys settles them. The keys whose
    /// inputs it held (`inputs`) no longer name an input (each stays bound
    /// to its request).
    pub(crate) fn withdraw_batch(&mut self, id: i64, inputs: &[&str]) -> Result<(), Error> {
        let path = self.path.clone();
        let err = |e| super::state_err(&path, e);
        let tx = self.conn.transaction().map_err(err)?;
        // The server's own keys it answered as it began are running again.
        tx.prepare_cached(
            "UPDATE turns SET status = 'running', response = NULL
             WHERE status = 'done'
               AND idempotency_key IN (SELECT idempotency_key FROM batch_keys WHERE batch = ?1)",
        )
        .and_then(|mut q| q.execute(params![id]))
        .map_err(err)?;
        remove(&tx, id).map_err(err)?;
        for key in inputs {
            super::turns::unrecord_input(&tx, key).map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Forgets the running turns whose `text_input` was to be at `range` of
    /// the log (`dev`, `inode`): a batch a crash cut short, whose inputs
    /// never made it (their requests start afresh).
    pub(crate) fn forget_inputs_in(
        &mut self,
        (dev, inode): (u64, u64),
        range: std::ops::Range<u64>,
    ) -> Result<(), Error> {
        self.conn
            .prepare_cached(
                "DELETE FROM turns WHERE status = 'running' AND dev = ?1 AND inode = ?2
                   AND input_offset >= ?3 AND input_offset < ?4",
            )
            .and_then(|mut q| {
                q.execute(params![
                    dev as i64,
                    inode as i64,
                    range.start as i64,
                    range.end as i64
                ])
            })
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// The batches begun and never ended, newest first.
    pub(crate) fn pending_batches(&self) -> Result<Vec<PendingBatch>, Error> {
        let mut q = self
            .conn
            .prepare("SELECT id, dev, inode, start, lines FROM batches ORDER BY id DESC")
            .map_err(|e| self.err(e))?;
        let rows = q
            .query_map([], |r| {
                Ok(PendingBatch {
                    id: r.get(0)?,
                    dev: r.get::<_, i64>(1)? as u64,
                    inode: r.get::<_, i64>(2)? as u64,
                    start: r.get::<_, i64>(3)? as u64,
                    lines: decode(&r.get::<_, Vec<u8>>(4)?),
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{TurnBegin, TurnStatus};

    fn status(s: &mut Store, log: &std::path::Path) -> TurnStatus {
        let day = std::time::Duration::from_secs(86_400);
        match s.begin_turn(log, "k", "h", day).unwrap() {
            TurnBegin::Seen { status, .. } => status,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_withdrawn_batch_leaves_its_key_to_the_request_and_an_ended_one_settles_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wm.log");
        std::fs::write(&log, b"").unwrap();
        let mut s = Store::open(Store::path_for(&log)).unwrap();
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(s.begin_turn(&log, "k", "h", day).unwrap(), TurnBegin::New);
        let line = [BatchLine { len: 3, hash: 7 }];
        let keys = [("k".to_string(), "{\"a\":1}".to_string(), false)];
        let id = s
            .begin_batch((1, 2), 0, &line, &keys, &[], false, &[])
            .unwrap();
        assert_eq!(
            s.pending_batches().unwrap(),
            vec![PendingBatch {
                id,
                dev: 1,
                inode: 2,
                start: 0,
                lines: line.to_vec()
            }]
        );
        s.withdraw_batch(id, &[]).unwrap();
        assert!(s.pending_batches().unwrap().is_empty());
        assert_eq!(status(&mut s, &log), TurnStatus::Running);
        let id = s
            .begin_batch((1, 2), 0, &line, &keys, &[], false, &[])
            .unwrap();
        s.end_batch(id, false).unwrap();
        assert_eq!(status(&mut s, &log), TurnStatus::Failed);
        s.restart_turn("k").unwrap();
        let id = s
            .begin_batch((1, 2), 0, &line, &keys, &[], true, &[])
            .unwrap();
        s.end_batch(id, true).unwrap();
        assert_eq!(status(&mut s, &log), TurnStatus::Done("{\"a\":1}".into()));
        assert!(s.pending_batches().unwrap().is_empty());
    }

    #[test]
    fn a_key_the_server_made_is_answered_as_its_batch_begins_and_taken_back_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wm.log");
        std::fs::write(&log, b"").unwrap();
        let mut s = Store::open(Store::path_for(&log)).unwrap();
        let day = std::time::Duration::from_secs(86_400);
        let line = [BatchLine { len: 3, hash: 7 }];
        let made = [("k".to_string(), "{\"a\":2}".to_string(), true)];
        let begun = |s: &mut Store| {
            assert_eq!(s.begin_turn(&log, "k", "h", day).unwrap(), TurnBegin::New);
            s.begin_batch((1, 2), 0, &line, &made, &[], false, &[])
                .unwrap()
        };
        // Answered at once, before the batch ends.
        let id = begun(&mut s);
        assert_eq!(status(&mut s, &log), TurnStatus::Done("{\"a\":2}".into()));
        // Its write failed and was cut back: the turn is running again, for
        // the request to settle.
        s.withdraw_batch(id, &[]).unwrap();
        assert_eq!(status(&mut s, &log), TurnStatus::Running);
        // Found in part after a crash: failed, free to be retried.
        s.forget_turn("k").unwrap();
        let id = begun(&mut s);
        s.end_batch(id, false).unwrap();
        assert_eq!(status(&mut s, &log), TurnStatus::Failed);
        // Found whole: the answer stays.
        s.forget_turn("k").unwrap();
        let id = begun(&mut s);
        s.end_batch(id, true).unwrap();
        assert_eq!(status(&mut s, &log), TurnStatus::Done("{\"a\":2}".into()));
    }

    #[test]
    fn a_batch_records_the_keys_of_the_inputs_it_holds_and_takes_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wm.log");
        std::fs::write(&log, b"").unwrap();
        let ident = {
            let id = crate::input::identity_of(&std::fs::metadata(&log).unwrap());
            (id.dev, id.inode)
        };
        let mut s = Store::open(Store::path_for(&log)).unwrap();
        let day = std::time::Duration::from_secs(86_400);
        let line = [BatchLine { len: 3, hash: 7 }];
        let row = |key, offset| InputRow {
            key,
            hash: "h",
            offset,
        };
        let id = s
            .begin_batch(ident, 40, &line, &[], &[row("a", 40)], false, &[])
            .unwrap();
        let seen = |s: &mut Store, key| s.peek_turn(&log, key, "h", day).unwrap();
        assert_eq!(
            seen(&mut s, "a"),
            TurnBegin::Seen {
                status: TurnStatus::Running,
                input_offset: Some(40)
            }
        );
        // Withdrawn (its write failed): the key names no input, and stays
        // bound to its request (another request with it is refused).
        s.withdraw_batch(id, &["a"]).unwrap();
        assert_eq!(
            seen(&mut s, "a"),
            TurnBegin::Seen {
                status: TurnStatus::Running,
                input_offset: None
            }
        );
        assert_eq!(
            s.peek_turn(&log, "a", "other", day).unwrap(),
            TurnBegin::Conflict
        );
        s.forget_turn("a").unwrap();
        // Cut short by a crash: the running keys whose inputs it held go,
        // the others stay.
        s.begin_batch(
            ident,
            40,
            &line,
            &[],
            &[row("a", 40), row("b", 42)],
            false,
            &[],
        )
        .unwrap();
        s.begin_batch(ident, 43, &line, &[], &[row("c", 43)], false, &[])
            .unwrap();
        s.forget_inputs_in(ident, 40..43).unwrap();
        assert_eq!(seen(&mut s, "a"), TurnBegin::New);
        assert_eq!(seen(&mut s, "b"), TurnBegin::New);
        assert!(matches!(seen(&mut s, "c"), TurnBegin::Seen { .. }));
    }
}
