//! Appending records to a log by the rules the server's writer keeps, for
//! writers that are not the server: the Node.js and Python packages' own
//! `append()`, an embedder's tool.
//!
//! The rules are on [`append`].

use std::fs::{File, OpenOptions};
use std::io::{Seek, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::Error;
use crate::parse::{DEFAULT_MAX_DEPTH, LineParser, SkipReason};
use crate::select::fold::Guard;

/// Where one appended record went.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct AppendedRecord {
    /// Its `ts_ms`: as given, or the stamp written.
    pub ts_ms: f64,
    /// Whether [`append`] stamped it (it had no `ts_ms`).
    pub stamped: bool,
    /// Byte offset of its line in the log.
    pub offset: u64,
    /// Bytes of its line, the `\n` included.
    pub len: u64,
}

/// What one [`append`] wrote.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct AppendReport {
    /// Each record, in the order given.
    pub records: Vec<AppendedRecord>,
    /// Whether a `\n` was written first, to end a torn last line.
    pub newline_first: bool,
    /// The log's length after the append (as this writer saw it).
    pub log_len: u64,
}

/// Why [`append`] wrote nothing (or, for a failed sync, why it is not
/// known to be durable).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// Record `index` is not a record the log can hold; nothing was written.
    #[error("record {index}: {reason}")]
    InvalidRecord {
        /// Its index in the batch.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The batch holds no record.
    #[error("no records to append")]
    Empty,
    /// The log could not be opened, locked, read, written or synced.
    #[error(transparent)]
    Log(#[from] Error),
}

/// Times a batch glued to another writer's half line is written again.
const MAX_REWRITES: usize = 3;

/// How far back from the end the last record's `ts_ms` is looked for.
const TAIL_LIMIT: u64 = 16 << 20;

/// Appends `records` (each the text of one JSON object) to the log at
/// `path`, creating it if needed.
///
/// Writes a batch of records as whole lines with one `write`,
/// under the log's advisory lock (`flock(LOCK_EX)`, the lock `wmreplay
/// serve` takes around its own appends), so it never interleaves with the
/// server or with another [`append`]:
/// - **Checked first.** Each record must be one JSON object with a string
///   `type`; a `ts_ms`, when present, must be a number. One that is not
///   fails the whole batch ([`AppendError::InvalidRecord`], naming its
///   index) before the file is touched. Each is written compact, on one
///   line (whitespace outside strings dropped), otherwise as given, so
///   every line written is a record the replay parses.
/// - **Stamped.** A record without `ts_ms` gets one, first in the object:
///   the clock in milliseconds, but never below the `ts_ms` of the log's
///   last record (read back under the lock, so it accounts for every other
///   writer that takes the lock) nor below an earlier record of the same
///   batch. Replay order is then file order for stamped records, whatever
///   the clocks of the other writers did. A record with a `ts_ms` is written
///   as given: a record may arrive late, and the replay puts it in place.
/// - **Never glued to a torn line.** If the file's last byte is not `\n` (a
///   writer that crashed mid-line), the batch starts with one, so that line
///   stays a line of its own. A writer that does not take the lock and
///   writes half a line just before the batch is noticed after the write:
///   the batch is taken back out and written again after a `\n`.
/// - **Whole or not at all.** A write that fails part-way (disk full, a file
///   size limit, EIO) is cut back (`set_len`) to the file's length before
///   it, so no torn line is left.
/// - **Durable.** The file is synced (`fdatasync`) before [`append`]
///   returns. A sync that fails is an error, although the lines are in the
///   file (as with the server: an unacknowledged write may still be there).
///
/// Not covered, unlike the server's writer: a crash (`kill -9`, power cut)
/// in the middle of the one `write` can leave the batch's first lines and a
/// torn last one, which replays skip. The server journals its batches to
/// cut such a part back out after a crash; this function keeps no journal.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("wmreplay-doc-append-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let log = dir.join("working_memory.log");
/// // A torn last line, from a writer that crashed mid-line.
/// std::fs::write(&log, "{\"type\":\"wm_event\",\"ts_ms\":5000000000000}\n{\"type\":\"wm_ev")?;
///
/// let report = wmreplay::append(&log, &[
///     br#"{"type":"text_input","text":"hi"}"#.as_slice(),  // no ts_ms: stamped
///     b"{ \"type\": \"wm_event\", \"ts_ms\": 1 }",              // written as given, compact
/// ])?;
/// assert!(report.newline_first);
/// let first = report.records[0];
/// assert!(first.stamped && first.ts_ms >= 5e12); // never below the last record
/// let text = std::fs::read_to_string(&log)?;
/// assert!(text.ends_with("{\"type\":\"wm_ev\n{\"ts_ms\":5000000000000,\"type\":\"text_input\",\"text\":\"hi\"}\n\
///                         {\"type\":\"wm_event\",\"ts_ms\":1}\n"));
///
/// // A record that is not one writes nothing, and says which.
/// let e = wmreplay::append(&log, &[br#"{"type":"a"}"#.as_slice(), b"[1]"]).unwrap_err();
/// assert_eq!(e.to_string(), "record 1: not a JSON object");
/// assert_eq!(std::fs::read_to_string(&log)?, text);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn append<R: AsRef<[u8]>>(
    path: impl AsRef<Path>,
    records: &[R],
) -> Result<AppendReport, AppendError> {
    let report = append_guarded(path.as_ref(), records, None)?;
    Ok(report.expect("no guard to break"))
}

