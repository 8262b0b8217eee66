//! The inspector page's reads, all `GET` and read-only (the page is
//! `ui.rs`; the turn as the model saw it is `turn_view.rs`):
//!
//! - `…/timeline?from=I&limit=L[&kinds=a,b][&session=S][&since=MS][&until=MS][&around=OFFSET&ts_ms=T]`:
//!   the log's records in replay order (`app/index.rs`), at most 200 at a
//!   time. Without a kind or session filter, rows `from..from+limit` of the
//!   time range; with one, the next `limit` that match from row `from`,
//!   looking at 20,000 rows at most (`next` says where to go on).
//! - `…/timeline/record?offset=O`: one line as written (the first MiB).
//! - `…/timeline/tail`: server-sent events, `grew` with the record count
//!   whenever the log grows.
//! - `…/memory` (`memory_view.rs`): the facts with their versions, the
//!   memory files, the summaries and what each covers.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::order::key_ts;
use crate::server::app::AppState;
use crate::server::app::index::{LogIndex, Row};
use crate::server::errors::{ApiError, internal, json_response};

/// Records a timeline request returns at most.
pub(crate) const MAX_PAGE: usize = 200;
/// Rows a filtered timeline request looks at before it answers.
const SCAN: usize = 20_000;
/// Bytes of a line read for its row in a timeline page.
const ROW_BYTES: usize = 64 << 10;
/// Bytes of a line `…/timeline/record` returns.
const RECORD_BYTES: usize = 1 << 20;
/// Characters of a record's text in a timeline row.
const PREVIEW: usize = 240;

/// The query string's parameters.
pub(crate) fn query(req: &Request) -> HashMap<String, String> {
    axum::extract::Query::<HashMap<String, String>>::try_from_uri(req.uri())
        .map(|q| q.0)
        .unwrap_or_default()
}

pub(crate) fn bad(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", message)
}

/// Parameter `name` as a `T`, if given.
pub(crate) fn param<T: std::str::FromStr>(
    q: &HashMap<String, String>,
    name: &str,
    what: &str,
) -> Result<Option<T>, ApiError> {
    match q.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| bad(format!("`{name}` is {what} (got {v:?})"))),
    }
}

/// A request a page of another site made the browser send (`Sec-Fetch-Site:
/// cross-site` or `same-site`, as another port of `localhost` is): refused.
/// A page cannot read these answers (no CORS), but it could make the
/// server do their work; the inspector's own page is `same-origin`.
pub(crate) fn refuse_other_sites(req: &Request) -> Result<(), ApiError> {
    match req.headers().get("sec-fetch-site").map(|v| v.as_bytes()) {
        Some(b"cross-site" | b"same-site") => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin_refused",
            "a page of another origin cannot read the log",
        )),
        _ => Ok(()),
    }
}

/// `f` on the log's index brought up to date, with the file it was read
/// from, off the async threads.
pub(crate) async fn with_index<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&AppState, &LogIndex, Option<&File>) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let _permit = state.permit()?;
    state.catch_up().await?;
    let st = state.clone();
    tokio::task::spawn_blocking(move || {
        let mut idx = st.index.lock().unwrap_or_else(|p| p.into_inner());
        st.refresh_index(&mut idx)
            .map_err(crate::server::app::snapshot::replay_failed)?;
        let file = idx.file();
        f(&st, &idx, file.as_deref())
    })
    .await
    .map_err(|e| {
        // A panic's text is the server's log's, not the client's.
        tracing::error!(error = %e, "an inspector read failed");
        internal("inspect_failed", "the log could not be read")
    })?
}

/// A line read from the log: its first bytes (at most the cap), and
/// whether there is more.
pub(crate) struct Line {
    pub(crate) bytes: Vec<u8>,
    pub(crate) truncated: bool,
}

