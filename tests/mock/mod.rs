//! A recording mock of the model APIs (Anthropic Messages and OpenAI Chat
//! Completions), a real local HTTP server started by each test: it keeps
//! every request's raw body and key, and answers as scripted — errors with
//! the provider's error shape and `retry-after`, slow answers, slow
//! streams, `max_tokens` stops, redirects, usage with cache counts. It
//! serves an OpenAI-compatible embeddings API too (`/v1/embeddings`,
//! `embed.rs`: deterministic vectors), for hybrid search.
#![allow(dead_code)]

pub mod embed;
pub mod nats;
pub mod process;
pub mod responses;
pub mod strict;
pub mod tools;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post as post_route};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use wmreplay::server::{self, ApiKey, Config, Provider};

#[path = "../../bench/cache/sim.rs"]
mod sim;

/// How the mock answers one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// The answer, ending normally.
    Ok,
    /// The answer, cut by the token limit (`max_tokens` / `length`).
    Truncated,
    /// An error status with a provider-style error body (`echo`: the
    /// body repeats the request's key, as some APIs do on a 401).
    Fail {
        status: u16,
        retry_after: Option<&'static str>,
        echo_key: bool,
    },
    /// Waits this long before answering.
    Slow(u64),
    /// Streams with this many ms between events (non-streamed: a normal
    /// answer).
    SlowStream(u64),
    /// Answers this redirect status to this URL.
    Redirect(u16, String),
    /// An error status whose message is this many bytes long.
    LongError(u16, usize),
    /// A long answer: the usual one, then this many KiB, streamed in
    /// pieces of 1 KiB.
    Big(usize),
    /// An error status with this body and these headers, as given.
    Error {
        status: u16,
        body: String,
        headers: Vec<(&'static str, &'static str)>,
    },
    /// A 200 stream (a non-streamed request: a 200 body) whose first event
    /// is an error of this type, before any text.
    StreamError(&'static str),
    /// A stream that relays its first two pieces of text, then an error
    /// event of this type.
    StreamErrorAfterText(&'static str),
}

impl Mode {
    pub fn fail(status: u16) -> Mode {
        Mode::Fail {
            status,
            retry_after: None,
            echo_key: false,
        }
    }
}

/// One request as the mock received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub raw: Vec<u8>,
    pub json: Value,
    pub key: String,
    pub headers: HeaderMap,
    /// The input usage the mock answered, from its prompt-cache simulator.
    pub usage: CacheUsage,
}

/// Input tokens of one request as the mock's prompt-cache simulator counts
/// them (tokens: a block's text bytes / 4, rounded up).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CacheUsage {
    /// Read from the cache.
    pub read: u64,
    /// Written to it.
    pub written: u64,
    /// Neither.
    pub input: u64,
}

#[derive(Clone)]
pub struct Mock {
    pub provider: Provider,
    /// Answers for the next requests, in order; then `mode`.
    pub script: Arc<Mutex<VecDeque<Mode>>>,
    pub mode: Mode,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// Requests that reached the redirect target.
    pub redirected: Arc<Mutex<Vec<HeaderMap>>>,
    /// Why each request the provider would refuse was refused (400).
    pub rejected: Arc<Mutex<Vec<String>>>,
    /// The provider's prompt cache, simulated by its documented rules
    /// (bench/cache/sim.rs) with a 1-token minimum so small logs cache.
    pub cache: Arc<Mutex<sim::Cache>>,
    /// The embeddings API at `/v1/embeddings`.
    pub embeddings: embed::Embeddings,
    /// The bodies `POST /v1/messages/count_tokens` was asked to count.
    pub counted: Arc<Mutex<Vec<Value>>>,
    /// When the last event of each stream was handed to the socket (the
    /// mock's sockets have Nagle off: that is when it left).
    pub stream_ends: Arc<Mutex<Vec<std::time::Instant>>>,
    /// The current texts a `MOCK_FAIL_ONCE` directive failed already.
    failed_once: Arc<Mutex<std::collections::HashSet<String>>>,
    started: std::time::Instant,
}

