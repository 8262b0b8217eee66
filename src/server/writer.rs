//! The single writer: one thread owns the log file and appends whole lines,
//! in the order requests reach it. Concurrent requests therefore never
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
//! Each job is acknowledged twice: once written (its offsets known), and
//! once durable (after `fsync`, shared by every job written in one round).
//! The respond path replays the log up to a turn's own line between the
//! two, so it never waits for a disk flush while it holds the replay.

use std::fs::{File, OpenOptions};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};

/// Jobs written in one round, before one shared `fsync`.
const MAX_ROUND: usize = 256;
/// Times a record glued to another writer's half line is written again.
const MAX_REWRITES: usize = 3;

/// One line to append: `prefix`, then (when `stamp`) the `ts_ms` the writer
/// assigns, then `suffix`. The writer adds the `\n`.
#[derive(Debug, Clone)]
pub struct Line {
    prefix: Vec<u8>,
    stamp: bool,
    suffix: Vec<u8>,
}

impl Line {
    /// A chat turn: `{"type":KIND,"ts_ms":…,"session_id":…,"text":…}`, plus
    /// `"stop_reason"` when given.
    pub fn turn(
        kind: &str,
        session_id: Option<&str>,
        text: &str,
        stop_reason: Option<&str>,
    ) -> Line {
        let prefix = format!(
            "{{\"type\":{},\"ts_ms\":",
            serde_json::to_string(kind).expect("a string serialises")
        );
        let mut suffix = String::new();
        if let Some(id) = session_id {
            suffix.push_str(",\"session_id\":");
            suffix.push_str(&serde_json::to_string(id).expect("a string serialises"));
        }
        suffix.push_str(",\"text\":");
        suffix.push_str(&serde_json::to_string(text).expect("a string serialises"));
        if let Some(r) = stop_reason {
            suffix.push_str(",\"stop_reason\":");
            suffix.push_str(&serde_json::to_string(r).expect("a string serialises"));
        }
        suffix.push('}');
        Line {
            prefix: prefix.into_bytes(),
            stamp: true,
            suffix: suffix.into_bytes(),
        }
    }

    /// A record written as given (it must be one line of JSON).
    pub fn verbatim(record: Vec<u8>) -> Line {
        Line {
            prefix: record,
            stamp: false,
            suffix: Vec::new(),
        }
    }

    /// A JSON object without a `ts_ms`: the writer's clock is put first in
    /// it. `object` must start with `{`.
    pub fn stamped_object(object: &[u8]) -> Line {
        debug_assert_eq!(object.first(), Some(&b'{'));
        let rest = &object[1..];
        let empty = rest.iter().all(|b| b.is_ascii_whitespace() || *b == b'}');
        let mut suffix = Vec::with_capacity(rest.len() + 1);
        if !empty {
            suffix.push(b',');
        }
        suffix.extend_from_slice(if empty { b"}" } else { rest });
        Line {
            prefix: b"{\"ts_ms\":".to_vec(),
            stamp: true,
            suffix,
        }
    }

    fn len(&self) -> usize {
        self.prefix.len() + self.suffix.len() + if self.stamp { 20 } else { 0 } + 1
    }
}

/// Where one appended line went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The `ts_ms` written (the writer's clock), if the line was stamped.
    pub ts_ms: Option<u64>,
    /// Byte offset of the line in the file.
    pub offset: u64,
    /// Bytes of the line, its `\n` included.
    pub len: u64,
}

/// Resolves once the job's lines are on disk (`fsync`ed, when asked).
pub type Durable = oneshot::Receiver<std::io::Result<()>>;

struct Job {
    lines: Vec<Line>,
    written: oneshot::Sender<std::io::Result<Vec<Appended>>>,
    durable: oneshot::Sender<std::io::Result<()>>,
}

/// A handle to the writer thread; cloning it shares the one writer.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
}

/// The writer thread itself, joined at shutdown so in-flight appends finish.
pub struct WriterThread {
    handle: JoinHandle<()>,
}

impl WriterThread {
    /// Waits for the thread to finish every queued append (it stops once all
    /// [`Writer`] handles are dropped).
    pub fn join(self) {
        let _ = self.handle.join();
    }

