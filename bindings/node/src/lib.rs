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

use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wmreplay::{
    AllocError, CurrentRequest, Format, LiveReplay as Live, LogBytes, ReadMode, RecordMode,
    ReplayOptions,
};

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
        _ => ("EWMREPLAY", String::new()),
    };
    Error::new(
        Status::GenericFailure,
        format!("{code}\u{0}{path}\u{0}{message}"),
    )
}

fn invalid(message: String) -> Error {
    Error::new(
        Status::InvalidArg,
        format!("EINVALIDARG\u{0}\u{0}{message}"),
    )
}

fn record_mode(record: Option<&str>, default: RecordMode) -> Result<RecordMode> {
    record.map_or(Ok(default), |r| r.parse().map_err(invalid))
}

fn format_of(format: Option<&str>) -> Result<Format> {
    format.unwrap_or("anthropic").parse().map_err(invalid)
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
    stats: Stats,
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
        let mut messages = Messages {
            parents: Vec::new(),
            spans: Vec::new(),
            outputs,
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
    pub stats: Stats,
}

impl From<Messages> for Replayed {
    fn from(m: Messages) -> Replayed {
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
            stats: m.stats,
        }
    }
}

/// The options of `replayWorkingMemoryLog`.
#[napi(object)]
pub struct ReplayInput {
    pub log_path: String,
    pub record: Option<String>,
}

pub struct ReplayTask {
    path: String,
    record: RecordMode,
}

impl Task for ReplayTask {
    type Output = Messages;
    type JsValue = Replayed;

    fn compute(&mut self) -> Result<Messages> {
        let mut options = ReplayOptions::default();
        options.record = self.record;
        let log = LogBytes::open(&self.path, ReadMode::Auto).map_err(to_js)?;
        let out_of_memory = |e: AllocError| to_js(e.for_log(log.path()));
        let replayed = wmreplay::try_replay(log.bytes(), &options).map_err(out_of_memory)?;
        let s = replayed.stats();
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
        messages.map_err(out_of_memory)
    }

    fn resolve(&mut self, _env: Env, output: Messages) -> Result<Replayed> {
        Ok(output.into())
    }
}

/// Replays a log into `{ parents, spans, outputs, stats }` (see `Messages`),
/// which `index.js` turns into
/// `{ messages: [{ role, content: [{ type: "text", text }] }], stats }`.
#[napi(js_name = "replayWorkingMemoryLog")]
pub fn replay_working_memory_log(input: ReplayInput) -> Result<AsyncTask<ReplayTask>> {
    Ok(AsyncTask::new(ReplayTask {
        record: record_mode(input.record.as_deref(), RecordMode::Js)?,
        path: input.log_path,
    }))
}

/// The options of `buildRequestBody`.
#[napi(object)]
pub struct BodyInput {
    pub log_path: String,
    pub text: String,
    pub session_id: Option<String>,
    pub format: Option<String>,
    pub system: Option<String>,
    pub record: Option<String>,
}

pub struct BodyTask {
    path: String,
    text: String,
    session_id: Option<String>,
    format: Format,
    system: String,
    record: RecordMode,
}

impl Task for BodyTask {
    type Output = Vec<u8>;
    type JsValue = Buffer;

    fn compute(&mut self) -> Result<Vec<u8>> {
        let mut options = ReplayOptions::default();
        options.record = self.record;
        let log = LogBytes::open(&self.path, ReadMode::Auto).map_err(to_js)?;
        let out_of_memory = |e: AllocError| to_js(e.for_log(log.path()));
        let body = wmreplay::try_replay(log.bytes(), &options)
            .map_err(out_of_memory)?
            .try_render_request(
                self.format,
                &self.system,
                &CurrentRequest {
                    text: &self.text,
                    session_id: self.session_id.as_deref(),
                },
            );
        // Checked before the body is handed out: bytes rendered from a map
        // of a file truncated meanwhile are the guard's zero pages.
        log.verify().map_err(to_js)?;
        body.map_err(out_of_memory)
    }

