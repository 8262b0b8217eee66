//! The mock model's tool use: it calls tools when the user asks it to, in
//! each provider's own protocol (Anthropic `tool_use` blocks, streamed as
//! `input_json_delta`s; OpenAI `tool_calls`, streamed in pieces by index),
//! and answers once the rounds asked for are done, quoting every tool
//! result it was given.
//!
//! The user asks with a line of its text:
//! - `search_memory: QUERY` — one round, one `search_memory` call;
//! - `TOOLS: [ROUND,…]` — each ROUND a list of calls `[{"name":N,"input":{…}},…]`,
//!   or an object `{"calls":[…],"stop":S,"text":T,"refusal":R}`: the round
//!   stops with `S` (default: the provider's tool stop), says `T` (default
//!   "Let me look.") and, with OpenAI, refuses with `R`.
//!
//! In a call's input, a string `REPEAT:<c>:<n>` stands for the character
//! `c` written `n` times: a test asks for a call larger than the user's
//! text may be.
//!
//! It calls nothing when the request offers no tools or says
//! `tool_choice` none; a round with no calls is answered all the same (a
//! `pause_turn`, a refusal).

use serde_json::{Value, json};
use wmreplay::server::Provider;

/// One round the user's text asks for.
#[derive(Debug, Clone, Default)]
pub struct Round {
    pub calls: Vec<(String, Value)>,
    pub stop: Option<String>,
    pub text: Option<String>,
    pub refusal: Option<String>,
}

/// `v` with every `REPEAT:<c>:<n>` string written out.
fn expand(v: Value) -> Value {
    match v {
        Value::String(s) => match s.strip_prefix("REPEAT:").and_then(|r| r.split_once(':')) {
            Some((c, n)) => Value::String(c.repeat(n.parse().expect("REPEAT:<c>:<n>"))),
            None => Value::String(s),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(expand).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, expand(v))).collect()),
        v => v,
    }
}

/// The rounds the user's text asks for.
pub fn script(text: &str) -> Vec<Round> {
    for line in text.lines() {
        if let Some(q) = line.strip_prefix("search_memory: ") {
            return vec![Round {
                calls: vec![("search_memory".into(), json!({"query": q}))],
                ..Round::default()
            }];
        }
        if let Some(j) = line.strip_prefix("TOOLS: ") {
            let rounds: Vec<Value> = serde_json::from_str(j).expect("TOOLS: is JSON");
            let calls = |v: &Value| -> Vec<(String, Value)> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        (
                            c["name"].as_str().unwrap().to_string(),
                            expand(c["input"].clone()),
                        )
                    })
                    .collect()
            };
            let s = |v: &Value| v.as_str().map(str::to_string);
            return rounds
                .iter()
                .map(|r| match r {
                    Value::Array(_) => Round {
                        calls: calls(r),
                        ..Round::default()
                    },
                    o => Round {
                        calls: calls(&o["calls"]),
                        stop: s(&o["stop"]),
                        text: s(&o["text"]),
                        refusal: s(&o["refusal"]),
                    },
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

/// Rounds the request already holds: the model's messages after the
/// current request (each round's answer, sent back to continue it).
fn rounds_done(v: &Value) -> usize {
    let msgs: Vec<&Value> = v["messages"].as_array().into_iter().flatten().collect();
    let current = msgs
        .iter()
        .rposition(|m| m.to_string().contains("CURRENT_USER_REQUEST"))
        .unwrap_or(0);
    msgs[current..]
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count()
}

/// The calls to make now, with the round's number: `None` when the model
/// answers instead.
pub fn next_calls(provider: Provider, v: &Value, text: &str) -> Option<(usize, Round)> {
    let offered = v["tools"].as_array().is_some_and(|t| !t.is_empty());
    let none = v["tool_choice"] == "none" || v["tool_choice"]["type"] == "none";
    if !offered || none {
        return None;
    }
    let _ = provider;
    let round = rounds_done(v);
    script(text).into_iter().nth(round).map(|r| (round, r))
}

/// The answer of round `round`: the body (not streamed) or the events.
pub fn calling(
    provider: Provider,
    round: usize,
    r: &Round,
    stream: bool,
    usage: (u64, u64, u64),
) -> (Option<Value>, Vec<String>) {
    let calls = &r.calls;
    let (input, read, written) = usage;
    // Unique, as the providers' ids are: a process-wide count.
    static ANSWERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = ANSWERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let id = |i: usize| match provider {
        Provider::Anthropic => format!("toolu_{n}_{round}_{i}"),
        Provider::OpenAi => format!("call_{n}_{round}_{i}"),
    };
    let preface = r.text.as_deref().unwrap_or("Let me look.");
    let stop = r.stop.clone().unwrap_or_else(|| {
        match provider {
            Provider::Anthropic => "tool_use",
            Provider::OpenAi => "tool_calls",
        }
        .to_string()
    });
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
                    "stop_reason": stop,
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
                let mut message = json!({"role": "assistant", "content": preface});
                if !tc.is_empty() {
                    message["tool_calls"] = Value::Array(tc);
                }
                if let Some(refusal) = &r.refusal {
                    message["refusal"] = json!(refusal);
                }
                json!({
                    "id": "c_t", "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": stop}],
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
            let d = json!({"type": "message_start", "message": {"id": format!("msg_mock_t{n}"), "usage": {
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
            let d = json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
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
            if let Some(refusal) = &r.refusal {
                for p in pieces(refusal) {
                    events.push(format!(
                        "data: {}\n\n",
                        json!({"choices": [{"index": 0, "delta": {"refusal": p}}]})
                    ));
                }
            }
            events.push(format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": stop}]})
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
