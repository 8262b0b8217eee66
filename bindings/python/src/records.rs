//! `records()`: the records of a log (one replay, the engine's filters, in
//! replay or log order), built as one JSON text by the code the Node.js
//! package shares (`wmreplay_bindings::records`) with the GIL released,
//! and decoded by `json`.

use std::path::PathBuf;

use pyo3::prelude::*;
use wmreplay_bindings::records::{self as shared, RawRecords, RecordsRequest};

use crate::search::number;
use crate::{loads, refused, to_py, warn_of};

/// The records of the log at `path`, each `{"offset", "ts_ms", "type",
/// "record"}` (`record` the line's JSON, decoded): every record, or those
/// of the filters (`kinds`, `session`, `since`, `until`, as a search's), in
/// replay order (`order="replay"`) or in the order the lines were written
/// (`order="log"`). A missing log has none (with `require_log`, a
/// `FileNotFoundError`). The GIL is released while it runs.
#[pyfunction]
#[pyo3(signature = (path, *, kinds=None, session=None, since=None, until=None, order="replay", require_log=false, warn=true))]
#[allow(clippy::too_many_arguments)]
fn records<'py>(
    py: Python<'py>,
    path: PathBuf,
    kinds: Option<Vec<String>>,
    session: Option<String>,
    since: Option<&Bound<'py, PyAny>>,
    until: Option<&Bound<'py, PyAny>>,
    order: &str,
    require_log: bool,
    warn: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let raw = RawRecords {
        kinds,
        session,
        since: number("records", "since", since, false)?,
        until: number("records", "until", until, false)?,
        order: Some(order.into()),
    };
    let request = RecordsRequest::new(raw).map_err(refused)?;
    let found = py
        .detach(|| shared::records_of_log(&path, &request, require_log))
        .map_err(to_py)?;
    warn_of(py, found.warning, warn)?;
    loads(py, found.json.as_bytes())
}

/// Adds `records` to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(records, m)?)?;
    Ok(())
}
