//! What the Node.js and Python packages share above the engine's public
//! API, so that both take the same request-body options, check them the
//! same way and give them the same defaults, and build the bytes
//! `wmreplay respond` writes for the same options:
//!
//! - [`BodyOptions`]: everything `wmreplay respond` takes besides the log
//!   and the text (format, record mode, system preamble, `model` and its
//!   leading fields, the selection, prompt-cache breakpoints, the state
//!   store of remembered window starts, whether a missing log is an
//!   error), checked from what a package received ([`RawBody`]) into one
//!   value, or an [`InvalidArg`] naming the option as that package spells
//!   it ([`Style`]);
//! - [`body_of_log`] (one replay, as `respond` makes it), [`body_of_replay`]
//!   (a replay already made), [`Live`] (a replay kept across calls);
//! - [`skipped_warning`]: the warning `respond` prints when most of a log's
//!   lines are not records, for the packages to raise as their runtime's
//!   warning.
//! - [`search`]: `wmreplay search`'s options, checked the same way for
//!   both packages, over the engine's search index.
//! - [`records`]: a log's records (the engine's filters, replay or log
//!   order) as one JSON text.

use std::path::{Path, PathBuf};

use wmreplay::search::{Language, MAX_LIMIT, SearchIndex};
use wmreplay::state::Store;
use wmreplay::{
    AllocError, CacheMemory, CachePolicy, CacheTtl, CurrentRequest, Error, Format, LiveReplay,
    LogBytes, ReadMode, RecordMode, Replay, ReplayOptions, ReplayStats, RequestSpec, Selection,
    Tokenizer,
};

pub use wmreplay;

pub mod records;
pub mod search;

/// How a package spells its option names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// JavaScript: `maxOutputTokens`.
    Camel,
    /// Python: `max_output_tokens`.
    Snake,
}

/// The options, for naming them in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `format`.
    Format,
    /// `record`.
    Record,
    /// `model`.
    Model,
    /// `maxOutputTokens` / `max_output_tokens`.
    MaxOutputTokens,
    /// `params`.
    Params,
    /// `allowParams` / `allow_params`.
    AllowParams,
    /// `sessionOnly` / `session_only`.
    SessionOnly,
    /// `kinds`.
    Kinds,
    /// `since`.
    Since,
    /// `until`.
    Until,
    /// `tail`.
    Tail,
    /// `maxTokens` / `max_tokens`.
    MaxTokens,
    /// `tokenizer`.
    Tokenizer,
    /// `trimTo` / `trim_to`.
    TrimTo,
    /// `startOn` / `start_on`.
    StartOn,
    /// `cache`.
    Cache,
    /// `cacheTtl` / `cache_ttl`.
    CacheTtl,
    /// `recall`.
    Recall,
    /// `language`.
    Language,
}

impl Field {
    /// The option's name in `style`.
    pub fn name(self, style: Style) -> &'static str {
        let (camel, snake) = match self {
            Field::Format => ("format", "format"),
            Field::Record => ("record", "record"),
            Field::Model => ("model", "model"),
            Field::MaxOutputTokens => ("maxOutputTokens", "max_output_tokens"),
            Field::Params => ("params", "params"),
            Field::AllowParams => ("allowParams", "allow_params"),
            Field::SessionOnly => ("sessionOnly", "session_only"),
            Field::Kinds => ("kinds", "kinds"),
            Field::Since => ("since", "since"),
            Field::Until => ("until", "until"),
            Field::Tail => ("tail", "tail"),
            Field::MaxTokens => ("maxTokens", "max_tokens"),
            Field::Tokenizer => ("tokenizer", "tokenizer"),
            Field::TrimTo => ("trimTo", "trim_to"),
            Field::StartOn => ("startOn", "start_on"),
            Field::Cache => ("cache", "cache"),
            Field::CacheTtl => ("cacheTtl", "cache_ttl"),
            Field::Recall => ("recall", "recall"),
            Field::Language => ("language", "language"),
        };
        match style {
            Style::Camel => camel,
            Style::Snake => snake,
        }
    }

    /// The CLI flag of the same option, as the engine's own messages
    /// (selection checks) name it.
    fn flag(self) -> &'static str {
        match self {
            Field::Format => "--format",
            Field::Record => "--record",
            Field::Model => "--model",
            Field::MaxOutputTokens => "--max-output-tokens",
            Field::Params => "--param",
            Field::AllowParams => "--allow-param",
            Field::SessionOnly => "--session-only",
            Field::Kinds => "--kinds",
            Field::Since => "--since",
            Field::Until => "--until",
            Field::Tail => "--tail",
            Field::MaxTokens => "--max-tokens",
            Field::Tokenizer => "--tokenizer",
            Field::TrimTo => "--trim-to",
            Field::StartOn => "--start-on",
            Field::Cache => "--cache",
            Field::CacheTtl => "--cache-ttl",
            Field::Recall => "--recall",
            Field::Language => "--language",
        }
    }

    const ALL: [Field; 19] = [
        Field::Format,
        Field::Record,
        Field::Model,
        Field::MaxOutputTokens,
        Field::Params,
        Field::AllowParams,
        Field::SessionOnly,
        Field::Kinds,
        Field::Since,
        Field::Until,
        Field::Tail,
        Field::MaxTokens,
        Field::Tokenizer,
        Field::TrimTo,
        Field::StartOn,
        Field::Cache,
        Field::CacheTtl,
        Field::Recall,
        Field::Language,
    ];
}

