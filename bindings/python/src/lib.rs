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
//!
//! Search (`search`, `SearchIndex`) is in [`search`]; `records` in
//! [`records`].

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyUserWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use wmreplay::{
    AllocError, CurrentRequest, Format, LogBytes, RecordMode, Replay as Core, ReplayOptions,
};
use wmreplay_bindings::{self as shared, BodyOptions, Failure, InvalidArg, RawBody, Style};

mod records;
mod search;

pyo3::create_exception!(
    wmreplay,
    SkippedLinesWarning,
    PyUserWarning,
    "More than half of a log's lines are not records: the file is likely not a \
     working-memory log (a wrong path, a pretty-printed JSON file) or a broken writer \
     made it. The message names the count and the first skipped line."
);

pyo3::create_exception!(
    wmreplay,
    MissingLogWarning,
    PyUserWarning,
    "The log does not exist (a mistyped path, most often): it is replayed as an \
     empty log. `require_log=True` makes it a FileNotFoundError; `warn=False` or a \
     warnings filter silences it."
);

/// The most threads `replay(threads=…)` takes.
const MAX_THREADS: f64 = 4096.0;

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
        wmreplay::Error::State { path, .. } => {
            os_error_without_errno(message, path.display().to_string())
        }
        // The search index: `filename` is the index file.
        wmreplay::Error::Search { path, .. } => {
            os_error_without_errno(message, path.display().to_string())
        }
        // A query or limit refused (checked before a search, so not seen here).
        wmreplay::Error::Query(_) => PyValueError::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

fn refused(e: InvalidArg) -> PyErr {
    PyValueError::new_err(e.message)
}

fn failed(e: Failure) -> PyErr {
    match e {
        Failure::Engine(e) => to_py(e),
        Failure::Invalid(e) => refused(e),
    }
}

/// Raises `warning` as a [`SkippedLinesWarning`] (an error if the
/// warnings filter says so), unless `warn` is false.
fn warn_of(py: Python<'_>, warning: Option<String>, warn: bool) -> PyResult<()> {
    let Some(w) = warning.filter(|_| warn) else {
        return Ok(());
    };
    let text = std::ffi::CString::new(w.replace('\0', " ")).expect("no NUL left");
    PyErr::warn(py, &py.get_type::<SkippedLinesWarning>(), &text, 1)
}

/// Raises a [`MissingLogWarning`] for the log at `path` when it is
/// `missing` (an error if the warnings filter says so), unless `warn` is
/// false: the CLI's warning, as a Python warning.
fn warn_missing(py: Python<'_>, path: &std::path::Path, missing: bool, warn: bool) -> PyResult<()> {
    if !(missing && warn) {
        return Ok(());
    }
    let w = format!(
        "{} does not exist; replaying it as an empty log (require_log=True makes this an error, warn=False silences it)",
        path.display()
    );
    let text = std::ffi::CString::new(w.replace('\0', " ")).expect("no NUL left");
    PyErr::warn(py, &py.get_type::<MissingLogWarning>(), &text, 1)
}

/// [`FileError`](file_error_type)'s source: an `OSError` whose `str()` is
/// the engine's message (which names the file), not OSError's
/// "[Errno None] message: 'path'".
const FILE_ERROR: &std::ffi::CStr = c"
class FileError(OSError):
    \"\"\"An error about a file (the log, its state store, its search index) with
    no errno: a log that changed while it was read, a damaged store. An OSError
    whose filename is the file and whose strerror, and str(), is the message.\"\"\"

    __module__ = 'wmreplay'

    def __str__(self):
        return self.strerror if isinstance(self.strerror, str) else super().__str__()
";

static FILE_ERROR_TYPE: pyo3::sync::PyOnceLock<Py<pyo3::types::PyType>> =
    pyo3::sync::PyOnceLock::new();