/// The request as the simulator sees it: content blocks (system, then each
/// message's) with their breakpoints. Anthropic breakpoints are the
/// `cache_control` members; OpenAI caches every prefix automatically,
/// modelled as a breakpoint on every message.
fn blocks(provider: Provider, v: &Value) -> Vec<sim::Block> {
    use std::hash::{BuildHasher, Hasher};
    let block = |role: &str, b: &Value, text: &str| {
        let mut h =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .build_hasher();
        h.write(role.as_bytes());
        h.write(&[0]);
        h.write(text.as_bytes());
        let breakpoint = b.get("cache_control").map(|c| {
            if c["ttl"] == "1h" {
                sim::Ttl::OneHour
            } else {
                sim::Ttl::FiveMinutes
            }
        });
        sim::Block {
            hash: h.finish(),
            tokens: text.len().div_ceil(4) as u64,
            breakpoint,
        }
    };
    let mut out = Vec::new();
    match provider {
        Provider::Anthropic => {
            match &v["system"] {
                Value::String(s) => out.push(block("system", &Value::Null, s)),
                Value::Array(a) => {
                    for b in a {
                        out.push(block("system", b, b["text"].as_str().unwrap_or("")));
                    }
                }
                _ => {}
            }
            for m in v["messages"].as_array().into_iter().flatten() {
                let role = m["role"].as_str().unwrap_or("");
                for b in m["content"].as_array().into_iter().flatten() {
                    out.push(block(role, b, b["text"].as_str().unwrap_or("")));
                }
            }
        }
        Provider::OpenAi => {
            for m in v["messages"].as_array().into_iter().flatten() {
                let role = m["role"].as_str().unwrap_or("");
                out.push(block(
                    role,
                    &Value::Null,
                    m["content"].as_str().unwrap_or(""),
                ));
            }
            // Every prefix is cached (OpenAI caches in 128-token steps).
            for b in &mut out {
                b.breakpoint = Some(sim::Ttl::FiveMinutes);
            }
        }
    }
    out
}

impl Mock {
    pub fn bodies(&self) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.json.clone())
            .collect()
    }

    pub fn keys(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.key.clone())
            .collect()
    }

    pub fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Answers the next requests so, before the default mode.
    pub fn then(&self, modes: impl IntoIterator<Item = Mode>) {
        self.script.lock().unwrap().extend(modes);
    }
}

/// The user_text of the request's CURRENT_USER_REQUEST message (the last
/// message, or the last before the turn's tool rounds).
pub fn current_text(body: &Value) -> String {
    let msgs = body["messages"].as_array().unwrap();
    let text = msgs
        .iter()
        .rev()
        .find_map(|m| {
            let t = match &m["content"] {
                Value::String(s) => s.as_str(),
                other => other[0]["text"].as_str()?,
            };
            t.starts_with("CURRENT_USER_REQUEST").then_some(t)
        })
        .or_else(|| {
            // A request relayed as its client sent it (a side request).
            let c = &msgs.last()?["content"];
            c.as_str().or_else(|| c[0]["text"].as_str())
        })
        .unwrap_or("");
    text.split_once("user_text: ")
        .map_or(text, |t| t.1)
        .to_string()
}

/// The model's input when the request asks for a summary (its one user
/// message starts `<previous_summary>`).
pub fn fold_input(body: &Value) -> Option<String> {
    let msgs = body["messages"].as_array()?;
    let last = msgs.last()?;
    let text = last["content"].as_str()?;
    text.starts_with("<previous_summary>")
        .then(|| text.to_string())
}

