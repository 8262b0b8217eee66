//! The search index kept next to a log: SQLite FTS5, one row per record
//! with words, its rowid the record's byte offset; the line itself is read
//! back from the log.
//!
//! The index remembers the log's identity (device, inode), how far it has
//! indexed (a byte offset just past a `\n`) and the prefix fingerprint of
//! those bytes, as the state store does. Before each search it indexes the
//! lines appended since (a line still being written waits until its `\n`);
//! a log replaced, truncated or rewritten is indexed again from scratch,
//! and so is an index that is unreadable, from another version, or made
//! with other options. A fresh index is built in a file of its own and
//! renamed into place, so a reader never sees half of one.

use std::fs::File;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use super::text::{self, Scratch};
use crate::error::Error;
use crate::parse::LineParser;

/// Bumped whenever what is indexed, or how, changes: an index of another
/// version is rebuilt.
const VERSION: i64 = 1;

/// Lines parsed and split into words per piece handed to the writer.
const PIECE: usize = 4 << 20;

/// What [`Index::refresh`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// The index was made again from the whole log.
    pub rebuilt: bool,
    /// Log bytes read into the index by this call.
    pub bytes: u64,
    /// Records added.
    pub records: u64,
}

/// The log's state the index was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    dev: u64,
    inode: u64,
    len: u64,
    fingerprint: u64,
    max_depth: i64,
}

pub(crate) struct Index {
    log: PathBuf,
    path: PathBuf,
    conn: Option<Connection>,
    /// (device, inode) of the index file the connection has open.
    opened: Option<(u64, u64)>,
    max_depth: usize,
    refuse_links: bool,
    /// The log's length and change times, and the index file, when this
    /// index was last found up to date: unchanged, nothing is read.
    seen: Option<Seen>,
}

/// The log's length and change times, and the index file's identity.
type Seen = (u64, crate::input::Stamp, Option<(u64, u64)>);

