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
use super::facts::{current_at, fact_record, newest_ts};
use crate::server::errors::ApiError;
use crate::server::upstream::tools::ToolResult;
use crate::server::writer::Line;

/// The memory directory.
pub(crate) const ROOT: &str = "/memories";
/// Longest path, in bytes (a fact's key is at most 256).
pub(crate) const MAX_PATH: usize = 256;

/// `path` checked and normalised (no trailing `/`), or why it is refused.
pub(crate) fn checked(path: &str) -> Result<String, String> {
    let refuse = |why: &str| Err(format!("Error: Invalid path {path}: {why}."));
    if path.len() > MAX_PATH {
        return refuse(&format!("longer than {MAX_PATH} bytes"));
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return refuse("control characters and backslashes are not allowed");
    }
    if let Some(c) = path.chars().find(|&c| invisible(c)) {
        return refuse(&format!(
            "the character U+{:04X} (invisible, or one that reorders or breaks text) is not allowed",
            c as u32
        ));
    }
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    let rest = match trimmed.strip_prefix(ROOT) {
        Some("") => return Ok(ROOT.to_string()),
        Some(r) if r.starts_with('/') => &r[1..],
        _ => return refuse("access is restricted to /memories"),
    };
    for part in rest.split('/') {
        let lower = part.to_ascii_lowercase();
        if part.is_empty() || part == "." || part == ".." || lower.contains("%2e%2e") {
            return refuse("no empty, `.` or `..` component is allowed");
        }
        if part.starts_with(char::is_whitespace) || part.ends_with(char::is_whitespace) {
            return refuse("a name may not start or end with a space");
        }
    }
    Ok(trimmed.to_string())
}

/// Characters a name must not hold although they print nothing, or change
/// how the text around them reads: zero-width ones, soft hyphens, line and
/// paragraph separators, the bidirectional controls, the byte-order mark.
fn invisible(c: char) -> bool {
    matches!(
        c as u32,
        0x00AD | 0x034F | 0x061C | 0x115F | 0x1160 | 0x17B4 | 0x17B5 | 0x180B..=0x180F
            | 0x200B..=0x200F | 0x2028..=0x202F | 0x205F..=0x206F | 0x3164 | 0xFE00..=0xFE0F
            | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0xE0000..=0xE0FFF
    )
}

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
struct Edit {
    result: ToolResult,
    lines: Vec<Line>,
}

/// Runs a memory-tool command on the files as they stand; and where the
/// log ended when they were read.
async fn edit(state: &Arc<AppState>, args: &Map<String, Value>) -> Result<(Edit, u64), ApiError> {
    let (facts, since) = current_at(state).await?;
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
            return Ok((
                Edit {
                    result: ToolResult {
                        content: format!(
                            "Error: File {path} is too large to keep: its record would be {} \
                             bytes, more than the limit of {max}.",
                            record.len()
                        ),
                        is_error: true,
                    },
                    lines: Vec::new(),
                },
                since,
            ));
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
    Ok((Edit { result, lines }, since))
}

/// Times a command is run again on the files as they then stand when the
/// log changed between its read and its append.
const MAX_ATTEMPTS: usize = 32;

/// Runs a memory-tool command (`args`: the call's input) on the files as
/// the log holds them and appends its writes in one batch with what `wrap`
/// adds around them (a turn's `tool_call` and `tool_result`), **only if
/// nothing was appended to the log since the files were read**: otherwise
/// (another process wrote, a `wmreplay mcp` beside `serve --mcp`) the
/// command runs again on the files as they now stand. So two commands,
/// from any processes, never edit the same version. Hold
/// [`AppState::memory`] around it, which keeps this process's own commands
/// from racing each other. A write whose record would pass
/// `--max-record-bytes` makes the command an error result, and nothing of
/// it is written.
pub(crate) async fn edit_and_append(
    state: &Arc<AppState>,
    args: &Map<String, Value>,
    wrap: impl Fn(&ToolResult, Vec<Line>) -> Vec<Line>,
) -> Result<ToolResult, ApiError> {
    for attempt in 0..MAX_ATTEMPTS {
        let (edit, since) = edit(state, args).await?;
        let writes = !edit.lines.is_empty();
        let lines = wrap(&edit.result, edit.lines);
        if lines.is_empty() {
            return Ok(edit.result);
        }
        let w = state.writer().map_err(|e| state.append_failed(&e))?;
        if !writes {
            w.append(lines).await.map_err(|e| state.append_failed(&e))?;
            return Ok(edit.result);
        }
        // Any record since `since` breaks it: `below` is past every key.
        let guard = crate::server::writer::Guard {
            since,
            below: u64::MAX,
        };
        match w.append_guarded(lines, guard).await {
            Ok(Ok(_)) => return Ok(edit.result),
            Ok(Err(at)) => {
                tracing::debug!(
                    attempt,
                    at,
                    "the log changed under a memory command; running it again"
                );
                // A moment for the other writer's burst, growing, jittered.
                let ms = 1 + (attempt as u64).min(20) + u64::from(std::process::id() % 3);
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
            Err(e) => return Err(state.append_failed(&e)),
        }
    }
    let mut e = ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "log_busy",
        "the log kept changing while the memory command ran; nothing was written, try again",
    );
    e.retry_after = Some(std::time::Duration::from_secs(1));
    Err(e)
}
