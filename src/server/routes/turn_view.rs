//! `GET …/inspect/turn?offset=O[&text=T]`: a turn as the model saw it.
//!
//! The point is a record of the log (its line's byte offset): the request
//! is what `/respond` sends for a turn whose `text_input` is that line — the
//! log as it stood before it (contract: "a turn's request is the log as it
//! stood before that turn's `text_input`"), replayed by the engine with the
//! server's selection, facts, summaries, recall and cache breakpoints,
//! then `CURRENT_USER_REQUEST` with the record's text and session (a point
//! that is not a `text_input` asks `T`, empty by default). It is the
//! engine's own output, the bytes `wmreplay respond` writes for the same
//! prefix and flags; only the window's remembered start (`--trim-to`) and
//! the cache breakpoints' memory of earlier turns are taken afresh, as a
//! first turn would take them.
//!
//! Beside it: each message with its kind and token count (the server's
//! tokenizer, as the window counts them), why the window starts where it
//! does, and the answer that came back (the next `text_output` of the
//! session).

use std::sync::Arc;

use std::collections::HashMap;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::inspect::{bad, clip, param, query, read_line, ts_json, with_index};
use crate::server::app::AppState;
use crate::server::errors::{ApiError, json_response};

/// Rows after the point looked at for its answer.
const ANSWER_ROWS: usize = 5_000;

/// A request's body is part of the view up to this size; a larger one is
/// `…/inspect/turn?offset=O&raw=1`.
const REQUEST_SHOWN: usize = 4 << 20;
/// Bytes of message text whose tokens are counted exactly, newest first;
/// older messages' are estimated (a byte in four), and said to be.
const COUNTED_TEXT: usize = 16 << 20;

/// The point a view is of, read under the index's lock.
struct Point {
    i: usize,
    kind: String,
    ts: f64,
    session: Option<String>,
    text: String,
    answer: Value,
    file: Arc<std::fs::File>,
    /// The records before the point, from the index (`None`: replayed).
    records: Option<Vec<crate::Record>>,
}

pub(crate) async fn turn(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    super::inspect::refuse_other_sites(&req)?;
    let q = query(&req);
    let offset = param::<u64>(&q, "offset", "a byte offset")?
        .ok_or_else(|| bad("`offset` is required (the byte offset of a record's line)".into()))?;
    let asked = q.get("text").cloned();
    let raw = q.get("raw").is_some_and(|v| v == "1" || v == "true");
    let _held = state.admit_replay()?;
    let started = std::time::Instant::now();
    // The point and its answer, under the index's lock; the replay after,
    // without it (the timeline's pages do not wait for a view).
    let point = with_index(&state, move |st, idx, _| {
        let not_a_record = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_record",
                format!("no record of the log starts at byte {offset}"),
            )
        };
        // The handle itself (kept for the replay after the lock is let go).
        let file = idx.file().ok_or_else(not_a_record)?;
        let line = read_line(&file, offset, 0, usize::MAX).map_err(read_failed)?;
        let mut parser = crate::parse::LineParser::with_validator(
            st.cfg.replay.max_depth,
            st.cfg.replay.validator,
        );
        let rec = parser.parse(&line.bytes, 0).map_err(|_| not_a_record())?;
        let i = idx
            .find(crate::order::ts_key(rec.ts_ms()), offset)
            .ok_or_else(not_a_record)?;
        let obj = members(&line.bytes).unwrap_or_default();
        let kind = idx.kinds[idx.rows[i].kind as usize].clone();
        let session = string_member(&obj, "session_id");
        let text = match (kind.as_str(), obj.get("text")) {
            ("text_input", Some(raw)) => {
                string_member(&obj, "text").unwrap_or_else(|| raw.get().to_string())
            }
            _ => asked.unwrap_or_default(),
        };
        let answer = answer_after(idx, &file, i, session.as_deref());
        let records = idx.records_before(offset);
        Ok(Point {
            i,
            kind,
            ts: rec.ts_ms(),
            session,
            text,
            answer,
            file,
            records,
        })
    })
    .await?;
    let st = state.clone();
    let mut point = point;
    let body = tokio::task::spawn_blocking(move || -> Result<Response, ApiError> {
        let records = point.records.take();
        let (request, report) = request_before(&st, &point, records, offset)?;
        let replayed_at = started.elapsed();
        if raw {
            return Ok(json_response(StatusCode::OK, request));
        }
        let parts = parts_of(&request, st.cfg.selection.tokenizer)
            .map_err(|e| crate::server::errors::internal("render_failed", e))?;
        let shown = if request.len() <= REQUEST_SHOWN {
            serde_json::from_slice::<Value>(&request)
                .map_err(|e| crate::server::errors::internal("render_failed", e))?
        } else {
            Value::Null
        };
        let view = json!({
            "point": {
                "i": point.i,
                "offset": offset,
                "type": point.kind,
                "ts_ms": ts_json(point.ts),
                "session_id": point.session,
                "text": clip(&point.text, 4000),
            },
            "request": shown,
            "request_bytes": request.len(),
            "parts": parts,
            "window": window_json(&st, &report),
            "answer": point.answer,
            "replay_ms": replayed_at.as_secs_f64() * 1e3,
            "elapsed_ms": started.elapsed().as_secs_f64() * 1e3,
        });
        Ok(json_response(StatusCode::OK, view.to_string()))
    })
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "a turn's view failed");
        crate::server::errors::internal("inspect_failed", "the view could not be made")
    })??;
    Ok(body)
}

