//! The local cache of one subject: the log's bytes in sequence order, the
//! sidecar (`.jsseq`: the sequence and length applied, written after the
//! bytes, and the index's format) and the index (`.jsidx`: each message's
//! sequence, offset and checksum, `xxh3_64` of its bytes). A cache is
//! checked against its checksums when a process first opens it: one edited
//! in place while its replica was stopped is rebuilt from the stream.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::super::Appended;

/// `path` with `suffix` appended to its name.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_os_string();
    p.push(suffix);
    PathBuf::from(p)
}

/// Opens (creating if needed) one of the cache's files to read and write in
/// place; a symbolic link there is refused.
fn open_rw(path: &Path) -> io::Result<std::fs::File> {
    crate::os::open(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
        path,
        true,
        false,
    )
}

/// Message ids of the newest messages applied, with where each went.
const REMEMBERED: usize = 4096;

/// A message applied, as the cache remembers it: its id, where its bytes
/// went in the file (read back when asked for: a batch of records may be
/// a quarter of a MiB, and thousands of logs' caches may be open), and
/// the headers a keyed or named batch carries (the hash of the request
/// that wrote it, and what else it said).
#[derive(Debug, Clone)]
pub(super) struct Remembered {
    pub(super) id: String,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) body: Option<String>,
    pub(super) meta: Option<String>,
}

/// The headers of a message the cache keeps beside its bytes.
#[derive(Debug, Clone, Default)]
pub(super) struct Tags {
    pub(super) body: Option<String>,
    pub(super) meta: Option<String>,
}

/// The local copy of one subject.
pub(super) struct Cache {
    /// The log file (the sidecar and the index are beside it).
    path: PathBuf,
    pub(super) file: std::fs::File,
    /// Bytes applied (the file may be longer only after a crash).
    pub(super) len: u64,
    /// Stream sequence of the last message applied (0: none).
    pub(super) seq: u64,
    /// The newest `ts_ms` written, so the clock never goes back.
    pub(super) last_ts: u64,
    /// The newest messages with an id.
    recent: VecDeque<Remembered>,
    /// `DIR/{id}.log.jsidx`: for each message applied, its stream sequence
    /// and offset (16 bytes, little-endian), so a message is found by its
    /// sequence (a duplicate ack names only that).
    index: std::fs::File,
    /// Entries in `index`.
    entries: u64,
}

/// Bytes of an index entry: sequence, offset, checksum.
const ENTRY: u64 = 24;

/// The sidecar's last field: the index's format (entries with checksums).
const FORMAT: &str = "2";

impl Cache {
    fn entry(&self, i: u64) -> io::Result<(u64, u64)> {
        self.entry_sum(i).map(|(s, o, _)| (s, o))
    }

    fn entry_sum(&self, i: u64) -> io::Result<(u64, u64, u64)> {
        let mut b = [0u8; ENTRY as usize];
        crate::os::read_exact_at(&self.index, &mut b, i * ENTRY)?;
        let n = |r: std::ops::Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
        Ok((n(0..8), n(8..16), n(16..24)))
    }

    /// Whether every message's bytes still have the checksum they were
    /// applied with (read once, front to back); the first that does not,
    /// otherwise.
    fn verify(&self) -> io::Result<Option<u64>> {
        let mut buf = Vec::new();
        for i in 0..self.entries {
            let (seq, off, sum) = self.entry_sum(i)?;
            let end = if i + 1 < self.entries {
                self.entry(i + 1)?.1
            } else {
                self.len
            };
            buf.resize(end.saturating_sub(off) as usize, 0);
            crate::os::read_exact_at(&self.file, &mut buf, off)?;
            if xxhash_rust::xxh3::xxh3_64(&buf) != sum {
                return Ok(Some(seq));
            }
        }
        Ok(None)
    }

    /// The offset and bytes of the message of sequence `seq`, if applied.
    pub(super) fn message(&self, seq: u64) -> io::Result<Option<(u64, Vec<u8>)>> {
        let (mut lo, mut hi) = (0, self.entries);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (s, off) = self.entry(mid)?;
            if s == seq {
                let end = if mid + 1 < self.entries {
                    self.entry(mid + 1)?.1
                } else {
                    self.len
                };
                return Ok(Some((off, self.bytes_at(off, end - off)?)));
            }
            if s < seq {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(None)
    }

    /// Empties the cache (to be rebuilt from the stream).
    pub(super) fn reset(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.index.set_len(0)?;
        self.len = 0;
        self.seq = 0;
        self.entries = 0;
        self.recent.clear();
        Ok(())
    }
}

/// Where the lines of a message at `offset` went.
pub(super) fn appended_in(offset: u64, payload: &[u8]) -> Vec<Appended> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for line in payload.split_inclusive(|b| *b == b'\n') {
        let ts = serde_json::from_slice::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("ts_ms").and_then(serde_json::Value::as_u64));
        out.push(Appended {
            ts_ms: ts,
            offset: offset + at as u64,
            len: line.len() as u64,
        });
        at += line.len();
    }
    out
}

impl Cache {
    fn seq_path(&self) -> PathBuf {
        beside(&self.path, ".jsseq")
    }

