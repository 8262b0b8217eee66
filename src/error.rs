//! The library's error type. Replay itself cannot fail on any input (bad
//! lines are skipped and counted); only getting the bytes and writing the
//! output can, and those errors carry the path or the stage that failed.

use std::path::{Path, PathBuf};

/// Everything that can go wrong in the library.
///
/// ```
/// use wmreplay::{Error, LogBytes, ReadMode};
///
/// let dir = std::env::temp_dir().join(format!("wmreplay-doc-error-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// // A directory is not a log: the error names the path and what failed.
/// match LogBytes::open(&dir, ReadMode::Auto) {
///     Err(e @ Error::Io { .. }) => assert!(e.to_string().starts_with(&dir.display().to_string())),
///     Err(other) => panic!("unexpected error: {other}"),
///     Ok(_) => panic!("a directory is not a log"),
/// }
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on a log file, with the path and what was being done.
    #[error("{}: {op}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done ("cannot open", "cannot read", ...).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file shrank or was rewritten while it was being read: what was
    /// read may mix old and new bytes, so the result is withheld. Replaying
    /// again reads the file as it is now.
    #[error("{}: the file changed while it was being read ({what}); replay it again", path.display())]
    Changed {
        /// The file.
        path: PathBuf,
        /// What was noticed.
        what: &'static str,
    },
    /// The log (or the part of it to read) does not fit in memory: reading
    /// it would need more than the allocator could give.
    #[error("{}: cannot allocate {bytes} bytes to read it", path.display())]
    OutOfMemory {
        /// The file.
        path: PathBuf,
        /// The allocation that failed.
        bytes: u64,
    },
    /// Writing the rendered output failed.
    #[error("cannot write output: {0}")]
    Write(#[source] std::io::Error),
    /// The state store next to a log (session positions, window starts)
    /// could not be opened, read or written.
    #[error("{}: state store: {message}", path.display())]
    State {
        /// The store's file.
        path: PathBuf,
        /// What went wrong (SQLite's message).
        message: String,
    },
    /// An ack named a prepare id the store has never issued.
    #[error("unknown prepare_id {0:?}")]
    UnknownPrepare(String),
}

impl Error {
    #[cold]
    pub(crate) fn out_of_memory(path: &Path, bytes: u64) -> Error {
        Error::OutOfMemory {
            path: path.to_path_buf(),
            bytes,
        }
    }

    #[cold]
    pub(crate) fn io(path: &Path, op: &'static str, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }
}
