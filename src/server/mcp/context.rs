//! `recent_context`: the newest summary's text and the newest records
//! replayed after it, their lines as written, within a bounded answer:
//!
//! `{"summary":TEXT|null,"records":[{"offset":O,"record":LINE},…],"earlier":N}`
//!
//! - the records are those a replay with summaries gives after the newest
//!   `wm_summary` (in replay order, `ts_ms` then file order), the newest
//!   `limit` of them, oldest first; with `--facts`, `wm_fact` records are
//!   left out (`get_facts` reads them);
//! - `earlier` counts the records after the summary older than those;
//! - at most [`RECORDS_BYTES`] of record lines: the newest are kept first,
//!   and an older one that does not fit is named by its offset and size,
//!   `{"offset":O,"bytes":N,"left_out":true}`;
//! - the summary's text is cut to [`SUMMARY_BYTES`] of JSON, and then says
//!   so: `"summary_cut":{"bytes":N}` (the whole text's size).

use std::fs::File;
use std::sync::Arc;

use crate::input::{lines, read_from};
use crate::parse::LineParser;
use crate::server::app::AppState;
use crate::server::app::snapshot::with_live;
use crate::server::errors::{ApiError, internal};
use crate::server::writer::fit_json;

/// Most bytes of record lines in one answer.
pub(crate) const RECORDS_BYTES: usize = 64 << 10;
/// Most bytes of the summary's text (as JSON) in one answer.
pub(crate) const SUMMARY_BYTES: usize = 32 << 10;

/// Bytes read at a time while looking for a line's end.
const STEP: u64 = 16 << 10;

/// One record of the answer.
#[derive(Debug, PartialEq)]
enum Entry {
    Line { offset: u64, line: String },
    LeftOut { offset: u64, bytes: u64 },
}

/// The answer for the log of `state`, with at most `limit` records.
pub(crate) async fn recent(state: &Arc<AppState>, limit: usize) -> Result<String, ApiError> {
    let mut sel = state.cfg.selection.clone();
    sel.summaries = true;
    let (summary, offsets, earlier) = with_live(state, move |_, live| {
        let summary = live
            .fold_texts(&sel, &[], live.info().rebuilds)
            .and_then(|(s, _)| s);
        let after = live.replayed_after_summary(&sel, u64::MAX, |_| false);
        let n = after.items.len();
        let newest: Vec<u64> = after.items[n.saturating_sub(limit)..]
            .iter()
            .map(|&(_, offset)| offset)
            .collect();
        let earlier = n - newest.len();
        Ok((summary, newest, earlier))
    })
    .await?;
    let st = state.clone();
    let entries = tokio::task::spawn_blocking(move || read_lines(&st, &offsets))
        .await
        .map_err(|e| internal("read_failed", e))??;
    Ok(answer(summary.as_deref(), &entries, earlier))
}

/// The newest summary's text, if the log has one.
pub(crate) async fn summary(state: &Arc<AppState>) -> Result<Option<String>, ApiError> {
    let mut sel = state.cfg.selection.clone();
    sel.summaries = true;
    with_live(state, move |_, live| {
        Ok(live
            .fold_texts(&sel, &[], live.info().rebuilds)
            .and_then(|(s, _)| s))
    })
    .await
}

/// The lines at `offsets` (oldest first), the newest first to take the
/// room; a line no longer a record there (the log replaced meanwhile) is
/// left out of the answer.
fn read_lines(state: &AppState, offsets: &[u64]) -> Result<Vec<Entry>, ApiError> {
    if offsets.is_empty() {
        return Ok(Vec::new());
    }
    let opened = crate::input::open_regular(&state.cfg.log, state.cfg.replay.refuse_links)
        .map_err(|e| internal("read_failed", e.without_paths()))?;
    let Some((file, _)) = opened else {
        return Ok(Vec::new());
    };
    let mut parser = LineParser::new(state.cfg.replay.max_depth);
    let mut room = RECORDS_BYTES;
    let mut out = Vec::with_capacity(offsets.len());
    for &offset in offsets.iter().rev() {
        let found = line_at(&file, offset, room)
            .map_err(|e| internal("read_failed", format!("reading the log: {e}")))?;
        match found {
            Some(Found::Whole(bytes)) => {
                let line = &bytes[lines::trim(&bytes)];
                if parser.parse(line, 0).is_err() {
                    continue;
                }
                room -= bytes.len();
                out.push(Entry::Line {
                    offset,
                    line: String::from_utf8_lossy(line).into_owned(),
                });
            }
            Some(Found::Longer(bytes)) => out.push(Entry::LeftOut { offset, bytes }),
            None => {}
        }
    }
    out.reverse();
    Ok(out)
}

