//! The server's log lines go to stderr on a best-effort basis: a line that
//! cannot be written (stderr closed, its pipe's reader gone, its disk full)
//! is dropped and counted, and never costs a request. The count is in
//! `/v1/stats` (`logging.dropped_lines`).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Log lines dropped since start because stderr could not take them.
pub fn dropped_log_lines() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Where the server's logs go: stderr, each line written whole or dropped
/// and counted. A [`tracing_subscriber::fmt::MakeWriter`]:
///
/// ```
/// tracing_subscriber::fmt()
///     .with_writer(wmreplay::server::StderrLog)
///     .log_internal_errors(false)
///     .try_init()
///     .ok();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct StderrLog;

/// One log line on its way to stderr.
#[derive(Debug)]
pub struct StderrLine;

impl Write for StderrLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter writes each event with one `write_all`; a line that
        // fails (in part or whole) is lost, and only counted.
        if std::io::stderr().lock().write_all(buf).is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for StderrLog {
    type Writer = StderrLine;

    fn make_writer(&'a self) -> StderrLine {
        StderrLine
    }
}
