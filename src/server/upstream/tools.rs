//! Tools the server offers the model and runs itself, in each provider's
//! own protocol: their definitions (the request's `tools`), the calls an
//! answer makes ([`ToolCall`]), and the messages that continue a turn once
//! the server has run them — the model's message as it was, then the
//! results (Anthropic: `tool_use` blocks answered by `tool_result` blocks
//! in the next user message; OpenAI: `tool_calls` answered by one `tool`
//! message each).

use serde_json::{Value, json};

use super::{Answer, Provider};

/// The search tool's name.
pub(crate) const SEARCH_MEMORY: &str = "search_memory";
/// The memory tool's name (both providers).
pub(crate) const MEMORY: &str = "memory";
/// Anthropic's memory tool type.
pub(crate) const MEMORY_TYPE: &str = "memory_20250818";
/// The `anthropic-beta` value the memory tool is enabled by.
pub(crate) const MEMORY_BETA: &str = "context-management-2025-06-27";

/// One call the model asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// The provider's id for the call (`toolu_…`, `call_…`).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The call's input, JSON text as the model wrote it.
    pub input: String,
}

impl ToolCall {
    /// The call's input: a JSON object, or why it is not one.
    pub(crate) fn arguments(&self) -> Result<serde_json::Map<String, Value>, String> {
        let text = if self.input.trim().is_empty() {
            "{}"
        } else {
            &self.input
        };
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(o)) => Ok(o),
            Ok(_) => Err("the tool's input must be a JSON object".into()),
            Err(e) => Err(format!("the tool's input is not valid JSON: {e}")),
        }
    }
}

/// What running a call gave: the text the model reads, and whether it is an
/// error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolResult {
    pub(crate) content: String,
    pub(crate) is_error: bool,
}

/// Most records a `search_memory` call may ask for.
pub(crate) const SEARCH_MAX: u64 = 20;
/// Records a `search_memory` call gets without a `limit`.
pub(crate) const SEARCH_DEFAULT: u64 = 5;

fn search_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Words to look for: names, numbers, phrases. Records are ranked by how well their text matches (BM25); there is no query syntax."
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": SEARCH_MAX,
                "description": format!("How many records to return (default {SEARCH_DEFAULT}).")
            }
        },
        "required": ["query"]
    })
}

const SEARCH_DESCRIPTION: &str = "Searches the whole working-memory log, older records included (those no longer in this conversation, or folded into a summary), and returns the best-matching records, best first, each with its byte offset in the log and the record as written. Records already in this conversation are left out. Use it when you need a name, number, promise or decision from the past that you cannot see.";

const MEMORY_DESCRIPTION: &str = "Your memory directory, /memories: files that persist across conversations. Check it before starting a task; record progress, decisions and what you learn as you go. Commands: view (path: a directory listing, or a file with line numbers; view_range [first, last] shows those lines, last -1 for the end), create (path, file_text: a new file, or a file overwritten), str_replace (path, old_str: text that occurs exactly once, new_str), insert (path, insert_line: the line after which to insert, 0 for the start; insert_text), delete (path: a file or a directory), rename (old_path, new_path). Every path starts with /memories.";

fn memory_schema() -> Value {
    let string = json!({"type": "string"});
    json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "enum": ["view", "create", "str_replace", "insert", "delete", "rename"]
            },
            "path": string,
            "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
            "file_text": string,
            "old_str": string,
            "new_str": string,
            "insert_line": {"type": "integer", "minimum": 0},
            "insert_text": string,
            "old_path": string,
            "new_path": string
        },
        "required": ["command"]
    })
}

/// The request's `tools`: `search_memory` and the memory tool as asked;
/// `None` for neither.
pub(crate) fn definitions(provider: Provider, search: bool, memory: bool) -> Option<Value> {
    let mut out = Vec::new();
    if search {
        out.push(match provider {
            Provider::Anthropic => json!({
                "name": SEARCH_MEMORY,
                "description": SEARCH_DESCRIPTION,
                "input_schema": search_schema(),
            }),
            Provider::OpenAi => json!({
                "type": "function",
                "function": {
                    "name": SEARCH_MEMORY,
                    "description": SEARCH_DESCRIPTION,
                    "parameters": search_schema(),
                }
            }),
        });
    }
    if memory {
        out.push(match provider {
            Provider::Anthropic => json!({"type": MEMORY_TYPE, "name": MEMORY}),
            Provider::OpenAi => json!({
                "type": "function",
                "function": {
                    "name": MEMORY,
                    "description": MEMORY_DESCRIPTION,
                    "parameters": memory_schema(),
                }
            }),
        });
    }
    (!out.is_empty()).then_some(Value::Array(out))
}

/// Adds `beta` to the `anthropic-beta` header (a comma-separated list),
/// keeping the betas the operator's headers name.
pub(crate) fn add_beta(headers: &mut reqwest::header::HeaderMap, beta: &str) {
    let mut list: Vec<String> = headers
        .get("anthropic-beta")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(|b| b.trim().to_string())
                .filter(|b| !b.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if list.iter().any(|b| b == beta) {
        return;
    }
    list.push(beta.to_string());
    if let Ok(v) = reqwest::header::HeaderValue::from_str(&list.join(",")) {
        headers.insert("anthropic-beta", v);
    }
}

/// The `tool_choice` member (with its leading comma) of a call that must
/// answer without a tool: the one after a turn's last round.
pub(crate) fn no_tool_choice(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => r#","tool_choice":{"type":"none"}"#,
        Provider::OpenAi => r#","tool_choice":"none""#,
    }
}

