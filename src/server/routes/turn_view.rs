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

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::inspect::{bad, clip, param, query, read_line, ts_json, with_index};
use crate::server::app::AppState;
use crate::server::errors::{ApiError, json_response};

/// Rows after the point looked at for its answer.
const ANSWER_ROWS: usize = 5_000;

pub(crate) async fn turn(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let q = query(&req);
    let offset = param::<u64>(&q, "offset", "a byte offset")?
        .ok_or_else(|| bad("`offset` is required (the byte offset of a record's line)".into()))?;
    let asked = q.get("text").cloned();
    let _held = state.admit_replay()?;
    let body = with_index(&state, move |st, idx, file| {
        let started = std::time::Instant::now();
        let not_a_record = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_record",
                format!("no record of the log starts at byte {offset}"),
            )
        };
        let file = file.ok_or_else(not_a_record)?;
        let line = read_line(file, offset, 0, usize::MAX).map_err(|e| {
            tracing::error!(error = %e, "reading the log failed");
            crate::server::errors::internal("read_failed", "the log could not be read")
        })?;
        let mut parser = crate::parse::LineParser::with_validator(
            st.cfg.replay.max_depth,
            st.cfg.replay.validator,
        );
        let rec = parser.parse(&line.bytes, 0).map_err(|_| not_a_record())?;
        let key = crate::order::ts_key(rec.ts_ms());
        let i = idx.find(key, offset).ok_or_else(not_a_record)?;
        let obj = match serde_json::from_slice::<Value>(&line.bytes) {
            Ok(Value::Object(o)) => o,
            _ => Default::default(),
        };
        let kind = idx.kinds[idx.rows[i].kind as usize].clone();
        let session = obj
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_string);
        let text = match (kind.as_str(), obj.get("text")) {
            ("text_input", Some(Value::String(t))) => t.clone(),
            ("text_input", Some(other)) => other.to_string(),
            _ => asked.unwrap_or_default(),
        };
        let (request, report) = request_before(st, offset, &text, session.as_deref())?;
        let replayed_at = started.elapsed();
        let request: Value = serde_json::from_slice(&request)
            .map_err(|e| crate::server::errors::internal("render_failed", e))?;
        let parts = parts_of(&request, st.cfg.selection.tokenizer);
        let answer = answer_after(idx, file, i, session.as_deref());
        Ok(json!({
            "point": {
                "i": i,
                "offset": offset,
                "type": kind,
                "ts_ms": ts_json(rec.ts_ms()),
                "session_id": session,
                "text": clip(&text, 4000),
            },
            "request": request,
            "parts": parts,
            "window": window_json(st, &report),
            "answer": answer,
            "replay_ms": replayed_at.as_secs_f64() * 1e3,
            "elapsed_ms": started.elapsed().as_secs_f64() * 1e3,
        }))
    })
    .await?;
    Ok(json_response(StatusCode::OK, body.to_string()))
}

/// The request body `/respond` sends for a turn whose `text_input` starts
/// at `offset`, and the selection's report.
fn request_before(
    st: &AppState,
    offset: u64,
    text: &str,
    session: Option<&str>,
) -> Result<(Vec<u8>, crate::SelectReport), ApiError> {
    let bytes = crate::LogBytes::open(&st.cfg.log, crate::ReadMode::Auto)
        .map_err(crate::server::app::snapshot::replay_failed)?;
    let end = (offset as usize).min(bytes.bytes().len());
    let mut replayed = crate::try_replay(&bytes.bytes()[..end], &st.cfg.replay)
        .map_err(|e| crate::server::app::snapshot::replay_failed(e.for_log(&st.cfg.log)))?;
    let mut sel = st.cfg.selection.clone();
    if st.cfg.sessions_apart
        && let Some(id) = session
    {
        sel.session = Some(id.to_string());
    }
    let report = replayed.select(&sel, None);
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
    Ok((body, report))
}

/// Each message of `request` (either provider's shape): its role, what it
/// is (`WM_KIND`, the current request, the system prompt), its `ts_ms`
/// line, its tokens, whether a cache breakpoint closes it, and where it is
/// in `request` (`messages[m]`, or `system`).
fn parts_of(request: &Value, tokenizer: crate::Tokenizer) -> Vec<Value> {
    let mut parts = Vec::new();
    let mut push = |at: Value, role: &str, text: &str, cache: bool| {
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
        parts.push(json!({
            "at": at,
            "role": role,
            "kind": label,
            "ts_ms": ts,
            "tokens": tokenizer.count(text),
            "chars": text.chars().count(),
            "cache_breakpoint": cache,
        }));
    };
    // Anthropic: `system` as a string or blocks.
    match &request["system"] {
        Value::String(s) => push(json!("system"), "system", s, false),
        Value::Array(blocks) => {
            let text: String = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
            let cache = blocks.iter().any(|b| !b["cache_control"].is_null());
            push(json!("system"), "system", &text, cache);
        }
        _ => {}
    }
    if let Some(messages) = request["messages"].as_array() {
        for (m, msg) in messages.iter().enumerate() {
            let role = msg["role"].as_str().unwrap_or("user");
            match &msg["content"] {
                Value::String(s) => push(json!(m), role, s, false),
                Value::Array(blocks) => {
                    let text: String = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
                    let cache = blocks.iter().any(|b| !b["cache_control"].is_null());
                    push(json!(m), role, &text, cache);
                }
                _ => push(json!(m), role, "", false),
            }
        }
    }
    parts
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
        let Ok(line) = read_line(file, row.offset, row.len, 1 << 20) else {
            return Value::Null;
        };
        let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(&line.bytes) else {
            continue;
        };
        if obj.get("session_id").and_then(Value::as_str) != session {
            continue;
        }
        if row.kind != output {
            return Value::Null;
        }
        let text = match obj.get("text") {
            Some(Value::String(t)) => t.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        };
        return json!({
            "i": j,
            "offset": row.offset,
            "ts_ms": ts_json(crate::order::key_ts(row.key)),
            "text": clip(&text, 20_000),
        });
    }
    Value::Null
}