/// An option a package refuses: the option as the caller named it, and a
/// message that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidArg {
    /// The option, as the package spells it (`maxOutputTokens`, `trim_to`),
    /// or a parameter's name inside `params`.
    pub field: String,
    /// What is wrong, naming the option.
    pub message: String,
}

impl std::fmt::Display for InvalidArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A request-body call's options as a package received them, before any
/// check. `None` (or `false`) is "not given": the default.
#[derive(Debug, Clone, Default)]
pub struct RawBody {
    /// `"anthropic"` (default), `"openai"`, `"ndjson"` or `"xml"`.
    pub format: Option<String>,
    /// `"raw"` (default: the line as written) or `"js"`.
    pub record: Option<String>,
    /// Text placed before the system rule.
    pub system: Option<String>,
    /// The model: with it the body starts with the provider's leading
    /// fields; without it, it has none (the contract's body).
    pub model: Option<String>,
    /// The answer's token limit (default 1024, with `model` only).
    pub max_output_tokens: Option<f64>,
    /// Extra request members: the text of one JSON object (with `model`
    /// only).
    pub params: Option<String>,
    /// Parameter names to let through although the provider's table does
    /// not list them (a parameter newer than the table).
    pub allow_params: Option<Vec<String>>,
    /// Replay only the records of the request's session (and those with
    /// none).
    pub session_only: bool,
    /// Keep only records of these types.
    pub kinds: Option<Vec<String>>,
    /// Keep only records with `ts_ms` at least this.
    pub since: Option<f64>,
    /// Keep only records with `ts_ms` at most this.
    pub until: Option<f64>,
    /// Keep the last N records.
    pub tail: Option<f64>,
    /// Keep the newest records whose texts fit this many tokens.
    pub max_tokens: Option<f64>,
    /// How `max_tokens` counts: `"o200k_base"` (default), `"cl100k_base"`
    /// or `"bytes"`.
    pub tokenizer: Option<String>,
    /// Cache-stable trimming share, in (0, 1].
    pub trim_to: Option<f64>,
    /// Start a cut window on a record of this type.
    pub start_on: Option<String>,
    /// Mark the pending `text_input`.
    pub mark_pending: bool,
    /// Replay the newest `wm_summary` first, in place of what it covers.
    pub summaries: bool,
    /// Replay the `wm_fact` records as one `wm_facts` message.
    pub facts: bool,
    /// `"none"` (default) or `"auto"`: Anthropic prompt-cache breakpoints.
    pub cache: Option<String>,
    /// `"5m"` (default) or `"1h"`.
    pub cache_ttl: Option<String>,
    /// The state store for `trim_to` (default: `LOG.wmreplay.db`).
    pub state: Option<PathBuf>,
    /// A missing log is an error (`ENOENT`), not an empty one.
    pub require_log: bool,
    /// Recall: the K records best matching the request's text that the
    /// replay does not hold, as one `WM_KIND=recall` message (`respond
    /// --recall K`), from the search index next to the log.
    pub recall: Option<f64>,
    /// The recall index's language (`respond --language`; default English).
    pub language: Option<String>,
}