/// `wmreplay.FileError`, made once.
fn file_error_type(py: Python<'_>) -> PyResult<&Bound<'_, pyo3::types::PyType>> {
    FILE_ERROR_TYPE
        .get_or_try_init(py, || {
            let m = PyModule::from_code(
                py,
                FILE_ERROR,
                c"wmreplay/_file_error.py",
                c"wmreplay._file_error",
            )?;
            Ok(m.getattr("FileError")?
                .cast_into::<pyo3::types::PyType>()?
                .unbind())
        })
        .map(|t| t.bind(py))
}

/// A `wmreplay.FileError` (an `OSError` without an errno to pick a
/// subclass by) whose `filename` is the path and whose `strerror`, and
/// `str()`, is the engine's message.
fn os_error_without_errno(message: String, filename: String) -> PyErr {
    Python::attach(|py| match file_error_type(py) {
        Ok(t) => PyErr::from_type(t.clone(), (None::<i32>, message, filename)),
        Err(e) => e,
    })
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

/// `asyncio.to_thread(method, *args, **kwargs)`: the coroutine of an
/// `a…` method, which runs the blocking method in a thread (its work
/// releases the GIL, so the event loop keeps running).
fn to_thread<'py>(
    method: Bound<'py, PyAny>,
    args: impl IntoPyObject<
        'py,
        Target = pyo3::types::PyTuple,
        Output = Bound<'py, pyo3::types::PyTuple>,
    >,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = method.py();
    let args = args.into_pyobject(py).map_err(Into::into)?;
    let mut all: Vec<Bound<'py, PyAny>> = vec![method];
    all.extend(args.iter());
    py.import("asyncio")?
        .getattr("to_thread")?
        .call(pyo3::types::PyTuple::new(py, all)?, kwargs)
}

/// The options a body call takes as keyword arguments (`format`, `record`
/// and `system` are positional too in [`Replay::request_body`]), with what
/// each must be.
const BODY_OPTIONS: &[(&str, Kind)] = &[
    ("format", Kind::Str),
    ("record", Kind::Str),
    ("system", Kind::Str),
    ("model", Kind::Str),
    ("max_output_tokens", Kind::Number),
    ("params", Kind::Dict),
    ("allow_params", Kind::Strings),
    ("session_only", Kind::Bool),
    ("kinds", Kind::Strings),
    ("since", Kind::Number),
    ("until", Kind::Number),
    ("tail", Kind::Number),
    ("max_tokens", Kind::Number),
    ("tokenizer", Kind::Str),
    ("trim_to", Kind::Number),
    ("start_on", Kind::Str),
    ("mark_pending", Kind::Bool),
    ("summaries", Kind::Bool),
    ("facts", Kind::Bool),
    ("cache", Kind::Str),
    ("cache_ttl", Kind::Str),
    ("state", Kind::Path),
    ("require_log", Kind::Bool),
    ("warn", Kind::Bool),
    ("recall", Kind::Number),
    ("language", Kind::Str),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Number,
    Bool,
    Dict,
    Strings,
    Path,
}

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Kind::Str => "a str",
            Kind::Number => "a number",
            Kind::Bool => "a bool",
            Kind::Dict => "a dict",
            Kind::Strings => "a list of str",
            Kind::Path => "a str or os.PathLike",
        }
    }
}

