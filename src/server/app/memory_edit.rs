//! The memory tool's write path, for whoever runs its commands (a turn's
//! `--memory-tool` calls, the MCP `memory` tool): the files as the log
//! holds them (its current facts), a command run on them, and its writes
//! as `wm_fact` records, each within `--max-record-bytes` and stamped no
//! lower than its key's newest fact.
//!
//! The commands themselves (`view`, `create`, `str_replace`, …) are a pure
//! function of the files, kept with the turn (`turn/memory.rs`); this
//! module names them through [`Commands`], which the turn implements for
//! [`MemoryCommands`], so that the path is one for every caller without
//! this layer importing the turn's.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::AppState;
use super::facts::{current, fact_record, newest_ts};
use crate::server::errors::ApiError;
use crate::server::upstream::tools::ToolResult;
use crate::server::writer::Line;

/// The memory tool's commands as a pure function: given the current facts
/// (`{"key": value, …}`), a call's arguments and the largest file allowed,
/// the answer and the keys to write (`None`: delete).
pub(crate) trait Commands {
    fn apply(
        &self,
        facts: &Map<String, Value>,
        args: &Map<String, Value>,
        max_file: usize,
    ) -> (ToolResult, Vec<(String, Option<String>)>);
}

/// The memory tool (its [`Commands`] are implemented in `turn/tools.rs`).
pub(crate) struct MemoryCommands;

/// One command's outcome: the answer, and the `wm_fact` lines to append
/// (in one batch with whatever else the caller records).
pub(crate) struct Edit {
    pub(crate) result: ToolResult,
    pub(crate) lines: Vec<Line>,
}

/// Runs a memory-tool command (`args`: the call's input) on the files as
/// they stand. Hold [`AppState::memory`] from before this call until the
/// lines are appended, so that two commands never edit the same version.
/// A write whose record would pass `--max-record-bytes` makes the command
/// an error result, and nothing is written. An error only when the log
/// cannot be read.
pub(crate) async fn edit(
    state: &Arc<AppState>,
    args: &Map<String, Value>,
) -> Result<Edit, ApiError> {
    let facts = current(state).await?;
    let facts: Map<String, Value> = serde_json::from_str(&facts).unwrap_or_default();
    let max = state.cfg.max_record_bytes;
    let (result, writes) = MemoryCommands.apply(&facts, args, max);
    let mut records = Vec::with_capacity(writes.len());
    for (path, text) in &writes {
        let value = match text {
            Some(t) => serde_json::to_string(t).expect("a string serialises"),
            None => "null".into(),
        };
        let record = fact_record(path, &value);
        if record.len() > max {
            return Ok(Edit {
                result: ToolResult {
                    content: format!(
                        "Error: File {path} is too large to keep: its record would be {} bytes, \
                         more than the limit of {max}.",
                        record.len()
                    ),
                    is_error: true,
                },
                lines: Vec::new(),
            });
        }
        records.push(record);
    }
    // Each written no lower than its key's newest fact: the command's
    // result describes the files the log then holds, whatever stamps
    // earlier records of those keys were given.
    let keys: Vec<String> = writes.into_iter().map(|(k, _)| k).collect();
    let floor = if keys.is_empty() {
        None
    } else {
        newest_ts(state, keys).await?
    };
    let lines = records
        .iter()
        .map(|r| Line::stamped_object(r).at_least(floor))
        .collect();
    Ok(Edit { result, lines })
}
