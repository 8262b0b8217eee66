//! `wmreplay` for Node.js: the engine's public API behind napi-rs. Every
//! replay runs on libuv's thread pool, off the JavaScript thread; request
//! bodies come back as a `Buffer` built by the engine, without a JavaScript
//! object per message. `index.js` wraps these functions with the package's
//! documented names and turns errors into `Error`s with `code` and `path`.

use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use wmreplay::{
    CurrentRequest, Format, LiveReplay as Live, LogBytes, ReadMode, RecordMode, ReplayOptions,
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

/// A replay's messages, rendered off the JavaScript thread: every text in
/// one buffer, with where each ends and whether it is an answer.
pub struct Messages {
    texts: String,
    ends: Vec<usize>,
    outputs: Vec<bool>,
    stats: Stats,
}

/// Calls a napi function, turning its status into an error.
fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(
            Status::GenericFailure,
            format!("EWMREPLAY\u{0}\u{0}building the messages: {what} failed ({status})"),
        ))
    }
}

/// A JavaScript string of `s`: one-byte (no decoding) when it is ASCII.
///
/// # Safety
///
/// `env` must be the live environment of the current call.
unsafe fn js_string(env: sys::napi_env, s: &str) -> Result<sys::napi_value> {
    let mut v = std::ptr::null_mut();
    // SAFETY: `env` is live (the caller's contract); the pointer and length
    // describe `s`'s bytes, which napi copies before returning; `v` is a
    // valid out-pointer.
    let status = unsafe {
        if s.is_ascii() {
            sys::napi_create_string_latin1(env, s.as_ptr().cast(), s.len() as isize, &mut v)
        } else {
            sys::napi_create_string_utf8(env, s.as_ptr().cast(), s.len() as isize, &mut v)
        }
    };
    check(status, "creating a string")?;
    Ok(v)
}

impl TypeName for Messages {
    fn type_name() -> &'static str {
        "Replayed"
    }

    fn value_type() -> ValueType {
        ValueType::Object
    }
}

impl ToNapiValue for Messages {
    /// `{ messages: [{ role, text }], stats }`, built with napi calls
    /// directly: one-byte strings where the text is ASCII, the keys and the
    /// two roles created once, a handle scope per thousand messages.
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        let n = val.ends.len();
        let mut array = std::ptr::null_mut();
        // SAFETY (every block below): `env` is the live environment napi
        // passes to this conversion; every out-pointer is a valid local;
        // every napi_value used was created in this call, in a scope still
        // open (the keys and roles in the outer one, which stays open until
        // the array is returned), and every pointer/length pair describes a
        // live Rust string that napi copies.
        unsafe {
            check(
                sys::napi_create_array_with_length(env, n, &mut array),
                "creating the array",
            )?;
            let role_key = js_string(env, "role")?;
            let text_key = js_string(env, "text")?;
            let user = js_string(env, "user")?;
            let assistant = js_string(env, "assistant")?;
            let mut start = 0;
            for lo in (0..n).step_by(1024) {
                let mut scope = std::ptr::null_mut();
                check(
                    sys::napi_open_handle_scope(env, &mut scope),
                    "opening a scope",
                )?;
                for i in lo..(lo + 1024).min(n) {
                    let end = val.ends[i];
                    let mut obj = std::ptr::null_mut();
                    check(sys::napi_create_object(env, &mut obj), "creating an object")?;
                    let role = if val.outputs[i] { assistant } else { user };
                    check(
                        sys::napi_set_property(env, obj, role_key, role),
                        "setting role",
                    )?;
                    let text = js_string(env, &val.texts[start..end])?;
                    check(
                        sys::napi_set_property(env, obj, text_key, text),
                        "setting text",
                    )?;
                    check(
                        sys::napi_set_element(env, array, i as u32, obj),
                        "filling the array",
                    )?;
                    start = end;
                }
                check(sys::napi_close_handle_scope(env, scope), "closing a scope")?;
            }
            let stats = Stats::to_napi_value(env, val.stats)?;
            let mut out = std::ptr::null_mut();
            check(
                sys::napi_create_object(env, &mut out),
                "creating the result",
            )?;
            let messages_key = js_string(env, "messages")?;
            let stats_key = js_string(env, "stats")?;
            check(
                sys::napi_set_property(env, out, messages_key, array),
                "setting messages",
            )?;
            check(
                sys::napi_set_property(env, out, stats_key, stats),
                "setting stats",
            )?;
            Ok(out)
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
    type JsValue = Messages;

    fn compute(&mut self) -> Result<Messages> {
        let mut options = ReplayOptions::default();
        options.record = self.record;
        let log = LogBytes::open(&self.path, ReadMode::Auto).map_err(to_js)?;
        let replayed = wmreplay::replay(log.bytes(), &options);
        let records = replayed.records();
        let mut texts = String::with_capacity(log.bytes().len() + 64 * records.len());
        let mut ends = Vec::with_capacity(records.len());
        let mut outputs = Vec::with_capacity(records.len());
        for r in records {
            replayed.message_text(r, &mut texts);
            ends.push(texts.len());
            outputs.push(r.is_output());
        }
        let s = replayed.stats();
        let stats = Stats {
            total_lines: s.total_lines as i64,
            parsed_entries: s.parsed_entries as i64,
            skipped_invalid_json: s.skipped_invalid_json as i64,
            skipped_invalid_shape: s.skipped_invalid_shape as i64,
        };
        drop(replayed);
        log.verify().map_err(to_js)?;
        Ok(Messages {
            texts,
            ends,
            outputs,
            stats,
        })
    }

    fn resolve(&mut self, _env: Env, output: Messages) -> Result<Messages> {
        Ok(output)
    }
}

/// Replays a log into `{ messages: [{ role, text }], stats }`.
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
        let body = wmreplay::replay(log.bytes(), &options).render_request(
            self.format,
            &self.system,
            &CurrentRequest {
                text: &self.text,
                session_id: self.session_id.as_deref(),
            },
        );
        log.verify().map_err(to_js)?;
        Ok(body)
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