/// The default answer token limit when `model` is given (`respond
/// --max-output-tokens`'s default).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 1024;

/// Checked request-body options, with their defaults: `respond`'s.
#[derive(Debug, Clone)]
pub struct BodyOptions {
    /// The body format.
    pub format: Format,
    /// What `WM_JSON` holds.
    pub record: RecordMode,
    /// A missing log is an error.
    pub require_log: bool,
    style: Style,
    system: String,
    fields: String,
    session_only: bool,
    /// The selection, without the session filter (which takes the
    /// request's session id).
    selection: Selection,
    cache: Option<CachePolicy>,
    state: Option<PathBuf>,
    recall: Option<usize>,
    language: Language,
}

fn whole(
    v: Option<f64>,
    field: Field,
    style: Style,
    min: f64,
    max: f64,
) -> Result<Option<f64>, InvalidArg> {
    match v {
        Some(n) if !(n.fract() == 0.0 && n >= min && n <= max) => Err(invalid(
            field,
            style,
            format!("must be a whole number from {min} to {max}, not {n}"),
        )),
        v => Ok(v),
    }
}

fn invalid(field: Field, style: Style, what: String) -> InvalidArg {
    let name = field.name(style);
    InvalidArg {
        field: name.into(),
        message: format!("`{name}` {what}"),
    }
}

/// An engine message that names CLI flags, with the package's names
/// instead; the first flag named is the field.
fn translated(message: &str, style: Style) -> InvalidArg {
    let mut text = message.to_string();
    let mut first: Option<(usize, Field)> = None;
    // Longest flags first: `--max-tokens` is not `--max-output-tokens`.
    let mut fields = Field::ALL;
    fields.sort_by_key(|f| std::cmp::Reverse(f.flag().len()));
    for f in fields {
        if let Some(at) = message.find(f.flag())
            && first.is_none_or(|(a, _)| at < a)
            && !message[at + f.flag().len()..]
                .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
        {
            first = Some((at, f));
        }
        text = text.replace(f.flag(), &format!("`{}`", f.name(style)));
    }
    InvalidArg {
        field: first.map_or("options", |(_, f)| f.name(style)).into(),
        message: text,
    }
}