/// The line at `offset` (its length `len` when known, else up to its
/// `\n`), at most `cap` bytes of it.
pub(crate) fn read_line(file: &File, offset: u64, len: u32, cap: usize) -> std::io::Result<Line> {
    if len > 0 {
        let n = (len as usize).min(cap);
        let mut bytes = vec![0u8; n];
        crate::os::read_exact_at(file, &mut bytes, offset)?;
        return Ok(Line {
            bytes,
            truncated: len as usize > cap,
        });
    }
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let got = crate::os::read_at(file, &mut buf, offset + bytes.len() as u64)?;
        if got == 0 {
            break;
        }
        if let Some(nl) = memchr::memchr(b'\n', &buf[..got]) {
            bytes.extend_from_slice(&buf[..nl]);
            break;
        }
        bytes.extend_from_slice(&buf[..got]);
        if bytes.len() >= cap {
            bytes.truncate(cap);
            return Ok(Line {
                bytes,
                truncated: true,
            });
        }
    }
    while bytes.last().is_some_and(|b| b.is_ascii_whitespace()) {
        bytes.pop();
    }
    Ok(Line {
        bytes,
        truncated: false,
    })
}

pub(crate) fn read_failed(e: std::io::Error) -> ApiError {
    tracing::error!(error = %e, "reading the log failed");
    internal("read_failed", "the log could not be read")
}

/// At most `n` characters of `s`, `…` added when cut.
pub(crate) fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// A `ts_ms` as JSON (a number; `null` for one JSON cannot hold).
pub(crate) fn ts_json(ts: f64) -> Value {
    serde_json::Number::from_f64(ts).map_or(Value::Null, Value::Number)
}

/// What a row shows of a record: its session and a short text.
fn summary_of(line: &Line) -> (Value, String) {
    if line.truncated {
        let text = String::from_utf8_lossy(&line.bytes);
        return (Value::Null, clip(&text, PREVIEW));
    }
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(&line.bytes) else {
        return (
            Value::Null,
            clip(&String::from_utf8_lossy(&line.bytes), PREVIEW),
        );
    };
    let session = obj.get("session_id").cloned().unwrap_or(Value::Null);
    let text = match (obj.get("text"), obj.get("key")) {
        (Some(Value::String(t)), _) => t.clone(),
        (_, Some(Value::String(k))) if obj.contains_key("value") => {
            format!("{k} = {}", obj["value"])
        }
        _ => {
            let mut rest = obj.clone();
            for k in ["type", "ts_ms", "session_id"] {
                rest.remove(k);
            }
            Value::Object(rest).to_string()
        }
    };
    (session, clip(&text, PREVIEW))
}

fn row_json(idx: &LogIndex, i: usize, row: &Row, line: &Line) -> Value {
    let (session, text) = summary_of(line);
    json!({
        "i": i,
        "offset": row.offset(),
        "bytes": if row.len() > 0 { json!(row.len()) } else { Value::Null },
        "type": idx.kinds[row.kind as usize],
        "ts_ms": ts_json(key_ts(row.key())),
        "session_id": session,
        "text": text,
        "truncated": line.truncated,
    })
}

/// A `ts_ms` parameter: a number (not NaN).
fn ts_param(q: &HashMap<String, String>, name: &str) -> Result<Option<f64>, ApiError> {
    match param::<f64>(q, name, "a ts_ms")? {
        Some(t) if t.is_nan() => Err(bad(format!("`{name}` is a ts_ms, not NaN"))),
        t => Ok(t),
    }
}

/// Bytes of whole lines a session filter reads at most per request.
const SESSION_BYTES: u64 = 256 << 20;

/// Whether the record of `row` is of `session` as the engine's `--session`
/// keeps it (its `session_id` that string, or none), its whole line read.
fn of_session(
    file: &File,
    row: &Row,
    first: &Line,
    sel: &crate::Selection,
    parser: &mut crate::parse::LineParser,
    read: &mut u64,
) -> std::io::Result<bool> {
    let whole;
    let line = if first.truncated {
        whole = read_line(file, row.offset(), row.len(), usize::MAX)?;
        &whole.bytes
    } else {
        &first.bytes
    };
    *read += line.len() as u64;
    Ok(parser.parse(line, 0).is_ok_and(|r| sel.matches(&r, line)))
}

