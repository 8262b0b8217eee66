//! The single writer: one thread owns the log file and appends whole lines,
//! one `write` each, in the order requests reach it. Concurrent requests
//! therefore never interleave or tear lines, and `ts_ms` never goes
//! backwards among the lines this server writes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};

/// A turn to append.
#[derive(Debug)]
pub struct Turn {
    /// `text_input` or `text_output`.
    pub kind: &'static str,
    /// The session, if any.
    pub session_id: Option<String>,
    /// The text.
    pub text: String,
}

/// Where an appended line went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The `ts_ms` written.
    pub ts_ms: u64,
    /// Byte offset of the line in the file.
    pub offset: u64,
    /// Bytes written (the line and its `\n`).
    pub len: u64,
}

struct Job {
    turn: Turn,
    reply: oneshot::Sender<std::io::Result<Appended>>,
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
}

impl Writer {
    /// Starts the writer for `path` (created if missing). `fsync`: sync each
    /// append to disk before acknowledging it.
    pub fn start(path: &Path, fsync: bool) -> std::io::Result<(Writer, WriterThread)> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let (tx, rx) = mpsc::channel::<Job>(1024);
        let path = path.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("wmreplay-writer".into())
            .spawn(move || run(file, path, fsync, rx))?;
        Ok((Writer { tx }, WriterThread { handle }))
    }

    /// Appends `turn` as one line; resolves once it is written (and synced,
    /// if asked).
    pub async fn append(&self, turn: Turn) -> std::io::Result<Appended> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { turn, reply })
            .await
            .map_err(|_| std::io::Error::other("the log writer has stopped"))?;
        rx.await
            .map_err(|_| std::io::Error::other("the log writer has stopped"))?
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The JSON line for a turn (without `\n`).
pub fn line(kind: &str, ts_ms: u64, session_id: Option<&str>, text: &str) -> String {
    let mut s = format!("{{\"type\":\"{kind}\",\"ts_ms\":{ts_ms}");
    if let Some(id) = session_id {
        s.push_str(",\"session_id\":");
        s.push_str(&serde_json::to_string(id).expect("a string serialises"));
    }
    s.push_str(",\"text\":");
    s.push_str(&serde_json::to_string(text).expect("a string serialises"));
    s.push('}');
    s
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

fn run(mut file: File, path: PathBuf, fsync: bool, mut rx: mpsc::Receiver<Job>) {
    let mut last_ts = 0u64;
    while let Some(job) = rx.blocking_recv() {
        let ts = now_ms().max(last_ts);
        let mut bytes = line(
            job.turn.kind,
            ts,
            job.turn.session_id.as_deref(),
            &job.turn.text,
        );
        bytes.push('\n');
        let result = (|| {
            // A rotated or removed log: append to the file now at the path.
            if moved(&file, &path) {
                tracing::info!(path = %path.display(), "the log was replaced; reopening it");
                file = OpenOptions::new().create(true).append(true).open(&path)?;
            }
            let offset = file.metadata()?.len();
            // One write call for the whole line: the file is opened for
            // append, so it lands at the end in one piece.
            file.write_all(bytes.as_bytes())?;
            if fsync {
                file.sync_data()?;
            }
            Ok(Appended {
                ts_ms: ts,
                offset,
                len: bytes.len() as u64,
            })
        })();
        match &result {
            Ok(_) => last_ts = ts,
            Err(e) => tracing::error!(path = %path.display(), error = %e, "append failed"),
        }
        let _ = job.reply.send(result);
    }
}
