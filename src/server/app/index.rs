//! The log as the inspector page reads it (`GET …/timeline`): every
//! record as the engine parsed it, in replay order, with its kind, kept up
//! to date as the log grows. A turn's view makes a replay of the records
//! before its point (`Replay::of_records`) rather than parse them again.
//!
//! The rows come from the engine's own parse ([`crate::parse_range`]) and
//! order (`ts_ms` as a double, ties in file order): the same records, in
//! the same order, as a replay of the whole log — not the server's live
//! state, which holds only what its selection replays (filters, a
//! summary's covered records and facts left out). Built on the page's
//! first request for the log, then only appended bytes are parsed; a log
//! that shrank, was replaced or rewritten is indexed afresh. 40 bytes a
//! record: 40 MB for a million.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use crate::order::ts_key;
use crate::parse::Record;
use crate::replay::ReplayOptions;

/// Bytes of the log parsed at a time when much is new: the records of one
/// slice and its mapped pages are all the index holds beside its rows.
const SLICE: usize = 64 << 20;

/// Where the slice of `all` from `from` ends: after its last line end
/// within `slice` bytes (after the first one past them for a longer line),
/// or at the end of `all`.
fn slice_end(all: &[u8], from: usize, slice: usize) -> usize {
    let to = from.saturating_add(slice.max(1)).min(all.len());
    if to == all.len() {
        return to;
    }
    match memchr::memrchr(b'\n', &all[from..to]) {
        Some(i) => from + i + 1,
        None => memchr::memchr(b'\n', &all[to..]).map_or(all.len(), |i| to + i + 1),
    }
}

/// One record as the engine parsed it (its offset the log's), and its
/// kind (an index into [`LogIndex::kinds`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) rec: Record,
    pub(crate) kind: u16,
}

impl Row {
    /// The sort key: `ts_ms` as the order compares it.
    pub(crate) fn key(&self) -> u64 {
        ts_key(self.rec.ts_ms())
    }

    /// The line's byte offset in the log.
    pub(crate) fn offset(&self) -> u64 {
        self.rec.offset
    }

    /// The line's length when the parse read it as written; 0 when it is
    /// not known (records re-serialised as JavaScript reads them).
    pub(crate) fn len(&self) -> u32 {
        self.rec.len
    }

    fn order(&self) -> (u64, u64) {
        (self.key(), self.rec.offset)
    }
}

/// Kinds past this many distinct ones share one name.
const MAX_KINDS: usize = 4096;
/// The shared name of kinds past [`MAX_KINDS`].
pub(crate) const OTHER_KINDS: &str = "(other kinds)";

#[derive(Debug, Default)]
pub(crate) struct LogIndex {
    identity: Option<(u64, u64)>,
    /// Bytes parsed: up to and including the last `\n`.
    committed: u64,
    /// Physical lines in the committed bytes.
    lines: u64,
    fingerprint: u64,
    seen: Option<(u64, crate::input::Stamp)>,
    pub(crate) rows: Vec<Row>,
    /// Kind names (escapes decoded, as the engine compares them), by id.
    pub(crate) kinds: Vec<String>,
    /// The file the rows are of: every read of a row's line goes through
    /// it, so that a log replaced meanwhile is never read at the old
    /// offsets (the next refresh notices the change and starts afresh).
    file: Option<Arc<File>>,
    /// Times the index was built afresh.
    pub(crate) rebuilds: u64,
    /// Whether the rows are the engine's records as they are (a replay can
    /// be made of them): not when records are re-serialised (the
    /// JavaScript record mode), whose offsets point elsewhere.
    exact: bool,
}

impl LogIndex {
    /// The log's bytes parsed so far.
    pub(crate) fn committed(&self) -> u64 {
        self.committed
    }

    /// Lets the rows go: the next refresh builds the index afresh (its rows
    /// were found not to be the log's bytes).
    pub(crate) fn forget(&mut self) {
        *self = LogIndex {
            rebuilds: self.rebuilds + 1,
            ..LogIndex::default()
        };
    }

