//! `wmreplay` for Python: the engine's public API behind a small PyO3 module.
//! Every replay runs with the GIL released; bodies come back as `bytes`
//! built by the engine, without a Python object per message.
//!
//! Threads: every object may be shared between threads. No thread ever waits
//! for a lock while it holds the GIL (a lock held by a thread that has
//! released the GIL is waited for with the GIL released too), and a
//! [`MessageIter`]'s position moves without a lock, so no use from several
//! threads can deadlock the interpreter, and each message is handed out
//! once.
//!
//! Faults: a log changed under a [`Replay`] (truncated, rewritten) is the
//! engine's "changed, replay it again" error, an `OSError`, from every call
//! that reads the log again, never bytes read from a file that is gone; a
//! buffer sized from the log that cannot be allocated is a `MemoryError`,
//! never an abort.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use wmreplay::{
    AllocError, CurrentRequest, Format, LiveReplay as Live, LogBytes, ReadMode, RecordMode,
    Replay as Core, ReplayOptions,
};

/// How many skipped lines the stats list in detail.
const MAX_SKIPS: usize = 16;

type ReplayOf<'a> = Core<'a>;

self_cell::self_cell!(
    /// A log's bytes and the replay that points into them.
    struct Owned {
        owner: LogBytes,
        #[covariant]
        dependent: ReplayOf,
    }
);