/// The messages that continue a turn after `answer`'s tool calls were run
/// (`results`, one per call, in order): each written with a leading comma,
/// to follow the request's last message.
/// The message that continues an Anthropic answer paused (`pause_turn`):
/// the answer itself, as it came, as the request's last message.
pub(crate) fn paused_continuation(answer: &Answer) -> Vec<u8> {
    let mut out = vec![b','];
    out.extend_from_slice(
        json!({"role": "assistant", "content": answer.blocks})
            .to_string()
            .as_bytes(),
    );
    out
}

pub(crate) fn continuation(provider: Provider, answer: &Answer, results: &[ToolResult]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut push = |v: Value| {
        out.push(b',');
        out.extend_from_slice(v.to_string().as_bytes());
    };
    match provider {
        Provider::Anthropic => {
            // The model's blocks as it sent them; a text block empty or of
            // whitespace only is refused by the API, so it is left out.
            let blocks: Vec<&Value> = answer
                .blocks
                .iter()
                .filter(|b| {
                    !(b["type"] == "text" && b["text"].as_str().is_none_or(|t| t.trim().is_empty()))
                })
                .collect();
            push(json!({"role": "assistant", "content": blocks}));
            let results: Vec<Value> = answer
                .tool_calls
                .iter()
                .zip(results)
                .map(|(c, r)| {
                    let mut b = json!({
                        "type": "tool_result",
                        "tool_use_id": c.id,
                        "content": r.content,
                    });
                    if r.is_error {
                        b["is_error"] = Value::Bool(true);
                    }
                    b
                })
                .collect();
            push(json!({"role": "user", "content": results}));
        }
        Provider::OpenAi => {
            let calls: Vec<Value> = answer
                .tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.input},
                    })
                })
                .collect();
            let content = if answer.text.is_empty() {
                Value::Null
            } else {
                Value::String(answer.text.clone())
            };
            push(json!({"role": "assistant", "content": content, "tool_calls": calls}));
            for (c, r) in answer.tool_calls.iter().zip(results) {
                push(json!({"role": "tool", "tool_call_id": c.id, "content": r.content}));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(provider: Provider) -> Answer {
        let call = ToolCall {
            id: "t1".into(),
            name: SEARCH_MEMORY.into(),
            input: r#"{"query":"lisbon"}"#.into(),
        };
        Answer {
            text: String::new(),
            blocks: match provider {
                Provider::Anthropic => vec![
                    json!({"type": "text", "text": ""}),
                    json!({"type": "tool_use", "id": "t1", "name": SEARCH_MEMORY, "input": {"query": "lisbon"}}),
                ],
                Provider::OpenAi => Vec::new(),
            },
            tool_calls: vec![call],
            ..Answer::default()
        }
    }

    #[test]
    fn anthropic_continues_with_the_blocks_and_tool_results() {
        let r = [ToolResult {
            content: "none".into(),
            is_error: true,
        }];
        let out = continuation(Provider::Anthropic, &answer(Provider::Anthropic), &r);
        let text = String::from_utf8(out).unwrap();
        let msgs: Value = serde_json::from_str(&format!("[{}]", &text[1..])).unwrap();
        // The empty text block is left out.
        assert_eq!(msgs[0]["content"].as_array().unwrap().len(), 1);
        assert_eq!(msgs[0]["content"][0]["type"], "tool_use");
        assert_eq!(msgs[1]["role"], "user");
        assert_eq!(msgs[1]["content"][0]["tool_use_id"], "t1");
        assert_eq!(msgs[1]["content"][0]["is_error"], true);
    }

    #[test]
    fn openai_continues_with_tool_calls_and_tool_messages() {
        let r = [ToolResult {
            content: "found".into(),
            is_error: false,
        }];
        let out = continuation(Provider::OpenAi, &answer(Provider::OpenAi), &r);
        let text = String::from_utf8(out).unwrap();
        let msgs: Value = serde_json::from_str(&format!("[{}]", &text[1..])).unwrap();
        assert_eq!(msgs[0]["content"], Value::Null);
        assert_eq!(
            msgs[0]["tool_calls"][0]["function"]["arguments"],
            r#"{"query":"lisbon"}"#
        );
        assert_eq!(
            msgs[1],
            json!({"role": "tool", "tool_call_id": "t1", "content": "found"})
        );
    }

    #[test]
    fn definitions_follow_each_protocol() {
        let a = definitions(Provider::Anthropic, true, true).unwrap();
        assert_eq!(a[0]["input_schema"]["required"][0], "query");
        assert_eq!(a[1], json!({"type": MEMORY_TYPE, "name": MEMORY}));
        let o = definitions(Provider::OpenAi, true, true).unwrap();
        assert_eq!(o[1]["function"]["name"], MEMORY);
        assert!(definitions(Provider::OpenAi, false, false).is_none());
    }

    #[test]
    fn the_memory_beta_joins_the_operators_betas() {
        let mut h = reqwest::header::HeaderMap::new();
        add_beta(&mut h, MEMORY_BETA);
        assert_eq!(h["anthropic-beta"], MEMORY_BETA);
        h.insert("anthropic-beta", "a-1, b-2".parse().unwrap());
        add_beta(&mut h, MEMORY_BETA);
        add_beta(&mut h, MEMORY_BETA);
        assert_eq!(
            h["anthropic-beta"],
            format!("a-1,b-2,{MEMORY_BETA}").as_str()
        );
    }

    #[test]
    fn arguments_must_be_an_object() {
        let mut c = ToolCall::default();
        assert!(c.arguments().unwrap().is_empty());
        c.input = "[1]".into();
        assert!(c.arguments().is_err());
        c.input = "{".into();
        assert!(c.arguments().unwrap_err().contains("not valid JSON"));
    }
}