/// `GET …/timeline`.
pub(crate) async fn timeline(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let q = query(&req);
    let limit = param::<usize>(&q, "limit", "a number of records")?
        .unwrap_or(100)
        .clamp(1, MAX_PAGE);
    let from = param::<usize>(&q, "from", "a row number")?;
    let since = ts_param(&q, "since")?;
    let until = ts_param(&q, "until")?;
    let around = param::<u64>(&q, "around", "a byte offset")?;
    let around_ts = ts_param(&q, "ts_ms")?;
    refuse_other_sites(&req)?;
    let session = q.get("session").filter(|s| !s.is_empty()).cloned();
    let kinds: Option<Vec<String>> = q
        .get("kinds")
        .filter(|k| !k.is_empty())
        .map(|k| k.split(',').map(str::to_string).collect());
    let body = with_index(&state, move |st, idx, file| {
        let rows = &idx.rows;
        let mut parser = crate::parse::LineParser::with_validator(
            st.cfg.replay.max_depth,
            st.cfg.replay.validator,
        );
        let by_session = crate::Selection {
            session: session.clone(),
            ..Default::default()
        };
        let mut session_bytes = 0u64;
        let lo = since.map_or(0, |t| idx.first_at(t));
        let hi = until.map_or(rows.len(), |t| idx.first_after(t)).max(lo);
        // A search hit's neighbourhood: a few rows before it.
        let focus = match (around, around_ts) {
            (Some(o), Some(t)) => idx.find(crate::order::ts_key(t), o),
            (Some(_), None) => return Err(bad("`around` needs the record's `ts_ms`".into())),
            _ => None,
        };
        let from = match (from, focus) {
            (Some(f), _) => f,
            (None, Some(f)) => f.saturating_sub(limit / 4),
            (None, None) => lo,
        }
        .clamp(lo, hi);
        let wanted: Option<Vec<u16>> = kinds
            .as_ref()
            .map(|ks| ks.iter().filter_map(|k| idx.kind_id(k)).collect());
        let filtered = wanted.is_some() || session.is_some();
        let mut out = Vec::new();
        let mut i = from;
        let mut looked = 0;
        while i < hi && out.len() < limit && looked < SCAN && session_bytes < SESSION_BYTES {
            let row = &rows[i];
            looked += 1;
            if wanted.as_ref().is_some_and(|w| !w.contains(&row.kind)) {
                i += 1;
                continue;
            }
            let line = match file {
                Some(f) => read_line(f, row.offset(), row.len(), ROW_BYTES).map_err(read_failed)?,
                None => break,
            };
            if session.is_some()
                && let Some(f) = file
                && !of_session(f, row, &line, &by_session, &mut parser, &mut session_bytes)
                    .map_err(read_failed)?
            {
                i += 1;
                continue;
            }
            out.push(row_json(idx, i, row, &line));
            i += 1;
        }
        let mut kinds_seen = BTreeMap::new();
        if from == lo && !filtered {
            let mut counts = vec![0u64; idx.kinds.len()];
            for r in &rows[lo..hi] {
                counts[r.kind as usize] += 1;
            }
            for (k, n) in idx.kinds.iter().zip(counts) {
                if n > 0 {
                    kinds_seen.insert(k.clone(), n);
                }
            }
        }
        Ok(json!({
            "total": rows.len(),
            "range": [lo, hi],
            "from": from,
            "focus": focus,
            "records": out,
            "next": (i < hi).then_some(i),
            "filtered": filtered,
            "kinds": kinds_seen,
            "committed_bytes": idx.committed(),
            "last_ts_ms": rows.last().map(|r| ts_json(key_ts(r.key()))),
        }))
    })
    .await?;
    Ok(json_response(StatusCode::OK, body.to_string()))
}