/// The mock's summary of `input`: every distinct `FACT-<n>` in it, by `n`
/// (so a fold that carries the previous summary keeps every fact).
pub fn summary_of(input: &str) -> String {
    let mut facts: Vec<u64> = Vec::new();
    let mut rest = input;
    while let Some(i) = rest.find("FACT-") {
        rest = &rest[i + 5..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(n) = digits.parse::<u64>() {
            facts.push(n);
        }
    }
    facts.sort_unstable();
    facts.dedup();
    if facts.is_empty() {
        return "No facts yet.".to_string();
    }
    facts
        .iter()
        .map(|n| format!("FACT-{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The request's current text, when it has one (a turn's).
pub fn current_text_of(body: &Value) -> Option<String> {
    body["messages"].as_array()?.iter().rev().find_map(|m| {
        let t = match &m["content"] {
            Value::String(s) => s.as_str(),
            other => other[0]["text"].as_str()?,
        };
        t.strip_prefix("CURRENT_USER_REQUEST")?
            .split_once("user_text: ")
            .map(|(_, t)| t.to_string())
    })
}

/// How a line of the current text tells the mock to answer (for clients
/// the test does not drive request by request, such as an SDK):
/// `MOCK_STATUS: N` fails with status N, `MOCK_FAIL_ONCE: N` fails with N
/// the first time this text comes, `MOCK_SLOW: MS` answers after MS ms.
pub(crate) fn directive(m: &Mock, v: &Value) -> Option<Mode> {
    let text = current_text_of(v)?;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("MOCK_STATUS: ") {
            return Some(Mode::fail(n.trim().parse().ok()?));
        }
        if let Some(n) = line.strip_prefix("MOCK_FAIL_ONCE: ") {
            if m.failed_once.lock().unwrap().insert(text.clone()) {
                return Some(Mode::fail(n.trim().parse().ok()?));
            }
            return None;
        }
        if let Some(ms) = line.strip_prefix("MOCK_SLOW: ") {
            return Some(Mode::Slow(ms.trim().parse().ok()?));
        }
    }
    None
}

/// What the mock answers to a request whose current text is `t`.
pub fn answer_to(t: &str) -> String {
    format!("answer to «{t}» \"quoted\"\nline two")
}

async fn handler(State(m): State<Mock>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).expect("the server sends valid JSON");
    let key = match m.provider {
        Provider::Anthropic => headers
            .get("x-api-key")
            .map(|h| h.to_str().unwrap().to_string()),
        Provider::OpenAi => headers.get("authorization").map(|h| {
            h.to_str()
                .unwrap()
                .trim_start_matches("Bearer ")
                .to_string()
        }),
    }
    .unwrap_or_default();
    // What the provider documents as a 400 is a 400 here too, before
    // anything is recorded.
    if let Err(message) = strict::check(m.provider, &v, &headers) {
        m.rejected.lock().unwrap().push(message.clone());
        let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
        return (StatusCode::BAD_REQUEST, body.to_string()).into_response();
    }
    let rules = sim::Rules {
        min_tokens: 1,
        max_breakpoints: match m.provider {
            Provider::Anthropic => 4,
            Provider::OpenAi => usize::MAX,
        },
        ..sim::Rules::default()
    };
    let now = m.started.elapsed().as_millis() as u64;
    let usage = match m
        .cache
        .lock()
        .unwrap()
        .request(&blocks(m.provider, &v), now, &rules)
    {
        Ok(u) => CacheUsage {
            read: u.cache_read,
            written: u.cache_write_5m + u.cache_write_1h,
            input: u.input,
        },
        Err(e) => {
            let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": format!("{e:?}")}});
            return (StatusCode::BAD_REQUEST, body.to_string()).into_response();
        }
    };
    m.seen.lock().unwrap().push(Seen {
        raw: body.to_vec(),
        json: v.clone(),
        key: key.clone(),
        headers: headers.clone(),
        usage,
    });
    let mode = m
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(m.mode.clone());
    let mode = directive(&m, &v).unwrap_or(mode);
    let mut pause = 0;
    let mut cut: Option<&'static str> = None;
    let mut truncated = false;
    let mut big = 0;
    match mode {
        Mode::Fail {
            status,
            retry_after,
            echo_key,
        } => {
            let message = if echo_key {
                format!("invalid x-api-key: {key}")
            } else {
                "Overloaded, try later".to_string()
            };
            let kind = if status == 429 {
                "rate_limit_error"
            } else {
                "overloaded_error"
            };
            let body = json!({"type": "error", "error": {"type": kind, "message": message}});
            let mut r = (StatusCode::from_u16(status).unwrap(), body.to_string()).into_response();
            if let Some(ra) = retry_after {
                r.headers_mut().insert("retry-after", ra.parse().unwrap());
            }
            return r;
        }
        Mode::Redirect(status, to) => {
            return (
                StatusCode::from_u16(status).unwrap(),
                [("location", to)],
                "moved",
            )
                .into_response();
        }
        Mode::LongError(status, n) => {
            let body =
                json!({"type": "error", "error": {"type": "api_error", "message": "e".repeat(n)}});
            return (StatusCode::from_u16(status).unwrap(), body.to_string()).into_response();
        }
        Mode::Error {
            status,
            body,
            headers,
        } => {
            let mut r = (StatusCode::from_u16(status).unwrap(), body).into_response();
            for (k, v) in headers {
                r.headers_mut().insert(k, v.parse().unwrap());
            }
            return r;
        }
        Mode::StreamError(kind) => {
            let error = json!({"type": "error", "error": {"type": kind, "message": "Overloaded"}});
            let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
            return match (stream, m.provider) {
                (false, _) => {
                    ([("content-type", "application/json")], error.to_string()).into_response()
                }
                (true, Provider::Anthropic) => (
                    [("content-type", "text/event-stream")],
                    format!("event: error\ndata: {error}\n\n"),
                )
                    .into_response(),
                (true, Provider::OpenAi) => (
                    [("content-type", "text/event-stream")],
                    format!("data: {}\n\n", json!({"error": error["error"]})),
                )
                    .into_response(),
            };
        }
        Mode::StreamErrorAfterText(kind) => cut = Some(kind),
        Mode::Slow(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Mode::SlowStream(ms) => pause = ms,
        Mode::Truncated => truncated = true,
        Mode::Big(kib) => big = kib,
        Mode::Ok => {}
    }
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if fold_input(&v).is_none()
        && let Some((round, r)) = tools::next_calls(m.provider, &v, &current_text(&v))
    {
        let usage = (usage.input, usage.read, usage.written);
        return match tools::calling(m.provider, round, &r, stream, usage) {
            (Some(body), _) => (
                [("content-type", "application/json")],
                whole(m.provider, &v, body).to_string(),
            )
                .into_response(),
            (None, events) => (
                [("content-type", "text/event-stream")],
                Body::from_stream(futures_util::stream::iter(
                    events
                        .iter()
                        .map(|e| Ok::<_, std::convert::Infallible>(event(m.provider, &v, e)))
                        .collect::<Vec<_>>(),
                )),
            )
                .into_response(),
        };
    }
    let mut answer = match fold_input(&v) {
        Some(input) => summary_of(&input),
        None => {
            let mut a = answer_to(&current_text(&v));
            let results = tools::results(m.provider, &v);
            if !results.is_empty() {
                a.push_str("\nTOOL RESULTS:\n");
                a.push_str(&results.join("\n---\n"));
            }
            a
        }
    };
    if big > 0 {
        answer.push('\n');
        answer.push_str(&"y".repeat(big << 10));
    }
    let piece = if big > 0 { 1024 } else { 4 };
    let stop = match (m.provider, truncated) {
        (Provider::Anthropic, false) => "end_turn",
        (Provider::Anthropic, true) => "max_tokens",
        (Provider::OpenAi, false) => "stop",
        (Provider::OpenAi, true) => "length",
    };
    if !stream {
        let body = match m.provider {
            Provider::Anthropic => json!({
                "id": format!("msg_mock_{}", m.requests()), "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": answer}],
                "stop_reason": stop,
                "usage": {"input_tokens": usage.input, "output_tokens": 7,
                          "cache_read_input_tokens": usage.read, "cache_creation_input_tokens": usage.written}
            }),
            Provider::OpenAi => json!({
                "id": format!("chatcmpl-mock-{}", m.requests()), "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": stop}],
                "usage": {"prompt_tokens": usage.input + usage.read + usage.written, "completion_tokens": 7,
                          "prompt_tokens_details": {"cached_tokens": usage.read}}
            }),
        };
        let body = whole(m.provider, &v, body);
        return ([("content-type", "application/json")], body.to_string()).into_response();
    }
    // Streamed in pieces of a few characters, each event in its own chunk.
    let pieces: Vec<String> = answer
        .chars()
        .collect::<Vec<_>>()
        .chunks(piece)
        .map(|c| c.iter().collect())
        .collect();
    let mut events: Vec<String> = Vec::new();
    match m.provider {
        Provider::Anthropic => {
            let d = json!({"type": "message_start", "message": {"id": format!("msg_mock_s{}", m.requests()), "usage": {
                "input_tokens": usage.input, "output_tokens": 1,
                "cache_read_input_tokens": usage.read, "cache_creation_input_tokens": usage.written}}});
            events.push(format!("event: message_start\ndata: {d}\n\n"));
            events.push("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".into());
            events.push("event: ping\ndata: {\"type\":\"ping\"}\n\n".into());
            for p in &pieces {
                let d = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}});
                events.push(format!("event: content_block_delta\ndata: {d}\n\n"));
            }
            events.push("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n".into());
            let d = json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 7}});
            events.push(format!("event: message_delta\ndata: {d}\n\n"));
            events.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".into());
        }
        Provider::OpenAi => {
            events.push(format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            ));
            for p in &pieces {
                let d = json!({"choices": [{"index": 0, "delta": {"content": p}}]});
                events.push(format!("data: {d}\n\n"));
            }
            let d = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": stop}]});
            events.push(format!("data: {d}\n\n"));
            if v["stream_options"]["include_usage"] == true {
                let d = json!({"choices": [], "usage": {"prompt_tokens": usage.input + usage.read + usage.written, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": usage.read}}});
                events.push(format!("data: {d}\n\n"));
            }
            events.push("data: [DONE]\n\n".into());
        }
    }
    if let Some(kind) = cut {
        // The first two text pieces, then the error.
        let texts = events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.contains("text_delta") || e.contains("\"content\""))
            .map(|(i, _)| i)
            .nth(1)
            .expect("an answer of two pieces at least");
        events.truncate(texts + 1);
        let error = json!({"type": "error", "error": {"type": kind, "message": "Overloaded"}});
        events.push(match m.provider {
            Provider::Anthropic => format!("event: error\ndata: {error}\n\n"),
            Provider::OpenAi => format!("data: {}\n\n", json!({"error": error["error"]})),
        });
    }
    let provider = m.provider;
    let events: Vec<String> = events.iter().map(|e| event(provider, &v, e)).collect();
    paced(events, pause, &m.stream_ends)
}

