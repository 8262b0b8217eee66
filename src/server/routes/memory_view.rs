//! `GET …/memory`, the inspector's memory view: every key of the keyed
//! memory with its versions, the memory files, and the summaries with what
//! each covers (see `inspect.rs` for the other reads).

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::inspect::{clip, read_failed, read_line, refuse_other_sites, ts_json, with_index};
use crate::order::key_ts;
use crate::server::app::AppState;
use crate::server::app::index::{LogIndex, Row};
use crate::server::errors::{ApiError, json_response};

/// Versions of a fact listed at most.
const VERSIONS: usize = 20;
/// Fact and summary records read at most (the newest).
const MEMORY_ROWS: usize = 50_000;

/// `GET …/memory`: every key of the keyed memory (`wm_fact`) with its
/// latest value and its versions (newest first), the memory files (keys
/// under `/memories/`), and the summaries (newest first) with what each
/// covers.
pub(crate) async fn memory(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    refuse_other_sites(&req)?;
    let body = with_index(&state, |_, idx, file| {
        let (Some(fact), Some(file)) = (idx.kind_id("wm_fact"), file) else {
            return Ok(json!({"facts": [], "files": [], "summaries": summaries(idx, file)?}));
        };
        let rows: Vec<(usize, &Row)> = idx
            .rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.kind == fact)
            .collect();
        let skipped = rows.len().saturating_sub(MEMORY_ROWS);
        let mut keys: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (i, row) in &rows[skipped..] {
            let line = read_line(file, row.offset(), row.len(), usize::MAX).map_err(read_failed)?;
            let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(&line.bytes) else {
                continue;
            };
            let (Some(Value::String(key)), Some(value)) = (obj.get("key"), obj.get("value")) else {
                continue;
            };
            keys.entry(key.clone()).or_default().push(json!({
                "i": i,
                "offset": row.offset(),
                "ts_ms": ts_json(key_ts(row.key())),
                "value": shown(value),
            }));
        }
        let (mut facts, mut files) = (Vec::new(), Vec::new());
        for (key, mut versions) in keys {
            let count = versions.len();
            versions.reverse();
            versions.truncate(VERSIONS);
            let latest = versions[0]["value"].clone();
            let entry = json!({
                "key": key,
                "value": latest,
                "live": !latest.is_null(),
                "versions": count,
                "history": versions,
            });
            if key.starts_with(&format!("{}/", crate::server::app::memory_edit::ROOT)) {
                files.push(entry);
            } else {
                facts.push(entry);
            }
        }
        Ok(json!({
            "facts": facts,
            "files": files,
            "summaries": summaries(idx, Some(file))?,
            "fact_records": rows.len(),
            "fact_records_read": rows.len() - skipped,
        }))
    })
    .await?;
    Ok(json_response(StatusCode::OK, body.to_string()))
}

/// Characters of a fact's value shown (a longer one is cut, `…` added;
/// `…/timeline/record` has the line).
const VALUE_CHARS: usize = 64 << 10;

/// A fact's value as the page shows it: a long string cut, other long
/// JSON as cut text.
fn shown(value: &Value) -> Value {
    match value {
        Value::String(s) if s.len() > VALUE_CHARS => Value::String(clip(s, VALUE_CHARS)),
        Value::String(_) | Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
        other => {
            let text = other.to_string();
            if text.len() > VALUE_CHARS {
                Value::String(clip(&text, VALUE_CHARS))
            } else {
                other.clone()
            }
        }
    }
}

/// The summaries, newest first (100 at most), each with the records its
/// cover reaches (`covers_rows`: how many rows it stands for).
fn summaries(idx: &LogIndex, file: Option<&File>) -> Result<Vec<Value>, ApiError> {
    let (Some(kind), Some(file)) = (idx.kind_id(crate::select::memory::SUMMARY), file) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, row) in idx
        .rows
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, r)| r.kind == kind)
    {
        if out.len() == 100 {
            break;
        }
        let line = read_line(file, row.offset(), row.len(), usize::MAX).map_err(read_failed)?;
        let obj = match serde_json::from_slice::<Value>(&line.bytes) {
            Ok(Value::Object(o)) => o,
            _ => Default::default(),
        };
        let covers = obj.get("covers").cloned().unwrap_or(Value::Null);
        let cover_rows = match (covers["ts_ms"].as_f64(), covers["offset"].as_u64()) {
            (Some(t), Some(o)) => {
                let k = crate::order::ts_key(t);
                Some(
                    idx.rows
                        .partition_point(|r| (r.key(), r.offset()) <= (k, o)),
                )
            }
            _ => None,
        };
        let text = obj.get("text").and_then(Value::as_str).unwrap_or("");
        out.push(json!({
            "i": i,
            "offset": row.offset(),
            "ts_ms": ts_json(key_ts(row.key())),
            "covers": covers,
            "covers_rows": cover_rows,
            "valid": cover_rows.is_some(),
            "text": clip(text, 4000),
            "chars": text.chars().count(),
        }));
    }
    Ok(out)
}