impl BodyOptions {
    /// Checks `raw`, naming options in `style`.
    pub fn new(raw: RawBody, style: Style) -> Result<BodyOptions, InvalidArg> {
        let bad = |field: Field, e: String| invalid(field, style, e);
        let format: Format = match &raw.format {
            None => Format::Anthropic,
            Some(f) => f
                .parse()
                .map_err(|e: String| bad(Field::Format, format!("is invalid: {e}")))?,
        };
        let record: RecordMode = match &raw.record {
            None => RecordMode::Raw,
            Some(r) => r
                .parse()
                .map_err(|e: String| bad(Field::Record, format!("is invalid: {e}")))?,
        };
        let max_output = whole(
            raw.max_output_tokens,
            Field::MaxOutputTokens,
            style,
            1.0,
            u32::MAX as f64,
        )?;
        let fields = match &raw.model {
            None => {
                if max_output.is_some() {
                    return Err(bad(
                        Field::MaxOutputTokens,
                        format!(
                            "needs `{}`: a body without a model has no leading fields",
                            Field::Model.name(style)
                        ),
                    ));
                }
                for (given, field) in [
                    (raw.params.is_some(), Field::Params),
                    (raw.allow_params.is_some(), Field::AllowParams),
                ] {
                    if given {
                        return Err(bad(
                            field,
                            format!(
                                "needs `{}`: a body without a model has no leading fields",
                                Field::Model.name(style)
                            ),
                        ));
                    }
                }
                String::new()
            }
            Some(model) => {
                if model.is_empty() {
                    return Err(bad(Field::Model, "is empty".into()));
                }
                let params = match &raw.params {
                    None => Vec::new(),
                    Some(json) => {
                        wmreplay::parse_params(json).map_err(|e| param_error(e, style))?
                    }
                };
                let limit = max_output.map_or(DEFAULT_MAX_OUTPUT_TOKENS, |n| n as u32);
                let allow = raw.allow_params.unwrap_or_default();
                wmreplay::request_fields(format, model, limit, false, &params, &allow)
                    .map_err(|e| param_error(e, style))?
            }
        };
        let cache = match raw.cache.as_deref() {
            None | Some("none") => None,
            Some("auto") => {
                if format != Format::Anthropic {
                    return Err(bad(
                        Field::Cache,
                        format!(
                            "\"auto\" places Anthropic's cache_control markers: it needs format \"anthropic\" \
                             (got {:?}); OpenAI caches prefixes without markers",
                            format.name()
                        ),
                    ));
                }
                let mut policy = CachePolicy::default();
                if let Some(ttl) = &raw.cache_ttl {
                    policy.ttl = ttl
                        .parse::<CacheTtl>()
                        .map_err(|e| bad(Field::CacheTtl, format!("is invalid: {e}")))?;
                }
                Some(policy)
            }
            Some(other) => {
                return Err(bad(
                    Field::Cache,
                    format!("must be \"auto\" or \"none\", not {other:?}"),
                ));
            }
        };
        if cache.is_none()
            && let Some(ttl) = &raw.cache_ttl
        {
            // Checked even unused, so that a typo is not silent.
            ttl.parse::<CacheTtl>()
                .map_err(|e| bad(Field::CacheTtl, format!("is invalid: {e}")))?;
        }
        let mut sel = Selection::default();
        sel.kinds = raw.kinds;
        sel.since = raw.since;
        sel.until = raw.until;
        sel.tail =
            whole(raw.tail, Field::Tail, style, 0.0, 9_007_199_254_740_991.0)?.map(|n| n as usize);
        sel.max_tokens = whole(
            raw.max_tokens,
            Field::MaxTokens,
            style,
            0.0,
            9_007_199_254_740_991.0,
        )?
        .map(|n| n as u64);
        if let Some(t) = &raw.tokenizer {
            sel.tokenizer = t
                .parse::<Tokenizer>()
                .map_err(|e| bad(Field::Tokenizer, format!("is invalid: {e}")))?;
        }
        sel.trim_to = raw.trim_to;
        sel.start_on = raw.start_on;
        sel.mark_pending = raw.mark_pending;
        sel.summaries = raw.summaries;
        sel.facts = raw.facts;
        sel.validate().map_err(|e| translated(&e, style))?;
        let recall = whole(raw.recall, Field::Recall, style, 1.0, MAX_LIMIT as f64)?;
        let language = match &raw.language {
            None => Language::default(),
            Some(l) => Language::parse(l).map_err(|e| InvalidArg {
                field: Field::Language.name(style).into(),
                message: match e {
                    Error::Query(m) => format!("`{}`: {m}", Field::Language.name(style)),
                    e => e.to_string(),
                },
            })?,
        };
        Ok(BodyOptions {
            format,
            record,
            require_log: raw.require_log,
            style,
            system: wmreplay::system_prompt(raw.system.as_deref()),
            fields,
            session_only: raw.session_only,
            selection: sel,
            cache,
            state: raw.state,
            recall: recall.map(|k| k as usize),
            language,
        })
    }

    /// The selection for a request in `session_id`.
    pub fn selection(&self, session_id: Option<&str>) -> Result<Selection, InvalidArg> {
        let mut sel = self.selection.clone();
        if self.session_only {
            match session_id {
                Some(id) => sel.session = Some(id.into()),
                None => {
                    let id = match self.style {
                        Style::Camel => "sessionId",
                        Style::Snake => "session_id",
                    };
                    return Err(invalid(
                        Field::SessionOnly,
                        self.style,
                        format!("filters by the request's session: it needs `{id}`"),
                    ));
                }
            }
        }
        Ok(sel)
    }

    /// Whether a session filter is asked for.
    pub fn session_only(&self) -> bool {
        self.session_only
    }

    /// The leading fields (empty without a model).
    pub fn fields(&self) -> &str {
        &self.fields
    }

    /// The system prompt (the preamble, then the rule).
    pub fn system(&self) -> &str {
        &self.system
    }

