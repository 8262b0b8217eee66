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
    let text = with_live(state, |_, live| Ok(live.current_facts())).await?;
    Ok(match text.as_deref() {
        None => "{}".to_string(),
        Some(text) => {
            // `…WM_JSON: {"type":"wm_facts","ts_ms":T,"facts":{…}}`
            let doc = text.split_once("WM_JSON: ").map_or("", |(_, j)| j);
            let start = doc.find("\"facts\":").map_or(0, |i| i + "\"facts\":".len());
            doc[start..doc.len().saturating_sub(1)].to_string()
        }
    })
}