/// An engine error as the Python exception for it: I/O errors as `OSError`
/// (`FileNotFoundError`, `PermissionError`, … by errno) with the path.
fn to_py(e: wmreplay::Error) -> PyErr {
    let message = e.to_string();
    match e {
        wmreplay::Error::Io { path, source, .. } => {
            use std::io::ErrorKind;
            // Python picks the subclass (FileNotFoundError, …) from errno.
            let errno = source.raw_os_error().or(match source.kind() {
                ErrorKind::NotFound => Some(2),
                ErrorKind::PermissionDenied => Some(13),
                ErrorKind::IsADirectory => Some(21),
                ErrorKind::InvalidInput => Some(22),
                _ => None,
            });
            let filename = path.display().to_string();
            match errno {
                Some(errno) => PyOSError::new_err((errno, message, filename)),
                None => os_error_without_errno(message, filename),
            }
        }
        wmreplay::Error::Changed { path, .. } => {
            os_error_without_errno(message, path.display().to_string())
        }
        wmreplay::Error::OutOfMemory { .. } => pyo3::exceptions::PyMemoryError::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

/// A plain `OSError` (no errno to pick a subclass by) whose `filename` is
/// still the path, and whose `strerror` (what `str()` shows beside the
/// path) is the engine's message. (An `OSError(message)` given a `filename`
/// afterwards prints as "[Errno None] None: 'path'": the message lost.)
fn os_error_without_errno(message: String, filename: String) -> PyErr {
    PyOSError::new_err((None::<i32>, message, filename))
}

fn record_mode(record: &str) -> PyResult<RecordMode> {
    record.parse().map_err(PyValueError::new_err)
}

fn format_of(format: &str) -> PyResult<Format> {
    format.parse().map_err(PyValueError::new_err)
}

/// The formats whose messages are JSON objects: "anthropic" and "openai".
fn message_format(format: &str) -> PyResult<Format> {
    match format_of(format)? {
        f @ (Format::Anthropic | Format::OpenAi) => Ok(f),
        _ => Err(PyValueError::new_err(format!(
            "messages come as \"anthropic\" or \"openai\" dicts, not {format:?} \
             (request_body renders every format)"
        ))),
    }
}

/// A JSON text as Python objects (through the `json` module).
fn loads<'py>(py: Python<'py>, text: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?
        .call_method1("loads", (PyBytes::new(py, text),))
}

/// A replayed log: its stats, its messages and request bodies.
#[pyclass(frozen, module = "wmreplay")]
struct Replay {
    inner: Owned,
}

impl Replay {
    /// `render` run on the replay, then the check that the log did not
    /// change under it: a map of a file truncated since `replay()` reads
    /// zero pages where the file's bytes were (the engine's SIGBUS guard),
    /// so what was rendered from it is withheld ([`wmreplay::Error::Changed`]).
    /// A buffer that cannot be allocated is [`wmreplay::Error::OutOfMemory`].
    fn rendered<T>(
        &self,
        render: impl FnOnce(&Core<'_>) -> Result<T, AllocError>,
    ) -> Result<T, wmreplay::Error> {
        let log = self.inner.borrow_owner();
        let out = render(self.inner.borrow_dependent()).map_err(|e| e.for_log(log.path()))?;
        log.verify()?;
        Ok(out)
    }
}

#[pymethods]
impl Replay {
    /// `{"total_lines", "parsed_entries", "skipped_invalid_json",
    /// "skipped_invalid_shape", "skips": [...], ...}`.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = self.inner.borrow_dependent().stats().to_json(MAX_SKIPS);
        loads(py, json.as_bytes())
    }

    /// The replayed messages in `ts_ms` order (the current request is not
    /// one of them), as dicts ready to go into a request's `messages`:
    /// `format="anthropic"` (the default, the original function's shape):
    /// `{"role": …, "content": [{"type": "text", "text": …}]}`;
    /// `format="openai"`: `{"role": …, "content": …}` with the text as a
    /// string (Chat Completions; also the cheapest way to the texts alone).
    #[pyo3(signature = (format="anthropic"))]
    fn messages<'py>(&self, py: Python<'py>, format: &str) -> PyResult<Bound<'py, PyAny>> {
        let format = message_format(format)?;
        let body = py
            .detach(|| self.rendered(|r| r.try_render_messages(format)))
            .map_err(to_py)?;
        loads(py, &body)
    }

    /// The same dicts as `messages(format)`, decoded one at a time from one
    /// rendered NDJSON body: for logs whose message list would not fit in
    /// memory as Python objects.
    #[pyo3(signature = (format="anthropic"))]
    fn iter_messages(&self, py: Python<'_>, format: &str) -> PyResult<MessageIter> {
        let blocks = message_format(format)? == Format::Anthropic;
        let body = py
            .detach(|| self.rendered(|r| r.try_render_messages(Format::Ndjson)))
            .map_err(to_py)?;
        Ok(MessageIter {
            body,
            blocks,
            at: AtomicUsize::new(0),
        })
    }

    /// The request body, ready to send: the system rule, every message, and
    /// `CURRENT_USER_REQUEST` with `text` (`format`: "anthropic", "openai",
    /// "ndjson" or "xml"; `system`: text placed before the system rule).
    #[pyo3(signature = (text, session_id=None, format="anthropic", system=None))]
    fn request_body<'py>(
        &self,
        py: Python<'py>,
        text: &str,
        session_id: Option<&str>,
        format: &str,
        system: Option<&str>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let format = format_of(format)?;
        let system = wmreplay::system_prompt(system);
        let current = CurrentRequest { text, session_id };
        let replayed = self.inner.borrow_dependent();
        let sized = py.detach(|| replayed.sized_request(format, &system, &current));
        // Written straight into the `bytes` object: no copy of the body. A
        // body read from a log that changed is the engine's error (the bytes
        // are dropped); one Python cannot allocate, the MemoryError of the log.
        let mut allocated = false;
        PyBytes::new_with(py, sized.len(), |buf| {
            allocated = true;
            py.detach(|| {
                self.rendered(|_| {
                    sized.write_into(buf);
                    Ok(())
                })
            })
            .map_err(to_py)
        })
        .map_err(|e| {
            if allocated {
                return e;
            }
            let too_big = AllocError {
                bytes: sized.len() as u64,
            };
            to_py(too_big.for_log(self.inner.borrow_owner().path()))
        })
    }

    fn __len__(&self) -> usize {
        self.inner.borrow_dependent().records().len()
    }

    fn __repr__(&self) -> String {
        let s = self.inner.borrow_dependent().stats();
        format!(
            "<wmreplay.Replay {}: {} records, {} skipped>",
            self.inner.borrow_owner().path().display(),
            s.parsed_entries,
            s.skipped_invalid_json + s.skipped_invalid_shape
        )
    }
}

/// The messages of a [`Replay`], decoded one at a time. Shared between
/// threads, it hands each message to exactly one of them.
#[pyclass(frozen, module = "wmreplay")]
struct MessageIter {
    /// NDJSON: one `{"role","content"}` object per line.
    body: Vec<u8>,
    /// Whether each message's text goes into a one-block content list
    /// (the Anthropic shape) instead of staying a string.
    blocks: bool,
    /// Where the next message starts. Claimed with a compare-and-swap, not
    /// under a lock: nothing here waits, whatever other threads do (with
    /// or without the GIL), and a line is claimed by one thread only.
    at: AtomicUsize,
}

