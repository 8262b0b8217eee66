//! A request in a provider's own format, read: the client's model, system,
//! parameters and messages, and where in the messages the turn begins (its
//! user message), what continues it (the model's calls of the client's
//! tools and their results) and what came before (the client's copy of the
//! history).

use axum::http::StatusCode;
use serde_json::{Map, Value};

use super::body::Body;
use crate::render::fields::Param;
use crate::server::errors::ApiError;
use crate::server::upstream::Provider;

/// A provider-format request, read and checked.
pub(crate) struct Asked {
    pub(crate) provider: Provider,
    pub(crate) model: String,
    /// The client's system prompt, as text.
    pub(crate) system: Option<String>,
    pub(crate) stream: bool,
    /// Every other member of the body, in order, for the provider's rules
    /// (`tools` as the client's text).
    pub(crate) params: Vec<(String, Param)>,
    pub(crate) messages: Vec<Value>,
    /// Anthropic's `role: "system"` messages that came before the turn's
    /// user message, taken out of `messages`: instructions, not
    /// conversation (never written), sent right after the turn's user
    /// message (the replay stands for the history they sat in).
    pub(crate) instructions: Vec<Value>,
    /// OpenAI's Responses API: `messages` are its input items.
    pub(crate) responses: bool,
    /// Responses: the response the request continues, checked by the
    /// caller.
    pub(crate) previous_response_id: Option<String>,
    /// The index of the turn's user message: the last one that is the
    /// user's own words (not tool results).
    pub(crate) start: usize,
    /// Its text.
    pub(crate) text: String,
}

pub(super) fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
}

impl Asked {
    /// Reads `body`, refusing (400, before anything is written) what the
    /// provider would refuse or what has no place in a log of text: a body
    /// that is not an object, no model or messages, a message without a
    /// role or content, a last message that is not the user's (words or tool
    /// results), a user message with other than text.
    pub(crate) fn parse(provider: Provider, body: &[u8]) -> Result<Asked, ApiError> {
        Asked::parse_as(provider, body, true)
    }

    /// [`parse`](Self::parse) for a count of tokens (Anthropic's
    /// `count_tokens`, whose body is a message's without `max_tokens`).
    pub(crate) fn parse_counted(provider: Provider, body: &[u8]) -> Result<Asked, ApiError> {
        Asked::parse_as(provider, body, false)
    }