/// A body call's keyword arguments checked into the shared [`RawBody`]
/// (and whether to warn): each a known option (`except` lists the ones this
/// call does not take) of its type; `None` is "not given".
fn raw_body(
    py: Python<'_>,
    what: &str,
    options: Option<&Bound<'_, PyDict>>,
    except: &[&str],
) -> PyResult<(RawBody, bool)> {
    let mut raw = RawBody::default();
    let mut warn = true;
    let Some(options) = options else {
        return Ok((raw, warn));
    };
    for (k, v) in options.iter() {
        let key: String = k.extract()?;
        let kind = BODY_OPTIONS
            .iter()
            .find(|(name, _)| *name == key && !except.contains(name))
            .map(|(_, kind)| *kind)
            .ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "{what}() got an unexpected keyword argument '{key}'"
                ))
            })?;
        if v.is_none() {
            continue;
        }
        let wrong = || {
            PyTypeError::new_err(format!(
                "{what}(): `{key}` must be {}, not {}",
                kind.what(),
                v.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        };
        let string = || v.extract::<String>().map_err(|_| wrong());
        let number = || {
            if v.is_instance_of::<pyo3::types::PyBool>() {
                return Err(wrong());
            }
            v.extract::<f64>().map_err(|_| wrong())
        };
        let boolean = || {
            if !v.is_instance_of::<pyo3::types::PyBool>() {
                return Err(wrong());
            }
            v.extract::<bool>().map_err(|_| wrong())
        };
        let strings = || {
            if v.is_instance_of::<PyString>() {
                return Err(wrong());
            }
            v.extract::<Vec<String>>().map_err(|_| wrong())
        };
        match key.as_str() {
            "format" => raw.format = Some(string()?),
            "record" => raw.record = Some(string()?),
            "system" => raw.system = Some(string()?),
            "model" => raw.model = Some(string()?),
            "max_output_tokens" => raw.max_output_tokens = Some(number()?),
            "params" => {
                if !v.is_instance_of::<PyDict>() {
                    return Err(wrong());
                }
                raw.params = Some(json_text(py, &v)?);
            }
            "allow_params" => raw.allow_params = Some(strings()?),
            "session_only" => raw.session_only = boolean()?,
            "kinds" => raw.kinds = Some(strings()?),
            "since" => raw.since = Some(number()?),
            "until" => raw.until = Some(number()?),
            "tail" => raw.tail = Some(number()?),
            "max_tokens" => raw.max_tokens = Some(number()?),
            "tokenizer" => raw.tokenizer = Some(string()?),
            "trim_to" => raw.trim_to = Some(number()?),
            "start_on" => raw.start_on = Some(string()?),
            "recall" => raw.recall = Some(number()?),
            "language" => raw.language = Some(string()?),
            "mark_pending" => raw.mark_pending = boolean()?,
            "summaries" => raw.summaries = boolean()?,
            "facts" => raw.facts = boolean()?,
            "cache" => raw.cache = Some(string()?),
            "cache_ttl" => raw.cache_ttl = Some(string()?),
            "state" => raw.state = Some(v.extract::<PathBuf>().map_err(|_| wrong())?),
            "require_log" => raw.require_log = boolean()?,
            "warn" => warn = boolean()?,
            _ => unreachable!("every option is matched"),
        }
    }
    Ok((raw, warn))
}