    /// Whether the body is the contract's: no leading fields, no
    /// breakpoints, every record (what a replay renders as it is).
    pub fn is_contract_body(&self) -> bool {
        self.fields.is_empty()
            && self.cache.is_none()
            && !self.session_only
            && self.selection.is_everything()
    }

    fn spec<'a>(&'a self, current: CurrentRequest<'a>) -> RequestSpec<'a> {
        let spec = RequestSpec::new(self.format, &self.system, current).with_fields(&self.fields);
        match self.cache {
            Some(policy) => spec.with_cache(policy),
            None => spec,
        }
    }

    /// With `recall`: the recall message for `text`, as `respond --recall
    /// K` makes it: the K records best matching it that `replayed` (the
    /// body's selection) does not hold, from the search index next to the
    /// log at `path` (made, or brought up to date, first). `None` without
    /// `recall`, or when nothing is found.
    fn recalled(
        &self,
        path: &Path,
        replayed: &Replay<'_>,
        text: &str,
    ) -> Result<Option<String>, Error> {
        if self.recall.is_none() {
            return Ok(None);
        }
        self.recalled_from(&mut self.recall_index(path), replayed, text)
    }

    /// The search index recall reads for the log at `path`, in this body's
    /// record mode and language (nothing is read yet).
    fn recall_index(&self, path: &Path) -> SearchIndex {
        SearchIndex::in_language(
            path,
            SearchIndex::path_for(path),
            &replay_options(self.record),
            self.language,
        )
    }

    /// As [`recalled`](Self::recalled), from an `index` already opened (it
    /// is brought up to date first).
    fn recalled_from(
        &self,
        index: &mut SearchIndex,
        replayed: &Replay<'_>,
        text: &str,
    ) -> Result<Option<String>, Error> {
        let Some(k) = self.recall else {
            return Ok(None);
        };
        let held: std::collections::HashSet<u64> = replayed
            .records()
            .iter()
            .map(|r| replayed.source_offset(r))
            .collect();
        index.recall(text, k, &|o| held.contains(&o))
    }
}

/// The engine's refusal of a parameter, naming the packages' options
/// where it names the CLI's flags.
fn param_error(e: wmreplay::ParamError, style: Style) -> InvalidArg {
    InvalidArg {
        field: e.field,
        message: translated(&e.message, style).message,
    }
}

/// A request body and what the packages report beside it.
#[derive(Debug)]
pub struct Body {
    /// The body.
    pub bytes: Vec<u8>,
    /// [`skipped_warning`] of the replayed log, if it has one.
    pub warning: Option<String>,
    /// Whether the log does not exist (then an empty replay).
    pub log_missing: bool,
    /// Whether to warn that it does not exist: always for a one-shot body;
    /// for a [`Live`] one, the first time it is found missing.
    pub warn_missing: bool,
}

/// A failure: the engine's, or an option that does not fit the call.
#[derive(Debug)]
pub enum Failure {
    /// The engine's error (I/O, a changed log, memory, the state store).
    Engine(Error),
    /// An option refused.
    Invalid(InvalidArg),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Engine(e)
    }
}

impl From<InvalidArg> for Failure {
    fn from(e: InvalidArg) -> Self {
        Failure::Invalid(e)
    }
}

/// The error of a log that does not exist when it must.
pub fn missing_log(path: &Path) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        op: "the log does not exist",
        // ENOENT (2 on every platform the packages build for).
        source: std::io::Error::from_raw_os_error(2),
    }
}

/// Opens the log; a missing one is an error when `require_log`.
pub fn open_log(path: &Path, require_log: bool) -> Result<LogBytes, Error> {
    let log = LogBytes::open(path, ReadMode::Auto)?;
    if require_log && log.is_missing() {
        return Err(missing_log(path));
    }
    Ok(log)
}

