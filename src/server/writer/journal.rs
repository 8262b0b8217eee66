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
        std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, at)?;
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
    std::os::unix::fs::FileExt::read_exact_at(file, &mut rest, at)?;
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
        journal
            .end_batch(batch.id, found == Found::Whole)
            .map_err(journal_err)?;
    }
    Ok(())
}

pub(super) fn journal_err(e: crate::Error) -> std::io::Error {
    std::io::Error::other(format!("the batch journal: {e}"))
}
