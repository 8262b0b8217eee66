//! The single writer: one thread owns the log file and appends whole lines,
//! in the order requests reach it (a thread of the writer pool, `pool.rs`,
//! which serves many logs). Concurrent requests therefore never
//! interleave or tear lines, and `ts_ms` never goes backwards among the
//! lines this server writes.
//!
//! Every append is made safe against what else may be in or writing to the
//! file:
//! - **An unterminated last line** (a writer that crashed mid-line, or one
//!   that never ends its last line): the append starts with `\n`, so that
//!   line stays a line of its own and the new record is never glued to it.
//! - **Other processes appending to the same log.** Each append holds an
//!   advisory lock (`flock(LOCK_EX)`) on the file; other writers that take it
//!   too around their appends never see their lines split. A writer that
//!   does not take it may still write half a line just before ours: the
//!   writer checks, after its write, that the byte before its record is a
//!   `\n`, and if it is not, appends the record again after a `\n`. That
//!   writer's record is then split and reported as a skip by replays, but
//!   the server's acknowledged record is always whole.
//! - **A write that fails part-way** (disk full, a file size limit, EIO):
//!   the file is cut back to its length before the write (`set_len`); if
//!   that fails too, the next append starts with `\n` anyway, since it looks
//!   at the last byte each time.
//!
//! - **A crash in the middle of a batch** (`kill -9`, a power cut): each
//!   round of batches is recorded in the state store's journal (where it
//!   starts, each line's length and hash, the idempotency keys it answers),
//!   synced before its bytes are written when it holds more than one line
//!   or a client's key, and ended once the log is synced (in the next
//!   round's step, unless it answers a client's key). When the writer
//!   starts, a batch still in the journal is looked for in the log: found whole, it stays and its keys are answered; found
//!   in part with nothing after it, the log is cut back to where the batch
//!   began and its keys are free to be retried. If something was appended
//!   after a part of a batch (another process, after the crash), those
//!   bytes are never cut: the part stays (replays skip its torn line), its
//!   keys are marked failed, and the writer logs an error.
//!
//! Each job is acknowledged twice: once written (its offsets known), and
//! once durable (after `fsync`, shared by every job written in one round).
//! The respond path replays the log up to a turn's own line between the
//! two, so it never waits for a disk flush while it holds the replay.

use std::fs::File;
use std::io::{Seek, Write};
use std::path::PathBuf;
use tokio::sync::oneshot;

use super::file::{Locked, byte_at, identity, moved, open_log};
use super::journal::{self, journal_err, journal_lines};
use super::line::render;
use super::{Appended, BatchKey, Guard, GuardBroken, InputKey, Line};
use crate::state::{BatchLine, InputRow, Store};

/// Times a batch glued to another writer's half line is written again.
const MAX_REWRITES: usize = 3;

/// One append, as the log's thread receives it.
pub(super) struct Job {
    pub(super) lines: Vec<Line>,
    pub(super) key: Option<BatchKey>,
    /// A turn's key whose row is recorded with the batch (its input).
    pub(super) input: Option<InputKey>,
    /// Written only if the log still keeps it (see [`Guard`]).
    pub(super) guard: Option<Guard>,
    pub(super) written: oneshot::Sender<std::io::Result<Vec<Appended>>>,
    pub(super) durable: oneshot::Sender<std::io::Result<()>>,
    /// Whether the job waits for `fsync` (see [`Writer::append_unsynced`]);
    /// a keyed job always does.
    ///
    /// [`Writer::append_unsynced`]: super::Writer::append_unsynced
    pub(super) sync: bool,
}

impl Job {
    /// Answers the job with `e`, unwritten.
    pub(super) fn fail(self, e: std::io::Error) {
        let again = std::io::Error::new(e.kind(), e.to_string());
        let _ = self.written.send(Err(e));
        let _ = self.durable.send(Err(again));
    }
}

/// How to open a log's writer (again, after it was closed while idle).
pub(super) struct Spec {
    pub(super) path: PathBuf,
    pub(super) fsync: bool,
    pub(super) journal: PathBuf,
    pub(super) follow: bool,
}