/// A stream of `events`, one chunk each, `pause` ms before each; the time
/// the last was handed to the socket is pushed to `ends`.
pub fn paced(
    events: Vec<String>,
    pause: u64,
    ends: &Arc<Mutex<Vec<std::time::Instant>>>,
) -> Response {
    let last = events.len() - 1;
    let ends = ends.clone();
    let stream = futures_util::stream::iter(events.into_iter().enumerate()).then(move |(i, e)| {
        let ends = ends.clone();
        async move {
            if pause > 0 {
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            if i == last {
                ends.lock().unwrap().push(std::time::Instant::now());
            }
            Ok::<_, std::convert::Infallible>(e)
        }
    });
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// A non-streamed answer with every member the provider's own has (its
/// id, model, `stop_sequence`, `created`, …), as the SDKs read them.
fn whole(provider: Provider, request: &Value, mut body: Value) -> Value {
    let model = request["model"].clone();
    let o = body.as_object_mut().expect("an answer is an object");
    match provider {
        Provider::Anthropic => {
            o.entry("model").or_insert(model);
            o.entry("stop_sequence").or_insert(Value::Null);
        }
        Provider::OpenAi => {
            o.entry("model").or_insert(model);
            o.entry("created").or_insert(json!(1_700_000_000));
            if let Some(u) = o.get_mut("usage").and_then(Value::as_object_mut) {
                let total = u["prompt_tokens"].as_u64().unwrap_or(0)
                    + u["completion_tokens"].as_u64().unwrap_or(0);
                u.entry("total_tokens").or_insert(json!(total));
            }
            for c in o
                .get_mut("choices")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                c.as_object_mut()
                    .unwrap()
                    .entry("logprobs")
                    .or_insert(Value::Null);
                let msg = c["message"].as_object_mut().unwrap();
                msg.entry("refusal").or_insert(Value::Null);
            }
        }
    }
    body
}

/// A streamed event with every member the provider's own has: Anthropic's
/// `message_start` a whole message (its id, role, model, empty content);
/// each OpenAI chunk its id, object, `created` and model, and the first
/// its role.
fn event(provider: Provider, request: &Value, e: &str) -> String {
    let Some((head, data)) = e.trim_end().rsplit_once("data: ") else {
        return e.to_string();
    };
    let Ok(mut d) = serde_json::from_str::<Value>(data) else {
        return e.to_string();
    };
    let model = request["model"].clone();
    match provider {
        Provider::Anthropic if d["type"] == "message_start" => {
            let m = d["message"].as_object_mut().unwrap();
            m.entry("type").or_insert(json!("message"));
            m.entry("role").or_insert(json!("assistant"));
            m.entry("model").or_insert(model);
            m.entry("content").or_insert(json!([]));
            m.entry("stop_reason").or_insert(Value::Null);
            m.entry("stop_sequence").or_insert(Value::Null);
        }
        Provider::OpenAi if d.get("choices").is_some() => {
            let o = d.as_object_mut().unwrap();
            o.entry("id").or_insert(json!("chatcmpl-mock"));
            o.entry("object").or_insert(json!("chat.completion.chunk"));
            o.entry("created").or_insert(json!(1_700_000_000));
            o.entry("model").or_insert(model);
            if let Some(u) = o.get_mut("usage").and_then(Value::as_object_mut) {
                let total = u["prompt_tokens"].as_u64().unwrap_or(0)
                    + u["completion_tokens"].as_u64().unwrap_or(0);
                u.entry("total_tokens").or_insert(json!(total));
            }
            for c in o["choices"].as_array_mut().unwrap() {
                let c = c.as_object_mut().unwrap();
                c.entry("finish_reason").or_insert(Value::Null);
                c.entry("logprobs").or_insert(Value::Null);
            }
        }
        _ => return e.to_string(),
    }
    format!("{head}data: {d}\n\n")
}

async fn redirect_target(State(m): State<Mock>, headers: HeaderMap) -> Response {
    m.redirected.lock().unwrap().push(headers);
    let body = json!({
        "content": [{"type": "text", "text": "from the redirect target"}],
        "stop_reason": "end_turn",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "from the redirect target"}, "finish_reason": "stop"}]
    });
    ([("content-type", "application/json")], body.to_string()).into_response()
}