/// A record's members, each as written: a number JSON's doubles cannot
/// hold (`2e308`, which the engine reads as Infinity) is no error.
fn members(line: &[u8]) -> Option<HashMap<String, &RawValue>> {
    serde_json::from_slice(line).ok()
}

/// Member `name` when it is a string.
fn string_member(m: &HashMap<String, &RawValue>, name: &str) -> Option<String> {
    m.get(name)
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
}

/// The log changed under the view (it shrank, or its bytes are not those
/// the index read): asked again, it is read afresh.
fn changed() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "log_changed",
        "the log changed while the view was made; ask again",
    )
}

fn read_failed(e: std::io::Error) -> ApiError {
    tracing::error!(error = %e, "reading the log failed");
    crate::server::errors::internal("read_failed", "the log could not be read")
}

/// The request body `/respond` sends for a turn whose `text_input` starts
/// at `offset`, and the selection's report.
fn request_before(
    st: &AppState,
    point: &Point,
    records: Option<Vec<crate::Record>>,
    offset: u64,
) -> Result<(Vec<u8>, crate::SelectReport), ApiError> {
    let (text, session) = (point.text.as_str(), point.session.as_deref());
    // The very file the point was read from.
    let opened = point
        .file
        .try_clone()
        .and_then(|f| f.metadata().map(|m| (f, m)));
    let (f, meta) = opened.map_err(read_failed)?;
    let bytes = crate::LogBytes::of_file(&st.cfg.log, f, &meta, crate::ReadMode::Auto)
        .map_err(crate::server::app::snapshot::replay_failed)?;
    if (bytes.bytes().len() as u64) < offset {
        return Err(changed());
    }
    let prefix = &bytes.bytes()[..offset as usize];
    let replay = || {
        crate::try_replay(prefix, &st.cfg.replay)
            .map_err(|e| crate::server::app::snapshot::replay_failed(e.for_log(&st.cfg.log)))
    };
    let made = match records {
        // The index's records before the point are those the replay of the
        // prefix finds, in its order: the parse is not done again, as long
        // as the log is as the index read it. Bytes changed in place where
        // the change check does not look (docs/server.md) give another
        // request: then it is made again from the bytes themselves.
        Some(records) => {
            let kept = crate::replay::Replay::of_records(prefix, records);
            match render(st, kept, offset, text, session, true)? {
                Some(done) => Some(done),
                None => {
                    tracing::warn!("the inspector's index is not the log's bytes: read afresh");
                    st.index.lock().unwrap_or_else(|p| p.into_inner()).forget();
                    render(st, replay()?, offset, text, session, false)?
                }
            }
        }
        None => render(st, replay()?, offset, text, session, false)?,
    };
    bytes.verify().map_err(|_| changed())?;
    made.ok_or_else(changed)
}