pub(super) struct Appender {
    file: File,
    path: PathBuf,
    fsync: bool,
    last_ts: u64,
    journal: Store,
    /// Batches synced that answer no key: removed from the journal with the
    /// next one begun (until then a restart finds them whole).
    settled: Vec<i64>,
    /// Batches written by rounds that asked for no `fsync`: settled with
    /// the next round that syncs (or when the log is closed).
    unsynced: Vec<i64>,
    /// Whether the log may be a symbolic link (see [`Writer::start`]).
    follow: bool,
}

impl Appender {
    /// Opens the log and its journal, and settles what a crash left in the
    /// journal.
    pub(super) fn open(spec: &Spec) -> std::io::Result<Appender> {
        let file = open_log(&spec.path, spec.fsync, spec.follow)?;
        let store = Store::open_refusing_links(&spec.journal, !spec.follow).map_err(journal_err)?;
        let mut appender = Appender {
            file,
            path: spec.path.clone(),
            fsync: spec.fsync,
            last_ts: 0,
            journal: store,
            settled: Vec::new(),
            unsynced: Vec::new(),
            follow: spec.follow,
        };
        journal::recover(&appender.file, &appender.path, &mut appender.journal)?;
        // Never stamp below the log's last record, whoever wrote it (this
        // server before a restart, another writer with a faster clock).
        let len = appender.file.metadata()?.len();
        if let Some(ts) = crate::append::last_ts_ms(&appender.file, len)?
            && ts.is_finite()
            && ts > 0.0
        {
            appender.resume_clock(ts.ceil().min(u64::MAX as f64) as u64);
        }
        Ok(appender)
    }

    /// The clock of the last line written.
    pub(super) fn last_ts(&self) -> u64 {
        self.last_ts
    }

    /// Never writes below `ts` (the clock before the log was closed).
    pub(super) fn resume_clock(&mut self, ts: u64) {
        self.last_ts = self.last_ts.max(ts);
    }

    /// Ends the journal entries of the batches synced and not yet removed
    /// (before the log is closed).
    pub(super) fn settle(&mut self) {
        if !self.unsynced.is_empty() {
            match self.file.sync_data() {
                Ok(()) => self.settled.append(&mut self.unsynced),
                Err(e) => tracing::error!(path = %self.path.display(), error = %e,
                    "fsync failed; the last lines are checked at the next start"),
            }
        }
        for id in std::mem::take(&mut self.settled) {
            if let Err(e) = self.journal.end_batch(id, true) {
                tracing::error!(path = %self.path.display(), error = %e,
                    "cannot end a batch in the journal; it is settled at the next start");
            }
        }
    }

