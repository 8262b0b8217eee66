//! Running the tool calls of a turn's answer (`--recall-tool`,
//! `--memory-tool`), each recorded in the log as it is run, in one batch:
//!
//! - `{"type":"tool_call","ts_ms":T,"session_id":S,"id":ID,"name":N,"input":{…}}`
//!   (`input` as the model wrote it; a string when it is not JSON);
//! - the memory tool's writes, as `wm_fact` records keyed by path;
//! - `{"type":"tool_result","ts_ms":T,"session_id":S,"id":ID,"name":N,"content":TEXT,"is_error":B}`.
//!
//! Later turns replay them like any record; the search index leaves the
//! two tool types out (they repeat what was searched for and found).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::input::Input;
use super::memory;
use crate::server::app::AppState;
use crate::server::app::memory_edit::{self, Commands, MemoryCommands};
use crate::server::errors::ApiError;
use crate::server::upstream::ToolCall;
use crate::server::upstream::tools::{
    MEMORY, SEARCH_DEFAULT, SEARCH_MAX, SEARCH_MEMORY, ToolResult,
};
use crate::server::writer::{Line, fit_json, json_len};

/// Most bytes of one `search_memory` result: records past it are named by
/// offset and size only.
const SEARCH_RESULT_BYTES: usize = 64 << 10;

/// What a turn's tool calls may see: nothing at or after the turn's own
/// input (the model has it), nor a record the request replays.
pub(crate) struct ToolScope {
    /// The offset of the turn's `text_input`.
    pub(crate) before: u64,
    /// The offsets of the records replayed, sorted.
    pub(crate) held: Arc<Vec<u64>>,
}

/// Runs `calls` in order, appending each one's records; the results, one
/// per call. An error only when the log cannot be written.
pub(crate) async fn run_calls(
    state: &Arc<AppState>,
    input: &Input,
    calls: &[ToolCall],
    scope: &ToolScope,
) -> Result<Vec<ToolResult>, ApiError> {
    let mut results = Vec::with_capacity(calls.len());
    for call in calls {
        let session = input.session_id.as_deref();
        let result = match call.arguments() {
            Err(why) => Ran::plain(error(format!("Error: {why}"))),
            Ok(args) => match call.name.as_str() {
                SEARCH_MEMORY if state.cfg.tools.search_memory => {
                    Ran::plain(search(state, &args, scope).await)
                }
                MEMORY if state.cfg.tools.memory => {
                    let held = state.memory.lock().await;
                    let max = state.cfg.max_record_bytes;
                    let result = memory_edit::edit_and_append(state, &args, |result, writes| {
                        records(max, session, call, result, writes)
                    })
                    .await;
                    drop(held);
                    results.push(ran(call, result?));
                    continue;
                }
                other => Ran::plain(error(format!(
                    "Error: there is no tool named {other:?} in this conversation."
                ))),
            },
        };
        results.push(append(state, session, call, result).await?);
    }
    Ok(results)
}

fn error(content: String) -> ToolResult {
    ToolResult {
        content,
        is_error: true,
    }
}

/// A call's outcome: its result and the records it writes besides its own.
struct Ran {
    result: ToolResult,
    writes: Vec<Line>,
}

impl Ran {
    fn plain(result: ToolResult) -> Ran {
        Ran {
            result,
            writes: Vec::new(),
        }
    }
}

/// Bytes a tool record takes besides its `input` or `content`: its type,
/// `ts_ms`, session, id, name, flags and punctuation, with room to spare.
const RECORD_FRAME: usize = 512;

/// A tool call's `input` within `room` bytes of JSON: as the model wrote it
/// when it fits; otherwise the members of an object input that take at
/// most 256 bytes each (a command, a path), and `"left_out"` naming each
/// member left out with its size, `{"name":bytes,…}`; or, when even that
/// does not fit or the input is not an object, `{"left_out":{"input":N}}`.
/// A call the model made with a 2 MiB argument is then remembered by what
/// it did, not replayed to every later request.
pub(crate) fn bounded_input(input: Value, room: usize) -> Value {
    let whole = input.to_string().len();
    if whole <= room {
        return input;
    }
    let whole_left_out = || json!({ "left_out": { "input": whole } });
    let Value::Object(members) = input else {
        return whole_left_out();
    };
    let mut kept = Map::new();
    let mut left = Map::new();
    for (k, v) in members {
        let n = v.to_string().len();
        if n <= 256 {
            kept.insert(k, v);
        } else {
            left.insert(k, json!(n));
        }
    }
    kept.insert("left_out".into(), Value::Object(left));
    let kept = Value::Object(kept);
    if kept.to_string().len() <= room {
        kept
    } else {
        whole_left_out()
    }
}