impl MessageIter {
    /// Claims the next line of the body, if any.
    fn claim(&self) -> Option<&[u8]> {
        let mut at = self.at.load(Ordering::Acquire);
        loop {
            if at >= self.body.len() {
                return None;
            }
            let end = self.body[at..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(self.body.len(), |p| at + p);
            match self
                .at
                .compare_exchange_weak(at, end + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(&self.body[at..end]),
                Err(now) => at = now,
            }
        }
    }
}

#[pymethods]
impl MessageIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(line) = self.claim() else {
            return Ok(None);
        };
        let message = loads(py, line)?;
        if self.blocks {
            let block = PyDict::new(py);
            block.set_item("type", "text")?;
            block.set_item("text", message.get_item("content")?)?;
            message.set_item("content", PyList::new(py, [block])?)?;
        }
        Ok(Some(message))
    }
}

/// Replays the log at `path` (a missing file is an empty log) with the GIL
/// released. `record`: "raw" (WM_JSON is the line as written: byte-stable)
/// or "js" (as `JSON.stringify(JSON.parse(line))`).
#[pyfunction]
#[pyo3(signature = (path, record="raw", threads=0))]
fn replay(
    py: Python<'_>,
    path: std::path::PathBuf,
    record: &str,
    threads: usize,
) -> PyResult<Replay> {
    let mut options = ReplayOptions::default();
    options.record = record_mode(record)?;
    options.threads = threads;
    let inner = py
        .detach(|| {
            let log = LogBytes::open(&path, ReadMode::Auto)?;
            let owned = Owned::try_new(log, |log| {
                wmreplay::try_replay(log.bytes(), &options).map_err(|e| e.for_log(log.path()))
            })?;
            owned.borrow_owner().verify()?;
            Ok(owned)
        })
        .map_err(to_py)?;
    Ok(Replay { inner })
}

/// A replay kept across calls: each call parses only what was appended to
/// the log since the last one.
#[pyclass(frozen, module = "wmreplay")]
struct LiveReplay {
    live: Mutex<Live>,
}

#[pymethods]
impl LiveReplay {
    #[new]
    #[pyo3(signature = (path, format="anthropic", record="raw"))]
    fn new(path: std::path::PathBuf, format: &str, record: &str) -> PyResult<Self> {
        let format = format_of(format)?;
        let mut options = ReplayOptions::default();
        options.record = record_mode(record)?;
        Ok(LiveReplay {
            live: Mutex::new(Live::new(path, format, options)),
        })
    }

    /// Reads what was appended: `{"rebuilt", "bytes_read", "bytes_committed",
    /// "records_added", "late_records"}`.
    fn refresh<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = py
            .detach(|| {
                self.live
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .refresh()
            })
            .map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("rebuilt", r.rebuilt)?;
        d.set_item("bytes_read", r.bytes_read)?;
        d.set_item("bytes_committed", r.bytes_committed)?;
        d.set_item("records_added", r.records_added)?;
        d.set_item("late_records", r.late_records)?;
        Ok(d)
    }

    /// The stats of the bytes read so far.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // The lock is waited for with the GIL released: another thread may
        // hold it through a long refresh, with the GIL released.
        let json = py.detach(|| {
            self.live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .stats()
                .to_json(MAX_SKIPS)
        });
        loads(py, json.as_bytes())
    }

    /// Brings the replay up to date, then the request body with `text` as
    /// the current request, in the format the replay was made for.
    #[pyo3(signature = (text, session_id=None, system=None))]
    fn request_body<'py>(
        &self,
        py: Python<'py>,
        text: &str,
        session_id: Option<&str>,
        system: Option<&str>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let system = wmreplay::system_prompt(system);
        let body = py
            .detach(|| {
                self.live
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .request_body(&system, &CurrentRequest { text, session_id })
            })
            .map_err(to_py)?;
        Ok(PyBytes::new(py, &body))
    }
}

#[pymodule]
fn _wmreplay(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_class::<Replay>()?;
    m.add_class::<LiveReplay>()?;
    m.add_class::<MessageIter>()?;
    m.add("SYSTEM_RULE", wmreplay::SYSTEM_RULE)?;
    Ok(())
}
