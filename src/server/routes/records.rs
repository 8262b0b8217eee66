//! `POST /v1/records`: every component of an agent appends through the
//! server's one writer. The body is one record (a JSON object), a batch (an
//! array of objects), or NDJSON (`content-type: application/x-ndjson`).
//!
//! Each record must be an object with a string `type`; a `ts_ms`, when
//! present, must be a number, and when absent is set from the writer's clock
//! (never below the last one it wrote for the log), first in the object.
//! Records are written compact, one per line, exactly as sent otherwise.
//! A record that fails a check rejects the whole batch (400 naming its
//! index and the reason) and nothing of it is written; a valid batch is
//! written with one `write` and made durable before the answer, which gives
//! each record's `ts_ms`, byte offset and length. Every record written is
//! one the replay parses. A batch is in the log whole or not at all, even
//! across a crash (see the writer). An `Idempotency-Key` makes a retry
//! return the first answer instead of writing again: the key is answered in
//! the same step that makes its batch durable, so a retry after a crash
//! finds the batch written once, or not at all and writes it.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::json;
use serde_json::value::RawValue;

use crate::parse::LineParser;
use crate::server::app::AppState;
use crate::server::app::compact::compact_soon;
use crate::server::app::writes::check_record as check;
use crate::server::errors::{ApiError, idempotency_key, internal, json_response};
use crate::server::writer::{Appended, BatchKey, KeyReused};
use crate::state::{TurnBegin, TurnStatus};

fn bad(code: &'static str, message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, message)
}

/// The record texts of a body: its array's elements, its one value, or its
/// NDJSON lines.
fn split(body: &[u8], ndjson: bool) -> Result<Vec<&[u8]>, ApiError> {
    if ndjson {
        return Ok(body
            .split(|&b| b == b'\n')
            .map(<[u8]>::trim_ascii)
            .filter(|l| !l.is_empty())
            .collect());
    }
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let items: Vec<&RawValue> = serde_json::from_slice(body)
            .map_err(|e| bad("invalid_json", format!("the body is not a JSON array: {e}")))?;
        Ok(items.into_iter().map(|r| r.get().as_bytes()).collect())
    } else {
        let one: &RawValue = serde_json::from_slice(body)
            .map_err(|e| bad("invalid_json", format!("the body is not valid JSON: {e}")))?;
        Ok(vec![one.get().as_bytes()])
    }
}

