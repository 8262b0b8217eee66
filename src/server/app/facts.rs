//! Keyed memory as the server reads and writes it: a `wm_fact` record's
//! line, and the current facts (the latest value of every live key).

use std::sync::Arc;

use super::AppState;
use super::snapshot::with_live;
use crate::server::errors::ApiError;

/// A `wm_fact` record without its `ts_ms` (the writer stamps it):
/// `{"type":"wm_fact","key":K,"value":V}`, `value` being JSON text.
pub(crate) fn fact_record(key: &str, value: &str) -> Vec<u8> {
    let mut record = format!(
        "{{\"type\":\"wm_fact\",\"key\":{},\"value\":",
        serde_json::to_string(key).expect("a string serialises")
    )
    .into_bytes();
    record.extend_from_slice(value.as_bytes());
    record.push(b'}');
    record
}

/// The current facts object, `{…}` as JSON text: the latest value of every
/// live key, from the log's live state (brought up to date; no replay).
pub(crate) async fn current(state: &Arc<AppState>) -> Result<String, ApiError> {
    Ok(current_at(state).await?.0)
}

/// [`current`], and the log's length they were read at (its committed
/// bytes: what a compare-and-append checks the log against).
pub(crate) async fn current_at(state: &Arc<AppState>) -> Result<(String, u64), ApiError> {
    let (text, at) = with_live(state, |_, live| {
        Ok((live.current_facts(), live.info().committed_bytes))
    })
    .await?;
    let facts = match text.as_deref() {
        None => "{}".to_string(),
        Some(text) => {
            // `…WM_JSON: {"type":"wm_facts","ts_ms":T,"facts":{…}}`
            let doc = text.split_once("WM_JSON: ").map_or("", |(_, j)| j);
            let start = doc.find("\"facts\":").map_or(0, |i| i + "\"facts\":".len());
            doc[start..doc.len().saturating_sub(1)].to_string()
        }
    };
    Ok((facts, at))
}

/// The newest `ts_ms` among the latest facts of `keys`: a fact written for
/// one of them is stamped no lower (see `Line::at_least`).
pub(crate) async fn newest_ts(
    state: &Arc<AppState>,
    keys: Vec<String>,
) -> Result<Option<f64>, ApiError> {
    with_live(state, move |_, live| {
        Ok(live.newest_fact_ts(keys.iter().map(String::as_str)))
    })
    .await
}

/// Whether `record` (a fact's record, without its `ts_ms`) replays: JSON no
/// deeper than a replay reads (`max_depth`); the reason it does not.
pub(crate) fn unreadable(record: &[u8], max_depth: usize) -> Option<String> {
    match crate::parse::LineParser::new(max_depth).parse(record, 0) {
        Ok(_) | Err(crate::SkipReason::MissingTsMs) => None,
        Err(reason) => Some(reason.to_string()),
    }
}
