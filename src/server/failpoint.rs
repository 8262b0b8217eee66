//! Faults a test injects into the server (the `failpoints` feature, which
//! only the tests' build turns on): a named point fires when a test has
//! configured it with `fail::cfg(NAME, "return(MARKER)")` (or, for a
//! `serve` process, `FAILPOINTS='NAME=return(MARKER)'`) and the text at
//! the point holds `MARKER`, so the tests running beside it in one process
//! are not touched. Without the feature every point is compiled away.
//!
//! Points:
//! - `turn-replay`: a turn's replay fails after its input (or the records
//!   that continue it) was written; the text is the turn's.
//! - `turn-crash-input`: the process is killed once a turn's input (and its
//!   client key's row) is written, before its model is called.
//! - `turn-crash-answered`: killed before a turn's close is written (the
//!   model has answered, or failed).
//! - `log-crash-written`: killed once a batch's bytes are in the log,
//!   before its journal entry ends; the text is the batch's.

/// Whether the point `name` fires for `text`.
pub(crate) fn fires(name: &str, text: &str) -> bool {
    fires_in(name, text.as_bytes())
}

/// Whether the point `name` fires for `text` (searched only when the point
/// is configured).
#[cfg(feature = "failpoints")]
fn fires_in(name: &str, text: &[u8]) -> bool {
    let hit = || {
        fail::fail_point!(name, |marker: Option<String>| marker.is_some_and(|m| {
            !m.is_empty() && memchr::memmem::find(text, m.as_bytes()).is_some()
        }));
        false
    };
    hit()
}

/// Whether the point `name` fires: never, in a build without the tests'
/// `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
fn fires_in(_name: &str, _text: &[u8]) -> bool {
    false
}

/// Kills the process at once, as `kill -9` does (nothing flushed, no
/// destructor run, no core file; on Windows an abort), where the point
/// `name` fires for `text`.
#[inline(always)]
pub(crate) fn crash(name: &str, text: &[u8]) {
    #[cfg(feature = "failpoints")]
    if fires_in(name, text) {
        tracing::error!(point = name, "killed at a fault point");
        // SAFETY: kill(2) with our own pid and SIGKILL takes no pointers;
        // it ends the process, which is what the test asked for.
        #[cfg(unix)]
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        // Elsewhere, the nearest: ended at once, nothing flushed.
        #[cfg(not(unix))]
        std::process::abort();
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = (name, text);
}

/// Configures the points a `serve` process is started with (the
/// `FAILPOINTS` environment variable), for the life of the process.
pub(crate) fn from_env() {
    #[cfg(feature = "failpoints")]
    if std::env::var_os("FAILPOINTS").is_some() {
        std::mem::forget(fail::FailScenario::setup());
    }
}
