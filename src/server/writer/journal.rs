//! Settling the batches a crash left in the journal: each is looked for in
//! the log and found whole (kept, its keys answered), in part with nothing
//! after it (cut back out, its keys free again), or in part with other
//! bytes after it (left as it is, its keys marked failed).

use std::fs::File;
use std::path::Path;

use super::file::{Locked, identity};
use crate::state::{BatchLine, PendingBatch, Store};

/// The journal's view of a rendered batch: each line's length and hash (a
/// leading `\n` that ends someone else's line counts as a line).
pub(super) fn journal_lines(buf: &[u8]) -> Vec<BatchLine> {
    buf.split_inclusive(|&b| b == b'\n')
        .map(|l| BatchLine {
            len: l.len() as u64,
            hash: xxhash_rust::xxh3::xxh3_64(l),
        })
        .collect()
}

/// How much of a journalled batch the log holds.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// Every line, as written.
    Whole,
    /// Nothing past the batch's start.
    Absent,
    /// Its first bytes and nothing after them: cut back to its start.
    Part,
    /// Part of it, then bytes that are not its own: left as they are.
    Overwritten,
}

fn find(file: &File, batch: &PendingBatch) -> std::io::Result<Found> {
    let len = file.metadata()?.len();
    if len <= batch.start {
        return Ok(Found::Absent);
    }
    let mut at = batch.start;
    let mut buf = Vec::new();
    for l in &batch.lines {
        if at + l.len > len {
            break;
        }
        buf.resize(l.len as usize, 0);
        crate::os::read_exact_at(file, &mut buf, at)?;
        if xxhash_rust::xxh3::xxh3_64(&buf) != l.hash {
            return Ok(Found::Overwritten);
        }
        at += l.len;
    }
    let total: u64 = batch.lines.iter().map(|l| l.len).sum();
    if at == batch.start + total {
        return Ok(Found::Whole);
    }
    // What follows the whole lines is the batch's torn line if it holds no
    // line end of its own.
    let mut rest = vec![0u8; (len - at) as usize];
    crate::os::read_exact_at(file, &mut rest, at)?;
    Ok(if memchr::memchr(b'\n', &rest).is_none() {
        Found::Part
    } else {
        Found::Overwritten
    })
}

/// Settles the batches a crash left in the journal (under the lock, so
/// no other writer appends meanwhile).
pub(super) fn recover(file: &File, path: &Path, journal: &mut Store) -> std::io::Result<()> {
    let pending = journal.pending_batches().map_err(journal_err)?;
    if pending.is_empty() {
        return Ok(());
    }
    let _lock = Locked::take(file)?;
    let here = identity(&file.metadata()?);
    for batch in pending {
        let found = if (batch.dev, batch.inode) == here {
            find(file, &batch)?
        } else {
            // The log it was written to is gone: nothing of it is here.
            Found::Absent
        };
        match found {
            Found::Whole => {}
            Found::Absent => {}
            Found::Part => {
                tracing::warn!(path = %path.display(), offset = batch.start,
                    "a batch a crash left half-written is cut back out of the log");
                file.set_len(batch.start)?;
                file.sync_data()?;
            }
            Found::Overwritten => {
                tracing::error!(path = %path.display(), offset = batch.start,
                    "part of a batch a crash cut short is followed by bytes another \
                     writer appended; both are left as they are");
            }
        }
        if found != Found::Whole {
            // A turn's input in it never made it: its key starts afresh.
            let total: u64 = batch.lines.iter().map(|l| l.len).sum();
            journal
                .forget_inputs_in((batch.dev, batch.inode), batch.start..batch.start + total)
                .map_err(journal_err)?;
        }
        match found {
            Found::Whole => journal.end_batch(batch.id, true),
            _ => journal.abandon_batch(batch.id),
        }
        .map_err(journal_err)?;
    }
    Ok(())
}

