//! Each tool run on one log, with the limits and errors of the routes that
//! do the same over HTTP: every write goes through the log's one writer
//! (`AppState::writer`), within `--max-record-bytes`; a busy server, a
//! record refused or a log that cannot be written is an error result whose
//! text names no file.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::args::{self, Refused};
use super::context;
use super::tools::{
    APPEND_RECORD, CONTEXT_DEFAULT, CONTEXT_MAX, DELETE_FACT, FILES, GET_FACTS, RECENT_CONTEXT,
    SEARCH, SET_FACT,
};
use crate::parse::LineParser;
use crate::server::app::AppState;
use crate::server::app::compact::compact_soon;
use crate::server::app::facts::current;
use crate::server::app::memory_edit;
use crate::server::app::writes::{check_record, write_fact};
use crate::server::errors::ApiError;
use crate::server::upstream::tools::{SEARCH_DEFAULT, SEARCH_MAX, ToolResult};

/// Most bytes of one `search_memory` result, as a turn's (records past it
/// are named by offset and size only).
const SEARCH_RESULT_BYTES: usize = 64 << 10;

/// Runs the tool `name` on the log of `state`; `None` when there is no
/// such tool.
pub(crate) async fn call(
    state: &Arc<AppState>,
    name: &str,
    args: &Map<String, Value>,
) -> Option<ToolResult> {
    let ran = match name {
        SEARCH => search(state, args).await,
        FILES => memory(state, args).await,
        GET_FACTS => facts(state).await,
        SET_FACT => set_fact(state, args).await,
        DELETE_FACT => delete_fact(state, args).await,
        APPEND_RECORD => append_record(state, args).await,
        RECENT_CONTEXT => recent_context(state, args).await,
        _ => return None,
    };
    let result = ran.unwrap_or_else(|e| e);
    metrics::counter!(
        "wmreplay_mcp_tool_calls_total",
        "tool" => tool_label(name),
        "outcome" => if result.is_error { "error" } else { "ok" }
    )
    .increment(1);
    tracing::info!(tool = %name, is_error = result.is_error, "an MCP tool call was run");
    Some(result)
}

/// The tool's name as a metric label: only the server's own names.
fn tool_label(name: &str) -> &'static str {
    [
        SEARCH,
        FILES,
        GET_FACTS,
        SET_FACT,
        DELETE_FACT,
        APPEND_RECORD,
        RECENT_CONTEXT,
    ]
    .into_iter()
    .find(|n| *n == name)
    .unwrap_or("other")
}

/// A tool's outcome: its result, or the error result it ends with.
type Ran = Result<ToolResult, ToolResult>;

fn ok(content: String) -> Ran {
    Ok(ToolResult {
        content,
        is_error: false,
    })
}

fn error(content: String) -> ToolResult {
    ToolResult {
        content,
        is_error: true,
    }
}

impl From<Refused> for ToolResult {
    fn from(r: Refused) -> ToolResult {
        error(r.0)
    }
}

/// An error the routes would answer with, as a tool's error result: its
/// message without the paths it may name, and its code.
pub(crate) fn failed(e: &ApiError) -> ToolResult {
    // `Error::Query` carries a message as it is; `without_paths` cuts the
    // paths out of it (a log's, in "cannot append to …").
    let message = crate::Error::Query(e.message.clone()).without_paths();
    let retry = e.retry_after.map_or(String::new(), |d| {
        format!(" Retry in {} s.", d.as_secs().max(1))
    });
    error(format!("Error: {message} ({}).{retry}", e.code))
}

/// `search_memory`: as a turn's, over the whole log (an MCP client holds
/// no part of it the search should leave out).
async fn search(state: &Arc<AppState>, args: &Map<String, Value>) -> Ran {
    let query = args::string(args, "query")?.to_string();
    let limit = args::limit(args, "limit", SEARCH_DEFAULT, SEARCH_MAX)?;
    let _permit = state.permit().map_err(|e| failed(&e))?;
    let st = state.clone();
    let found = tokio::task::spawn_blocking(move || {
        st.with_search_index(&query, |idx| {
            idx.recall_hits(&query, limit as usize, &|_| false)
        })
        .map(|hits| crate::search::recall_json(None, &query, &hits, SEARCH_RESULT_BYTES))
    })
    .await;
    match found {
        Ok(Ok(json)) => ok(json),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "search_memory failed");
            Err(error(format!(
                "Error: the search failed: {}",
                e.without_paths()
            )))
        }
        Err(_) => Err(error(
            "Error: the search stopped unexpectedly; try again.".into(),
        )),
    }
}