    fn parse_as(provider: Provider, body: &[u8], turn: bool) -> Result<Asked, ApiError> {
        let mut body = Body::read(body).map_err(bad)?;
        let obj = &mut body.obj;
        if obj.contains_key("thread") && provider == Provider::Anthropic {
            let mut e = bad(
                "this endpoint keeps the conversation in its log and does not take `thread`: \
                 send the messages (the SDK's tool runner does so after this answer)",
            );
            e.code = "thread_unsupported_request";
            return Err(e);
        }
        let (model, stream) = model_and_stream(obj)?;
        let mut messages = match obj.remove("messages") {
            Some(Value::Array(m)) if !m.is_empty() => m,
            Some(Value::Array(_)) => return Err(bad("`messages` must hold at least one message")),
            Some(_) => return Err(bad("`messages` must be an array")),
            None => return Err(bad("`messages`: field required")),
        };
        for (i, m) in messages.iter().enumerate() {
            check_message(provider, i, m)?;
        }
        let mut system = match obj.remove("system") {
            None | Some(Value::Null) => None,
            Some(s) if provider == Provider::Anthropic => Some(system_text(&s, "system")?),
            Some(_) => {
                return Err(bad(
                    "`system` is not a member of a chat completion: send a system message",
                ));
            }
        };
        if provider == Provider::OpenAi {
            // System and developer messages are the system prompt.
            let mut texts = Vec::new();
            let mut kept = Vec::with_capacity(messages.len());
            for (i, m) in messages.into_iter().enumerate() {
                match role(&m) {
                    "system" | "developer" => texts.push(system_text(
                        &m["content"],
                        &format!("messages[{i}].content"),
                    )?),
                    _ => kept.push(m),
                }
            }
            if kept.is_empty() {
                return Err(bad("`messages` must hold a user message"));
            }
            messages = kept;
            if !texts.is_empty() {
                system = Some(texts.join("\n\n"));
            }
        }
        // Instructions after the last message of the conversation are
        // passed on after it (Claude Code sends its environment so).
        let last = messages
            .iter()
            .rposition(|m| role(m) != "system")
            .ok_or_else(|| bad("`messages` must hold a user message"))?;
        let mut start = if is_words(provider, &messages[last]) {
            last
        } else if is_results(provider, &messages[last]) {
            messages
                .iter()
                .rposition(|m| is_words(provider, m))
                .ok_or_else(|| {
                    bad("tool results need the user message their turn began with, before them")
                })?
        } else {
            return Err(bad(
                "the last message must be the user's (words or tool results): this endpoint \
                 does not continue a prefilled answer",
            ));
        };
        let text = user_text(provider, &messages[start], start)?;
        check_results(provider, &messages)?;
        let mut instructions = Vec::new();
        if messages[..start].iter().any(|m| role(m) == "system") {
            let after = messages.split_off(start);
            for m in std::mem::take(&mut messages) {
                match role(&m) {
                    "system" => instructions.push(m),
                    _ => messages.push(m),
                }
            }
            start = messages.len();
            messages.extend(after);
        }
        if turn && text.trim().is_empty() {
            return Err(bad(format!(
                "messages[{start}]: the user's message is empty: a turn needs words to answer"
            )));
        }
        if turn {
            check_params(provider, &body.obj, body.text("tools").map(|t| &t.skeleton))?;
        }
        Ok(Asked {
            provider,
            model,
            system,
            stream,
            params: body.into_params(),
            messages,
            instructions,
            responses: false,
            previous_response_id: None,
            start,
            text,
        })
    }

    /// The member `k`, when given and not null: a tree, or of a member kept
    /// as text (`tools`) what the tools' checks read (each tool's type and
    /// name; read once: [`Text`](crate::render::fields::Text)).
    pub(crate) fn param(&self, k: &str) -> Option<&Value> {
        let (_, p) = self.params.iter().find(|(n, _)| n == k)?;
        let v = match p {
            Param::Tree(v) => v,
            Param::Raw(t) => &t.skeleton,
        };
        (!v.is_null()).then_some(v)
    }

    /// Whether the request continues a turn after the model's calls of the
    /// client's tools (instructions alone after it continue nothing).
    pub(crate) fn continues(&self) -> bool {
        self.messages[self.start + 1..]
            .iter()
            .any(|m| role(m) != "system")
    }

    /// What follows the turn's user message, each as JSON led by `,`:
    /// the instructions that came before it, then the messages after it.
    pub(crate) fn more(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for m in self
            .instructions
            .iter()
            .chain(&self.messages[self.start + 1..])
        {
            out.push(b',');
            out.extend_from_slice(m.to_string().as_bytes());
        }
        out
    }
}

/// A request's `model` (required) and `stream` (a boolean, false when
/// absent), taken out of it.
pub(super) fn model_and_stream(obj: &mut Map<String, Value>) -> Result<(String, bool), ApiError> {
    let model = match obj.remove("model") {
        Some(Value::String(m)) if !m.is_empty() => m,
        Some(_) => return Err(bad("`model` must be a non-empty string")),
        None => return Err(bad("`model`: field required")),
    };
    let stream = match obj.remove("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err(bad("`stream` must be a boolean")),
    };
    Ok((model, stream))
}

/// Refuses what the provider refuses of a request's parameters, before
/// anything is written: Anthropic's `max_tokens` missing, OpenAI's `n`
/// other than 1 (the log keeps one answer), `tool_choice` without `tools`.
fn check_params(
    provider: Provider,
    obj: &Map<String, Value>,
    tools: Option<&Value>,
) -> Result<(), ApiError> {
    if provider == Provider::Anthropic && obj.get("max_tokens").is_none_or(Value::is_null) {
        return Err(bad("`max_tokens`: field required"));
    }
    if provider == Provider::OpenAi
        && let Some(n) = obj.get("n").filter(|n| !n.is_null())
        && n.as_u64() != Some(1)
    {
        return Err(bad(
            "`n` must be 1: this endpoint keeps one answer of each turn in its log",
        ));
    }
    // The tools' skeleton: an array of as many as the tools.
    let no_tools = tools.is_none_or(|t| t.is_null() || t.as_array().is_some_and(Vec::is_empty));
    if no_tools && obj.get("tool_choice").is_some_and(|c| !c.is_null()) {
        return Err(bad("`tool_choice` may only be given with `tools`"));
    }
    Ok(())
}

