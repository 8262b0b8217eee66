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
    for m in obj["messages"].as_array().into_iter().flatten() {
        if !matches!(m["role"].as_str(), Some("user" | "assistant")) {
            return Err("messages: role must be user or assistant".into());
        }
        count(m.get("content"));
    }
    if marks > 4 {
        return Err(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {marks}."
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
    Ok(())
}