/// The call, its writes and its result appended in one batch, each record
/// held to a record's limit (`--max-record-bytes`; see [`bounded_input`],
/// and a result's content cut to fit, with `"content_cut":{"bytes":N}`).
async fn append(
    state: &Arc<AppState>,
    session: Option<&str>,
    call: &ToolCall,
    ran: Ran,
) -> Result<ToolResult, ApiError> {
    let lines = records(
        state.cfg.max_record_bytes,
        session,
        call,
        &ran.result,
        ran.writes,
    );
    let written = match state.writer() {
        Ok(w) => w.append(lines).await,
        Err(e) => Err(e),
    };
    written.map_err(|e| state.append_failed(&e))?;
    Ok(self::ran(call, ran.result))
}

/// A call's records: its `tool_call`, the records it writes (`writes`),
/// and its `tool_result`, each within a record's limit (`max_record`).
fn records(
    max_record: usize,
    session: Option<&str>,
    call: &ToolCall,
    result: &ToolResult,
    writes: Vec<Line>,
) -> Vec<Line> {
    let room = max_record.saturating_sub(
        RECORD_FRAME + session.map_or(0, json_len) + json_len(&call.id) + json_len(&call.name),
    );
    let input = serde_json::from_str::<Value>(&call.input)
        .unwrap_or_else(|_| Value::String(call.input.clone()));
    let mut head = Map::new();
    head.insert("type".into(), json!("tool_call"));
    if let Some(s) = session {
        head.insert("session_id".into(), json!(s));
    }
    head.insert("id".into(), json!(call.id));
    head.insert("name".into(), json!(call.name));
    let mut called = head.clone();
    called.insert("input".into(), bounded_input(input, room));
    head.insert("type".into(), json!("tool_result"));
    let content = fit_json(&result.content, room);
    head.insert("content".into(), json!(content));
    if content.len() < result.content.len() {
        head.insert(
            "content_cut".into(),
            json!({ "bytes": result.content.len() }),
        );
    }
    head.insert("is_error".into(), json!(result.is_error));
    let mut lines = vec![Line::stamped_object(
        Value::Object(called).to_string().as_bytes(),
    )];
    lines.extend(writes);
    lines.push(Line::stamped_object(
        Value::Object(head).to_string().as_bytes(),
    ));
    lines
}

/// A call recorded: counted and logged; its result.
fn ran(call: &ToolCall, result: ToolResult) -> ToolResult {
    metrics::counter!(
        "wmreplay_tool_calls_total",
        // Only the server's own names: a label the model chose could be
        // anything.
        "tool" => match call.name.as_str() {
            SEARCH_MEMORY => SEARCH_MEMORY,
            MEMORY => MEMORY,
            _ => "other",
        },
        "outcome" => if result.is_error { "error" } else { "ok" }
    )
    .increment(1);
    tracing::info!(
        tool = %call.name,
        is_error = result.is_error,
        "a tool call was run"
    );
    result
}

/// `search_memory`: the best records for `query` that the request does not
/// hold, as `{"query":Q,"records":[{"offset":O,"record":LINE},…]}`.
async fn search(state: &Arc<AppState>, args: &Map<String, Value>, scope: &ToolScope) -> ToolResult {
    let Some(query) = args.get("query").and_then(Value::as_str) else {
        return error("Error: `query` is required (a string).".into());
    };
    let limit = match args.get("limit") {
        None | Some(Value::Null) => SEARCH_DEFAULT,
        Some(v) => match v.as_u64().filter(|n| (1..=SEARCH_MAX).contains(n)) {
            Some(n) => n,
            None => {
                return error(format!(
                    "Error: `limit` must be an integer from 1 to {SEARCH_MAX}."
                ));
            }
        },
    };
    let st = state.clone();
    let query = query.to_string();
    let (before, held) = (scope.before, scope.held.clone());
    let found = tokio::task::spawn_blocking(move || {
        let skip = |o: u64| o >= before || held.binary_search(&o).is_ok();
        st.with_search_index(&query, |idx| idx.recall_hits(&query, limit as usize, &skip))
            .map(|hits| crate::search::recall_json(None, &query, &hits, SEARCH_RESULT_BYTES))
    })
    .await;
    match found {
        Ok(Ok(json)) => ToolResult {
            content: json,
            is_error: false,
        },
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "search_memory failed");
            error(format!("Error: the search failed: {}", e.without_paths()))
        }
        Err(_) => error("Error: the search stopped unexpectedly; try again.".into()),
    }
}

/// The memory tool's commands (`memory.rs`), as the write path every
/// caller shares (`app::memory_edit`) runs them.
impl Commands for MemoryCommands {
    fn apply(
        &self,
        facts: &Map<String, Value>,
        args: &Map<String, Value>,
        max_file: usize,
    ) -> (ToolResult, Vec<(String, Option<String>)>) {
        let applied = memory::run(&memory::files_of(facts), args, max_file);
        (applied.result, applied.writes)
    }
}
