//! `wmreplay` for Node.js: the engine's public API behind napi-rs. Every
//! replay runs on libuv's thread pool, off the JavaScript thread; request
//! bodies come back as a `Buffer` built by the engine, without a JavaScript
//! object per message. `index.js` wraps these functions with the package's
//! documented names and turns errors into `Error`s with `code` and `path`.
//!
//! Faults: the buffers sized from the log that are built here (the records,
//! the body, the messages' texts) are allocated fallibly, so a log too large
//! for memory rejects with `ENOMEM` instead of aborting the process; every
//! result read from a mapped log is checked against the file afterwards, so
//! a log truncated or rewritten meanwhile rejects with `ECHANGED`, never
//! with bytes of a file that is gone.
//!
//! Search (`search`, `SearchIndex`) is in [`search`]; `records` in
//! [`records`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wmreplay::{AllocError, CurrentRequest, Format, RecordMode};
use wmreplay_bindings::{self as shared, BodyOptions, Failure, InvalidArg, RawBody, Style};

pub mod records;
pub mod search;

/// An engine error for `index.js` to rebuild: `code`, `path` and message,
/// separated by NUL bytes.
fn to_js(e: wmreplay::Error) -> Error {
    let message = e.to_string();
    let (code, path) = match &e {
        wmreplay::Error::Io { path, source, .. } => {
            use std::io::ErrorKind;
            let code = match source.kind() {
                ErrorKind::NotFound => "ENOENT",
                ErrorKind::PermissionDenied => "EACCES",
                ErrorKind::IsADirectory => "EISDIR",
                ErrorKind::InvalidInput => "EINVAL",
                _ => "EIO",
            };
            (code, path.display().to_string())
        }
        wmreplay::Error::Changed { path, .. } => ("ECHANGED", path.display().to_string()),
        wmreplay::Error::OutOfMemory { path, .. } => ("ENOMEM", path.display().to_string()),
        wmreplay::Error::State { path, .. } => ("ESTATE", path.display().to_string()),
        wmreplay::Error::Search { path, .. } => ("ESEARCH", path.display().to_string()),
        // A query or limit refused (checked before a search, so not seen here).
        wmreplay::Error::Query(_) => return invalid_field("query", message),
        _ => ("EWMREPLAY", String::new()),
    };
    Error::new(
        Status::GenericFailure,
        format!("{code}\u{0}{path}\u{0}{message}"),
    )
}

/// An invalid argument, for `index.js` to throw as a `TypeError` with code
/// `EINVALIDARG` and `field` the option's name (the path part holds it).
fn invalid_field(field: &str, message: String) -> Error {
    Error::new(
        Status::InvalidArg,
        format!("EINVALIDARG\u{0}{field}\u{0}{message}"),
    )
}

fn refused(e: InvalidArg) -> Error {
    invalid_field(&e.field, e.message)
}

fn failed(e: Failure) -> Error {
    match e {
        Failure::Engine(e) => to_js(e),
        Failure::Invalid(e) => refused(e),
    }
}

fn record_mode(record: Option<&str>, default: RecordMode) -> Result<RecordMode> {
    record.map_or(Ok(default), |r| {
        r.parse()
            .map_err(|e: String| invalid_field("record", format!("`record` is invalid: {e}")))
    })
}

fn format_of(format: Option<&str>) -> Result<Format> {
    format
        .unwrap_or("anthropic")
        .parse()
        .map_err(|e: String| invalid_field("format", format!("`format` is invalid: {e}")))
}

/// The counts the original function returns.
#[napi(object)]
pub struct Stats {
    #[napi(js_name = "total_lines")]
    pub total_lines: i64,
    #[napi(js_name = "parsed_entries")]
    pub parsed_entries: i64,
    #[napi(js_name = "skipped_invalid_json")]
    pub skipped_invalid_json: i64,
    #[napi(js_name = "skipped_invalid_shape")]
    pub skipped_invalid_shape: i64,
}