/// The warning `wmreplay respond` prints for a log most of whose lines
/// are not records (more than half of them skipped), without its pointer
/// to the CLI: the file is likely not a working-memory log (a wrong path,
/// a pretty-printed JSON file) or a broken writer made it. Names the count
/// and the first skipped line (the replay keeps it when
/// [`ReplayOptions::max_skips`] is at least 1). `None` for a log with few
/// bad lines, or none.
pub fn skipped_warning(path: &Path, stats: &ReplayStats) -> Option<String> {
    let skipped = stats.skipped_invalid_json + stats.skipped_invalid_shape;
    let total = stats.total_lines;
    if skipped == 0 || skipped * 2 <= total {
        return None;
    }
    let lines = |n: u64| if n == 1 { "line" } else { "lines" };
    let what = if stats.parsed_entries == 0 {
        format!("none of its {total} {} is a valid record", lines(total))
    } else {
        format!(
            "{skipped} of its {total} {} are not valid records",
            lines(total)
        )
    };
    let first = stats.skips.first().map_or_else(String::new, |s| {
        format!(
            "; the first skipped is line {} (byte {}): {}",
            s.line, s.offset, s.reason
        )
    });
    Some(format!("{}: {what}{first}", path.display()))
}

/// Replay options for `record`.
pub fn replay_options(record: RecordMode) -> ReplayOptions {
    let mut options = ReplayOptions::default();
    options.record = record;
    options
}

/// Applies `sel` as `respond` does: with `trim_to`, the window start comes
/// from and goes back to the state store (`state`, or the one beside the
/// log); a log that does not exist gets no store made for it.
fn select(
    replayed: &mut Replay<'_>,
    log: &LogBytes,
    sel: &Selection,
    state: Option<&Path>,
) -> Result<(), Error> {
    if sel.is_everything() {
        return Ok(());
    }
    if sel.trim_to.is_none() {
        replayed.select(sel, None);
        return Ok(());
    }
    let path = log.path();
    let store_path = state.map_or_else(|| Store::path_for(path), Path::to_path_buf);
    let store = if log.is_missing() {
        match Store::open_existing(store_path)? {
            Some(store) => store,
            None => {
                replayed.select(sel, None);
                return Ok(());
            }
        }
    } else {
        Store::open(store_path)?
    };
    let key = sel.window_key();
    let prev = store.window_start(path, &key)?;
    let report = replayed.select(sel, prev);
    if report.window_start != prev {
        store.set_window_start(path, &key, report.window_start)?;
    }
    Ok(())
}

/// The body `wmreplay respond LOG --text … <options>` writes, byte for
/// byte: one replay of the log at `path`, the selection, the render, then
/// the check that the log did not change under it.
pub fn body_of_log(
    path: &Path,
    current: CurrentRequest<'_>,
    o: &BodyOptions,
) -> Result<Body, Failure> {
    let sel = o.selection(current.session_id)?;
    let log = open_log(path, o.require_log)?;
    let oom = |e: AllocError| e.for_log(log.path());
    let mut replayed = wmreplay::try_replay(log.bytes(), &replay_options(o.record)).map_err(oom)?;
    let warning = skipped_warning(path, replayed.stats());
    select(&mut replayed, &log, &sel, o.state.as_deref())?;
    let recalled = o.recalled(path, &replayed, current.text)?;
    let body = replayed.try_render_request_with(&o.spec(current).with_recall(recalled.as_deref()));
    drop(replayed);
    // Checked before the body is handed out: bytes rendered from a map of
    // a file truncated meanwhile are the guard's zero pages.
    log.verify()?;
    Ok(Body {
        bytes: body.map_err(oom)?,
        warning,
        log_missing: log.is_missing(),
        warn_missing: log.is_missing(),
    })
}

/// [`body_of_log`] for a replay already made of `log` with `options` (its
/// record mode wins over `o`'s). A selection replays `log`'s bytes again
/// (a selection keeps only some records, and `replayed` stays whole); the
/// contract's body (no selection) renders `replayed` itself. Checks the log
/// afterwards.
pub fn body_of_replay(
    replayed: &Replay<'_>,
    log: &LogBytes,
    options: &ReplayOptions,
    current: CurrentRequest<'_>,
    o: &BodyOptions,
) -> Result<Vec<u8>, Failure> {
    let sel = o.selection(current.session_id)?;
    let oom = |e: AllocError| e.for_log(log.path());
    let body = if sel.is_everything() {
        let recalled = o.recalled(log.path(), replayed, current.text)?;
        replayed.try_render_request_with(&o.spec(current).with_recall(recalled.as_deref()))
    } else {
        let mut again = wmreplay::try_replay(log.bytes(), options).map_err(oom)?;
        select(&mut again, log, &sel, o.state.as_deref())?;
        let recalled = o.recalled(log.path(), &again, current.text)?;
        again.try_render_request_with(&o.spec(current).with_recall(recalled.as_deref()))
    };
    log.verify()?;
    Ok(body.map_err(oom)?)
}

