//! Search: the engine's `wmreplay::search` over the index kept next to the
//! log, with `wmreplay search`'s options checked by the code the Node.js
//! package shares (`wmreplay_bindings::search`). Searches and refreshes run
//! with the GIL released; the hits come back as the CLI's hit objects
//! (`{"offset", "ts_ms", "type", "score", "record"}`), decoded by `json`.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};
use wmreplay::search::SearchIndex as Index;
use wmreplay_bindings::search::{self as shared, RawEmbed, RawSearch, SearchRequest};

use crate::{failed, loads, refused, to_py, to_thread};

/// A number option: `None` is "not given"; a `bool` is refused (it is an
/// `int` to Python); `whole`: an `int` only.
pub(crate) fn number(
    what: &str,
    key: &str,
    v: Option<&Bound<'_, PyAny>>,
    whole: bool,
) -> PyResult<Option<f64>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let wrong = || {
        let kind = if whole { "an int" } else { "a number" };
        let name = v
            .get_type()
            .name()
            .map_or_else(|_| "?".into(), |n| n.to_string());
        PyTypeError::new_err(format!("{what}(): `{key}` must be {kind}, not {name}"))
    };
    if v.is_instance_of::<PyBool>() {
        return Err(wrong());
    }
    if whole {
        // An int of any size: one beyond 2**53 is out of range, not a type error.
        return v
            .extract::<i128>()
            .map(|n| Some(n as f64))
            .map_err(|_| wrong());
    }
    v.extract::<f64>().map(Some).map_err(|_| wrong())
}

/// The query and options, checked (`ValueError` for a query without a
/// word, too long, or a limit out of range) before anything is read.
#[allow(clippy::too_many_arguments)]
fn request(
    what: &str,
    query: String,
    limit: Option<&Bound<'_, PyAny>>,
    kinds: Option<Vec<String>>,
    session: Option<String>,
    since: Option<&Bound<'_, PyAny>>,
    until: Option<&Bound<'_, PyAny>>,
) -> PyResult<SearchRequest> {
    let raw = RawSearch {
        limit: number(what, "limit", limit, true)?,
        kinds,
        session,
        since: number(what, "since", since, false)?,
        until: number(what, "until", until, false)?,
    };
    SearchRequest::new(query, raw).map_err(refused)
}

/// Searches `index` with the GIL released (its lock waited for with the GIL
/// released too): the hits as a list of dicts.
fn run<'py>(
    py: Python<'py>,
    index: &Mutex<Index>,
    request: &SearchRequest,
) -> PyResult<Bound<'py, PyAny>> {
    let json = py
        .detach(|| {
            shared::search(
                &mut index.lock().unwrap_or_else(|p| p.into_inner()),
                request,
            )
        })
        .map_err(failed)?;
    loads(py, json.as_bytes())
}

/// The records of the log at `path` best matching `query`, best first:
/// `[{"offset", "ts_ms", "type", "score", "record"}]`, what `wmreplay search`
/// prints (`record` the line's JSON, decoded). The index is kept at
/// `index_path` (default `PATH.wmreplay.idx`), made on first use and brought
/// up to date before each search. A missing log finds nothing.
#[pyfunction]
#[pyo3(signature = (path, query, *, limit=None, kinds=None, session=None, since=None, until=None, index_path=None, language=None, embed_upstream=None, embed_model=None, embed_key_env=None, embed_dimensions=None, embed_timeout=None, embed_weight=None))]
#[allow(clippy::too_many_arguments)]
fn search<'py>(
    py: Python<'py>,
    path: PathBuf,
    query: String,
    limit: Option<&Bound<'py, PyAny>>,
    kinds: Option<Vec<String>>,
    session: Option<String>,
    since: Option<&Bound<'py, PyAny>>,
    until: Option<&Bound<'py, PyAny>>,
    index_path: Option<PathBuf>,
    language: Option<String>,
    embed_upstream: Option<String>,
    embed_model: Option<String>,
    embed_key_env: Option<String>,
    embed_dimensions: Option<&Bound<'py, PyAny>>,
    embed_timeout: Option<&Bound<'py, PyAny>>,
    embed_weight: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let request = request("search", query, limit, kinds, session, since, until)?;
    let embed = raw_embed(
        "search",
        [embed_upstream, embed_model, embed_key_env],
        [embed_dimensions, embed_timeout, embed_weight],
    )?;
    let index = Mutex::new(
        shared::open_index(path, index_path, language.as_deref(), &embed).map_err(refused)?,
    );
    run(py, &index, &request)
}