/// [`append`], under `guard` when there is one (a summary's):
/// `Ok(Err(offset))`, and nothing written, when the record at `offset`
/// breaks it. Checked under the lock, so no writer that takes the lock can
/// slip a record in between.
pub(crate) fn append_guarded<R: AsRef<[u8]>>(
    path: &Path,
    records: &[R],
    guard: Option<&Guard>,
) -> Result<Result<AppendReport, u64>, AppendError> {
    let checked = check_records(records)?;
    let file = open_for_append(path)?;
    let io = |op: &'static str| move |e: std::io::Error| Error::io(path, op, e);
    // Blocks while another writer holds the lock; released when `file` is
    // dropped (closed), whatever happens below.
    crate::os::lock_log(&file).map_err(io("cannot lock"))?;
    let written = write_locked(&file, path, &checked, guard)?;
    if written.is_ok() {
        file.sync_data().map_err(io("cannot sync"))?;
    }
    Ok(written)
}

/// Where `guard` is broken in `file` (its first `len` bytes), if it is.
pub(crate) fn guard_broken(file: &File, len: u64, guard: &Guard) -> std::io::Result<Option<u64>> {
    if len <= guard.since {
        return Ok(None);
    }
    let mut buf = vec![0u8; (len - guard.since) as usize];
    let n = crate::os::read_at(file, &mut buf, guard.since)?;
    buf.truncate(n);
    Ok(guard.broken_by(&buf))
}

/// A checked record: the compact line, and its `ts_ms` if it has one (a
/// line without one is an object's text, to be stamped).
struct Checked {
    line: Vec<u8>,
    ts_ms: Option<f64>,
}

/// Checks and compacts every record, before anything is written.
fn check_records<R: AsRef<[u8]>>(records: &[R]) -> Result<Vec<Checked>, AppendError> {
    if records.is_empty() {
        return Err(AppendError::Empty);
    }
    let mut parser = LineParser::new(DEFAULT_MAX_DEPTH);
    records
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let invalid = |reason: String| AppendError::InvalidRecord { index, reason };
            let raw = r.as_ref().trim_ascii();
            if raw.is_empty() {
                return Err(invalid("empty: not a JSON object".into()));
            }
            // Validated as written, then compacted: compacting text that
            // is not JSON could make it JSON (`1 2` would become `12`).
            let ts_ms = match parser.parse(raw, 0) {
                Ok(rec) => Some(rec.ts_ms()),
                Err(SkipReason::MissingTsMs) => None,
                Err(SkipReason::TsMsNotNumber) => {
                    return Err(invalid(
                        "\"ts_ms\" is not a number (leave it out to have it stamped)".into(),
                    ));
                }
                Err(reason) => return Err(invalid(reason.to_string())),
            };
            Ok(Checked {
                line: compact(raw),
                ts_ms,
            })
        })
        .collect()
}

/// JSON text without the whitespace outside its strings: one line.
pub(crate) fn compact(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in raw {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            out.push(b);
            in_string = b == b'"';
        }
    }
    out
}

