//! What a client's writes go through, whichever door they come in by
//! (`POST /v1/records`, `PUT`/`DELETE /v1/facts/{key}`, the MCP tools): the
//! check of one record, and a fact written through the log's one writer
//! with its key, depth and size checks and its floor stamp.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use super::compact::compact_soon;
use super::facts::{fact_record, newest_ts, unreadable};
use crate::append::compact;
use crate::parse::{LineParser, SkipReason};
use crate::server::errors::{ApiError, internal};
use crate::server::writer::Line;

/// Longest fact key accepted, in bytes.
pub(crate) const MAX_KEY: usize = 256;

fn bad(code: &'static str, message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, message)
}

/// One checked record (`i`: its index in its batch, for the messages): the
/// line to write, and its `ts_ms` if it has one. A record is a JSON object
/// with a string `type`, and a `ts_ms` that is a number or absent (the
/// writer then stamps it); written compact, at most `max` bytes
/// (`--max-record-bytes`), and one the replay parses.
pub(crate) fn check_record(
    i: usize,
    raw: &[u8],
    parser: &mut LineParser,
    max: usize,
) -> Result<(Line, Option<f64>), ApiError> {
    // Judged as sent, before its whitespace goes: `1 2` is not a number,
    // though without the space it would be one.
    let ts_ms = match parser.parse(raw, 0) {
        Ok(r) => Some(r.ts_ms()),
        Err(SkipReason::MissingTsMs) => None,
        Err(SkipReason::TsMsNotNumber) => {
            return Err(bad(
                "invalid_record",
                format!("record {i}: `ts_ms` must be a number (or absent: the server sets it)"),
            ));
        }
        Err(reason) => return Err(bad("invalid_record", format!("record {i}: {reason}"))),
    };
    let line = compact(raw);
    if line.len() > max {
        return Err(bad(
            "record_too_large",
            format!(
                "record {i}: {} bytes, more than the limit of {max} (--max-record-bytes)",
                line.len()
            ),
        ));
    }
    match ts_ms {
        Some(ts) => Ok((Line::verbatim(line), Some(ts))),
        None => Ok((Line::stamped_object(&line), None)),
    }
}

/// Checks a fact's key: 1 to [`MAX_KEY`] bytes, no control character; a
/// key under `/memories` (a memory-tool file) is a path the memory tool
/// itself would take, as it would write it.
pub(crate) fn check_key(key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_KEY || key.chars().any(char::is_control) {
        return Err(bad(
            "invalid_key",
            format!("a fact's key is 1 to {MAX_KEY} bytes without control characters"),
        ));
    }
    let memory_dir = super::memory_edit::ROOT;
    if key
        .strip_prefix(memory_dir)
        .is_some_and(|r| r.is_empty() || r.starts_with('/'))
    {
        match super::memory_edit::checked(key) {
            Ok(p) if p == key && p != memory_dir => {}
            Ok(_) => {
                return Err(bad(
                    "invalid_key",
                    format!(
                        "a memory file's key is a file's path under {memory_dir}, without a trailing /"
                    ),
                ));
            }
            Err(why) => {
                let why = why.trim_start_matches("Error: ").to_string();
                return Err(bad("invalid_key", why));
            }
        }
    }
    Ok(())
}

/// Writes the fact `key` = `value` (compact JSON text; `null` deletes it)
/// as one `wm_fact` record through the log's one writer: refused when the
/// key is not one, the record would not replay (too deep) or passes
/// `--max-record-bytes`. Stamped no lower than the key's newest fact, so
/// it wins whatever `ts_ms` an earlier record of the key was given, and
/// written one at a time with the memory tool's edits (its files are keys
/// too). The answer: `{"key","deleted","ts_ms","offset","bytes"}`.
pub(crate) async fn write_fact(
    state: &Arc<AppState>,
    key: &str,
    value: &str,
) -> Result<Value, ApiError> {
    check_key(key)?;
    let record = fact_record(key, value);
    // Acknowledged only if a replay reads it, as /v1/records checks.
    if let Some(why) = unreadable(&record, state.cfg.replay.max_depth) {
        return Err(bad(
            "invalid_record",
            format!("the fact would not replay: {why}"),
        ));
    }
    if record.len() > state.cfg.max_record_bytes {
        return Err(bad(
            "record_too_large",
            format!(
                "the fact is {} bytes, more than the limit of {} (--max-record-bytes)",
                record.len(),
                state.cfg.max_record_bytes
            ),
        ));
    }
    let _permit = state.permit()?;
    let _one = state.memory.lock().await;
    let floor = newest_ts(state, vec![key.to_string()]).await?;
    let written = match state.writer() {
        Ok(w) => {
            w.append(vec![Line::stamped_object(&record).at_least(floor)])
                .await
        }
        Err(e) => Err(e),
    };
    let appended = written.map_err(|e| state.append_failed(&e))?;
    compact_soon(state);
    let a = appended
        .first()
        .ok_or_else(|| internal("append_failed", "no line written"))?;
    Ok(json!({
        "key": key,
        "deleted": value == "null",
        "ts_ms": a.ts_ms,
        "offset": a.offset,
        "bytes": a.len,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_an_object_with_a_string_type_and_a_number_or_no_ts_ms() {
        let mut p = LineParser::new(64);
        let (_, ts) = check_record(0, br#"{"type":"note","ts_ms":5}"#, &mut p, 1024).unwrap();
        assert_eq!(ts, Some(5.0));
        let (_, ts) = check_record(0, br#"{ "type": "note", "text": "x" }"#, &mut p, 1024).unwrap();
        assert_eq!(ts, None);
        for (raw, code) in [
            (&br#"{"type":"note","ts_ms":"5"}"#[..], "invalid_record"),
            (br#"{"ts_ms":5}"#, "invalid_record"),
            (br#"[1]"#, "invalid_record"),
            (
                br#"{"type":"note","text":"0123456789"}"#,
                "record_too_large",
            ),
        ] {
            let e = check_record(3, raw, &mut p, 30).unwrap_err();
            assert_eq!(e.code, code, "{}", String::from_utf8_lossy(raw));
            assert!(e.message.starts_with("record 3"), "{}", e.message);
        }
    }

    #[test]
    fn a_key_is_short_and_printable() {
        assert!(check_key("color").is_ok());
        assert!(check_key(&"k".repeat(MAX_KEY)).is_ok());
        for bad in ["", "a\nb", "\u{7f}", &"k".repeat(MAX_KEY + 1)] {
            assert_eq!(check_key(bad).unwrap_err().code, "invalid_key", "{bad:?}");
        }
    }
}