/// `obj` as JSON text (through the `json` module: what `params` holds).
fn json_text(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<String> {
    let kwargs = PyDict::new(py);
    kwargs.set_item("allow_nan", false)?;
    kwargs.set_item("separators", (",", ":"))?;
    py.import("json")?
        .call_method("dumps", (obj,), Some(&kwargs))?
        .extract()
}

fn body_options(raw: RawBody) -> PyResult<BodyOptions> {
    BodyOptions::new(raw, Style::Snake).map_err(refused)
}

/// A replayed log: its stats, its messages and request bodies.
#[pyclass(frozen, module = "wmreplay")]
struct Replay {
    inner: Owned,
    /// What it was replayed with (a selection replays the log again).
    options: ReplayOptions,
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
        let stats = loads(py, json.as_bytes())?;
        stats.set_item("log_missing", self.inner.borrow_owner().is_missing())?;
        Ok(stats)
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

    /// The request body, ready to send: `wmreplay respond`'s for the same
    /// options (see the stubs for them all: `model`, `max_output_tokens`,
    /// `params`, the selection, `cache`, …). `format`: "anthropic",
    /// "openai", "ndjson" or "xml"; `system`: text placed before the system
    /// rule. The record mode is the replay's. A selection replays the log
    /// again from its bytes (this replay keeps every record).
    #[pyo3(signature = (text, session_id=None, format="anthropic", system=None, **options))]
    fn request_body<'py>(
        &self,
        py: Python<'py>,
        text: &str,
        session_id: Option<&str>,
        format: &str,
        system: Option<&str>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (mut raw, _) = raw_body(
            py,
            "request_body",
            options,
            &["format", "record", "system", "require_log", "warn"],
        )?;
        raw.format = Some(format.into());
        raw.system = system.map(Into::into);
        let o = body_options(raw)?;
        let current = CurrentRequest { text, session_id };
        let replayed = self.inner.borrow_dependent();
        if !o.is_contract_body() {
            let log = self.inner.borrow_owner();
            let body = py
                .detach(|| shared::body_of_replay(replayed, log, &self.options, current, &o))
                .map_err(failed)?;
            return Ok(PyBytes::new(py, &body));
        }
        let sized = py.detach(|| replayed.sized_request(o.format, o.system(), &current));
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

    /// `request_body()` in a thread: `await r.arequest_body(text, …)`.
    #[pyo3(signature = (text, session_id=None, format="anthropic", system=None, **options))]
    fn arequest_body<'py>(
        slf: &Bound<'py, Self>,
        text: &str,
        session_id: Option<&str>,
        format: &str,
        system: Option<&str>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_thread(
            slf.getattr("request_body")?,
            (text, session_id, format, system),
            options,
        )
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

/// Replays the log at `path` (a missing file is an empty log, or with
/// `require_log` a `FileNotFoundError`) with the GIL released. `record`:
/// "raw" (WM_JSON is the line as written: byte-stable) or "js" (as
/// `JSON.stringify(JSON.parse(line))`). A log most of whose lines are not
/// records raises a [`SkippedLinesWarning`] (unless `warn=False`).
#[pyfunction]
#[pyo3(signature = (path, record="raw", threads=None, *, require_log=false, warn=true))]
fn replay(
    py: Python<'_>,
    path: PathBuf,
    record: &str,
    threads: Option<&Bound<'_, PyAny>>,
    require_log: bool,
    warn: bool,
) -> PyResult<Replay> {
    let mut options = ReplayOptions::default();
    options.record = record_mode(record)?;
    let n = search::number("replay", "threads", threads, true)?.unwrap_or(0.0);
    if !(0.0..=MAX_THREADS).contains(&n) {
        return Err(PyValueError::new_err(format!(
            "replay(): `threads` must be 0 (as many as the machine has) to {MAX_THREADS}, not {n}"
        )));
    }
    options.threads = n as usize;
    let inner = py
        .detach(|| {
            let log = shared::open_log(&path, require_log)?;
            let owned = Owned::try_new(log, |log| {
                wmreplay::try_replay(log.bytes(), &options).map_err(|e| e.for_log(log.path()))
            })?;
            owned.borrow_owner().verify()?;
            Ok(owned)
        })
        .map_err(to_py)?;
    let warning = shared::skipped_warning(&path, inner.borrow_dependent().stats());
    warn_of(py, warning, warn)?;
    warn_missing(py, &path, inner.borrow_owner().is_missing(), warn)?;
    Ok(Replay { inner, options })
}

/// The request body of the log at `path`, ready to send: what `wmreplay
/// respond PATH --text TEXT …` writes for the same options, byte for byte
/// (see the stubs for the options). The GIL is released while it runs.
#[pyfunction]
#[pyo3(signature = (path, text, session_id=None, **options))]
fn request_body<'py>(
    py: Python<'py>,
    path: PathBuf,
    text: &str,
    session_id: Option<&str>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let (raw, warn) = raw_body(py, "request_body", options, &[])?;
    let o = body_options(raw)?;
    let current = CurrentRequest { text, session_id };
    let body = py
        .detach(|| shared::body_of_log(&path, current, &o))
        .map_err(failed)?;
    warn_of(py, body.warning, warn)?;
    warn_missing(py, &path, body.warn_missing, warn)?;
    Ok(PyBytes::new(py, &body.bytes))
}

/// Appends records to the log at `path` (created if needed), as `wmreplay
/// serve` appends them (see the stubs), with the GIL released. `records`:
/// one record or a list of them, each a dict (serialised with `json`), or
/// the JSON text of one (`str` or `bytes`).
#[pyfunction]
fn append<'py>(
    py: Python<'py>,
    path: PathBuf,
    records: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let one = records.is_instance_of::<PyDict>()
        || records.is_instance_of::<PyString>()
        || records.is_instance_of::<PyBytes>()
        || records.is_instance_of::<pyo3::types::PyByteArray>();
    let items: Vec<Bound<'py, PyAny>> = if one {
        vec![records.clone()]
    } else {
        records
            .try_iter()
            .map_err(|_| {
                PyTypeError::new_err(
                    "append(): `records` must be a dict, str or bytes, or a list of them",
                )
            })?
            .collect::<PyResult<_>>()?
    };
    let texts = items
        .iter()
        .enumerate()
        .map(|(i, r)| record_text(py, i, r))
        .collect::<PyResult<Vec<Vec<u8>>>>()?;
    let report = py.detach(|| wmreplay::append(&path, &texts));
    let report = match report {
        Ok(r) => r,
        Err(wmreplay::AppendError::Log(e)) => return Err(to_py(e)),
        Err(e) => return Err(PyValueError::new_err(format!("append(): {e}"))),
    };
    let out = PyDict::new(py);
    out.set_item("written", report.records.len())?;
    let list = PyList::empty(py);
    for r in &report.records {
        let d = PyDict::new(py);
        // An integer ts_ms as an int, as the server's answer gives it.
        if r.ts_ms.fract() == 0.0 && r.ts_ms.abs() < 9_007_199_254_740_992.0 {
            d.set_item("ts_ms", r.ts_ms as i64)?;
        } else {
            d.set_item("ts_ms", r.ts_ms)?;
        }
        d.set_item("offset", r.offset)?;
        d.set_item("bytes", r.len)?;
        list.append(d)?;
    }
    out.set_item("records", list)?;
    Ok(out)
}