    /// What the inspector's tail watches: the records, the bytes parsed,
    /// and how many times the index was built afresh.
    pub(crate) fn watched(&self) -> (usize, u64, u64) {
        (self.rows.len(), self.committed, self.rebuilds)
    }

    /// The file the rows were read from, if the log exists (and the handle
    /// was not let go since the last refresh).
    pub(crate) fn file(&self) -> Option<Arc<File>> {
        self.file.clone()
    }

    /// Lets go of the handle on the log (the log's files are closed under
    /// `--max-open-logs`): the next refresh opens the log again and checks
    /// that it is the same file, as it does at every refresh.
    pub(crate) fn close_file(&mut self) {
        self.file = None;
    }

    /// The id of a kind name, if any record has it.
    pub(crate) fn kind_id(&self, name: &str) -> Option<u16> {
        self.kinds.iter().position(|k| k == name).map(|i| i as u16)
    }

    /// The row of the record whose line starts at `offset`, by its index.
    pub(crate) fn find(&self, key: u64, offset: u64) -> Option<usize> {
        let i = self.rows.partition_point(|r| r.order() < (key, offset));
        (self.rows.get(i)?.offset() == offset).then_some(i)
    }

    /// The records of the log's bytes before `offset`, in replay order
    /// (those a replay of that prefix finds), if the rows are the engine's
    /// records as they are.
    pub(crate) fn records_before(&self, offset: u64) -> Option<Vec<Record>> {
        (self.exact || self.rows.is_empty()).then(|| {
            self.rows
                .iter()
                .filter(|r| r.rec.offset < offset)
                .map(|r| r.rec)
                .collect()
        })
    }

    /// The first row with a `ts_ms` at least `ts`.
    pub(crate) fn first_at(&self, ts: f64) -> usize {
        let k = ts_key(ts);
        self.rows.partition_point(|r| r.key() < k)
    }

    /// The first row with a `ts_ms` above `ts`.
    pub(crate) fn first_after(&self, ts: f64) -> usize {
        let k = ts_key(ts);
        self.rows.partition_point(|r| r.key() <= k)
    }

    /// Brings the index up to date with the file at `path`: returns
    /// whether it changed.
    pub(crate) fn refresh(
        &mut self,
        path: &Path,
        options: &ReplayOptions,
    ) -> Result<bool, crate::Error> {
        let Some((file, meta)) = crate::input::open_regular(path, options.refuse_links)? else {
            let had = self.identity.is_some();
            *self = LogIndex {
                rebuilds: self.rebuilds + u64::from(had),
                ..LogIndex::default()
            };
            return Ok(had);
        };
        let id = crate::input::identity_of(&meta);
        let seen = (meta.len(), crate::input::Stamp::of(&meta));
        let mut fresh = self.identity != Some((id.dev, id.inode)) || meta.len() < self.committed;
        if !fresh && self.committed > 0 && self.seen != Some(seen) {
            let now = crate::input::fingerprint_file(&file, self.committed)
                .map_err(|e| crate::Error::io(path, "cannot read", e))?;
            fresh = now != Some(self.fingerprint);
        }
        if fresh {
            let had = self.identity.is_some();
            *self = LogIndex {
                rebuilds: self.rebuilds + u64::from(had),
                identity: Some((id.dev, id.inode)),
                ..LogIndex::default()
            };
        }
        self.seen = Some(seen);
        if meta.len() <= self.committed {
            self.file.get_or_insert_with(|| Arc::new(file));
            return Ok(fresh);
        }
        let want = meta.len() - self.committed;
        let grew = if want > SLICE as u64 {
            // Much to read (the whole log, the first time): mapped (from
            // this very file), parsed a slice at a time, each slice's pages
            // let go once its records are placed, so the map never holds
            // the log's pages resident all at once.
            let clone = file
                .try_clone()
                .map_err(|e| crate::Error::io(path, "cannot read", e))?;
            let bytes = crate::LogBytes::of_file(path, clone, &meta, crate::ReadMode::Auto)?;
            let grew =
                self.absorb_slices(bytes.bytes(), SLICE, options, &|r| bytes.release_range(r));
            bytes.verify()?;
            grew
        } else {
            let mut buf = vec![0u8; want as usize];
            crate::os::read_exact_at(&file, &mut buf, self.committed)
                .map_err(|e| crate::Error::io(path, "cannot read", e))?;
            self.absorb(&buf, options)
        };
        if grew {
            self.fingerprint = crate::input::fingerprint_file(&file, self.committed)
                .map_err(|e| crate::Error::io(path, "cannot read", e))?
                .unwrap_or(0);
        }
        self.file = Some(Arc::new(file));
        Ok(fresh || grew)
    }