/// Refuses a tool result whose call id no tool call of the assistant
/// message before it made (the provider refuses it; checked before the
/// result is written).
fn check_results(provider: Provider, messages: &[Value]) -> Result<(), ApiError> {
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if role(m) == "assistant" {
            open = calls_of(provider, m)
                .into_iter()
                .map(|(id, _, _)| id)
                .collect();
            continue;
        }
        for (id, _, _) in results_of(provider, m) {
            if !open.contains(&id) {
                return Err(bad(format!(
                    "messages[{i}]: a tool result for `{id}`, which no tool call of the \
                     assistant message before it made"
                )));
            }
        }
    }
    Ok(())
}

pub(crate) fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

fn check_message(provider: Provider, i: usize, m: &Value) -> Result<(), ApiError> {
    let Some(o) = m.as_object() else {
        return Err(bad(format!("messages[{i}] must be an object")));
    };
    let roles: &[&str] = match provider {
        Provider::Anthropic => &["user", "assistant", "system"],
        Provider::OpenAi => &["system", "developer", "user", "assistant", "tool"],
    };
    let r = o.get("role").and_then(Value::as_str).unwrap_or("");
    if !roles.contains(&r) {
        return Err(bad(format!(
            "messages[{i}].role must be one of {}",
            roles.join(", ")
        )));
    }
    let content = o.get("content");
    let ok = match (provider, r, content) {
        (Provider::Anthropic, _, Some(Value::String(_) | Value::Array(_))) => true,
        (Provider::OpenAi, "assistant", None | Some(Value::Null)) => {
            o.contains_key("tool_calls") || o.contains_key("refusal")
        }
        (Provider::OpenAi, _, Some(Value::String(_) | Value::Array(_))) => true,
        _ => false,
    };
    if !ok {
        return Err(bad(format!(
            "messages[{i}].content must be a string or an array of content blocks"
        )));
    }
    if provider == Provider::Anthropic && r == "system" {
        system_text(&o["content"], &format!("messages[{i}].content"))?;
    }
    if provider == Provider::OpenAi && r == "tool" && !o.contains_key("tool_call_id") {
        return Err(bad(format!(
            "messages[{i}]: a tool message needs `tool_call_id`"
        )));
    }
    Ok(())
}

/// Whether `m` is the user's own words (not tool results).
fn is_words(provider: Provider, m: &Value) -> bool {
    role(m) == "user" && (provider == Provider::OpenAi || blocks_of(m, "tool_result").is_empty())
}

/// Whether `m` carries the results of the client's tools.
fn is_results(provider: Provider, m: &Value) -> bool {
    match provider {
        Provider::Anthropic => role(m) == "user" && !blocks_of(m, "tool_result").is_empty(),
        Provider::OpenAi => role(m) == "tool",
    }
}

/// The content blocks of type `kind` in `m`.
pub(crate) fn blocks_of<'a>(m: &'a Value, kind: &str) -> Vec<&'a Value> {
    m.get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
        .collect()
}

/// The text of a content value: a string, or its text blocks (or parts)
/// a blank line apart; `None` when it holds anything else.
pub(crate) fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Null => Some(String::new()),
        Value::Array(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(b.get("text")?.as_str()?.to_string()),
                    _ => return None,
                }
            }
            Some(texts.join("\n\n"))
        }
        _ => None,
    }
}

pub(super) fn system_text(v: &Value, name: &str) -> Result<String, ApiError> {
    content_text(v).ok_or_else(|| {
        bad(format!(
            "`{name}` must be a string or text blocks: this endpoint keeps a log of text"
        ))
    })
}