/// What [`Live::refresh`] did, with what the packages report beside it.
#[derive(Debug, Clone)]
pub struct Refreshed {
    /// The engine's report.
    pub refresh: wmreplay::Refresh,
    /// Whether the log does not exist (then an empty replay).
    pub log_missing: bool,
    /// [`skipped_warning`], the first time the replay deserves it (again
    /// after a rebuild).
    pub warning: Option<String>,
    /// Whether to warn that the log is missing: the first refresh that
    /// finds it so (again after it was found).
    pub warn_missing: bool,
}

/// A replay kept across calls (the engine's [`LiveReplay`]) with the
/// options of [`BodyOptions`] per call: its filters are the engine's
/// live filters (a call with other filters starts the replay anew), its
/// windows and pending mark are applied per call, window starts are
/// remembered in the state store as by [`body_of_log`].
pub struct Live {
    inner: LiveReplay,
    path: PathBuf,
    format: Format,
    options: ReplayOptions,
    filters: Selection,
    warned: bool,
    /// Whether the last refresh found the log missing (warned about once
    /// while it stays so).
    missing: bool,
    /// The search index bodies with `recall` read, kept open between them
    /// (it is brought up to date with the log before each recall), with
    /// the record mode and language it was opened in.
    recall_index: Option<(RecordMode, Language, SearchIndex)>,
}

impl Live {
    /// A replay of the log at `path` in `format`; nothing is read yet.
    pub fn new(path: PathBuf, format: Format, record: RecordMode) -> Live {
        let options = replay_options(record);
        Live {
            inner: LiveReplay::new(path.clone(), format, options.clone()),
            path,
            format,
            options,
            filters: Selection::default(),
            warned: false,
            missing: false,
            recall_index: None,
        }
    }

    /// The format its bodies are in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The record mode.
    pub fn record(&self) -> RecordMode {
        self.options.record
    }

    /// The stats of the bytes committed so far.
    pub fn stats(&self) -> &ReplayStats {
        self.inner.stats()
    }

    /// `raw` checked for this replay: in its format and record mode,
    /// whatever `raw` says (a body's leading fields depend on the format).
    pub fn options(&self, mut raw: RawBody, style: Style) -> Result<BodyOptions, InvalidArg> {
        raw.format = Some(self.format.name().into());
        raw.record = Some(self.options.record.name().into());
        BodyOptions::new(raw, style)
    }

    /// Reads what was appended since the last call.
    pub fn refresh(&mut self, require_log: bool) -> Result<Refreshed, Error> {
        let missing = is_missing(&self.path)?;
        if missing && require_log {
            return Err(missing_log(&self.path));
        }
        let refresh = self.inner.refresh()?;
        if refresh.rebuilt {
            self.warned = false;
        }
        let warning = if self.warned {
            None
        } else {
            skipped_warning(&self.path, self.inner.stats())
        };
        self.warned |= warning.is_some();
        let warn_missing = missing && !self.missing;
        self.missing = missing;
        Ok(Refreshed {
            refresh,
            log_missing: missing,
            warning,
            warn_missing,
        })
    }