/// A replay's messages, rendered off the JavaScript thread: the texts laid
/// end to end in strings of about [`GROUP`] messages each (ASCII texts and
/// the others apart: the ASCII ones become one-byte JavaScript strings, the
/// others are encoded to UTF-16 here, so that V8 only copies them), and for
/// each message its string and span. `index.js` cuts each message's text
/// out with `substring`, which V8 answers with a slice of the parent, not a
/// copy: a few hundred strings cross into JavaScript, not one per message.
pub struct Messages {
    parents: Vec<Parent>,
    /// Per message: parent, start, end (in UTF-16 units of the parent).
    spans: Vec<u32>,
    outputs: Vec<u8>,
    /// The messages whose `type` holds a surrogate escape (see
    /// [`Surrogates`]).
    surrogates: Surrogates,
    stats: Stats,
}

/// The messages whose `type` may decode to lone surrogates, which a Rust
/// string cannot hold (the text has U+FFFD there) and a JavaScript string
/// can: for each, its index, the raw `type` (escapes kept, as in the line),
/// and how many UTF-16 units of its text are `WM_KIND=` and the `type` as
/// decoded here. `index.js` puts `JSON.parse` of the raw `type` in their
/// place, which is what the original function's `${entry.type}` writes.
#[derive(Default)]
struct Surrogates {
    index: Vec<u32>,
    skip: Vec<u32>,
    kind: Vec<String>,
}

/// Whether the raw content of a JSON string may hold a surrogate escape
/// (`\uD800` to `\uDFFF`; an escaped backslash followed by `ud8…` counts
/// too, harmlessly: `JSON.parse` decodes it as it is).
fn may_hold_surrogates(raw: &[u8]) -> bool {
    raw.windows(4).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && matches!(w[2], b'd' | b'D')
            && matches!(w[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
    })
}

/// The texts of one string handed to JavaScript.
enum Parent {
    /// ASCII: a one-byte string.
    Ascii(String),
    /// Any other text, in UTF-16.
    Utf16(Vec<u16>),
}

/// Messages per group: the groups' texts are built in parallel, and each
/// group's texts make one or two parent strings (about 1 MiB of texts on
/// the bench corpus; a message kept alone keeps its parent alive).
const GROUP: usize = 2048;

/// The longest parent, in UTF-16 units (or bytes, for the ASCII ones): well
/// below V8's longest string (2^29 - 24 units), so that only a single text
/// longer than that can fail, as it would as a string of its own.
const MAX_PARENT: usize = 1 << 26;

impl Parent {
    /// Its length in the units JavaScript indexes it by.
    fn len(&self) -> usize {
        match self {
            Parent::Ascii(s) => s.len(),
            Parent::Utf16(u) => u.len(),
        }
    }
}

/// Room for `n` more elements in `v`, or the [`AllocError`] (the texts
/// are as large as the log: they must not abort the process).
fn try_grow<T>(v: &mut Vec<T>, n: usize) -> std::result::Result<(), AllocError> {
    v.try_reserve(n).map_err(|_| AllocError {
        bytes: (v.len().saturating_add(n) * std::mem::size_of::<T>()) as u64,
    })
}