/// `POST /v1/messages/count_tokens` (Anthropic's): a token for every four
/// bytes of the body; a body with a member `count_tokens` does not take
/// (`max_tokens`, `stream`) is a 400, as the API answers it.
async fn count_tokens(State(m): State<Mock>, body: axum::body::Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    m.counted.lock().unwrap().push(v.clone());
    for k in ["max_tokens", "stream", "temperature"] {
        if v.get(k).is_some() {
            let e = json!({"type": "error", "error": {"type": "invalid_request_error",
                           "message": format!("{k}: Extra inputs are not permitted")}});
            return (
                StatusCode::BAD_REQUEST,
                [("content-type", "application/json")],
                e.to_string(),
            )
                .into_response();
        }
    }
    let n = body.len().div_ceil(4);
    (
        [("content-type", "application/json")],
        json!({"input_tokens": n}).to_string(),
    )
        .into_response()
}

/// `GET /v1/models`, in each provider's shape, echoing the key it was
/// called with (as an API that echoes a key would: a relay must cut it
/// out) and saying whether it was the tests' key.
async fn models_list(State(m): State<Mock>, headers: HeaderMap) -> Response {
    let key = headers
        .get("x-api-key")
        .or_else(|| headers.get("authorization"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim_start_matches("Bearer ")
        .to_string();
    let body = match m.provider {
        Provider::Anthropic => json!({"data": [{"type": "model", "id": "test-model",
            "display_name": "Test", "created_at": "2026-01-01T00:00:00Z"}],
            "has_more": false, "first_id": "test-model", "last_id": "test-model",
            "key_seen": key, "the_test_key": key == KEY}),
        Provider::OpenAi => json!({"object": "list", "data": [{"id": "test-model",
            "object": "model", "created": 0, "owned_by": "test"}],
            "key_seen": key, "the_test_key": key == KEY}),
    };
    ([("content-type", "application/json")], body.to_string()).into_response()
}

async fn embeddings(
    State(m): State<Mock>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    embed::handler(State(m.embeddings.clone()), headers, body).await
}

use futures_util::StreamExt;

/// Starts a mock answering in `mode`; returns its base URL.
pub async fn start_mock(provider: Provider, mode: Mode) -> (String, Mock) {
    let m = Mock {
        provider,
        mode,
        script: Arc::default(),
        seen: Arc::default(),
        redirected: Arc::default(),
        rejected: Arc::default(),
        cache: Arc::default(),
        embeddings: embed::Embeddings::default(),
        counted: Arc::default(),
        stream_ends: Arc::default(),
        failed_once: Arc::default(),
        started: std::time::Instant::now(),
    };
    let app = Router::new()
        .route("/v1/messages", post_route(handler))
        .route("/v1/chat/completions", post_route(handler))
        .route("/v1/responses", post_route(responses::handler))
        .route("/elsewhere", get(redirect_target).post(redirect_target))
        .route("/v1/embeddings", post_route(embeddings))
        .route("/v1/models", get(models_list))
        .route("/v1/messages/count_tokens", post_route(count_tokens))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(m.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Nagle off, as the providers' servers have it: each event leaves at
    // once, so that a stall measured through the server is the server's.
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|s| s.set_nodelay(true).unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), m)
}

// The server under test, in process.

pub const KEY: &str = "sk-test-very-secret-key";

pub struct Running {
    pub url: String,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<Result<(), server::ServeError>>,
}

impl Running {
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.done.await.unwrap().unwrap();
    }
}

