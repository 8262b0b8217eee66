//! What each provider's API answers 400 to, written from its documentation
//! (not from the server's own table in `src/render/fields.rs`, so the two
//! check each other): the fields a request may carry, their types, the
//! pairs it refuses, the cache breakpoints it allows, the headers it needs.
//! The mock upstream runs every request through [`check`] first.

use axum::http::HeaderMap;
use serde_json::Value;
use wmreplay::server::Provider;

/// Anthropic Messages' request fields (`POST /v1/messages`).
const ANTHROPIC_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "stream",
    "metadata",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
    "output_config",
    "output_format",
    "inference_geo",
];

/// OpenAI Chat Completions' request fields (`POST /v1/chat/completions`),
/// without the deprecated `max_tokens` (refused with
/// `max_completion_tokens`, and by the reasoning models).
const OPENAI_FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "max_completion_tokens",
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "metadata",
    "modalities",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// Claude models that take only one of `temperature` and `top_p` (Opus
/// 4.1, and the 4.5 generation on), by their ids' prefixes.
fn one_sampler(model: &str) -> bool {
    const NEWER: &[&str] = &[
        "claude-opus-4-1",
        "claude-opus-4-5",
        "claude-opus-4-6",
        "claude-opus-4-7",
        "claude-sonnet-4-5",
        "claude-sonnet-4-6",
        "claude-haiku-4-5",
        "claude-sonnet-5",
        "claude-opus-5",
        "claude-haiku-5",
    ];
    NEWER.iter().any(|p| model.starts_with(p))
}

fn strings(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
}

fn number_in(v: &Value, lo: f64, hi: f64) -> bool {
    v.as_f64().is_some_and(|f| (lo..=hi).contains(&f))
}

/// `Err(message)` when the provider would answer this request 400.
pub fn check(provider: Provider, v: &Value, headers: &HeaderMap) -> Result<(), String> {
    let Some(obj) = v.as_object() else {
        return Err("the body is not a JSON object".into());
    };
    if !obj.get("model").is_some_and(Value::is_string) {
        return Err("model: Field required".into());
    }
    if obj
        .get("messages")
        .and_then(Value::as_array)
        .is_none_or(|m| m.is_empty())
    {
        return Err("messages: Field required".into());
    }
    if let Some(s) = obj.get("stream")
        && !s.is_boolean()
    {
        return Err("stream: Input should be a valid boolean".into());
    }
    match provider {
        Provider::Anthropic => anthropic(obj, headers),
        Provider::OpenAi => openai(obj, headers),
    }
}

fn anthropic(obj: &serde_json::Map<String, Value>, headers: &HeaderMap) -> Result<(), String> {
    if !headers.contains_key("anthropic-version") {
        return Err("anthropic-version: header is required".into());
    }
    for k in obj.keys() {
        if !ANTHROPIC_FIELDS.contains(&k.as_str()) {
            return Err(format!("{k}: Extra inputs are not permitted"));
        }
    }
    if obj
        .get("max_tokens")
        .and_then(Value::as_u64)
        .is_none_or(|n| n == 0)
    {
        return Err("max_tokens: Field required (an integer of at least 1)".into());
    }
    if let Some(s) = obj.get("stop_sequences")
        && !strings(s)
    {
        return Err("stop_sequences: Input should be a valid list of strings".into());
    }
    for k in ["temperature", "top_p"] {
        if let Some(t) = obj.get(k)
            && !number_in(t, 0.0, 1.0)
        {
            return Err(format!("{k}: Input should be a number between 0 and 1"));
        }
    }
    let model = obj["model"].as_str().unwrap_or("");
    if obj.contains_key("temperature") && obj.contains_key("top_p") && one_sampler(model) {
        return Err(
            "temperature and top_p cannot both be specified for this model. Please use only one."
                .into(),
        );
    }
    // Breakpoints: system blocks, message content blocks, tools.
    let mut marks = 0;
    let mut count = |blocks: Option<&Value>| {
        for b in blocks.and_then(Value::as_array).into_iter().flatten() {
            if b.get("cache_control").is_some() {
                marks += 1;
            }
        }
    };
    count(obj.get("system"));
    count(obj.get("tools"));
    for (i, m) in obj["messages"].as_array().into_iter().flatten().enumerate() {
        match m["role"].as_str() {
            Some("user" | "assistant") => {}
            // Instructions inside the conversation (Claude Code sends its
            // environment so), after its first message.
            Some("system") if i > 0 => {}
            Some("system") => return Err("messages.0: the first message must be the user's".into()),
            _ => return Err("messages: role must be user, assistant or system".into()),
        }
        count(m.get("content"));
    }
    if marks > 4 {
        return Err(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {marks}."
        ));
    }
    anthropic_tools(obj, headers)
}