    /// Writes a round of jobs as one batch (or, when that fails, each job
    /// as a batch of its own, so one bad job fails alone), syncs the log
    /// once, ends their journal entries and acknowledges them.
    pub(super) fn round(&mut self, round: Vec<Job>) {
        // (the job's durable ack, its batch's journal entry, whether it has a
        // client's key, answered when the batch ends)
        let mut done: Vec<(oneshot::Sender<std::io::Result<()>>, i64, bool)> =
            Vec::with_capacity(round.len());
        let mut sync = false;
        let all: Vec<&[Line]> = round.iter().map(|j| j.lines.as_slice()).collect();
        let keys: Vec<Option<&BatchKey>> = round.iter().map(|j| j.key.as_ref()).collect();
        let inputs: Vec<Option<&InputKey>> = round.iter().map(|j| j.input.as_ref()).collect();
        // A guarded job is checked against the log as it is just before its
        // own write: such a round goes a job at a time.
        let guarded = round.iter().any(|j| j.guard.is_some());
        let together = match round.as_slice() {
            [one] => Some(self.write(&all, &keys, &inputs, one.guard.as_ref())),
            _ if !guarded => Some(self.write(&all, &keys, &inputs, None)),
            _ => None,
        };
        let results: Vec<std::io::Result<(Vec<Appended>, i64)>> = match together {
            Some(Ok((appended, journal))) => {
                appended.into_iter().map(|a| Ok((a, journal))).collect()
            }
            Some(Err(e)) if round.len() == 1 => vec![Err(e)],
            _ => round
                .iter()
                .map(|j| {
                    let (key, input) = (j.key.as_ref(), j.input.as_ref());
                    self.write(&[j.lines.as_slice()], &[key], &[input], j.guard.as_ref())
                        .map(|(mut a, journal)| (a.pop().expect("one job"), journal))
                })
                .collect(),
        };
        for (job, r) in round.into_iter().zip(results) {
            match r {
                Ok((a, journal)) => {
                    let _ = job.written.send(Ok(a));
                    sync |= job.sync || job.key.is_some();
                    let client_key = job.key.as_ref().is_some_and(|k| !k.made);
                    done.push((job.durable, journal, client_key));
                }
                Err(e) if GuardBroken::of(&e).is_some() => job.fail(e),
                Err(e) => {
                    tracing::error!(path = %self.path.display(), error = %e, "append failed");
                    let again = std::io::Error::new(e.kind(), e.to_string());
                    let _ = job.written.send(Err(e));
                    let _ = job.durable.send(Err(again));
                }
            }
        }
        if done.is_empty() {
            return;
        }
        if self.fsync && !sync {
            // Written, not synced: durable with the next round that syncs.
            for (durable, journal, _) in done {
                if self.unsynced.last() != Some(&journal) {
                    self.unsynced.push(journal);
                }
                let _ = durable.send(Ok(()));
            }
            return;
        }
        let synced = if self.fsync {
            self.file.sync_data()
        } else {
            Ok(())
        };
        if synced.is_ok() {
            // The rounds before this one that did not sync are durable too.
            self.settled.append(&mut self.unsynced);
        }
        if let Err(e) = &synced {
            tracing::error!(path = %self.path.display(), error = %e, "fsync failed");
        }
        // A batch not synced stays in the journal: the next start settles it
        // by what the log holds then.
        // One with a client's key is ended now (its keys answered); one
        // without (or with the server's own keys, answered as it began)
        // goes with the next batch's entry.
        if synced.is_ok() {
            let mut journals: Vec<(i64, bool)> = Vec::new();
            for &(_, journal, client_key) in &done {
                match journals.last_mut() {
                    Some((j, k)) if *j == journal => *k |= client_key,
                    _ => journals.push((journal, client_key)),
                }
            }
            for (journal, client_key) in journals {
                if !client_key {
                    self.settled.push(journal);
                } else if let Err(e) = self.journal.end_batch(journal, true) {
                    tracing::error!(path = %self.path.display(), error = %e,
                        "cannot end a batch in the journal; it is settled at the next start");
                }
            }
        }
        for (durable, _, _) in done {
            let r = match &synced {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            };
            let _ = durable.send(r);
        }
    }

