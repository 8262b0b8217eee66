//! The bodies a turn sends by each `--via` of the turns bench, the direct
//! call each is compared with, and the mock's streamed answer.

// Each bench that includes this module uses a part of it.
#![allow(dead_code)]

use bytes::Bytes;
use serde_json::{Value, json};

/// Every `--via` the bench knows, with the route it posts to.
pub fn route(via: &str) -> &'static str {
    match via {
        "respond" | "respond-stream" => "respond",
        "anthropic" | "anthropic-stream" | "anthropic-sdk" | "anthropic-history"
        | "claude-code" => "anthropic/v1/messages",
        other => panic!(
            "--via {other}: respond, respond-stream, anthropic, anthropic-stream, \
             anthropic-sdk, anthropic-history or claude-code"
        ),
    }
}

/// Whether the via's client sends an official SDK's retry header (which
/// keys the turn).
pub fn sdk(via: &str) -> bool {
    matches!(via, "anthropic-sdk" | "claude-code")
}

fn streamed(via: &str) -> bool {
    via.ends_with("-stream") || via == "claude-code"
}

/// The request of turn `i`: each a new conversation.
pub fn turn(via: &str, i: usize) -> Bytes {
    let ask = format!("turn {i}: what next?");
    let body = match via {
        "respond" | "respond-stream" => json!({"text": ask, "stream": streamed(via)}),
        "anthropic-history" => {
            let mut m: Vec<Value> = (0..20)
                .map(|k| {
                    let role = if k % 2 == 0 { "user" } else { "assistant" };
                    json!({"role": role, "content": format!(
                        "earlier message {k} of conversation {i}: {}",
                        "some words of it ".repeat(20))})
                })
                .collect();
            m.push(json!({"role": "user", "content": ask}));
            json!({"model": "m", "max_tokens": 16, "messages": m})
        }
        "claude-code" => claude_code(&ask),
        _ => json!({"model": "m", "max_tokens": 16, "stream": streamed(via),
                    "messages": [{"role": "user", "content": ask}]}),
    };
    Bytes::from(body.to_string())
}

/// The direct call a turn by `via` is compared with: the request the log's
/// replay makes (`context`, from `POST /v1/context`), streamed when the
/// turn is, with the client's system and tools when it sends them.
pub fn direct(via: &str, context: &[u8]) -> Bytes {
    if !streamed(via) {
        return Bytes::copy_from_slice(context);
    }
    let mut v: Value = serde_json::from_slice(context).expect("a JSON request");
    v["stream"] = json!(true);
    if via == "claude-code" {
        let cc = claude_code("");
        let mut system = cc["system"].as_array().unwrap().clone();
        match v.get("system") {
            Some(Value::String(s)) => system.push(json!({"type": "text", "text": s})),
            Some(Value::Array(a)) => system.extend(a.iter().cloned()),
            _ => {}
        }
        v["system"] = json!(system);
        v["tools"] = cc["tools"].clone();
    }
    Bytes::from(v.to_string())
}

/// A request shaped as Claude Code sends one (about 69 KB): three system
/// blocks (the last two cached), 24 tools with long descriptions and
/// schemas, a user message opening with a reminder block, streamed.
pub fn claude_code(ask: &str) -> Value {
    let prose = |n: usize, topic: &str| {
        let sentence = format!(
            "When working on {topic}, read the relevant files first, prefer the \
             project's own conventions, and say what you changed and why. "
        );
        sentence.repeat(n.div_ceil(sentence.len()))[..n].to_string()
    };
    let tools: Vec<Value> = (0..24)
        .map(|t| {
            let props: serde_json::Map<String, Value> = (0..6)
                .map(|p| {
                    (
                        format!("param_{p}"),
                        json!({"type": if p % 2 == 0 { "string" } else { "integer" },
                               "description": prose(140, &format!("parameter {p} of tool {t}"))}),
                    )
                })
                .collect();
            json!({"name": format!("Tool{t}"),
                   "description": prose(1_300, &format!("tool {t}")),
                   "input_schema": {"type": "object", "properties": props,
                                    "required": ["param_0"], "additionalProperties": false,
                                    "$schema": "http://json-schema.org/draft-07/schema#"}})
        })
        .collect();
    json!({
        "model": "m",
        "max_tokens": 32000,
        "stream": true,
        "metadata": {"user_id": "user_bench_account__session_bench"},
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0; cc_entrypoint=sdk-cli"},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": prose(12_000, "a software task"),
             "cache_control": {"type": "ephemeral"}}
        ],
        "tools": tools,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": format!("<system-reminder>\n{}\n</system-reminder>", prose(1_500, "the context"))},
            {"type": "text", "text": ask, "cache_control": {"type": "ephemeral"}}
        ]}]
    })
}

/// The mock's answer to a streamed request: Anthropic's events, each in
/// its own chunk, as a model's arrive.
pub fn stream_events() -> Vec<&'static str> {
    vec![
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_bench\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"o\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"k\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":1}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ]
}