/// One record's JSON text: a dict serialised (non-ASCII as UTF-8; a string
/// with a lone surrogate, which UTF-8 cannot hold, as `\\u` escapes), or
/// the text given.
fn record_text(py: Python<'_>, i: usize, r: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = r.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = r.cast::<pyo3::types::PyByteArray>() {
        return Ok(b.to_vec());
    }
    if let Ok(s) = r.cast::<PyString>() {
        return s.to_cow().map(|s| s.as_bytes().to_vec()).map_err(|_| {
            PyValueError::new_err(format!("append(): record {i} is not valid UTF-8 text"))
        });
    }
    if !r.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(format!(
            "append(): record {i} must be a dict (or the JSON text of one), not {}",
            r.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        )));
    }
    let json = py.import("json")?;
    let dumps = |ascii: bool| -> PyResult<Bound<'_, PyAny>> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("ensure_ascii", ascii)?;
        kwargs.set_item("allow_nan", false)?;
        kwargs.set_item("separators", (",", ":"))?;
        json.call_method("dumps", (r,), Some(&kwargs))
    };
    let text = dumps(false).map_err(|e| {
        PyValueError::new_err(format!("append(): record {i} cannot be serialised: {e}"))
    })?;
    let text = text.cast_into::<PyString>()?;
    match text.to_cow() {
        Ok(s) => Ok(s.as_bytes().to_vec()),
        Err(_) => Ok(dumps(true)?.extract::<String>()?.into_bytes()),
    }
}

/// The `CURRENT_USER_REQUEST` message's text, as the original
/// `buildCurrentUserRequestMessage` builds it: `none` for an absent
/// session id only (an empty one is written empty).
#[pyfunction]
#[pyo3(signature = (text, session_id=None))]
fn build_current_user_request_message(text: &str, session_id: Option<&str>) -> String {
    wmreplay::current_user_request_text(text, session_id)
}

/// A replay kept across calls: each call parses only what was appended to
/// the log since the last one.
#[pyclass(frozen, module = "wmreplay")]
struct LiveReplay {
    live: Mutex<shared::Live>,
    path: PathBuf,
}

impl LiveReplay {
    /// The replay, its lock waited for with the GIL released (another
    /// thread may hold it through a long refresh, with the GIL released).
    fn with<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut shared::Live) -> T + Send) -> T {
        py.detach(|| f(&mut self.live.lock().unwrap_or_else(|p| p.into_inner())))
    }
}

#[pymethods]
impl LiveReplay {
    #[new]
    #[pyo3(signature = (path, format="anthropic", record="raw"))]
    fn new(path: PathBuf, format: &str, record: &str) -> PyResult<Self> {
        let format = format_of(format)?;
        let record = record_mode(record)?;
        Ok(LiveReplay {
            live: Mutex::new(shared::Live::new(path.clone(), format, record)),
            path,
        })
    }

