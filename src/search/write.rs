//! Adding a log's lines to its index: the writer (waiting for another
//! process's), the lines read in groups and split into words in parallel,
//! and the commit with the log's state as its payload.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use tantivy::{Index as Tantivy, IndexWriter, TantivyDocument};

use super::analysis::{Analyzer, Field as Of, Language};
use super::meta::{Fields, Meta, VERSION, err};
use super::text::{self, Scratch};
use crate::error::Error;
use crate::parse::LineParser;

/// Lines read per group whose pieces are split into words in parallel.
const GROUP: usize = 32 << 20;
/// Lines per piece of a group.
const PIECE: usize = 1 << 20;
/// How long a refresh waits for another process's writer.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// A writer on `index`, waiting for another process's to be let go.
pub(super) fn writer(index: &Tantivy, path: &Path, threads: usize) -> Result<IndexWriter, Error> {
    let start = Instant::now();
    let budget = if threads == 1 {
        15 << 20
    } else {
        (48usize << 20) * threads
    };
    loop {
        match index.writer_with_num_threads::<TantivyDocument>(threads, budget) {
            Ok(w) => return Ok(w),
            Err(tantivy::TantivyError::LockFailure(
                tantivy::directory::error::LockError::LockBusy,
                _,
            )) if start.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(err(path, e)),
        }
    }
}

/// An error adding documents: tantivy's own says only that a thread of
/// the writer stopped ("An index writer was killed"); the thread's error,
/// the cause (a full disk, a file size limit), is what joining it gives.
pub(super) fn with_cause(writer: &mut IndexWriter, path: &Path, e: Error) -> Error {
    match writer.prepare_commit() {
        Err(cause) => err(path, format!("writing the index failed: {cause}")),
        Ok(_) => e,
    }
}

/// Commits what was added, with the log's state up to `end` as payload
/// (`boot`: this boot's id when the commit is not synced, else `""`).
pub(super) fn commit(
    writer: &mut IndexWriter,
    path: &Path,
    log: &Path,
    file: &File,
    (id, end, max_depth, language): (crate::input::FileIdentity, u64, u64, Language),
    boot: &str,
) -> Result<(), Error> {
    let fingerprint = crate::input::fingerprint_file(file, end)
        .map_err(|e| Error::io(log, "cannot read", e))?
        .unwrap_or(0);
    let meta = Meta {
        version: VERSION,
        dev: id.dev,
        inode: id.inode,
        len: end,
        fingerprint,
        max_depth,
        language: language.name().to_string(),
        boot: boot.to_string(),
    };
    let mut prepared = writer.prepare_commit().map_err(|e| err(path, e))?;
    prepared.set_payload(&serde_json::to_string(&meta).expect("meta serialises"));
    prepared.commit().map_err(|e| err(path, e))?;
    Ok(())
}

/// Whether `from..len` of the log holds a whole line.
pub(super) fn has_line(file: &File, log: &Path, from: u64, len: u64) -> Result<bool, Error> {
    let mut at = from;
    let mut buf = Vec::new();
    while at < len {
        buf.clear();
        crate::input::read_from(file, at, (len - at).min(1 << 20), &mut buf)
            .map_err(|e| Error::io(log, "cannot read", e))?;
        if buf.is_empty() {
            return Ok(false);
        }
        if memchr::memchr(b'\n', &buf).is_some() {
            return Ok(true);
        }
        at += buf.len() as u64;
    }
    Ok(false)
}

/// Indexes the whole lines of `log` in `from..len` (up to the last `\n`):
/// returns where they end and how many records were added. Lines are read
/// in groups, and each group's pieces are parsed, split into words and
/// added in parallel.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_lines(
    writer: &IndexWriter,
    fields: Fields,
    language: Language,
    log: &Path,
    file: &File,
    from: u64,
    len: u64,
    max_depth: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(u64, u64), Error> {
    use rayon::prelude::*;
    let total = len - from;
    let mut at = from;
    let mut records = 0u64;
    let mut buf: Vec<u8> = Vec::new();
    while at < len {
        let mut want = (len - at).min(GROUP as u64);
        let commit = loop {
            buf.clear();
            crate::input::read_from(file, at, want, &mut buf)
                .map_err(|e| Error::io(log, "cannot read", e))?;
            if let Some(last) = memchr::memrchr(b'\n', &buf) {
                break Some(last + 1);
            }
            if (buf.len() as u64) < want || at + want >= len {
                break None;
            }
            // A line longer than a group: read on until its end.
            want = (want * 2).min(len - at);
        };
        let Some(commit) = commit else {
            break;
        };
        let start = if at == 0 {
            crate::input::lines::content_start(&buf)
        } else {
            0
        };
        let pieces = crate::input::lines::chunks(&buf[..commit], start..commit, PIECE);
        let added: Result<Vec<u64>, Error> = pieces
            .par_iter()
            .map(|r| {
                let mut parser = LineParser::new(max_depth);
                let mut scratch = Scratch::default();
                let mut analyzer = Analyzer::new(language);
                let (mut prose, mut ident) = (String::new(), String::new());
                let mut added = 0u64;
                text::each_record(&buf, r.clone(), &mut parser, |line_at, line| {
                    prose.clear();
                    ident.clear();
                    analyzer.record(line, &mut scratch, |field, term| {
                        let to = match field {
                            Of::Prose => &mut prose,
                            Of::Ident => &mut ident,
                        };
                        if !to.is_empty() {
                            to.push(' ');
                        }
                        to.push_str(term);
                    });
                    if prose.is_empty() && ident.is_empty() {
                        return Ok(());
                    }
                    let mut doc = TantivyDocument::new();
                    doc.add_text(fields.body, &prose);
                    doc.add_text(fields.ids, &ident);
                    doc.add_u64(fields.offset, at + line_at as u64);
                    writer.add_document(doc).map_err(|e| err(log, e))?;
                    added += 1;
                    Ok(())
                })?;
                Ok(added)
            })
            .collect();
        records += added?.iter().sum::<u64>();
        at += commit as u64;
        progress(at - from, total);
    }
    Ok((at, records))
}
