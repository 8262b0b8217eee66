//! `records()`: the records of a log (one replay, the engine's filters, in
//! replay or log order) as one JSON text built by the code the Python
//! package shares (`wmreplay_bindings::records`), which `index.js` parses.
//! Runs on libuv's thread pool.

use std::path::PathBuf;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wmreplay_bindings::records::{self as shared, RawRecords, RecordsRequest};

use crate::{refused, to_js};

/// The options of `records()` (`index.js` has checked their types).
#[napi(object)]
pub struct RecordsInput {
    pub kinds: Option<Vec<String>>,
    pub session: Option<String>,
    pub since: Option<f64>,
    pub until: Option<f64>,
    pub order: Option<String>,
    pub require_log: Option<bool>,
}

/// The records, and what is reported beside them.
#[napi(object, object_from_js = false)]
pub struct RecordsOutput {
    /// A JSON array of `{offset, ts_ms, type, record}`.
    pub json: String,
    pub warning: Option<String>,
    pub log_missing: bool,
}

pub struct RecordsTask {
    path: PathBuf,
    request: RecordsRequest,
    require_log: bool,
}

impl Task for RecordsTask {
    type Output = shared::Records;
    type JsValue = RecordsOutput;

    fn compute(&mut self) -> Result<shared::Records> {
        shared::records_of_log(&self.path, &self.request, self.require_log).map_err(to_js)
    }

    fn resolve(&mut self, _env: Env, output: shared::Records) -> Result<RecordsOutput> {
        Ok(RecordsOutput {
            json: output.json,
            warning: output.warning,
            log_missing: output.log_missing,
        })
    }
}

/// The records of the log at `logPath` that the options keep, checked
/// before anything is read.
#[napi]
pub fn records(log_path: String, input: Option<RecordsInput>) -> Result<AsyncTask<RecordsTask>> {
    let input = input.unwrap_or(RecordsInput {
        kinds: None,
        session: None,
        since: None,
        until: None,
        order: None,
        require_log: None,
    });
    let raw = RawRecords {
        kinds: input.kinds,
        session: input.session,
        since: input.since,
        until: input.until,
        order: input.order,
    };
    Ok(AsyncTask::new(RecordsTask {
        path: PathBuf::from(log_path),
        request: RecordsRequest::new(raw).map_err(refused)?,
        require_log: input.require_log.unwrap_or(false),
    }))
}