    /// The cache of the log at `path`, as its sidecar says, cut back or
    /// rebuilt as needed.
    pub(super) fn open(path: &Path) -> io::Result<Cache> {
        let seq_path = beside(path, ".jsseq");
        // A log file from before --jetstream (no sidecar) is not a cache:
        // it is moved aside, never cut.
        if !seq_path.exists() && std::fs::symlink_metadata(path).is_ok_and(|m| m.len() > 0) {
            let aside = beside(path, ".before-jetstream");
            std::fs::rename(path, &aside)?;
            tracing::warn!(
                log = %path.display(),
                moved_to = %aside.display(),
                "a log without a JetStream sidecar was moved aside; the stream is the log now"
            );
        }
        let file = open_rw(path)?;
        let on_disk = file.metadata()?.len();
        // A sidecar of another format (an index without checksums): the
        // cache is rebuilt from the stream.
        let kept = std::fs::read_to_string(&seq_path).ok().and_then(|s| {
            let mut it = s.split_whitespace();
            let seq = it.next()?.parse::<u64>().ok()?;
            let len = it.next()?.parse::<u64>().ok()?;
            (it.next() == Some(FORMAT)).then_some((seq, len))
        });
        let (seq, len) = match kept {
            Some((seq, len)) if len <= on_disk => (seq, len),
            // No sidecar, or bytes missing: rebuilt from the stream.
            _ => (0, 0),
        };
        if on_disk != len {
            file.set_len(len)?;
        }
        let index = open_rw(&beside(path, ".jsidx"))?;
        let last_ts = crate::append::last_ts_ms(&file, len)?
            .map_or(0, |t| t.ceil().min(u64::MAX as f64) as u64);
        let entries = index.metadata()?.len() / ENTRY;
        let mut c = Cache {
            path: path.to_path_buf(),
            file,
            len,
            seq,
            last_ts,
            recent: VecDeque::new(),
            index,
            entries,
        };
        // Entries past what the sidecar says were applied are cut; an index
        // that does not end at the sidecar's sequence is not trusted.
        while c.entries > 0 && c.entry(c.entries - 1)?.1 >= c.len {
            c.entries -= 1;
        }
        c.index.set_len(c.entries * ENTRY)?;
        let consistent = match c.entries {
            0 => c.seq == 0,
            n => c.entry(n - 1)?.0 == c.seq,
        };
        if !consistent {
            tracing::warn!(log = %path.display(), "the cache's index does not match its sidecar; rebuilding it");
            c.reset()?;
        } else if let Some(seq) = c.verify()? {
            tracing::warn!(log = %path.display(), sequence = seq,
                "a message of the cache does not match its checksum (the file was changed); rebuilding it from the stream");
            c.reset()?;
        }
        Ok(c)
    }

    fn save_seq(&self) -> io::Result<()> {
        // One short write of a fixed width: never torn.
        let text = format!("{:>20} {:>20} {FORMAT}\n", self.seq, self.len);
        let mut f = crate::os::open(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false),
            &self.seq_path(),
            true,
            false,
        )?;
        f.write_all(text.as_bytes())
    }

    /// Applies one message at the cache's end.
    pub(super) fn apply(
        &mut self,
        sequence: u64,
        id: Option<&str>,
        tags: Tags,
        mut payload: bytes::Bytes,
    ) -> io::Result<()> {
        let offset = self.len;
        if payload.last().is_some_and(|b| *b != b'\n') {
            let mut v = payload.to_vec();
            v.push(b'\n');
            payload = bytes::Bytes::from(v);
        }
        crate::os::write_all_at(&self.file, &payload, offset)?;
        let mut entry = [0u8; ENTRY as usize];
        entry[..8].copy_from_slice(&sequence.to_le_bytes());
        entry[8..16].copy_from_slice(&offset.to_le_bytes());
        entry[16..].copy_from_slice(&xxhash_rust::xxh3::xxh3_64(&payload).to_le_bytes());
        crate::os::write_all_at(&self.index, &entry, self.entries * ENTRY)?;
        self.entries += 1;
        self.len += payload.len() as u64;
        self.seq = sequence;
        if let Some(ts) = crate::append::last_ts_ms(&self.file, self.len)? {
            self.last_ts = self.last_ts.max(ts.ceil().min(u64::MAX as f64) as u64);
        }
        if let Some(id) = id {
            if self.recent.len() >= REMEMBERED {
                self.recent.pop_front();
            }
            self.recent.push_back(Remembered {
                id: id.to_string(),
                offset,
                len: payload.len() as u64,
                body: tags.body,
                meta: tags.meta,
            });
        }
        self.save_seq()
    }

    /// Where the message with id `id` went, if the cache remembers it.
    pub(super) fn found(&self, id: &str) -> Option<Remembered> {
        self.recent.iter().rev().find(|r| r.id == id).cloned()
    }

    /// The bytes of a remembered message, read from the file.
    pub(super) fn bytes_of(&self, r: &Remembered) -> io::Result<Vec<u8>> {
        self.bytes_at(r.offset, r.len)
    }

    /// `len` bytes of the file from `offset`.
    fn bytes_at(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len as usize];
        crate::os::read_exact_at(&self.file, &mut buf, offset)?;
        Ok(buf)
    }
}