pub async fn start(cfg: Config) -> Running {
    let listener = server::bind("127.0.0.1:0".parse::<SocketAddr>().unwrap())
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    let done = tokio::spawn(server::serve(cfg, listener, async {
        let _ = rx.await;
    }));
    // Up once it answers (it answers before the first replay ends; a
    // request waits for it).
    for _ in 0..400 {
        if let Ok(r) = client().get(format!("{url}/healthz")).send().await
            && r.status() == 200
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Running {
        url,
        stop: Some(tx),
        done,
    }
}

pub fn config(log: &Path, upstream: Option<&str>, provider: Provider) -> Config {
    let mut c = Config::new(log);
    c.upstream = upstream.map(str::to_string);
    c.provider = provider;
    c.model = Some("test-model".into());
    c.api_key = Some(ApiKey(KEY.into()));
    c.fsync = false;
    c
}

pub fn example_log(dir: &Path) -> PathBuf {
    let path = dir.join("wm.log");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/working_memory.log"),
        &path,
    )
    .unwrap();
    path
}

pub fn client() -> reqwest::Client {
    server::install_crypto_provider();
    reqwest::Client::new()
}

pub async fn post(url: &str, body: impl Into<reqwest::Body>) -> (u16, String) {
    let r = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// `GET url`'s body as text.
pub async fn get_text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// `GET url`'s JSON body.
pub async fn get_json(url: &str) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

pub fn log_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l.trim()).ok())
        .collect()
}