    /// [`Self::absorb`] of `all` (the whole log) from `committed` on, a
    /// `slice` at a time, each slice handed to `done` once placed.
    fn absorb_slices(
        &mut self,
        all: &[u8],
        slice: usize,
        options: &ReplayOptions,
        done: &dyn Fn(std::ops::Range<usize>),
    ) -> bool {
        let mut from = usize::try_from(self.committed)
            .unwrap_or(usize::MAX)
            .min(all.len());
        let mut grew = false;
        while from < all.len() {
            let end = slice_end(all, from, slice);
            grew |= self.absorb(&all[from..end], options);
            done(from..end);
            from = end;
        }
        grew
    }

    /// Parses `bytes` (the log from `committed` on) up to their last `\n`
    /// and places their records.
    fn absorb(&mut self, bytes: &[u8], options: &ReplayOptions) -> bool {
        let Some(end) = memchr::memrchr(b'\n', bytes).map(|i| i + 1) else {
            return false;
        };
        // A log's first bytes may be a UTF-8 BOM, which the replay skips.
        let start = if self.committed == 0 {
            crate::input::lines::content_start(bytes).min(end)
        } else {
            0
        };
        let parsed =
            crate::replay::parse_range(bytes, start..end, self.lines + 1, options, &|_| {});
        let data = parsed.arena.as_deref().unwrap_or(bytes);
        let base = self.committed;
        let first_new = self.rows.len();
        if first_new == 0 {
            self.exact = parsed.arena.is_none();
        }
        for r in parsed.records.iter().chain(parsed.late.iter()) {
            let kind = if r.kind_escaped() {
                self.kind_of(r.kind(data).as_bytes())
            } else {
                self.kind_of(r.kind_raw(data))
            };
            let mut rec = *r;
            match &parsed.arena {
                // Where the line is, only: the record's bytes are not the
                // log's.
                Some(a) => {
                    rec.offset = base + crate::replay::arena_origin(a, r.offset());
                    rec.len = 0;
                }
                None => rec.offset += base,
            }
            self.rows.push(Row { rec, kind });
        }
        // Keep the order: the new rows sorted among themselves, then, if
        // any is older than a row held, the tail from the first row they
        // belong before.
        let new = &mut self.rows[first_new..];
        new.sort_unstable_by_key(Row::order);
        if let Some(first) = new.first().copied() {
            let at = self.rows[..first_new].partition_point(|r| r.order() < first.order());
            if at < first_new {
                self.rows[at..].sort_unstable_by_key(Row::order);
            }
        }
        self.committed += end as u64;
        self.lines += parsed.lines;
        true
    }