pub(super) fn journal_err(e: crate::Error) -> std::io::Error {
    std::io::Error::other(format!("the batch journal: {e}"))
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::io::Write;

    use super::*;
    use crate::server::writer::{Line, Writer};

    /// The batches the journal at `db` holds begun and not ended.
    fn pending(db: &Path) -> usize {
        Store::open(db).unwrap().pending_batches().unwrap().len()
    }

    /// What a crash leaves: a batch journalled and then `cut` bytes short in
    /// the log (`extra` written after it by someone else); `made`: its key
    /// is one the server made.
    fn crashed(
        cut: usize,
        extra: &[u8],
        made: bool,
    ) -> (Vec<u8>, Option<crate::state::TurnStatus>) {
        crashed_turn(cut, extra, made, false)
    }

    /// [`crashed`]; with `input`, the key's turn has its input in the log
    /// (its first line) and the batch is its answer.
    fn crashed_turn(
        cut: usize,
        extra: &[u8],
        made: bool,
        input: bool,
    ) -> (Vec<u8>, Option<crate::state::TurnStatus>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        let db = dir.path().join("wm.db");
        std::fs::write(&path, b"{\"type\":\"a\",\"ts_ms\":1}\n").unwrap();
        let day = std::time::Duration::from_secs(86_400);
        let mut store = Store::open(&db).unwrap();
        store.begin_turn(&path, "k", "h", day).unwrap();
        if input {
            let ticket = store.note_turn_input(&path, "k", 0, None).unwrap();
            ticket.wait().unwrap();
        }
        let batch = b"{\"type\":\"b\",\"ts_ms\":2}\n{\"type\":\"c\",\"ts_ms\":3}\n";
        let start = std::fs::metadata(&path).unwrap().len();
        let ident = identity(&std::fs::metadata(&path).unwrap());
        store
            .begin_batch(
                ident,
                start,
                &journal_lines(batch),
                &[("k".into(), "{\"ok\":1}".into(), made)],
                &[],
                false,
                &[],
            )
            .unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&batch[..batch.len() - cut]).unwrap();
        f.write_all(extra).unwrap();
        drop(f);
        drop(store);
        // A new process: the writer settles the journal as it starts.
        let (w, thread) = Writer::start(&path, false, &db, true).unwrap();
        drop(w);
        thread.join();
        let mut store = Store::open(&db).unwrap();
        assert!(store.pending_batches().unwrap().is_empty());
        let status = match store.begin_turn(&path, "k", "h", day).unwrap() {
            crate::state::TurnBegin::Seen { status, .. } => Some(status),
            _ => None,
        };
        (std::fs::read(&path).unwrap(), status)
    }

    #[test]
    fn a_turns_input_a_crash_cut_short_frees_its_key_and_one_left_whole_keeps_it() {
        let day = std::time::Duration::from_secs(86_400);
        for (cut, kept) in [(0, true), (7, false)] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("wm.log");
            let db = dir.path().join("wm.db");
            std::fs::write(&path, b"{\"type\":\"a\",\"ts_ms\":1}\n").unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            let (start, ident) = (meta.len(), identity(&meta));
            let batch = b"{\"type\":\"text_input\",\"ts_ms\":2}\n";
            let mut store = Store::open(&db).unwrap();
            let row = crate::state::InputRow {
                key: "k",
                hash: "h",
                offset: start,
            };
            store
                .begin_batch(ident, start, &journal_lines(batch), &[], &[row], false, &[])
                .unwrap();
            let mut f = OpenOptions::new().append(true).open(&path).unwrap();
            f.write_all(&batch[..batch.len() - cut]).unwrap();
            drop((f, store));
            let (w, thread) = Writer::start(&path, false, &db, true).unwrap();
            drop(w);
            thread.join();
            let found = Store::open(&db)
                .unwrap()
                .peek_turn(&path, "k", "h", day)
                .unwrap();
            let running = crate::state::TurnBegin::Seen {
                status: crate::state::TurnStatus::Running,
                input_offset: Some(start),
            };
            match kept {
                true => assert_eq!(found, running),
                false => assert_eq!(found, crate::state::TurnBegin::New),
            }
        }
    }

    #[test]
    fn a_batch_a_crash_left_whole_stays_and_answers_its_key() {
        for made in [false, true] {
            let (log, status) = crashed(0, b"", made);
            assert_eq!(log.iter().filter(|&&b| b == b'\n').count(), 3);
            assert_eq!(
                status,
                Some(crate::state::TurnStatus::Done("{\"ok\":1}".into()))
            );
        }
    }

    #[test]
    fn a_key_the_server_made_is_answered_as_its_batch_begins_and_ends_with_the_next() {
        use crate::server::writer::{BatchKey, LogWriter};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        let db = dir.path().join("wm.db");
        let day = std::time::Duration::from_secs(86_400);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (w, thread) = Writer::start(&path, true, &db, true).unwrap();
        for (i, made) in [true, false, true].into_iter().enumerate() {
            let key = format!("k{i}");
            Store::open(&db)
                .unwrap()
                .begin_turn(&path, &key, "h", day)
                .unwrap();
            let batch_key = BatchKey {
                key: key.clone(),
                answer: Box::new(|_| "{\"ok\":1}".into()),
                body: "h".into(),
                made,
            };
            let line = Line::verbatim(format!("{{\"type\":\"e\",\"ts_ms\":{i}}}").into_bytes());
            rt.block_on(w.append_batch(vec![line], Some(batch_key)))
                .unwrap();
            assert!(matches!(
                Store::open(&db)
                    .unwrap()
                    .peek_turn(&path, &key, "h", day)
                    .unwrap(),
                crate::state::TurnBegin::Seen {
                    status: crate::state::TurnStatus::Done(_),
                    ..
                }
            ));
            // A client's key's entry is ended at once (and took the one
            // before it out); the server's own waits for the next batch.
            assert_eq!(pending(&db), usize::from(made));
        }
        drop(w);
        thread.join();
        assert_eq!(pending(&db), 0);
    }

    #[test]
    fn a_batch_a_crash_cut_short_is_cut_back_out_and_its_key_freed() {
        for cut in [1, 10, 24, 40] {
            for made in [false, true] {
                let (log, status) = crashed(cut, b"", made);
                assert_eq!(log, b"{\"type\":\"a\",\"ts_ms\":1}\n", "cut {cut}");
                assert_eq!(status, Some(crate::state::TurnStatus::Failed));
            }
        }
    }

    /// A turn's answer a crash cut short: its input is in the log and the
    /// model was called, so its key (the client's or the server's) is left
    /// running, which a retry closes as interrupted, not failed, which a
    /// retry would run again.
    #[test]
    fn a_turns_answer_a_crash_cut_short_leaves_its_key_to_be_closed_not_run_again() {
        for made in [false, true] {
            let (log, status) = crashed_turn(5, b"", made, true);
            assert_eq!(log, b"{\"type\":\"a\",\"ts_ms\":1}\n", "made {made}");
            assert!(
                matches!(
                    status,
                    Some(crate::state::TurnStatus::Running | crate::state::TurnStatus::Abandoned)
                ),
                "made {made}: {status:?}"
            );
        }
    }

    /// A client's key's input, appended with its row: the offset is in the
    /// store as soon as the append returns, written in the batch's own
    /// journal step (not a step after it that a crash could fall before;
    /// a batch a crash cut short takes the row back, as the test above
    /// shows of such a step).
    #[test]
    fn a_clients_key_takes_its_inputs_offset_in_the_batchs_own_step() {
        use crate::server::writer::{InputKey, LogWriter};
        let day = std::time::Duration::from_secs(86_400);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        let db = dir.path().join("wm.db");
        std::fs::write(&path, b"{\"type\":\"a\",\"ts_ms\":1}\n").unwrap();
        Store::open(&db)
            .unwrap()
            .begin_turn(&path, "k", "h", day)
            .unwrap();
        let (w, thread) = Writer::start(&path, true, &db, true).unwrap();
        let line = Line::verbatim(b"{\"type\":\"text_input\",\"ts_ms\":2}".to_vec());
        let input = InputKey {
            key: "k".into(),
            hash: "h".into(),
            line: 0,
        };
        let (appended, durable, recorded) = w.append_blocking_recording(vec![line], input).unwrap();
        durable.blocking_recv().unwrap().unwrap();
        assert!(recorded);
        let at = appended[0].offset;
        let running = crate::state::TurnBegin::Seen {
            status: crate::state::TurnStatus::Running,
            input_offset: Some(at),
        };
        let found = Store::open(&db)
            .unwrap()
            .peek_turn(&path, "k", "h", day)
            .unwrap();
        assert_eq!(found, running);
        drop(w);
        thread.join();
    }

    #[test]
    fn a_cut_batch_followed_by_another_writers_lines_is_left_as_it_is() {
        let extra = b"\n{\"type\":\"x\",\"ts_ms\":9}\n";
        let (log, status) = crashed(5, extra, true);
        assert!(log.ends_with(extra), "the other writer's line is kept");
        assert_eq!(status, Some(crate::state::TurnStatus::Failed));
    }

    #[test]
    fn a_synced_batch_without_keys_leaves_the_journal_with_the_next_or_at_close() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        let db = dir.path().join("wm.db");
        let (w, thread) = Writer::start(&path, true, &db, true).unwrap();
        for i in 0..3 {
            let line = Line::verbatim(format!("{{\"type\":\"e\",\"ts_ms\":{i}}}").into_bytes());
            let (_, durable) = w.append_blocking(vec![line]).unwrap();
            durable.blocking_recv().unwrap().unwrap();
            // Each begun batch took the one synced before it out: one left.
            assert_eq!(pending(&db), 1);
        }
        drop(w);
        thread.join();
        let before = std::fs::read(&path).unwrap();
        assert_eq!(before.iter().filter(|&&b| b == b'\n').count(), 3);
        // Closed: the last one settled too.
        assert_eq!(pending(&db), 0);
        let (w, thread) = Writer::start(&path, true, &db, true).unwrap();
        drop(w);
        thread.join();
        assert_eq!(std::fs::read(&path).unwrap(), before, "nothing changed");
    }
}