/// `POST /v1/records`.
pub(crate) async fn append(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let headers = req.headers().clone();
    let (body, _held) = state.read_body(req).await?;
    let ndjson = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-ndjson"));
    let key = idempotency_key(&headers, None)?.map(|k| format!("records:{k}"));
    let raws = split(&body, ndjson)?;
    if raws.is_empty() {
        return Err(bad("no_records", "the body holds no record".into()));
    }
    let mut parser = LineParser::new(state.cfg.replay.max_depth);
    let mut lines = Vec::with_capacity(raws.len());
    let mut given = Vec::with_capacity(raws.len());
    for (i, raw) in raws.iter().enumerate() {
        let (line, ts) = check(i, raw, &mut parser, state.cfg.max_record_bytes)?;
        lines.push(line);
        given.push(ts);
    }
    let _permit = state.permit()?;
    // The writer settles what a crash left half-written when it starts,
    // before any key is looked at, so a key's state says whether its batch
    // is in the log. (Started once per log; later requests skip the hop.)
    if state.writer.get().is_none() {
        let st = state.clone();
        tokio::task::spawn_blocking(move || st.writer().map(|_| ()))
            .await
            .map_err(|e| internal("append_failed", e))?
            .map_err(|e| state.append_failed(&e))?;
    }
    let body_hash = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&body));
    if let Some(key) = &key {
        let hash = body_hash.clone();
        let (st, k) = (state.clone(), key.clone());
        let begin = tokio::task::spawn_blocking(move || {
            let store = st.store()?;
            let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
            let b = store.begin_turn(&st.cfg.log, &k, &hash, st.cfg.idempotency_ttl)?;
            if matches!(
                b,
                TurnBegin::Seen {
                    status: TurnStatus::Failed | TurnStatus::Abandoned,
                    ..
                }
            ) {
                // Failed, or begun by a process that stopped before its batch
                // was journalled: nothing of it is in the log.
                store.restart_turn(&k)?;
            }
            Ok::<_, crate::Error>(b)
        })
        .await
        .map_err(|e| internal("state_failed", e))?
        .map_err(|e| internal("state_failed", e))?;
        match begin {
            TurnBegin::Conflict => {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency_key_reused",
                    "this Idempotency-Key was used with another body",
                ));
            }
            TurnBegin::Seen {
                status: TurnStatus::Done(answer),
                ..
            } => {
                let mut r = json_response(StatusCode::OK, answer);
                r.headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
                return Ok(r);
            }
            TurnBegin::Seen {
                status: TurnStatus::Running,
                ..
            } => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "in_progress",
                    "a request with this Idempotency-Key is being written; retry shortly",
                ));
            }
            _ => {}
        }
    }
    let given = Arc::new(given);
    let batch_key = key.clone().map(|k| {
        let given = given.clone();
        BatchKey {
            key: k,
            answer: Box::new(move |appended: &[Appended]| answer_of(appended, &given)),
            body: body_hash.clone(),
            made: false,
        }
    });
    // (`existed`: the batch was found under its key, written by an earlier
    // attempt through this replica or another: a replay.)
    let (written, remote, existed) = match state.writer() {
        Ok(w) => {
            let remote = w.synced_at().is_some();
            match batch_key {
                Some(k) => match w.append_keyed(lines, k).await {
                    Ok((a, existed)) => (Ok(a), remote, existed),
                    Err(e) => (Err(e), remote, false),
                },
                None => (w.append_batch(lines, None).await, remote, false),
            }
        }
        Err(e) => (Err(e), false, false),
    };
    let outcome = written.map_err(|e| {
        if KeyReused::of(&e) {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this Idempotency-Key was used with another body",
            )
        } else {
            state.append_failed(&e)
        }
    });
    // The local writer answers the key with the batch; a writer whose log
    // lives elsewhere makes a retry write nothing by itself (the message
    // id), and the key is answered here. A batch that failed leaves the
    // key free to be retried.
    // `Some(answer)`: the key to finish here (`None` inside: failed).
    let finish: Option<Option<String>> = match &outcome {
        Ok(appended) if remote => Some(Some(answer_of(appended, &given))),
        Ok(_) => None,
        Err(_) => Some(None),
    };
    let reused = matches!(&outcome, Err(e) if e.code == "idempotency_key_reused");
    if let (Some(key), Some(answer)) = (key, finish) {
        let st = state.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            let store = st.store()?;
            let store = store.lock().unwrap_or_else(|p| p.into_inner());
            // Another replica's key: this store must not keep this body's.
            if reused {
                return store.forget_turn(&key);
            }
            store.finish_turn(&key, answer.as_deref())
        })
        .await;
        if !matches!(recorded, Ok(Ok(()))) {
            tracing::error!("cannot record the outcome of an idempotent write");
        }
    }
    let appended = outcome?;
    compact_soon(&state);
    let mut r = json_response(StatusCode::OK, answer_of(&appended, &given));
    if existed {
        r.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(r)
}

/// The answer to a batch written: each record's `ts_ms` (as given, or the
/// writer's), offset and length.
///
/// Written straight into one string (a batch of tiny records would
/// otherwise cost a JSON object per record, many times the body's size).
fn answer_of(appended: &[Appended], given: &[Option<f64>]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(32 + appended.len() * 56);
    let _ = write!(out, "{{\"written\":{},\"records\":[", appended.len());
    for (i, (a, ts)) in appended.iter().zip(given).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"ts_ms\":");
        match (a.ts_ms, ts) {
            (Some(t), _) => {
                let _ = write!(out, "{t}");
            }
            (None, Some(t)) => push_number(&mut out, *t),
            (None, None) => out.push_str("null"),
        }
        let _ = write!(out, ",\"offset\":{},\"bytes\":{}}}", a.offset, a.len);
    }
    out.push_str("]}");
    out
}

/// A record's own `ts_ms` as JSON: an integer as an integer (not `1.0`).
fn push_number(out: &mut String, t: f64) {
    use std::fmt::Write;
    if t.fract() == 0.0 && t.abs() < 9_007_199_254_740_992.0 {
        let _ = write!(out, "{}", t as i64);
    } else {
        out.push_str(&json!(t).to_string());
    }
}