    /// Brings the replay up to date, then the body `o` describes (options
    /// made by [`options`](Self::options), in this replay's format and
    /// record mode): the bytes [`body_of_log`] gives for the log's complete
    /// lines.
    pub fn body(&mut self, current: CurrentRequest<'_>, o: &BodyOptions) -> Result<Body, Failure> {
        assert!(
            o.format == self.format && o.record == self.options.record,
            "the options of a live body are made by Live::options"
        );
        let sel = o.selection(current.session_id)?;
        let mut filters = Selection::default();
        filters.session = sel.session.clone();
        filters.kinds = sel.kinds.clone();
        filters.since = sel.since;
        filters.until = sel.until;
        // A summary passes the filters when summaries are replayed.
        filters.summaries = sel.summaries;
        if filters != self.filters {
            self.inner = LiveReplay::new(self.path.clone(), self.format, self.options.clone())
                .with_selection(filters.clone());
            self.filters = filters;
        }
        let refreshed = self.refresh(o.require_log)?;
        let spec = o.spec(current);
        // The live state counts an XML window's tokens on the elements, not
        // on the texts a one-shot replay counts: that body replays the log's
        // committed bytes again.
        // Recall leaves out what the body replays: a one-shot replay of the
        // same bytes says which records those are.
        let bytes =
            if (self.format == Format::Xml && sel.max_tokens.is_some()) || o.recall.is_some() {
                self.body_replayed(&sel, current, o)?
            } else if !sel.has_window()
                && !sel.mark_pending
                && !sel.summaries
                && !sel.facts
                && o.cache.is_none()
            {
                // Every record held (the filters were applied as they arrived):
                // the chunks as they are, no selection pass.
                let (head, tail) =
                    wmreplay::request_envelope(self.format, &o.fields, &o.system, &current);
                let chunks = self.inner.chunks();
                let len = head.len() + tail.len() + chunks.iter().map(|c| c.len()).sum::<usize>();
                let mut body = Vec::new();
                body.try_reserve_exact(len)
                    .map_err(|_| AllocError { bytes: len as u64 }.for_log(&self.path))?;
                body.extend_from_slice(&head);
                for c in &chunks {
                    body.extend_from_slice(c);
                }
                body.extend_from_slice(&tail);
                body
            } else {
                let store = if sel.trim_to.is_some() {
                    let store_path = o
                        .state
                        .clone()
                        .unwrap_or_else(|| Store::path_for(&self.path));
                    if refreshed.log_missing {
                        Store::open_existing(store_path)?
                    } else {
                        Some(Store::open(store_path)?)
                    }
                } else {
                    None
                };
                let key = sel.window_key();
                let prev = match &store {
                    Some(s) => s.window_start(&self.path, &key)?,
                    None => None,
                };
                // A fresh cache memory per body: the marks a one-shot replay
                // (and `wmreplay respond --cache auto`) places.
                let (body, report) =
                    self.inner
                        .request_body_with(&spec, &sel, prev, &mut CacheMemory::default())?;
                if let Some(s) = &store
                    && report.window_start != prev
                {
                    s.set_window_start(&self.path, &key, report.window_start)?;
                }
                body
            };
        Ok(Body {
            bytes,
            warning: refreshed.warning,
            log_missing: refreshed.log_missing,
            warn_missing: refreshed.warn_missing,
        })
    }

    /// The body of a one-shot replay of the log's committed bytes (what
    /// the live state holds), for what the live state cannot render.
    fn body_replayed(
        &mut self,
        sel: &Selection,
        current: CurrentRequest<'_>,
        o: &BodyOptions,
    ) -> Result<Vec<u8>, Failure> {
        let log = LogBytes::open(&self.path, ReadMode::Auto)?;
        let committed = (self.inner.info().committed_bytes as usize).min(log.bytes().len());
        let oom = |e: AllocError| e.for_log(log.path());
        let mut replayed =
            wmreplay::try_replay(&log.bytes()[..committed], &self.options).map_err(oom)?;
        select(&mut replayed, &log, sel, o.state.as_deref())?;
        let recalled = if o.recall.is_some() {
            let reuse = matches!(&self.recall_index,
                Some((r, l, _)) if *r == o.record && *l == o.language);
            if !reuse {
                self.recall_index = Some((o.record, o.language, o.recall_index(&self.path)));
            }
            let (_, _, index) = self.recall_index.as_mut().expect("set above");
            o.recalled_from(index, &replayed, current.text)?
        } else {
            None
        };
        let body =
            replayed.try_render_request_with(&o.spec(current).with_recall(recalled.as_deref()));
        drop(replayed);
        log.verify()?;
        Ok(body.map_err(oom)?)
    }
}

/// Whether nothing is at `path` (a link to nowhere counts as nothing).
fn is_missing(path: &Path) -> Result<bool, Error> {
    match std::fs::metadata(path) {
        Ok(_) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        // The replay reports any other failure, naming the path.
        Err(_) => Ok(false),
    }
}