    /// Whether the thread has stopped (every handle dropped, queue done).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

fn stopped() -> std::io::Error {
    std::io::Error::other("the log writer has stopped")
}

impl Writer {
    /// Starts the writer for `path` (created if missing, with its directory
    /// entry synced). `fsync`: sync each append to disk before
    /// acknowledging it as durable.
    pub fn start(path: &Path, fsync: bool) -> std::io::Result<(Writer, WriterThread)> {
        let file = open_log(path, fsync)?;
        let (tx, rx) = mpsc::channel::<Job>(1024);
        let path = path.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("wmreplay-writer".into())
            .spawn(move || {
                Appender {
                    file,
                    path,
                    fsync,
                    last_ts: 0,
                }
                .run(rx)
            })?;
        Ok((Writer { tx }, WriterThread { handle }))
    }

    /// Appends `lines` with one write; resolves once they are durable.
    pub async fn append(&self, lines: Vec<Line>) -> std::io::Result<Vec<Appended>> {
        let (written, durable) = self.submit(lines).await?;
        let appended = written.await.map_err(|_| stopped())??;
        durable.await.map_err(|_| stopped())??;
        Ok(appended)
    }

    /// Appends `lines` from a blocking thread; returns as soon as they are
    /// written, with a [`Durable`] to wait on before acknowledging them.
    pub fn append_blocking(&self, lines: Vec<Line>) -> std::io::Result<(Vec<Appended>, Durable)> {
        let (written_tx, written) = oneshot::channel();
        let (durable_tx, durable) = oneshot::channel();
        self.tx
            .blocking_send(Job {
                lines,
                written: written_tx,
                durable: durable_tx,
            })
            .map_err(|_| stopped())?;
        let appended = written.blocking_recv().map_err(|_| stopped())??;
        Ok((appended, durable))
    }

    async fn submit(
        &self,
        lines: Vec<Line>,
    ) -> std::io::Result<(oneshot::Receiver<std::io::Result<Vec<Appended>>>, Durable)> {
        let (written_tx, written) = oneshot::channel();
        let (durable_tx, durable) = oneshot::channel();
        self.tx
            .send(Job {
                lines,
                written: written_tx,
                durable: durable_tx,
            })
            .await
            .map_err(|_| stopped())?;
        Ok((written, durable))
    }
}

/// Waits for a [`Durable`].
pub async fn durable(d: Durable) -> std::io::Result<()> {
    d.await.map_err(|_| stopped())?
}

/// Opens (creating if needed) the log for appending. A log that is there
/// must be a regular file: a FIFO or a device would block or never end.
fn open_log(path: &Path, sync_dir: bool) -> std::io::Result<File> {
    let existed = match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    let file = OpenOptions::new()
        .read(true)
        .create(true)
        .append(true)
        .open(path)?;
    if !existed && sync_dir {
        // The new file's directory entry is on disk before any append is
        // acknowledged.
        if let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
    }
    Ok(file)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Whether `path` no longer names the open `file` (rotated, replaced or
/// removed).
fn moved(file: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), std::fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() != b.dev() || a.ino() != b.ino(),
            _ => true,
        }
    }
    #[cfg(not(unix))]
    {
        !path.exists()
    }
}

/// The advisory lock on the log, released when dropped.
struct Locked<'f>(&'f File);