/// What [`line_at`] found.
enum Found {
    /// The line, without its `\n`.
    Whole(Vec<u8>),
    /// A line longer than the room: its length.
    Longer(u64),
}

/// The line starting at `offset` of `file`, if it fits in `room` bytes
/// (its length otherwise); `None` when no `\n` ends it (past the last
/// whole line).
fn line_at(file: &File, offset: u64, room: usize) -> std::io::Result<Option<Found>> {
    let mut kept: Vec<u8> = Vec::new();
    let mut len = 0u64;
    let mut buf = Vec::with_capacity(STEP as usize);
    loop {
        buf.clear();
        read_from(file, offset + len, STEP, &mut buf)?;
        let end = memchr::memchr(b'\n', &buf);
        let take = end.unwrap_or(buf.len());
        len += take as u64;
        if len <= room as u64 {
            kept.extend_from_slice(&buf[..take]);
        }
        if end.is_some() {
            return Ok(Some(if len <= room as u64 {
                Found::Whole(kept)
            } else {
                Found::Longer(len)
            }));
        }
        if (buf.len() as u64) < STEP {
            return Ok(None);
        }
    }
}

/// The answer's JSON text.
fn answer(summary: Option<&str>, entries: &[Entry], earlier: usize) -> String {
    let mut out = String::from("{\"summary\":");
    match summary {
        None => out.push_str("null"),
        Some(text) => {
            let kept = fit_json(text, SUMMARY_BYTES);
            out.push_str(&serde_json::to_string(kept).expect("a string serialises"));
            if kept.len() < text.len() {
                out.push_str(&format!(",\"summary_cut\":{{\"bytes\":{}}}", text.len()));
            }
        }
    }
    out.push_str(",\"records\":[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match e {
            Entry::Line { offset, line } => {
                let record = if serde_json::from_str::<serde::de::IgnoredAny>(line).is_ok() {
                    line.clone()
                } else {
                    serde_json::to_string(line).expect("a string serialises")
                };
                out.push_str(&format!("{{\"offset\":{offset},\"record\":{record}}}"));
            }
            Entry::LeftOut { offset, bytes } => out.push_str(&format!(
                "{{\"offset\":{offset},\"bytes\":{bytes},\"left_out\":true}}"
            )),
        }
    }
    out.push_str(&format!("],\"earlier\":{earlier}}}"));
    out
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn a_line_is_read_whole_or_measured() {
        let mut f = tempfile::tempfile().unwrap();
        let long = "x".repeat(40_000);
        write!(f, "{{\"a\":1}}\n{long}\nno end").unwrap();
        assert!(matches!(line_at(&f, 0, 100).unwrap(), Some(Found::Whole(l)) if l == b"{\"a\":1}"));
        assert!(matches!(
            line_at(&f, 8, 100).unwrap(),
            Some(Found::Longer(40_000))
        ));
        assert!(
            matches!(line_at(&f, 8, 50_000).unwrap(), Some(Found::Whole(l)) if l.len() == 40_000)
        );
        assert!(line_at(&f, 40_009, 100).unwrap().is_none());
        assert!(line_at(&f, 1 << 20, 100).unwrap().is_none());
    }

    #[test]
    fn the_answer_is_json_with_the_summary_cut_to_its_room() {
        let entries = [
            Entry::LeftOut {
                offset: 0,
                bytes: 70_000,
            },
            Entry::Line {
                offset: 70_001,
                line: r#"{"type":"note","ts_ms":2}"#.into(),
            },
        ];
        let v: Value = serde_json::from_str(&answer(Some("short"), &entries, 3)).unwrap();
        assert_eq!(
            v,
            json!({
                "summary": "short",
                "records": [
                    {"offset": 0, "bytes": 70_000, "left_out": true},
                    {"offset": 70_001, "record": {"type": "note", "ts_ms": 2}}
                ],
                "earlier": 3
            })
        );
        let long = "y\n".repeat(SUMMARY_BYTES);
        let text = answer(Some(&long), &[], 0);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["summary"].as_str().unwrap().len() < SUMMARY_BYTES);
        assert_eq!(v["summary_cut"]["bytes"], long.len());
        assert!(text.len() < SUMMARY_BYTES + 100);
        let v: Value = serde_json::from_str(&answer(None, &[], 0)).unwrap();
        assert_eq!(v, json!({"summary": null, "records": [], "earlier": 0}));
    }
}