    fn resolve(&mut self, _env: Env, output: Vec<u8>) -> Result<Buffer> {
        Ok(output.into())
    }
}

/// The request body of a log, ready for `fetch`.
#[napi(js_name = "buildRequestBody")]
pub fn build_request_body(input: BodyInput) -> Result<AsyncTask<BodyTask>> {
    Ok(AsyncTask::new(BodyTask {
        format: format_of(input.format.as_deref())?,
        record: record_mode(input.record.as_deref(), RecordMode::Raw)?,
        system: wmreplay::system_prompt(input.system.as_deref()),
        path: input.log_path,
        text: input.text,
        session_id: input.session_id,
    }))
}

/// The options of `new LiveReplay(logPath, options)`.
#[napi(object)]
pub struct LiveInput {
    pub format: Option<String>,
    pub record: Option<String>,
}

/// The input of `live.requestBody(...)`.
#[napi(object)]
pub struct LiveBodyInput {
    pub text: String,
    pub session_id: Option<String>,
    pub system: Option<String>,
}

/// What `live.refresh()` did.
#[napi(object)]
pub struct Refreshed {
    pub rebuilt: bool,
    pub bytes_read: i64,
    pub bytes_committed: i64,
    pub records_added: i64,
    pub late_records: i64,
}

/// A replay kept across calls: each parses only what was appended.
#[napi]
pub struct LiveReplay {
    live: Arc<Mutex<Live>>,
}

#[napi]
impl LiveReplay {
    #[napi(constructor)]
    pub fn new(log_path: String, options: Option<LiveInput>) -> Result<Self> {
        let (format, record) = options.map_or((None, None), |o| (o.format, o.record));
        let format = format_of(format.as_deref())?;
        let mut opts = ReplayOptions::default();
        opts.record = record_mode(record.as_deref(), RecordMode::Raw)?;
        Ok(LiveReplay {
            live: Arc::new(Mutex::new(Live::new(log_path, format, opts))),
        })
    }

    /// Reads what was appended since the last call.
    #[napi]
    pub fn refresh(&self) -> AsyncTask<RefreshTask> {
        AsyncTask::new(RefreshTask {
            live: self.live.clone(),
        })
    }

    /// Brings the replay up to date, then the request body.
    #[napi(js_name = "requestBody")]
    pub fn request_body(&self, input: LiveBodyInput) -> AsyncTask<LiveBodyTask> {
        AsyncTask::new(LiveBodyTask {
            live: self.live.clone(),
            system: wmreplay::system_prompt(input.system.as_deref()),
            text: input.text,
            session_id: input.session_id,
        })
    }
}

pub struct RefreshTask {
    live: Arc<Mutex<Live>>,
}

impl Task for RefreshTask {
    type Output = Refreshed;
    type JsValue = Refreshed;

    fn compute(&mut self) -> Result<Refreshed> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let r = live.refresh().map_err(to_js)?;
        Ok(Refreshed {
            rebuilt: r.rebuilt,
            bytes_read: r.bytes_read as i64,
            bytes_committed: r.bytes_committed as i64,
            records_added: r.records_added as i64,
            late_records: r.late_records as i64,
        })
    }

    fn resolve(&mut self, _env: Env, output: Refreshed) -> Result<Refreshed> {
        Ok(output)
    }
}

pub struct LiveBodyTask {
    live: Arc<Mutex<Live>>,
    system: String,
    text: String,
    session_id: Option<String>,
}

impl Task for LiveBodyTask {
    type Output = Vec<u8>;
    type JsValue = Buffer;

    fn compute(&mut self) -> Result<Vec<u8>> {
        let current = CurrentRequest {
            text: &self.text,
            session_id: self.session_id.as_deref(),
        };
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .request_body(&self.system, &current)
            .map_err(to_js)
    }

    fn resolve(&mut self, _env: Env, output: Vec<u8>) -> Result<Buffer> {
        Ok(output.into())
    }
}