    fn kind_of(&mut self, raw: &[u8]) -> u16 {
        if let Some(i) = self.kinds.iter().position(|k| k.as_bytes() == raw) {
            return i as u16;
        }
        if self.kinds.len() >= MAX_KINDS {
            return match self.kind_id(OTHER_KINDS) {
                Some(i) => i,
                None => {
                    self.kinds.push(OTHER_KINDS.into());
                    (self.kinds.len() - 1) as u16
                }
            };
        }
        self.kinds.push(String::from_utf8_lossy(raw).into_owned());
        (self.kinds.len() - 1) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_of(path: &Path) -> LogIndex {
        let mut idx = LogIndex::default();
        idx.refresh(path, &ReplayOptions::default()).unwrap();
        idx
    }

    #[test]
    fn rows_are_the_replay_order_and_grow_with_appends() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("w.log");
        std::fs::write(
            &log,
            "{\"type\":\"text_input\",\"ts_ms\":5,\"text\":\"a\"}\nnot json\n{\"type\":\"note\",\"ts_ms\":2}\n",
        )
        .unwrap();
        let mut idx = index_of(&log);
        let kinds: Vec<_> = idx
            .rows
            .iter()
            .map(|r| idx.kinds[r.kind as usize].clone())
            .collect();
        assert_eq!(kinds, ["note", "text_input"]);
        assert_eq!(idx.rows[1].offset(), 0);
        // A late record and one without its newline yet.
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        use std::io::Write;
        f.write_all(b"{\"type\":\"late\",\"ts_ms\":3}\n{\"type\":\"x\",\"ts_ms\":9}")
            .unwrap();
        assert!(idx.refresh(&log, &ReplayOptions::default()).unwrap());
        let order: Vec<_> = idx
            .rows
            .iter()
            .map(|r| idx.kinds[r.kind as usize].as_str())
            .collect();
        assert_eq!(order, ["note", "late", "text_input"]);
        let whole = std::fs::read(&log).unwrap();
        let late = idx.rows[1];
        assert_eq!(
            &whole[late.offset() as usize..][..late.len() as usize],
            b"{\"type\":\"late\",\"ts_ms\":3}"
        );
        assert_eq!(idx.find(late.key(), late.offset()), Some(1));
        // A rewrite of the same length is noticed.
        std::fs::write(
            &log,
            whole
                .iter()
                .map(|&b| if b == b'a' { b'b' } else { b })
                .collect::<Vec<_>>(),
        )
        .unwrap();
        idx.refresh(&log, &ReplayOptions::default()).unwrap();
        assert_eq!(idx.rebuilds, 1);
        assert_eq!(idx.rows.len(), 3);
    }

    #[test]
    fn a_log_indexed_in_slices_is_indexed_as_in_one() {
        let mut log = Vec::new();
        log.extend_from_slice("\u{feff}".as_bytes());
        for i in 0..300u32 {
            // Late records, long lines, bad lines, kinds escaped.
            let ts = if i % 7 == 0 { i / 2 } else { i };
            let pad = "x".repeat((i % 13) as usize * 9);
            log.extend_from_slice(
                format!(
                    "{{\"type\":\"k\\u0031{}\",\"ts_ms\":{ts},\"t\":\"{pad}\"}}\n",
                    i % 3
                )
                .as_bytes(),
            );
            if i % 50 == 0 {
                log.extend_from_slice(b"not json\n");
            }
        }
        log.extend_from_slice(b"{\"type\":\"torn\"");
        let options = ReplayOptions::default();
        let mut whole = LogIndex::default();
        assert!(whole.absorb(&log, &options));
        let rows = |i: &LogIndex| -> Vec<(u64, u64, u32, String)> {
            i.rows
                .iter()
                .map(|r| {
                    (
                        r.key(),
                        r.offset(),
                        r.len(),
                        i.kinds[r.kind as usize].clone(),
                    )
                })
                .collect()
        };
        for slice in [1, 5, 64, 200, 4096] {
            let mut sliced = LogIndex::default();
            let seen = std::cell::RefCell::new(Vec::new());
            assert!(sliced.absorb_slices(&log, slice, &options, &|r| seen.borrow_mut().push(r)));
            assert_eq!(rows(&sliced), rows(&whole), "slice {slice}");
            assert_eq!(
                (sliced.committed, sliced.lines),
                (whole.committed, whole.lines)
            );
            // Every byte handed back once, in order, ending with the log.
            let seen = seen.into_inner();
            assert!(seen.windows(2).all(|w| w[0].end == w[1].start));
            assert_eq!((seen[0].start, seen.last().unwrap().end), (0, log.len()));
        }
    }
}