/// `memory`: one command of the memory tool, its writes appended in one
/// batch while the log's memory lock is held (as a turn's).
async fn memory(state: &Arc<AppState>, args: &Map<String, Value>) -> Ran {
    let _permit = state.permit().map_err(|e| failed(&e))?;
    let _one = state.memory.lock().await;
    let result = memory_edit::edit_and_append(state, args, |_, writes| writes)
        .await
        .map_err(|e| failed(&e))?;
    compact_soon(state);
    Ok(result)
}

/// `get_facts`: `{"facts":{…}}`, as `GET /v1/facts`.
async fn facts(state: &Arc<AppState>) -> Ran {
    let _permit = state.permit().map_err(|e| failed(&e))?;
    let facts = current(state).await.map_err(|e| failed(&e))?;
    ok(format!("{{\"facts\":{facts}}}"))
}

/// `set_fact`: as `PUT /v1/facts/{key}` with the value as its body.
async fn set_fact(state: &Arc<AppState>, args: &Map<String, Value>) -> Ran {
    let key = args::string(args, "key")?;
    let value = args::any(args, "value")?.to_string();
    let answer = write_fact(state, key, &value)
        .await
        .map_err(|e| failed(&e))?;
    ok(answer.to_string())
}

/// `delete_fact`: as `DELETE /v1/facts/{key}`.
async fn delete_fact(state: &Arc<AppState>, args: &Map<String, Value>) -> Ran {
    let key = args::string(args, "key")?;
    let answer = write_fact(state, key, "null")
        .await
        .map_err(|e| failed(&e))?;
    ok(answer.to_string())
}

/// `append_record`: one record as `POST /v1/records` takes it; the answer
/// is that route's for it, `{"ts_ms","offset","bytes"}`.
async fn append_record(state: &Arc<AppState>, args: &Map<String, Value>) -> Ran {
    let record = args::object(args, "record")?;
    let raw = serde_json::to_vec(record).expect("a JSON object serialises");
    let mut parser = LineParser::new(state.cfg.replay.max_depth);
    let (line, given) =
        check_record(0, &raw, &mut parser, state.cfg.max_record_bytes).map_err(|e| failed(&e))?;
    let _permit = state.permit().map_err(|e| failed(&e))?;
    let written = match state.writer() {
        Ok(w) => w.append(vec![line]).await,
        Err(e) => Err(e),
    };
    let appended = written.map_err(|e| failed(&state.append_failed(&e)))?;
    compact_soon(state);
    let Some(a) = appended.first() else {
        return Err(error("Error: no line was written; try again.".into()));
    };
    let ts_ms = match (a.ts_ms, given) {
        (Some(t), _) => json!(t),
        (None, Some(t)) => json!(t),
        (None, None) => Value::Null,
    };
    ok(json!({"ts_ms": ts_ms, "offset": a.offset, "bytes": a.len}).to_string())
}

/// `recent_context`: see `context.rs`.
async fn recent_context(state: &Arc<AppState>, args: &Map<String, Value>) -> Ran {
    let limit = args::limit(args, "limit", CONTEXT_DEFAULT, CONTEXT_MAX)?;
    let _permit = state.permit().map_err(|e| failed(&e))?;
    context::recent(state, limit as usize)
        .await
        .map(|text| ToolResult {
            content: text,
            is_error: false,
        })
        .map_err(|e| failed(&e))
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn an_error_shown_to_a_client_names_no_file() {
        let e = ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "append_failed",
            "cannot append to /srv/logs/secret.log: No space left on device (os error 28)",
        );
        let r = failed(&e);
        assert!(r.is_error);
        assert!(!r.content.contains("/srv"), "{}", r.content);
        assert!(
            r.content.contains("No space left on device"),
            "{}",
            r.content
        );
        assert!(r.content.ends_with("(append_failed)."), "{}", r.content);
        let mut busy = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", "64 replays");
        busy.retry_after = Some(std::time::Duration::from_millis(300));
        assert_eq!(
            failed(&busy).content,
            "Error: 64 replays (busy). Retry in 1 s."
        );
    }

    #[test]
    fn metric_labels_are_the_servers_own_names() {
        assert_eq!(tool_label(SEARCH), "search_memory");
        assert_eq!(tool_label(RECENT_CONTEXT), "recent_context");
        assert_eq!(tool_label("anything a client sends"), "other");
    }
}