/// The request body for `replayed` (the log before `offset`) and the
/// selection's report. With `check`, `None` when a selected record's line
/// is not that record any more or the body is not JSON: the records came
/// from an index the log no longer matches.
fn render(
    st: &AppState,
    mut replayed: crate::replay::Replay<'_>,
    offset: u64,
    text: &str,
    session: Option<&str>,
    check: bool,
) -> Result<Option<(Vec<u8>, crate::SelectReport)>, ApiError> {
    let mut sel = st.cfg.selection.clone();
    if st.cfg.sessions_apart
        && let Some(id) = session
    {
        sel.session = Some(id.to_string());
    }
    if check {
        // Every record the selection reads must be its line's (a line
        // rewritten in place may be shorter or hold another ts_ms).
        let log = replayed.log();
        if replayed
            .records()
            .iter()
            .any(|r| r.offset as usize + r.len as usize > log.len())
        {
            return Ok(None);
        }
    }
    let report = replayed.select(&sel, None);
    if check {
        let mut parser = crate::parse::LineParser::with_validator(
            st.cfg.replay.max_depth,
            st.cfg.replay.validator,
        );
        let log = replayed.log();
        let same = replayed.records().iter().all(|r| {
            parser
                .parse(r.line(log), r.offset)
                .is_ok_and(|p| p.same_as(r))
        });
        if !same {
            return Ok(None);
        }
    }
    let recall = match st.cfg.recall {
        None => None,
        Some(k) => {
            let mut held: Vec<u64> = replayed
                .records()
                .iter()
                .map(|r| replayed.source_offset(r))
                .collect();
            held.sort_unstable();
            let found = st.with_search_index(text, |idx| {
                idx.recall(text, k, &|o| o >= offset || held.binary_search(&o).is_ok())
            });
            match found {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "recall failed; the view goes on without it");
                    None
                }
            }
        }
    };
    let fields = st.fields_for(&[], false)?;
    let current = crate::CurrentRequest {
        text,
        session_id: session,
    };
    let mut spec = crate::RequestSpec::new(st.cfg.provider.format(), &st.system, current)
        .with_fields(&fields)
        .with_recall(recall.as_deref());
    if st.marks_cache() {
        spec = spec.with_cache(st.cache_policy());
    }
    let body = replayed
        .try_render_request_with(&spec)
        .map_err(|e| crate::server::app::snapshot::replay_failed(e.for_log(&st.cfg.log)))?;
    if check && serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
        return Ok(None);
    }
    Ok(Some((body, report)))
}

/// A request body as far as its messages: each message's content left
/// unparsed until it is looked at, so that a large body is never a tree.
#[derive(serde::Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    system: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    messages: Vec<Message<'a>>,
}

#[derive(serde::Deserialize)]
struct Message<'a> {
    #[serde(default)]
    role: String,
    #[serde(borrow)]
    content: Option<&'a serde_json::value::RawValue>,
}

/// A content (a string, or blocks with `text` and `cache_control`): its
/// text, and whether a cache breakpoint closes it.
fn content_of(raw: Option<&serde_json::value::RawValue>) -> (String, bool) {
    match raw.map(|r| serde_json::from_str::<Value>(r.get())) {
        Some(Ok(Value::String(s))) => (s, false),
        Some(Ok(Value::Array(blocks))) => (
            blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
            blocks.iter().any(|b| !b["cache_control"].is_null()),
        ),
        _ => (String::new(), false),
    }
}

/// Each message of `request` (either provider's shape): its role, what it
/// is (`WM_KIND`, the current request, the system prompt), its `ts_ms`
/// line, its tokens (exact for the newest 16 MB of text, estimated before:
/// `"estimated": true`), whether a cache breakpoint closes it, and where it
/// is in `request` (`messages[m]`, or `system`).
fn parts_of(request: &[u8], tokenizer: crate::Tokenizer) -> Result<Vec<Value>, serde_json::Error> {
    let body: Body<'_> = serde_json::from_slice(request)?;
    let mut texts: Vec<(Value, String, String, bool)> = Vec::new();
    if let Some(sys) = body.system {
        let (text, cache) = content_of(Some(sys));
        texts.push((json!("system"), "system".into(), text, cache));
    }
    for (m, msg) in body.messages.iter().enumerate() {
        let (text, cache) = content_of(msg.content);
        texts.push((json!(m), msg.role.clone(), text, cache));
    }
    // Exact counts from the newest back, while the text counted is small.
    let mut budget = COUNTED_TEXT;
    let mut exact = vec![false; texts.len()];
    for (k, (_, _, text, _)) in texts.iter().enumerate().rev() {
        if text.len() > budget {
            break;
        }
        budget -= text.len();
        exact[k] = true;
    }
    Ok(texts
        .into_iter()
        .zip(exact)
        .map(|((at, role, text, cache), exact)| {
            let head = text.lines().next().unwrap_or("");
            let label = match head.strip_prefix("WM_KIND=") {
                Some(k) => k.to_string(),
                None if head == "CURRENT_USER_REQUEST" => "CURRENT_USER_REQUEST".into(),
                None if role == "system" => "system".into(),
                None => clip(head, 40),
            };
            let ts = text
                .lines()
                .nth(1)
                .and_then(|l| l.strip_prefix("ts_ms: "))
                .map(str::to_string);
            let tokens = if exact {
                tokenizer.count(&text)
            } else {
                text.len().div_ceil(4) as u64
            };
            json!({
                "at": at,
                "role": role,
                "kind": label,
                "ts_ms": ts,
                "tokens": tokens,
                "estimated": !exact,
                "chars": text.chars().count(),
                "cache_breakpoint": cache,
            })
        })
        .collect())
}