fn err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Search {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl Index {
    /// The index of `log` at `path` (nothing is read or made until
    /// [`refresh`](Self::refresh)).
    pub(crate) fn new(log: &Path, path: PathBuf, max_depth: usize, refuse_links: bool) -> Index {
        Index {
            log: log.to_path_buf(),
            path,
            conn: None,
            opened: None,
            max_depth,
            refuse_links,
            seen: None,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the index file if it is there (or was replaced since): `None`
    /// when there is none, or it is not an index of this version.
    fn connect(&mut self) -> Option<&Connection> {
        let now = std::fs::metadata(&self.path).ok().map(|m| identity(&m));
        if now.is_none() {
            self.conn = None;
            self.opened = None;
            return None;
        }
        if self.conn.is_none() || self.opened != now {
            self.conn = None;
            let mut flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
            if self.refuse_links {
                flags |= rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW;
            }
            let conn = Connection::open_with_flags(&self.path, flags).ok()?;
            let ok = conn
                .execute_batch("PRAGMA busy_timeout=30000; PRAGMA synchronous=NORMAL;")
                .is_ok()
                && read_version(&conn) == Some(VERSION);
            if !ok {
                return None;
            }
            self.conn = Some(conn);
            self.opened = now;
        }
        self.conn.as_ref()
    }

    /// Brings the index up to date with the log (see the module);
    /// `progress(done, total)` is called as bytes are indexed.
    pub(crate) fn refresh(
        &mut self,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Refreshed, Error> {
        let seen = self.seen.take();
        let Some((file, meta)) = crate::input::open_regular(&self.log, self.refuse_links)? else {
            // No log: nothing to find (an index left from it is stale).
            if self.path.exists() {
                std::fs::remove_file(&self.path).map_err(|e| err(&self.path, e))?;
                self.conn = None;
            }
            return Ok(Refreshed::default());
        };
        let id = crate::input::identity_of(&meta);
        let len = meta.len();
        let now = (len, crate::input::Stamp::of(&meta));
        let index_now = std::fs::metadata(&self.path).ok().map(|m| identity(&m));
        if seen.is_some_and(|(l, st, ix)| (l, st) == now && ix == index_now && ix == self.opened) {
            self.seen = seen;
            return Ok(Refreshed::default());
        }
        let refreshed = self.refresh_from(&file, id, len, progress)?;
        let index_now = std::fs::metadata(&self.path).ok().map(|m| identity(&m));
        if self.connect().is_some() {
            self.seen = Some((now.0, now.1, index_now));
        }
        Ok(refreshed)
    }

    fn refresh_from(
        &mut self,
        file: &File,
        id: crate::input::FileIdentity,
        len: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Refreshed, Error> {
        let max_depth = self.max_depth as i64;
        // The indexed state, if the index is one of this log's.
        let known = match self.connect() {
            Some(conn) => read_meta(conn).ok().flatten(),
            None => None,
        };
        let same = match known {
            Some(m)
                if m.dev == id.dev
                    && m.inode == id.inode
                    && m.len <= len
                    && m.max_depth == max_depth =>
            {
                crate::input::fingerprint_file(file, m.len)
                    .map_err(|e| Error::io(&self.log, "cannot read", e))?
                    == Some(m.fingerprint)
            }
            _ => false,
        };
        if !same {
            return self.rebuild(file, id, len, progress);
        }
        let from = known.map_or(0, |m| m.len);
        if from >= len {
            return Ok(Refreshed::default());
        }
        let conn = self.conn.as_mut().expect("connected above");
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| err(&self.path, e))?;
        // Another process may have gone further meanwhile.
        let from = match read_meta(&tx).map_err(|e| err(&self.path, e))? {
            Some(m) if m.dev == id.dev && m.inode == id.inode => m.len.max(from),
            _ => from,
        };
        if from >= len {
            return Ok(Refreshed::default());
        }
        let (end, records) = add_lines(
            &tx,
            &self.path,
            &self.log,
            file,
            from,
            len,
            self.max_depth,
            progress,
        )?;
        if end == from {
            return Ok(Refreshed::default());
        }
        let fingerprint = crate::input::fingerprint_file(file, end)
            .map_err(|e| Error::io(&self.log, "cannot read", e))?
            .unwrap_or(0);
        write_meta(
            &tx,
            Meta {
                dev: id.dev,
                inode: id.inode,
                len: end,
                fingerprint,
                max_depth,
            },
        )
        .map_err(|e| err(&self.path, e))?;
        tx.commit().map_err(|e| err(&self.path, e))?;
        Ok(Refreshed {
            rebuilt: false,
            bytes: end - from,
            records,
        })
    }

    /// Indexes the whole log into a new file, then renames it into place.
    fn rebuild(
        &mut self,
        file: &File,
        id: crate::input::FileIdentity,
        len: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Refreshed, Error> {
        self.conn = None;
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = self
            .path
            .with_file_name(format!(".{name}.build-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let built = (|| -> Result<(u64, u64), Error> {
            let mut conn = Connection::open(&tmp).map_err(|e| err(&tmp, e))?;
            conn.execute_batch(
                "PRAGMA journal_mode=OFF;
                 PRAGMA synchronous=OFF;
                 PRAGMA page_size=8192;
                 CREATE TABLE meta(k TEXT PRIMARY KEY, v INTEGER NOT NULL);
                 CREATE VIRTUAL TABLE words USING fts5(body, content='', tokenize='ascii');",
            )
            .map_err(|e| err(&tmp, e))?;
            let tx = conn.transaction().map_err(|e| err(&tmp, e))?;
            tx.execute(
                "INSERT INTO meta(k, v) VALUES('version', ?1)",
                params![VERSION],
            )
            .map_err(|e| err(&tmp, e))?;
            let (end, records) =
                add_lines(&tx, &tmp, &self.log, file, 0, len, self.max_depth, progress)?;
            let fingerprint = crate::input::fingerprint_file(file, end)
                .map_err(|e| Error::io(&self.log, "cannot read", e))?
                .unwrap_or(0);
            write_meta(
                &tx,
                Meta {
                    dev: id.dev,
                    inode: id.inode,
                    len: end,
                    fingerprint,
                    max_depth: self.max_depth as i64,
                },
            )
            .map_err(|e| err(&tmp, e))?;
            tx.commit().map_err(|e| err(&tmp, e))?;
            conn.execute_batch(
                "INSERT INTO words(words) VALUES('optimize'); PRAGMA journal_mode=WAL;",
            )
            .map_err(|e| err(&tmp, e))?;
            conn.close().map_err(|(_, e)| err(&tmp, e))?;
            Ok((end, records))
        })();
        let (end, records) = match built {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        for stale in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{stale}", self.path.display()));
        }
        std::fs::rename(&tmp, &self.path).map_err(|e| err(&self.path, e))?;
        Ok(Refreshed {
            rebuilt: true,
            bytes: end,
            records,
        })
    }

    /// The rows matching any of `words` (deduplicated, at least one), best
    /// first: (offset, score), the score being FTS5's BM25 negated (higher
    /// is better). `each` says whether to go on.
    pub(crate) fn matches(
        &mut self,
        words: &[String],
        each: &mut dyn FnMut(u64, f64) -> Result<bool, Error>,
    ) -> Result<(), Error> {
        let path = self.path.clone();
        let Some(conn) = self.connect() else {
            return Ok(());
        };
        let query = words
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" OR ");
        let mut stmt = conn
            .prepare_cached(
                "SELECT rowid, bm25(words) FROM words WHERE words MATCH ?1 ORDER BY rank, rowid",
            )
            .map_err(|e| err(&path, e))?;
        let mut rows = stmt.query(params![query]).map_err(|e| err(&path, e))?;
        while let Some(row) = rows.next().map_err(|e| err(&path, e))? {
            let offset: i64 = row.get(0).map_err(|e| err(&path, e))?;
            let rank: f64 = row.get(1).map_err(|e| err(&path, e))?;
            if !each(offset as u64, -rank)? {
                break;
            }
        }
        Ok(())
    }
}

/// (device, inode) of a file.
fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    let id = crate::input::identity_of(m);
    (id.dev, id.inode)
}

fn read_version(conn: &Connection) -> Option<i64> {
    conn.query_row("SELECT v FROM meta WHERE k = 'version'", [], |r| r.get(0))
        .optional()
        .ok()
        .flatten()
}

fn read_meta(conn: &Connection) -> rusqlite::Result<Option<Meta>> {
    let mut stmt = conn.prepare_cached("SELECT k, v FROM meta")?;
    let mut m = std::collections::HashMap::new();
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    for row in rows {
        let (k, v) = row?;
        m.insert(k, v);
    }
    let get = |k: &str| m.get(k).copied();
    Ok((|| {
        Some(Meta {
            dev: get("dev")? as u64,
            inode: get("inode")? as u64,
            len: get("len")? as u64,
            fingerprint: get("fingerprint")? as u64,
            max_depth: get("max_depth")?,
        })
    })())
}

fn write_meta(conn: &Connection, m: Meta) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached("INSERT OR REPLACE INTO meta(k, v) VALUES(?1, ?2)")?;
    for (k, v) in [
        ("dev", m.dev as i64),
        ("inode", m.inode as i64),
        ("len", m.len as i64),
        ("fingerprint", m.fingerprint as i64),
        ("max_depth", m.max_depth),
    ] {
        stmt.execute(params![k, v])?;
    }
    Ok(())
}

/// Indexes the whole lines of `log` in `from..len` (up to the last `\n`):
/// returns where they end and how many records were added. The lines are
/// read and split into words in parallel pieces while the writer inserts
/// the ones before.
#[allow(clippy::too_many_arguments)]
fn add_lines(
    conn: &Connection,
    index: &Path,
    log: &Path,
    file: &File,
    from: u64,
    len: u64,
    max_depth: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(u64, u64), Error> {
    use rayon::prelude::*;
    let mut insert = conn
        .prepare_cached("INSERT INTO words(rowid, body) VALUES(?1, ?2)")
        .map_err(|e| err(index, e))?;
    let total = len - from;
    let mut at = from;
    let mut records = 0u64;
    let group = PIECE * rayon::current_num_threads().max(1);
    let mut buf: Vec<u8> = Vec::new();
    while at < len {
        buf.clear();
        let want = (len - at).min(group as u64);
        crate::live::read_from(file, at, want, &mut buf)
            .map_err(|e| Error::io(log, "cannot read", e))?;
        let Some(last) = memchr::memrchr(b'\n', &buf) else {
            if (buf.len() as u64) < want || at + want >= len {
                break;
            }
            // A line longer than a group: read on until its end.
            let mut more = want;
            loop {
                more = (more * 2).min(len - at);
                buf.clear();
                crate::live::read_from(file, at, more, &mut buf)
                    .map_err(|e| Error::io(log, "cannot read", e))?;
                if memchr::memrchr(b'\n', &buf).is_some() || at + more >= len {
                    break;
                }
            }
            if memchr::memrchr(b'\n', &buf).is_none() {
                break;
            }
            continue;
        };
        let commit = last + 1;
        let start = if at == 0 {
            crate::input::lines::content_start(&buf)
        } else {
            0
        };
        let pieces = crate::input::lines::chunks(&buf[..commit], start..commit, PIECE);
        let docs: Vec<Vec<(u64, String)>> = pieces
            .par_iter()
            .map(|r| {
                let mut parser = LineParser::new(max_depth);
                let mut scratch = Scratch::default();
                let mut out = Vec::new();
                let mut pos = r.start;
                for line in buf[r.clone()].split_inclusive(|&b| b == b'\n') {
                    let trimmed = crate::input::lines::trim(line);
                    let line_at = pos + trimmed.start;
                    pos += line.len();
                    let line = &line[trimmed];
                    if line.is_empty() || parser.parse(line, 0).is_err() {
                        continue;
                    }
                    let mut body = String::new();
                    text::record_words(line, &mut scratch, |w| {
                        if !body.is_empty() {
                            body.push(' ');
                        }
                        body.push_str(w);
                    });
                    if !body.is_empty() {
                        out.push((at + line_at as u64, body));
                    }
                }
                out
            })
            .collect();
        for (offset, body) in docs.into_iter().flatten() {
            insert
                .execute(params![offset as i64, body])
                .map_err(|e| err(index, e))?;
            records += 1;
        }
        at += commit as u64;
        progress(at - from, total);
    }
    Ok((at, records))
}