impl Messages {
    /// The texts of `replayed`'s records, a group of [`GROUP`] records per
    /// parallel task; an [`AllocError`] when they do not fit in memory.
    fn of(
        replayed: &wmreplay::Replay<'_>,
        stats: Stats,
    ) -> std::result::Result<Messages, AllocError> {
        use rayon::prelude::*;
        let records = replayed.records();
        let groups = records
            .par_chunks(GROUP)
            .map(|group| {
                let mut parents: Vec<Parent> = Vec::new();
                // The parent being filled for ASCII texts, and for others.
                let mut open: [Option<usize>; 2] = [None, None];
                let mut spans = Vec::new();
                try_grow(&mut spans, 3 * group.len())?;
                let mut text = String::new();
                for r in group {
                    text.clear();
                    replayed.message_text(r, &mut text);
                    let ascii = text.is_ascii();
                    let slot = &mut open[usize::from(!ascii)];
                    let fits = |p: &Parent| p.len() + text.len() <= MAX_PARENT;
                    let parent = match *slot {
                        Some(p) if fits(&parents[p]) => p,
                        _ => {
                            parents.push(if ascii {
                                Parent::Ascii(String::new())
                            } else {
                                Parent::Utf16(Vec::new())
                            });
                            parents.len() - 1
                        }
                    };
                    *slot = Some(parent);
                    let start = parents[parent].len();
                    let too_big = |_| AllocError {
                        bytes: (start + text.len()) as u64,
                    };
                    match &mut parents[parent] {
                        Parent::Ascii(s) => {
                            s.try_reserve(text.len()).map_err(too_big)?;
                            s.push_str(&text);
                        }
                        Parent::Utf16(u) => {
                            // At most one UTF-16 unit per byte of UTF-8.
                            u.try_reserve(text.len()).map_err(too_big)?;
                            u.extend(text.encode_utf16());
                        }
                    }
                    let end = parents[parent].len();
                    spans.extend([parent as u32, start as u32, end as u32]);
                }
                Ok((parents, spans))
            })
            .collect::<std::result::Result<Vec<(Vec<Parent>, Vec<u32>)>, AllocError>>()?;
        let mut outputs = Vec::new();
        try_grow(&mut outputs, records.len())?;
        outputs.extend(records.iter().map(|r| u8::from(r.is_output())));
        let data = replayed.data();
        let mut surrogates = Surrogates::default();
        for (i, r) in records.iter().enumerate() {
            let raw = r.kind_raw(data);
            if may_hold_surrogates(raw) {
                surrogates.index.push(i as u32);
                let decoded = r.kind(data);
                surrogates
                    .skip
                    .push(("WM_KIND=".len() + decoded.encode_utf16().count()) as u32);
                surrogates
                    .kind
                    .push(String::from_utf8_lossy(raw).into_owned());
            }
        }
        let mut messages = Messages {
            parents: Vec::new(),
            spans: Vec::new(),
            outputs,
            surrogates,
            stats,
        };
        try_grow(&mut messages.parents, 2 * groups.len())?;
        try_grow(&mut messages.spans, 3 * records.len())?;
        for (parents, spans) in groups {
            let base = messages.parents.len() as u32;
            messages.parents.extend(parents);
            messages
                .spans
                .extend(spans.chunks(3).flat_map(|s| [base + s[0], s[1], s[2]]));
        }
        Ok(messages)
    }
}

/// What `replayWorkingMemoryLog` hands to `index.js` (see [`Messages`]).
#[napi(object, object_from_js = false)]
pub struct Replayed {
    pub parents: Vec<Either<Latin1String, Utf16String>>,
    pub spans: Uint32Array,
    pub outputs: Uint8Array,
    /// Messages whose `type` is put back as `JSON.parse` decodes it.
    pub surrogate_index: Uint32Array,
    pub surrogate_skip: Uint32Array,
    pub surrogate_kind: Vec<String>,
    pub stats: Stats,
    pub warning: Option<String>,
    pub log_missing: bool,
}

/// [`Messages`] and what is reported beside them.
pub struct ReplayOutput {
    messages: Messages,
    warning: Option<String>,
    log_missing: bool,
}

impl From<ReplayOutput> for Replayed {
    fn from(out: ReplayOutput) -> Replayed {
        let m = out.messages;
        Replayed {
            parents: m
                .parents
                .into_iter()
                .map(|p| match p {
                    Parent::Ascii(text) => Either::A(Latin1String::from(text)),
                    Parent::Utf16(units) => Either::B(Utf16String::from(units)),
                })
                .collect(),
            spans: Uint32Array::new(m.spans),
            outputs: Uint8Array::new(m.outputs),
            surrogate_index: Uint32Array::new(m.surrogates.index),
            surrogate_skip: Uint32Array::new(m.surrogates.skip),
            surrogate_kind: m.surrogates.kind,
            stats: m.stats,
            warning: out.warning,
            log_missing: out.log_missing,
        }
    }
}

/// The options of `replayWorkingMemoryLog`.
#[napi(object)]
pub struct ReplayInput {
    pub log_path: String,
    pub record: Option<String>,
    pub require_log: Option<bool>,
}

