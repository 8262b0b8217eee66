//! The mock model's tool use: it calls tools when the user asks it to, in
//! each provider's own protocol (Anthropic `tool_use` blocks, streamed as
//! `input_json_delta`s; OpenAI `tool_calls`, streamed in pieces by index),
//! and answers once the rounds asked for are done, quoting every tool
//! result it was given.
//!
//! The user asks with a line of its text:
//! - `search_memory: QUERY` — one round, one `search_memory` call;
//! - `TOOLS: [[{"name":N,"input":{…}},…],…]` — one inner list per round.
//!
//! It calls nothing when the request offers no tools or says
//! `tool_choice` none.

use serde_json::{Value, json};
use wmreplay::server::Provider;

/// The rounds of calls the user's text asks for.
pub fn script(text: &str) -> Vec<Vec<(String, Value)>> {
    for line in text.lines() {
        if let Some(q) = line.strip_prefix("search_memory: ") {
            return vec![vec![("search_memory".into(), json!({"query": q}))]];
        }
        if let Some(j) = line.strip_prefix("TOOLS: ") {
            let rounds: Vec<Vec<Value>> = serde_json::from_str(j).expect("TOOLS: is JSON");
            return rounds
                .into_iter()
                .map(|r| {
                    r.into_iter()
                        .map(|c| (c["name"].as_str().unwrap().to_string(), c["input"].clone()))
                        .collect()
                })
                .collect();
        }
    }
    Vec::new()
}

/// The tool results the request carries, in order (Anthropic `tool_result`
/// blocks, OpenAI `tool` messages).
pub fn results(provider: Provider, v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in v["messages"].as_array().into_iter().flatten() {
        match provider {
            Provider::Anthropic => {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] == "tool_result" {
                        let mark = if b["is_error"] == true { "ERROR " } else { "" };
                        out.push(format!("{mark}{}", b["content"].as_str().unwrap_or("")));
                    }
                }
            }
            Provider::OpenAi => {
                if m["role"] == "tool" {
                    out.push(m["content"].as_str().unwrap_or("").to_string());
                }
            }
        }
    }
    out
}

/// Rounds of tool calls the request already holds (the model's messages
/// that called tools).
fn rounds_done(provider: Provider, v: &Value) -> usize {
    v["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .filter(|m| match provider {
            Provider::Anthropic => m["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use")),
            Provider::OpenAi => m.get("tool_calls").is_some(),
        })
        .count()
}

/// The calls to make now, with the round's number: `None` when the model
/// answers instead.
pub fn next_calls(
    provider: Provider,
    v: &Value,
    text: &str,
) -> Option<(usize, Vec<(String, Value)>)> {
    let offered = v["tools"].as_array().is_some_and(|t| !t.is_empty());
    let none = v["tool_choice"] == "none" || v["tool_choice"]["type"] == "none";
    if !offered || none {
        return None;
    }
    let round = rounds_done(provider, v);
    script(text)
        .into_iter()
        .nth(round)
        .map(|calls| (round, calls))
}

/// The answer that makes `calls`: the body (not streamed) or the events.
pub fn calling(
    provider: Provider,
    round: usize,
    calls: &[(String, Value)],
    stream: bool,
    usage: (u64, u64, u64),
) -> (Option<Value>, Vec<String>) {
    let (input, read, written) = usage;
    let id = |i: usize| match provider {
        Provider::Anthropic => format!("toolu_{round}_{i}"),
        Provider::OpenAi => format!("call_{round}_{i}"),
    };
    let preface = "Let me look.";
    if !stream {
        let body = match provider {
            Provider::Anthropic => {
                let mut content = vec![json!({"type": "text", "text": preface})];
                for (i, (name, args)) in calls.iter().enumerate() {
                    content.push(
                        json!({"type": "tool_use", "id": id(i), "name": name, "input": args}),
                    );
                }
                json!({
                    "id": "msg_t", "type": "message", "role": "assistant", "content": content,
                    "stop_reason": "tool_use",
                    "usage": {"input_tokens": input, "output_tokens": 5,
                              "cache_read_input_tokens": read, "cache_creation_input_tokens": written}
                })
            }
            Provider::OpenAi => {
                let tc: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, args))| {
                        json!({"id": id(i), "type": "function",
                        "function": {"name": name, "arguments": args.to_string()}})
                    })
                    .collect();
                json!({
                    "id": "c_t", "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": preface, "tool_calls": tc},
                                 "finish_reason": "tool_calls"}],
                    "usage": {"prompt_tokens": input + read + written, "completion_tokens": 5,
                              "prompt_tokens_details": {"cached_tokens": read}}
                })
            }
        };
        return (Some(body), Vec::new());
    }
    let mut events = Vec::new();
    // Each input JSON in pieces of 5 bytes (on char boundaries).
    let pieces = |s: &str| -> Vec<String> {
        let chars: Vec<char> = s.chars().collect();
        chars.chunks(5).map(|c| c.iter().collect()).collect()
    };
    match provider {
        Provider::Anthropic => {
            let d = json!({"type": "message_start", "message": {"id": "m", "usage": {
                "input_tokens": input, "output_tokens": 1,
                "cache_read_input_tokens": read, "cache_creation_input_tokens": written}}});
            events.push(format!("event: message_start\ndata: {d}\n\n"));
            events.push(format!(
                "event: content_block_start\ndata: {}\n\n",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            ));
            events.push(format!(
                "event: content_block_delta\ndata: {}\n\n",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": preface}})
            ));
            events.push("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n".into());
            for (i, (name, args)) in calls.iter().enumerate() {
                let index = i + 1;
                events.push(format!(
                    "event: content_block_start\ndata: {}\n\n",
                    json!({"type": "content_block_start", "index": index,
                           "content_block": {"type": "tool_use", "id": id(i), "name": name, "input": {}}})
                ));
                for p in pieces(&args.to_string()) {
                    events.push(format!(
                        "event: content_block_delta\ndata: {}\n\n",
                        json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": p}})
                    ));
                }
                events.push(format!(
                    "event: content_block_stop\ndata: {}\n\n",
                    json!({"type": "content_block_stop", "index": index})
                ));
            }
            let d = json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                           "usage": {"output_tokens": 5}});
            events.push(format!("event: message_delta\ndata: {d}\n\n"));
            events.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".into());
        }
        Provider::OpenAi => {
            events.push(format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": preface}}]})
            ));
            for (i, (name, args)) in calls.iter().enumerate() {
                events.push(format!(
                    "data: {}\n\n",
                    json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "id": id(i),
                        "type": "function", "function": {"name": name, "arguments": ""}}]}}]})
                ));
                for p in pieces(&args.to_string()) {
                    events.push(format!(
                        "data: {}\n\n",
                        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i,
                            "function": {"arguments": p}}]}}]})
                    ));
                }
            }
            events.push(format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            ));
            events.push(format!(
                "data: {}\n\n",
                json!({"choices": [], "usage": {"prompt_tokens": input + read + written, "completion_tokens": 5,
                       "prompt_tokens_details": {"cached_tokens": read}}})
            ));
            events.push("data: [DONE]\n\n".into());
        }
    }
    (None, events)
}