fn user_text(provider: Provider, m: &Value, i: usize) -> Result<String, ApiError> {
    let _ = provider;
    content_text(&m["content"]).ok_or_else(|| {
        bad(format!(
            "messages[{i}]: the user's message may hold only text (this endpoint keeps a log \
             of text; describe an image or a document in words)"
        ))
    })
}

/// The tool calls an assistant message makes: `(id, name, input)`.
pub(crate) fn calls_of(provider: Provider, m: &Value) -> Vec<(String, String, Value)> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    match provider {
        Provider::Anthropic => blocks_of(m, "tool_use")
            .into_iter()
            .map(|b| {
                (
                    s(b, "id"),
                    s(b, "name"),
                    b.get("input").cloned().unwrap_or_default(),
                )
            })
            .collect(),
        Provider::OpenAi => m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let f = &c["function"];
                let args = s(f, "arguments");
                let input = serde_json::from_str(&args).unwrap_or(Value::String(args));
                (s(c, "id"), s(f, "name"), input)
            })
            .collect(),
    }
}

/// The results a message carries: `(tool call id, content as text,
/// is_error)`.
pub(crate) fn results_of(provider: Provider, m: &Value) -> Vec<(String, String, bool)> {
    let text = |c: Option<&Value>| match c {
        None => String::new(),
        Some(c) => content_text(c).unwrap_or_else(|| c.to_string()),
    };
    match provider {
        Provider::Anthropic if role(m) == "user" => blocks_of(m, "tool_result")
            .into_iter()
            .map(|b| {
                (
                    b.get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    text(b.get("content")),
                    b.get("is_error") == Some(&Value::Bool(true)),
                )
            })
            .collect(),
        Provider::OpenAi if role(m) == "tool" => vec![(
            m.get("tool_call_id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            text(m.get("content")),
            false,
        )],
        _ => Vec::new(),
    }
}

/// The text an assistant message says, as its answer is recorded: its
/// text blocks a blank line apart, then its refusal (a blank line after
/// any text).
pub(crate) fn said(m: &Value) -> String {
    let mut t = content_text(&m["content"]).unwrap_or_else(|| {
        // Text blocks only, whatever else it holds (tool use, thinking).
        blocks_of(m, "text")
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n\n")
    });
    if let Some(r) = m.get("refusal").and_then(Value::as_str)
        && !r.is_empty()
    {
        if !t.is_empty() {
            t.push_str("\n\n");
        }
        t.push_str(r);
    }
    t
}

/// The conversation alone (the turn's words, the messages and the
/// instructions among them), for the hash of a request the server keys by
/// its conversation: a client's retry may change its parameters.
pub(crate) fn conversation(asked: &Asked) -> String {
    // A tuple is written as the array `[text, messages, instructions]`,
    // without a copy of the messages' trees; a Responses request that
    // continues a response names it too (the same words after another
    // response are another turn).
    let (t, m, i) = (&asked.text, &asked.messages, &asked.instructions);
    match &asked.previous_response_id {
        None => serde_json::to_string(&(t, m, i)),
        Some(p) => serde_json::to_string(&(t, m, i, p)),
    }
    .expect("a JSON value is written")
}

/// The parameters as a map, for a hash of the request: written from the
/// request as read, without a copy of its trees (a member kept as text is
/// written as a string of it).
pub(crate) fn canonical(asked: &Asked) -> String {
    use serde::ser::{SerializeMap, Serializer};
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::new(&mut out);
    let written = (|| {
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("model", &asked.model)?;
        m.serialize_entry("system", &asked.system)?;
        for (k, v) in &asked.params {
            match v {
                Param::Tree(v) => m.serialize_entry(k, v)?,
                Param::Raw(t) => m.serialize_entry(k, t.raw.get())?,
            }
        }
        m.serialize_entry("messages", &asked.messages)?;
        if !asked.instructions.is_empty() {
            m.serialize_entry("instructions", &asked.instructions)?;
        }
        m.end()
    })();
    written.expect("JSON values are written");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}