pub struct ReplayTask {
    path: String,
    record: RecordMode,
    require_log: bool,
}

impl Task for ReplayTask {
    type Output = ReplayOutput;
    type JsValue = Replayed;

    fn compute(&mut self) -> Result<ReplayOutput> {
        let options = shared::replay_options(self.record);
        let log = shared::open_log(Path::new(&self.path), self.require_log).map_err(to_js)?;
        let out_of_memory = |e: AllocError| to_js(e.for_log(log.path()));
        let replayed = wmreplay::try_replay(log.bytes(), &options).map_err(out_of_memory)?;
        let s = replayed.stats();
        let warning = shared::skipped_warning(log.path(), s);
        let stats = Stats {
            total_lines: s.total_lines as i64,
            parsed_entries: s.parsed_entries as i64,
            skipped_invalid_json: s.skipped_invalid_json as i64,
            skipped_invalid_shape: s.skipped_invalid_shape as i64,
        };
        let messages = Messages::of(&replayed, stats);
        drop(replayed);
        // A log that changed under the replay is reported as such, even when
        // the texts read from it did not fit in memory either.
        log.verify().map_err(to_js)?;
        Ok(ReplayOutput {
            messages: messages.map_err(out_of_memory)?,
            warning,
            log_missing: log.is_missing(),
        })
    }

    fn resolve(&mut self, _env: Env, output: ReplayOutput) -> Result<Replayed> {
        Ok(output.into())
    }
}

/// Replays a log into `{ parents, spans, outputs, surrogate…, stats,
/// warning, logMissing }` (see `Messages`), which `index.js` turns into
/// `{ messages: [{ role, content: [{ type: "text", text }] }], stats }`.
#[napi(js_name = "replayWorkingMemoryLog")]
pub fn replay_working_memory_log(input: ReplayInput) -> Result<AsyncTask<ReplayTask>> {
    Ok(AsyncTask::new(ReplayTask {
        record: record_mode(input.record.as_deref(), RecordMode::Js)?,
        path: input.log_path,
        require_log: input.require_log.unwrap_or(false),
    }))
}

/// The request-body options every body call takes (`index.js` has checked
/// their types; their values are checked here, by the code the Python
/// package shares).
#[napi(object)]
pub struct BodyInput {
    pub text: String,
    pub session_id: Option<String>,
    pub format: Option<String>,
    pub system: Option<String>,
    pub record: Option<String>,
    pub model: Option<String>,
    pub max_output_tokens: Option<f64>,
    /// The text of one JSON object (`JSON.stringify` of the caller's).
    pub params: Option<String>,
    pub allow_params: Option<Vec<String>>,
    pub session_only: Option<bool>,
    pub kinds: Option<Vec<String>>,
    pub since: Option<f64>,
    pub until: Option<f64>,
    pub tail: Option<f64>,
    pub max_tokens: Option<f64>,
    pub tokenizer: Option<String>,
    pub trim_to: Option<f64>,
    pub start_on: Option<String>,
    pub mark_pending: Option<bool>,
    pub summaries: Option<bool>,
    pub facts: Option<bool>,
    pub cache: Option<String>,
    pub cache_ttl: Option<String>,
    pub state: Option<String>,
    pub require_log: Option<bool>,
    pub recall: Option<f64>,
    pub language: Option<String>,
}

impl BodyInput {
    /// The checked options, and the current request's text and session.
    fn options(self) -> Result<(BodyOptions, String, Option<String>)> {
        let (raw, text, session_id) = self.raw();
        let options = BodyOptions::new(raw, Style::Camel).map_err(refused)?;
        Ok((options, text, session_id))
    }