/// The embedding options of `what` (`search`, `SearchIndex`): the
/// upstream, model and key variable; the dimensions, the timeout in
/// seconds and the fusion weight, each checked for its type.
fn raw_embed(
    what: &str,
    [upstream, model, key_env]: [Option<String>; 3],
    [dimensions, timeout, weight]: [Option<&Bound<'_, PyAny>>; 3],
) -> PyResult<RawEmbed> {
    Ok(RawEmbed {
        upstream,
        model,
        key_env,
        dimensions: number(what, "embed_dimensions", dimensions, true)?,
        timeout_ms: number(what, "embed_timeout", timeout, false)?.map(|s| s * 1000.0),
        weight: number(what, "embed_weight", weight, false)?,
        snake: true,
    })
}

/// A log's search index kept open across searches: each brings it up to
/// date with the lines appended since the last. Safe to share between
/// threads (searches on one index take turns).
#[pyclass(frozen, module = "wmreplay")]
struct SearchIndex {
    index: Mutex<Index>,
    path: PathBuf,
    index_path: PathBuf,
}

#[pymethods]
impl SearchIndex {
    #[new]
    #[pyo3(signature = (path, *, index_path=None, language=None, embed_upstream=None, embed_model=None, embed_key_env=None, embed_dimensions=None, embed_timeout=None, embed_weight=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        path: PathBuf,
        index_path: Option<PathBuf>,
        language: Option<String>,
        embed_upstream: Option<String>,
        embed_model: Option<String>,
        embed_key_env: Option<String>,
        embed_dimensions: Option<&Bound<'_, PyAny>>,
        embed_timeout: Option<&Bound<'_, PyAny>>,
        embed_weight: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let embed = raw_embed(
            "SearchIndex",
            [embed_upstream, embed_model, embed_key_env],
            [embed_dimensions, embed_timeout, embed_weight],
        )?;
        let index = shared::open_index(path.clone(), index_path, language.as_deref(), &embed)
            .map_err(refused)?;
        Ok(SearchIndex {
            index_path: index.path().to_path_buf(),
            index: Mutex::new(index),
            path,
        })
    }

    /// The log.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The index file.
    #[getter]
    fn index_path(&self) -> PathBuf {
        self.index_path.clone()
    }

    /// Brings the index up to date, then searches it: `wmreplay.search()`'s
    /// hits.
    #[pyo3(signature = (query, *, limit=None, kinds=None, session=None, since=None, until=None))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: String,
        limit: Option<&Bound<'py, PyAny>>,
        kinds: Option<Vec<String>>,
        session: Option<String>,
        since: Option<&Bound<'py, PyAny>>,
        until: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let request = request("search", query, limit, kinds, session, since, until)?;
        run(py, &self.index, &request)
    }

    /// `search()` in a thread: `await index.asearch(query, …)`.
    #[pyo3(signature = (query, **options))]
    fn asearch<'py>(
        slf: &Bound<'py, Self>,
        query: String,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf.getattr("search")?, (query,), options)
    }

    /// Brings the index up to date: `{"rebuilt", "bytes", "records"}` read
    /// by this call.
    fn refresh<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = py
            .detach(|| {
                self.index
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .refresh()
            })
            .map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("rebuilt", r.rebuilt)?;
        d.set_item("bytes", r.bytes)?;
        d.set_item("records", r.records)?;
        Ok(d)
    }

    /// `refresh()` in a thread: `await index.arefresh()`.
    fn arefresh<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        to_thread(slf.getattr("refresh")?, (), None)
    }

    fn __repr__(&self) -> String {
        format!(
            "<wmreplay.SearchIndex {} at {}>",
            self.path.display(),
            self.index_path.display()
        )
    }
}

/// Adds `search` and `SearchIndex` to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(search, m)?)?;
    m.add_class::<SearchIndex>()?;
    Ok(())
}