/// `GET …/timeline/record?offset=O`: the line starting at byte `O` as
/// written (a skipped line too), its first MiB, and its JSON when whole
/// and valid.
pub(crate) async fn record(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    refuse_other_sites(&req)?;
    let q = query(&req);
    let offset = param::<u64>(&q, "offset", "a byte offset")?
        .ok_or_else(|| bad("`offset` is required (the line's byte offset)".into()))?;
    let body = with_index(&state, move |_, idx, file| {
        let not_found = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_line",
                format!("no line of the log starts at byte {offset}"),
            )
        };
        let file = file.ok_or_else(not_found)?;
        if offset >= idx.committed() {
            return Err(not_found());
        }
        // A line (trimmed of its leading whitespace, as a record's offset
        // is) starts at the log's start or after a `\n`.
        if offset > 0 {
            let back = offset.min(4096);
            let mut before = vec![0u8; back as usize];
            crate::os::read_exact_at(file, &mut before, offset - back).map_err(read_failed)?;
            let start = match before
                .iter()
                .rposition(|b| !b.is_ascii_whitespace() || *b == b'\n')
            {
                Some(i) => before[i] == b'\n',
                None => back == offset,
            };
            if !start {
                return Err(not_found());
            }
        }
        let line = read_line(file, offset, 0, RECORD_BYTES).map_err(read_failed)?;
        let utf8 = std::str::from_utf8(&line.bytes).is_ok();
        let parsed = if line.truncated {
            Value::Null
        } else {
            serde_json::from_slice::<Value>(&line.bytes).unwrap_or(Value::Null)
        };
        Ok(json!({
            "offset": offset,
            "text": String::from_utf8_lossy(&line.bytes),
            "shown_bytes": line.bytes.len(),
            "truncated": line.truncated,
            "valid_utf8": utf8,
            "json": parsed,
        }))
    })
    .await?;
    Ok(json_response(StatusCode::OK, body.to_string()))
}

/// How often the tail looks at the log.
const TAIL_EVERY: Duration = Duration::from_millis(200);
/// A comment line this often keeps proxies from closing a quiet stream.
const KEEP_ALIVE_TICKS: u32 = 75;

/// `GET …/timeline/tail`: an event stream; `grew` (`{"total": N,
/// "committed_bytes": B, "rebuilds": R}`) first and whenever the log's
/// records change (`rebuilds` moves when the log was replaced or rewritten:
/// every row may have changed),
/// a comment every 15 s, until the client goes or the server shuts down.
pub(crate) async fn tail(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    refuse_other_sites(&req)?;
    // The first look answers errors (a missing log) as JSON.
    let first = with_index(&state, |_, idx, _| Ok(idx.watched())).await?;
    struct Tail {
        state: Arc<AppState>,
        now: Option<(usize, u64, u64)>,
        last: Option<(usize, u64, u64)>,
        ticks: u32,
        done: bool,
    }
    let start = Tail {
        state,
        now: Some(first),
        last: None,
        ticks: 0,
        done: false,
    };
    let stream = futures_util::stream::unfold(start, |mut t| async move {
        if t.done {
            return None;
        }
        loop {
            if t.state.closing.load(std::sync::atomic::Ordering::Relaxed) {
                return None;
            }
            if let Some(n) = t.now.take()
                && t.last != Some(n)
            {
                t.last = Some(n);
                let data = json!({"total": n.0, "committed_bytes": n.1, "rebuilds": n.2});
                let ev = crate::server::sse::sse("grew", &data);
                return Some((Ok::<_, std::convert::Infallible>(ev), t));
            }
            tokio::time::sleep(TAIL_EVERY).await;
            t.ticks += 1;
            if t.ticks % KEEP_ALIVE_TICKS == 0 {
                return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), t));
            }
            let st = t.state.clone();
            let looked = tokio::task::spawn_blocking(move || {
                let mut idx = st.index.lock().unwrap_or_else(|p| p.into_inner());
                st.refresh_index(&mut idx).map(|_| idx.watched())
            })
            .await;
            match looked {
                Ok(Ok(n)) => t.now = Some(n),
                _ => {
                    t.done = true;
                    let data = json!({"message": "the log could not be read"});
                    return Some((Ok(crate::server::sse::sse("error", &data)), t));
                }
            }
        }
    });
    let mut resp = Response::new(axum::body::Body::from_stream(stream));
    crate::server::sse::sse_headers(&mut resp);
    Ok(resp)
}