    /// The options unchecked, and the current request's text and session.
    fn raw(self) -> (RawBody, String, Option<String>) {
        let raw = RawBody {
            format: self.format,
            record: self.record,
            system: self.system,
            model: self.model,
            max_output_tokens: self.max_output_tokens,
            params: self.params,
            allow_params: self.allow_params,
            session_only: self.session_only.unwrap_or(false),
            kinds: self.kinds,
            since: self.since,
            until: self.until,
            tail: self.tail,
            max_tokens: self.max_tokens,
            tokenizer: self.tokenizer,
            trim_to: self.trim_to,
            start_on: self.start_on,
            mark_pending: self.mark_pending.unwrap_or(false),
            summaries: self.summaries.unwrap_or(false),
            facts: self.facts.unwrap_or(false),
            cache: self.cache,
            cache_ttl: self.cache_ttl,
            state: self.state.map(PathBuf::from),
            require_log: self.require_log.unwrap_or(false),
            recall: self.recall,
            language: self.language,
        };
        (raw, self.text, self.session_id)
    }
}

/// A body and what is reported beside it.
#[napi(object, object_from_js = false)]
pub struct BodyOutput {
    pub body: Buffer,
    pub warning: Option<String>,
    pub log_missing: bool,
    /// Warn that the log is missing (a live replay: once while it is).
    pub warn_missing: bool,
}

impl From<shared::Body> for BodyOutput {
    fn from(b: shared::Body) -> BodyOutput {
        BodyOutput {
            body: b.bytes.into(),
            warning: b.warning,
            log_missing: b.log_missing,
            warn_missing: b.warn_missing,
        }
    }
}

pub struct BodyTask {
    path: PathBuf,
    options: BodyOptions,
    text: String,
    session_id: Option<String>,
}

impl Task for BodyTask {
    type Output = shared::Body;
    type JsValue = BodyOutput;

    fn compute(&mut self) -> Result<shared::Body> {
        let current = CurrentRequest {
            text: &self.text,
            session_id: self.session_id.as_deref(),
        };
        shared::body_of_log(&self.path, current, &self.options).map_err(failed)
    }

    fn resolve(&mut self, _env: Env, output: shared::Body) -> Result<BodyOutput> {
        Ok(output.into())
    }
}

/// The request body of a log, ready for `fetch`: `wmreplay respond`'s.
#[napi(js_name = "buildRequestBody")]
pub fn build_request_body(log_path: String, input: BodyInput) -> Result<AsyncTask<BodyTask>> {
    let (options, text, session_id) = input.options()?;
    Ok(AsyncTask::new(BodyTask {
        path: PathBuf::from(log_path),
        options,
        text,
        session_id,
    }))
}

/// The options of `new LiveReplay(logPath, options)`.
#[napi(object)]
pub struct LiveInput {
    pub format: Option<String>,
    pub record: Option<String>,
}

/// What `live.refresh()` did.
#[napi(object)]
pub struct Refreshed {
    pub rebuilt: bool,
    pub bytes_read: i64,
    pub bytes_committed: i64,
    pub records_added: i64,
    pub late_records: i64,
    pub log_missing: bool,
    pub warning: Option<String>,
    /// Warn that the log is missing: the first refresh that finds it so.
    pub warn_missing: bool,
}

/// A replay kept across calls: each parses only what was appended.
#[napi]
pub struct LiveReplay {
    live: Arc<Mutex<shared::Live>>,
}

#[napi]
impl LiveReplay {
    #[napi(constructor)]
    pub fn new(log_path: String, options: Option<LiveInput>) -> Result<Self> {
        let (format, record) = options.map_or((None, None), |o| (o.format, o.record));
        let format = format_of(format.as_deref())?;
        let record = record_mode(record.as_deref(), RecordMode::Raw)?;
        Ok(LiveReplay {
            live: Arc::new(Mutex::new(shared::Live::new(
                PathBuf::from(log_path),
                format,
                record,
            ))),
        })
    }

    /// Reads what was appended since the last call.
    #[napi]
    pub fn refresh(&self, require_log: Option<bool>) -> AsyncTask<RefreshTask> {
        AsyncTask::new(RefreshTask {
            live: self.live.clone(),
            require_log: require_log.unwrap_or(false),
        })
    }

    /// Brings the replay up to date, then the request body.
    #[napi(js_name = "requestBody")]
    pub fn request_body(&self, input: BodyInput) -> Result<AsyncTask<LiveBodyTask>> {
        let (raw, text, session_id) = input.raw();
        // In the replay's own format and record mode (index.js refuses others).
        let options = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .options(raw, Style::Camel)
            .map_err(refused)?;
        Ok(AsyncTask::new(LiveBodyTask {
            live: self.live.clone(),
            options,
            text,
            session_id,
        }))
    }
}