/// The window's settings, what it kept, and why it starts where it does.
fn window_json(st: &AppState, report: &crate::SelectReport) -> Value {
    let sel = &st.cfg.selection;
    let why = match (sel.tail, sel.max_tokens) {
        (None, None) => "no window: every record the filters keep is replayed".to_string(),
        (Some(n), None) => format!("the last {n} records the filters keep"),
        (None, Some(t)) => format!(
            "the newest records whose message texts fit {t} tokens ({})",
            sel.tokenizer.name()
        ),
        (Some(n), Some(t)) => format!(
            "the last {n} records, then the newest of those that fit {t} tokens ({})",
            sel.tokenizer.name()
        ),
    };
    let why = match (&sel.trim_to, &sel.start_on) {
        (Some(f), _) if report.trimmed => format!(
            "{why}; cache-stable: the records overflowed, so the start moved forward to hold {f} of the budget"
        ),
        (Some(_), _) => {
            format!("{why}; cache-stable: the start stays put until the records overflow")
        }
        (None, Some(k)) => format!("{why}; the window opens on a {k} record"),
        (None, None) => why,
    };
    json!({
        "why": why,
        "tail": sel.tail,
        "max_tokens": sel.max_tokens,
        "trim_to": sel.trim_to,
        "start_on": sel.start_on,
        "tokenizer": sel.tokenizer.name(),
        "filters": {
            "session": sel.session,
            "kinds": sel.kinds,
            "since": sel.since,
            "until": sel.until,
        },
        "summaries": sel.summaries,
        "facts": sel.facts,
        "recall": st.cfg.recall,
        "cache_breakpoints": st.marks_cache(),
        "matched_records": report.matched,
        "selected_records": report.selected,
        "window_tokens": report.tokens,
        "window_start": report.window_start.map(|w| json!({
            "offset": w.offset,
            "ts_ms": ts_json(crate::order::key_ts(w.key)),
        })),
        "trimmed": report.trimmed,
    })
}

/// The first `text_output` of the session after row `i` (before the
/// session's next `text_input`).
fn answer_after(
    idx: &crate::server::app::index::LogIndex,
    file: &std::fs::File,
    i: usize,
    session: Option<&str>,
) -> Value {
    let (Some(output), input) = (idx.kind_id("text_output"), idx.kind_id("text_input")) else {
        return Value::Null;
    };
    for (j, row) in idx.rows.iter().enumerate().skip(i + 1).take(ANSWER_ROWS) {
        if row.kind != output && Some(row.kind) != input {
            continue;
        }
        let Ok(line) = read_line(file, row.offset(), row.len(), usize::MAX) else {
            return Value::Null;
        };
        let Some(obj) = members(&line.bytes) else {
            continue;
        };
        if string_member(&obj, "session_id").as_deref() != session {
            continue;
        }
        if row.kind != output {
            return Value::Null;
        }
        let text = match obj.get("text") {
            Some(v) => string_member(&obj, "text").unwrap_or_else(|| v.get().to_string()),
            None => String::new(),
        };
        return json!({
            "i": j,
            "offset": row.offset(),
            "ts_ms": ts_json(crate::order::key_ts(row.key())),
            "text": clip(&text, 20_000),
        });
    }
    Value::Null
}
