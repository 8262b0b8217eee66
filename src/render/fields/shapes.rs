//! The shapes of tools and tool choices each provider's API takes, as the
//! parameter tables check them (`Kind::Shaped`).

use serde_json::Value;

/// A tool's name as both APIs take it: 1 to 64 letters, digits, `_`, `-`.
fn tool_name(v: &Value) -> bool {
    v.as_str().is_some_and(|n| {
        (1..=64).contains(&n.len())
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// Anthropic's `tools`: objects; a custom tool (no `type`, or `custom`)
/// has a valid `name` and an `input_schema` of type `object`; a typed
/// (server or built-in) tool has a `name`.
pub(super) fn anthropic_tools(v: &Value) -> bool {
    v.as_array().is_some_and(|a| {
        a.iter()
            .all(|t| match t.get("type").and_then(Value::as_str) {
                None | Some("custom") => {
                    tool_name(&t["name"]) && t["input_schema"]["type"] == "object"
                }
                Some(_) => t["name"].is_string(),
            })
    })
}

/// Anthropic's `tool_choice`: `auto`, `any`, `none`, or `tool` with a name.
pub(super) fn anthropic_tool_choice(v: &Value) -> bool {
    match v["type"].as_str() {
        Some("auto" | "any" | "none") => true,
        Some("tool") => v["name"].is_string(),
        _ => false,
    }
}

/// OpenAI's `tools`: `function` tools with a valid `function.name`, or
/// `custom` tools with a valid `custom.name`.
pub(super) fn openai_tools(v: &Value) -> bool {
    v.as_array().is_some_and(|a| {
        a.iter().all(|t| match t["type"].as_str() {
            Some("function") => tool_name(&t["function"]["name"]),
            Some("custom") => tool_name(&t["custom"]["name"]),
            _ => false,
        })
    })
}

/// OpenAI's `tool_choice`: `none`, `auto`, `required`, or an object naming
/// a function, a custom tool, or the allowed tools.
pub(super) fn openai_tool_choice(v: &Value) -> bool {
    matches!(v.as_str(), Some("none" | "auto" | "required"))
        || matches!(
            v["type"].as_str(),
            Some("function" | "custom" | "allowed_tools")
        )
}