pub struct RefreshTask {
    live: Arc<Mutex<shared::Live>>,
    require_log: bool,
}

impl Task for RefreshTask {
    type Output = Refreshed;
    type JsValue = Refreshed;

    fn compute(&mut self) -> Result<Refreshed> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let r = live.refresh(self.require_log).map_err(to_js)?;
        Ok(Refreshed {
            rebuilt: r.refresh.rebuilt,
            bytes_read: r.refresh.bytes_read as i64,
            bytes_committed: r.refresh.bytes_committed as i64,
            records_added: r.refresh.records_added as i64,
            late_records: r.refresh.late_records as i64,
            log_missing: r.log_missing,
            warning: r.warning,
            warn_missing: r.warn_missing,
        })
    }

    fn resolve(&mut self, _env: Env, output: Refreshed) -> Result<Refreshed> {
        Ok(output)
    }
}

pub struct LiveBodyTask {
    live: Arc<Mutex<shared::Live>>,
    options: BodyOptions,
    text: String,
    session_id: Option<String>,
}

impl Task for LiveBodyTask {
    type Output = shared::Body;
    type JsValue = BodyOutput;

    fn compute(&mut self) -> Result<shared::Body> {
        let current = CurrentRequest {
            text: &self.text,
            session_id: self.session_id.as_deref(),
        };
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .body(current, &self.options)
            .map_err(failed)
    }

    fn resolve(&mut self, _env: Env, output: shared::Body) -> Result<BodyOutput> {
        Ok(output.into())
    }
}

/// Where one appended record went (the server's `/v1/records` answer).
#[napi(object)]
pub struct AppendedRecord {
    #[napi(js_name = "ts_ms")]
    pub ts_ms: f64,
    pub offset: i64,
    pub bytes: i64,
}

/// What `append` wrote.
#[napi(object)]
pub struct Appended {
    pub written: u32,
    pub records: Vec<AppendedRecord>,
}

pub struct AppendTask {
    path: PathBuf,
    records: Vec<Vec<u8>>,
}

impl Task for AppendTask {
    type Output = Appended;
    type JsValue = Appended;

    fn compute(&mut self) -> Result<Appended> {
        match wmreplay::append(&self.path, &self.records) {
            Ok(report) => Ok(Appended {
                written: report.records.len() as u32,
                records: report
                    .records
                    .iter()
                    .map(|r| AppendedRecord {
                        ts_ms: r.ts_ms,
                        offset: r.offset as i64,
                        bytes: r.len as i64,
                    })
                    .collect(),
            }),
            Err(wmreplay::AppendError::Log(e)) => Err(to_js(e)),
            Err(e @ wmreplay::AppendError::InvalidRecord { .. }) => {
                Err(invalid_field("records", format!("append: {e}")))
            }
            Err(e) => Err(invalid_field("records", format!("append: {e}"))),
        }
    }

    fn resolve(&mut self, _env: Env, output: Appended) -> Result<Appended> {
        Ok(output)
    }
}

/// Appends records (each the text of one JSON object) to the log, as
/// `wmreplay serve` appends them: see `wmreplay::append`.
#[napi]
pub fn append(log_path: String, records: Vec<Buffer>) -> AsyncTask<AppendTask> {
    AsyncTask::new(AppendTask {
        path: PathBuf::from(log_path),
        records: records.iter().map(|b| b.to_vec()).collect(),
    })
}

/// The `CURRENT_USER_REQUEST` message's text.
#[napi(js_name = "currentUserRequestText")]
pub fn current_user_request_text(text: String, session_id: Option<String>) -> String {
    wmreplay::current_user_request_text(&text, session_id.as_deref())
}

/// The system prompt's rule.
#[napi(js_name = "SYSTEM_RULE")]
pub const SYSTEM_RULE: &str = wmreplay::SYSTEM_RULE;