pub fn example_bytes() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/working_memory.log"))
        .unwrap()
}

/// Records of `kind` the server appended (after the example's bytes).
pub fn turns(path: &Path, kind: &str) -> Vec<Value> {
    let all = std::fs::read(path).unwrap();
    let start = example_bytes().len();
    String::from_utf8_lossy(&all[start..])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("appended lines parse"))
        .filter(|v| v["type"] == kind)
        .collect()
}

/// A one-shot body with the provider's fields first in its object.
pub fn with_fields(body: &[u8], fields: &str) -> Vec<u8> {
    assert_eq!(body[0], b'{');
    let mut out = b"{".to_vec();
    out.extend_from_slice(fields.as_bytes());
    out.push(b',');
    out.extend_from_slice(&body[1..]);
    out
}

/// Texts of a request's messages, in order.
pub fn message_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other[0]["text"].as_str().unwrap().to_string(),
        })
        .collect()
}

/// A body with its prompt-cache settings taken out (Anthropic's
/// `cache_control` members, the system prompt's block back to a plain
/// string; OpenAI's `prompt_cache_key`): the contract's body.
pub fn without_cache_markers(raw: &[u8]) -> Vec<u8> {
    let text = String::from_utf8(raw.to_vec()).expect("bodies are UTF-8");
    let text = text
        .replace(r#","cache_control":{"type":"ephemeral","ttl":"1h"}"#, "")
        .replace(r#","cache_control":{"type":"ephemeral"}"#, "");
    // OpenAI's routing key, a leading member.
    let text = match text.find(r#""prompt_cache_key":""#) {
        Some(at) => {
            let end = at + text[at..].find(r#"","#).expect("a string member") + 2;
            format!("{}{}", &text[..at], &text[end..])
        }
        None => text,
    };
    let open = r#""system":[{"type":"text","text":"#;
    let Some(at) = text.find(open) else {
        return text.into_bytes();
    };
    let rest = &text[at + open.len()..];
    let end = rest
        .find(r#"}],"messages":["#)
        .expect("the system block closes");
    format!(
        "{}\"system\":{}{}",
        &text[..at],
        &rest[..end],
        &rest[end + 2..]
    )
    .into_bytes()
}
