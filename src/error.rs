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
    /// The log does not fit in memory: reading it, replaying it or rendering
    /// its replay would need a buffer (sized from the log) that the allocator
    /// could not give. Nothing was cut short silently: the result is withheld.
    #[error("{}: cannot allocate {bytes} bytes: the log's replay does not fit in memory", path.display())]
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
    /// The search index next to a log could not be made, read or written.
    #[error("{}: search index: {message}", path.display())]
    Search {
        /// The index file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A search query that cannot be searched (no word, too long) or a
    /// limit out of range.
    #[error("{0}")]
    Query(String),
}

impl Error {
    /// The error's message without the paths it names: what a client of
    /// a server, or a model calling a tool, may be told (the server's own
    /// log keeps the whole message).
    pub fn without_paths(&self) -> String {
        let text = match self {
            Error::Io { op, source, .. } => format!("{op}: {source}"),
            Error::Changed { what, .. } => {
                format!("the file changed while it was being read ({what}); try again")
            }
            Error::OutOfMemory { bytes, .. } => {
                format!("cannot allocate {bytes} bytes: the log's replay does not fit in memory")
            }
            Error::State { message, .. } => format!("state store: {message}"),
            Error::Search { message, .. } => format!("search index: {message}"),
            other => other.to_string(),
        };
        // A path inside a message from below (an I/O error's own text):
        // cut from its first `/` to the next space or quote.
        let mut out = String::with_capacity(text.len());
        let mut in_path = false;
        let mut prev = ' ';
        for c in text.chars() {
            if in_path {
                if c.is_whitespace() || c == '"' || c == '\'' || c == ')' {
                    in_path = false;
                    out.push(c);
                }
            } else if c == '/'
                && (prev.is_whitespace() || prev == '"' || prev == '\'' || prev == '(')
            {
                in_path = true;
                out.push('…');
            } else {
                out.push(c);
            }
            prev = c;
        }
        out
    }
}

/// A buffer sized from the log (the replayed records, the re-serialised
/// records of [`RecordMode::Js`](crate::RecordMode::Js), a rendered body)
/// that the allocator could not give: what the fallible replay and renders
/// ([`try_replay`](crate::try_replay),
/// [`Replay::try_render_request`](crate::Replay::try_render_request),
/// [`Replay::try_render_messages`](crate::Replay::try_render_messages))
/// return instead of aborting the process. [`AllocError::for_log`] words it
/// as the [`Error::OutOfMemory`] of a file.
///
/// ```
/// use wmreplay::AllocError;
///
/// let e = AllocError { bytes: 1 << 40 };
/// assert_eq!(e.to_string(), "cannot allocate 1099511627776 bytes");
/// let e = e.for_log("wm.log");
/// assert!(e.to_string().starts_with("wm.log: cannot allocate 1099511627776 bytes"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate {bytes} bytes")]
pub struct AllocError {
    /// The size of the allocation that failed.
    pub bytes: u64,
}

impl AllocError {
    /// The [`Error::OutOfMemory`] of the log at `path`.
    #[cold]
    pub fn for_log(self, path: impl Into<PathBuf>) -> Error {
        Error::OutOfMemory {
            path: path.into(),
            bytes: self.bytes,
        }
    }

    /// Ends the process as a failed infallible allocation does (the
    /// allocator's error handler: "memory allocation of N bytes failed",
    /// then an abort): for the infallible forms of the fallible renders.
    #[cold]
    pub(crate) fn abort(self) -> ! {
        let size = usize::try_from(self.bytes).unwrap_or(usize::MAX);
        match std::alloc::Layout::from_size_align(size, 1) {
            Ok(layout) => std::alloc::handle_alloc_error(layout),
            Err(_) => panic!("capacity overflow"),
        }
    }
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