/// Opens (creating if needed) the log for appending. A log that is there
/// must be a regular file: a FIFO or a device would block or never end (it
/// is opened without blocking, then refused).
fn open_for_append(path: &Path) -> Result<File, Error> {
    let mut options = OpenOptions::new();
    options.read(true).append(true).create(true);
    let existed = path.exists();
    let file = crate::os::open(&mut options, path, false, true)
        .map_err(|e| Error::io(path, "cannot open for appending", e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io(path, "cannot open for appending", e))?;
    if !meta.is_file() {
        return Err(Error::io(
            path,
            "cannot append",
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    if !existed {
        // The new file's directory entry is on disk with its first lines.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let _ = crate::os::sync_dir(dir);
    }
    Ok(file)
}

/// The write itself, with the lock held; `Err(offset)` when the record at
/// `offset` breaks `guard` (nothing written).
fn write_locked(
    file: &File,
    path: &Path,
    records: &[Checked],
    guard: Option<&Guard>,
) -> Result<Result<AppendReport, u64>, Error> {
    let io = |op: &'static str| move |e: std::io::Error| Error::io(path, op, e);
    let mut newline_first = false;
    for _ in 0..=MAX_REWRITES {
        let len = file.metadata().map_err(io("cannot read"))?.len();
        if let Some(g) = guard
            && let Some(at) = guard_broken(file, len, g).map_err(io("cannot read"))?
        {
            return Ok(Err(at));
        }
        let terminated =
            len == 0 || byte_at(file, len - 1).map_err(io("cannot read"))? == Some(b'\n');
        newline_first |= !terminated;
        let floor = last_ts_ms(file, len).map_err(io("cannot read"))?;
        let (buf, mut report) = render(records, newline_first, floor, now_ms());
        let mut f = file;
        let end = match f.write_all(&buf).and_then(|()| f.stream_position()) {
            Ok(end) => end,
            Err(e) => {
                // Cut back to where it was: no torn line is left. If that
                // fails too, the next append still starts a new line (it
                // looks at the last byte).
                let _ = file.set_len(len);
                return Err(Error::io(path, "cannot append", e));
            }
        };
        // Opened for appending: the write went to the end, wherever that
        // was by then, and left the position just past it.
        let start = end - buf.len() as u64;
        if start == len {
            report.shift(start);
            return Ok(Ok(report));
        }
        // Someone who does not take the lock wrote between the look at the
        // end and the write.
        let glued = !newline_first
            && start > 0
            && byte_at(file, start - 1).map_err(io("cannot read"))? != Some(b'\n');
        if !glued {
            report.shift(start);
            return Ok(Ok(report));
        }
        // Their bytes do not end a line, so the first record is glued to
        // them: take the batch back out when nothing follows it, and write
        // it again after a `\n`.
        if file.metadata().map_err(io("cannot read"))?.len() == end {
            file.set_len(start).map_err(io("cannot cut back"))?;
        }
        newline_first = true;
    }
    Err(Error::io(
        path,
        "cannot append",
        std::io::Error::other("another process keeps writing partial lines to the log"),
    ))
}

impl AppendReport {
    /// Moves offsets relative to the batch to offsets in the log.
    fn shift(&mut self, start: u64) {
        for r in &mut self.records {
            r.offset += start;
        }
        self.log_len += start;
    }
}

/// The batch's bytes (offsets relative to its start): a `\n` first when
/// asked, then each record's line, stamped with `now` but never below
/// `floor` nor an earlier record's `ts_ms`.
fn render(
    records: &[Checked],
    newline_first: bool,
    floor: Option<f64>,
    now: u64,
) -> (Vec<u8>, AppendReport) {
    let size: usize = records.iter().map(|r| r.line.len() + 32).sum();
    let mut buf = Vec::with_capacity(size + 1);
    if newline_first {
        buf.push(b'\n');
    }
    let mut floor = floor.unwrap_or(f64::NEG_INFINITY);
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let start = buf.len();
        let (ts_ms, stamped) = match r.ts_ms {
            Some(ts) => {
                buf.extend_from_slice(&r.line);
                (ts, false)
            }
            None => {
                // At least the floor, as an integer (saturating: a floor
                // beyond 2^64 ms, or infinite, stamps u64::MAX).
                let ts = if floor > now as f64 {
                    floor.ceil() as u64
                } else {
                    now
                };
                buf.extend_from_slice(b"{\"ts_ms\":");
                buf.extend_from_slice(itoa::Buffer::new().format(ts).as_bytes());
                let rest = &r.line[1..];
                if rest != b"}" {
                    buf.push(b',');
                }
                buf.extend_from_slice(rest);
                (ts as f64, true)
            }
        };
        buf.push(b'\n');
        if ts_ms > floor {
            floor = ts_ms;
        }
        out.push(AppendedRecord {
            ts_ms,
            stamped,
            offset: start as u64,
            len: (buf.len() - start) as u64,
        });
    }
    let report = AppendReport {
        records: out,
        newline_first,
        log_len: buf.len() as u64,
    };
    (buf, report)
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The byte at `offset`, if the file has one there.
pub(crate) fn byte_at(file: &File, offset: u64) -> std::io::Result<Option<u8>> {
    let mut b = [0u8; 1];
    Ok((crate::os::read_at(file, &mut b, offset)? == 1).then_some(b[0]))
}

/// The `ts_ms` of the last record in the first `len` bytes of `file`: the
/// last line that is a record (a torn last line counts, if it parses: the
/// append ends it with a `\n`). Looks back at most [`TAIL_LIMIT`] bytes;
/// `None` if no record ends within them.
pub(crate) fn last_ts_ms(file: &File, len: u64) -> std::io::Result<Option<f64>> {
    let mut parser = LineParser::new(DEFAULT_MAX_DEPTH);
    let mut window = 64 << 10;
    loop {
        let from = len.saturating_sub(window);
        let mut buf = vec![0u8; (len - from) as usize];
        let n = crate::os::read_at(file, &mut buf, from)?;
        buf.truncate(n);
        // The first line of the window is whole only if the window starts
        // the file.
        let whole = if from == 0 {
            &buf[..]
        } else {
            match memchr::memchr(b'\n', &buf) {
                Some(i) => &buf[i + 1..],
                None => &[][..],
            }
        };
        for line in whole.rsplit(|&b| b == b'\n') {
            let line = line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            if let Ok(r) = parser.parse(line, 0) {
                return Ok(Some(r.ts_ms()));
            }
        }
        if from == 0 || window >= TAIL_LIMIT {
            return Ok(None);
        }
        window = (window * 4).min(TAIL_LIMIT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(records: &[&[u8]]) -> Vec<Checked> {
        check_records(records).unwrap()
    }

    #[test]
    fn stamps_are_never_below_the_floor_or_an_earlier_record() {
        let recs = checked(&[
            br#"{"type":"a"}"#,
            br#"{"type":"b","ts_ms":900}"#,
            b"{\"type\":\"c\"}",
        ]);
        let (buf, report) = render(&recs, false, Some(100.5), 50);
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(
            text,
            "{\"ts_ms\":101,\"type\":\"a\"}\n{\"type\":\"b\",\"ts_ms\":900}\n{\"ts_ms\":900,\"type\":\"c\"}\n"
        );
        let ts: Vec<f64> = report.records.iter().map(|r| r.ts_ms).collect();
        assert_eq!(ts, [101.0, 900.0, 900.0]);
        // The clock wins when it is ahead.
        let (buf, _) = render(&recs[..1], true, Some(10.0), 50);
        assert_eq!(buf, b"\n{\"ts_ms\":50,\"type\":\"a\"}\n");
    }

    #[test]
    fn records_are_checked_and_compacted() {
        let recs = checked(&[b" {\n \"type\" : \"a b\\\" c\" ,\t\"x\" : [ 1 , 2 ] }\r\n"]);
        assert_eq!(recs[0].line, b"{\"type\":\"a b\\\" c\",\"x\":[1,2]}");
        for (bad, why) in [
            (&b"{\"type\":\"a\",\"ts_ms\":1 2}"[..], "invalid JSON"),
            (
                b"{\"type\":\"a\",\"ts_ms\":\"1\"}",
                "\"ts_ms\" is not a number",
            ),
            (b"{\"ts_ms\":1}", "no \"type\" member"),
            (b"{\"type\":1}", "\"type\" is not a string"),
            (b"[]", "not a JSON object"),
            (b"  ", "empty"),
        ] {
            let e = check_records(&[&br#"{"type":"ok"}"#[..], bad])
                .err()
                .unwrap();
            let text = e.to_string();
            assert!(text.starts_with("record 1: "), "{text}");
            assert!(text.contains(why), "{text}");
        }
        assert!(matches!(
            check_records::<&[u8]>(&[]),
            Err(AppendError::Empty)
        ));
    }

    #[test]
    fn the_last_records_ts_ms_is_found_behind_junk_and_long_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wm.log");
        let mut log = b"{\"type\":\"a\",\"ts_ms\":7}\n".to_vec();
        log.extend_from_slice(&vec![b'x'; 200 << 10]);
        log.extend_from_slice(b"\nnot json\n\n{\"type\":\"b\"}\n{\"type\":");
        std::fs::write(&p, &log).unwrap();
        let f = File::open(&p).unwrap();
        assert_eq!(last_ts_ms(&f, log.len() as u64).unwrap(), Some(7.0));
        std::fs::write(&p, b"").unwrap();
        assert_eq!(last_ts_ms(&File::open(&p).unwrap(), 0).unwrap(), None);
    }

    #[test]
    fn compacting_keeps_strings_and_drops_the_rest_of_the_whitespace() {
        let raw = b"{ \"type\" : \"a b\\\" c\\n\",\n\t\"x\" : [ 1 , 2 ] }";
        assert_eq!(
            compact(raw),
            b"{\"type\":\"a b\\\" c\\n\",\"x\":[1,2]}".to_vec()
        );
        assert_eq!(compact(br#"{"k":"\\"}"#), br#"{"k":"\\"}"#.to_vec());
    }
}