    /// Writes `jobs` as one batch with one `write`, journalled first (with
    /// the answers of their keys); returns where each job's lines went and
    /// the batch's journal entry. With `guard`, nothing is written (a
    /// [`GuardBroken`] error) when the log no longer keeps it.
    fn write(
        &mut self,
        jobs: &[&[Line]],
        keys: &[Option<&BatchKey>],
        inputs: &[Option<&InputKey>],
        guard: Option<&Guard>,
    ) -> std::io::Result<(Vec<Vec<Appended>>, i64)> {
        let input_keys: Vec<&str> = inputs.iter().flatten().map(|i| i.key.as_str()).collect();
        // A rotated or removed log: append to the file now at the path.
        if moved(&self.file, &self.path) {
            tracing::info!(path = %self.path.display(), "the log was replaced; reopening it");
            self.file = open_log(&self.path, self.fsync, self.follow)?;
        }
        let file = &self.file;
        let _lock = Locked::take(file)?;
        // The journal entry is on disk before the batch's bytes can be,
        // where a crash could leave part of it as whole records (a batch
        // of several lines) or a key answered from it. A round of one-line
        // jobs without a client's key is journalled without a sync of its
        // own: each line is a job whole or torn, never part of one. After a
        // process crash the entry is there (the page cache outlives the
        // process) and the torn line is cut back; after a power cut a line
        // cut short is never a record (no proper prefix of a JSON object is
        // JSON), and the next append starts a new line. (A key the server
        // made is kept for the process's retries: `BatchKey::made`.)
        let one_line =
            jobs.iter().all(|j| j.len() == 1) && keys.iter().all(|k| k.is_none_or(|k| k.made));
        let mut newline_first = false;
        for _ in 0..=MAX_REWRITES {
            let meta = file.metadata()?;
            let len = meta.len();
            if let Some(g) = guard
                && let Some(at) = crate::append::guard_broken(file, len, g)?
            {
                return Err(std::io::Error::other(GuardBroken(at)));
            }
            let terminated = len == 0 || byte_at(file, len - 1)? == Some(b'\n');
            newline_first |= !terminated;
            let (buf, mut appended) = render_jobs(jobs, newline_first, &mut self.last_ts);
            let lines = journal_lines(&buf);
            let ident = identity(&meta);
            let journal_sync = self.fsync && (!one_line || newline_first);
            let journal = begin(
                &mut self.journal,
                &mut self.settled,
                journal_sync,
                ident,
                len,
                &lines,
                keys,
                inputs,
                &appended,
                len,
            )?;
            let mut f = file;
            let end = match f.write_all(&buf).and_then(|()| f.stream_position()) {
                Ok(end) => end,
                Err(e) => {
                    // Cut the file back to where it was: no torn line is left.
                    match file.set_len(len) {
                        Ok(()) => {
                            if let Err(j) = self.journal.withdraw_batch(journal, &input_keys) {
                                tracing::error!(error = %j, "cannot withdraw a failed batch from the journal");
                            }
                        }
                        Err(cut) => {
                            tracing::error!(path = %self.path.display(), error = %cut,
                                "cannot cut a failed append back; the next append starts a new line");
                            // The batch stays for the next start to settle;
                            // the inputs it held are not the keys' now.
                            for key in &input_keys {
                                if let Err(j) = self.journal.unrecord_turn_input(key) {
                                    tracing::error!(error = %j, "cannot take back a failed turn's input offset");
                                }
                            }
                        }
                    }
                    return Err(e);
                }
            };
            // The file is opened for appending: the write went to the end,
            // wherever that was, and left the position just past it.
            let start = end - buf.len() as u64;
            crate::server::failpoint::crash("log-crash-written", &buf);
            for a in appended.iter_mut().flatten() {
                a.offset += start;
            }
            if start == len {
                counted(&appended);
                return Ok((appended, journal));
            }
            // Someone who does not take the lock wrote between our look at
            // the end and our write: the journal learns where the batch went.
            self.journal
                .withdraw_batch(journal, &input_keys)
                .map_err(journal_err)?;
            let glued = !newline_first && start > 0 && byte_at(file, start - 1)? != Some(b'\n');
            if !glued {
                let journal = begin(
                    &mut self.journal,
                    &mut self.settled,
                    journal_sync,
                    ident,
                    start,
                    &lines,
                    keys,
                    inputs,
                    &appended,
                    0,
                )?;
                counted(&appended);
                return Ok((appended, journal));
            }
            // What they wrote does not end a line, so our first line is glued
            // to it: take the batch back out when nothing follows it, and
            // write it again after a `\n`.
            tracing::warn!(path = %self.path.display(), offset = start,
                "another process wrote part of a line just before this append; appending it again");
            if file.metadata()?.len() == end {
                file.set_len(start)?;
            }
            newline_first = true;
        }
        Err(std::io::Error::other(
            "another process keeps writing partial lines to the log",
        ))
    }
}

/// Counts the lines of a round written.
fn counted<T>(jobs: &[Vec<T>]) {
    let n: usize = jobs.iter().map(Vec::len).sum();
    metrics::counter!("wmreplay_records_written_total").increment(n as u64);
}

