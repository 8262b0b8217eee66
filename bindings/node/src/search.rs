//! Search: the engine's `wmreplay::search` over the index kept next to the
//! log, with `wmreplay search`'s options checked by the code the Python
//! package shares (`wmreplay_bindings::search`). Every search and refresh
//! runs on libuv's thread pool; the hits cross into JavaScript as one JSON
//! text (the CLI's hit objects), which `index.js` parses.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wmreplay::search::SearchIndex as Index;
use wmreplay_bindings::search::{self as shared, RawEmbed, RawSearch, SearchRequest};

use crate::{failed, refused, to_js};

/// The options of a search (`index.js` has checked their types).
#[napi(object)]
pub struct SearchInput {
    pub limit: Option<f64>,
    pub kinds: Option<Vec<String>>,
    pub session: Option<String>,
    pub since: Option<f64>,
    pub until: Option<f64>,
}

impl SearchInput {
    /// The query and options, checked before anything is read or made.
    fn request(self, query: String) -> Result<SearchRequest> {
        let raw = RawSearch {
            limit: self.limit,
            kinds: self.kinds,
            session: self.session,
            since: self.since,
            until: self.until,
        };
        SearchRequest::new(query, raw).map_err(refused)
    }
}

/// Where the index is and how it searches (`index.js` has checked their
/// types): `wmreplay search`'s `--index`, `--language` and `--embed-*`.
#[napi(object)]
#[derive(Default)]
pub struct IndexInput {
    pub index_path: Option<String>,
    pub language: Option<String>,
    pub embed_upstream: Option<String>,
    pub embed_model: Option<String>,
    pub embed_key_env: Option<String>,
    pub embed_dimensions: Option<f64>,
    pub embed_timeout: Option<f64>,
    pub embed_weight: Option<f64>,
}

fn open(log_path: String, o: Option<IndexInput>) -> Result<Index> {
    let o = o.unwrap_or_default();
    let embed = RawEmbed {
        upstream: o.embed_upstream,
        model: o.embed_model,
        key_env: o.embed_key_env,
        dimensions: o.embed_dimensions,
        timeout_ms: o.embed_timeout,
        weight: o.embed_weight,
        snake: false,
    };
    shared::open_index(
        PathBuf::from(log_path),
        o.index_path.map(PathBuf::from),
        o.language.as_deref(),
        &embed,
    )
    .map_err(refused)
}

fn request(query: String, input: Option<SearchInput>) -> Result<SearchRequest> {
    match input {
        Some(input) => input.request(query),
        None => SearchRequest::new(query, RawSearch::default()).map_err(refused),
    }
}

fn lock(index: &Mutex<Index>) -> std::sync::MutexGuard<'_, Index> {
    index.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct SearchTask {
    index: Arc<Mutex<Index>>,
    request: SearchRequest,
}

impl Task for SearchTask {
    type Output = String;
    type JsValue = String;

    fn compute(&mut self) -> Result<String> {
        shared::search(&mut lock(&self.index), &self.request).map_err(failed)
    }

    fn resolve(&mut self, _env: Env, output: String) -> Result<String> {
        Ok(output)
    }
}

/// Searches the log at `logPath` (its index at `indexPath`, by default
/// `LOG.wmreplay.idx`): the hits as the JSON text of an array of
/// `{offset, ts_ms, type, score, record}`.
#[napi]
pub fn search(
    log_path: String,
    query: String,
    input: Option<SearchInput>,
    index: Option<IndexInput>,
) -> Result<AsyncTask<SearchTask>> {
    let request = request(query, input)?;
    let index = open(log_path, index)?;
    Ok(AsyncTask::new(SearchTask {
        index: Arc::new(Mutex::new(index)),
        request,
    }))
}

/// What `index.refresh()` did.
#[napi(object)]
pub struct IndexRefreshed {
    pub rebuilt: bool,
    pub bytes: i64,
    pub records: i64,
}

pub struct IndexRefreshTask {
    index: Arc<Mutex<Index>>,
}

impl Task for IndexRefreshTask {
    type Output = IndexRefreshed;
    type JsValue = IndexRefreshed;

    fn compute(&mut self) -> Result<IndexRefreshed> {
        let r = lock(&self.index).refresh().map_err(to_js)?;
        Ok(IndexRefreshed {
            rebuilt: r.rebuilt,
            bytes: r.bytes as i64,
            records: r.records as i64,
        })
    }

    fn resolve(&mut self, _env: Env, output: IndexRefreshed) -> Result<IndexRefreshed> {
        Ok(output)
    }
}

/// A log's search index, kept open across searches: each brings it up to
/// date with the lines appended since the last.
#[napi]
pub struct SearchIndex {
    index: Arc<Mutex<Index>>,
    index_path: String,
}

#[napi]
impl SearchIndex {
    #[napi(constructor)]
    pub fn new(log_path: String, options: Option<IndexInput>) -> Result<Self> {
        let index = open(log_path, options)?;
        Ok(SearchIndex {
            index_path: index.path().display().to_string(),
            index: Arc::new(Mutex::new(index)),
        })
    }

    /// The index file.
    #[napi(getter, js_name = "indexPath")]
    pub fn index_path(&self) -> String {
        self.index_path.clone()
    }

    /// Brings the index up to date, then searches it (see `search`).
    #[napi]
    pub fn search(
        &self,
        query: String,
        input: Option<SearchInput>,
    ) -> Result<AsyncTask<SearchTask>> {
        Ok(AsyncTask::new(SearchTask {
            index: self.index.clone(),
            request: request(query, input)?,
        }))
    }

    /// Brings the index up to date with the log.
    #[napi]
    pub fn refresh(&self) -> AsyncTask<IndexRefreshTask> {
        AsyncTask::new(IndexRefreshTask {
            index: self.index.clone(),
        })
    }
}