    /// Reads what was appended: `{"rebuilt", "bytes_read", "bytes_committed",
    /// "records_added", "late_records", "log_missing"}`.
    #[pyo3(signature = (*, require_log=false, warn=true))]
    fn refresh<'py>(
        &self,
        py: Python<'py>,
        require_log: bool,
        warn: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let r = self
            .with(py, |live| live.refresh(require_log))
            .map_err(to_py)?;
        warn_of(py, r.warning, warn)?;
        // The engine says when: the first refresh that finds it missing.
        warn_missing(py, &self.path, r.warn_missing, warn)?;
        let d = PyDict::new(py);
        d.set_item("rebuilt", r.refresh.rebuilt)?;
        d.set_item("bytes_read", r.refresh.bytes_read)?;
        d.set_item("bytes_committed", r.refresh.bytes_committed)?;
        d.set_item("records_added", r.refresh.records_added)?;
        d.set_item("late_records", r.refresh.late_records)?;
        d.set_item("log_missing", r.log_missing)?;
        Ok(d)
    }

    /// `refresh()` in a thread: `await live.arefresh()`.
    #[pyo3(signature = (*, require_log=false, warn=true))]
    fn arefresh<'py>(
        slf: &Bound<'py, Self>,
        require_log: bool,
        warn: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = PyDict::new(slf.py());
        kwargs.set_item("require_log", require_log)?;
        kwargs.set_item("warn", warn)?;
        to_thread(slf.getattr("refresh")?, (), Some(&kwargs))
    }

    /// `request_body()` in a thread: `await live.arequest_body(text, …)`.
    #[pyo3(signature = (text, session_id=None, system=None, **options))]
    fn arequest_body<'py>(
        slf: &Bound<'py, Self>,
        text: &str,
        session_id: Option<&str>,
        system: Option<&str>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_thread(
            slf.getattr("request_body")?,
            (text, session_id, system),
            options,
        )
    }

    /// The stats of the bytes read so far.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = self.with(py, |live| live.stats().to_json(MAX_SKIPS));
        let stats = loads(py, json.as_bytes())?;
        let missing = py.detach(|| {
            matches!(std::fs::metadata(&self.path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        });
        stats.set_item("log_missing", missing)?;
        Ok(stats)
    }

    /// Brings the replay up to date, then the request body with `text` as
    /// the current request, in the format and record mode the replay was
    /// made for, with the options of `wmreplay.request_body` (the same
    /// bytes, for the log's complete lines).
    #[pyo3(signature = (text, session_id=None, system=None, **options))]
    fn request_body<'py>(
        &self,
        py: Python<'py>,
        text: &str,
        session_id: Option<&str>,
        system: Option<&str>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (mut raw, warn) =
            raw_body(py, "request_body", options, &["format", "record", "system"])?;
        raw.system = system.map(Into::into);
        let current = CurrentRequest { text, session_id };
        let body = self
            .with(py, |live| {
                let o = live.options(raw, Style::Snake)?;
                live.body(current, &o)
            })
            .map_err(failed)?;
        warn_of(py, body.warning, warn)?;
        warn_missing(py, &self.path, body.warn_missing, warn)?;
        Ok(PyBytes::new(py, &body.bytes))
    }
}

#[pymodule]
fn _wmreplay(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_function(wrap_pyfunction!(request_body, m)?)?;
    m.add_function(wrap_pyfunction!(append, m)?)?;
    m.add_function(wrap_pyfunction!(build_current_user_request_message, m)?)?;
    m.add(
        "SkippedLinesWarning",
        m.py().get_type::<SkippedLinesWarning>(),
    )?;
    m.add("MissingLogWarning", m.py().get_type::<MissingLogWarning>())?;
    m.add("FileError", file_error_type(m.py())?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Replay>()?;
    m.add_class::<LiveReplay>()?;
    m.add_class::<MessageIter>()?;
    search::register(m)?;
    records::register(m)?;
    m.add("SYSTEM_RULE", wmreplay::SYSTEM_RULE)?;
    Ok(())
}