impl<'f> Locked<'f> {
    fn take(file: &'f File) -> std::io::Result<Locked<'f>> {
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            loop {
                // SAFETY: flock takes a file descriptor, which `file` keeps
                // open for as long as the returned guard borrows it.
                let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
                if r == 0 {
                    break;
                }
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
        Ok(Locked(file))
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: as in `take`; unlocking an fd we locked.
            unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}

/// The byte at `offset`, if the file has one there.
fn byte_at(file: &File, offset: u64) -> std::io::Result<Option<u8>> {
    let mut b = [0u8; 1];
    #[cfg(unix)]
    let n = std::os::unix::fs::FileExt::read_at(file, &mut b, offset)?;
    #[cfg(not(unix))]
    let n = {
        use std::io::{Read, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(offset))?;
        f.read(&mut b)?
    };
    Ok((n == 1).then_some(b[0]))
}

struct Appender {
    file: File,
    path: PathBuf,
    fsync: bool,
    last_ts: u64,
}

impl Appender {
    fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        while let Some(first) = rx.blocking_recv() {
            let mut round = vec![first];
            while round.len() < MAX_ROUND {
                match rx.try_recv() {
                    Ok(j) => round.push(j),
                    Err(_) => break,
                }
            }
            let mut waiting = Vec::with_capacity(round.len());
            for job in round {
                let result = self.write(&job.lines);
                match result {
                    Ok(appended) => {
                        let _ = job.written.send(Ok(appended));
                        waiting.push(job.durable);
                    }
                    Err(e) => {
                        tracing::error!(path = %self.path.display(), error = %e, "append failed");
                        let again = std::io::Error::new(e.kind(), e.to_string());
                        let _ = job.written.send(Err(e));
                        let _ = job.durable.send(Err(again));
                    }
                }
            }
            if waiting.is_empty() {
                continue;
            }
            let synced = if self.fsync {
                self.file.sync_data()
            } else {
                Ok(())
            };
            if let Err(e) = &synced {
                tracing::error!(path = %self.path.display(), error = %e, "fsync failed");
            }
            for w in waiting {
                let r = match &synced {
                    Ok(()) => Ok(()),
                    Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                };
                let _ = w.send(r);
            }
        }
    }
}

/// Renders `lines` (stamping each with the clock, never below `last_ts`),
/// prefixed with `\n` when `newline_first`.
fn render(lines: &[Line], newline_first: bool, last_ts: &mut u64) -> (Vec<u8>, Vec<Appended>) {
    let mut buf =
        Vec::with_capacity(lines.iter().map(Line::len).sum::<usize>() + newline_first as usize);
    if newline_first {
        buf.push(b'\n');
    }
    let mut appended = Vec::with_capacity(lines.len());
    for l in lines {
        let start = buf.len();
        buf.extend_from_slice(&l.prefix);
        let ts = if l.stamp {
            let ts = now_ms().max(*last_ts);
            *last_ts = ts;
            buf.extend_from_slice(itoa::Buffer::new().format(ts).as_bytes());
            Some(ts)
        } else {
            None
        };
        buf.extend_from_slice(&l.suffix);
        buf.push(b'\n');
        appended.push(Appended {
            ts_ms: ts,
            offset: start as u64,
            len: (buf.len() - start) as u64,
        });
    }
    (buf, appended)
}

impl Appender {
    fn write(&mut self, lines: &[Line]) -> std::io::Result<Vec<Appended>> {
        // A rotated or removed log: append to the file now at the path.
        if moved(&self.file, &self.path) {
            tracing::info!(path = %self.path.display(), "the log was replaced; reopening it");
            self.file = open_log(&self.path, self.fsync)?;
        }
        let file = &self.file;
        let _lock = Locked::take(file)?;
        let mut newline_first = false;
        for _ in 0..=MAX_REWRITES {
            let len = file.metadata()?.len();
            let terminated = len == 0 || byte_at(file, len - 1)? == Some(b'\n');
            newline_first |= !terminated;
            let (buf, mut appended) = render(lines, newline_first, &mut self.last_ts);
            let mut f = file;
            if let Err(e) = f.write_all(&buf) {
                // Cut the file back to where it was: no torn line is left.
                if let Err(cut) = file.set_len(len) {
                    tracing::error!(path = %self.path.display(), error = %cut,
                        "cannot cut a failed append back; the next append starts a new line");
                }
                return Err(e);
            }
            // The file is opened for appending: the write went to the end,
            // wherever that was, and left the position just past it.
            let end = f.stream_position()?;
            let start = end - buf.len() as u64;
            for a in &mut appended {
                a.offset += start;
            }
            // Someone who does not take the lock wrote between our look at
            // the end and our write; if what they wrote does not end a line,
            // our first record is glued to it: write the lines again.
            let glued = start != len
                && !newline_first
                && start > 0
                && byte_at(file, start - 1)? != Some(b'\n');
            if !glued {
                return Ok(appended);
            }
            tracing::warn!(path = %self.path.display(), offset = start,
                "another process wrote part of a line just before this append; appending it again");
            newline_first = true;
        }
        Err(std::io::Error::other(
            "another process keeps writing partial lines to the log",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(lines: Vec<Line>, before: &[u8]) -> (Vec<u8>, Vec<Appended>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.log");
        std::fs::write(&path, before).unwrap();
        let mut a = Appender {
            file: open_log(&path, false).unwrap(),
            path: path.clone(),
            fsync: false,
            last_ts: 0,
        };
        let appended = a.write(&lines).unwrap();
        (std::fs::read(&path).unwrap(), appended)
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