/// Journals a batch about to be written at `start`, with its keys' answers
/// made from where its lines are to go (`appended`, moved by `shift`) and
/// the rows of the keys whose inputs it holds, and removes the `settled`
/// entries in the same step.
#[allow(clippy::too_many_arguments)]
fn begin(
    journal: &mut Store,
    settled: &mut Vec<i64>,
    sync: bool,
    ident: (u64, u64),
    start: u64,
    lines: &[BatchLine],
    keys: &[Option<&BatchKey>],
    inputs: &[Option<&InputKey>],
    appended: &[Vec<Appended>],
    shift: u64,
) -> std::io::Result<i64> {
    let answers: Vec<(String, String, bool)> = keys
        .iter()
        .zip(appended)
        .filter_map(|(k, a)| {
            k.map(|k| {
                let at: Vec<Appended> = a
                    .iter()
                    .map(|x| Appended {
                        offset: x.offset + shift,
                        ..*x
                    })
                    .collect();
                (k.key.clone(), (k.answer)(&at), k.made)
            })
        })
        .collect();
    let rows: Vec<InputRow<'_>> = inputs
        .iter()
        .zip(appended)
        .filter_map(|(i, a)| {
            let i = (*i)?;
            Some(InputRow {
                key: &i.key,
                hash: &i.hash,
                offset: a.get(i.line)?.offset + shift,
            })
        })
        .collect();
    let id = journal
        .begin_batch(ident, start, lines, &answers, &rows, sync, settled)
        .map_err(journal_err)?;
    settled.clear();
    Ok(id)
}

/// Renders every job's lines into one buffer, in order, after a `\n` when
/// `newline_first`; returns where each job's lines went in it.
fn render_jobs(
    jobs: &[&[Line]],
    newline_first: bool,
    last_ts: &mut u64,
) -> (Vec<u8>, Vec<Vec<Appended>>) {
    let size: usize = jobs.iter().flat_map(|j| j.iter()).map(Line::len).sum();
    let mut buf = Vec::with_capacity(size + usize::from(newline_first));
    if newline_first {
        buf.push(b'\n');
    }
    let out = jobs
        .iter()
        .map(|lines| render(&mut buf, lines, last_ts))
        .collect();
    (buf, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(lines: Vec<Line>, before: &[u8]) -> (Vec<u8>, Vec<Appended>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        std::fs::write(&path, before).unwrap();
        let mut a = Appender {
            file: open_log(&path, false, true).unwrap(),
            path: path.clone(),
            fsync: false,
            last_ts: 0,
            journal: Store::open(dir.path().join("wm.db")).unwrap(),
            settled: Vec::new(),
            unsynced: Vec::new(),
            follow: true,
        };
        let (mut appended, journal) = a
            .write(&[lines.as_slice()], &[None], &[None], None)
            .unwrap();
        a.journal.end_batch(journal, true).unwrap();
        assert!(a.journal.pending_batches().unwrap().is_empty());
        (std::fs::read(&path).unwrap(), appended.pop().unwrap())
    }

    #[test]
    fn an_append_after_an_unterminated_line_starts_a_new_line() {
        let before = b"{\"type\":\"a\",\"ts_ms\":1}";
        let (after, appended) = written(vec![Line::verbatim(b"{\"b\":2}".to_vec())], before);
        assert_eq!(after, b"{\"type\":\"a\",\"ts_ms\":1}\n{\"b\":2}\n");
        assert_eq!(appended[0].offset, before.len() as u64 + 1);
        assert_eq!(appended[0].len, 8);
    }

    #[test]
    fn a_terminated_log_gets_no_blank_line() {
        for before in [&b""[..], b"{}\n", b"\n"] {
            let (after, appended) = written(vec![Line::verbatim(b"{}".to_vec())], before);
            assert_eq!(&after[..before.len()], before);
            assert_eq!(&after[before.len()..], b"{}\n");
            assert_eq!(appended[0].offset, before.len() as u64);
        }
    }

    #[test]
    fn turns_and_stamped_objects_are_json_lines() {
        let (after, appended) = written(
            vec![
                Line::turn("text_output", Some("s\"1"), "a\nb", Some("max_tokens")),
                Line::stamped_object(br#"{"type":"wm_event","x":[1]}"#),
                Line::stamped_object(b"{ }"),
            ],
            b"",
        );
        let text = String::from_utf8(after).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        for (l, a) in lines.iter().zip(&appended) {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["ts_ms"].as_u64(), a.ts_ms);
        }
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["type"], "text_output");
        assert_eq!(v["session_id"], "s\"1");
        assert_eq!(v["text"], "a\nb");
        assert_eq!(v["stop_reason"], "max_tokens");
        let v: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(v["x"][0], 1);
        assert!(lines[1].starts_with("{\"ts_ms\":"));
        assert!(appended.windows(2).all(|w| w[0].ts_ms <= w[1].ts_ms));
        assert_eq!(appended[1].offset, appended[0].offset + appended[0].len);
    }
}