fn tool_name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Anthropic's tool rules: tool definitions (a custom tool's name and
/// `input_schema`; the memory tool's type, which needs its beta), the
/// `tool_choice` types, and each `tool_use` answered by a `tool_result`
/// of the same id, first in the next user message; text blocks not empty.
fn anthropic_tools(
    obj: &serde_json::Map<String, Value>,
    headers: &HeaderMap,
) -> Result<(), String> {
    let mut names = Vec::new();
    for t in obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = t["name"].as_str().unwrap_or("");
        match t.get("type").and_then(Value::as_str) {
            None | Some("custom") => {
                if !tool_name_ok(name) {
                    return Err(format!("tools: invalid tool name {name:?}"));
                }
                if t["input_schema"]["type"] != "object" {
                    return Err(format!(
                        "tools.{name}.input_schema: Field required (a JSON Schema object)"
                    ));
                }
            }
            Some("memory_20250818") => {
                if name != "memory" {
                    return Err("tools: the memory tool's name must be \"memory\"".into());
                }
                let betas = headers
                    .get("anthropic-beta")
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("");
                if !betas
                    .split(',')
                    .any(|b| b.trim() == "context-management-2025-06-27")
                {
                    return Err("tools: memory_20250818 requires the beta header context-management-2025-06-27".into());
                }
            }
            // Server and built-in tools (web search, code execution, …).
            Some(_) => {
                if name.is_empty() {
                    return Err("tools: name: Field required".into());
                }
            }
        }
        if names.contains(&name) {
            return Err(format!("tools: tool names must be unique ({name})"));
        }
        names.push(name);
    }
    if let Some(c) = obj.get("tool_choice") {
        match c["type"].as_str() {
            Some("auto" | "any" | "none") => {}
            Some("tool") if c["name"].is_string() => {}
            Some("tool") => return Err("tool_choice.tool.name: Field required".into()),
            _ => {
                return Err(
                    "tool_choice: Input tag does not match any of auto, any, tool, none".into(),
                );
            }
        }
    }
    let messages = obj["messages"].as_array().unwrap();
    let mut uses_tools = false;
    for (i, m) in messages.iter().enumerate() {
        let blocks = m["content"].as_array();
        for b in blocks.into_iter().flatten() {
            if b["type"] == "text" && b["text"].as_str().is_none_or(str::is_empty) {
                return Err(format!(
                    "messages.{i}: text content blocks must be non-empty"
                ));
            }
            if b["type"] == "tool_use" && m["role"] != "assistant" {
                return Err(format!(
                    "messages.{i}: tool_use blocks are for assistant messages"
                ));
            }
            if b["type"] == "tool_result" && m["role"] != "user" {
                return Err(format!(
                    "messages.{i}: tool_result blocks are for user messages"
                ));
            }
            uses_tools |= b["type"] == "tool_use" || b["type"] == "tool_result";
        }
        if m["role"] == "assistant" && blocks.is_some_and(Vec::is_empty) {
            return Err(format!(
                "messages.{i}: all messages must have non-empty content"
            ));
        }
        let ids = |m: &Value, kind: &str, key: &str| -> Vec<String> {
            m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == kind)
                .map(|b| b[key].as_str().unwrap_or("").to_string())
                .collect()
        };
        let used = ids(m, "tool_use", "id");
        let answered = ids(m, "tool_result", "tool_use_id");
        let before = if i > 0 {
            ids(&messages[i - 1], "tool_use", "id")
        } else {
            Vec::new()
        };
        if let Some(a) = answered.iter().find(|a| !before.contains(a)) {
            return Err(format!(
                "messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {a}. Each \
                 `tool_result` block must have a corresponding `tool_use` block in the previous message."
            ));
        }
        if !answered.is_empty() {
            let first_others = m["content"]
                .as_array()
                .unwrap()
                .iter()
                .take(answered.len())
                .any(|b| b["type"] != "tool_result");
            if first_others {
                return Err(format!(
                    "messages.{i}: tool_result blocks must come first in the content"
                ));
            }
        }
        if !used.is_empty() {
            let next = messages
                .get(i + 1)
                .map(|n| ids(n, "tool_result", "tool_use_id"));
            if let Some(missing) = used
                .iter()
                .find(|u| next.as_ref().is_some_and(|n| !n.contains(u)))
            {
                return Err(format!(
                    "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately \
                     after: {missing}",
                    i + 1
                ));
            }
        }
    }
    if uses_tools && names.is_empty() {
        return Err(
            "Requests which include `tool_use` or `tool_result` blocks must define tools.".into(),
        );
    }
    Ok(())
}

/// OpenAI's tool rules: function definitions, `tool_choice`, and each
/// `tool_calls` message followed by one `tool` message per call id.
fn openai_tools(obj: &serde_json::Map<String, Value>) -> Result<(), String> {
    for t in obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = match t["type"].as_str() {
            Some("function") => t["function"]["name"].as_str(),
            Some("custom") => t["custom"]["name"].as_str(),
            _ => None,
        };
        if !name.is_some_and(tool_name_ok) {
            return Err(
                "tools: each tool is {\"type\":\"function\",\"function\":{\"name\":…}} or a custom tool"
                    .into(),
            );
        }
    }
    if let Some(c) = obj.get("tool_choice")
        && !(matches!(c.as_str(), Some("none" | "auto" | "required"))
            || matches!(
                c["type"].as_str(),
                Some("function" | "custom" | "allowed_tools")
            ))
    {
        return Err("tool_choice: expected none, auto, required or a tool".into());
    }
    let messages = obj["messages"].as_array().unwrap();
    let mut pending: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or("");
            let Some(at) = pending.iter().position(|p| p == id) else {
                return Err(format!(
                    "messages.[{i}].role: messages with role 'tool' must be a response to a \
                     preceeding message with 'tool_calls'."
                ));
            };
            pending.remove(at);
            continue;
        }
        if !pending.is_empty() {
            return Err(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {}",
                pending.join(", ")
            ));
        }
        if m["role"] == "assistant" {
            let calls = m["tool_calls"].as_array();
            if m["content"].is_null() && calls.is_none_or(Vec::is_empty) {
                return Err(format!(
                    "messages.[{i}].content: an assistant message needs content or tool_calls"
                ));
            }
            pending = calls
                .into_iter()
                .flatten()
                .map(|c| c["id"].as_str().unwrap_or("").to_string())
                .collect();
        }
    }
    if !pending.is_empty() {
        return Err(format!(
            "tool_call_ids without response messages: {}",
            pending.join(", ")
        ));
    }
    Ok(())
}

fn openai(obj: &serde_json::Map<String, Value>, headers: &HeaderMap) -> Result<(), String> {
    if !headers
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h.starts_with("Bearer "))
    {
        return Err("You didn't provide an API key (Authorization: Bearer).".into());
    }
    if obj.contains_key("max_tokens") {
        return Err(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use \
             'max_completion_tokens' instead."
                .into(),
        );
    }
    for k in obj.keys() {
        if !OPENAI_FIELDS.contains(&k.as_str()) {
            return Err(format!("Unrecognized request argument supplied: {k}"));
        }
    }
    let streaming = obj.get("stream") == Some(&Value::Bool(true));
    if obj.contains_key("stream_options") && !streaming {
        return Err(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
        );
    }
    if let Some(stop) = obj.get("stop")
        && !(stop.is_string() || strings(stop) && stop.as_array().unwrap().len() <= 4)
    {
        return Err("stop: expected a string or an array of up to 4 strings".into());
    }
    if let Some(t) = obj.get("temperature")
        && !number_in(t, 0.0, 2.0)
    {
        return Err("temperature: expected a number between 0 and 2".into());
    }
    if let Some(t) = obj.get("top_p")
        && !number_in(t, 0.0, 1.0)
    {
        return Err("top_p: expected a number between 0 and 1".into());
    }
    for m in obj["messages"].as_array().into_iter().flatten() {
        if !matches!(
            m["role"].as_str(),
            Some("system" | "developer" | "user" | "assistant" | "tool")
        ) {
            return Err("messages: unknown role".into());
        }
    }
    openai_tools(obj)
}
